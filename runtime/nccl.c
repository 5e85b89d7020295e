#define _GNU_SOURCE
/* nccl.c: data parallelism across GPUs, NCCL carrying the gradients.
 *
 * MPI launches the ranks and bootstraps NCCL: rank 0's ncclUniqueId goes to every
 * rank with MPI_Bcast, then each rank joins the communicator with its GPU (the local
 * rank's, device_cuda.c). During backward, ddp.c cuts the same buckets as on the CPU;
 * on a GPU a finished bucket is summed by ncclAllReduce on the communication stream,
 * which first waits (an event) for the compute stream to have written it, so the
 * reduction overlaps the rest of backward. At the end of backward the compute stream
 * waits for the communication stream. The loss gradient is already divided by the
 * number of ranks, so the sum is the mean, as on the CPU.
 *
 * A rank that dies leaves the others inside a collective, which on a GPU never ends:
 * the host would wait for its stream forever. So with NCCL the host never blocks on the
 * compute stream: it polls it (device_cuda.c's stream wait), and between polls
 * rt_nccl_watch asks NCCL for the communicator's asynchronous error (a peer's
 * connection lost) and compares the wait with TRAINC_DIST_TIMEOUT. Either ends the
 * job with exit 2 and a message, after ncclCommAbort has cancelled this rank's
 * outstanding collectives (NCCL's advice for a communicator that cannot recover).
 *
 * Loaded with dlopen (libnccl.so.2, dl.c) for the reasons nvrtc.c gives. */
#include <nccl.h>
#include <string.h>
#include "rt_cuda.h"
#include "rt_dist.h"

#define NCCL_FNS(X)                                                                            \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclAllReduce)                  \
    X(ncclCommAbort) X(ncclCommDestroy) X(ncclGetErrorString) X(ncclCommGetAsyncError)      \
    X(ncclReduce) X(ncclBroadcast) X(ncclGroupStart) X(ncclGroupEnd)
#define DECLARE(fn) static __typeof__(fn) *p_##fn;
NCCL_FNS(DECLARE)

static int loaded;             /* 1 loaded, -1 failed */
static char load_why[512];
static ncclComm_t comm;

int rt_nccl_load(char *why, size_t n)
{
    if (!loaded) {
        static const char *const names[] = {"libnccl.so.2", NULL};
        static const char *const syms[] = {NCCL_FNS(RT_DL_NAME)};
        void **const fns[] = {NCCL_FNS(RT_DL_SLOT)};
        loaded = rt_dl_load("NCCL", names, syms, fns, (int)(sizeof fns / sizeof *fns), load_why,
                            sizeof load_why) == 0 ? 1 : -1;
    }
    if (loaded < 0 && why)
        snprintf(why, n, "%s", load_why);
    return loaded > 0 ? 0 : -1;
}

int rt_nccl_version(void)
{
    int v = 0;
    if (rt_nccl_load(NULL, 0) != 0 || p_ncclGetVersion(&v) != ncclSuccess)
        return -1;
    return v;
}

static void nccl_check(ncclResult_t r, const char *what)
{
    if (r != ncclSuccess && r != ncclInProgress)
        rt_fail("NCCL: %s failed: %s (rank %d of %d); if a rank died, the others stop too", what,
                p_ncclGetErrorString(r), rt_dist_rank(), rt_dist_world());
}
#define NC(call) nccl_check((call), #call)

void rt_nccl_open(rt_exec *e)
{
    char why[512];
    if (rt_nccl_load(why, sizeof why) != 0)
        rt_fail("several ranks on GPUs need NCCL: %s\n  hint: install NCCL (libnccl2), or ship "
                "the trainer with trainc build --bundle", why);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rt_dist_rank() == 0)
        NC(p_ncclGetUniqueId(&id));
    rt_broadcast(&id, (int64_t)sizeof id, 0);
    NC(p_ncclCommInitRank(&comm, rt_dist_world(), id, rt_dist_rank()));
    rt_cu_watch_comm(e);
}

/* Sum `n` floats at device address `p` over the ranks, in place, after what the
 * compute stream has queued so far; asynchronous. */
