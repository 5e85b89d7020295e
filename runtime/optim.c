/* optim.c: the optimizers, the learning-rate schedules and gradient clipping, with
 * exactly the update rules of torch.optim.SGD, torch.optim.AdamW and
 * torch.nn.utils.clip_grad_norm_ (docs/spec.md, The training). Arithmetic is fp32 like
 * PyTorch's on fp32 tensors; norms are accumulated in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "rt_loop.h"

/* wsd after its warmup: 1 until the last D = round(decay_frac x total) steps (at least
 * 1, at most those after the warmup), then f + (1 - f) shape(p) with p = (step - (total
 * - D)) / D: shape 1 - p, (1 + cos(pi p)) / 2 or 1 - sqrt(p) (transformers'
 * get_wsd_schedule's decay types, min_lr_ratio f) */
static double wsd_factor(const rt_train_config *c, int64_t step, int64_t total)
{
    double frac = isnan(c->decay_frac) ? 0.2 : c->decay_frac;
    int64_t D = llround(frac * (double)total), after = total - c->warmup_steps;
    if (D > after)
        D = after;
    if (D < 1)
        D = 1;
    if (step < total - D)
        return 1.0;
    double p = (double)(step - (total - D)) / (double)D, f = c->final_lr_frac, s;
    if (p > 1.0)
        p = 1.0;
    switch (c->decay_shape) {
    case RT_DECAY_COSINE: s = 0.5 * (1.0 + cos(M_PI * p)); break;
    case RT_DECAY_1_SQRT: s = 1.0 - sqrt(p); break;
    default: s = 1.0 - p; break;
    }
    return f + (1.0 - f) * s;
}

double rt_lr_at(const rt_train_config *c, int64_t step, int64_t total)
{
    double lr = c->lr;
    if (c->warmup_steps > 0 && step < c->warmup_steps)
        return lr * (double)(step + 1) / (double)c->warmup_steps;
    int64_t s = step - c->warmup_steps;
    double span = (double)(total - c->warmup_steps);
    double progress = span > 0 ? (double)s / span : 1.0;
    if (progress > 1.0)
        progress = 1.0;
    if (progress < 0.0)
        progress = 0.0;
    double f = c->final_lr_frac;
    switch (c->sched) {
    case RT_SCHED_CONSTANT: return lr;
    case RT_SCHED_STEP: return lr * pow(c->gamma, (double)(s / c->sched_every_steps));
    case RT_SCHED_COSINE: return lr * (f + (1.0 - f) * 0.5 * (1.0 + cos(M_PI * progress)));
    case RT_SCHED_LINEAR: return lr * (1.0 - (1.0 - f) * progress);
    case RT_SCHED_WSD: return lr * wsd_factor(c, step, total);
    }
    rt_die("bad schedule %d", c->sched);
}

/* Partial sums over fixed blocks of 16384 elements of each tensor (counted from the
 * tensor's start), added in order: the norm does not depend on the number of
 * threads. A range [lo, hi) of the flat region takes the blocks' parts inside it.
 * Frozen parameters (train.freeze) count for nothing, as PyTorch's clip_grad_norm_
 * over the optimizer's parameters: the ranges lie in [0, trainable_floats), before
 * them. */
#define NORM_BLOCK 16384

/* The two hot loops of a CPU step's update, built twice: for the baseline x86-64 (4
 * floats, 2 doubles a vector) and for AVX2 (8, 4), the second taken when the CPU has
 * it. The same operations in the same order, no FMA (-ffp-contract=off): the same
 * bits either way.
 *
 * sumsq: the sum of g[k]^2 in double over eight lanes (element k in lane k % 8, the
 * lanes added pairwise at the end), so that it vectorizes; a sum in one chain ran at
 * one add per four cycles.
 * adamw: torch.optim.AdamW's update of n elements (see opt_slice). */
#define OPT_LOOPS(suffix, attr)                                                               \
    attr static double sumsq_##suffix(const float *restrict g, int64_t n)                     \
    {                                                                                         \
        double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                               \
        int64_t k = 0;                                                                        \
        for (; k + 8 <= n; k += 8)                                                            \
            for (int l = 0; l < 8; l++)                                                       \
                s[l] += (double)g[k + l] * (double)g[k + l];                                  \
        for (; k < n; k++)                                                                    \
            s[k % 8] += (double)g[k] * (double)g[k];                                          \
        return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));             \
    }                                                                                         \
    attr static void adamw_##suffix(float *restrict p, const float *restrict g,               \
                                    float *restrict m1, float *restrict m2, int64_t n,        \
                                    float gs, float decay, float b1, float a1, float b2,      \
                                    float a2, float bc2_sqrt, float eps, float step_size)     \
    {                                                                                         \
        for (int64_t k = 0; k < n; k++) {                                                     \
            float gk = g[k] * gs;                                                             \
            float pk = p[k] * decay;                                                          \
            float mk = m1[k] * b1 + gk * a1;                                                  \
            float vk = m2[k] * b2 + a2 * gk * gk;                                             \
            m1[k] = mk;                                                                       \
            m2[k] = vk;                                                                       \
            float denom = sqrtf(vk) / bc2_sqrt + eps;                                         \
            p[k] = pk + -step_size * (mk / denom);                                            \
        }                                                                                     \
    }
