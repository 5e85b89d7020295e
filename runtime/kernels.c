/* kernels.c: the CPU thread pool and the GEMMs that generated trainers call (with their
 * epilogues, the column sums of a bias's gradient, fp8-mixed's linear GEMMs). The other
 * CPU kernels have files of their own (kernels.h lists them); what follows holds for all.
 *
 * Determinism: every kernel here gives the same bits for the same shapes whatever the
 * thread count. Work is cut into tasks whose boundaries depend only on the shapes; a
 * reduction writes one partial per task and the caller adds the partials in task
 * order. Only the assignment of tasks to threads depends on the pool.
 *
 * Semantics follow PyTorch's CPU kernels (pool window order, NaN in max pooling,
 * first-max argmax), since whole runs are checked step by step against PyTorch. */
#define _GNU_SOURCE
#include <cblas.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "rt.h"
#include "rt_vec.h"
#include "kernels.h"

/* ---- the thread pool ------------------------------------------------------ */

/* Items per chunk for rt_parallel_for, whose items are light (elementwise loops). */
#define RT_GRAIN 4096
/* How long a waiting thread spins before it sleeps in the kernel. Trainers launch
 * kernels back to back, so most waits end within the spin; a longer gap (a GEMM, which
 * runs on OpenBLAS's threads, or the loader) puts the workers to sleep and gives the
 * cores back. */
#define RT_SPIN_NS 50000
#define RT_SPIN_PAUSE_NS 3000

typedef void (*task_fn)(void *ctx, int64_t lo, int64_t hi);

/* One worker's mailbox, on its own cache line: the caller writes the job, then bumps
 * `seq`; the worker runs it and increments the pool's `done`. */
typedef struct worker {
    _Alignas(64) atomic_uint seq;
    atomic_int sleeping;       /* 1 while the worker is (about to be) in futex_wait */
    task_fn fn;
    void *ctx;
    int64_t lo, hi;
    struct rt_pool *pool;
    pthread_t tid;
} worker;

struct rt_pool {
    _Alignas(64) atomic_uint done;  /* workers finished with the current launch */
    atomic_int caller_sleeping;
    atomic_int stop;
    int threads;
    worker *w;                 /* [threads - 1]; the caller is thread 0 */
    double *scratch;           /* partial sums of reductions; caller-owned */
    size_t scratch_n;
};

/* Set in pool workers and in a caller during a launch: a nested launch runs inline. */
static _Thread_local int in_launch;

