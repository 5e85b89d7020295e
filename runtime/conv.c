/* conv.c: conv2d with groups 1 as three calls in the GEMM path's layouts (the forward
 * product, the weight gradient, the input gradient), each of which runs on the CPU as
 * im2col (col2im) and a GEMM and on a GPU either so or as one direct or implicit-GEMM
 * kernel (templates/cuda/conv.cuh's rt_conv_*; runtime/cuda_ops.c says by shape which).
 * The compiler emits these calls in place of the im2col, GEMM and col2im instructions
 * it emitted before: the CPU's arithmetic is theirs, bit for bit, and the kernels
 * around them (the epilogue that reorders yt and adds the bias, the transposition into
 * dyt) stay as they were. The column buffers stay in the plan: the GPU's kernels that
 * need none leave them unused. */
#include "rt.h"

void rt_conv_fwd(rt_exec *e, const float *x, const float *w, float *col, float *yt, int64_t B,
                 int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                 int64_t OW, int64_t Cout)
{
    if (e->dev && RT_GPU(e)->conv_direct_fwd(e, x, w, yt, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    int64_t ckk = C * k * k, n = B * OH * OW;
    rt_im2col(e, x, col, B, C, H, W, k, s, pad, OH, OW);
    rt_gemm(e, 0, 0, Cout, n, ckk, 1.0f, w, ckk, col, n, 0.0f, yt, n);
}

void rt_conv_bwd_weight(rt_exec *e, const float *x, const float *dyt, float *col, float *dw,
                        int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                        int64_t pad, int64_t OH, int64_t OW, int64_t Cout)
{
    if (!dw)
        return;   /* a frozen layer's (the compiler emits none; NULL means not wanted) */
    if (e->dev && RT_GPU(e)->conv_direct_dw(e, x, dyt, dw, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    int64_t ckk = C * k * k, n = B * OH * OW;
    rt_im2col(e, x, col, B, C, H, W, k, s, pad, OH, OW);
    rt_gemm(e, 0, 1, Cout, ckk, n, 1.0f, dyt, n, col, n, 1.0f, dw, ckk);
}

void rt_conv_bwd_data(rt_exec *e, const float *w, const float *dyt, float *dcol, float *dx,
                      int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                      int64_t pad, int64_t OH, int64_t OW, int64_t Cout)
{
    if (e->dev && RT_GPU(e)->conv_igemm_dx(e, w, dyt, dx, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    int64_t ckk = C * k * k, n = B * OH * OW;
    rt_gemm(e, 1, 0, ckk, n, Cout, 1.0f, w, ckk, dyt, n, 0.0f, dcol, n);
    rt_col2im(e, dcol, dx, B, C, H, W, k, s, pad, OH, OW);
}
