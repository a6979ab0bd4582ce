/* rnic conform's lab responder: an ordinary librdmacm + libibverbs program, so it runs
 * unmodified on Linux rxe and on rnic's libraries. It listens on an rdma_cm port and,
 * for every connection, registers two regions (one with remote read, write and atomic
 * access, one with remote read only), fills them with known patterns, posts RECVS
 * receives of RECV_LEN bytes (never reposted, so the tester can run out of them), and
 * accepts with the regions in the REP's private data:
 *   "RNCF", version 1, rw VA (u64), rw R_Key, rw length, ro VA (u64), ro R_Key,
 *   ro length, receives posted, receive length: all big-endian.
 * Byte i of the rw region is (7i + 3) mod 256, of the ro region (5i + 1) mod 256.
 * It stays up, serving connections one after another and side by side, until killed.
 *
 * Sessions: the same port number in TCP takes one session at a time, for QPs rdma_cm does
 * not make (UC: rdma_cm connects RC QPs only on RoCE, its UC port space is IPoIB's), whose
 * receiver only a completion shows (UD), or whose first PSN the tester picks (RC, for a PSN
 * wrap). The tester sends
 *   "RNUC" (UC) / "RNUD" (UD) / "RNRC" (RC), version 1, its QPN, path MTU code (1..5),
 *   its GID (16 bytes), the PSN to expect (bit 31 set; else the responder picks one)
 * and the responder makes the QP (UC and RC: RTR with the tester's QPN and GID, the GID
 * index of the RoCE v2 GID of the address the TCP connection came to; UD: Q_Key UD_QKEY),
 * a region with remote write access (RC: read and atomic too) filled as the rw region
 * above, posts RECVS receives (UD: of 40 + 256 bytes, the GRH area and the payload; else
 * RECV_LEN), and answers
 *   the same magic, version 1, its QPN, the PSN it expects, rw VA (u64), rw R_Key,
 *   rw length, receives posted, receive length, Q_Key (UD; else 0)
 * What a receiver did is told over TCP: 'C' gets the receive completions so far (a count,
 * then wr_id, status, opcode, byte_len, imm, wc_flags, src_qp, pkey_index: eight u32
 * each), 'M' with offset and length (u32 each) gets those bytes of the region, 'R' those
 * of the receive buffers (receive i at i * receive length). The session ends when the
 * tester closes the socket. All big-endian.
 *
 * Build: cc -O2 -o responder responder.c -lrdmacm -libverbs
 * Run:   responder [PORT] [BIND_ADDRESS]    (port 7471 by default)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RW_LEN 65536
#define RO_LEN 4096
#define RECVS 16
#define RECV_LEN 4096
#define MAX_CONNS 64

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *rw, *ro, *rx;
	uint8_t *rw_buf, *ro_buf, *rx_buf;
};

static struct conn *conns[MAX_CONNS];

static void put32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htobe64(v); memcpy(p, &v, 8); }

static void drop_conn(struct conn *c)
{
	for (int i = 0; i < MAX_CONNS; i++)
		if (conns[i] == c)
			conns[i] = NULL;
	if (c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->rw) ibv_dereg_mr(c->rw);
	if (c->ro) ibv_dereg_mr(c->ro);
	if (c->rx) ibv_dereg_mr(c->rx);
	if (c->cq) ibv_destroy_cq(c->cq);
	if (c->pd) ibv_dealloc_pd(c->pd);
	rdma_destroy_id(c->id);
	free(c->rw_buf);
	free(c->ro_buf);
	free(c->rx_buf);
	free(c);
}

static int accept_conn(struct rdma_cm_id *id)
{
	struct conn *c = calloc(1, sizeof *c);
	if (!c)
		return -1;
	c->id = id;
	id->context = c;
	c->pd = ibv_alloc_pd(id->verbs);
	c->cq = c->pd ? ibv_create_cq(id->verbs, 2 * RECVS + 16, NULL, NULL, 0) : NULL;
	if (!c->cq) {
		perror("responder: PD/CQ");
		goto fail;
	}
	struct ibv_qp_init_attr qa = {
		.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (rdma_create_qp(id, c->pd, &qa)) {
		perror("responder: rdma_create_qp");
		goto fail;
	}
	if (posix_memalign((void **)&c->rw_buf, 4096, RW_LEN) || posix_memalign((void **)&c->ro_buf, 4096, RO_LEN) ||
	    posix_memalign((void **)&c->rx_buf, 4096, RECVS * RECV_LEN))
		goto fail;
	for (int i = 0; i < RW_LEN; i++)
		c->rw_buf[i] = (uint8_t)(7 * i + 3);
	for (int i = 0; i < RO_LEN; i++)
		c->ro_buf[i] = (uint8_t)(5 * i + 1);
	c->rw = ibv_reg_mr(c->pd, c->rw_buf, RW_LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC);
	c->ro = ibv_reg_mr(c->pd, c->ro_buf, RO_LEN, IBV_ACCESS_REMOTE_READ);
	c->rx = ibv_reg_mr(c->pd, c->rx_buf, RECVS * RECV_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!c->rw || !c->ro || !c->rx) {
		perror("responder: ibv_reg_mr");
		goto fail;
	}
	for (int i = 0; i < RECVS; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(c->rx_buf + i * RECV_LEN), .length = RECV_LEN, .lkey = c->rx->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(id->qp, &wr, &bad)) {
			perror("responder: ibv_post_recv");
			goto fail;
		}
	}
	uint8_t pd[48];
	memcpy(pd, "RNCF", 4);
	put32(pd + 4, 1);
	put64(pd + 8, (uintptr_t)c->rw_buf);
	put32(pd + 16, c->rw->rkey);
	put32(pd + 20, RW_LEN);
	put64(pd + 24, (uintptr_t)c->ro_buf);
	put32(pd + 32, c->ro->rkey);
	put32(pd + 36, RO_LEN);
	put32(pd + 40, RECVS);
	put32(pd + 44, RECV_LEN);
	struct rdma_conn_param p = {
		.private_data = pd, .private_data_len = sizeof pd,
		.responder_resources = 4, .initiator_depth = 4, .rnr_retry_count = 7, .retry_count = 7,
	};
	if (rdma_accept(id, &p)) {
		perror("responder: rdma_accept");
		goto fail;
	}
	for (int i = 0; i < MAX_CONNS; i++)
		if (!conns[i]) {
			conns[i] = c;
			return 0;
		}
	fprintf(stderr, "responder: more than %d connections\n", MAX_CONNS);
	return 0;
fail:
	drop_conn(c);
	return -1;
}

/* ---- UC, UD and hand-made RC QPs: sessions over TCP ---- */

