/* batchnorm.c: BatchNorm's CPU kernels (rt_batchnorm_fwd, rt_batchnorm_bwd; the GPU's
 * twins are in templates/cuda/batchnorm.cuh), PyTorch's BatchNorm1d/2d and, with sync,
 * SyncBatchNorm.
 *
 * x is [B, C, HW]: channel c's values are B runs of HW floats, C * HW apart. One task a
 * channel walks them in order, so every sum has the same bits whatever the thread
 * count. The statistics take one pass: the sum and the sum of squares in double (a
 * float's square is exact in double, and the cancellation in sumsq / N - mean^2 costs
 * at most mean^2 / var units of 2^-52); the normalization y = x scale + shift is the
 * generated code's elementwise loop (fused with what follows): this file works out scale
 * and shift. The backward pass's
 * two reductions (sum dy, sum (x - mean) dy) take one pass, dx a second, in the form
 * PyTorch's CPU kernel uses. With sync and several ranks the per-channel sums (and the
 * counts) are all-reduced between the passes; dw and db stay this rank's own (DDP
 * averages them as it does every gradient), as in SyncBatchNorm. The per-channel sums
 * and dx's factors live in the thread pool's scratch, kept from step to step; chunks
 * take kernels.c's rt_grain_for. */
#include <math.h>
#include <string.h>
#include "rt.h"
#include "rt_dist.h"

typedef struct {
    const float *x, *dy, *w;      /* [B, C, HW], [B, C, HW], [C] (w may be NULL) */
    float *dx;                    /* [B, C, HW] */
    const float *gk;              /* bwd's [C, 2]: dx's mean of dy and its xhat factor */
    const float *mean, *rstd;     /* bwd's [C] */
    double *sums;                 /* [C, 2]: sum x and sum x^2, or sum dy and sum xmu dy */
    int64_t B, C, HW;
} bn_ctx;

/* The channel sums run in BN_LANES interleaved partial sums (element i of an image plane
 * goes to lane i % BN_LANES), added in lane order at the end: independent additions
 * instead of one chain, in an order fixed by the shape. */
#define BN_LANES 4

static double lanes_sum(const double *l)
{
    return (l[0] + l[1]) + (l[2] + l[3]);
}

static void bn_stats_task(void *ctx, int64_t lo, int64_t hi)
{
    const bn_ctx *c = ctx;
    for (int64_t ch = lo; ch < hi; ch++) {
        double s[BN_LANES] = {0}, q[BN_LANES] = {0};
        for (int64_t b = 0; b < c->B; b++) {
            const float *restrict x = c->x + (b * c->C + ch) * c->HW;
            int64_t i = 0;
            for (; i + BN_LANES <= c->HW; i += BN_LANES)
                for (int l = 0; l < BN_LANES; l++) {
                    double v = x[i + l];
                    s[l] += v;
                    q[l] += v * v;
                }
            for (int l = 0; i < c->HW; i++, l++) {
                double v = x[i];
                s[l] += v;
                q[l] += v * v;
            }
        }
        c->sums[2 * ch] = lanes_sum(s);
        c->sums[2 * ch + 1] = lanes_sum(q);
    }
}

/* The per-channel sums [C, 2] (and the count, sums[2 C], for the all-reduce), then
 * extra doubles: the pool's scratch, kept from step to step. */
static double *bn_scratch(rt_exec *e, int64_t C, int64_t extra)
{
    return rt_pool_scratch(e->rt, (size_t)(2 * C + 1 + extra));
}

/* The statistics over several GPUs would go through NCCL in the middle of a pass:
 * not yet. */
static void gpu_sync_refused(int64_t sync)
{
    if (sync && rt_dist_world() > 1)
        rt_fail("batchnorm with sync true on several GPUs is not supported yet; train it on "
                "the CPU (--device cpu) or set sync false");
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
    if (e->dev) { /* on a GPU: cuda_ops.c */
        gpu_sync_refused(sync && e->train);
        RT_GPU(e)->batchnorm_fwd(e, x, w, b, scale, shift, mean, rstd, run_mean, run_var, count,
                                 B, C, HW, eps, momentum, sync);
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

/* sums[c] = (sum dy, sum (x - mean) dy) over channel c */
static void bn_bwd_sums_task(void *ctx, int64_t lo, int64_t hi)
{
    const bn_ctx *c = ctx;
    for (int64_t ch = lo; ch < hi; ch++) {
        float m = c->mean[ch];
        double s[BN_LANES] = {0}, p[BN_LANES] = {0};
        for (int64_t b = 0; b < c->B; b++) {
            const float *restrict x = c->x + (b * c->C + ch) * c->HW;
            const float *restrict dy = c->dy + (b * c->C + ch) * c->HW;
            int64_t i = 0;
            for (; i + BN_LANES <= c->HW; i += BN_LANES)
                for (int l = 0; l < BN_LANES; l++) {
                    s[l] += dy[i + l];
                    p[l] += (double)(x[i + l] - m) * dy[i + l];
                }
            for (int l = 0; i < c->HW; i++, l++) {
                s[l] += dy[i];
                p[l] += (double)(x[i] - m) * dy[i];
            }
        }
        c->sums[2 * ch] = lanes_sum(s);
        c->sums[2 * ch + 1] = lanes_sum(p);
    }
}

/* dx = (dy - grad_mean - (x - mean) k) rstd w, alpha = (grad_mean, k) by channel */
static void bn_dx_task(void *ctx, int64_t lo, int64_t hi)
{
    const bn_ctx *c = ctx;
    for (int64_t ch = lo; ch < hi; ch++) {
        float m = c->mean[ch], gm = c->gk[2 * ch], k = c->gk[2 * ch + 1];
        float sc = c->rstd[ch] * (c->w ? c->w[ch] : 1.0f);
        for (int64_t b = 0; b < c->B; b++) {
            const float *restrict x = c->x + (b * c->C + ch) * c->HW;
            const float *restrict dy = c->dy + (b * c->C + ch) * c->HW;
            float *restrict dx = c->dx + (b * c->C + ch) * c->HW;
            for (int64_t i = 0; i < c->HW; i++)
                dx[i] = (dy[i] - gm - (x[i] - m) * k) * sc;
        }
    }
}

void rt_batchnorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                      const float *rstd, const float *dy, float *dx, float *dw, float *db,
                      int64_t B, int64_t C, int64_t HW, int64_t sync)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        gpu_sync_refused(sync);
        RT_GPU(e)->batchnorm_bwd(e, x, w, mean, rstd, dy, dx, dw, db, B, C, HW, sync);
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
