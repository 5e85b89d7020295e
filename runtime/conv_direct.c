/* conv_direct.c: conv2d on the CPU as a direct convolution, without columns, where the
 * CPU has AVX-512 (conv.c chooses; TRAINC_CONV_DIRECT=0 turns it off). It serves the
 * forward product (x -> yt, stride 1 or 2) and the input gradient (dyt -> dx, stride 1:
 * the same product of dY padded by k - 1 - pad with the kernel flipped and its channels
 * swapped; 3x3 of stride 2: dx2_outputs), for output channels in multiples of 16; and,
 * for 3x3 kernels of stride 1 or 2, the weight gradient (below).
 *
 * A task is one image: its input channels copied once into a zero-padded buffer, then
 * for each pair of blocks of 16 output channels, each output row, each run of up to 8
 * outputs of the row: 16 accumulators (2 blocks x 8 outputs, one AVX-512 register
 * each), a fused multiply-add for every input channel, kernel row and column, the
 * input value broadcast once for both blocks and each block's weights loaded once for
 * the 8 (3x3 kernels: run3_outputs, each input value broadcast once for the outputs it
 * reaches). The weights are first laid out as [block][in][ki][kj][16] (pack_weights).
 * Each output is one thread's sum in a fixed order (input channel, ki, kj), so any
 * number of threads gives the same bits. im2col wrote every input value k*k times into
 * columns and OpenBLAS packed them again: a third of a ResNet's CPU step, and the
 * GEMMs on an image's few hundred columns ran at half the speed of these loops
 * (bench/RESULTS.md, which also has the shapes where im2col wins: direct_fits). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"

#define DIRECT_CO 16   /* output channels a block: one register */
#define DIRECT_RUN 8   /* outputs of a row a run */
#define DIRECT_BLOCKS 2   /* blocks of 16 channels a run: 16 accumulators */
#define DIRECT_PLANE 1024 /* the largest output plane of the forward and dx */

typedef struct {
    const float *in, *wp;      /* input; weights as [Cout/16][Cin][k][k][16] */
    float *out;
    int64_t Cin, Cout, H, W, k, s, pad, OH, OW;   /* s: the stride, 1 or 2 */
    int64_t in_img, in_ch;     /* strides of an image and a channel plane (floats) */
    int64_t out_img, out_ch;
    int dx2;                   /* the input gradient of a 3x3 stride-2 conv (dx2_outputs) */
} direct_job;

int rt_conv_direct_cpu(void)
{
    static int ok = -1;
    if (ok < 0) {
        const char *env = getenv("TRAINC_CONV_DIRECT");
        __builtin_cpu_init();
        ok = !(env && !strcmp(env, "0")) && __builtin_cpu_supports("avx512f");
    }
    return ok;
}

/* w [Cout][Cin][k][k] as [Cout/16][Cin][k][k][16]; flip: the input gradient's kernel,
 * w [Cin'][Cout'][k][k] read as [Cout'][Cin'] turned by 180 degrees. */
static void pack_weights(const float *w, float *wp, int64_t Cout, int64_t Cin, int64_t k, int flip)
{
    int64_t kk = k * k;
    for (int64_t co = 0; co < Cout; co++)
        for (int64_t ci = 0; ci < Cin; ci++)
            for (int64_t t = 0; t < kk; t++) {
                float v = flip ? w[(ci * Cout + co) * kk + (kk - 1 - t)]
                               : w[(co * Cin + ci) * kk + t];
                wp[(((co / DIRECT_CO) * Cin + ci) * kk + t) * DIRECT_CO + co % DIRECT_CO] = v;
            }
}

/* One image's input channels into xp, [Cin][PH][PW] with pad zeros around. */
static void pad_image(const direct_job *j, const float *x, float *xp)
{
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad;
    memset(xp, 0, (size_t)(j->Cin * PH * PW) * sizeof(float));
    for (int64_t ci = 0; ci < j->Cin; ci++)
        for (int64_t h = 0; h < j->H; h++)
            memcpy(xp + (ci * PH + h + j->pad) * PW + j->pad, x + ci * j->in_ch + h * j->W,
                   (size_t)j->W * sizeof(float));
}

/* A run's accumulators: nb blocks of 16 channels by n outputs, zeroed, and stored into
 * tile [nb][n][16] (nb and n constants where these are inlined) */