static int read_all(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t r = write(fd, p, n);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }

/* The device and GID index of the RoCE v2 GID that is `gid`, or -1. */
static int find_gid(const uint8_t gid[16], struct ibv_context **out)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int d = 0; list && d < n; d++) {
		struct ibv_context *ctx = ibv_open_device(list[d]);
		struct ibv_port_attr pa;
		if (!ctx)
			continue;
		if (ibv_query_port(ctx, 1, &pa) == 0) {
			for (int i = 0; i < pa.gid_tbl_len; i++) {
				struct ibv_gid_entry e;
				if (ibv_query_gid_ex(ctx, 1, i, &e, 0) || memcmp(e.gid.raw, gid, 16) ||
				    e.gid_type != IBV_GID_TYPE_ROCE_V2)
					continue;
				*out = ctx;
				ibv_free_device_list(list);
				return i;
			}
		}
		ibv_close_device(ctx);
	}
	if (list)
		ibv_free_device_list(list);
	return -1;
}

static void gid_of(const struct sockaddr_storage *a, uint8_t gid[16])
{
	memset(gid, 0, 16);
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)a;
		gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &s->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *s = (const void *)a;
		memcpy(gid, &s->sin6_addr, 16);
	}
}

#define UD_QKEY 0x11a5c0deu
#define UD_RECV_LEN (40 + 256)

