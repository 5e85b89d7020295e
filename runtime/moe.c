/* moe.c: the mixture-of-experts layer's four calls on the CPU (trainc_rt.h; the
 * compiler's side is compiler/ops/moe.c). A token's k copies are grouped by expert over
 * the whole batch, in token order within a group (a counting sort, so the same batch
 * always gives the same rows), and each group goes through its expert's weights as
 * one GEMM (rt_gemm). Integers (experts, rows, group offsets) are stored in floats,
 * exact below 2^24 copies. On a GPU each call hands over to its twin (cuda_moe.c). */
#include <math.h>
#include <string.h>
#include "rt.h"

/* what the four calls share: the routing and the sizes */
typedef struct {
    const float *gate, *idx, *offs;   /* [n, k], [n, 2k] (experts, then rows), [E + 1] */
    int64_t n, d, E, k;               /* tokens, width, experts, copies a token */
} moe_route;

static int64_t expert_of(const moe_route *r, int64_t t, int64_t j) { return (int64_t)r->idx[t * 2 * r->k + j]; }
static int64_t row_of(const moe_route *r, int64_t t, int64_t j) { return (int64_t)r->idx[t * 2 * r->k + r->k + j]; }
static int64_t group_start(const moe_route *r, int64_t e) { return (int64_t)r->offs[e]; }
static int64_t group_rows(const moe_route *r, int64_t e) { return (int64_t)(r->offs[e + 1] - r->offs[e]); }

static void check_size(int64_t n, int64_t k)
{
    if (n * k >= (int64_t)1 << 24)
        rt_die("moe: %lld tokens times top_k %lld is 2^24 copies or more (their rows are "
               "stored in floats); use a smaller batch", (long long)n, (long long)k);
}

/* ---- routing: the router's softmax, each token's top k, the groups ---------------- */

typedef struct {
    float *probs, *gate, *idx;
    int64_t E, k;
    int norm;
} topk_ctx;

/* probs[t] = softmax(logits[t]) in place; gate and experts of the k largest (the lower
 * expert first on a tie), the gate weights over their sum with norm */
static void topk_task(void *ctx, int64_t lo, int64_t hi)
{
    const topk_ctx *c = ctx;
    int64_t E = c->E, k = c->k;
    for (int64_t t = lo; t < hi; t++) {
        float *p = c->probs + t * E, *g = c->gate + t * k, *ix = c->idx + t * 2 * k;
        float mx = p[0];
        for (int64_t i = 1; i < E; i++)
            mx = p[i] > mx ? p[i] : mx;
        double sum = 0;
        for (int64_t i = 0; i < E; i++)
            sum += (p[i] = expf(p[i] - mx));
        for (int64_t i = 0; i < E; i++)
            p[i] = (float)(p[i] / sum);
        double chosen = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t i = 0; i < E; i++) {
                int taken = 0;
                for (int64_t m = 0; m < j && !taken; m++)
                    taken = (int64_t)ix[m] == i;
                if (!taken && (best < 0 || p[i] > p[best]))
                    best = i;
            }
            ix[j] = (float)best;
            g[j] = p[best];
            chosen += p[best];
        }
        for (int64_t j = 0; j < k && c->norm; j++)
            g[j] = (float)(g[j] / chosen);
    }
}

/* offs (the groups' first rows) and each copy's row: a counting sort, in token order */
static void group_copies(float *idx, float *offs, int64_t n, int64_t E, int64_t k)
{
    int64_t *next = rt_xmalloc(((size_t)E + 1) * sizeof *next);
    for (int64_t c = 0; c < n * k; c++)
        next[(int64_t)idx[c / k * 2 * k + c % k] + 1]++;
    for (int64_t e = 0; e < E; e++)
        next[e + 1] += next[e];
    for (int64_t e = 0; e <= E; e++)
        offs[e] = (float)next[e];
    for (int64_t c = 0; c < n * k; c++) {
        int64_t t = c / k, j = c % k;
        idx[t * 2 * k + k + j] = (float)next[(int64_t)idx[t * 2 * k + j]]++;
    }
    rt_xfree(next);
}

/* ---- copies gathered and summed ------------------------------------------------- */

typedef struct {
    const moe_route *r;
    const float *src;
    float *dst;
    int sum;           /* 0: dst[row(t, j)] = src[t]; 1: dst[t] = sum_j w src[row(t, j)] */
    const float *w;    /* sum: the weights ([n, k]), or NULL: 1 */
} copy_ctx;

