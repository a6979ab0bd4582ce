#!/bin/bash
# Speed where users measure it (issue 33's table): stock perftest (Debian's, unmodified,
# under `rnic exec`, server on rnic0 and client on rnic1, two processes) next to `rnic
# perf`'s same test and the plain-UDP baseline `rnic perf` measures beside itself, plus
# rnic perf's QP scaling and 64-byte message rate, in interleaved rounds. Per test it
# prints the median of each figure with its spread, and the medians of the per-round
# quotients stock/rnic-perf and rnic-perf/UDP.
#
#   scripts/bench.sh [ROUNDS] [TESTS...]    default 5 rounds; tests: write send read atomic
#                                           (latency), events (ib_send_lat -e next to rnic
#                                           perf send_lat -e: both sleep on a completion
#                                           channel), bw (stock ib_write_bw -s 65536 next to
#                                           rnic perf write_bw), q1 q16 q256 (rnic perf write_bw
#                                           with that many QPs; q16x2: -q 16 with every device
#                                           on two shards, RNIC_SHARDS=2), rate (rnic perf send_bw -s 64
#                                           -t 1024, messages/s), ucx2 (UCX's ucx_perftest
#                                           tag_lat -s 8 over rc_verbs with two threads per
#                                           process polling one worker, next to one thread
#                                           each, and two over UCX's TCP transport: columns
#                                           stock, rnic perf and baseline; average latency);
#                                           default: all of them
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
[ ${#tests[@]} -gt 0 ] || tests=(write send read atomic events bw q1 q16 q16x2 q256 rate ucx2)
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
port=19320

# Stock ib_<t>_lat, default options but the size (8 bytes) and 5000 iterations; prints
# the typical latency in microseconds (perftest's t_typical), or "nan".
stock() { # t [flag]
    port=$((port + 1))
    local size=(-s 8)
    [ "$1" = atomic ] && size=()
    timeout 60 "$rnic" exec -- "ib_$1_lat" -d rnic0 "${size[@]}" -n 5000 -p $port ${2:-} >"$out/srv" 2>&1 &
    local srv=$!
    sleep 0.3
    timeout 60 "$rnic" exec -- "ib_$1_lat" -d rnic1 "${size[@]}" -n 5000 -p $port ${2:-} 127.0.0.1 >"$out/cli" 2>&1 || true
    wait $srv 2>/dev/null || true
    # The row after perftest's header: #bytes #iterations t_min t_max t_typical ...
    awk '/t_typical/ {h=1; next} h && NF >= 5 && $1 ~ /^[0-9]+$/ {print $5; exit}' "$out/cli" | grep . || echo nan
}

# rnic perf's <t>_lat (one process, two devices), 8 bytes: "typical baseline" in us.
own() { # t [flag]
    local size=(-s 8)
    [ "$1" = atomic ] && size=()
    timeout 120 "$rnic" perf "$1_lat" "${size[@]}" ${2:-} --rounds 1 --json 2>/dev/null | tail -1 |
        python3 -c 'import json,sys
try:
    d = json.loads(sys.stdin.read()); print(d["lat_typical_us"], d.get("baseline", "nan"))
except Exception:
    print("nan nan")'
}

# Stock ib_write_bw, 64 KiB messages for 2 s: perftest's BW average (MB/sec, its unit).
stock_bw() {
    port=$((port + 1))
    timeout 60 "$rnic" exec -- ib_write_bw -d rnic0 -s 65536 -D 2 -p $port >"$out/srv" 2>&1 &
    local srv=$!
    sleep 0.3
    timeout 60 "$rnic" exec -- ib_write_bw -d rnic1 -s 65536 -D 2 -p $port 127.0.0.1 >"$out/cli" 2>&1 || true
    wait $srv 2>/dev/null || true
    # The row: #bytes #iterations BW_peak BW_average MsgRate
    awk '/BW average/ {h=1; next} h && NF >= 4 && $1 ~ /^[0-9]+$/ {print $4; exit}' "$out/cli" | grep . || echo nan
}

# UCX's ucx_perftest tag_lat, 8 bytes, with this many threads per process over these
# transports (rc_verbs on rnic0 and rnic1 under rnic exec; tcp on loopback): the average
# latency in us (its "Final" row), or "nan".
ucx() { # threads tls
    command -v ucx_perftest >/dev/null || { echo nan; return; }
    port=$((port + 1))
    local srv_dev=() cli_dev=()
    if [ "$2" != tcp ]; then srv_dev=(env UCX_NET_DEVICES=rnic0:1); cli_dev=(env UCX_NET_DEVICES=rnic1:1); fi
    UCX_TLS=$2 timeout 60 "$rnic" exec -- "${srv_dev[@]}" ucx_perftest -t tag_lat -s 8 -T "$1" -n 20000 -p $port \
        >"$out/srv" 2>&1 &
    local srv=$!
    sleep 1.5
    UCX_TLS=$2 timeout 60 "$rnic" exec -- "${cli_dev[@]}" ucx_perftest -t tag_lat -s 8 -T "$1" -n 20000 -p $port \
        127.0.0.1 >"$out/cli" 2>&1 || true
    wait $srv 2>/dev/null || true
    # One thread: Final: iterations typical average overall ...; several: Final:
    # iterations average ...
    awk '/^Final:/ {print (NF >= 8 ? $4 : $3); exit}' "$out/cli" | grep . || echo nan
}

# rnic perf with its same-run UDP baseline, one round: "<figure> <baseline figure>" from
# the JSON fields named (bandwidth in MB/s, or the message rate in M/s).
perf() { # field baseline_field args...
    local f=$1 bf=$2
    shift 2
    timeout 120 "$rnic" perf "$@" --rounds 1 --json 2>/dev/null | tail -1 |
        python3 -c 'import json,sys
try:
    d = json.loads(sys.stdin.read()); print(d[sys.argv[1]], d.get(sys.argv[2], "nan"))
except Exception:
    print("nan nan")' "$f" "$bf"
}

# One row per test and round: "round test figure own-figure baseline": for the latency
# tests stock and rnic perf typical latencies (us) and the UDP ping-pong; for bw stock
# ib_write_bw and rnic perf write_bw (MB/s) and the UDP stream; for qN and rate rnic perf
# alone (the figure repeated) and its baseline.
row() { # t
    case "$1" in
    bw)
        local s
        s=$(stock_bw)
        read -r o b <<<"$(perf bw_avg_mbps baseline write_bw -s 65536 -D 2)"
        echo "$s $o $b" ;;
    q1 | q16 | q256)
        read -r o b <<<"$(perf bw_avg_mbps baseline write_bw -s 65536 -D 2 -q "${1#q}")"
        echo "$o $o $b" ;;
    q16x2)
        read -r o b <<<"$(RNIC_SHARDS=2 perf bw_avg_mbps baseline write_bw -s 65536 -D 2 -q 16)"
        echo "$o $o $b" ;;
    rate)
        read -r o b <<<"$(perf msg_rate_mpps baseline_msg_rate_mpps send_bw -s 64 -t 1024 -D 2)"
        echo "$o $o $b" ;;
    ucx2)
        echo "$(ucx 2 rc_verbs,ud_verbs) $(ucx 1 rc_verbs,ud_verbs) $(ucx 2 tcp)" ;;
    events)
        local s
        s=$(stock send -e)
        read -r o b <<<"$(own send -e)"
        echo "$s $o $b" ;;
    *)
        local s
        s=$(stock "$1")
        read -r o b <<<"$(own "$1")"
        echo "$s $o $b" ;;
    esac
}