static void futex_wait(atomic_uint *addr, unsigned val)
{
    /* EAGAIN (value changed) and EINTR both just mean "look again". */
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins up to RT_SPIN_NS while *word == old (want_change) or != old (!want_change).
 * Returns the last value read. After the first microseconds it yields between looks:
 * when there are more runnable threads than cores (other programs, the loader,
 * OpenBLAS's own spinning threads) the thread it waits for may need this core. */
static unsigned spin_on(atomic_uint *word, unsigned old, int want_change)
{
    int64_t t0 = 0, t = 0;
    for (int i = 0;; i++) {
        unsigned v = atomic_load_explicit(word, memory_order_acquire);
        if ((v != old) == want_change)
            return v;
        if (t - t0 > RT_SPIN_PAUSE_NS)
            sched_yield();
        else
            cpu_relax();
        if ((i & 15) == 15) {
            t = now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > RT_SPIN_NS)
                return v;
        }
    }
}

/* Blocks until *word != old. `sleeping` tells the writer to call futex_wake: the
 * writer stores the word and then reads the flag, the waiter stores the flag and then
 * reads the word (both seq_cst), so at least one of them sees the other. */
static unsigned wait_change(atomic_uint *word, unsigned old, atomic_int *sleeping)
{
    unsigned v = spin_on(word, old, 1);
    while (v == old) {
        atomic_store(sleeping, 1);
        v = atomic_load(word);
        if (v == old)
            futex_wait(word, old);
        atomic_store(sleeping, 0);
        v = atomic_load(word);
    }
    return v;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    rt_pool *p = w->pool;
    unsigned seen = 0;
    in_launch = 1;
    for (;;) {
        seen = wait_change(&w->seq, seen, &w->sleeping);
        if (atomic_load(&p->stop))
            return NULL;
        w->fn(w->ctx, w->lo, w->hi);
        atomic_fetch_add(&p->done, 1);
        if (atomic_load(&p->caller_sleeping))
            futex_wake(&p->done);
    }
}

rt_pool *rt_pool_new(int threads)
{
    if (threads < 1)
        threads = 1;
    rt_pool *p = rt_xmalloc(sizeof *p);
    atomic_init(&p->done, 0);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->stop, 0);
    p->threads = threads;
    p->w = rt_xmalloc(sizeof(worker) * (size_t)threads);
    /* Workers block every signal: SIGINT and friends go to the main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 1; i < threads; i++) {
        worker *w = &p->w[i - 1];
        atomic_init(&w->seq, 0);
        atomic_init(&w->sleeping, 0);
        w->pool = p;
        int rc = pthread_create(&w->tid, NULL, worker_main, w);
        if (rc != 0)
            rt_fail("cannot start worker thread %d of %d: %s", i, threads, strerror(rc));
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p;
}

int rt_pool_threads(const rt_pool *p) { return p ? p->threads : 1; }

void rt_pool_free(rt_pool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    for (int i = 1; i < p->threads; i++) {
        worker *w = &p->w[i - 1];
        atomic_fetch_add(&w->seq, 1);
        futex_wake(&w->seq);
    }
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->w[i - 1].tid, NULL);
    free(p->scratch);
    rt_xfree(p->w);
    rt_xfree(p);
}

rt_pool *rt_pool_of(const rt_exec *e)
{
    if (!e->rt)
        rt_die("rt_exec.rt is not set (no thread pool)");
    return e->rt;
}

/* Runs fn over [0, n) in min(threads, ceil(n / grain)) contiguous chunks of near-equal
 * size; the caller runs chunk 0. */
static void launch(rt_pool *p, int64_t n, int64_t grain, task_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t nch = (n + grain - 1) / grain;
    if (nch > p->threads)
        nch = p->threads;
    if (nch <= 1 || in_launch) {
        fn(ctx, 0, n);
        return;
    }
    in_launch = 1;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    for (int64_t i = 1; i < nch; i++) {
        worker *w = &p->w[i - 1];
        w->fn = fn;
        w->ctx = ctx;
        w->lo = n * i / nch;
        w->hi = n * (i + 1) / nch;
        atomic_fetch_add(&w->seq, 1);
        if (atomic_load(&w->sleeping))
            futex_wake(&w->seq);
    }
    fn(ctx, 0, n / nch);
    unsigned target = (unsigned)(nch - 1);
    unsigned v = spin_on(&p->done, target, 0);
    while (v != target) {
        atomic_store(&p->caller_sleeping, 1);
        v = atomic_load(&p->done);
        if (v != target)
            futex_wait(&p->done, v);
        atomic_store(&p->caller_sleeping, 0);
        v = atomic_load(&p->done);
    }
    in_launch = 0;
}

void rt_pool_run(rt_pool *p, int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                 void *ctx)
{
    if (!p) {
        if (n > 0)
            fn(ctx, 0, n);
        return;
    }
    launch(p, n, grain, fn, ctx);
}

double *rt_pool_scratch(rt_pool *p, size_t n)
{
    if (n > p->scratch_n) {
        free(p->scratch);
        p->scratch = malloc(n * sizeof(double));
        if (!p->scratch)
            rt_fail("out of memory allocating %zu bytes of kernel scratch", n * sizeof(double));
        p->scratch_n = n;
    }
    return p->scratch;
}

typedef struct { rt_kernel_fn fn; rt_exec *e; } pfor_ctx;

static void pfor_task(void *ctx, int64_t lo, int64_t hi)
{
    pfor_ctx *c = ctx;
    c->fn(c->e, lo, hi);
}

/* trainc run's CPU kernels rebuilt by the system's C compiler (compiler/jit_cc.c): once
 * set, rt_launch runs each libtcc kernel's twin. Both are the same C built without
 * contraction, so they give the same bits; a launch reads the table once. */
static _Atomic(const rt_kernel_swap *) kernel_swap;
static atomic_int cpu_launched;   /* set at the first CPU launch */

void rt_kernel_swap_set(const rt_kernel_swap *t)
{
    atomic_store(&kernel_swap, t);
}

int rt_cpu_launched(void)
{
    return atomic_load_explicit(&cpu_launched, memory_order_relaxed);
}

static rt_kernel_fn swapped(rt_kernel_fn fn)
{
    const rt_kernel_swap *t = atomic_load_explicit(&kernel_swap, memory_order_acquire);
    for (int lo = 0, hi = t ? t->n : 0; lo < hi;) {   /* t->from ascending */
        int mid = lo + (hi - lo) / 2;
        uintptr_t a = (uintptr_t)t->from[mid], f = (uintptr_t)fn;
        if (a == f)
            return t->to[mid];
        if (a < f)
            lo = mid + 1;
        else
            hi = mid;
    }
    return fn;
}

void rt_launch(rt_exec *e, const char *name, rt_kernel_fn fn, int64_t n, int nargs, void **args)
{
    if (e->dev) {
        RT_GPU(e)->launch_ew(e, name, n, nargs, args);
        return;
    }
    if (!atomic_load_explicit(&cpu_launched, memory_order_relaxed))
        atomic_store_explicit(&cpu_launched, 1, memory_order_relaxed);
    rt_parallel_for(e, n, swapped(fn));
}

void rt_parallel_for(rt_exec *e, int64_t n, rt_kernel_fn fn)
{
    pfor_ctx c = {fn, e};
    launch(rt_pool_of(e), n, RT_GRAIN, pfor_task, &c);
}

int64_t rt_grain_for(int64_t work_per_item)
{
    int64_t g = 32768 / (work_per_item > 0 ? work_per_item : 1);
    return g < 1 ? 1 : g;
}

/* ---- short vectors (rt_vec.h) ------------------------------------------------ */

/* acc[j] += x[j], j < n, in double. */
static inline void add_f64(double *restrict acc, const float *restrict x, int64_t n)
{
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        st4d(acc + j, add4d(ld4d(acc + j), cvt4(ld4(x + j))));
    for (; j < n; j++)
        acc[j] += x[j];
}

/* ---- GEMM ------------------------------------------------------------------ */

typedef struct {
    int ta, tb, split_m;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t width;   /* the slices' rows or columns (rt_gemm) */
} gemm_job;

/* One slice of C: rows [lo, hi) (split_m) or columns [lo, hi), single-threaded BLAS. */
static void gemm_part(const gemm_job *j, int64_t lo, int64_t hi)
{
    const float *A = j->A, *B = j->B;
    float *C = j->C;
    int64_t M = j->M, N = j->N;
    if (j->split_m) {
        A += j->ta ? lo : lo * j->lda;
        C += lo * j->ldc;
        M = hi - lo;
    } else {
        B += j->tb ? lo * j->ldb : lo;
        C += lo;
        N = hi - lo;
    }
    cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)j->K, j->alpha, A, (int)j->lda, B, (int)j->ldb, j->beta, C,
                (int)j->ldc);
}