__attribute__((target("avx512f"), always_inline)) static inline void
acc_zero(__m512 (*acc)[DIRECT_RUN], int n, int nb)
{
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < n; i++)
            acc[b][i] = _mm512_setzero_ps();
}

__attribute__((target("avx512f"), always_inline)) static inline void
acc_store(__m512 (*acc)[DIRECT_RUN], int n, int nb, float *tile)
{
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < n; i++)
            _mm512_storeu_ps(tile + (b * n + i) * DIRECT_CO, acc[b][i]);
}

/* A 3x3 kernel row's three weight vectors of each block (blocks wstride floats apart) */
__attribute__((target("avx512f"), always_inline)) static inline void
row_weights(__m512 (*w)[3], const float *wv, int64_t wstride, int nb)
{
    for (int b = 0; b < nb; b++)
        for (int kj = 0; kj < 3; kj++)
            w[b][kj] = _mm512_loadu_ps(wv + b * wstride + kj * DIRECT_CO);
}

/* One broadcast value v at position pos of a kernel row, multiplied into the outputs it
 * reaches: output i = (pos - kj) / s by tap kj, where that divides and is in the run
 * (everything but v constant where it is inlined) */
__attribute__((target("avx512f"), always_inline)) static inline void
reach(__m512 v, __m512 (*w)[3], int pos, int s, int n, int nb, __m512 (*acc)[DIRECT_RUN])
{
    for (int kj = 0; kj < 3; kj++) {
        int d = pos - kj;
        if (d < 0 || d % s || d / s >= n)
            continue;
        for (int b = 0; b < nb; b++)
            acc[b][d / s] = _mm512_fmadd_ps(v, w[b][kj], acc[b][d / s]);
    }
}

/* n outputs of row oh from ow0, nb blocks of 16 channels (weights wb: [nb][Cin][k][k]
 * [16], blocks wstride floats apart), into tile [nb][n][16]; n, nb and the stride s
 * constants where it is inlined */
__attribute__((target("avx512f"), always_inline)) static inline void
run_outputs(const direct_job *j, const float *xp, const float *wb, int64_t wstride, int64_t oh,
            int64_t ow0, int n, int nb, int s, float *tile)
{
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad, k = j->k;
    __m512 acc[DIRECT_BLOCKS][DIRECT_RUN];
    acc_zero(acc, n, nb);
    for (int64_t ci = 0; ci < j->Cin; ci++)
        for (int64_t ki = 0; ki < k; ki++) {
            const float *r = xp + (ci * PH + oh * s + ki) * PW + ow0 * s;
            const float *wv = wb + (ci * k + ki) * k * DIRECT_CO;
            for (int64_t kj = 0; kj < k; kj++) {
                __m512 w[DIRECT_BLOCKS];
                for (int b = 0; b < nb; b++)
                    w[b] = _mm512_loadu_ps(wv + b * wstride + kj * DIRECT_CO);
                for (int i = 0; i < n; i++) {
                    __m512 v = _mm512_set1_ps(r[i * s + kj]);
                    for (int b = 0; b < nb; b++)
                        acc[b][i] = _mm512_fmadd_ps(v, w[b], acc[b][i]);
                }
            }
        }
    acc_store(acc, n, nb, tile);
}

/* run_outputs for 3x3 kernels: for each input channel and kernel row, each block's three
 * weight vectors loaded once and each input value of the row broadcast once, then
 * multiplied into every output it reaches. An output's products still arrive in the
 * order (input channel, ki, kj), so its bits are run_outputs'. */
__attribute__((target("avx512f"), always_inline)) static inline void
run3_outputs(const direct_job *j, const float *xp, const float *wb, int64_t wstride, int64_t oh,
             int64_t ow0, int n, int nb, int s, float *tile)
{
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad;
    __m512 acc[DIRECT_BLOCKS][DIRECT_RUN], w[DIRECT_BLOCKS][3];
    acc_zero(acc, n, nb);
    for (int64_t ci = 0; ci < j->Cin; ci++)
        for (int64_t ki = 0; ki < 3; ki++) {
            const float *r = xp + (ci * PH + oh * s + ki) * PW + ow0 * s;
            row_weights(w, wb + (ci * 3 + ki) * 3 * DIRECT_CO, wstride, nb);
#pragma GCC unroll 24
            for (int x = 0; x < (n - 1) * s + 3; x++)
                reach(_mm512_set1_ps(r[x]), w, x, s, n, nb, acc);
        }
    acc_store(acc, n, nb, tile);
}

