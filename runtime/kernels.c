/* kernels.c: the CPU thread pool and the heavy kernels that generated trainers call
 * (GEMM, im2col/col2im, pooling, LayerNorm, RMSNorm, the gated linear unit, the losses).
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

static rt_pool *pool_of(const rt_exec *e)
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
    launch(pool_of(e), n, RT_GRAIN, pfor_task, &c);
}

int64_t rt_grain_for(int64_t work_per_item)
{
    int64_t g = 32768 / (work_per_item > 0 ? work_per_item : 1);
    return g < 1 ? 1 : g;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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

/* sum x[j] in double: eight lanes, added in a fixed order. */
static double sum_f64(const float *restrict x, int64_t n)
{
    d4 a0 = {{0, 0}, {0, 0}}, a1 = a0;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        a0 = add4d(a0, cvt4(ld4(x + j)));
        a1 = add4d(a1, cvt4(ld4(x + j + 4)));
    }
    double t = hsum4d(add4d(a0, a1));
    for (; j < n; j++)
        t += x[j];
    return t;
}

/* sum (x[j] - mu)^2 in double. */
static double sqdev_f64(const float *restrict x, int64_t n, double mu)
{
    d4 a0 = {{0, 0}, {0, 0}}, a1 = a0, m = {{mu, mu}, {mu, mu}};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        d4 d0 = cvt4(ld4(x + j)), d1 = cvt4(ld4(x + j + 4));
        d0 = (d4){d0.lo - m.lo, d0.hi - m.hi};
        d1 = (d4){d1.lo - m.lo, d1.hi - m.hi};
        a0 = add4d(a0, mul4d(d0, d0));
        a1 = add4d(a1, mul4d(d1, d1));
    }
    double t = hsum4d(add4d(a0, a1));
    for (; j < n; j++)
        t += (x[j] - mu) * (x[j] - mu);
    return t;
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
    launch(pool_of(e), rows, rt_grain_for(cols), rowsum_task, &c);
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
    launch(pool_of(e), M, (32768 + N - 1) / (N > 0 ? N : 1), bias_act_task, &c);
}

void rt_colsum_add(rt_exec *e, const float *dy, float *db, int64_t rows, int64_t cols)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->colsum_add(e, dy, db, rows, cols);
        return;
    }
    if (rows <= 0 || cols <= 0)
        return;
    rt_pool *p = pool_of(e);
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
    launch(pool_of(e), M, (32768 + N - 1) / (N > 0 ? N : 1), dgelu_task, &c);
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

/* ---- im2col / col2im --------------------------------------------------------- */

typedef struct {
    const float *x;            /* im2col: [B, C, H, W] */
    float *col;                /* im2col: [C*k*k, B*OH*OW] */
    const float *dcol;         /* col2im: [C*k*k, B*OH*OW] */
    float *dx;                 /* col2im: [B, C, H, W] */
    int64_t B, C, H, W, k, s, pad, OH, OW;
} conv_ctx;

void rt_conv_span(int64_t kj, int64_t s, int64_t pad, int64_t W, int64_t OW, int64_t *ow0,
                  int64_t *ow1)
{
    int64_t lo = pad - kj > 0 ? ceil_div(pad - kj, s) : 0;
    int64_t last = W - 1 + pad - kj;  /* ow*s <= last */
    int64_t hi = last < 0 ? 0 : last / s + 1;
    if (hi > OW)
        hi = OW;
    if (lo > hi)
        lo = hi;
    *ow0 = lo;
    *ow1 = hi;
}

/* The outputs ow whose input column ow*s - pad + kj lies in [0, W): [*ow0, *ow1). */
static void valid_cols(const conv_ctx *c, int64_t kj, int64_t *ow0, int64_t *ow1)
{
    rt_conv_span(kj, c->s, c->pad, c->W, c->OW, ow0, ow1);
}

/* The valid outputs [ow0, ow1) of each kernel column kj (im2col's per-plane spans) */
#define IM2COL_KMAX 16
typedef struct { int64_t ow0[IM2COL_KMAX], ow1[IM2COL_KMAX]; } col_spans;

static void spans_of(const conv_ctx *c, col_spans *sp)
{
    for (int64_t kj = 0; kj < c->k && kj < IM2COL_KMAX; kj++)
        valid_cols(c, kj, &sp->ow0[kj], &sp->ow1[kj]);
}

/* d[j] = src[2 j] for j < n (reads src[0 .. 2n - 2] only) */
static void copy_stride2(float *restrict d, const float *restrict src, int64_t n)
{
    int64_t j = 0;
    for (; j + 4 < n; j += 4) {
        v4f a = ld4(src + 2 * j), b = ld4(src + 2 * j + 4);
        st4(d + j, __builtin_shufflevector(a, b, 0, 2, 4, 6));
    }
    for (; j < n; j++)
        d[j] = src[2 * j];
}

/* d[j] = src[j s] for j < n */
static inline void copy_strided(float *restrict d, const float *restrict src, int64_t n, int64_t s)
{
    int64_t j = 0;
    if (s == 1) {
        for (; j + 4 <= n; j += 4)
            st4(d + j, ld4(src + j));
        for (; j < n; j++)
            d[j] = src[j];
    } else if (s == 2) {
        copy_stride2(d, src, n);
    } else {
        for (; j < n; j++)
            d[j] = src[j * s];
    }
}

/* "Same" padding at stride 1: the segment is the plane shifted by a constant offset, so
 * the valid span is one copy; then zero the padding, which between two rows is one
 * contiguous gap (right edge of a row + left edge of the next). */
static void im2col_same(const conv_ctx *c, const float *restrict xp, float *restrict dst,
                        int64_t ki, int64_t kj, int64_t ow0, int64_t ow1)
{
    int64_t W = c->W, oh0 = ki < c->pad ? c->pad - ki : 0;
    int64_t oh1 = c->H + c->pad - ki < c->OH ? c->H + c->pad - ki : c->OH;
    if (oh0 >= oh1 || ow0 == ow1) {
        memset(dst, 0, (size_t)(c->OH * W) * sizeof(float));
        return;
    }
    int64_t first = oh0 * W + ow0, last = (oh1 - 1) * W + ow1;
    memset(dst, 0, (size_t)first * sizeof(float));
    memcpy(dst + first, xp + first + (ki - c->pad) * W + (kj - c->pad),
           (size_t)(last - first) * sizeof(float));
    memset(dst + last, 0, (size_t)(c->OH * W - last) * sizeof(float));
    for (int64_t oh = oh0; oh + 1 < oh1; oh++)
        for (int64_t j = oh * W + ow1; j < (oh + 1) * W + ow0; j++)
            dst[j] = 0.0f;
}

/* One image plane into its OH*OW segment of col row (ki, kj); [ow0, ow1) its valid
 * outputs (col_spans). */
static void im2col_plane(const conv_ctx *c, const float *restrict xp, float *restrict dst,
                         int64_t ki, int64_t kj, int64_t ow0, int64_t ow1)
{
    int64_t s = c->s;
    if (s == 1 && c->OW == c->W) {
        im2col_same(c, xp, dst, ki, kj, ow0, ow1);
        return;
    }
    for (int64_t oh = 0; oh < c->OH; oh++, dst += c->OW) {
        int64_t ih = oh * s - c->pad + ki;
        if (ih < 0 || ih >= c->H || ow0 == ow1) {
            memset(dst, 0, (size_t)c->OW * sizeof(float));
            continue;
        }
        for (int64_t ow = 0; ow < ow0; ow++)
            dst[ow] = 0.0f;
        for (int64_t ow = ow1; ow < c->OW; ow++)
            dst[ow] = 0.0f;
        copy_strided(dst + ow0, xp + ih * c->W + ow0 * s - c->pad + kj, ow1 - ow0, s);
    }
}

