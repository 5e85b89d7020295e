/* pooling.c: the CPU's max and average pooling, forward and backward (PyTorch's window
 * order, NaN in max pooling, first-max argmax). See kernels.c for
 * the determinism every kernel keeps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

typedef struct {
    const float *x, *dy;       /* [planes, H, W], [planes, OH, OW] */
    float *y, *dx;
    int64_t H, W, k, s, OH, OW;
} pool_ctx;

/* The window's maximum and the offset of PyTorch's argmax in the plane: scanned in
 * row-major order from -inf, replaced when a value is greater or NaN (so NaN wins, and
 * among equal maxima the first one stays). */
static inline int64_t window_max(const float *restrict xp, int64_t W, int64_t k,
                                 int64_t ih0, int64_t iw0, float *maxv)
{
    float m = -INFINITY;
    int64_t idx = ih0 * W + iw0;
    for (int64_t ki = 0; ki < k; ki++) {
        const float *restrict row = xp + (ih0 + ki) * W;
        for (int64_t kj = 0; kj < k; kj++) {
            float v = row[iw0 + kj];
            if (v > m || isnan(v)) {
                m = v;
                idx = (ih0 + ki) * W + iw0 + kj;
            }
        }
    }
    *maxv = m;
    return idx;
}

static void maxpool_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict xp = c->x + pl * c->H * c->W;
        float *restrict yp = c->y + pl * c->OH * c->OW;
        if (c->k == 2 && c->s == 2) {
            /* The common 2x2/2 case, unrolled; same order and NaN rule as window_max. */
            for (int64_t oh = 0; oh < c->OH; oh++) {
                const float *restrict r0 = xp + 2 * oh * c->W, *restrict r1 = r0 + c->W;
                for (int64_t ow = 0; ow < c->OW; ow++) {
                    float m = r0[2 * ow], v;
                    v = r0[2 * ow + 1];
                    if (v > m || isnan(v)) m = v;
                    v = r1[2 * ow];
                    if (v > m || isnan(v)) m = v;
                    v = r1[2 * ow + 1];
                    if (v > m || isnan(v)) m = v;
                    *yp++ = m;
                }
            }
            continue;
        }
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++)
                window_max(xp, c->W, c->k, oh * c->s, ow * c->s, yp++);
    }
}

static void maxpool_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict xp = c->x + pl * c->H * c->W;
        const float *restrict dyp = c->dy + pl * c->OH * c->OW;
        float *restrict dxp = c->dx + pl * c->H * c->W;
        if (c->k == 2 && c->s == 2) {
            /* The windows do not overlap: every element of dx is written once (the
             * window's first maximum gets dy, the other three 0; rows and columns no
             * window covers, of an odd H or W, 0), no memset and no read-modify-write.
             * dy + 0.0f is the general path's 0 + dy (a -0 becomes +0): the same bits. */
            const int64_t W = c->W;
            for (int64_t oh = 0; oh < c->OH; oh++) {
                const float *restrict r0 = xp + 2 * oh * W, *restrict r1 = r0 + W;
                float *restrict d0 = dxp + 2 * oh * W, *restrict d1 = d0 + W;
                int64_t ow = 0;
                /* four windows at a time, without branches (the argmax of random data
                 * mispredicts): the same comparisons in the same order as below */
                for (; ow + 4 <= c->OW; ow += 4) {
                    v4f a = ld4(r0 + 2 * ow), b = ld4(r0 + 2 * ow + 4);
                    v4f x0 = __builtin_shufflevector(a, b, 0, 2, 4, 6);
                    v4f x1 = __builtin_shufflevector(a, b, 1, 3, 5, 7);
                    a = ld4(r1 + 2 * ow), b = ld4(r1 + 2 * ow + 4);
                    v4f x2 = __builtin_shufflevector(a, b, 0, 2, 4, 6);
                    v4f x3 = __builtin_shufflevector(a, b, 1, 3, 5, 7);
                    v4f m = x0;
                    v4i t1 = (x1 > m) | (x1 != x1);
                    m = (v4f)(((v4i)x1 & t1) | ((v4i)m & ~t1));
                    v4i t2 = (x2 > m) | (x2 != x2);
                    m = (v4f)(((v4i)x2 & t2) | ((v4i)m & ~t2));
                    v4i t3 = (x3 > m) | (x3 != x3);
                    /* the window's pick: 3 if t3, else 2 if t2, else 1 if t1, else 0 */
                    v4i p3 = t3, p2 = t2 & ~t3, p1 = t1 & ~t2 & ~t3, p0 = ~(t1 | t2 | t3);
                    v4i g = (v4i)(ld4(dyp + ow) + splat4(0.0f));
                    v4f g0 = (v4f)(g & p0), g1 = (v4f)(g & p1), g2 = (v4f)(g & p2), g3 = (v4f)(g & p3);
                    v4f lo = __builtin_shufflevector(g0, g1, 0, 4, 1, 5);
                    v4f hi = __builtin_shufflevector(g0, g1, 2, 6, 3, 7);
                    memcpy(d0 + 2 * ow, &lo, sizeof lo);
                    memcpy(d0 + 2 * ow + 4, &hi, sizeof hi);
                    lo = __builtin_shufflevector(g2, g3, 0, 4, 1, 5);
                    hi = __builtin_shufflevector(g2, g3, 2, 6, 3, 7);
                    memcpy(d1 + 2 * ow, &lo, sizeof lo);
                    memcpy(d1 + 2 * ow + 4, &hi, sizeof hi);
                }
                for (; ow < c->OW; ow++) {
                    float m = r0[2 * ow], v;
                    int a = 0;
                    v = r0[2 * ow + 1];
                    if (v > m || isnan(v)) m = v, a = 1;
                    v = r1[2 * ow];
                    if (v > m || isnan(v)) m = v, a = 2;
                    v = r1[2 * ow + 1];
                    if (v > m || isnan(v)) a = 3;
                    const float g = dyp[ow] + 0.0f;
                    d0[2 * ow] = a == 0 ? g : 0.0f;
                    d0[2 * ow + 1] = a == 1 ? g : 0.0f;
                    d1[2 * ow] = a == 2 ? g : 0.0f;
                    d1[2 * ow + 1] = a == 3 ? g : 0.0f;
                }
                for (int64_t j = 2 * c->OW; j < W; j++)
                    d0[j] = d1[j] = 0.0f;
                dyp += c->OW;
            }
            if (2 * c->OH < c->H)
                memset(dxp + 2 * c->OH * W, 0, (size_t)((c->H - 2 * c->OH) * W) * sizeof(float));
            continue;
        }
        memset(dxp, 0, (size_t)(c->H * c->W) * sizeof(float));
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                float m;
                dxp[window_max(xp, c->W, c->k, oh * c->s, ow * c->s, &m)] += *dyp++;
            }
    }
}

