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

/* The runs of consecutive frozen parameters of a bucket's floats or more (each to the
 * next trained parameter's offset: the padding between them too). */
static void find_frozen_runs(const rt_model *m)
{
    D.skip = rt_xmalloc(sizeof *D.skip * (size_t)(m->n_params ? m->n_params : 1));
    D.n_skip = 0;
    for (int i = 0; i < m->n_params;) {
        int j = i;
        while (j < m->n_params && m->params[j].frozen)
            j++;
        if (j > i) {
            int64_t lo = m->params[i].offset, hi = j < m->n_params ? m->params[j].offset : m->param_floats;
            if (hi - lo >= D.bucket_floats) {
                D.skip[D.n_skip][0] = lo;
                D.skip[D.n_skip++][1] = hi;
            }
        }
        i = j > i ? j : i + 1;
    }
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
static void reduce(int64_t lo, int64_t hi)
{
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

/* The bucket [lo, bucket_end) summed but for the frozen runs in it, from its end down
 * (every rank cuts the same pieces) */
static void send(int64_t lo)
{
    int64_t hi = D.bucket_end;
    for (int k = D.n_skip - 1; k >= 0 && hi > lo; k--) {
        if (D.skip[k][0] >= hi || D.skip[k][1] <= lo)
            continue;
        if (D.skip[k][1] < hi)
            reduce(D.skip[k][1], hi);
        hi = D.skip[k][0] > lo ? D.skip[k][0] : lo;
    }
    if (hi > lo)
        reduce(lo, hi);
    if (D.bucket_end > lo)
        D.bucket_end = lo;
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