/* An image plane whose zero-padded copy fits IM2COL_PAD floats: the copy once, then
 * each of the k*k col rows' segments as OH row copies out of it (no bounds, no
 * memsets: the small planes of a CNN's later stages pay per call, not per value). */
#define IM2COL_PAD 8192

static int im2col_pads(const conv_ctx *c)
{
    return (c->H + 2 * c->pad) * (c->W + 2 * c->pad) <= IM2COL_PAD;
}

static void im2col_padded(const conv_ctx *c, const float *restrict xp, float *restrict dst,
                          int64_t rowstride)
{
    float pad[IM2COL_PAD];
    int64_t p = c->pad, PW = c->W + 2 * p, PH = c->H + 2 * p;
    memset(pad, 0, (size_t)(p * PW) * sizeof(float));
    for (int64_t h = 0; h < c->H; h++) {
        float *r = pad + (h + p) * PW;
        for (int64_t j = 0; j < p; j++)
            r[j] = r[p + c->W + j] = 0.0f;
        copy_strided(r + p, xp + h * c->W, c->W, 1);
    }
    memset(pad + (p + c->H) * PW, 0, (size_t)((PH - p - c->H) * PW) * sizeof(float));
    for (int64_t ki = 0; ki < c->k; ki++)
        for (int64_t kj = 0; kj < c->k; kj++, dst += rowstride) {
            float *d = dst;
            for (int64_t oh = 0; oh < c->OH; oh++, d += c->OW)
                copy_strided(d, pad + (oh * c->s + ki) * PW + kj, c->OW, c->s);
        }
}

/* Task t = ch * B + b: the k*k col rows' segments of image plane (b, ch), from its
 * padded copy (im2col_padded) or segment by segment. */
static void im2col_task(void *ctx, int64_t lo, int64_t hi)
{
    const conv_ctx *c = ctx;
    int64_t k = c->k, kk = k * k, ohw = c->OH * c->OW, hw = c->H * c->W, n = c->B * ohw;
    int pads = im2col_pads(c);
    col_spans sp;
    spans_of(c, &sp);
    for (int64_t t = lo; t < hi; t++) {
        int64_t b = t % c->B, ch = t / c->B;
        const float *xp = c->x + (b * c->C + ch) * hw;
        float *dst = c->col + ch * kk * n + b * ohw;
        if (pads) {
            im2col_padded(c, xp, dst, n);
            continue;
        }
        for (int64_t ki = 0; ki < k; ki++)
            for (int64_t kj = 0; kj < k; kj++) {
                int64_t o0, o1;
                if (kj < IM2COL_KMAX) {
                    o0 = sp.ow0[kj];
                    o1 = sp.ow1[kj];
                } else {
                    valid_cols(c, kj, &o0, &o1);
                }
                im2col_plane(c, xp, dst + (ki * k + kj) * n, ki, kj, o0, o1);
            }
    }
}

void rt_im2col(rt_exec *e, const float *x, float *col, int64_t B, int64_t C, int64_t H,
               int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->im2col(e, x, col, B, C, H, W, k, stride, pad, OH, OW);
        return;
    }
    conv_ctx c = {x, col, NULL, NULL, B, C, H, W, k, stride, pad, OH, OW};
    launch(pool_of(e), C * B, rt_grain_for(k * k * OH * OW), im2col_task, &c);
}

/* im2col of B images on the calling thread (runtime/conv.c's tasks) */
void rt_im2col_serial(const float *x, float *col, int64_t B, int64_t C, int64_t H, int64_t W,
                      int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    conv_ctx c = {x, col, NULL, NULL, B, C, H, W, k, stride, pad, OH, OW};
    im2col_task(&c, 0, C * B);
}

/* col2im for one image plane and one kernel offset: dp += the (ki, kj) segment src. */
static void col2im_plane(const conv_ctx *c, const float *restrict src, float *restrict dp,
                         int64_t ki, int64_t kj)
{
    int64_t ow0, ow1, s = c->s;
    valid_cols(c, kj, &ow0, &ow1);
    if (ow0 == ow1)
        return;
    for (int64_t oh = 0; oh < c->OH; oh++) {
        int64_t ih = oh * s - c->pad + ki;
        if (ih < 0 || ih >= c->H)
            continue;
        float *restrict d = dp + ih * c->W + ow0 * s - c->pad + kj;
        const float *restrict sr = src + oh * c->OW + ow0;
        int64_t n = ow1 - ow0, j = 0;
        if (s == 1) {
            for (; j + 4 <= n; j += 4)
                st4(d + j, ld4(d + j) + ld4(sr + j));
            for (; j < n; j++)
                d[j] += sr[j];
        } else {
            for (; j < n; j++)
                d[j * s] += sr[j];
        }
    }
}

/* Task t = ch * B + b owns dx plane (b, ch): no two tasks write the same element, and
 * each element sums its contributions in the fixed (ki, kj, oh) order. A run of tasks
 * reads k*k col rows as long streams. */
/* col2im into a zero-padded plane (im2col_pads), the k*k segments added in the same
 * (ki, kj, oh) order as col2im_plane adds them, then the plane's inside copied out: the
 * same bits without a bounds check per segment. */
static void col2im_padded(const conv_ctx *c, const float *restrict src, float *restrict dp,
                          int64_t rowstride)
{
    float pad[IM2COL_PAD];
    int64_t p = c->pad, PW = c->W + 2 * p, s = c->s;
    memset(pad, 0, (size_t)((c->H + 2 * p) * PW) * sizeof(float));
    for (int64_t ki = 0; ki < c->k; ki++)
        for (int64_t kj = 0; kj < c->k; kj++, src += rowstride) {
            const float *restrict sr = src;
            for (int64_t oh = 0; oh < c->OH; oh++, sr += c->OW) {
                float *restrict d = pad + (oh * s + ki) * PW + kj;
                int64_t j = 0;
                if (s == 1)
                    for (; j + 4 <= c->OW; j += 4)
                        st4(d + j, ld4(d + j) + ld4(sr + j));
                for (; j < c->OW; j++)
                    d[j * s] += sr[j];
            }
        }
    for (int64_t h = 0; h < c->H; h++)
        copy_strided(dp + h * c->W, pad + (h + p) * PW + p, c->W, 1);
}

static void col2im_task(void *ctx, int64_t lo, int64_t hi)
{
    const conv_ctx *c = ctx;
    int64_t kk = c->k * c->k, ohw = c->OH * c->OW, hw = c->H * c->W, n = c->B * ohw;
    int pads = im2col_pads(c);
    for (int64_t t = lo; t < hi; t++) {
        int64_t b = t % c->B, ch = t / c->B;
        float *dp = c->dx + (b * c->C + ch) * hw;
        const float *src = c->dcol + ch * kk * n + b * ohw;
        if (pads) {
            col2im_padded(c, src, dp, n);
            continue;
        }
        memset(dp, 0, (size_t)hw * sizeof(float));
        for (int64_t kidx = 0; kidx < kk; kidx++)
            col2im_plane(c, src + kidx * n, dp, kidx / c->k, kidx % c->k);
    }
}

/* col2im of B images on the calling thread (runtime/conv.c's tasks) */
void rt_col2im_serial(const float *dcol, float *dx, int64_t B, int64_t C, int64_t H, int64_t W,
                      int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    conv_ctx c = {NULL, NULL, dcol, dx, B, C, H, W, k, stride, pad, OH, OW};
    col2im_task(&c, 0, C * B);
}

void rt_col2im(rt_exec *e, const float *dcol, float *dx, int64_t B, int64_t C, int64_t H,
               int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->col2im(e, dcol, dx, B, C, H, W, k, stride, pad, OH, OW);
        return;
    }
    conv_ctx c = {NULL, NULL, dcol, dx, B, C, H, W, k, stride, pad, OH, OW};
    launch(pool_of(e), C * B, rt_grain_for(k * k * OH * OW), col2im_task, &c);
}

/* ---- pooling ----------------------------------------------------------------- */

