/* check_ops.c: every GPU kernel of templates/cuda/ (through its wrapper in
 * runtime/cuda_ops.c) against its CPU twin in runtime/, on a GPU: `make test-gpu`.
 *
 * For each op and shape: random inputs (fixed seed), outputs poisoned the same way on
 * both sides (NaN where the op overwrites, random values where it adds), the CPU twin
 * on host copies, the GPU version on device copies, twice. It prints
 *   ok   NAME SHAPE worst-error
 * or FAIL ..., and fails when
 *   - the worst error, max over elements of |gpu - cpu| / max(1, |cpu|), exceeds 1e-5
 *     for elementwise-like ops (copies, gathers, one rounding of float arithmetic per
 *     element: those that sum in the CPU's order are in fact exact) or 1e-4 for
 *     reductions and attention (sums of up to ~10^4 terms whose order differs from the
 *     CPU's: float rounding leaves about 1e-6 of the magnitude of the terms). Inputs are
 *     O(1) and gradients are scaled so outputs are O(1), which makes the floor of 1 a
 *     relative measure where it matters and keeps cancellations near 0 from dividing by
 *     noise; NaN must match NaN;
 *   - the two GPU runs differ in a single bit (every reduction has a fixed order);
 *   - the loss statistics (loss sum, correct count, e->terms) differ.
 * Without a GPU it exits 2 with the runtime's "no CUDA device found" message;
 * tests/fake_gpu_ops.sh runs this same program on the fake GPU, the kernels emulated
 * (tests/gpu/emu/), which checks their logic everywhere (tests/gpu_emu.sh: without the
 * fake driver).
 *
 * With --bf16 (--fp16) the kernels are compiled for bf16-mixed (fp16-mixed): RT_ACT_BF16
 * (RT_ACT_F16), activations and their gradients stored in 16 bits, common.cuh's act_t.
 * Activation inputs are rounded on the host first, so both sides see the same numbers,
 * and go up in 16 bits; activation outputs come back widened. Their tolerance grows by
 * the rounding of the stored result (half a unit: at most 2^-8 relative for bf16, 4e-3;
 * 2^-11 for fp16, 5e-4), outputs kept in fp32 (statistics, parameter gradients, loss
 * sums) keep theirs. rt_param_copy, which writes the parameters' 16-bit copy, must give
 * the host's rt_half.h bits exactly, specials and subnormals included.
 *
 * Last, zero2_grads runs device_cuda.c's gradient region for zero2 (the driver's virtual
 * memory calls: chunks mapped and zeroed under a write, given back after a reduction's
 * event, reused) on one GPU, the only part of zero2 a single GPU can run.
 *
 * Usage: build/tests/check_ops [--bf16|--fp16] [--short] [--lean] [--shard I/N]
 *        [--compile-only] [TEMPLATE_DIR]   (default
 * templates/cuda, from the repository root). The kernels are the templates, read at run time
 * in the order trainc writes them, plus the instances below for the shapes tested here.
 * --short, for the emulator (tests/fake_gpu_ops.sh, tests/gpu_emu.sh): with 16-bit activations,
 * attention at T 128 where a GPU takes T 1024 (the tensor-core kernels' tiles, the causal
 * skip and the online softmax over 4 key tiles, not 32; emulated, T 1024 cost more than
 * half of the emulated time). --lean, for tests/fake_gpu_ops.sh's fp16 run and its runs
 * under the emulator's other schedule (after bf16's held every kernel on every shape):
 * one attention shape a path. --shard I/N: every Nth check from the Ith (main's RUN);
 * --compile-only: the kernels compiled into the kernel cache, nothing checked. */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#undef I   /* (complex.h's, through OpenBLAS's cblas.h: the identity matrices here are I) */
#include "rt_cuda.h"

static const char *const instances[] = {
    "RT_LAYERNORM_FWD(7)", "RT_LAYERNORM_FWD(64)", "RT_LAYERNORM_FWD(130)",
    "RT_LAYERNORM_FWD(768)", "RT_LAYERNORM_FWD(128)", "RT_LAYERNORM_FWD(1024)",
    "RT_LAYERNORM_FWD(2048)",
    "RT_LAYERNORM_BWD(7)", "RT_LAYERNORM_BWD(64)", "RT_LAYERNORM_BWD(130)",
    "RT_LAYERNORM_BWD(768)", "RT_LAYERNORM_BWD(128)", "RT_LAYERNORM_BWD(1024)",
    "RT_LAYERNORM_BWD(2048)",
    "RT_RMSNORM_FWD(7)", "RT_RMSNORM_FWD(130)", "RT_RMSNORM_FWD(768)", "RT_RMSNORM_FWD(128)",
    "RT_RMSNORM_FWD(2048)",
    "RT_RMSNORM_BWD(7)", "RT_RMSNORM_BWD(130)", "RT_RMSNORM_BWD(768)", "RT_RMSNORM_BWD(128)",
    "RT_RMSNORM_BWD(2048)",
    "RT_CROSS_ENTROPY(10, 10)", "RT_CROSS_ENTROPY(13, 13)", "RT_CROSS_ENTROPY(50257, 50257)",
    "RT_CROSS_ENTROPY(50257, 50304)", "RT_CROSS_ENTROPY(8192, 8192)", "RT_CROSS_ENTROPY(8197, 8200)",
    "RT_ATTENTION_FWD(17, 48, 1)", "RT_ATTENTION_BWD(17, 48, 1)",
    "RT_ATTENTION_FWD(17, 48, 0)", "RT_ATTENTION_BWD(17, 48, 0)",
    "RT_ATTENTION_FWD(128, 32, 1)", "RT_ATTENTION_BWD(128, 32, 1)",
    "RT_ATTENTION_FWD(64, 64, 0)", "RT_ATTENTION_BWD(64, 64, 0)",
    "RT_ATTENTION_FWD(40, 128, 1)", "RT_ATTENTION_BWD(40, 128, 1)",
    "RT_ATTENTION_FWD(1024, 64, 1)", "RT_ATTENTION_BWD(1024, 64, 1)",
    "RT_ATTENTION_FWD(1024, 64, 0)", "RT_ATTENTION_BWD(1024, 64, 0)",
    "RT_ATTENTION_FWD(128, 64, 1)", "RT_ATTENTION_BWD(128, 64, 1)",
    "RT_ATTENTION_FWD(128, 64, 0)", "RT_ATTENTION_BWD(128, 64, 0)",
    "RT_ATTENTION_FWD(65, 16, 1)", "RT_ATTENTION_BWD(65, 16, 1)",
    "RT_ATTENTION_FWD(200, 80, 0)", "RT_ATTENTION_BWD(200, 80, 0)",
    "RT_ATTENTION_FWD(100, 128, 1)", "RT_ATTENTION_BWD(100, 128, 1)",
    "RT_ATTENTION_FWD(200, 128, 1)", "RT_ATTENTION_BWD(200, 128, 1)",
    "RT_ATTENTION_FWD(150, 64, 0)", "RT_ATTENTION_BWD(150, 64, 0)",
    "RT_ATTENTION_FWD(300, 64, 1)", "RT_ATTENTION_BWD(300, 64, 1)",
    "RT_ATTENTION_FWD(260, 128, 0)", "RT_ATTENTION_BWD(260, 128, 0)",
    "RT_ATTENTION_EXT_FWD(37, 16, 1)", "RT_ATTENTION_EXT_BWD(37, 16, 1)",
    "RT_ATTENTION_EXT_FWD(50, 16, 0)", "RT_ATTENTION_EXT_BWD(50, 16, 0)",
    "RT_ATTENTION_EXT_FWD(100, 32, 1)", "RT_ATTENTION_EXT_BWD(100, 32, 1)",
    "RT_ATTENTION_EXT_FWD(33, 32, 0)", "RT_ATTENTION_EXT_BWD(33, 32, 0)",
    "RT_ATTENTION_EXT_FWD(40, 32, 1)", "RT_ATTENTION_EXT_BWD(40, 32, 1)",
    "RT_ATTENTION_EXT_FWD(70, 32, 1)", "RT_ATTENTION_EXT_BWD(70, 32, 1)",
    "RT_ATTENTION_EXT_FWD(65, 128, 1)", "RT_ATTENTION_EXT_BWD(65, 128, 1)",
    "RT_ATTENTION_EXT_FWD(37, 8, 1)", "RT_ATTENTION_EXT_BWD(37, 8, 1)",
    "RT_ATTENTION_EXT_FWD(37, 8, 0)", "RT_ATTENTION_EXT_BWD(37, 8, 0)",
    "RT_ATTENTION_EXT_FWD(200, 64, 1)", "RT_ATTENTION_EXT_BWD(200, 64, 1)",
    "RT_ATTENTION_EXT_FWD(130, 64, 0)", "RT_ATTENTION_EXT_BWD(130, 64, 0)",
    "RT_ATTENTION_EXT_FWD(300, 64, 1)", "RT_ATTENTION_EXT_BWD(300, 64, 1)",
    "RT_ATTENTION_EXT_FWD(260, 128, 1)", "RT_ATTENTION_EXT_BWD(260, 128, 1)",
    "RT_ATTENTION_EXT_FWD(200, 64, 0)", "RT_ATTENTION_EXT_BWD(200, 64, 0)",
    "RT_ATTENTION_EXT_FWD(150, 128, 1)", "RT_ATTENTION_EXT_BWD(150, 128, 1)",
    "RT_ATTENTION_EXT_FWD(37, 32, 1)", "RT_ATTENTION_EXT_BWD(37, 32, 1)",
    "RT_ATTENTION_EXT_FWD(20, 8, 1)", "RT_ATTENTION_EXT_BWD(20, 8, 1)",
    "RT_ATTENTION_EXT_FWD(100, 256, 1)", "RT_ATTENTION_EXT_BWD(100, 256, 1)",
    "RT_ATTENTION_EXT_FWD(70, 256, 0)", "RT_ATTENTION_EXT_BWD(70, 256, 0)",
    "RT_ATTENTION_EXT_FWD(150, 96, 1)", "RT_ATTENTION_EXT_BWD(150, 96, 1)",
    "RT_ATTENTION_EXT_CAP_FWD(37, 8, 1)", "RT_ATTENTION_EXT_CAP_BWD(37, 8, 1)",
    "RT_ATTENTION_EXT_CAP_FWD(200, 64, 1)", "RT_ATTENTION_EXT_CAP_BWD(200, 64, 1)",
    "RT_ATTENTION_EXT_CAP_FWD(100, 256, 1)", "RT_ATTENTION_EXT_CAP_BWD(100, 256, 1)",
    "RT_ATTENTION_EXT_PK_FWD(37, 8, 1)", "RT_ATTENTION_EXT_PK_BWD(37, 8, 1)",
    "RT_ATTENTION_EXT_PK_FWD(200, 64, 1)", "RT_ATTENTION_EXT_PK_BWD(200, 64, 1)",
    "RT_ATTENTION_EXT_PK_FWD(150, 128, 1)", "RT_ATTENTION_EXT_PK_BWD(150, 128, 1)",
    "RT_ATTENTION_EXT_PK_FWD(100, 256, 1)", "RT_ATTENTION_EXT_PK_BWD(100, 256, 1)",
    "RT_ATTENTION_EXT_CAP_PK_FWD(200, 64, 1)", "RT_ATTENTION_EXT_CAP_PK_BWD(200, 64, 1)",
    "RT_ATTENTION_EXT_PK_FWD(37, 8, 0)", "RT_ATTENTION_EXT_PK_BWD(37, 8, 0)",
    "RT_ATTENTION_EXT_PK_FWD(200, 64, 0)", "RT_ATTENTION_EXT_PK_BWD(200, 64, 0)",
    "RT_ATTENTION_EXT_PK_FWD(150, 128, 0)", "RT_ATTENTION_EXT_PK_BWD(150, 128, 0)",
    "RT_EMBEDDING_FWD(7)", "RT_EMBEDDING_BWD(7)", "RT_EMBEDDING_FWD(128)",
    "RT_EMBEDDING_BWD(128)", "RT_EMBEDDING_FWD(768)", "RT_EMBEDDING_BWD(768)",
    "RT_CROSS_ENTROPY_LS(10, 10)", "RT_CROSS_ENTROPY_LS(13, 16)", "RT_CROSS_ENTROPY_LS(1030, 1088)",
    "RT_DPO_ROWS(13, 13)", "RT_DPO_ROWS(10, 10)", NULL};

/* --fp8's: the shapes t_fp8_folds takes (a kernel missing here fails its launch). The
 * whole list cost 55 s of the emulator's compile for 53 checks (2026-12-01). */
static const char *const fp8_instances[] = {
    "RT_LAYERNORM_FWD(130)", "RT_LAYERNORM_FWD(768)", "RT_LAYERNORM_BWD(130)",
    "RT_LAYERNORM_BWD(768)", "RT_RMSNORM_FWD(130)", "RT_RMSNORM_FWD(768)",
    "RT_RMSNORM_BWD(130)", "RT_RMSNORM_BWD(768)",
    "RT_ATTENTION_FWD(17, 48, 1)", "RT_ATTENTION_BWD(17, 48, 1)",
    "RT_ATTENTION_FWD(128, 64, 1)", "RT_ATTENTION_BWD(128, 64, 1)",
    "RT_ATTENTION_EXT_FWD(20, 8, 1)", "RT_ATTENTION_EXT_BWD(20, 8, 1)",
    "RT_ATTENTION_EXT_FWD(37, 16, 1)", "RT_ATTENTION_EXT_BWD(37, 16, 1)",
    "RT_ATTENTION_EXT_FWD(37, 32, 1)", "RT_ATTENTION_EXT_BWD(37, 32, 1)",
    "RT_ATTENTION_EXT_FWD(200, 64, 1)", "RT_ATTENTION_EXT_BWD(200, 64, 1)",
    NULL};

#define TOL_EW 1e-5            /* elementwise-like */
#define TOL_RED 1e-4           /* reductions */
static int half;               /* --bf16 (1), --fp16 (2): activations stored in 16 bits (act_t) */
static int short_att;          /* --short: 16-bit attention at T 128, not 1024 (the emulators) */
static int lean;               /* --lean: one attention shape a path (the fake GPU) */
static int fp8_only;           /* --fp8: fp8-mixed's kernels (bf16 and RT_FP8), their maxima */
/* The tolerance of an activation output: plus the rounding of 16-bit storage (half a
 * unit in the last place: 2^-8 of the value for bf16, 2^-11 for fp16, at most). */
static double TA(double tol) { return half == 1 ? tol + 4e-3 : half == 2 ? tol + 5e-4 : tol; }
/* Attention in 16 bits, where its products run on the tensor cores: P and dS are also
 * rounded to 16 bits before their products with V and K (flash attention 2's scheme),
 * one more rounding of the same size. */
static double TATT(double tol) { return half == 1 ? TA(tol) + 4e-3 : half == 2 ? TA(tol) + 5e-4 : tol; }
/* A GEMM epilogue that may run as the GEMM and then a kernel (where cuBLASLt refuses
 * it): the product is stored in 16 bits before the epilogue reads it, one more
 * rounding. */
#define TEPI(tol) TA(TA(tol))

static rt_exec *G;             /* the GPU */
static rt_exec C;              /* the CPU twin's: a thread pool */
static int failures, passes;
static char shape[128];
#define SHAPE(...) snprintf(shape, sizeof shape, __VA_ARGS__)

/* ---- helpers ----------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* --shard I/N: of the checks main and its lists run, in their order, those whose place
 * is I modulo N (tests/gpu/run.sh runs N processes a precision at once: a check's time
 * is mostly its CPU twin's, on one core). RUN before a check's call: each check draws
 * from a seed of its place, so a shard's checks see the inputs of the whole run's. (Its
 * "if ... else" leaves an else after the call to the if before it.) */
static int shard_i, shard_n = 1, shard_at;
#define RUN if (!mine()) {} else

static int mine(void)
{
    int at = shard_at++;
    uint64_t z = 0x9E3779B97F4A7C15ull * (uint64_t)(at + 1);   /* splitmix64's finish */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    rng_state = (z ^ (z >> 31)) | 1;   /* (xorshift's state is never 0) */
    return at % shard_n == shard_i;
}

static float urand(void)       /* [-1, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static int64_t irand(int64_t n)  /* [0, n) */
{
    urand();
    return (int64_t)((rng_state >> 11) % (uint64_t)n);
}

static float *fvec(int64_t n)  /* n random floats in [-1, 1) */
{
    float *p = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = urand();
    return p;
}

static float *nans(int64_t n)
{
    float *p = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static float *fcopy(const float *a, int64_t n)
{
    float *p = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(p, a, (size_t)n * sizeof(float));
    return p;
}

/* ---- activations (act_t): fp32, or with --bf16 bf16 on the device -------------------- */

/* float <-> act_t's 16 bits (rt_half.h: the host twins of common.cuh's conversions) */
static uint16_t to_half(float f) { return half == 1 ? rt_float_to_bf16(f) : rt_float_to_f16(f); }
static float from_half(uint16_t h) { return half == 1 ? rt_bf16_to_float(h) : rt_f16_to_float(h); }

/* The values the device will hold: rounded to bf16 or fp16 with --bf16 or --fp16 (both
 * sides then start from the same numbers). */
static void round_act(float *p, int64_t n)
{
    for (int64_t i = 0; half && i < n; i++)
        p[i] = from_half(to_half(p[i]));
}

static float *avec(int64_t n)  /* n random activations in [-1, 1) */
{
    float *p = fvec(n);
    round_act(p, n);
    return p;
}

static size_t abytes(int64_t n) { return (size_t)(n > 0 ? n : 1) * (half ? 2 : 4); }

/* Device memory: two blocks allocated once (rt_cu_alloc is for set-up), each handed out in
 * order and taken back whole after each test. */
typedef struct {
    rt_dptr base;
    size_t used, size;
} region;
static region dev, dev32;   /* dev32: fp32 memory outside the activations' region (below) */
#ifndef CHECK_OPS_EMU
static region par;          /* with --bf16/--fp16: fp32 "parameters" with 16-bit copies (par16) */
static rt_dptr par16;
#endif

static void *ralloc(region *r, size_t bytes)
{
    bytes = (bytes + 255) & ~(size_t)255;
    if (r->used + bytes > r->size) {
        fprintf(stderr, "check_ops: test device memory exhausted\n");
        exit(1);
    }
    rt_dptr p = r->base + r->used;
    r->used += bytes;
    return (void *)(uintptr_t)p;
}

static void *dalloc(size_t bytes) { return ralloc(&dev, bytes); }

/* After the compute stream: rt_cu_upload copies on the legacy stream, which the
 * (non-blocking) compute stream does not order with, so a kernel still queued there
 * could read the new contents (t_optim uploads each step's gradients while the last
 * step's optimizer kernel may be pending). */
static void upload(void *dev, const void *host, size_t bytes)
{
    rt_cu_sync(G);
    rt_cu_upload((rt_dptr)(uintptr_t)dev, host, bytes);
}

static void *up(const void *host, size_t bytes)   /* a device copy */
{
    void *p = dalloc(bytes);
    upload(p, host, bytes);
    return p;
}

static float *down(const void *dev, int64_t n)    /* n floats back, after the stream */
{
    float *p = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    rt_cu_sync(G);
    rt_cu_download(p, (rt_dptr)(uintptr_t)dev, (size_t)n * sizeof(float));
    return p;
}

/* Activations in act_t storage: n values up (converted), a device buffer, n back. */
static void upload_a(void *dev, const float *host, int64_t n)
{
    if (!half) {
        upload(dev, host, (size_t)n * 4);
        return;
    }
    uint16_t *h = rt_xmalloc(abytes(n));
    for (int64_t i = 0; i < n; i++)
        h[i] = to_half(host[i]);
    upload(dev, h, (size_t)n * 2);
    rt_xfree(h);
}

static void *dalloc_a(int64_t n) { return dalloc(abytes(n)); }

static void *up_a(const float *host, int64_t n)
{
    void *p = dalloc_a(n);
    upload_a(p, host, n);
    return p;
}

static float *down_a(const void *dev, int64_t n)
{
    if (!half)
        return down(dev, n);
    uint16_t *h = rt_xmalloc(abytes(n));
    float *p = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    rt_cu_sync(G);
    rt_cu_download(h, (rt_dptr)(uintptr_t)dev, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        p[i] = from_half(h[i]);
    rt_xfree(h);
    return p;
}

static void report(const char *name, double err, double tol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void report(const char *name, double err, double tol, const char *fmt, ...)
{
    char why[256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
    }
    int ok = !*why && err <= tol;
    if (ok)
        passes++;
    else
        failures++;
    printf("%s %-22s %-44s %.2e%s%s\n", ok ? "ok  " : "FAIL", name, shape, err,
           err > tol ? " > tolerance" : "", why);
    fflush(stdout);
}

/* max_i |got - want| / max(1, |want|), or with `bound` max_i |got - want| / bound_i;
 * NaN must meet NaN (else infinite) */
static double worst(const float *got, const float *want, const float *bound, int64_t n)
{
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i])) {
            if (isnan(got[i]) != isnan(want[i]))
                return INFINITY;
            continue;
        }
        double d = fabs((double)got[i] - want[i]) / (bound ? bound[i] : fmax(1.0, fabs(want[i])));
        if (!(d <= e))
            e = d;
    }
    return e;
}

/* One op's output: the first GPU run against the CPU, the second against the first. */
typedef struct {
    const char *what;
    const float *cpu;
    float *gpu[2];
    int64_t n;
} out_t;

/* With bounds, bounds[k][i] bounds output k's value i's error (tol then 1: the worst
 * error over its bound). */
static void judge_bounded(const char *name, double tol, out_t *o, int n_out,
                          const float *const *bounds)
{
    double err = 0.0;
    const char *nondet = NULL;
    for (int k = 0; k < n_out; k++) {
        double e = worst(o[k].gpu[0], o[k].cpu, bounds ? bounds[k] : NULL, o[k].n);
        err = e > err ? e : err;
        if (memcmp(o[k].gpu[0], o[k].gpu[1], (size_t)o[k].n * sizeof(float)))
            nondet = o[k].what;
        free(o[k].gpu[0]);
        free(o[k].gpu[1]);
    }
    if (nondet)
        report(name, err, tol, " (%s differs between two GPU runs)", nondet);
    else
        report(name, err, tol, NULL);
}

static void judge(const char *name, double tol, out_t *o, int n_out)
{
    judge_bounded(name, tol, o, n_out, NULL);
}

/* judge with each output's errors over its largest value (at least 1) */
static void judge_scaled(const char *name, double tol, out_t *o, int n_out)
{
    float *b[4];
    for (int k = 0; k < n_out && k < 4; k++) {
        float m = 1.0f;
        for (int64_t i = 0; i < o[k].n; i++)
            m = fabsf(o[k].cpu[i]) > m ? fabsf(o[k].cpu[i]) : m;
        b[k] = rt_xmalloc((size_t)(o[k].n > 0 ? o[k].n : 1) * sizeof(float));
        for (int64_t i = 0; i < o[k].n; i++)
            b[k][i] = m;
    }
    judge_bounded(name, tol, o, n_out, (const float *const *)b);
    for (int k = 0; k < n_out && k < 4; k++)
        free(b[k]);
}

/* fp32 device memory outside the activations' region (with --bf16/--fp16 the main
 * block is the "arena" whose GEMM operands are 16-bit): parameter gradients, biases */
static void *dalloc32(size_t bytes) { return ralloc(&dev32, bytes); }

static void *up32(const float *host, int64_t n)
{
    void *p = dalloc32((size_t)n * 4);
    upload(p, host, (size_t)n * 4);
    return p;
}

/* A bias as a mixed-precision model's is: an fp32 parameter whose 16-bit copy (the
 * value rounded) sits where rt_cu_operand finds it; an epilogue that takes only D's
 * type takes that copy. In fp32: up32's. */
#ifndef CHECK_OPS_EMU
static void *up_param(const float *host, int64_t n)
{
    if (!half)
        return up32(host, n);
    void *p = ralloc(&par, (size_t)n * 4);
    upload(p, host, (size_t)n * 4);
    upload_a((void *)(uintptr_t)(par16 + ((rt_dptr)(uintptr_t)p - par.base) / 2), host, n);
    return p;
}
#endif

static void reset(void)
{
    dev.used = dev32.used = 0;
#ifndef CHECK_OPS_EMU
    par.used = 0;
#endif
}

/* ---- bias gradients ------------------------------------------------------------------ */

static void t_colsum(int64_t rows, int64_t cols)
{
    SHAPE("[%lld, %lld]", (long long)rows, (long long)cols);
    float *dy = avec(rows * cols), *db0 = fvec(cols), *db = fcopy(db0, cols);
    rt_colsum_add(&C, dy, db, rows, cols);
    float *ddy = up_a(dy, rows * cols), *ddb = up(db0, cols * 4);
    out_t o = {"db", db, {0}, cols};
    for (int rep = 0; rep < 2; rep++) {
        upload(ddb, db0, cols * 4);
        rt_cu_colsum_add(G, ddy, ddb, rows, cols);
        o.gpu[rep] = down(ddb, cols);
    }
    judge("colsum_add", TOL_RED, &o, 1);
    free(dy), free(db0), free(db), reset();
}

static void t_rowsum(int64_t rows, int64_t cols)
{
    SHAPE("[%lld, %lld]", (long long)rows, (long long)cols);
    float *x = avec(rows * cols), *db0 = fvec(rows), *db = fcopy(db0, rows);
    rt_rowsum_add(&C, x, db, rows, cols);
    float *dx = up_a(x, rows * cols), *ddb = up(db0, rows * 4);
    out_t o = {"db", db, {0}, rows};
    for (int rep = 0; rep < 2; rep++) {
        upload(ddb, db0, rows * 4);
        rt_cu_rowsum_add(G, dx, ddb, rows, cols);
        o.gpu[rep] = down(ddb, rows);
    }
    judge("rowsum_add", TOL_RED, &o, 1);
    free(x), free(db0), free(db), reset();
}

/* ---- loader.mask ------------------------------------------------------------------------ */

/* data.cuh's rt_mask_tokens against augment.c's rt_mask_rows: rows of T ids over a
 * vocabulary of 1000 (a quarter of the targets ignored, as special tokens and padding
 * are), samples picked at random, epoch 3, random ids from [0, vocab); integers, so
 * exact. */
static void t_mask_tokens(int64_t n, int64_t rows, int64_t T, double prob, int64_t vocab)
{
    SHAPE("%lld of %lld rows of %lld ids, prob %g, random ids below %lld", (long long)rows,
          (long long)n, (long long)T, prob, (long long)vocab);
    size_t cnt = (size_t)(rows * T), bytes = cnt * sizeof(int32_t);
    int32_t *x = rt_xmalloc(bytes), *y = rt_xmalloc(bytes), *idx = rt_xmalloc((size_t)rows * 4);
    int32_t *wx = rt_xmalloc(bytes), *wy = rt_xmalloc(bytes), *gotx = rt_xmalloc(bytes),
            *goty = rt_xmalloc(bytes);
    int64_t *idx64 = rt_xmalloc((size_t)rows * sizeof *idx64);
    for (size_t i = 0; i < cnt; i++) {
        wx[i] = x[i] = (int32_t)irand(1000);
        wy[i] = y[i] = irand(4) ? x[i] : -100;
    }
    for (int64_t r = 0; r < rows; r++)
        idx64[r] = idx[r] = (int32_t)irand(n);
    rt_train_config c;
    rt_config_defaults(&c);
    c.mask_token = 7, c.mask_prob = prob, c.seed = 1337;
    rt_mask_rule k = rt_mask_rule_of(&c, -100, vocab);
    rt_mask_rows(wx, wy, idx64, rows, T, &k, 3);
    void *gx = up(x, bytes), *gy = up(y, bytes), *gidx = up(idx, (size_t)rows * 4);
    rt_cu_mask_tokens(G, gx, gy, gidx, rows, T, &k, 3);
    rt_cu_sync(G);
    rt_cu_download(gotx, (rt_dptr)(uintptr_t)gx, bytes);
    rt_cu_download(goty, (rt_dptr)(uintptr_t)gy, bytes);
    size_t bad = 0, changed = 0;
    for (size_t i = 0; i < cnt; i++) {
        bad += gotx[i] != wx[i] || goty[i] != wy[i];
        changed += wx[i] != x[i] || wy[i] != y[i];
    }
    if (bad || !changed)
        report("mask_tokens", INFINITY, TOL_EW, " (%zu of %zu places differ; %zu masked)", bad,
               cnt, changed);
    else
        report("mask_tokens", 0.0, TOL_EW, NULL);
    free(x), free(y), free(idx), free(idx64), free(wx), free(wy), free(gotx), free(goty);
    reset();
}

/* ---- loader.augment ------------------------------------------------------------------- */

