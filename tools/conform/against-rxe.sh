#!/bin/bash
# rnic conform against Linux rxe in the shared rxe lab (../shared/rxe-lab, its README):
# boots guest a (Debian's kernel 6.1, rdma_rxe as rxe0 on 10.77.0.11) in agent mode, runs
# the lab responder there, runs the tester from the lab's namespace (UDP 4791 of br0's
# 10.77.0.1, which no RoCE device owns), captures br0 meanwhile, and halts the guest.
# Usage (as root, from the repository root, after `cargo build --release -p rnic-tools`):
#   tools/conform/against-rxe.sh OUT [rnic conform options...]
# OUT gets report.txt (the tester's output), br0.pcap (every UDP packet on the bridge),
# captures/<scenario>.pcap (each divergence, as the tester recorded it) and the guest's logs.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT [rnic conform options...]" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd); shift
LABDIR=${LABDIR:-$ROOT/../shared/rxe-lab}
RNIC=${RNIC:-$ROOT/target/release/rnic}
[ -x "$RNIC" ] || { echo "$RNIC: build it first (cargo build --release -p rnic-tools)" >&2; exit 2; }
cd "$LABDIR" || exit 2
source ./lablib.sh
# The guest sees RUN as /lab; it is a run directory of the lab's own (next to its image).
RUN=${RUN:-/var/tmp/rxe-lab/run/conform}
rm -rf "$RUN"; mkdir -p "$RUN/q"
# Same Debian as the host, so the responder built here runs in the guest.
cc -O2 -o "$RUN/responder" "$ROOT/tools/conform/responder.c" -lrdmacm -libverbs || exit 2
./netns-setup.sh 1 > /dev/null 2>&1
boot_agent a 10.77.0.11/24 tap0 "$RUN"
trap 'halt_guest a "$RUN"; wait "$QPID_a" 2>/dev/null' EXIT
wait_ready a "$RUN" 300 || exit 1
job a "$RUN" resp '/lab/responder 7471 > /lab/responder.log 2>&1'
for _ in $(seq 1 50); do grep -q listening "$RUN/responder.log" 2>/dev/null && break; sleep 0.2; done
grep -q listening "$RUN/responder.log" 2>/dev/null || { echo "the responder did not start:" >&2; cat "$RUN/responder.log" >&2; exit 1; }
CAPFILTER=udp capture_start "$OUT/br0.pcap"
rm -rf "$OUT/captures"
ip netns exec rxelab timeout 600 "$RNIC" conform 10.77.0.11 --local 10.77.0.1 --port 7471 \
  --captures "$OUT/captures" "$@" > "$OUT/report.txt" 2>&1
rc=$?
capture_stop "$OUT/br0.pcap"
rm -f "$OUT/br0.pcap.tcpdump.log"
cp "$RUN/responder.log" "$OUT/responder.log"
cat "$OUT/report.txt"
echo "rnic conform rc=$rc; report, captures and br0.pcap in $OUT"
exit $rc
