#!/bin/bash
# rnic against Linux soft-RoCE (rdma_rxe) running rdma-core's own ibv_rc_pingpong, and
# `rnic rping` against rdmacm-utils' rping (connections made by the IB CM on QP1), and
# `rnic udaddy` against rdmacm-utils' udaddy (a UD QP resolved by SIDR on QP1).
#
# Boots ONE Debian guest with rxe (../shared/rxe-lab, qemu TCG inside the network namespace
# "rxelab"), runs `rnic pingpong` on the namespace side at 10.77.0.1 against
# `ibv_rc_pingpong -d rxe0 -g 1` in the guest (10.77.0.11), in both roles, for sizes 64 and
# 4096 at path MTU 1024 (the guest's eth MTU is 1500, rxe's active_mtu 1024), with -c on both
# sides; captures br0 with tcpdump for every case, checks the capture with
# ../shared/vectors/check_pcap.sh and `rnic decode`, and prints PASS/FAIL per case.
# UD: `rnic pingpong --ud` against ibv_ud_pingpong (Q_Key 0x11111111), 512-byte datagrams,
# both roles.
# Raw (CASES=raw): the same RC and UD pingpongs with rnic on the raw-Ethernet transport (a
# veth on br0, rnic at 10.77.0.50, an address the namespace does not own: rnic answers
# ARP), each also checking that rnic solved no IPv4 ID (full ICRC) and that the guest's
# `ip neigh` holds rnic's MAC; then the guest rebooted at eth MTU 9000 for path MTU 4096.
# Shared (CASES=shared): two rnic processes on one device (10.77.0.1) at the same time, each
# against its own ibv_rc_pingpong / ibv_ud_pingpong in the guest.
# Stock rdma_cm (CASES=stockcm): rdmacm-utils' rping and udaddy, unmodified, on rnic's
# librdmacm.so.1 through `rnic exec`, against the same programs on rxe0, in both roles.
# Multicast (CASES=mcast): rdmacm-utils' mckey on rnic's librdmacm.so.1 against mckey on rxe0,
# rnic receiving the guest's datagrams to one group and sending to another.
# Memory windows (CASES=mw): scripts/lab/mw_peer.c on both sides: a type 2 window bound by
# one, written through and invalidated (SEND with Invalidate) by the other, in both roles.
# Stock (CASES=stock): rdma-core's own ibv_rc_pingpong and perftest's ib_write_bw, unmodified,
# on the namespace side through rnic's libibverbs.so.1, against the same programs on rxe0.
#
# Slow (guest boot ~20-60 s, then a few seconds per case), needs root (netns, tap, qemu), so
# it is not part of `cargo test`. Usage, from the repository root:
#     sudo scripts/rxe-interop.sh [OUTDIR]          (default: target/rxe-interop)
# Env: ITERS (default 1000, as rc_pingpong), RNIC (binary; default: build target/release/rnic),
#      RXELAB (default ../shared/rxe-lab), VECTORS (default ../shared/vectors),
#      KEEP_GUEST=1 leaves the guest running and prints how to reuse it (REUSE_RUN=dir).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LABDIR=$(realpath "${RXELAB:-$ROOT/../shared/rxe-lab}")
VECTORS=$(realpath "${VECTORS:-$ROOT/../shared/vectors}")
OUT=$(realpath -m "${1:-$ROOT/target/rxe-interop}")
ITERS=${ITERS:-1000}
MTU=1024
HOST_IP=10.77.0.1
GUEST_IP=10.77.0.11
[ "$(id -u)" = 0 ] || { echo "rxe-interop: needs root (network namespace, tap device, qemu)" >&2; exit 2; }
# shellcheck source=/dev/null
source "$LABDIR/lablib.sh"

if [ -z "${RNIC:-}" ]; then
  (cd "$ROOT" && cargo build --release -q -p rnic-tools) || { echo "rxe-interop: build failed" >&2; exit 2; }
  RNIC=$ROOT/target/release/rnic
fi
# rnic's libibverbs.so.1 and librdmacm.so.1, for the stock programs (CASES=stock, stockcm).
IBVERBS=$ROOT/target/rnic-ibverbs
# What runs rnic's side of the rping and udaddy cases: rnic's own tools, or (stockcm)
# rdmacm-utils' programs on rnic's librdmacm.so.1 through `rnic exec`.
CMPROG=$RNIC
if [ "${CASES:-all}" = all ] || [ "${CASES}" = stockcm ] || [ "${CASES}" = mcast ] || [ "${CASES}" = mw ]; then
  "$ROOT/scripts/build-ibverbs.sh" > /dev/null || { echo "rxe-interop: scripts/build-ibverbs.sh failed" >&2; exit 2; }
  command -v rping > /dev/null && command -v udaddy > /dev/null \
    || { echo "rxe-interop: CASES=stockcm needs rdmacm-utils on the host (apt-get install rdmacm-utils)" >&2; exit 2; }
fi
if [ "${CASES:-all}" = all ] || [ "${CASES}" = stock ]; then
  "$ROOT/scripts/build-ibverbs.sh" > /dev/null || { echo "rxe-interop: scripts/build-ibverbs.sh failed" >&2; exit 2; }
  command -v ibv_rc_pingpong > /dev/null && command -v ib_write_bw > /dev/null \
    || { echo "rxe-interop: CASES=stock needs ibverbs-utils and perftest on the host (apt-get install ibverbs-utils perftest)" >&2; exit 2; }
fi
if [ ! -e "$LAB/rootfs.img" ]; then
  echo "== building the rxe lab (first run only)"
  "$LABDIR/install-host-deps.sh" && "$LABDIR/build-rootfs.sh" || { echo "rxe-interop: lab build failed" >&2; exit 2; }
fi
mkdir -p "$OUT"
"$LABDIR/netns-setup.sh" 1 > /dev/null
# Locally sent UDP leaves br0 with CHECKSUM_PARTIAL (checksum offload), so tcpdump on br0
# would record unfinished UDP checksums for rnic's packets (the guest gets them right).
# Without tx offload on br0 the kernel finishes the checksum before the capture point.
# (A fresh machine may lack ethtool: install it, as the stock cases' packages are.)
command -v ethtool > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q ethtool > /dev/null 2>&1
command -v ethtool > /dev/null \
  || { echo "rxe-interop: needs ethtool (apt-get install ethtool): without it br0's captures show rnic's UDP checksums unfinished" >&2; exit 2; }
