/* A memory window across implementations (rxe interop, CASES=mw of scripts/rxe-interop.sh):
 * the server binds a type 2 window (IBA 10.6.7.2) over 64 bytes of a region that grants no
 * remote right of its own, on the QP rdma_cm connected, and SENDs the window's address and
 * key; the client RDMA WRITEs through the window, then invalidates it with a SEND with
 * Invalidate (IBA 10.6.7.2.4: the remote end may invalidate a type 2 window bound to the QP
 * it sends on), and a second WRITE is NAKed remote access error. The server checks that the
 * first WRITE landed in the window and nothing around it, and that the invalidation came
 * with the window's key (IBV_WC_WITH_INV). The same program runs on rnic (rnic exec) and on
 * rxe (the guest's libibverbs).
 *
 *   mw_peer server BIND_IP PORT
 *   mw_peer client SERVER_IP PORT BIND_IP
 *
 * Prints "ok: ..." per check, "FAIL: ..." and exit 1 on the first failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL: " __VA_ARGS__); printf(" (errno %d %s)\n", errno, strerror(errno)); fflush(stdout); exit(1); } } while (0)
#define OK(...) do { printf("ok: " __VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

struct offer { uint64_t addr; uint32_t rkey; uint32_t len; };

static struct ibv_wc wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	time_t t0 = time(NULL);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "%s: ibv_poll_cq %d", what, n);
		if (n == 1)
			return wc;
		CHECK(time(NULL) - t0 < 30, "%s: no completion within 30 s", what);
	}
}

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *what)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	CHECK(poll(&p, 1, 30000) == 1, "%s: no CM event within 30 s", what);
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "%s: rdma_get_cm_event", what);
	CHECK(ev->event == want, "%s: got %s, want %s", what, rdma_event_str(ev->event), rdma_event_str(want));
	return ev;
}

static void addr_of(struct sockaddr_in *a, const char *ip, int port)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	CHECK(inet_pton(AF_INET, ip, &a->sin_addr) == 1, "address %s", ip);
}

struct side { struct ibv_pd *pd; struct ibv_cq *cq; };

static struct side make_qp(struct rdma_cm_id *id)
{
	struct side s;
	s.pd = ibv_alloc_pd(id->verbs);
	s.cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	CHECK(s.pd && s.cq, "PD and CQ");
	struct ibv_qp_init_attr qa = { .send_cq = s.cq, .recv_cq = s.cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, s.pd, &qa) == 0, "rdma_create_qp");
	return s;
}

static int server(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *id;
	struct sockaddr_in a;
	addr_of(&a, ip, port);
	CHECK(ch && rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "create id");
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0 && rdma_listen(listen, 1) == 0, "listen on %s:%d", ip, port);
	struct rdma_cm_event *ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, "request");
	id = ev->id;
	rdma_ack_cm_event(ev);
	struct side s = make_qp(id);
	static char region[4096] __attribute__((aligned(4096)));
	static struct offer msg;
	memset(region, 0, sizeof(region));
	struct ibv_mr *mr = ibv_reg_mr(s.pd, region, sizeof(region), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mr *mmr = ibv_reg_mr(s.pd, &msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && mmr, "reg_mr (region: MW_BIND, no remote right)");
	/* The client's SEND with Invalidate lands here. */
	struct ibv_sge rs = { (uintptr_t)&msg, sizeof(msg), mmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *bad_rw;
	CHECK(ibv_post_recv(id->qp, &rw, &bad_rw) == 0, "post_recv");
	CHECK(rdma_accept(id, NULL) == 0, "accept");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, "established"));
	struct ibv_mw *mw = ibv_alloc_mw(s.pd, IBV_MW_TYPE_2);
	CHECK(mw, "alloc_mw type 2");
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr bw = { .wr_id = 2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
	bw.bind_mw.mw = mw;
	bw.bind_mw.rkey = key;
	bw.bind_mw.bind_info = (struct ibv_mw_bind_info){ mr, (uintptr_t)region + 1024, 64, IBV_ACCESS_REMOTE_WRITE };
	CHECK(ibv_post_send(id->qp, &bw, &bad) == 0, "post BIND_MW");
	struct ibv_wc wc = wait_wc(s.cq, "bind");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "bind completed (status %s)", ibv_wc_status_str(wc.status));
	OK("type 2 window %#x bound over 64 bytes at %p, remote write only", key, region + 1024);
	static struct offer o;
	o = (struct offer){ (uintptr_t)region + 1024, key, 64 };
	struct ibv_mr *omr = ibv_reg_mr(s.pd, &o, sizeof(o), 0);
	CHECK(omr, "reg_mr (offer)");
	struct ibv_sge os = { (uintptr_t)&o, sizeof(o), omr->lkey };
	struct ibv_send_wr sw = { .wr_id = 3, .sg_list = &os, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(id->qp, &sw, &bad) == 0, "post SEND of the offer");
	wc = wait_wc(s.cq, "offer");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 3, "offer sent (status %s)", ibv_wc_status_str(wc.status));
	wc = wait_wc(s.cq, "SEND with Invalidate");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.invalidated_rkey == key,
	      "the peer's SEND with Invalidate named the window (status %s, flags %#x, rkey %#x)",
	      ibv_wc_status_str(wc.status), wc.wc_flags, wc.invalidated_rkey);
	if (!(wc.wc_flags & IBV_WC_WITH_INV))
		/* Linux rxe 6.1 sets the kernel's IB_WC_WITH_INVALIDATE (1 << 2) in the CQE its
		 * provider hands over as is, which libibverbs reads as IBV_WC_IP_CSUM_OK; the key
		 * itself is right. Reported, not refused. */
		printf("note: the completion's wc_flags %#x lack IBV_WC_WITH_INV (%#x)\n", wc.wc_flags, IBV_WC_WITH_INV);
	OK("the peer invalidated window %#x", key);
	for (int i = 0; i < 64; i++)
		CHECK((unsigned char)region[1024 + i] == (unsigned char)(0xa0 + i % 16), "byte %d of the window holds %#x", i,
		      (unsigned char)region[1024 + i]);
	CHECK(region[1023] == 0 && region[1088] == 0, "nothing written around the window");
	OK("the peer's WRITE landed in the window, nothing around it");
	/* The peer's WRITE after the invalidation is NAKed here; give it the time to arrive. */
	struct timespec nap = { 1, 0 };
	nanosleep(&nap, NULL);
	for (int i = 0; i < 64; i++)
		CHECK((unsigned char)region[1024 + i] == (unsigned char)(0xa0 + i % 16), "the refused WRITE changed byte %d", i);
	OK("the WRITE after the invalidation changed nothing");
	return 0;
}