typedef struct {
    const float *x, *dy;       /* [planes, H, W], [planes, OH, OW] */
    float *y, *dx;
    int64_t H, W, k, s, OH, OW;
} pool_ctx;

/* The window's maximum and the offset of PyTorch's argmax in the plane: scanned in
 * row-major order from -inf, replaced when a value is greater or NaN (so NaN wins, and
 * among equal maxima the first one stays). */
static inline int64_t window_max(const float *restrict xp, int64_t W, int64_t k,
                                 int64_t ih0, int64_t iw0, float *maxv)
{
    float m = -INFINITY;
    int64_t idx = ih0 * W + iw0;
    for (int64_t ki = 0; ki < k; ki++) {
        const float *restrict row = xp + (ih0 + ki) * W;
        for (int64_t kj = 0; kj < k; kj++) {
            float v = row[iw0 + kj];
            if (v > m || isnan(v)) {
                m = v;
                idx = (ih0 + ki) * W + iw0 + kj;
            }
        }
    }
    *maxv = m;
    return idx;
}

static void maxpool_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict xp = c->x + pl * c->H * c->W;
        float *restrict yp = c->y + pl * c->OH * c->OW;
        if (c->k == 2 && c->s == 2) {
            /* The common 2x2/2 case, unrolled; same order and NaN rule as window_max. */
            for (int64_t oh = 0; oh < c->OH; oh++) {
                const float *restrict r0 = xp + 2 * oh * c->W, *restrict r1 = r0 + c->W;
                for (int64_t ow = 0; ow < c->OW; ow++) {
                    float m = r0[2 * ow], v;
                    v = r0[2 * ow + 1];
                    if (v > m || isnan(v)) m = v;
                    v = r1[2 * ow];
                    if (v > m || isnan(v)) m = v;
                    v = r1[2 * ow + 1];
                    if (v > m || isnan(v)) m = v;
                    *yp++ = m;
                }
            }
            continue;
        }
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++)
                window_max(xp, c->W, c->k, oh * c->s, ow * c->s, yp++);
    }
}

static void maxpool_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict xp = c->x + pl * c->H * c->W;
        const float *restrict dyp = c->dy + pl * c->OH * c->OW;
        float *restrict dxp = c->dx + pl * c->H * c->W;
        if (c->k == 2 && c->s == 2) {
            /* The windows do not overlap: every element of dx is written once (the
             * window's first maximum gets dy, the other three 0; rows and columns no
             * window covers, of an odd H or W, 0), no memset and no read-modify-write.
             * dy + 0.0f is the general path's 0 + dy (a -0 becomes +0): the same bits. */
            const int64_t W = c->W;
            for (int64_t oh = 0; oh < c->OH; oh++) {
                const float *restrict r0 = xp + 2 * oh * W, *restrict r1 = r0 + W;
                float *restrict d0 = dxp + 2 * oh * W, *restrict d1 = d0 + W;
                int64_t ow = 0;
                /* four windows at a time, without branches (the argmax of random data
                 * mispredicts): the same comparisons in the same order as below */
                for (; ow + 4 <= c->OW; ow += 4) {
                    v4f a = ld4(r0 + 2 * ow), b = ld4(r0 + 2 * ow + 4);
                    v4f x0 = __builtin_shufflevector(a, b, 0, 2, 4, 6);
                    v4f x1 = __builtin_shufflevector(a, b, 1, 3, 5, 7);
                    a = ld4(r1 + 2 * ow), b = ld4(r1 + 2 * ow + 4);
                    v4f x2 = __builtin_shufflevector(a, b, 0, 2, 4, 6);
                    v4f x3 = __builtin_shufflevector(a, b, 1, 3, 5, 7);
                    v4f m = x0;
                    v4i t1 = (x1 > m) | (x1 != x1);
                    m = (v4f)(((v4i)x1 & t1) | ((v4i)m & ~t1));
                    v4i t2 = (x2 > m) | (x2 != x2);
                    m = (v4f)(((v4i)x2 & t2) | ((v4i)m & ~t2));
                    v4i t3 = (x3 > m) | (x3 != x3);
                    /* the window's pick: 3 if t3, else 2 if t2, else 1 if t1, else 0 */
                    v4i p3 = t3, p2 = t2 & ~t3, p1 = t1 & ~t2 & ~t3, p0 = ~(t1 | t2 | t3);
                    v4i g = (v4i)(ld4(dyp + ow) + splat4(0.0f));
                    v4f g0 = (v4f)(g & p0), g1 = (v4f)(g & p1), g2 = (v4f)(g & p2), g3 = (v4f)(g & p3);
                    v4f lo = __builtin_shufflevector(g0, g1, 0, 4, 1, 5);
                    v4f hi = __builtin_shufflevector(g0, g1, 2, 6, 3, 7);
                    memcpy(d0 + 2 * ow, &lo, sizeof lo);
                    memcpy(d0 + 2 * ow + 4, &hi, sizeof hi);
                    lo = __builtin_shufflevector(g2, g3, 0, 4, 1, 5);
                    hi = __builtin_shufflevector(g2, g3, 2, 6, 3, 7);
                    memcpy(d1 + 2 * ow, &lo, sizeof lo);
                    memcpy(d1 + 2 * ow + 4, &hi, sizeof hi);
                }
                for (; ow < c->OW; ow++) {
                    float m = r0[2 * ow], v;
                    int a = 0;
                    v = r0[2 * ow + 1];
                    if (v > m || isnan(v)) m = v, a = 1;
                    v = r1[2 * ow];
                    if (v > m || isnan(v)) m = v, a = 2;
                    v = r1[2 * ow + 1];
                    if (v > m || isnan(v)) a = 3;
                    const float g = dyp[ow] + 0.0f;
                    d0[2 * ow] = a == 0 ? g : 0.0f;
                    d0[2 * ow + 1] = a == 1 ? g : 0.0f;
                    d1[2 * ow] = a == 2 ? g : 0.0f;
                    d1[2 * ow + 1] = a == 3 ? g : 0.0f;
                }
                for (int64_t j = 2 * c->OW; j < W; j++)
                    d0[j] = d1[j] = 0.0f;
                dyp += c->OW;
            }
            if (2 * c->OH < c->H)
                memset(dxp + 2 * c->OH * W, 0, (size_t)((c->H - 2 * c->OH) * W) * sizeof(float));
            continue;
        }
        memset(dxp, 0, (size_t)(c->H * c->W) * sizeof(float));
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                float m;
                dxp[window_max(xp, c->W, c->k, oh * c->s, ow * c->s, &m)] += *dyp++;
            }
    }
}

void rt_maxpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->maxpool2d_fwd(e, x, y, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {x, NULL, y, NULL, H, W, k, s, OH, OW};
    launch(pool_of(e), planes, rt_grain_for(OH * OW * k * k), maxpool_fwd_task, &c);
}

void rt_maxpool2d_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t planes,
                      int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->maxpool2d_bwd(e, x, dy, dx, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {x, dy, NULL, dx, H, W, k, s, OH, OW};
    launch(pool_of(e), planes, rt_grain_for(OH * OW * k * k + H * W), maxpool_bwd_task, &c);
}

static void avgpool_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    /* PyTorch divides the float sum by the window size (no reciprocal), so do we. */
    float div = (float)(c->k * c->k);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict xp = c->x + pl * c->H * c->W;
        float *restrict yp = c->y + pl * c->OH * c->OW;
        if (c->k == 2 && c->s == 2) {
            /* same sum order as below; x / 4 == x * 0.25 exactly */
            for (int64_t oh = 0; oh < c->OH; oh++) {
                const float *restrict r0 = xp + 2 * oh * c->W, *restrict r1 = r0 + c->W;
                for (int64_t ow = 0; ow < c->OW; ow++)
                    *yp++ = ((((0.0f + r0[2 * ow]) + r0[2 * ow + 1]) + r1[2 * ow]) +
                             r1[2 * ow + 1]) * 0.25f;
            }
            continue;
        }
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                const float *restrict win = xp + oh * c->s * c->W + ow * c->s;
                float sum = 0.0f;
                for (int64_t ki = 0; ki < c->k; ki++, win += c->W)
                    for (int64_t kj = 0; kj < c->k; kj++)
                        sum += win[kj];
                *yp++ = sum / div;
            }
    }
}

