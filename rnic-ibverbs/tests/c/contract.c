/* The verbs contract as a C program sees it, on rnic's libibverbs.so.1 (compiled against
 * rdma-core's own <infiniband/verbs.h> by tests/contract.rs). One process, two devices
 * (rnic0 and rnic1 of RNIC_DEVICES), an RC QP on each, connected to each other.
 * Prints "ok: ..." per check; on the first failure prints "FAIL: ..." and exits 1. */
#include "check.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr, *ro_mr;
	char *buf, *ro_buf;
	union ibv_gid gid;
};

static void open_side(struct side *s, struct ibv_device *dev, int cq_ctx)
{
	s->ctx = ibv_open_device(dev);
	CHECK(s->ctx, "open %s", ibv_get_device_name(dev));
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "alloc_pd");
	s->ch = ibv_create_comp_channel(s->ctx);
	CHECK(s->ch && s->ch->fd >= 0, "create_comp_channel");
	s->cq = ibv_create_cq(s->ctx, 64, (void *)(long)cq_ctx, s->ch, 0);
	CHECK(s->cq, "create_cq");
	s->buf = aligned_alloc(4096, 8192);
	s->ro_buf = aligned_alloc(4096, 4096);
	memset(s->buf, 0, 8192);
	memset(s->ro_buf, 0x5a, 4096);
	s->mr = ibv_reg_mr(s->pd, s->buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr, "reg_mr");
	s->ro_mr = ibv_reg_mr(s->pd, s->ro_buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(s->ro_mr, "reg_mr (remote read only)");
	struct ibv_qp_init_attr ia = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
						.max_recv_sge = 2, .max_inline_data = 64 } };
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK(s->qp && s->qp->state == IBV_QPS_RESET, "create_qp");
	CHECK(ibv_query_gid(s->ctx, 1, 1, &s->gid) == 0, "query_gid 1");
}

