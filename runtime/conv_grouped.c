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
 * one element. */
#include <math.h>
#include "rt.h"

typedef struct {
    const float *x, *w, *b, *dy;   /* b may be NULL */
    float *y, *dx, *dw, *db;       /* db may be NULL */
    int64_t B, C, H, W, k, s, pad, OH, OW, Cout, G;
} gconv_ctx;

/* one plane (b, co) of y: y = sum over (c', ki, kj) in order of w x, then + bias */
static void gconv_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const gconv_ctx *c = ctx;
    int64_t Cg = c->C / c->G, Cog = c->Cout / c->G, k = c->k;
    for (int64_t pl = lo; pl < hi; pl++) {
        int64_t b = pl / c->Cout, co = pl % c->Cout, g = co / Cog;
        const float *xb = c->x + (b * c->C + g * Cg) * c->H * c->W;
        const float *wc = c->w + co * Cg * k * k;
        float *yp = c->y + pl * c->OH * c->OW;
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                int64_t ih0 = oh * c->s - c->pad, iw0 = ow * c->s - c->pad;
                float acc = 0.0f;
                for (int64_t ci = 0; ci < Cg; ci++)
                    for (int64_t ki = 0; ki < k; ki++) {
                        int64_t ih = ih0 + ki;
                        if (ih < 0 || ih >= c->H)
                            continue;
                        for (int64_t kj = 0; kj < k; kj++) {
                            int64_t iw = iw0 + kj;
                            if (iw >= 0 && iw < c->W)
                                acc += wc[(ci * k + ki) * k + kj] *
                                       xb[(ci * c->H + ih) * c->W + iw];
                        }
                    }
                yp[oh * c->OW + ow] = c->b ? acc + c->b[co] : acc;
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

/* one plane (b, ci) of dx: dx[b, ci, ih, iw] = sum over (co', ki, kj) in order of
 * dy[b, co, oh, ow] w[co, ci - g Cg, ki, kj] where oh s - pad + ki = ih (ow alike) */
static void gconv_bwd_data_task(void *ctx, int64_t lo, int64_t hi)
{
    const gconv_ctx *c = ctx;
    int64_t Cg = c->C / c->G, Cog = c->Cout / c->G, k = c->k, s = c->s;
    for (int64_t pl = lo; pl < hi; pl++) {
        int64_t b = pl / c->C, ci = pl % c->C, g = ci / Cg, cl = ci - g * Cg;
        float *dxp = c->dx + pl * c->H * c->W;
        for (int64_t ih = 0; ih < c->H; ih++)
            for (int64_t iw = 0; iw < c->W; iw++) {
                float acc = 0.0f;
                for (int64_t cq = 0; cq < Cog; cq++) {
                    int64_t co = g * Cog + cq;
                    const float *dyp = c->dy + (b * c->Cout + co) * c->OH * c->OW;
                    const float *wc = c->w + (co * Cg + cl) * k * k;
                    for (int64_t ki = 0; ki < k; ki++) {
                        int64_t th = ih + c->pad - ki;   /* = oh s */
                        if (th < 0 || th % s || th / s >= c->OH)
                            continue;
                        for (int64_t kj = 0; kj < k; kj++) {
                            int64_t tw = iw + c->pad - kj;
                            if (tw < 0 || tw % s || tw / s >= c->OW)
                                continue;
                            acc += dyp[th / s * c->OW + tw / s] * wc[ki * k + kj];
                        }
                    }
                }
                dxp[ih * c->W + iw] = acc;
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
    int64_t Cg = c->C / c->G, Cog = c->Cout / c->G, k = c->k, ohw = c->OH * c->OW;
    for (int64_t co = lo; co < hi; co++) {
        int64_t g = co / Cog;
        for (int64_t j = 0; j < Cg * k * k; j++) {
            int64_t cl = j / (k * k), ki = j / k % k, kj = j % k;
            double acc = 0.0;
            for (int64_t b = 0; b < c->B; b++) {
                const float *dyp = c->dy + (b * c->Cout + co) * ohw;
                const float *xp = c->x + (b * c->C + g * Cg + cl) * c->H * c->W;
                for (int64_t oh = 0; oh < c->OH; oh++) {
                    int64_t ih = oh * c->s - c->pad + ki;
                    if (ih < 0 || ih >= c->H)
                        continue;
                    for (int64_t ow = 0; ow < c->OW; ow++) {
                        int64_t iw = ow * c->s - c->pad + kj;
                        if (iw >= 0 && iw < c->W)
                            acc += (double)(dyp[oh * c->OW + ow] * xp[ih * c->W + iw]);
                    }
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
