/* dist.c: the distributed layer over MPI (rt_dist.h): joining the job, CPU
 * collectives, the overlapped gradient buckets of DDP, ZeRO's shard arithmetic,
 * and a watchdog that turns a dead or stuck peer into exit 2 instead of a hang.
 *
 * MPI is touched only when an MPI launcher started the process, so a trainer run on
 * its own needs neither mpirun nor a working MPI setup (libmpi is still linked).
 * All traffic goes over a duplicate of MPI_COMM_WORLD whose error handler returns
 * errors, so every failure comes back here and leaves through rt_fail with the
 * call's name. A dead peer often produces no error at all (shared-memory transports
 * simply wait), hence the watchdog. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <mpi.h>
#include "rt.h"
#include "rt_dist.h"

/* MPI counts are int: longer vectors go in pieces of this many elements. */
#define PIECE ((int64_t)1 << 30)

static struct {
    int inited;                /* rt_dist_init ran */
    int mpi;                   /* MPI initialized here and in use (launched) */
    int owns_mpi;              /* we called MPI_Init, so we call MPI_Finalize */
    int multiple;              /* MPI_THREAD_MULTIPLE: the watchdog may call MPI_Abort */
    int finalizing;
    int rank, world, local_rank, local_world;
    MPI_Comm comm, node;
    int *icounts, *idispls;    /* [world]: scratch for the v-collectives */
    MPI_Request *reqs;         /* [nreq]: outstanding bucket collectives */
    int nreq, capreq;
    int nbuckets;              /* buckets started since the last wait */
    int *first_req;            /* [nbuckets + 1]: bucket h owns reqs[first_req[h] ..) */
    int **rs_counts;           /* [nbuckets]: a reduce-scatter's int counts (MPI reads
                                  them until it completes), else NULL */
    int capb;
    int64_t bucket_floats;     /* floats in those buckets, for the watchdog message */
    double timeout;            /* TRAINC_DIST_TIMEOUT */
} g = {.world = 1, .local_world = 1};

/* ---- errors ----------------------------------------------------------------- */

/* Prints only the function name of the checked expression ("MPI_Allreduce"). */
_Noreturn static void mpi_fail(const char *call, int err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", err);
    rt_fail("rank %d of %d: %.*s failed: %s; another rank has probably died or the ranks "
            "disagree (see their messages)", g.rank, g.world, (int)strcspn(call, "("), call,
            msg);
}