static void avgpool_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const pool_ctx *c = ctx;
    float div = (float)(c->k * c->k);
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *restrict dyp = c->dy + pl * c->OH * c->OW;
        float *restrict dxp = c->dx + pl * c->H * c->W;
        memset(dxp, 0, (size_t)(c->H * c->W) * sizeof(float));
        if (c->k == 2 && c->s == 2) {
            /* windows do not overlap: each covered dx is 0 + dy / 4 */
            for (int64_t oh = 0; oh < c->OH; oh++) {
                float *restrict r0 = dxp + 2 * oh * c->W, *restrict r1 = r0 + c->W;
                for (int64_t ow = 0; ow < c->OW; ow++) {
                    float g = 0.0f + *dyp++ * 0.25f;
                    r0[2 * ow] = r0[2 * ow + 1] = r1[2 * ow] = r1[2 * ow + 1] = g;
                }
            }
            continue;
        }
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                float g = *dyp++ / div;
                float *restrict win = dxp + oh * c->s * c->W + ow * c->s;
                for (int64_t ki = 0; ki < c->k; ki++, win += c->W)
                    for (int64_t kj = 0; kj < c->k; kj++)
                        win[kj] += g;
            }
    }
}

void rt_avgpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->avgpool2d_fwd(e, x, y, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {x, NULL, y, NULL, H, W, k, s, OH, OW};
    launch(pool_of(e), planes, rt_grain_for(OH * OW * k * k), avgpool_fwd_task, &c);
}

void rt_avgpool2d_bwd(rt_exec *e, const float *dy, float *dx, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->avgpool2d_bwd(e, dy, dx, planes, H, W, k, s, OH, OW);
        return;
    }
    pool_ctx c = {NULL, dy, NULL, dx, H, W, k, s, OH, OW};
    launch(pool_of(e), planes, rt_grain_for(OH * OW * k * k + H * W), avgpool_bwd_task, &c);
}

/* ---- LayerNorm ----------------------------------------------------------------- */

typedef struct {
    const float *x, *w, *b, *dy;   /* [rows, d], [d] or NULL (1s), [d] or NULL (0s), [rows, d] */
    const float *add;              /* bwd: [rows, d] added to dx, or NULL; may be dx */
    float *y, *dx;                 /* [rows, d] */
    float *mean, *rstd;            /* [rows] */
    float *dw, *db;                /* [d], or NULL: none (a layernorm without them) */
    double *part;                  /* bwd: [nrb, 2, d] partial dw, db */
    int64_t rows, d, rb, nrb;
    float eps;
} ln_ctx;

/* A layernorm's weight at [j, j + 4) (ones without one) and bias (zeros without one):
 * times 1 and plus 0 leave the values as they were */
static inline v4f ln_w4(const float *w, int64_t j) { return w ? ld4(w + j) : splat4(1.0f); }
static inline v4f ln_b4(const float *b, int64_t j) { return b ? ld4(b + j) : splat4(0.0f); }
static inline float ln_w1(const float *w, int64_t j) { return w ? w[j] : 1.0f; }
static inline float ln_b1(const float *b, int64_t j) { return b ? b[j] : 0.0f; }

static void ln_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const ln_ctx *c = ctx;
    int64_t d = c->d;
    const float *restrict w = c->w, *restrict b = c->b;
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict x = c->x + r * d;
        float *restrict y = c->y + r * d;
        /* Two passes in double: mean, then the biased variance around it. */
        double mu = sum_f64(x, d) / (double)d;
        double var = sqdev_f64(x, d, mu) / (double)d;
        float m = (float)mu, rs = (float)(1.0 / sqrt(var + (double)c->eps));
        c->mean[r] = m;
        c->rstd[r] = rs;
        v4f mv = splat4(m), rv = splat4(rs);
        int64_t j = 0;
        for (; j + 4 <= d; j += 4)
            st4(y + j, (ld4(x + j) - mv) * rv * ln_w4(w, j) + ln_b4(b, j));
        for (; j < d; j++)
            y[j] = (x[j] - m) * rs * ln_w1(w, j) + ln_b1(b, j);
    }
}

void rt_layernorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                      float *mean, float *rstd, int64_t rows, int64_t d, float eps)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->layernorm_fwd(e, x, w, b, y, mean, rstd, rows, d, eps);
        return;
    }
    ln_ctx c = {.x = x, .w = w, .b = b, .y = y, .mean = mean, .rstd = rstd, .rows = rows,
                .d = d, .eps = eps};
    if (d <= 0)
        return;
    launch(pool_of(e), rows, rt_grain_for(4 * d), ln_fwd_task, &c);
}

/* Task t owns rows [t*rb, (t+1)*rb): it writes their dx and its partial dw, db sums,
 * part[t] (ln_reduce_task adds the partials up). */
static void ln_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const ln_ctx *c = ctx;
    int64_t d = c->d;
    const float *restrict w = c->w;
    for (int64_t t = lo; t < hi; t++) {
        double *restrict pw = c->part + t * 2 * d, *restrict pb = pw + d;
        for (int64_t j = 0; j < 2 * d; j++)
            pw[j] = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++) {
            const float *restrict x = c->x + r * d, *restrict dy = c->dy + r * d;
            /* not restrict: the addend may be dx itself (read, then written) */
            const float *add = c->add ? c->add + r * d : NULL;
            float *dx = c->dx + r * d;
            float m = c->mean[r], rs = c->rstd[r];
            /* dxhat = dy * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat*xhat)).
             * Sums in double, four lanes then the tail. */
            v4f mv = splat4(m), rv = splat4(rs);
            d4 s1v = {{0, 0}, {0, 0}}, s2v = s1v;
            int64_t j = 0;
            for (; j + 4 <= d; j += 4) {
                d4 xh = cvt4((ld4(x + j) - mv) * rv);
                d4 gd = cvt4(ld4(dy + j) * ln_w4(w, j)), dyd = cvt4(ld4(dy + j));
                s1v = add4d(s1v, gd);
                s2v = add4d(s2v, mul4d(gd, xh));
                st4d(pw + j, add4d(ld4d(pw + j), mul4d(dyd, xh)));
                st4d(pb + j, add4d(ld4d(pb + j), dyd));
            }
            double s1 = hsum4d(s1v), s2 = hsum4d(s2v);
            for (; j < d; j++) {
                float xh = (x[j] - m) * rs, g = dy[j] * ln_w1(w, j);
                s1 += g;
                s2 += (double)g * xh;
                pw[j] += (double)dy[j] * xh;
                pb[j] += dy[j];
            }
            float a = (float)(s1 / (double)d), bb = (float)(s2 / (double)d);
            v4f av = splat4(a), bv = splat4(bb);
            /* with an addend, each element's sum is one more float add (the loop's) */
            for (j = 0; j + 4 <= d; j += 4) {
                v4f xh = (ld4(x + j) - mv) * rv;
                v4f g = rv * (ld4(dy + j) * ln_w4(w, j) - av - xh * bv);
                st4(dx + j, add ? g + ld4(add + j) : g);
            }
            for (; j < d; j++) {
                float xh = (x[j] - m) * rs;
                float g = rs * (dy[j] * ln_w1(w, j) - a - xh * bb);
                dx[j] = add ? g + add[j] : g;
            }
        }
    }
}