ip netns exec "$NS" ethtool -K br0 tx off > /dev/null

# The guest: reuse a running one (REUSE_RUN) or boot one.
if [ -n "${REUSE_RUN:-}" ] && [ -e "$REUSE_RUN/q/a.ready" ] && [ ! -e "$REUSE_RUN/q/a.halt" ]; then
  RUN=$REUSE_RUN; OWN_GUEST=0
  echo "== reusing the guest of $RUN"
else
  RUN=$OUT/run; rm -rf "$RUN"; mkdir -p "$RUN/q"; OWN_GUEST=1
  echo "== booting the rxe guest (TCG; 20-60 s)"
  boot_agent a "$GUEST_IP/24" tap0 "$RUN"
  wait_ready a "$RUN" 300 || { echo "rxe-interop: guest did not come up; see $RUN/a.console.log" >&2; exit 2; }
fi
stop_guest() {
  if [ "$OWN_GUEST" = 1 ] && [ "${KEEP_GUEST:-0}" != 1 ]; then
    halt_guest a "$RUN"; wait "$QPID_a" 2>/dev/null
  elif [ "$OWN_GUEST" = 1 ]; then
    echo "guest left running: REUSE_RUN=$RUN $0 ...; stop it with: touch $RUN/q/a.halt"
  fi
}
trap stop_guest EXIT

ns() { ip netns exec "$NS" "$@"; }
# Capture RoCEv2 only: check_pcap.sh also fails on Wireshark's expert notes about the
# out-of-band TCP connection (a D-SACK under load), which say nothing about RoCE.
export CAPFILTER=${CAPFILTER:-udp port 4791}
# The guest's rxe counters, one "name value" per line.
COUNTERS='for c in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "rxe0 ${c##*/} $(cat $c)"; done'
SEQ=0
STAMP=$(date +%H%M%S)
declare -a SUMMARY

# case NAME ROLE SIZE [ud]   ROLE: server (rnic listens) or client (rnic connects)
run_case() {
  local name=$1 role=$2 size=$3 ud=${4:-} id pcap rnic_out guest_out rrc grc verdict why=""
  SEQ=$((SEQ + 1)); id=$(printf '%02d' $SEQ)-$name
  local job=$id-$STAMP   # guest job ids must be new even when a guest is reused
  pcap=$OUT/$id.pcap; rnic_out=$OUT/$id.rnic.txt; guest_out=$OUT/$id.guest.txt
  local tool=ibv_rc_pingpong rflags="" port=$((18515 + SEQ))
  if [ -n "$ud" ]; then tool=ibv_ud_pingpong; rflags=--ud; fi
  local common="-s $size -n $ITERS -p $port"
  # RNIC_DEV: how rnic's device is opened (default: the UDP transport at the namespace's
  # own address; the raw cases set --netdev and an address nobody else owns).
  # GIDX: the GID index both sides use (1: ::ffff:IPv4; 0: link-local, over IPv6).
  local gidx=${GIDX:-1}
  local rnic_cmd=("$RNIC" pingpong ${RNIC_DEV:---ip $HOST_IP} -g $gidx -m $MTU $common $rflags --counters)
  # ibv_ud_pingpong has neither -m (UD uses the port MTU) nor -c.
  local gchk="-c -m $MTU"
  if [ -n "$ud" ]; then gchk=""; else rnic_cmd+=(-c); fi
  echo "== $id: rnic $role, $tool -s $size -m $MTU -n $ITERS"
  capture_start "$pcap"
  if [ "$role" = server ]; then
    ns timeout 150 "${rnic_cmd[@]}" > "$rnic_out" 2>&1 &
    local rpid=$!
    for _ in $(seq 1 100); do ns ss -ltnH "sport = :$port" | grep -q . && break; kill -0 $rpid 2>/dev/null || break; sleep 0.1; done
    job a "$RUN" "$job" "timeout 120 $tool -d rxe0 -g $gidx $gchk $common $HOST_IP; echo \"exit \$?\"; $COUNTERS"
    wait_job a "$RUN" "$job" 150 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
    wait $rpid; rrc=$?
  else
    job a "$RUN" "$job" "timeout 120 $tool -d rxe0 -g $gidx $gchk $common & P=\$!
for i in \$(seq 1 300); do ss -ltnH 'sport = :$port' | grep -q . && break; sleep 0.1; done
: > /lab/q/a.$job.listening
wait \$P; echo \"exit \$?\"; $COUNTERS"
    for _ in $(seq 1 300); do [ -e "$RUN/q/a.$job.listening" ] && break; sleep 0.2; done
    ns timeout 150 "${rnic_cmd[@]}" "$GUEST_IP" > "$rnic_out" 2>&1; rrc=$?
    wait_job a "$RUN" "$job" 150 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  fi
  capture_stop "$pcap" > /dev/null
  local chk_txt=$OUT/$id.check.txt
  "$VECTORS/check_pcap.sh" "$pcap" > "$chk_txt" 2>&1; local crc=$?
  "$RNIC" decode "$pcap" > "$OUT/$id.decode.txt" 2>&1; local drc=$?
  local npk; npk=$(grep -c 'RC_\|UD_' "$OUT/$id.decode.txt")
  [ "$rrc" = 0 ] || why+=" rnic exit $rrc;"
  [ "${grc:-x}" = 0 ] || why+=" $tool exit ${grc:-none};"
  grep -q "$ITERS iters in" "$rnic_out" || why+=" rnic did not finish;"
  grep -q "$ITERS iters in" "$guest_out" || why+=" $tool did not finish;"
  grep -q 'invalid data' "$guest_out" && why+=" $tool: invalid data;"
  [ "$crc" = 0 ] || why+=" check_pcap.sh failed;"
  if [ -n "${RAW_MAC:-}" ]; then
    # The raw transport checks the full ICRC: nothing solved; and the guest's kernel
    # learned rnic's MAC by ARP.
    grep -q 'icrc_ipv4_id_solved' "$rnic_out" && why+=" rnic solved IPv4 IDs (icrc_ipv4_id_solved > 0);"
    # (With GID 0 the guest's kernel found rnic's link-local address by IPv6 neighbour
    # discovery, which rnic answered.)
    local nip=$RAW_IP
    [ "$gidx" = 0 ] && nip=$RAW_LL
    # Evidence that the guest's kernel resolved rnic's MAC: its RoCE frames to that MAC in
    # the capture, or its neighbour table (which may already say FAILED: once rnic has
    # exited, the kernel's re-probe of the entry goes unanswered).
    local nj=$job-neigh
    job a "$RUN" "$nj" "ip neigh show $nip"
    wait_job a "$RUN" "$nj" 30 > "$OUT/$id.neigh.txt"
    local to_rnic; to_rnic=$(tshark -r "$pcap" -Y "eth.dst == $RAW_MAC" -T fields -e frame.number 2>/dev/null | wc -l)
    if [ "$to_rnic" = 0 ] && ! grep -qi "$RAW_MAC" "$OUT/$id.neigh.txt"; then
      why+=" the guest never sent to rnic's MAC $RAW_MAC ($nip);"
    fi
    echo "   neigh: $to_rnic frames from the guest to $RAW_MAC; $(grep "$nip" "$OUT/$id.neigh.txt" | head -1)"
  fi
  [ "$drc" = 0 ] || why+=" rnic decode found bad packets;"
  if [ -z "$why" ]; then verdict=PASS; else verdict=FAIL; fi
  echo "   rnic:  $(grep -E 'address|iters in|bytes in|counters|rnic pingpong' "$rnic_out" | tr '\n' '|' )"
  echo "   guest: $(grep -E 'address|iters in|bytes in|invalid|Failed|Couldn|exit' "$guest_out" | tr '\n' '|')"
  echo "   pcap:  $npk RoCE packets, check_pcap rc=$crc, decode rc=$drc"
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-34s %s' "$verdict" "$id" "$why")")
}

