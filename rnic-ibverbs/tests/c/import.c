/* ibv_import_device / ibv_import_pd / ibv_import_mr within one process, as rdma-core's
 * test_shared_pd uses them: a context imported from a dup of another's cmd_fd shares its
 * objects; an imported PD carries QPs that move data into the original MR through the
 * imported MR's keys; closing the imported context leaves the original's objects alone;
 * unimport frees only the handles. Bad use gets rdma-core's errors. */
#include "check.h"
#include <unistd.h>

#define BUF 4096

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "ibv_get_device_list");
	struct ibv_context *orig = ibv_open_device(list[0]);
	CHECK(orig, "ibv_open_device");
	CHECK(orig->cmd_fd >= 0, "the context has a command descriptor (cmd_fd %d)", orig->cmd_fd);
	struct ibv_pd *pd = ibv_alloc_pd(orig);
	CHECK(pd, "ibv_alloc_pd");
	static char buf[BUF], src[BUF];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "ibv_reg_mr");

	/* Bad descriptors are refused. */
	errno = 0;
	CHECK(ibv_import_device(-1) == NULL && errno == EBADF, "importing fd -1 gives EBADF");
	int other = dup(1);
	errno = 0;
	CHECK(ibv_import_device(other) == NULL && errno == EINVAL, "importing a descriptor that is no context's gives EINVAL");
	close(other);
	OK("bad descriptors are refused");

	/* The import: a second context on the same objects. */
	struct ibv_context *imp = ibv_import_device(dup(orig->cmd_fd));
	CHECK(imp, "ibv_import_device(dup(cmd_fd))");
	CHECK(imp != orig && imp->device == orig->device, "a new context on the same device");
	struct ibv_pd *ipd = ibv_import_pd(imp, pd->handle);
	CHECK(ipd && ipd != pd && ipd->handle == pd->handle && ipd->context == imp, "ibv_import_pd");
	struct ibv_mr *imr = ibv_import_mr(ipd, mr->handle);
	CHECK(imr && imr != mr && imr->lkey == mr->lkey && imr->rkey == mr->rkey && imr->length == mr->length,
	      "ibv_import_mr: the same keys and length");
	errno = 0;
	CHECK(ibv_import_pd(imp, 0xdead) == NULL && errno == ENOENT, "no PD with that handle: ENOENT");
	errno = 0;
	CHECK(ibv_import_mr(ipd, 0xdead) == NULL && errno == ENOENT, "no MR with that handle: ENOENT");
	OK("a context imported from a dup of cmd_fd sees the PD and the MR by handle");

	/* The imported PD carries QPs: a WRITE from a QP on a PD of the imported context
	 * into the original MR, through the imported MR's rkey. */
	struct ibv_pd *spd = ibv_alloc_pd(imp);
	CHECK(spd, "ibv_alloc_pd on the imported context");
	struct ibv_mr *smr = ibv_reg_mr(spd, src, BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(smr, "ibv_reg_mr on it");
	struct ibv_cq *cq = ibv_create_cq(imp, 16, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(spd, &ia), *b = ibv_create_qp(ipd, &ia);
	CHECK(a && b, "QPs on a PD of the imported context and on the imported PD");
	union ibv_gid gid;
	CHECK(ibv_query_gid(imp, 1, 1, &gid) == 0, "ibv_query_gid");
	rc_connect(a, b->qp_num, gid, 7, 1, 0);
	rc_connect(b, a->qp_num, gid, 7, 1, IBV_ACCESS_REMOTE_WRITE);
	memset(src, 0x5a, BUF);
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = BUF, .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { .remote_addr = (uintptr_t)buf, .rkey = imr->rkey } }, *bad;
	CHECK(ibv_post_send(a, &wr, &bad) == 0, "post WRITE");
	struct ibv_wc wc = wait_wc(cq, "WRITE");
	CHECK(wc.status == IBV_WC_SUCCESS, "WRITE completed with %s", ibv_wc_status_str(wc.status));
	CHECK(memcmp(buf, src, BUF) == 0, "the original MR holds the bytes");
	OK("a QP on the imported PD takes a WRITE into the original MR through the imported keys");

	/* Unimport frees the handles; the objects stay the maker's. */
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	ibv_unimport_mr(imr);
	ibv_unimport_pd(ipd);
	CHECK(ibv_dereg_mr(smr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(spd) == 0, "the imported context's own objects go");
	CHECK(ibv_close_device(imp) == 0, "ibv_close_device(imported)");
	/* The original's MR and PD are untouched by the imported context's close. */
	CHECK(ibv_dereg_mr(mr) == 0, "the original MR is still registered");
	CHECK(ibv_dealloc_pd(pd) == 0, "the original PD is still there");
	CHECK(ibv_close_device(orig) == 0, "ibv_close_device(original)");
	OK("unimport and closing the imported context leave the original's objects to it");
	ibv_free_device_list(list);
	return 0;
}
