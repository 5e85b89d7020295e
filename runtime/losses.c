/* losses.c: the CPU's losses (cross entropy with its gradient over the logits, label
 * smoothing and ignore_index; MSE; DPO over pairs), each a fixed split into blocks. See kernels.c for
 * the determinism every kernel keeps. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

typedef struct ce_ctx ce_ctx;
/* One row's loss from its logits z (and its gradient into g when g is not NULL; g may
 * be z); *hit: whether its first argmax is the target tg (in range). */
typedef double (*ce_row_fn)(const ce_ctx *c, const float *z, float *g, int32_t tg, int *hit);

struct ce_ctx {
    const float *logits;       /* [rows, C] */
    const int32_t *target;     /* [rows] */
    float *dlogits;            /* [rows, C] or NULL */
    double *part;              /* [nblk, 2]: loss sum, correct count */
    int64_t rows, C, rb;
    float gs;
    _Atomic int64_t bad;       /* first row with a target out of range, or rows */
    int64_t ld;                /* rows of logits and dlogits this far apart */
    float ls;                  /* label smoothing (ce_ls_row only) */
    ce_row_fn row;
    int ign;                   /* 1: rows whose target is `ignore` add nothing */
    int32_t ignore;
};

/* the plain cross entropy of one row (dlogits may be the logits themselves, written
 * over: no restrict, and z[target] is read before anything is written) */
static double ce_row(const ce_ctx *c, const float *z, float *g, int32_t tg, int *hit)
{
    int64_t C = c->C;
    float zt = z[tg];
    /* max and first argmax (a NaN counts as the maximum, as in torch.argmax) */
    float m = z[0];
    int64_t am = 0;
    for (int64_t j = 1; j < C; j++)
        if (z[j] > m || (isnan(z[j]) && !isnan(m))) {
            m = z[j];
            am = j;
        }
    /* exp(z - max) in float (kept in dlogits when wanted), summed in double */
    v4f mv = splat4(m);
    d4 sv = {{0, 0}, {0, 0}};
    for (int64_t j = 0; j < C; j += 4) {
        v4f zv;
        if (j + 4 <= C) {
            zv = ld4(z + j);
        } else {   /* the tail, padded with -inf, whose exp is 0 */
            zv = splat4(-INFINITY);
            memcpy(&zv, z + j, (size_t)(C - j) * sizeof(float));
        }
        v4f ev = exp4(zv - mv);
        sv = add4d(sv, cvt4(ev));
        if (!g)
            continue;
        if (j + 4 <= C)
            st4(g + j, ev);
        else
            memcpy(g + j, &ev, (size_t)(C - j) * sizeof(float));
    }
    double se = hsum4d(sv);
    if (g) {
        float inv = (float)(1.0 / se), et = g[tg];
        v4f sc = splat4(inv) * splat4(c->gs);
        int64_t j = 0;
        for (; j + 4 <= C; j += 4)
            st4(g + j, ld4(g + j) * sc);
        for (; j < C; j++)
            g[j] = g[j] * (inv * c->gs);
        g[tg] = (et * inv - 1.0f) * c->gs;
        /* the padding of a padded vocabulary: 0, which the head's backward GEMMs
         * read (lower.c's padded_rows) */
        for (j = C; j < c->ld; j++)
            g[j] = 0.0f;
    }
    *hit = am == tg;
    return (double)m + log(se) - (double)zt;
}

/* Label-smoothed cross entropy, as F.cross_entropy(label_smoothing=ls): the target
 * distribution is (1 - ls) onehot + ls / C, so with lse = max + log(sum exp(z - max))
 *   loss  = lse - (1 - ls) z[target] - (ls / C) sum_j z_j
 *   dz_j  = (softmax_j - ls / C - (1 - ls) [j == target]) * grad_scale.
 * A row of its own, plain loops (ls > 0 only: ls = 0 takes ce_row, whose bits stay
 * those of every earlier run); the sums in double, in the row's order. */