/* Column j of dw, db: the partials added in task order. */
static void ln_reduce_task(void *ctx, int64_t lo, int64_t hi)
{
    const ln_ctx *c = ctx;
    int64_t d = c->d;
    for (int64_t j = lo; j < hi; j++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t t = 0; t < c->nrb; t++) {
            sw += c->part[t * 2 * d + j];
            sb += c->part[t * 2 * d + d + j];
        }
        if (c->dw)
            c->dw[j] += (float)sw;
        if (c->db)
            c->db[j] += (float)sb;
    }
}

/* The row blocks of a norm's backward over [rows, d]: about 32K elements each, at most
 * 64 (partials: 64 * 2d doubles), *rb rows a block; their number. They depend on the
 * shape only, so the weight gradients do not depend on the thread count. */
static int64_t norm_row_blocks(int64_t rows, int64_t d, int64_t *rb)
{
    int64_t nrb = rows * d / 32768;
    nrb = nrb > 64 ? 64 : nrb < 1 ? 1 : nrb;
    *rb = ceil_div(rows, nrb);
    return ceil_div(rows, *rb);
}

void rt_layernorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                      const float *rstd, const float *dy, const float *add, float *dx,
                      float *dw, float *db, int64_t rows, int64_t d)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->layernorm_bwd(e, x, w, mean, rstd, dy, add, dx, dw, db, rows, d);
        return;
    }
    if (rows <= 0 || d <= 0)
        return;
    rt_pool *p = pool_of(e);
    ln_ctx c = {.x = x, .w = w, .dy = dy, .add = add, .dx = dx, .mean = (float *)mean,
                .rstd = (float *)rstd, .dw = dw, .db = db, .rows = rows, .d = d};
    c.nrb = norm_row_blocks(rows, d, &c.rb);
    c.part = rt_pool_scratch(p, (size_t)(c.nrb * 2 * d));
    launch(p, c.nrb, 1, ln_bwd_task, &c);
    if (dw || db)
        launch(p, d, rt_grain_for(2 * c.nrb), ln_reduce_task, &c);
}

/* ---- RMSNorm ------------------------------------------------------------------- */

typedef struct {
    const float *x, *w, *dy;       /* [rows, d], [d], [rows, d] */
    const float *add;              /* bwd: [rows, d] added to dx, or NULL; may be dx */
    float *y, *dx;                 /* [rows, d] */
    float *rstd;                   /* [rows] */
    float *dw;                     /* [d] */
    double *part;                  /* bwd: [nrb, d] partial dw */
    int64_t rows, d, rb, nrb;
    float eps;
} rms_ctx;

/* One row x [d] normalized into y [d] (y may be x); returns its 1/rms. */
static float rms_row(const float *x, const float *restrict w, float *y, int64_t d, float eps)
{
    /* the mean square in double (HF's is fp32: within its rounding) */
    double ms = sqdev_f64(x, d, 0.0) / (double)d;
    float rs = (float)(1.0 / sqrt(ms + (double)eps));
    v4f rv = splat4(rs);
    int64_t j = 0;
    for (; j + 4 <= d; j += 4)
        st4(y + j, ld4(x + j) * rv * ld4(w + j));
    for (; j < d; j++)
        y[j] = x[j] * rs * w[j];
    return rs;
}

static void rms_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const rms_ctx *c = ctx;
    for (int64_t r = lo; r < hi; r++)
        c->rstd[r] = rms_row(c->x + r * c->d, c->w, c->y + r * c->d, c->d, c->eps);
}

void rt_rmsnorm_fwd(rt_exec *e, const float *x, const float *w, float *y, float *rstd,
                    int64_t rows, int64_t d, float eps)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->rmsnorm_fwd(e, x, w, y, rstd, rows, d, eps);
        return;
    }
    rms_ctx c = {.x = x, .w = w, .y = y, .rstd = rstd, .rows = rows, .d = d, .eps = eps};
    if (d <= 0)
        return;
    launch(pool_of(e), rows, rt_grain_for(3 * d), rms_fwd_task, &c);
}

/* One row's dx [d] (+ add, which may be dx: not restrict), its dw terms added to pw [d]:
 * g = dy * w, xh = x * rstd; dx = rstd * (g - xh * mean(g * xh)). */
static void rms_row_bwd(const float *restrict x, const float *restrict w, float rs,
                        const float *restrict dy, const float *add, float *dx,
                        double *restrict pw, int64_t d)
{
    v4f rv = splat4(rs);
    d4 sv = {{0, 0}, {0, 0}};
    int64_t j = 0;
    for (; j + 4 <= d; j += 4) {
        d4 xh = cvt4(ld4(x + j) * rv);
        sv = add4d(sv, mul4d(cvt4(ld4(dy + j) * ld4(w + j)), xh));
        st4d(pw + j, add4d(ld4d(pw + j), mul4d(cvt4(ld4(dy + j)), xh)));
    }
    double s = hsum4d(sv);
    for (; j < d; j++) {
        float xh = x[j] * rs;
        s += (double)(dy[j] * w[j]) * xh;
        pw[j] += (double)dy[j] * xh;
    }
    float m = (float)(s / (double)d);
    v4f mv = splat4(m);
    for (j = 0; j + 4 <= d; j += 4) {
        v4f g = rv * (ld4(dy + j) * ld4(w + j) - ld4(x + j) * rv * mv);
        st4(dx + j, add ? g + ld4(add + j) : g);
    }
    for (; j < d; j++) {
        float g = rs * (dy[j] * w[j] - x[j] * rs * m);
        dx[j] = add ? g + add[j] : g;
    }
}

/* Task t owns rows [t*rb, (t+1)*rb): their dx and its partial dw sums, part[t]. */
static void rms_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const rms_ctx *c = ctx;
    int64_t d = c->d;
    for (int64_t t = lo; t < hi; t++) {
        double *restrict pw = c->part + t * d;
        for (int64_t j = 0; j < d; j++)
            pw[j] = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++)
            rms_row_bwd(c->x + r * d, c->w, c->rstd[r], c->dy + r * d,
                        c->add ? c->add + r * d : NULL, c->dx + r * d, pw, d);
    }
}

/* Column j of dw: the partials added in task order. */
static void rms_reduce_task(void *ctx, int64_t lo, int64_t hi)
{
    const rms_ctx *c = ctx;
    for (int64_t j = lo; j < hi; j++) {
        double sw = 0.0;
        for (int64_t t = 0; t < c->nrb; t++)
            sw += c->part[t * c->d + j];
        c->dw[j] += (float)sw;
    }
}

void rt_rmsnorm_bwd(rt_exec *e, const float *x, const float *w, const float *rstd,
                    const float *dy, const float *add, float *dx, float *dw, int64_t rows,
                    int64_t d)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->rmsnorm_bwd(e, x, w, rstd, dy, add, dx, dw, rows, d);
        return;
    }
    if (rows <= 0 || d <= 0)
        return;
    rt_pool *p = pool_of(e);
    rms_ctx c = {.x = x, .w = w, .dy = dy, .add = add, .dx = dx, .rstd = (float *)rstd,
                 .dw = dw, .rows = rows, .d = d};
    c.nrb = norm_row_blocks(rows, d, &c.rb);
    c.part = rt_pool_scratch(p, (size_t)(c.nrb * d));
    launch(p, c.nrb, 1, rms_bwd_task, &c);
    launch(p, d, rt_grain_for(c.nrb), rms_reduce_task, &c);
}

/* ---- qk_norm over all heads (OLMo 2's): rmsnorm's rows on q's and k's columns ----- */

typedef struct {
    const float *x, *wq, *wk, *dy;   /* [rows, w], [dq], [dk], [rows, w]; w = dq + dk + dv */
    float *y, *dx;                   /* [rows, w] */
    float *rstd;                     /* [rows, 2]: q's, then k's */
    float *dwq, *dwk;                /* [dq], [dk] (either NULL: not wanted) */
    double *part;                    /* bwd: [nrb, dq + dk] partial sums of dwq, then dwk */
    int64_t rows, dq, dk, dv, rb, nrb;
    float eps;
} qkn_ctx;