#define MPI_CHECK(call)                                                               \
    do {                                                                              \
        int mpi_err_ = (call);                                                        \
        if (mpi_err_ != MPI_SUCCESS)                                                  \
            mpi_fail(#call, mpi_err_);                                                \
    } while (0)

#define PT_CHECK(call)                                                                \
    do {                                                                              \
        int pt_err_ = (call);                                                         \
        if (pt_err_ != 0)                                                             \
            rt_die("%s: %s", #call, strerror(pt_err_));                               \
    } while (0)

/* ---- the watchdog ------------------------------------------------------------
 *
 * The training thread marks each blocking wait (wd_begin/wd_end: a mutex and, only
 * when the watchdog sleeps without a deadline, a signal). The watchdog thread sleeps
 * until the current wait's deadline; if that same wait is still on then, it says
 * which collective hung and ends the job. It never touches MPI otherwise. */

static struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* on CLOCK_MONOTONIC, the clock of rt_now */
    double timeout;            /* seconds; 0 = no watchdog */
    const char *op;            /* the wait in progress, NULL when none */
    int64_t count;
    const char *unit;
    double since;
    int idle, stop, running;
} wd;

static void *last_resort(void *arg)
{
    (void)arg;
    sleep(10);
    _exit(RT_EXIT_RUNTIME);
}

/* MPI_Abort makes the launcher end every rank (exit code 2); it can itself block
 * when the job is already broken, so a second thread exits 10 s later regardless.
 * Without thread support for it, and once MPI_Finalize has started, only _exit. */
_Noreturn static void wd_fire(const char *op, int64_t count, const char *unit, double waited)
{
    /* the watchdog thread and the training thread (rt_dist_hung) may both come here:
     * the first says it and ends the job, the second waits for that */
    static atomic_int fired;
    if (atomic_exchange(&fired, 1))
        for (;;)
            pause();
    /* one write (rt_fail's reason): the survivors often fire together */
    char what[64] = "";
    if (unit)
        snprintf(what, sizeof what, " (%" PRId64 " %s)", count, unit);
    fprintf(stderr, "trainc: error: rank %d of %d: %s%s has not completed after %.3g s: another "
            "rank has probably died or hung (see its messages); stopping the job "
            "(TRAINC_DIST_TIMEOUT sets the wait in seconds)\n", g.rank, g.world, op, what, waited);
    fflush(NULL);
    pthread_t t;
    if (g.multiple && !g.finalizing && pthread_create(&t, NULL, last_resort, NULL) == 0)
        MPI_Abort(MPI_COMM_WORLD, RT_EXIT_RUNTIME);
    _exit(RT_EXIT_RUNTIME);
}

static void deadline_ts(struct timespec *ts, double t)
{
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *wd_main(void *arg)
{
    (void)arg;
    PT_CHECK(pthread_mutex_lock(&wd.mu));
    while (!wd.stop) {
        if (!wd.op) {
            wd.idle = 1;
            PT_CHECK(pthread_cond_wait(&wd.cv, &wd.mu));
            wd.idle = 0;
            continue;
        }
        double deadline = wd.since + wd.timeout, now = rt_now();
        if (now >= deadline)
            wd_fire(wd.op, wd.count, wd.unit, now - wd.since);
        struct timespec ts;
        deadline_ts(&ts, deadline);
        int err = pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
        if (err != 0 && err != ETIMEDOUT)
            rt_die("pthread_cond_timedwait: %s", strerror(err));
    }
    PT_CHECK(pthread_mutex_unlock(&wd.mu));
    return NULL;
}

static void wd_begin(const char *op, int64_t count, const char *unit)
{
    if (!wd.running)
        return;
    PT_CHECK(pthread_mutex_lock(&wd.mu));
    wd.op = op;
    wd.count = count;
    wd.unit = unit;
    wd.since = rt_now();
    if (wd.idle)
        PT_CHECK(pthread_cond_signal(&wd.cv));
    PT_CHECK(pthread_mutex_unlock(&wd.mu));
}

static void wd_end(void)
{
    if (!wd.running)
        return;
    PT_CHECK(pthread_mutex_lock(&wd.mu));
    wd.op = NULL;
    PT_CHECK(pthread_mutex_unlock(&wd.mu));
}

/* TRAINC_DIST_TIMEOUT: seconds, >= 0; 0 turns the watchdog off (a debugger). */
static double parse_timeout(void)
{
    const char *s = getenv("TRAINC_DIST_TIMEOUT");
    if (!s || !*s)
        return 60;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= 0) || v > 1e9)
        rt_input_error("TRAINC_DIST_TIMEOUT=%s: expected seconds, a number >= 0 (0: no "
                       "timeout)", s);
    return v;
}

static void wd_start(double timeout)
{
    wd.timeout = timeout;
    if (timeout <= 0)
        return;
    pthread_condattr_t ca;
    PT_CHECK(pthread_condattr_init(&ca));
    PT_CHECK(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    PT_CHECK(pthread_cond_init(&wd.cv, &ca));
    PT_CHECK(pthread_condattr_destroy(&ca));
    PT_CHECK(pthread_mutex_init(&wd.mu, NULL));
    /* Like the loader's workers: asynchronous signals stay with the training thread. */
    sigset_t block, old;
    sigfillset(&block);
    sigdelset(&block, SIGSEGV);
    sigdelset(&block, SIGBUS);
    sigdelset(&block, SIGFPE);
    sigdelset(&block, SIGILL);
    PT_CHECK(pthread_sigmask(SIG_BLOCK, &block, &old));
    int err = pthread_create(&wd.thread, NULL, wd_main, NULL);
    PT_CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL));
    if (err != 0)
        rt_fail("cannot start the distributed watchdog thread: %s", strerror(err));
    wd.running = 1;
}