OPT_LOOPS(base, )
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__TINYC__)
OPT_LOOPS(avx2, __attribute__((target("avx2"))))
#define SUMSQ (rt_have_avx2() ? sumsq_avx2 : sumsq_base)
#define ADAMW (rt_have_avx2() ? adamw_avx2 : adamw_base)
#else
#define SUMSQ sumsq_base
#define ADAMW adamw_base
#endif

typedef struct {
    const rt_model *m;
    const float *g;               /* g[k - lo] is element k of the flat region */
    int64_t lo, hi;
    const int64_t *first_block;   /* [n_params + 1] */
    double *partial;              /* one per block */
} norm_job;

/* The part of parameter p inside [lo, hi), in elements of p: [*k0, *k1). */
static int clip_param(const rt_param *p, int64_t lo, int64_t hi, int64_t *k0, int64_t *k1)
{
    *k0 = lo > p->offset ? lo - p->offset : 0;
    *k1 = hi < p->offset + p->numel ? hi - p->offset : p->numel;
    return *k1 > *k0;
}

static void norm_blocks(void *ctx, int64_t lo, int64_t hi)
{
    norm_job *j = ctx;
    int pi = 0;
    for (int64_t blk = lo; blk < hi; blk++) {
        while (j->first_block[pi + 1] <= blk)
            pi++;
        const rt_param *p = &j->m->params[pi];
        int64_t a, b;
        clip_param(p, j->lo, j->hi, &a, &b);
        int64_t k0 = (a / NORM_BLOCK + (blk - j->first_block[pi])) * NORM_BLOCK;
        int64_t k1 = k0 + NORM_BLOCK < b ? k0 + NORM_BLOCK : b;
        if (k0 < a)
            k0 = a;
        const float *g = j->g + (p->offset - j->lo);
        j->partial[blk] = SUMSQ(g + k0, k1 - k0);
    }
}

double rt_grad_sumsq(rt_pool *pool, const rt_model *m, int64_t lo, int64_t hi, const float *g)
{
    int64_t *first = calloc((size_t)m->n_params + 1, sizeof *first);
    if (!first)
        rt_fail("out of memory");
    for (int i = 0; i < m->n_params; i++) {
        int64_t a, b, n = 0;
        if (clip_param(&m->params[i], lo, hi, &a, &b))
            n = (b + NORM_BLOCK - 1) / NORM_BLOCK - a / NORM_BLOCK;
        first[i + 1] = first[i] + n;
    }
    int64_t nb = first[m->n_params];
    double *partial = calloc((size_t)nb + 1, sizeof *partial);
    if (!partial)
        rt_fail("out of memory");
    norm_job j = {m, g, lo, hi, first, partial};
    rt_pool_run(pool, nb, 1, norm_blocks, &j);
    double total = 0;
    for (int64_t b = 0; b < nb; b++)
        total += partial[b];
    free(first);
    free(partial);
    return total;
}

double rt_grad_norm(rt_pool *pool, const rt_model *m, const float *grads)
{
    return sqrt(rt_grad_sumsq(pool, m, 0, m->trainable_floats, grads));
}

typedef struct {
    float *g;
    float gs, v;
} clamp_job;

static void clamp_slice(void *ctx, int64_t lo, int64_t hi)
{
    const clamp_job *j = ctx;
    float *restrict g = j->g;
    float gs = j->gs, v = j->v;
    for (int64_t k = lo; k < hi; k++) {   /* (as torch's clamp_, NaN stays NaN) */
        float x = g[k] * gs;
        g[k] = x > v ? v : x < -v ? -v : x;
    }
}

void rt_clip_values(rt_pool *pool, float *g, int64_t n, float gs, double value)
{
    clamp_job j = {g, gs, (float)value};
    rt_pool_run(pool, n, rt_grain_for(1), clamp_slice, &j);
}

int rt_clip_by_value(rt_pool *pool, const rt_train_config *c, float *g, int64_t n, float *gs)
{
    if (isnan(rt_clip_value(c)))
        return 0;
    rt_clip_values(pool, g, n, *gs, rt_clip_value(c));
    *gs = 1.0f;
    return 1;
}