static void copy_task(void *ctx, int64_t lo, int64_t hi)
{
    const copy_ctx *c = ctx;
    const moe_route *r = c->r;
    int64_t d = r->d;
    for (int64_t t = lo; t < hi; t++) {
        if (!c->sum) {
            for (int64_t j = 0; j < r->k; j++)
                memcpy(c->dst + row_of(r, t, j) * d, c->src + t * d, (size_t)d * sizeof(float));
            continue;
        }
        float *y = c->dst + t * d;
        for (int64_t j = 0; j < r->k; j++) {
            const float *s = c->src + row_of(r, t, j) * d;
            float w = c->w ? c->w[t * r->k + j] : 1.0f;
            for (int64_t i = 0; i < d; i++)
                y[i] = j ? y[i] + w * s[i] : w * s[i];
        }
    }
}

static void gather(rt_exec *e, const moe_route *r, const float *x, float *xg)
{
    copy_ctx c = {.r = r, .src = x, .dst = xg};
    rt_pool_run(e->rt, r->n, rt_grain_for(r->k * r->d), copy_task, &c);
}

static void scatter_sum(rt_exec *e, const moe_route *r, const float *xg, const float *w, float *y)
{
    copy_ctx c = {.r = r, .src = xg, .dst = y, .sum = 1, .w = w};
    rt_pool_run(e->rt, r->n, rt_grain_for(r->k * r->d), copy_task, &c);
}

/* ---- per expert: C_e = op(A_e) op(B_e) (+ C_e), A's rows grouped ------------------- */

/* Each group's GEMM: the group's rows of a (lda wide) times expert e's slab of b (wsz
 * floats each; transposed with tb), into the group's rows of c (ldc wide); or, with
 * wgrad, into expert e's slab of c: c_e [lda, ldb] += a_e^T b_e, b's rows grouped too. */
typedef struct {
    int tb, wgrad;
    int64_t N, K;      /* op(b)'s columns, the inner size */
    int64_t lda, ldb, ldc, wsz;
} group_gemm;

static void per_expert(rt_exec *e, const moe_route *r, const group_gemm *g, const float *a,
                       const float *b, float *c)
{
    for (int64_t x = 0; x < r->E; x++) {
        int64_t rows = group_rows(r, x), at = group_start(r, x);
        if (!rows)
            continue;
        if (g->wgrad)   /* a_e [rows, lda], b_e [rows, ldb] */
            rt_gemm(e, 1, 0, g->lda, g->ldb, rows, 1.0f, a + at * g->lda, g->lda,
                    b + at * g->ldb, g->ldb, 1.0f, c + x * g->wsz, g->ldb);
        else
            rt_gemm(e, 0, g->tb, rows, g->N, g->K, 1.0f, a + at * g->lda, g->lda,
                    b + x * g->wsz, g->ldb, 0.0f, c + at * g->ldc, g->ldc);
    }
}

/* ---- the calls -------------------------------------------------------------------- */

/* The load-balancing loss's statistics of this layer: its experts' counts, then their
 * probabilities summed over the tokens (in token order) */
static void aux_stats(const float *probs, const float *offs, float *row, int64_t n, int64_t E)
{
    for (int64_t x = 0; x < E; x++) {
        double s = 0;
        for (int64_t t = 0; t < n; t++)
            s += probs[t * E + x];
        row[x] = offs[x + 1] - offs[x];
        row[E + x] = (float)s;
    }
}

void rt_moe_dispatch_fwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                         float *probs, float *gate, float *idx, float *offs, float *xg, float *h,
                         float *stats, int64_t n, int64_t d, int64_t E, int64_t k, int64_t h2,
                         int64_t norm, int64_t row)
{
    check_size(n, k);
    if (e->dev) { /* on a GPU: cuda_moe.c */
        RT_GPU(e)->moe_dispatch_fwd(e, x, wr, wup, probs, gate, idx, offs, xg, h, stats, n, d, E,
                                    k, h2, norm, row);
        return;
    }
    rt_gemm(e, 0, 1, n, E, d, 1.0f, x, d, wr, d, 0.0f, probs, E);
    topk_ctx tc = {.probs = probs, .gate = gate, .idx = idx, .E = E, .k = k, .norm = (int)norm};
    rt_pool_run(e->rt, n, rt_grain_for(E * (k + 3)), topk_task, &tc);
    group_copies(idx, offs, n, E, k);
    if (stats)
        aux_stats(probs, offs, stats + row * 2 * E, n, E);
    moe_route r = {.gate = gate, .idx = idx, .offs = offs, .n = n, .d = d, .E = E, .k = k};
    gather(e, &r, x, xg);
    group_gemm up = {.tb = 1, .N = h2, .K = d, .lda = d, .ldb = d, .ldc = h2, .wsz = h2 * d};
    per_expert(e, &r, &up, xg, wup, h);
}