static void wd_stop(void)
{
    if (!wd.running)
        return;
    PT_CHECK(pthread_mutex_lock(&wd.mu));
    wd.stop = 1;
    PT_CHECK(pthread_cond_signal(&wd.cv));
    PT_CHECK(pthread_mutex_unlock(&wd.mu));
    PT_CHECK(pthread_join(wd.thread, NULL));
    PT_CHECK(pthread_cond_destroy(&wd.cv));
    PT_CHECK(pthread_mutex_destroy(&wd.mu));
    memset(&wd, 0, sizeof wd);
}

/* ---- joining and leaving -------------------------------------------------------- */

/* The launchers' own variables: Open MPI's mpirun, PMI (MPICH's hydra, Slurm) and
 * PMIx (srun --mpi=pmix, prterun). */
static int launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK",
                                       "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return 1;
    }
    return 0;
}

void rt_dist_init(int *argc, char ***argv)
{
    if (g.inited)
        return;
    g.inited = 1;
    if (!launched())
        return;
    double timeout = g.timeout = parse_timeout();
    int already = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&already);
    if (already) {
        MPI_Query_thread(&provided);
    } else {
        /* MULTIPLE only so that the watchdog thread may call MPI_Abort; all traffic
         * stays on the training thread. */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            rt_fail("MPI_Init_thread failed: check the mpirun command line and the MPI "
                    "installation");
        g.owns_mpi = 1;
    }
    g.mpi = 1;
    g.multiple = provided >= MPI_THREAD_MULTIPLE;
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g.comm));
    MPI_CHECK(MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(g.comm, &g.rank));
    MPI_CHECK(MPI_Comm_size(g.comm, &g.world));
    MPI_CHECK(MPI_Comm_split_type(g.comm, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL,
                                  &g.node));
    MPI_CHECK(MPI_Comm_set_errhandler(g.node, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(g.node, &g.local_rank));
    MPI_CHECK(MPI_Comm_size(g.node, &g.local_world));
    g.icounts = rt_xmalloc(sizeof(int) * (size_t)g.world);
    g.idispls = rt_xmalloc(sizeof(int) * (size_t)g.world);
    if (g.world > 1)
        wd_start(timeout);
}

int rt_dist_rank(void) { return g.rank; }
double rt_dist_timeout(void) { return g.world > 1 ? g.timeout : 0; }
void rt_dist_hung(const char *op, double waited) { wd_fire(op, 0, NULL, waited); }
int rt_dist_world(void) { return g.world; }
int rt_dist_local_rank(void) { return g.local_rank; }
int rt_dist_local_world(void) { return g.local_world; }

void rt_dist_finalize(void)
{
    if (!g.mpi)
        return;
    rt_bucket_wait_all();
    /* Open MPI's finalize synchronizes with the other ranks: a dead one would hang
     * it, so it stays under the watchdog (which then only _exits). */
    g.finalizing = 1;
    wd_begin("MPI_Finalize", 0, NULL);
    MPI_CHECK(MPI_Comm_free(&g.node));
    MPI_CHECK(MPI_Comm_free(&g.comm));
    if (g.owns_mpi)
        MPI_CHECK(MPI_Finalize());
    wd_end();
    wd_stop();
    rt_xfree(g.icounts);
    rt_xfree(g.idispls);
    free(g.reqs);
    free(g.first_req);
    free(g.rs_counts);
    /* MPI cannot start twice: from here on the process is a world of one for good. */
    memset(&g, 0, sizeof g);
    g.inited = 1;
    g.world = g.local_world = 1;
}

