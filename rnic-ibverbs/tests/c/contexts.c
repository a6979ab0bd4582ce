/* Every context of a process on one device, as rdma-core's test suite and rxe use them:
 * contexts A and B both open rnic0 (one engine, one UDP port), their RC QPs connected to
 * each other. Run by tests/stock.rs with rnic's libibverbs.so.1; RNIC_DEVICES names rnic0.
 * Prints "ok: ..." per check; on the first failure prints "FAIL: ..." and exits 1. */
#include "check.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 4096

static struct ibv_device *rnic0;

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static struct ibv_context *open_rnic0(void)
{
	struct ibv_context *c = ibv_open_device(rnic0);
	CHECK(c, "ibv_open_device(rnic0)");
	return c;
}

static void make_side(struct side *s, struct ibv_context *ctx)
{
	s->ctx = ctx;
	s->pd = ibv_alloc_pd(ctx);
	CHECK(s->pd, "ibv_alloc_pd");
	s->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(s->cq, "ibv_create_cq");
	s->buf = calloc(1, BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(s->mr, "ibv_reg_mr");
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK(s->qp, "ibv_create_qp");
}

static void free_side(struct side *s)
{
	CHECK(ibv_destroy_qp(s->qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_dereg_mr(s->mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_destroy_cq(s->cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dealloc_pd(s->pd) == 0, "ibv_dealloc_pd");
	free(s->buf);
}

static void connect_qp(struct side *s, struct side *peer)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(peer->ctx, 1, 1, &gid) == 0, "ibv_query_gid");
	rc_connect(s->qp, peer->qp->qp_num, gid, 0, 1, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

/* A WRITE of BUF bytes from a to b, every byte checked at b; then a READ back into a. */
static void write_read(struct side *a, struct side *b, unsigned seed)
{
	for (int i = 0; i < BUF; i++)
		a->buf[i] = (char)(seed * 31 + i * 7);
	struct ibv_sge sge = { .addr = (uintptr_t)a->buf, .length = BUF, .lkey = a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = seed, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)b->buf;
	wr.wr.rdma.rkey = b->mr->rkey;
	CHECK(ibv_post_send(a->qp, &wr, &bad) == 0, "post WRITE");
	struct ibv_wc wc = wait_wc(a->cq, "WRITE");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == seed, "WRITE completed with %s", ibv_wc_status_str(wc.status));
	CHECK(memcmp(a->buf, b->buf, BUF) == 0, "WRITE: bytes differ at the target");
	memset(a->buf, 0, BUF);
	wr.opcode = IBV_WR_RDMA_READ;
	CHECK(ibv_post_send(a->qp, &wr, &bad) == 0, "post READ");
	wc = wait_wc(a->cq, "READ");
	CHECK(wc.status == IBV_WC_SUCCESS, "READ completed with %s", ibv_wc_status_str(wc.status));
	CHECK(memcmp(a->buf, b->buf, BUF) == 0, "READ: bytes differ");
}

static struct side A, B;
static volatile int churn_failed;

/* Opens rnic0, makes objects, and either destroys them in order or closes the context
 * with them alive, in a loop: beside A and B's traffic. */
static void *churn(void *arg)
{
	long id = (long)arg;
	for (int i = 0; i < 25; i++) {
		struct ibv_context *c = ibv_open_device(rnic0);
		if (!c) { churn_failed = 1; return NULL; }
		struct side s;
		memset(&s, 0, sizeof s);
		s.ctx = c;
		s.pd = ibv_alloc_pd(c);
		s.cq = ibv_create_cq(c, 16, NULL, NULL, 0);
		s.buf = calloc(1, BUF);
		s.mr = s.pd ? ibv_reg_mr(s.pd, s.buf, BUF, IBV_ACCESS_LOCAL_WRITE) : NULL;
		struct ibv_qp_init_attr ia = { .send_cq = s.cq, .recv_cq = s.cq, .qp_type = IBV_QPT_RC,
					       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
		s.qp = s.pd && s.cq ? ibv_create_qp(s.pd, &ia) : NULL;
		if (!s.pd || !s.cq || !s.mr || !s.qp) { churn_failed = 2; return NULL; }
		if ((i + id) % 2)
			free_side(&s);
		else
			free(s.buf); /* the context's close frees the objects */
		if (ibv_close_device(c)) { churn_failed = 3; return NULL; }
	}
	return NULL;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "ibv_get_device_list");
	rnic0 = list[0];
	CHECK(strcmp(ibv_get_device_name(rnic0), "rnic0") == 0, "the first device is rnic0");

	/* 1. Two contexts, one device: traffic between them. */
	make_side(&A, open_rnic0());
	make_side(&B, open_rnic0());
	connect_qp(&A, &B);
	connect_qp(&B, &A);
	write_read(&A, &B, 1);
	write_read(&B, &A, 2);
	OK("two contexts on rnic0: WRITE and READ both ways, every byte checked");

	/* 2. Objects of one context are refused by another (uverbs looks handles up in
	 * the context they are used in). */
	struct ibv_qp_init_attr ia = { .send_cq = B.cq, .recv_cq = A.cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	errno = 0;
	CHECK(ibv_create_qp(A.pd, &ia) == NULL && errno == EINVAL, "a QP with another context's CQ is refused");
	struct ibv_comp_channel *chB = ibv_create_comp_channel(B.ctx);
	CHECK(chB, "ibv_create_comp_channel");
	errno = 0;
	CHECK(ibv_create_cq(A.ctx, 4, NULL, chB, 0) == NULL && errno == EINVAL,
	      "a CQ on another context's channel is refused");
	CHECK(ibv_destroy_comp_channel(chB) == 0, "ibv_destroy_comp_channel");
	OK("another context's CQ or channel: EINVAL");

	/* 3. Objects in use cannot go (EBUSY, as uverbs' use counts). */
	CHECK(ibv_dealloc_pd(A.pd) == EBUSY, "ibv_dealloc_pd with an MR and a QP: EBUSY");
	CHECK(ibv_destroy_cq(A.cq) == EBUSY, "ibv_destroy_cq with a QP: EBUSY");
	write_read(&A, &B, 3);
	OK("a PD or CQ in use: EBUSY, and nothing was destroyed");

	/* 4. A third context closed with its objects alive and its QP connected to one of
	 * B's: ibv_close_device succeeds, A and B go on. */
	struct side C, B2;
	make_side(&C, open_rnic0());
	make_side(&B2, B.ctx);
	connect_qp(&C, &B2);
	connect_qp(&B2, &C);
	write_read(&C, &B2, 4);
	CHECK(ibv_close_device(C.ctx) == 0, "ibv_close_device with objects alive");
	free(C.buf);
	write_read(&A, &B, 5);
	write_read(&B, &A, 6);
	OK("a context closed with live objects: 0, and the other contexts' traffic intact");

	/* 5. Contexts opened, used and closed from four threads while A and B move data. */
	pthread_t t[4];
	for (long i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, churn, (void *)i) == 0, "pthread_create");
	for (unsigned i = 0; i < 100; i++)
		write_read(i % 2 ? &A : &B, i % 2 ? &B : &A, 100 + i);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(!churn_failed, "a churning thread failed at step %d", churn_failed);
	OK("4 threads x 25 contexts opened and closed beside 100 checked transfers");

	/* 6. Once every context and object is gone the device stops: its port is free. */
	free_side(&B2);
	free_side(&A);
	free_side(&B);
	CHECK(ibv_close_device(A.ctx) == 0 && ibv_close_device(B.ctx) == 0, "ibv_close_device");
	const char *devs = getenv("RNIC_DEVICES");
	char ip[64] = "127.0.0.1";
	if (devs && strncmp(devs, "rnic0=", 6) == 0) {
		size_t k = strcspn(devs + 6, ",@");
		snprintf(ip, sizeof ip, "%.*s", (int)k, devs + 6);
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(4791) };
	CHECK(inet_pton(AF_INET, ip, &sa.sin_addr) == 1, "address %s", ip);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0,
	      "binding %s:4791 after every context closed (the device is still running)", ip);
	close(fd);
	OK("every context closed: the device stopped and released %s:4791", ip);

	/* 7. And it starts again for the next context. */
	struct side D, E;
	make_side(&D, open_rnic0());
	make_side(&E, open_rnic0());
	connect_qp(&D, &E);
	connect_qp(&E, &D);
	write_read(&D, &E, 7);
	free_side(&D);
	free_side(&E);
	CHECK(ibv_close_device(D.ctx) == 0 && ibv_close_device(E.ctx) == 0, "ibv_close_device");
	OK("reopened after the stop: traffic again");
	ibv_free_device_list(list);
	return 0;
}