static int group_parts(const rt_opt_group *g)
{
    if (g->opt == RT_OPT_ADAMW || g->opt == RT_OPT_MUON)   /* (muon's: its AdamW's) */
        return 2;
    return g->momentum > 0 ? 1 : 0;
}

int rt_optim_state_parts(const rt_train_config *c)
{
    rt_opt_group g = rt_opt_of(c, 0), d = rt_opt_of(c, 1);
    int a = group_parts(&g), b = group_parts(&d);
    /* a GAN's two optimizers share the parts; ema's (or swa's) average is the last */
    return (a > b ? a : b) + (c->has_ema || c->has_swa);
}

/* ---- ema: the weights' exponential moving average --------------------------------- */

int rt_ema_part(const rt_train_config *c) { return rt_optim_state_parts(c) - 1; }

int rt_ema_takes(const rt_train_config *c, int64_t n, int *first)
{
    if (!c->has_ema || n <= c->ema_start || (n - c->ema_start) % c->ema_every != 0)
        return 0;
    *first = n - c->ema_start == c->ema_every;
    return 1;
}

int rt_ema_ready(const rt_train_config *c, int64_t n)
{
    return c->has_ema && n - c->ema_start >= c->ema_every;
}

typedef struct {
    const float *p;
    float *ema;
    float w;
    int first;
} EmaJob;

static void ema_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const EmaJob *j = ctx;
    for (int64_t i = lo; i < hi; i++)
        j->ema[i] = j->first ? j->p[i] : fmaf(j->w, j->p[i] - j->ema[i], j->ema[i]);
}

void rt_ema_take(rt_pool *pool, const float *p, float *ema, int64_t n, double decay, int first)
{
    EmaJob j = {p, ema, (float)(1.0 - decay), first};
    rt_pool_run(pool, n, rt_grain_for(4), ema_chunk, &j);
}

typedef struct {
    const float *p;
    float *avg;
    float k;
    int first;
} SwaJob;

static void swa_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const SwaJob *j = ctx;
    for (int64_t i = lo; i < hi; i++)
        j->avg[i] = j->first ? j->p[i] : j->avg[i] + (j->p[i] - j->avg[i]) / j->k;
}

void rt_swa_take(rt_pool *pool, const float *p, float *avg, int64_t n, int64_t taken)
{
    SwaJob j = {p, avg, (float)(taken + 1), taken == 0};
    rt_pool_run(pool, n, rt_grain_for(4), swa_chunk, &j);
}

static void swap_chunk(void *ctx, int64_t lo, int64_t hi)
{
    float **ab = ctx;
    for (int64_t i = lo; i < hi; i++) {
        float t = ab[0][i];
        ab[0][i] = ab[1][i];
        ab[1][i] = t;
    }
}

void rt_swap_floats(rt_pool *pool, float *a, float *b, int64_t n)
{
    float *ab[2] = {a, b};
    rt_pool_run(pool, n, rt_grain_for(2), swap_chunk, ab);
}

void rt_config_for_net(const rt_train_config *c, int d, rt_train_config *out)
{
    *out = *c;
    rt_opt_group g = rt_opt_of(c, d);
    out->opt = g.opt;
    out->lr = g.lr;
    out->beta1 = g.beta1;
    out->beta2 = g.beta2;
    out->eps = g.eps;
    out->weight_decay = g.weight_decay;
    out->momentum = g.momentum;
    out->nesterov = g.nesterov;
    out->has_opt_d = 0;
}

int64_t rt_optim_state_floats(const rt_train_config *c, const rt_model *m)
{
    return rt_optim_state_parts(c) * m->trainable_floats;
}

typedef struct {
    const rt_train_config *c;
    const rt_param *pp;
    float *p, *m1, *m2;
    const float *g;
    int64_t t;
    double lr;
    float gscale;
    int clip;
} opt_job;

/* The update of elements [lo, hi) of one parameter tensor. With clipping, g * gscale
 * is what clip_grad_norm_ would have left in the gradient (the same float product). */
