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
# and, once rnic-tools has a `hw` cargo feature (issue 15's integration; detected from
# tools/Cargo.toml, or forced with HW_TOOLS=1), the `rnic` binary built with it:
#   devinfo          `rnic devinfo` in the guest lists rxe0
#   pp-{rc,ud}-hw-{server,client}
#                    `rnic pingpong -d rxe0 -g 1` (hardware backend, guest 10.77.0.11) against
#                    `rnic pingpong --ip 10.77.0.1` (the emulator, namespace side), both roles,
#                    RC with -c and --ud, 1000 iterations
#   pp-rc-hw-vs-ibv-{server,client}
#                    the same in guest a against stock `ibv_rc_pingpong -d rxe0 -g 1 -c` in a
#                    second guest (b, 10.77.0.12), both roles
#   perf-{write-bw,send-lat}-hw
#                    `rnic perf ... -d rxe0` in guest a against `rnic perf --server` on the
#                    emulator (no UDP baseline: the client says so)
#   perf-mtu-above-link
#                    `rnic perf -m 4096 -d rxe0` on the 1500-byte link: refused naming rxe0's
#                    active MTU (rxe would accept it and loop on send errors)
#   write-read-rxe0, send-recv-rxe0, devinfo-v
#                    the README's examples on rxe0 by name; `rnic devinfo -d rxe0 -v`
#
# Takes the lab lock itself (flock -x /tmp/rxe-lab.lock: one lab user at a time), needs root
# (netns, tap, qemu), ~1-2 min; not part of `cargo test`. From the repository root:
#     sudo scripts/rxe-hw.sh [OUTDIR]              (default: target/rxe-hw)
# Env: HW_PROFILE (cargo profile, default dev; release is faster in the guest but slower to
#      build), HW_TOOLS (1: build and run the tools cases, 0: skip them; default: when
#      tools/Cargo.toml has a hw feature), GUEST_DEV_ARGS (the guest side's device options,
#      default "-d rxe0 -g 1"), EMU_GID (the emulator's -g, default 1: rxe's table shape,
#      index 1 = ::ffff:IPv4), ITERS (default 1000), GUEST_A_KARGS (extra kernel arguments of
#      guest a: a dry run of the tools cases before the hw feature exists runs the emulator
#      in guest a, which needs UDP 4791 free of rxe: HW_TOOLS=1 GUEST_A_KARGS=rxelab_norxe=1
#      GUEST_DEV_ARGS="--ip 10.77.0.11 -g 0" EMU_GID=0), RXELAB (default ../shared/rxe-lab), KEEP_GUEST=1 leaves the guest running
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
GUEST_B_IP=10.77.0.12
HOST_IP=10.77.0.1
ITERS=${ITERS:-1000}
GUEST_DEV_ARGS=${GUEST_DEV_ARGS:--d rxe0 -g 1}
EMU_GID=${EMU_GID:-1}
[ "$(id -u)" = 0 ] || { echo "rxe-hw: needs root (network namespace, tap device, qemu)" >&2; exit 2; }
# shellcheck source=/dev/null
source "$LABDIR/lablib.sh"

# --- build on the host (the CPU lock is shared with the other builds on this machine)
echo "== building the hw binaries (profile $PROFILE)"
case $PROFILE in dev) PDIR=debug ;; *) PDIR=$PROFILE ;; esac
(cd "$ROOT" && flock -s /tmp/rnic-cpu.lock cargo build -q --profile "$PROFILE" -p rnic-verbs --features hw --example hw_loopback --example write_read --example send_recv) \
  || { echo "rxe-hw: build failed" >&2; exit 2; }
BINS=("$ROOT/target/$PDIR/examples/hw_loopback" "$ROOT/target/$PDIR/examples/write_read" "$ROOT/target/$PDIR/examples/send_recv")
# The tools: `rnic` built with the hw backend (the same binary is the emulator on the
# namespace side).
if [ -z "${HW_TOOLS:-}" ]; then
  if grep -q '^hw *=' "$ROOT/tools/Cargo.toml"; then HW_TOOLS=1; else HW_TOOLS=0; fi