static void qkn_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const qkn_ctx *c = ctx;
    int64_t w = c->dq + c->dk + c->dv;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = c->x + r * w;
        float *y = c->y + r * w;
        c->rstd[2 * r] = rms_row(x, c->wq, y, c->dq, c->eps);
        c->rstd[2 * r + 1] = rms_row(x + c->dq, c->wk, y + c->dq, c->dk, c->eps);
        if (y != x)
            memcpy(y + c->dq + c->dk, x + c->dq + c->dk, (size_t)c->dv * sizeof *y);
    }
}

void rt_qk_norm_fwd(rt_exec *e, const float *x, const float *wq, const float *wk, float *y,
                    float *rstd, int64_t rows, int64_t dq, int64_t dk, int64_t dv, float eps)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->qk_norm_fwd(e, x, wq, wk, y, rstd, rows, dq, dk, dv, eps);
        return;
    }
    qkn_ctx c = {.x = x, .wq = wq, .wk = wk, .y = y, .rstd = rstd, .rows = rows, .dq = dq,
                 .dk = dk, .dv = dv, .eps = eps};
    launch(pool_of(e), rows, rt_grain_for(3 * (dq + dk + dv)), qkn_fwd_task, &c);
}

/* Task t owns rows [t*rb, (t+1)*rb): their dx and the partial sums part[t]. */
static void qkn_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const qkn_ctx *c = ctx;
    int64_t dq = c->dq, dk = c->dk, w = dq + dk + c->dv;
    for (int64_t t = lo; t < hi; t++) {
        double *restrict pw = c->part + t * (dq + dk);
        for (int64_t j = 0; j < dq + dk; j++)
            pw[j] = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++) {
            const float *x = c->x + r * w, *dy = c->dy + r * w;
            float *dx = c->dx + r * w;
            rms_row_bwd(x, c->wq, c->rstd[2 * r], dy, NULL, dx, pw, dq);
            rms_row_bwd(x + dq, c->wk, c->rstd[2 * r + 1], dy + dq, NULL, dx + dq, pw + dq, dk);
            memcpy(dx + dq + dk, dy + dq + dk, (size_t)c->dv * sizeof *dx);
        }
    }
}

/* Column j of dwq, then dwk: the partials added in task order. */
static void qkn_reduce_task(void *ctx, int64_t lo, int64_t hi)
{
    const qkn_ctx *c = ctx;
    for (int64_t j = lo; j < hi; j++) {
        float *dw = j < c->dq ? c->dwq + j : c->dwk + (j - c->dq);
        double sw = 0.0;
        for (int64_t t = 0; t < c->nrb; t++)
            sw += c->part[t * (c->dq + c->dk) + j];
        *dw += (float)sw;
    }
}

void rt_qk_norm_bwd(rt_exec *e, const float *x, const float *wq, const float *wk,
                    const float *rstd, const float *dy, float *dx, float *dwq, float *dwk,
                    int64_t rows, int64_t dq, int64_t dk, int64_t dv)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->qk_norm_bwd(e, x, wq, wk, rstd, dy, dx, dwq, dwk, rows, dq, dk, dv);
        return;
    }
    if (rows <= 0)
        return;
    rt_pool *p = pool_of(e);
    qkn_ctx c = {.x = x, .wq = wq, .wk = wk, .rstd = (float *)rstd, .dy = dy, .dx = dx,
                 .dwq = dwq, .dwk = dwk, .rows = rows, .dq = dq, .dk = dk, .dv = dv};
    c.nrb = norm_row_blocks(rows, dq + dk, &c.rb);
    c.part = rt_pool_scratch(p, (size_t)(c.nrb * (dq + dk)));
    launch(p, c.nrb, 1, qkn_bwd_task, &c);
    if (dwq && dwk)   /* both or neither: a frozen layer's are not wanted */
        launch(p, dq + dk, rt_grain_for(c.nrb), qkn_reduce_task, &c);
}

/* ---- gated linear unit --------------------------------------------------------- */

typedef struct {
    const float *x, *dy;   /* [rows, 2h], [rows, h] */
    float *y, *dx;         /* [rows, h], [rows, 2h] */
    int64_t h;
    int act;               /* RT_GLU_* */
} glu_ctx;

static inline float glu_act(int act, float a)
{
    switch (act) {
    case RT_GLU_SILU: return rt_silu(a);
    case RT_GLU_GELU: return rt_gelu(a);
    case RT_GLU_GELU_TANH: return rt_gelu_tanh(a);
    case RT_GLU_SIGMOID: return rt_sigmoidf(a);
    default: return a < 0.0f ? 0.0f : a;   /* NaN stays NaN, as torch.relu */
    }
}

/* d act(a) times g (the activation's backward as the elementwise ops have it), and
 * act(a) in *y, from one evaluation of the activation's exp, erf or tanh: the bits of
 * trainc_rt.h's rt_silu_bwd, rt_gelu_bwd, rt_gelu_tanh_bwd and of glu_act. */
static inline float glu_act_bwd(int act, float a, float g, float *y)
{
    switch (act) {
    case RT_GLU_SILU: {
        float d = 1.0f + rt_expf(-a), s = 1.0f / d;
        *y = a / d;
        return g * s * (1.0f + a * (1.0f - s));
    }
    case RT_GLU_GELU: {
        float t = 1.0f + erff(a * 0.70710678118654752f);
        float pdf = expf(-0.5f * a * a) * 0.39894228040143268f;
        *y = 0.5f * a * t;
        return g * (0.5f * t + a * pdf);
    }
    case RT_GLU_GELU_TANH: {
        float t = rt_tanhf(0.79788456080286536f * (a + 0.044715f * a * a * a));
        float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * a * a);
        *y = 0.5f * a * (1.0f + t);
        return g * (0.5f * (1.0f + t) + 0.5f * a * (1.0f - t * t) * du);
    }
    case RT_GLU_SIGMOID: {
        float s = rt_sigmoidf(a);
        *y = s;
        return g * s * (1.0f - s);
    }
    default:
        *y = a < 0.0f ? 0.0f : a;
        return a <= 0.0f ? 0.0f : g;   /* torch's threshold_backward */
    }
}

/* One row of h outputs; act a constant where the caller passes one, so the silu row's
 * loop vectorizes (rt_expf is plain arithmetic) */
static inline __attribute__((always_inline)) void
glu_fwd_row(int act, const float *restrict a, const float *restrict u, float *restrict y,
            int64_t h)
{
    for (int64_t j = 0; j < h; j++)
        y[j] = glu_act(act, a[j]) * u[j];
}

static inline __attribute__((always_inline)) void
glu_bwd_row(int act, const float *restrict a, const float *restrict u,
            const float *restrict dy, float *restrict da, float *restrict du, int64_t h)
{
    for (int64_t j = 0; j < h; j++) {
        float g = dy[j], y;
        da[j] = glu_act_bwd(act, a[j], g * u[j], &y);
        du[j] = y * g;
    }
}

/* The rows, built for the baseline x86-64 and for AVX2 as GELU_ROWS are (the same
 * operations: the same bits); SwiGLU's silu rows apart, the others sharing one loop. */
#define GLU_ROWS(suffix, attr)                                                               \
    attr static void glu_fwd_rows_##suffix(const glu_ctx *c, int64_t lo, int64_t hi)         \
    {                                                                                         \
        for (int64_t r = lo; r < hi; r++) {                                                   \
            const float *a = c->x + r * 2 * c->h;                                             \
            if (c->act == RT_GLU_SILU)                                                        \
                glu_fwd_row(RT_GLU_SILU, a, a + c->h, c->y + r * c->h, c->h);                 \
            else                                                                              \
                glu_fwd_row(c->act, a, a + c->h, c->y + r * c->h, c->h);                      \
        }                                                                                     \
    }                                                                                         \
    attr static void glu_bwd_rows_##suffix(const glu_ctx *c, int64_t lo, int64_t hi)         \
    {                                                                                         \
        for (int64_t r = lo; r < hi; r++) {                                                   \
            const float *a = c->x + r * 2 * c->h, *dy = c->dy + r * c->h;                     \
            float *da = c->dx + r * 2 * c->h;                                                 \
            if (c->act == RT_GLU_SILU)                                                        \
                glu_bwd_row(RT_GLU_SILU, a, a + c->h, dy, da, da + c->h, c->h);               \
            else                                                                              \
                glu_bwd_row(c->act, a, a + c->h, dy, da, da + c->h, c->h);                    \
        }                                                                                     \
    }
