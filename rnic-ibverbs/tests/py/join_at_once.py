"""Two processes forked at the same moment, as rdma-core's rdma_cm tests fork theirs: the
passive side binds and listens while the active side resolves the address, each starting
rnic0 in its own process at once; then the active side connects. Both must see
ESTABLISHED. (Before the device's members counted each other from the moment they joined,
the newer one took itself for the agent and rejected the REQ with reason 8 about two runs
in three.) Argument: the device's address. Exit status 0 when both sides connected."""
import multiprocessing as mp
import sys

import pyverbs.cm_enums as ce
from pyverbs.cmid import CMID, AddrInfo, CMEventChannel, CMEvent, ConnParam
from pyverbs.qp import QPCap, QPInitAttr

IP = sys.argv[1]
PORT = '7491'
RC = 2


def expect(ch, want, who):
    ev = CMEvent(ch)
    got = ev.event_type
    ev.ack_cm_event()
    if got != want:
        print(f'{who}: got event {got}, wanted {want}', flush=True)
        sys.exit(1)
    return ev


def passive(b):
    ch = CMEventChannel()
    cmid = CMID(creator=ch, port_space=ce.RDMA_PS_TCP)
    cmid.bind_addr(AddrInfo(src=IP, src_service=PORT, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE))
    cmid.listen()
    b.wait()
    ev = CMEvent(ch)
    if ev.event_type != ce.RDMA_CM_EVENT_CONNECT_REQUEST:
        print(f'passive: got event {ev.event_type}', flush=True)
        sys.exit(1)
    child = CMID(creator=ev, listen_id=cmid)
    ev.ack_cm_event()
    child.create_qp(QPInitAttr(qp_type=RC, cap=QPCap(max_recv_wr=4, max_send_wr=4)))
    child.accept(ConnParam())
    expect(ch, ce.RDMA_CM_EVENT_ESTABLISHED, 'passive')
    b.wait()


def active(b):
    ch = CMEventChannel()
    cmid = CMID(creator=ch, port_space=ce.RDMA_PS_TCP)
    cmid.resolve_addr(AddrInfo(src=IP, dst=IP, dst_service=PORT, port_space=ce.RDMA_PS_TCP))
    expect(ch, ce.RDMA_CM_EVENT_ADDR_RESOLVED, 'active')
    b.wait()
    cmid.resolve_route()
    expect(ch, ce.RDMA_CM_EVENT_ROUTE_RESOLVED, 'active')
    cmid.create_qp(QPInitAttr(qp_type=RC, cap=QPCap(max_recv_wr=4, max_send_wr=4)))
    cmid.connect(ConnParam())
    expect(ch, ce.RDMA_CM_EVENT_ESTABLISHED, 'active')
    b.wait()


ctx = mp.get_context('fork')
barrier = ctx.Barrier(2, timeout=20)
procs = [ctx.Process(target=passive, args=(barrier,)), ctx.Process(target=active, args=(barrier,))]
for p in procs:
    p.start()
for p in procs:
    p.join(30)
codes = [p.exitcode for p in procs]
print('exit codes', codes, flush=True)
sys.exit(0 if codes == [0, 0] else 1)
