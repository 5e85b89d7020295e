#define _GNU_SOURCE
/* fake_nccl.c: libnccl.so.2 for tests/fake_gpu.sh, the collectives of ranks on one
 * machine, each on its own fake GPU (fake_cuda.c): the functions runtime/nccl.c
 * uses (its NCCL_FNS), prototypes from nccl.h.
 *
 *   ncclGetUniqueId     creates a shared-memory segment (shm_open) and puts its name in
 *                       the id, which the ranks share (trainc broadcasts it over MPI)
 *   ncclCommInitRank    maps it and waits for every rank (60 s at most); like NCCL,
 *                       refuses two ranks on one device ("Duplicate GPU detected")
 *   ncclAllReduce, ncclReduce, ncclBroadcast
 *                       fp32 and fp64 sums only (what trainc sends: gradients, and
 *                       SyncBatchNorm's sums; anything else is ncclInvalidArgument),
 *                       device buffers only, queued on the
 *                       stream as an operation the fake driver polls: in rounds of 1 MiB,
 *                       each rank copies its piece into its slot of the segment (for a
 *                       broadcast, the root only), waits for the others to have come
 *                       to the round, and takes the result: the sum in rank order (all
 *                       ranks for an all-reduce, the root for a reduce: so every rank
 *                       gets the same bits) or the root's piece. A stream stops at a
 *                       collective whose peers have not come, as a GPU's does:
 *                       cuStreamSynchronize waits, cuStreamQuery says
 *                       CUDA_ERROR_NOT_READY
 *   ncclGroupStart/End  nothing to do: the collectives run in the order queued, the
 *                       same on every rank
 *   ncclCommGetAsyncError  ncclRemoteError once a peer process has died (what NCCL
 *                       reports when a peer's connection drops), else ncclSuccess
 *   ncclCommAbort       cancels this rank's queued collectives (they complete as no-ops)
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "fake_gpu.h"

#define MAX_RANKS 8
#define PIECE ((size_t)1 << 18)   /* floats a round */

typedef struct {
    atomic_int joined;
    int nranks;
    pid_t pid[MAX_RANKS];
    int dev[MAX_RANKS];
    atomic_uint_fast64_t put[MAX_RANKS];    /* the last round whose piece is in the slot */
    atomic_uint_fast64_t read[MAX_RANKS];   /* the last round this rank has summed */
    float slot[MAX_RANKS][PIECE];
} Shm;

struct ncclComm {
    Shm *shm;
    int rank, nranks;
    uint64_t rounds;           /* rounds claimed by the collectives queued so far */
    int aborted;
};

enum { ALLREDUCE, REDUCE, BROADCAST };

typedef struct {
    struct ncclComm *c;
    int kind, root;
    const unsigned char *send;
    unsigned char *recv;
    size_t es;                 /* bytes a value: 4 (fp32) or 8 (fp64) */
    size_t count;
    uint64_t first;            /* its first round */
    size_t done;               /* pieces summed */
    int have_put;              /* this piece is in our slot */
} Reduce;

static fake_enqueue_poll_fn enqueue_poll;
static fake_is_dev_range_fn is_dev_range;
static fake_device_fn device_of_ctx;