# rping_case NAME ROLE SIZE: `rnic rping` against rdmacm-utils' rping in the guest, the
# connection made by the CM (REQ/REP/RTU on QP1, DREQ/DREP at the end), 10 pings of
# RDMA READ + WRITE with the data validated (-V) on whichever side is the client.
# Env: RPING_HOLD=S (rnic's server holds the request S seconds), RPING_FAULTS=SPEC (rnic's
# RNIC_FAULTS), MRA_FROM=IP (the capture must hold an MRA from IP).
rping_case() {
  local name=$1 role=$2 size=$3 id pcap rnic_out guest_out rrc grc verdict why=""
  SEQ=$((SEQ + 1)); id=$(printf '%02d' $SEQ)-$name
  local job=$id-$STAMP port=$((7174 + SEQ))
  pcap=$OUT/$id.pcap; rnic_out=$OUT/$id.rnic.txt; guest_out=$OUT/$id.guest.txt
  echo "== $id: rnic rping $role, rping -S $size -C 10"
  capture_start "$pcap"
  if [ "$role" = server ]; then
    ns timeout 120 env ${RPING_FAULTS:+RNIC_FAULTS=$RPING_FAULTS} $CMPROG rping -s -a "$HOST_IP" -p $port -v -S "$size" \
      ${RPING_HOLD:+--hold $RPING_HOLD} > "$rnic_out" 2>&1 &
    local rpid=$!
    sleep 1
    job a "$RUN" "$job" "timeout 100 rping -c -a $HOST_IP -p $port -C 10 -v -V -S $size; echo \"exit \$?\""
    wait_job a "$RUN" "$job" 120 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
    wait $rpid; rrc=$?
  else
    job a "$RUN" "$job" "timeout 100 rping -s -a $GUEST_IP -p $port -C 10 -v -S $size & P=\$!
sleep 3; : > /lab/q/a.$job.listening
wait \$P; echo \"exit \$?\""
    for _ in $(seq 1 300); do [ -e "$RUN/q/a.$job.listening" ] && break; sleep 0.2; done
    ns timeout 100 env ${RPING_FAULTS:+RNIC_FAULTS=$RPING_FAULTS} $CMPROG rping -c -a "$GUEST_IP" -I "$HOST_IP" -p $port \
      -C 10 -v -V -S "$size" > "$rnic_out" 2>&1; rrc=$?
    wait_job a "$RUN" "$job" 120 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  fi
  capture_stop "$pcap" > /dev/null
  "$VECTORS/check_pcap.sh" "$pcap" > "$OUT/$id.check.txt" 2>&1; local crc=$?
  "$RNIC" decode "$pcap" > "$OUT/$id.decode.txt" 2>&1; local drc=$?
  local pings; pings=$(grep -c 'ping data: rdma-ping-' "$rnic_out")
  local gpings; gpings=$(grep -c 'ping data: rdma-ping-' "$guest_out")
  [ "$rrc" = 0 ] || why+=" rnic exit $rrc;"
  [ "${grc:-x}" = 0 ] || why+=" rping exit ${grc:-none};"
  [ "$pings" = 10 ] || why+=" rnic printed $pings pings;"
  [ "$gpings" = 10 ] || why+=" rping printed $gpings pings;"
  [ "$crc" = 0 ] || why+=" check_pcap.sh failed;"
  if [ -n "${MRA_FROM:-}" ]; then
    local mras; mras=$(tshark -r "$pcap" -Y "infiniband.mad.attributeid == 0x0011 && ip.src == $MRA_FROM" 2>/dev/null | wc -l)
    [ "$mras" -ge 1 ] || why+=" no MRA from $MRA_FROM;"
    echo "   cm:    $(tshark -r "$pcap" -Y 'infiniband.bth.destqp == 1' -T fields -e frame.time_relative -e ip.src -e _ws.col.Info 2>/dev/null | awk '{printf "%.3f %s %s %s | ", $1, $2, $4, $5}')"
  fi
  if [ -n "${RAW_MAC:-}" ]; then
    # The raw transport checks the full ICRC: nothing solved; and the guest's kernel
    # learned rnic's MAC by ARP.
    grep -q 'icrc_ipv4_id_solved' "$rnic_out" && why+=" rnic solved IPv4 IDs (icrc_ipv4_id_solved > 0);"
    local nj=$job-neigh
    job a "$RUN" "$nj" "ip neigh show $RAW_IP"
    wait_job a "$RUN" "$nj" 30 > "$OUT/$id.neigh.txt"
    grep -qi "$RAW_MAC" "$OUT/$id.neigh.txt" || why+=" the guest's ip neigh has no $RAW_MAC for $RAW_IP;"
    echo "   neigh: $(grep "$RAW_IP" "$OUT/$id.neigh.txt" | head -1)"
  fi
  [ "$drc" = 0 ] || why+=" rnic decode found bad packets;"
  if [ -z "$why" ]; then verdict=PASS; else verdict=FAIL; fi
  echo "   rnic:  $(head -2 "$rnic_out" | cut -c1-90 | tr '\n' '|') ($pings pings)"
  echo "   guest: $(grep -E 'ping data|exit|error|fail' "$guest_out" | head -2 | cut -c1-90 | tr '\n' '|') ($gpings pings)"
  echo "   pcap:  $(grep -c 'RC_\|UD_' "$OUT/$id.decode.txt") RoCE packets, check_pcap rc=$crc, decode rc=$drc"
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-34s %s' "$verdict" "$id" "$why")")
}