/* one row: its loss, whether its first argmax is the target; dlogits may be z */
static double ce_ls_row(const ce_ctx *c, const float *z, float *g, int32_t tg, int *hit)
{
    int64_t C = c->C;
    float zt = z[tg], m = z[0];
    int64_t am = 0;
    double sz = 0.0;
    for (int64_t j = 0; j < C; j++) {
        if (j > 0 && (z[j] > m || (isnan(z[j]) && !isnan(m)))) {
            m = z[j];
            am = j;
        }
        sz += (double)z[j];
    }
    double se = 0.0;
    for (int64_t j = 0; j < C; j++) {
        float ev = rt_expf(z[j] - m);
        se += (double)ev;
        if (g)
            g[j] = ev;
    }
    if (g) {
        float inv = (float)(1.0 / se), u = c->ls / (float)C, gs = c->gs;
        for (int64_t j = 0; j < C; j++)
            g[j] = (g[j] * inv - u - (j == tg ? 1.0f - c->ls : 0.0f)) * gs;
        for (int64_t j = C; j < c->ld; j++)
            g[j] = 0.0f;
    }
    *hit = am == tg;
    return (double)m + log(se) - (1.0 - (double)c->ls) * (double)zt -
           (double)c->ls / (double)C * sz;
}

/* Blocks [lo, hi) of c->rb rows: each row's loss by c->row, summed in double into
 * c->part with the rows counted; a target out of range is not computed but kept in
 * c->bad (the first); an ignored one adds nothing, its gradient row 0. */
static void ce_task(void *ctx, int64_t lo, int64_t hi)
{
    ce_ctx *c = ctx;
    for (int64_t t = lo; t < hi; t++) {
        double loss = 0.0, correct = 0.0, counted = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++) {
            int32_t tg = c->target[r];
            if (c->ign && tg == c->ignore) {
                if (c->dlogits)
                    memset(c->dlogits + r * c->ld, 0, (size_t)c->ld * sizeof(float));
                continue;
            }
            counted++;
            if (tg < 0 || tg >= c->C) {
                int64_t old = atomic_load(&c->bad);
                while (r < old && !atomic_compare_exchange_weak(&c->bad, &old, r))
                    ;
                continue;
            }
            int hit;
            loss += c->row(c, c->logits + r * c->ld, c->dlogits ? c->dlogits + r * c->ld : NULL,
                           tg, &hit);
            correct += hit;
        }
        c->part[3 * t] = loss;
        c->part[3 * t + 1] = correct;
        c->part[3 * t + 2] = counted;
    }
}

/* The targets of target[0, rows) not ignored (e->ce_ignore). */
static int64_t ce_valid(const rt_exec *e, const int32_t *target, int64_t rows)
{
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        n += target[r] != e->ce_ignore;
    return n;
}

/* The gradient scale of a loss call under ignore_index: grad_scale * rows / valid, the
 * call's mean over its targets not ignored (or over those rt_ce_count counted ahead
 * for a chunked head's calls); 0 where none is. */
static float ce_ignore_scale(const rt_exec *e, const int32_t *target, int64_t rows)
{
    int64_t n = e->ce_rows, valid = e->ce_valid;
    if (n <= 0) {
        n = rows;
        valid = ce_valid(e, target, rows);
    }
    return valid ? (float)((double)e->grad_scale * (double)n / (double)valid) : 0.0f;
}

void rt_ce_count(rt_exec *e, const int32_t *target, int64_t rows)
{
    if (!e->ce_has_ignore)
        return;
    if (e->dev) { /* on a GPU: the count and the scale on the device (cuda_ops.c) */
        RT_GPU(e)->ce_count(e, target, rows);
    } else
        e->ce_valid = ce_valid(e, target, rows);
    e->ce_rows = rows;
}

void rt_ce_done(rt_exec *e)
{
    e->ce_rows = 0;
    e->ce_valid = 0;
}

/* Both losses' CPU driver: blocks of about 4K logits, fixed by C, so the loss sum does
 * not depend on the thread count; the block sums added in order into e (the terms:
 * the rows counted, all but the ignored ones). */
