/* ddp.c: data parallelism's gradient reduction, overlapped with the backward pass.
 *
 * The generated backward pass calls rt_grad_ready as soon as a parameter's gradient
 * is final. Gradients become final roughly from the last parameter to the first, so
 * the parameter region is cut into buckets from its end: once every parameter from
 * some offset to the end of the current bucket is final and the bucket holds at least
 * `bucket_floats`, its sum over ranks starts (MPI_Iallreduce, rt_bucket_start) while
 * backward goes on; rt_ddp_finish sends the rest and waits. The loss gradient is
 * already divided by the world size (grad_scale), so the sum is the mean. With
 * `accumulate`, only the last micro-batch of a step synchronizes. Under ZeRO
 * (zero.c) the same buckets are reduce-scattered instead of all-reduced; zero2 on GPUs
 * also hears of each parameter's first gradient write (rt_grad_begin), so that
 * device_cuda.c backs the region with memory only where it is being written. A GAN's
 * backward passes each reduce their network's range of the region (rt_ddp_begin_range).
 *
 * train.freeze's parameters have no gradient: the compiler lays them out after the
 * trained ones (rt_model.trainable_floats), and the sums (DDP's all-reduce, ZeRO's
 * reduce-scatter) cover [0, trainable_floats) alone, so a fine-tune's frozen embeddings
 * and blocks cost no communication. */
#include <string.h>
#include "rt_cuda.h"
#include "rt_dist.h"

static struct {
    const rt_model *m;
    float *grads;
    int sync;                  /* this backward pass reduces */
    int next;                  /* highest parameter not yet known final */
    int last;                  /* the range's last parameter */
    int64_t lo;                /* the range's first float: [lo, bucket_end) is left to send */
    char *ready;               /* by parameter */
    int64_t bucket_end;        /* floats [bucket_end, end) are sent */
    int64_t bucket_floats;
    rt_exec *gpu;              /* GPUs: NCCL on the device's communication stream */
    int gpu_zero2;             /* and the gradient region backed on demand (device_cuda.c) */
} D;

void rt_ddp_use_gpu(rt_exec *e, int zero2)
{
    D.gpu = e;
    D.gpu_zero2 = zero2;
}

/* zero2 on GPUs: memory under a gradient before its first write (a no-op elsewhere). */
void rt_grad_begin(rt_exec *e, int64_t off, int64_t n)
{
    if (D.gpu_zero2)
        rt_cu_grads_begin(e, off, n);
}

void rt_ddp_init(const rt_model *m, float *grads, int64_t bucket_bytes)
{
    D.m = m;
    D.grads = grads;
    D.ready = rt_xmalloc((size_t)(m->n_params ? m->n_params : 1));
    D.bucket_floats = bucket_bytes / 4 > 0 ? bucket_bytes / 4 : 1;
}

/* The bytes of gradients a step's sum over ranks carries (the frozen parameters'
 * left out). */
int64_t rt_ddp_reduced_bytes(void) { return D.m ? 4 * D.m->trainable_floats : 0; }

void rt_ddp_begin_range(int sync, int64_t lo, int64_t hi)
{
    D.sync = sync && rt_dist_world() > 1;
    if (!D.sync)
        return;
    memset(D.ready, 0, (size_t)D.m->n_params);
    D.next = D.m->n_params - 1;
    while (D.next >= 0 && D.m->params[D.next].offset >= hi)
        D.next--;
    D.last = D.next;
    D.lo = lo;
    D.bucket_end = hi;
}

void rt_ddp_begin(int sync)
{
    /* (D.m is set only where a run reduces: one GPU never calls rt_ddp_init) */
    rt_ddp_begin_range(sync, 0, D.m ? D.m->trainable_floats : 0);
}

/* The bucket [lo, bucket_end) summed over ranks: all-reduced (ddp) or reduced to each
 * shard's owner (zero1, zero2); NCCL's on GPUs, MPI's nonblocking on CPUs */
static void send(int64_t lo)
{
    if (D.bucket_end <= lo)
        return;
    int64_t hi = D.bucket_end;
    D.bucket_end = lo;
    if (D.gpu && rt_zero_on()) {
        rt_nccl_reduce_shards(D.gpu, D.grads, lo, hi, rt_zero_counts());
        if (D.gpu_zero2)
            rt_cu_grads_sent(D.gpu, lo);
    } else if (rt_zero_on()) {
        rt_zero_send(D.grads, lo, hi);
    } else if (D.gpu) {
        rt_nccl_allreduce(D.gpu, D.grads + lo, hi - lo);
    } else {
        rt_bucket_start(D.grads + lo, hi - lo);
    }
}

void rt_grad_ready(rt_exec *e, int64_t off, int64_t n)
{
    (void)e;
    (void)n;
    if (!D.sync)
        return;
    /* parameters are laid out in order, so the offset finds the index */
    int lo = 0, hi = D.m->n_params - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (D.m->params[mid].offset <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    D.ready[lo] = 1;
    while (D.next >= 0 && D.ready[D.next])
        D.next--;
    if (D.next >= D.last)
        return;                 /* nothing final at the end yet */
    int64_t start = D.next >= 0 && D.m->params[D.next].offset >= D.lo
                        ? D.m->params[D.next + 1].offset : D.lo;
    if (D.bucket_end - start >= D.bucket_floats)
        send(start);
    else if (!D.gpu)
        rt_bucket_poll();       /* nonblocking collectives move only inside MPI calls */
    if (rt_zero_on())
        rt_zero_poll();
}

void rt_ddp_finish(void)
{
    if (!D.sync)
        return;
    send(D.lo);
    if (D.gpu) {
        rt_nccl_join(D.gpu);
        D.sync = 0;
        return;
    }
    rt_bucket_wait_all();
    if (rt_zero_on())
        rt_zero_finish(D.grads);
    D.sync = 0;
}
