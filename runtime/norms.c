/* norms.c: the CPU's LayerNorm, RMSNorm, qk_norm over all heads and ConvNeXt V2's global
 * response normalization, forward and backward
 * (the residual's gradient folded in), each reduction in fixed blocks. See kernels.c for
 * the determinism every kernel keeps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

typedef struct {
    const float *x, *w, *b, *dy;   /* [rows, d], [d] or NULL (1s), [d] or NULL (0s), [rows, d] */
    const float *add;              /* bwd: [rows, d] added to dx, or NULL; may be dx */
    float *y, *dx;                 /* [rows, d] */
    float *mean, *rstd;            /* [rows] */
    float *dw, *db;                /* [d], or NULL: none (a layernorm without them) */
    double *part;                  /* bwd: [nrb, 2, d] partial dw, db */
    int64_t rows, d, rb, nrb;
    float eps;
} ln_ctx;

/* A layernorm's weight at [j, j + 4) (ones without one) and bias (zeros without one):
 * times 1 and plus 0 leave the values as they were */
static inline v4f ln_w4(const float *w, int64_t j) { return w ? ld4(w + j) : splat4(1.0f); }
static inline v4f ln_b4(const float *b, int64_t j) { return b ? ld4(b + j) : splat4(0.0f); }
static inline float ln_w1(const float *w, int64_t j) { return w ? w[j] : 1.0f; }
static inline float ln_b1(const float *b, int64_t j) { return b ? b[j] : 0.0f; }

static void ln_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const ln_ctx *c = ctx;
    int64_t d = c->d;
    const float *restrict w = c->w, *restrict b = c->b;
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict x = c->x + r * d;
        float *restrict y = c->y + r * d;
        /* Two passes in double: mean, then the biased variance around it. */
        double mu = sum_f64(x, d) / (double)d;
        double var = sqdev_f64(x, d, mu) / (double)d;
        float m = (float)mu, rs = (float)(1.0 / sqrt(var + (double)c->eps));
        c->mean[r] = m;
        c->rstd[r] = rs;
        v4f mv = splat4(m), rv = splat4(rs);
        int64_t j = 0;
        for (; j + 4 <= d; j += 4)
            st4(y + j, (ld4(x + j) - mv) * rv * ln_w4(w, j) + ln_b4(b, j));
        for (; j < d; j++)
            y[j] = (x[j] - m) * rs * ln_w1(w, j) + ln_b1(b, j);
    }
}

void rt_layernorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                      float *mean, float *rstd, int64_t rows, int64_t d, float eps)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->layernorm_fwd(e, x, w, b, y, mean, rstd, rows, d, eps);
        return;
    }
    ln_ctx c = {.x = x, .w = w, .b = b, .y = y, .mean = mean, .rstd = rstd, .rows = rows,
                .d = d, .eps = eps};
    if (d <= 0)
        return;
    rt_pool_run(rt_pool_of(e), rows, rt_grain_for(4 * d), ln_fwd_task, &c);
}

/* Task t owns rows [t*rb, (t+1)*rb): it writes their dx and its partial dw, db sums,
 * part[t] (ln_reduce_task adds the partials up). */
static void ln_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const ln_ctx *c = ctx;
    int64_t d = c->d;
    const float *restrict w = c->w;
    for (int64_t t = lo; t < hi; t++) {
        double *restrict pw = c->part + t * 2 * d, *restrict pb = pw + d;
        for (int64_t j = 0; j < 2 * d; j++)
            pw[j] = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++) {
            const float *restrict x = c->x + r * d, *restrict dy = c->dy + r * d;
            /* not restrict: the addend may be dx itself (read, then written) */
            const float *add = c->add ? c->add + r * d : NULL;
            float *dx = c->dx + r * d;
            float m = c->mean[r], rs = c->rstd[r];
            /* dxhat = dy * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat*xhat)).
             * Sums in double, four lanes then the tail. */
            v4f mv = splat4(m), rv = splat4(rs);
            d4 s1v = {{0, 0}, {0, 0}}, s2v = s1v;
            int64_t j = 0;
            for (; j + 4 <= d; j += 4) {
                d4 xh = cvt4((ld4(x + j) - mv) * rv);
                d4 gd = cvt4(ld4(dy + j) * ln_w4(w, j)), dyd = cvt4(ld4(dy + j));
                s1v = add4d(s1v, gd);
                s2v = add4d(s2v, mul4d(gd, xh));
                st4d(pw + j, add4d(ld4d(pw + j), mul4d(dyd, xh)));
                st4d(pb + j, add4d(ld4d(pb + j), dyd));
            }
            double s1 = hsum4d(s1v), s2 = hsum4d(s2v);
            for (; j < d; j++) {
                float xh = (x[j] - m) * rs, g = dy[j] * ln_w1(w, j);
                s1 += g;
                s2 += (double)g * xh;
                pw[j] += (double)dy[j] * xh;
                pb[j] += dy[j];
            }
            float a = (float)(s1 / (double)d), bb = (float)(s2 / (double)d);
            v4f av = splat4(a), bv = splat4(bb);
            /* with an addend, each element's sum is one more float add (the loop's) */
            for (j = 0; j + 4 <= d; j += 4) {
                v4f xh = (ld4(x + j) - mv) * rv;
                v4f g = rv * (ld4(dy + j) * ln_w4(w, j) - av - xh * bv);
                st4(dx + j, add ? g + ld4(add + j) : g);
            }
            for (; j < d; j++) {
                float xh = (x[j] - m) * rs;
                float g = rs * (dy[j] * ln_w1(w, j) - a - xh * bb);
                dx[j] = add ? g + add[j] : g;
            }
        }
    }
}

