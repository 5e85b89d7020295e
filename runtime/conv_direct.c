/* conv_direct.c: conv2d on the CPU as a direct convolution, without columns, where the
 * CPU has AVX-512 or AVX2 with FMA (conv.c chooses; TRAINC_CONV_DIRECT=0 turns it off,
 * =avx2 keeps to AVX2). It serves the forward product (x -> yt, stride 1 or 2) and the
 * input gradient (dyt -> dx, stride 1: the same product of dY padded by k - 1 - pad with
 * the kernel flipped and its channels swapped; 3x3 of stride 2, with AVX-512 only:
 * dx2_outputs), for output channels in multiples of 16; and, for 3x3 kernels of stride
 * 1 or 2, the weight gradient (below).
 *
 * A task is one image: its input channels copied once into a zero-padded buffer, then
 * for each pass over blocks of 16 output channels, each output row, each run of outputs
 * of the row: accumulators for the run's channels and outputs in registers (AVX-512: 2
 * blocks x 8 outputs, a register each; AVX2: 1 block as 2 registers x 4 outputs), a
 * fused multiply-add for every input channel, kernel row and column, the input value
 * broadcast once for all the run's channels and their weights loaded once for the run
 * (3x3 kernels: run3_outputs, each input value broadcast once for the outputs it
 * reaches). The weights are first laid out as [block][in][ki][kj][16] (pack_weights).
 * The kernels are conv_direct_isa.h's, built once for each instruction set. Each output
 * is one thread's sum in a fixed order (input channel, ki, kj), so any number of
 * threads gives the same bits, and so does either instruction set where both take a
 * call. im2col wrote every input value k*k times into columns and OpenBLAS packed them
 * again: a third of a ResNet's CPU step, and the GEMMs on an image's few hundred columns
 * ran at half the speed of these loops (bench/RESULTS.md, which also has the shapes
 * where im2col wins: direct_fits). */
#define _GNU_SOURCE
#if defined(__x86_64__) && defined(__GNUC__)
#define DIRECT_X86 1   /* elsewhere (arm64) the level is 0: im2col and GEMMs */
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>
#include "rt.h"

#define DIRECT_CO 16     /* output channels a block */
#define DIRECT_MAXRUN 8  /* the most outputs of a row a run (AVX-512's) */
#define DIRECT_PLANE 1024 /* the largest output plane of the forward and dx */

typedef struct {
    const float *in, *wp;      /* input; weights as [Cout/16][Cin][k][k][16] */
    float *out;
    int64_t Cin, Cout, H, W, k, s, pad, OH, OW;   /* s: the stride, 1 or 2 */
    int64_t in_img, in_ch;     /* strides of an image and a channel plane (floats) */
    int64_t out_img, out_ch;
    int dx2;                   /* the input gradient of a 3x3 stride-2 conv (dx2_outputs) */
} direct_job;

/* A run of n outputs of row oh from column ow0, nb blocks, into tile [nb][n][16] */
typedef void run_fn(const direct_job *j, const float *xp, const float *wb, int64_t ws,
                    int64_t oh, int64_t ow0, int nb, float *tile);
/* part += one image's weight-gradient sums of input channels ci0 and ci0 + 1 */
typedef void dw_fn(const direct_job *j, const float *xp, const float *dyi, int64_t ci0,
                   float *part);

/* One instruction set's kernels: runs[n] and dx2_runs[n] for n up to `run`, `blocks`
 * blocks of 16 channels a run */
typedef struct {
    run_fn *runs[DIRECT_MAXRUN + 1], *dx2_runs[DIRECT_MAXRUN + 1];
    dw_fn *dw_channels;
    int run, blocks;
} direct_isa;

/* 0: off; 1: AVX2 and FMA; 2: AVX-512 (the most the CPU has, TRAINC_CONV_DIRECT and
 * rt_conv_direct_limit allow) */
static int direct_level = -1;