void rt_nccl_allreduce(rt_exec *e, float *p, int64_t n)
{
    rt_cu_fork_comm(e);
    NC(p_ncclAllReduce(p, p, (size_t)n, ncclFloat32, ncclSum, comm,
                       (cudaStream_t)rt_cu_comm_stream(e)));
}

void rt_nccl_allreduce_f64(rt_exec *e, double *p, int64_t n)
{
    rt_cu_fork_comm(e);   /* (on the communication stream: after the buckets queued there) */
    NC(p_ncclAllReduce(p, p, (size_t)n, ncclFloat64, ncclSum, comm,
                       (cudaStream_t)rt_cu_comm_stream(e)));
    rt_nccl_join(e);
}

static void nccl_abort(void)
{
    if (comm)
        p_ncclCommAbort(comm);
    comm = NULL;
}

/* Called while the host polls a stream that has NCCL's work before it, `waited` seconds
 * into the wait: exits 2 when a collective failed or the wait is past the timeout. */
void rt_nccl_watch(double waited)
{
    if (!comm)
        return;
    ncclResult_t async = ncclSuccess, r = p_ncclCommGetAsyncError(comm, &async);
    if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) {
        double limit = rt_dist_timeout();
        if (limit <= 0 || waited < limit)
            return;
        nccl_abort();
        rt_dist_hung("the GPU's wait for its NCCL gradient reduction", waited);
    }
    const char *why = p_ncclGetErrorString(r != ncclSuccess ? r : async);
    nccl_abort();
    fprintf(stderr, "trainc: error: rank %d of %d: NCCL reports a failed collective (%s): "
            "another rank has probably died (see its messages); stopping the job\n",
            rt_dist_rank(), rt_dist_world(), why);
    rt_dist_abort(RT_EXIT_RUNTIME);
}

/* zero1: the sum over ranks of grads[a, b), each rank's shard of it landing on that rank
 * (in place): [a, b) cut at the shard boundaries (counts[r] floats from the start of
 * rank r's shard), one ncclReduce to each owner, grouped. Asynchronous, like
 * rt_nccl_allreduce. NCCL has no reduce-scatter with unequal parts, hence the reduces. */
void rt_nccl_reduce_shards(rt_exec *e, float *grads, int64_t a, int64_t b, const int64_t *counts)
{
    rt_cu_fork_comm(e);
    NC(p_ncclGroupStart());
    int64_t start = 0;
    for (int r = 0; r < rt_dist_world(); r++) {
        int64_t lo = start > a ? start : a, hi = start + counts[r] < b ? start + counts[r] : b;
        if (hi > lo)
            NC(p_ncclReduce(grads + lo, grads + lo, (size_t)(hi - lo), ncclFloat32, ncclSum, r,
                            comm, (cudaStream_t)rt_cu_comm_stream(e)));
        start += counts[r];
    }
    NC(p_ncclGroupEnd());
}

/* zero1, after the update: every rank's shard of the parameters to every rank (one
 * ncclBroadcast from each owner, grouped; an all-gather with unequal parts), after the
 * compute stream's queued work; the compute stream then waits for it. */
void rt_nccl_gather_shards(rt_exec *e, float *params, const int64_t *counts)
{
    rt_cu_fork_comm(e);
    NC(p_ncclGroupStart());
    int64_t start = 0;
    for (int r = 0; r < rt_dist_world(); r++) {
        if (counts[r] > 0)
            NC(p_ncclBroadcast(params + start, params + start, (size_t)counts[r], ncclFloat32, r,
                               comm, (cudaStream_t)rt_cu_comm_stream(e)));
        start += counts[r];
    }
    NC(p_ncclGroupEnd());
    rt_nccl_join(e);
}

/* The compute stream waits for every reduction queued so far. */
void rt_nccl_join(rt_exec *e)
{
    ncclResult_t async = ncclSuccess;
    NC(p_ncclCommGetAsyncError(comm, &async));
    nccl_check(async, "a collective (asynchronous error)");
    rt_cu_join_comm(e);
}

void rt_nccl_close(void)
{
    if (comm)
        p_ncclCommDestroy(comm);
    comm = NULL;
}