/* Column j of dw, db: the partials added in task order. */
static void ln_reduce_task(void *ctx, int64_t lo, int64_t hi)
{
    const ln_ctx *c = ctx;
    int64_t d = c->d;
    for (int64_t j = lo; j < hi; j++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t t = 0; t < c->nrb; t++) {
            sw += c->part[t * 2 * d + j];
            sb += c->part[t * 2 * d + d + j];
        }
        if (c->dw)
            c->dw[j] += (float)sw;
        if (c->db)
            c->db[j] += (float)sb;
    }
}

/* The row blocks of a norm's backward over [rows, d]: about 32K elements each, at most
 * 64 (partials: 64 * 2d doubles), *rb rows a block; their number. They depend on the
 * shape only, so the weight gradients do not depend on the thread count. */
static int64_t norm_row_blocks(int64_t rows, int64_t d, int64_t *rb)
{
    int64_t nrb = rows * d / 32768;
    nrb = nrb > 64 ? 64 : nrb < 1 ? 1 : nrb;
    *rb = ceil_div(rows, nrb);
    return ceil_div(rows, *rb);
}

void rt_layernorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                      const float *rstd, const float *dy, const float *add, float *dx,
                      float *dw, float *db, int64_t rows, int64_t d)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->layernorm_bwd(e, x, w, mean, rstd, dy, add, dx, dw, db, rows, d);
        return;
    }
    if (rows <= 0 || d <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    ln_ctx c = {.x = x, .w = w, .dy = dy, .add = add, .dx = dx, .mean = (float *)mean,
                .rstd = (float *)rstd, .dw = dw, .db = db, .rows = rows, .d = d};
    c.nrb = norm_row_blocks(rows, d, &c.rb);
    c.part = rt_pool_scratch(p, (size_t)(c.nrb * 2 * d));
    rt_pool_run(p, c.nrb, 1, ln_bwd_task, &c);
    if (dw || db)
        rt_pool_run(p, d, rt_grain_for(2 * c.nrb), ln_reduce_task, &c);
}

/* ---- RMSNorm ------------------------------------------------------------------- */

typedef struct {
    const float *x, *w, *dy;       /* [rows, d], [d], [rows, d] */
    const float *add;              /* bwd: [rows, d] added to dx, or NULL; may be dx */
    float *y, *dx;                 /* [rows, d] */
    float *rstd;                   /* [rows] */
    float *dw;                     /* [d] */
    double *part;                  /* bwd: [nrb, d] partial dw */
    int64_t rows, d, rb, nrb;
    float eps;
} rms_ctx;

/* One row x [d] normalized into y [d] (y may be x); returns its 1/rms. */
static float rms_row(const float *x, const float *restrict w, float *y, int64_t d, float eps)
{
    /* the mean square in double (HF's is fp32: within its rounding) */
    double ms = sqdev_f64(x, d, 0.0) / (double)d;
    float rs = (float)(1.0 / sqrt(ms + (double)eps));
    v4f rv = splat4(rs);
    int64_t j = 0;
    for (; j + 4 <= d; j += 4)
        st4(y + j, ld4(x + j) * rv * ld4(w + j));
    for (; j < d; j++)
        y[j] = x[j] * rs * w[j];
    return rs;
}

static void rms_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const rms_ctx *c = ctx;
    for (int64_t r = lo; r < hi; r++)
        c->rstd[r] = rms_row(c->x + r * c->d, c->w, c->y + r * c->d, c->d, c->eps);
}