/* a kernel's n output bytes at gout (after a sync) against want, exactly */
static void same_bytes(const char *name, void *gout, unsigned char *got,
                       const unsigned char *want, size_t n, int run)
{
    rt_cu_sync(G);
    rt_cu_download(got, (rt_dptr)(uintptr_t)gout, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += got[i] != want[i];
    if (bad)
        report(name, INFINITY, TOL_EW, " (%zu of %zu bytes differ, run %d)", bad, n, run);
    else
        report(name, 0.0, TOL_EW, NULL);
}

/* data.cuh's rt_gather_augment against data.c's rt_gather_augment: n images [C, H, W] of
 * `elem`-byte values held on the device, rows picked by random indices, cropped (pad)
 * and flipped as sample idx[r] of epoch 3 draws; a move of bytes, so exact. */
static void t_gather_augment(int64_t n, int64_t rows, int64_t Ch, int64_t H, int64_t W,
                             int elem, int64_t pad, int hflip)
{
    SHAPE("%lld of %lld images %lldx%lldx%lld, %d-byte values, pad %lld%s", (long long)rows,
          (long long)n, (long long)Ch, (long long)H, (long long)W, elem, (long long)pad,
          hflip ? ", flips" : "");
    size_t img = (size_t)(Ch * H * W * elem), all = (size_t)n * img, out = (size_t)rows * img;
    unsigned char *data = rt_xmalloc(all), *want = rt_xmalloc(out);
    for (size_t i = 0; i < all; i++)
        data[i] = (unsigned char)(irand(255) + 1);   /* no zeros: the padding shows */
    int32_t *idx = rt_xmalloc((size_t)rows * sizeof *idx);
    for (int64_t r = 0; r < rows; r++)
        idx[r] = (int32_t)irand(n);
    rt_gather_augment(data, idx, want, rows, Ch, H, W, elem, pad, hflip, 1337, 3);
    void *gdata = up(data, all), *gidx = up(idx, (size_t)rows * 4), *gout = dalloc(out);
    unsigned char *got = rt_xmalloc(out);
    for (int rep = 0; rep < 2; rep++) {
        rt_cu_gather_augment(G, gdata, gidx, gout, rows, Ch, H, W, elem, pad, hflip, 1337, 3);
        same_bytes("gather_augment", gout, got, want, out, rep + 1);
    }
    free(data), free(want), free(idx), free(got), reset();
}

/* data.cuh's rt_gather_resized_crop against augment.c's: u8 images [C, H, W], boxes
 * drawn with the scale and ratio ranges given (ratios that never fit: the fallback),
 * resized as Pillow's bilinear; integer sums over weights computed in double alike, so
 * exact. */
static void t_gather_resized_crop(int64_t n, int64_t rows, int64_t Ch, int64_t H, int64_t W,
                                  double smin, double smax, double r0, double r1, int hflip)
{
    SHAPE("%lld of %lld u8 images %lldx%lldx%lld, scale [%g, %g], ratio [%g, %g]%s",
          (long long)rows, (long long)n, (long long)Ch, (long long)H, (long long)W, smin, smax,
          r0, r1, hflip ? ", flips" : "");
    rt_train_config c = {.rrc_smin = smin, .rrc_smax = smax, .rrc_r0 = r0, .rrc_r1 = r1};
    rt_rrc k = rt_rrc_of(&c);
    size_t img = (size_t)(Ch * H * W), all = (size_t)n * img, out = (size_t)rows * img;
    unsigned char *data = rt_xmalloc(all), *want = rt_xmalloc(out), *got = rt_xmalloc(out);
    for (size_t i = 0; i < all; i++)
        data[i] = (unsigned char)irand(256);
    int32_t *idx = rt_xmalloc((size_t)rows * sizeof *idx);
    for (int64_t r = 0; r < rows; r++)
        idx[r] = (int32_t)irand(n);
    rt_gather_resized_crop(data, idx, want, rows, Ch, H, W, &k, hflip, 1337, 3);
    void *gdata = up(data, all), *gidx = up(idx, (size_t)rows * 4), *gout = dalloc(out);
    rt_cu_gather_resized_crop(G, gdata, gidx, gout, rows, Ch, H, W, &k, hflip, 1337, 3);
    same_bytes("gather_resized_crop", gout, got, want, out, 1);
    free(data), free(want), free(idx), free(got), reset();
}

/* data.cuh's rt_color_jitter against augment.c's: u8 images [C, H, W] (C 1 or 3) in
 * place, each sample's order and factors drawn; contrast's mean over a block's sum, float
 * blends and Pillow's HSV steps rounded alike, so exact. */
static void t_color_jitter(int64_t rows, int64_t Ch, int64_t H, int64_t W, double b, double c,
                           double s, double h)
{
    SHAPE("%lld u8 images %lldx%lldx%lld, brightness %g, contrast %g, saturation %g, hue %g",
          (long long)rows, (long long)Ch, (long long)H, (long long)W, b, c, s, h);
    rt_train_config cfg = {.jitter = {b, c, s, h}};
    rt_jitter k = rt_jitter_of(&cfg);
    size_t img = (size_t)(Ch * H * W), out = (size_t)rows * img;
    unsigned char *x = rt_xmalloc(out), *want = rt_xmalloc(out), *got = rt_xmalloc(out);
    for (size_t i = 0; i < out; i++)
        x[i] = (unsigned char)irand(256);
    memcpy(want, x, out);
    int32_t *idx = rt_xmalloc((size_t)rows * sizeof *idx);
    for (int64_t r = 0; r < rows; r++) {
        idx[r] = (int32_t)irand(1000);
        rt_jitter_draw d;
        rt_jitter_draw_of(&k, rt_aug_bits(1337, 3, idx[r]), &d);
        rt_color_jitter(want + (size_t)r * img, Ch, H, W, &k, &d);
    }
    void *gx = up(x, out), *gidx = up(idx, (size_t)rows * 4);
    rt_cu_color_jitter(G, gx, gidx, rows, Ch, H, W, &k, 1337, 3);
    same_bytes("color_jitter", gx, got, want, out, 1);
    free(x), free(want), free(got), free(idx), reset();
}

/* ---- convolution and pooling ------------------------------------------------------------ */

/* conv2d with groups G > 1 (runtime/conv_grouped.c against conv.cuh's rt_gconv_*): the
 * forward pass (with or without bias), the input gradient, and the weight and bias
 * gradients added to poisoned random values. Weights are fp32 parameters (up32). */
static void t_gconv(int64_t B, int64_t Ch, int64_t H, int64_t W, int64_t k, int64_t s,
                    int64_t pad, int64_t Cout, int64_t grp, int bias)
{
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    int64_t nx = B * Ch * H * W, ny = B * Cout * OH * OW, nw = Cout * (Ch / grp) * k * k;
    SHAPE("B%lld C%lld %lldx%lld k%lld s%lld p%lld out%lld g%lld%s", (long long)B,
          (long long)Ch, (long long)H, (long long)W, (long long)k, (long long)s, (long long)pad,
          (long long)Cout, (long long)grp, bias ? "" : " no bias");
    float *x = avec(nx), *w = fvec(nw), *b = bias ? fvec(Cout) : NULL, *dy = avec(ny);
    float *y = nans(ny), *dx = nans(nx), *dw0 = fvec(nw), *db0 = fvec(Cout);
    float *dw = fcopy(dw0, nw), *db = fcopy(db0, Cout);
    rt_gconv_fwd(&C, x, w, b, y, B, Ch, H, W, k, s, pad, OH, OW, Cout, grp);
    rt_gconv_bwd_data(&C, dy, w, dx, B, Ch, H, W, k, s, pad, OH, OW, Cout, grp);
    rt_gconv_bwd_weight(&C, x, dy, dw, bias ? db : NULL, B, Ch, H, W, k, s, pad, OH, OW, Cout, grp);
    float *gx = up_a(x, nx), *gdy = up_a(dy, ny), *gy = dalloc_a(ny), *gdx = dalloc_a(nx);
    float *gw = up32(w, nw), *gb = bias ? up32(b, Cout) : NULL, *gdw = up32(dw0, nw),
          *gdb = up32(db0, Cout), *py = nans(ny), *px = nans(nx);
    out_t o[4] = {{"y", y, {0}, ny}, {"dx", dx, {0}, nx}, {"dw", dw, {0}, nw},
                  {"db", db, {0}, Cout}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gy, py, ny);
        upload_a(gdx, px, nx);
        upload(gdw, dw0, (size_t)nw * 4);
        upload(gdb, db0, (size_t)Cout * 4);
        rt_cu_gconv_fwd(G, gx, gw, gb, gy, B, Ch, H, W, k, s, pad, OH, OW, Cout, grp);
        rt_cu_gconv_bwd_data(G, gdy, gw, gdx, B, Ch, H, W, k, s, pad, OH, OW, Cout, grp);
        rt_cu_gconv_bwd_weight(G, gx, gdy, gdw, bias ? gdb : NULL, B, Ch, H, W, k, s, pad, OH, OW,
                               Cout, grp);
        o[0].gpu[rep] = down_a(gy, ny);
        o[1].gpu[rep] = down_a(gdx, nx);
        o[2].gpu[rep] = down(gdw, nw);
        o[3].gpu[rep] = down(gdb, Cout);
    }
    judge("gconv_fwd", TA(TOL_EW), &o[0], 1);
    judge("gconv_bwd_data", TA(TOL_EW), &o[1], 1);
    judge("gconv_bwd_weight", TOL_RED, &o[2], 2);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw0), free(db0), free(dw);
    free(db), free(py), free(px), reset();
}

/* conv2d with groups 1 without columns (runtime/conv.c's rt_conv_* on the CPU: im2col or
 * col2im and a GEMM, against cuda_ops.c's rt_cu_conv_*: conv.cuh's direct and
 * implicit-GEMM kernels, forced on for every shape they take): yt = w im2col(x), dw +=
 * dyt im2col(x)^T (onto random values) where C*k*k <= 32 (direct), dx = col2im(w^T dyt)
 * at stride 1 (implicit GEMM). The kernels sum in another order than the GEMMs:
 * reductions' tolerance. */
static void t_conv_nocol(int64_t B, int64_t Ch, int64_t H, int64_t W, int64_t k, int64_t s,
                         int64_t pad, int64_t Cout)
{
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1, ckk = Ch * k * k;
    int64_t nx = B * Ch * H * W, ny = Cout * B * OH * OW, nw = Cout * ckk, ncol = ckk * B * OH * OW;
    int direct = ckk <= 32, igemm = s == 1;
    SHAPE("B%lld C%lld %lldx%lld k%lld s%lld p%lld out%lld", (long long)B, (long long)Ch,
          (long long)H, (long long)W, (long long)k, (long long)s, (long long)pad, (long long)Cout);
    float *x = avec(nx), *w = fvec(nw), *dyt = avec(ny), *col = nans(ncol);
    float *yt = nans(ny), *dx = nans(nx), *dw0 = fvec(nw), *dw = fcopy(dw0, nw);
    /* 16-bit: the tensor cores' implicit GEMMs (the forward; the input gradient at
     * stride 1), against the GEMM path on the weights rounded as the GPU's GEMMs take
     * them (the parameters' 16-bit copy) */
    float *wr = fcopy(w, nw), *ytr = nans(ny), *dxr = nans(nx), *dwr = fcopy(dw0, nw);
    round_act(wr, nw);
    if (half) {
        rt_conv_fwd(&C, x, wr, col, ytr, B, Ch, H, W, k, s, pad, OH, OW, Cout);
        rt_conv_bwd_weight(&C, x, dyt, col, dwr, B, Ch, H, W, k, s, pad, OH, OW, Cout);
        if (igemm)
            rt_conv_bwd_data(&C, wr, dyt, col, dxr, B, Ch, H, W, k, s, pad, OH, OW, Cout);
    }
    if (direct) {
        rt_conv_fwd(&C, x, w, col, yt, B, Ch, H, W, k, s, pad, OH, OW, Cout);
        rt_conv_bwd_weight(&C, x, dyt, col, dw, B, Ch, H, W, k, s, pad, OH, OW, Cout);
    }
    if (igemm)
        rt_conv_bwd_data(&C, w, dyt, col, dx, B, Ch, H, W, k, s, pad, OH, OW, Cout);
    float *gx = up_a(x, nx), *gdyt = up_a(dyt, ny), *gy = dalloc_a(ny), *gdx = dalloc_a(nx);
    float *gw = up32(w, nw), *gdw = up32(dw0, nw), *py = nans(ny), *px = nans(nx);
    out_t o[6] = {{"yt", yt, {0}, ny}, {"dw", dw, {0}, nw}, {"dx", dx, {0}, nx}, {"yt", ytr, {0}, ny},
                  {"dx", dxr, {0}, nx}, {"dw", dwr, {0}, nw}};
    rt_cu_conv_kernels(3);   /* the CUDA cores' kernels; the tensor cores' called by name */
    for (int rep = 0; rep < 2; rep++) {
        int ran = 1;
        if (direct) {
            upload_a(gy, py, ny);
            upload(gdw, dw0, (size_t)nw * 4);
            ran &= rt_cu_conv_direct_fwd(G, gx, gw, gy, B, Ch, H, W, k, s, pad, OH, OW, Cout) &&
                   rt_cu_conv_direct_dw(G, gx, gdyt, gdw, B, Ch, H, W, k, s, pad, OH, OW, Cout);
            o[0].gpu[rep] = down_a(gy, ny);
            o[1].gpu[rep] = down(gdw, nw);
        }
        if (igemm) {
            upload_a(gdx, px, nx);
            ran &= rt_cu_conv_igemm_dx(G, gw, gdyt, gdx, B, Ch, H, W, k, s, pad, OH, OW, Cout);
            o[2].gpu[rep] = down_a(gdx, nx);
        }
        if (half) {
            rt_cu_conv_kernels(2);
            upload_a(gy, py, ny);
            ran &= rt_cu_conv_igemm_fwd(G, gx, gw, gy, B, Ch, H, W, k, s, pad, OH, OW, Cout);
            o[3].gpu[rep] = down_a(gy, ny);
            upload(gdw, dw0, (size_t)nw * 4);
            ran &= rt_cu_conv_igemm_dw(G, gx, gdyt, gdw, B, Ch, H, W, k, s, pad, OH, OW, Cout);
            o[5].gpu[rep] = down(gdw, nw);
            rt_cu_conv_kernels(3);
        }
        if (half && igemm) {
            upload_a(gdx, px, nx);
            ran &= rt_cu_conv_igemm_dx_tc(G, gw, gdyt, gdx, B, Ch, H, W, k, pad, OH, OW, Cout);
            o[4].gpu[rep] = down_a(gdx, nx);
        }
        if (!ran)
            report("conv_nocol", INFINITY, TOL_RED, " (a kernel refused the shape)");
    }
    rt_cu_conv_kernels(1);
    if (direct) {
        judge("conv_direct_fwd", TA(TOL_RED), &o[0], 1);
        judge("conv_direct_dw", TOL_RED, &o[1], 1);
    }
    if (igemm)
        judge("conv_igemm_dx", TA(TOL_RED), &o[2], 1);
    if (half)
        judge("conv_igemm_fwd_tc", TA(TOL_RED), &o[3], 1);
    if (half && igemm)
        judge("conv_igemm_dx_tc", TA(TOL_RED), &o[4], 1);
    if (half)
        judge("conv_igemm_dw_tc", TOL_RED, &o[5], 1);
    free(x), free(w), free(dyt), free(col), free(yt), free(dx), free(dw0), free(dw), free(py);
    free(wr), free(ytr), free(dxr), free(dwr);
    free(px), reset();
}

static int wide;   /* the 64-bit index path forced (rt_cu_force_wide_index) */

static void t_conv(int64_t B, int64_t Ch, int64_t H, int64_t W, int64_t k, int64_t s,
                   int64_t pad)
{
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    int64_t nx = B * Ch * H * W, ncol = Ch * k * k * B * OH * OW;
    SHAPE("B%lld C%lld %lldx%lld k%lld s%lld p%lld%s", (long long)B, (long long)Ch, (long long)H,
          (long long)W, (long long)k, (long long)s, (long long)pad, wide ? " 64-bit" : "");
    float *x = avec(nx), *col = nans(ncol), *dcol = avec(ncol), *dx = nans(nx);
    rt_im2col(&C, x, col, B, Ch, H, W, k, s, pad, OH, OW);
    rt_col2im(&C, dcol, dx, B, Ch, H, W, k, s, pad, OH, OW);
    float *gx = up_a(x, nx), *gcol = dalloc_a(ncol), *gdcol = up_a(dcol, ncol);
    float *gdx = dalloc_a(nx), *poison_col = nans(ncol), *poison_x = nans(nx);
    out_t o1 = {"col", col, {0}, ncol}, o2 = {"dx", dx, {0}, nx};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gcol, poison_col, ncol);
        upload_a(gdx, poison_x, nx);
        rt_cu_im2col(G, gx, gcol, B, Ch, H, W, k, s, pad, OH, OW);
        rt_cu_col2im(G, gdcol, gdx, B, Ch, H, W, k, s, pad, OH, OW);
        o1.gpu[rep] = down_a(gcol, ncol);
        o2.gpu[rep] = down_a(gdx, nx);
    }
    judge("im2col", TOL_EW, &o1, 1);   /* a copy: exact in bf16 too */
    judge("col2im", TA(TOL_EW), &o2, 1);
    free(x), free(col), free(dcol), free(dx), free(poison_col), free(poison_x), reset();
}

/* quantized: inputs on a grid of 1/4, so windows hold ties (first max wins); nan: a few
 * NaN inputs (a NaN is the max; the last NaN of a window takes the gradient) */
static void t_pool(int64_t planes, int64_t H, int64_t W, int64_t k, int64_t s, int quantized,
                   int with_nan)
{
    int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1, nx = planes * H * W, ny = planes * OH * OW;
    SHAPE("%lld x %lldx%lld k%lld s%lld%s%s%s", (long long)planes, (long long)H, (long long)W,
          (long long)k, (long long)s, quantized ? " ties" : "", with_nan ? " nan" : "",
          wide ? " 64-bit" : "");
    float *x = fvec(nx), *dy = fvec(ny);
    if (quantized)
        for (int64_t i = 0; i < nx; i++)
            x[i] = roundf(x[i] * 4) / 4;
    if (with_nan)
        for (int64_t i = 0; i < nx; i += 7)
            x[i] = NAN;
    round_act(x, nx);
    round_act(dy, ny);
    float *y = nans(ny), *dx = nans(nx), *ya = nans(ny), *dxa = nans(nx);
    rt_maxpool2d_fwd(&C, x, y, planes, H, W, k, s, OH, OW);
    rt_maxpool2d_bwd(&C, x, dy, dx, planes, H, W, k, s, OH, OW);
    rt_avgpool2d_fwd(&C, x, ya, planes, H, W, k, s, OH, OW);
    rt_avgpool2d_bwd(&C, dy, dxa, planes, H, W, k, s, OH, OW);
    float *gx = up_a(x, nx), *gdy = up_a(dy, ny), *gy = dalloc_a(ny), *gdx = dalloc_a(nx);
    float *gya = dalloc_a(ny), *gdxa = dalloc_a(nx), *py = nans(ny), *px = nans(nx);
    out_t o[4] = {{"y", y, {0}, ny}, {"dx", dx, {0}, nx}, {"y", ya, {0}, ny}, {"dx", dxa, {0}, nx}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gy, py, ny), upload_a(gya, py, ny);
        upload_a(gdx, px, nx), upload_a(gdxa, px, nx);
        rt_cu_maxpool2d_fwd(G, gx, gy, planes, H, W, k, s, OH, OW);
        rt_cu_maxpool2d_bwd(G, gx, gdy, gdx, planes, H, W, k, s, OH, OW);
        rt_cu_avgpool2d_fwd(G, gx, gya, planes, H, W, k, s, OH, OW);
        rt_cu_avgpool2d_bwd(G, gdy, gdxa, planes, H, W, k, s, OH, OW);
        o[0].gpu[rep] = down_a(gy, ny), o[1].gpu[rep] = down_a(gdx, nx);
        o[2].gpu[rep] = down_a(gya, ny), o[3].gpu[rep] = down_a(gdxa, nx);
    }
    judge("maxpool2d_fwd", TOL_EW, &o[0], 1);
    judge("maxpool2d_bwd", TA(TOL_EW), &o[1], 1);
    if (!with_nan) {   /* NaN windows: avgpool is plain arithmetic, nothing to add */
        judge("avgpool2d_fwd", TA(TOL_EW), &o[2], 1);
        judge("avgpool2d_bwd", TA(TOL_EW), &o[3], 1);
    } else {
        for (int k2 = 2; k2 < 4; k2++)
            free(o[k2].gpu[0]), free(o[k2].gpu[1]);
    }
    free(x), free(dy), free(y), free(dx), free(ya), free(dxa), free(py), free(px), reset();
}

/* ---- LayerNorm ----------------------------------------------------------------------------- */

/* The backward also with an addend (a gradient sum folded in: dx + g), into its own
 * buffer and in place (g is dx's storage, as memplan lays it out). */
/* PARTS: 2 a weight and a bias, 1 the weight alone (`bias` false), 0 neither (`affine`
 * false: NULL for both and their gradients) */
static void t_layernorm(int64_t rows, int64_t d, int parts)
{
    SHAPE("[%lld, %lld]%s", (long long)rows, (long long)d,
          parts == 2 ? "" : parts ? " no bias" : " no weight or bias");
    int64_t n = rows * d;
    float *x = fvec(n), *w0 = fvec(d), *b0 = fvec(d), *dy = fvec(n), *g = avec(n);
    float *w = parts ? w0 : NULL, *b = parts > 1 ? b0 : NULL;
    for (int64_t i = 0; i < n; i++)   /* an offset, so the variance is not trivial */
        x[i] = 3.0f + 2.0f * x[i];
    round_act(x, n);
    round_act(dy, n);
    float *y = nans(n), *mean = nans(rows), *rstd = nans(rows), *dx = nans(n);
    float *dw0 = fvec(d), *db0 = fvec(d), *dw = fcopy(dw0, d), *db = fcopy(db0, d);
    float *dxa = nans(n), *dxi = fcopy(g, n), *sdw = fcopy(dw0, d), *sdb = fcopy(db0, d);
    float *dwp = w ? dw : NULL, *dbp = b ? db : NULL, *sdwp = w ? sdw : NULL, *sdbp = b ? sdb : NULL;
    rt_layernorm_fwd(&C, x, w, b, y, mean, rstd, rows, d, 1e-5f);
    rt_layernorm_bwd(&C, x, w, mean, rstd, dy, NULL, dx, dwp, dbp, rows, d);
    rt_layernorm_bwd(&C, x, w, mean, rstd, dy, g, dxa, sdwp, sdbp, rows, d);
    rt_layernorm_bwd(&C, x, w, mean, rstd, dy, dxi, dxi, sdwp, sdbp, rows, d);
    float *gx = up_a(x, n), *gw = w ? up(w, d * 4) : NULL, *gb = b ? up(b, d * 4) : NULL;
    float *gy = dalloc_a(n), *gmean = dalloc(rows * 4), *grstd = dalloc(rows * 4);
    float *gdx = dalloc_a(n), *gdw = dalloc(d * 4), *gdb = dalloc(d * 4), *gdy = up_a(dy, n);
    float *gdwp = w ? gdw : NULL, *gdbp = b ? gdb : NULL;
    float *gg = up_a(g, n), *gdxa = dalloc_a(n), *gdxi = dalloc_a(n);
    float *pn = nans(n), *pr = nans(rows);
    out_t of[3] = {{"y", y, {0}, n}, {"mean", mean, {0}, rows}, {"rstd", rstd, {0}, rows}};
    out_t ob[3] = {{"dx", dx, {0}, n}, {"dw", dw, {0}, d}, {"db", db, {0}, d}};
    out_t oa[2] = {{"dx + g", dxa, {0}, n}, {"dx + g in place", dxi, {0}, n}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gy, pn, n), upload_a(gdx, pn, n), upload_a(gdxa, pn, n), upload_a(gdxi, g, n);
        upload(gmean, pr, rows * 4), upload(grstd, pr, rows * 4);
        upload(gdw, dw0, d * 4), upload(gdb, db0, d * 4);
        rt_cu_layernorm_fwd(G, gx, gw, gb, gy, gmean, grstd, rows, d, 1e-5f);
        of[0].gpu[rep] = down_a(gy, n);
        of[1].gpu[rep] = down(gmean, rows), of[2].gpu[rep] = down(grstd, rows);
        /* the backward from the CPU's statistics, so that its check is its own */
        upload(gmean, mean, rows * 4), upload(grstd, rstd, rows * 4);
        rt_cu_layernorm_bwd(G, gx, gw, gmean, grstd, gdy, NULL, gdx, gdwp, gdbp, rows, d);
        ob[0].gpu[rep] = down_a(gdx, n), ob[1].gpu[rep] = down(gdw, d), ob[2].gpu[rep] = down(gdb, d);
        /* with the addend (dw, db accumulate on; checked above) */
        rt_cu_layernorm_bwd(G, gx, gw, gmean, grstd, gdy, gg, gdxa, gdwp, gdbp, rows, d);
        rt_cu_layernorm_bwd(G, gx, gw, gmean, grstd, gdy, gdxi, gdxi, gdwp, gdbp, rows, d);
        oa[0].gpu[rep] = down_a(gdxa, n), oa[1].gpu[rep] = down_a(gdxi, n);
    }
    judge("layernorm_fwd", TA(TOL_EW), of, 1);
    judge("layernorm_fwd stats", TOL_EW, of + 1, 2);
    /* dx: a row reduction per element; dw, db: sums over rows */
    judge("layernorm_bwd", TA(TOL_RED), ob, 1);
    judge(parts ? "layernorm_bwd dw db" : "layernorm_bwd dw db untouched", TOL_RED, ob + 1, 2);
    judge("layernorm_bwd addend", TA(TOL_RED), oa, 2);
    free(x), free(w0), free(b0), free(dy), free(g), free(y), free(mean), free(rstd), free(dx);
    free(dw0), free(db0), free(dw), free(db), free(dxa), free(dxi), free(sdw), free(sdb);
    free(pn), free(pr), reset();
}

/* ---- RMSNorm and the gated linear unit ------------------------------------------------------ */

/* As t_layernorm: the backward also with an addend (a residual's gradient folded in),
 * into its own buffer and in place. */
static void t_rmsnorm(int64_t rows, int64_t d)
{
    SHAPE("[%lld, %lld]", (long long)rows, (long long)d);
    int64_t n = rows * d;
    float *x = fvec(n), *w = fvec(d), *dy = fvec(n), *g = avec(n);
    for (int64_t i = 0; i < n; i++)   /* an offset, as a residual stream has */
        x[i] = 0.5f + 2.0f * x[i];
    round_act(x, n);
    round_act(dy, n);
    float *y = nans(n), *rstd = nans(rows), *dx = nans(n);
    float *dw0 = fvec(d), *dw = fcopy(dw0, d), *sdw = fcopy(dw0, d);
    float *dxa = nans(n), *dxi = fcopy(g, n);
    rt_rmsnorm_fwd(&C, x, w, y, rstd, rows, d, 1e-6f);
    rt_rmsnorm_bwd(&C, x, w, rstd, dy, NULL, dx, dw, rows, d);
    rt_rmsnorm_bwd(&C, x, w, rstd, dy, g, dxa, sdw, rows, d);
    rt_rmsnorm_bwd(&C, x, w, rstd, dy, dxi, dxi, sdw, rows, d);
    float *gx = up_a(x, n), *gw = up(w, d * 4), *gdy = up_a(dy, n);
    float *gy = dalloc_a(n), *grstd = dalloc(rows * 4), *gdx = dalloc_a(n), *gdw = dalloc(d * 4);
    float *gg = up_a(g, n), *gdxa = dalloc_a(n), *gdxi = dalloc_a(n);
    float *pn = nans(n), *pr = nans(rows);
    out_t of[2] = {{"y", y, {0}, n}, {"rstd", rstd, {0}, rows}};
    out_t ob[2] = {{"dx", dx, {0}, n}, {"dw", dw, {0}, d}};
    out_t oa[2] = {{"dx + g", dxa, {0}, n}, {"dx + g in place", dxi, {0}, n}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gy, pn, n), upload_a(gdx, pn, n), upload_a(gdxa, pn, n), upload_a(gdxi, g, n);
        upload(grstd, pr, rows * 4), upload(gdw, dw0, d * 4);
        rt_cu_rmsnorm_fwd(G, gx, gw, gy, grstd, rows, d, 1e-6f);
        of[0].gpu[rep] = down_a(gy, n), of[1].gpu[rep] = down(grstd, rows);
        /* the backward from the CPU's statistics, so that its check is its own */
        upload(grstd, rstd, rows * 4);
        rt_cu_rmsnorm_bwd(G, gx, gw, grstd, gdy, NULL, gdx, gdw, rows, d);
        ob[0].gpu[rep] = down_a(gdx, n), ob[1].gpu[rep] = down(gdw, d);
        rt_cu_rmsnorm_bwd(G, gx, gw, grstd, gdy, gg, gdxa, gdw, rows, d);
        rt_cu_rmsnorm_bwd(G, gx, gw, grstd, gdy, gdxi, gdxi, gdw, rows, d);
        oa[0].gpu[rep] = down_a(gdxa, n), oa[1].gpu[rep] = down_a(gdxi, n);
    }
    judge("rmsnorm_fwd", TA(TOL_EW), of, 1);
    judge("rmsnorm_fwd rstd", TOL_EW, of + 1, 1);
    judge("rmsnorm_bwd", TA(TOL_RED), ob, 1);
    judge("rmsnorm_bwd dw", TOL_RED, ob + 1, 1);
    judge("rmsnorm_bwd addend", TA(TOL_RED), oa, 2);
    free(x), free(w), free(dy), free(g), free(y), free(rstd), free(dx), free(dw0), free(dw);
    free(sdw), free(dxa), free(dxi), free(pn), free(pr), reset();
}

/* ConvNeXt V2's grn over B samples of x [T, C]: y and the saved norms g [B, C + 1]; the
 * backward from the CPU's norms (dx, dw and db accumulated); the weight and bias away
 * from their zeros, so that the norms' part of dx counts */
static void t_grn(int64_t B, int64_t T, int64_t Cn)
{
    SHAPE("[%lld, %lld, %lld]", (long long)B, (long long)T, (long long)Cn);
    int64_t n = B * T * Cn, ng = B * (Cn + 1);
    float *x = fvec(n), *w = fvec(Cn), *b = fvec(Cn), *dy = fvec(n);
    round_act(x, n);
    round_act(dy, n);
    float *y = nans(n), *g = nans(ng), *dx = nans(n);
    float *dw0 = fvec(Cn), *dw = fcopy(dw0, Cn), *db = fcopy(dw0, Cn);
    rt_grn_fwd(&C, x, w, b, y, g, B, T, Cn);
    rt_grn_bwd(&C, x, w, g, dy, dx, dw, db, B, T, Cn);
    float *gx = up_a(x, n), *gw = up(w, Cn * 4), *gb = up(b, Cn * 4), *gdy = up_a(dy, n);
    float *gy = dalloc_a(n), *gg = dalloc(ng * 4), *gdx = dalloc_a(n);
    float *gdw = dalloc(Cn * 4), *gdb = dalloc(Cn * 4), *pn = nans(n), *pg = nans(ng);
    out_t of[2] = {{"y", y, {0}, n}, {"g", g, {0}, ng}};
    out_t ob[3] = {{"dx", dx, {0}, n}, {"dw", dw, {0}, Cn}, {"db", db, {0}, Cn}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gy, pn, n), upload_a(gdx, pn, n), upload(gg, pg, ng * 4);
        upload(gdw, dw0, Cn * 4), upload(gdb, dw0, Cn * 4);
        rt_cu_grn_fwd(G, gx, gw, gb, gy, gg, B, T, Cn);
        of[0].gpu[rep] = down_a(gy, n), of[1].gpu[rep] = down(gg, ng);
        upload(gg, g, ng * 4);   /* the backward from the CPU's norms */
        rt_cu_grn_bwd(G, gx, gw, gg, gdy, gdx, gdw, gdb, B, T, Cn);
        ob[0].gpu[rep] = down_a(gdx, n), ob[1].gpu[rep] = down(gdw, Cn);
        ob[2].gpu[rep] = down(gdb, Cn);
    }
    judge("grn_fwd", TA(TOL_RED), of, 1);
    judge("grn_fwd norms", TOL_RED, of + 1, 1);
    judge("grn_bwd", TA(TOL_RED), ob, 1);
    judge("grn_bwd dw, db", TOL_RED, ob + 1, 2);
    free(x), free(w), free(b), free(dy), free(y), free(g), free(dx), free(dw0), free(dw);
    free(db), free(pn), free(pg), reset();
}