void rt_dist_abort(int code)
{
    fflush(NULL);
    if (g.mpi && !g.finalizing)
        MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* ---- blocking collectives ----------------------------------------------------------- */

static int piece(int64_t n, int64_t off) { return (int)(n - off < PIECE ? n - off : PIECE); }

static void check_count(const char *what, int64_t n)
{
    if (n < 0)
        rt_die("%s: negative count %" PRId64, what, n);
}

void rt_allreduce_sum_f32(float *x, int64_t n)
{
    check_count("rt_allreduce_sum_f32", n);
    if (g.world == 1 || n == 0)
        return;
    wd_begin("MPI_Allreduce", n, "floats");
    for (int64_t off = 0; off < n; off += PIECE)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + off, piece(n, off), MPI_FLOAT, MPI_SUM,
                                g.comm));
    wd_end();
}

void rt_allreduce_sum_f64(double *x, int64_t n)
{
    check_count("rt_allreduce_sum_f64", n);
    if (g.world == 1 || n == 0)
        return;
    wd_begin("MPI_Allreduce", n, "doubles");
    for (int64_t off = 0; off < n; off += PIECE)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + off, piece(n, off), MPI_DOUBLE, MPI_SUM,
                                g.comm));
    wd_end();
}

void rt_rank_mean_f64(double *x, int64_t n)
{
    rt_allreduce_sum_f64(x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] /= (double)g.world;
}

void rt_broadcast(void *buf, int64_t bytes, int root)
{
    check_count("rt_broadcast", bytes);
    if (root < 0 || root >= g.world)
        rt_die("rt_broadcast: root %d of world %d", root, g.world);
    if (g.world == 1 || bytes == 0)
        return;
    wd_begin("MPI_Bcast", bytes, "bytes");
    for (int64_t off = 0; off < bytes; off += PIECE)
        MPI_CHECK(MPI_Bcast((char *)buf + off, piece(bytes, off), MPI_BYTE, root, g.comm));
    wd_end();
}

void rt_barrier(void)
{
    if (g.world == 1)
        return;
    wd_begin("MPI_Barrier", 0, NULL);
    MPI_CHECK(MPI_Barrier(g.comm));
    wd_end();
}

void rt_barrier_solo(void)
{
    if (g.world == 1)
        return;
    rt_bucket_wait_all();   /* (nothing of a step is in flight at these places) */
    MPI_CHECK(MPI_Barrier(g.comm));
}

/* counts -> g.icounts/g.idispls; the whole vector must fit one MPI call (int
 * displacements). Returns the total. */
static int64_t v_counts(const char *what, const int64_t *counts)
{
    int64_t total = 0;
    for (int r = 0; r < g.world; r++) {
        if (counts[r] < 0)
            rt_die("%s: negative count %" PRId64 " for rank %d", what, counts[r], r);
        if (total + counts[r] > INT_MAX)
            rt_fail("%s: more than %d floats do not fit one MPI call; shard the vector "
                    "in pieces", what, INT_MAX);
        g.icounts[r] = (int)counts[r];
        g.idispls[r] = (int)total;
        total += counts[r];
    }
    return total;
}

void rt_reduce_scatter_sum_f32(const float *in, float *out, const int64_t *counts)
{
    if (g.world == 1) {
        check_count("rt_reduce_scatter_sum_f32", counts[0]);
        if (in != out && counts[0] > 0)
            memmove(out, in, sizeof(float) * (size_t)counts[0]);
        return;
    }
    int64_t total = v_counts("rt_reduce_scatter_sum_f32", counts);
    if (total == 0)
        return;
    wd_begin("MPI_Reduce_scatter", total, "floats");
    MPI_CHECK(MPI_Reduce_scatter(in == out ? MPI_IN_PLACE : in, out, g.icounts, MPI_FLOAT,
                                 MPI_SUM, g.comm));
    wd_end();
}