static int direct_detect(void)
{
    const char *env = getenv("TRAINC_CONV_DIRECT");
    int l = 0;
#ifdef DIRECT_X86
    __builtin_cpu_init();
    l = __builtin_cpu_supports("avx512f") ? 2
      : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
#endif
    if (env && !strcmp(env, "0"))
        return 0;
    if (env && !strcmp(env, "avx2") && l > 1)
        return 1;
    return l;
}

int rt_conv_direct_cpu(void)
{
    int l = __atomic_load_n(&direct_level, __ATOMIC_RELAXED);
    if (l < 0) {   /* every thread computes the same value */
        l = direct_detect();
        __atomic_store_n(&direct_level, l, __ATOMIC_RELAXED);
    }
    return l;
}

void rt_conv_direct_limit(int level)
{
    int l = direct_detect();
    __atomic_store_n(&direct_level, level < l ? level : l, __ATOMIC_RELAXED);
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

#ifdef DIRECT_X86
/* AVX-512: 32 registers, 16 of them a run's accumulators */
#define ISA avx512
#define TARGET __attribute__((target("avx512f")))
#define VEC __m512
#define VL 16
#define RUN 8
#define BLOCKS 2
#define DW_NC 2
#define DX2 1
#define V_ZERO() _mm512_setzero_ps()
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#include "conv_direct_isa.h"

/* AVX2: 16 registers, so a run is one block (two registers) by 4 outputs, and the weight
 * gradient takes one input channel at a time. No dx2_outputs: with 8 accumulators its
 * chains of 2 and 4 dependent multiply-adds left it slower than im2col at 14 x 14
 * (bench/RESULTS.md), so the input gradient of a stride-2 convolution is im2col's. */
#define ISA avx2
#define TARGET __attribute__((target("avx2,fma")))
#define VEC __m256
#define VL 8
#define RUN 4
#define BLOCKS 1
#define DW_NC 1
#define DX2 0
#define V_ZERO() _mm256_setzero_ps()
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#include "conv_direct_isa.h"

/* the kernels of the CPU's level (called where it is 1 or 2) */
static const direct_isa *direct_kernels(void)
{
    return rt_conv_direct_cpu() == 2 ? &direct_isa_avx512 : &direct_isa_avx2;
}
#else
static const direct_isa *direct_kernels(void) { return NULL; }
#endif

/* Run r of an output row: its length, from *ow (advanced). A row's runs differ in length
 * by at most one (14: 7 + 7); dx2's start at even columns, `run` wide but the last. */
static int run_length(const direct_job *j, int run, int64_t r, int64_t nruns, int64_t ow)
{
    if (j->dx2)
        return (int)(j->OW - ow < run ? j->OW - ow : run);
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
    const direct_isa *isa = direct_kernels();
    float tile[2 * DIRECT_MAXRUN * DIRECT_CO];   /* the most blocks a run: 2 */
    int64_t ws = j->Cin * j->k * j->k * DIRECT_CO, blocks = j->Cout / DIRECT_CO;
    int64_t nruns = (j->OW + isa->run - 1) / isa->run;
    int n;
    for (int64_t b = lo; b < hi; b++) {
        pad_image(j, j->in + b * j->in_img, xp);
        for (int64_t cb = 0; cb < blocks; cb += isa->blocks) {
            int nb = blocks - cb < isa->blocks ? (int)(blocks - cb) : isa->blocks;
            float *o = j->out + cb * DIRECT_CO * j->out_ch + b * j->out_img;
            for (int64_t oh = 0; oh < j->OH; oh++)
                for (int64_t r = 0, ow = 0; r < nruns; r++, ow += n) {
                    n = run_length(j, isa->run, r, nruns, ow);
                    (j->dx2 ? isa->dx2_runs : isa->runs)[n](j, xp, j->wp + cb * ws, ws, oh, ow,
                                                            nb, tile);
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
        !direct_fits(e, Cout, C, OH, OW, p, k, H * W) ||
        (s == 2 && !direct_kernels()->dx2_runs[1]))   /* (AVX2 has no dx2_outputs) */
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
    dw_fn *dw = direct_kernels()->dw_channels;
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
                    dw(j, xp, dyi + cb * ohw * DIRECT_CO, ci, part + cb * taps);
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