static void ce_run(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                   int64_t rows, int64_t C, int64_t ld, float ls, ce_row_fn row)
{
    if (rows <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    float gs = e->ce_has_ignore ? ce_ignore_scale(e, target, rows) : e->grad_scale;
    e->loss_rows = e->ce_rows > 0 ? e->ce_rows : rows;
    ce_ctx c = {logits, target, dlogits, NULL, rows, C, ceil_div(4096, C > 0 ? C : 1),
                gs, rows, ld, ls, row, e->ce_has_ignore, e->ce_ignore};
    int64_t nblk = ceil_div(rows, c.rb);
    c.part = rt_pool_scratch(p, (size_t)(3 * nblk));
    rt_pool_run(p, nblk, rt_grain_for(c.rb * C * 4), ce_task, &c);
    int64_t bad = atomic_load(&c.bad);
    if (bad < rows)
        rt_fail("label %d out of range [0, %lld)", (int)target[bad], (long long)C);
    double loss = 0.0, correct = 0.0, counted = 0.0;
    for (int64_t t = 0; t < nblk; t++) {
        loss += c.part[3 * t];
        correct += c.part[3 * t + 1];
        counted += c.part[3 * t + 2];
    }
    e->loss_sum += loss;
    e->correct += (int64_t)correct;
    e->terms += (int64_t)counted;
}

void rt_cross_entropy(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                      int64_t rows, int64_t C, int64_t ld)
{
    if (ld < C)
        rt_die("rt_cross_entropy: rows %lld apart hold %lld logits", (long long)ld, (long long)C);
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->cross_entropy(e, logits, target, dlogits, rows, C, ld);
        return;
    }
    ce_run(e, logits, target, dlogits, rows, C, ld, 0.0f, ce_row);
}

void rt_cross_entropy_ls(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                         int64_t rows, int64_t C, int64_t ld, float ls)
{
    if (ld < C)
        rt_die("rt_cross_entropy_ls: rows %lld apart hold %lld logits", (long long)ld,
               (long long)C);
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->cross_entropy_ls(e, logits, target, dlogits, rows, C, ld, ls);
        return;
    }
    ce_run(e, logits, target, dlogits, rows, C, ld, ls, ce_ls_row);
}

#define MSE_BLOCK 4096

typedef struct {
    const float *y, *t;        /* [n] */
    float *dy;                 /* [n] or NULL */
    double *part;              /* [nblk] */
    int64_t n;
    float gs;
} mse_ctx;

static void mse_task(void *ctx, int64_t lo, int64_t hi)
{
    const mse_ctx *c = ctx;
    for (int64_t b = lo; b < hi; b++) {
        int64_t i0 = b * MSE_BLOCK, i1 = i0 + MSE_BLOCK < c->n ? i0 + MSE_BLOCK : c->n;
        const float *restrict y = c->y, *restrict t = c->t;
        double s0 = 0.0, s1 = 0.0;
        int64_t i = i0;
        for (; i + 2 <= i1; i += 2) {
            double d0 = (double)(y[i] - t[i]), d1 = (double)(y[i + 1] - t[i + 1]);
            s0 += d0 * d0;
            s1 += d1 * d1;
        }
        for (; i < i1; i++) {
            double d0 = (double)(y[i] - t[i]);
            s0 += d0 * d0;
        }
        c->part[b] = s0 + s1;
        if (c->dy) {
            float *restrict dy = c->dy;
            float gs = c->gs;
            for (i = i0; i < i1; i++)
                dy[i] = 2.0f * (y[i] - t[i]) * gs;
        }
    }
}

void rt_mse(rt_exec *e, const float *y, const float *t, float *dy, int64_t n)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->mse(e, y, t, dy, n);
        return;
    }
    if (n <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    int64_t nblk = ceil_div(n, MSE_BLOCK);
    mse_ctx c = {y, t, dy, rt_pool_scratch(p, (size_t)nblk), n, e->grad_scale};
    rt_pool_run(p, nblk, rt_grain_for(MSE_BLOCK * 2), mse_task, &c);
    double s = 0.0;
    for (int64_t b = 0; b < nblk; b++)
        s += c.part[b];
    e->loss_sum += s;
    e->terms += n;
}

/* Direct preference optimization (Rafailov et al. 2023, as TRL's DPOTrainer computes its
 * sigmoid loss). A sample is a pair: rows [0, T) the chosen text's logits, [T, 2T) the
 * rejected one's. Each answer's log-probability is the sum of log softmax(z)[target] over
 * its rows whose target is not ignored (e->ce_ignore: the prompt's and the padding's);
 * with the reference model's (ref [2] a sample), u = beta ((lc - rc) - (lr - rr)), the
 * sample's loss is -log sigmoid(u) = softplus(-u), a pair ranked right when u > 0, and
 * d(loss)/d(z) of a chosen row is beta sigmoid(-u) (softmax - onehot), of a rejected one
 * the negative. Three passes: each row's cross entropy (its softmax - onehot kept in
 * dlogits times beta grad_scale, the factor's bound: 16-bit gradients keep the small
 * probabilities cross entropy's keep), then each sample's sums in row order (double),
 * then each row's gradient times its answer's factor. The other kinds (pair_step) differ
 * in the second pass alone. */