/* Slices [lo, hi) of j->width rows or columns each (the last one shorter), one BLAS call
 * a slice: never merged, so every call has the same shape on any number of threads. */
static void gemm_slices(void *ctx, int64_t lo, int64_t hi)
{
    const gemm_job *j = ctx;
    int64_t n = j->split_m ? j->M : j->N;
    for (int64_t t = lo; t < hi; t++)
        gemm_part(j, t * j->width, (t + 1) * j->width < n ? (t + 1) * j->width : n);
}

/* OpenBLAS runs single-threaded (rt_blas_setup); big GEMMs are cut into slices of C over
 * this pool instead, so one set of threads owns the cores: OpenBLAS's own threads would
 * spin after each GEMM while the pool's elementwise kernels run. The cut depends on the
 * shape alone (GEMM_SLICES slices of at least GEMM_SLICE_MIN rows or columns, a multiple
 * of 16), never on the thread count: BLAS libraries pick kernels by a call's size
 * (OpenBLAS's SkylakeX small-matrix kernel sums in another order than its blocked one),
 * so a slice's bits depend on its shape. */
#define GEMM_SLICES 64
#define GEMM_SLICE_MIN 64
void rt_gemm(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
             float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
             float beta, float *C, int64_t ldc)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (M <= 0 || N <= 0)
        return;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        rt_die("gemm %lld x %lld x %lld exceeds the BLAS int range", (long long)M,
               (long long)N, (long long)K);
    if (K <= 0) {
        /* C = beta * C; BLAS would also do this, but rejects the degenerate lda. */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    gemm_job j = {trans_a, trans_b, M >= N, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, 0};
    double flops = 2.0 * (double)M * (double)N * (double)K;
    int64_t n = j.split_m ? M : N;
    if (flops < 4e6 || n < 2 * GEMM_SLICE_MIN) {
        gemm_part(&j, 0, n);
        return;
    }
    int64_t w = (n + GEMM_SLICES - 1) / GEMM_SLICES;
    w = w < GEMM_SLICE_MIN ? GEMM_SLICE_MIN : (w + 15) / 16 * 16;
    j.width = w;
    rt_pool_run(e->rt, (n + w - 1) / w, 1, gemm_slices, &j);
}