void rt_allgather_f32(const float *in, float *out, const int64_t *counts)
{
    if (g.world == 1) {
        check_count("rt_allgather_f32", counts[0]);
        if (in != out && counts[0] > 0)
            memmove(out, in, sizeof(float) * (size_t)counts[0]);
        return;
    }
    int64_t total = v_counts("rt_allgather_f32", counts);
    if (total == 0)
        return;
    /* MPI forbids aliasing send and receive buffers except through MPI_IN_PLACE. */
    const float *mine = out + g.idispls[g.rank];
    int inplace = in == mine;
    if (!inplace && in < out + total && out < in + counts[g.rank])
        rt_die("rt_allgather_f32: input overlaps the output but is not this rank's part");
    wd_begin("MPI_Allgatherv", total, "floats");
    MPI_CHECK(MPI_Allgatherv(inplace ? MPI_IN_PLACE : in, g.icounts[g.rank], MPI_FLOAT, out,
                             g.icounts, g.idispls, MPI_FLOAT, g.comm));
    wd_end();
}

void rt_gather_f32(const float *in, float *out, const int64_t *counts, int root)
{
    if (root < 0 || root >= g.world)
        rt_die("rt_gather_f32: root %d of world %d", root, g.world);
    if (g.world == 1) {
        check_count("rt_gather_f32", counts[0]);
        if (in != out && counts[0] > 0)
            memmove(out, in, sizeof(float) * (size_t)counts[0]);
        return;
    }
    int64_t total = v_counts("rt_gather_f32", counts);
    if (total == 0)
        return;
    /* The others not under the watchdog, as in rt_barrier_solo: the root writes what it
     * gathers (a ZeRO checkpoint's optimizer state, ckpt.c) and the weights before it, so
     * they wait on its disk, which a large checkpoint on a slow one keeps for minutes.
     * The root's own wait is on ranks already waiting here: timed, so a dead one ends
     * the job instead of hanging it. */
    if (g.rank == root)
        wd_begin("MPI_Gatherv", total, "floats");
    MPI_CHECK(MPI_Gatherv(in, g.icounts[g.rank], MPI_FLOAT, out, g.icounts, g.idispls, MPI_FLOAT,
                          root, g.comm));
    if (g.rank == root)
        wd_end();
}

/* ---- overlapped gradient buckets ---------------------------------------------------- */

static void grow_reqs(void)
{
    if (g.nreq < g.capreq)
        return;
    g.capreq = g.capreq ? 2 * g.capreq : 64;
    g.reqs = realloc(g.reqs, sizeof(MPI_Request) * (size_t)g.capreq);
    if (!g.reqs)
        rt_fail("out of memory for %d MPI requests", g.capreq);
}

/* A new bucket number, its requests starting at the next one. */
static int new_bucket(void)
{
    if (g.nbuckets + 1 >= g.capb) {
        g.capb = g.capb ? 2 * g.capb : 64;
        g.first_req = realloc(g.first_req, sizeof(int) * (size_t)g.capb);
        g.rs_counts = realloc(g.rs_counts, sizeof(int *) * (size_t)g.capb);
        if (!g.first_req || !g.rs_counts)
            rt_fail("out of memory for %d gradient buckets", g.capb);
    }
    int h = g.nbuckets++;
    g.first_req[h] = g.first_req[h + 1] = g.nreq;
    g.rs_counts[h] = NULL;
    return h;
}

int rt_bucket_start(float *grads, int64_t n)
{
    check_count("rt_bucket_start", n);
    if (g.world == 1)
        return g.nbuckets++;
    int h = new_bucket();
    for (int64_t off = 0; off < n; off += PIECE) {
        grow_reqs();
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, grads + off, piece(n, off), MPI_FLOAT, MPI_SUM,
                                 g.comm, &g.reqs[g.nreq]));
        g.nreq++;
    }
    g.first_req[h + 1] = g.nreq;
    g.bucket_floats += n;
    rt_bucket_poll();
    return h;
}

