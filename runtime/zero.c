/* zero.c: ZeRO-1 and ZeRO-2 (distributed.strategy zero1, zero2) over MPI.
 *
 * The trained parameters' region [0, trainable_floats) (train.freeze's frozen ones lie
 * after it: no gradient, no state, never gathered) is cut into one contiguous shard per
 * rank (rt_dist_shard: near-equal, in rank order; a shard may cut a tensor). Rank r
 * keeps the optimizer state of its shard only, receives its shard of the summed
 * gradients (reduce-scatter), updates its shard, and all-gathers the parameters, so
 * every rank starts the next step with the whole, identical model:
 *
 *   backward ── buckets: reduce-scatter ──> grads[lo, hi), this rank's shard
 *   norm: shard sums of squares, all-reduced      update: [lo, hi) only
 *   all-gather of the parameters
 *
 * The buckets are DDP's (ddp.c decides when one is final); ddp.c hands them here
 * instead of all-reducing them. The loss gradient is already divided by the world
 * size, so the sums are means. With accumulate, only the last micro-batch sends.
 * Each bucket [a, b) is reduce-scattered in place: this rank's part of it (the part
 * inside [lo, hi)) lands at grads + a and is moved to its own place once the bucket
 * is done, so the reduced shard ends at grads[lo, hi) and no second buffer is needed.
 *
 * zero1: the gradient region stays full size and resident.
 *
 * On GPUs the same shards, through NCCL (nccl.c): ddp.c hands each bucket to
 * rt_nccl_reduce_shards (one ncclReduce to each shard's owner, in place, so nothing
 * moves), cuda_ops.c's optimizer updates the shard with the shard's state, and
 * step.c gathers the parameters with rt_nccl_gather_shards. zero2's region there is
 * backed on demand with the driver's virtual memory calls (device_cuda.c, "zero2's
 * gradient region"), not by this file.
 *
 * zero2: the generated backward pass accumulates into the region at fixed offsets,
 * so the region still exists, but only this rank's shard of it is kept: it is a
 * private anonymous mapping, and once a bucket is done, its pages outside the shard
 * go back to the kernel (MADV_DONTNEED: they read as zeros when touched again, which
 * is also the next step's zeroing). What is resident is the shard plus the buckets
 * being computed or still in flight, never a full gradient buffer unless one tensor
 * is most of the model; the shard's bounding pages are kept whole (at most a page
 * more at each end). With accumulate > 1 the earlier micro-batches accumulate into
 * the whole region (nothing is sent before the last), so it is resident in full
 * during such a step, as zero1's is.
 *
 * Off (ddp, or a world of one) every function here does what the unsharded loop
 * does, and the shard is the whole region. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "rt_dist.h"
#include "rt_loop.h"

static struct {
    int on, stage;              /* sharding in force; 1 or 2 */
    int64_t P;                  /* trainable_floats */
    int64_t lo, hi;             /* this rank's shard */
    int64_t *counts;            /* [world]: every rank's shard length */
    int64_t *bcounts;           /* [world]: scratch, one bucket's parts */
    float *grads;               /* the region the backward pass writes */
    /* this backward pass's buckets, in the order sent (top of the region down) */
    int64_t *ba, *bb;           /* [a, b) of the region */
    int *bh;                    /* rt_bucket_* numbers */
    int nb, capb;
    int nmoved;                 /* buckets [0, nmoved) are done and their part moved */
    /* zero2 */
    size_t map_bytes;           /* the region's mapping */
    size_t keep_lo, keep_hi;    /* bytes of the shard's pages, never handed back */
    size_t released;            /* bytes [released, map_bytes) outside the shard are
                                   handed back during this backward pass */
} Z;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

void rt_zero_init(const rt_train_config *c, const rt_model *m)
{
    int world = rt_dist_world();
    Z.P = m->trainable_floats;
    Z.lo = 0;
    Z.hi = Z.P;
    Z.on = c->dist != RT_DIST_DDP && world > 1;
    if (!Z.on)
        return;
    Z.stage = c->dist == RT_DIST_ZERO2 ? 2 : 1;
    Z.counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    Z.bcounts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    rt_dist_shard_counts(Z.P, world, Z.counts);
    rt_dist_shard(Z.P, rt_dist_rank(), world, &Z.lo, &Z.hi);
}

int rt_zero_on(void) { return Z.on; }

rt_state_part rt_zero_part(void) { return (rt_state_part){Z.lo, Z.hi, Z.on}; }
const int64_t *rt_zero_counts(void) { return Z.counts; }

