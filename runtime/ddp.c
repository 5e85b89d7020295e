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
 * train.freeze's parameters have gradients nothing reads (the update and the norm skip
 * them), so the sums (DDP's all-reduce, ZeRO's reduce-scatter) leave out each run of
 * consecutive frozen parameters as long as a bucket (distributed.bucket_mb) or longer:
 * a fine-tune's frozen embeddings and blocks cost no communication. A shorter run is
 * summed with its neighbours (cutting a bucket around it would cost more collectives
 * than its bytes save); under zero2 on GPUs such a run, which no backward write has
 * backed with memory, is backed (and zeroed) before its bucket is read. */
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
    int64_t (*skip)[2];        /* the frozen runs left out, [lo, hi) ascending */
    int n_skip;
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

/* The runs of frozen parameters left out of the sums (rt_dist_frozen_runs' rule) */
static void find_frozen_runs(const rt_model *m)
{
    int n = m->n_params;
    int64_t *offset = rt_xmalloc(sizeof *offset * (size_t)(n ? n : 1));
    char *frozen = rt_xmalloc((size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        offset[i] = m->params[i].offset;
        frozen[i] = (char)m->params[i].frozen;
    }
    D.skip = rt_xmalloc(sizeof *D.skip * (size_t)(n ? n : 1));
    D.n_skip = rt_dist_frozen_runs(n, offset, frozen, m->param_floats, D.bucket_floats, D.skip);
    rt_xfree(frozen);
    rt_xfree(offset);
}

void rt_ddp_init(const rt_model *m, float *grads, int64_t bucket_bytes)
{
    D.m = m;
    D.grads = grads;
    D.ready = rt_xmalloc((size_t)(m->n_params ? m->n_params : 1));
    D.bucket_floats = bucket_bytes / 4 > 0 ? bucket_bytes / 4 : 1;
    find_frozen_runs(m);   /* (after bucket_floats) */
}

/* The bytes of gradients a step's sum over ranks carries (the frozen runs left out). */
int64_t rt_ddp_reduced_bytes(void)
{
    if (!D.m)
        return 0;
    int64_t n = D.m->param_floats;
    for (int k = 0; k < D.n_skip; k++)
        n -= D.skip[k][1] - D.skip[k][0];
    return 4 * n;
}

void rt_ddp_begin_range(int sync, int64_t lo, int64_t hi)
{
    D.sync = sync && rt_dist_world() > 1;
    if (!D.sync)
        return;
    for (int i = 0; i < D.m->n_params; i++)   /* a frozen one: no gradient the update reads */
        D.ready[i] = (char)D.m->params[i].frozen;
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
    rt_ddp_begin_range(sync, 0, D.m ? D.m->param_floats : 0);
}

/* The sum over ranks of [lo, hi) started: all-reduced (ddp) or reduced to each shard's
 * owner (zero1, zero2); NCCL's on GPUs, MPI's nonblocking on CPUs */
static void reduce(void *ctx, int64_t lo, int64_t hi)
{
    (void)ctx;
    if (D.gpu && rt_zero_on()) {
        if (D.gpu_zero2)   /* a short frozen run in it has no memory yet */
            rt_cu_grads_begin(D.gpu, lo, hi - lo);
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

/* The bucket [lo, bucket_end) summed but for the frozen runs in it (every rank cuts the
 * same pieces) */
static void send(int64_t lo)
{
    if (D.bucket_end > lo) {
        rt_dist_pieces(lo, D.bucket_end, D.skip, D.n_skip, reduce, NULL);
        D.bucket_end = lo;
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