void rt_rmsnorm_fwd(rt_exec *e, const float *x, const float *w, float *y, float *rstd,
                    int64_t rows, int64_t d, float eps)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->rmsnorm_fwd(e, x, w, y, rstd, rows, d, eps);
        return;
    }
    rms_ctx c = {.x = x, .w = w, .y = y, .rstd = rstd, .rows = rows, .d = d, .eps = eps};
    if (d <= 0)
        return;
    rt_pool_run(rt_pool_of(e), rows, rt_grain_for(3 * d), rms_fwd_task, &c);
}

/* One row's dx [d] (+ add, which may be dx: not restrict), its dw terms added to pw [d]:
 * g = dy * w, xh = x * rstd; dx = rstd * (g - xh * mean(g * xh)). */
static void rms_row_bwd(const float *restrict x, const float *restrict w, float rs,
                        const float *restrict dy, const float *add, float *dx,
                        double *restrict pw, int64_t d)
{
    v4f rv = splat4(rs);
    d4 sv = {{0, 0}, {0, 0}};
    int64_t j = 0;
    for (; j + 4 <= d; j += 4) {
        d4 xh = cvt4(ld4(x + j) * rv);
        sv = add4d(sv, mul4d(cvt4(ld4(dy + j) * ld4(w + j)), xh));
        st4d(pw + j, add4d(ld4d(pw + j), mul4d(cvt4(ld4(dy + j)), xh)));
    }
    double s = hsum4d(sv);
    for (; j < d; j++) {
        float xh = x[j] * rs;
        s += (double)(dy[j] * w[j]) * xh;
        pw[j] += (double)dy[j] * xh;
    }
    float m = (float)(s / (double)d);
    v4f mv = splat4(m);
    for (j = 0; j + 4 <= d; j += 4) {
        v4f g = rv * (ld4(dy + j) * ld4(w + j) - ld4(x + j) * rv * mv);
        st4(dx + j, add ? g + ld4(add + j) : g);
    }
    for (; j < d; j++) {
        float g = rs * (dy[j] * w[j] - x[j] * rs * m);
        dx[j] = add ? g + add[j] : g;
    }
}

/* Task t owns rows [t*rb, (t+1)*rb): their dx and its partial dw sums, part[t]. */
static void rms_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const rms_ctx *c = ctx;
    int64_t d = c->d;
    for (int64_t t = lo; t < hi; t++) {
        double *restrict pw = c->part + t * d;
        for (int64_t j = 0; j < d; j++)
            pw[j] = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++)
            rms_row_bwd(c->x + r * d, c->w, c->rstd[r], c->dy + r * d,
                        c->add ? c->add + r * d : NULL, c->dx + r * d, pw, d);
    }
}

/* Column j of dw: the partials added in task order. */
static void rms_reduce_task(void *ctx, int64_t lo, int64_t hi)
{
    const rms_ctx *c = ctx;
    for (int64_t j = lo; j < hi; j++) {
        double sw = 0.0;
        for (int64_t t = 0; t < c->nrb; t++)
            sw += c->part[t * c->d + j];
        c->dw[j] += (float)sw;
    }
}

void rt_rmsnorm_bwd(rt_exec *e, const float *x, const float *w, const float *rstd,
                    const float *dy, const float *add, float *dx, float *dw, int64_t rows,
                    int64_t d)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->rmsnorm_bwd(e, x, w, rstd, dy, add, dx, dw, rows, d);
        return;
    }
    if (rows <= 0 || d <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    rms_ctx c = {.x = x, .w = w, .dy = dy, .add = add, .dx = dx, .rstd = (float *)rstd,
                 .dw = dw, .rows = rows, .d = d};
    c.nrb = norm_row_blocks(rows, d, &c.rb);
    c.part = rt_pool_scratch(p, (size_t)(c.nrb * d));
    rt_pool_run(p, c.nrb, 1, rms_bwd_task, &c);
    rt_pool_run(p, d, rt_grain_for(c.nrb), rms_reduce_task, &c);
}

/* ---- qk_norm over all heads (OLMo 2's): rmsnorm's rows on q's and k's columns ----- */

typedef struct {
    const float *x, *wq, *wk, *dy;   /* [rows, w], [dq], [dk], [rows, w]; w = dq + dk + dv */
    float *y, *dx;                   /* [rows, w] */
    float *rstd;                     /* [rows, 2]: q's, then k's */
    float *dwq, *dwk;                /* [dq], [dk] (either NULL: not wanted) */
    double *part;                    /* bwd: [nrb, dq + dk] partial sums of dwq, then dwk */
    int64_t rows, dq, dk, dv, rb, nrb;
    float eps;
} qkn_ctx;

