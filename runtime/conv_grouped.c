/* conv_grouped.c: conv2d with groups > 1 (grouped and depthwise convolution) on the
 * CPU, as direct loops: the forward pass, the input gradient and the weight and bias
 * gradients. Their GPU twins are templates/cuda/conv.cuh's rt_gconv_*.
 *
 * Shapes: x [B, C, H, W], w [Cout, C / G, k, k], y [B, Cout, OH, OW]; output channel co
 * belongs to group g = co / (Cout / G), which reads input channels g (C / G) up to
 * (g + 1) (C / G) - 1, as nn.Conv2d(groups=G). A depthwise convolution (G = C) reads
 * one input channel an output channel, k*k products an output: im2col's columns would
 * be mostly the GEMM's zero blocks, so every groups > 1 takes these loops. Each output
 * is one thread's gather in a fixed order (the GPU's the same), so no two threads write
 * one element. The loops run over the kernel offsets and outputs that fall on the input
 * (worked out before them), never testing an index inside them. */
#include <math.h>
#include "rt.h"

typedef struct {
    const float *x, *w, *b, *dy;   /* b may be NULL */
    float *y, *dx, *dw, *db;       /* db may be NULL */
    int64_t B, C, H, W, k, s, pad, OH, OW, Cout, G;
} gconv_ctx;

/* The kernel offsets t in [0, k) whose input i0 + t lies in [0, n): [*t0, *t1). */
static void taps(int64_t i0, int64_t k, int64_t n, int64_t *t0, int64_t *t1)
{
    int64_t lo = i0 < 0 ? -i0 : 0, hi = n - i0 < k ? n - i0 : k;
    *t0 = lo;
    *t1 = hi > lo ? hi : lo;
}

/* one plane (b, co) of y: y = sum over (c', ki, kj) in order of w x, then + bias. A row
 * of y gathers its terms tap by tap, each tap over the outputs whose input is no
 * padding (rt_conv_span, as im2col's): every output adds the same terms in the same
 * order as one at a time, without a bounds test in the loops. */
static void gconv_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const gconv_ctx *c = ctx;
    int64_t Cg = c->C / c->G, Cog = c->Cout / c->G, k = c->k, H = c->H, W = c->W, s = c->s;
    for (int64_t pl = lo; pl < hi; pl++) {
        int64_t b = pl / c->Cout, co = pl % c->Cout, g = co / Cog;
        const float *xb = c->x + (b * c->C + g * Cg) * H * W;
        const float *wc = c->w + co * Cg * k * k;
        for (int64_t oh = 0; oh < c->OH; oh++) {
            float *restrict yr = c->y + (pl * c->OH + oh) * c->OW;
            int64_t ih0 = oh * s - c->pad, ki0, ki1;
            taps(ih0, k, H, &ki0, &ki1);
            for (int64_t ow = 0; ow < c->OW; ow++)
                yr[ow] = 0.0f;
            for (int64_t ci = 0; ci < Cg; ci++)
                for (int64_t ki = ki0; ki < ki1; ki++)
                    for (int64_t kj = 0; kj < k; kj++) {
                        int64_t ow0, ow1;
                        rt_conv_span(kj, s, c->pad, W, c->OW, &ow0, &ow1);
                        float wv = wc[(ci * k + ki) * k + kj];
                        const float *restrict xr = xb + (ci * H + ih0 + ki) * W - c->pad + kj;
                        for (int64_t ow = ow0; ow < ow1; ow++)
                            yr[ow] += wv * xr[ow * s];
                    }
            if (c->b)
                for (int64_t ow = 0; ow < c->OW; ow++)
                    yr[ow] += c->b[co];
        }
    }
}

void rt_gconv_fwd(rt_exec *e, const float *x, const float *w, const float *bias, float *y,
                  int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                  int64_t OH, int64_t OW, int64_t Cout, int64_t G)
{
    if (e->dev) {
        RT_GPU(e)->gconv_fwd(e, x, w, bias, y, B, C, H, W, k, s, pad, OH, OW, Cout, G);
        return;
    }
    gconv_ctx c = {.x = x, .w = w, .b = bias, .y = y, .B = B, .C = C, .H = H, .W = W, .k = k,
                   .s = s, .pad = pad, .OH = OH, .OW = OW, .Cout = Cout, .G = G};
    int64_t per = OH * OW * (C / G) * k * k;
    rt_pool_run(e->rt, B * Cout, per > 0 ? 32768 / per + 1 : 1, gconv_fwd_task, &c);
}

/* The kernel offsets t in [0, k) that reach input i from an output o (o s - pad + t =
 * i, 0 <= o < n): every s-th from *t0 to *t1 inclusive (*t0 > *t1: none). */
static void taps_back(int64_t i, int64_t k, int64_t s, int64_t pad, int64_t n, int64_t *t0,
                      int64_t *t1)
{
    int64_t q = i + pad;                          /* = o s + t */
    int64_t lo = q - (n - 1) * s > 0 ? q - (n - 1) * s : 0;
    if (lo <= q)
        lo += (q - lo) % s;                       /* the first with o s = q - t */
    *t0 = lo;
    *t1 = q < k - 1 ? q : k - 1;
}

