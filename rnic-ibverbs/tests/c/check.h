/* What the C tests share: the check and report macros, waiting for a completion, and
 * bringing an RC QP from RESET to RTS. Each test prints "ok: ..." per check; on the first
 * failure it prints "FAIL: ..." and exits 1. */
#ifndef RNIC_TEST_CHECK_H
#define RNIC_TEST_CHECK_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL: " __VA_ARGS__); printf(" (errno %d %s)\n", errno, strerror(errno)); fflush(stdout); exit(1); } } while (0)
#define OK(...) do { printf("ok: " __VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

/* The next completion of `cq`, polled for at most 20 s. */
static inline struct ibv_wc wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	time_t t0 = time(NULL);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "%s: ibv_poll_cq returned %d", what, n);
		if (n == 1)
			return wc;
		CHECK(time(NULL) - t0 < 20, "%s: no completion within 20 s", what);
	}
}

/* RESET -> INIT -> RTR -> RTS towards `dest_qpn` at `dgid` (GID index 1 as the source),
 * both directions starting at `psn`, with `rd_atomic` READs/atomics outstanding and the
 * remote `access` given. */
static inline void rc_connect(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid dgid, uint32_t psn,
			      uint8_t rd_atomic, unsigned access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = dgid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0, "to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = rd_atomic;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0, "to RTS");
	CHECK(qp->state == IBV_QPS_RTS, "qp->state follows modify");
}

#endif