/* ---- column sums ----------------------------------------------------------- */

/* Column block: its double accumulators stay in L1 during a row-major sweep. */
#define CS_CB 256

typedef struct {
    const float *dy;           /* [rows, cols] */
    float *db;                 /* [cols] */
    double *part;              /* [nrb, cols] when nrb > 1 */
    int64_t rows, cols, rb, nrb, ncb;
} colsum_ctx;

static void colsum_task(void *ctx, int64_t lo, int64_t hi)
{
    const colsum_ctx *c = ctx;
    double acc[CS_CB];
    for (int64_t t = lo; t < hi; t++) {
        int64_t r0 = t / c->ncb * c->rb, j0 = t % c->ncb * CS_CB;
        int64_t r1 = r0 + c->rb < c->rows ? r0 + c->rb : c->rows;
        int64_t nj = c->cols - j0 < CS_CB ? c->cols - j0 : CS_CB;
        for (int64_t j = 0; j < nj; j++)
            acc[j] = 0.0;
        for (int64_t r = r0; r < r1; r++)
            add_f64(acc, c->dy + r * c->cols + j0, nj);
        if (c->nrb == 1)
            for (int64_t j = 0; j < nj; j++)
                c->db[j0 + j] += (float)acc[j];
        else
            memcpy(c->part + t / c->ncb * c->cols + j0, acc, (size_t)nj * sizeof(double));
    }
}

typedef struct {
    const float *x;            /* [rows, cols] */
    float *db;                 /* [rows] */
    int64_t cols;
} rowsum_ctx;

static void rowsum_task(void *ctx, int64_t lo, int64_t hi)
{
    const rowsum_ctx *c = ctx;
    for (int64_t r = lo; r < hi; r++)
        c->db[r] += (float)sum_f64(c->x + r * c->cols, c->cols);
}

/* A conv layer's bias gradient: each row (an output channel over the batch and its
 * positions) summed in double (sum_f64's eight lanes, so vectorized; the result does
 * not depend on the thread count), a row a task. */
void rt_rowsum_add(rt_exec *e, const float *x, float *db, int64_t rows, int64_t cols)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->rowsum_add(e, x, db, rows, cols);
        return;
    }
    rowsum_ctx c = {x, db, cols};
    launch(rt_pool_of(e), rows, rt_grain_for(cols), rowsum_task, &c);
}

/* The GELU (tanh) rows of the GEMM epilogues, where a CPU step of a GPT spends most of
 * its elementwise time: rt_tanhf is plain arithmetic, so these loops vectorize, and
 * they are built twice, for the baseline x86-64 (4 floats a vector) and for AVX2 (8),
 * the second taken when the CPU has it. Same operations, no FMA (-ffp-contract=off):
 * the same bits either way. */
#define GELU_ROWS(suffix, attr)                                                              \
    attr static void gelu_row_##suffix(float *y, const float *x, int64_t n)                  \
    {                                                                                         \
        for (int64_t j = 0; j < n; j++)                                                       \
            y[j] = rt_gelu_tanh(x[j]);                                                        \
    }                                                                                         \
    attr static void dgelu_row_##suffix(float *d, const float *x, int64_t n)                 \
    {                                                                                         \
        for (int64_t j = 0; j < n; j++)                                                       \
            d[j] = rt_gelu_tanh_bwd(x[j], d[j]);                                              \
    }
