/* im2col.c: the CPU's im2col and col2im (a convolution's columns and their gradient
 * back onto the image), and the valid output spans of a kernel offset. See kernels.c for
 * the determinism every kernel keeps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

typedef struct {
    const float *x;            /* im2col: [B, C, H, W] */
    float *col;                /* im2col: [C*k*k, B*OH*OW] */
    const float *dcol;         /* col2im: [C*k*k, B*OH*OW] */
    float *dx;                 /* col2im: [B, C, H, W] */
    int64_t B, C, H, W, k, s, pad, OH, OW;
} conv_ctx;

void rt_conv_span(int64_t kj, int64_t s, int64_t pad, int64_t W, int64_t OW, int64_t *ow0,
                  int64_t *ow1)
{
    int64_t lo = pad - kj > 0 ? ceil_div(pad - kj, s) : 0;
    int64_t last = W - 1 + pad - kj;  /* ow*s <= last */
    int64_t hi = last < 0 ? 0 : last / s + 1;
    if (hi > OW)
        hi = OW;
    if (lo > hi)
        lo = hi;
    *ow0 = lo;
    *ow1 = hi;
}

/* The outputs ow whose input column ow*s - pad + kj lies in [0, W): [*ow0, *ow1). */
static void valid_cols(const conv_ctx *c, int64_t kj, int64_t *ow0, int64_t *ow1)
{
    rt_conv_span(kj, c->s, c->pad, c->W, c->OW, ow0, ow1);
}

/* The valid outputs [ow0, ow1) of each kernel column kj (im2col's per-plane spans) */
#define IM2COL_KMAX 16
typedef struct { int64_t ow0[IM2COL_KMAX], ow1[IM2COL_KMAX]; } col_spans;

static void spans_of(const conv_ctx *c, col_spans *sp)
{
    for (int64_t kj = 0; kj < c->k && kj < IM2COL_KMAX; kj++)
        valid_cols(c, kj, &sp->ow0[kj], &sp->ow1[kj]);
}

/* d[j] = src[2 j] for j < n (reads src[0 .. 2n - 2] only) */
static void copy_stride2(float *restrict d, const float *restrict src, int64_t n)
{
    int64_t j = 0;
    for (; j + 4 < n; j += 4) {
        v4f a = ld4(src + 2 * j), b = ld4(src + 2 * j + 4);
        st4(d + j, __builtin_shufflevector(a, b, 0, 2, 4, 6));
    }
    for (; j < n; j++)
        d[j] = src[2 * j];
}

/* d[j] = src[j s] for j < n */
static inline void copy_strided(float *restrict d, const float *restrict src, int64_t n, int64_t s)
{
    int64_t j = 0;
    if (s == 1) {
        for (; j + 4 <= n; j += 4)
            st4(d + j, ld4(src + j));
        for (; j < n; j++)
            d[j] = src[j];
    } else if (s == 2) {
        copy_stride2(d, src, n);
    } else {
        for (; j < n; j++)
            d[j] = src[j * s];
    }
}

/* "Same" padding at stride 1: the segment is the plane shifted by a constant offset, so
 * the valid span is one copy; then zero the padding, which between two rows is one
 * contiguous gap (right edge of a row + left edge of the next). */
static void im2col_same(const conv_ctx *c, const float *restrict xp, float *restrict dst,
                        int64_t ki, int64_t kj, int64_t ow0, int64_t ow1)
{
    int64_t W = c->W, oh0 = ki < c->pad ? c->pad - ki : 0;
    int64_t oh1 = c->H + c->pad - ki < c->OH ? c->H + c->pad - ki : c->OH;
    if (oh0 >= oh1 || ow0 == ow1) {
        memset(dst, 0, (size_t)(c->OH * W) * sizeof(float));
        return;
    }
    int64_t first = oh0 * W + ow0, last = (oh1 - 1) * W + ow1;
    memset(dst, 0, (size_t)first * sizeof(float));
    memcpy(dst + first, xp + first + (ki - c->pad) * W + (kj - c->pad),
           (size_t)(last - first) * sizeof(float));
    memset(dst + last, 0, (size_t)(c->OH * W - last) * sizeof(float));
    for (int64_t oh = oh0; oh + 1 < oh1; oh++)
        for (int64_t j = oh * W + ow1; j < (oh + 1) * W + ow0; j++)
            dst[j] = 0.0f;
}

/* One image plane into its OH*OW segment of col row (ki, kj); [ow0, ow1) its valid
 * outputs (col_spans). */