for r in $(seq "$rounds"); do
    for t in "${tests[@]}"; do
        echo "$r $t $(row "$t")" | tee -a "$out/rows" >&2
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
units = {"bw": "MB/s", "q1": "MB/s", "q16": "MB/s", "q16x2": "MB/s", "q256": "MB/s", "rate": "M msg/s"}
print(f"{'test':8} {'unit':>8} {'stock perftest':>24} {'rnic perf':>24} {'UDP baseline':>24} {'stock/rnic perf':>24} {'rnic perf/UDP':>24}")
for t, v in rows.items():
    s = med([x[0] for x in v]); o = med([x[1] for x in v]); b = med([x[2] for x in v])
    q1 = med([x[0] / x[1] for x in v]); q2 = med([x[1] / x[2] for x in v])
    own_only = ("q1", "q16", "q16x2", "q256", "rate")
    stock = f(s) if t not in own_only else "-"
    ratio = f(q1) if t not in own_only else "-"
    print(f"{t:8} {units.get(t, 'us'):>8} {stock:>24} {f(o):>24} {f(b):>24} {ratio:>24} {f(q2):>24}")
print(f"medians [min-max] of {len(next(iter(rows.values())))} interleaved rounds; latencies are typical (median) one-way;")
print("rnic perf/UDP: below 1 is slower than the baseline for bandwidth and rate, above 1 for latency")
if "ucx2" in rows:
    print("ucx2: stock = UCX tag_lat on rnic, two threads per process; rnic perf = the same, one thread;")
    print("      baseline = two threads over UCX's TCP transport (average latencies)")
EOF
