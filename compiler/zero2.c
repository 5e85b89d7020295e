/* zero2.c: zero2's gradient memory at its worst, from the program (trainc plan --ranks).
 *
 * Under zero2 a rank keeps its shard of the gradient region; the rest is backed with
 * memory only while the backward pass writes it and its bucket is being reduced:
 * 4 KB pages on a CPU (runtime/zero.c), chunks of the driver's allocation granularity
 * on a GPU (runtime/device_cuda.c), each backed from the parameter's rt_grad_begin
 * (where the CPU first touches it) and given back once the reduction of its bucket has
 * passed, the host waiting for the oldest when more than 2 are outstanding. This replays
 * the backward pass's hooks through the same rules (ddp.c's buckets: sent from the top of
 * the region down, once everything above a point is final and at least bucket_floats
 * wait) and counts the units backed at once, in the worst case: no reduction passes
 * before the host must wait for it (a faster one only gives memory back sooner). Both
 * runtimes follow these rules; tests/fake_ddp.sh checks the GPU's peak against it.
 * The region is the trained parameters' [0, trainable_floats): train.freeze's, laid
 * out after them, have no gradient. */
#include <stdlib.h>
#include "ir.h"
#include "../runtime/rt_dist.h"   /* rt_dist_shard: the shards the runtime cuts */

#define INFLIGHT 2   /* zero.c's ZERO2_INFLIGHT, device_cuda.c's GR_INFLIGHT */

typedef struct {
    const Graph *g;
    int64_t unit;                /* bytes a page or chunk */
    int n, keep_lo, keep_hi;     /* units; the shard's, backed for good */
    char *backed;
    int now, peak;
    int released;                /* units from here up (but the shard's) are given back */
    int64_t out[INFLIGHT + 1];   /* outstanding reductions: their buckets' first floats */
    int n_out;
    /* ddp.c's bucket state */
    char *ready;
    int next;
    int64_t bucket_end, bucket_floats;
} Sim;

static int unit_of(const Sim *s, int64_t floats, int up)
{
    int64_t b = floats * 4;
    return (int)(up ? (b + s->unit - 1) / s->unit : b / s->unit);
}

static void give_back_from(Sim *s, int64_t a)
{
    int c0 = unit_of(s, a, 1);
    for (int c = c0; c < s->released; c++)
        if (s->backed[c] && !(c >= s->keep_lo && c < s->keep_hi)) {
            s->backed[c] = 0;
            s->now--;
        }
    if (c0 < s->released)
        s->released = c0;
}

static void send(Sim *s, int64_t lo)
{
    if (s->bucket_end <= lo)
        return;
    s->bucket_end = lo;
    s->out[s->n_out++] = lo;
    while (s->n_out > INFLIGHT) {   /* the host waits for the oldest */
        give_back_from(s, s->out[0]);
        for (int k = 1; k < s->n_out; k++)
            s->out[k - 1] = s->out[k];
        s->n_out--;
    }
}

static void ready(Sim *s, int64_t off)
{
    const Graph *g = s->g;
    int k = 0;
    while (k + 1 < g->n_trainable && g->params[k + 1]->offset <= off)
        k++;
    s->ready[k] = 1;
    while (s->next >= 0 && s->ready[s->next])
        s->next--;
    if (s->next + 1 >= g->n_trainable)
        return;
    int64_t start = s->next >= 0 ? g->params[s->next + 1]->offset : 0;
    if (s->bucket_end - start >= s->bucket_floats)
        send(s, start);
}

int64_t zero2_peak_bytes(const Program *p, int64_t bucket_bytes, int rank, int world, int64_t unit)
{
    const Graph *g = p->g;
    int64_t P = g->trainable_floats > 0 ? g->trainable_floats : 1, lo, hi;
    rt_dist_shard(g->trainable_floats, rank, world, &lo, &hi);
    Sim s = {.g = g, .unit = unit};
    s.n = unit_of(&s, P, 1);
    s.keep_lo = unit_of(&s, lo, 0);
    s.keep_hi = hi > lo ? unit_of(&s, hi, 1) : s.keep_lo;
    if (s.keep_hi > s.n)
        s.keep_hi = s.n;
    s.backed = xcalloc((size_t)s.n, 1);
    for (int c = s.keep_lo; c < s.keep_hi; c++)
        s.backed[c] = 1;
    s.now = s.peak = s.keep_hi - s.keep_lo;
    s.released = s.n;
    s.ready = xcalloc((size_t)g->n_params + 1, 1);
    s.next = g->n_trainable - 1;
    s.bucket_end = g->trainable_floats;
    s.bucket_floats = bucket_bytes / 4 > 0 ? bucket_bytes / 4 : 1;
    for (int i = 0; i < p->n_ins; i++) {   /* (a chunked head's hooks: in the forward) */
        const Instr *in = p->ins[i];
        int64_t off, n;
        if (in->dead)
            continue;
        if (grad_hook(in, CALL_GRAD_BEGIN, &off, &n)) {
            for (int c = unit_of(&s, off, 0); c < unit_of(&s, off + n, 1); c++)
                if (!s.backed[c]) {
                    s.backed[c] = 1;
                    if (++s.now > s.peak)
                        s.peak = s.now;
                }
        } else if (grad_hook(in, CALL_GRAD_READY, &off, &n)) {
            ready(&s, off);
        }
    }
    free(s.backed);
    free(s.ready);
    return (int64_t)s.peak * unit;
}