static void connect_qp(struct side *s, struct side *peer)
{
	rc_connect(s->qp, peer->qp->qp_num, peer->gid, 100, 4,
		   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
}

static void post_recv(struct side *s, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + 4096, 4096, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0, "post_recv");
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 2, "device list has %d devices", n);
	struct side a, b;
	open_side(&a, list[0], 11);
	open_side(&b, list[1], 22);
	ibv_free_device_list(list);
	connect_qp(&a, &b);
	connect_qp(&b, &a);
	OK("two devices, RC QPs connected (RESET -> INIT -> RTR -> RTS)");

	/* Bad calls: errno, never a crash. */
	CHECK(ibv_create_cq(a.ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL, "create_cq(0) -> EINVAL");
	union ibv_gid g;
	CHECK(ibv_query_gid(a.ctx, 1, 5, &g) == -1, "query_gid index 5 -> -1");
	struct ibv_qp_init_attr xa = { .send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_XRC_SEND, .cap = { 1, 1, 1, 1, 0 } };
	struct ibv_qp *xq = ibv_create_qp(a.pd, &xa);
	CHECK(xq && xq->qp_type == IBV_QPT_XRC_SEND && xq->recv_cq == NULL && ibv_destroy_qp(xq) == 0,
	      "XRC_SEND QP through ibv_create_qp: no receive side");
	struct ibv_qp_init_attr ra = { .send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RAW_PACKET, .cap = { 1, 1, 1, 1, 0 } };
	CHECK(ibv_create_qp(a.pd, &ra) == NULL && errno == EOPNOTSUPP, "raw packet QP -> EOPNOTSUPP");
	CHECK(ibv_alloc_mw(a.pd, (enum ibv_mw_type)3) == NULL && errno == EINVAL, "alloc_mw of type 3 -> EINVAL");
	struct ibv_cq_init_attr_ex cqx = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN };
	CHECK(ibv_create_cq_ex(a.ctx, &cqx) == NULL && errno == EOPNOTSUPP, "create_cq_ex with CVLAN -> EOPNOTSUPP");
	struct ibv_mr *odp = ibv_reg_mr(a.pd, a.buf, 64, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	CHECK(odp && ibv_dereg_mr(odp) == 0, "an on-demand region (nothing is pinned anyway)");
	struct ibv_mr *implicit = ibv_reg_mr(a.pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	CHECK(implicit && implicit->length == SIZE_MAX && ibv_dereg_mr(implicit) == 0, "an implicit on-demand region");
	CHECK(ibv_reg_mr(a.pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "the whole address space without ON_DEMAND -> EINVAL");
	CHECK(ibv_reg_mr(a.pd, a.buf, 64, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
	      "remote write without local write -> EINVAL");
	CHECK(ibv_resize_cq(a.cq, 0) == EINVAL && ibv_resize_cq(a.cq, 128) == 0 && a.cq->cqe == 128,
	      "resize_cq: 0 -> EINVAL, 128 -> cqe 128");
	struct ibv_qp_attr bad_attr = { .qp_state = IBV_QPS_RTR };
	CHECK(ibv_modify_qp(a.qp, &bad_attr, IBV_QP_STATE) == EINVAL, "RTS -> RTR refused with EINVAL");
	OK("bad and unsupported calls return EINVAL / EOPNOTSUPP");

	/* SEND with immediate: the immediate comes back in network order, with the flag. */
	post_recv(&b, 7);
	strcpy(a.buf, "hello rnic");
	struct ibv_sge sge = { (uintptr_t)a.buf, 11, a.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x12345678) }, *bad_wr;
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post SEND_WITH_IMM");
	struct ibv_wc wc = wait_wc(b.cq, "receive");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 7 && wc.byte_len == 11 &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0x12345678) && wc.qp_num == b.qp->qp_num &&
	      !strcmp(b.buf + 4096, "hello rnic"), "receive wc (status %d opcode %d imm %#x)", wc.status, wc.opcode, wc.imm_data);
	wc = wait_wc(a.cq, "send");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 1, "send wc");
	OK("SEND_WITH_IMM: data, byte_len, imm_data (network order), IBV_WC_WITH_IMM");

	/* Inline send from a stack buffer: no lkey. */
	post_recv(&b, 8);
	char stackbuf[32] = "inline!";
	struct ibv_sge isge = { (uintptr_t)stackbuf, 8, 0 };
	wr = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &isge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post inline SEND");
	strcpy(stackbuf, "changed");
	wc = wait_wc(b.cq, "inline receive");
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(b.buf + 4096, "inline!"), "inline data copied at post time");
	wait_wc(a.cq, "inline send");
	OK("inline SEND: copied at post, no lkey");

	/* Completion channel: O_NONBLOCK gives EAGAIN; an armed CQ makes the fd readable. */
	fcntl(b.ch->fd, F_SETFL, fcntl(b.ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(b.ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "no event yet -> EAGAIN");
	CHECK(ibv_req_notify_cq(b.cq, 0) == 0, "req_notify_cq");
	post_recv(&b, 9);
	wr = (struct ibv_send_wr){ .wr_id = 3, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post SEND");
	wait_wc(a.cq, "send for the event");
	struct pollfd pfd = { b.ch->fd, POLLIN, 0 };
	CHECK(poll(&pfd, 1, 5000) == 1, "channel fd readable after the completion");
	CHECK(ibv_get_cq_event(b.ch, &ev_cq, &ev_ctx) == 0 && ev_cq == b.cq && ev_ctx == (void *)22L, "get_cq_event");
	ibv_ack_cq_events(ev_cq, 1);
	CHECK(poll(&pfd, 1, 0) == 0, "channel fd not readable once the event is taken");
	wc = wait_wc(b.cq, "evented receive");
	CHECK(wc.wr_id == 9, "the completion behind the event");
	OK("completion channel: EAGAIN, poll() readable, get_cq_event, cleared after");

	/* Atomics, through the ibv_wr_* API (ibv_qp_ex) and ibv_post_send. */
	uint64_t *target = (uint64_t *)b.buf;
	*target = 40;
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a.qp);
	CHECK(qx, "qp_to_qp_ex");
	ibv_wr_start(qx);
	qx->wr_id = 4;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(qx, b.mr->rkey, (uintptr_t)target, 2);
	ibv_wr_set_sge(qx, a.mr->lkey, (uintptr_t)a.buf + 512, 8);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
	wc = wait_wc(a.cq, "fetch_add");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD && *(uint64_t *)(a.buf + 512) == 40 && *target == 42,
	      "fetch_add: old %lu, now %lu", *(uint64_t *)(a.buf + 512), *target);
	struct ibv_sge asge = { (uintptr_t)a.buf + 520, 8, a.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 5, .sg_list = &asge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.atomic.remote_addr = (uintptr_t)target;
	wr.wr.atomic.rkey = b.mr->rkey;
	wr.wr.atomic.compare_add = 42;
	wr.wr.atomic.swap = 7;
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post CMP_AND_SWP");
	wc = wait_wc(a.cq, "cmp_swap");
	CHECK(wc.status == IBV_WC_SUCCESS && *(uint64_t *)(a.buf + 520) == 42 && *target == 7, "cmp_swap");
	OK("atomics: fetch_add (ibv_wr_*), cmp_swap (ibv_post_send)");

	/* RDMA READ with the ibv_wr_* API. */
	ibv_wr_start(qx);
	qx->wr_id = 6;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(qx, b.ro_mr->rkey, (uintptr_t)b.ro_buf);
	ibv_wr_set_sge(qx, a.mr->lkey, (uintptr_t)a.buf + 1024, 4096);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete READ");
	wc = wait_wc(a.cq, "read");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && (unsigned char)a.buf[1024] == 0x5a &&
	      (unsigned char)a.buf[1024 + 4095] == 0x5a, "READ data");
	OK("RDMA READ through ibv_wr_rdma_read");

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(a.qp, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qia) == 0 && qa.qp_state == IBV_QPS_RTS &&
	      qa.dest_qp_num == b.qp->qp_num && qia.qp_type == IBV_QPT_RC && qia.cap.max_inline_data == 64, "query_qp");
	OK("query_qp: state, dest QPN, init attributes");

	/* Protection: a WRITE to a region without remote write is NAKed; the target bytes stay
	 * as they were; the responder raises IBV_EVENT_QP_ACCESS_ERR on its async_fd. */
	wr = (struct ibv_send_wr){ .wr_id = 10, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)b.ro_buf;
	wr.wr.rdma.rkey = b.ro_mr->rkey;
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post forbidden WRITE");
	wc = wait_wc(a.cq, "forbidden write");
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 10, "REM_ACCESS_ERR (status %d: %s)", wc.status,
	      ibv_wc_status_str(wc.status));
	CHECK((unsigned char)b.ro_buf[0] == 0x5a && (unsigned char)b.ro_buf[10] == 0x5a, "target untouched");
	struct pollfd afd = { b.ctx->async_fd, POLLIN, 0 };
	CHECK(poll(&afd, 1, 5000) == 1, "async_fd readable");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(b.ctx, &ev) == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == b.qp,
	      "async event %d (%s)", ev.event_type, ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	OK("protection: REM_ACCESS_ERR, target untouched, IBV_EVENT_QP_ACCESS_ERR on async_fd");

	/* A QP in error flushes what is posted; nothing is lost. */
	post_recv(&b, 11);
	wc = wait_wc(b.cq, "flush");
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 11, "receive flushed in ERR (status %d)", wc.status);
	OK("the errored QP flushes a posted receive");

	/* Reset takes a QP's completions out of its CQ (as libmlx5's mlx5_cq_clean): a flushed
	 * receive left unpolled is gone, and the QP starts clean. */
	CHECK(ibv_req_notify_cq(b.cq, 0) == 0, "arm b's CQ");
	post_recv(&b, 12);
	struct pollfd cfd = { b.ch->fd, POLLIN, 0 };
	CHECK(poll(&cfd, 1, 5000) == 1 && ibv_get_cq_event(b.ch, &ev_cq, &ev_ctx) == 0 && ev_cq == b.cq,
	      "the flush completion is in the CQ");
	ibv_ack_cq_events(b.cq, 1);
	struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };
	CHECK(ibv_modify_qp(b.qp, &reset, IBV_QP_STATE) == 0 && ibv_modify_qp(a.qp, &reset, IBV_QP_STATE) == 0,
	      "reset both QPs");
	struct ibv_wc stale;
	CHECK(ibv_poll_cq(b.cq, 1, &stale) == 0, "the reset QP's flush completion is gone (got wr_id %lu)",
	      (unsigned long)stale.wr_id);
	connect_qp(&a, &b);
	connect_qp(&b, &a);
	OK("reset purges the QP's completions; the QPs connect again");

	/* Keys are checked when the work runs (rxe, mlx5): a receive posted into a region
	 * deregistered afterwards is never written (the buffer is freed at once), the SEND that
	 * reaches it is NAKed REM_OP_ERR; a send naming a key that does not exist posts and
	 * completes LOC_PROT_ERR. */
	char *tmp = aligned_alloc(4096, 4096);
	memset(tmp, 0x77, 4096);
	struct ibv_mr *tmp_mr = ibv_reg_mr(b.pd, tmp, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(tmp_mr, "reg_mr (temporary)");
	struct ibv_sge tsge = { (uintptr_t)tmp, 64, tmp_mr->lkey };
	struct ibv_recv_wr trw = { .wr_id = 13, .sg_list = &tsge, .num_sge = 1 }, *bad_rw;
	CHECK(ibv_post_recv(b.qp, &trw, &bad_rw) == 0, "post_recv into the temporary region");
	CHECK(ibv_dereg_mr(tmp_mr) == 0, "dereg_mr with a receive posted");
	CHECK((unsigned char)tmp[0] == 0x77 && (unsigned char)tmp[63] == 0x77, "untouched before the SEND");
	free(tmp);
	wr = (struct ibv_send_wr){ .wr_id = 14, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	sge.length = 64;
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post SEND");
	wc = wait_wc(a.cq, "SEND into a deregistered receive");
	CHECK(wc.status == IBV_WC_REM_OP_ERR && wc.wr_id == 14, "REM_OP_ERR (status %d: %s)", wc.status,
	      ibv_wc_status_str(wc.status));
	wc = wait_wc(b.cq, "the deregistered receive");
	CHECK(wc.wr_id == 13 && wc.status != IBV_WC_SUCCESS, "receive 13 in error (wr_id %lu status %d)",
	      (unsigned long)wc.wr_id, wc.status);
	CHECK(ibv_modify_qp(b.qp, &reset, IBV_QP_STATE) == 0 && ibv_modify_qp(a.qp, &reset, IBV_QP_STATE) == 0,
	      "reset both QPs");
	connect_qp(&a, &b);
	connect_qp(&b, &a);
	struct ibv_sge nokey = { (uintptr_t)a.buf, 8, 0xdead00 };
	wr = (struct ibv_send_wr){ .wr_id = 15, .sg_list = &nokey, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post_send with an unknown lkey is accepted");
	wc = wait_wc(a.cq, "the unknown lkey");
	CHECK(wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 15, "LOC_PROT_ERR (status %d: %s)", wc.status,
	      ibv_wc_status_str(wc.status));
	OK("keys checked when the work runs: deregistered receive never written, unknown lkey LOC_PROT_ERR");

	/* A type 2 memory window (IBA 10.6.7.2): b binds 64 bytes of a region with MW_BIND
	 * to its QP (IBV_WR_BIND_MW, completion IBV_WC_BIND_MW), a WRITEs through the window's
	 * key, b invalidates it (LOCAL_INV), and a's next WRITE is NAKed REM_ACCESS_ERR; the
	 * region cannot be deregistered while the window is bound. */
	CHECK(ibv_modify_qp(b.qp, &reset, IBV_QP_STATE) == 0 && ibv_modify_qp(a.qp, &reset, IBV_QP_STATE) == 0,
	      "reset both QPs");
	connect_qp(&a, &b);
	connect_qp(&b, &a);
	char *wbuf = aligned_alloc(4096, 4096);
	memset(wbuf, 0, 4096);
	struct ibv_mr *wmr = ibv_reg_mr(b.pd, wbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK(wmr, "reg_mr with MW_BIND");
	struct ibv_mw *mw = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
	CHECK(mw && mw->type == IBV_MW_TYPE_2, "alloc_mw type 2");
	uint32_t wkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr bw = { .wr_id = 16, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED };
	bw.bind_mw.mw = mw;
	bw.bind_mw.rkey = wkey;
	bw.bind_mw.bind_info = (struct ibv_mw_bind_info){ wmr, (uintptr_t)wbuf + 128, 64, IBV_ACCESS_REMOTE_WRITE };
	CHECK(ibv_post_send(b.qp, &bw, &bad_wr) == 0, "post BIND_MW");
	wc = wait_wc(b.cq, "bind");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 16, "bound (status %d opcode %d)",
	      wc.status, wc.opcode);
	CHECK(ibv_dereg_mr(wmr) == EBUSY, "dereg_mr of a region with a window bound -> EBUSY");
	memset(a.buf, 0x3c, 64);
	sge = (struct ibv_sge){ (uintptr_t)a.buf, 64, a.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 17, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)wbuf + 128;
	wr.wr.rdma.rkey = wkey;
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post WRITE through the window");
	wc = wait_wc(a.cq, "WRITE through the window");
	CHECK(wc.status == IBV_WC_SUCCESS && (unsigned char)wbuf[128] == 0x3c && (unsigned char)wbuf[191] == 0x3c &&
	      wbuf[127] == 0 && wbuf[192] == 0, "the WRITE landed in the window (status %d)", wc.status);
	struct ibv_send_wr iw = { .wr_id = 18, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED };
	iw.invalidate_rkey = wkey;
	CHECK(ibv_post_send(b.qp, &iw, &bad_wr) == 0, "post LOCAL_INV of the window");
	wc = wait_wc(b.cq, "invalidate");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 18, "invalidated (status %d)", wc.status);
	wr.wr_id = 19;
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post WRITE through the invalidated window");
	wc = wait_wc(a.cq, "WRITE through the invalidated window");
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 19, "REM_ACCESS_ERR (status %d)", wc.status);
	CHECK(ibv_dealloc_mw(mw) == 0 && ibv_dereg_mr(wmr) == 0, "dealloc_mw, then dereg_mr");
	free(wbuf);
	OK("memory window type 2: bound, written through, EBUSY dereg, invalidated, REM_ACCESS_ERR");

	/* An implicit on-demand region: a peer's WRITE lands at any address the program has
	 * mapped, and one to an address it has not is refused (the kernel checks each copy),
	 * never a fault of this process. */
	CHECK(ibv_modify_qp(b.qp, &reset, IBV_QP_STATE) == 0 && ibv_modify_qp(a.qp, &reset, IBV_QP_STATE) == 0,
	      "reset both QPs");
	connect_qp(&a, &b);
	connect_qp(&b, &a);
	struct ibv_mr *whole = ibv_reg_mr(b.pd, NULL, SIZE_MAX,
					  IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(whole, "implicit region with remote write");
	char *anywhere = aligned_alloc(4096, 4096);
	memset(anywhere, 0, 4096);
	memset(a.buf, 0x6b, 32);
	wr = (struct ibv_send_wr){ .wr_id = 20, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	sge = (struct ibv_sge){ (uintptr_t)a.buf, 32, a.mr->lkey };
	wr.wr.rdma.remote_addr = (uintptr_t)anywhere + 100;
	wr.wr.rdma.rkey = whole->rkey;
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post WRITE into the implicit region");
	wc = wait_wc(a.cq, "WRITE into the implicit region");
	CHECK(wc.status == IBV_WC_SUCCESS && (unsigned char)anywhere[100] == 0x6b && (unsigned char)anywhere[131] == 0x6b &&
	      anywhere[99] == 0 && anywhere[132] == 0, "landed at the address (status %d)", wc.status);
	wr.wr_id = 21;
	wr.wr.rdma.remote_addr = 16; /* page 0: never mapped */
	CHECK(ibv_post_send(a.qp, &wr, &bad_wr) == 0, "post WRITE to an unmapped address");
	wc = wait_wc(a.cq, "WRITE to an unmapped address");
	CHECK(wc.status != IBV_WC_SUCCESS && wc.wr_id == 21, "refused (status %s)", ibv_wc_status_str(wc.status));
	CHECK(ibv_dereg_mr(whole) == 0, "dereg the implicit region");
	free(anywhere);
	OK("implicit ODP region: a WRITE lands at a mapped address, one to an unmapped address is refused (%s)",
	   ibv_wc_status_str(wc.status));

	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "destroy_cq");
	CHECK(ibv_destroy_comp_channel(a.ch) == 0 && ibv_destroy_comp_channel(b.ch) == 0, "destroy_comp_channel");
	CHECK(ibv_dereg_mr(a.mr) == 0 && ibv_dereg_mr(b.mr) == 0 && ibv_dereg_mr(a.ro_mr) == 0 && ibv_dereg_mr(b.ro_mr) == 0, "dereg_mr");
	CHECK(ibv_dealloc_pd(a.pd) == 0 && ibv_dealloc_pd(b.pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(a.ctx) == 0 && ibv_close_device(b.ctx) == 0, "close_device");
	OK("everything destroyed");
	return 0;
}