/* attention's qk_norm "all_heads" (OLMo 2's) on rows of qkv [q dq | k dk | v dv]: y, the
 * two 1/rms of each row, dx (v's copied both ways) and dwq, dwk accumulated. */
static void t_qk_norm(int64_t rows, int64_t dq, int64_t dk, int64_t dv)
{
    SHAPE("[%lld, %lld + %lld + %lld]", (long long)rows, (long long)dq, (long long)dk,
          (long long)dv);
    int64_t w = dq + dk + dv, n = rows * w;
    float *x = fvec(n), *wq = fvec(dq), *wk = fvec(dk), *dy = fvec(n);
    round_act(x, n);
    round_act(dy, n);
    float *y = nans(n), *rstd = nans(2 * rows), *dx = nans(n);
    float *dwq0 = fvec(dq), *dwk0 = fvec(dk), *dwq = fcopy(dwq0, dq), *dwk = fcopy(dwk0, dk);
    rt_qk_norm_fwd(&C, x, wq, wk, y, rstd, rows, dq, dk, dv, 1e-5f);
    rt_qk_norm_bwd(&C, x, wq, wk, rstd, dy, dx, dwq, dwk, rows, dq, dk, dv);
    float *gx = up_a(x, n), *gwq = up(wq, dq * 4), *gwk = up(wk, dk * 4), *gdy = up_a(dy, n);
    float *gy = dalloc_a(n), *grstd = dalloc(2 * rows * 4), *gdx = dalloc_a(n);
    float *gdwq = dalloc(dq * 4), *gdwk = dalloc(dk * 4);
    float *pn = nans(n), *pr = nans(2 * rows);
    out_t of[2] = {{"y", y, {0}, n}, {"rstd", rstd, {0}, 2 * rows}};
    out_t ob[3] = {{"dx", dx, {0}, n}, {"dwq", dwq, {0}, dq}, {"dwk", dwk, {0}, dk}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gy, pn, n), upload_a(gdx, pn, n), upload(grstd, pr, 2 * rows * 4);
        upload(gdwq, dwq0, dq * 4), upload(gdwk, dwk0, dk * 4);
        rt_cu_qk_norm_fwd(G, gx, gwq, gwk, gy, grstd, rows, dq, dk, dv, 1e-5f);
        of[0].gpu[rep] = down_a(gy, n), of[1].gpu[rep] = down(grstd, 2 * rows);
        upload(grstd, rstd, 2 * rows * 4);   /* the backward from the CPU's statistics */
        rt_cu_qk_norm_bwd(G, gx, gwq, gwk, grstd, gdy, gdx, gdwq, gdwk, rows, dq, dk, dv);
        ob[0].gpu[rep] = down_a(gdx, n), ob[1].gpu[rep] = down(gdwq, dq);
        ob[2].gpu[rep] = down(gdwk, dk);
    }
    judge("qk_norm_fwd", TA(TOL_EW), of, 1);
    judge("qk_norm_fwd rstd", TOL_EW, of + 1, 1);
    judge("qk_norm_bwd", TA(TOL_RED), ob, 1);
    judge("qk_norm_bwd dwq dwk", TOL_RED, ob + 1, 2);
    free(x), free(wq), free(wk), free(dy), free(y), free(rstd), free(dx), free(dwq0);
    free(dwk0), free(dwq), free(dwk), free(pn), free(pr), reset();
}

/* The mixture of experts' calls (moe.cuh): n tokens d wide, E experts, top k, each
 * expert hid wide. The routing (probabilities, gate weights, experts and rows, group
 * offsets) and the up GEMMs of the dispatch; then each later call from the CPU's
 * routing and gate gradient, so that its check is its own: the combine's sum, its
 * backward's da, dgate and down-weight gradient (accumulated), the dispatch backward's
 * dx and the router's and up weights' gradients (accumulated). With aux, the
 * load-balancing loss's statistics (as the second of two layers' rows), its gradient
 * from them (rt_moe_aux) and the router's gradient with it. The router weights are
 * scaled so that the softmax's choices are clear of ties. */
static void t_moe(int64_t n, int64_t d, int64_t E, int64_t k, int64_t hid, int norm, int aux)
{
    SHAPE("n %lld d %lld E %lld k %lld h %lld%s%s", (long long)n, (long long)d, (long long)E,
          (long long)k, (long long)hid, norm ? "" : " raw", aux ? " aux" : "");
    int64_t R = n * k, h2 = 2 * hid, nwu = E * h2 * d, nwd = E * d * hid;
    float *x = avec(n * d), *wr = fvec(E * d), *wup = fvec(nwu), *wdn = fvec(nwd);
    float *act = avec(R * hid), *dy = avec(n * d), *dh = avec(R * h2);
    for (int64_t i = 0; i < E * d; i++)
        wr[i] *= 4.0f;
    /* the experts' weights as the 16-bit GEMMs read them (moe.cuh rounds them as they
     * load, as a linear's 16-bit copy holds them); the router reads its own in fp32 */
    round_act(wup, nwu);
    round_act(wdn, nwd);
    float *probs = nans(n * E), *gate = nans(n * k), *idx = nans(2 * R), *offs = nans(E + 1);
    float *xg = nans(R * d), *h = nans(R * h2), *o = nans(R * d), *y = nans(n * d);
    float *g = nans(R * d), *da = nans(R * hid), *dgate = nans(n * k), *dl = nans(n * E);
    float *dx = nans(n * d), *dwd0 = fvec(nwd), *dwr0 = fvec(E * d), *dwu0 = fvec(nwu);
    float *dwd = fcopy(dwd0, nwd), *dwr = fcopy(dwr0, E * d), *dwu = fcopy(dwu0, nwu);
    /* the loss's statistics: a first layer's row made up, then this one's; the pass's
     * terms and scale as a loss call leaves them */
    float *st0 = fvec(4 * E), *st = aux ? fcopy(st0, 4 * E) : NULL, *agrad = aux ? nans(E) : NULL;
    for (int64_t i = 0; i < E; i++)
        st0[i] = (float)irand(n * k), st0[E + i] = fabsf(st0[E + i]) * (float)n;
    if (aux)
        memcpy(st, st0, 4 * E * sizeof *st);
    C.terms = G->terms = n;
    C.grad_scale = G->grad_scale = 1.0f / (float)n;
    rt_moe_dispatch_fwd(&C, x, wr, wup, probs, gate, idx, offs, xg, h, st, n, d, E, k, h2, norm,
                        1);
    if (aux)
        rt_moe_aux(&C, st, agrad, 2, n, E, 0.3f);
    rt_moe_combine_fwd(&C, act, wdn, gate, idx, offs, o, y, n, d, E, k, hid);
    rt_moe_combine_bwd(&C, act, wdn, gate, idx, offs, dy, g, da, dgate, dwd, n, d, E, k, hid);
    rt_moe_dispatch_bwd(&C, x, wr, wup, probs, gate, idx, offs, dgate, agrad, dh, xg, dl, dx, dwr,
                        dwu, n, d, E, k, h2, norm);
    float *gx = up_a(x, n * d), *gwr = up(wr, E * d * 4), *gwup = up(wup, nwu * 4);
    float *gwdn = up(wdn, nwd * 4), *gact = up_a(act, R * hid), *gdy = up_a(dy, n * d);
    float *gdh = up_a(dh, R * h2), *gprobs = dalloc(n * E * 4), *ggate = dalloc(n * k * 4);
    float *gidx = dalloc(2 * R * 4), *goffs = dalloc((E + 1) * 4), *gxg = dalloc_a(R * d);
    float *gh = dalloc_a(R * h2), *go = dalloc_a(R * d), *gy = dalloc_a(n * d);
    float *gg = dalloc_a(R * d), *gda = dalloc_a(R * hid), *gdgate = dalloc(n * k * 4);
    float *gdl = dalloc(n * E * 4), *gdx = dalloc_a(n * d), *gdwd = dalloc(nwd * 4);
    float *gdwr = dalloc(E * d * 4), *gdwu = dalloc(nwu * 4);
    float *gst = aux ? dalloc(4 * E * 4) : NULL, *gag = aux ? dalloc(E * 4) : NULL;
    out_t oa[2] = {{"stats", st, {0}, 4 * E}, {"agrad", agrad, {0}, E}};
    out_t of[5] = {{"probs", probs, {0}, n * E}, {"gate", gate, {0}, n * k},
                   {"idx", idx, {0}, 2 * R}, {"offs", offs, {0}, E + 1}, {"h", h, {0}, R * h2}};
    out_t oc[1] = {{"y", y, {0}, n * d}};
    out_t ob[3] = {{"da", da, {0}, R * hid}, {"dgate", dgate, {0}, n * k},
                   {"dwdown", dwd, {0}, nwd}};
    out_t od[3] = {{"dx", dx, {0}, n * d}, {"dwr", dwr, {0}, E * d}, {"dwup", dwu, {0}, nwu}};
    for (int rep = 0; rep < 2; rep++) {
        upload(gdwd, dwd0, nwd * 4), upload(gdwr, dwr0, E * d * 4), upload(gdwu, dwu0, nwu * 4);
        if (aux)
            upload(gst, st0, 4 * E * 4);
        rt_cu_moe_dispatch_fwd(G, gx, gwr, gwup, gprobs, ggate, gidx, goffs, gxg, gh, gst, n, d, E,
                               k, h2, norm, 1);
        if (aux) {
            rt_cu_moe_aux(G, gst, gag, 2, n, E, 0.3f);
            oa[0].gpu[rep] = down(gst, 4 * E), oa[1].gpu[rep] = down(gag, E);
            upload(gag, agrad, E * 4);   /* the backward from the CPU's */
        }
        of[0].gpu[rep] = down(gprobs, n * E), of[1].gpu[rep] = down(ggate, n * k);
        of[2].gpu[rep] = down(gidx, 2 * R), of[3].gpu[rep] = down(goffs, E + 1);
        of[4].gpu[rep] = down_a(gh, R * h2);
        upload(gprobs, probs, n * E * 4), upload(ggate, gate, n * k * 4);
        upload(gidx, idx, 2 * R * 4), upload(goffs, offs, (E + 1) * 4);
        rt_cu_moe_combine_fwd(G, gact, gwdn, ggate, gidx, goffs, go, gy, n, d, E, k, hid);
        oc[0].gpu[rep] = down_a(gy, n * d);
        rt_cu_moe_combine_bwd(G, gact, gwdn, ggate, gidx, goffs, gdy, gg, gda, gdgate, gdwd, n, d,
                              E, k, hid);
        ob[0].gpu[rep] = down_a(gda, R * hid), ob[1].gpu[rep] = down(gdgate, n * k);
        ob[2].gpu[rep] = down(gdwd, nwd);
        upload(gdgate, dgate, n * k * 4);
        rt_cu_moe_dispatch_bwd(G, gx, gwr, gwup, gprobs, ggate, gidx, goffs, gdgate, gag, gdh, gxg,
                               gdl, gdx, gdwr, gdwu, n, d, E, k, h2, norm);
        od[0].gpu[rep] = down_a(gdx, n * d), od[1].gpu[rep] = down(gdwr, E * d);
        od[2].gpu[rep] = down(gdwu, nwu);
    }
    /* in 16 bits the GPU rounds its intermediates (o, da, g, the copies' gradient) where
     * the CPU keeps fp32: two roundings on the way, over each output's largest value */
    judge("moe_dispatch_fwd route", TOL_EW, of, 4);
    if (aux)
        judge("moe_aux stats agrad", TOL_RED, oa, 2);
    judge("moe_dispatch_fwd h", TA(TOL_RED), of + 4, 1);
    judge_scaled("moe_combine_fwd", TEPI(TOL_RED), oc, 1);
    judge_scaled("moe_combine_bwd da", TEPI(TOL_RED), ob, 1);
    judge_scaled("moe_combine_bwd dgate dw", TEPI(TOL_RED), ob + 1, 2);
    judge_scaled("moe_dispatch_bwd dx", TEPI(TOL_RED), od, 1);
    judge_scaled("moe_dispatch_bwd dwr dwup", TEPI(TOL_RED), od + 1, 2);
    float *host[] = {x, wr, wup, wdn, act, dy, dh, probs, gate, idx, offs, xg, h, o, y, g, da,
                     dgate, dl, dx, dwd0, dwr0, dwu0, dwd, dwr, dwu, st0, st, agrad};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
    reset();
}

/* Each activation of glu (RT_GLU_*), forward and backward; gated: rows of 2h + 1, the
 * last column's sigmoid scaling the row (a moe layer's shared expert), its gradient a
 * sum over the row. */
static void t_glu(int64_t rows, int64_t h, int gated)
{
    static const char *const acts[] = {"silu", "gelu", "gelu_tanh", "sigmoid", "relu"};
    int64_t nx = rows * (2 * h + gated), ny = rows * h;
    float *x = fvec(nx), *dy = fvec(ny);
    for (int64_t i = 0; i < nx; i++)   /* gates over [-3, 3): both tails of each act */
        x[i] *= 3.0f;
    round_act(x, nx);
    round_act(dy, ny);
    float *gx = up_a(x, nx), *gdy = up_a(dy, ny), *gy = dalloc_a(ny), *gdx = dalloc_a(nx);
    float *py = nans(ny), *px = nans(nx);
    for (int act = RT_GLU_SILU; act <= RT_GLU_RELU; act++) {
        SHAPE("[%lld, 2 x %lld%s] %s", (long long)rows, (long long)h, gated ? " + 1" : "",
              acts[act]);
        float *y = nans(ny), *dx = nans(nx);
        (gated ? rt_glu_gated_fwd : rt_glu_fwd)(&C, x, y, rows, h, act);
        (gated ? rt_glu_gated_bwd : rt_glu_bwd)(&C, x, dy, dx, rows, h, act);
        out_t o[2] = {{"y", y, {0}, ny}, {"dx", dx, {0}, nx}};
        for (int rep = 0; rep < 2; rep++) {
            upload_a(gy, py, ny), upload_a(gdx, px, nx);
            (gated ? rt_cu_glu_gated_fwd : rt_cu_glu_fwd)(G, gx, gy, rows, h, act);
            (gated ? rt_cu_glu_gated_bwd : rt_cu_glu_bwd)(G, gx, gdy, gdx, rows, h, act);
            o[0].gpu[rep] = down_a(gy, ny), o[1].gpu[rep] = down_a(gdx, nx);
        }
        judge(gated ? "glu_gated_fwd" : "glu_fwd", TA(TOL_EW), o, 1);
        judge(gated ? "glu_gated_bwd" : "glu_bwd", gated ? TA(TOL_RED) : TA(TOL_EW), o + 1, 1);
        free(y), free(dx);
    }
    free(x), free(dy), free(py), free(px), reset();
}

/* ---- batchnorm ------------------------------------------------------------------------------ */

/* x [B, C, HW]: training's forward (scale and shift of the normalization, the saved
 * statistics, the running ones and the count updated), a replay's (the same, running
 * statistics NULL: left alone), evaluation's (from the running statistics), and the
 * backward (dx, dw, db accumulated) from the CPU's statistics. */
static void t_batchnorm(int64_t B, int64_t Ch, int64_t HW, int affine)
{
    SHAPE("[%lld, %lld, %lld]%s", (long long)B, (long long)Ch, (long long)HW, affine ? "" : " no affine");
    int64_t n = B * Ch * HW;
    float *x = fvec(n), *dy = fvec(n), *w = affine ? fvec(Ch) : NULL, *b = affine ? fvec(Ch) : NULL;
    for (int64_t i = 0; i < n; i++)   /* an offset per channel, so the variance is not trivial */
        x[i] = 2.0f + (float)(i / HW % Ch) * 0.25f + 1.5f * x[i];
    round_act(x, n);
    round_act(dy, n);
    float *rm0 = fvec(Ch), *rv0 = fvec(Ch);
    for (int64_t c = 0; c < Ch; c++)
        rv0[c] = 1.5f + rv0[c];
    float cnt0[2] = {0, 0};
    int64_t seven = 7;
    memcpy(cnt0, &seven, 8);
    float *sc = nans(Ch), *sh = nans(Ch), *sce = nans(Ch), *she = nans(Ch), *mean = nans(Ch);
    float *rstd = nans(Ch), *dx = nans(n), *rm = fcopy(rm0, Ch), *rv = fcopy(rv0, Ch);
    float cnt[2] = {cnt0[0], cnt0[1]};
    float *dw0 = fvec(Ch), *db0 = fvec(Ch), *dw = fcopy(dw0, Ch), *db = fcopy(db0, Ch);
    C.train = 1;
    rt_batchnorm_fwd(&C, x, w, b, sc, sh, mean, rstd, rm, rv, cnt, B, Ch, HW, 1e-3f, 0.3f, 0);
    rt_batchnorm_bwd(&C, x, w, mean, rstd, dy, dx, affine ? dw : NULL, affine ? db : NULL, B, Ch, HW, 0);
    C.train = 0;
    rt_batchnorm_fwd(&C, x, w, b, sce, she, NULL, NULL, rm, rv, cnt, B, Ch, HW, 1e-3f, 0.3f, 0);
    float *gx = up_a(x, n), *gdy = up_a(dy, n), *gdx = dalloc_a(n);
    float *gw = affine ? up32(w, Ch) : NULL, *gb = affine ? up32(b, Ch) : NULL;
    float *gsc = dalloc32(Ch * 4), *gsh = dalloc32(Ch * 4), *gmean = dalloc32(Ch * 4);
    float *grstd = dalloc32(Ch * 4), *grm = dalloc32(Ch * 4), *grv = dalloc32(Ch * 4);
    float *gcnt = dalloc32(8), *gdw = dalloc32(Ch * 4), *gdb = dalloc32(Ch * 4);
    float *pn = nans(n), *pc = nans(Ch);
    out_t os[7] = {{"scale", sc, {0}, Ch}, {"shift", sh, {0}, Ch}, {"mean", mean, {0}, Ch},
                   {"rstd", rstd, {0}, Ch}, {"running_mean", rm, {0}, Ch},
                   {"running_var", rv, {0}, Ch}, {"count", cnt, {0}, 2}};
    out_t oe[2] = {{"scale (eval)", sce, {0}, Ch}, {"shift (eval)", she, {0}, Ch}};
    out_t ob[1] = {{"dx", dx, {0}, n}};
    out_t ow[2] = {{"dw", dw, {0}, Ch}, {"db", db, {0}, Ch}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gdx, pn, n);
        upload(gsc, pc, Ch * 4), upload(gsh, pc, Ch * 4), upload(gmean, pc, Ch * 4);
        upload(grstd, pc, Ch * 4), upload(grm, rm0, Ch * 4), upload(grv, rv0, Ch * 4);
        upload(gcnt, cnt0, 8);
        if (affine)
            upload(gdw, dw0, Ch * 4), upload(gdb, db0, Ch * 4);
        G->train = 1;
        rt_cu_batchnorm_fwd(G, gx, gw, gb, gsc, gsh, gmean, grstd, grm, grv, gcnt, B, Ch, HW,
                            1e-3f, 0.3f, 0);
        /* a replay: the same scale and shift, the running statistics left alone */
        rt_cu_batchnorm_fwd(G, gx, gw, gb, gsc, gsh, gmean, grstd, NULL, NULL, NULL, B, Ch, HW,
                            1e-3f, 0.3f, 0);
        os[0].gpu[rep] = down(gsc, Ch), os[1].gpu[rep] = down(gsh, Ch);
        os[2].gpu[rep] = down(gmean, Ch), os[3].gpu[rep] = down(grstd, Ch);
        os[4].gpu[rep] = down(grm, Ch), os[5].gpu[rep] = down(grv, Ch), os[6].gpu[rep] = down(gcnt, 2);
        G->train = 0;
        rt_cu_batchnorm_fwd(G, gx, gw, gb, gsc, gsh, NULL, NULL, grm, grv, gcnt, B, Ch, HW,
                            1e-3f, 0.3f, 0);
        oe[0].gpu[rep] = down(gsc, Ch), oe[1].gpu[rep] = down(gsh, Ch);
        G->train = 1;
        upload(gmean, mean, Ch * 4), upload(grstd, rstd, Ch * 4);
        rt_cu_batchnorm_bwd(G, gx, gw, gmean, grstd, gdy, gdx, affine ? gdw : NULL,
                            affine ? gdb : NULL, B, Ch, HW, 0);
        ob[0].gpu[rep] = down_a(gdx, n);
        ow[0].gpu[rep] = down(gdw, Ch), ow[1].gpu[rep] = down(gdb, Ch);
    }
    judge("batchnorm_fwd", TOL_RED, os, 7);
    judge("batchnorm_fwd eval", TOL_EW, oe, 2);
    judge("batchnorm_bwd", TA(TOL_RED), ob, 1);
    if (affine)
        judge("batchnorm_bwd dw db", TOL_RED, ow, 2);
    else
        free(ow[0].gpu[0]), free(ow[0].gpu[1]), free(ow[1].gpu[0]), free(ow[1].gpu[1]);
    free(x), free(dy), free(w), free(b), free(rm0), free(rv0), free(sc), free(sh), free(sce);
    free(she), free(mean), free(rstd), free(dx), free(rm), free(rv), free(dw0), free(db0);
    free(dw), free(db), free(pn), free(pc), reset();
}

/* ---- losses -------------------------------------------------------------------------------- */

/* The device stats of one pass (rt_cu_begin_pass / rt_cu_end_pass, as the loop runs them)
 * against the CPU's e->loss_sum, e->correct and e->terms, and against the first run. */
typedef struct {
    double loss[2], margin[2];   /* (margin: dpo's pairs') */
    int64_t correct[2], terms[2];
} stats_t;

static void stats_begin(void)
{
    rt_cu_begin_pass(G, 0);
    C.loss_sum = 0, C.correct = 0, C.terms = 0, C.margin_sum = 0;
}

static void stats_end(stats_t *st, int rep)
{
    rt_cu_end_pass(G);
    st->loss[rep] = G->loss_sum, st->correct[rep] = G->correct, st->terms[rep] = G->terms;
    st->margin[rep] = G->margin_sum;
}

static void stats_judge(const char *name, const stats_t *st)
{
    double err = fmax(fabs(st->loss[0] - C.loss_sum) / fmax(1.0, fabs(C.loss_sum)),
                      fabs(st->margin[0] - C.margin_sum) / fmax(1.0, fabs(C.margin_sum)));
    if (st->correct[0] != C.correct || st->terms[0] != C.terms)
        report(name, err, TOL_RED, " (correct %lld vs %lld, terms %lld vs %lld)",
               (long long)st->correct[0], (long long)C.correct, (long long)st->terms[0],
               (long long)C.terms);
    else if (memcmp(&st->loss[0], &st->loss[1], sizeof(double)) ||
             memcmp(&st->margin[0], &st->margin[1], sizeof(double)) ||
             st->correct[0] != st->correct[1] || st->terms[0] != st->terms[1])
        report(name, err, TOL_RED, " (differ between two GPU runs)");
    else
        report(name, err, TOL_RED, NULL);
}

/* rows of Cn random logits in [-4, 4), ld apart, the padding between them NaN (which
 * neither side may read) */
static float *ce_logits(int64_t rows, int64_t Cn, int64_t ld)
{
    float *z = fvec(rows * ld);
    for (int64_t i = 0; i < rows * ld; i++)
        z[i] = i % ld < Cn ? z[i] * 4.0f : NAN;
    return z;
}

/* mode 0: loss only; 1: dlogits in its own buffer; 2: dlogits over the logits. Rows
 * are ld >= Cn apart; the logits' padding holds NaN, which neither kernel may read
 * (the loss would be NaN), and both write 0 into dlogits' padding (the outputs'
 * padding is compared). */
static void t_cross_entropy(int64_t rows, int64_t Cn, int mode, int64_t ld)
{
    static const char *const modes[] = {"loss only", "dlogits", "dlogits in place"};
    SHAPE("[%lld, %lld] rows %lld apart, %s", (long long)rows, (long long)Cn, (long long)ld,
          modes[mode]);
    int64_t n = rows * ld;
    float *z = ce_logits(rows, Cn, ld);
    int32_t *tg = rt_xmalloc((size_t)rows * sizeof *tg);
    for (int64_t r = 0; r < rows; r++) {
        tg[r] = (int32_t)irand(Cn);
        if (r % 3 == 0)   /* some rows predicted right */
            z[r * ld + tg[r]] = 9.0f;
    }
    round_act(z, n);
    /* gradients scaled by C / 8 so that softmax entries are O(1) in the check */
    float gs = (float)Cn / 8.0f, *dz = mode ? nans(n) : NULL;
    C.grad_scale = G->grad_scale = gs;
    float *gz = up_a(z, n), *gdz = mode == 1 ? dalloc_a(n) : mode == 2 ? gz : NULL;
    int32_t *gtg = up(tg, (size_t)rows * 4);
    float *pn = nans(n);
    out_t o = {"dlogits", dz, {0}, n};
    stats_t st;
    for (int rep = 0; rep < 2; rep++) {
        stats_begin();
        if (mode == 2)
            memcpy(dz, z, (size_t)n * sizeof *dz);
        rt_cross_entropy(&C, mode == 2 ? dz : z, tg, dz, rows, Cn, ld);
        if (mode == 1)
            upload_a(gdz, pn, n);
        if (mode == 2)
            upload_a(gz, z, n);
        rt_cu_cross_entropy(G, gz, gtg, gdz, rows, Cn, ld);
        stats_end(&st, rep);
        if (mode)
            o.gpu[rep] = down_a(gdz, n);
    }
    stats_judge("cross_entropy stats", &st);
    if (mode)
        judge("cross_entropy", TA(TOL_EW), &o, 1);
    free(z), free(tg), free(dz), free(pn), reset();
}

/* Label-smoothed cross entropy (smoothing ls): as t_cross_entropy, modes 0-2. */
static void t_cross_entropy_ls(int64_t rows, int64_t Cn, int mode, int64_t ld, float ls)
{
    static const char *const modes[] = {"loss only", "dlogits", "dlogits in place"};
    SHAPE("[%lld, %lld] rows %lld apart, %s, smoothing %g", (long long)rows, (long long)Cn,
          (long long)ld, modes[mode], ls);
    int64_t n = rows * ld;
    float *z = ce_logits(rows, Cn, ld);
    int32_t *tg = rt_xmalloc((size_t)rows * sizeof *tg);
    for (int64_t r = 0; r < rows; r++) {
        tg[r] = (int32_t)irand(Cn);
        if (r % 3 == 0)
            z[r * ld + tg[r]] = 9.0f;
    }
    round_act(z, n);
    float gs = (float)Cn / 8.0f, *dz = mode ? nans(n) : NULL;
    C.grad_scale = G->grad_scale = gs;
    float *gz = up_a(z, n), *gdz = mode == 1 ? dalloc_a(n) : mode == 2 ? gz : NULL;
    int32_t *gtg = up(tg, (size_t)rows * 4);
    float *pn = nans(n);
    out_t o = {"dlogits", dz, {0}, n};
    stats_t st;
    for (int rep = 0; rep < 2; rep++) {
        stats_begin();
        if (mode == 2)
            memcpy(dz, z, (size_t)n * sizeof *dz);
        rt_cross_entropy_ls(&C, mode == 2 ? dz : z, tg, dz, rows, Cn, ld, ls);
        if (mode == 1)
            upload_a(gdz, pn, n);
        if (mode == 2)
            upload_a(gz, z, n);
        rt_cu_cross_entropy_ls(G, gz, gtg, gdz, rows, Cn, ld, ls);
        stats_end(&st, rep);
        if (mode)
            o.gpu[rep] = down_a(gdz, n);
    }
    stats_judge("cross_entropy_ls stats", &st);
    if (mode)
        judge("cross_entropy_ls", TA(TOL_EW), &o, 1);
    free(z), free(tg), free(dz), free(pn), reset();
}

/* cross_entropy's ignore_index (-100, every third target and, with `all`, every one):
 * the loss (label-smoothed where ls > 0) with its gradient in a buffer of its own, the
 * ignored rows 0 (the padding too), the others scaled to the mean over the targets
 * counted, the statistics' terms those. With `parts` the targets are counted ahead
 * (rt_ce_count, as the chunked head does) and the rows go in `parts` calls. */