# udaddy_case NAME ROLE: `rnic udaddy` against rdmacm-utils' udaddy in the guest: the UD QP
# resolved through the CM by SIDR (SIDR_REQ/SIDR_REP on QP1; rdma_cm's UDP port space, port
# 7174, which udaddy cannot change; Q_Key 0x01234567), then 10 datagrams of 100 bytes each
# way, SENDs with immediate data. ROLE nobody: rnic's client asks the guest, where nobody
# listens (the guest's CM answers SIDR status 1 and rnic says "nobody listens"), then the
# guest's client asks rnic, where only another UDP port is listened on (rnic's CM answers
# status 1 and udaddy reports RDMA_CM_EVENT_UNREACHABLE, error 1).
udaddy_case() {
  local name=$1 role=$2 id pcap rnic_out guest_out rrc grc verdict why=""
  SEQ=$((SEQ + 1)); id=$(printf '%02d' $SEQ)-$name
  local job=$id-$STAMP
  pcap=$OUT/$id.pcap; rnic_out=$OUT/$id.rnic.txt; guest_out=$OUT/$id.guest.txt
  echo "== $id: rnic udaddy $role, udaddy"
  capture_start "$pcap"
  if [ "$role" = server ]; then
    ns timeout 60 $CMPROG udaddy -b "$HOST_IP" > "$rnic_out" 2>&1 &
    local rpid=$!
    sleep 1
    job a "$RUN" "$job" "timeout 50 udaddy -s $HOST_IP; echo \"exit \$?\""
    wait_job a "$RUN" "$job" 60 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
    wait $rpid; rrc=$?
  elif [ "$role" = client ]; then
    job a "$RUN" "$job" "timeout 50 udaddy & P=\$!
sleep 3; : > /lab/q/a.$job.listening
wait \$P; echo \"exit \$?\""
    for _ in $(seq 1 300); do [ -e "$RUN/q/a.$job.listening" ] && break; sleep 0.2; done
    ns timeout 50 $CMPROG udaddy -s "$GUEST_IP" -b "$HOST_IP" > "$rnic_out" 2>&1; rrc=$?
    wait_job a "$RUN" "$job" 60 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  else
    ns timeout 20 "$RNIC" udaddy -s "$GUEST_IP" -b "$HOST_IP" > "$rnic_out" 2>&1; rrc=$?
    ns timeout 60 "$RNIC" udaddy -b "$HOST_IP" --port 7999 > "$rnic_out.listener" 2>&1 &
    local lpid=$!
    sleep 1
    job a "$RUN" "$job" "timeout 50 udaddy -s $HOST_IP; echo \"exit \$?\""
    wait_job a "$RUN" "$job" 60 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
    kill "$lpid" 2> /dev/null; wait "$lpid" 2> /dev/null
  fi
  capture_stop "$pcap" > /dev/null
  "$VECTORS/check_pcap.sh" "$pcap" > "$OUT/$id.check.txt" 2>&1; local crc=$?
  "$RNIC" decode "$pcap" > "$OUT/$id.decode.txt" 2>&1; local drc=$?
  if [ "$role" = nobody ]; then
    [ "$rrc" = 1 ] || why+=" rnic exit $rrc (want 1);"
    grep -q "nobody listens on $GUEST_IP UDP port 7174" "$rnic_out" || why+=" rnic did not say nobody listens;"
    grep -q 'RDMA_CM_EVENT_UNREACHABLE, error: 1' "$guest_out" || why+=" udaddy did not report UNREACHABLE, error 1;"
  else
    [ "$rrc" = 0 ] || why+=" rnic exit $rrc;"
    [ "${grc:-x}" = 0 ] || why+=" udaddy exit ${grc:-none};"
    grep -q 'data transfers complete' "$rnic_out" || why+=" rnic did not finish;"
    grep -q 'data transfers complete' "$guest_out" || why+=" udaddy did not finish;"
  fi
  [ "$crc" = 0 ] || why+=" check_pcap.sh failed;"
  [ "$drc" = 0 ] || why+=" rnic decode found bad packets;"
  if [ -z "$why" ]; then verdict=PASS; else verdict=FAIL; fi
  echo "   rnic:  $(grep -vE '^udaddy: (starting|connecting)' "$rnic_out" | cut -c1-90 | tr '\n' '|')"
  echo "   guest: $(grep -E 'udaddy:|complete|status|exit' "$guest_out" | cut -c1-90 | tr '\n' '|')"
  echo "   pcap:  $(grep -c 'UD_' "$OUT/$id.decode.txt") RoCE packets, check_pcap rc=$crc, decode rc=$drc"
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-34s %s' "$verdict" "$id" "$why")")
}