/* One session on the accepted socket `fd`, served until the tester closes it. */
static void session(int fd)
{
	uint8_t hello[36], gid[16], rep[44];
	struct sockaddr_storage me;
	socklen_t ml = sizeof me;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_mr *rw = NULL, *rx = NULL;
	uint8_t *rw_buf = NULL, *rx_buf = NULL;
	enum ibv_qp_type type;
	int idx;

	if (read_all(fd, hello, sizeof hello) || get32(hello + 4) != 1) {
		fprintf(stderr, "responder: not a session hello\n");
		return;
	}
	if (!memcmp(hello, "RNUC", 4))
		type = IBV_QPT_UC;
	else if (!memcmp(hello, "RNUD", 4))
		type = IBV_QPT_UD;
	else if (!memcmp(hello, "RNRC", 4))
		type = IBV_QPT_RC;
	else {
		fprintf(stderr, "responder: not a session hello\n");
		return;
	}
	uint32_t peer_qpn = get32(hello + 8), mtu = get32(hello + 12), want_psn = get32(hello + 32);
	/* A UD receive takes the 40-byte GRH area and 256 bytes of payload. */
	uint32_t recv_len = type == IBV_QPT_UD ? UD_RECV_LEN : RECV_LEN;
	if (getsockname(fd, (struct sockaddr *)&me, &ml) || mtu < 1 || mtu > 5)
		return;
	gid_of(&me, gid);
	idx = find_gid(gid, &ctx);
	if (idx < 0) {
		fprintf(stderr, "responder: no RoCE v2 GID for the address the session came to\n");
		return;
	}
	pd = ibv_alloc_pd(ctx);
	cq = pd ? ibv_create_cq(ctx, 2 * RECVS + 16, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = { .max_send_wr = 4, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp = cq ? ibv_create_qp(pd, &qa) : NULL;
	if (!qp || posix_memalign((void **)&rw_buf, 4096, RW_LEN) || posix_memalign((void **)&rx_buf, 4096, RECVS * recv_len)) {
		perror("responder: session QP");
		goto out;
	}
	for (int i = 0; i < RW_LEN; i++)
		rw_buf[i] = (uint8_t)(7 * i + 3);
	memset(rx_buf, 0, RECVS * recv_len);
	int remote = IBV_ACCESS_REMOTE_WRITE;
	if (type == IBV_QPT_RC)
		remote |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	rw = ibv_reg_mr(pd, rw_buf, RW_LEN, IBV_ACCESS_LOCAL_WRITE | remote);
	rx = ibv_reg_mr(pd, rx_buf, RECVS * recv_len, IBV_ACCESS_LOCAL_WRITE);
	if (!rw || !rx)
		goto out;
	uint32_t psn = want_psn & 0x80000000u ? want_psn & 0xffffff : 0x00a5a5u ^ (uint32_t)(getpid() & 0xffff);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (type == IBV_QPT_UD) {
		a.qkey = UD_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = remote;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &a, mask))
		goto fail;
	for (int i = 0; i < RECVS; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(rx_buf + i * recv_len), .length = recv_len, .lkey = rx->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(qp, &wr, &bad))
			goto fail;
	}
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (type != IBV_QPT_UD) {
		a.path_mtu = (enum ibv_mtu)mtu;
		a.dest_qp_num = peer_qpn;
		a.rq_psn = psn;
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, hello + 16, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)idx;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if (ibv_modify_qp(qp, &a, mask))
		goto fail;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &a, mask))
		goto fail;
	memcpy(rep, hello, 4);
	put32(rep + 4, 1);
	put32(rep + 8, qp->qp_num);
	put32(rep + 12, psn);
	put64(rep + 16, (uintptr_t)rw_buf);
	put32(rep + 24, rw->rkey);
	put32(rep + 28, RW_LEN);
	put32(rep + 32, RECVS);
	put32(rep + 36, recv_len);
	put32(rep + 40, type == IBV_QPT_UD ? UD_QKEY : 0);
	if (write_all(fd, rep, sizeof rep))
		goto out;
	uint8_t log[(RECVS + 16) * 32];
	uint32_t logged = 0;
	for (;;) {
		uint8_t cmd;
		if (read_all(fd, &cmd, 1))
			break;
		if (cmd == 'C') {
			struct ibv_wc wc[16];
			int k;
			while ((k = ibv_poll_cq(cq, 16, wc)) > 0)
				for (int i = 0; i < k && logged < RECVS + 16; i++, logged++) {
					uint8_t *e = log + logged * 32;
					put32(e, (uint32_t)wc[i].wr_id);
					put32(e + 4, wc[i].status);
					put32(e + 8, wc[i].opcode);
					put32(e + 12, wc[i].byte_len);
					put32(e + 16, be32toh(wc[i].imm_data));
					put32(e + 20, wc[i].wc_flags);
					put32(e + 24, wc[i].src_qp);
					put32(e + 28, wc[i].pkey_index);
				}
			uint8_t n[4];
			put32(n, logged);
			if (write_all(fd, n, 4) || write_all(fd, log, logged * 32))
				break;
		} else if (cmd == 'M' || cmd == 'R') {
			uint8_t q[8];
			if (read_all(fd, q, 8))
				break;
			uint32_t off = get32(q), len = get32(q + 4);
			/* 'M': the region; 'R': the receive buffers. */
			uint8_t *base = cmd == 'M' ? rw_buf : rx_buf;
			uint32_t size = cmd == 'M' ? RW_LEN : RECVS * recv_len;
			if (off > size || len > size - off)
				break;
			if (write_all(fd, base + off, len))
				break;
		} else {
			break;
		}
	}
	goto out;