static void t_cross_entropy_ignore(int64_t rows, int64_t Cn, int64_t ld, float ls, int parts,
                                   int all)
{
    SHAPE("[%lld, %lld] rows %lld apart, smoothing %g, ignore_index -100 on %s, %d call(s)",
          (long long)rows, (long long)Cn, (long long)ld, ls, all ? "every row" : "a third",
          parts ? parts : 1);
    int64_t n = rows * ld;
    float *z = ce_logits(rows, Cn, ld);
    int32_t *tg = rt_xmalloc((size_t)rows * sizeof *tg);
    for (int64_t r = 0; r < rows; r++) {
        tg[r] = all || r % 3 == 1 ? -100 : (int32_t)irand(Cn);
        if (r % 3 == 0 && tg[r] >= 0)
            z[r * ld + tg[r]] = 9.0f;
    }
    round_act(z, n);
    float gs = (float)Cn / 8.0f, *dz = nans(n), *pn = nans(n);
    C.grad_scale = G->grad_scale = gs;
    C.ce_has_ignore = G->ce_has_ignore = 1;
    C.ce_ignore = G->ce_ignore = -100;
    float *gz = up_a(z, n), *gdz = dalloc_a(n);
    int32_t *gtg = up(tg, (size_t)rows * 4);
    out_t o = {"dlogits", dz, {0}, n};
    stats_t st;
    int64_t step = parts ? (rows + parts - 1) / parts : rows;
    for (int rep = 0; rep < 2; rep++) {
        stats_begin();
        upload_a(gdz, pn, n);
        for (rt_exec *e = &C; e; e = e == &C ? G : NULL) {
            int gpu = e == G;
            if (parts && gpu) {   /* (rt_ce_count's device half, called as the others are) */
                rt_cu_ce_count(G, gtg, rows);
                G->ce_rows = rows;
            } else if (parts)
                rt_ce_count(e, tg, rows);
            for (int64_t r = 0; r < rows; r += step) {
                int64_t k = rows - r < step ? rows - r : step;
                const float *zz = gpu ? rt_act_adv(G, gz, r * ld) : z + r * ld;
                float *dd = gpu ? rt_act_adv(G, gdz, r * ld) : dz + r * ld;
                const int32_t *tt = (gpu ? gtg : tg) + r;
                if (ls > 0)
                    (gpu ? rt_cu_cross_entropy_ls : rt_cross_entropy_ls)(e, zz, tt, dd, k, Cn, ld, ls);
                else
                    (gpu ? rt_cu_cross_entropy : rt_cross_entropy)(e, zz, tt, dd, k, Cn, ld);
            }
            rt_ce_done(e);
        }
        stats_end(&st, rep);
        o.gpu[rep] = down_a(gdz, n);
    }
    stats_judge("cross_entropy ignore_index stats", &st);
    judge("cross_entropy ignore_index", TA(TOL_EW), &o, 1);
    C.ce_has_ignore = G->ce_has_ignore = 0;
    free(z), free(tg), free(dz), free(pn), reset();
}

/* The loss with its gradient in a buffer of its own, on the CPU (into dz) and twice on
 * the GPU (o: dz against the two GPU gradients; st: the GPU's statistics). */
static void ce_twice(const float *z, const int32_t *tg, float *dz, int64_t rows, int64_t Cn,
                     int64_t ld, float gs, out_t *o, stats_t *st)
{
    int64_t n = rows * ld;
    C.grad_scale = G->grad_scale = gs;
    float *gz = up_a(z, n), *gdz = dalloc_a(n);
    int32_t *gtg = up(tg, (size_t)rows * 4);
    float *pn = nans(n);
    *o = (out_t){"dlogits", dz, {0}, n};
    for (int rep = 0; rep < 2; rep++) {
        stats_begin();
        rt_cross_entropy(&C, z, tg, dz, rows, Cn, ld);
        upload_a(gdz, pn, n);
        rt_cu_cross_entropy(G, gz, gtg, gdz, rows, Cn, ld);
        stats_end(st, rep);
        o->gpu[rep] = down_a(gdz, n);
    }
    free(pn);
}

/* Logits z (rows of Cn, ld apart) rounded to the activations' type, whose loss comes
 * out NaN on both sides ("cross_entropy WHAT stats"): `correct` the same on the CPU
 * and in both GPU runs, and at least least; then the gradients (worst(): a NaN must
 * meet a NaN). */
static void ce_nan_rows(const char *what, float *z, const int32_t *tg, int64_t rows, int64_t Cn,
                        int64_t ld, int64_t least)
{
    int64_t n = rows * ld;
    round_act(z, n);
    float *dz = nans(n);
    out_t o;
    stats_t st;
    ce_twice(z, tg, dz, rows, Cn, ld, (float)Cn / 8.0f, &o, &st);
    char name[64];
    snprintf(name, sizeof name, "cross_entropy %s stats", what);
    if (!isnan(st.loss[0]) || !isnan(C.loss_sum) || st.correct[0] != C.correct ||
        st.correct[1] != C.correct || C.correct < least)
        report(name, INFINITY, TOL_RED, " (loss %g vs %g, correct %lld vs %lld)", st.loss[0],
               C.loss_sum, (long long)st.correct[0], (long long)C.correct);
    else
        report(name, 0.0, TOL_RED, NULL);
    snprintf(name, sizeof name, "cross_entropy %s", what);
    judge(name, TA(TOL_EW), &o, 1);
    free(dz);
}

/* A row with a NaN logit among rows without: the NaN row's loss and gradient are NaN
 * (the gradient's padding 0), its `correct` the first NaN's index against the target,
 * on both sides (loss.cuh's register path hands such a row to the three passes); the
 * other rows' gradients within tolerance. */
static void t_cross_entropy_nan(int64_t rows, int64_t Cn, int64_t ld)
{
    SHAPE("[%lld, %lld] rows %lld apart, a NaN in row 1", (long long)rows, (long long)Cn,
          (long long)ld);
    float *z = ce_logits(rows, Cn, ld);
    int32_t *tg = rt_xmalloc((size_t)rows * sizeof *tg);
    for (int64_t r = 0; r < rows; r++)
        tg[r] = (int32_t)irand(Cn);
    tg[1] = 777;                  /* the first NaN is at the target: counted correct */
    z[1 * ld + 777] = NAN;
    z[1 * ld + Cn - 1] = NAN;
    ce_nan_rows("NaN", z, tg, rows, Cn, ld, 1);
    free(z), free(tg), reset();
}

/* Infinities: +inf in row 1 (at its target), some -inf in row 2 under a finite
 * maximum (in a whole vector and among the last values), every value -inf in row 3;
 * and finite values past 2.36e38, where max x log2(e) is not a float: a maximum of 3e38
 * in row 4, every value -3e38 in row 5 (bf16 holds them; fp16 rounds them to inf).
 * Rows 1 and 3 come out NaN on both sides (exp(inf - inf)), the others finite in fp32
 * and bf16; loss.cuh's register path hands rows 1, 3, 4 and 5 to the three passes,
 * keeps row 2. `correct` compares exactly. */
static void t_cross_entropy_inf(int64_t Cn, int64_t ld)
{
    const int64_t rows = 6;
    SHAPE("[%lld, %lld] rows %lld apart, infinities", (long long)rows, (long long)Cn,
          (long long)ld);
    float *z = ce_logits(rows, Cn, ld);
    int32_t tg[6] = {3, 4321, 17, 0, 999, 0};
    z[1 * ld + 4321] = INFINITY;
    z[2 * ld + 100] = z[2 * ld + 101] = z[2 * ld + Cn - 1] = -INFINITY;
    z[2 * ld + 17] = 9.0f;
    z[4 * ld + 999] = 3e38f;
    for (int64_t j = 0; j < Cn; j++)
        z[3 * ld + j] = -INFINITY, z[5 * ld + j] = -3e38f;
    ce_nan_rows("inf", z, tg, rows, Cn, ld, 0);
    free(z), reset();
}

/* Rows built for the first argmax (`correct` compares exactly): two equal maxima in
 * different threads' vectors (target at the second: wrong; at the first: right), the
 * maximum at C - 1 alone, a row of equal values (target 0), -0.0 before +0.0 as the
 * maximum (equal: the first, -0.0's, counts), +0.0 before -0.0, the maximum in the
 * first value of a thread's second vector, and in the first value of thread 5's first
 * (loss.cuh's register path starts each thread's search there). */
static void t_cross_entropy_ties(int64_t Cn, int64_t ld)
{
    const int64_t rows = 8;
    SHAPE("[%lld, %lld] rows %lld apart, ties", (long long)rows, (long long)Cn, (long long)ld);
    int64_t n = rows * ld;
    float *z = fvec(n);
    for (int64_t i = 0; i < n; i++)
        z[i] = i % ld < Cn ? -1.0f - fabsf(z[i]) : NAN;
    int32_t *tg = rt_xmalloc((size_t)rows * sizeof *tg);
    float *r0 = z, *r1 = z + ld, *r2 = z + 2 * ld, *r3 = z + 3 * ld, *r4 = z + 4 * ld,
          *r5 = z + 5 * ld, *r6 = z + 6 * ld, *r7 = z + 7 * ld;
    r0[5] = r0[Cn - 3] = 2.0f, tg[0] = (int32_t)(Cn - 3);   /* wrong: 5 comes first */
    r1[5] = r1[Cn - 3] = 2.0f, tg[1] = 5;
    r2[Cn - 1] = 3.0f, tg[2] = (int32_t)(Cn - 1);
    for (int64_t j = 0; j < Cn; j++)
        r3[j] = 0.5f;
    tg[3] = 0;
    r4[3] = -0.0f, r4[7] = 0.0f, tg[4] = 3;
    r5[3] = 0.0f, r5[7] = -0.0f, tg[5] = 7;                /* wrong: 3 comes first */
    r6[8 * 1024] = 1.0f, r6[8 * 1024 + 1] = 1.0f, tg[6] = 8 * 1024;
    r7[40] = 1.0f, tg[7] = 40;
    round_act(z, n);
    float *dz = nans(n);
    out_t o;
    stats_t st;
    ce_twice(z, tg, dz, rows, Cn, ld, 1.0f, &o, &st);
    if (C.correct != 6)   /* rows 1, 2, 3, 4, 6 and 7 are right, 0 and 5 wrong */
        report("cross_entropy ties", INFINITY, TOL_RED, " (the CPU counts %lld right, not 6)",
               (long long)C.correct);
    stats_judge("cross_entropy ties stats", &st);
    judge("cross_entropy ties", TA(TOL_EW), &o, 1);
    free(z), free(tg), free(dz), reset();
}

/* Targets outside [0, C) (the loader checks labels, so only a bug gets there; the CPU
 * twin stops the run on one, so the GPU is checked alone): each such row's loss is NaN,
 * it is not counted correct, and its whole gradient row, padding included, is 0. */
static void t_cross_entropy_bad_target(int64_t Cn, int64_t ld)
{
    const int64_t rows = 2;
    SHAPE("[%lld, %lld] rows %lld apart, targets -1 and C", (long long)rows, (long long)Cn,
          (long long)ld);
    int64_t n = rows * ld;
    float *z = fvec(n);
    for (int64_t i = 0; i < n; i++)
        z[i] = i % ld < Cn ? z[i] : NAN;
    round_act(z, n);
    int32_t tg[2] = {-1, (int32_t)Cn};
    G->grad_scale = 1.0f;
    float *gz = up_a(z, n), *gdz = dalloc_a(n), *pn = nans(n);
    int32_t *gtg = up(tg, sizeof tg);
    upload_a(gdz, pn, n);
    stats_begin();
    rt_cu_cross_entropy(G, gz, gtg, gdz, rows, Cn, ld);
    rt_cu_end_pass(G);
    float *d = down_a(gdz, n);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++)
        nonzero += d[i] != 0.0f;
    if (!isnan(G->loss_sum) || G->correct != 0 || nonzero)
        report("cross_entropy bad target", INFINITY, TOL_RED,
               " (loss %g, correct %lld, %lld gradient values not 0)", G->loss_sum,
               (long long)G->correct, (long long)nonzero);
    else
        report("cross_entropy bad target", 0.0, TOL_RED, NULL);
    free(z), free(d), free(pn), reset();
}

static void t_mse(int64_t n, int with_dy)
{
    SHAPE("[%lld]%s", (long long)n, with_dy ? " dy" : " loss only");
    float *y = avec(n), *t = fvec(n), *dy = with_dy ? nans(n) : NULL, *pn = nans(n);
    C.grad_scale = G->grad_scale = 0.75f;
    float *gy = up_a(y, n), *gt = up(t, n * 4), *gdy = with_dy ? dalloc_a(n) : NULL;
    out_t o = {"dy", dy, {0}, n};
    stats_t st;
    for (int rep = 0; rep < 2; rep++) {
        stats_begin();
        rt_mse(&C, y, t, dy, n);
        if (with_dy)
            upload_a(gdy, pn, n);
        rt_cu_mse(G, gy, gt, gdy, n);
        stats_end(&st, rep);
        if (with_dy)
            o.gpu[rep] = down_a(gdy, n);
    }
    stats_judge("mse stats", &st);
    if (with_dy)
        judge("mse", TA(TOL_EW), &o, 1);
    free(y), free(t), free(dy), free(pn), reset();
}

/* dpo and its kin over S pairs of two answers of T rows each over Cn classes (rt_cu_dpo
 * against rt_dpo): a third of the targets ignored (-100), the reference's sums near the
 * answers' (NULL for simpo's kind without one), loss kind `kind` (RT_PREF_*) with its
 * constants; each row's gradient, the answers' log-probabilities and the pass's loss,
 * pairs ranked right and margins */
static void t_dpo(int64_t S, int64_t T, int64_t Cn, int kind, int with_ref, float beta,
                  float gamma, float ls, float sft_weight)
{
    static const char *const kinds[] = {"sigmoid", "ipo", "orpo", "kto", "cpo", "robust",
                                        "hinge", "nca_pair", "sppo_hard", "apo_zero", "apo_down"};
    SHAPE("%lld pairs of 2 x %lld rows over %lld, %s%s, beta %g, smoothing %g, sft %g",
          (long long)S, (long long)T, (long long)Cn, kinds[kind], with_ref ? "" : " (no reference)",
          beta, ls, sft_weight);
    int64_t rows = S * 2 * T, n = rows * Cn;
    float *z = ce_logits(rows, Cn, Cn);
    round_act(z, n);
    int32_t *tg = rt_xmalloc((size_t)rows * sizeof *tg);
    for (int64_t r = 0; r < rows; r++)
        tg[r] = r % 3 == 1 ? -100 : (int32_t)irand(Cn);
    float *ref = with_ref ? fvec(2 * S) : NULL;   /* (near a sum of ~2T/3 rows' log p) */
    for (int64_t i = 0; with_ref && i < 2 * S; i++)
        ref[i] = ref[i] * 2.0f - (float)(2 * T / 3) * logf((float)Cn);
    float *dz = nans(n), *lp = nans(2 * S), *pn = nans(n);
    C.grad_scale = G->grad_scale = 1.0f / (float)S;
    C.ce_has_ignore = G->ce_has_ignore = 1;
    C.ce_ignore = G->ce_ignore = -100;
    float *gz = up_a(z, n), *gdz = dalloc_a(n), *glp = dalloc(2 * S * 4);
    float *gref = with_ref ? up(ref, (size_t)(2 * S) * 4) : NULL;
    int32_t *gtg = up(tg, (size_t)rows * 4);
    out_t o[2] = {{"dlogits", dz, {0}, n}, {"logps", lp, {0}, 2 * S}};
    stats_t st;
    for (int rep = 0; rep < 2; rep++) {
        stats_begin();
        upload_a(gdz, pn, n);
        rt_dpo(&C, z, tg, ref, dz, lp, S, 2 * T, Cn, Cn, beta, gamma, ls, kind, NULL, NULL,
               1.0f, 1.0f, sft_weight);
        rt_cu_dpo(G, gz, gtg, gref, gdz, glp, S, 2 * T, Cn, Cn, beta, gamma, ls, kind, NULL,
                  NULL, 1.0f, 1.0f, sft_weight);
        stats_end(&st, rep);
        o[0].gpu[rep] = down_a(gdz, n);
        o[1].gpu[rep] = down(glp, 2 * S);
    }
    stats_judge("dpo stats", &st);
    /* (16 bits: each row's gradient is stored, then scaled by its pair's factor, tens for
     * sppo_hard here, and stored again: two roundings) */
    judge("dpo", TEPI(TOL_RED), o, 1);
    judge("dpo log-probabilities", TOL_RED, o + 1, 1);
    free(z), free(tg), free(ref), free(dz), free(lp), free(pn), reset();
}

/* ---- attention ------------------------------------------------------------------------------ */

static void t_attention(int64_t B, int64_t T, int64_t d, int64_t H, int causal)
{
    SHAPE("B%lld T%lld d%lld H%lld %s", (long long)B, (long long)T, (long long)d, (long long)H,
          causal ? "causal" : "full");
    int64_t nq = B * T * 3 * d, nl = B * H * T, ny = B * T * d;
    float *qkv = avec(nq), *dy = avec(ny), *lse = nans(nl), *y = nans(ny), *dqkv = nans(nq);
    rt_attention_fwd(&C, qkv, lse, y, B, T, d, H, causal);
    float *yr = fcopy(y, ny);   /* y as the device stores it: what both backwards read */
    round_act(yr, ny);
    rt_attention_bwd(&C, qkv, lse, yr, dy, dqkv, B, T, d, H, causal);
    float *gq = up_a(qkv, nq), *gdy = up_a(dy, ny), *gl = dalloc(nl * 4);
    float *gy = dalloc_a(ny), *gdq = dalloc_a(nq), *pl = nans(nl), *py = nans(ny);
    float *pq = nans(nq);
    out_t of[2] = {{"lse", lse, {0}, nl}, {"y", y, {0}, ny}}, ob = {"dqkv", dqkv, {0}, nq};
    for (int rep = 0; rep < 2; rep++) {
        upload(gl, pl, nl * 4), upload_a(gy, py, ny), upload_a(gdq, pq, nq);
        rt_cu_attention_fwd(G, gq, gl, gy, B, T, d, H, causal);
        of[0].gpu[rep] = down(gl, nl), of[1].gpu[rep] = down_a(gy, ny);
        /* the backward from the CPU's lse and y */
        upload(gl, lse, nl * 4), upload_a(gy, yr, ny);
        rt_cu_attention_bwd(G, gq, gl, gy, gdy, gdq, B, T, d, H, causal);
        ob.gpu[rep] = down_a(gdq, nq);
    }
    judge("attention_fwd lse", TOL_RED, of, 1);
    judge("attention_fwd", TATT(TOL_RED), of + 1, 1);
    judge("attention_bwd", TATT(TOL_RED), &ob, 1);
    /* 16-bit heads of 64 or 128 on sm_90a take sm90_attention.cuh's forward above: the
     * sm_80 tensor-core one, which other GPUs take, again with TRAINC_ATT_SM90=0 */
    if (half && (d / H == 64 || d / H == 128)) {
        setenv("TRAINC_ATT_SM90", "0", 1);
        for (int rep = 0; rep < 2; rep++) {
            upload(gl, pl, nl * 4), upload_a(gy, py, ny);
            rt_cu_attention_fwd(G, gq, gl, gy, B, T, d, H, causal);
            of[0].gpu[rep] = down(gl, nl), of[1].gpu[rep] = down_a(gy, ny);
        }
        unsetenv("TRAINC_ATT_SM90");
        judge("attention_fwd80 lse", TOL_RED, of, 1);
        judge("attention_fwd80", TATT(TOL_RED), of + 1, 1);
    }
    free(qkv), free(dy), free(lse), free(y), free(yr), free(dqkv), free(pl), free(py), free(pq);
    reset();
}

/* op + tag + what, in a buffer of its own (four in turn: judge prints before the next) */
static const char *ext_name(const char *op, const char *tag, const char *what)
{
    static char buf[4][64];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s%s%s", op, tag, what);
    return buf[k];
}

/* t_attention_ext's verdicts on one pass's outputs (tag: "" or "80", the sm_80 kernels) */
static void ext_judge(const char *tag, int qkn, float theta, int64_t hd, out_t *of, out_t *ob)
{
    if (half && hd % 16 == 0 && hd <= 256 && (qkn || theta > 0.0f)) {
        /* 16 bits on the tensor cores, q and k transformed: the kernels round q and k after
         * qk_norm and rope to 16 bits for their products (as a 16-bit model stores them),
         * where the CPU keeps them in fp32; a score's error is then that rounding times
         * the score (qk_norm's weights here reach 2.5, scores 10 and more), and what
         * follows from it grows with the tensor's scale: each error is judged against the
         * tensor's largest value, by a bound of 20 units of the 16-bit type's rounding
         * (bf16 4e-2, fp16 5e-3; measured on the emulator: 1.8e-2 and 2.2e-3, the
         * norms' weight gradients and dq at heads 64 wide the largest). A wrong sign,
         * angle or term is an error of the tensor's own size. */
        double tq = half == 1 ? 4e-2 : 5e-3;
        judge_scaled(ext_name("attention_ext_fwd", tag, " lse"), tq, of, 1);
        judge_scaled(ext_name("attention_ext_fwd", tag, ""), tq, of + 1, 1);
        judge_scaled(ext_name("attention_ext_bwd", tag, ""), tq, ob, qkn ? 3 : 1);
    } else {
        judge(ext_name("attention_ext_fwd", tag, " lse"), TOL_RED, of, 1);
        judge(ext_name("attention_ext_fwd", tag, ""), TATT(TOL_RED), of + 1, 1);
        judge(ext_name("attention_ext_bwd", tag, ""), TATT(TOL_RED), ob, qkn ? 3 : 1);
    }
}

/* t_attention_ext over packed rows (ext_packed: set by t_attention_packed): each row cut
 * into sequences of 1 to 40 tokens at random (the second row one sequence), pos[b, t]
 * each token's position in its own; NULL when not packed */
static int ext_packed;

static int32_t *packed_positions(int64_t B, int64_t T)
{
    if (!ext_packed)
        return NULL;
    int32_t *pos = rt_xmalloc((size_t)(B * T) * sizeof *pos);
    for (int64_t b = 0; b < B; b++) {
        int64_t left = 0, at = 0;   /* tokens left in the sequence, and the next's position */
        for (int64_t t = 0; t < T; t++) {
            if (left == 0) {
                left = b == 1 ? T : 1 + (int64_t)((urand() + 1.0f) * 20.0f);
                at = 0;
            }
            pos[b * T + t] = (int32_t)at++;
            left--;
        }
    }
    return pos;
}

/* The Llama-family options (rt_attention_ext_*): KV key/value heads, a window W (0: none),
 * qk_norm's weights (qkn), rope at theta (0: none) with a scaling (l3: 1 llama3's) or
 * the table the compiler works out (l3 2: longrope's, the frequencies divided by 1 to 1 +
 * hd / 4, the amplitudes 1.2; 3: a partial rope's, half of each head rotated, with
 * amplitudes 1.1 on those pairs), the scores' factor (scale; 0: 1 / sqrt(hd)) and
 * soft-cap (cap; 0: none) */
static void t_attention_ext(int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV, int causal,
                            int64_t W, int qkn, float theta, int l3, float scale, float cap)
{
    int64_t hd = d / H, nq = B * T * (H + 2 * KV) * hd, nl = B * H * T, ny = B * T * d;
    float sc = scale > 0.0f ? scale : (float)(1.0 / sqrt((double)hd));
    SHAPE("B%lld T%lld d%lld H%lld KV%lld %s W%lld%s rope %g%s scale %g cap %g%s", (long long)B,
          (long long)T, (long long)d, (long long)H, (long long)KV, causal ? "causal" : "full",
          (long long)W, qkn ? " qk_norm" : "", (double)theta,
          l3 == 1 ? " llama3" : l3 == 2 ? " longrope" : l3 == 3 ? " partial" : "", (double)sc,
          (double)cap, ext_packed ? " packed" : "");
    float fac = l3 == 1 ? 8.0f : 0.0f, lo = 1.0f, hi = 4.0f;
    int64_t orig = l3 == 1 ? T / 4 + 1 : 0, rd = l3 == 3 ? hd / 4 * 2 : hd;
    float *ext = l3 >= 2 ? calloc((size_t)hd, 4) : NULL;
    for (int64_t j = 0; ext && j < hd / 2; j++) {
        float div = l3 == 2 ? 1.0f + 0.5f * (float)j : 1.0f;
        ext[j] = j < rd / 2 ? 1.0f / (powf(theta, (float)(2 * j) / (float)rd) * div) : 0.0f;
        ext[hd / 2 + j] = j >= rd / 2 ? 1.0f : l3 == 2 ? 1.2f : 1.1f;
    }
    float *qkv = avec(nq), *dy = avec(ny), *lse = nans(nl), *y = nans(ny), *dqkv = nans(nq);
    float *qn = fvec(hd), *kn = fvec(hd), *dqn = calloc((size_t)hd, 4), *dkn = calloc((size_t)hd, 4);
    for (int64_t i = 0; i < hd; i++)
        qn[i] += 1.5f, kn[i] += 1.5f;
    const float *wq = qkn ? qn : NULL, *wk = qkn ? kn : NULL;
    int32_t *pos = packed_positions(B, T);
    const int32_t *gpos = pos ? up(pos, (size_t)(B * T) * 4) : NULL;
    rt_attention_ext_fwd(&C, qkv, wq, wk, lse, y, B, T, d, H, KV, causal, W, theta, fac, lo, hi,
                         orig, ext, sc, cap, pos);
    float *yr = fcopy(y, ny);   /* y as the device stores it: what both backwards read */
    round_act(yr, ny);
    rt_attention_ext_bwd(&C, qkv, wq, wk, lse, yr, dy, dqkv, qkn ? dqn : NULL, qkn ? dkn : NULL,
                         B, T, d, H, KV, causal, W, theta, fac, lo, hi, orig, ext, sc, cap, pos);
    float *gq = up_a(qkv, nq), *gdy = up_a(dy, ny), *gl = dalloc(nl * 4);
    float *gy = dalloc_a(ny), *gdq = dalloc_a(nq), *pl = nans(nl), *py = nans(ny);
    float *pq = nans(nq), *zero = calloc((size_t)hd, 4);
    float *gqn = up(qn, hd * 4), *gkn = up(kn, hd * 4), *gdqn = dalloc(hd * 4), *gdkn = dalloc(hd * 4);
    const float *gwq = qkn ? gqn : NULL, *gwk = qkn ? gkn : NULL;
    out_t of[2] = {{"lse", lse, {0}, nl}, {"y", y, {0}, ny}}, ob[3] = {
        {"dqkv", dqkv, {0}, nq}, {"d q_norm", dqn, {0}, hd}, {"d k_norm", dkn, {0}, hd}};
    /* 16-bit heads of 64 or 128 take the sm_90a kernels where the module is built for
     * them (the emulator's): the sm_80 tensor-core ones, which other GPUs take, again with
     * TRAINC_ATT_SM90=0 ("attention_ext_fwd80", ...) */
    /* (no sm_90a kernel caps) */
    int both = half && (hd == 64 || hd == 128) && !(cap > 0.0f);
    for (int pass = 0; pass < 1 + both; pass++) {
        if (pass)
            setenv("TRAINC_ATT_SM90", "0", 1);
        for (int rep = 0; rep < 2; rep++) {
            upload(gl, pl, nl * 4), upload_a(gy, py, ny), upload_a(gdq, pq, nq);
            upload(gdqn, zero, hd * 4), upload(gdkn, zero, hd * 4);
            rt_cu_attention_ext_fwd(G, gq, gwq, gwk, gl, gy, B, T, d, H, KV, causal, W, theta, fac,
                                    lo, hi, orig, ext, sc, cap, gpos);
            of[0].gpu[rep] = down(gl, nl), of[1].gpu[rep] = down_a(gy, ny);
            /* the backward from the CPU's lse and y */
            upload(gl, lse, nl * 4), upload_a(gy, yr, ny);
            rt_cu_attention_ext_bwd(G, gq, gwq, gwk, gl, gy, gdy, gdq, qkn ? gdqn : NULL,
                                    qkn ? gdkn : NULL, B, T, d, H, KV, causal, W, theta, fac, lo,
                                    hi, orig, ext, sc, cap, gpos);
            ob[0].gpu[rep] = down_a(gdq, nq);
            ob[1].gpu[rep] = down(gdqn, hd), ob[2].gpu[rep] = down(gdkn, hd);
        }
        unsetenv("TRAINC_ATT_SM90");
        ext_judge(pass ? "80" : "", qkn, theta, hd, of, ob);
    }
    free(qkv), free(dy), free(lse), free(y), free(yr), free(dqkv), free(pl), free(py), free(pq);
    free(qn), free(kn), free(dqn), free(dkn), free(zero), free(ext), free(pos);
    reset();
}

/* t_attention_ext over packed rows (the model's positions) */
static void t_attention_packed(int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV, int64_t W,
                               int qkn, float theta, int l3, float scale, float cap)
{
    ext_packed = 1;
    t_attention_ext(B, T, d, H, KV, 1, W, qkn, theta, l3, scale, cap);
    ext_packed = 0;
}

/* t_attention_packed without the causal mask (an encoder's padded rows: each sequence
 * sees itself whole, or with a window the keys less than W away on either side) */
static void t_attention_packed_full(int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV,
                                    int64_t W, int qkn, float theta)
{
    ext_packed = 1;
    t_attention_ext(B, T, d, H, KV, 0, W, qkn, theta, 0, 0.0f, 0.0f);
    ext_packed = 0;
}

/* The decode program's attention (decode.cuh; rt_attention_decode): B rows at positions
 * pos .. pos + B - 1 of one sequence (with seqs: B sequences, row b at pos - b % 3 where
 * that is not negative, else pos, with a cache of its own, kv_seq floats apart; the
 * places slot T + position) against a cache whose positions before pos hold
 * random keys and values (as earlier calls would leave them), in the second layer's part
 * of a two-layer cache (kv_off). The options as t_attention_ext's (causal always). Both
 * sides write the rows' keys and values into their cache, then attend: the whole cache
 * (the first layer's part, and the positions past the rows, left as they were) and y
 * are judged. */
