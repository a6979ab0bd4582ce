#!/bin/bash
# Latency where users measure it: stock perftest (Debian's, unmodified, under `rnic exec`,
# server on rnic0 and client on rnic1, two processes) next to `rnic perf`'s same test and
# the plain-UDP ping-pong baseline `rnic perf` measures beside itself, in interleaved
# rounds. Per test it prints the median typical latency of each with its spread, and the
# medians of the per-round quotients stock/rnic-perf and stock/UDP.
#
#   scripts/bench.sh [ROUNDS] [TESTS...]    default 5 rounds; tests: write send read atomic
#   RNIC_SPIN_US=... scripts/bench.sh       the environment reaches every run
#   RNIC=other/target/release/rnic scripts/bench.sh   another build (its own libraries,
#                                           which `rnic exec` finds beside its target folder)
#
# Needs target/release/rnic (cargo build --release -p rnic-tools), the libraries
# (scripts/build-ibverbs.sh), perftest and python3. Run nothing else meanwhile: with two
# cores, a build beside a benchmark distorts both.
set -eu
cd "$(dirname "$0")/.."
rnic=${RNIC:-target/release/rnic}
[ -x "$rnic" ] || { echo "bench: build $rnic first: cargo build --release -p rnic-tools" >&2; exit 1; }
libs=$(dirname "$(dirname "$rnic")")/rnic-ibverbs
[ -e "$libs/libibverbs.so.1" ] || { echo "bench: build the libraries first: scripts/build-ibverbs.sh ($libs)" >&2; exit 1; }
command -v ib_write_lat >/dev/null || { echo "bench: perftest is not installed (apt-get install perftest)" >&2; exit 1; }
rounds=${1:-5}
shift || true
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(write send read atomic)
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
port=19320

# Stock ib_<t>_lat, default options but the size (8 bytes) and 5000 iterations; prints
# the typical latency in microseconds (perftest's t_typical), or "nan".
stock() { # t
    port=$((port + 1))
    local size=(-s 8)
    [ "$1" = atomic ] && size=()
    timeout 60 "$rnic" exec -- "ib_$1_lat" -d rnic0 "${size[@]}" -n 5000 -p $port >"$out/srv" 2>&1 &
    local srv=$!
    sleep 0.3
    timeout 60 "$rnic" exec -- "ib_$1_lat" -d rnic1 "${size[@]}" -n 5000 -p $port 127.0.0.1 >"$out/cli" 2>&1 || true
    wait $srv 2>/dev/null || true
    # The row after perftest's header: #bytes #iterations t_min t_max t_typical ...
    awk '/t_typical/ {h=1; next} h && NF >= 5 && $1 ~ /^[0-9]+$/ {print $5; exit}' "$out/cli" | grep . || echo nan
}

# rnic perf's <t>_lat (one process, two devices), 8 bytes: "typical baseline" in us.
own() { # t
    local size=(-s 8)
    [ "$1" = atomic ] && size=()
    timeout 120 "$rnic" perf "$1_lat" "${size[@]}" --rounds 1 --json 2>/dev/null | tail -1 |
        python3 -c 'import json,sys
try:
    d = json.loads(sys.stdin.read()); print(d["lat_typical_us"], d.get("baseline", "nan"))
except Exception:
    print("nan nan")'
}

for r in $(seq "$rounds"); do
    for t in "${tests[@]}"; do
        s=$(stock "$t")
        read -r o b <<<"$(own "$t")"
        echo "$r $t $s $o $b" | tee -a "$out/rows" >&2
    done
done

python3 - "$out/rows" <<'EOF'
import sys, statistics as st, math
rows = {}
for line in open(sys.argv[1]):
    r, t, s, o, b = line.split()
    rows.setdefault(t, []).append((float(s), float(o), float(b)))
def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return (st.median(xs), min(xs), max(xs)) if xs else (math.nan, math.nan, math.nan)
def f(m):
    return f"{m[0]:8.2f} [{m[1]:.2f}-{m[2]:.2f}]"
print(f"{'test':8} {'stock ib_*_lat us':>24} {'rnic perf us':>24} {'UDP baseline us':>24} {'stock/rnic perf':>24} {'stock/UDP':>24}")
for t, v in rows.items():
    s = med([x[0] for x in v]); o = med([x[1] for x in v]); b = med([x[2] for x in v])
    q1 = med([x[0] / x[1] for x in v]); q2 = med([x[0] / x[2] for x in v])
    print(f"{t:8} {f(s):>24} {f(o):>24} {f(b):>24} {f(q1):>24} {f(q2):>24}")
print(f"medians [min-max] of {len(next(iter(rows.values())))} interleaved rounds; latencies are typical (median) one-way")
EOF
