/* Stand-ins for rdma-core's vendor libraries (libmlx5.so.1, libefa.so.1) that perftest's
 * binaries link: every function reports that the device is not an mlx5 / EFA device
 * (EOPNOTSUPP, or NULL with errno set). perftest only calls them for those devices, so on
 * rnic they are loaded and never called; they exist so that a program never fails to start
 * for want of them. scripts/build-ibverbs.sh compiles this file twice (-DRNIC_MLX5 and
 * -DRNIC_EFA), each with its version script. */
#include <errno.h>
#include <stddef.h>

#define FAIL_PTR { errno = EOPNOTSUPP; return NULL; }
#define FAIL_INT { return EOPNOTSUPP; }

#ifdef RNIC_MLX5
void *mlx5dv_open_device(void *device, void *attr) FAIL_PTR
void *mlx5dv_create_qp(void *context, void *qp_attr, void *mlx5_qp_attr) FAIL_PTR
void *mlx5dv_qp_ex_from_ibv_qp_ex(void *qp) FAIL_PTR
void *mlx5dv_create_mkey(void *attr) FAIL_PTR
int mlx5dv_destroy_mkey(void *mkey) FAIL_INT
int mlx5dv_devx_general_cmd(void *context, const void *in, size_t inlen, void *out, size_t outlen) FAIL_INT
int mlx5dv_crypto_login(void *context, void *login_attr) FAIL_INT
void *mlx5dv_dek_create(void *context, void *init_attr) FAIL_PTR
int mlx5dv_dek_destroy(void *dek) FAIL_INT
#endif

#ifdef RNIC_EFA
int efadv_query_device(void *ibvctx, void *attr, unsigned int inlen) FAIL_INT
void *efadv_create_qp_ex(void *ibvctx, void *attr_ex, void *efa_attr, unsigned int inlen) FAIL_PTR
#endif
