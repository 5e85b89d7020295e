/* sampling.c: the next token's draw for --sample, as transformers' sampling computes it
 * in this order: the logits of the ids seen so far penalized (RepetitionPenaltyLogits-
 * Processor: divided by the penalty, multiplied where negative, in float), then divided
 * by the temperature, cut to the top_k largest
 * (TopKLogitsWarper: every id tied with the k-th kept), then to the most likely ids
 * whose probabilities (of what top_k kept) add up to top_p (TopPLogitsWarper: the
 * least likely left out while the mass below them is at most 1 - top_p; the most
 * likely always kept), then to those at least min_p times as likely as the most likely
 * (MinPLogitsWarper), then one draw from what is left. Without top_k and top_p the
 * draw is the plain softmax's, its numbers unchanged. */
#include <math.h>
#include <stdlib.h>
#include "sampling.h"

static const float *sort_logits;   /* (qsort's comparator has no context argument) */

/* larger logit first, then the smaller id: a total order, so the sort is determined */
static int by_logit(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = sort_logits[i], y = sort_logits[j];
    if (x != y)
        return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

/* s->order: the ids by logit, largest first. */
static void sort_ids(const rt_sampler *s, const float *logits)
{
    for (int64_t v = 0; v < s->V; v++)
        s->order[v] = (int32_t)v;
    sort_logits = logits;
    qsort(s->order, (size_t)s->V, sizeof *s->order, by_logit);
}

/* top_k: the weights of ids below the k-th largest logit zeroed; the kept mass. */
static double cut_top_k(const rt_sampler *s, const float *logits, double sum)
{
    if (s->top_k <= 0 || s->top_k >= s->V)
        return sum;
    float kth = logits[s->order[s->top_k - 1]];
    for (int64_t i = s->top_k; i < s->V; i++) {
        int32_t v = s->order[i];
        if (logits[v] < kth) {
            sum -= s->prob[v];
            s->prob[v] = 0;
        }
    }
    return sum;
}

/* top_p: from the least likely up, ids zeroed while the normalized mass up to and
 * including them is at most 1 - top_p; the most likely id stays. The kept mass. */
static double cut_top_p(const rt_sampler *s, double sum)
{
    if (!(s->top_p < 1))
        return sum;
    double below = 0, kept = sum;
    for (int64_t i = s->V - 1; i > 0; i--) {
        int32_t v = s->order[i];
        below += s->prob[v] / sum;
        if (below > 1 - s->top_p)
            break;
        kept -= s->prob[v];
        s->prob[v] = 0;
    }
    return kept;
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
    if ((s->top_k > 0 && s->top_k < s->V) || s->top_p < 1) {
        sort_ids(s, logits);
        sum = cut_top_k(s, logits, sum);
        sum = cut_top_p(s, sum);
    }
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