GELU_ROWS(base, )
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__TINYC__)
GELU_ROWS(avx2, __attribute__((target("avx2"))))
int rt_have_avx2(void)
{
    static int v = -1;   /* every thread computes the same value */
    int h = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx2") != 0;
        __atomic_store_n(&v, h, __ATOMIC_RELAXED);
    }
    return h;
}
#define GELU_ROW(y, x, n) (rt_have_avx2() ? gelu_row_avx2 : gelu_row_base)(y, x, n)
#define DGELU_ROW(d, x, n) (rt_have_avx2() ? dgelu_row_avx2 : dgelu_row_base)(d, x, n)
#else
#define GELU_ROW(y, x, n) gelu_row_base(y, x, n)
#define DGELU_ROW(d, x, n) dgelu_row_base(d, x, n)
#endif

/* A generated loop that is only a GELU (tanh) of a stored tensor (a GPT block's GELU,
 * cut from its bias so that it reads the pre-activation as stored) calls this for its
 * share of the elements: the same arithmetic as its C, vectorized. */
void rt_gelu_tanh_rows(float *y, const float *x, int64_t n)
{
    GELU_ROW(y, x, n);
}

typedef struct bias_act_ctx {
    float *out, *C, *Y;
    const float *bias, *R;
    int64_t N, ldc;
    int act;
} bias_act_ctx;

/* rows [lo, hi): the fused kernel's "v0 = P + bias; C = v0; Y = act(v0)", with a
 * residual R in cuBLASLt's order: v0 = (P + R) + bias. Row by row, one simple loop
 * per case (they vectorize): v0 into out (C, or Y before its activation), then Y from
 * it. */
static void bias_act_task(void *ctx, int64_t lo, int64_t hi)
{
    const bias_act_ctx *c = ctx;
    const float *b = c->bias;
    for (int64_t i = lo; i < hi; i++) {
        float *o = c->out + i * c->ldc, *y = c->Y ? c->Y + i * c->ldc : NULL;
        if (c->R) {
            const float *r = c->R + i * c->ldc;
            for (int64_t j = 0; j < c->N; j++)
                o[j] = (o[j] + r[j]) + b[j];
        } else {
            for (int64_t j = 0; j < c->N; j++)
                o[j] = o[j] + b[j];
        }
        if (c->act == RT_EPI_RELU)
            for (int64_t j = 0; j < c->N; j++)
                y[j] = o[j] < 0.0f ? 0.0f : o[j];   /* NaN stays NaN, as torch.relu */
        else if (c->act == RT_EPI_GELU_TANH)
            GELU_ROW(y, o, c->N);
    }
}

void rt_gemm_bias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float *C, int64_t ldc, const float *bias, const float *R, int act, float *Y)
{
    if (e->dev) { /* on a GPU: cuda_blas.c */
        RT_GPU(e)->gemm_bias(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, bias,
                             R, act, Y);
        return;
    }
    if (act != RT_EPI_NONE ? !Y : !C)
        rt_die("rt_gemm_bias: no output for the epilogue");
    float *out = C ? C : Y;   /* the product, then the epilogue in place */
    /* the product overwrites out before the epilogue reads R */
    if (R && M > 0 && N > 0 && rt_overlap(R, out, (size_t)((M - 1) * ldc + N) * sizeof(float)))
        rt_die("rt_gemm_bias: the residual overlaps the output");
    rt_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, out, ldc);
    bias_act_ctx c = {out, C, act != RT_EPI_NONE ? Y : NULL, bias, R, N, ldc, act};
    launch(rt_pool_of(e), M, (32768 + N - 1) / (N > 0 ? N : 1), bias_act_task, &c);
}