static ncclResult_t refuse(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t refuse(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fake NCCL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return r;
}

static int hooks(void)
{
    if (!enqueue_poll) {
        /* the fake driver is already loaded by the runtime; a real one has no hooks */
        void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (drv) {
            enqueue_poll = (fake_enqueue_poll_fn)dlsym(drv, "trainc_fake_enqueue_poll");
            is_dev_range = (fake_is_dev_range_fn)dlsym(drv, "trainc_fake_is_dev_range");
            device_of_ctx = (fake_device_fn)dlsym(drv, "trainc_fake_device");
        }
    }
    return enqueue_poll && is_dev_range && device_of_ctx;
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id->internal, sizeof id->internal, "/trainc-fake-nccl-%d-%ld", (int)getpid(),
             (long)ts.tv_nsec);
    int fd = shm_open(id->internal, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return refuse(ncclSystemError, "shm_open(%s): %s", id->internal, strerror(errno));
    int ok = ftruncate(fd, sizeof(Shm)) == 0;
    close(fd);
    if (!ok)
        return refuse(ncclSystemError, "ftruncate(%s): %s", id->internal, strerror(errno));
    return ncclSuccess;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return refuse(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d (at most %d ranks)",
                      rank, nranks, MAX_RANKS);
    if (!hooks())
        return refuse(ncclSystemError, "ncclCommInitRank: not on the fake GPU (libcuda.so.1)");
    int dev = device_of_ctx();
    if (dev < 0)
        return refuse(ncclInvalidUsage, "ncclCommInitRank: no current CUDA context");
    id.internal[sizeof id.internal - 1] = 0;
    int fd = shm_open(id.internal, O_RDWR, 0);
    if (fd < 0)
        return refuse(ncclSystemError, "shm_open(%s): %s", id.internal, strerror(errno));
    Shm *shm = mmap(NULL, sizeof(Shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (shm == MAP_FAILED)
        return refuse(ncclSystemError, "mmap: %s", strerror(errno));
    shm->pid[rank] = getpid();
    shm->dev[rank] = dev;
    if (rank == 0)
        shm->nranks = nranks;
    atomic_fetch_add(&shm->joined, 1);
    double t0 = now();
    while (atomic_load(&shm->joined) < nranks) {
        if (now() - t0 > 60) {
            munmap(shm, sizeof(Shm));
            return refuse(ncclSystemError, "ncclCommInitRank: the other ranks did not join in 60 s");
        }
        usleep(1000);
    }
    if (rank == 0)
        shm_unlink(id.internal);   /* everyone has it mapped: nothing is left behind */
    for (int j = 0; j < nranks; j++)
        if (j != rank && shm->dev[j] == dev) {
            munmap(shm, sizeof(Shm));
            return refuse(ncclInvalidUsage, "Duplicate GPU detected: rank %d and rank %d both on "
                          "CUDA device %d", rank, j, dev);
        }
    struct ncclComm *c = calloc(1, sizeof *c);
    *c = (struct ncclComm){.shm = shm, .rank = rank, .nranks = nranks};
    *comm = c;
    return ncclSuccess;
}

/* Values of `es` bytes a round (a slot's 1 MiB). */
static size_t per_round(size_t es) { return PIECE * sizeof(float) / es; }

/* The sum in rank order of value i of every slot, into out (es bytes a value). */
static void sum_slots(const Shm *s, int nranks, size_t es, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++)
        if (es == sizeof(double)) {
            double acc = ((const double *)s->slot[0])[i];
            for (int j = 1; j < nranks; j++)
                acc += ((const double *)s->slot[j])[i];
            memcpy(out + i * es, &acc, es);
        } else {
            float acc = s->slot[0][i];
            for (int j = 1; j < nranks; j++)
                acc += s->slot[j][i];
            memcpy(out + i * es, &acc, es);
        }
}

/* One step of a queued all-reduce; 1 when it is complete. */
static int reduce_poll(void *arg)
{
    Reduce *r = arg;
    struct ncclComm *c = r->c;
    Shm *s = c->shm;
    const size_t pr = per_round(r->es);
    while (!c->aborted && r->done * pr < r->count) {
        uint64_t round = r->first + r->done;
        size_t off = r->done * pr, n = r->count - off < pr ? r->count - off : pr;
        if (!r->have_put) {   /* our slot is free once every rank has read the last round */
            for (int j = 0; j < c->nranks; j++)
                if (atomic_load(&s->read[j]) + 1 < round)
                    return 0;
            if (r->kind != BROADCAST || c->rank == r->root)
                memcpy(s->slot[c->rank], r->send + off * r->es, n * r->es);
            atomic_store(&s->put[c->rank], round);
            r->have_put = 1;
        }
        for (int j = 0; j < c->nranks; j++)
            if (atomic_load(&s->put[j]) < round)
                return 0;
        if (r->kind == BROADCAST)
            memcpy(r->recv + off * r->es, s->slot[r->root], n * r->es);
        else if (r->kind == ALLREDUCE || c->rank == r->root)
            sum_slots(s, c->nranks, r->es, n, r->recv + off * r->es);
        atomic_store(&s->read[c->rank], round);
        r->have_put = 0;
        r->done++;
    }
    free(r);
    return 1;
}

static ncclResult_t collective(const char *fn, int kind, int root, const void *sendbuff,
                               void *recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    if (!comm || comm->aborted)
        return refuse(ncclInvalidArgument, "%s: no communicator (or aborted)", fn);
    if ((datatype != ncclFloat32 && datatype != ncclFloat64) || op != ncclSum)
        return refuse(ncclInvalidArgument, "%s: only fp32 and fp64 sums are emulated", fn);
    size_t es = datatype == ncclFloat64 ? sizeof(double) : sizeof(float);
    if (root < 0 || root >= comm->nranks)
        return refuse(ncclInvalidArgument, "%s: root %d of %d ranks", fn, root, comm->nranks);
    if (!count)
        return ncclSuccess;
    int sends = kind != BROADCAST || comm->rank == root;
    int receives = kind != REDUCE || comm->rank == root;
    if ((sends && !is_dev_range(sendbuff, count * es)) || (receives && !is_dev_range(recvbuff, count * es)))
        return refuse(ncclInvalidArgument, "%s: a buffer is not device memory", fn);
    Reduce *r = calloc(1, sizeof *r);
    *r = (Reduce){.c = comm, .kind = kind, .root = root, .send = sendbuff, .recv = recvbuff,
                  .es = es, .count = count, .first = comm->rounds + 1};
    comm->rounds += (count + per_round(es) - 1) / per_round(es);
    if (enqueue_poll((void *)stream, reduce_poll, r) != 0) {
        free(r);
        return refuse(ncclUnhandledCudaError, "%s: the stream refused the operation", fn);
    }
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return collective("ncclAllReduce", ALLREDUCE, 0, sendbuff, recvbuff, count, datatype, op, comm,
                      stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    return collective("ncclReduce", REDUCE, root, sendbuff, recvbuff, count, datatype, op, comm,
                      stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    return collective("ncclBroadcast", BROADCAST, root, sendbuff, recvbuff, count, datatype, ncclSum,
                      comm, stream);
}

ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

/* Dead, or a zombie not yet reaped by its launcher. */
static int gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    if (!comm || !err)
        return ncclInvalidArgument;
    *err = ncclSuccess;
    for (int j = 0; j < comm->nranks; j++)
        if (j != comm->rank && gone(comm->shm->pid[j]))
            *err = ncclRemoteError;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    comm->aborted = 1;   /* queued collectives complete as no-ops; the comm stays allocated */
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    munmap(comm->shm, sizeof(Shm));
    free(comm);
    return ncclSuccess;
}