static void im2col_plane(const conv_ctx *c, const float *restrict xp, float *restrict dst,
                         int64_t ki, int64_t kj, int64_t ow0, int64_t ow1)
{
    int64_t s = c->s;
    if (s == 1 && c->OW == c->W) {
        im2col_same(c, xp, dst, ki, kj, ow0, ow1);
        return;
    }
    for (int64_t oh = 0; oh < c->OH; oh++, dst += c->OW) {
        int64_t ih = oh * s - c->pad + ki;
        if (ih < 0 || ih >= c->H || ow0 == ow1) {
            memset(dst, 0, (size_t)c->OW * sizeof(float));
            continue;
        }
        for (int64_t ow = 0; ow < ow0; ow++)
            dst[ow] = 0.0f;
        for (int64_t ow = ow1; ow < c->OW; ow++)
            dst[ow] = 0.0f;
        copy_strided(dst + ow0, xp + ih * c->W + ow0 * s - c->pad + kj, ow1 - ow0, s);
    }
}

/* An image plane whose zero-padded copy fits IM2COL_PAD floats: the copy once, then
 * each of the k*k col rows' segments as OH row copies out of it (no bounds, no
 * memsets: the small planes of a CNN's later stages pay per call, not per value). */
#define IM2COL_PAD 8192

static int im2col_pads(const conv_ctx *c)
{
    return (c->H + 2 * c->pad) * (c->W + 2 * c->pad) <= IM2COL_PAD;
}

static void im2col_padded(const conv_ctx *c, const float *restrict xp, float *restrict dst,
                          int64_t rowstride)
{
    float pad[IM2COL_PAD];
    int64_t p = c->pad, PW = c->W + 2 * p, PH = c->H + 2 * p;
    memset(pad, 0, (size_t)(p * PW) * sizeof(float));
    for (int64_t h = 0; h < c->H; h++) {
        float *r = pad + (h + p) * PW;
        for (int64_t j = 0; j < p; j++)
            r[j] = r[p + c->W + j] = 0.0f;
        copy_strided(r + p, xp + h * c->W, c->W, 1);
    }
    memset(pad + (p + c->H) * PW, 0, (size_t)((PH - p - c->H) * PW) * sizeof(float));
    for (int64_t ki = 0; ki < c->k; ki++)
        for (int64_t kj = 0; kj < c->k; kj++, dst += rowstride) {
            float *d = dst;
            for (int64_t oh = 0; oh < c->OH; oh++, d += c->OW)
                copy_strided(d, pad + (oh * c->s + ki) * PW + kj, c->OW, c->s);
        }
}

/* Task t = ch * B + b: the k*k col rows' segments of image plane (b, ch), from its
 * padded copy (im2col_padded) or segment by segment. */
static void im2col_task(void *ctx, int64_t lo, int64_t hi)
{
    const conv_ctx *c = ctx;
    int64_t k = c->k, kk = k * k, ohw = c->OH * c->OW, hw = c->H * c->W, n = c->B * ohw;
    int pads = im2col_pads(c);
    col_spans sp;
    spans_of(c, &sp);
    for (int64_t t = lo; t < hi; t++) {
        int64_t b = t % c->B, ch = t / c->B;
        const float *xp = c->x + (b * c->C + ch) * hw;
        float *dst = c->col + ch * kk * n + b * ohw;
        if (pads) {
            im2col_padded(c, xp, dst, n);
            continue;
        }
        for (int64_t ki = 0; ki < k; ki++)
            for (int64_t kj = 0; kj < k; kj++) {
                int64_t o0, o1;
                if (kj < IM2COL_KMAX) {
                    o0 = sp.ow0[kj];
                    o1 = sp.ow1[kj];
                } else {
                    valid_cols(c, kj, &o0, &o1);
                }
                im2col_plane(c, xp, dst + (ki * k + kj) * n, ki, kj, o0, o1);
            }
    }
}

void rt_im2col(rt_exec *e, const float *x, float *col, int64_t B, int64_t C, int64_t H,
               int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->im2col(e, x, col, B, C, H, W, k, stride, pad, OH, OW);
        return;
    }
    conv_ctx c = {x, col, NULL, NULL, B, C, H, W, k, stride, pad, OH, OW};
    rt_pool_run(rt_pool_of(e), C * B, rt_grain_for(k * k * OH * OW), im2col_task, &c);
}

