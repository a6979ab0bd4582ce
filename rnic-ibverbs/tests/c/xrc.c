/* XRC domains, target QPs and ibv_open_qp as a C program sees them, on rnic's
 * libibverbs.so.1 (tests/stock.rs compiles and runs it). One process: an XRC initiator on
 * rnic0, XRC domains, SRQs and target QPs on rnic1, a domain shared by two contexts
 * through one file's inode. Prints "ok: ..." per check; on the first failure prints
 * "FAIL: ..." and exits 1. */
#include "check.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

static struct ibv_device **list;

static struct ibv_context *open_dev(int i)
{
	struct ibv_context *c = ibv_open_device(list[i]);
	CHECK(c, "open %s", ibv_get_device_name(list[i]));
	return c;
}

static union ibv_gid gid_of(struct ibv_context *c)
{
	union ibv_gid g;
	CHECK(ibv_query_gid(c, 1, 1, &g) == 0, "query_gid 1");
	return g;
}

static struct ibv_xrcd *open_xrcd(struct ibv_context *c, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = fd, .oflags = oflags };
	return ibv_open_xrcd(c, &a);
}

/* An XRC SRQ in `x` with its own PD and CQ, one receive of 4 KiB posted from `buf`. */
struct xsrq {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	uint32_t num;
};

static void make_srq(struct xsrq *s, struct ibv_context *c, struct ibv_xrcd *x, char *buf)
{
	s->pd = ibv_alloc_pd(c);
	s->cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	CHECK(s->pd && s->cq, "PD and CQ for an XRC SRQ");
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC, .pd = s->pd, .xrcd = x, .cq = s->cq,
	};
	s->srq = ibv_create_srq_ex(c, &a);
	CHECK(s->srq, "ibv_create_srq_ex(IBV_SRQT_XRC)");
	CHECK(ibv_get_srq_num(s->srq, &s->num) == 0, "ibv_get_srq_num");
	s->mr = ibv_reg_mr(s->pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(s->mr, "reg_mr");
}

static void srq_recv(struct xsrq *s, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)s->mr->addr, 4096, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_srq_recv(s->srq, &wr, &bad) == 0, "post_srq_recv");
}

static void free_srq(struct xsrq *s)
{
	CHECK(ibv_destroy_srq(s->srq) == 0 && ibv_dereg_mr(s->mr) == 0 && ibv_destroy_cq(s->cq) == 0 &&
	      ibv_dealloc_pd(s->pd) == 0, "free an XRC SRQ and its PD, MR and CQ");
}

static struct ibv_qp *make_target(struct ibv_context *c, struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex a = { .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x };
	struct ibv_qp *q = ibv_create_qp_ex(c, &a);
	CHECK(q && q->qp_type == IBV_QPT_XRC_RECV, "ibv_create_qp_ex(IBV_QPT_XRC_RECV)");
	return q;
}

static void modify(struct ibv_qp *q, struct ibv_qp_attr *a, int mask, const char *what)
{
	CHECK(ibv_modify_qp(q, a, mask) == 0, "%s", what);
}

/* The XRC target `t` (number `tnum`, state set through handle `t`) and initiator `i`
 * connected to each other, as the kernel's XRC_TGT / XRC_INI modify tables ask. */