static void opt_slice(void *ctx, int64_t lo, int64_t hi)
{
    const opt_job *j = ctx;
    const rt_train_config *c = j->c;
    float *restrict p = j->p;
    const float *restrict g = j->g;
    float wd = j->pp->rank >= 2 ? (float)c->weight_decay : 0.0f;
    /* branch-free loops so they vectorize: multiplying by 1 or adding 0 * p is exact */
    float gs = j->clip ? j->gscale : 1.0f;
    if (c->opt == RT_OPT_ADAMW) {
        float *restrict m1 = j->m1, *restrict m2 = j->m2;
        /* PyTorch takes 1 - beta in double, then rounds: (float)(1 - 0.9) != 1 - 0.9f */
        float b1 = (float)c->beta1, b2 = (float)c->beta2;
        float a1 = (float)(1.0 - c->beta1), a2 = (float)(1.0 - c->beta2);
        double bc1 = 1.0 - pow(c->beta1, (double)j->t), bc2 = 1.0 - pow(c->beta2, (double)j->t);
        float step_size = (float)(j->lr / bc1);
        float bc2_sqrt = (float)sqrt(bc2);
        float decay = (float)(1.0 - j->lr * wd);
        float eps = (float)c->eps;
        ADAMW(p + lo, g + lo, m1 + lo, m2 + lo, hi - lo, gs, decay, b1, a1, b2, a2, bc2_sqrt, eps,
              step_size);
        return;
    }
    float mom = (float)c->momentum, lrf = (float)j->lr;
    float *restrict buf = j->m1;
    if (!buf) {
        for (int64_t k = lo; k < hi; k++)
            p[k] += -lrf * (g[k] * gs + wd * p[k]);
    } else if (j->t == 1) {      /* torch: the buffer starts as the first gradient */
        for (int64_t k = lo; k < hi; k++) {
            float d = g[k] * gs + wd * p[k];
            buf[k] = d;
            p[k] += -lrf * (c->nesterov ? d + mom * d : d);
        }
    } else if (c->nesterov) {
        for (int64_t k = lo; k < hi; k++) {
            float d = g[k] * gs + wd * p[k];
            float bk = buf[k] * mom + d;
            buf[k] = bk;
            p[k] += -lrf * (d + mom * bk);
        }
    } else {
        for (int64_t k = lo; k < hi; k++) {
            float d = g[k] * gs + wd * p[k];
            float bk = buf[k] * mom + d;
            buf[k] = bk;
            p[k] += -lrf * bk;
        }
    }
}

/* t: the number of this step, from 1 (AdamW's bias correction). gscale: the clipping
 * factor; clip: whether clip_grad_norm_ scales at all. Each tensor's part inside
 * [lo, hi) is updated with that tensor's rules, so a range may cut tensors anywhere. */
void rt_optim_step_range(rt_pool *pool, const rt_train_config *c, const rt_model *m, int64_t lo,
                         int64_t hi, float *params, const float *grads, float *state, int64_t t,
                         double lr, float gscale, int clip)
{
    rt_optim_step_strided(pool, c, m, lo, hi, params, grads, state, hi - lo, t, lr, gscale, clip);
}

void rt_optim_step_strided(rt_pool *pool, const rt_train_config *c, const rt_model *m, int64_t lo,
                           int64_t hi, float *params, const float *grads, float *state,
                           int64_t stride, int64_t t, double lr, float gscale, int clip)
{
    if (hi > m->trainable_floats)   /* (train.freeze's parameters lie after, untouched) */
        rt_die("optimizer: range [%lld, %lld) past the trained parameters' %lld floats",
               (long long)lo, (long long)hi, (long long)m->trainable_floats);
    if (c->opt == RT_OPT_MUON) {   /* (muon.c: its matrices whole, AdamW the rest) */
        rt_muon_step(pool, c, m, lo, hi, params, grads, state, stride, t, lr, gscale, clip);
        return;
    }
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *pp = &m->params[i];
        int64_t k0, k1;
        if (clip_param(pp, lo, hi, &k0, &k1))
            rt_optim_param(pool, c, pp, lo, k0, k1, params, grads, state, stride, t, lr, gscale,
                           clip);
    }
}

void rt_optim_param(rt_pool *pool, const rt_train_config *c, const rt_param *pp, int64_t lo,
                    int64_t k0, int64_t k1, float *params, const float *grads, float *state,
                    int64_t stride, int64_t t, double lr, float gscale, int clip)
{
    int64_t at = pp->offset + k0 - lo;   /* in the range's own arrays */
    opt_job j = {c, pp, params + pp->offset + k0, NULL, NULL, grads + at, t, lr, gscale, clip};
    if (c->opt == RT_OPT_ADAMW) {
        j.m1 = state + at;
        j.m2 = state + stride + at;
    } else if (c->momentum > 0) {
        j.m1 = state + at;
    }
    rt_pool_run(pool, k1 - k0, 8192, opt_slice, &j);
}

void rt_optim_step(rt_pool *pool, const rt_train_config *c, const rt_model *m, float *params,
                   const float *grads, float *state, int64_t t, double lr, float gscale, int clip)
{
    rt_optim_step_range(pool, c, m, 0, m->trainable_floats, params, grads, state, t, lr, gscale, clip);
}

