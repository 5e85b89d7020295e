/* batchnorm.c: BatchNorm's CPU kernels (rt_batchnorm_fwd, rt_batchnorm_bwd; the GPU's
 * twins are in templates/cuda/batchnorm.cuh), PyTorch's BatchNorm1d/2d and, with sync,
 * SyncBatchNorm.
 *
 * x is [B, C, HW]: channel c's values are B runs of HW floats, C * HW apart. A task
 * takes whole channels and adds each channel's values image by image, in the same order
 * whatever the thread count, so every sum has the same bits. The statistics take one
 * pass: the sum and the sum of squares in double (a float's square is exact in double,
 * and the cancellation in sumsq / N - mean^2 costs at most mean^2 / var units of
 * 2^-52); the normalization y = x scale + shift is the generated code's elementwise
 * loop (fused with what follows): this file works out scale and shift. The backward
 * pass's two reductions (sum dy, sum (x - mean) dy) take one pass, dx a second, in the
 * form PyTorch's CPU kernel uses. With sync and several ranks the per-channel sums (and
 * the counts) are all-reduced between the passes; dw and db stay this rank's own (DDP
 * averages them as it does every gradient), as in SyncBatchNorm. The per-channel sums
 * and dx's factors live in the thread pool's scratch, kept from step to step; chunks
 * take kernels.c's rt_grain_for. */
#include <math.h>
#include <string.h>
#include "rt.h"
#include "rt_dist.h"
#include "rt_vec.h"

typedef struct {
    const float *x, *dy, *w;      /* [B, C, HW], [B, C, HW], [C] (w may be NULL) */
    float *dx;                    /* [B, C, HW] */
    const float *gk;              /* bwd's [C, 2]: dx's mean of dy and its xhat factor */
    const float *mean, *rstd;     /* bwd's [C] */
    double *sums;                 /* [C, 2]: sum x and sum x^2, or sum dy and sum xmu dy */
    int64_t B, C, HW;
} bn_ctx;

/* The channel sums run in BN_LANES interleaved partial sums (element i of an image plane
 * goes to lane i % BN_LANES), added pairwise at the end (lane i with i + 8, then + 4,
 * + 2, + 1): independent additions instead of one chain, in an order fixed by the
 * shape. The loops over a channel are built twice, for the baseline x86-64 and for AVX2
 * (taken when the CPU has it): the same operations in the same order (no FMA:
 * -ffp-contract=off), so the same bits. */
#define BN_LANES 16