static void t_attention_decode(int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV,
                               int64_t pos, int64_t W, int qkn, float theta, int l3, float scale,
                               float cap, int splits, int seqs)
{
    int64_t hd = d / H, nq = B * (H + 2 * KV) * hd, ny = B * d, layer = 2 * KV * T * hd;
    int64_t all = (seqs ? B : 1) * 2 * layer;   /* (the sequences' caches) */
    float sc = scale > 0.0f ? scale : (float)(1.0 / sqrt((double)hd));
    SHAPE("B%lld%s T%lld d%lld H%lld KV%lld pos %lld W%lld%s rope %g%s scale %g cap %g S %d",
          (long long)B, seqs ? " sequences" : "", (long long)T, (long long)d, (long long)H,
          (long long)KV, (long long)pos, (long long)W, qkn ? " qk_norm" : "", (double)theta,
          l3 == 1 ? " llama3" : l3 == 2 ? " longrope" : "", (double)sc, (double)cap, splits);
    float fac = l3 == 1 ? 8.0f : 0.0f, lo = 1.0f, hi = 4.0f;
    int64_t orig = l3 == 1 ? T / 4 + 1 : 0;
    float *ext = l3 == 2 ? calloc((size_t)hd, 4) : NULL;
    for (int64_t j = 0; ext && j < hd / 2; j++) {   /* longrope's divided frequencies */
        ext[j] = 1.0f / (powf(theta, (float)(2 * j) / (float)hd) * (1.0f + 0.5f * (float)j));
        ext[hd / 2 + j] = 1.2f;
    }
    float *qkv = avec(nq), *y = nans(ny), *kv0 = fvec(all);
    /* keys that grow with their position, so that the scores' maximum moves up in later
     * chunks (the running sum and output must be rescaled) */
    for (int64_t k = 0; k < all; k++)
        if (k % layer < layer / 2)
            kv0[k] *= 0.5f + 3.0f * (float)(k / hd % T) / (float)T;
    float *kv = fcopy(kv0, all), *qn = fvec(hd), *kn = fvec(hd);
    for (int64_t i = 0; i < hd; i++)
        qn[i] += 1.5f, kn[i] += 1.5f;
    const float *wq = qkn ? qn : NULL, *wk = qkn ? kn : NULL;
    int32_t *place = rt_xmalloc((size_t)B * sizeof *place);
    for (int64_t b = 0; b < B; b++)
        place[b] = (int32_t)(seqs ? b * T + (pos >= b % 3 ? pos - b % 3 : pos) : pos + b);
    C.place = place, C.kv = kv, C.kv_seq = G->kv_seq = 2 * layer, C.kv_T = G->kv_T = T;
    rt_attention_decode(&C, qkv, wq, wk, y, layer, B, T, d, H, KV, 1, W, theta, fac, lo, hi,
                        orig, ext, sc, cap);
    float *gq = up_a(qkv, nq), *gy = dalloc_a(ny), *py = nans(ny), *gkv = dalloc32(all * 4);
    float *gqn = up(qn, hd * 4), *gkn = up(kn, hd * 4);
    const int32_t *gpos = up(place, (size_t)B * 4);   /* (the kernels read the places there) */
    out_t o[2] = {{"y", y, {0}, ny}, {"cache", kv, {0}, all}};
    char sv[16];
    snprintf(sv, sizeof sv, "%d", splits);   /* the position slices (0: the runtime's choice) */
    setenv("TRAINC_DECODE_SPLITS", sv, 1);
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gy, py, ny), upload(gkv, kv0, all * 4);
        G->place = place, G->kv = gkv, G->dplace = gpos;
        rt_cu_attention_decode(G, gq, qkn ? gqn : NULL, qkn ? gkn : NULL, gy, layer, B, T, d, H, KV,
                               W, theta, fac, lo, hi, orig, ext, sc, cap);
        o[0].gpu[rep] = down_a(gy, ny), o[1].gpu[rep] = down(gkv, all);
    }
    unsetenv("TRAINC_DECODE_SPLITS");
    judge("attention_decode", TATT(TOL_RED), o, 2);
    C.kv = G->kv = NULL;
    C.kv_seq = G->kv_seq = C.kv_T = G->kv_T = 0;
    C.place = G->place = G->dplace = NULL;
    free(qkv), free(y), free(kv0), free(kv), free(qn), free(kn), free(py), free(ext), free(place);
    reset();
}

/* ---- embedding ------------------------------------------------------------------------------ */

/* idx in [0, span): span < rows repeats indices, whose gradients add in row order */
static void t_embedding(int64_t rows, int64_t V, int64_t dim, int64_t span)
{
    SHAPE("rows %lld V %lld dim %lld span %lld", (long long)rows, (long long)V, (long long)dim,
          (long long)span);
    int32_t *idx = rt_xmalloc((size_t)rows * sizeof *idx);
    for (int64_t r = 0; r < rows; r++)
        idx[r] = (int32_t)irand(span);
    float *w = fvec(V * dim), *dout = avec(rows * dim), *out = nans(rows * dim);
    float *dw0 = fvec(V * dim), *dw = fcopy(dw0, V * dim), *pn = nans(rows * dim);
    rt_embedding_fwd(&C, idx, w, out, rows, V, dim);
    rt_embedding_bwd(&C, idx, dout, dw, rows, V, dim);
    int32_t *gidx = up(idx, (size_t)rows * 4);
    float *gw = up(w, V * dim * 4), *gdout = up_a(dout, rows * dim);
    float *gout = dalloc_a(rows * dim), *gdw = dalloc(V * dim * 4);
    out_t o1 = {"out", out, {0}, rows * dim}, o2 = {"dw", dw, {0}, V * dim};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gout, pn, rows * dim), upload(gdw, dw0, V * dim * 4);
        rt_cu_embedding_fwd(G, gidx, gw, gout, rows, V, dim);
        rt_cu_embedding_bwd(G, gidx, gdout, gdw, rows, V, dim);
        o1.gpu[rep] = down_a(gout, rows * dim), o2.gpu[rep] = down(gdw, V * dim);
    }
    judge("embedding_fwd", TA(TOL_EW), &o1, 1);
    judge("embedding_bwd", TOL_EW, &o2, 1);
    free(idx), free(w), free(dout), free(out), free(dw0), free(dw), free(pn), reset();
}

/* ---- the linear layers' epilogue, as a kernel (cuBLASLt's fallback) ------------------------- */

/* rt_bias_act (epilogue.cuh) against rt_gemm_bias (runtime/kernels.c), its GEMM made
 * exact by an identity B (P I = P): v = P (+ R) + bias, C = v (when wanted), Y = act(v);
 * P is the GEMM's product, in C (or Y without C), R a residual. */
static void t_bias_act(int64_t M, int64_t N, int act, int with_c, int with_r)
{
    static const char *const acts[] = {"bias", "bias + relu", "bias + gelu tanh"};
    SHAPE("[%lld, %lld] %s%s%s", (long long)M, (long long)N, acts[act], with_r ? " + residual" : "",
          with_c ? ", C kept" : "");
    int64_t n = M * N;
    int keep = with_c || act == 0;
    float *P = avec(n), *R = with_r ? avec(n) : NULL, *bias = fvec(N), *Cc = nans(n), *Y = nans(n);
    float *I = rt_xmalloc((size_t)(N * N) * sizeof(float));   /* zeroed */
    for (int64_t j = 0; j < N; j++)
        I[j * N + j] = 1.0f;
    rt_gemm_bias(&C, 0, 0, M, N, N, 1.0f, P, N, I, N, keep ? Cc : NULL, N, bias, R, act,
                 act ? Y : NULL);
    void *gp = dalloc_a(n), *gy = dalloc_a(n), *gb = up(bias, (size_t)N * 4);
    void *gout = keep ? gp : gy, *gc = keep ? gp : NULL, *gyy = act ? gy : NULL;
    void *gr = with_r ? up_a(R, n) : NULL;
    /* without C kept, C stays NaN on both sides */
    out_t o[2] = {{"C", Cc, {0}, n}, {"Y", Y, {0}, n}};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gout, P, n);
        if (act && keep) {
            float *pn = nans(n);
            upload_a(gy, pn, n);
            free(pn);
        }
        int64_t ld = N;
        void *args[] = {&gout, &gr, &gc, &gyy, &gb, &M, &N, &ld, &act};
        rt_cu_launch(G, "rt_bias_act", 13, 1, 1, 256, 1, 0, args);
        o[0].gpu[rep] = keep ? down_a(gp, n) : nans(n);
        o[1].gpu[rep] = act ? down_a(gy, n) : nans(n);
    }
    judge("bias_act", TA(TOL_EW), o, act ? 2 : 1);
    if (!act)
        free(o[1].gpu[0]), free(o[1].gpu[1]);
    free(P), free(R), free(bias), free(Cc), free(Y), rt_xfree(I), reset();
}

/* rt_dgelu (epilogue.cuh: rt_gemm_dgelu's fallback) against rt_gemm_dgelu on the CPU,
 * its GEMM made exact by an identity B: D = rt_gelu_tanh_bwd(pre, P), P in D in place,
 * rows ld apart (the padding stays NaN on both sides). */
static void t_dgelu(int64_t M, int64_t N, int64_t ld)
{
    SHAPE("[%lld, %lld] ld %lld", (long long)M, (long long)N, (long long)ld);
    int64_t n = M * ld;
    float *P = avec(n), *pre = avec(n), *D = nans(n);
    float *I = rt_xmalloc((size_t)(N * N) * sizeof(float));   /* zeroed */
    for (int64_t j = 0; j < N; j++)
        I[j * N + j] = 1.0f;
    float *Pc = fcopy(P, n);   /* the product rows, NaN in the padding */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ld; j++)
            Pc[i * ld + j] = NAN;
    rt_gemm_dgelu(&C, 0, 0, M, N, N, 1.0f, P, ld, I, N, D, ld, pre);
    for (int64_t i = 0; i < M; i++)   /* the CPU's GEMM leaves the padding alone */
        for (int64_t j = N; j < ld; j++)
            D[i * ld + j] = NAN;
    void *gd = dalloc_a(n), *gx = up_a(pre, n);
    out_t o = {"D", D, {0}, n};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gd, Pc, n);
        void *args[] = {&gd, &gx, &M, &N, &ld};
        rt_cu_launch(G, "rt_dgelu", 13, 1, 1, 256, 1, 0, args);
        o.gpu[rep] = down_a(gd, n);
    }
    judge("dgelu", TA(TOL_EW), &o, 1);
    free(P), free(pre), free(D), free(Pc), rt_xfree(I), reset();
}

/* rt_add_into (epilogue.cuh: a bias gradient that BGRADB stored in scratch, added) */
static void t_add_into(int64_t n)
{
    SHAPE("[%lld]", (long long)n);
    float *x = fvec(n), *y0 = fvec(n), *y = fcopy(y0, n);
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
    void *gx = up(x, (size_t)n * 4), *gy = dalloc((size_t)n * 4);
    out_t o = {"y", y, {0}, n};
    for (int rep = 0; rep < 2; rep++) {
        upload(gy, y0, (size_t)n * 4);
        void *args[] = {&gx, &gy, &n};
        rt_cu_launch(G, "rt_add_into", 7, 1, 1, 256, 1, 0, args);
        o.gpu[rep] = down(gy, n);
    }
    judge("add_into", 0.0, &o, 1);
    free(x), free(y0), free(y), reset();
}

/* optim.cuh's rt_ema_take (a first take, then two more) and rt_swap of the average with
 * another vector, against optim.c's twins: exact */
static void t_ema(int64_t n)
{
    SHAPE("[%lld]", (long long)n);
    float *p = fvec(n), *e0 = fvec(n), *q = fvec(n);
    float *e = fcopy(e0, n), *sq = fcopy(q, n);
    rt_ema_take(C.rt, p, e, n, 0.8, 1);
    rt_ema_take(C.rt, q, e, n, 0.8, 0);
    rt_ema_take(C.rt, p, e, n, 0.999, 0);
    rt_swap_floats(C.rt, e, sq, n);   /* (e: q's values, sq: the average) */
    void *gp = up(p, (size_t)n * 4), *gq = dalloc((size_t)n * 4), *ge = dalloc((size_t)n * 4);
    out_t o[2] = {{"ema", sq, {0}, n}, {"swapped", e, {0}, n}};
    for (int rep = 0; rep < 2; rep++) {
        upload(ge, e0, (size_t)n * 4);
        upload(gq, q, (size_t)n * 4);
        rt_dptr dp = (rt_dptr)(uintptr_t)gp, dq = (rt_dptr)(uintptr_t)gq,
                de = (rt_dptr)(uintptr_t)ge;
        rt_cu_ema_take(G, dp, de, n, 0.8, 1);
        rt_cu_ema_take(G, dq, de, n, 0.8, 0);
        rt_cu_ema_take(G, dp, de, n, 0.999, 0);
        rt_cu_swap(G, de, dq, n);
        o[0].gpu[rep] = down(gq, n);
        o[1].gpu[rep] = down(ge, n);
    }
    judge("ema", 0.0, o, 2);
    free(p), free(e0), free(q), free(e), free(sq), reset();
}

/* optim.cuh's rt_swa_take (a first take, then two more) against optim.c's twin: exact */
static void t_swa(int64_t n)
{
    SHAPE("[%lld]", (long long)n);
    float *p = fvec(n), *q = fvec(n), *a0 = fvec(n), *a = fcopy(a0, n);
    rt_swa_take(C.rt, p, a, n, 0);
    rt_swa_take(C.rt, q, a, n, 1);
    rt_swa_take(C.rt, p, a, n, 2);
    void *gp = up(p, (size_t)n * 4), *gq = up(q, (size_t)n * 4), *ga = dalloc((size_t)n * 4);
    out_t o = {"swa", a, {0}, n};
    for (int rep = 0; rep < 2; rep++) {
        upload(ga, a0, (size_t)n * 4);
        rt_dptr dp = (rt_dptr)(uintptr_t)gp, dq = (rt_dptr)(uintptr_t)gq, da = (rt_dptr)(uintptr_t)ga;
        rt_cu_swa_take(G, dp, da, n, 0);
        rt_cu_swa_take(G, dq, da, n, 1);
        rt_cu_swa_take(G, dp, da, n, 2);
        o.gpu[rep] = down(ga, n);
    }
    judge("swa", 0.0, &o, 1);
    free(p), free(q), free(a0), free(a), reset();
}

/* ---- fp8-mixed's casts (fp8.cuh) and FP8 GEMMs (cuda_blas.c) ------------------------------ */

/* The value of an FP8 code (e5m2: E5M2, else E4M3 "fn"); NaN for a NaN or an infinity */
static double fp8_value(int code, int e5m2)
{
    int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, e = (code & 0x7f) >> mb, m = code & ((1 << mb) - 1);
    if ((e5m2 && e == 31) || (!e5m2 && (code & 0x7f) == 0x7f))
        return NAN;
    double v = e ? ldexp(1.0 + m / (double)(1 << mb), e - bias) : ldexp(m, 1 - bias - mb);
    return code & 0x80 ? -v : v;
}

/* fp8.cuh's rt_fp8_bits by another road: the nearest of the finite codes by search
 * (ties: the even code), |v| at or past the largest saturated, NaN 0x7f */
static unsigned char fp8_nearest(float v, int e5m2)
{
    unsigned char s = signbit(v) ? 0x80 : 0;
    if (isnan(v))
        return s | 0x7f;
    static double val[2][128];   /* fp8_value of the codes 0 .. 127, made once */
    static int made[2];
    if (!made[e5m2]) {
        for (int c = 0; c < 128; c++)
            val[e5m2][c] = fp8_value(c, e5m2);
        made[e5m2] = 1;
    }
    int top = e5m2 ? 0x7b : 0x7e, best = 0;
    double a = fabs((double)v), bd = INFINITY;
    if (a >= val[e5m2][top])
        return (unsigned char)(s | top);
    for (int c = 0; c <= top; c++) {
        double d = fabs(a - val[e5m2][c]);
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = c;
        }
    }
    return (unsigned char)(s | best);
}

/* rt_cu_fp8_cast's twin: y (packed, transposed with trans) and scale[0..1] = amax, 1/s */
static void fp8_cast_twin(const float *x, int64_t rows, int64_t cols, int64_t ld, int e5m2,
                          int trans, unsigned char *y, float *scale)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            amax = fmaxf(amax, fabsf(x[i * ld + j]));
    float s = amax > 0.0f && amax < INFINITY ? (e5m2 ? 57344.0f : 448.0f) / amax : 1.0f;
    scale[0] = amax;
    scale[1] = 1.0f / s;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            y[trans ? j * rows + i : i * cols + j] = fp8_nearest(x[i * ld + j] * s, e5m2);
}

/* rt_cu_fp8_cast (fp8.cuh's rt_fp8_amax and rt_fp8_cast) against its twin: every byte
 * and both scales exact. Values over 2^-16 .. 2^8 (subnormal codes, saturation at the
 * maximum), rounded to act_t first; `special`: a NaN, -0 and 0 among them too. trans 2:
 * rt_cu_fp8_cast_both, both layouts (the twin's trans 0, then its trans 1) from one cast. */
static void t_fp8_cast(int64_t rows, int64_t cols, int64_t ld, int e5m2, int trans, int special)
{
    SHAPE("[%lld, %lld] ld %lld %s%s%s", (long long)rows, (long long)cols, (long long)ld,
          e5m2 ? "E5M2" : "E4M3", trans == 2 ? " both layouts" : trans ? " transposed" : "",
          special ? ", NaN and zeros" : "");
    int64_t n = rows * ld, m = rows * cols, all = trans == 2 ? 2 * m : m;
    float *x = fvec(n);
    for (int64_t i = 0; i < n; i++)
        x[i] = ldexpf(x[i], (int)irand(25) - 16);
    if (special) {
        x[0] = NAN;
        x[n / 2] = -0.0f;
        x[n - 1] = 0.0f;
    }
    if (half)
        round_act(x, n);
    unsigned char *want = rt_xmalloc((size_t)all);
    float ws[2];
    fp8_cast_twin(x, rows, cols, ld, e5m2, trans == 1, want, ws);
    if (trans == 2)
        fp8_cast_twin(x, rows, cols, ld, e5m2, 1, want + m, ws);
    void *gx = up_a(x, n), *gy = dalloc((size_t)all), *gs = dalloc(16);
    void *gp = dalloc(1024);
    unsigned char *got[2];
    float gsc[2][4];
    for (int rep = 0; rep < 2; rep++) {
        rt_dptr y = (rt_dptr)(uintptr_t)gy;
        if (trans == 2)
            rt_cu_fp8_cast_both(G, (rt_dptr)(uintptr_t)gx, rows, cols, ld, e5m2, y, y + m,
                                (rt_dptr)(uintptr_t)gp, 0, (rt_dptr)(uintptr_t)gs);
        else
            rt_cu_fp8_cast(G, (rt_dptr)(uintptr_t)gx, rows, cols, ld, e5m2, trans, y,
                           (rt_dptr)(uintptr_t)gp, 0, (rt_dptr)(uintptr_t)gs);
        got[rep] = rt_xmalloc((size_t)all);
        rt_cu_sync(G);
        rt_cu_download(got[rep], y, (size_t)all);
        rt_cu_download(gsc[rep], (rt_dptr)(uintptr_t)gs, 8);
    }
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < all; i++)
        if (got[0][i] != want[i] && bad++ == 0)
            first = i;
    if (bad)
        report("fp8_cast", (double)bad, 0.0, ": %lld codes differ, the first at %lld (%02x, want %02x)",
               (long long)bad, (long long)first, got[0][first], want[first]);
    else if (memcmp(got[0], got[1], (size_t)all) || memcmp(gsc[0], gsc[1], 8))
        report("fp8_cast", 0.0, 0.0, ": the two runs differ");
    else if (memcmp(gsc[0], ws, 8))
        report("fp8_cast", 0.0, 0.0, ": scales %a %a, want %a %a", gsc[0][0], gsc[0][1], ws[0], ws[1]);
    else
        report("fp8_cast", 0.0, 0.0, NULL);
    free(x), rt_xfree(want), rt_xfree(got[0]), rt_xfree(got[1]), reset();
}

#ifndef CHECK_OPS_EMU
/* fp8.cuh's rounding of x by its twin: x quantized with its tensor's scale and
 * dequantized (op(x) as stored: the scale is the whole tensor's either way) */
static float *fp8_dequant(const float *x, int64_t rows, int64_t cols, int64_t ld, int e5m2)
{
    unsigned char *q = rt_xmalloc((size_t)(rows * cols));
    float sc[2];
    fp8_cast_twin(x, rows, cols, ld, e5m2, 0, q, sc);
    float *d = fcopy(x, rows * ld);   /* (the padding as it is) */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            d[i * ld + j] = (float)(fp8_value(q[i * cols + j], e5m2) * sc[1]);
    rt_xfree(q);
    return d;
}

/* The CPU's twin of an FP8 GEMM's call: the GEMM of A and B as FP8 gives them back
 * (fp8_dequant; kind 0's A E4M3, else E5M2) or, with fp8 0, as they are; rows of Y
 * ldc apart */
static float *gemm_fp8_twin(int kind, int fp8, int64_t M, int64_t N, int64_t K, const float *A,
                            int64_t lda, const float *B, int64_t ldb, const float *W0,
                            int64_t ldc, const float *bias)
{
    int ta = kind == 2, tb = kind == 0;
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *Ad = fp8 ? fp8_dequant(A, ar, ac, lda, kind != 0) : fcopy(A, ar * ac);
    float *Bd = fp8 ? fp8_dequant(B, br, bc, ldb, 0) : fcopy(B, br * bc);
    float *Y = fcopy(W0, M * ldc);
    if (bias)
        rt_gemm_bias(&C, ta, tb, M, N, K, 1.0f, Ad, lda, Bd, ldb, Y, ldc, bias, NULL, RT_EPI_NONE,
                     NULL);
    else
        rt_gemm(&C, ta, tb, M, N, K, 1.0f, Ad, lda, Bd, ldb, kind == 2 ? 1.0f : 0.0f, Y, ldc);
    free(Ad), free(Bd);
    return Y;
}

/* rt_gemm_fp8 and rt_gemm_bias_fp8 on the GPU (bf16 operands cast to FP8, cuBLASLt's FP8
 * GEMM, or the bf16 GEMM where refused) against the CPU's fp32 GEMM of the operands as
 * FP8 gives them back (the same codes and scales): the layouts, the transposed copies
 * and the scales. kind 0: the forward y = x W^T (+ bias), 1: dx = dy W, 2: dW += dy^T x
 * (fp32, beta 1). The product is summed in another order, and rounded to bf16 except
 * dW: TEPI(TOL_RED). Only with --bf16 (FP8 takes bf16 operands). A dimension not a
 * multiple of 16 runs the bf16 GEMM: the twin is then the plain one. Rows of the output
 * `pad` elements longer than N: 8 bytes short of a multiple of 16, which cuBLASLt's FP8
 * kernels do not take (the fake GPU's heuristic refuses it, as the runtime's fallback
 * to bf16 must handle): there the output must be either twin's. */
static void t_gemm_fp8(int kind, int64_t rows, int64_t in, int64_t out, int bias, int64_t pad)
{
    static const char *const kinds[] = {"y = x W^T", "dx = dy W", "dW += dy^T x"};
    SHAPE("%s rows %lld in %lld out %lld%s%s", kinds[kind], (long long)rows, (long long)in,
          (long long)out, bias ? " + bias" : "", pad ? ", rows padded" : "");
    int ta = kind == 2, tb = kind == 0;
    int64_t M = kind == 2 ? out : rows, N = kind == 0 ? out : in;
    int64_t K = kind == 0 ? in : kind == 1 ? out : rows;
    int64_t lda = kind == 0 ? in : out, ldb = in, ldc = N + pad;
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *A = avec(ar * ac), *B = avec(br * bc), *b = fvec(N), *W0 = fvec(M * ldc);
    int fp8 = !(M % 16 || N % 16 || K % 16);
    float *Y = gemm_fp8_twin(kind, fp8, M, N, K, A, lda, B, ldb, W0, ldc, bias ? b : NULL);
    void *ga = up_a(A, ar * ac), *gb = up_a(B, br * bc), *gbias = up_param(b, N);
    void *gy = kind == 2 ? dalloc32((size_t)(M * ldc) * 4) : dalloc_a(M * ldc);
    out_t o = {kind == 2 ? "dW" : "y", Y, {0}, M * ldc};
    for (int rep = 0; rep < 2; rep++) {
        if (kind == 2)
            upload(gy, W0, (size_t)(M * ldc) * 4);
        else
            upload_a(gy, W0, M * ldc);
        if (bias)
            rt_gemm_bias_fp8(G, ta, tb, M, N, K, 1.0f, ga, lda, gb, ldb, gy, ldc, gbias, NULL,
                             RT_EPI_NONE, NULL);
        else
            rt_gemm_fp8(G, ta, tb, M, N, K, 1.0f, ga, lda, gb, ldb, kind == 2 ? 1.0f : 0.0f, gy,
                        ldc);
        o.gpu[rep] = kind == 2 ? down(gy, M * ldc) : down_a(gy, M * ldc);
    }
    if (pad && fp8) {   /* FP8 or its bf16 fallback: the twin nearer the output */
        float *Yp = gemm_fp8_twin(kind, 0, M, N, K, A, lda, B, ldb, W0, ldc, bias ? b : NULL);
        if (worst(o.gpu[0], Yp, NULL, M * ldc) < worst(o.gpu[0], Y, NULL, M * ldc)) {
            free(Y);
            Y = Yp;
            o.cpu = Yp;
        } else
            free(Yp);
    }
    judge("gemm_fp8", kind == 2 ? TOL_RED : TEPI(TOL_RED), &o, 1);
    free(A), free(B), free(b), free(W0), free(Y), reset();
}
#endif

#ifndef CHECK_OPS_EMU
/* cuBLASLt's GEMM epilogues (cuda_blas.c) against their CPU twins (kernels.c), in each
 * precision: with --bf16/--fp16 the activations (x, dy, the weights standing in for
 * the parameters' 16-bit copy, the residual, the outputs) are 16-bit operands on the
 * tensor cores, the biases and parameter gradients fp32. A refused epilogue takes its
 * fallback (and says so on stderr), which must agree too.
 * rt_gemm_bias: y = x W^T (+ R) + bias, then the activation; C (the pre-activation)
 * kept or not.
 * With a 16-bit output the product P = x W^T is rounded to 16 bits before the bias and
 * the residual are added (cuBLASLt's epilogue does so, seen on an H200: errors to 1.5
 * units in the last place; the fallback stores P in D), and P can be larger than the
 * sum (|bias|, |R| < 1 here): so each value's bound is u (|P| + |C|) for C, with u
 * the 16-bit type's relative rounding (2^-8 bf16, 2^-11 fp16), and for Y = act(C)
 * act's slope (1.13 at most for GELU) times C's bound plus u |Y|; plus TOL_RED
 * max(1, |value|), the fp32 arithmetic's share. */
static void t_gemm_bias(int64_t M, int64_t N, int64_t K, int act, int with_c, int with_r,
                        int param)
{
    static const char *const acts[] = {"bias", "bias + relu", "bias + gelu tanh"};
    SHAPE("%lldx%lldx%lld %s%s%s%s, error/bound", (long long)M, (long long)N, (long long)K,
          acts[act], with_r ? " + residual" : "", with_c ? ", C kept" : "",
          param || !half ? "" : ", an fp32 bias without a 16-bit copy");
    int keep = with_c || act == 0;
    float *X = avec(M * K), *W = avec(N * K), *bias = fvec(N), *R = with_r ? avec(M * N) : NULL;
    float *Cc = nans(M * N), *Y = nans(M * N), *pre = nans(M * N);
    rt_gemm_bias(&C, 0, 1, M, N, K, 1.0f, X, K, W, K, keep ? Cc : pre, N, bias, R, act,
                 act ? Y : NULL);
    const float *cv = keep ? Cc : pre;   /* the CPU's pre-activation, for the bounds */
    const double u = half == 1 ? 0x1p-8 : half == 2 ? 0x1p-11 : 0.0;
    const double slope = act == 2 ? 1.13 : 1.0;
    float *bc = rt_xmalloc((size_t)(M * N) * sizeof(float)), *by = rt_xmalloc((size_t)(M * N) * sizeof(float));
    for (int64_t i = 0; i < M * N; i++) {
        double c = cv[i], p = c - bias[i % N] - (R ? R[i] : 0.0f);
        double ec = u * (fabs(p) + fabs(c) + fabs(bias[i % N]));   /* maybe the 16-bit copy's */
        bc[i] = (float)(TOL_RED * fmax(1.0, fabs(c)) + ec);
        double y = act ? Y[i] : c;
        by[i] = (float)(TOL_RED * fmax(1.0, fabs(y)) + slope * ec + u * fabs(y));
    }
    void *gx = up_a(X, M * K), *gw = up_a(W, N * K), *gb = param ? up_param(bias, N) : up32(bias, N);
    void *gr = with_r ? up_a(R, M * N) : NULL, *gc = dalloc_a(M * N), *gy = dalloc_a(M * N);
    float *pn = nans(M * N);
    out_t o[2] = {{"C", Cc, {0}, M * N}, {"Y", Y, {0}, M * N}};
    const float *bounds[2] = {bc, by};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gc, pn, M * N);
        upload_a(gy, pn, M * N);
        rt_cu_gemm_bias(G, 0, 1, M, N, K, 1.0f, gx, K, gw, K, keep ? gc : NULL, N, gb, gr, act,
                        act ? gy : NULL);
        o[0].gpu[rep] = down_a(gc, M * N);
        o[1].gpu[rep] = down_a(gy, M * N);
    }
    judge_bounded("gemm_bias", 1.0, o, 2, bounds);
    free(X), free(W), free(bias), free(R), free(Cc), free(Y), free(pre), free(pn);
    rt_xfree(bc), rt_xfree(by), reset();
}

/* A GEMM's error bounds: for each C[i][j] = beta C0 + sum_k op(A)[i][k] op(B)[k][j],
 * max(1, |beta C0| + sum_k |op(A)[i][k] op(B)[k][j]|), the scale of fp32 summation's
 * error whatever the order (a dot product's terms cancel: its result is no scale). With
 * TOL_DOT, a sum missing one row of K fails and any fp32 order passes. */
#define TOL_DOT 1e-6
static float *dot_bounds(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, const float *C0)
{
    /* |op(A)| [M, K] and |op(B)| [K, N] in double, their product by OpenBLAS's dgemm: a
     * bound needs no particular order (every term is >= 0), and the large shapes' bounds
     * were most of a check's time on one core (GPU machines' too) */
    double *ra = rt_xmalloc((size_t)(M * K) * sizeof(double));
    double *rb = rt_xmalloc((size_t)(K * N) * sizeof(double));
    double *s = rt_xmalloc((size_t)(M * N) * sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            ra[i * K + k] = fabsf(ta ? A[k * lda + i] : A[i * lda + k]);
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++)
            rb[k * N + j] = fabsf(tb ? B[j * ldb + k] : B[k * ldb + j]);
    for (int64_t q = 0; q < M * N; q++)
        s[q] = C0 ? fabs((double)beta * C0[q]) : 0.0;
    if (M > 0 && N > 0 && K > 0)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0, ra,
                    (int)K, rb, (int)N, 1.0, s, (int)N);
    float *b = rt_xmalloc((size_t)(M * N) * sizeof(float));
    for (int64_t q = 0; q < M * N; q++)
        b[q] = (float)fmax(1.0, s[q]);
    free(ra), free(rb), free(s);
    return b;
}