void rt_colsum_add(rt_exec *e, const float *dy, float *db, int64_t rows, int64_t cols)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->colsum_add(e, dy, db, rows, cols);
        return;
    }
    if (rows <= 0 || cols <= 0)
        return;
    rt_pool *p = rt_pool_of(e);
    colsum_ctx c = {dy, db, NULL, rows, cols, 0, 1, ceil_div(cols, CS_CB)};
    /* Row blocks give parallelism when there are few columns: about 32K elements a
     * task, at most 64 tasks, so the partials stay small (nrb * cols <= 64 * CS_CB). */
    int64_t nrb = rows * cols / 32768;
    if (nrb > 64 / c.ncb)
        nrb = 64 / c.ncb;
    if (nrb < 1)
        nrb = 1;
    c.rb = ceil_div(rows, nrb);
    c.nrb = ceil_div(rows, c.rb);
    if (c.nrb > 1)
        c.part = rt_pool_scratch(p, (size_t)(c.nrb * cols));
    launch(p, c.nrb * c.ncb, 1, colsum_task, &c);
    if (c.nrb > 1)
        for (int64_t j = 0; j < cols; j++) {
            double s = 0.0;
            for (int64_t b = 0; b < c.nrb; b++)
                s += c.part[b * cols + j];
            db[j] += (float)s;
        }
}

void rt_gemm_dbias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                   float beta, float *C, int64_t ldc, float *db, int fresh)
{
    if (e->dev) { /* on a GPU: cuda_blas.c */
        RT_GPU(e)->gemm_dbias(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                              db, fresh);
        return;
    }
    if (!trans_a || lda != M)
        rt_die("rt_gemm_dbias: dy must be A, transposed, rows M apart");
    rt_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    rt_colsum_add(e, A, db, K, M);
}

typedef struct {
    float *D;
    const float *pre;
    int64_t N, ldd;
} dgelu_ctx;

static void dgelu_task(void *ctx, int64_t lo, int64_t hi)
{
    const dgelu_ctx *c = ctx;
    for (int64_t i = lo; i < hi; i++)
        DGELU_ROW(c->D + i * c->ldd, c->pre + i * c->ldd, c->N);
}

void rt_gemm_dgelu(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                   float *D, int64_t ldd, const float *pre)
{
    if (e->dev) { /* on a GPU: cuda_blas.c */
        RT_GPU(e)->gemm_dgelu(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, D, ldd, pre);
        return;
    }
    rt_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, D, ldd);
    dgelu_ctx c = {D, pre, N, ldd};
    launch(rt_pool_of(e), M, (32768 + N - 1) / (N > 0 ? N : 1), dgelu_task, &c);
}

/* ---- fp8-mixed's linear GEMMs --------------------------------------------------
 * On a GPU the device layer's FP8 twins (cuda_blas.c); on the CPU the calls above. */

void rt_gemm_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float beta, float *C, int64_t ldc)
{
    if (e->dev)
        RT_GPU(e)->gemm_fp8(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        rt_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void rt_gemm_bias_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc, const float *bias, const float *R, int act, float *Y)
{
    if (e->dev)
        RT_GPU(e)->gemm_bias_fp8(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc,
                                 bias, R, act, Y);
    else
        rt_gemm_bias(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, bias, R, act, Y);
}

void rt_gemm_dbias_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc, float *db, int fresh)
{
    if (e->dev)
        RT_GPU(e)->gemm_dbias_fp8(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                  ldc, db, fresh);
    else
        rt_gemm_dbias(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, db, fresh);
}

void rt_gemm_dgelu_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *D, int64_t ldd, const float *pre)
{
    if (e->dev)
        RT_GPU(e)->gemm_dgelu_fp8(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, D, ldd,
                                  pre);
    else
        rt_gemm_dgelu(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, D, ldd, pre);
}

void rt_fp8_dy_pair(rt_exec *e, const float *dy)
{
    if (e->dev)
        RT_GPU(e)->fp8_dy_pair(e, dy);
}

void rt_fp8_amax_reset(rt_exec *e, int first, int n)
{
    if (e->dev)
        RT_GPU(e)->fp8_amax_reset(e, first, n);
}

unsigned *rt_fp8_amax_slot(rt_exec *e, int k)
{
    return e->dev ? RT_GPU(e)->fp8_amax_slot(e, k) : NULL;
}

void rt_fp8_amax_use(rt_exec *e, int a, int b, int out)
{
    if (e->dev)
        RT_GPU(e)->fp8_amax_use(e, a, b, out);
}