#define RUN_N(n)                                                                             \
    __attribute__((target("avx512f"))) static void run_##n(const direct_job *j,              \
        const float *xp, const float *wb, int64_t ws, int64_t oh, int64_t ow0, int nb,        \
        float *tile)                                                                         \
    {                                                                                        \
        if (j->k == 3 && j->s == 2 && nb == 2)                                               \
            run3_outputs(j, xp, wb, ws, oh, ow0, n, 2, 2, tile);                             \
        else if (j->k == 3 && j->s == 2)                                                     \
            run3_outputs(j, xp, wb, ws, oh, ow0, n, 1, 2, tile);                             \
        else if (j->k == 3 && nb == 2)                                                       \
            run3_outputs(j, xp, wb, ws, oh, ow0, n, 2, 1, tile);                             \
        else if (j->k == 3)                                                                  \
            run3_outputs(j, xp, wb, ws, oh, ow0, n, 1, 1, tile);                             \
        else if (j->s == 2 && nb == 2)                                                       \
            run_outputs(j, xp, wb, ws, oh, ow0, n, 2, 2, tile);                              \
        else if (j->s == 2)                                                                  \
            run_outputs(j, xp, wb, ws, oh, ow0, n, 1, 2, tile);                              \
        else if (nb == 2)                                                                    \
            run_outputs(j, xp, wb, ws, oh, ow0, n, 2, 1, tile);                              \
        else                                                                                 \
            run_outputs(j, xp, wb, ws, oh, ow0, n, 1, 1, tile);                              \
    }
RUN_N(1) RUN_N(2) RUN_N(3) RUN_N(4) RUN_N(5) RUN_N(6) RUN_N(7) RUN_N(8)
typedef void run_fn(const direct_job *, const float *, const float *, int64_t, int64_t, int64_t,
                    int, float *);
static run_fn *const runs[DIRECT_RUN + 1] = {NULL, run_1, run_2, run_3, run_4,
                                             run_5, run_6, run_7, run_8};

/* The input gradient of a 3x3 convolution of stride 2 and padding 1, without the zeros
 * a stride-1 product over dY dilated by 2 would multiply: output (h, w) of dx takes the
 * taps ki = 1 (h even) or ki = 0 and 2 (h odd), and likewise kj, from dY's row
 * (h + 1 - ki) / 2 and column (w + 1 - kj) / 2. xp is dY padded by 1 (rows and columns
 * -1 and OH, OW read as zeros); the weights are packed flipped (tap (2 - ki, 2 - kj)).
 * A run of n outputs starts at an even w0, so which kj reaches which output is known
 * when the run is compiled: dY's value at column w0 / 2 + t - 1 goes to output
 * i = 2 t - 3 + kj, which is reach's 2 t - 1 - m for the packed tap m = 2 - kj. */
__attribute__((target("avx512f"), always_inline)) static inline void
dx2_outputs(const direct_job *j, const float *xp, const float *wb, int64_t wstride, int64_t h,
            int64_t w0, int n, int nb, float *tile)
{
    int64_t PH = j->H + 2, PW = j->W + 2;
    __m512 acc[DIRECT_BLOCKS][DIRECT_RUN], w[DIRECT_BLOCKS][3];
    acc_zero(acc, n, nb);
    for (int64_t co = 0; co < j->Cin; co++)
        for (int64_t ki = h % 2 ? 0 : 1; ki < 3; ki += 2) {
            const float *r = xp + (co * PH + (h + 1 - ki) / 2 + 1) * PW + w0 / 2;
            /* w[m]: the packed tap (2 - ki, m), kj = 2 - m */
            row_weights(w, wb + (co * 9 + (2 - ki) * 3) * DIRECT_CO, wstride, nb);
#pragma GCC unroll 8
            for (int t = 1; t <= (n + 2) / 2; t++)
                reach(_mm512_set1_ps(r[t]), w, 2 * t - 1, 1, n, nb, acc);
        }
    acc_store(acc, n, nb, tile);
}