# stock_case NAME ROLE TOOL ARGS: the same stock program (Debian's ibverbs-utils / perftest
# binary) on both sides: on the namespace side on rnic, through rnic's libibverbs.so.1
# (scripts/build-ibverbs.sh; device rnic0 at 10.77.0.1), in the guest on rxe0.
stock_case() {
  local name=$1 role=$2 tool=$3 args=$4 id rnic_out guest_out rrc grc verdict why="" gflag=-g
  SEQ=$((SEQ + 1)); id=$(printf '%02d' $SEQ)-$name
  local job=$id-$STAMP port=$((18515 + SEQ)) pcap=$OUT/$id.pcap
  rnic_out=$OUT/$id.rnic.txt; guest_out=$OUT/$id.guest.txt
  case $tool in ib_*) gflag=-x ;; esac
  local rnic_cmd=(env LD_LIBRARY_PATH="$IBVERBS" RNIC_DEVICES="rnic0=$HOST_IP" "$tool" -d rnic0 $gflag 1 -p $port $args)
  echo "== $id: rnic ($tool on rnic's libibverbs) $role, $tool $args"
  capture_start "$pcap"
  if [ "$role" = server ]; then
    ns timeout 150 "${rnic_cmd[@]}" > "$rnic_out" 2>&1 &
    local rpid=$!
    for _ in $(seq 1 100); do ns ss -ltnH "sport = :$port" | grep -q . && break; kill -0 $rpid 2>/dev/null || break; sleep 0.1; done
    job a "$RUN" "$job" "timeout 120 $tool -d rxe0 $gflag 1 -p $port $args $HOST_IP; echo \"exit \$?\""
    wait_job a "$RUN" "$job" 150 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
    wait $rpid; rrc=$?
  else
    job a "$RUN" "$job" "timeout 120 $tool -d rxe0 $gflag 1 -p $port $args & P=\$!
for i in \$(seq 1 300); do ss -ltnH 'sport = :$port' | grep -q . && break; sleep 0.1; done
: > /lab/q/a.$job.listening
wait \$P; echo \"exit \$?\""
    for _ in $(seq 1 300); do [ -e "$RUN/q/a.$job.listening" ] && break; sleep 0.2; done
    ns timeout 150 "${rnic_cmd[@]}" "$GUEST_IP" > "$rnic_out" 2>&1; rrc=$?
    wait_job a "$RUN" "$job" 150 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  fi
  capture_stop "$pcap" > /dev/null
  "$VECTORS/check_pcap.sh" "$pcap" > "$OUT/$id.check.txt" 2>&1; local crc=$?
  [ "$rrc" = 0 ] || why+=" rnic side exit $rrc;"
  [ "${grc:-x}" = 0 ] || why+=" guest $tool exit ${grc:-none};"
  [ "$crc" = 0 ] || why+=" check_pcap.sh failed;"
  if [ -n "${RAW_MAC:-}" ]; then
    # The raw transport checks the full ICRC: nothing solved; and the guest's kernel
    # learned rnic's MAC by ARP.
    grep -q 'icrc_ipv4_id_solved' "$rnic_out" && why+=" rnic solved IPv4 IDs (icrc_ipv4_id_solved > 0);"
    local nj=$job-neigh
    job a "$RUN" "$nj" "ip neigh show $RAW_IP"
    wait_job a "$RUN" "$nj" 30 > "$OUT/$id.neigh.txt"
    grep -qi "$RAW_MAC" "$OUT/$id.neigh.txt" || why+=" the guest's ip neigh has no $RAW_MAC for $RAW_IP;"
    echo "   neigh: $(grep "$RAW_IP" "$OUT/$id.neigh.txt" | head -1)"
  fi
  if [ -z "$why" ]; then verdict=PASS; else verdict=FAIL; fi
  echo "   rnic:  $(grep -E 'iters in|^ [0-9]+ +[0-9]+ ' "$rnic_out" | tr -s ' ' | tr '\n' '|' )"
  echo "   guest: $(grep -E 'iters in|^ [0-9]+ +[0-9]+ |Fail|Couldn|exit' "$guest_out" | tr -s ' ' | tr '\n' '|')"
  echo "   pcap:  check_pcap rc=$crc"
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-34s %s' "$verdict" "$id" "$why")")
}