static void qkn_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const qkn_ctx *c = ctx;
    int64_t w = c->dq + c->dk + c->dv;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = c->x + r * w;
        float *y = c->y + r * w;
        c->rstd[2 * r] = rms_row(x, c->wq, y, c->dq, c->eps);
        c->rstd[2 * r + 1] = rms_row(x + c->dq, c->wk, y + c->dq, c->dk, c->eps);
        if (y != x)
            memcpy(y + c->dq + c->dk, x + c->dq + c->dk, (size_t)c->dv * sizeof *y);
    }
}

void rt_qk_norm_fwd(rt_exec *e, const float *x, const float *wq, const float *wk, float *y,
                    float *rstd, int64_t rows, int64_t dq, int64_t dk, int64_t dv, float eps)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->qk_norm_fwd(e, x, wq, wk, y, rstd, rows, dq, dk, dv, eps);
        return;
    }
    qkn_ctx c = {.x = x, .wq = wq, .wk = wk, .y = y, .rstd = rstd, .rows = rows, .dq = dq,
                 .dk = dk, .dv = dv, .eps = eps};
    rt_pool_run(rt_pool_of(e), rows, rt_grain_for(3 * (dq + dk + dv)), qkn_fwd_task, &c);
}

/* Task t owns rows [t*rb, (t+1)*rb): their dx and the partial sums part[t]. */
static void qkn_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const qkn_ctx *c = ctx;
    int64_t dq = c->dq, dk = c->dk, w = dq + dk + c->dv;
    for (int64_t t = lo; t < hi; t++) {
        double *restrict pw = c->part + t * (dq + dk);
        for (int64_t j = 0; j < dq + dk; j++)
            pw[j] = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++) {
            const float *x = c->x + r * w, *dy = c->dy + r * w;
            float *dx = c->dx + r * w;
            rms_row_bwd(x, c->wq, c->rstd[2 * r], dy, NULL, dx, pw, dq);
            rms_row_bwd(x + dq, c->wk, c->rstd[2 * r + 1], dy + dq, NULL, dx + dq, pw + dq, dk);
            memcpy(dx + dq + dk, dy + dq + dk, (size_t)c->dv * sizeof *dx);
        }
    }
}

/* Column j of dwq, then dwk: the partials added in task order. */
static void qkn_reduce_task(void *ctx, int64_t lo, int64_t hi)
{
    const qkn_ctx *c = ctx;
    for (int64_t j = lo; j < hi; j++) {
        float *dw = j < c->dq ? c->dwq + j : c->dwk + (j - c->dq);
        double sw = 0.0;
        for (int64_t t = 0; t < c->nrb; t++)
            sw += c->part[t * (c->dq + c->dk) + j];
        *dw += (float)sw;
    }
}

void rt_qk_norm_bwd(rt_exec *e, const float *x, const float *wq, const float *wk,
                    const float *rstd, const float *dy, float *dx, float *dwq, float *dwk,
                    int64_t rows, int64_t dq, int64_t dk, int64_t dv)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->qk_norm_bwd(e, x, wq, wk, rstd, dy, dx, dwq, dwk, rows, dq, dk, dv);
        return;
    }
    if (rows <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    qkn_ctx c = {.x = x, .wq = wq, .wk = wk, .rstd = (float *)rstd, .dy = dy, .dx = dx,
                 .dwq = dwq, .dwk = dwk, .rows = rows, .dq = dq, .dk = dk, .dv = dv};
    c.nrb = norm_row_blocks(rows, dq + dk, &c.rb);
    c.part = rt_pool_scratch(p, (size_t)(c.nrb * (dq + dk)));
    rt_pool_run(p, c.nrb, 1, qkn_bwd_task, &c);
    if (dwq && dwk)   /* both or neither: a frozen layer's are not wanted */
        rt_pool_run(p, dq + dk, rt_grain_for(c.nrb), qkn_reduce_task, &c);
}

/* ---- global response normalization (ConvNeXt V2's grn) over each sample's [T, C] ----- */

typedef struct {
    const float *x, *w, *b, *dy;   /* [B, T, C], [C], [C], [B, T, C] */
    float *y, *dx;                 /* [B, T, C] (dx may be dy: read before written) */
    float *g;                      /* [B, C + 1]: each channel's norm, then mean + 1e-6 */
    float *dw, *db;                /* [C] (NULL: not wanted, a frozen layer's) */
    double *part;                  /* fwd: [B, C] scratch; bwd: [B, 2, C]: sum dy x N, sum dy */
    int64_t B, T, C;
} grn_ctx;