#define DX2_N(n)                                                                             \
    __attribute__((target("avx512f"))) static void dx2_##n(const direct_job *j,              \
        const float *xp, const float *wb, int64_t ws, int64_t oh, int64_t ow0, int nb,        \
        float *tile)                                                                         \
    {                                                                                        \
        if (nb == 2)                                                                         \
            dx2_outputs(j, xp, wb, ws, oh, ow0, n, 2, tile);                                 \
        else                                                                                 \
            dx2_outputs(j, xp, wb, ws, oh, ow0, n, 1, tile);                                 \
    }
DX2_N(1) DX2_N(2) DX2_N(3) DX2_N(4) DX2_N(5) DX2_N(6) DX2_N(7) DX2_N(8)
static run_fn *const dx2_runs[DIRECT_RUN + 1] = {NULL, dx2_1, dx2_2, dx2_3, dx2_4,
                                                 dx2_5, dx2_6, dx2_7, dx2_8};

/* Run r of an output row: its length, from *ow (advanced). A row's runs differ in length
 * by at most one (14: 7 + 7); dx2's start at even columns, 8 wide but the last. */
static int run_length(const direct_job *j, int64_t r, int64_t nruns, int64_t ow)
{
    if (j->dx2)
        return (int)(j->OW - ow < DIRECT_RUN ? j->OW - ow : DIRECT_RUN);
    return (int)((r + 1) * j->OW / nruns - ow);
}

/* Images [lo, hi): every output of each */
static void direct_images(void *ctx, int64_t lo, int64_t hi)
{
    const direct_job *j = ctx;
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad;
    float *xp = malloc((size_t)(j->Cin * PH * PW) * sizeof(float));
    if (!xp)
        rt_fail("out of memory");
    float tile[DIRECT_BLOCKS * DIRECT_RUN * DIRECT_CO];
    int64_t ws = j->Cin * j->k * j->k * DIRECT_CO, blocks = j->Cout / DIRECT_CO;
    int64_t nruns = (j->OW + DIRECT_RUN - 1) / DIRECT_RUN;
    int n;
    for (int64_t b = lo; b < hi; b++) {
        pad_image(j, j->in + b * j->in_img, xp);
        for (int64_t cb = 0; cb < blocks; cb += DIRECT_BLOCKS) {
            int nb = blocks - cb < DIRECT_BLOCKS ? (int)(blocks - cb) : DIRECT_BLOCKS;
            float *o = j->out + cb * DIRECT_CO * j->out_ch + b * j->out_img;
            for (int64_t oh = 0; oh < j->OH; oh++)
                for (int64_t r = 0, ow = 0; r < nruns; r++, ow += n) {
                    n = run_length(j, r, nruns, ow);
                    (j->dx2 ? dx2_runs : runs)[n](j, xp, j->wp + cb * ws, ws, oh, ow, nb, tile);
                    for (int l = 0; l < nb * DIRECT_CO; l++)
                        for (int i = 0; i < n; i++)
                            o[l * j->out_ch + oh * j->OW + ow + i] =
                                tile[((l / DIRECT_CO) * n + i) * DIRECT_CO + l % DIRECT_CO];
                }
        }
    }
    free(xp);
}

static void run_job(rt_exec *e, direct_job *j, const float *w, int flip, int64_t B)
{
    size_t n = (size_t)(j->Cout * j->Cin * j->k * j->k);
    float *wp = (float *)rt_pool_scratch(e->rt, (n + 1) / 2);
    pack_weights(w, wp, j->Cout, j->Cin, j->k, flip);
    j->wp = wp;
    rt_pool_run(e->rt, B, 1, direct_images, j);
}

/* Whether the direct path takes this call (the stride: each caller's): on the CPU,
 * with the pool, output channels in blocks of 16, an image's padded input within 4 MiB, and where it beats
 * im2col and OpenBLAS (bench/conv_cpu.c, one core): a kernel wider than 1x1, at least 8
 * input channels, and for the forward and the input gradient an output plane of at
 * most 1024 positions (at 56 x 56 the GEMMs' N is large enough for OpenBLAS to catch
 * up; the weight gradient stays ahead there). */
