#!/bin/bash
# rnic-verbs' hardware backend (cargo feature `hw`) against Linux soft-RoCE (rdma_rxe).
#
# Builds the hw binaries on the host (they load libibverbs at run time, so the host needs no
# RDMA), boots ONE Debian guest from ../shared/rxe-lab (qemu TCG in the network namespace
# "rxelab", rxe0 on eth0 10.77.0.11, rdma-core 44), copies the binaries into the lab's
# shared run folder (the guest sees it as /lab: same Debian, so host-built binaries run
# there), runs each case in the guest and prints PASS/FAIL per case:
#   hw-loopback      examples/hw_loopback rxe0: RC SEND / SEND_WITH_IMM woken by a completion
#                    channel / RDMA WRITE / RDMA READ / FETCH_ADD / CMP_SWAP / SRQ + limit
#                    event / remote access error / UC WRITE_WITH_IMM / UD, two QPs on rxe0,
#                    every byte checked (rxe loops back inside the guest)
#   hw-no-device     the same binary asked for mlx5_0: exit 2 naming the device and rxe0
#   (more cases: see HOOKS below)
#
# Takes the lab lock itself (flock -x /tmp/rxe-lab.lock: one lab user at a time), needs root
# (netns, tap, qemu), ~1-2 min; not part of `cargo test`. From the repository root:
#     sudo scripts/rxe-hw.sh [OUTDIR]              (default: target/rxe-hw)
# Env: HW_PROFILE (cargo profile, default dev; release is faster in the guest but slower to
#      build), RXELAB (default ../shared/rxe-lab), KEEP_GUEST=1 leaves the guest running
#      (reuse it with REUSE_RUN=dir; stop it with: touch DIR/q/a.halt).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${RXE_LAB_LOCKED:-}" ]; then
  exec env RXE_LAB_LOCKED=1 flock -x /tmp/rxe-lab.lock "$0" "$@"
fi
LABDIR=$(realpath "${RXELAB:-$ROOT/../shared/rxe-lab}")
OUT=$(realpath -m "${1:-$ROOT/target/rxe-hw}")
PROFILE=${HW_PROFILE:-dev}
GUEST_IP=10.77.0.11
[ "$(id -u)" = 0 ] || { echo "rxe-hw: needs root (network namespace, tap device, qemu)" >&2; exit 2; }
# shellcheck source=/dev/null
source "$LABDIR/lablib.sh"

# --- build on the host (the CPU lock is shared with the other builds on this machine)
echo "== building the hw binaries (profile $PROFILE)"
case $PROFILE in dev) PDIR=debug ;; *) PDIR=$PROFILE ;; esac
(cd "$ROOT" && flock -s /tmp/rnic-cpu.lock cargo build -q --profile "$PROFILE" -p rnic-verbs --features hw --example hw_loopback) \
  || { echo "rxe-hw: build failed" >&2; exit 2; }
BINS=("$ROOT/target/$PDIR/examples/hw_loopback")
# HOOK (tools): once `rnic` takes hardware devices (`-d rxe0`), build it here too and add it:
#   (cd "$ROOT" && flock -s /tmp/rnic-cpu.lock cargo build -q --profile "$PROFILE" -p rnic-tools --features hw)
#   BINS+=("$ROOT/target/$PDIR/rnic")

if [ ! -e "$LAB/rootfs.img" ]; then
  echo "== building the rxe lab (first run only)"
  "$LABDIR/install-host-deps.sh" && "$LABDIR/build-rootfs.sh" || { echo "rxe-hw: lab build failed" >&2; exit 2; }
fi
mkdir -p "$OUT"
"$LABDIR/netns-setup.sh" 1 > /dev/null

# --- the guest: reuse a running one (REUSE_RUN) or boot one
if [ -n "${REUSE_RUN:-}" ] && [ -e "$REUSE_RUN/q/a.ready" ] && [ ! -e "$REUSE_RUN/q/a.halt" ]; then
  RUN=$REUSE_RUN; OWN_GUEST=0
  echo "== reusing the guest of $RUN"
else
  RUN=$OUT/run; rm -rf "$RUN"; mkdir -p "$RUN/q"; OWN_GUEST=1
  echo "== booting the rxe guest (TCG; 20-60 s)"
  boot_agent a "$GUEST_IP/24" tap0 "$RUN"
  wait_ready a "$RUN" 300 || { echo "rxe-hw: guest did not come up; see $RUN/a.console.log" >&2; exit 2; }
fi
stop_guest() {
  if [ "$OWN_GUEST" = 1 ] && [ "${KEEP_GUEST:-0}" != 1 ]; then
    halt_guest a "$RUN"; wait "$QPID_a" 2>/dev/null
  elif [ "$OWN_GUEST" = 1 ]; then
    echo "guest left running: REUSE_RUN=$RUN $0 ...; stop it with: touch $RUN/q/a.halt"
  fi
}
trap stop_guest EXIT
mkdir -p "$RUN/bin"
cp "${BINS[@]}" "$RUN/bin/"

SEQ=0
STAMP=$(date +%H%M%S)
declare -a SUMMARY
# case NAME EXPECT_RC 'command in the guest (cwd /lab, binaries in /lab/bin)' [GREP...]
#   PASS when the command exits EXPECT_RC and its output contains every GREP pattern.
run_case() {
  local name=$1 expect=$2 cmd=$3; shift 3
  SEQ=$((SEQ + 1))
  local id; id=$(printf '%02d' $SEQ)-$name
  local log=$OUT/$id.txt why=""
  echo "== $id: $cmd"
  job a "$RUN" "$id-$STAMP" "timeout 300 $cmd; echo \"exit \$?\""
  wait_job a "$RUN" "$id-$STAMP" 330 > "$log"
  local rc; rc=$(sed -n 's/^exit //p' "$log" | tail -1)
  [ "${rc:-none}" = "$expect" ] || why+=" exit ${rc:-none} (want $expect);"
  for pat in "$@"; do grep -q -- "$pat" "$log" || why+=" no '$pat' in the output;"; done
  grep -E '^(PASS|FAIL|device|  GID|counters|hw_loopback|libibverbs)' "$log" | sed 's/^/   /'
  local verdict=PASS; [ -z "$why" ] || verdict=FAIL
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-28s %s' "$verdict" "$id" "$why")")
}

run_case hw-loopback 0 "/lab/bin/hw_loopback rxe0" "all checks passed on rxe0"
run_case hw-no-device 2 "/lab/bin/hw_loopback mlx5_0" 'no RDMA device named "mlx5_0" (libibverbs lists: rxe0)'

# HOOKS (tools, once `rnic` is built with --features hw above): cases in the same form, e.g.
#   run_case devinfo 0 "/lab/bin/rnic devinfo" "rxe0"
#   run_case pingpong-rc-loop 0 "/lab/bin/rnic pingpong -d rxe0 -g 1 -c & sleep 2; /lab/bin/rnic pingpong -d rxe0 -g 1 -c $GUEST_IP" "iters in"
# Cases against the emulator on the namespace side (rnic pingpong --ip 10.77.0.1) follow
# scripts/rxe-interop.sh's run_case (rnic in `ip netns exec rxelab`, the guest as the peer).
if [ -n "${EXTRA_CASES:-}" ] && [ -f "$EXTRA_CASES" ]; then
  # shellcheck source=/dev/null
  source "$EXTRA_CASES"
fi

echo
echo "== rxe hw summary (logs in $OUT)"
fails=0
for l in "${SUMMARY[@]}"; do echo "$l"; case $l in FAIL*) fails=$((fails + 1)) ;; esac; done
exit $((fails > 0))