typedef struct {
    ce_ctx ce;                 /* the rows' cross entropy, grad_scale beta grad_scale, over
                                  the answers' targets (orpo's sft target merged in:
                                  orpo_targets) */
    const int32_t *y;          /* [rows]: the answers' targets, the log-probabilities' rows */
    double *nll;               /* [rows]: each row's -log p(target), 0 where ignored */
    const double *factor;      /* [rows / T]: each answer's gradient factor (pair_step) */
    int64_t T;
    double beta, gamma, ls;    /* the loss's constants (rt_dpo) */
    int kind;                  /* RT_PREF_* */
    double sft_weight;         /* orpo's supervised term's weight (1), dpo's rpo_alpha */
    double sft, sft_factor;    /* orpo, rpo: the chosen answers' mean -log p over the call
                                  times sft_weight, and its factor per row (sft_term) */
    const int32_t *label;      /* kto: [samples] 1 where the completion is desirable */
    double weight[2];          /* kto: the desirable and undesirable weights */
    double kl;                 /* kto: the call's KL estimate (kto_kl) */
} dpo_ctx;

static void dpo_rows(void *ctx, int64_t lo, int64_t hi)
{
    dpo_ctx *d = ctx;
    ce_ctx *c = &d->ce;
    for (int64_t r = lo; r < hi; r++) {
        int32_t tg = c->target[r];
        float *g = c->dlogits ? c->dlogits + r * c->ld : NULL;
        d->nll[r] = 0.0;
        if (tg == c->ignore) {
            if (g)
                memset(g, 0, (size_t)c->ld * sizeof(float));
            continue;
        }
        if (tg < 0 || tg >= c->C) {
            int64_t old = atomic_load(&c->bad);
            while (r < old && !atomic_compare_exchange_weak(&c->bad, &old, r))
                ;
            continue;
        }
        int hit;
        d->nll[r] = ce_row(c, c->logits + r * c->ld, g, tg, &hit);
    }
}

/* each row's gradient times its answer's factor (a row of orpo's sft target alone: the
 * supervised term's) */
static void dpo_scale(void *ctx, int64_t lo, int64_t hi)
{
    const dpo_ctx *d = ctx;
    for (int64_t r = lo; r < hi; r++) {
        float f = (float)(d->y[r] != d->ce.ignore ? d->factor[r / d->T] : d->sft_factor);
        float *g = d->ce.dlogits + r * d->ce.ld;
        for (int64_t j = 0; j < d->ce.C; j++)
            g[j] *= f;
    }
}