static int direct_fits(const rt_exec *e, int64_t Cin, int64_t Cout, int64_t H, int64_t W,
                       int64_t pad, int64_t k, int64_t plane)
{
    return !e->dev && e->rt && rt_conv_direct_cpu() && Cout % DIRECT_CO == 0 && pad < k && k > 1 && Cin >= 8 &&
           plane <= DIRECT_PLANE && Cin * (H + 2 * pad) * (W + 2 * pad) <= (1 << 20);
}

int rt_conv_direct_fwd(rt_exec *e, const float *x, const float *w, float *yt, int64_t B, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                       int64_t OW, int64_t Cout)
{
    if ((s != 1 && s != 2) || !direct_fits(e, C, Cout, H, W, pad, k, OH * OW))
        return 0;
    direct_job j = {x, NULL, yt, C, Cout, H, W, k, s, pad, OH, OW,
                    C * H * W, H * W, OH * OW, B * OH * OW, 0};
    run_job(e, &j, w, 0, B);
    return 1;
}

int rt_conv_direct_dx(rt_exec *e, const float *w, const float *dyt, float *dx, int64_t B,
                      int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                      int64_t OH, int64_t OW, int64_t Cout)
{
    /* dx = dY padded by k - 1 - pad, correlated with the flipped kernel: dY's Cout
     * channels in, C out; dyt is [Cout, B, OH*OW] */
    int64_t p = s == 2 ? 1 : k - 1 - pad;   /* stride 2: dY's padding (dx2_outputs) */
    if (!(s == 1 || (s == 2 && k == 3 && pad == 1)) || p < 0 ||
        !direct_fits(e, Cout, C, OH, OW, p, k, H * W))
        return 0;
    direct_job j = {dyt, NULL, dx, Cout, C, OH, OW, k, s, p, H, W,
                    OH * OW, B * OH * OW, C * H * W, H * W, s == 2};
    run_job(e, &j, w, 1, B);
    return 1;
}

/* ---- the weight gradient (3x3, stride 1 or 2) ----------------------------------------
 * dW[co][ci][ki][kj] += the sum over images and output positions of dY[co] times the
 * input at (ci, oh s + ki, ow s + kj), padded. The batch is cut into DW_GROUPS groups of whole
 * images by the shapes alone; a group's images add into its partial one after another
 * (16 output channels by the 9 taps of 2 input channels, 18 registers, summed over an
 * image's positions, then added in), and the partials are added in group order: the
 * same bits on any number of threads. dY is [Cout, B, OH*OW]: each image's is first laid
 * out as [Cout/16][OH*OW][16], so a position's 16 channels are one load. */
#define DW_GROUPS 32
#define DW_PART_BYTES (16 << 20)

typedef struct {
    direct_job g;              /* in: x; Cin, Cout, H, W, pad, OH, OW; out: dw */
    const float *dyt;
    float *part;               /* [groups][Cout/16][Cin*9][16] */
    int64_t B, groups;
} dw_job;

/* part [Cin*9][16] += image's sums for channels ci0 .. ci0 + nc (dyi: [OH*OW][16]); nc
 * and the stride s constants where it is inlined */
__attribute__((target("avx512f"), always_inline)) static inline void
dw_taps(const direct_job *j, const float *xp, const float *dyi, int64_t ci0, int nc, int s,
        float *part)
{
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad;
    __m512 acc[2][9];
    for (int c = 0; c < nc; c++)
        for (int t = 0; t < 9; t++)
            acc[c][t] = _mm512_setzero_ps();
    for (int64_t oh = 0; oh < j->OH; oh++) {
        const float *r[2][3];
        for (int c = 0; c < nc; c++)
            for (int ki = 0; ki < 3; ki++)
                r[c][ki] = xp + ((ci0 + c) * PH + oh * s + ki) * PW;
        for (int64_t ow = 0; ow < j->OW; ow++) {
            __m512 v = _mm512_loadu_ps(dyi + (oh * j->OW + ow) * DIRECT_CO);
            for (int c = 0; c < nc; c++)
                for (int ki = 0; ki < 3; ki++)
                    for (int kj = 0; kj < 3; kj++)
                        acc[c][ki * 3 + kj] = _mm512_fmadd_ps(
                            v, _mm512_set1_ps(r[c][ki][ow * s + kj]), acc[c][ki * 3 + kj]);
        }
    }
    for (int c = 0; c < nc; c++)
        for (int t = 0; t < 9; t++) {
            float *p = part + ((ci0 + c) * 9 + t) * DIRECT_CO;
            _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc[c][t]));
        }
}

