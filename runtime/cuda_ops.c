/* cuda_ops.c: the GPU twins of the runtime's kernel calls (rt_cuda.h's ops and
 * optimizer). Each wrapper only works out a launch configuration and launches kernels
 * of templates/cuda/ by name: what a kernel computes, and its launch shape, is written
 * above it there. Kernels whose shapes are compile-time constants are named by them
 * (rt_layernorm_fwd_768, rt_attention_fwd_1024_64_1, ...); trainc emits one instance
 * per shape the model uses, and a missing one is reported by rt_cu_launch.
 *
 * The contract of each call is its CPU twin's (kernels.h's files, attention.c, optim.c):
 * overwritten vs accumulated outputs, masked entries, e->terms counted on the host as
 * the twin counts it (the loss sum and correct count are added on the device into
 * rt_cu_stats). Reductions go through scratch in a fixed order, so every call gives the
 * same bits on every run. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt_cuda.h"
#include "rt_dist.h"

/* The kernels' fixed block shapes and chunk sizes (the same numbers as templates/cuda/). */
#define RT_ATT_THREADS 128     /* attention.cuh */
#define RT_ATT90_THREADS 384   /* sm90_attention.cuh: a producer and two consumer warpgroups */
#define RT_ATT90_ROWS 128      /* its query and key tiles */
#define RT_EMB_THREADS 256     /* embedding.cuh: embedding_bwd's list and column stride */
#define RT_DEC_CHUNK 1024      /* decode.cuh: keys a chunk of the online softmax */
#define RT_MSE_CHUNK 8192      /* loss.cuh */
#define RT_OPT_CHUNK 16384     /* optim.cuh */
#define RT_FP8_PARTS 256       /* fp8.cuh: rt_fp8_amax's blocks at most */
/* Partials of a column reduction: at most this many bytes of scratch (device_cuda.c
 * reserves 16 MiB beyond the per-model needs). */
#define PART_BYTES (8u << 20)