static int env_zero(const char *var)
{
    const char *v = getenv(var);
    return v && !strcmp(v, "0");
}

/* The slices cuda_blas.c ran since before[0] (with BGRADB: before[1]), against the two
 * GPU runs that should have run them (bgradb: a weight gradient's, the bias gradient
 * summed slice by slice unless TRAINC_GEMM_EPILOGUE=0): NULL, or why not (a split
 * refused or not taken runs another way, and would pass) */
static const char *ksplit_check(const int64_t before[2], int split, int bgradb)
{
    if (env_zero("TRAINC_GEMM_KSPLIT"))
        split = 0;   /* switched off: whole GEMMs wanted */
    if (!split || env_zero("TRAINC_GEMM_EPILOGUE"))
        bgradb = 0;
    int64_t ran = rt_cu_ksplit_runs(0) - before[0], with = rt_cu_ksplit_runs(1) - before[1];
    if (ran != (split ? 2 : 0))
        return split ? " (not cut into K slices: cuBLASLt refused them?)" : " (cut into K slices)";
    if (with != (bgradb ? 2 : 0))
        return bgradb ? " (the slices without BGRADB: cuBLASLt refused it in a batch?)"
                      : " (the slices with BGRADB)";
    return NULL;
}

/* rt_gemm_dbias: dW += dy^T x (fp32, beta 1) and the bias gradient, stored straight into
 * a zeroed db (fresh, e->grads_zero) or through scratch and rt_add_into (added to
 * random values); split: K long enough that cuda_blas.c cuts it into slices */
static void t_gemm_dbias(int64_t M, int64_t N, int64_t K, int fresh, int split)
{
    SHAPE("%lldx%lldx%lld %s%s", (long long)M, (long long)N, (long long)K,
          fresh ? "fresh (stored)" : "added", split ? ", K slices" : "");
    float *A = avec(K * M), *B = avec(K * N), *W0 = fvec(M * N), *db0 = fvec(M);
    if (fresh)
        memset(db0, 0, (size_t)M * 4);
    float *W = fcopy(W0, M * N), *db = fcopy(db0, M);
    C.grads_zero = G->grads_zero = fresh;
    rt_gemm_dbias(&C, 1, 0, M, N, K, 1.0f, A, M, B, N, 1.0f, W, N, db, fresh);
    float *bw = dot_bounds(1, 0, M, N, K, A, M, B, N, 1.0f, W0), *bb = rt_xmalloc((size_t)M * 4);
    for (int64_t i = 0; i < M; i++) {   /* db[i] = db0[i] + sum_k dy[k][i] */
        double t = fabs(db0[i]);
        for (int64_t k = 0; k < K; k++)
            t += fabs(A[k * M + i]);
        bb[i] = (float)fmax(1.0, t);
    }
    void *ga = up_a(A, K * M), *gb = up_a(B, K * N);
    void *gw = dalloc32((size_t)(M * N) * 4), *gdb = dalloc32((size_t)M * 4);
    out_t o[2] = {{"dW", W, {0}, M * N}, {"db", db, {0}, M}};
    int64_t before[2] = {rt_cu_ksplit_runs(0), rt_cu_ksplit_runs(1)};
    for (int rep = 0; rep < 2; rep++) {
        upload(gw, W0, (size_t)(M * N) * 4);
        upload(gdb, db0, (size_t)M * 4);
        rt_cu_gemm_dbias(G, 1, 0, M, N, K, 1.0f, ga, M, gb, N, 1.0f, gw, N, gdb, fresh);
        o[0].gpu[rep] = down(gw, M * N);
        o[1].gpu[rep] = down(gdb, M);
    }
    const char *why = ksplit_check(before, split, 1);
    const float *bounds[2] = {bw, bb};
    if (why) {
        report("gemm_dbias", 0.0, TOL_DOT, "%s", why);
        for (int k = 0; k < 2; k++)
            free(o[k].gpu[0]), free(o[k].gpu[1]);
    } else
        judge_bounded("gemm_dbias", TOL_DOT, o, 2, bounds);
    C.grads_zero = G->grads_zero = 0;
    free(A), free(B), free(W0), free(db0), free(W), free(db), free(bw), free(bb), reset();
}

/* rt_gemm into an fp32 parameter gradient: C = op(A) op(B) + beta C (random C), the
 * operands activations. With K long and M x N small (split), cuda_blas.c cuts K into
 * slices (ksplit_gemm: a strided-batched GEMM into partials, rt_ksplit_sum adds them). */
static void t_gemm_grad(int ta, int tb, int64_t M, int64_t N, int64_t K, float beta, int split)
{
    SHAPE("%s%s %lldx%lldx%lld beta %g%s", ta ? "T" : "N", tb ? "T" : "N", (long long)M,
          (long long)N, (long long)K, beta, split ? ", K slices" : "");
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    float *A = avec(K * M), *B = avec(K * N), *W0 = fvec(M * N);
    float *W = fcopy(W0, M * N);
    rt_gemm(&C, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, W, N);
    float *bw = dot_bounds(ta, tb, M, N, K, A, lda, B, ldb, beta, W0);
    void *ga = up_a(A, K * M), *gb = up_a(B, K * N), *gw = dalloc32((size_t)(M * N) * 4);
    out_t o = {"dW", W, {0}, M * N};
    int64_t before[2] = {rt_cu_ksplit_runs(0), rt_cu_ksplit_runs(1)};
    for (int rep = 0; rep < 2; rep++) {
        upload(gw, W0, (size_t)(M * N) * 4);
        rt_cu_gemm(G, ta, tb, M, N, K, 1.0f, ga, lda, gb, ldb, beta, gw, N);
        o.gpu[rep] = down(gw, M * N);
    }
    const char *why = ksplit_check(before, split, 0);
    const float *bounds[1] = {bw};
    if (why) {
        report("gemm_grad", 0.0, TOL_DOT, "%s", why);
        free(o.gpu[0]), free(o.gpu[1]);
    } else
        judge_bounded("gemm_grad", TOL_DOT, &o, 1, bounds);
    free(A), free(B), free(W0), free(W), free(bw), reset();
}

/* rt_gemm_dgelu: D = gelu_tanh'(pre) x (dy W) */
static void t_gemm_dgelu(int64_t M, int64_t N, int64_t K)
{
    SHAPE("%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    float *A = avec(M * K), *B = avec(K * N), *pre = avec(M * N), *D = nans(M * N);
    rt_gemm_dgelu(&C, 0, 0, M, N, K, 1.0f, A, K, B, N, D, N, pre);
    void *ga = up_a(A, M * K), *gb = up_a(B, K * N), *gx = up_a(pre, M * N);
    void *gd = dalloc_a(M * N);
    float *pn = nans(M * N);
    out_t o = {"D", D, {0}, M * N};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gd, pn, M * N);
        rt_cu_gemm_dgelu(G, 0, 0, M, N, K, 1.0f, ga, K, gb, N, gd, N, gx);
        o.gpu[rep] = down_a(gd, M * N);
    }
    judge("gemm_dgelu", TEPI(TOL_RED), &o, 1);
    free(A), free(B), free(pre), free(D), free(pn), reset();
}
#endif

/* ---- a batch gathered from a dataset on the GPU --------------------------------------------- */

/* rt_gather_rows (data.cuh) against rt_npy_gather's rule: dst[r] = src[idx[r]], bytes as
 * they are, for rows of 3 bytes (byte moves), 12 (4-byte), 784 and 64 (16-byte). */
static void t_gather(int64_t n_src, int64_t rows, int64_t row_bytes)
{
    SHAPE("%lld of %lld rows x %lld bytes", (long long)rows, (long long)n_src, (long long)row_bytes);
    unsigned char *src = rt_xmalloc((size_t)(n_src * row_bytes));
    for (int64_t i = 0; i < n_src * row_bytes; i++)
        src[i] = (unsigned char)irand(256);
    int32_t *idx = rt_xmalloc((size_t)rows * sizeof *idx);
    for (int64_t r = 0; r < rows; r++)
        idx[r] = (int32_t)irand(n_src);
    unsigned char *want = rt_xmalloc((size_t)(rows * row_bytes)), *got = rt_xmalloc((size_t)(rows * row_bytes));
    for (int64_t r = 0; r < rows; r++)
        memcpy(want + r * row_bytes, src + (int64_t)idx[r] * row_bytes, (size_t)row_bytes);
    void *dsrc = up(src, (size_t)(n_src * row_bytes)), *didx = up(idx, (size_t)rows * 4);
    void *ddst = dalloc((size_t)(rows * row_bytes));
    memset(got, 0xA5, (size_t)(rows * row_bytes));
    upload(ddst, got, (size_t)(rows * row_bytes));
    void *args[] = {&dsrc, &didx, &ddst, &rows, &row_bytes};
    rt_cu_launch(G, "rt_gather_rows", 7, 1, 1, 256, 1, 0, args);
    rt_cu_sync(G);
    rt_cu_download(got, (rt_dptr)(uintptr_t)ddst, (size_t)(rows * row_bytes));
    int same = !memcmp(got, want, (size_t)(rows * row_bytes));
    report("gather_rows", same ? 0.0 : INFINITY, 0.0, same ? NULL : " (rows differ)");
    rt_xfree(src), rt_xfree(idx), rt_xfree(want), rt_xfree(got), reset();
}

/* ---- the parameters' 16-bit copy ------------------------------------------------------------ */

/* rt_param_copy over floats of every magnitude (fp16's subnormals and overflow, bf16's
 * ties), zeros, infinities and NaNs: the device's bits against rt_half.h's, exactly
 * (in fp32 the copy is the value itself). */
static void t_param_copy(int64_t n)
{
    SHAPE("%lld values", (long long)n);
    float *p = rt_xmalloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(irand(1 << 30) << 2 | irand(4));
        p[i] = rt_half_float(u);
        if (i % 11 == 0)   /* the likely range: |x| in 2^-30 .. 2^20 */
            p[i] = ldexpf(urand(), (int)irand(51) - 30);
    }
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.996f,
                                     65520.0f, -65520.0f, 5.9604645e-8f, 2.9802322e-8f,
                                     2.9802326e-8f, 6.1035156e-5f, 1.00390625f, 1.01171875f};
    for (size_t k = 0; k < sizeof specials / sizeof *specials && (int64_t)k < n; k++)
        p[k] = specials[k];
    float *dp = up(p, (size_t)n * 4);
    void *dc = dalloc_a(n);
    void *args[] = {&dp, &dc, &n};
    rt_cu_launch(G, "rt_param_copy", 64, 1, 1, 256, 1, 0, args);
    rt_cu_sync(G);
    int64_t bad = -1;
    if (half) {
        uint16_t *h = rt_xmalloc(abytes(n));
        rt_cu_download(h, (rt_dptr)(uintptr_t)dc, (size_t)n * 2);
        for (int64_t i = 0; i < n && bad < 0; i++) {
            uint16_t want = to_half(p[i]);
            int nan = isnan(p[i]) && isnan(from_half(h[i]));
            if (h[i] != want && !nan)
                bad = i;
        }
        rt_xfree(h);
    } else {
        float *c = down(dc, n);
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (memcmp(&c[i], &p[i], 4) && !(isnan(c[i]) && isnan(p[i])))
                bad = i;
        free(c);
    }
    if (bad >= 0)
        report("param_copy", INFINITY, 0.0, " (value %a converts to other bits than the host's)",
               p[bad]);
    else
        report("param_copy", 0.0, 0.0, NULL);
    rt_xfree(p), reset();
}

#ifndef CHECK_OPS_EMU
/* ---- zero2's gradient region (device_cuda.c, through the driver's virtual memory calls) --- */

/* The first nonzero of n floats at p on the device (-1: none), into why. */
static void expect_zeros(const float *p, int64_t n, const char *what, char *why, size_t wn)
{
    float *h = down(p, n);
    for (int64_t i = 0; i < n && !*why; i++)
        if (h[i] != 0.0f)
            snprintf(why, wn, " (%s: %g at float %lld)", what, h[i], (long long)i);
    free(h);
}

/* Writes n floats' worth of nonzero values at p on the compute stream (a kernel, queued). */
static void scribble(float *p, int64_t n)
{
    int64_t k = n * 4 / (int64_t)abytes(1);   /* rt_param_copy writes act_t */
    float *src = rt_xmalloc((size_t)k * sizeof *src);
    for (int64_t i = 0; i < k; i++)
        src[i] = 1.0f + 0.5f * urand();
    float *ds = up32(src, k);
    void *args[] = {&ds, &p, &k};
    rt_cu_launch(G, "rt_param_copy", 64, 1, 1, 256, 1, 0, args);
    rt_xfree(src);
}

/* A region of 6 chunks, the shard from the middle of chunk 0 to the middle of chunk 1,
 * used as zero2's backward passes use it: clear zeroes the shard's chunks; a write's
 * chunks are mapped and zeroed first; a bucket's chunks are given back once its
 * "reduction" (an event on the communication stream, behind the compute stream) has
 * passed, and the next bucket down reuses their memory (no new chunk), zeroed again; the
 * next clear leaves the shard's chunks alone mapped, zeroed. */
static void t_grads(void)
{
    size_t gran = rt_cu_test_grads(G, 6);
    int64_t q = (int64_t)(gran / 4), P = 6 * q;   /* floats a chunk; in the region */
    float *g = G->grads;
    SHAPE("6 chunks of %zu bytes", gran);
    char why[192] = "";
    size_t peak = 0, chunk = 0, pool = 0, arena, fixed;
    rt_cu_grads_clear(G, P);
    expect_zeros(g, 2 * q, "the shard's chunks after clear", why, sizeof why);
    rt_cu_grads_begin(G, 4 * q + 3, 2 * q - 3);
    if (!*why && rt_cu_grads_mapped(G, NULL, NULL) != 4 * gran)
        snprintf(why, sizeof why, " (%zu bytes mapped after a write's begin, not 4 chunks)",
                 rt_cu_grads_mapped(G, NULL, NULL));
    expect_zeros(g + 4 * q, 2 * q, "a new chunk after begin", why, sizeof why);
    scribble(g + 4 * q, 2 * q);
    rt_cu_fork_comm(G);                 /* the reduction of [4q, 6q) follows the writes */
    rt_cu_grads_sent(G, 4 * q);
    rt_cu_sync(G);
    for (long k = 0; k < 1000000 && rt_cu_grads_mapped(G, NULL, NULL) > 2 * gran; k++)
        rt_cu_grads_begin(G, q, 1);     /* inside the shard: only polls */
    if (!*why && rt_cu_grads_mapped(G, NULL, NULL) != 2 * gran)
        snprintf(why, sizeof why, " (the bucket's chunks not given back: %zu bytes mapped)",
                 rt_cu_grads_mapped(G, NULL, NULL));
    rt_cu_grads_begin(G, 2 * q, 2 * q);
    rt_cu_allocated(G, &pool, &arena, &fixed);
    if (!*why && pool != 4 * gran)
        snprintf(why, sizeof why, " (%zu bytes of chunks created, not 4 chunks: no reuse)", pool);
    expect_zeros(g + 2 * q, 2 * q, "a reused chunk after begin", why, sizeof why);
    scribble(g, 4 * q);
    rt_cu_fork_comm(G);
    rt_cu_grads_sent(G, 0);
    rt_cu_grads_clear(G, P);
    size_t now = rt_cu_grads_mapped(G, &peak, &chunk);
    if (!*why && (now != 2 * gran || peak != 4 * gran || chunk != gran))
        snprintf(why, sizeof why, " (after clear: %zu bytes mapped, at most %zu: not 2 and 4 "
                 "chunks)", now, peak);
    expect_zeros(g, 2 * q, "the shard's chunks after the next clear", why, sizeof why);
    report("zero2_grads", *why ? INFINITY : 0.0, 0.0, *why ? "%s" : NULL, why);
    reset();
}
#endif

/* ---- the optimizer --------------------------------------------------------------------------- */

/* A model of parameter tensors of the given sizes (rank 2 when rank2[i], else 1), laid
 * out back to back as trainc does: offsets need not be multiples of 4. */
#define MAXP 8
typedef struct {
    rt_model m;
    rt_param p[MAXP];
    char names[MAXP][16];
} fake_model;

static void make_model(fake_model *f, const int64_t *sizes, const int *rank2, int n)
{
    memset(f, 0, sizeof *f);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        snprintf(f->names[i], sizeof f->names[i], "p%d", i);
        f->p[i] = (rt_param){.name = f->names[i], .rank = rank2[i] ? 2 : 1, .numel = sizes[i],
                             .offset = off};
        f->p[i].shape[0] = rank2[i] ? 1 : sizes[i];
        f->p[i].shape[1] = rank2[i] ? sizes[i] : 0;
        off += sizes[i];
    }
    f->m = (rt_model){.abi = RT_ABI_VERSION, .name = "check_ops", .n_params = n,
                      .params = f->p, .param_floats = off, .n_trainable = n, .trainable_floats = off};
}

/* The optimizer over [lo, hi) of the region (all of it, or a ZeRO-1 shard whose state
 * is its own), against optim.c's range versions. hi < 0: the whole trained region. */
static void t_optim(const fake_model *f, const char *label, rt_train_config *c, int64_t steps,
                    double lr, float gscale, int clip, int64_t lo, int64_t hi)
{
    const rt_model *m = &f->m;
    int64_t np = m->param_floats;
    if (hi < 0)
        hi = m->trainable_floats;
    int64_t ns = rt_optim_state_parts(c) * (hi - lo);
    SHAPE("%s, %lld floats, [%lld, %lld), %lld steps", label, (long long)np, (long long)lo,
          (long long)hi, (long long)steps);
    float *p = fvec(np), *st = fvec(ns), *gp = fcopy(p, np), *gst = fcopy(st, ns);
    float **g = rt_xmalloc((size_t)steps * sizeof *g);
    float *dp = up(p, np * 4), *dg = dalloc(np * 4), *dst = up(st, (ns ? ns : 1) * 4);
    rt_cu_optim_setup(G, c, m, lo, hi);
    double norm_err = 0.0, *norms = rt_xmalloc((size_t)steps * sizeof *norms);
    for (int64_t t = 1; t <= steps; t++) {
        g[t - 1] = fvec(np);
        double cn = sqrt(rt_grad_sumsq(C.rt, m, lo, hi, g[t - 1] + lo));
        upload(dg, g[t - 1], np * 4);
        double gn = norms[t - 1] = rt_cu_grad_norm(G, m, (rt_dptr)(uintptr_t)dg);
        double e = fabs(gn - cn) / fmax(1.0, cn);
        norm_err = e > norm_err ? e : norm_err;
        rt_optim_step_range(C.rt, c, m, lo, hi, p, g[t - 1] + lo, st, t, lr, gscale, clip);
        rt_cu_optim_step(G, c, m, (rt_dptr)(uintptr_t)dp, (rt_dptr)(uintptr_t)dg,
                         (rt_dptr)(uintptr_t)dst, t, lr, gscale, clip);
    }
    /* the same steps again from the start: the bits must repeat */
    int norm_same = 1;
    out_t o[2] = {{"params", p, {down(dp, np), 0}, np}, {"state", st, {down(dst, ns), 0}, ns}};
    upload(dp, gp, np * 4);
    if (ns)
        upload(dst, gst, ns * 4);
    for (int64_t t = 1; t <= steps; t++) {
        upload(dg, g[t - 1], np * 4);
        double gn = rt_cu_grad_norm(G, m, (rt_dptr)(uintptr_t)dg);
        norm_same &= !memcmp(&gn, &norms[t - 1], sizeof gn);
        rt_cu_optim_step(G, c, m, (rt_dptr)(uintptr_t)dp, (rt_dptr)(uintptr_t)dg,
                         (rt_dptr)(uintptr_t)dst, t, lr, gscale, clip);
    }
    o[1].gpu[1] = down(dst, ns), o[0].gpu[1] = down(dp, np);
    if (norm_same)
        report("grad_norm", norm_err, TOL_RED, NULL);
    else
        report("grad_norm", norm_err, TOL_RED, " (differs between two GPU runs)");
    judge(c->opt == RT_OPT_ADAMW ? "adamw" : c->opt == RT_OPT_MUON ? "muon" : "sgd", TOL_EW, o,
          ns ? 2 : 1);
    if (!ns)
        free(o[1].gpu[0]), free(o[1].gpu[1]);
    for (int64_t t = 0; t < steps; t++)
        free(g[t]);
    free(g), free(norms), free(p), free(st), free(gp), free(gst), reset();
}

/* The update queued with the clip factor worked out on the device (rt_cu_optim_step_clip
 * from rt_cu_grad_sumsq_queue, as loop.c runs a step on one GPU) against the host's rule
 * on the same GPU norm (rt_cu_optim_step with loop.c's factor): the same bits, or the
 * device's arithmetic is not the host's; and against optim.c as t_optim. */
static void t_optim_clip(const fake_model *f, const char *label, rt_train_config *c,
                         int64_t steps, double lr)
{
    const rt_model *m = &f->m;
    int64_t np = m->param_floats, nt = m->trainable_floats, ns = rt_optim_state_parts(c) * nt;
    SHAPE("%s, clip at %g, %lld floats, %lld steps", label, c->grad_clip, (long long)np,
          (long long)steps);
    float *p = fvec(np), *st = fvec(ns);
    float *dp = up(p, np * 4), *dp2 = up(p, np * 4), *dg = dalloc(np * 4);
    float *dst = up(st, (ns ? ns : 1) * 4), *dst2 = up(st, (ns ? ns : 1) * 4);
    rt_cu_optim_setup(G, c, m, 0, nt);
    int clipped = 0;
    for (int64_t t = 1; t <= steps; t++) {
        float *g = fvec(np);
        upload(dg, g, np * 4);
        /* loop.c's update(), loss scale 1, on the GPU's norm */
        double norm = sqrt(rt_cu_grad_sumsq(G, m, (rt_dptr)(uintptr_t)dg));
        float coef = isnan(c->grad_clip) ? 1.0f : (float)(c->grad_clip / (norm + 1e-6));
        int clip = coef < 1.0f;
        float gs = clip ? coef : 1.0f;
        clipped += clip;
        rt_optim_step_range(C.rt, c, m, 0, nt, p, g, st, t, lr, gs, clip);
        rt_cu_optim_step(G, c, m, (rt_dptr)(uintptr_t)dp, (rt_dptr)(uintptr_t)dg,
                         (rt_dptr)(uintptr_t)dst, t, lr, gs, clip);
        rt_dptr ss = rt_cu_grad_sumsq_queue(G, m, (rt_dptr)(uintptr_t)dg);
        rt_cu_optim_step_clip(G, c, m, (rt_dptr)(uintptr_t)dp2, (rt_dptr)(uintptr_t)dg,
                              (rt_dptr)(uintptr_t)dst2, t, lr, ss);
        free(g);
    }
    if (clipped != (isnan(c->grad_clip) || c->grad_clip > 1e3 ? 0 : (int)steps))
        report("clip on the device", INFINITY, 0.0, " (%d of %lld steps clipped)", clipped,
               (long long)steps);
    out_t o[2] = {{"params", p, {down(dp, np), down(dp2, np)}, np},
                  {"state", st, {down(dst, ns), down(dst2, ns)}, ns}};
    /* "differs between two GPU runs" here: the device's factor is not the host's */
    judge("clip on the device", TOL_EW, o, ns ? 2 : 1);
    if (!ns)
        free(o[1].gpu[0]), free(o[1].gpu[1]);
    free(p), free(st), reset();
}

/* grad_clip_algorithm value: optim.cuh's rt_clip_values ahead of the update (inside
 * rt_cu_optim_step) against optim.c's rt_clip_values then the update with gs 1, as
 * step.c runs them; over [lo, hi) (a ZeRO-1 shard: the rest of the gradients left as
 * they were). Judged: the parameters, the state and the clipped gradients. */
static void t_optim_values(const fake_model *f, const char *label, rt_train_config *c,
                           int64_t steps, double lr, float gs, int64_t lo, int64_t hi)
{
    const rt_model *m = &f->m;
    int64_t np = m->param_floats;
    if (hi < 0)
        hi = m->trainable_floats;
    int64_t ns = rt_optim_state_parts(c) * (hi - lo);
    SHAPE("%s, clip values at %g, %lld floats, [%lld, %lld), %lld steps", label, c->grad_clip,
          (long long)np, (long long)lo, (long long)hi, (long long)steps);
    float *p = fvec(np), *st = fvec(ns), *g = NULL;
    float *dp = up(p, np * 4), *dg = dalloc(np * 4), *dst = up(st, (ns ? ns : 1) * 4);
    rt_cu_optim_setup(G, c, m, lo, hi);
    int64_t clipped = 0;
    for (int64_t t = 1; t <= steps; t++) {
        free(g);
        g = fvec(np);
        upload(dg, g, np * 4);
        rt_clip_values(C.rt, g + lo, hi - lo, gs, rt_clip_value(c));
        for (int64_t k = lo; k < hi; k++)
            clipped += fabsf(g[k]) == (float)c->grad_clip;
        rt_optim_step_range(C.rt, c, m, lo, hi, p, g + lo, st, t, lr, 1.0f, 0);
        rt_cu_optim_step(G, c, m, (rt_dptr)(uintptr_t)dp, (rt_dptr)(uintptr_t)dg,
                         (rt_dptr)(uintptr_t)dst, t, lr, gs, 1);
    }
    if (clipped == 0 || clipped == steps * (hi - lo))
        report("clip values", INFINITY, 0.0, " (%lld of %lld elements at the bound)",
               (long long)clipped, (long long)(steps * (hi - lo)));
    out_t o[3] = {{"params", p, {down(dp, np), down(dp, np)}, np},
                  {"grads", g, {down(dg, np), down(dg, np)}, np},
                  {"state", st, {down(dst, ns), down(dst, ns)}, ns}};
    judge("clip values", TOL_EW, o, ns ? 3 : 2);
    if (!ns)
        free(o[2].gpu[0]), free(o[2].gpu[1]);
    free(p), free(st), free(g), reset();
}

/* train.freeze: the odd model's last two tensors frozen, laid out after the trained ones
 * as trainc lays them out (trainable_floats: the optimizer's and the norm's region ends
 * there): against optim.c's, and the frozen tensors' values after the steps the bits
 * they started with, on the GPU */
static void t_optim_frozen(const int64_t *sizes, const int *rank2, int n)
{
    static fake_model mf;
    make_model(&mf, sizes, rank2, n);
    mf.p[n - 2].frozen = mf.p[n - 1].frozen = 1;
    mf.m.n_trainable = n - 2;
    mf.m.trainable_floats = mf.p[n - 2].offset;
    rt_train_config c;
    rt_config_defaults(&c);
    c.opt = RT_OPT_ADAMW, c.lr = 1e-3, c.beta1 = 0.9, c.beta2 = 0.999, c.eps = 1e-8;
    c.weight_decay = 0.1;
    t_optim(&mf, "adamw, the last 2 tensors frozen", &c, 3, 1e-3, 0.5f, 1, 0, -1);
    t_optim(&mf, "adamw, the last 2 tensors frozen, a shard", &c, 2, 1e-3, 1.0f, 0, 200, 33000);
    c.grad_clip = 1.0;
    t_optim_clip(&mf, "adamw, the last 2 tensors frozen", &c, 2, 1e-3);
    c.grad_clip = NAN;
    c.opt = RT_OPT_SGD, c.weight_decay = 0.01, c.momentum = 0.9, c.nesterov = 1;
    t_optim(&mf, "sgd, nesterov, the last 2 tensors frozen", &c, 3, 0.05, 1.0f, 0, 0, -1);
    /* the frozen tensors on the GPU, bit for bit */
    int64_t np = mf.m.param_floats, nt = mf.m.trainable_floats;
    int64_t ns = rt_optim_state_parts(&c) * nt;
    SHAPE("sgd, the last 2 tensors frozen, %lld floats, 2 steps", (long long)np);
    float *p = fvec(np), *st = fvec(ns), *g = fvec(np);
    float *dp = up(p, np * 4), *dg = up(g, np * 4), *dst = up(st, ns * 4);
    rt_cu_optim_setup(G, &c, &mf.m, 0, nt);
    for (int64_t t = 1; t <= 2; t++)
        rt_cu_optim_step(G, &c, &mf.m, (rt_dptr)(uintptr_t)dp, (rt_dptr)(uintptr_t)dg,
                         (rt_dptr)(uintptr_t)dst, t, 0.05, 1.0f, 0);
    float *after = down(dp, np), *cpu = fcopy(p, np), *cst = fcopy(st, ns);
    for (int64_t t = 1; t <= 2; t++)   /* (a trained value counts where the CPU's moved) */
        rt_optim_step_range(C.rt, &c, &mf.m, 0, nt, cpu, g, cst, t, 0.05, 1.0f, 0);
    int64_t moved = 0, kept = 0;
    for (int i = 0; i < n; i++)
        for (int64_t k = mf.p[i].offset; k < mf.p[i].offset + mf.p[i].numel; k++) {
            int same = !memcmp(&after[k], &p[k], sizeof *p);
            if (mf.p[i].frozen)
                moved += !same;
            else
                kept += same && memcmp(&cpu[k], &p[k], sizeof *p);
        }
    free(cpu), free(cst);
    report("frozen tensors unchanged", moved || kept ? INFINITY : 0.0, 0.0,
           moved || kept ? " (%lld frozen values moved, %lld trained ones did not)" : NULL,
           (long long)moved, (long long)kept);
    free(after), free(p), free(st), free(g), reset();
}

#ifndef CHECK_OPS_EMU
/* optimizer muon (optim.cuh's rt_muon_* around cuBLASLt's GEMMs, rt_adamw leaving the
 * flagged chunks) against muon.c: a q, k, v matrix [48, 32] in three wide blocks, a
 * vector, a tall matrix [96, 24] (transposed for its iterations) at an odd offset, a
 * rank-2 head AdamW's; clipped, and over 3 steps with Nesterov's look-ahead */
