/* glu.c: the CPU's gated linear unit (SwiGLU, GeGLU and the shared expert's gate),
 * forward and backward as one fused loop, with AVX2 twins. See kernels.c for
 * the determinism every kernel keeps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

typedef struct {
    const float *x, *dy;   /* [rows, 2h], [rows, h] */
    float *y, *dx;         /* [rows, h], [rows, 2h] */
    int64_t h;
    int act;               /* RT_GLU_* */
} glu_ctx;

static inline float glu_act(int act, float a)
{
    switch (act) {
    case RT_GLU_SILU: return rt_silu(a);
    case RT_GLU_GELU: return rt_gelu(a);
    case RT_GLU_GELU_TANH: return rt_gelu_tanh(a);
    case RT_GLU_SIGMOID: return rt_sigmoidf(a);
    default: return a < 0.0f ? 0.0f : a;   /* NaN stays NaN, as torch.relu */
    }
}

/* d act(a) times g (the activation's backward as the elementwise ops have it), and
 * act(a) in *y, from one evaluation of the activation's exp, erf or tanh: the bits of
 * trainc_rt.h's rt_silu_bwd, rt_gelu_bwd, rt_gelu_tanh_bwd and of glu_act. */
static inline float glu_act_bwd(int act, float a, float g, float *y)
{
    switch (act) {
    case RT_GLU_SILU: {
        float d = 1.0f + rt_expf(-a), s = 1.0f / d;
        *y = a / d;
        return g * s * (1.0f + a * (1.0f - s));
    }
    case RT_GLU_GELU: {
        float t = 1.0f + erff(a * 0.70710678118654752f);
        float pdf = expf(-0.5f * a * a) * 0.39894228040143268f;
        *y = 0.5f * a * t;
        return g * (0.5f * t + a * pdf);
    }
    case RT_GLU_GELU_TANH: {
        float t = rt_tanhf(0.79788456080286536f * (a + 0.044715f * a * a * a));
        float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * a * a);
        *y = 0.5f * a * (1.0f + t);
        return g * (0.5f * (1.0f + t) + 0.5f * a * (1.0f - t * t) * du);
    }
    case RT_GLU_SIGMOID: {
        float s = rt_sigmoidf(a);
        *y = s;
        return g * s * (1.0f - s);
    }
    default:
        *y = a < 0.0f ? 0.0f : a;
        return a <= 0.0f ? 0.0f : g;   /* torch's threshold_backward */
    }
}

/* One row of h outputs; act a constant where the caller passes one, so the silu row's
 * loop vectorizes (rt_expf is plain arithmetic) */
static inline __attribute__((always_inline)) void
glu_fwd_row(int act, const float *restrict a, const float *restrict u, float *restrict y,
            int64_t h)
{
    for (int64_t j = 0; j < h; j++)
        y[j] = glu_act(act, a[j]) * u[j];
}

static inline __attribute__((always_inline)) void
glu_bwd_row(int act, const float *restrict a, const float *restrict u,
            const float *restrict dy, float *restrict da, float *restrict du, int64_t h)
{
    for (int64_t j = 0; j < h; j++) {
        float g = dy[j], y;
        da[j] = glu_act_bwd(act, a[j], g * u[j], &y);
        du[j] = y * g;
    }
}

/* The rows, built for the baseline x86-64 and for AVX2 as GELU_ROWS are (the same
 * operations: the same bits); SwiGLU's silu rows apart, the others sharing one loop. */