int rt_bucket_reduce_scatter_start(const float *in, float *out, const int64_t *counts)
{
    if (g.world == 1) {
        check_count("rt_bucket_reduce_scatter_start", counts[0]);
        if (in != out && counts[0] > 0)
            memmove(out, in, sizeof(float) * (size_t)counts[0]);
        return g.nbuckets++;
    }
    int64_t total = v_counts("rt_bucket_reduce_scatter_start", counts);
    int h = new_bucket();
    if (total == 0)
        return h;
    int *ic = rt_xmalloc(sizeof(int) * (size_t)g.world);
    memcpy(ic, g.icounts, sizeof(int) * (size_t)g.world);
    g.rs_counts[h] = ic;
    grow_reqs();
    MPI_CHECK(MPI_Ireduce_scatter(in == out ? MPI_IN_PLACE : in, out, ic, MPI_FLOAT, MPI_SUM,
                                  g.comm, &g.reqs[g.nreq]));
    g.nreq++;
    g.first_req[h + 1] = g.nreq;
    g.bucket_floats += total;
    rt_bucket_poll();
    return h;
}

/* Open MPI has no progress thread for nonblocking collectives: they advance only
 * while some MPI call runs, so the backward pass pokes them between kernels. */
void rt_bucket_poll(void)
{
    if (g.nreq == 0)
        return;
    int done = 0;
    MPI_CHECK(MPI_Testall(g.nreq, g.reqs, &done, MPI_STATUSES_IGNORE));
}

int rt_bucket_done(int h)
{
    if (h < 0 || h >= g.nbuckets)
        rt_die("rt_bucket_done(%d): %d buckets started", h, g.nbuckets);
    if (g.world == 1)
        return 1;
    int lo = g.first_req[h], hi = g.first_req[h + 1];
    if (hi == lo)
        return 1;               /* an empty bucket */
    int done = 0;
    MPI_CHECK(MPI_Testall(hi - lo, g.reqs + lo, &done, MPI_STATUSES_IGNORE));
    return done;
}

void rt_bucket_wait(int h)
{
    if (h < 0 || h >= g.nbuckets)
        rt_die("rt_bucket_wait(%d): %d buckets started", h, g.nbuckets);
    if (g.world == 1 || g.first_req[h + 1] == g.first_req[h])
        return;
    int lo = g.first_req[h], n = g.first_req[h + 1] - lo;
    wd_begin("MPI_Waitall of a gradient bucket", n, "requests");
    MPI_CHECK(MPI_Waitall(n, g.reqs + lo, MPI_STATUSES_IGNORE));
    wd_end();
}

void rt_bucket_wait_all(void)
{
    if (g.nreq > 0) {
        wd_begin("MPI_Waitall of the gradient buckets", g.bucket_floats, "floats");
        MPI_CHECK(MPI_Waitall(g.nreq, g.reqs, MPI_STATUSES_IGNORE));
        wd_end();
    }
    for (int h = 0; g.world > 1 && h < g.nbuckets; h++) {
        rt_xfree(g.rs_counts[h]);
        g.rs_counts[h] = NULL;
    }
    g.nreq = 0;
    g.nbuckets = 0;
    g.bucket_floats = 0;
}

/* ---- shards ------------------------------------------------------------------------- */

void rt_dist_shard(int64_t n, int rank, int world, int64_t *lo, int64_t *hi)
{
    if (n < 0 || world < 1 || rank < 0 || rank >= world)
        rt_die("rt_dist_shard(%" PRId64 ", %d, %d)", n, rank, world);
    int64_t base = n / world, rem = n % world;
    *lo = rank * base + (rank < rem ? rank : rem);
    *hi = *lo + base + (rank < rem);
}

void rt_dist_shard_counts(int64_t n, int world, int64_t *counts)
{
    for (int r = 0; r < world; r++) {
        int64_t lo, hi;
        rt_dist_shard(n, r, world, &lo, &hi);
        counts[r] = hi - lo;
    }
}