/* Sample s's norms: g[c] = sqrt(sum_t x[t, c]^2) (in double), g[C] = mean_c g[c] + 1e-6,
 * as float; acc [C] scratch */
static void grn_norms(const float *x, float *g, double *acc, int64_t T, int64_t C)
{
    for (int64_t c = 0; c < C; c++)
        acc[c] = 0.0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++)
            acc[c] += (double)x[t * C + c] * x[t * C + c];
    double m = 0.0;
    for (int64_t c = 0; c < C; c++) {
        g[c] = (float)sqrt(acc[c]);
        m += g[c];
    }
    g[C] = (float)(m / (double)C) + 1e-6f;
}

/* Samples [lo, hi): y = weight (x N) + bias + x, N = g[c] / g[C] */
static void grn_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const grn_ctx *c = ctx;
    int64_t T = c->T, C = c->C;
    for (int64_t s = lo; s < hi; s++) {
        const float *x = c->x + s * T * C;
        float *y = c->y + s * T * C, *g = c->g + s * (C + 1);
        grn_norms(x, g, c->part + s * C, T, C);
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < C; k++) {
                float v = x[t * C + k], n = g[k] / g[C];
                y[t * C + k] = c->w[k] * (v * n) + c->b[k] + v;
            }
    }
}

void rt_grn_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y, float *g,
                int64_t B, int64_t T, int64_t C)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->grn_fwd(e, x, w, b, y, g, B, T, C);
        return;
    }
    if (B <= 0 || C <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    grn_ctx c = {.x = x, .w = w, .b = b, .y = y, .g = g, .T = T, .C = C};
    c.part = rt_pool_scratch(p, (size_t)(B * C));
    rt_pool_run(p, B, 1, grn_fwd_task, &c);
}

/* Samples [lo, hi): a_c = sum_t dy x, s_c = sum_t dy; with N_c = G_c / D, D = g[C],
 * dN_c = w_c a_c and dG_c = dN_c / D - sum_k dN_k G_k / (D^2 C); dx = dy (1 + w N) +
 * dG x / G (0 where G is 0, as torch's norm); part = (a N, s) for the parameters' sums */
static void grn_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const grn_ctx *c = ctx;
    int64_t T = c->T, C = c->C;
    for (int64_t s = lo; s < hi; s++) {
        const float *x = c->x + s * T * C, *dy = c->dy + s * T * C, *g = c->g + s * (C + 1);
        double *a = c->part + s * 2 * C, *sd = a + C;
        for (int64_t k = 0; k < C; k++)
            a[k] = sd[k] = 0.0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < C; k++) {
                a[k] += (double)dy[t * C + k] * x[t * C + k];
                sd[k] += dy[t * C + k];
            }
        double D = g[C], K = 0.0;
        for (int64_t k = 0; k < C; k++)
            K += (double)c->w[k] * a[k] * g[k];
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < C; k++) {
                double dG = c->w[k] * a[k] / D - K / (D * D * (double)C);
                float coef = g[k] > 0 ? (float)(dG / g[k]) : 0.0f, n = g[k] / g[C];
                c->dx[s * T * C + t * C + k] = dy[t * C + k] * (1.0f + c->w[k] * n) +
                                               coef * x[t * C + k];
            }
        for (int64_t k = 0; k < C; k++)
            a[k] *= (double)(g[k] / g[C]);
    }
}

/* Channels [lo, hi) of dw and db: the samples' parts added in order */
static void grn_reduce_task(void *ctx, int64_t lo, int64_t hi)
{
    const grn_ctx *c = ctx;
    int64_t B = c->B, C = c->C;
    for (int64_t k = lo; k < hi; k++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t s = 0; s < B; s++) {
            sw += c->part[s * 2 * C + k];
            sb += c->part[s * 2 * C + C + k];
        }
        if (c->dw)
            c->dw[k] += (float)sw;
        if (c->db)
            c->db[k] += (float)sb;
    }
}

void rt_grn_bwd(rt_exec *e, const float *x, const float *w, const float *g, const float *dy,
                float *dx, float *dw, float *db, int64_t B, int64_t T, int64_t C)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->grn_bwd(e, x, w, g, dy, dx, dw, db, B, T, C);
        return;
    }
    if (B <= 0 || C <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    grn_ctx c = {.x = x, .w = w, .g = (float *)g, .dy = dy, .dx = dx, .dw = dw, .db = db,
                 .B = B, .T = T, .C = C};
    c.part = rt_pool_scratch(p, (size_t)(B * 2 * C));
    rt_pool_run(p, B, 1, grn_bwd_task, &c);
    if (dw || db)
        rt_pool_run(p, C, rt_grain_for(B), grn_reduce_task, &c);
}