# CASES=pingpong, CASES=rping, CASES=mra, CASES=udaddy, CASES=stock, CASES=stockcm, CASES=mcast or CASES=mw runs one family
# (default: all).
if [ "${CASES:-all}" = all ] || [ "${CASES}" = pingpong ]; then
run_case rc-rnic-server-64 server 64
run_case rc-rnic-server-4096 server 4096
run_case rc-rnic-client-64 client 64
run_case rc-rnic-client-4096 client 4096
run_case ud-rnic-server-512 server 512 ud
run_case ud-rnic-client-512 client 512 ud
fi
if [ "${CASES:-all}" = all ] || [ "${CASES}" = rping ]; then
rping_case rping-rnic-server-64 server 64
rping_case rping-rnic-server-4096 server 4096
rping_case rping-rnic-client-64 client 64
rping_case rping-rnic-client-4096 client 4096
fi
# MRA: rnic's server holds the request 8 s (Linux's REQ comes again after 6.1 s and gets
# rnic's MRA); rnic's client sends everything twice (its REQ's repeat finds Linux's
# connection waiting for rping's accept and draws Linux's MRA).
if [ "${CASES:-all}" = all ] || [ "${CASES}" = mra ]; then
RPING_HOLD=8 MRA_FROM=$HOST_IP rping_case rping-rnic-server-holds-8s server 64
RPING_FAULTS=dup=1 MRA_FROM=$GUEST_IP rping_case rping-rnic-client-sends-twice client 64
fi
if [ "${CASES:-all}" = all ] || [ "${CASES}" = udaddy ]; then
udaddy_case udaddy-rnic-server server
udaddy_case udaddy-rnic-client client
udaddy_case udaddy-nobody-listens nobody
fi
# raw_setup MTU: rnic's raw-Ethernet device on the lab's link: a veth (rnraw0) whose other
# end is on br0, at 10.77.0.50, an address the namespace does not own (rnic answers ARP).
RAW_IP=10.77.0.50
raw_setup() {
  ns ip link del rnraw0 2> /dev/null
  # br0 keeps its MAC. A bridge whose address was never set takes its ports' lowest, so a
  # veth with a random MAC below it changed 10.77.0.1's MAC while the raw cases ran, and
  # back when the veth went: the guest kept the old one, and the next case (the stock
  # rping server on 10.77.0.1) lost its first seven REQs, 44 s, until the entry went
  # stale (captures: REQs to 06:f3:36:e0:ca:18, then to br0's 62:d5:50:50:3c:d6).
  ns ip link set br0 address "$(ip -n "$NS" -br link show br0 | awk '{print $3}')"
  ns ip link add rnraw0 type veth peer name rnrawbr
  ns ip link set rnrawbr master br0 mtu "$1" up
  ns ip link set rnraw0 mtu "$1" up
  # Only rnic answers ARP on rnraw0: the namespace's kernel answers for any of its
  # addresses on any interface (arp_ignore 0), 10.77.0.1 included.
  ns sysctl -qw net.ipv4.conf.rnraw0.arp_ignore=8
  # (The namespace's MAC as ip shows it: sysfs here is the host's.)
  RAW_MAC=$(ip -n "$NS" -br link show rnraw0 | awk '{print $3}')
  # rnic's GID 0: the link-local address of that MAC (EUI-64: U/L bit flipped, ff:fe).
  local m; IFS=: read -ra m <<< "$RAW_MAC"
  RAW_LL=$(printf 'fe80::%x:%x:%x:%x' $(( (0x${m[0]} ^ 2) << 8 | 0x${m[1]} )) $(( 0x${m[2]} << 8 | 0xff )) \
    $(( 0xfe << 8 | 0x${m[3]} )) $(( 0x${m[4]} << 8 | 0x${m[5]} )))
}
# The raw cases: the same pingpongs with rnic on raw frames; path MTU 1024 at the lab's
# eth MTU 1500, then (a second boot, guests at eth MTU 9000) path MTU 4096.
if [ "${CASES:-all}" = all ] || [ "${CASES}" = raw ]; then
  raw_setup 1500
  RNIC_DEV="--ip $RAW_IP --netdev rnraw0"
  run_case raw-rc-rnic-server-64 server 64
  run_case raw-rc-rnic-server-4096 server 4096
  run_case raw-rc-rnic-client-64 client 64
  run_case raw-rc-rnic-client-4096 client 4096
  run_case raw-ud-rnic-server-512 server 512 ud
  run_case raw-ud-rnic-client-512 client 512 ud
  # GID 0 on both sides: link-local IPv6 (rxe's GID 0 is its eth0's fe80:: address); the
  # guest's kernel asks rnic by neighbour solicitation, rnic asks it the same way.
  GIDX=0 run_case raw-rc-gid0-rnic-server-4096 server 4096
  GIDX=0 run_case raw-rc-gid0-rnic-client-4096 client 4096
  GIDX=0 run_case raw-ud-gid0-rnic-client-512 client 512 ud
  if [ "$OWN_GUEST" = 1 ]; then
    echo "== rebooting the guest with eth0 MTU 9000 (rxe active_mtu 4096) for the jumbo cases"
    halt_guest a "$RUN"; wait "$QPID_a" 2> /dev/null
    MTU=9000 "$LABDIR/netns-setup.sh" 1 > /dev/null
    ns ip link set br0 mtu 9000
    ns ethtool -K br0 tx off > /dev/null
    raw_setup 9000
    RUN=$OUT/run-jumbo; rm -rf "$RUN"; mkdir -p "$RUN/q"
    EXTRA_KARGS=rxelab_mtu=9000 boot_agent a "$GUEST_IP/24" tap0 "$RUN"
    if wait_ready a "$RUN" 300; then
      MTU=4096
      run_case raw-rc-rnic-server-4096-mtu4096 server 4096
      run_case raw-rc-rnic-client-8192-mtu4096 client 8192
      MTU=1024
    else
      SUMMARY+=("FAIL raw-mtu4096                      the jumbo guest did not come up")
    fi
  fi
  unset RNIC_DEV RAW_MAC
  ns ip link del rnraw0 2> /dev/null
fi
if [ "${CASES:-all}" = all ] || [ "${CASES}" = stockcm ]; then
# rdmacm-utils' own rping and udaddy, unmodified, on rnic's librdmacm.so.1 (rnic exec)
# against the same programs on rxe0, in both roles.
CMPROG="env RNIC_DEVICES=rnic0=$HOST_IP $RNIC exec --lib $IBVERBS --no-device-files --"
rping_case stockcm-rping-rnic-server-64 server 64
rping_case stockcm-rping-rnic-client-4096 client 4096
udaddy_case stockcm-udaddy-rnic-server server
udaddy_case stockcm-udaddy-rnic-client client
CMPROG=$RNIC
fi
if [ "${CASES:-all}" = all ] || [ "${CASES}" = stock ]; then
# After the raw family (its veth leaves br0, the guest may have been rebooted) make sure
# the guest answers on br0 before a case waits on it: once, in a full run, the first
# stock case saw no frame at all on br0 for its 120 s (both sides timed out, nothing of
# rnic's involved).
for i in $(seq 1 60); do ns ping -c 1 -W 1 "$GUEST_IP" > /dev/null 2>&1 && break; sleep 0.5; done
ns ping -c 1 -W 1 "$GUEST_IP" > /dev/null 2>&1 || echo "rxe-interop: the guest at $GUEST_IP does not answer ping on br0" >&2
stock_case stock-rc_pingpong-rnic-server server ibv_rc_pingpong "-m $MTU -c -s 4096 -n 200"
stock_case stock-rc_pingpong-rnic-client client ibv_rc_pingpong "-m $MTU -c -s 4096 -n 200"
stock_case stock-write_bw-rnic-server server ib_write_bw "-m $MTU -s 65536 -n 200"
stock_case stock-write_bw-rnic-client client ib_write_bw "-m $MTU -s 65536 -n 200"
fi

