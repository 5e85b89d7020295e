/* sampling.c: the next token's draw for --sample, as transformers' sampling computes it
 * in this order: the logits of the ids seen so far penalized (RepetitionPenaltyLogits-
 * Processor: divided by the penalty, multiplied where negative, in float), then divided
 * by the temperature, cut to the top_k largest (TopKLogitsWarper: every id tied with
 * the k-th kept), then to the most likely ids whose probabilities (of what top_k kept)
 * add up to top_p (TopPLogitsWarper: the least likely left out while the mass below
 * them is at most 1 - top_p; the most likely always kept), then to those at least
 * min_p times as likely as the most likely (MinPLogitsWarper), then one draw from what
 * is left. Without the cuts the draw is the plain softmax's, its numbers unchanged. */
#include <math.h>
#include <stdlib.h>
#include "sampling.h"

/* ---- the most likely ids, largest logit first, as many as the cuts ask for --------- */
/* (a binary heap over s->order: the cuts pop the few ids they keep, where sorting a
 * vocabulary of 128256 whole took most of a draw's time: bench/sample_draw.sh) */

/* id a comes before id b: the larger logit, then the smaller id (a total order) */
static int before(const float *l, int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); }

static void sift_down(int32_t *h, int64_t n, int64_t i, const float *l)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && before(l, h[c + 1], h[c]))
            c++;
        if (!before(l, h[c], h[i]))
            return;
        int32_t t = h[i];
        h[i] = h[c], h[c] = t;
        i = c;
    }
}

/* The heap's first id, moved out of it (its n ids less one) to h[n - 1]. */
static int32_t pop(int32_t *h, int64_t *n, const float *l)
{
    int32_t first = h[0];
    h[0] = h[--*n];
    h[*n] = first;
    sift_down(h, *n, 0, l);
    return first;
}

static int top_k_on(const rt_sampler *s) { return s->top_k > 0 && s->top_k < s->V; }

/* top_k and then top_p: the kept ids' weights stay, every other's is zeroed; the kept
 * mass. top_k keeps the k largest logits and every id tied with the k-th; top_p, of
 * what top_k kept (mass m), the ids from the most likely down while the mass before
 * them is below top_p m: those TopPLogitsWarper keeps, whose walk from the least
 * likely up drops an id while the mass up to it is at most (1 - top_p) m. */
static double cut_top(const rt_sampler *s, const float *l, double sum)
{
    int32_t *h = s->order;
    int64_t n = s->V, kept = 0;
    for (int64_t v = 0; v < n; v++)
        h[v] = (int32_t)v;
    for (int64_t i = n / 2 - 1; i >= 0; i--)
        sift_down(h, n, i, l);
    double m = sum;   /* what top_k keeps */
    if (top_k_on(s)) {
        m = 0;
        while (n > 0 && (kept < s->top_k || l[h[0]] == l[h[n]])) {   /* (h[n]: the last popped) */
            m += s->prob[pop(h, &n, l)];
            kept++;
        }
    }
    /* top_p over the kept ids (at h[V - 1] down, the most likely first), or popping
     * more of the heap where top_k kept all */
    double above = 0, mass = 0;
    int64_t j = 0;
    for (;; j++) {
        if (j == kept && (top_k_on(s) || n == 0))
            break;
        int32_t v = j < kept ? h[s->V - 1 - j] : (kept++, pop(h, &n, l));
        if (j > 0 && s->top_p < 1 && !(above < s->top_p * m))
            break;
        above += s->prob[v];
        mass += s->prob[v];
        s->prob[v] = -s->prob[v];   /* (marked kept) */
    }
    for (int64_t v = 0; v < s->V; v++)
        s->prob[v] = s->prob[v] < 0 ? -s->prob[v] : 0;
    return mass;
}

/* The logits with the repetition penalty on the ids seen, in s->adjusted (float, as
 * transformers computes them); logits itself without a penalty. */
static const float *penalized(const rt_sampler *s, const float *logits)
{
    if (s->penalty == 1.0 || !s->seen)
        return logits;
    float p = (float)s->penalty;
    for (int64_t v = 0; v < s->V; v++) {
        float z = logits[v];
        s->adjusted[v] = !s->seen[v] ? z : z < 0 ? z * p : z / p;
    }
    return s->adjusted;
}

/* min_p: the weights below min_p times the largest zeroed; the kept mass. */
static double cut_min_p(const rt_sampler *s, double sum)
{
    if (!(s->min_p > 0))
        return sum;
    double mx = 0;
    for (int64_t v = 0; v < s->V; v++)
        mx = fmax(mx, s->prob[v]);
    for (int64_t v = 0; v < s->V; v++)
        if (s->prob[v] < s->min_p * mx) {
            sum -= s->prob[v];
            s->prob[v] = 0;
        }
    return sum;
}

double rt_sample_weights(const rt_sampler *s, const float *logits, int64_t *top)
{
    double mx = -INFINITY, sum = 0;
    logits = penalized(s, logits);
    *top = 0;
    for (int64_t v = 0; v < s->V; v++) {
        mx = fmax(mx, (double)logits[v] / s->temperature);
        if (logits[v] > logits[*top])
            *top = v;   /* the argmax (T > 0), for when logit / T overflows */
    }
    if (isinf(mx))   /* a temperature so small that logit / T overflows: greedy */
        return 0;
    for (int64_t v = 0; v < s->V; v++)
        sum += s->prob[v] = exp((double)logits[v] / s->temperature - mx);
    if (top_k_on(s) || s->top_p < 1)
        sum = cut_top(s, logits, sum);
    return cut_min_p(s, sum);
}

int64_t rt_sample_draw(const rt_sampler *s, const float *logits, rt_rng *rng)
{
    int64_t top;
    double sum = rt_sample_weights(s, logits, &top);
    double u = rt_rng_uniform(rng) * sum, acc = 0;   /* (drawn in either case) */
    if (sum == 0)
        return top;
    int64_t last = top;
    for (int64_t v = 0; v < s->V; v++) {
        if (s->prob[v] == 0)
            continue;
        acc += s->prob[v];
        last = v;
        if (u < acc)
            return v;
    }
    return last;   /* (u within rounding of the sum) */
}