/* softplus(x) = log(1 + exp(x)), without overflow */
static double softplus(double x)
{
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* Pair s's answers' log-probabilities into lp (the sums, or with `mean` the means over
 * each answer's counted rows, the reference's sums taken over the same counts), their
 * counted rows into n, the reference's into r (0 without one) */
static void pair_sums(const dpo_ctx *d, const float *ref, int64_t s, int mean, double lp[2],
                      double n[2], double r[2])
{
    int64_t T = d->T;
    for (int h = 0; h < 2; h++) {
        lp[h] = n[h] = 0.0;
        for (int64_t t = 0; t < T; t++) {
            int64_t row = (2 * s + h) * T + t;
            if (d->y[row] != d->ce.ignore) {
                lp[h] -= d->nll[row];
                n[h] += 1.0;
            }
        }
        r[h] = ref ? (double)ref[2 * s + h] : 0.0;
        if (mean) {
            lp[h] = n[h] > 0 ? lp[h] / n[h] : 0.0;
            r[h] = n[h] > 0 ? r[h] / n[h] : 0.0;
        }
    }
}

/* log(1 - e^m) for a mean log-probability m <= 0, and 1 - e^m into *q (at least
 * DBL_MIN: an answer certain to the last bit keeps a finite odds) */
static double log1m_exp(double m, double *q)
{
    *q = fmax(-expm1(m), DBL_MIN);
    return log(*q);
}

/* kto's KL estimate: the mean over the call's samples of each KL text's log-probability
 * less the reference's, at least 0 (TRL's, taken without gradient), into d->kl; in a
 * training pass on several ranks the mean of the ranks' means (e->rank_mean_f64), as TRL
 * gathers it over its processes */
static void kto_kl(dpo_ctx *d, const rt_exec *e, const float *ref, int64_t samples)
{
    double sum = 0.0;
    for (int64_t s = 0; s < samples; s++) {
        double lp[2], n[2], r[2];
        pair_sums(d, ref, s, 0, lp, n, r);
        sum += lp[1] - r[1];
    }
    double kl = sum / (double)samples;
    if (e->train && e->rank_mean_f64)
        e->rank_mean_f64(&kl, 1);
    d->kl = fmax(kl, 0.0);
}

/* orpo's row targets into eff [samples * 2T]: the answers' (y) where they count, else on
 * a chosen row its sft target's (sft [samples, T]), else ignored */
static void orpo_targets(const int32_t *y, const int32_t *sft, int32_t *eff, int64_t samples,
                         int64_t T, int32_t ignore)
{
    for (int64_t r = 0; r < samples * 2 * T; r++) {
        int64_t s = r / (2 * T), t = r % (2 * T);
        eff[r] = y[r] != ignore || t >= T ? y[r] : sft[s * T + t];
    }
}

/* ipo's step from the means lp and the reference's r over the counts n (pair_step) */
static double ipo_step(const dpo_ctx *d, const double lp[2], const double n[2],
                       const double r[2], double f[2], double *loss)
{
    double u = (lp[0] - r[0]) - (lp[1] - r[1]), m = u - 1.0 / (2.0 * d->beta);
    double g = -2.0 * m / d->beta;   /* -d(loss)/du, per unit of beta */
    *loss = m * m;
    f[0] = n[0] > 0 ? g / n[0] : 0.0;
    f[1] = n[1] > 0 ? -g / n[1] : 0.0;
    return u;
}

/* kto's step of sample s from the sums lp and the reference's r (pair_step) */
static double kto_step(const dpo_ctx *d, int64_t s, const double lp[2], const double r[2],
                       double f[2], double *loss)
{
    int good = d->label[s] != 0;
    double lr = lp[0] - r[0], u = good ? d->beta * (lr - d->kl) : d->beta * (d->kl - lr);
    double sg = sigmoid(u), w = d->weight[!good];
    double g = w * sg * (1.0 - sg);   /* -d(loss)/du, per unit of beta: du/dlc = +-beta */
    *loss = w * (1.0 - sg);
    f[0] = good ? g : -g;
    f[1] = 0.0;   /* (the KL text: no gradient) */
    return u;
}

/* orpo's step from the means lp over the counts n (pair_step) */
static double orpo_step(const dpo_ctx *d, const double lp[2], const double n[2], double f[2],
                        double *loss)
{
    double qc, qr, z = (lp[0] - lp[1]) - (log1m_exp(lp[0], &qc) - log1m_exp(lp[1], &qr));
    double g = sigmoid(-z);   /* -d(loss)/dz, per unit of beta */
    *loss = d->beta * softplus(-z) + d->sft;
    f[0] = n[0] > 0 ? g / (qc * n[0]) + d->sft_factor : 0.0;
    f[1] = n[1] > 0 ? -g / (qr * n[1]) : 0.0;
    return z;
}

/* The sigmoid step of dpo (ref given: the sums against the reference's r), simpo (the
 * means lp over the counts n, less gamma) and cpo (SUMS without a reference), with label
 * smoothing and the chosen answers' cross entropy where asked (pair_step) */
static double sigmoid_step(const dpo_ctx *d, const float *ref, int sums, const double lp[2],
                           const double n[2], const double r[2], double f[2], double *loss)
{
    double beta = d->beta, ls = d->ls;
    double u = ref ? beta * ((lp[0] - r[0]) - (lp[1] - r[1])) : beta * (lp[0] - lp[1]) - d->gamma;
    double sp = softplus(-u), sg = sigmoid(-u);   /* (softplus(u) = sp + u) */
    double g = (1.0 - ls) * sg - ls * (1.0 - sg);
    *loss = (1.0 - ls) * sp + ls * (sp + u) + d->sft;   /* (sft: rpo's, cpo's, else 0) */
    f[0] = sums ? g : n[0] > 0 ? g / n[0] : 0.0;
    f[1] = sums ? -g : n[1] > 0 ? -g / n[1] : 0.0;
    f[0] += n[0] > 0 ? d->sft_factor : 0.0;
    return u;
}

/* dpo's other loss types (RT_PREF_ROBUST on, trainc_rt.h) from the sums lp, the
 * reference's r over the counts n: a = lc - rc, b = lr - rr (pair_step) */
static double type_step(const dpo_ctx *d, const double lp[2], const double n[2],
                        const double r[2], double f[2], double *loss)
{
    double beta = d->beta, a = lp[0] - r[0], b = lp[1] - r[1], u = beta * (a - b);
    if (d->kind == RT_PREF_ROBUST) {
        double ls = d->ls, k = 1.0 / (1.0 - 2.0 * ls), sg = sigmoid(-u);
        *loss = k * ((1.0 - ls) * softplus(-u) - ls * softplus(u));
        f[0] = k * ((1.0 - ls) * sg + ls * (1.0 - sg));
        f[1] = -f[0];
    } else if (d->kind == RT_PREF_HINGE) {
        *loss = fmax(1.0 - u, 0.0);
        f[0] = 1.0 - u > 0 ? 1.0 : 0.0;
        f[1] = -f[0];
    } else if (d->kind == RT_PREF_NCA_PAIR) {
        double ca = beta * a, cb = beta * b;
        *loss = softplus(-ca) + 0.5 * softplus(ca) + 0.5 * softplus(cb);
        f[0] = sigmoid(-ca) - 0.5 * sigmoid(ca);
        f[1] = -0.5 * sigmoid(cb);
    } else if (d->kind == RT_PREF_SPPO_HARD) {
        double h = 0.5 / beta, ma = a - h, mb = b + h;
        *loss = ma * ma + mb * mb;
        f[0] = -2.0 * ma / beta;
        f[1] = -2.0 * mb / beta;
    } else if (d->kind == RT_PREF_APO_ZERO) {
        double sa = sigmoid(beta * a), sb = sigmoid(beta * b);
        *loss = 1.0 - sa + sb;
        f[0] = sa * (1.0 - sa);
        f[1] = -sb * (1.0 - sb);
    } else {   /* RT_PREF_APO_DOWN */
        double sa = sigmoid(beta * a), su = sigmoid(u);
        *loss = sa + 1.0 - su;
        f[0] = su * (1.0 - su) - sa * (1.0 - sa);
        f[1] = -su * (1.0 - su);
    }
    *loss += d->sft;   /* (rpo's, else 0) */
    f[0] += n[0] > 0 ? d->sft_factor : 0.0;
    return u;
}

/* Pair s's step, its answers' rows' nll in d->nll: their log-probabilities into lp (the
 * sums; for simpo, ipo and orpo the means over each answer's counted rows), its loss into
 * *loss, each answer's gradient factor per unit of beta grad_scale (the rows' scale) into
 * f; returns the margin (> 0: ranked right).
 *   dpo:   u = beta ((lc - rc) - (lr - rr)), loss (1 - ls) softplus(-u) + ls softplus(u),
 *          -d(loss)/du = (1 - ls) sigmoid(-u) - ls sigmoid(u) (ls: conservative DPO's)
 *   simpo: u = beta (mc - mr) - gamma, loss softplus(-u), the factors over the lengths
 *   cpo:   u = beta (lc - lr) (the sums, no reference), loss softplus(-u)
 *          (dpo, simpo and cpo add sft_weight times the chosen answers' cross entropy:
 *          sft_term)
 *   ipo:   u = (mc - rc / nc) - (mr - rr / nr), loss (u - 1 / (2 beta))^2
 *   orpo:  z = (mc - mr) - (log(1 - e^mc) - log(1 - e^mr)), loss beta softplus(-z) + sft,
 *          dz/dmc = 1 / (1 - e^mc), dz/dmr = -1 / (1 - e^mr); the chosen rows' factor
 *          also carries the cross entropy's (d->sft_factor)
 *   kto:   the sums, u = beta (lc - rc - KL) for a desirable row, beta (KL - (lc - rc))
 *          for another (KL: kto_kl, a constant), loss w (1 - sigmoid(u)), the KL text's
 *          rows no gradient
 *   dpo's other loss types: the sums (type_step; trainc_rt.h has their losses) */
static double pair_step(const dpo_ctx *d, const float *ref, int64_t s, double lp[2],
                        double f[2], double *loss)
{
    double n[2], r[2];
    int sums = ref || d->kind == RT_PREF_CPO;   /* (dpo's, kto's, cpo's; the others' means) */
    pair_sums(d, ref, s, !sums || d->kind == RT_PREF_IPO, lp, n, r);
    switch (d->kind) {
    case RT_PREF_IPO: return ipo_step(d, lp, n, r, f, loss);
    case RT_PREF_KTO: return kto_step(d, s, lp, r, f, loss);
    case RT_PREF_ORPO: return orpo_step(d, lp, n, f, loss);
    case RT_PREF_SIGMOID: case RT_PREF_CPO: return sigmoid_step(d, ref, sums, lp, n, r, f, loss);
    default: return type_step(d, lp, n, r, f, loss);
    }
}

/* orpo's and rpo's supervised term: the chosen texts' cross entropy, the mean of -log p
 * over all their counted rows of the call (the answers', and the sft target's: TRL's
 * ORPO's nll_loss over prompt and answer), times d->sft_weight, into d->sft, and d(it)/d(a
 * counted chosen row's nll) per unit of beta grad_scale (grad_scale counts the call's
 * samples) into d->sft_factor */
static void sft_term(dpo_ctx *d, int64_t samples)
{
    double sum = 0.0, count = 0.0;
    for (int64_t s = 0; s < samples; s++)
        for (int64_t t = 0; t < d->T; t++) {
            int64_t r = 2 * s * d->T + t;
            sum += d->nll[r];
            count += d->ce.target[r] != d->ce.ignore;
        }
    double w = d->sft_weight;
    d->sft = count > 0 ? w * sum / count : 0.0;
    d->sft_factor = count > 0 ? w * (double)samples / (count * d->beta) : 0.0;
}

void rt_dpo(rt_exec *e, const float *logits, const int32_t *target, const float *ref,
            float *dlogits, float *logps, int64_t samples, int64_t rows, int64_t C, int64_t ld,
            float beta, float gamma, float ls, int64_t kind, const int32_t *sft,
            const int32_t *label, float wd, float wu, float sft_weight)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->dpo(e, logits, target, ref, dlogits, logps, samples, rows, C, ld, beta,
                       gamma, ls, kind, sft, label, wd, wu, sft_weight);
        return;
    }
    int64_t n = samples * rows, T = rows / 2;
    if (n <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    double *scratch = rt_pool_scratch(p, (size_t)(n + 2 * samples + (sft ? n / 2 + 1 : 0)));
    const int32_t *rows_target = target;
    if (sft) {
        int32_t *eff = (int32_t *)(scratch + n + 2 * samples);
        orpo_targets(target, sft, eff, samples, T, e->ce_ignore);
        rows_target = eff;
    }
    dpo_ctx d = {{logits, rows_target, dlogits, NULL, n, C, 1, beta * e->grad_scale, n, ld, 0.0f,
                  ce_row, 1, e->ce_ignore},
                 target, scratch, scratch + n, T, beta, gamma, ls, (int)kind, sft_weight, 0.0,
                 0.0, label, {wd, wu}, 0.0};
    rt_pool_run(p, n, rt_grain_for(C * 4), dpo_rows, &d);
    int64_t bad = atomic_load(&d.ce.bad);
    if (bad < n)
        rt_fail("label %d out of range [0, %lld)", (int)rows_target[bad], (long long)C);
    double loss = 0.0, margin = 0.0, *factor = scratch + n;
    int64_t right = 0;
    if (kind == RT_PREF_ORPO || sft_weight > 0)
        sft_term(&d, samples);
    if (kind == RT_PREF_KTO)
        kto_kl(&d, e, ref, samples);
    for (int64_t s = 0; s < samples; s++) {
        double lp[2], l;
        double u = pair_step(&d, ref, s, lp, factor + 2 * s, &l);
        loss += l;
        margin += u;
        right += u > 0;
        logps[2 * s] = (float)lp[0];
        logps[2 * s + 1] = (float)lp[1];
    }
    if (dlogits)
        rt_pool_run(p, n, rt_grain_for(C), dpo_scale, &d);
    e->loss_sum += loss;
    e->correct += right;
    e->margin_sum += margin;
    e->terms += samples;
    e->loss_rows = samples;
}