unsigned rt_cu_grid_for(rt_exec *e, int64_t n)
{
    int64_t blocks = cdiv(n, 256), cap = (int64_t)rt_cu_sm_count(e) * 32;
    return (unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
}

/* Threads for one block per row of n elements: a multiple of 32 that covers the row
 * in 16-byte loads, at most 1024. */
static unsigned row_threads(int64_t n)
{
    int64_t t = cdiv(cdiv(n, 4), 32) * 32;
    return (unsigned)(t < 32 ? 32 : t > 1024 ? 1024 : t);
}

/* Row blocks of a column reduction of [rows, cols] with `halves` partial matrices:
 * about 64 rows a block, at most 256 blocks, partials within PART_BYTES. Depends on
 * the shape only, so the sum order does too. */
static int64_t row_blocks(int64_t rows, int64_t cols, int halves, int64_t *rb)
{
    int64_t nrb = rows / 64, cap = (int64_t)PART_BYTES / (cols * 8 * halves);
    if (nrb > 256)
        nrb = 256;
    if (nrb > cap)
        nrb = cap;
    if (nrb < 1)
        nrb = 1;
    *rb = cdiv(rows, nrb);
    return cdiv(rows, *rb);
}

/* ---- bias gradients -------------------------------------------------------------------- */

/* part (nrb x cols doubles) into out[cols] (+=), partials added in a fixed order (reduce.cuh) */
static void colsum_finish(rt_exec *e, rt_dptr part, float *out, int64_t nrb, int64_t cols)
{
    void *args[] = {&part, &out, &nrb, &cols};
    rt_cu_launch(e, "rt_colsum_finish", gdim(cdiv(cols, 32), GX, "colsum"), 1, 1, 32, 8, 0, args);
}

void rt_cu_colsum_add(rt_exec *e, const float *dy, float *db, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return;
    int64_t rb, nrb = row_blocks(rows, cols, 1, &rb);
    rt_dptr part = rt_cu_scratch(e, (size_t)(nrb * cols) * sizeof(double));
    void *args[] = {&dy, &part, &rows, &cols, &rb};
    rt_cu_launch(e, "rt_colsum_part", gdim(cdiv(cols, 32), GX, "colsum"),
                 gdim(nrb, GYZ, "colsum"), 1, 32, 8, 0, args);
    colsum_finish(e, part, db, nrb, cols);
}

void rt_cu_rowsum_add(rt_exec *e, const float *x, float *db, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return;
    /* column chunks of 16K elements (more when 65535 chunks would not cover a row) */
    int64_t cb = cdiv(cols, GYZ) > 16384 ? cdiv(cols, GYZ) : 16384, ncb = cdiv(cols, cb);
    rt_dptr part = rt_cu_scratch(e, (size_t)(rows * ncb) * sizeof(double));
    void *a1[] = {&x, &part, &cols, &cb};
    rt_cu_launch(e, "rt_rowsum_part", gdim(rows, GX, "rowsum"), (unsigned)ncb, 1, 256, 1, 0, a1);
    void *a2[] = {&part, &db, &rows, &ncb};
    rt_cu_launch(e, "rt_rowsum_finish", rt_cu_grid_for(e, rows), 1, 1, 256, 1, 0, a2);
}

/* ---- convolution and pooling ----------------------------------------------------------- */

/* conv.cuh's rt_fdiv: n / d = umulhi(n, m) >> s for every n < 2^31, with l = ceil(log2 d),
 * m = ceil(2^(31 + l) / d), s = l - 1; d = 1 has m = 0. A divisor of 2^31 or more
 * only occurs with the wide (64-bit) path, which ignores these. */
typedef struct {
    uint32_t d, m, s;
} fdiv_t;

static fdiv_t fdiv(int64_t d)
{
    fdiv_t f = {0, 0, 0};
    if (d < 1 || d > INT32_MAX)
        return f;
    f.d = (uint32_t)d;
    if (d == 1)
        return f;
    int l = 0;
    while ((1LL << l) < d)
        l++;
    f.m = (uint32_t)(((1ULL << (31 + l)) + (uint64_t)d - 1) / (uint64_t)d);
    f.s = (uint32_t)(l - 1);
    return f;
}

/* conv.cuh's `wide`: 64-bit indices when a tensor of the call has 2^31 elements or more,
 * or always after rt_cu_force_wide_index(1) (tests/gpu/check_ops checks that path on
 * small shapes with it). */
static int force_wide;

void rt_cu_force_wide_index(int on) { force_wide = on; }

static int wide_index(int64_t a, int64_t b)
{
    return force_wide || a > INT32_MAX || b > INT32_MAX;
}

void rt_cu_im2col(rt_exec *e, const float *x, float *col, int64_t B, int64_t C, int64_t H,
                  int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    int64_t n = C * k * k * B * OH * OW;
    if (n <= 0)
        return;
    int wide = wide_index(n, B * C * H * W);
    fdiv_t f0 = fdiv(OH * OW), f1 = fdiv(OW), f2 = fdiv(B * OH * OW);
    void *args[] = {&x, &col, &B, &C, &H, &W, &k, &stride, &pad, &OH, &OW, &wide, &f0, &f1, &f2};
    rt_cu_launch(e, "rt_im2col", rt_cu_grid_for(e, C * B * OH * OW), 1, 1, 256, 1, 0, args);
}

void rt_cu_col2im(rt_exec *e, const float *dcol, float *dx, int64_t B, int64_t C, int64_t H,
                  int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    int64_t n = B * C * H * W;
    if (n <= 0)
        return;
    int wide = wide_index(n, C * k * k * B * OH * OW);
    fdiv_t f0 = fdiv(W), f1 = fdiv(H), f2 = fdiv(C), f3 = fdiv(stride);
    void *args[] = {&dcol, &dx, &B,    &C,  &H,  &W,  &k,  &stride,
                    &pad,  &OH, &OW,   &wide, &f0, &f1, &f2, &f3};
    rt_cu_launch(e, "rt_col2im", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

/* conv2d with groups 1 without im2col's columns (conv.c's calls, conv.cuh's rt_conv_*).
 * Which shapes take a kernel depends on the shape and the activations' width alone, so
 * a call's sum order never depends on the GPU it runs on:
 *   - the direct forward pass and weight gradient where a window holds at most
 *     RT_CONV_DIRECT_KK values and the weights fit a block's shared memory (a first
 *     layer: 1 to 3 channels at 3x3). The GEMM there has K = C*k*k (9 for one grey
 *     channel): nothing to reuse, while the columns are C*k*k times the output's
 *     positions, written and read again; the kernels read x once.
 *   - the implicit-GEMM input gradient at stride 1 (a strided one would gather mostly
 *     zeros) where a cost model says it beats the dcol GEMM and col2im: per dx element
 *     both do 2 Cout k*k flops, the implicit GEMM on CUDA cores (IG_FLOPS, times the
 *     unused lanes of a 32-channel tile when C is not a multiple of 32), the GEMM at
 *     SGEMM_FLOPS (fp32: cuBLASLt runs without TF32) or TC_FLOPS (16-bit, tensor
 *     cores), plus dcol's k*k elements written and read at BW. The constants are
 *     estimates for an H100/H200-class GPU, to be replaced by measured ones; with them
 *     fp32 takes the kernel for Cout*k*k*waste up to about 580 (32 channels in and out
 *     at 3x3), 16-bit almost never.
 *   - with 16-bit activations, the forward and the weight gradient of the other shapes
 *     (any stride) and the input gradient at stride 1 as implicit GEMMs on the tensor
 *     cores where conv_tc_pays says so: up to about 100 output channels (the forward's
 *     Cout, the gradient's C) by the same estimates (IG_TC_FLOPS, those kernels' rate,
 *     unmeasured), where the columns would not stay in the L2 cache (COL_L2_BYTES).
 * TRAINC_CONV_KERNELS=0 turns the kernels off (the GEMM path everywhere), =all on for
 * every shape they can take, the cost model ignored (tests compare the two paths). */
#define IG_FLOPS 20e12
#define SGEMM_FLOPS 40e12
#define TC_FLOPS 300e12
#define IG_TC_FLOPS 100e12
#define COL_L2_BYTES 16e6
#define BW 3e12
#define RT_CONV_DIRECT_KK 32   /* conv.cuh's */
#define RT_CONV_DIRECT_W 4096
#define RT_CONV_DIRECT_CO 8

static int conv_mode = -1;   /* 0 off, 1 by the rules, 2 wherever they apply, 3 as 2
                                but for the tensor cores' (check_ops: the others' shapes) */

void rt_cu_conv_kernels(int mode) { conv_mode = mode; }

static int conv_kernels(void)
{
    if (conv_mode < 0) {
        const char *v = getenv("TRAINC_CONV_KERNELS");
        conv_mode = v && !strcmp(v, "0") ? 0 : v && !strcmp(v, "all") ? 2 : 1;
    }
    return conv_mode;
}

/* (an image's C*H*W values within 32-bit offsets: the window's arithmetic) */
static int conv_direct_fits(int64_t C, int64_t H, int64_t W, int64_t k, int64_t Cout)
{
    return conv_kernels() > 0 && C * k * k <= RT_CONV_DIRECT_KK &&
           Cout * C * k * k <= RT_CONV_DIRECT_W && C * H * W <= INT32_MAX;
}

static int conv_igemm_pays(rt_exec *e, int64_t C, int64_t k, int64_t s, int64_t Cout)
{
    if (conv_kernels() == 0 || s != 1)
        return 0;
    if (conv_kernels() >= 2)
        return 1;
    int act16 = rt_cu_act16(e) != 0;
    double f = 2.0 * (double)(Cout * k * k), waste = (double)(cdiv(C, 32) * 32) / (double)C;
    double igemm = f * waste / IG_FLOPS;
    double gemm = f / (act16 ? TC_FLOPS : SGEMM_FLOPS) + 2.0 * (act16 ? 2 : 4) * (double)(k * k) / BW;
    return igemm < gemm;
}

/* A tensor-core implicit GEMM (16-bit activations) of M output channels over K against
 * the GEMM path, per output position: 2 M K flops at IG_TC_FLOPS (its tiles of 64
 * channels counted whole) against the GEMM's at TC_FLOPS plus the columns' ncol 16-bit
 * values a position written and read at BW (the forward's col: C k k; the input
 * gradient's dcol: C k k too). The kernel for M up to about 100, where the columns of
 * np positions pass COL_L2_BYTES: smaller ones stay in the L2 cache (50 MB on an
 * H100) between the kernel that writes them and the GEMM that reads them, which then
 * costs little more than its flops. */
static int conv_tc_pays(rt_exec *e, int64_t M, int64_t K, int64_t ncol, int64_t np)
{
    if (conv_kernels() == 0 || conv_kernels() == 3 || !rt_cu_act16(e))
        return 0;
    if (conv_kernels() == 2)
        return 1;
    if (2.0 * (double)ncol * (double)np < COL_L2_BYTES)
        return 0;
    double f = 2.0 * (double)M * (double)K;
    double igemm = 2.0 * (double)(cdiv(M, 64) * 64) * (double)K / IG_TC_FLOPS;
    return igemm < f / TC_FLOPS + 2.0 * 2.0 * (double)ncol / BW;
}

int rt_cu_conv_igemm_fwd(rt_exec *e, const float *x, const float *w, float *yt, int64_t B,
                         int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                         int64_t OH, int64_t OW, int64_t Cout)
{
    if (!conv_tc_pays(e, Cout, C * k * k, C * k * k, B * OH * OW))
        return 0;
    int64_t np = B * OH * OW;
    if (np <= 0 || Cout <= 0)
        return 1;
    void *args[] = {&x, &w, &yt, &B, &C, &H, &W, &k, &s, &pad, &OH, &OW, &Cout};
    rt_cu_launch(e, "rt_conv_igemm_fwd_tc", gdim(cdiv(np, 128), GX, "conv_igemm_fwd"),
                 gdim(cdiv(Cout, 64), GYZ, "conv_igemm_fwd"), 1, 128, 1, 0, args);
    return 1;
}

/* The forward without columns: the direct kernel where a window is small, else the
 * tensor cores' implicit GEMM where it pays; 0 leaves the GEMM path to the caller. */
int rt_cu_conv_direct_fwd(rt_exec *e, const float *x, const float *w, float *yt, int64_t B,
                          int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                          int64_t OH, int64_t OW, int64_t Cout)
{
    if (!conv_direct_fits(C, H, W, k, Cout))
        return rt_cu_conv_igemm_fwd(e, x, w, yt, B, C, H, W, k, s, pad, OH, OW, Cout);
    int64_t n = cdiv(Cout, RT_CONV_DIRECT_CO) * B * OH * OW;
    if (n <= 0)
        return 1;
    void *args[] = {&x, &w, &yt, &B, &C, &H, &W, &k, &s, &pad, &OH, &OW, &Cout};
    rt_cu_launch(e, "rt_conv_direct_fwd", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
    return 1;
}

/* A weight gradient's slices of positions (the direct and the tensor cores' kernels):
 * L positions, at least 4096 (a block's 256 threads 16 each), more where the partials
 * (n weights x slices doubles) would pass PART_BYTES; from the shape alone, as the
 * order of the sums. */
static int64_t dw_slice(int64_t np, int64_t n)
{
    int64_t per = (int64_t)(PART_BYTES / (size_t)(8 * n)), L = 4096;
    if (per < 1)
        per = 1;
    if (cdiv(np, L) > per)
        L = cdiv(np, per);
    return L;
}

/* dw += the S slices' partials, in slice order (conv.cuh's rt_conv_direct_dw_sum) */
static void dw_sum(rt_exec *e, rt_dptr part, float *dw, int64_t n, int64_t ckk, int64_t S)
{
    void *args[] = {&part, &dw, &n, &ckk, &S};
    rt_cu_launch(e, "rt_conv_direct_dw_sum", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

/* The tensor cores' weight gradient (16-bit activations) where conv_tc_pays says so
 * (the backward's im2col saved) and a slice's partials fit PART_BYTES; slices of L
 * positions as the direct kernel's, from the shape alone. */
int rt_cu_conv_igemm_dw(rt_exec *e, const float *x, const float *dyt, float *dw, int64_t B,
                        int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                        int64_t OH, int64_t OW, int64_t Cout)
{
    int64_t np = B * OH * OW, ckk = C * k * k, n = Cout * ckk;
    if (!conv_tc_pays(e, Cout, ckk, ckk, np) || (size_t)(8 * n) > PART_BYTES)
        return 0;
    if (np <= 0 || n <= 0)
        return 1;
    int64_t L = dw_slice(np, n), S = cdiv(np, L);
    rt_dptr part = rt_cu_scratch(e, (size_t)(S * n) * sizeof(double));
    void *args[] = {&x, &dyt, &part, &B, &C, &H, &W, &k, &s, &pad, &OH, &OW, &Cout, &L};
    rt_cu_launch(e, "rt_conv_igemm_dw_tc", gdim(S, GX, "conv_igemm_dw"),
                 gdim(cdiv(ckk, 128), GYZ, "conv_igemm_dw"), gdim(cdiv(Cout, 64), GYZ, "conv_igemm_dw"),
                 128, 1, 0, args);
    dw_sum(e, part, dw, n, ckk, S);
    return 1;
}

/* The weight gradient without columns: the direct kernel where a window is small, else
 * the tensor cores' where that pays; 0 leaves im2col and the GEMM to the caller. */
int rt_cu_conv_direct_dw(rt_exec *e, const float *x, const float *dyt, float *dw, int64_t B,
                         int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                         int64_t OH, int64_t OW, int64_t Cout)
{
    if (!conv_direct_fits(C, H, W, k, Cout))
        return rt_cu_conv_igemm_dw(e, x, dyt, dw, B, C, H, W, k, s, pad, OH, OW, Cout);
    int64_t np = B * OH * OW, ckk = C * k * k, n = Cout * ckk;
    if (np <= 0 || n <= 0)
        return 1;
    int64_t L = dw_slice(np, n), S = cdiv(np, L);
    rt_dptr part = rt_cu_scratch(e, (size_t)(S * n) * sizeof(double));
    void *args[] = {&x, &dyt, &part, &B, &C, &H, &W, &k, &s, &pad, &OH, &OW, &L};
    rt_cu_launch(e, "rt_conv_direct_dw_part", gdim(S, GX, "conv_direct_dw"),
                 gdim(Cout, GYZ, "conv_direct_dw"), 1, 256, 1, 0, args);
    dw_sum(e, part, dw, n, ckk, S);
    return 1;
}

/* conv.cuh's rt_conv_igemm_dx_tc (stride 1, 16-bit activations); always launches. */
int rt_cu_conv_igemm_dx_tc(rt_exec *e, const float *w, const float *dyt, float *dx, int64_t B,
                           int64_t C, int64_t H, int64_t W, int64_t k, int64_t pad, int64_t OH,
                           int64_t OW, int64_t Cout)
{
    int64_t np = B * H * W;
    if (np <= 0 || C <= 0)
        return 1;
    void *args[] = {&w, &dyt, &dx, &B, &C, &H, &W, &k, &pad, &OH, &OW, &Cout};
    rt_cu_launch(e, "rt_conv_igemm_dx_tc", gdim(cdiv(np, 128), GX, "conv_igemm_dx"),
                 gdim(cdiv(C, 64), GYZ, "conv_igemm_dx"), 1, 128, 1, 0, args);
    return 1;
}

/* The input gradient at stride 1 without dcol: on the tensor cores where that pays
 * (16-bit), else the CUDA cores' kernel where its cost model says so; 0 leaves the
 * dcol GEMM and col2im to the caller. */
int rt_cu_conv_igemm_dx(rt_exec *e, const float *w, const float *dyt, float *dx, int64_t B,
                        int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                        int64_t OH, int64_t OW, int64_t Cout)
{
    if (s == 1 && conv_tc_pays(e, C, Cout * k * k, C * k * k, B * H * W))
        return rt_cu_conv_igemm_dx_tc(e, w, dyt, dx, B, C, H, W, k, pad, OH, OW, Cout);
    if (!conv_igemm_pays(e, C, k, s, Cout))
        return 0;
    int64_t np = B * H * W;
    if (np <= 0 || C <= 0)
        return 1;
    void *args[] = {&w, &dyt, &dx, &B, &C, &H, &W, &k, &pad, &OH, &OW, &Cout};
    rt_cu_launch(e, "rt_conv_igemm_dx", gdim(cdiv(np, 128), GX, "conv_igemm_dx"),
                 gdim(cdiv(C, 32), GYZ, "conv_igemm_dx"), 1, 256, 1, 0, args);
    return 1;
}

/* conv2d with groups > 1 (conv.cuh's rt_gconv_*): a thread an output of the forward
 * pass and of the input gradient (their indices split as im2col's: `wide` and the
 * divisors), a block a weight (and bias) gradient. */
void rt_cu_gconv_fwd(rt_exec *e, const float *x, const float *w, const float *bias, float *y,
                     int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                     int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G)
{
    int64_t n = B * Cout * OH * OW;
    if (n <= 0)
        return;
    int wide = wide_index(n, B * C * H * W);
    fdiv_t f0 = fdiv(OW), f1 = fdiv(OH), f2 = fdiv(Cout), f3 = fdiv(Cout / G);
    void *args[] = {&x,  &w,  &bias, &y,    &B,  &C,  &H,  &W,  &k,  &s,
                    &pad, &OH, &OW,  &Cout, &G,  &wide, &f0, &f1, &f2, &f3};
    rt_cu_launch(e, "rt_gconv_fwd", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_gconv_bwd_data(rt_exec *e, const float *dy, const float *w, float *dx, int64_t B,
                          int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                          int64_t OH, int64_t OW, int64_t Cout, int64_t G)
{
    int64_t n = B * C * H * W;
    if (n <= 0)
        return;
    int wide = wide_index(n, B * Cout * OH * OW);
    fdiv_t f0 = fdiv(W), f1 = fdiv(H), f2 = fdiv(C), f3 = fdiv(C / G), f4 = fdiv(s);
    void *args[] = {&dy,  &w,  &dx, &B,    &C, &H,    &W,  &k,  &s,  &pad, &OH,
                    &OW,  &Cout, &G, &wide, &f0, &f1, &f2, &f3, &f4};
    rt_cu_launch(e, "rt_gconv_bwd_data", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_gconv_bwd_weight(rt_exec *e, const float *x, const float *dy, float *dw, float *db,
                            int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                            int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G)
{
    int64_t blocks = Cout * (C / G) * k * k + (db ? Cout : 0);
    if (blocks <= 0)
        return;
    void *args[] = {&x, &dy, &dw, &db, &B, &C, &H, &W, &k, &s, &pad, &OH, &OW, &Cout, &G};
    rt_cu_launch(e, "rt_gconv_bwd_weight", gdim(blocks, GX, "gconv_bwd_weight"), 1, 1, 256, 1,
                 0, args);
}

void rt_cu_gather_augment(rt_exec *e, const void *data, const int32_t *idx, void *dst,
                          int64_t rows, int64_t C, int64_t H, int64_t W, int64_t elem,
                          int64_t pad, int hflip, uint64_t seed, int64_t epoch)
{
    int64_t n = rows * C * H * W;
    if (n <= 0)
        return;
    void *args[] = {&data, &idx, &dst, &rows, &C, &H, &W, &elem, &pad, &hflip, &seed, &epoch};
    rt_cu_launch(e, "rt_gather_augment", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_gather_resized_crop(rt_exec *e, const void *data, const int32_t *idx, void *dst,
                               int64_t rows, int64_t C, int64_t H, int64_t W, const rt_rrc *k,
                               int hflip, uint64_t seed, int64_t epoch)
{
    if (rows <= 0 || C * H * W <= 0)
        return;
    double smin = k->smin, smax = k->smax, r0 = k->r0, r1 = k->r1, lr0 = k->lr0, lr1 = k->lr1;
    void *args[] = {&data, &idx, &dst, &C, &H, &W, &smin, &smax, &r0, &r1, &lr0, &lr1,
                    &hflip, &seed, &epoch};
    rt_cu_launch(e, "rt_gather_resized_crop", (unsigned)rows, 1, 1, 256, 1, 0, args);
}

void rt_cu_color_jitter(rt_exec *e, void *x, const int32_t *idx, int64_t rows, int64_t C,
                        int64_t H, int64_t W, const rt_jitter *k, uint64_t seed, int64_t epoch)
{
    if (rows <= 0)
        return;
    double b = k->v[0], c = k->v[1], s = k->v[2], h = k->v[3];
    void *args[] = {&x, &idx, &C, &H, &W, &b, &c, &s, &h, &seed, &epoch};
    rt_cu_launch(e, "rt_color_jitter", (unsigned)rows, 1, 1, 256, 1, 0, args);
}

void rt_cu_mask_tokens(rt_exec *e, void *x, void *y, const int32_t *idx, int64_t rows, int64_t T,
                       const rt_mask_rule *k, int64_t epoch)
{
    int64_t n = rows * T;
    if (n <= 0)
        return;
    int token = k->token, ignore = k->ignore;
    unsigned choose = k->choose, masked = k->masked, swapped = k->swapped;
    int64_t vocab = k->vocab;
    uint64_t seed = k->seed;
    void *args[] = {&x, &y, &idx, &rows, &T, &token, &ignore, &vocab, &choose, &masked,
                    &swapped, &seed, &epoch};
    rt_cu_launch(e, "rt_mask_tokens", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

/* The pooling kernels: x [planes, H, W], y [planes, OH, OW]; a thread a forward output
 * (its row and plane: divisions by OW and OH) or a backward one (by W and H), then by
 * the stride. */
static void pool_launch(rt_exec *e, const char *name, int fwd, void *p0, void *p1, void *p2,
                        int64_t planes, int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH,
                        int64_t OW)
{
    int64_t nx = planes * H * W, ny = planes * OH * OW, n = fwd ? ny : nx;
    if (n <= 0)
        return;
    int wide = wide_index(nx, ny);
    fdiv_t f0 = fdiv(fwd ? OW : W), f1 = fdiv(fwd ? OH : H), f2 = fdiv(s);
    void *shape[] = {&planes, &H, &W, &k, &s, &OH, &OW, &wide, &f0, &f1, &f2};
    void *args[14];
    int a = 0;
    args[a++] = p0;
    args[a++] = p1;
    if (p2)
        args[a++] = p2;
    for (int i = 0; i < 11; i++)
        args[a++] = shape[i];
    rt_cu_launch(e, name, rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_maxpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    pool_launch(e, "rt_maxpool2d_fwd", 1, &x, &y, NULL, planes, H, W, k, s, OH, OW);
}

void rt_cu_maxpool2d_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t planes,
                         int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (s != k) {
        pool_launch(e, "rt_maxpool2d_bwd", 0, &x, &dy, &dx, planes, H, W, k, s, OH, OW);
        return;
    }
    /* windows that tile the input: a thread per window (conv.cuh's
     * rt_maxpool2d_bwd_tiles) instead of one per input element searching the windows
     * that cover it (each window's maximum found k*k times) */
    int64_t CH = cdiv(H, k), CW = cdiv(W, k), n = planes * CH * CW;
    if (n <= 0)
        return;
    int wide = wide_index(planes * H * W, planes * OH * OW);
    fdiv_t f0 = fdiv(CW), f1 = fdiv(CH);
    void *args[] = {&x, &dy, &dx, &planes, &H, &W, &k, &OH, &OW, &wide, &f0, &f1};
    rt_cu_launch(e, "rt_maxpool2d_bwd_tiles", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_avgpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    pool_launch(e, "rt_avgpool2d_fwd", 1, &x, &y, NULL, planes, H, W, k, s, OH, OW);
}

void rt_cu_avgpool2d_bwd(rt_exec *e, const float *dy, float *dx, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    pool_launch(e, "rt_avgpool2d_bwd", 0, &dy, &dx, NULL, planes, H, W, k, s, OH, OW);
}

/* ---- LayerNorm ------------------------------------------------------------------------- */

/* A layernorm kernel over rows of d: a warp a row, 8 rows a block, where layernorm.cuh's
 * rt_ln_warp(d) (the row in registers); else a block a row. */
static void ln_launch(rt_exec *e, const char *name, int64_t rows, int64_t d, void **args)
{
    if (d % 128 == 0 && d <= 1024)
        rt_cu_launch(e, name, gdim(cdiv(rows, 8), GX, name), 1, 1, 32 * 8, 1, 0, args);
    else
        rt_cu_launch(e, name, gdim(rows, GX, name), 1, 1, row_threads(d), 1, 0, args);
}

void rt_cu_layernorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                         float *mean, float *rstd, int64_t rows, int64_t d, float eps)
{
    if (rows <= 0 || d <= 0)
        return;
    char name[64];
    snprintf(name, sizeof name, "rt_layernorm_fwd_%lld", (long long)d);
    rt_dptr slot = rt_cu_fp8_out_slot(e);   /* (an argument of fp8-mixed's kernels only) */
    void *args[] = {&x, &w, &b, &y, &mean, &rstd, &eps, &rows, &slot};
    ln_launch(e, name, rows, d, args);
}

void rt_cu_layernorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                         const float *rstd, const float *dy, const float *add, float *dx,
                         float *dw, float *db, int64_t rows, int64_t d)
{
    if (rows <= 0 || d <= 0)
        return;
    /* dw, db partials first (none without them: a layernorm's `affine` false): they
     * read x and dy, which dx may overwrite */
    int64_t rb, nrb = row_blocks(rows, d, 2, &rb);
    rt_dptr part = dw || db ? rt_cu_scratch(e, (size_t)(2 * nrb * d) * sizeof(double)) : 0;
    void *a1[] = {&x, &dy, &mean, &rstd, &part, &rows, &d, &rb};
    if (part)
        rt_cu_launch(e, "rt_layernorm_dwdb", gdim(cdiv(d, 32), GX, "layernorm"),
                     gdim(nrb, GYZ, "layernorm"), 1, 32, 8, 0, a1);
    char name[64];
    snprintf(name, sizeof name, "rt_layernorm_bwd_%lld", (long long)d);
    rt_dptr slot = rt_cu_fp8_out_slot(e);
    void *a2[] = {&x, &w, &mean, &rstd, &dy, &add, &dx, &rows, &slot};
    ln_launch(e, name, rows, d, a2);
    if (dw)
        colsum_finish(e, part, dw, nrb, d);
    if (db)   /* none for a layernorm whose `bias` is false */
        colsum_finish(e, part + (rt_dptr)(nrb * d) * sizeof(double), db, nrb, d);
}

/* ---- RMSNorm and the gated linear unit ------------------------------------------------------ */

void rt_cu_rmsnorm_fwd(rt_exec *e, const float *x, const float *w, float *y, float *rstd,
                       int64_t rows, int64_t d, float eps)
{
    if (rows <= 0 || d <= 0)
        return;
    char name[64];
    snprintf(name, sizeof name, "rt_rmsnorm_fwd_%lld", (long long)d);
    rt_dptr slot = rt_cu_fp8_out_slot(e);
    void *args[] = {&x, &w, &y, &rstd, &eps, &rows, &slot};
    ln_launch(e, name, rows, d, args);
}

void rt_cu_rmsnorm_bwd(rt_exec *e, const float *x, const float *w, const float *rstd,
                       const float *dy, const float *add, float *dx, float *dw, int64_t rows,
                       int64_t d)
{
    if (rows <= 0 || d <= 0)
        return;
    /* dw's partials first: they read x and dy, which dx may overwrite */
    int64_t rb, nrb = row_blocks(rows, d, 1, &rb);
    rt_dptr part = rt_cu_scratch(e, (size_t)(nrb * d) * sizeof(double));
    void *a1[] = {&x, &dy, &rstd, &part, &rows, &d, &rb};
    rt_cu_launch(e, "rt_rmsnorm_dw", gdim(cdiv(d, 32), GX, "rmsnorm"), gdim(nrb, GYZ, "rmsnorm"),
                 1, 32, 8, 0, a1);
    char name[64];
    snprintf(name, sizeof name, "rt_rmsnorm_bwd_%lld", (long long)d);
    rt_dptr slot = rt_cu_fp8_out_slot(e);
    void *a2[] = {&x, &w, &rstd, &dy, &add, &dx, &rows, &slot};
    ln_launch(e, name, rows, d, a2);
    colsum_finish(e, part, dw, nrb, d);
}

/* attention's qk_norm "all_heads" (layernorm.cuh): a block a row */
void rt_cu_qk_norm_fwd(rt_exec *e, const float *x, const float *wq, const float *wk, float *y,
                       float *rstd, int64_t rows, int64_t dq, int64_t dk, int64_t dv, float eps)
{
    if (rows <= 0)
        return;
    void *args[] = {&x, &wq, &wk, &y, &rstd, &rows, &dq, &dk, &dv, &eps};
    rt_cu_launch(e, "rt_qk_norm_fwd", gdim(rows, GX, "qk_norm"), 1, 1, 256, 1, 0, args);
}

void rt_cu_qk_norm_bwd(rt_exec *e, const float *x, const float *wq, const float *wk,
                       const float *rstd, const float *dy, float *dx, float *dwq, float *dwk,
                       int64_t rows, int64_t dq, int64_t dk, int64_t dv)
{
    if (rows <= 0)
        return;
    if (dwq && dwk) {   /* the partials first, as rmsnorm's (a frozen layer's: none) */
        int64_t rb, nrb = row_blocks(rows, dq + dk, 1, &rb);
        rt_dptr part = rt_cu_scratch(e, (size_t)(nrb * (dq + dk)) * sizeof(double));
        void *a1[] = {&x, &dy, &rstd, &part, &rows, &dq, &dk, &dv, &rb, &nrb};
        rt_cu_launch(e, "rt_qk_norm_dw", gdim(cdiv(dq + dk, 32), GX, "qk_norm"),
                     gdim(nrb, GYZ, "qk_norm"), 1, 32, 8, 0, a1);
        colsum_finish(e, part, dwq, nrb, dq);
        colsum_finish(e, part + (rt_dptr)(nrb * dq) * sizeof(double), dwk, nrb, dk);
    }
    void *a2[] = {&x, &wq, &wk, &rstd, &dy, &dx, &rows, &dq, &dk, &dv};
    rt_cu_launch(e, "rt_qk_norm_bwd", gdim(rows, GX, "qk_norm"), 1, 1, 256, 1, 0, a2);
}

void rt_cu_glu_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act)
{
    if (rows <= 0 || h <= 0)
        return;
    rt_dptr slot = rt_cu_fp8_out_slot(e);   /* (an argument of fp8-mixed's kernels only) */
    void *args[] = {&x, &y, &rows, &h, &act, &slot};
    /* a block a row at a time, at most rt_cu_grid_for's blocks (glu.cuh) */
    rt_cu_launch(e, "rt_glu_fwd", rt_cu_grid_for(e, rows * 256), 1, 1, 256, 1, 0, args);
}

void rt_cu_glu_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                   int64_t h, int act)
{
    if (rows <= 0 || h <= 0)
        return;
    rt_dptr slot = rt_cu_fp8_out_slot(e);
    void *args[] = {&x, &dy, &dx, &rows, &h, &act, &slot};
    rt_cu_launch(e, "rt_glu_bwd", rt_cu_grid_for(e, rows * 256), 1, 1, 256, 1, 0, args);
}

/* the gated variant (a moe layer's shared expert): a block a row, as glu's */
void rt_cu_glu_gated_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act)
{
    if (rows <= 0 || h <= 0)
        return;
    void *args[] = {&x, &y, &rows, &h, &act};
    rt_cu_launch(e, "rt_glu_gated_fwd", rt_cu_grid_for(e, rows * 256), 1, 1, 256, 1, 0, args);
}

void rt_cu_glu_gated_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                         int64_t h, int act)
{
    if (rows <= 0 || h <= 0)
        return;
    void *args[] = {&x, &dy, &dx, &rows, &h, &act};
    rt_cu_launch(e, "rt_glu_gated_bwd", rt_cu_grid_for(e, rows * 256), 1, 1, 256, 1, 0, args);
}

/* ---- global response normalization (grn.cuh) ---------------------------------------------- */

/* the norms (a block of 32 channels x 8 row lanes a sample's 32 channels), then each
 * sample's mean; y elementwise */
void rt_cu_grn_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                   float *g, int64_t B, int64_t T, int64_t C)
{
    if (B <= 0 || C <= 0)
        return;
    int64_t n = B * T * C;
    void *a1[] = {&x, &g, &T, &C};
    rt_cu_launch(e, "rt_grn_norms", gdim(cdiv(C, 32), GX, "grn"), gdim(B, GYZ, "grn"), 1, 32, 8,
                 0, a1);
    void *a2[] = {&g, &C};
    rt_cu_launch(e, "rt_grn_mean", gdim(B, GX, "grn"), 1, 1, 256, 1, 0, a2);
    void *a3[] = {&x, &w, &b, &g, &y, &T, &C, &n};
    rt_cu_launch(e, "rt_grn_apply", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, a3);
}

/* each sample's sums a_c, s_c (part [B, C, 2] doubles), its dG / G (coef [B, C]), dw and
 * db over the samples in order, dx elementwise */
void rt_cu_grn_bwd(rt_exec *e, const float *x, const float *w, const float *g, const float *dy,
                   float *dx, float *dw, float *db, int64_t B, int64_t T, int64_t C)
{
    if (B <= 0 || C <= 0)
        return;
    int64_t n = B * T * C;
    rt_dptr part = rt_cu_scratch(e, (size_t)(B * C) * (2 * sizeof(double) + sizeof(float)));
    rt_dptr coef = part + (rt_dptr)(B * C * 2) * sizeof(double);
    void *a1[] = {&x, &dy, &part, &T, &C};
    rt_cu_launch(e, "rt_grn_bwd_sums", gdim(cdiv(C, 32), GX, "grn"), gdim(B, GYZ, "grn"), 1, 32,
                 8, 0, a1);
    void *a2[] = {&part, &g, &w, &coef, &C};
    rt_cu_launch(e, "rt_grn_bwd_coef", gdim(B, GX, "grn"), 1, 1, 256, 1, 0, a2);
    if (dw || db) {
        void *a3[] = {&part, &g, &dw, &db, &B, &C};
        rt_cu_launch(e, "rt_grn_bwd_params", gdim(cdiv(C, 256), GX, "grn"), 1, 1, 256, 1, 0, a3);
    }
    void *a4[] = {&x, &dy, &w, &g, &coef, &dx, &T, &C, &n};
    rt_cu_launch(e, "rt_grn_dx", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, a4);
}

/* ---- BatchNorm ---------------------------------------------------------------------------- */

/* Parts a channel's n = B * HW values are cut into for its reductions: about 16K values
 * a block, at most 64 (the shape's alone, so the sums' order is too). */
static int64_t bn_parts(int64_t n)
{
    int64_t p = cdiv(n, 16384);
    return p < 1 ? 1 : p > 64 ? 64 : p;
}

/* SyncBatchNorm (sync on several GPUs): each channel's P partials added in order into
 * tot [C, 2] (rt_bn_part_sums) */
static void bn_part_sums(rt_exec *e, rt_dptr part, int64_t P, int64_t C, rt_dptr tot)
{
    void *a[] = {&part, &P, &C, &tot};
    rt_cu_launch(e, "rt_bn_part_sums", gdim(cdiv(C, 256), GX, "batchnorm"), 1, 1, 256, 1, 0, a);
}

/* then tot summed over the ranks (NCCL, in place) and the count n (MPI, on the host:
 * the ranks' batches may differ); returns the whole batch's count */
static double bn_sync(rt_exec *e, rt_dptr tot, int64_t C, double n)
{
    rt_nccl_allreduce_f64(e, (double *)(uintptr_t)tot, 2 * C);
    rt_allreduce_sum_f64(&n, 1);
    return n;
}

/* sync: batchnorm.c passes it true only for a training pass on several ranks */
void rt_cu_batchnorm_fwd(rt_exec *e, const float *x, const float *w, const float *b,
                         float *scale, float *shift, float *mean, float *rstd, float *run_mean,
                         float *run_var, float *count, int64_t B, int64_t C, int64_t HW,
                         float eps, float momentum, int64_t sync)
{
    if (B <= 0 || C <= 0)
        return;
    int64_t P = bn_parts(B * HW);
    rt_dptr part = rt_cu_scratch(e, (size_t)(C * P * 2 + 2 * C) * sizeof(double));
    int train = e->train;
    double n = (double)B * (double)HW;
    if (train) {
        void *a1[] = {&x, &part, &B, &C, &HW};
        rt_cu_launch(e, "rt_bn_stats", gdim(C, GX, "batchnorm"), gdim(P, GYZ, "batchnorm"), 1,
                     256, 1, 0, a1);
    }
    if (train && sync) {   /* the whole batch's sums, as one partial */
        rt_dptr tot = part + (rt_dptr)(C * P * 2) * sizeof(double);
        bn_part_sums(e, part, P, C, tot);
        n = bn_sync(e, tot, C, n);
        part = tot;
        P = 1;
    }
    void *a2[] = {&part, &P, &C, &n, &w, &b, &mean, &rstd, &run_mean, &run_var, &count,
                  &scale, &shift, &eps, &momentum, &train};
    rt_cu_launch(e, "rt_bn_finish", gdim(cdiv(C, 256), GX, "batchnorm"), 1, 1, 256, 1, 0, a2);
}

/* sync: true on several ranks (batchnorm.c): dw and db from this rank's sums, dx from
 * the whole batch's */
void rt_cu_batchnorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                         const float *rstd, const float *dy, float *dx, float *dw, float *db,
                         int64_t B, int64_t C, int64_t HW, int64_t sync)
{
    if (B <= 0 || C <= 0)
        return;
    int64_t P = bn_parts(B * HW), total = B * C * HW;
    rt_dptr part = rt_cu_scratch(e, (size_t)(C * P * 2 + 2 * C) * sizeof(double) + (size_t)C * 8);
    rt_dptr tot = part + (rt_dptr)(C * P * 2) * sizeof(double);
    rt_dptr gk = tot + (rt_dptr)(2 * C) * sizeof(double);
    void *a1[] = {&x, &dy, &mean, &part, &B, &C, &HW};
    rt_cu_launch(e, "rt_bn_bwd_stats", gdim(C, GX, "batchnorm"), gdim(P, GYZ, "batchnorm"), 1,
                 256, 1, 0, a1);
    double n = (double)B * (double)HW;
    void *a2[] = {&part, &P, &C, &n, &rstd, &dw, &db, &gk};
    rt_cu_launch(e, "rt_bn_bwd_finish", gdim(cdiv(C, 256), GX, "batchnorm"), 1, 1, 256, 1, 0, a2);
    if (sync) {   /* gk again, from the sums over all ranks (dw and db stay) */
        bn_part_sums(e, part, P, C, tot);
        n = bn_sync(e, tot, C, n);
        int64_t one = 1;
        float *none = NULL;
        void *a2s[] = {&tot, &one, &C, &n, &rstd, &none, &none, &gk};
        rt_cu_launch(e, "rt_bn_bwd_finish", gdim(cdiv(C, 256), GX, "batchnorm"), 1, 1, 256, 1, 0,
                     a2s);
    }
    void *a3[] = {&x, &dy, &dx, &mean, &rstd, &w, &gk, &C, &HW, &total};
    rt_cu_launch(e, "rt_bn_dx", rt_cu_grid_for(e, total), 1, 1, 256, 1, 0, a3);
}

/* ---- losses ------------------------------------------------------------------------------ */

/* stats += the sums of loss[0, n) and correct[0, n) (correct may be 0) */
static void loss_total(rt_exec *e, rt_dptr loss, rt_dptr correct, int64_t n)
{
    rt_dptr stats = rt_cu_stats(e);
    void *args[] = {&loss, &correct, &n, &stats};
    rt_cu_launch(e, "rt_loss_total", 1, 1, 1, 1024, 1, 0, args);
}

void rt_cu_ce_count(rt_exec *e, const int32_t *target, int64_t rows)
{
    rt_dptr st = rt_cu_stats(e);
    int ignore = e->ce_ignore;
    void *args[] = {&target, &rows, &ignore, &st};
    rt_cu_launch(e, "rt_ce_count", 1, 1, 1, 1024, 1, 0, args);
}

/* Either cross entropy over rows (ls > 0: label-smoothed). Under ignore_index the
 * device counts the targets (rt_cu_ce_count; once for a chunked head's calls) and
 * the kernels read the scale from the statistics, which also hold the count: the host
 * adds no terms. */
static void cross_entropy(rt_exec *e, const float *logits, const int32_t *target,
                          float *dlogits, int64_t rows, int64_t C, int64_t ld, float ls)
{
    if (rows <= 0)
        return;
    rt_dptr loss = rt_cu_scratch(e, (size_t)rows * 2 * sizeof(double));
    rt_dptr correct = loss + (rt_dptr)rows * sizeof(double);
    rt_dptr st = 0;
    int ignore = e->ce_ignore;
    if (e->ce_has_ignore) {
        if (e->ce_rows <= 0)
            rt_cu_ce_count(e, target, rows);
        st = rt_cu_stats(e);
    }
    e->loss_rows = e->ce_rows > 0 ? e->ce_rows : rows;
    float gs = e->grad_scale;
    char name[64];
    snprintf(name, sizeof name, ls > 0 ? "rt_cross_entropy_ls_%lld_%lld" : "rt_cross_entropy_%lld_%lld",
             (long long)C, (long long)ld);
    void *args[] = {&logits, &target, &dlogits, &loss, &correct, &gs, &st, &ignore};
    void *args_ls[] = {&logits, &target, &dlogits, &loss, &correct, &gs, &ls, &st, &ignore};
    /* (1024 threads for a wide row: loss.cuh then keeps a 16-bit row in registers) */
    rt_cu_launch(e, name, gdim(rows, GX, name), 1, 1, row_threads(C), 1, 0,
                 ls > 0 ? args_ls : args);
    loss_total(e, loss, correct, rows);
    if (!e->ce_has_ignore)
        e->terms += rows;
}

void rt_cu_cross_entropy(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                         int64_t rows, int64_t C, int64_t ld)
{
    cross_entropy(e, logits, target, dlogits, rows, C, ld, 0.0f);
}

void rt_cu_cross_entropy_ls(rt_exec *e, const float *logits, const int32_t *target,
                            float *dlogits, int64_t rows, int64_t C, int64_t ld, float ls)
{
    cross_entropy(e, logits, target, dlogits, rows, C, ld, ls);
}

/* dpo over `samples` pairs of `rows` rows (loss.cuh's rt_dpo_*): each row's cross
 * entropy, each pair's sums, loss and factors, then the rows' gradients scaled. Scratch:
 * nll and correct a row, loss, right and margin a pair (doubles), two factors a pair. */
void rt_cu_dpo(rt_exec *e, const float *logits, const int32_t *target, const float *ref,
               float *dlogits, float *logps, int64_t samples, int64_t rows, int64_t C,
               int64_t ld, float beta, float gamma, float ls, int64_t kind,
               const int32_t *sft_target, const int32_t *label, float wd, float wu,
               float sft_weight)
{
    int64_t n = samples * rows, T = rows / 2;
    if (n <= 0)
        return;
    rt_dptr nll = rt_cu_scratch(e, (size_t)(2 * n + 3 * samples + 2) * sizeof(double) +
                                       (size_t)(2 * samples) * sizeof(float) +
                                       (sft_target ? (size_t)n * sizeof(int32_t) : 0));
    rt_dptr correct = nll + (rt_dptr)n * sizeof(double);
    rt_dptr loss = correct + (rt_dptr)n * sizeof(double);
    rt_dptr right = loss + (rt_dptr)samples * sizeof(double);
    rt_dptr margin = right + (rt_dptr)samples * sizeof(double);
    rt_dptr stat = margin + (rt_dptr)samples * sizeof(double);   /* (sft_term's, kto_kl's) */
    rt_dptr factor = stat + 2 * sizeof(double);
    rt_dptr eff = factor + (rt_dptr)(2 * samples) * sizeof(float);
    int ignore = e->ce_ignore;
    const int32_t *rows_target = target;
    if (sft_target) {   /* (orpo's: the chosen rows' sft targets merged in) */
        void *a[] = {&target, &sft_target, &eff, &samples, &T, &ignore};
        rt_cu_launch(e, "rt_orpo_targets", gdim(cdiv(n, 256), GX, "orpo targets"), 1, 1, 256, 1,
                     0, a);
        rows_target = (const int32_t *)(uintptr_t)eff;
    }
    float gs = beta * e->grad_scale;   /* (the factors' bound: sigmoid(-u) <= 1) */
    char name[64];
    snprintf(name, sizeof name, "rt_dpo_rows_%lld_%lld", (long long)C, (long long)ld);
    void *a1[] = {&logits, &rows_target, &dlogits, &nll, &correct, &gs, &ignore};
    rt_cu_launch(e, name, gdim(n, GX, name), 1, 1, row_threads(C), 1, 0, a1);
    int sft = kind == RT_PREF_ORPO || sft_weight > 0;   /* (orpo's, rpo's) */
    if (sft) {
        void *a[] = {&nll, &rows_target, &stat, &samples, &T, &ignore, &beta, &sft_weight};
        rt_cu_launch(e, "rt_sft_term", 1, 1, 1, 1024, 1, 0, a);
    }
    if (kind == RT_PREF_KTO) {   /* (training on several GPUs: the mean of their estimates) */
        int ranks = e->train && e->rank_mean_f64 ? rt_dist_world() : 1;
        void *a[] = {&nll, &target, &ref, &stat, &samples, &T, &ignore, &ranks};
        rt_cu_launch(e, "rt_kto_kl", 1, 1, 1, 1024, 1, 0, a);
        if (ranks > 1)
            rt_nccl_allreduce_f64(e, (double *)(uintptr_t)stat, 1);
    }
    rt_dptr no_stat = 0, *sftp = kind == RT_PREF_ORPO ? &stat : &no_stat;
    int kind32 = (int)kind;
    void *a2[] = {&nll, &target, &ref, &stat, &label, &logps, &loss, &right, &margin, &factor,
                  &samples, &T, &ignore, &beta, &gamma, &ls, &kind32, &wd, &wu, &sft};
    rt_cu_launch(e, "rt_dpo_pairs", gdim(cdiv(samples, 256), GX, "dpo pairs"), 1, 1, 256, 1, 0,
                 a2);
    if (dlogits) {
        void *a3[] = {&dlogits, &factor, &target, sftp, &T, &C, &ld, &ignore};
        rt_cu_launch(e, "rt_dpo_scale", gdim(n, GX, "dpo scale"), 1, 1, 256, 1, 0, a3);
    }
    loss_total(e, loss, right, samples);
    rt_dptr msum = rt_cu_stats(e) + offsetof(rt_cu_stat, margin_sum);   /* (added into) */
    int add = 1;
    void *a4[] = {&margin, &samples, &msum, &add};
    rt_cu_launch(e, "rt_sum_f64", 1, 1, 1, 1024, 1, 0, a4);
    e->terms += samples;
    e->loss_rows = samples;
}

void rt_cu_mse(rt_exec *e, const float *y, const float *t, float *dy, int64_t n)
{
    if (n <= 0)
        return;
    int64_t nblk = cdiv(n, RT_MSE_CHUNK);
    rt_dptr part = rt_cu_scratch(e, (size_t)nblk * sizeof(double));
    float gs = e->grad_scale;
    void *args[] = {&y, &t, &dy, &part, &n, &gs};
    rt_cu_launch(e, "rt_mse", gdim(nblk, GX, "mse"), 1, 1, 256, 1, 0, args);
    loss_total(e, part, 0, nblk);
    e->terms += n;
}

void rt_cu_gan_loss(rt_exec *e, const float *z, float *dz, int64_t rows, int term)
{
    if (rows <= 0)
        return;
    int64_t nblk = cdiv(rows, RT_MSE_CHUNK);
    rt_dptr part = rt_cu_scratch(e, (size_t)nblk * sizeof(double));
    float gs = e->grad_scale;
    void *args[] = {&z, &dz, &part, &rows, &term, &gs};
    rt_cu_launch(e, "rt_gan_loss", gdim(nblk, GX, "gan_loss"), 1, 1, 256, 1, 0, args);
    loss_total(e, part, 0, nblk);
}

/* ---- attention --------------------------------------------------------------------------- */

/* attention.cuh's tiles: rows of the forward's query tile, and of the backward's query
 * (first kernel) and key (second kernel) tiles */
static int64_t att_fwd_rows(int64_t hd) { return 16 * (hd > 64 ? 2 : 4); }
static int64_t att_bwd_rows(int64_t hd) { return 16 * (hd > 64 ? 1 : 2); }

static int64_t att_head(int64_t d, int64_t H)
{
    if (H <= 0 || d % H != 0)
        rt_die("attention: d = %lld is not a multiple of H = %lld", (long long)d, (long long)H);
    if (H > GYZ)
        rt_die("attention: %lld heads exceed the grid", (long long)H);
    return d / H;
}

/* heads up to max wide (the compiler emits no kernel for wider ones: one here is a module
 * built otherwise) */
static void att_width(int64_t hd, int64_t max)
{
    if (hd > max)
        rt_fail("attention heads %lld wide: the GPU kernels take up to %lld here\n  hint: "
                "--device cpu", (long long)hd, (long long)max);
}

/* Whether attention.cuh takes its tensor-core kernels (16-bit activations, heads a
 * multiple of 16 wide up to max: 128, rt_att_tc, or with the Llama-family options 256,
 * rt_att_tc_ext). Those read and write rows 16 bytes at a time: the tensors given must be
 * 16-byte aligned (the arena's are). */
static int att_tc(rt_exec *e, int64_t hd, int64_t max, const void *a, const void *b,
                  const void *c)
{
    if (!rt_cu_act16(e) || hd % 16 != 0 || hd > max)
        return 0;
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 != 0)
        rt_die("attention: tensor-core operands %p, %p, %p are not 16-byte aligned", a, b, c);
    return 1;
}

/* attention.cuh's att_block_order numbers the blocks in 32 bits */
static void att_grid_fits(int64_t tiles, int64_t H, int64_t B)
{
    if ((double)tiles * (double)H * (double)B >= 2147483648.0)
        rt_die("attention: %lld x %lld x %lld blocks (2^31 at most)", (long long)tiles,
               (long long)H, (long long)B);
}

/* The batch rows of one launch: the kernels take the batch index from blockIdx.z,
 * whose limit is 65535, so a larger batch (a short sequence can have one) runs as
 * several launches over consecutive rows, its tensors offset to the chunk's first row
 * (each batch row's attention is independent of the others': the same bits however the
 * batch is cut). TRAINC_ATT_BATCH_CHUNK=N (tests/fake_gpu.sh) cuts it every N rows, so
 * that the chunked launches are checked on a batch the emulator runs in seconds. */
static int64_t att_batch_chunk(int64_t B)
{
    static int64_t chunk;
    if (!chunk) {
        const char *s = getenv("TRAINC_ATT_BATCH_CHUNK");
        long long v = s ? atoll(s) : 0;
        chunk = v >= 1 && v < GYZ ? v : GYZ;
    }
    return B < chunk ? B : chunk;
}

void *rt_act_adv(rt_exec *e, const void *p, int64_t n)
{
    size_t es = e->dev && rt_cu_act16(e) ? 2 : 4;
    return (void *)((uintptr_t)p + (size_t)n * es);
}

/* p advanced by n elements of the activations' type (fp32, or bf16/fp16 in the mixed
 * precisions), or of float for the fp32-only tensors (f32 = 1) */
static void *att_adv(rt_exec *e, const void *p, int64_t n, int f32)
{
    return f32 ? (void *)((uintptr_t)p + (size_t)n * sizeof(float)) : rt_act_adv(e, p, n);
}

/* Whether the forward takes sm90_attention.cuh's kernel, plain or with the Llama-family
 * options: the module built for sm_90a, 16-bit activations, heads 64 or 128 wide, and
 * what its TMA copies need (qkv 16-byte aligned, rows of ld values a multiple of 16
 * bytes, coordinates in 32 bits). TRAINC_ATT_SM90=0 keeps attention.cuh's kernels (to
 * compare the two). */
static int att90_use(rt_exec *e, int64_t hd, const void *qkv, int64_t T, int64_t ld)
{
    const char *env = getenv("TRAINC_ATT_SM90");
    if ((env && !strcmp(env, "0")) || !rt_cu_act16(e) || !rt_cu_sm90a(e) || (hd != 64 && hd != 128))
        return 0;
    return (uintptr_t)qkv % 16 == 0 && ld * 2 % 16 == 0 && ld < INT32_MAX && T < INT32_MAX;
}

/* sm90_attention.cuh's rt_att90_smem: Q, two stages of K and V, the mbarriers, and 1 KiB
 * to align the start to 1024 bytes */
static unsigned att90_smem(int64_t hd)
{
    return (unsigned)((RT_ATT90_ROWS + 2 * 2 * RT_ATT90_ROWS) * hd * 2 + 128 + 1024);
}

/* The tensor maps the sm_90a kernels read their 16-bit [B, T, cols] tensors through (qkv:
 * cols 3d; dy: d): {cols, T, B}, boxes of 64 columns x `rows` rows (the forward's 128-row
 * query tiles, the backward's 64-row streamed tiles), the 128-byte swizzle, rows past T
 * as zeros. Made once per (pointer, shape, box, type) and kept (the trainer's arena
 * pointers do not move); the kernels take a map by value (__grid_constant__), so a launch
 * or a captured graph holds its own copy. */
typedef struct {
    _Alignas(64) unsigned char map[128];
    const void *p;
    int64_t B, T, cols, rows;
    int type;
} att90_map;

/* x's map, from a cache of the last 64 made (a model has a few shapes, three maps a layer) */
static const void *att90_tmap(rt_exec *e, const void *x, int64_t B, int64_t T, int64_t cols,
                              int64_t rows)
{
    enum { N = 64 };
    static att90_map cache[N];
    static int next;
    int type = rt_cu_act16(e);
    for (int i = 0; i < N; i++)
        if (cache[i].p == x && cache[i].B == B && cache[i].T == T && cache[i].cols == cols &&
            cache[i].rows == rows && cache[i].type == type)
            return cache[i].map;
    att90_map *m = &cache[next];
    next = (next + 1) % N;
    const uint64_t dim[3] = {(uint64_t)cols, (uint64_t)T, (uint64_t)B};
    const uint64_t stride[2] = {(uint64_t)(cols * 2), (uint64_t)(T * cols * 2)};
    const uint32_t box[3] = {64, (uint32_t)rows, 1};
    *m = (att90_map){.p = x, .B = B, .T = T, .cols = cols, .rows = rows, .type = type};
    if (rt_cu_tmap16(m->map, x, type == RT_PREC_FP16, dim, stride, box) != 0)
        rt_die("attention: the driver refuses a tensor map (%p, B %lld, T %lld, %lld columns)", x,
               (long long)B, (long long)T, (long long)cols);
    return m->map;
}

static void att90x_fwd(rt_exec *e, const void *qkv, const float *qn, const float *kn, float *lse,
                       void *y, int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV, int64_t hd,
                       int causal, int64_t window, float theta, float factor, float low,
                       float high, int64_t orig, const float *lr, float scale,
                       const int32_t *pos, int ext);

void rt_cu_attention_fwd(rt_exec *e, const float *qkv, float *lse, float *y, int64_t B,
                         int64_t T, int64_t d, int64_t H, int causal)
{
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    int64_t hd = att_head(d, H);
    att_width(hd, 128);
    att_tc(e, hd, 128, qkv, y, y);
    if (att90_use(e, hd, qkv, T, 3 * d)) {
        att90x_fwd(e, qkv, NULL, NULL, lse, y, B, T, d, H, H, hd, causal, 0, 0.0f, 0.0f, 0.0f,
                   0.0f, 0, NULL, 0.0f, NULL, 0);   /* the plain kernel: no options, its own scale */
        return;
    }
    int h = (int)H;
    char name[96];
    snprintf(name, sizeof name, "rt_attention_fwd_%lld_%lld_%d", (long long)T, (long long)hd,
             causal != 0);
    int64_t bc = att_batch_chunk(B);
    att_grid_fits(cdiv(T, att_fwd_rows(hd)), H, bc);
    rt_dptr slot = rt_cu_fp8_out_slot(e);   /* fp8-mixed's kernels fold y's maximum into it */
    for (int64_t b0 = 0; b0 < B; b0 += bc) {
        int64_t nb = B - b0 < bc ? B - b0 : bc;
        const void *q = att_adv(e, qkv, b0 * T * 3 * d, 0);
        void *l = att_adv(e, lse, b0 * H * T, 1), *o = att_adv(e, y, b0 * T * d, 0);
        void *args[] = {&q, &l, &o, &h, &slot};
        rt_cu_launch(e, name, gdim(cdiv(T, att_fwd_rows(hd)), GX, name), (unsigned)H,
                     gdim(nb, GYZ, name), RT_ATT_THREADS, 1, 0, args);
    }
}

/* ---- the attention backward on sm_90a (sm90_attention_bwd.cuh) ----
 * Taken where the forward's would be (att90_use) and the TMA copies can read dy too
 * (16-byte aligned, rows a multiple of 16 bytes); TRAINC_ATT_SM90=0 keeps attention.cuh's
 * kernels (to compare the two). */
#define RT_ATT90B_THREADS 288      /* sm90_attention_bwd.cuh: the query side's block */
#define RT_ATT90B_KV_THREADS 256   /* and the key side's */
#define RT_ATT90B_RES 128       /* its resident tiles' rows (the grid's tiles) */
#define RT_ATT90B_STR 64        /* its streamed tiles' rows, the tensor maps' boxes */

static int att90b_use(rt_exec *e, int64_t hd, const void *qkv, const void *dy, const void *dqkv,
                      int64_t T, int64_t d, int64_t ld)
{
    return att90_use(e, hd, qkv, T, ld) && ((uintptr_t)dy | (uintptr_t)dqkv) % 16 == 0 &&
           d * 2 % 16 == 0;
}

/* rt_att90b_smem: the resident pair, two stages of the streamed pair, the mbarriers, and
 * 1 KiB to align the start to 1024 bytes */
static unsigned att90b_smem(int64_t hd)
{
    return (unsigned)((2 * RT_ATT90B_RES + 2 * 2 * RT_ATT90B_STR) * hd * 2 + 128 + 1024);
}

static void att90x_bwd(rt_exec *e, const void *qkv, const float *qn, const float *kn,
                       const void *lse, const void *y, const void *dy, void *dqkv, float *dqn,
                       float *dkn, int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV,
                       int64_t hd, int causal, int64_t window, float theta, float factor,
                       float low, float high, int64_t orig, const float *lr, float scale,
                       rt_dptr slot, const int32_t *pos, int ext);

void rt_cu_attention_bwd(rt_exec *e, const float *qkv, const float *lse, const float *y,
                         const float *dy, float *dqkv, int64_t B, int64_t T, int64_t d,
                         int64_t H, int causal)
{
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    int64_t hd = att_head(d, H);
    att_width(hd, 128);
    int h = (int)H;
    rt_dptr slot = rt_cu_fp8_out_slot(e);   /* fp8-mixed's kernels fold dqkv's maximum into it */
    if (att_tc(e, hd, 128, qkv, dy, dqkv) && att90b_use(e, hd, qkv, dy, dqkv, T, d, 3 * d)) {
        att90x_bwd(e, qkv, NULL, NULL, lse, y, dy, dqkv, NULL, NULL, B, T, d, H, H, hd, causal, 0,
                   0.0f, 0.0f, 0.0f, 0.0f, 0, NULL, 0.0f, slot, NULL, 0);   /* the plain kernels */
        return;
    }
    /* D [B, H, T] = dy . y per query row, from the query-side kernel to the key-side one */
    rt_dptr D = rt_cu_scratch(e, (size_t)(B * H * T) * sizeof(float));
    char name[96], name_kv[96];
    unsigned gx = gdim(cdiv(T, att_bwd_rows(hd)), GX, "attention");
    /* on the tensor cores both kernels take 64 rows (queries, keys) a block */
    int tc = att_tc(e, hd, 128, qkv, dy, dqkv);
    unsigned gq = tc ? gdim(cdiv(T, 64), GX, "attention") : gx;
    int64_t bc = att_batch_chunk(B);
    att_grid_fits(gq, H, bc);
    snprintf(name, sizeof name, "rt_attention_bwd_%lld_%lld_%d", (long long)T, (long long)hd,
             causal != 0);
    snprintf(name_kv, sizeof name_kv, "rt_attention_bwd_kv_%lld_%lld_%d", (long long)T,
             (long long)hd, causal != 0);
    for (int64_t b0 = 0; b0 < B; b0 += bc) {
        int64_t nb = B - b0 < bc ? B - b0 : bc;
        const void *q = att_adv(e, qkv, b0 * T * 3 * d, 0), *l = att_adv(e, lse, b0 * H * T, 1);
        const void *o = att_adv(e, y, b0 * T * d, 0), *g = att_adv(e, dy, b0 * T * d, 0);
        void *dq = att_adv(e, dqkv, b0 * T * 3 * d, 0);
        rt_dptr Dc = D + (rt_dptr)(b0 * H * T) * sizeof(float);
        void *args[] = {&q, &l, &o, &g, &dq, &Dc, &h, &slot};
        unsigned gz = gdim(nb, GYZ, "attention");
        rt_cu_launch(e, name, gq, (unsigned)H, gz, RT_ATT_THREADS, 1, 0, args);
        rt_cu_launch(e, name_kv, gq, (unsigned)H, gz, RT_ATT_THREADS, 1, 0, args);
    }
}

/* ---- attention with the Llama-family options --------------------------------------------- */

/* attention.cuh's attention_ext_*: a tile of BQ query rows holds BQ / G positions of each
 * of the G query heads that share a key/value head (at least one each) */
static int64_t att_ext_group(int64_t H, int64_t KV, int64_t rows)
{
    if (KV <= 0 || H % KV != 0 || KV > GYZ)
        rt_die("attention: %lld key/value heads for %lld heads", (long long)KV, (long long)H);
    if (H / KV > rows)
        rt_fail("attention: %lld query heads a key/value head: the GPU kernels take up to %lld "
                "at this head width\n  hint: --device cpu", (long long)(H / KV), (long long)rows);
    return rows / (H / KV);   /* positions a tile */
}

/* the dynamic shared memory of attention.cuh's tensor-core backward (tc) at heads wider
 * than 128: dY's (query side) or V's (key side) 64 rows of hd + 8 16-bit values */
static unsigned att_ext_tc_smem(int64_t hd, int tc)
{
    return tc && hd > 128 ? (unsigned)(64 * (hd + 8) * 2) : 0;
}

/* the grids of rt_attention_ext_bwd's two kernels (x: query tiles, key tiles), and the
 * bytes of scratch a batch row takes: D [H, T] floats, then with qk_norm one partial
 * weight gradient of hd doubles per block and kernel (the compiler's
 * cuda_scratch_row_bytes says the same for the CUDA-core kernels; the tensor-core
 * ones (tc), 64 rows a tile on both sides, take fewer blocks, so less) */
static int64_t att_ext_bwd_grids(int64_t T, int64_t hd, int64_t H, int64_t KV, int qk_norm,
                                 int tc, unsigned *gq, unsigned *gk)
{
    int64_t rows = tc ? 64 : att_bwd_rows(hd);
    *gq = gdim(cdiv(T, att_ext_group(H, KV, rows)), GX, "attention");
    *gk = gdim(cdiv(T, rows), GX, "attention");
    return 4 * H * T + (qk_norm ? 8 * hd * KV * ((int64_t)*gq + *gk) : 0);
}

/* ---- the Llama-family options on sm_90a (sm90_attention.cuh, sm90_attention_bwd.cuh) ----
 * Taken where the plain sm_90a kernels would be (att90_use, att90b_use: the module built
 * for sm_90a, 16-bit activations, heads 64 or 128); qk_norm and rope run first, rt_attention_prep90
 * writing the transformed q and k heads into the scratch (the compiler's
 * ext_prep90_row_bytes sized it), which the kernels' TMA copies read; V comes from qkv
 * itself. */
/* qk_norm (qn, kn) and rope on the q and k heads of qkv's B x T rows into qk
 * (rt_attention_prep90) */
#define RT_PREP90_ROWS 16   /* sm90_attention.cuh's rows a block */
static void att90x_prep(rt_exec *e, const void *qkv, rt_dptr qk, const float *qn, const float *kn,
                        int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd, float theta,
                        float factor, float low, float high, int64_t orig, const float *lr,
                        const int32_t *pos)
{
    int64_t rows = B * T;
    int t = (int)T, h = (int)H, kv = (int)KV, ihd = (int)hd, o = (int)orig;
    void *args[] = {&qkv, &qk,     &qn,  &kn,   &rows, &t, &h, &kv,
                    &ihd, &theta, &factor, &low, &high, &o, &lr, &pos};
    rt_cu_launch(e, "rt_attention_prep90", gdim(cdiv(rows, RT_PREP90_ROWS), GX, "attention prep"),
                 1, 1, RT_ATT_THREADS, 1, 0, args);
}

/* The maps of a chunk of nb batch rows from b0 (rows of `rows` a box): Q and K (*mq: the
 * transformed copy qk, or qkv where neither qk_norm nor rope is on), V (*mv: qkv) */
static void att90x_maps(rt_exec *e, const void *qkv, rt_dptr qk, int64_t b0, int64_t nb,
                        int64_t T, int64_t H, int64_t KV, int64_t hd, int64_t rows,
                        const void **mq, const void **mv)
{
    int64_t ld = (H + 2 * KV) * hd, lq = (H + KV) * hd;
    *mv = att90_tmap(e, att_adv(e, qkv, b0 * T * ld, 0), nb, T, ld, rows);
    *mq = qk ? att90_tmap(e, att_adv(e, (const void *)(uintptr_t)qk, b0 * T * lq, 0), nb, T, lq, rows)
             : *mv;
}

/* the rope's table (hd floats on the host: inverse frequencies, amplitudes; or NULL) on
 * the device */
static const float *att_lr(rt_exec *e, const float *ext, int64_t hd)
{
    return ext ? (const float *)(uintptr_t)rt_cu_const(e, ext, (size_t)hd * sizeof *ext) : NULL;
}

/* the scores' factor times log2(e): the tensor-core kernels take the scores to exp2 in
 * log2 units, and take this product as an argument beside the scale */
static float att_sl2(float scale) { return (float)(1.4426950408889634 * (double)scale); }

/* the kernels' name part for soft-capped scores (attention.cuh's RT_ATTENTION_EXT_CAP_*:
 * the sm_80 kernels, which sm_90a runs too) */
static const char *att_cap_name(float softcap) { return softcap > 0.0f ? "_cap" : ""; }

/* the kernels' name part for packed rows (positions: attention.cuh's RT_ATTENTION_EXT_PK_*) */
static const char *att_pk_name(const int32_t *pos) { return pos ? "_pk" : ""; }

/* the forward on sm_90a (sm90_attention.cuh): the Llama-family options' kernel (ext; pos:
 * packed rows' positions, its _pk instance), or plain attention's (KV = H, no window, no
 * qk_norm or rope) */
static void att90x_fwd(rt_exec *e, const void *qkv, const float *qn, const float *kn, float *lse,
                       void *y, int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV, int64_t hd,
                       int causal, int64_t window, float theta, float factor, float low,
                       float high, int64_t orig, const float *lr, float scale,
                       const int32_t *pos, int ext)
{
    rt_dptr qk = 0;
    if (theta > 0.0f || qn || kn) {
        qk = rt_cu_scratch(e, (size_t)(B * T * (H + KV) * hd * 2));
        att90x_prep(e, qkv, qk, qn, kn, B, T, H, KV, hd, theta, factor, low, high, orig, lr, pos);
    }
    int h = (int)H, kv = (int)KV, w = (int)window;
    float sl2 = att_sl2(scale);
    char name[96];
    snprintf(name, sizeof name, "rt_attention%s%s_fwd90_%lld_%lld_%d", ext ? "_ext" : "",
             att_pk_name(pos), (long long)T, (long long)hd, causal != 0);
    int64_t bc = att_batch_chunk(B), tiles = cdiv(T, RT_ATT90_ROWS);
    att_grid_fits(tiles, H, bc);
    rt_dptr slot = rt_cu_fp8_out_slot(e);   /* fp8-mixed's kernels fold y's maximum into it */
    for (int64_t b0 = 0; b0 < B; b0 += bc) {
        int64_t nb = B - b0 < bc ? B - b0 : bc;
        const void *mq, *mv;
        att90x_maps(e, qkv, qk, b0, nb, T, H, KV, hd, RT_ATT90_ROWS, &mq, &mv);
        void *l = att_adv(e, lse, b0 * H * T, 1), *o = att_adv(e, y, b0 * T * d, 0);
        const void *pc = pos ? att_adv(e, pos, b0 * T, 1) : NULL;   /* (int32: 4 bytes) */
        void *ext_args[] = {(void *)mq, (void *)mv, &l, &o, &h, &kv, &w, &sl2, &pc, &slot};
        void *args[] = {(void *)mq, &l, &o, &h, &slot};   /* rt_attention_fwd90_*: one map */
        rt_cu_launch(e, name, gdim(tiles, GX, name), (unsigned)H, gdim(nb, GYZ, name),
                     RT_ATT90_THREADS, 1, att90_smem(hd), ext ? ext_args : args);
    }
}

void rt_cu_attention_ext_fwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                             float *lse, float *y, int64_t B, int64_t T, int64_t d, int64_t H,
                             int64_t KV, int causal, int64_t window, float theta, float factor,
                             float low, float high, int64_t orig, const float *ext, float scale,
                             float softcap, const int32_t *pos)
{
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    /* the tensor-core kernel (attention.cuh's rt_att_tc_ext) takes 64 query rows a tile
     * and heads up to 256 wide, the CUDA-core one up to 128 */
    int64_t hd = att_head(d, H), ld = (H + 2 * KV) * hd;
    int tc = att_tc(e, hd, 256, qkv, y, y);
    att_width(hd, tc ? 256 : 128);
    int64_t tiles = cdiv(T, att_ext_group(H, KV, tc ? 64 : att_fwd_rows(hd)));
    const float *lr = att_lr(e, ext, hd);
    /* sm_90a's kernels: no cap */
    if (!(softcap > 0.0f) && att90_use(e, hd, qkv, T, ld)) {
        att90x_fwd(e, qkv, qn, kn, lse, y, B, T, d, H, KV, hd, causal, window, theta, factor, low,
                   high, orig, lr, scale, pos, 1);
        return;
    }
    int h = (int)H, kv = (int)KV, w = (int)window, o = (int)orig;
    float sl2 = att_sl2(scale);
    char name[96];
    snprintf(name, sizeof name, "rt_attention_ext%s%s_fwd_%lld_%lld_%d", att_cap_name(softcap),
             att_pk_name(pos), (long long)T, (long long)hd, causal != 0);
    int64_t bc = att_batch_chunk(B);
    att_grid_fits(tiles, KV, bc);
    rt_dptr slot = rt_cu_fp8_out_slot(e);   /* fp8-mixed's kernels fold y's maximum into it */
    for (int64_t b0 = 0; b0 < B; b0 += bc) {
        int64_t nb = B - b0 < bc ? B - b0 : bc;
        const void *q = att_adv(e, qkv, b0 * T * ld, 0);
        void *l = att_adv(e, lse, b0 * H * T, 1), *out = att_adv(e, y, b0 * T * d, 0);
        const void *pc = pos ? att_adv(e, pos, b0 * T, 1) : NULL;   /* (int32: 4 bytes) */
        void *args[] = {&q,      &qn,  &kn,   &l, &out, &h,     &kv,  &w,       &theta, &factor,
                        &low,    &high, &o,   &lr, &scale, &sl2, &softcap, &pc, &slot};
        rt_cu_launch(e, name, gdim(tiles, GX, name), (unsigned)KV, gdim(nb, GYZ, name),
                     RT_ATT_THREADS, 1, 0, args);
    }
}

/* The sm_90a backward's scratch: the transformed q and k (qk_norm or rope: att90x_prep),
 * the blocks' partial norm-weight gradients (qk_norm: [B, H, tiles, hd] doubles from the
 * query side, [B, KV, tiles, hd] from the key side), then D [B, H, T]; the compiler's
 * ext_scratch_row_bytes counts the same */
typedef struct {
    rt_dptr qk, pq, pk, D;
} att90x_scratch;

static att90x_scratch att90x_carve(rt_exec *e, int64_t B, int64_t T, int64_t H, int64_t KV,
                                   int64_t hd, int transformed, int norm)
{
    int64_t tiles = cdiv(T, RT_ATT90B_RES);
    size_t qkb = transformed ? (size_t)(B * T * (H + KV) * hd * 2) : 0;
    size_t pqb = norm ? (size_t)(B * H * tiles * hd * 8) : 0, pkb = norm ? (size_t)(B * KV * tiles * hd * 8) : 0;
    rt_dptr sc = rt_cu_scratch(e, qkb + pqb + pkb + (size_t)(B * H * T) * sizeof(float));
    return (att90x_scratch){qkb ? sc : 0, sc + qkb, sc + qkb + pqb, sc + qkb + pqb + pkb};
}

/* the backward's two kernels on sm_90a: the Llama-family options' (ext; qn, kn: qk_norm's
 * weights, whose gradients go to dqn, dkn), or plain attention's (KV = H, no window, no
 * qk_norm or rope) */
static void att90x_bwd(rt_exec *e, const void *qkv, const float *qn, const float *kn,
                       const void *lse, const void *y, const void *dy, void *dqkv, float *dqn,
                       float *dkn, int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV,
                       int64_t hd, int causal, int64_t window, float theta, float factor,
                       float low, float high, int64_t orig, const float *lr, float scale,
                       rt_dptr slot, const int32_t *pos, int ext)
{
    int norm = qn || kn;
    att90x_scratch sc = att90x_carve(e, B, T, H, KV, hd, theta > 0.0f || norm, norm);
    if (sc.qk)
        att90x_prep(e, qkv, sc.qk, qn, kn, B, T, H, KV, hd, theta, factor, low, high, orig, lr, pos);
    int h = (int)H, kv = (int)KV, w = (int)window, o = (int)orig;
    float sl2 = att_sl2(scale);
    char name[96], name_kv[96];
    snprintf(name, sizeof name, "rt_attention%s%s_bwd90%s_%lld_%lld_%d", ext ? "_ext" : "",
             att_pk_name(pos), ext ? "_q" : "", (long long)T, (long long)hd, causal != 0);
    snprintf(name_kv, sizeof name_kv, "rt_attention%s%s_bwd90_kv_%lld_%lld_%d", ext ? "_ext" : "",
             att_pk_name(pos), (long long)T, (long long)hd, causal != 0);
    int64_t bc = att_batch_chunk(B), tiles = cdiv(T, RT_ATT90B_RES), ld = (H + 2 * KV) * hd;
    att_grid_fits(tiles, H, bc);
    for (int64_t b0 = 0; b0 < B; b0 += bc) {
        int64_t nb = B - b0 < bc ? B - b0 : bc;
        const void *mq, *mv, *g = att_adv(e, dy, b0 * T * d, 0), *x = att_adv(e, qkv, b0 * T * ld, 0);
        att90x_maps(e, qkv, sc.qk, b0, nb, T, H, KV, hd, RT_ATT90B_STR, &mq, &mv);
        const void *mg = att90_tmap(e, g, nb, T, d, RT_ATT90B_STR);
        const void *l = att_adv(e, lse, b0 * H * T, 1), *out = att_adv(e, y, b0 * T * d, 0);
        void *dq = att_adv(e, dqkv, b0 * T * ld, 0);
        rt_dptr Dc = sc.D + (rt_dptr)(b0 * H * T) * sizeof(float);
        rt_dptr pqc = sc.pq + (rt_dptr)(norm ? b0 * H * tiles * hd * 8 : 0);
        rt_dptr pkc = sc.pk + (rt_dptr)(norm ? b0 * KV * tiles * hd * 8 : 0);
        const void *pc = pos ? att_adv(e, pos, b0 * T, 1) : NULL;   /* (int32: 4 bytes) */
        void *ext_args[] = {(void *)mq, (void *)mv, (void *)mg, &l,     &out,   &g,    &dq,
                            &Dc,        &h,         &kv,        &w,     &scale, &sl2,  &theta,
                            &factor,    &low,       &high,      &o,     &lr,    &x,    &qn,
                            &kn,        &pqc,       &pkc,       &pc,    &slot};
        /* rt_attention_bwd90_*: one map of qkv, no options */
        void *args[] = {(void *)mq, (void *)mg, &l, &out, &g, &dq, &Dc, &h, &slot};
        void **a = ext ? ext_args : args;
        unsigned gx = gdim(tiles, GX, name), gz = gdim(nb, GYZ, name);
        rt_cu_launch(e, name, gx, (unsigned)H, gz, RT_ATT90B_THREADS, 1, att90b_smem(hd), a);
        rt_cu_launch(e, name_kv, gx, (unsigned)KV, gz, RT_ATT90B_KV_THREADS, 1, att90b_smem(hd), a);
    }
    /* the norms' weight gradients: every block's partial (a row of hd), in a fixed order */
    if (qn && dqn)
        colsum_finish(e, sc.pq, dqn, B * H * tiles, hd);
    if (kn && dkn)
        colsum_finish(e, sc.pk, dkn, B * KV * tiles, hd);
}

void rt_cu_attention_ext_bwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                             const float *lse, const float *y, const float *dy, float *dqkv,
                             float *dqn, float *dkn, int64_t B, int64_t T, int64_t d, int64_t H,
                             int64_t KV, int causal, int64_t window, float theta, float factor,
                             float low, float high, int64_t orig, const float *ext, float scale,
                             float softcap, const int32_t *pos)
{
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    int64_t hd = att_head(d, H), ld = (H + 2 * KV) * hd;
    int norm = qn != NULL, tc = att_tc(e, hd, 256, qkv, dy, dqkv);
    const float *lr = att_lr(e, ext, hd);
    att_width(hd, tc ? 256 : 128);
    rt_dptr slot = rt_cu_fp8_out_slot(e);   /* fp8-mixed's kernels fold dqkv's maximum into it */
    att_ext_group(H, KV, tc ? 64 : att_bwd_rows(hd));   /* KV's check before either path */
    if (!(softcap > 0.0f) && att90b_use(e, hd, qkv, dy, dqkv, T, d, ld)) {
        att90x_bwd(e, qkv, qn, kn, lse, y, dy, dqkv, dqn, dkn, B, T, d, H, KV, hd, causal, window,
                   theta, factor, low, high, orig, lr, scale, slot, pos, 1);
        return;
    }
    unsigned gq, gk;
    int64_t row = att_ext_bwd_grids(T, hd, H, KV, norm, tc, &gq, &gk);
    /* partials first (8-byte aligned), then D */
    rt_dptr sc = rt_cu_scratch(e, (size_t)(B * row));
    rt_dptr pq = sc, pk = pq + (rt_dptr)(norm ? B * KV * gq * hd * 8 : 0);
    rt_dptr D = pk + (rt_dptr)(norm ? B * KV * gk * hd * 8 : 0);
    int h = (int)H, kv = (int)KV, w = (int)window, o = (int)orig;
    float sl2 = att_sl2(scale);
    char name[96], name_kv[96];
    snprintf(name, sizeof name, "rt_attention_ext%s%s_bwd_q_%lld_%lld_%d", att_cap_name(softcap),
             att_pk_name(pos), (long long)T, (long long)hd, causal != 0);
    snprintf(name_kv, sizeof name_kv, "rt_attention_ext%s%s_bwd_kv_%lld_%lld_%d",
             att_cap_name(softcap), att_pk_name(pos), (long long)T, (long long)hd, causal != 0);
    int64_t bc = att_batch_chunk(B);
    att_grid_fits(gq > gk ? gq : gk, KV, bc);
    for (int64_t b0 = 0; b0 < B; b0 += bc) {
        int64_t nb = B - b0 < bc ? B - b0 : bc;
        const void *q = att_adv(e, qkv, b0 * T * ld, 0), *l = att_adv(e, lse, b0 * H * T, 1);
        const void *out = att_adv(e, y, b0 * T * d, 0), *g = att_adv(e, dy, b0 * T * d, 0);
        void *dq = att_adv(e, dqkv, b0 * T * ld, 0);
        rt_dptr Dc = D + (rt_dptr)(b0 * H * T) * sizeof(float);
        rt_dptr pqc = pq + (rt_dptr)(norm ? b0 * KV * gq * hd * 8 : 0);
        rt_dptr pkc = pk + (rt_dptr)(norm ? b0 * KV * gk * hd * 8 : 0);
        const void *pc = pos ? att_adv(e, pos, b0 * T, 1) : NULL;   /* (int32: 4 bytes) */
        void *args[] = {&q,  &qn, &kn,    &l,      &out, &g,    &dq, &Dc,  &pqc,   &pkc,
                        &h,  &kv, &w,     &theta,  &factor, &low, &high, &o, &lr, &scale,
                        &sl2, &softcap, &pc, &slot};
        unsigned gz = gdim(nb, GYZ, "attention");
        rt_cu_launch(e, name, gq, (unsigned)KV, gz, RT_ATT_THREADS, 1, att_ext_tc_smem(hd, tc), args);
        rt_cu_launch(e, name_kv, gk, (unsigned)KV, gz, RT_ATT_THREADS, 1, att_ext_tc_smem(hd, tc), args);
    }
    if (!norm)
        return;
    /* the norms' weight gradients: every block's partial (a row of hd), in a fixed order */
    if (dqn)
        colsum_finish(e, pq, dqn, B * KV * gq, hd);
    if (dkn)
        colsum_finish(e, pk, dkn, B * KV * gk, hd);
}

/* ---- the decode program (decode.cuh): --sample's key/value cache -------------------------- */

/* decode.cuh's slices of the cached positions: as many as make the blocks (rows x heads
 * x slices) fill the GPU twice over, none shorter than 256 positions (1 where the rows'
 * heads alone fill it); TRAINC_DECODE_SPLITS=N asks for N (tests, benchmarks). At most
 * 64, and their partials (hd + 2 floats a row, head and slice) within 8 MiB of the
 * scratch (which has 16 beyond the model's needs). */
static int64_t dec_slices(rt_exec *e, int64_t B, int64_t H, int64_t T, int64_t hd)
{
    const char *v = getenv("TRAINC_DECODE_SPLITS");
    int64_t asked = v ? atoll(v) : 0;
    int64_t S = asked > 0 ? asked : cdiv(2 * (int64_t)rt_cu_sm_count(e), B * H);
    int64_t most = asked > 0 ? T : cdiv(T, 256), room = (8 << 20) / (B * H * (hd + 2) * 4);
    most = most < room ? most : room;
    S = S < most ? S : most;
    return S < 1 ? 1 : S > 64 ? 64 : S;
}

/* Row b of qkv [B, (H + 2 KV) hd] is at its place, slot * T + position (the kernels read
 * the places at e->dplace, on the device; slot s's caches e->kv_seq floats after slot
 * s - 1's): their keys and values into the layer's caches at kv_off in each (a launch
 * over (row, key/value head)), then their queries against it (one over (row, query
 * head, slice of the positions): dec_slices), and with several slices their merge (one
 * over (row, query head)). */
void rt_cu_attention_decode(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                            float *y, int64_t kv_off, int64_t B, int64_t T, int64_t d, int64_t H,
                            int64_t KV, int64_t window, float theta, float factor, float low,
                            float high, int64_t orig, const float *ext, float scale,
                            float softcap)
{
    if (B <= 0)
        return;
    int64_t hd = att_head(d, H);
    if (KV <= 0 || H % KV != 0 || hd > 4 * RT_ATT_THREADS || KV > GYZ || H > GYZ)
        rt_fail("attention decode: %lld heads of %lld, %lld key/value heads: the GPU kernel "
                "takes heads up to %d wide\n  hint: TRAINC_KV_CACHE=0 samples without the cache",
                (long long)H, (long long)hd, (long long)KV, 4 * RT_ATT_THREADS);
    if (!e->dplace)
        rt_die("attention decode: no places in the device's memory (e->dplace)");
    float *kv = e->kv + kv_off;
    const float *lr = att_lr(e, ext, hd);
    const int *place = e->dplace;
    int64_t S = dec_slices(e, B, H, T, hd);
    size_t pb = (size_t)(B * H * S * (hd + 2)) * sizeof(float);
    float *part = S > 1 ? (float *)(uintptr_t)rt_cu_scratch(e, pb) : NULL;
    int t = (int)T, h = (int)H, k = (int)KV, ihd = (int)hd, w = (int)window, o = (int)orig;
    int s = (int)S;
    long long seq = e->kv_seq;
    void *akv[] = {&qkv, &kn, &kv, &place, &seq, &t, &h, &k, &ihd, &theta, &factor, &low, &high,
                   &o, &lr};
    void *aq[] = {&qkv, &qn, &kv, &y, &part, &place, &seq, &t, &h, &k, &ihd, &w, &theta, &factor,
                  &low, &high, &o, &lr, &scale, &softcap};
    void *am[] = {&part, &y, &h, &ihd, &s};
    unsigned rows = gdim(B, GX, "attention decode");
    rt_cu_launch(e, "rt_attention_decode_kv", rows, (unsigned)KV, 1, RT_ATT_THREADS, 1,
                 (unsigned)(2 * hd * sizeof(float)), akv);
    rt_cu_launch(e, "rt_attention_decode", rows, (unsigned)H, (unsigned)S, RT_ATT_THREADS, 1,
                 (unsigned)((2 * hd + RT_DEC_CHUNK) * sizeof(float)), aq);
    if (S > 1)
        rt_cu_launch(e, "rt_attention_decode_merge", rows, (unsigned)H, 1, RT_ATT_THREADS, 1, 0,
                     am);
}

void rt_cu_pos_row_add(rt_exec *e, const float *x, const float *w, float *y, int64_t B, int64_t d)
{
    int64_t n = B * d;
    if (n <= 0)
        return;
    if (!e->dplace)
        rt_die("pos_row_add: no places in the device's memory (e->dplace)");
    const int *place = e->dplace;
    int T = (int)e->kv_T;
    void *args[] = {&x, &w, &y, &place, &T, &n, &d};
    rt_cu_launch(e, "rt_pos_row_add", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

/* ---- embedding --------------------------------------------------------------------------- */

void rt_cu_embedding_fwd(rt_exec *e, const int32_t *idx, const float *w, float *out,
                         int64_t rows, int64_t V, int64_t dim)
{
    if (rows <= 0 || dim <= 0)
        return;
    char name[64];
    snprintf(name, sizeof name, "rt_embedding_fwd_%lld", (long long)dim);
    void *args[] = {&idx, &w, &out, &rows, &V};
    rt_cu_launch(e, name, rt_cu_grid_for(e, rows * (dim % 4 ? dim : dim / 4)), 1, 1, 256, 1, 0, args);
}

void rt_cu_embedding_bwd(rt_exec *e, const int32_t *idx, const float *dout, float *dw,
                         int64_t rows, int64_t V, int64_t dim)
{
    if (rows <= 0 || dim <= 0 || V <= 0)
        return;
    /* vocabulary rows per block: about 8 blocks per SM (the sum order does not depend
     * on it: each dw element is added in row order by one thread) */
    int64_t nblk = (int64_t)rt_cu_sm_count(e) * 8;
    if (nblk > V)
        nblk = V;
    int64_t vb = cdiv(V, nblk);
    nblk = cdiv(V, vb);
    char name[64];
    snprintf(name, sizeof name, "rt_embedding_bwd_%lld", (long long)dim);
    void *args[] = {&idx, &dout, &dw, &rows, &V, &vb};
    rt_cu_launch(e, name, gdim(nblk, GX, name), 1, 1, RT_EMB_THREADS, 1, 0, args);
}

/* ---- the optimizer ------------------------------------------------------------------------ */

/* optim.cuh's rt_opt_chunk: a piece of one parameter tensor */
typedef struct opt_chunk {
    int64_t off;               /* first element in the parameter region */
    int32_t len;               /* elements, <= RT_OPT_CHUNK */
    int32_t flags;             /* RT_OPT_DECAY (rank >= 2) */
} opt_chunk;
enum { RT_OPT_DECAY = 1, RT_OPT_MUON_CHUNK = 2 };   /* optim.cuh's RT_OPT_DECAY, RT_OPT_MUON */
_Static_assert(sizeof(opt_chunk) == 16, "opt_chunk must match optim.cuh's rt_opt_chunk");

size_t rt_opt_table_bytes(int n_params, const int64_t *numel)
{
    int64_t k = 0;
    for (int i = 0; i < n_params; i++)
        k += (numel[i] + RT_OPT_CHUNK - 1) / RT_OPT_CHUNK;
    return (size_t)(k > 0 ? k : 1) * sizeof(opt_chunk);
}

/* The chunk table on the device, uploaded once for the model and the range of the
 * parameter region this process updates (one GPU per process); a GAN's network each
 * its own (gan_opt: the generator's, the discriminator's). */
typedef struct opt_table {
    const rt_model *m;
    rt_dptr chunks;
    int64_t n;
    int64_t lo, hi;            /* the range; the optimizer state holds it only */
    int type;                  /* the optimizer's (muon flags its matrices' chunks) */
    rt_dptr muon_work;         /* optimizer muon: its matrices' workspace (muon_param) */
} opt_table;
static opt_table opt, gan_opt[2];
static rt_dptr fp8_optim_amax(rt_exec *e, const opt_table *tab, const rt_model *m, rt_dptr pc);

/* The chunks of [lo, hi): each tensor's part inside it, in pieces of RT_OPT_CHUNK (a
 * matrix optimizer muon updates flagged: rt_adamw leaves it). t may be NULL (counting
 * only). */
static int64_t cut_chunks(const rt_train_config *c, const rt_model *m, int64_t lo, int64_t hi,
                          opt_chunk *t)
{
    int64_t k = 0;
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *p = &m->params[i];
        int64_t a = p->offset > lo ? p->offset : lo;
        int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        for (int64_t o = a; o < b; o += RT_OPT_CHUNK, k++)
            if (t)
                t[k] = (opt_chunk){o, (int32_t)(b - o < RT_OPT_CHUNK ? b - o : RT_OPT_CHUNK),
                                   (p->rank >= 2 ? RT_OPT_DECAY : 0) |
                                       (rt_muon_takes(c, p) ? RT_OPT_MUON_CHUNK : 0)};
    }
    return k;
}

/* a matrix's muon workspace: the update (numel floats), the Newton-Schulz iterates X and
 * Y [m, n] and A, B [m, m] of its largest block, the norm's double (muon_param) */
size_t rt_muon_work_bytes(int64_t numel, int64_t cols, const int64_t *blocks)
{
    if (!blocks[0])
        return 0;
    int64_t blk = 0, mm = 0;
    for (int b = 0; b < RT_MUON_BLOCKS && blocks[b]; b++) {
        int64_t s = blocks[b] < cols ? blocks[b] : cols;
        blk = blocks[b] * cols > blk ? blocks[b] * cols : blk;
        mm = s * s > mm ? s * s : mm;
    }
    return (size_t)(numel + 2 * blk + 2 * mm) * sizeof(float) + 24;   /* (the norm's
                                          double, its alignment, the leading 8 bytes) */
}

size_t rt_cu_muon_work_bytes(const rt_train_config *c, const rt_model *m)
{
    size_t most = 0;
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *p = &m->params[i];
        size_t need = rt_muon_takes(c, p) ? rt_muon_work_bytes(p->numel, p->shape[1], p->muon)
                                           : 0;
        most = need > most ? need : most;
    }
    return most;
}

static void table_setup(rt_exec *e, opt_table *tab, const rt_train_config *c, const rt_model *m,
                        int64_t lo, int64_t hi)
{
    opt_table opt = {0};
    if (lo < 0 || hi > m->param_floats || lo > hi)
        rt_die("optimizer: range [%lld, %lld) of %lld floats", (long long)lo, (long long)hi,
               (long long)m->param_floats);
    int64_t n = cut_chunks(c, m, lo, hi, NULL);
    if (n > GX)
        rt_die("optimizer: %lld chunks exceed the grid", (long long)n);
    opt_chunk *t = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    cut_chunks(c, m, lo, hi, t);
    opt.chunks = rt_cu_alloc_fixed(e, (size_t)(n > 0 ? n : 1) * sizeof *t);
    rt_cu_upload(opt.chunks, t, (size_t)n * sizeof *t);
    rt_xfree(t);
    opt.m = m;
    opt.n = n;
    opt.lo = lo;
    opt.hi = hi;
    opt.type = c ? c->opt : -1;
    size_t work = rt_cu_muon_work_bytes(c, m);
    if (work)
        opt.muon_work = rt_cu_alloc_fixed(e, work);
    *tab = opt;
}

void rt_cu_optim_setup(rt_exec *e, const rt_train_config *c, const rt_model *m, int64_t lo,
                       int64_t hi)
{
    if (opt.m == m && opt.lo == lo && opt.hi == hi && opt.type == c->opt)
        return;
    if (hi > m->trainable_floats)   /* (train.freeze's parameters lie after, untouched) */
        rt_die("optimizer: range [%lld, %lld) past the trained parameters' %lld floats",
               (long long)lo, (long long)hi, (long long)m->trainable_floats);
    table_setup(e, &opt, c, m, lo, hi);
    if (m->gan) {   /* the generator's parameters, then the discriminator's */
        table_setup(e, &gan_opt[0], c, m, 0, m->gan_gen_floats);
        table_setup(e, &gan_opt[1], c, m, m->gan_gen_floats, m->trainable_floats);
    }
}

static void opt_check(const rt_model *m)
{
    if (opt.m != m)
        rt_die("rt_cu_optim_setup was not called for model %s", m->name);
}

static rt_dptr sumsq_queue(rt_exec *e, const opt_table *t, rt_dptr grads)
{
    opt_table opt = *t;
    if (opt.n == 0)
        return 0;
    /* per-chunk sums of squares, then their sum in chunk order, in double */
    rt_dptr part = rt_cu_scratch(e, (size_t)(opt.n + 1) * sizeof(double));
    rt_dptr total = part + (rt_dptr)opt.n * sizeof(double);
    void *a1[] = {&grads, &opt.chunks, &part};
    rt_cu_launch(e, "rt_grad_norm_part", (unsigned)opt.n, 1, 1, 256, 1, 0, a1);
    int set = 0;
    void *a2[] = {&part, &opt.n, &total, &set};
    rt_cu_launch(e, "rt_sum_f64", 1, 1, 1, 1024, 1, 0, a2);
    return total;
}

rt_dptr rt_cu_grad_sumsq_queue(rt_exec *e, const rt_model *m, rt_dptr grads)
{
    opt_check(m);
    return sumsq_queue(e, &opt, grads);
}

/* The sum of squares at device address total (0: none), waited for. */
static double sumsq_read(rt_exec *e, rt_dptr total)
{
    if (!total)
        return 0.0;
    rt_cu_sync(e);
    double s;
    rt_cu_download(&s, total, sizeof s);
    return s;
}

double rt_cu_gan_grad_sumsq(rt_exec *e, const rt_model *m, int d, rt_dptr grads)
{
    opt_check(m);
    return sumsq_read(e, sumsq_queue(e, &gan_opt[d], grads));
}

double rt_cu_grad_sumsq(rt_exec *e, const rt_model *m, rt_dptr grads)
{
    return sumsq_read(e, rt_cu_grad_sumsq_queue(e, m, grads));
}

double rt_cu_grad_norm(rt_exec *e, const rt_model *m, rt_dptr grads)
{
    return sqrt(rt_cu_grad_sumsq(e, m, grads));
}

/* What an update reads and writes: the parameters (pc: their 16-bit copy, or 0), the
 * gradients, the state (parts stride floats apart), the step from 1, the gradients'
 * scale gs or their sum of squares on the device, fp8-mixed's partial maxima */
typedef struct opt_args {
    rt_dptr params, pc, grads, state;
    int64_t stride, t;
    float gs;
    rt_dptr sumsq, amax;
} opt_args;

/* optim.cuh's rt_adamw over the table's chunks (optim.c's scalars, the same way) */
static void adamw_launch(rt_exec *e, const opt_table *tab, const rt_train_config *c,
                         const opt_args *a, double lr)
{
    opt_table opt = *tab;
    opt_args x = *a;
    double max_norm = rt_clip_norm(c);
    float b1 = (float)c->beta1, b2 = (float)c->beta2;
    float a1 = (float)(1.0 - c->beta1), a2 = (float)(1.0 - c->beta2);
    double bc1 = 1.0 - pow(c->beta1, (double)x.t), bc2 = 1.0 - pow(c->beta2, (double)x.t);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    float decay = (float)(1.0 - lr * c->weight_decay), eps = (float)c->eps;
    rt_dptr m1 = x.state, m2 = x.state + (rt_dptr)x.stride * sizeof(float);
    void *args[] = {&x.params, &x.pc, &x.grads, &m1, &m2, &opt.lo, &opt.chunks, &x.gs, &x.sumsq,
                    &max_norm, &decay, &b1, &b2, &a1, &a2, &step_size, &bc2_sqrt, &eps,
                    &x.amax};   /* (the last: fp8-mixed's kernels only) */
    rt_cu_launch(e, "rt_adamw", (unsigned)opt.n, 1, 1, 256, 1, 0, args);
}

/* One block U [rows, cols] of a muon update orthogonalized into X (muon.c's
 * orthogonalize and newton_schulz: optim.cuh's rt_muon_* and cuBLASLt's GEMMs in fp32);
 * returns where the result is (X or Y, [m, n], transposed when tall) */
static rt_dptr muon_block(rt_exec *e, const rt_train_config *c, rt_dptr U, int64_t rows,
                          int64_t cols, rt_dptr work)
{
    int tall = rows > cols;
    int64_t m = tall ? cols : rows, n = tall ? rows : cols, mn = m * n;
    rt_dptr ss = work, X = work + sizeof(double), Y = X + (rt_dptr)mn * 4;
    rt_dptr A = Y + (rt_dptr)mn * 4, B = A + (rt_dptr)(m * m) * 4;
    void *a1[] = {&U, &X, &rows, &cols, &tall};
    rt_cu_launch(e, "rt_muon_load", rt_cu_grid_for(e, mn), 1, 1, 256, 1, 0, a1);
    void *a2[] = {&X, &mn, &ss};
    rt_cu_launch(e, "rt_muon_sumsq", 1, 1, 1, 1024, 1, 0, a2);
    float eps = (float)c->eps;
    void *a3[] = {&X, &mn, &ss, &eps};
    rt_cu_launch(e, "rt_muon_normalize", rt_cu_grid_for(e, mn), 1, 1, 256, 1, 0, a3);
    int64_t steps = c->ns_steps > 0 ? c->ns_steps : 5, mm = m * m;
    for (int64_t s = 0; s < steps; s++) {   /* A = X X^T, B = b A + c A A, Y = a X + B X */
        float *x = (float *)(uintptr_t)X, *y = (float *)(uintptr_t)Y;
        float *am = (float *)(uintptr_t)A, *bm = (float *)(uintptr_t)B;
        rt_gemm(e, 0, 1, m, m, n, 1.0f, x, n, x, n, 0.0f, am, m);
        void *c1[] = {&A, &B, &mm};
        rt_cu_launch(e, "rt_muon_copy", rt_cu_grid_for(e, mm), 1, 1, 256, 1, 0, c1);
        rt_gemm(e, 0, 0, m, m, m, RT_MUON_NS_C, am, m, am, m, RT_MUON_NS_B, bm, m);
        void *c2[] = {&X, &Y, &mn};
        rt_cu_launch(e, "rt_muon_copy", rt_cu_grid_for(e, mn), 1, 1, 256, 1, 0, c2);
        rt_gemm(e, 0, 0, m, n, m, 1.0f, bm, m, x, n, RT_MUON_NS_A, y, n);
        rt_dptr swap = X;
        X = Y;
        Y = swap;
    }
    return X;
}

/* Muon's step of matrix pp (muon.c's muon_param): the momentum and the update into the
 * workspace, each block orthogonalized and applied (decay and lr as the CPU's) */
static void muon_param(rt_exec *e, const opt_table *tab, const rt_train_config *c,
                       const rt_param *pp, const opt_args *a, double lr)
{
    rt_dptr g = a->grads + (rt_dptr)pp->offset * 4, p = a->params + (rt_dptr)pp->offset * 4;
    rt_dptr buf = a->state + (rt_dptr)(pp->offset - tab->lo) * 4;
    rt_dptr u = tab->muon_work + sizeof(double), work = u + (rt_dptr)pp->numel * 4;
    work = (work + 7) & ~(rt_dptr)7;   /* (the norm's double) */
    int64_t n = pp->numel, cols = pp->shape[1];
    double max_norm = rt_clip_norm(c);
    float gs = a->gs, w = (float)(1.0 - c->momentum), mom = (float)c->momentum;
    int nesterov = c->nesterov != 0;
    rt_dptr sumsq = a->sumsq;
    void *a1[] = {&g, &buf, &u, &n, &gs, &sumsq, &max_norm, &w, &mom, &nesterov};
    rt_cu_launch(e, "rt_muon_momentum", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, a1);
    float decay = (float)(1.0 - lr * c->weight_decay);
    int64_t r0 = 0;
    for (int b = 0; b < RT_MUON_BLOCKS && pp->muon[b]; b++) {
        int64_t rows = pp->muon[b];
        int tall = rows > cols;
        rt_dptr X = muon_block(e, c, u + (rt_dptr)(r0 * cols) * 4, rows, cols, work);
        rt_dptr pb = p + (rt_dptr)(r0 * cols) * 4;
        rt_dptr pcb = a->pc ? a->pc + (rt_dptr)(pp->offset + r0 * cols) * 2 : 0;
        float alpha = (float)rt_muon_block_lr(c, lr, rows, cols);
        void *a2[] = {&pb, &pcb, &X, &rows, &cols, &tall, &decay, &alpha};
        rt_cu_launch(e, "rt_muon_apply", rt_cu_grid_for(e, rows * cols), 1, 1, 256, 1, 0, a2);
        r0 += rows;
    }
}

/* optim.c's opt_slice, with its scalars computed here the same way (double, then
 * rounded to float) and the elements updated by optim.cuh's rt_adamw or rt_sgd; the
 * gradients' scale gs given, or (sumsq not 0) worked out by the kernel from the sum of
 * squares at sumsq and c->grad_clip; with grad_clip_algorithm value, the gradients
 * clipped in place first (rt_clip_values). */
static void optim_step(rt_exec *e, const opt_table *tab, const rt_train_config *c,
                       const rt_model *m, rt_dptr params, rt_dptr grads, rt_dptr state,
                       int64_t stride, int64_t t, double lr, float gs, rt_dptr sumsq)
{
    opt_check(m);
    opt_table opt = *tab;
    if (opt.n == 0)
        return;
    double max_norm = rt_clip_norm(c);
    float wd = (float)c->weight_decay;
    /* the 16-bit copy of the weights: written here for the whole trained region (the
     * frozen weights' copy is made once, at the upload); a shard's (zero1) is rebuilt
     * whole after the gather (rt_cu_copy_params16), so not twice */
    rt_dptr pc = (opt.lo == 0 && opt.hi == m->trainable_floats) || m->gan ? rt_cu_param_copy(e) : 0;
    /* fp8-mixed: the weights' partial maxima (optim.cuh's amax), an argument there only */
    rt_dptr amax = m->fp8 ? fp8_optim_amax(e, tab, m, pc) : 0;
    if (!isnan(rt_clip_value(c))) {   /* clip_grad_value_ first, in place (then gs 1) */
        float v = (float)rt_clip_value(c);
        void *cv[] = {&grads, &opt.chunks, &gs, &v};
        rt_cu_launch(e, "rt_clip_values", (unsigned)opt.n, 1, 1, 256, 1, 0, cv);
        gs = 1.0f;
    }
    opt_args a = {params, pc, grads, state, stride, t, gs, sumsq, amax};
    if (c->opt == RT_OPT_MUON) {   /* AdamW over the rest (rt_adamw leaves the matrices) */
        double aw_lr;
        rt_train_config aw = rt_muon_adamw(c, lr, &aw_lr);
        adamw_launch(e, &opt, &aw, &a, aw_lr);
        for (int i = 0; i < m->n_params; i++)
            if (rt_muon_takes(c, &m->params[i]))
                muon_param(e, &opt, c, &m->params[i], &a, lr);
        return;
    }
    if (c->opt == RT_OPT_ADAMW) {
        adamw_launch(e, &opt, c, &a, lr);
        return;
    }
    float lrf = (float)lr, mom = (float)c->momentum;
    int has_buf = c->momentum > 0, nesterov = c->nesterov != 0;
    int mode = !has_buf ? 0 : t == 1 ? 1 : nesterov ? 3 : 2;
    rt_dptr buf = has_buf ? state : 0;
    void *args[] = {&params, &pc, &grads, &buf, &opt.lo, &opt.chunks, &gs, &sumsq, &max_norm,
                    &wd, &lrf, &mom, &mode, &nesterov, &amax};
    rt_cu_launch(e, "rt_sgd", (unsigned)opt.n, 1, 1, 256, 1, 0, args);
}

void rt_cu_optim_step(rt_exec *e, const rt_train_config *c, const rt_model *m, rt_dptr params,
                      rt_dptr grads, rt_dptr state, int64_t t, double lr, float gscale, int clip)
{
    optim_step(e, &opt, c, m, params, grads, state, opt.hi - opt.lo, t, lr,
               clip ? gscale : 1.0f, 0);
}

void rt_cu_ema_take(rt_exec *e, rt_dptr params, rt_dptr ema, int64_t n, double decay, int first)
{
    float w = (float)(1.0 - decay);
    void *args[] = {&params, &ema, &n, &w, &first};
    rt_cu_launch(e, "rt_ema_take", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_swa_take(rt_exec *e, rt_dptr params, rt_dptr avg, int64_t n, int64_t taken)
{
    float k = (float)(taken + 1);
    int first = taken == 0;
    void *args[] = {&params, &avg, &n, &k, &first};
    rt_cu_launch(e, "rt_swa_take", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_swap(rt_exec *e, rt_dptr a, rt_dptr b, int64_t n)
{
    void *args[] = {&a, &b, &n};
    rt_cu_launch(e, "rt_swap", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
}

void rt_cu_gan_update_queued(rt_exec *e, const rt_train_config *c, const rt_model *m, int d,
                             rt_dptr params, rt_dptr grads, rt_dptr state, int64_t t, double lr,
                             rt_dptr sumsq_out)
{
    opt_check(m);
    rt_dptr total = sumsq_queue(e, &gan_opt[d], grads);
    if (!total)
        return;
    int64_t one = 1;   /* (rt_sum_f64 of one double: its copy, out of scratch) */
    int set = 0;
    void *a[] = {&total, &one, &sumsq_out, &set};
    rt_cu_launch(e, "rt_sum_f64", 1, 1, 1, 1024, 1, 0, a);
    rt_dptr at = state ? state + (rt_dptr)gan_opt[d].lo * sizeof(float) : 0;
    optim_step(e, &gan_opt[d], c, m, params, grads, at, m->trainable_floats, t, lr, 1.0f, total);
}

void rt_cu_gan_optim_step(rt_exec *e, const rt_train_config *c, const rt_model *m, int d,
                          rt_dptr params, rt_dptr grads, rt_dptr state, int64_t t, double lr,
                          float gscale, int clip)
{
    /* the state's parts span the trained region (rt_optim_state_parts): this network's
     * range of each, trainable_floats apart */
    rt_dptr at = state ? state + (rt_dptr)gan_opt[d].lo * sizeof(float) : 0;
    optim_step(e, &gan_opt[d], c, m, params, grads, at, m->trainable_floats, t, lr,
               clip ? gscale : 1.0f, 0);
}

void rt_cu_optim_step_clip(rt_exec *e, const rt_train_config *c, const rt_model *m,
                           rt_dptr params, rt_dptr grads, rt_dptr state, int64_t t, double lr,
                           rt_dptr sumsq)
{
    optim_step(e, &opt, c, m, params, grads, state, opt.hi - opt.lo, t, lr, 1.0f, sumsq);
}

/* ---- fp8-mixed's casts (fp8.cuh) ----------------------------------------------------- */

/* The operands' maxima where their producers fold them (fp8.cuh): the slots of the
 * activations and gradients (rt_model.fp8_amax_slots words, reset each pass by the
 * generated code), and the weights' partials, one a chunk of the whole parameter
 * region (its own table: the optimizer's may be a ZeRO-1 shard) written by the
 * optimizer step or rt_fp8_chunk_amax. One device a process, as the optimizer's table. */
static struct {
    const rt_model *m;
    rt_dptr slots;
    int n_slots;
    opt_table w;               /* [0, param_floats) */
    rt_dptr wamax;             /* w.n floats */
} f8;

void rt_cu_fp8_setup(rt_exec *e, const rt_model *m)
{
    if (!m->fp8 || f8.m == m)
        return;
    f8.m = m;
    f8.n_slots = m->fp8_amax_slots;
    f8.slots = rt_cu_alloc_fixed(e, (size_t)(f8.n_slots > 0 ? f8.n_slots : 1) * 4);
    table_setup(e, &f8.w, NULL, m, 0, m->param_floats);   /* (no flags: every chunk) */
    f8.wamax = rt_cu_alloc_fixed(e, (size_t)(f8.w.n > 0 ? f8.w.n : 1) * 4);
}

static void fp8_slot_check(int first, int n)
{
    if (first < 0 || n < 0 || first + n > f8.n_slots)
        rt_die("fp8-mixed: amax slots [%d, %d) of %d", first, first + n, f8.n_slots);
}

void rt_cu_fp8_amax_reset(rt_exec *e, int first, int n)
{
    fp8_slot_check(first, n);
    if (n)
        rt_cu_zero(e, f8.slots + (rt_dptr)first * 4, n);
}

unsigned *rt_cu_fp8_amax_slot(rt_exec *e, int k)
{
    (void)e;
    fp8_slot_check(k, 1);
    return (unsigned *)(uintptr_t)(f8.slots + (rt_dptr)k * 4);
}

/* rt_fp8_amax_use's slots for the next call (-1: none): an FP8 GEMM takes all three
 * (cuda_blas.c), a norm's launch the output's */
static struct {
    int a, b, out;
} use_next = {-1, -1, -1};

void rt_cu_fp8_amax_use(rt_exec *e, int a, int b, int out)
{
    (void)e;
    use_next.a = a;
    use_next.b = b;
    use_next.out = out;
}

void rt_cu_fp8_take_use(int *a, int *b, int *out)
{
    *a = use_next.a;
    *b = use_next.b;
    *out = use_next.out;
    use_next.a = use_next.b = use_next.out = -1;
}

rt_dptr rt_cu_fp8_out_slot(rt_exec *e)
{
    int a, b, out;
    rt_cu_fp8_take_use(&a, &b, &out);
    return out >= 0 ? (rt_dptr)(uintptr_t)rt_cu_fp8_amax_slot(e, out) : 0;
}

/* The weights' partials for a 16-bit copy the host's parameters were copied into
 * (rt_cu_copy_params16): one pass over the copy, the only one the weights take. */
void rt_cu_fp8_weights_amax(rt_exec *e, const rt_model *m, rt_dptr pcopy)
{
    rt_cu_fp8_setup(e, m);
    if (f8.w.n == 0)
        return;
    void *args[] = {&pcopy, &f8.w.chunks, &f8.wamax};
    rt_cu_launch(e, "rt_fp8_chunk_amax", (unsigned)f8.w.n, 1, 1, 256, 1, 0, args);
}

int rt_cu_fp8_weight_part(rt_exec *e, const void *w, int64_t n, rt_dptr *part, int *nparts)
{
    const rt_model *m = f8.m;
    const float *p0 = e->params, *at = w;
    if (!m || !f8.w.n || at < p0 || at >= p0 + m->param_floats)
        return 0;
    int64_t off = at - p0, c = 0;   /* the chunks of the tensors before it */
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *p = &m->params[i];
        int64_t k = (p->numel + RT_OPT_CHUNK - 1) / RT_OPT_CHUNK;
        if (p->offset == off && p->numel == n) {
            *part = f8.wamax + (rt_dptr)c * 4;
            *nparts = (int)k;
            return k > 0;
        }
        c += k;
    }
    return 0;
}

/* Where an optimizer step over table tab writes the partials of the weights it updates:
 * the chunks of [0, tab->lo) come first in the whole region's table (a GAN network's
 * range starts at a tensor); 0 where it does not write the 16-bit copy (pc 0) */
static rt_dptr fp8_optim_amax(rt_exec *e, const opt_table *tab, const rt_model *m, rt_dptr pc)
{
    rt_cu_fp8_setup(e, m);
    if (!pc || !f8.w.n)
        return 0;
    return f8.wamax + (rt_dptr)cut_chunks(NULL, m, 0, tab->lo, NULL) * 4;
}

/* rt_fp8_amax unless the nparts partials at part are there (a producer's), then
 * rt_fp8_cast with trans 0, 1 or 2 (both layouts: y and yt) */
static void fp8_cast(rt_exec *e, rt_dptr x, int64_t rows, int64_t cols, int64_t ld, int e5m2,
                     int trans, rt_dptr y, rt_dptr yt, rt_dptr part, int nparts, rt_dptr scale)
{
    if (rows <= 0 || cols <= 0)
        rt_die("rt_cu_fp8_cast: an empty %lld x %lld operand", (long long)rows, (long long)cols);
    int parts = nparts;
    if (!parts) {
        /* the maximum: enough blocks to read at full speed, at most RT_FP8_PARTS partials */
        int64_t n = rows * cols, blocks = cdiv(n, 256 * 8), cap = rt_cu_sm_count(e) * 2;
        if (cap > RT_FP8_PARTS)
            cap = RT_FP8_PARTS;
        parts = (int)(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
        int fold = 0;
        void *amax_args[] = {&x, &rows, &cols, &ld, &part, &fold};
        rt_cu_launch(e, "rt_fp8_amax", (unsigned)parts, 1, 1, 256, 1, 0, amax_args);
    }
    /* the cast: 32 x 32 tiles, each block a grid-stride share of them */
    int64_t tiles = cdiv(rows, 32) * cdiv(cols, 32), tcap = (int64_t)rt_cu_sm_count(e) * 16;
    void *cast_args[] = {&x, &rows, &cols, &ld, &part, &parts, &e5m2, &trans, &y, &yt, &scale};
    rt_cu_launch(e, "rt_fp8_cast", (unsigned)(tiles < tcap ? tiles : tcap), 1, 1, 256, 1, 0,
                 cast_args);
}

void rt_cu_fp8_fold(rt_exec *e, rt_dptr x, int64_t rows, int64_t cols, int64_t ld, rt_dptr slot)
{
    int64_t n = rows * cols, blocks = cdiv(n, 256 * 8), cap = rt_cu_sm_count(e) * 2;
    if (cap > RT_FP8_PARTS)
        cap = RT_FP8_PARTS;
    unsigned parts = (unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
    int fold = 1;
    void *args[] = {&x, &rows, &cols, &ld, &slot, &fold};
    rt_cu_launch(e, "rt_fp8_amax", parts, 1, 1, 256, 1, 0, args);
}

void rt_cu_fp8_cast(rt_exec *e, rt_dptr x, int64_t rows, int64_t cols, int64_t ld, int e5m2,
                    int trans, rt_dptr y, rt_dptr part, int nparts, rt_dptr scale)
{
    fp8_cast(e, x, rows, cols, ld, e5m2, trans ? 1 : 0, y, 0, part, nparts, scale);
}

void rt_cu_fp8_cast_both(rt_exec *e, rt_dptr x, int64_t rows, int64_t cols, int64_t ld,
                         int e5m2, rt_dptr y, rt_dptr yt, rt_dptr part, int nparts, rt_dptr scale)
{
    fp8_cast(e, x, rows, cols, ld, e5m2, 2, y, yt, part, nparts, scale);
}

/* ---- registration -------------------------------------------------------------------- */

/* This file's twins of the CPU calls, handed to the device layer (which knows no op). */
void rt_cu_ops_register(void)
{
    static const rt_gpu_calls ops = {
        .colsum_add = rt_cu_colsum_add,
        .rowsum_add = rt_cu_rowsum_add,
        .im2col = rt_cu_im2col,
        .col2im = rt_cu_col2im,
        .maxpool2d_fwd = rt_cu_maxpool2d_fwd,
        .maxpool2d_bwd = rt_cu_maxpool2d_bwd,
        .avgpool2d_fwd = rt_cu_avgpool2d_fwd,
        .avgpool2d_bwd = rt_cu_avgpool2d_bwd,
        .layernorm_fwd = rt_cu_layernorm_fwd,
        .layernorm_bwd = rt_cu_layernorm_bwd,
        .grn_fwd = rt_cu_grn_fwd,
        .grn_bwd = rt_cu_grn_bwd,
        .rmsnorm_fwd = rt_cu_rmsnorm_fwd,
        .rmsnorm_bwd = rt_cu_rmsnorm_bwd,
        .qk_norm_fwd = rt_cu_qk_norm_fwd,
        .qk_norm_bwd = rt_cu_qk_norm_bwd,
        .moe_dispatch_fwd = rt_cu_moe_dispatch_fwd,
        .moe_dispatch_bwd = rt_cu_moe_dispatch_bwd,
        .moe_combine_fwd = rt_cu_moe_combine_fwd,
        .moe_combine_bwd = rt_cu_moe_combine_bwd,
        .moe_aux = rt_cu_moe_aux,
        .glu_fwd = rt_cu_glu_fwd,
        .glu_bwd = rt_cu_glu_bwd,
        .glu_gated_fwd = rt_cu_glu_gated_fwd,
        .glu_gated_bwd = rt_cu_glu_gated_bwd,
        .batchnorm_fwd = rt_cu_batchnorm_fwd,
        .batchnorm_bwd = rt_cu_batchnorm_bwd,
        .cross_entropy = rt_cu_cross_entropy,
        .cross_entropy_ls = rt_cu_cross_entropy_ls,
        .dpo = rt_cu_dpo,
        .ce_count = rt_cu_ce_count,
        .gconv_fwd = rt_cu_gconv_fwd,
        .gconv_bwd_data = rt_cu_gconv_bwd_data,
        .gconv_bwd_weight = rt_cu_gconv_bwd_weight,
        .conv_direct_fwd = rt_cu_conv_direct_fwd,
        .conv_direct_dw = rt_cu_conv_direct_dw,
        .conv_igemm_dx = rt_cu_conv_igemm_dx,
        .mse = rt_cu_mse,
        .gan_loss = rt_cu_gan_loss,
        .attention_fwd = rt_cu_attention_fwd,
        .attention_bwd = rt_cu_attention_bwd,
        .attention_ext_fwd = rt_cu_attention_ext_fwd,
        .attention_ext_bwd = rt_cu_attention_ext_bwd,
        .attention_decode = rt_cu_attention_decode,
        .pos_row_add = rt_cu_pos_row_add,
        .embedding_fwd = rt_cu_embedding_fwd,
        .embedding_bwd = rt_cu_embedding_bwd,
    };
    rt_cu_register(&ops);
}