void rt_maxpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->maxpool2d_fwd(e, x, y, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {x, NULL, y, NULL, H, W, k, s, OH, OW};
    rt_pool_run(rt_pool_of(e), planes, rt_grain_for(OH * OW * k * k), maxpool_fwd_task, &c);
}

void rt_maxpool2d_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t planes,
                      int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->maxpool2d_bwd(e, x, dy, dx, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {x, dy, NULL, dx, H, W, k, s, OH, OW};
    rt_pool_run(rt_pool_of(e), planes, rt_grain_for(OH * OW * k * k + H * W), maxpool_bwd_task, &c);
}

static void avgpool_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    /* PyTorch divides the float sum by the window size (no reciprocal), so do we. */
    float div = (float)(c->k * c->k);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict xp = c->x + pl * c->H * c->W;
        float *restrict yp = c->y + pl * c->OH * c->OW;
        if (c->k == 2 && c->s == 2) {
            /* same sum order as below; x / 4 == x * 0.25 exactly */
            for (int64_t oh = 0; oh < c->OH; oh++) {
                const float *restrict r0 = xp + 2 * oh * c->W, *restrict r1 = r0 + c->W;
                for (int64_t ow = 0; ow < c->OW; ow++)
                    *yp++ = ((((0.0f + r0[2 * ow]) + r0[2 * ow + 1]) + r1[2 * ow]) +
                             r1[2 * ow + 1]) * 0.25f;
            }
            continue;
        }
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                const float *restrict win = xp + oh * c->s * c->W + ow * c->s;
                float sum = 0.0f;
                for (int64_t ki = 0; ki < c->k; ki++, win += c->W)
                    for (int64_t kj = 0; kj < c->k; kj++)
                        sum += win[kj];
                *yp++ = sum / div;
            }
    }
}

static void avgpool_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    float div = (float)(c->k * c->k);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict dyp = c->dy + pl * c->OH * c->OW;
        float *restrict dxp = c->dx + pl * c->H * c->W;
        memset(dxp, 0, (size_t)(c->H * c->W) * sizeof(float));
        if (c->k == 2 && c->s == 2) {
            /* windows do not overlap: each covered dx is 0 + dy / 4 */
            for (int64_t oh = 0; oh < c->OH; oh++) {
                float *restrict r0 = dxp + 2 * oh * c->W, *restrict r1 = r0 + c->W;
                for (int64_t ow = 0; ow < c->OW; ow++) {
                    float g = 0.0f + *dyp++ * 0.25f;
                    r0[2 * ow] = r0[2 * ow + 1] = r1[2 * ow] = r1[2 * ow + 1] = g;
                }
            }
            continue;
        }
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                float g = *dyp++ / div;
                float *restrict win = dxp + oh * c->s * c->W + ow * c->s;
                for (int64_t ki = 0; ki < c->k; ki++, win += c->W)
                    for (int64_t kj = 0; kj < c->k; kj++)
                        win[kj] += g;
            }
    }
}

void rt_avgpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->avgpool2d_fwd(e, x, y, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {x, NULL, y, NULL, H, W, k, s, OH, OW};
    rt_pool_run(rt_pool_of(e), planes, rt_grain_for(OH * OW * k * k), avgpool_fwd_task, &c);
}

void rt_avgpool2d_bwd(rt_exec *e, const float *dy, float *dx, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->avgpool2d_bwd(e, dy, dx, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {NULL, dy, NULL, dx, H, W, k, s, OH, OW};
    rt_pool_run(rt_pool_of(e), planes, rt_grain_for(OH * OW * k * k + H * W), avgpool_bwd_task, &c);
}