fi
RNIC=$ROOT/target/$PDIR/rnic
if [ "$HW_TOOLS" = 1 ]; then
  tfeat=""; grep -q '^hw *=' "$ROOT/tools/Cargo.toml" && tfeat="--features hw"
  # shellcheck disable=SC2086
  (cd "$ROOT" && flock -s /tmp/rnic-cpu.lock cargo build -q --profile "$PROFILE" -p rnic-tools $tfeat) \
    || { echo "rxe-hw: building rnic failed" >&2; exit 2; }
  BINS+=("$RNIC")
fi

if [ ! -e "$LAB/rootfs.img" ]; then
  echo "== building the rxe lab (first run only)"
  "$LABDIR/install-host-deps.sh" && "$LABDIR/build-rootfs.sh" || { echo "rxe-hw: lab build failed" >&2; exit 2; }
fi
mkdir -p "$OUT"
"$LABDIR/netns-setup.sh" 2 > /dev/null

# --- the guest: reuse a running one (REUSE_RUN) or boot one
if [ -n "${REUSE_RUN:-}" ] && [ -e "$REUSE_RUN/q/a.ready" ] && [ ! -e "$REUSE_RUN/q/a.halt" ]; then
  RUN=$REUSE_RUN; OWN_GUEST=0
  echo "== reusing the guest of $RUN"
else
  RUN=$OUT/run; rm -rf "$RUN"; mkdir -p "$RUN/q"; OWN_GUEST=1
  echo "== booting the rxe guest (TCG; 20-60 s)"
  EXTRA_KARGS="${GUEST_A_KARGS:-}" boot_agent a "$GUEST_IP/24" tap0 "$RUN"
  # The stock ibv_rc_pingpong peer for the tools cases.
  [ "$HW_TOOLS" = 1 ] && boot_agent b "$GUEST_B_IP/24" tap1 "$RUN"
  wait_ready a "$RUN" 300 || { echo "rxe-hw: guest did not come up; see $RUN/a.console.log" >&2; exit 2; }
fi
HAVE_B=0
if [ "$HW_TOOLS" = 1 ] && [ -n "${QPID_b:-}" ]; then
  wait_ready b "$RUN" 300 && HAVE_B=1 || echo "rxe-hw: guest b did not come up; see $RUN/b.console.log" >&2
