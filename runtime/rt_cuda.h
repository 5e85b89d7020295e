/* rt_cuda.h: the CUDA device layer, internal to the runtime.
 *
 *   device_cuda.c  the driver (loaded with dlopen: a machine without one gets exit 2
 *                  and a message, not a loader error), the context, the module of
 *                  generated kernels (embedded cubin, NVRTC + disk cache, or PTX),
 *                  memory, launches, the trainer's device backend
 *   cuda_blas.c    rt_cu_gemm through cuBLASLt
 *   cuda_ops.c     the rt_cu_* twins of the CPU runtime calls (layernorm, cross
 *                  entropy, attention, ...): each computes a launch configuration and
 *                  launches a kernel of templates/cuda/ by name
 *
 * Device pointers travel in the same places host pointers do on the CPU (rt_exec's
 * arena, params, grads, in[]): the generated host code does the same pointer
 * arithmetic on both and never dereferences them, so one host.c serves both.
 */
#ifndef RT_CUDA_H
#define RT_CUDA_H

#include <cuda.h>
#include "rt_loop.h"

typedef CUdeviceptr rt_dptr;

/* Numbers a loss kernel adds up on the device; the loop reads them after a pass. */
typedef struct rt_cu_stat {
    double loss_sum;           /* sum of the per-term losses */
    unsigned long long correct;/* correct argmax predictions */
} rt_cu_stat;

/* ---- the device layer (device_cuda.c) -------------------------------------------- */

/* Launch kernel `name` of the loaded module on the compute stream. `args` as for
 * cuLaunchKernel: one pointer to each argument's value. Dies naming the kernel when
 * it does not exist or the launch fails. */
void rt_cu_launch(rt_exec *e, const char *name, unsigned gx, unsigned gy, unsigned gz,
                  unsigned bx, unsigned by, unsigned smem, void **args);
/* Scratch device memory, allocated once at set-up; valid until the next call.
 * Exits 2 when `bytes` exceeds what was reserved (a sizing bug, reported). */
rt_dptr rt_cu_scratch(rt_exec *e, size_t bytes);
/* The device rt_cu_stat that loss kernels add into (reset by the loop per pass). */
rt_dptr rt_cu_stats(rt_exec *e);
/* Multiprocessors of the device (grid sizes of grid-stride loops). */
int rt_cu_sm_count(rt_exec *e);
/* Wait for the compute stream. */
void rt_cu_sync(rt_exec *e);

/* For tests (tests/gpu/): open device 0, compile `source` with NVRTC for it and load
 * it, reserve `scratch` bytes; returns an rt_exec whose calls run on the GPU. */
rt_exec *rt_cu_test_open(const char *source, size_t scratch);
rt_dptr rt_cu_alloc(size_t bytes);                 /* set-up only (zeroed) */
void rt_cu_upload(rt_dptr dst, const void *src, size_t bytes);   /* synchronous */
void rt_cu_download(void *dst, rt_dptr src, size_t bytes);       /* synchronous */

/* ---- GEMM (cuda_blas.c) ------------------------------------------------------------ */

/* rt_gemm's contract (row-major C = alpha op(A) op(B) + beta C), on device pointers. */
void rt_cu_gemm(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                float beta, float *C, int64_t ldc);

/* ---- the ops (cuda_ops.c): each has the contract of its CPU twin in trainc_rt.h ----- */

void rt_cu_colsum_add(rt_exec *e, const float *dy, float *db, int64_t rows, int64_t cols);
void rt_cu_rowsum_add(rt_exec *e, const float *x, float *db, int64_t rows, int64_t cols);
void rt_cu_im2col(rt_exec *e, const float *x, float *col, int64_t B, int64_t C, int64_t H,
                  int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
void rt_cu_col2im(rt_exec *e, const float *dcol, float *dx, int64_t B, int64_t C, int64_t H,
                  int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
void rt_cu_maxpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_maxpool2d_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t planes,
                         int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_avgpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_avgpool2d_bwd(rt_exec *e, const float *dy, float *dx, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_layernorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                         float *mean, float *rstd, int64_t rows, int64_t d, float eps);
void rt_cu_layernorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                         const float *rstd, const float *dy, float *dx, float *dw, float *db,
                         int64_t rows, int64_t d);
/* Adds to rt_cu_stats(e); e->terms is counted on the host by the caller's twin rules. */
void rt_cu_cross_entropy(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                         int64_t rows, int64_t C);
void rt_cu_mse(rt_exec *e, const float *y, const float *t, float *dy, int64_t n);
void rt_cu_attention_fwd(rt_exec *e, const float *qkv, float *att, float *y, int64_t B,
                         int64_t T, int64_t d, int64_t H, int causal);
void rt_cu_attention_bwd(rt_exec *e, const float *qkv, const float *att, const float *dy,
                         float *dqkv, int64_t B, int64_t T, int64_t d, int64_t H, int causal);
void rt_cu_embedding_fwd(rt_exec *e, const int32_t *idx, const float *w, float *out,
                         int64_t rows, int64_t V, int64_t dim);
void rt_cu_embedding_bwd(rt_exec *e, const int32_t *idx, const float *dout, float *dw,
                         int64_t rows, int64_t V, int64_t dim);

/* The optimizer over all parameters (cuda_ops.c). Set-up uploads the per-tensor table
 * (offsets, weight decay or not) once; the step is one launch. Same contract as
 * rt_grad_norm / rt_optim_step in rt_loop.h, on device pointers. */
void rt_cu_optim_setup(rt_exec *e, const rt_train_config *c, const rt_model *m);
double rt_cu_grad_norm(rt_exec *e, const rt_model *m, rt_dptr grads);  /* synchronizes */
void rt_cu_optim_step(rt_exec *e, const rt_train_config *c, const rt_model *m, rt_dptr params,
                      rt_dptr grads, rt_dptr state, int64_t t, double lr, float gscale, int clip);

#endif
