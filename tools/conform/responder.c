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
 * Build: cc -O2 -o responder responder.c -lrdmacm -libverbs
 * Run:   responder [PORT] [BIND_ADDRESS]    (port 7471 by default)
 */
#include <arpa/inet.h>
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
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		poll(&pfd, 1, 5);
	}
}