fi
stop_guest() {
  if [ "$OWN_GUEST" = 1 ] && [ "${KEEP_GUEST:-0}" != 1 ]; then
    [ -n "${QPID_b:-}" ] && halt_guest b "$RUN"
    halt_guest a "$RUN"; wait "$QPID_a" 2>/dev/null; [ -n "${QPID_b:-}" ] && wait "$QPID_b" 2>/dev/null
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

ns() { ip netns exec "$NS" "$@"; }
# pp_case NAME ROLE SIZE [ud]: rnic pingpong on the hardware backend in guest a against the
# emulator on the namespace side. ROLE: server (the guest listens) or client.
pp_case() {
  local name=$1 role=$2 size=$3 ud=${4:-} why=""
  SEQ=$((SEQ + 1))
  local id; id=$(printf '%02d' $SEQ)-$name
  local port=$((18600 + SEQ)) flags="" job=$id-$STAMP
  if [ -n "$ud" ]; then flags=--ud; else flags=-c; fi
  local common="-s $size -n $ITERS -p $port -m 1024 $flags"
  local emu=("$RNIC" pingpong --ip "$HOST_IP" -g "$EMU_GID" $common)
  local emu_out=$OUT/$id.emulator.txt guest_out=$OUT/$id.guest.txt rrc grc
  echo "== $id: guest rnic pingpong $GUEST_DEV_ARGS $common ($role) <-> emulator at $HOST_IP"
  if [ "$role" = server ]; then
    job a "$RUN" "$job" "timeout 150 /lab/bin/rnic pingpong $GUEST_DEV_ARGS $common & P=\$!
for i in \$(seq 1 300); do ss -ltnH 'sport = :$port' | grep -q . && break; sleep 0.1; done
: > /lab/q/a.$job.listening
wait \$P; echo \"exit \$?\""
    for _ in $(seq 1 300); do [ -e "$RUN/q/a.$job.listening" ] && break; sleep 0.2; done
    ns timeout 150 "${emu[@]}" "$GUEST_IP" > "$emu_out" 2>&1; rrc=$?
    wait_job a "$RUN" "$job" 180 > "$guest_out"
  else
    ns timeout 150 "${emu[@]}" > "$emu_out" 2>&1 &
    local epid=$!
    for _ in $(seq 1 100); do ns ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
    job a "$RUN" "$job" "timeout 150 /lab/bin/rnic pingpong $GUEST_DEV_ARGS $common $HOST_IP; echo \"exit \$?\""
    wait_job a "$RUN" "$job" 180 > "$guest_out"
    wait $epid; rrc=$?
  fi
  grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  [ "$rrc" = 0 ] || why+=" emulator exit $rrc;"
  [ "${grc:-x}" = 0 ] || why+=" guest rnic exit ${grc:-none};"
  grep -q "$ITERS iters in" "$emu_out" || why+=" emulator did not finish;"
  grep -q "$ITERS iters in" "$guest_out" || why+=" guest rnic did not finish;"
  echo "   emulator: $(grep -E 'address|iters in|rnic pingpong|rror' "$emu_out" | tr '\n' '|')"
  echo "   guest:    $(grep -E 'address|iters in|rnic pingpong|rror|exit' "$guest_out" | tr '\n' '|')"
  local verdict=PASS; [ -z "$why" ] || verdict=FAIL
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-28s %s' "$verdict" "$id" "$why")")
}

# ibv_case NAME ROLE: rnic pingpong (hardware backend, guest a) against stock
# ibv_rc_pingpong -c in guest b. ROLE: server (rnic listens) or client.
ibv_case() {
  local name=$1 role=$2 why=""
  SEQ=$((SEQ + 1))
  local id; id=$(printf '%02d' $SEQ)-$name
  local port=$((18600 + SEQ)) job=$id-$STAMP
  local common="-s 4096 -n $ITERS -p $port -m 1024 -c"
  local srv_g srv_cmd cli_g cli_cmd
  if [ "$role" = server ]; then
    srv_g=a; srv_cmd="/lab/bin/rnic pingpong $GUEST_DEV_ARGS $common"
    cli_g=b; cli_cmd="ibv_rc_pingpong -d rxe0 -g 1 $common $GUEST_IP"
  else
    srv_g=b; srv_cmd="ibv_rc_pingpong -d rxe0 -g 1 $common"
    cli_g=a; cli_cmd="/lab/bin/rnic pingpong $GUEST_DEV_ARGS $common $GUEST_B_IP"
  fi
  echo "== $id: $srv_g: $srv_cmd | $cli_g: $cli_cmd"
  job $srv_g "$RUN" "$job" "timeout 150 $srv_cmd & P=\$!
for i in \$(seq 1 300); do ss -ltnH 'sport = :$port' | grep -q . && break; sleep 0.1; done
: > /lab/q/$srv_g.$job.listening
wait \$P; echo \"exit \$?\""
  for _ in $(seq 1 300); do [ -e "$RUN/q/$srv_g.$job.listening" ] && break; sleep 0.2; done
  job $cli_g "$RUN" "$job" "timeout 150 $cli_cmd; echo \"exit \$?\""
  wait_job $cli_g "$RUN" "$job" 180 > "$OUT/$id.$cli_g.txt"
  wait_job $srv_g "$RUN" "$job" 60 > "$OUT/$id.$srv_g.txt"
  for g in a b; do
    local rc; rc=$(sed -n 's/^exit //p' "$OUT/$id.$g.txt" | tail -1)
    [ "${rc:-x}" = 0 ] || why+=" guest $g exit ${rc:-none};"
    grep -q "$ITERS iters in" "$OUT/$id.$g.txt" || why+=" guest $g did not finish;"
    echo "   $g: $(grep -E 'address|iters in|rror|exit|invalid' "$OUT/$id.$g.txt" | tr '\n' '|')"
  done
  local verdict=PASS; [ -z "$why" ] || verdict=FAIL
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-28s %s' "$verdict" "$id" "$why")")
}

# perf_case NAME TEST ARGS: `rnic perf TEST -d rxe0` in guest a (the client, on the hardware
# backend) against `rnic perf --server` on the emulator at the namespace side. A hardware
# client runs no UDP baseline and says so.
perf_case() {
  local name=$1 test=$2 args=$3 why=""
  SEQ=$((SEQ + 1))
  local id; id=$(printf '%02d' $SEQ)-$name
  local port=$((18600 + SEQ)) job=$id-$STAMP
  local srv_out=$OUT/$id.emulator.txt guest_out=$OUT/$id.guest.txt
  echo "== $id: guest rnic perf $test $args -d rxe0 <-> emulator rnic perf --server at $HOST_IP"
  ns timeout 150 "$RNIC" perf "$test" --server --ip "$HOST_IP" -p "$port" > "$srv_out" 2>&1 &
  local spid=$!
  for _ in $(seq 1 100); do ns ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
  job a "$RUN" "$job" "timeout 120 /lab/bin/rnic perf $test $args -D 2 -d rxe0 --ip $GUEST_IP -p $port $HOST_IP; echo \"exit \$?\""
  wait_job a "$RUN" "$job" 150 > "$guest_out"
  wait $spid; local src=$?
  local grc; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  [ "${grc:-x}" = 0 ] || why+=" guest rnic perf exit ${grc:-none};"
  [ "$src" = 0 ] || why+=" emulator server exit $src;"
  grep -q "Baseline        : none: rxe0 is a hardware device" "$guest_out" || why+=" no baseline note;"
  grep -qiE "^ *[0-9]+ +[0-9]+" "$guest_out" || why+=" no result row;"
  grep -E "Device|Baseline|^ *[0-9]+ +[0-9]+" "$guest_out" | sed 's/^/   /'
  local verdict=PASS; [ -z "$why" ] || verdict=FAIL
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-28s %s' "$verdict" "$id" "$why")")
}

if [ "$HW_TOOLS" = 1 ]; then
  run_case devinfo 0 "/lab/bin/rnic devinfo" "rxe0"
  pp_case pp-rc-hw-server server 4096
  pp_case pp-rc-hw-client client 4096
  pp_case pp-ud-hw-server server 512 ud
  pp_case pp-ud-hw-client client 512 ud
  if [ "$HAVE_B" = 1 ]; then
    ibv_case pp-rc-hw-vs-ibv-server server
    ibv_case pp-rc-hw-vs-ibv-client client
  else
    SUMMARY+=("FAIL pp-rc-hw-vs-ibv            guest b did not come up")
  fi
  perf_case perf-write-bw-hw write_bw "-s 65536"
  perf_case perf-send-lat-hw send_lat "-s 64"
  # A path MTU above rxe0's active MTU (1024 on the guest's 1500-byte link) is refused when
  # the QP connects: rxe itself would accept it and retry each packet's send error forever.
  ns timeout 60 "$RNIC" perf write_bw --server --ip "$HOST_IP" -p 18690 > "$OUT/perf-mtu-server.txt" 2>&1 &
  MTU_SRV=$!
  for _ in $(seq 1 100); do ns ss -ltnH "sport = :18690" | grep -q . && break; sleep 0.1; done
  run_case perf-mtu-above-link 1 "/lab/bin/rnic perf write_bw -m 4096 -D 2 -d rxe0 --ip $GUEST_IP -p 18690 $HOST_IP" \
    "path MTU 4096 is above rxe0's active MTU 1024"
  wait $MTU_SRV
  # The README's examples, on rxe0 by name (the one API's hardware backend).
  run_case write-read-rxe0 0 "/lab/bin/write_read rxe0 rxe0" "READ returned the same 10000 bytes"
  run_case send-recv-rxe0 0 "/lab/bin/send_recv rxe0 rxe0" "B received"
  run_case devinfo-v 0 "/lab/bin/rnic devinfo -d rxe0 -v" "backend:" "hardware (libibverbs)"
else
  echo "== tools cases skipped: tools/Cargo.toml has no hw feature yet (issue 15's integration adds it; HW_TOOLS=1 forces)"
fi

if [ -n "${EXTRA_CASES:-}" ] && [ -f "$EXTRA_CASES" ]; then
  # shellcheck source=/dev/null
  source "$EXTRA_CASES"
fi

echo
echo "== rxe hw summary (logs in $OUT)"
fails=0
for l in "${SUMMARY[@]}"; do echo "$l"; case $l in FAIL*) fails=$((fails + 1)) ;; esac; done
exit $((fails > 0))