void rt_moe_combine_fwd(rt_exec *e, const float *a, const float *wdown, const float *gate,
                        const float *idx, const float *offs, float *o, float *y, int64_t n,
                        int64_t d, int64_t E, int64_t k, int64_t hid)
{
    if (e->dev) {
        RT_GPU(e)->moe_combine_fwd(e, a, wdown, gate, idx, offs, o, y, n, d, E, k, hid);
        return;
    }
    moe_route r = {.gate = gate, .idx = idx, .offs = offs, .n = n, .d = d, .E = E, .k = k};
    group_gemm down = {.tb = 1, .N = d, .K = hid, .lda = hid, .ldb = hid, .ldc = d,
                       .wsz = d * hid};
    per_expert(e, &r, &down, a, wdown, o);
    scatter_sum(e, &r, o, gate, y);
}

typedef struct {
    const moe_route *r;
    const float *a, *ga;   /* [n k, hid] */
    float *da, *g, *dgate;
    int64_t hid;
} gate_ctx;

/* For copy (t, j) at row p: dgate = <da_p, a_p> while da_p is still G W (no gate
 * weight); then da_p and g_p (the output gradient's copy) times the gate weight */
static void gate_task(void *ctx, int64_t lo, int64_t hi)
{
    const gate_ctx *c = ctx;
    const moe_route *r = c->r;
    for (int64_t t = lo; t < hi; t++)
        for (int64_t j = 0; j < r->k; j++) {
            int64_t p = row_of(r, t, j);
            float w = r->gate[t * r->k + j], *da = c->da + p * c->hid, *g = c->g + p * r->d;
            const float *a = c->a + p * c->hid;
            double dot = 0;
            for (int64_t i = 0; i < c->hid; i++) {
                dot += (double)da[i] * a[i];
                da[i] *= w;
            }
            c->dgate[t * r->k + j] = (float)dot;
            for (int64_t i = 0; i < r->d; i++)
                g[i] *= w;
        }
}

void rt_moe_combine_bwd(rt_exec *e, const float *a, const float *wdown, const float *gate,
                        const float *idx, const float *offs, const float *dy, float *g,
                        float *da, float *dgate, float *dwdown, int64_t n, int64_t d, int64_t E,
                        int64_t k, int64_t hid)
{
    if (e->dev) {
        RT_GPU(e)->moe_combine_bwd(e, a, wdown, gate, idx, offs, dy, g, da, dgate, dwdown, n, d,
                                   E, k, hid);
        return;
    }
    moe_route r = {.gate = gate, .idx = idx, .offs = offs, .n = n, .d = d, .E = E, .k = k};
    gather(e, &r, dy, g);
    group_gemm back = {.N = hid, .K = d, .lda = d, .ldb = hid, .ldc = hid, .wsz = d * hid};
    per_expert(e, &r, &back, g, wdown, da);   /* da = G W_e, before the gate weights */
    gate_ctx gc = {.r = &r, .a = a, .da = da, .g = g, .dgate = dgate, .hid = hid};
    rt_pool_run(e->rt, n, rt_grain_for(k * (hid + d)), gate_task, &gc);
    group_gemm dw = {.wgrad = 1, .lda = d, .ldb = hid, .wsz = d * hid};
    if (dwdown)   /* NULL: a frozen layer's (a GAN's discriminator under G's loss) */
        per_expert(e, &r, &dw, g, a, dwdown);
}

typedef struct {
    const moe_route *r;
    const float *probs, *dgate, *agrad;
    float *dl;
    int norm;
} router_ctx;

/* The router logits' gradient from the gate weights': through the renormalization
 * (norm), then the softmax (the unchosen experts' probabilities have none of their own
 * but the load-balancing loss's, agrad, where there is one) */