fail:
	perror("responder: session QP setup");
out:
	if (qp) ibv_destroy_qp(qp);
	if (rw) ibv_dereg_mr(rw);
	if (rx) ibv_dereg_mr(rx);
	if (cq) ibv_destroy_cq(cq);
	if (pd) ibv_dealloc_pd(pd);
	if (ctx) ibv_close_device(ctx);
	free(rw_buf);
	free(rx_buf);
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 7471;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (argc > 2 && inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1) {
		fprintf(stderr, "responder: %s is not an IPv4 address\n", argv[2]);
		return 2;
	}
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen_id;
	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&sin) || rdma_listen(listen_id, 16)) {
		perror("responder: listen");
		return 1;
	}
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	int one = 1, tcp = socket(AF_INET, SOCK_STREAM, 0);
	if (tcp < 0 || setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    bind(tcp, (struct sockaddr *)&sin, sizeof sin) || listen(tcp, 4)) {
		perror("responder: TCP listen (sessions)");
		return 1;
	}
	fcntl(tcp, F_SETFL, fcntl(tcp, F_GETFL) | O_NONBLOCK);
	printf("responder: listening on port %d\n", port);
	fflush(stdout);
	for (;;) {
		struct rdma_cm_event *ev;
		while (rdma_get_cm_event(ch, &ev) == 0) {
			struct rdma_cm_id *id = ev->id;
			enum rdma_cm_event_type t = ev->event;
			rdma_ack_cm_event(ev);
			if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
				if (accept_conn(id))
					fprintf(stderr, "responder: a connection was not accepted\n");
			} else if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
				if (id->context) {
					struct conn *c = id->context;
					id->context = NULL;
					rdma_disconnect(id);
					drop_conn(c);
				}
			}
		}
		/* Completions are only counted: the tester judges from the wire. */
		for (int i = 0; i < MAX_CONNS; i++) {
			struct ibv_wc wc[16];
			if (conns[i])
				while (ibv_poll_cq(conns[i]->cq, 16, wc) > 0)
					;
		}
		/* A session is served to its end; rdma_cm connections wait meanwhile. */
		int s = accept(tcp, NULL, NULL);
		if (s >= 0) {
			fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
			session(s);
			close(s);
		}
		struct pollfd pfd[2] = { { .fd = ch->fd, .events = POLLIN }, { .fd = tcp, .events = POLLIN } };
		poll(pfd, 2, 5);
	}
}