# mckey_case NAME ROLE GROUP: UD multicast through rdma_cm, rdmacm-utils' mckey unmodified
# on both sides: on rnic's librdmacm.so.1 (rnic exec; rdma_join_multicast joins the IP group
# on br0, the device's interface) and on rxe0 (rxe attaches the group's MAC), 10 datagrams
# of 100 bytes to GROUP (DestQP 0xFFFFFF, Q_Key 0x01234567, IBA 10.5). ROLE receiver: rnic
# joins and receives, the guest sends; sender: the guest joins and receives, rnic sends.
mckey_case() {
  local name=$1 role=$2 group=$3 id pcap rnic_out guest_out rrc grc verdict why=""
  SEQ=$((SEQ + 1)); id=$(printf '%02d' $SEQ)-$name
  local job=$id-$STAMP
  pcap=$OUT/$id.pcap; rnic_out=$OUT/$id.rnic.txt; guest_out=$OUT/$id.guest.txt
  local prog="env RNIC_DEVICES=rnic0=$HOST_IP $RNIC exec --lib $IBVERBS --no-device-files --"
  echo "== $id: mckey on rnic ($role), mckey on rxe0, group $group"
  capture_start "$pcap"
  if [ "$role" = receiver ]; then
    ns timeout 60 $prog mckey -m "$group" -b "$HOST_IP" -C 10 > "$rnic_out" 2>&1 &
    local rpid=$!
    # The namespace's IGMP table names the group (hex, as the kernel stores it) once rnic's
    # device joined it; only then may the sender start.
    local hex; IFS=. read -r g1 g2 g3 g4 <<< "$group"; hex=$(printf '%02X%02X%02X%02X' "$g4" "$g3" "$g2" "$g1")
    for _ in $(seq 1 100); do ns grep -q "$hex" /proc/net/igmp && break; sleep 0.2; done
    job a "$RUN" "$job" "sleep 1; timeout 50 mckey -m $group -b $GUEST_IP -s -C 10; echo \"exit \$?\""
    wait_job a "$RUN" "$job" 60 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
    wait $rpid; rrc=$?
  else
    job a "$RUN" "$job" "timeout 50 mckey -m $group -b $GUEST_IP -C 10 & P=\$!
sleep 3; : > /lab/q/a.$job.listening
wait \$P; echo \"exit \$?\""
    for _ in $(seq 1 300); do [ -e "$RUN/q/a.$job.listening" ] && break; sleep 0.2; done
    ns timeout 50 $prog mckey -m "$group" -b "$HOST_IP" -s -C 10 > "$rnic_out" 2>&1; rrc=$?
    wait_job a "$RUN" "$job" 60 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  fi
  capture_stop "$pcap" > /dev/null
  "$VECTORS/check_pcap.sh" "$pcap" > "$OUT/$id.check.txt" 2>&1; local crc=$?
  "$RNIC" decode "$pcap" > "$OUT/$id.decode.txt" 2>&1; local drc=$?
  [ "$rrc" = 0 ] || why+=" rnic's mckey exit $rrc;"
  [ "${grc:-x}" = 0 ] || why+=" the guest's mckey exit ${grc:-none};"
  for f in "$rnic_out" "$guest_out"; do
    grep -q 'data transfers complete' "$f" || why+=" $(basename "$f"): no 'data transfers complete';"
  done
  [ "$crc" = 0 ] || why+=" check_pcap.sh failed;"
  [ "$drc" = 0 ] || why+=" rnic decode found bad packets;"
  if [ -z "$why" ]; then verdict=PASS; else verdict=FAIL; fi
  echo "   rnic:  $(cut -c1-90 "$rnic_out" | tr '\n' '|')"
  echo "   guest: $(grep -E 'mckey:|joined|complete|status|exit' "$guest_out" | cut -c1-90 | tr '\n' '|')"
  echo "   pcap:  $(grep -c 'UD_' "$OUT/$id.decode.txt") UD packets, check_pcap rc=$crc, decode rc=$drc"
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-34s %s' "$verdict" "$id" "$why")")
}
if [ "${CASES:-all}" = all ] || [ "${CASES}" = mcast ]; then
mckey_case mcast-rnic-receiver receiver 239.77.0.1
mckey_case mcast-rnic-sender sender 239.77.0.2
fi

# mw_case NAME ROLE: a type 2 memory window across implementations, scripts/lab/mw_peer.c
# (built here, the same binary in the guest) on rnic's libraries (rnic exec) and on rxe0:
# the server binds the window on its QP and offers it, the client WRITEs through it,
# invalidates it with a SEND with Invalidate and is refused a second WRITE (remote access
# error). ROLE server: rnic binds and checks, the guest writes; client: the other way.
mw_case() {
  local name=$1 role=$2 id pcap rnic_out guest_out rrc grc verdict why="" port
  SEQ=$((SEQ + 1)); id=$(printf '%02d' $SEQ)-$name; port=$((18900 + SEQ))
  local job=$id-$STAMP
  pcap=$OUT/$id.pcap; rnic_out=$OUT/$id.rnic.txt; guest_out=$OUT/$id.guest.txt
  local prog="env RNIC_DEVICES=rnic0=$HOST_IP $RNIC exec --lib $IBVERBS --no-device-files --"
  cp "$MW_PEER" "$RUN/mw_peer"
  echo "== $id: mw_peer on rnic ($role), mw_peer on rxe0"
  capture_start "$pcap"
  if [ "$role" = server ]; then
    ns timeout 60 $prog "$MW_PEER" server "$HOST_IP" "$port" > "$rnic_out" 2>&1 &
    local rpid=$!
    sleep 1
    job a "$RUN" "$job" "timeout 50 /lab/mw_peer client $HOST_IP $port $GUEST_IP; echo \"exit \$?\""
    wait_job a "$RUN" "$job" 60 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
    wait $rpid; rrc=$?
  else
    job a "$RUN" "$job" "timeout 50 /lab/mw_peer server $GUEST_IP $port & P=\$!
sleep 3; : > /lab/q/a.$job.listening
wait \$P; echo \"exit \$?\""
    for _ in $(seq 1 300); do [ -e "$RUN/q/a.$job.listening" ] && break; sleep 0.2; done
    ns timeout 50 $prog "$MW_PEER" client "$GUEST_IP" "$port" "$HOST_IP" > "$rnic_out" 2>&1; rrc=$?
    wait_job a "$RUN" "$job" 60 > "$guest_out"; grc=$(sed -n 's/^exit //p' "$guest_out" | tail -1)
  fi
  capture_stop "$pcap" > /dev/null
  "$VECTORS/check_pcap.sh" "$pcap" > "$OUT/$id.check.txt" 2>&1; local crc=$?
  "$RNIC" decode "$pcap" > "$OUT/$id.decode.txt" 2>&1; local drc=$?
  [ "$rrc" = 0 ] || why+=" rnic's mw_peer exit $rrc;"
  [ "${grc:-x}" = 0 ] || why+=" the guest's mw_peer exit ${grc:-none};"
  [ "$(grep -c '^ok: ' "$rnic_out")" = 4 ] || why+=" rnic's side did not make its 4 checks;"
  [ "$(grep -c '^ok: ' "$guest_out")" = 4 ] || why+=" the guest's side did not make its 4 checks;"
  [ "$crc" = 0 ] || why+=" check_pcap.sh failed;"
  [ "$drc" = 0 ] || why+=" rnic decode found bad packets;"
  if [ -z "$why" ]; then verdict=PASS; else verdict=FAIL; fi
  echo "   rnic:  $(cut -c1-90 "$rnic_out" | tr '\n' '|')"
  echo "   guest: $(grep -E '^ok:|^FAIL|exit' "$guest_out" | cut -c1-90 | tr '\n' '|')"
  echo "   pcap:  $(grep -c 'RC_' "$OUT/$id.decode.txt") RC packets, check_pcap rc=$crc, decode rc=$drc"
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-34s %s' "$verdict" "$id" "$why")")
}
if [ "${CASES:-all}" = all ] || [ "${CASES}" = mw ]; then
MW_PEER=$OUT/mw_peer
cc -O2 -o "$MW_PEER" "$ROOT/scripts/lab/mw_peer.c" -lrdmacm -libverbs || { echo "rxe-interop: mw_peer.c does not build" >&2; exit 2; }
mw_case mw-rnic-server server
mw_case mw-rnic-client client
fi