/* im2col of B images on the calling thread (runtime/conv.c's tasks) */
void rt_im2col_serial(const float *x, float *col, int64_t B, int64_t C, int64_t H, int64_t W,
                      int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    conv_ctx c = {x, col, NULL, NULL, B, C, H, W, k, stride, pad, OH, OW};
    im2col_task(&c, 0, C * B);
}

/* col2im for one image plane and one kernel offset: dp += the (ki, kj) segment src. */
static void col2im_plane(const conv_ctx *c, const float *restrict src, float *restrict dp,
                         int64_t ki, int64_t kj)
{
    int64_t ow0, ow1, s = c->s;
    valid_cols(c, kj, &ow0, &ow1);
    if (ow0 == ow1)
        return;
    for (int64_t oh = 0; oh < c->OH; oh++) {
        int64_t ih = oh * s - c->pad + ki;
        if (ih < 0 || ih >= c->H)
            continue;
        float *restrict d = dp + ih * c->W + ow0 * s - c->pad + kj;
        const float *restrict sr = src + oh * c->OW + ow0;
        int64_t n = ow1 - ow0, j = 0;
        if (s == 1) {
            for (; j + 4 <= n; j += 4)
                st4(d + j, ld4(d + j) + ld4(sr + j));
            for (; j < n; j++)
                d[j] += sr[j];
        } else {
            for (; j < n; j++)
                d[j * s] += sr[j];
        }
    }
}

/* Task t = ch * B + b owns dx plane (b, ch): no two tasks write the same element, and
 * each element sums its contributions in the fixed (ki, kj, oh) order. A run of tasks
 * reads k*k col rows as long streams. */
/* col2im into a zero-padded plane (im2col_pads), the k*k segments added in the same
 * (ki, kj, oh) order as col2im_plane adds them, then the plane's inside copied out: the
 * same bits without a bounds check per segment. */
static void col2im_padded(const conv_ctx *c, const float *restrict src, float *restrict dp,
                          int64_t rowstride)
{
    float pad[IM2COL_PAD];
    int64_t p = c->pad, PW = c->W + 2 * p, s = c->s;
    memset(pad, 0, (size_t)((c->H + 2 * p) * PW) * sizeof(float));
    for (int64_t ki = 0; ki < c->k; ki++)
        for (int64_t kj = 0; kj < c->k; kj++, src += rowstride) {
            const float *restrict sr = src;
            for (int64_t oh = 0; oh < c->OH; oh++, sr += c->OW) {
                float *restrict d = pad + (oh * s + ki) * PW + kj;
                int64_t j = 0;
                if (s == 1)
                    for (; j + 4 <= c->OW; j += 4)
                        st4(d + j, ld4(d + j) + ld4(sr + j));
                for (; j < c->OW; j++)
                    d[j * s] += sr[j];
            }
        }
    for (int64_t h = 0; h < c->H; h++)
        copy_strided(dp + h * c->W, pad + (h + p) * PW + p, c->W, 1);
}

static void col2im_task(void *ctx, int64_t lo, int64_t hi)
{
    const conv_ctx *c = ctx;
    int64_t kk = c->k * c->k, ohw = c->OH * c->OW, hw = c->H * c->W, n = c->B * ohw;
    int pads = im2col_pads(c);
    for (int64_t t = lo; t < hi; t++) {
        int64_t b = t % c->B, ch = t / c->B;
        float *dp = c->dx + (b * c->C + ch) * hw;
        const float *src = c->dcol + ch * kk * n + b * ohw;
        if (pads) {
            col2im_padded(c, src, dp, n);
            continue;
        }
        memset(dp, 0, (size_t)hw * sizeof(float));
        for (int64_t kidx = 0; kidx < kk; kidx++)
            col2im_plane(c, src + kidx * n, dp, kidx / c->k, kidx % c->k);
    }
}

/* col2im of B images on the calling thread (runtime/conv.c's tasks) */
void rt_col2im_serial(const float *dcol, float *dx, int64_t B, int64_t C, int64_t H, int64_t W,
                      int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    conv_ctx c = {NULL, NULL, dcol, dx, B, C, H, W, k, stride, pad, OH, OW};
    col2im_task(&c, 0, C * B);
}

void rt_col2im(rt_exec *e, const float *dcol, float *dx, int64_t B, int64_t C, int64_t H,
               int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->col2im(e, dcol, dx, B, C, H, W, k, stride, pad, OH, OW);
        return;
    }
    conv_ctx c = {NULL, NULL, dcol, dx, B, C, H, W, k, stride, pad, OH, OW};
    rt_pool_run(rt_pool_of(e), C * B, rt_grain_for(k * k * OH * OW), col2im_task, &c);
}