float *rt_zero_alloc_grads(const rt_model *m)
{
    size_t bytes = sizeof(float) * (size_t)(m->trainable_floats ? m->trainable_floats : 1);
    if (!Z.on || Z.stage != 2)
        return Z.grads = rt_xmalloc(bytes);
    size_t page = page_size();
    Z.map_bytes = (bytes + page - 1) / page * page;
    void *p = mmap(NULL, Z.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        rt_fail("out of memory mapping %zu bytes for gradients: %s; lower batch_size", Z.map_bytes,
                strerror(errno));
    Z.keep_lo = sizeof(float) * (size_t)Z.lo / page * page;
    Z.keep_hi = (sizeof(float) * (size_t)Z.hi + page - 1) / page * page;
    if (Z.keep_hi > Z.map_bytes)
        Z.keep_hi = Z.map_bytes;
    Z.released = Z.map_bytes;
    return Z.grads = p;
}

int64_t rt_zero_grad_bytes(void)
{
    return (int64_t)sizeof(float) * (Z.on && Z.stage == 2 ? Z.hi - Z.lo : Z.P);
}

/* zero2: hands back the pages of bytes [at, end) outside the shard's pages. */
static void give_back(size_t at, size_t end)
{
    size_t a[2] = {at, at > Z.keep_hi ? at : Z.keep_hi};
    size_t b[2] = {end < Z.keep_lo ? end : Z.keep_lo, end};
    for (int i = 0; i < 2; i++)
        if (b[i] > a[i] && madvise((char *)Z.grads + a[i], b[i] - a[i], MADV_DONTNEED) != 0)
            rt_fail("madvise of the gradient region: %s", strerror(errno));
}

/* zero2: grads[off, end of region) is no longer needed outside the shard. */
static void release_from(int64_t off)
{
    size_t page = page_size();
    size_t at = (sizeof(float) * (size_t)off + page - 1) / page * page;
    if (at >= Z.released)
        return;
    give_back(at, Z.released);
    Z.released = at;
}

void rt_zero_clear_grads(float *grads)
{
    if (!Z.on || Z.stage != 2) {
        memset(grads, 0, sizeof(float) * (size_t)Z.P);
        return;
    }
    give_back(0, Z.map_bytes);          /* nothing resident there after a step: cheap */
    memset((char *)grads + Z.keep_lo, 0, Z.keep_hi - Z.keep_lo);
    Z.released = Z.map_bytes;
}

/* ---- buckets (called by ddp.c) ------------------------------------------------------ */

/* zero2: reduce-scatters outstanding at once, at most. */
#define ZERO2_INFLIGHT 2

static void move_part(int i);
static void release_from(int64_t off);

void rt_zero_send(float *grads, int64_t a, int64_t b)
{
    int world = rt_dist_world();
    int64_t start = 0;
    for (int r = 0; r < world; r++) {     /* the parts of [a, b) in each rank's shard */
        int64_t lo = start, hi = start + Z.counts[r];
        int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        Z.bcounts[r] = y > x ? y - x : 0;
        start = hi;
    }
    if (Z.nb == Z.capb) {
        Z.capb = Z.capb ? 2 * Z.capb : 64;
        Z.ba = realloc(Z.ba, sizeof *Z.ba * (size_t)Z.capb);
        Z.bb = realloc(Z.bb, sizeof *Z.bb * (size_t)Z.capb);
        Z.bh = realloc(Z.bh, sizeof *Z.bh * (size_t)Z.capb);
        if (!Z.ba || !Z.bb || !Z.bh)
            rt_fail("out of memory for %d gradient buckets", Z.capb);
    }
    Z.ba[Z.nb] = a;
    Z.bb[Z.nb] = b;
    Z.bh[Z.nb++] = rt_bucket_reduce_scatter_start(grads + a, grads + a, Z.bcounts);
    if (Z.stage != 2)
        return;
    /* zero2 bounds the memory in flight, as ZeRO-2's reduce buckets do: the oldest
     * buckets are waited for, so at most ZERO2_INFLIGHT are outstanding (MPI moves
     * them on only inside MPI calls here, so without this they would all finish at
     * the end of the backward pass, with every page still resident). */
    int n0 = Z.nmoved;
    while (Z.nb - Z.nmoved > ZERO2_INFLIGHT) {
        rt_bucket_wait(Z.bh[Z.nmoved]);
        move_part(Z.nmoved++);
    }
    if (Z.nmoved > n0)
        release_from(Z.ba[Z.nmoved - 1]);
}

/* Bucket i is done: its part of the shard, which landed at its start, to its place.
 * Source and destination both lie inside the bucket, so buckets never clobber each
 * other. */
static void move_part(int i)
{
    int64_t a = Z.ba[i], x = a > Z.lo ? a : Z.lo, y = Z.bb[i] < Z.hi ? Z.bb[i] : Z.hi;
    if (y > x && x != a)
        memmove(Z.grads + x, Z.grads + a, sizeof(float) * (size_t)(y - x));
}

void rt_zero_poll(void)
{

    if (Z.stage != 2)
        return;                 /* zero1 moves everything at the end */
    int n0 = Z.nmoved;
    while (Z.nmoved < Z.nb && rt_bucket_done(Z.bh[Z.nmoved]))
        move_part(Z.nmoved++);
    if (Z.nmoved > n0)          /* buckets go from the top down: [ba[nmoved-1], end) is done */
        release_from(Z.ba[Z.nmoved - 1]);
}

void rt_zero_finish(float *grads)
{
    (void)grads;
    while (Z.nmoved < Z.nb)
        move_part(Z.nmoved++);
    if (Z.stage == 2)
        release_from(0);
    Z.nb = 0;
    Z.nmoved = 0;
}

/* ---- the step ------------------------------------------------------------------------ */

double rt_zero_grad_norm(rt_pool *pool, const rt_model *m, const float *grads)
{
    if (!Z.on)
        return rt_grad_norm(pool, m, grads);
    double ss = rt_grad_sumsq(pool, m, Z.lo, Z.hi, grads + Z.lo);
    rt_allreduce_sum_f64(&ss, 1);
    return sqrt(ss);
}

void rt_zero_optim_step(rt_pool *pool, const rt_train_config *c, const rt_model *m, float *params,
                        const float *grads, float *state, int64_t t, double lr, float gscale,
                        int clip)
{
    if (!Z.on) {
        rt_optim_step(pool, c, m, params, grads, state, t, lr, gscale, clip);
        return;
    }
    rt_optim_step_range(pool, c, m, Z.lo, Z.hi, params, grads + Z.lo, state, t, lr, gscale, clip);
    rt_allgather_f32(params + Z.lo, params, Z.counts);
}