/* one plane (b, ci) of dx: dx[b, ci, ih, iw] = sum over (co', ki, kj) in order of
 * dy[b, co, oh, ow] w[co, ci - g Cg, ki, kj] where oh s - pad + ki = ih (ow alike); the
 * offsets that reach no output are left out of the loops, not tested in them */
static void gconv_bwd_data_task(void *ctx, int64_t lo, int64_t hi)
{
    const gconv_ctx *c = ctx;
    int64_t Cg = c->C / c->G, Cog = c->Cout / c->G, k = c->k, s = c->s;
    for (int64_t pl = lo; pl < hi; pl++) {
        int64_t b = pl / c->C, ci = pl % c->C, g = ci / Cg, cl = ci - g * Cg;
        float *dxp = c->dx + pl * c->H * c->W;
        for (int64_t ih = 0; ih < c->H; ih++) {
            int64_t ki0, ki1;
            taps_back(ih, k, s, c->pad, c->OH, &ki0, &ki1);
            for (int64_t iw = 0; iw < c->W; iw++) {
                int64_t kj0, kj1;
                taps_back(iw, k, s, c->pad, c->OW, &kj0, &kj1);
                float acc = 0.0f;
                for (int64_t cq = 0; cq < Cog; cq++) {
                    int64_t co = g * Cog + cq;
                    const float *dyp = c->dy + (b * c->Cout + co) * c->OH * c->OW;
                    const float *wc = c->w + (co * Cg + cl) * k * k;
                    for (int64_t ki = ki0; ki <= ki1; ki += s) {
                        const float *dyr = dyp + (ih + c->pad - ki) / s * c->OW;
                        for (int64_t kj = kj0; kj <= kj1; kj += s)
                            acc += dyr[(iw + c->pad - kj) / s] * wc[ki * k + kj];
                    }
                }
                dxp[ih * c->W + iw] = acc;
            }
        }
    }
}

void rt_gconv_bwd_data(rt_exec *e, const float *dy, const float *w, float *dx, int64_t B,
                       int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                       int64_t OH, int64_t OW, int64_t Cout, int64_t G)
{
    if (e->dev) {
        RT_GPU(e)->gconv_bwd_data(e, dy, w, dx, B, C, H, W, k, s, pad, OH, OW, Cout, G);
        return;
    }
    gconv_ctx c = {.dy = dy, .w = w, .dx = dx, .B = B, .C = C, .H = H, .W = W, .k = k, .s = s,
                   .pad = pad, .OH = OH, .OW = OW, .Cout = Cout, .G = G};
    int64_t per = H * W * (Cout / G) * k * k;
    rt_pool_run(e->rt, B * C, per > 0 ? 32768 / per + 1 : 1, gconv_bwd_data_task, &c);
}

/* output channel co's weight gradients (Cg k k of them) and bias gradient:
 * dw[co, c', ki, kj] += sum over (b, oh, ow) in order of dy x, in double;
 * db[co] += sum over (b, oh, ow) of dy */
static void gconv_bwd_weight_task(void *ctx, int64_t lo, int64_t hi)
{
    const gconv_ctx *c = ctx;
    int64_t Cg = c->C / c->G, Cog = c->Cout / c->G, k = c->k, s = c->s, ohw = c->OH * c->OW;
    for (int64_t co = lo; co < hi; co++) {
        int64_t g = co / Cog;
        for (int64_t j = 0; j < Cg * k * k; j++) {
            int64_t cl = j / (k * k), ki = j / k % k, kj = j % k;
            int64_t oh0, oh1, ow0, ow1;   /* the outputs whose input is no padding */
            rt_conv_span(ki, s, c->pad, c->H, c->OH, &oh0, &oh1);
            rt_conv_span(kj, s, c->pad, c->W, c->OW, &ow0, &ow1);
            double acc = 0.0;
            for (int64_t b = 0; b < c->B; b++) {
                const float *dyp = c->dy + (b * c->Cout + co) * ohw;
                const float *xp = c->x + (b * c->C + g * Cg + cl) * c->H * c->W;
                for (int64_t oh = oh0; oh < oh1; oh++) {
                    const float *dyr = dyp + oh * c->OW;
                    const float *xr = xp + (oh * s - c->pad + ki) * c->W - c->pad + kj;
                    for (int64_t ow = ow0; ow < ow1; ow++)
                        acc += (double)(dyr[ow] * xr[ow * s]);
                }
            }
            c->dw[co * Cg * k * k + j] += (float)acc;
        }
        if (!c->db)
            continue;
        double acc = 0.0;
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t q = 0; q < ohw; q++)
                acc += (double)c->dy[(b * c->Cout + co) * ohw + q];
        c->db[co] += (float)acc;
    }
}

void rt_gconv_bwd_weight(rt_exec *e, const float *x, const float *dy, float *dw, float *db,
                         int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                         int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G)
{
    if (e->dev) {
        RT_GPU(e)->gconv_bwd_weight(e, x, dy, dw, db, B, C, H, W, k, s, pad, OH, OW, Cout, G);
        return;
    }
    gconv_ctx c = {.x = x, .dy = dy, .dw = dw, .db = db, .B = B, .C = C, .H = H, .W = W,
                   .k = k, .s = s, .pad = pad, .OH = OH, .OW = OW, .Cout = Cout, .G = G};
    rt_pool_run(e->rt, Cout, 1, gconv_bwd_weight_task, &c);
}