# Shared (CASES=shared): two rnic processes on ONE device at once (both --ip 10.77.0.1:
# one socket group on port 4791, the kernel steering each datagram to the process that
# owns its QP), each serving its own rdma-core program in the guest at the same time.
# shared_case NAME KIND2: the first process runs RC pingpong, the second KIND2 (rc or ud).
shared_case() {
  local name=$1 kind2=$2 id pcap verdict why="" p1 p2 out1 out2 guest_out
  SEQ=$((SEQ + 1)); id=$(printf '%02d' $SEQ)-$name
  local job=$id-$STAMP
  p1=$((18600 + SEQ)); p2=$((18700 + SEQ))
  pcap=$OUT/$id.pcap; out1=$OUT/$id.rnic1.txt; out2=$OUT/$id.rnic2.txt; guest_out=$OUT/$id.guest.txt
  local second=(-s 4096 -c) tool2=ibv_rc_pingpong g2="-c -m $MTU -s 4096"
  if [ "$kind2" = ud ]; then second=(--ud -s 512); tool2=ibv_ud_pingpong; g2="-s 512"; fi
  echo "== $id: two rnic processes on one device (10.77.0.1), rc + $kind2, against rxe"
  capture_start "$pcap"
  ns timeout 150 "$RNIC" pingpong --ip $HOST_IP -g 1 -m $MTU -s 4096 -c -n $ITERS -p $p1 --counters > "$out1" 2>&1 &
  local r1=$!
  ns timeout 150 "$RNIC" pingpong --ip $HOST_IP -g 1 -m $MTU "${second[@]}" -n $ITERS -p $p2 --counters > "$out2" 2>&1 &
  local r2=$!
  for _ in $(seq 1 100); do
    ns ss -ltnH "sport = :$p1" | grep -q . && ns ss -ltnH "sport = :$p2" | grep -q . && break; sleep 0.1
  done
  job a "$RUN" "$job" "timeout 120 ibv_rc_pingpong -d rxe0 -g 1 -c -m $MTU -s 4096 -n $ITERS -p $p1 $HOST_IP > /tmp/$job.1 2>&1 & A=\$!
timeout 120 $tool2 -d rxe0 -g 1 $g2 -n $ITERS -p $p2 $HOST_IP > /tmp/$job.2 2>&1 & B=\$!
wait \$A; echo \"exit1 \$?\"; wait \$B; echo \"exit2 \$?\"; cat /tmp/$job.1 /tmp/$job.2"
  wait_job a "$RUN" "$job" 150 > "$guest_out"
  wait $r1; local rc1=$?; wait $r2; local rc2=$?
  capture_stop "$pcap" > /dev/null
  "$VECTORS/check_pcap.sh" "$pcap" > "$OUT/$id.check.txt" 2>&1; local crc=$?
  [ "$rc1" = 0 ] || why+=" rnic 1 exit $rc1;"
  [ "$rc2" = 0 ] || why+=" rnic 2 exit $rc2;"
  grep -q '^exit1 0' "$guest_out" || why+=" guest ibv_rc_pingpong failed;"
  grep -q '^exit2 0' "$guest_out" || why+=" guest $tool2 failed;"
  [ "$(grep -c "$ITERS iters in" "$guest_out")" = 2 ] || why+=" the guest's two programs did not both finish;"
  grep -q "$ITERS iters in" "$out1" || why+=" rnic 1 did not finish;"
  grep -q "$ITERS iters in" "$out2" || why+=" rnic 2 did not finish;"
  grep -q 'invalid data' "$guest_out" && why+=" guest: invalid data;"
  [ "$crc" = 0 ] || why+=" check_pcap.sh failed;"
  # The two processes hand out QPNs of different members of the device.
  local q1 q2
  q1=$(sed -n 's/.*local address:.*QPN \(0x[0-9a-f]*\).*/\1/p' "$out1" | head -1)
  q2=$(sed -n 's/.*local address:.*QPN \(0x[0-9a-f]*\).*/\1/p' "$out2" | head -1)
  [ -n "$q1" ] && [ -n "$q2" ] && [ $((q1 >> 18)) != $((q2 >> 18)) ] || why+=" QPNs $q1 and $q2 are not of two members;"
  if [ -z "$why" ]; then verdict=PASS; else verdict=FAIL; fi
  echo "   rnic 1: $(grep -E 'local address|iters in' "$out1" | tr '\n' '|')"
  echo "   rnic 2: $(grep -E 'local address|iters in' "$out2" | tr '\n' '|')"
  echo "   guest:  $(grep -E 'iters in|exit' "$guest_out" | tr '\n' '|')"
  echo "   => $verdict$why"
  SUMMARY+=("$(printf '%-4s %-34s %s' "$verdict" "$id" "$why")")
}
if [ "${CASES:-all}" = all ] || [ "${CASES}" = shared ]; then
shared_case shared-rc-rc rc
shared_case shared-rc-ud ud
fi

echo
echo "== rxe interop summary (captures and logs in $OUT)"
fails=0
for l in "${SUMMARY[@]}"; do echo "$l"; case $l in FAIL*) fails=$((fails + 1)) ;; esac; done
exit $((fails > 0))