static double lanes_sum(const double *l)
{
    double h[BN_LANES / 2];
    for (int w = BN_LANES / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            h[i] = (w == BN_LANES / 2 ? l[i] + l[i + w] : h[i] + h[i + w]);
    return h[0];
}

/* One block of BN_LANES values of channel ch added into its lanes, as BN_LANES / 4
 * vectors of 4 doubles (lane 4 k + j is element j of vector k); a plane's last,
 * shorter block is first copied into a block padded with values that add nothing (x: 0;
 * dy: 0 and x: the mean, so x - mean is 0). */
#define BN_VECS (BN_LANES / 4)

/* 4 floats as 4 doubles, a whole v4d (a macro: a function returning an AVX vector
 * would change the ABI of the baseline build) */
#define LD4(p) __builtin_convertvector(ld4(p), v4d)

static inline __attribute__((always_inline)) void stats_block(const float *x, v4d *s,
                                                              v4d *q)
{
    for (int k = 0; k < BN_VECS; k++) {
        v4d v = LD4(x + 4 * k);
        s[k] += v;
        q[k] += v * v;
    }
}

static inline __attribute__((always_inline)) void bwd_block(const float *x, const float *dy,
                                                            float m, v4d *s, v4d *p)
{
    for (int k = 0; k < BN_VECS; k++) {
        v4d d = LD4(dy + 4 * k);
        v4f xm = ld4(x + 4 * k) - m;
        s[k] += d;
        p[k] += __builtin_convertvector(xm, v4d) * d;
    }
}

/* The tail of a plane: n < BN_LANES values of x, then pad */
static inline __attribute__((always_inline)) void tail_block(float *t, const float *x, int64_t n,
                                                             float pad)
{
    for (int l = 0; l < BN_LANES; l++)
        t[l] = l < n ? x[l] : pad;
}

static double vecs_sum(const v4d *v)
{
    double l[BN_LANES];
    memcpy(l, v, sizeof l);
    return lanes_sum(l);
}

/* A task's channels [lo, hi) are walked BN_CHUNK at a time, image by image (each
 * image's planes of the chunk are consecutive in memory), their lanes kept in the
 * chunk's arrays: every lane still adds its values in the order of the images. */
#define BN_CHUNK 16

/* The two sums of one plane of n values (x and, for the backward, dy) into s and q */
static inline __attribute__((always_inline)) void plane_sums(const float *x, const float *dy,
                                                             float m, int64_t n, v4d *s,
                                                             v4d *q)
{
    int64_t full = n / BN_LANES * BN_LANES;
    for (int64_t i = 0; i < full; i += BN_LANES)
        dy ? bwd_block(x + i, dy + i, m, s, q) : stats_block(x + i, s, q);
    if (full < n) {
        float tx[BN_LANES], td[BN_LANES];
        tail_block(tx, x + full, n - full, dy ? m : 0.0f);
        if (dy) {
            tail_block(td, dy + full, n - full, 0.0f);
            bwd_block(tx, td, m, s, q);
        } else {
            stats_block(tx, s, q);
        }
    }
}

#define BN_LOOPS(suffix, attr)                                                                \
    /* sums[2 ch], sums[2 ch + 1] for channels [lo, hi): (sum x, sum x^2), or with dy         \
     * (sum dy, sum (x - mean) dy) */                                                         \
    attr static void chan_sums_##suffix(const bn_ctx *c, const float *dy, int64_t lo,         \
                                        int64_t hi)                                           \
    {                                                                                         \
        v4d s[BN_CHUNK][BN_VECS], q[BN_CHUNK][BN_VECS];                                       \
        for (int64_t c0 = lo; c0 < hi; c0 += BN_CHUNK) {                                      \
            int64_t nc = hi - c0 < BN_CHUNK ? hi - c0 : BN_CHUNK;                             \
            memset(s, 0, sizeof s);                                                           \
            memset(q, 0, sizeof q);                                                           \
            for (int64_t b = 0; b < c->B; b++)                                                \
                for (int64_t u = 0; u < nc; u++) {                                            \
                    int64_t at = (b * c->C + c0 + u) * c->HW;                                 \
                    plane_sums(c->x + at, dy ? dy + at : NULL, dy ? c->mean[c0 + u] : 0.0f,   \
                               c->HW, s[u], q[u]);                                            \
                }                                                                             \
            for (int64_t u = 0; u < nc; u++) {                                                \
                c->sums[2 * (c0 + u)] = vecs_sum(s[u]);                                       \
                c->sums[2 * (c0 + u) + 1] = vecs_sum(q[u]);                                   \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    /* dx = (dy - grad_mean - (x - mean) k) rstd w for channels [lo, hi) */                   \
    attr static void chan_dx_##suffix(const bn_ctx *c, int64_t lo, int64_t hi)                \
    {                                                                                         \
        for (int64_t b = 0; b < c->B; b++)                                                    \
            for (int64_t ch = lo; ch < hi; ch++) {                                            \
                float m = c->mean[ch], gm = c->gk[2 * ch], k = c->gk[2 * ch + 1];             \
                float sc = c->rstd[ch] * (c->w ? c->w[ch] : 1.0f);                            \
                const float *restrict x = c->x + (b * c->C + ch) * c->HW;                     \
                const float *restrict dy = c->dy + (b * c->C + ch) * c->HW;                   \
                float *restrict dx = c->dx + (b * c->C + ch) * c->HW;                         \
                for (int64_t i = 0; i < c->HW; i++)                                           \
                    dx[i] = (dy[i] - gm - (x[i] - m) * k) * sc;                               \
            }                                                                                 \
    }
BN_LOOPS(base, )
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__TINYC__)
BN_LOOPS(avx2, __attribute__((target("avx2"))))
#define BN_LOOP(name) (rt_have_avx2() ? name##_avx2 : name##_base)
#else
#define BN_LOOP(name) name##_base
#endif

static void bn_stats_task(void *ctx, int64_t lo, int64_t hi)
{
    BN_LOOP(chan_sums)(ctx, NULL, lo, hi);
}

/* The per-channel sums [C, 2] (and the count, sums[2 C], for the all-reduce), then
 * extra doubles: the pool's scratch, kept from step to step. */
static double *bn_scratch(rt_exec *e, int64_t C, int64_t extra)
{
    return rt_pool_scratch(e->rt, (size_t)(2 * C + 1 + extra));
}

/* With sync on several ranks: the sums [C, 2] and the count, added over all ranks (in
 * place); returns the count. */
static double bn_reduce(double *sums, int64_t C, double n, int64_t sync)
{
    if (!sync || rt_dist_world() <= 1)
        return n;
    sums[2 * C] = n;
    rt_allreduce_sum_f64(sums, 2 * C + 1);
    return sums[2 * C];
}

/* The batch's statistics: mean, 1/std saved, the running ones updated (run_mean NULL:
 * a replay, no update), the normalization's scale and shift. */
static void bn_train_stats(const bn_ctx *c, const float *w, const float *b, double *sums,
                           float *mean, float *rstd, float *run_mean, float *run_var,
                           float *count, float eps, float momentum, int64_t sync,
                           float *scale, float *shift)
{
    double n = bn_reduce(sums, c->C, (double)c->B * (double)c->HW, sync);
    for (int64_t ch = 0; ch < c->C; ch++) {
        double mu = sums[2 * ch] / n;
        double var = sums[2 * ch + 1] / n - mu * mu;
        var = var > 0.0 ? var : 0.0;
        float m = (float)mu, rs = (float)(1.0 / sqrt(var + (double)eps));
        mean[ch] = m;
        rstd[ch] = rs;
        scale[ch] = rs * (w ? w[ch] : 1.0f);
        shift[ch] = (b ? b[ch] : 0.0f) - m * scale[ch];
        if (run_mean) {
            /* PyTorch: momentum * stat + (1 - momentum) * running, in double on the CPU;
             * the variance unbiased (n / (n - 1)) */
            double unb = n > 1.0 ? var * n / (n - 1.0) : NAN;
            run_mean[ch] = (float)((double)momentum * mu + (1.0 - (double)momentum) * run_mean[ch]);
            run_var[ch] = (float)((double)momentum * unb + (1.0 - (double)momentum) * run_var[ch]);
        }
    }
    if (run_mean) {
        int64_t k;
        memcpy(&k, count, sizeof k);
        k++;
        memcpy(count, &k, sizeof k);
    }
}

void rt_batchnorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *scale,
                      float *shift, float *mean, float *rstd, float *run_mean, float *run_var,
                      float *count, int64_t B, int64_t C, int64_t HW, float eps, float momentum,
                      int64_t sync)
{
    if (e->train && B * HW == 1 && !(sync && rt_dist_world() > 1))
        /* PyTorch refuses it too: the unbiased variance would divide by zero */
        rt_input_error("batchnorm: a training batch of one value per channel (a batch of 1 "
                       "over [C]): its variance is undefined; use a batch of 2 or more (or "
                       "loader.drop_last)");
    if (e->train && e->bn_momentum > 0)   /* swa's statistics pass: the running means */
        momentum = e->bn_momentum;
    if (e->dev) { /* on a GPU: cuda_ops.c (sync: its statistics summed over the GPUs) */
        RT_GPU(e)->batchnorm_fwd(e, x, w, b, scale, shift, mean, rstd, run_mean, run_var, count,
                                 B, C, HW, eps, momentum, sync && rt_dist_world() > 1);
        return;
    }
    if (B <= 0 || C <= 0)
        return;
    if (!e->train) {   /* evaluation: the running statistics, as PyTorch's eval mode */
        if (!run_mean || !run_var)
            rt_die("batchnorm in evaluation without its running statistics");
        for (int64_t ch = 0; ch < C; ch++) {
            float rs = (float)(1.0 / sqrt((double)run_var[ch] + (double)eps));
            scale[ch] = rs * (w ? w[ch] : 1.0f);
            shift[ch] = (b ? b[ch] : 0.0f) - run_mean[ch] * scale[ch];
        }
        return;
    }
    double *sums = bn_scratch(e, C, 0);
    bn_ctx c = {.x = x, .sums = sums, .B = B, .C = C, .HW = HW};
    rt_pool_run(e->rt, C, rt_grain_for(B * HW), bn_stats_task, &c);
    bn_train_stats(&c, w, b, sums, mean, rstd, run_mean, run_var, count, eps, momentum, sync,
                   scale, shift);
}

static void bn_bwd_sums_task(void *ctx, int64_t lo, int64_t hi)
{
    const bn_ctx *c = ctx;
    BN_LOOP(chan_sums)(c, c->dy, lo, hi);
}

static void bn_dx_task(void *ctx, int64_t lo, int64_t hi)
{
    BN_LOOP(chan_dx)(ctx, lo, hi);
}

void rt_batchnorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                      const float *rstd, const float *dy, float *dx, float *dw, float *db,
                      int64_t B, int64_t C, int64_t HW, int64_t sync)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->batchnorm_bwd(e, x, w, mean, rstd, dy, dx, dw, db, B, C, HW,
                                 sync && rt_dist_world() > 1);
        return;
    }
    if (B <= 0 || C <= 0)
        return;
    double *sums = bn_scratch(e, C, C);
    float *gk = (float *)(sums + 2 * C + 1);   /* [C, 2] floats in the C doubles after */
    bn_ctx c = {.x = x, .dy = dy, .w = w, .dx = dx, .mean = mean, .rstd = rstd, .sums = sums,
                .gk = gk, .B = B, .C = C, .HW = HW};
    int64_t grain = rt_grain_for(B * HW);
    rt_pool_run(e->rt, C, grain, bn_bwd_sums_task, &c);
    /* this rank's dw, db; then the sums over all ranks for dx (sync) */
    for (int64_t ch = 0; ch < C; ch++) {
        if (dw)
            dw[ch] += (float)(sums[2 * ch + 1] * rstd[ch]);
        if (db)
            db[ch] += (float)sums[2 * ch];
    }
    double n = bn_reduce(sums, C, (double)B * (double)HW, sync);
    for (int64_t ch = 0; ch < C; ch++) {
        double r = rstd[ch];
        gk[2 * ch] = (float)(sums[2 * ch] / n);
        gk[2 * ch + 1] = (float)(sums[2 * ch + 1] * r * r / n);
    }
    rt_pool_run(e->rt, C, grain, bn_dx_task, &c);
}