static void t_muon(void)
{
    static const int64_t sizes[] = {48 * 32, 64, 96 * 24, 2 * 10, 7};
    static const int r2[] = {1, 0, 1, 1, 0};
    static fake_model mm;
    make_model(&mm, sizes, r2, 5);
    int64_t shapes[][2] = {{48, 32}, {64, 0}, {96, 24}, {2, 10}, {7, 0}};
    for (int i = 0; i < 5; i++)
        mm.p[i].shape[0] = shapes[i][0], mm.p[i].shape[1] = shapes[i][1];
    memcpy(mm.p[0].muon, (int64_t[]){16, 16, 16}, 3 * sizeof(int64_t));
    mm.p[2].muon[0] = 96;
    rt_train_config c;
    rt_config_defaults(&c);
    c.opt = RT_OPT_MUON, c.lr = 0.02, c.weight_decay = 0.1, c.momentum = 0.95, c.nesterov = 1;
    c.eps = 1e-7, c.aw_lr = 3e-3, c.aw_beta2 = 0.95, c.aw_weight_decay = 0.01;
    t_optim(&mm, "muon, q k v blocks and a tall matrix, clipped", &c, 3, 0.02, 0.5f, 1, 0, -1);
    c.nesterov = 0, c.ns_steps = 3, c.muon_adjust = RT_MUON_ADJUST_MATCH_RMS_ADAMW;
    t_optim(&mm, "muon, match_rms_adamw, no nesterov, 3 iterations", &c, 2, 0.01, 1.0f, 0, 0, -1);
}
#endif

static void t_optimizers(void)
{
    /* odd sizes: chunks of 16384 with tails, offsets not multiples of 4, rank-1 tensors
     * without weight decay; and a model whose every tensor is 16-byte aligned */
    static const int64_t odd[] = {10, 7 * 33, 2 * 16384 + 3, 1, 50001, 768};
    static const int odd_r2[] = {0, 1, 1, 0, 1, 0};
    static const int64_t even[] = {768 * 4, 768, 16384 * 3, 64};
    static const int even_r2[] = {1, 0, 1, 0};
    static fake_model mo, me;
    make_model(&mo, odd, odd_r2, 6);
    make_model(&me, even, even_r2, 4);
    rt_train_config c;
    rt_config_defaults(&c);
    c.opt = RT_OPT_ADAMW, c.lr = 1e-3, c.beta1 = 0.9, c.beta2 = 0.999, c.eps = 1e-8;
    c.weight_decay = 0.1;
    t_optim(&mo, "adamw, odd sizes", &c, 3, 1e-3, 1.0f, 0, 0, -1);
    t_optim(&me, "adamw, aligned, clipped", &c, 4, 3e-4, 0.3f, 1, 0, -1);
    /* ZeRO-1 shards: cutting tensors and chunks, at odd and at aligned offsets */
    t_optim(&mo, "adamw, a shard", &c, 3, 1e-3, 0.5f, 1, 200, 33000);
    t_optim(&me, "adamw, aligned, a shard", &c, 2, 1e-3, 1.0f, 0, 1024, 16384 * 2 + 12);
    c.opt = RT_OPT_SGD, c.weight_decay = 0.01, c.momentum = 0, c.nesterov = 0;
    t_optim(&mo, "sgd, momentum 0", &c, 2, 0.05, 1.0f, 0, 0, -1);
    c.momentum = 0.9;
    t_optim(&mo, "sgd, momentum, first step", &c, 1, 0.05, 0.5f, 1, 0, -1);
    t_optim(&mo, "sgd, momentum", &c, 3, 0.05, 1.0f, 0, 0, -1);
    t_optim(&mo, "sgd, momentum, a shard", &c, 3, 0.05, 1.0f, 0, 17, 50001);
    c.nesterov = 1;
    t_optim(&me, "sgd, nesterov", &c, 3, 0.05, 0.7f, 1, 0, -1);
    /* the factor worked out on the device: clipping (the gradients' norm is ~ 100 here),
     * a bound never reached, none; AdamW and SGD with momentum */
    c.grad_clip = 1.0;
    t_optim_clip(&mo, "sgd, momentum", &c, 3, 0.05);
    c.opt = RT_OPT_ADAMW, c.weight_decay = 0.1, c.momentum = 0, c.nesterov = 0;
    t_optim_clip(&mo, "adamw", &c, 3, 1e-3);
    t_optim_clip(&me, "adamw, aligned", &c, 2, 1e-3);
    c.grad_clip = 1e6;
    t_optim_clip(&mo, "adamw", &c, 2, 1e-3);
    c.grad_clip = NAN;
    t_optim_clip(&mo, "adamw", &c, 2, 1e-3);
    /* clipping by value: unscaled first (gs), whole and a shard; AdamW and SGD */
    c.grad_clip = 0.3, c.grad_clip_algo = RT_CLIP_VALUE;
    t_optim_values(&mo, "adamw", &c, 2, 1e-3, 0.5f, 0, -1);
    t_optim_values(&me, "adamw, aligned, a shard", &c, 2, 1e-3, 1.0f, 1024, 16384 * 2 + 12);
    c.opt = RT_OPT_SGD, c.weight_decay = 0.01, c.momentum = 0.9;
    t_optim_values(&mo, "sgd, momentum, a shard", &c, 3, 0.05, 0.5f, 17, 50001);
    c.grad_clip = NAN, c.grad_clip_algo = RT_CLIP_NORM;
    c.opt = RT_OPT_ADAMW, c.weight_decay = 0.1, c.momentum = 0;
    t_optim_frozen(odd, odd_r2, 6);
#ifndef CHECK_OPS_EMU
    t_muon();   /* (cuBLASLt's GEMMs) */
#endif
}

/* ---- the kernels' source -------------------------------------------------------------------- */

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = rt_xmalloc((size_t)len + 1);
    if (fread(s, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(1);
    }
    fclose(f);
    *n = (size_t)len;
    return s;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* prelude.cuh, common.cuh, the other .cuh by name (as trainc's kernels_cuda.cu), then
 * the instances (--fp8: its own) */
static char *kernel_source(const char *dir)
{
    const char *const *inst = fp8_only ? fp8_instances : instances;
    DIR *dd = opendir(dir);
    if (!dd) {
        perror(dir);
        exit(1);
    }
    char *names[64];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dd))) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".cuh") && strcmp(de->d_name, "prelude.cuh") &&
            strcmp(de->d_name, "common.cuh") && n < 62)
            names[n++] = strdup(de->d_name);
    }
    closedir(dd);
    qsort(names, (size_t)n, sizeof *names, by_name);
    memmove(names + 2, names, (size_t)n * sizeof *names);
    names[0] = strdup("prelude.cuh"), names[1] = strdup("common.cuh");
    n += 2;
    size_t cap = 1 << 16, len = 0;
    char *src = rt_xmalloc(cap);
    for (int i = 0; i <= n; i++) {
        char path[4096], *part;
        size_t pn;
        if (i < n) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            part = slurp(path, &pn);
            free(names[i]);
        } else {   /* the instances */
            pn = 0;
            for (int k = 0; inst[k]; k++)
                pn += strlen(inst[k]) + 1;
            part = rt_xmalloc(pn + 1);
            part[0] = 0;
            for (int k = 0; inst[k]; k++)
                strcat(strcat(part, inst[k]), "\n");
        }
        while (len + pn + 2 > cap)
            cap *= 2;
        char *grown = rt_xmalloc(cap);
        memcpy(grown, src, len);
        rt_xfree(src);
        src = grown;
        memcpy(src + len, part, pn);
        len += pn;
        src[len++] = '\n';
        src[len] = 0;
        rt_xfree(part);
    }
    return src;
}

/* ---- fp8-mixed's producers: the maxima they fold (--fp8) -------------------------------- */

/* max |x| over n values as fmaxf from 0 takes it (a NaN dropped): the cast's */
static float host_amax(const float *x, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* The slot's float against the maximum of the output as the GPU stored it (act_t,
 * widened: what the cast reads), bit for bit. */
static void fold_judge(const char *name, const void *slot, const void *gy, int64_t n)
{
    float *y = down_a(gy, n), *got = down(slot, 1), want = host_amax(y, n);
    if (memcmp(got, &want, 4))
        report(name, 0.0, 0.0, ": the slot holds %a, the output's maximum is %a", got[0], want);
    else
        report(name, 0.0, 0.0, NULL);
    free(y), free(got);
}

/* the next norm, attention or epilogue call folds into slot 0, zeroed */
static void *fold_next(void)
{
    rt_cu_fp8_amax_reset(G, 0, 1);
    rt_cu_fp8_amax_use(G, -1, -1, 0);
    return rt_cu_fp8_amax_slot(G, 0);
}

/* layernorm.cuh: the forward's y and the backward's dx (with an addend), a warp a row
 * (d a multiple of 128 up to 1024) and a block a row; RMSNorm's the same. The largest
 * output is planted at (pr, pc) (x and dy large there, w 1, b 0), so that a maximum
 * that misses an element (a lane's, a vector's last) shows wherever it falls. */
static void t_fp8_norms(int64_t rows, int64_t d, int64_t pr, int64_t pc)
{
    SHAPE("[%lld, %lld] largest at %lld, %lld", (long long)rows, (long long)d, (long long)pr,
          (long long)pc);
    int64_t n = rows * d;
    float *x = avec(n), *w = fvec(d), *b = fvec(d), *dy = avec(n), *g = avec(n);
    x[pr * d + pc] = 40.0f, dy[pr * d + pc] = 40.0f, w[pc] = 1.0f, b[pc] = 0.0f;
    if (rows > 2)
        x[(pr + 1) % rows * d] = NAN;   /* a NaN row: dropped from the maximum, as the pass does */
    float *gx = up_a(x, n), *gw = up(w, d * 4), *gb = up(b, d * 4), *gdy = up_a(dy, n);
    float *gg = up_a(g, n), *gy = dalloc_a(n), *gdx = dalloc_a(n);
    float *gmean = dalloc(rows * 4), *grstd = dalloc(rows * 4), *gdw = dalloc(d * 4);
    float *gdb = dalloc(d * 4);
    void *slot = fold_next();
    rt_cu_layernorm_fwd(G, gx, gw, gb, gy, gmean, grstd, rows, d, 1e-5f);
    fold_judge("fp8 fold layernorm_fwd", slot, gy, n);
    slot = fold_next();
    rt_cu_layernorm_bwd(G, gx, gw, gmean, grstd, gdy, gg, gdx, gdw, gdb, rows, d);
    fold_judge("fp8 fold layernorm_bwd", slot, gdx, n);
    slot = fold_next();
    rt_cu_rmsnorm_fwd(G, gx, gw, gy, grstd, rows, d, 1e-5f);
    fold_judge("fp8 fold rmsnorm_fwd", slot, gy, n);
    slot = fold_next();
    rt_cu_rmsnorm_bwd(G, gx, gw, grstd, gdy, NULL, gdx, gdw, rows, d);
    fold_judge("fp8 fold rmsnorm_bwd", slot, gdx, n);
    free(x), free(w), free(b), free(dy), free(g), reset();
}

/* glu.cuh: the forward's y [rows, h] and the backward's dx [rows, 2h], 16-byte vectors
 * (h a multiple of 8) or single values, the largest planted last */
static void t_fp8_glu(int64_t rows, int64_t h, int act)
{
    SHAPE("[%lld, %lld] act %d", (long long)rows, (long long)h, act);
    int64_t n = rows * h;
    float *x = avec(2 * n), *dy = avec(n);
    x[2 * n - 1] = 9.0f, x[2 * n - h - 1] = 3.0f, dy[n - 1] = 9.0f;
    float *gx = up_a(x, 2 * n), *gdy = up_a(dy, n), *gy = dalloc_a(n), *gdx = dalloc_a(2 * n);
    void *slot = fold_next();
    rt_cu_glu_fwd(G, gx, gy, rows, h, act);
    fold_judge("fp8 fold glu_fwd", slot, gy, n);
    slot = fold_next();
    rt_cu_glu_bwd(G, gx, gdy, gdx, rows, h, act);
    fold_judge("fp8 fold glu_bwd", slot, gdx, 2 * n);
    free(x), free(dy), reset();
}

/* attention.cuh's forward: y, batches x heads of tiles folding into one slot; the
 * backward's dqkv (its two kernels into one slot) */
static void t_fp8_attention(int64_t B, int64_t T, int64_t d, int64_t H, int causal)
{
    SHAPE("B %lld T %lld d %lld H %lld%s", (long long)B, (long long)T, (long long)d,
          (long long)H, causal ? " causal" : "");
    int64_t nq = B * T * 3 * d, ny = B * T * d;
    float *qkv = avec(nq), *dy = avec(ny);
    for (int64_t i = 0; i < nq; i++)
        qkv[i] *= 4.0f;   /* sharper softmaxes: y's maximum not near the mean */
    float *gq = up_a(qkv, nq), *gl = dalloc(B * H * T * 4), *gy = dalloc_a(ny);
    float *gdy = up_a(dy, ny), *gdq = dalloc_a(nq);
    void *slot = fold_next();
    rt_cu_attention_fwd(G, gq, gl, gy, B, T, d, H, causal);
    fold_judge("fp8 fold attention_fwd", slot, gy, ny);
    slot = fold_next();
    rt_cu_attention_bwd(G, gq, gl, gy, gdy, gdq, B, T, d, H, causal);
    fold_judge("fp8 fold attention_bwd", slot, gdq, nq);
    free(qkv), free(dy), reset();
}

/* attention.cuh's extended forward and backward (key/value heads, rope, a window, qk_norm
 * where qkn): y and dqkv as above */
static void t_fp8_attention_ext(int64_t B, int64_t T, int64_t d, int64_t H, int64_t KV,
                                int64_t W, int qkn)
{
    SHAPE("ext B %lld T %lld d %lld H %lld KV %lld W %lld%s", (long long)B, (long long)T,
          (long long)d, (long long)H, (long long)KV, (long long)W, qkn ? " qk_norm" : "");
    int64_t hd = d / H, nq = B * T * (H + 2 * KV) * hd, ny = B * T * d;
    float *qkv = avec(nq), *dy = avec(ny), *w = fvec(hd);
    for (int64_t i = 0; i < nq; i++)
        qkv[i] *= 4.0f;
    for (int64_t i = 0; i < hd; i++)
        w[i] += 8.0f;   /* large norm weights: dq and dk (through the norm) hold the maximum */
    float *gq = up_a(qkv, nq), *gl = dalloc(B * H * T * 4), *gy = dalloc_a(ny);
    float *gdy = up_a(dy, ny), *gdq = dalloc_a(nq), *gw = up(w, hd * 4);
    float *gdqn = dalloc(hd * 4), *gdkn = dalloc(hd * 4);
    const float *wq = qkn ? gw : NULL;
    void *slot = fold_next();
    float sc = (float)(1.0 / sqrt((double)hd));
    rt_cu_attention_ext_fwd(G, gq, wq, wq, gl, gy, B, T, d, H, KV, 1, W, 10000.0f, 0.0f, 1.0f,
                            4.0f, 0, NULL, sc, 0.0f, NULL);
    fold_judge("fp8 fold attention_ext", slot, gy, ny);
    slot = fold_next();
    rt_cu_attention_ext_bwd(G, gq, wq, wq, gl, gy, gdy, gdq, qkn ? gdqn : NULL, qkn ? gdkn : NULL,
                            B, T, d, H, KV, 1, W, 10000.0f, 0.0f, 1.0f, 4.0f, 0, NULL, sc, 0.0f, NULL);
    fold_judge("fp8 fold attention_ext_bwd", slot, gdq, nq);
    free(qkv), free(dy), free(w), reset();
}

/* epilogue.cuh: rt_bias_act's output (Y with an activation, else C) and rt_dgelu's D;
 * fp8.cuh's rt_fp8_amax with fold (cuda_blas.c's pass where cuBLASLt wrote an output) */
static void t_fp8_epilogues(int64_t M, int64_t N)
{
    SHAPE("[%lld, %lld]", (long long)M, (long long)N);
    int64_t n = M * N;
    float *P = avec(n), *bias = fvec(N), *pre = avec(n);
    P[n - 1] = 9.0f, pre[n - 1] = 9.0f;   /* the largest last: the grid-stride's tail */
    void *gp = dalloc_a(n), *gy = dalloc_a(n), *gb = up(bias, (size_t)N * 4), *gpre = up_a(pre, n);
    void *none = NULL;
    for (int act = 0; act < 3; act++) {
        static const char *const names[] = {"fp8 fold bias_act (C)", "fp8 fold bias_act relu",
                                            "fp8 fold bias_act gelu"};
        upload_a(gp, P, n);
        void *gc = act ? NULL : gp, *gyy = act ? gy : NULL, *slot = fold_next();
        rt_dptr sl = (rt_dptr)(uintptr_t)slot;
        int64_t ld = N;
        int a = act;
        void *args[] = {&gp, &none, &gc, &gyy, &gb, &M, &N, &ld, &a, &sl};
        rt_cu_launch(G, "rt_bias_act", 13, 1, 1, 256, 1, 0, args);
        fold_judge(names[act], slot, act ? gy : gp, n);
    }
    upload_a(gp, P, n);
    void *slot = fold_next();
    rt_dptr sl = (rt_dptr)(uintptr_t)slot;
    int64_t ld = N;
    void *args[] = {&gp, &gpre, &M, &N, &ld, &sl};
    rt_cu_launch(G, "rt_dgelu", 7, 1, 1, 256, 1, 0, args);
    fold_judge("fp8 fold dgelu", slot, gp, n);
    slot = fold_next();
    rt_cu_fp8_fold(G, (rt_dptr)(uintptr_t)gpre, M, N, N, (rt_dptr)(uintptr_t)slot);
    fold_judge("fp8 fold rt_fp8_amax", slot, gpre, n);
    free(P), free(bias), free(pre), reset();
}

/* optim.cuh's rt_adamw and rt_sgd (fp8-mixed's instances: a partial maximum a chunk of
 * the 16-bit copy they write) and fp8.cuh's rt_fp8_chunk_amax (the same from a copy
 * made elsewhere), over a table of chunks of a few tensors, one not a multiple of 4 */
static void t_fp8_weights(void)
{
    static const int64_t sizes[] = {16384 + 100, 3, 4096};
    struct {
        int64_t off;
        int32_t len, decay;
    } ck[8];
    int nc = 0;
    int64_t np = 0;
    for (int t = 0; t < 3; np += sizes[t++])
        for (int64_t o = 0; o < sizes[t]; o += 16384, nc++) {
            ck[nc].off = np + o;
            ck[nc].len = (int32_t)(sizes[t] - o < 16384 ? sizes[t] - o : 16384);
            ck[nc].decay = t != 1;
        }
    SHAPE("%d chunks of %lld parameters", nc, (long long)np);
    float *p = fvec(np), *g = fvec(np), *z = rt_xmalloc((size_t)np * 4);
    memset(z, 0, (size_t)np * 4);
    p[5] = 300.0f;   /* a large weight in the first chunk */
    void *gp = up(p, np * 4), *gg = up(g, np * 4), *gm = up(z, np * 4), *gv = up(z, np * 4);
    void *gpc = dalloc_a(np), *gck = up(ck, sizeof ck), *gam = dalloc(8 * 4);
    for (int k = 0; k < 3; k++) {
        static const char *const names[] = {"fp8 amax adamw", "fp8 amax sgd", "fp8 chunk_amax"};
        upload(gp, p, np * 4);
        float *poison = nans(8);
        upload(gam, poison, 8 * 4);
        free(poison);
        int64_t slo = 0;
        float gs = 1.0f, decay = 0.999f, b1 = 0.9f, b2 = 0.999f, a1 = 0.1f, a2 = 0.001f;
        float step = 0.01f, bc2 = 0.03f, eps = 1e-8f, wd = 0.01f, lr = 0.01f, mom = 0.9f;
        double max_norm = NAN;
        void *sumsq = NULL;
        int mode = 0, nest = 0;
        if (k == 0) {
            void *args[] = {&gp, &gpc, &gg, &gm, &gv, &slo, &gck, &gs, &sumsq, &max_norm, &decay,
                            &b1, &b2, &a1, &a2, &step, &bc2, &eps, &gam};
            rt_cu_launch(G, "rt_adamw", (unsigned)nc, 1, 1, 256, 1, 0, args);
        } else if (k == 1) {
            void *buf = NULL;
            void *args[] = {&gp, &gpc, &gg, &buf, &slo, &gck, &gs, &sumsq, &max_norm, &wd, &lr,
                            &mom, &mode, &nest, &gam};
            rt_cu_launch(G, "rt_sgd", (unsigned)nc, 1, 1, 256, 1, 0, args);
        } else {
            void *args[] = {&gpc, &gck, &gam};
            rt_cu_launch(G, "rt_fp8_chunk_amax", (unsigned)nc, 1, 1, 256, 1, 0, args);
        }
        float *pc = down_a(gpc, np), *am = down(gam, nc);
        int bad = -1;
        for (int c = 0; c < nc && bad < 0; c++) {
            float want = host_amax(pc + ck[c].off, ck[c].len);
            if (memcmp(&am[c], &want, 4))
                bad = c;
        }
        if (bad >= 0)
            report(names[k], 0.0, 0.0, ": chunk %d's partial %a, its maximum %a", bad, am[bad],
                   host_amax(pc + ck[bad].off, ck[bad].len));
        else
            report(names[k], 0.0, 0.0, NULL);
        free(pc), free(am);
    }
    free(p), free(g), rt_xfree(z), reset();
}

/* fp8-mixed's producers of FP8 GEMM operands: each folds its output's absolute maximum
 * (as stored) where the cast reads it, bit for bit the host's maximum of that output. */
static void t_fp8_folds(void)
{
    static rt_model fm = {.name = "check_ops", .fp8 = 1, .fp8_amax_slots = 1};
    rt_cu_fp8_setup(G, &fm);
    /* a warp a row (8 bf16 a lane's vector), a block past the last row; a block a row */
    RUN t_fp8_norms(37, 768, 0, 0);
    RUN t_fp8_norms(37, 768, 36, 767);
    RUN t_fp8_norms(37, 768, 5, 8 * 37 + 7);
    RUN t_fp8_norms(37, 768, 20, 256 + 3);
    RUN t_fp8_norms(9, 130, 0, 129);
    RUN t_fp8_norms(9, 130, 8, 64);
    RUN t_fp8_glu(37, 384, 0);   /* silu, vectors */
    RUN t_fp8_glu(9, 13, 2);     /* gelu (tanh), single values */
    RUN t_fp8_attention(2, 128, 128, 2, 1);   /* the tensor cores (heads 64 wide) */
    RUN t_fp8_attention(1, 17, 96, 2, 1);     /* heads 48 wide: the CUDA cores */
    RUN t_fp8_attention_ext(2, 200, 256, 4, 2, 0, 0);   /* heads 64: sm_90a's kernels where built */
    RUN t_fp8_attention_ext(1, 37, 32, 2, 1, 8, 0);     /* heads 16 wide, a window */
    RUN t_fp8_attention_ext(1, 37, 64, 2, 1, 8, 1);     /* the tensor cores, qk_norm */
    RUN t_fp8_attention_ext(1, 20, 16, 2, 1, 0, 1);     /* heads 8 wide: the CUDA cores, qk_norm */
    RUN t_fp8_epilogues(37, 130);
    RUN t_fp8_epilogues(64, 768);
    RUN t_fp8_weights();
}

/* Attention on every shape: the plain kernels (heads 16 to 128 wide, one-row tiles,
 * the tensor-core kernels' partial tiles), then the Llama-family options. */