#define GLU_ROWS(suffix, attr)                                                               \
    attr static void glu_fwd_rows_##suffix(const glu_ctx *c, int64_t lo, int64_t hi)         \
    {                                                                                         \
        for (int64_t r = lo; r < hi; r++) {                                                   \
            const float *a = c->x + r * 2 * c->h;                                             \
            if (c->act == RT_GLU_SILU)                                                        \
                glu_fwd_row(RT_GLU_SILU, a, a + c->h, c->y + r * c->h, c->h);                 \
            else                                                                              \
                glu_fwd_row(c->act, a, a + c->h, c->y + r * c->h, c->h);                      \
        }                                                                                     \
    }                                                                                         \
    attr static void glu_bwd_rows_##suffix(const glu_ctx *c, int64_t lo, int64_t hi)         \
    {                                                                                         \
        for (int64_t r = lo; r < hi; r++) {                                                   \
            const float *a = c->x + r * 2 * c->h, *dy = c->dy + r * c->h;                     \
            float *da = c->dx + r * 2 * c->h;                                                 \
            if (c->act == RT_GLU_SILU)                                                        \
                glu_bwd_row(RT_GLU_SILU, a, a + c->h, dy, da, da + c->h, c->h);               \
            else                                                                              \
                glu_bwd_row(c->act, a, a + c->h, dy, da, da + c->h, c->h);                    \
        }                                                                                     \
    }
GLU_ROWS(base, )
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__TINYC__)
GLU_ROWS(avx2, __attribute__((target("avx2"))))
#define GLU_ROWS_OF(dir) (rt_have_avx2() ? glu_##dir##_rows_avx2 : glu_##dir##_rows_base)
#else
#define GLU_ROWS_OF(dir) glu_##dir##_rows_base
#endif

static void glu_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    GLU_ROWS_OF(fwd)(ctx, lo, hi);
}

static void glu_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    GLU_ROWS_OF(bwd)(ctx, lo, hi);
}

void rt_glu_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_fwd(e, x, y, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .y = y, .h = h, .act = act};
    if (h <= 0)
        return;
    rt_pool_run(rt_pool_of(e), rows, rt_grain_for(8 * h), glu_fwd_task, &c);
}

void rt_glu_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_bwd(e, x, dy, dx, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .dy = dy, .dx = dx, .h = h, .act = act};
    if (h <= 0)
        return;
    rt_pool_run(rt_pool_of(e), rows, rt_grain_for(16 * h), glu_bwd_task, &c);
}

/* The gated variant: rows of 2h + 1, the last column g; y = glu's row times sigmoid(g).
 * Backward: dy times the sigmoid through glu's rule, and g's gradient sigmoid'(g) times
 * the sum over the row of dy * glu (glu recomputed). Rows of an odd width: one loop. */
static void glu_gated_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const glu_ctx *c = ctx;
    int64_t h = c->h;
    for (int64_t r = lo; r < hi; r++) {
        const float *a = c->x + r * (2 * h + 1);
        float s = rt_sigmoidf(a[2 * h]), *y = c->y + r * h;
        for (int64_t j = 0; j < h; j++)
            y[j] = glu_act(c->act, a[j]) * a[h + j] * s;
    }
}

static void glu_gated_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const glu_ctx *c = ctx;
    int64_t h = c->h;
    for (int64_t r = lo; r < hi; r++) {
        const float *a = c->x + r * (2 * h + 1), *dy = c->dy + r * h;
        float *da = c->dx + r * (2 * h + 1);
        float s = rt_sigmoidf(a[2 * h]), dot = 0.0f;
        for (int64_t j = 0; j < h; j++) {
            float g = dy[j] * s, y;
            da[j] = glu_act_bwd(c->act, a[j], g * a[h + j], &y);
            da[h + j] = y * g;
            dot += dy[j] * (y * a[h + j]);
        }
        da[2 * h] = dot * s * (1.0f - s);
    }
}

void rt_glu_gated_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_gated_fwd(e, x, y, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .y = y, .h = h, .act = act};
    if (h <= 0)
        return;
    rt_pool_run(rt_pool_of(e), rows, rt_grain_for(8 * h), glu_gated_fwd_task, &c);
}

void rt_glu_gated_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                      int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_gated_bwd(e, x, dy, dx, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .dy = dy, .dx = dx, .h = h, .act = act};
    if (h <= 0)
        return;
    rt_pool_run(rt_pool_of(e), rows, rt_grain_for(16 * h), glu_gated_bwd_task, &c);
}