GLU_ROWS(base, )
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__TINYC__)
GLU_ROWS(avx2, __attribute__((target("avx2"))))
#define GLU_ROWS_OF(dir) (rt_have_avx2() ? glu_##dir##_rows_avx2 : glu_##dir##_rows_base)
#else
#define GLU_ROWS_OF(dir) glu_##dir##_rows_base
#endif

static void glu_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    GLU_ROWS_OF(fwd)(ctx, lo, hi);
}

static void glu_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    GLU_ROWS_OF(bwd)(ctx, lo, hi);
}

void rt_glu_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_fwd(e, x, y, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .y = y, .h = h, .act = act};
    if (h <= 0)
        return;
    launch(pool_of(e), rows, rt_grain_for(8 * h), glu_fwd_task, &c);
}

void rt_glu_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_bwd(e, x, dy, dx, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .dy = dy, .dx = dx, .h = h, .act = act};
    if (h <= 0)
        return;
    launch(pool_of(e), rows, rt_grain_for(16 * h), glu_bwd_task, &c);
}

/* The gated variant: rows of 2h + 1, the last column g; y = glu's row times sigmoid(g).
 * Backward: dy times the sigmoid through glu's rule, and g's gradient sigmoid'(g) times
 * the sum over the row of dy * glu (glu recomputed). Rows of an odd width: one loop. */
static void glu_gated_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const glu_ctx *c = ctx;
    int64_t h = c->h;
    for (int64_t r = lo; r < hi; r++) {
        const float *a = c->x + r * (2 * h + 1);
        float s = rt_sigmoidf(a[2 * h]), *y = c->y + r * h;
        for (int64_t j = 0; j < h; j++)
            y[j] = glu_act(c->act, a[j]) * a[h + j] * s;
    }
}

static void glu_gated_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const glu_ctx *c = ctx;
    int64_t h = c->h;
    for (int64_t r = lo; r < hi; r++) {
        const float *a = c->x + r * (2 * h + 1), *dy = c->dy + r * h;
        float *da = c->dx + r * (2 * h + 1);
        float s = rt_sigmoidf(a[2 * h]), dot = 0.0f;
        for (int64_t j = 0; j < h; j++) {
            float g = dy[j] * s, y;
            da[j] = glu_act_bwd(c->act, a[j], g * a[h + j], &y);
            da[h + j] = y * g;
            dot += dy[j] * (y * a[h + j]);
        }
        da[2 * h] = dot * s * (1.0f - s);
    }
}

void rt_glu_gated_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_gated_fwd(e, x, y, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .y = y, .h = h, .act = act};
    if (h <= 0)
        return;
    launch(pool_of(e), rows, rt_grain_for(8 * h), glu_gated_fwd_task, &c);
}

void rt_glu_gated_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                      int64_t h, int act)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->glu_gated_bwd(e, x, dy, dx, rows, h, act);
        return;
    }
    glu_ctx c = {.x = x, .dy = dy, .dx = dx, .h = h, .act = act};
    if (h <= 0)
        return;
    launch(pool_of(e), rows, rt_grain_for(16 * h), glu_gated_bwd_task, &c);
}

/* ---- losses -------------------------------------------------------------------- */

typedef struct ce_ctx ce_ctx;
/* One row's loss from its logits z (and its gradient into g when g is not NULL; g may
 * be z); *hit: whether its first argmax is the target tg (in range). */
typedef double (*ce_row_fn)(const ce_ctx *c, const float *z, float *g, int32_t tg, int *hit);

struct ce_ctx {
    const float *logits;       /* [rows, C] */
    const int32_t *target;     /* [rows] */
    float *dlogits;            /* [rows, C] or NULL */
    double *part;              /* [nblk, 2]: loss sum, correct count */
    int64_t rows, C, rb;
    float gs;
    _Atomic int64_t bad;       /* first row with a target out of range, or rows */
    int64_t ld;                /* rows of logits and dlogits this far apart */
    float ls;                  /* label smoothing (ce_ls_row only) */
    ce_row_fn row;
    int ign;                   /* 1: rows whose target is `ignore` add nothing */
    int32_t ignore;
};

/* the plain cross entropy of one row (dlogits may be the logits themselves, written
 * over: no restrict, and z[target] is read before anything is written) */
static double ce_row(const ce_ctx *c, const float *z, float *g, int32_t tg, int *hit)
{
    int64_t C = c->C;
    float zt = z[tg];
    /* max and first argmax (a NaN counts as the maximum, as in torch.argmax) */
    float m = z[0];
    int64_t am = 0;
    for (int64_t j = 1; j < C; j++)
        if (z[j] > m || (isnan(z[j]) && !isnan(m))) {
            m = z[j];
            am = j;
        }
    /* exp(z - max) in float (kept in dlogits when wanted), summed in double */
    v4f mv = splat4(m);
    d4 sv = {{0, 0}, {0, 0}};
    for (int64_t j = 0; j < C; j += 4) {
        v4f zv;
        if (j + 4 <= C) {
            zv = ld4(z + j);
        } else {   /* the tail, padded with -inf, whose exp is 0 */
            zv = splat4(-INFINITY);
            memcpy(&zv, z + j, (size_t)(C - j) * sizeof(float));
        }
        v4f ev = exp4(zv - mv);
        sv = add4d(sv, cvt4(ev));
        if (!g)
            continue;
        if (j + 4 <= C)
            st4(g + j, ev);
        else
            memcpy(g + j, &ev, (size_t)(C - j) * sizeof(float));
    }
    double se = hsum4d(sv);
    if (g) {
        float inv = (float)(1.0 / se), et = g[tg];
        v4f sc = splat4(inv) * splat4(c->gs);
        int64_t j = 0;
        for (; j + 4 <= C; j += 4)
            st4(g + j, ld4(g + j) * sc);
        for (; j < C; j++)
            g[j] = g[j] * (inv * c->gs);
        g[tg] = (et * inv - 1.0f) * c->gs;
        /* the padding of a padded vocabulary: 0, which the head's backward GEMMs
         * read (lower.c's padded_rows) */
        for (j = C; j < c->ld; j++)
            g[j] = 0.0f;
    }
    *hit = am == tg;
    return (double)m + log(se) - (double)zt;
}

/* Label-smoothed cross entropy, as F.cross_entropy(label_smoothing=ls): the target
 * distribution is (1 - ls) onehot + ls / C, so with lse = max + log(sum exp(z - max))
 *   loss  = lse - (1 - ls) z[target] - (ls / C) sum_j z_j
 *   dz_j  = (softmax_j - ls / C - (1 - ls) [j == target]) * grad_scale.
 * A row of its own, plain loops (ls > 0 only: ls = 0 takes ce_row, whose bits stay
 * those of every earlier run); the sums in double, in the row's order. */