static void all_attention(void)
{
    RUN t_attention(2, 17, 96, 2, 1);
    RUN t_attention(2, 17, 96, 2, 0);
    RUN t_attention(3, 128, 128, 4, 1);
    RUN t_attention(2, 64, 128, 2, 0);
    RUN t_attention(1, 40, 256, 2, 1);
    if (half && short_att) {
        RUN t_attention(1, 128, 128, 2, 1);
        RUN t_attention(1, 128, 64, 1, 0);
    } else {
        RUN t_attention(1, 1024, 128, 2, 1);
        RUN t_attention(1, 1024, 64, 1, 0);
    }
    RUN t_attention(3, 65, 48, 3, 1);   /* heads 16 wide; 65 rows: a tile of one row */
    /* heads wider than 64: the tensor-core kernels stream tiles of 32 rows */
    /* sm90_attention.cuh's forward where the kernels are built for sm_90a (16-bit, heads
     * 64 and 128): two query tiles of 128 (the last partial), three key tiles (the
     * two-stage ring wraps), several batch rows and heads */
    RUN t_attention(2, 200, 256, 2, 1);
    RUN t_attention(2, 150, 192, 3, 0);
    RUN t_attention(1, 300, 128, 2, 1);
    RUN t_attention(1, 260, 256, 2, 0);
    RUN t_attention(1, 200, 160, 2, 0);
    RUN t_attention(2, 100, 384, 3, 1);
    /* the Llama-family options alone (GQA, a window, qk_norm, rope with and without llama3
     * scaling) and together; a group of 3 heads leaves a query tile a row short */
    RUN t_attention_ext(2, 37, 64, 4, 2, 1, 0, 0, 0, 0, 0.0f, 0.0f);
    RUN t_attention_ext(2, 50, 96, 6, 2, 0, 0, 0, 0, 0, 0.0f, 0.0f);
    RUN t_attention_ext(2, 100, 64, 2, 2, 1, 9, 0, 0, 0, 0.0f, 0.0f);
    RUN t_attention_ext(2, 33, 64, 2, 2, 0, 0, 1, 0, 0, 0.0f, 0.0f);
    RUN t_attention_ext(2, 40, 64, 2, 2, 1, 0, 0, 10000.0f, 0, 0.0f, 0.0f);
    RUN t_attention_ext(1, 70, 128, 4, 4, 1, 0, 0, 500000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_ext(2, 100, 256, 8, 2, 1, 40, 1, 10000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_ext(1, 65, 384, 3, 1, 1, 30, 1, 10000.0f, 0, 0.0f, 0.0f);   /* heads 128 wide */
    /* heads 64 wide (16-bit: the tensor-core kernels, 64-row tiles): a group of 4 with
     * every option, the window skipping whole tiles on both sides of the backward; a
     * group of 2 without the causal mask, a window of 20 on both sides */
    RUN t_attention_ext(1, 200, 256, 4, 1, 1, 50, 1, 10000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_ext(2, 130, 128, 2, 1, 0, 20, 1, 500000.0f, 0, 0.0f, 0.0f);
    /* heads 64 and 128 (16-bit: sm_90a's kernels where built for it, the emulator's,
     * then the sm_80 ones; the two shapes above too): a group of 4 with llama3's rope over
     * three query tiles; a window of 100 that skips key tiles on every side; a group of 3
     * without rope or the causal mask, a window of 70 on both sides; a group of 1 */
    RUN t_attention_ext(1, 300, 256, 4, 1, 1, 0, 0, 500000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_ext(1, 260, 256, 2, 1, 1, 100, 0, 10000.0f, 0, 0.0f, 0.0f);
    RUN t_attention_ext(2, 200, 384, 6, 2, 0, 70, 0, 0.0f, 0, 0.0f, 0.0f);
    RUN t_attention_ext(1, 150, 256, 2, 2, 1, 0, 0, 10000.0f, 0, 0.0f, 0.0f);
    /* heads 8 wide: the CUDA-core kernels in every precision (a group of 5, every option) */
    RUN t_attention_ext(2, 37, 40, 5, 1, 1, 9, 1, 10000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_ext(2, 37, 40, 5, 1, 0, 9, 1, 10000.0f, 0, 0.0f, 0.0f);   /* both sides */
    /* heads 256 wide (Gemma's): the tensor-core kernels alone, in 16 bits (fp32 has no
     * kernel for them), streaming tiles of 16 rows: a group of 4 with every option but
     * llama3's scaling, seven query tiles; a group of 2 without the causal mask */
    if (half) {
        RUN t_attention_ext(1, 100, 1024, 4, 1, 1, 40, 1, 10000.0f, 0, 0.0f, 0.0f);
        RUN t_attention_ext(2, 70, 512, 2, 1, 0, 0, 0, 10000.0f, 1, 0.0f, 0.0f);
    }
    /* a scale of the attention's own (Gemma 3 27B's 168^-1/2 over heads 128 wide, ...) at
     * heads 64 and 128 (sm_90a's and the sm_80 tensor cores' kernels in 16 bits); the
     * capped cases below scale too, on the CUDA cores and at heads 256 */
    RUN t_attention_ext(1, 200, 256, 4, 2, 1, 0, 1, 10000.0f, 0, 0.2f, 0.0f);
    RUN t_attention_ext(1, 150, 512, 4, 2, 1, 30, 0, 1000000.0f, 0, 0.0771517f, 0.0f);
    /* soft-capped scores (Gemma 2's), caps that bend them: the CUDA cores at heads 8 with
     * every option; heads 64 (the sm_80 tensor cores in 16 bits, sm_90a's kernels having
     * no cap) with a window; heads 256 in 16 bits */
    RUN t_attention_ext(2, 37, 40, 5, 1, 1, 9, 1, 10000.0f, 1, 0.9f, 1.0f);
    RUN t_attention_ext(1, 200, 256, 4, 2, 1, 50, 0, 10000.0f, 0, 0.5f, 3.0f);
    if (half) {
        RUN t_attention_ext(1, 100, 1024, 4, 1, 1, 0, 0, 10000.0f, 0, 0.2f, 4.0f);
    }
    /* longrope's frequencies and amplitudes (Phi-3's 128k models): the CUDA cores at heads 8
     * and 32; heads 96 (Phi-3's: the sm_80 tensor cores in 16 bits) with a scale; heads 64
     * (sm_90a's kernels, then the sm_80 ones) with qk_norm */
    RUN t_attention_ext(2, 37, 40, 5, 1, 1, 9, 1, 10000.0f, 2, 0.0f, 0.0f);
    RUN t_attention_ext(1, 70, 128, 4, 4, 1, 0, 0, 10000.0f, 2, 0.0f, 0.0f);
    RUN t_attention_ext(1, 150, 384, 4, 2, 1, 0, 0, 10000.0f, 2, 0.1458f, 0.0f);
    RUN t_attention_ext(1, 200, 256, 4, 2, 1, 0, 1, 10000.0f, 2, 0.0f, 0.0f);
    /* a partial rope (StableLM's, Nemotron's): the CUDA cores at heads 8; heads 64 (sm_90a's
     * kernels, then the sm_80 ones) with qk_norm and a window; heads 128 */
    RUN t_attention_ext(2, 37, 40, 5, 1, 1, 0, 0, 10000.0f, 3, 0.0f, 0.0f);
    RUN t_attention_ext(1, 200, 256, 4, 2, 1, 60, 1, 10000.0f, 3, 0.0f, 0.0f);
    RUN t_attention_ext(1, 150, 512, 4, 4, 1, 0, 0, 500000.0f, 3, 0.0f, 0.0f);
    /* packed rows (the model's positions: the mask cut at each sequence's start, rope by
     * each token's position): the CUDA cores at heads 8 with every option; heads 64 and
     * 128 (in 16 bits sm_90a's kernels, then the sm_80 tensor cores') with a group of 4
     * and a window, and a soft-cap (the sm_80 kernels alone); heads 256 in 16 bits */
    RUN t_attention_packed(2, 37, 40, 5, 1, 9, 1, 10000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_packed(2, 200, 256, 4, 1, 50, 1, 10000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_packed(2, 150, 512, 4, 2, 0, 0, 500000.0f, 0, 0.0f, 0.0f);
    RUN t_attention_packed(2, 200, 256, 4, 2, 50, 0, 10000.0f, 3, 0.5f, 3.0f);
    if (half) {
        RUN t_attention_packed(2, 100, 1024, 4, 1, 0, 1, 10000.0f, 0, 0.0f, 0.0f);
    }
    /* and without the causal mask (an encoder's padded rows), whole and with a window on
     * both sides (ModernBERT's local layers): heads 8 on the CUDA cores; heads 64 and 128
     * (in 16 bits sm_90a's kernels, then the sm_80 tensor cores') */
    RUN t_attention_packed_full(2, 37, 40, 5, 1, 9, 1, 10000.0f);
    RUN t_attention_packed_full(2, 200, 256, 4, 2, 0, 0, 10000.0f);
    RUN t_attention_packed_full(2, 200, 256, 4, 2, 40, 0, 10000.0f);
    RUN t_attention_packed_full(1, 150, 512, 4, 4, 30, 1, 160000.0f);
}

/* The decode program's pos_embedding (rt_pos_row_add): rows pos .. pos + B - 1 of the
 * table added (with seqs, row pos - b % 2 to row b, the rows' places in slots of a
 * window of pos + B), into another buffer or in place. */
static void t_pos_row_add(int64_t B, int64_t d, int64_t pos, int inplace, int seqs)
{
    SHAPE("B%lld d%lld pos %lld%s%s", (long long)B, (long long)d, (long long)pos,
          inplace ? " in place" : "", seqs ? " sequences" : "");
    int64_t n = B * d;
    float *x = avec(n), *w = fvec((pos + B) * d), *y = inplace ? fcopy(x, n) : nans(n);
    int64_t T = pos + B;
    int32_t *place = rt_xmalloc((size_t)B * sizeof *place);
    for (int64_t b = 0; b < B; b++)
        place[b] = (int32_t)(seqs ? b * T + (pos >= b % 2 ? pos - b % 2 : pos) : pos + b);
    C.place = place, C.kv_T = G->kv_T = T;
    rt_pos_row_add(&C, inplace ? y : x, w, y, B, d);
    float *gx = up_a(x, n), *gw = up(w, (size_t)((pos + B) * d) * 4);
    float *gy = inplace ? gx : dalloc_a(n);
    float *py = nans(n);
    const int32_t *gpos = up(place, (size_t)B * 4);
    out_t o = {"y", y, {0}, n};
    for (int rep = 0; rep < 2; rep++) {
        upload_a(gx, x, n);
        if (!inplace)
            upload_a(gy, py, n);
        G->place = place, G->dplace = gpos;
        rt_cu_pos_row_add(G, gx, gw, gy, B, d);
        o.gpu[rep] = down_a(gy, n);
    }
    judge("pos_row_add", TA(TOL_EW), &o, 1);
    C.place = G->place = G->dplace = NULL;
    C.kv_T = G->kv_T = 0;
    free(x), free(w), free(y), free(py), free(place);
    reset();
}

/* The decode program's attention: a prompt's rows at position 0 (GPT-2's: no options),
 * whole and in 3 slices of which two are empty; one row late in a long cache, in one
 * slice past a chunk of RT_DEC_CHUNK keys (the online softmax's second chunk) and in 6
 * (the merge), GQA with qk_norm and llama3's rope; a window that starts inside the
 * cache, a soft-cap and a scale; a window that leaves the first slices empty; longrope's
 * table at heads 96; heads 256 (Gemma's); rows as sequences of their own (--num-samples),
 * GPT-2's in one slice and Llama's options late in a long cache in the runtime's slices */
static void decode_attention(void)
{
    RUN t_attention_decode(5, 64, 128, 4, 4, 0, 0, 0, 0.0f, 0, 0.0f, 0.0f, 1, 0);
    RUN t_attention_decode(5, 64, 128, 4, 4, 0, 0, 0, 0.0f, 0, 0.0f, 0.0f, 3, 0);
    RUN t_attention_decode(1, 1500, 256, 4, 2, 1300, 0, 1, 500000.0f, 1, 0.0f, 0.0f, 1, 0);
    RUN t_attention_decode(1, 1500, 256, 4, 2, 1300, 0, 1, 500000.0f, 1, 0.0f, 0.0f, 6, 0);
    RUN t_attention_decode(3, 200, 320, 5, 1, 150, 40, 1, 10000.0f, 0, 0.3f, 2.0f, 0, 0);
    RUN t_attention_decode(2, 1100, 256, 4, 2, 1000, 300, 1, 10000.0f, 0, 0.0f, 0.0f, 5, 0);
    RUN t_attention_decode(2, 100, 384, 4, 2, 17, 0, 0, 10000.0f, 2, 0.0f, 0.0f, 0, 0);
    RUN t_attention_decode(2, 40, 512, 2, 1, 30, 9, 1, 10000.0f, 0, 0.0f, 0.0f, 2, 0);
    RUN t_attention_decode(3, 64, 128, 4, 4, 20, 0, 0, 0.0f, 0, 0.0f, 0.0f, 1, 1);
    RUN t_attention_decode(4, 1100, 256, 4, 2, 1000, 300, 1, 10000.0f, 1, 0.0f, 0.0f, 0, 1);
}

/* --lean: one shape of each attention path (the CUDA cores; the tensor cores at heads
 * 32, 64 and 128, where sm_90a's kernels take 64 and 128; the Llama-family options at
 * heads 8 (and the compiler's inverse frequencies, which the device layer uploads), 64, 128 and, in 16
 * bits, 256; packed rows at heads 64), for the runs of tests/fake_gpu_ops.sh after the
 * first held every shape against the CPU: fp16 (bf16's kernels with another 16-bit type)
 * and the emulator's other schedule. */
static void lean_attention(void)
{
    RUN t_attention(2, 17, 96, 2, 1);
    RUN t_attention(3, 128, 128, 4, 1);
    RUN t_attention(1, 128, 128, 2, 1);
    RUN t_attention(2, 100, 384, 3, 1);
    RUN t_attention_ext(2, 37, 40, 5, 1, 1, 9, 1, 10000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_ext(1, 200, 256, 4, 1, 1, 50, 1, 10000.0f, 1, 0.0f, 0.0f);
    RUN t_attention_ext(1, 65, 384, 3, 1, 1, 30, 1, 10000.0f, 0, 0.0f, 0.0f);
    RUN t_attention_ext(2, 37, 40, 5, 1, 1, 9, 1, 10000.0f, 2, 0.0f, 0.0f);   /* rt_cu_const */
    RUN t_attention_packed(2, 200, 256, 4, 1, 50, 1, 10000.0f, 1, 0.0f, 0.0f);
    if (half) {
        RUN t_attention_ext(1, 100, 1024, 4, 1, 1, 40, 1, 10000.0f, 0, 0.0f, 0.0f);
    }
}

/* The count's line ends with the shard's part (a shard's M is every shard's, and their
 * K add up to it) and the exit status. */
static int finish(void)
{
    int ran = shard_at / shard_n + (shard_at % shard_n > shard_i);
    if (shard_n > 1)
        printf(" (shard %d/%d: %d of %d checks)", shard_i, shard_n, ran, shard_at);
    printf("\n");
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    int a = 1, compile_only = 0;
    for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
        if (!strcmp(argv[a], "--bf16"))
            half = 1;
        else if (!strcmp(argv[a], "--fp16"))
            half = 2;
        else if (!strcmp(argv[a], "--short"))
            short_att = 1;
        else if (!strcmp(argv[a], "--lean"))
            lean = 1;
        else if (!strcmp(argv[a], "--fp8"))
            half = 1, fp8_only = 1;
        else if (!strcmp(argv[a], "--compile-only"))
            compile_only = 1;
        else if (!strcmp(argv[a], "--shard") && a + 1 < argc &&
                 sscanf(argv[a + 1], "%d/%d", &shard_i, &shard_n) == 2 && shard_n > 0 &&
                 shard_i >= 0 && shard_i < shard_n)
            a++;
        else {
            fprintf(stderr, "check_ops: unknown option %s\n", argv[a]);
            return 2;
        }
    }
    rt_blas_setup();   /* the CPU twins' GEMMs: OpenBLAS's kernels for this CPU, one thread */
    char *body = kernel_source(a < argc ? argv[a] : "templates/cuda");
    char *src = body;
    if (half) {   /* as trainc writes a mixed-precision model's kernels_cuda.cu */
        const char *def = fp8_only    ? "#define RT_ACT_BF16 1\n#define RT_FP8 1\n"
                          : half == 1 ? "#define RT_ACT_BF16 1\n"
                                      : "#define RT_ACT_F16 1\n";
        src = rt_xmalloc(strlen(def) + strlen(body) + 1);
        strcat(strcpy(src, def), body);
    }
#ifndef CHECK_OPS_EMU
    rt_cu_ops_register();   /* the ops files register with the device layer */
    rt_cu_blas_register();
#endif
    G = rt_cu_test_open(src, 64u << 20);   /* exits 2 without a GPU */
    if (compile_only) {   /* the kernels compiled into the cache, for the shards after */
        printf("compiled\n");
        return 0;
    }
    dev = (region){rt_cu_alloc(1u << 30), 0, 1u << 30};
    dev32 = (region){rt_cu_alloc(256u << 20), 0, 256u << 20};
#ifndef CHECK_OPS_EMU
    /* the main block holds activations: 16-bit GEMM operands, tensor-core attention's
     * launch, as in a mixed-precision model */
    if (half) {
        rt_cu_test_arena(G, dev.base, dev.size, half == 1 ? RT_PREC_BF16 : RT_PREC_FP16);
        par = (region){rt_cu_alloc(4u << 20), 0, 4u << 20};
        par16 = rt_cu_alloc(2u << 20);
        rt_cu_test_params(G, par.base, par.size, par16);
    }
#endif
    C.rt = rt_pool_new(4);
    C.grad_scale = 1.0f;
    if (fp8_only) {
        t_fp8_folds();
        printf("%d passed, %d failed", passes, failures);
        return finish();
    }

    RUN t_colsum(1, 1);
    RUN t_colsum(7, 10);
    RUN t_colsum(300, 130);
    RUN t_colsum(4096, 768);
    RUN t_colsum(33, 50257);
    RUN t_rowsum(5, 1);
    RUN t_rowsum(16, 3 * 784 + 1);
    RUN t_rowsum(32, 200003);

    /* each twice: 32-bit indices divided by multiplies (conv.cuh's rt_fdiv), then the
     * 64-bit path that tensors of 2^31 elements or more take */
    for (wide = 0; wide < 2; wide++) {
        rt_cu_force_wide_index(wide);
        RUN t_conv(2, 3, 7, 9, 3, 1, 1);
        RUN t_conv(3, 2, 10, 8, 3, 2, 0);
        RUN t_conv(2, 16, 14, 14, 3, 1, 1);
        RUN t_conv(1, 2, 9, 11, 5, 2, 2);
        RUN t_conv(2, 3, 13, 6, 1, 3, 0);   /* 1x1, stride 3: col smaller than x */
        RUN t_conv(3, 1, 7, 7, 7, 1, 3);    /* a window as wide as the image */
        /* conv_transpose2d's geometry (its output is this conv's input): 3x4 -> 10x13 at
         * kernel 4, stride 3, padding 1, output_padding 2: the last row and column lie in
         * no window, so col2im must write them as zeros */
        RUN t_conv(2, 4, 10, 13, 4, 3, 1);
        /* a 1x1 output of many channels (a DCGAN's last layer): im2col's threads per
         * channel of a column */
        RUN t_conv(3, 40, 7, 7, 7, 1, 0);
        RUN t_pool(6, 8, 8, 2, 2, 0, 0);
        RUN t_pool(5, 9, 7, 3, 2, 0, 0);
        RUN t_pool(3, 5, 6, 3, 1, 1, 0);
        RUN t_pool(4, 8, 8, 2, 2, 1, 1);
        RUN t_pool(4, 9, 9, 3, 2, 0, 1);
        RUN t_pool(3, 11, 10, 2, 3, 0, 0);  /* stride above the window: inputs no window covers */
        RUN t_pool(5, 9, 7, 2, 2, 1, 0);    /* tiles (stride = window), a row and a column past */
        RUN t_pool(3, 10, 6, 3, 3, 0, 1);   /* 3x3 tiles, NaN windows, a row past them */
        RUN t_gconv(2, 4, 7, 9, 3, 1, 1, 6, 2, 1);      /* grouped */
        RUN t_gconv(3, 6, 8, 8, 3, 2, 1, 6, 6, 0);      /* depthwise, stride 2, no bias */
        RUN t_gconv(2, 8, 9, 7, 3, 1, 1, 16, 8, 1);     /* depthwise, 2 outputs a channel */
        RUN t_gconv(2, 6, 10, 10, 5, 2, 2, 9, 3, 0);    /* 5x5, stride 2 */
        RUN t_gconv(2, 6, 11, 10, 3, 3, 1, 12, 3, 1);   /* stride 3: dx rows no window reads */
        RUN t_gconv(4, 32, 14, 14, 3, 1, 1, 32, 32, 1); /* a ResNet-sized depthwise layer */
    }
    rt_cu_force_wide_index(0);
    wide = 0;
    RUN t_gather_augment(50, 17, 1, 28, 28, 1, 4, 1);   /* Fashion-MNIST's u8 */
    RUN t_gather_augment(9, 8, 3, 9, 7, 4, 3, 1);       /* f32 colour images */
    RUN t_gather_augment(5, 6, 2, 5, 6, 2, 9, 0);       /* u16, pad wider than the image */
    RUN t_gather_resized_crop(40, 33, 1, 28, 28, 0.08, 1.0, 0.75, 4.0 / 3.0, 1);   /* the defaults */
    RUN t_gather_resized_crop(7, 9, 3, 40, 56, 0.3, 0.9, 0.5, 2.0, 0);
    RUN t_gather_resized_crop(5, 4, 3, 17, 23, 0.95, 1.0, 2.5, 3.0, 1);   /* never fits */
    RUN t_color_jitter(9, 3, 40, 56, 0.4, 0.4, 0.4, 0.1);
    RUN t_color_jitter(7, 1, 28, 28, 0.8, 1.5, 0.0, 0.5);   /* factors past 1: clipped */
    RUN t_color_jitter(3, 3, 5, 300, 0.0, 2.0, 2.0, 0.5);   /* more pixels than threads */
    RUN t_mask_tokens(300, 40, 24, 0.15, 1000);         /* BERT's rule */
    RUN t_mask_tokens(9, 5, 128, 1.0, 1 << 17);         /* every target, ids past 2^16 */
    RUN t_conv_nocol(2, 1, 12, 12, 3, 1, 1, 16);    /* a first layer: one grey channel */
    RUN t_conv_nocol(8, 1, 28, 28, 3, 1, 1, 16);    /* Fashion-MNIST's, 2 slices of positions */
    RUN t_conv_nocol(2, 3, 9, 11, 3, 2, 1, 13);     /* RGB, stride 2, odd sizes and out */
    RUN t_conv_nocol(3, 1, 10, 8, 5, 1, 2, 6);      /* 5x5 */
    RUN t_conv_nocol(2, 16, 7, 9, 3, 1, 1, 20);     /* implicit GEMM: partial tiles */
    RUN t_conv_nocol(3, 40, 6, 6, 3, 1, 1, 8);      /* two channel tiles */
    RUN t_conv_nocol(2, 32, 14, 14, 3, 1, 1, 32);   /* a ResNet stage's */
    RUN t_conv_nocol(2, 24, 5, 7, 1, 1, 0, 17);     /* 1x1 */
    RUN t_conv_nocol(2, 8, 9, 9, 5, 1, 0, 5);       /* no padding: OH < H */
    RUN t_conv_nocol(2, 8, 6, 7, 3, 2, 1, 70);      /* 16-bit forward: two channel tiles */
    RUN t_conv_nocol(2, 70, 6, 5, 3, 1, 1, 9);      /* 16-bit input gradient: two channel tiles */
    RUN t_conv_nocol(2, 5, 7, 6, 3, 1, 0, 12);      /* no padding: the gradient's pad k - 1 */

    RUN t_layernorm(1, 7, 2);
    RUN t_layernorm(37, 7, 2);
    RUN t_layernorm(5, 64, 2);
    RUN t_layernorm(300, 130, 2);
    RUN t_layernorm(257, 768, 2);    /* a warp a row (layernorm.cuh's rt_ln_warp), 8 rows a block */
    RUN t_layernorm(9, 128, 2);      /* the same, one group of 4 a lane, a block not full */
    RUN t_layernorm(45, 1024, 2);    /* the same, 8 groups a lane */
    RUN t_layernorm(3, 2048, 2);     /* a block a row again (too wide for a warp's registers) */
    /* without a bias (Cohere's), without either (OLMo's): a warp a row, a block a row */
    RUN t_layernorm(37, 128, 1);
    RUN t_layernorm(300, 130, 1);
    RUN t_layernorm(37, 128, 0);
    RUN t_layernorm(300, 130, 0);

    RUN t_rmsnorm(1, 7);
    RUN t_rmsnorm(37, 7);
    RUN t_rmsnorm(300, 130);
    RUN t_rmsnorm(257, 768);      /* a warp a row, as layernorm's */
    RUN t_rmsnorm(9, 128);
    RUN t_rmsnorm(3, 2048);       /* a block a row */
    RUN t_qk_norm(1, 8, 4, 4);
    RUN t_qk_norm(37, 64, 32, 32);    /* OLMo 2's GQA: k and v half q's width */
    RUN t_qk_norm(300, 130, 66, 66);  /* 16-byte accesses from an odd offset: scalar heads */
    RUN t_qk_norm(5, 2048, 512, 512);
    RUN t_moe(1, 8, 1, 1, 4, 1, 0);      /* one expert */
    RUN t_moe(37, 24, 4, 2, 20, 1, 1);   /* Mixtral's top 2 of 4, its load-balancing loss */
    RUN t_moe(37, 24, 4, 4, 20, 0, 0);   /* every expert, weights as the router gives them */
    RUN t_moe(130, 72, 8, 3, 33, 0, 1);  /* groups across the 64-row tiles, odd widths */
    RUN t_moe(200, 64, 16, 1, 96, 1, 0); /* a 64-row tile holds several groups */
    RUN t_moe(5, 16, 16, 2, 8, 1, 1);    /* most experts get no token */
    RUN t_moe(300, 136, 2, 1, 70, 1, 0); /* groups of several 64-row tiles, 2 column tiles */
    RUN t_moe(70, 24, 72, 3, 8, 0, 1);   /* the router's products over 2 expert tiles */
    RUN t_glu(1, 1, 0);
    RUN t_glu(37, 13, 0);
    RUN t_glu(64, 512, 0);        /* 16-byte accesses (glu.cuh) */
    RUN t_glu(5, 24, 0);          /* the same: three vectors of 8 16-bit values a half row */
    RUN t_glu(1, 1, 1);           /* gated (odd rows: one element a thread) */
    RUN t_glu(37, 300, 1);        /* a row past the block's 256 threads */
    RUN t_grn(3, 49, 16);     /* ConvNeXt V2's: a 7x7 map, channels past a warp's */
    RUN t_grn(2, 5, 70);
    RUN t_batchnorm(4, 3, 25, 1);
    RUN t_batchnorm(32, 16, 196, 1);   /* a conv's [C, H, W], several parts a channel */
    RUN t_batchnorm(7, 33, 1, 1);      /* BatchNorm1d over [C] */
    RUN t_batchnorm(5, 8, 9, 0);       /* affine false */
    RUN t_batchnorm(256, 4, 1024, 1);  /* 64 parts a channel */

    RUN t_cross_entropy(1, 10, 1, 10);
    RUN t_cross_entropy_ls(37, 10, 0, 10, 0.1f);
    RUN t_cross_entropy_ls(37, 10, 1, 10, 0.1f);
    RUN t_cross_entropy_ls(300, 13, 2, 16, 0.25f);
    RUN t_cross_entropy_ls(9, 1030, 1, 1088, 1.0f);
    RUN t_cross_entropy(37, 10, 0, 10);
    RUN t_cross_entropy(37, 13, 1, 13);
    RUN t_cross_entropy(300, 13, 2, 13);
    RUN t_cross_entropy(5, 50257, 1, 50257);
    RUN t_cross_entropy(64, 50257, 2, 50257);
    /* GPT-2's: rows padded to 50304 (ops/loss.c), the gradient over the logits */
    RUN t_cross_entropy(3, 50257, 0, 50304);
    RUN t_cross_entropy(5, 50257, 1, 50304);
    RUN t_cross_entropy(64, 50257, 2, 50304);
    /* 16-bit rows of 8192 to 65536 whose rows start 16-byte aligned are held in
     * registers (loss.cuh): every vector whole, and a last one cut at C */
    RUN t_cross_entropy(4, 8192, 2, 8192);
    RUN t_cross_entropy(6, 8197, 1, 8200);
    RUN t_cross_entropy_nan(4, 50257, 50304);
    RUN t_cross_entropy_ties(50257, 50304);
    RUN t_cross_entropy_inf(50257, 50304);
    RUN t_cross_entropy_inf(50257, 50257);
    RUN t_cross_entropy_ties(8197, 8200);
    RUN t_cross_entropy_bad_target(50257, 50304);   /* the register path */
    RUN t_cross_entropy_bad_target(50257, 50257);   /* the three passes */
    RUN t_cross_entropy_ignore(37, 13, 13, 0.0f, 0, 0);
    RUN t_cross_entropy_ignore(37, 13, 16, 0.1f, 3, 0);
    RUN t_cross_entropy_ignore(6, 8197, 8200, 0.0f, 2, 0);   /* the register path's rows */
    RUN t_cross_entropy_ignore(5, 1030, 1088, 0.1f, 0, 1);   /* nothing counted: no gradient */
    RUN t_mse(1, 1);
    RUN t_mse(1000, 0);
    RUN t_mse(3 * 8192 + 5, 1);
    /* dpo's pair step of each loss type (rt_dpo_pairs' branches; RT_PREF_*), ipo's and
     * simpo's, with rpo_alpha's cross entropy on two; 300 pairs: two blocks of the step */
    RUN t_dpo(5, 7, 13, RT_PREF_SIGMOID, 1, 0.5f, 0.0f, 0.2f, 0.0f);
    RUN t_dpo(300, 3, 10, RT_PREF_SIGMOID, 1, 0.1f, 0.0f, 0.0f, 0.5f);
    RUN t_dpo(5, 7, 13, RT_PREF_SIGMOID, 0, 2.0f, 0.3f, 0.0f, 0.0f);
    RUN t_dpo(5, 7, 13, RT_PREF_IPO, 1, 0.5f, 0.0f, 0.0f, 0.0f);
    for (int k = RT_PREF_ROBUST; k <= RT_PREF_APO_DOWN; k++)
        RUN t_dpo(5, 7, 13, k, 1, 0.5f, 0.0f, k == RT_PREF_ROBUST ? 0.2f : 0.0f,
                  k == RT_PREF_APO_ZERO ? 0.5f : 0.0f);

    if (lean)
        lean_attention();
    else
        all_attention();
    if (lean) {
        RUN t_attention_decode(1, 1500, 256, 4, 2, 1300, 0, 1, 500000.0f, 1, 0.0f, 0.0f, 6, 0);
    } else {
        decode_attention();
    }
    RUN t_pos_row_add(1, 768, 1000, 0, 0);
    RUN t_pos_row_add(7, 130, 3, 1, 0);
    RUN t_pos_row_add(5, 130, 40, 1, 1);

    RUN t_embedding(1, 11, 7, 11);
    RUN t_embedding(100, 300, 7, 20);
    RUN t_embedding(1000, 300, 128, 300);
    RUN t_embedding(777, 50257, 768, 50257);
    RUN t_embedding(500, 50257, 768, 5);

    RUN t_bias_act(37, 10, 0, 0, 0);
    RUN t_bias_act(64, 256, 1, 0, 0);
    RUN t_bias_act(33, 130, 2, 1, 0);
    RUN t_bias_act(16, 3072, 2, 0, 0);
    RUN t_bias_act(37, 10, 0, 0, 1);   /* GPT's projections: + bias + residual */
    RUN t_bias_act(128, 768, 0, 0, 1);
    RUN t_bias_act(33, 130, 2, 1, 1);
    RUN t_dgelu(37, 10, 10);
    RUN t_dgelu(33, 130, 136);
    RUN t_dgelu(256, 3072, 3072);
    RUN t_add_into(1);
    RUN t_add_into(3072);
    /* fp8-mixed's casts: odd shapes (partial tiles), a padded row, both formats, both
     * layouts, one more block of partial maxima than a row of the grid */
    RUN t_fp8_cast(1, 1, 1, 0, 0, 0);
    RUN t_fp8_cast(37, 45, 48, 0, 1, 1);
    RUN t_fp8_cast(37, 45, 45, 1, 0, 1);
    RUN t_fp8_cast(64, 768, 768, 1, 1, 0);
    RUN t_fp8_cast(300, 128, 128, 0, 0, 0);
    RUN t_fp8_cast(1024, 512, 512, 0, 1, 0);
    RUN t_fp8_cast(37, 45, 48, 1, 2, 1);      /* a linear layer's dy, both layouts at once */
    RUN t_fp8_cast(1024, 512, 512, 1, 2, 0);
#ifndef CHECK_OPS_EMU
    /* the biases as a model's (with --bf16/--fp16 a parameter with a 16-bit copy) */
    RUN t_gemm_bias(64, 256, 784, 1, 0, 0, 1);     /* the MLP's first layer */
    RUN t_gemm_bias(64, 10, 256, 0, 0, 0, 1);
    RUN t_gemm_bias(256, 512, 128, 2, 1, 0, 1);    /* GPT's fc: GELU, the pre-activation kept */
    RUN t_gemm_bias(256, 128, 512, 0, 0, 1, 1);    /* GPT's proj: + bias + residual */
    RUN t_gemm_bias(1024, 3072, 768, 2, 1, 0, 1);
    RUN t_gemm_bias(37, 13, 7, 2, 0, 0, 1);
    if (half) {   /* a bias with no 16-bit copy: fp32, or the fallback kernel where refused */
        RUN t_gemm_bias(64, 256, 784, 1, 0, 0, 0);
        RUN t_gemm_bias(256, 512, 128, 2, 1, 0, 0);
    }
    RUN t_gemm_dbias(10, 256, 64, 1, 0);
    RUN t_gemm_dbias(10, 256, 64, 0, 0);
    RUN t_gemm_dbias(768, 768, 2048, 1, 0);
    RUN t_gemm_dbias(3072, 768, 1024, 0, 0);
    /* K-sliced (cuda_blas.c's ksplit_gemm): a wide MLP's weight gradient, K's rest
     * after whole slices, all four transposes, partials not a multiple of 64 floats */
    RUN t_gemm_dbias(64, 64, 16384, 1, 1);
    RUN t_gemm_dbias(16, 64, 9000, 0, 1);
    RUN t_gemm_dbias(1024, 768, 8192, 1, 0);       /* 48 tiles: whole */
    RUN t_gemm_grad(1, 0, 64, 32, 16384, 0.0f, 1);
    RUN t_gemm_grad(0, 1, 32, 72, 9000, 1.0f, 1);  /* a convolution's: dy [out, K] col [in, K] */
    RUN t_gemm_grad(0, 1, 16, 9, 12544, 1.0f, 1);
    RUN t_gemm_grad(0, 0, 24, 40, 12000, 1.0f, 1);
    RUN t_gemm_grad(1, 1, 17, 33, 12000, 0.5f, 1);
    RUN t_gemm_dgelu(64, 512, 128);
    RUN t_gemm_dgelu(1024, 3072, 768);
    RUN t_gemm_dgelu(33, 13, 7);   /* ld 13: no multiple of 8, cuBLASLt's DGELU refuses */
    if (half == 1) {   /* fp8-mixed's GEMMs: a GPT block's shapes, and 40: not FP8's */
        RUN t_gemm_fp8(0, 256, 128, 384, 0, 0);
        RUN t_gemm_fp8(0, 256, 512, 128, 1, 0);
        RUN t_gemm_fp8(1, 256, 128, 512, 0, 0);
        RUN t_gemm_fp8(2, 256, 128, 512, 0, 0);
        RUN t_gemm_fp8(2, 1024, 768, 3072, 0, 0);
        RUN t_gemm_fp8(1, 40, 64, 32, 0, 0);
        RUN t_gemm_fp8(1, 64, 128, 64, 0, 4);   /* cuBLASLt refuses: bf16, said */
    }
#endif
    RUN t_gather(1000, 333, 3);
    RUN t_gather(1000, 333, 12);
    RUN t_gather(5000, 1024, 784);
    RUN t_gather(70000, 4096, 64);
    RUN t_param_copy(1 << 20);
    RUN t_ema(1);
    RUN t_ema(100003);
    RUN t_swa(100003);
    RUN t_optimizers();
#ifndef CHECK_OPS_EMU
    RUN t_grads();   /* last: it leaves the exec's gradient region set up */
#endif

    printf("%d passed, %d failed%s", passes, failures,
           half == 1 ? " (bf16 activations)" : half == 2 ? " (fp16 activations)" : "");
    return finish();
}