static int client(const char *sip, int port, const char *bip)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in dst, src;
	addr_of(&dst, sip, port);
	addr_of(&src, bip, 0);
	CHECK(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create id");
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 5000) == 0, "resolve_addr");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "address"));
	CHECK(rdma_resolve_route(id, 5000) == 0, "resolve_route");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "route"));
	struct side s = make_qp(id);
	static struct offer o;
	static char buf[64];
	struct ibv_mr *omr = ibv_reg_mr(s.pd, &o, sizeof(o), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *bmr = ibv_reg_mr(s.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(omr && bmr, "reg_mr");
	struct ibv_sge rs = { (uintptr_t)&o, sizeof(o), omr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *bad_rw;
	CHECK(ibv_post_recv(id->qp, &rw, &bad_rw) == 0, "post_recv");
	struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1, .retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "connect");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, "established"));
	struct ibv_wc wc = wait_wc(s.cq, "offer");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "offer received (status %s)", ibv_wc_status_str(wc.status));
	OK("window %#x offered: %u bytes at %#llx", o.rkey, o.len, (unsigned long long)o.addr);
	for (int i = 0; i < 64; i++)
		buf[i] = (char)(0xa0 + i % 16);
	struct ibv_sge ws = { (uintptr_t)buf, 64, bmr->lkey };
	struct ibv_send_wr w = { .wr_id = 2, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = o.addr;
	w.wr.rdma.rkey = o.rkey;
	CHECK(ibv_post_send(id->qp, &w, &bad) == 0, "post WRITE");
	wc = wait_wc(s.cq, "WRITE through the window");
	CHECK(wc.status == IBV_WC_SUCCESS, "WRITE through the window (status %s)", ibv_wc_status_str(wc.status));
	OK("64 bytes written through the window");
	struct ibv_send_wr inv = { .wr_id = 3, .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED };
	inv.invalidate_rkey = o.rkey;
	CHECK(ibv_post_send(id->qp, &inv, &bad) == 0, "post SEND with Invalidate");
	wc = wait_wc(s.cq, "SEND with Invalidate");
	CHECK(wc.status == IBV_WC_SUCCESS, "SEND with Invalidate (status %s)", ibv_wc_status_str(wc.status));
	OK("window %#x invalidated by a SEND with Invalidate", o.rkey);
	for (int i = 0; i < 64; i++)
		buf[i] = 0x5a;
	w.wr_id = 4;
	CHECK(ibv_post_send(id->qp, &w, &bad) == 0, "post WRITE after the invalidation");
	wc = wait_wc(s.cq, "WRITE after the invalidation");
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "WRITE through the invalidated window: %s, want remote access error",
	      ibv_wc_status_str(wc.status));
	OK("the WRITE through the invalidated window: remote access error");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(argv[2], atoi(argv[3]));
	if (argc == 5 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), argv[4]);
	fprintf(stderr, "usage: mw_peer server BIND_IP PORT | mw_peer client SERVER_IP PORT BIND_IP\n");
	return 2;
}