static void connect_xrc(struct ibv_qp *i, union ibv_gid igid, struct ibv_qp *t, union ibv_gid tgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	modify(i, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "initiator to INIT");
	modify(t, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "target to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.rq_psn = 100;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	a.dest_qp_num = t->qp_num;
	a.ah_attr.grh.dgid = tgid;
	modify(i, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, "initiator to RTR");
	a.dest_qp_num = i->qp_num;
	a.ah_attr.grh.dgid = igid;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	modify(t, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "target to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 100;
	/* 16.8 ms, seven retries: a target that is gone fails the send within about 134 ms,
	 * and a loaded host's stall does not (at 1 ms and two retries, the first send of a
	 * CI run beside the other stock tests once failed with RETRY_EXC_ERR). */
	a.timeout = 12;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	modify(i, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	       IBV_QP_MAX_QP_RD_ATOMIC, "initiator to RTS");
	modify(t, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT, "target to RTS");
}

/* An initiator on `c`, with its PD, CQ and a 4 KiB buffer. */
struct ini {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4096];
};

static void make_initiator(struct ini *n, struct ibv_context *c)
{
	n->pd = ibv_alloc_pd(c);
	n->cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	n->mr = ibv_reg_mr(n->pd, n->buf, sizeof n->buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(n->pd && n->cq && n->mr, "initiator PD, CQ, MR");
	struct ibv_qp_init_attr_ex a = { .qp_type = IBV_QPT_XRC_SEND, .send_cq = n->cq, .recv_cq = n->cq,
					 .cap = { .max_send_wr = 8, .max_send_sge = 1 },
					 .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = n->pd };
	n->qp = ibv_create_qp_ex(c, &a);
	CHECK(n->qp, "ibv_create_qp_ex(IBV_QPT_XRC_SEND)");
}

/* The initiator SENDs `msg` to SRQ number `srqn`; returns the send completion. */
static struct ibv_wc xsend(struct ini *n, uint32_t srqn, const char *msg)
{
	strcpy(n->buf, msg);
	struct ibv_sge sge = { (uintptr_t)n->buf, (uint32_t)strlen(msg) + 1, n->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.qp_type.xrc.remote_srqn = srqn;
	CHECK(ibv_post_send(n->qp, &wr, &bad) == 0, "post_send to SRQ %u", srqn);
	return wait_wc(n->cq, "XRC send");
}

/* A SEND to `s` lands in it, completing for target QP `qpn`. */
static void delivered(struct ini *n, struct xsrq *s, uint32_t qpn, const char *msg)
{
	srq_recv(s, 1);
	struct ibv_wc wc = xsend(n, s->num, msg);
	CHECK(wc.status == IBV_WC_SUCCESS, "send '%s': %s", msg, ibv_wc_status_str(wc.status));
	wc = wait_wc(s->cq, "XRC receive");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.qp_num == qpn && strcmp(s->mr->addr, msg) == 0,
	      "'%s' received through QP %#x (status %d, qp_num %#x)", msg, qpn, wc.status, wc.qp_num);
}

static struct ibv_qp *open_qp(struct ibv_context *c, struct ibv_xrcd *x, uint32_t num, uint32_t mask,
			      enum ibv_qp_type type, void *qp_context)
{
	struct ibv_qp_open_attr a = { .comp_mask = mask, .qp_num = num, .xrcd = x, .qp_context = qp_context,
				      .qp_type = type };
	return ibv_open_qp(c, &a);
}

#define OPEN_ALL (IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE | IBV_QP_OPEN_ATTR_CONTEXT)

int main(void)
{
	int n = 0;
	list = ibv_get_device_list(&n);
	CHECK(list && n >= 2, "device list has %d devices", n);
	char path[] = "/tmp/rnic-xrc-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	unlink(path);

	struct ibv_context *I = open_dev(0), *T = open_dev(1), *T2 = open_dev(1);
	union ibv_gid igid = gid_of(I), tgid = gid_of(T);
	struct ibv_xrcd *x = open_xrcd(T, fd, O_CREAT);
	/* The same inode from a second context: the same domain. */
	struct ibv_xrcd *x2 = open_xrcd(T2, fd, 0);
	/* A domain of its own (no file). */
	struct ibv_xrcd *other = open_xrcd(T, -1, 0);
	CHECK(x && x2 && other, "ibv_open_xrcd");
	static char b1[4096], b2[4096], b3[4096];
	struct xsrq s, s2;
	make_srq(&s, T, x, b1);
	make_srq(&s2, T2, x2, b2);
	struct ibv_qp *t = make_target(T, x);
	struct ini ini;
	make_initiator(&ini, I);
	connect_xrc(ini.qp, igid, t, tgid);
	delivered(&ini, &s, t->qp_num, "one");
	delivered(&ini, &s2, t->qp_num, "to the SRQ another context made in the shared domain");
	OK("XRC: a target QP takes SENDs into the SRQs of its domain, those of a second context on the file included");

	/* ibv_open_qp's refusals: EINVAL, as the kernel's ib_uverbs_open_qp. */
	int tag;
	errno = 0;
	CHECK(!open_qp(T, x, t->qp_num, IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE, IBV_QPT_XRC_RECV, NULL) &&
	      errno == EINVAL, "open_qp without a domain: EINVAL");
	errno = 0;
	CHECK(!open_qp(T, x, t->qp_num, OPEN_ALL | IBV_QP_OPEN_ATTR_RESERVED, IBV_QPT_XRC_RECV, NULL) &&
	      errno == EINVAL, "open_qp with an unknown comp_mask bit: EINVAL");
	errno = 0;
	CHECK(!open_qp(T, x, t->qp_num, OPEN_ALL, IBV_QPT_RC, NULL) && errno == EINVAL, "open_qp of type RC: EINVAL");
	errno = 0;
	CHECK(!open_qp(T, other, t->qp_num, OPEN_ALL, IBV_QPT_XRC_RECV, NULL) && errno == EINVAL,
	      "open_qp through another domain: EINVAL");
	errno = 0;
	CHECK(!open_qp(T, x, t->qp_num + 1000, OPEN_ALL, IBV_QPT_XRC_RECV, NULL) && errno == EINVAL,
	      "open_qp of a number the domain does not hold: EINVAL");
	errno = 0;
	CHECK(!open_qp(T2, x, t->qp_num, OPEN_ALL, IBV_QPT_XRC_RECV, NULL) && errno == EINVAL,
	      "open_qp through another context's XRCD handle: EINVAL");
	errno = 0;
	CHECK(!open_qp(I, x, t->qp_num, OPEN_ALL, IBV_QPT_XRC_RECV, NULL) && errno == EINVAL,
	      "open_qp on another device's context: EINVAL");
	OK("ibv_open_qp refuses a missing domain, unknown bits, another type, domain, number or context: EINVAL");

	/* Opened through a handle of the shared domain in the second context (one that
	 * nothing else uses, so that what holds it is the opened QP). */
	struct ibv_xrcd *xo = open_xrcd(T2, fd, 0);
	CHECK(xo, "ibv_open_xrcd");
	struct ibv_qp *o = open_qp(T2, xo, t->qp_num, OPEN_ALL, IBV_QPT_XRC_RECV, &tag);
	CHECK(o && o != t && o->qp_num == t->qp_num && o->qp_type == IBV_QPT_XRC_RECV && o->qp_context == &tag &&
	      o->context == T2 && o->state == IBV_QPS_RTS, "ibv_open_qp: a second handle of the target QP");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(o, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS, "query through the handle");
	CHECK(ibv_close_xrcd(xo) == EBUSY, "ibv_close_xrcd while an opened QP uses it: EBUSY");
	/* The QP's own handle goes; the opened one keeps the QP. */
	CHECK(ibv_destroy_qp(t) == 0, "ibv_destroy_qp of the creating handle");
	delivered(&ini, &s, o->qp_num, "after the creator's handle is gone");
	OK("ibv_open_qp: a handle in another context on the same domain keeps the QP after its creator's destroy");

	/* The last handle goes: the QP with it. */
	uint32_t gone = o->qp_num;
	CHECK(ibv_destroy_qp(o) == 0, "ibv_destroy_qp of the last handle");
	CHECK(ibv_close_xrcd(xo) == 0, "ibv_close_xrcd once the opened QP is gone");
	errno = 0;
	CHECK(!open_qp(T, x, gone, OPEN_ALL, IBV_QPT_XRC_RECV, NULL) && errno == EINVAL, "open_qp of a destroyed QP: EINVAL");
	srq_recv(&s, 9);
	struct ibv_wc wc = xsend(&ini, s.num, "nobody");
	CHECK(wc.status == IBV_WC_RETRY_EXC_ERR, "a send to the destroyed target: %s", ibv_wc_status_str(wc.status));
	OK("the last handle's destroy destroys the QP: nothing answers, and it cannot be opened");

	/* Teardown at ibv_close_device: a third context with a domain handle on the file, an
	 * XRC SRQ, a target QP and an opened handle of another context's target, all left
	 * open. Its target's handle opened from T outlives it; its SRQ leaves the domain. */
	struct ibv_context *T3 = open_dev(1);
	struct ibv_xrcd *x3 = open_xrcd(T3, fd, 0);
	CHECK(x3, "ibv_open_xrcd on the file from a third context");
	struct xsrq s3;
	make_srq(&s3, T3, x3, b3);
	struct ibv_qp *t3 = make_target(T3, x3);
	struct ibv_qp *t_kept = make_target(T, x);
	struct ibv_qp *o3 = open_qp(T3, x3, t_kept->qp_num, OPEN_ALL, IBV_QPT_XRC_RECV, NULL);
	struct ibv_qp *o_t3 = open_qp(T, x, t3->qp_num, OPEN_ALL, IBV_QPT_XRC_RECV, NULL);
	CHECK(o3 && o_t3, "ibv_open_qp both ways between T and T3");
	uint32_t s3num = s3.num, t3num = t3->qp_num;
	struct ini ini3;
	make_initiator(&ini3, I);
	connect_xrc(ini3.qp, igid, o_t3, tgid);
	CHECK(ibv_close_device(T3) == 0, "ibv_close_device with an XRC domain, SRQ, target and opened QP alive");
	delivered(&ini3, &s, t3num, "to T3's target through T's handle, after T3 closed");
	srq_recv(&s, 10);
	wc = xsend(&ini3, s3num, "to the SRQ of the closed context");
	CHECK(wc.status == IBV_WC_REM_INV_REQ_ERR, "a send to the closed context's SRQ: %s", ibv_wc_status_str(wc.status));
	/* The target's error event reaches the context of the handle left (its own
	 * handle went with T3). */
	struct pollfd pfd = { .fd = T->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 5000) == 1, "an async event on T within 5 s");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(T, &ev) == 0 && ev.event_type == IBV_EVENT_QP_REQ_ERR && ev.element.qp == o_t3,
	      "IBV_EVENT_QP_REQ_ERR for the opened handle (got type %d)", ev.event_type);
	ibv_ack_async_event(&ev);
	CHECK(ibv_destroy_qp(o_t3) == 0 && ibv_destroy_qp(t_kept) == 0, "destroy the handles left");
	errno = 0;
	CHECK(!open_qp(T, x, t3num, OPEN_ALL, IBV_QPT_XRC_RECV, NULL) && errno == EINVAL, "T3's target is gone");
	OK("ibv_close_device tears down its XRC domain handle, SRQ, target and opened QP; another context's handle keeps its QP");

	/* A context closed with a domain handle open (nothing else): the domain handle goes with
	 * it, and once every context of rnic1 is closed the device stops (its port is free). */
	struct ibv_context *T4 = open_dev(1);
	CHECK(open_xrcd(T4, fd, 0) && open_xrcd(T4, -1, 0), "two XRC domain handles on a fourth context");
	CHECK(ibv_close_device(T4) == 0, "ibv_close_device with XRC domains open");
	free_srq(&s);
	free_srq(&s2);
	CHECK(ibv_close_xrcd(x) == 0 && ibv_close_xrcd(x2) == 0 && ibv_close_xrcd(other) == 0, "ibv_close_xrcd");
	CHECK(ibv_close_device(T) == 0 && ibv_close_device(T2) == 0, "ibv_close_device");
	const char *devs = getenv("RNIC_DEVICES");
	const char *at = devs ? strstr(devs, "rnic1=") : NULL;
	char ip[64] = "127.0.0.2";
	if (at) {
		size_t k = strcspn(at + 6, ",@");
		snprintf(ip, sizeof ip, "%.*s", (int)k, at + 6);
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(4791) };
	CHECK(inet_pton(AF_INET, ip, &sa.sin_addr) == 1, "address %s", ip);
	int sock = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(sock >= 0 && bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0,
	      "binding %s:4791 after every context of rnic1 closed (an XRC domain keeps the device running)", ip);
	close(sock);
	OK("contexts closed with XRC domains open: nothing of theirs keeps rnic1 running (%s:4791 free)", ip);
	close(fd);
	ibv_free_device_list(list);
	return 0;
}