/* one row: its loss, whether its first argmax is the target; dlogits may be z */
static double ce_ls_row(const ce_ctx *c, const float *z, float *g, int32_t tg, int *hit)
{
    int64_t C = c->C;
    float zt = z[tg], m = z[0];
    int64_t am = 0;
    double sz = 0.0;
    for (int64_t j = 0; j < C; j++) {
        if (j > 0 && (z[j] > m || (isnan(z[j]) && !isnan(m)))) {
            m = z[j];
            am = j;
        }
        sz += (double)z[j];
    }
    double se = 0.0;
    for (int64_t j = 0; j < C; j++) {
        float ev = rt_expf(z[j] - m);
        se += (double)ev;
        if (g)
            g[j] = ev;
    }
    if (g) {
        float inv = (float)(1.0 / se), u = c->ls / (float)C, gs = c->gs;
        for (int64_t j = 0; j < C; j++)
            g[j] = (g[j] * inv - u - (j == tg ? 1.0f - c->ls : 0.0f)) * gs;
        for (int64_t j = C; j < c->ld; j++)
            g[j] = 0.0f;
    }
    *hit = am == tg;
    return (double)m + log(se) - (1.0 - (double)c->ls) * (double)zt -
           (double)c->ls / (double)C * sz;
}

/* Blocks [lo, hi) of c->rb rows: each row's loss by c->row, summed in double into
 * c->part with the rows counted; a target out of range is not computed but kept in
 * c->bad (the first); an ignored one adds nothing, its gradient row 0. */
static void ce_task(void *ctx, int64_t lo, int64_t hi)
{
    ce_ctx *c = ctx;
    for (int64_t t = lo; t < hi; t++) {
        double loss = 0.0, correct = 0.0, counted = 0.0;
        int64_t r1 = (t + 1) * c->rb < c->rows ? (t + 1) * c->rb : c->rows;
        for (int64_t r = t * c->rb; r < r1; r++) {
            int32_t tg = c->target[r];
            if (c->ign && tg == c->ignore) {
                if (c->dlogits)
                    memset(c->dlogits + r * c->ld, 0, (size_t)c->ld * sizeof(float));
                continue;
            }
            counted++;
            if (tg < 0 || tg >= c->C) {
                int64_t old = atomic_load(&c->bad);
                while (r < old && !atomic_compare_exchange_weak(&c->bad, &old, r))
                    ;
                continue;
            }
            int hit;
            loss += c->row(c, c->logits + r * c->ld, c->dlogits ? c->dlogits + r * c->ld : NULL,
                           tg, &hit);
            correct += hit;
        }
        c->part[3 * t] = loss;
        c->part[3 * t + 1] = correct;
        c->part[3 * t + 2] = counted;
    }
}

/* The targets of target[0, rows) not ignored (e->ce_ignore). */
static int64_t ce_valid(const rt_exec *e, const int32_t *target, int64_t rows)
{
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        n += target[r] != e->ce_ignore;
    return n;
}

/* The gradient scale of a loss call under ignore_index: grad_scale * rows / valid, the
 * call's mean over its targets not ignored (or over those rt_ce_count counted ahead
 * for a chunked head's calls); 0 where none is. */
static float ce_ignore_scale(const rt_exec *e, const int32_t *target, int64_t rows)
{
    int64_t n = e->ce_rows, valid = e->ce_valid;
    if (n <= 0) {
        n = rows;
        valid = ce_valid(e, target, rows);
    }
    return valid ? (float)((double)e->grad_scale * (double)n / (double)valid) : 0.0f;
}

void rt_ce_count(rt_exec *e, const int32_t *target, int64_t rows)
{
    if (!e->ce_has_ignore)
        return;
    if (e->dev) { /* on a GPU: the count and the scale on the device (cuda_ops.c) */
        RT_GPU(e)->ce_count(e, target, rows);
    } else
        e->ce_valid = ce_valid(e, target, rows);
    e->ce_rows = rows;
}

void rt_ce_done(rt_exec *e)
{
    e->ce_rows = 0;
    e->ce_valid = 0;
}

/* Both losses' CPU driver: blocks of about 4K logits, fixed by C, so the loss sum does
 * not depend on the thread count; the block sums added in order into e (the terms:
 * the rows counted, all but the ignored ones). */
static void ce_run(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                   int64_t rows, int64_t C, int64_t ld, float ls, ce_row_fn row)
{
    if (rows <= 0)
        return;
    rt_pool *p = pool_of(e);
    float gs = e->ce_has_ignore ? ce_ignore_scale(e, target, rows) : e->grad_scale;
    e->loss_rows = e->ce_rows > 0 ? e->ce_rows : rows;
    ce_ctx c = {logits, target, dlogits, NULL, rows, C, ceil_div(4096, C > 0 ? C : 1),
                gs, rows, ld, ls, row, e->ce_has_ignore, e->ce_ignore};
    int64_t nblk = ceil_div(rows, c.rb);
    c.part = rt_pool_scratch(p, (size_t)(3 * nblk));
    launch(p, nblk, rt_grain_for(c.rb * C * 4), ce_task, &c);
    int64_t bad = atomic_load(&c.bad);
    if (bad < rows)
        rt_fail("label %d out of range [0, %lld)", (int)target[bad], (long long)C);
    double loss = 0.0, correct = 0.0, counted = 0.0;
    for (int64_t t = 0; t < nblk; t++) {
        loss += c.part[3 * t];
        correct += c.part[3 * t + 1];
        counted += c.part[3 * t + 2];
    }
    e->loss_sum += loss;
    e->correct += (int64_t)correct;
    e->terms += (int64_t)counted;
}

void rt_cross_entropy(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                      int64_t rows, int64_t C, int64_t ld)
{
    if (ld < C)
        rt_die("rt_cross_entropy: rows %lld apart hold %lld logits", (long long)ld, (long long)C);
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->cross_entropy(e, logits, target, dlogits, rows, C, ld);
        return;
    }
    ce_run(e, logits, target, dlogits, rows, C, ld, 0.0f, ce_row);
}

void rt_cross_entropy_ls(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                         int64_t rows, int64_t C, int64_t ld, float ls)
{
    if (ld < C)
        rt_die("rt_cross_entropy_ls: rows %lld apart hold %lld logits", (long long)ld,
               (long long)C);
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->cross_entropy_ls(e, logits, target, dlogits, rows, C, ld, ls);
        return;
    }
    ce_run(e, logits, target, dlogits, rows, C, ld, ls, ce_ls_row);
}

#define MSE_BLOCK 4096

typedef struct {
    const float *y, *t;        /* [n] */
    float *dy;                 /* [n] or NULL */
    double *part;              /* [nblk] */
    int64_t n;
    float gs;
} mse_ctx;

static void mse_task(void *ctx, int64_t lo, int64_t hi)
{
    const mse_ctx *c = ctx;
    for (int64_t b = lo; b < hi; b++) {
        int64_t i0 = b * MSE_BLOCK, i1 = i0 + MSE_BLOCK < c->n ? i0 + MSE_BLOCK : c->n;
        const float *restrict y = c->y, *restrict t = c->t;
        double s0 = 0.0, s1 = 0.0;
        int64_t i = i0;
        for (; i + 2 <= i1; i += 2) {
            double d0 = (double)(y[i] - t[i]), d1 = (double)(y[i + 1] - t[i + 1]);
            s0 += d0 * d0;
            s1 += d1 * d1;
        }
        for (; i < i1; i++) {
            double d0 = (double)(y[i] - t[i]);
            s0 += d0 * d0;
        }
        c->part[b] = s0 + s1;
        if (c->dy) {
            float *restrict dy = c->dy;
            float gs = c->gs;
            for (i = i0; i < i1; i++)
                dy[i] = 2.0f * (y[i] - t[i]) * gs;
        }
    }
}

void rt_mse(rt_exec *e, const float *y, const float *t, float *dy, int64_t n)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->mse(e, y, t, dy, n);
        return;
    }
    if (n <= 0)
        return;
    rt_pool *p = pool_of(e);
    int64_t nblk = ceil_div(n, MSE_BLOCK);
    mse_ctx c = {y, t, dy, rt_pool_scratch(p, (size_t)nblk), n, e->grad_scale};
    launch(p, nblk, rt_grain_for(MSE_BLOCK * 2), mse_task, &c);
    double s = 0.0;
    for (int64_t b = 0; b < nblk; b++)
        s += c.part[b];
    e->loss_sum += s;
    e->terms += n;
}