static void router_task(void *ctx, int64_t lo, int64_t hi)
{
    const router_ctx *c = ctx;
    const moe_route *r = c->r;
    int64_t E = r->E, k = r->k;
    for (int64_t t = lo; t < hi; t++) {
        const float *p = c->probs + t * E, *g = c->dgate + t * k, *w = r->gate + t * k;
        double chosen = 0, wg = 0, pdp = 0;
        for (int64_t j = 0; j < k; j++) {
            chosen += p[expert_of(r, t, j)];
            wg += (double)w[j] * g[j];
        }
        double dp[RT_MOE_MAX_K];
        for (int64_t j = 0; j < k; j++) {
            dp[j] = c->norm ? (g[j] - wg) / chosen : g[j];
            pdp += p[expert_of(r, t, j)] * dp[j];
        }
        double pa = 0;
        for (int64_t i = 0; c->agrad && i < E; i++)
            pa += (double)p[i] * c->agrad[i];
        float *dl = c->dl + t * E;
        for (int64_t i = 0; i < E; i++)
            dl[i] = (float)(p[i] * ((c->agrad ? c->agrad[i] : 0.0) - pdp - pa));
        for (int64_t j = 0; j < k; j++)
            dl[expert_of(r, t, j)] += (float)(p[expert_of(r, t, j)] * dp[j]);
    }
}

void rt_moe_dispatch_bwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                         const float *probs, const float *gate, const float *idx,
                         const float *offs, const float *dgate, const float *agrad,
                         const float *dh, float *xg, float *dl, float *dx, float *dwr,
                         float *dwup, int64_t n, int64_t d, int64_t E, int64_t k, int64_t h2,
                         int64_t norm)
{
    if (k > RT_MOE_MAX_K)
        rt_die("moe: top_k %lld is more than %d", (long long)k, RT_MOE_MAX_K);
    if (e->dev) {
        RT_GPU(e)->moe_dispatch_bwd(e, x, wr, wup, probs, gate, idx, offs, dgate, agrad, dh, xg,
                                    dl, dx, dwr, dwup, n, d, E, k, h2, norm);
        return;
    }
    moe_route r = {.gate = gate, .idx = idx, .offs = offs, .n = n, .d = d, .E = E, .k = k};
    gather(e, &r, x, xg);
    group_gemm dw = {.wgrad = 1, .lda = h2, .ldb = d, .wsz = h2 * d};
    if (dwup)
        per_expert(e, &r, &dw, dh, xg, dwup);
    group_gemm back = {.N = d, .K = h2, .lda = h2, .ldb = d, .ldc = d, .wsz = h2 * d};
    per_expert(e, &r, &back, dh, wup, xg);   /* the copies' gradient, in xg's place */
    scatter_sum(e, &r, xg, NULL, dx);
    router_ctx rc = {.r = &r, .probs = probs, .dgate = dgate, .agrad = agrad, .dl = dl,
                     .norm = (int)norm};
    rt_pool_run(e->rt, n, rt_grain_for(E + 4 * k), router_task, &rc);
    rt_gemm(e, 0, 0, n, d, E, 1.0f, dl, E, wr, d, 1.0f, dx, d);
    if (dwr)
        rt_gemm(e, 1, 0, E, d, n, 1.0f, dl, E, x, d, 1.0f, dwr, d);
}

void rt_moe_aux(rt_exec *e, const float *stats, float *agrad, int64_t L, int64_t n, int64_t E,
                float coef)
{
    if (e->dev) {
        RT_GPU(e)->moe_aux(e, stats, agrad, L, n, E, coef);
        return;
    }
    /* the term weighs as the loss's mean does: over all its rows (e->terms counts only those
     * not ignored, under ignore_index), and adds coef E aux to that mean */
    double rows = (double)L * (double)n, aux = 0;
    double n_loss = (double)(e->ce_has_ignore ? e->loss_rows : e->terms);
    double scale = (double)coef * (double)E / rows * (double)e->grad_scale * n_loss;
    for (int64_t x = 0; x < E; x++) {
        double f = 0, p = 0;
        for (int64_t l = 0; l < L; l++) {
            f += stats[l * 2 * E + x];
            p += stats[l * 2 * E + E + x];
        }
        aux += f / rows * (p / rows);
        agrad[x] = (float)(scale * (f / rows));
    }
    e->loss_sum += (double)coef * (double)E * aux * (double)e->terms;
}