/* channels ci0 and ci0 + 1 where both are (else ci0 alone) */
__attribute__((target("avx512f"))) static void dw_channels(const direct_job *j, const float *xp,
                                                           const float *dyi, int64_t ci0,
                                                           float *part)
{
    int two = j->Cin - ci0 >= 2;
    if (j->s == 2 && two)
        dw_taps(j, xp, dyi, ci0, 2, 2, part);
    else if (j->s == 2)
        dw_taps(j, xp, dyi, ci0, 1, 2, part);
    else if (two)
        dw_taps(j, xp, dyi, ci0, 2, 1, part);
    else
        dw_taps(j, xp, dyi, ci0, 1, 1, part);
}

/* image b's dY as [Cout/16][OH*OW][16] */
static void dy_image(const dw_job *d, int64_t b, float *dyi)
{
    int64_t ohw = d->g.OH * d->g.OW;
    for (int64_t co = 0; co < d->g.Cout; co++) {
        const float *src = d->dyt + (co * d->B + b) * ohw;
        float *dst = dyi + (co / DIRECT_CO) * ohw * DIRECT_CO + co % DIRECT_CO;
        for (int64_t q = 0; q < ohw; q++)
            dst[q * DIRECT_CO] = src[q];
    }
}

/* groups [lo, hi): each group's partial, its images in order */
static void dw_groups(void *ctx, int64_t lo, int64_t hi)
{
    const dw_job *d = ctx;
    const direct_job *j = &d->g;
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad, ohw = j->OH * j->OW;
    int64_t taps = j->Cin * 9 * DIRECT_CO, n = j->Cout * j->Cin * 9;
    float *xp = malloc((size_t)(j->Cin * PH * PW + j->Cout * ohw) * sizeof(float));
    if (!xp)
        rt_fail("out of memory");
    float *dyi = xp + j->Cin * PH * PW;
    for (int64_t g = lo; g < hi; g++) {
        float *part = d->part + g * n;
        memset(part, 0, (size_t)n * sizeof(float));
        for (int64_t b = g * d->B / d->groups; b < (g + 1) * d->B / d->groups; b++) {
            pad_image(j, j->in + b * j->in_img, xp);
            dy_image(d, b, dyi);
            for (int64_t cb = 0; cb < j->Cout / DIRECT_CO; cb++)
                for (int64_t ci = 0; ci < j->Cin; ci += 2)
                    dw_channels(j, xp, dyi + cb * ohw * DIRECT_CO, ci, part + cb * taps);
        }
    }
    free(xp);
}

/* dw[i] += the partials' sums for weight i, added in group order */
static void dw_sum(void *ctx, int64_t lo, int64_t hi)
{
    const dw_job *d = ctx;
    int64_t u_n = d->g.Cin * 9, n = d->g.Cout * u_n;
    for (int64_t i = lo; i < hi; i++) {
        int64_t co = i / u_n, u = i % u_n;
        int64_t at = ((co / DIRECT_CO) * u_n + u) * DIRECT_CO + co % DIRECT_CO;
        float v = d->part[at];
        for (int64_t g = 1; g < d->groups; g++)
            v += d->part[g * n + at];
        d->g.out[i] += v;
    }
}

int rt_conv_direct_dw(rt_exec *e, const float *x, const float *dyt, float *dw, int64_t B, int64_t C,
                      int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                      int64_t OW, int64_t Cout)
{
    int64_t groups = B < DW_GROUPS ? B : DW_GROUPS, n = Cout * C * 9;
    int64_t part_bytes = groups * n * (int64_t)sizeof(float);
    if ((s != 1 && s != 2) || k != 3 || !direct_fits(e, C, Cout, H, W, pad, k, 0) ||
        part_bytes > DW_PART_BYTES)
        return 0;
    dw_job d = {{x, NULL, dw, C, Cout, H, W, k, s, pad, OH, OW, C * H * W, H * W, 0, 0, 0}, dyt,
                NULL, B, groups};
    d.part = (float *)rt_pool_scratch(e->rt, (size_t)(groups * n + 1) / 2);
    rt_pool_run(e->rt, groups, 1, dw_groups, &d);
    rt_pool_run(e->rt, n, rt_grain_for(groups), dw_sum, &d);
    return 1;
}
