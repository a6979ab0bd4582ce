#!/bin/bash
# The cost of sharing a device between processes, as `rnic perf` ratios measured in the
# same run: each test runs in interleaved rounds in three ways, and each run reports its
# ratio to the UDP baseline it measured beside itself:
#   one      both sides in one process, two devices (127.0.0.1 and 127.0.0.2): the path
#            rnic had before devices were shared
#   split    two processes, two devices (rnic0 and rnic1): what being two processes costs
#   shared   two processes, one device (both at 127.0.0.1: one socket group, the kernel
#            steering each datagram to its QP's process)
# and the summary gives, per test, the median ratio of each way with its spread, and
# shared/one and shared/split (medians of the per-round quotients, with their spread).
#
#   scripts/share-cost.sh [ROUNDS] [TESTS...]     default 5 rounds; tests as below
#
# Needs target/release/rnic (cargo build --release -p rnic-tools) and python3.
set -eu
cd "$(dirname "$0")/.."
rnic=target/release/rnic
[ -x "$rnic" ] || { echo "share-cost: build $rnic first: cargo build --release -p rnic-tools" >&2; exit 1; }
rounds=${1:-5}
shift || true
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=("write_bw -s 65536" "read_bw -s 65536" "send_bw -s 64 -t 128" "write_lat -s 8" "send_lat -s 8")
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
port=18520

# One run of `rnic perf` with the server in another process; prints its JSON.
two() { # server-ip client-ip test...
    local sip=$1 cip=$2
    shift 2
    port=$((port + 1))
    "$rnic" perf "${1}" --server --ip "$sip" --port $port >/dev/null 2>&1 &
    local srv=$!
    local i
    for i in $(seq 50); do
        ss -ltn | grep -q ":$port " && break
        sleep 0.1
    done
    timeout 120 "$rnic" perf "$@" "$sip" --ip "$cip" --port $port --rounds 1 --json 2>/dev/null || echo '{}'
    wait $srv 2>/dev/null || true
}

for r in $(seq "$rounds"); do
    for t in "${tests[@]}"; do
        # shellcheck disable=SC2086
        set -- $t
        name=$(echo "$t" | tr ' ' '~')
        echo "round $r: $t" >&2
        # The order of the three ways turns each round, so none always runs first.
        for way in $(case $((r % 3)) in 0) echo one split shared ;; 1) echo split shared one ;; *) echo shared one split ;; esac); do
            case $way in
                one) timeout 120 "$rnic" perf "$@" --rounds 1 --json 2>/dev/null || echo '{}' ;;
                split) two 127.0.0.1 127.0.0.2 "$@" ;;
                shared) two 127.0.0.1 127.0.0.1 "$@" ;;
            esac | tail -1 | sed "s/^/$r $way $name /" >>"$out/runs"
        done
    done
done

python3 - "$out/runs" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, way, name, js = line.split(" ", 3)
    try:
        ratio = json.loads(js).get("ratio")
    except ValueError:
        ratio = None
    runs.setdefault(name, {}).setdefault(int(r), {})[way] = ratio
def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "no result"
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"
print(f"{'test':24} {'one process':>22} {'two processes':>22} {'shared device':>22} {'shared/one':>22} {'shared/split':>22}")
for name, by_round in runs.items():
    col = lambda w: [by_round[r].get(w) for r in sorted(by_round)]
    q = lambda a, b: [x / y for x, y in zip(col(a), col(b)) if x and y]
    print(f"{name.replace('~', ' '):24} {spread(col('one')):>22} {spread(col('split')):>22} {spread(col('shared')):>22} {spread(q('shared', 'one')):>22} {spread(q('shared', 'split')):>22}")
EOF
