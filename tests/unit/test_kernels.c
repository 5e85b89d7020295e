/* test_kernels.c: every CPU kernel (runtime/kernels.h lists their files) and conv2d's three calls
 * (runtime/conv.c) against a naive C reference (double precision where it sums), on odd
 * shapes, with 1 and 3 threads; run-to-run and thread-count determinism;
 * finite-difference checks of the backward kernels.
 *
 * Built by tests/run_all.sh (unit/build_kernels), which lists its sources.
 * Prints "ok NAME" or "FAIL NAME ..." per check; exits 1 if any check failed. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "rt.h"
#include "rt_vec.h"

static int failures;
static rt_pool *pools[2];      /* 1 and 3 threads */
static const int pool_threads[2] = {1, 3};

/* ---- helpers ------------------------------------------------------------------ */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float urand(void)       /* [-1, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static float *fvec(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = urand();
    return p;
}

static double *dvec(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

static void fill_nan(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
}

static rt_exec exec_on(int pi, float grad_scale)
{
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.rt = pools[pi];
    e.grad_scale = grad_scale;
    return e;
}

static void pass(const char *name) { printf("ok %s\n", name); }

static void fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s ", name);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    failures++;
}

/* max |got - ref| relative to max |ref| (floored at 1e-30); NaN must match NaN. */
static void check_close(const char *name, const float *got, const double *ref, int64_t n,
                        double tol)
{
    double err = 0, scale = 1e-30;
    int64_t worst = -1;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i]) || isnan(got[i])) {
            if (isnan(ref[i]) != isnan(got[i])) {
                fail(name, "at %lld: got %g, want %g", (long long)i, got[i], ref[i]);
                return;
            }
            continue;
        }
        double d = fabs(got[i] - ref[i]) / scale;
        if (d > err) {
            err = d;
            worst = i;
        }
    }
    if (err > tol)
        fail(name, "rel err %.3g > %.3g at %lld: got %.9g, want %.9g", err, tol,
             (long long)worst, got[worst], ref[worst]);
    else
        pass(name);
}

static void check_scalar(const char *name, double got, double ref, double tol)
{
    double err = fabs(got - ref) / fmax(fabs(ref), 1e-30);
    if (!(err <= tol))
        fail(name, "got %.12g, want %.12g (rel err %.3g)", got, ref, err);
    else
        pass(name);
}

static void check_same(const char *name, const void *a, const void *b, size_t bytes)
{
    if (memcmp(a, b, bytes) != 0)
        fail(name, "results differ bitwise");
    else
        pass(name);
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

/* ---- rt_parallel_for ------------------------------------------------------------ */

static int32_t *pf_count;      /* [n]: how often each index was visited */
static atomic_int pf_nchunks;
static int64_t pf_lo[64], pf_hi[64];

static void pf_mark(rt_exec *e, int64_t lo, int64_t hi)
{
    (void)e;
    int i = atomic_fetch_add(&pf_nchunks, 1);
    if (i < 64) {
        pf_lo[i] = lo;
        pf_hi[i] = hi;
    }
    for (int64_t j = lo; j < hi; j++)
        pf_count[j]++;
}

static void pf_add(rt_exec *e, int64_t lo, int64_t hi)
{
    (void)e;
    for (int64_t j = lo; j < hi; j++)
        pf_count[j]++;
}

static void test_parallel_for(void)
{
    char nm[128];
    const int64_t ns[] = {0, 1, 4095, 4096, 4097, 8193, 3 * 4096, 3 * 4096 + 2, 100001};
    for (int pi = 0; pi < 2; pi++) {
        int th = pool_threads[pi];
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            int64_t n = ns[k];
            rt_exec e = exec_on(pi, 1);
            pf_count = calloc((size_t)n + 1, sizeof(int32_t));
            atomic_store(&pf_nchunks, 0);
            rt_parallel_for(&e, n, pf_mark);
            int ok = 1;
            for (int64_t j = 0; j < n; j++)
                ok &= pf_count[j] == 1;
            /* chunks: min(threads, ceil(n / 4096)), sizes differing by at most one */
            int64_t want = n == 0 ? 0 : (n + 4095) / 4096 < th ? (n + 4095) / 4096 : th;
            int got = atomic_load(&pf_nchunks);
            int64_t mn = INT64_MAX, mx = 0;
            for (int i = 0; i < got && i < 64; i++) {
                int64_t len = pf_hi[i] - pf_lo[i];
                mn = len < mn ? len : mn;
                mx = len > mx ? len : mx;
            }
            NAME("parallel_for n=%lld t=%d", (long long)n, th);
            if (!ok || got != want || (got > 0 && mx - mn > 1))
                fail(nm,
                     "coverage %d, %d chunks (want %lld), sizes %lld..%lld", ok, got,
                     (long long)want, (long long)mn, (long long)mx);
            else
                pass(nm);
            free(pf_count);
        }
        /* Many launches back to back: a lost wakeup hangs, a race miscounts. */
        int64_t n = 3 * 4096 + 5;
        int reps = 3000;
        pf_count = calloc((size_t)n, sizeof(int32_t));
        rt_exec e = exec_on(pi, 1);
        double t0 = rt_now();
        for (int r = 0; r < reps; r++)
            rt_parallel_for(&e, n, pf_add);
        double us = (rt_now() - t0) / reps * 1e6;
        int ok = 1;
        for (int64_t j = 0; j < n; j++)
            ok &= pf_count[j] == reps;
        if (!ok)
            fail(NAME("parallel_for stress t=%d", th), "counts wrong");
        else
            printf("ok parallel_for stress t=%d (%.2f us per launch of %lld items)\n", th, us,
                   (long long)n);
        /* Launches with gaps long enough that the workers fall asleep between them. */
        memset(pf_count, 0, (size_t)n * sizeof(int32_t));
        for (int r = 0; r < 20; r++) {
            usleep(200);
            rt_parallel_for(&e, n, pf_add);
        }
        ok = 1;
        for (int64_t j = 0; j < n; j++)
            ok &= pf_count[j] == 20;
        NAME("parallel_for after sleep t=%d", th);
        if (!ok)
            fail(nm, "counts wrong");
        else
            pass(nm);
        free(pf_count);
    }
}

/* ---- rt_gemm -------------------------------------------------------------------- */

static void test_gemm(void)
{
    char nm[160];
    const int64_t shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {33, 17, 65}, {64, 1, 9}, {3, 4, 0}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int bi = 0; bi < 2; bi++) {
                    int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                    float alpha = 0.7f, beta = bi ? 1.3f : 0.0f;
                    /* stored A is [M, K] or [K, M]; rows padded by 3 */
                    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 3, ldc = N + 2;
                    float *A = fvec((ta ? K : M) * lda), *B = fvec((tb ? N : K) * ldb);
                    float *C0 = fvec(M * ldc), *C = malloc((size_t)(M * ldc) * sizeof(float));
                    if (beta == 0.0f)
                        fill_nan(C0, M * ldc);  /* beta = 0 must not read C */
                    double *ref = dvec(M * N);
                    float *got = malloc((size_t)(M * N) * sizeof(float));
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < N; j++) {
                            double s = 0;
                            for (int64_t p = 0; p < K; p++)
                                s += (double)(ta ? A[p * lda + i] : A[i * lda + p]) *
                                     (tb ? B[j * ldb + p] : B[p * ldb + j]);
                            ref[i * N + j] =
                                alpha * s + (beta != 0.0f ? beta * (double)C0[i * ldc + j] : 0);
                        }
                    rt_exec e = exec_on(1, 1);
                    memcpy(C, C0, (size_t)(M * ldc) * sizeof(float));
                    rt_gemm(&e, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                    for (int64_t i = 0; i < M; i++)
                        memcpy(got + i * N, C + i * ldc, (size_t)N * sizeof(float));
                    /* K <= 65 products of |values| < 1 summed in float: ~K * 2^-24 */
                    check_close(NAME("gemm M=%lld N=%lld K=%lld ta=%d tb=%d beta=%g",
                                     (long long)M, (long long)N, (long long)K, ta, tb,
                                     (double)beta),
                                got, ref, M * N, 1e-5);
                    /* the padding between rows of C is left alone */
                    int pad_ok = 1;
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = N; j < ldc; j++)
                            pad_ok &= memcmp(&C[i * ldc + j], &C0[i * ldc + j], 4) == 0;
                    if (!pad_ok)
                        fail(nm, "wrote outside the N columns");
                    free(A), free(B), free(C0), free(C), free(ref), free(got);
                }
}

/* GEMMs big enough to be cut into slices over the pool: the slices depend on the shape
 * alone, so 1 and 3 threads give the same bits (BLAS may sum a slice of another size in
 * another order: OpenBLAS's SkylakeX kernels do) */
static void test_gemm_threads(void)
{
    char nm[160];
    const int64_t shapes[][5] = {{6, 300, 20000, 0, 1}, {300, 40, 3000, 1, 0},
                                 {32, 5000, 288, 0, 0}, {288, 3000, 32, 1, 0},
                                 {6, 72, 5184, 0, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        int ta = (int)shapes[si][3], tb = (int)shapes[si][4];
        int64_t lda = ta ? M : K, ldb = tb ? K : N;
        float *A = fvec(M * K), *B = fvec(K * N), *C[2];
        for (int pi = 0; pi < 2; pi++) {
            rt_exec e = exec_on(pi, 1);
            C[pi] = fvec(M * N);
            rt_gemm(&e, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C[pi], N);
        }
        check_same(NAME("gemm M=%lld N=%lld K=%lld ta=%d tb=%d t=1 vs t=3", (long long)M,
                        (long long)N, (long long)K, ta, tb),
                   C[0], C[1], (size_t)(M * N) * sizeof(float));
        free(A), free(B), free(C[0]), free(C[1]);
    }
}

/* ---- rt_gemm_bias ------------------------------------------------------------- */

/* The epilogue's arithmetic, to the bit: P = rt_gemm's product (beta 0), then in float
 * v = P (+ R) + bias[j] in that order (cuBLASLt's: beta C before the bias), C = v, Y =
 * act(v); the padding between rows untouched. A reordered sum, a missing residual or
 * an activation of the wrong value gives other bits. */
static void test_gemm_bias(void)
{
    char nm[160];
    const int64_t shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {33, 17, 65}, {200, 130, 48}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int act = RT_EPI_NONE; act <= RT_EPI_GELU_TANH; act++)
            for (int keep = 0; keep < 2; keep++)
                for (int res = 0; res < 2; res++) {
                    if (act == RT_EPI_NONE && !keep)
                        continue;   /* no output */
                    int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                    int64_t lda = K + 1, ldb = K + 2, ldc = N + 3, n = M * ldc;
                    float *A = fvec(M * lda), *B = fvec(N * ldb), *bias = fvec(N), *R = fvec(n);
                    float *P = malloc((size_t)n * 4), *C = fvec(n), *Y = fvec(n);
                    float *wc = malloc((size_t)n * 4), *wy = malloc((size_t)n * 4);
                    memcpy(wc, C, (size_t)n * 4);
                    memcpy(wy, Y, (size_t)n * 4);
                    rt_exec e = exec_on(1, 1);
                    rt_gemm(&e, 0, 1, M, N, K, 0.5f, A, lda, B, ldb, 0.0f, P, ldc);
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < N; j++) {
                            int64_t k = i * ldc + j;
                            float v = P[k];
                            if (res)
                                v = v + R[k];
                            v = v + bias[j];
                            if (keep)
                                wc[k] = v;
                            if (act == RT_EPI_RELU)
                                wy[k] = v > 0.0f ? v : 0.0f;
                            else if (act == RT_EPI_GELU_TANH)
                                wy[k] = rt_gelu_tanh(v);
                        }
                    rt_gemm_bias(&e, 0, 1, M, N, K, 0.5f, A, lda, B, ldb, keep ? C : NULL, ldc,
                                 bias, res ? R : NULL, act, act ? Y : NULL);
                    const char *an[] = {"none", "relu", "gelu_tanh"};
                    check_same(NAME("gemm_bias %lldx%lldx%lld act=%s C=%d residual=%d C", (long long)M,
                                    (long long)N, (long long)K, an[act], keep, res),
                               C, wc, (size_t)n * 4);
                    check_same(NAME("gemm_bias %lldx%lldx%lld act=%s C=%d residual=%d Y", (long long)M,
                                    (long long)N, (long long)K, an[act], keep, res),
                               Y, wy, (size_t)n * 4);
                    free(A), free(B), free(bias), free(R), free(P), free(C), free(Y), free(wc), free(wy);
                }
    /* the order, where it shows: (1 + -1) + 2^-30 = 2^-30; (1 + 2^-30) + -1 = 0 */
    float a1 = 1.0f, b1 = 1.0f, r1 = -1.0f, bias1 = 0x1p-30f, c1 = NAN;
    rt_exec e = exec_on(0, 1);
    rt_gemm_bias(&e, 0, 1, 1, 1, 1, 1.0f, &a1, 1, &b1, 1, &c1, 1, &bias1, &r1, RT_EPI_NONE, NULL);
    if (c1 != 0x1p-30f)
        fail("gemm_bias residual before bias", "got %g, want 2^-30", c1);
    else
        pass("gemm_bias residual before bias");
}

/* ---- rt_tanhf ------------------------------------------------------------------------ */

/* trainc_rt.h's tanh (plain arithmetic, so loops over it vectorize): within 3.5 units in
 * the last place of tanh in double over every 29th float of [0, inf) and its negation;
 * odd; NaN stays NaN, +-inf give +-1. GELU (tanh) on it against the same formula on
 * libm's tanhf: at most 4 units of |x| 2^-24 apart (0.5 x times the two tanh's errors;
 * the formula's own float rounding, the same in both, is far larger for negative x). */
static float gelu_libm(float x)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

static void test_tanh(void)
{
    double worst = 0.0, worst_gelu = 0.0;
    float at = 0.0f, at_gelu = 0.0f;
    int odd = 1;
    for (uint32_t b = 0; b < 0x7f800000u; b += 29) {
        float x;
        memcpy(&x, &b, sizeof x);
        double want = tanh((double)x);
        float w = (float)want;
        double ulp = (double)nextafterf(w, INFINITY) - (double)w;
        double e = fabs((double)rt_tanhf(x) - want) / ulp;
        if (e > worst)
            worst = e, at = x;
        odd &= rt_tanhf(-x) == -rt_tanhf(x);
        for (int s = 0; s < 2 && x > 0.0f && x < 20.0f; s++) {
            float v = s ? -x : x;
            double eg = fabs((double)rt_gelu_tanh(v) - (double)gelu_libm(v)) / ((double)x * 0x1p-24);
            if (eg > worst_gelu)
                worst_gelu = eg, at_gelu = v;
        }
    }
    if (worst <= 3.5 && odd)
        pass("rt_tanhf within 3.5 ulp of tanh, odd");
    else
        fail("rt_tanhf", "%.2f ulp at %.9g, odd %d", worst, at, odd);
    if (worst_gelu <= 4.0)
        pass("rt_gelu_tanh on rt_tanhf vs on libm's tanhf");
    else
        fail("rt_gelu_tanh on rt_tanhf vs on libm's tanhf", "%.2f units of |x| 2^-24 at %.9g",
             worst_gelu, at_gelu);
    if (isnan(rt_tanhf(NAN)) && rt_tanhf(INFINITY) == 1.0f && rt_tanhf(-INFINITY) == -1.0f &&
        isnan(rt_gelu_tanh(NAN)) && isnan(rt_gelu_tanh_bwd(NAN, 1.0f)))
        pass("rt_tanhf specials");
    else
        fail("rt_tanhf specials", "NaN %g, inf %g, -inf %g", rt_tanhf(NAN), rt_tanhf(INFINITY),
             rt_tanhf(-INFINITY));
}

/* ---- rt_expf --------------------------------------------------------------------------- */

/* trainc_rt.h's e^x (plain arithmetic, so the silu and sigmoid loops vectorize): within
 * 1.5 units in the last place of exp in double (0.97 seen) over every 29th float of
 * both signs where e^x is a normal float, the subnormal results within one unit of
 * 2^-149; 0 below, inf above, NaN stays NaN; silu(-inf) NaN as in PyTorch (-inf
 * times 0). */
/* rt_vec.h's exp4 (the runtime's softmax and cross-entropy) gives rt_expf's bits, on
 * every 29th float (both signs: every bit pattern) and the specials, four a call */
static void test_exp4(void)
{
    static const float special[] = {NAN, INFINITY, -INFINITY, 89.0f, 88.72f, -104.0f,
                                    -103.97f, -87.34f, 0.0f, -0.0f, 1e-30f, -1e-30f};
    const uint64_t n = 0x100000000ull / 29 + 1, total = n + 12;
    int64_t bad = 0;
    float at = 0.0f;
    for (uint64_t i = 0; i < total; i += 4) {
        float x[4], want[4];
        for (int l = 0; l < 4; l++) {
            uint64_t k = i + l < total ? i + l : total - 1;
            uint32_t u = (uint32_t)(k * 29);
            if (k < n)
                memcpy(&x[l], &u, sizeof x[l]);
            else
                x[l] = special[k - n];
            want[l] = rt_expf(x[l]);
        }
        v4f v = exp4(ld4(x));
        for (int l = 0; l < 4; l++)
            if (memcmp((float *)&v + l, &want[l], sizeof(float)) && bad++ == 0)
                at = x[l];
    }
    if (!bad)
        pass("exp4 gives rt_expf's bits");
    else
        fail("exp4", "%lld inputs differ from rt_expf, the first %.9g", (long long)bad, at);
}

static void test_expf(void)
{
    double worst = 0.0, worst_sub = 0.0;
    float at = 0.0f, at_sub = 0.0f;
    for (uint32_t b = 0; b < 0xff800000u; b += 29) {
        float x;
        memcpy(&x, &b, sizeof x);
        if (isnan(x) || x > 88.72f || x < -110.0f)
            continue;
        double want = exp((double)x), got = (double)rt_expf(x);
        if (want < 0x1p-126) {   /* subnormal results: an absolute unit */
            double e = fabs(got - want) / 0x1p-149;
            if (e > worst_sub)
                worst_sub = e, at_sub = x;
            continue;
        }
        float w = (float)want;
        double e = fabs(got - want) / ((double)nextafterf(w, INFINITY) - (double)w);
        if (e > worst)
            worst = e, at = x;
    }
    printf("note rt_expf: %.2f ulp at %.9g, subnormal %.2f\n", worst, at, worst_sub);
    test_exp4();
    if (worst <= 1.5 && worst_sub <= 1.0)
        pass("rt_expf within 1.5 ulp of exp (subnormals within 2^-149)");
    else
        fail("rt_expf", "%.2f ulp at %.9g; subnormal %.2f at %.9g", worst, at, worst_sub, at_sub);
    if (isnan(rt_expf(NAN)) && rt_expf(INFINITY) == INFINITY && rt_expf(-INFINITY) == 0.0f &&
        rt_expf(89.0f) == INFINITY && rt_expf(-104.0f) == 0.0f && rt_expf(0.0f) == 1.0f &&
        isnan(rt_silu(NAN)) && isnan(rt_silu(-INFINITY)) && rt_silu(INFINITY) == INFINITY)
        pass("rt_expf specials");
    else
        fail("rt_expf specials", "NaN %g, inf %g, -inf %g, 89 %g, -104 %g, 0 %g",
             rt_expf(NAN), rt_expf(INFINITY), rt_expf(-INFINITY), rt_expf(89.0f),
             rt_expf(-104.0f), rt_expf(0.0f));
}

/* ---- rt_gemm_dbias, rt_gemm_dgelu ---------------------------------------------------- */

/* The backward epilogues' CPU arithmetic, to the bit: rt_gemm_dbias is rt_gemm then
 * rt_colsum_add of A over the K rows (accumulating into C and db whatever `fresh`
 * and e->grads_zero say: the CPU always adds); rt_gemm_dgelu is rt_gemm (beta 0) then
 * D = rt_gelu_tanh_bwd(pre, D) per element, the padding between rows untouched. */
static void test_grad_epilogues(void)
{
    char nm[160];
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {130, 48, 2000}, {33, 65, 17}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int fresh = 0; fresh < 2; fresh++) {
            int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ldb = N + 2, ldc = N + 1;
            float *A = fvec(K * M), *B = fvec(K * ldb), *C = fvec(M * ldc), *db = fvec(M);
            float *wc = malloc((size_t)(M * ldc) * 4), *wdb = malloc((size_t)M * 4);
            memcpy(wc, C, (size_t)(M * ldc) * 4);
            memcpy(wdb, db, (size_t)M * 4);
            rt_exec e = exec_on(1, 1);
            e.grads_zero = fresh;
            rt_gemm(&e, 1, 0, M, N, K, 1.0f, A, M, B, ldb, 1.0f, wc, ldc);
            rt_colsum_add(&e, A, wdb, K, M);
            rt_gemm_dbias(&e, 1, 0, M, N, K, 1.0f, A, M, B, ldb, 1.0f, C, ldc, db, fresh);
            check_same(NAME("gemm_dbias %lldx%lldx%lld fresh=%d dW", (long long)M, (long long)N,
                            (long long)K, fresh), C, wc, (size_t)(M * ldc) * 4);
            check_same(NAME("gemm_dbias %lldx%lldx%lld fresh=%d db", (long long)M, (long long)N,
                            (long long)K, fresh), db, wdb, (size_t)M * 4);
            free(A), free(B), free(C), free(db), free(wc), free(wdb);
        }
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], lda = K + 3, ldd = N + 2;
        float *A = fvec(M * lda), *B = fvec(K * N), *pre = fvec(M * ldd), *D = fvec(M * ldd);
        float *want = malloc((size_t)(M * ldd) * 4);
        memcpy(want, D, (size_t)(M * ldd) * 4);
        rt_exec e = exec_on(1, 1);
        rt_gemm(&e, 0, 0, M, N, K, 1.0f, A, lda, B, N, 0.0f, want, ldd);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                want[i * ldd + j] = rt_gelu_tanh_bwd(pre[i * ldd + j], want[i * ldd + j]);
        rt_gemm_dgelu(&e, 0, 0, M, N, K, 1.0f, A, lda, B, N, D, ldd, pre);
        check_same(NAME("gemm_dgelu %lldx%lldx%lld", (long long)M, (long long)N, (long long)K), D,
                   want, (size_t)(M * ldd) * 4);
        free(A), free(B), free(pre), free(D), free(want);
    }
}

/* ---- rt_colsum_add ------------------------------------------------------------------ */

static void test_colsum(void)
{
    char nm[128];
    /* the last three have several row blocks (partials) and/or column blocks */
    const int64_t shapes[][2] = {{1, 1}, {5, 3}, {2, 700}, {1000, 7}, {20000, 7}, {300, 1000},
                                 {4099, 513}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t R = shapes[si][0], Cc = shapes[si][1];
        float *dy = fvec(R * Cc), *db0 = fvec(Cc), *db[2][2];
        double *ref = dvec(Cc);
        for (int64_t j = 0; j < Cc; j++)
            ref[j] = db0[j];
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < Cc; j++)
                ref[j] += dy[i * Cc + j];
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++) {
                rt_exec e = exec_on(pi, 1);
                db[pi][rep] = malloc((size_t)Cc * sizeof(float));
                memcpy(db[pi][rep], db0, (size_t)Cc * sizeof(float));
                rt_colsum_add(&e, dy, db[pi][rep], R, Cc);
            }
        /* double sums rounded once to float: 2^-24 relative to the result, which can be
         * much smaller than the terms, so compare against max |ref| with some slack. */
        for (int pi = 0; pi < 2; pi++)
            check_close(NAME("colsum %lldx%lld t=%d", (long long)R, (long long)Cc,
                             pool_threads[pi]),
                        db[pi][0], ref, Cc, 1e-6);
        check_same(NAME("colsum %lldx%lld rerun", (long long)R, (long long)Cc), db[1][0],
                   db[1][1], (size_t)Cc * 4);
        check_same(NAME("colsum %lldx%lld t=1 vs t=3", (long long)R, (long long)Cc), db[0][0],
                   db[1][0], (size_t)Cc * 4);
        free(dy), free(db0), free(ref);
        for (int pi = 0; pi < 2; pi++)
            free(db[pi][0]), free(db[pi][1]);
    }
}

/* ---- rt_rowsum_add (a conv layer's bias gradient) ---------------------------------- */

static void test_rowsum(void)
{
    char nm[128];
    /* rows x cols: one row, rows shorter than sum_f64's 8 lanes, tails, cnn_fashion's */
    const int64_t shapes[][2] = {{1, 1}, {3, 5}, {7, 8}, {5, 1003}, {16, 100352}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t R = shapes[si][0], Cc = shapes[si][1];
        float *x = fvec(R * Cc), *db0 = fvec(R), *db[2][2];
        double *ref = dvec(R);
        for (int64_t i = 0; i < R; i++) {
            double s = 0;
            for (int64_t j = 0; j < Cc; j++)
                s += x[i * Cc + j];
            ref[i] = (double)db0[i] + (double)(float)s;
        }
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++) {
                rt_exec e = exec_on(pi, 1);
                db[pi][rep] = malloc((size_t)R * sizeof(float));
                memcpy(db[pi][rep], db0, (size_t)R * sizeof(float));
                rt_rowsum_add(&e, x, db[pi][rep], R, Cc);
            }
        for (int pi = 0; pi < 2; pi++)
            check_close(NAME("rowsum %lldx%lld t=%d", (long long)R, (long long)Cc,
                             pool_threads[pi]),
                        db[pi][0], ref, R, 1e-6);
        check_same(NAME("rowsum %lldx%lld rerun", (long long)R, (long long)Cc), db[1][0],
                   db[1][1], (size_t)R * 4);
        check_same(NAME("rowsum %lldx%lld t=1 vs t=3", (long long)R, (long long)Cc), db[0][0],
                   db[1][0], (size_t)R * 4);
        free(x), free(db0), free(ref);
        for (int pi = 0; pi < 2; pi++)
            free(db[pi][0]), free(db[pi][1]);
    }
}

/* ---- im2col / col2im ----------------------------------------------------------------- */

typedef struct { int64_t B, C, H, W, k, s, pad; } conv_shape;

static const conv_shape conv_shapes[] = {
    {2, 3, 5, 7, 3, 1, 1}, {3, 2, 8, 6, 3, 2, 1}, {1, 1, 4, 4, 1, 1, 0}, {2, 3, 9, 9, 5, 2, 2},
    {1, 2, 3, 3, 3, 1, 2}, {2, 4, 7, 5, 2, 2, 0}, {5, 1, 6, 6, 3, 3, 0}, {4, 5, 28, 28, 3, 1, 1},
    {1, 3, 2, 9, 3, 2, 1}, {2, 2, 6, 5, 5, 1, 2}, {3, 2, 2, 4, 3, 1, 1}, {1, 1, 1, 1, 3, 1, 1},
    {2, 3, 7, 7, 7, 1, 3}, {1, 2, 5, 6, 3, 1, 0},
    /* planes whose padded copy passes kernels.c's IM2COL_PAD: segment by segment */
    {1, 2, 100, 90, 3, 2, 1}, {2, 1, 95, 95, 3, 1, 1},
};

static double ref_x_at(const float *x, const conv_shape *c, int64_t b, int64_t ch, int64_t ih,
                       int64_t iw)
{
    if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W)
        return 0;
    return x[((b * c->C + ch) * c->H + ih) * c->W + iw];
}

static void test_conv(void)
{
    char nm[160];
    for (size_t si = 0; si < sizeof conv_shapes / sizeof conv_shapes[0]; si++) {
        const conv_shape *c = &conv_shapes[si];
        int64_t OH = (c->H + 2 * c->pad - c->k) / c->s + 1;
        int64_t OW = (c->W + 2 * c->pad - c->k) / c->s + 1;
        int64_t nx = c->B * c->C * c->H * c->W, rows = c->C * c->k * c->k;
        int64_t cols = c->B * OH * OW, ncol = rows * cols;
        char tag[96];
        snprintf(tag, sizeof tag, "B%lld C%lld %lldx%lld k%lld s%lld p%lld", (long long)c->B,
                 (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->k,
                 (long long)c->s, (long long)c->pad);
        float *x = fvec(nx), *dcol = fvec(ncol);
        double *rcol = dvec(ncol), *rdx = dvec(nx);
        for (int64_t ch = 0; ch < c->C; ch++)
            for (int64_t ki = 0; ki < c->k; ki++)
                for (int64_t kj = 0; kj < c->k; kj++)
                    for (int64_t b = 0; b < c->B; b++)
                        for (int64_t oh = 0; oh < OH; oh++)
                            for (int64_t ow = 0; ow < OW; ow++) {
                                int64_t r = (ch * c->k + ki) * c->k + kj;
                                int64_t q = b * OH * OW + oh * OW + ow;
                                int64_t ih = oh * c->s - c->pad + ki, iw = ow * c->s - c->pad + kj;
                                rcol[r * cols + q] = ref_x_at(x, c, b, ch, ih, iw);
                                if (ih >= 0 && ih < c->H && iw >= 0 && iw < c->W)
                                    rdx[((b * c->C + ch) * c->H + ih) * c->W + iw] +=
                                        dcol[r * cols + q];
                            }
        float *col[2][2], *dx[2][2];
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++) {
                rt_exec e = exec_on(pi, 1);
                col[pi][rep] = malloc((size_t)ncol * sizeof(float));
                dx[pi][rep] = malloc((size_t)nx * sizeof(float));
                fill_nan(col[pi][rep], ncol);  /* every element must be written */
                fill_nan(dx[pi][rep], nx);
                rt_im2col(&e, x, col[pi][rep], c->B, c->C, c->H, c->W, c->k, c->s, c->pad, OH,
                          OW);
                rt_col2im(&e, dcol, dx[pi][rep], c->B, c->C, c->H, c->W, c->k, c->s, c->pad,
                          OH, OW);
            }
        for (int pi = 0; pi < 2; pi++) {
            /* im2col only copies: exact */
            check_close(NAME("im2col %s t=%d", tag, pool_threads[pi]), col[pi][0], rcol, ncol, 0);
            /* col2im sums at most k*k floats per element: a few ulp */
            check_close(NAME("col2im %s t=%d", tag, pool_threads[pi]), dx[pi][0], rdx, nx, 1e-6);
        }
        check_same(NAME("im2col %s rerun, t=1 vs t=3", tag), col[1][1], col[0][0],
                   (size_t)ncol * 4);
        check_same(NAME("col2im %s rerun", tag), dx[1][0], dx[1][1], (size_t)nx * 4);
        check_same(NAME("col2im %s t=1 vs t=3", tag), dx[0][0], dx[1][0], (size_t)nx * 4);
        /* Adjointness: <col2im(a), b> == <a, im2col(b)>, both in double over exact float
         * products; only the summation order differs (relative error ~1e-15). */
        double lhs = 0, rhs = 0;
        for (int64_t i = 0; i < nx; i++)
            lhs += (double)dx[1][0][i] * x[i];
        for (int64_t i = 0; i < ncol; i++)
            rhs += (double)dcol[i] * col[1][0][i];
        /* dx itself is rounded to float once per element: 2^-24 relative of each term */
        check_scalar(NAME("col2im adjoint of im2col %s", tag), lhs, rhs, 1e-5);
        free(x), free(dcol), free(rcol), free(rdx);
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++)
                free(col[pi][rep]), free(dx[pi][rep]);
    }
}

/* ---- conv2d's three products (runtime/conv.c) ------------------------------------------ */

typedef struct { int64_t B, C, H, W, k, s, pad, Cout; } conv3_shape;

/* the paths conv.c's cut takes (CONV_TASK_BYTES 384 KiB of columns a task) */
static const conv3_shape conv3_shapes[] = {
    {2, 3, 9, 9, 3, 1, 1, 5},      /* one task: im2col and a GEMM over the whole batch */
    {9, 8, 24, 24, 3, 1, 1, 6},    /* 5 tasks of 2 images, the last of 1 */
    {7, 16, 32, 32, 3, 2, 1, 4},   /* stride 2: 4 tasks */
    {200, 4, 20, 20, 3, 1, 1, 3},  /* 34 tasks in 32 partial groups (dW) */
    {40, 5, 16, 16, 1, 2, 0, 7},   /* 1x1 at stride 2: 1 task */
    /* with AVX-512, runtime/conv_direct.c's kernels (its direct_fits: output channels in
     * 16s, 8 or more input channels, kernels wider than 1x1) */
    {5, 16, 9, 9, 3, 1, 1, 32},    /* forward: two blocks a run; dx: one */
    {3, 32, 7, 13, 3, 1, 1, 48},   /* blocks 2 + 1, rows of 13 as runs of 7 and 6 */
    {2, 16, 6, 11, 5, 1, 2, 16},   /* 5x5, pad 2 */
    {4, 16, 8, 8, 3, 1, 0, 16},    /* no padding: dx pads dY by 2 */
    {3, 9, 20, 20, 3, 1, 1, 16},   /* 9 input channels: the forward and dW direct, dx not */
    {4, 16, 9, 9, 3, 2, 1, 32},    /* stride 2: all three direct, dx from odd H and W */
    {3, 32, 14, 18, 3, 2, 1, 16},  /* stride 2: dx in two blocks, rows of 18 as 8 + 8 + 2 */
    {2, 16, 12, 11, 3, 2, 1, 16},  /* stride 2: dx rows of 11 as 8 + 3 */
    {3, 9, 15, 15, 3, 2, 1, 16},   /* stride 2, an odd count of input channels (dx not) */
    {2, 16, 33, 33, 3, 1, 1, 16},  /* a plane past 1024: dW direct, the forward and dx not */
};

/* out = x's correlation with w at every (b, co, oh, ow); dw = dw0 + the sums; dx alike */
static void conv3_ref(const conv3_shape *c, int64_t OH, int64_t OW, const float *x,
                      const float *w, const float *dyt, const float *dw0, double *yt,
                      double *dw, double *dx)
{
    int64_t kk = c->k * c->k, ckk = c->C * kk, n = c->B * OH * OW;
    for (int64_t i = 0; i < c->Cout * ckk; i++)
        dw[i] = dw0[i];
    for (int64_t co = 0; co < c->Cout; co++)
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t q = (b * OH + oh) * OW + ow;
                    double acc = 0, g = dyt[co * n + q];
                    for (int64_t ch = 0; ch < c->C; ch++)
                        for (int64_t ki = 0; ki < c->k; ki++)
                            for (int64_t kj = 0; kj < c->k; kj++) {
                                int64_t ih = oh * c->s - c->pad + ki, iw = ow * c->s - c->pad + kj;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W)
                                    continue;
                                int64_t xi = ((b * c->C + ch) * c->H + ih) * c->W + iw;
                                int64_t wi = co * ckk + (ch * c->k + ki) * c->k + kj;
                                acc += (double)w[wi] * x[xi];
                                dw[wi] += g * x[xi];
                                dx[xi] += g * w[wi];
                            }
                    yt[co * n + q] = acc;
                }
}

/* Each shape three times: 1 and 3 threads at the CPU's direct level, then 3 threads with
 * AVX2's kernels where the CPU has AVX-512 (the same bits: each output's sum keeps its
 * order; but for dx at stride 2, which AVX2 leaves to im2col) */
static void test_conv_calls(void)
{
    char nm[160];
    int top = rt_conv_direct_cpu(), second = top == 2 ? 1 : top;
    static const char *level[] = {"off (no AVX2, or TRAINC_CONV_DIRECT=0)", "AVX2", "AVX-512"};
    printf("note conv: runtime/conv_direct.c's path: %s, then %s (the shapes its direct_fits "
           "takes)\n", level[top], level[second]);
    for (size_t si = 0; si < sizeof conv3_shapes / sizeof conv3_shapes[0]; si++) {
        const conv3_shape *c = &conv3_shapes[si];
        int64_t OH = (c->H + 2 * c->pad - c->k) / c->s + 1, OW = (c->W + 2 * c->pad - c->k) / c->s + 1;
        int64_t nx = c->B * c->C * c->H * c->W, ckk = c->C * c->k * c->k, n = c->B * OH * OW;
        int64_t nw = c->Cout * ckk;
        char tag[96];
        snprintf(tag, sizeof tag, "B%lld C%lld %lldx%lld k%lld s%lld out%lld", (long long)c->B,
                 (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->k,
                 (long long)c->s, (long long)c->Cout);
        float *x = fvec(nx), *w = fvec(nw), *dyt = fvec(c->Cout * n), *dw0 = fvec(nw);
        double *ryt = dvec(c->Cout * n), *rdw = dvec(nw), *rdx = dvec(nx);
        conv3_ref(c, OH, OW, x, w, dyt, dw0, ryt, rdw, rdx);
        float *col = malloc((size_t)(ckk * n) * sizeof(float)), *yt[3], *dw[3], *dx[3];
        for (int pi = 0; pi < 3; pi++) {
            rt_exec e = exec_on(pi > 0, 1);
            rt_conv_direct_limit(pi == 2 ? second : top);
            yt[pi] = malloc((size_t)(c->Cout * n) * sizeof(float));
            dx[pi] = malloc((size_t)nx * sizeof(float));
            dw[pi] = malloc((size_t)nw * sizeof(float));
            fill_nan(yt[pi], c->Cout * n);   /* every element must be written */
            fill_nan(dx[pi], nx);
            memcpy(dw[pi], dw0, (size_t)nw * sizeof(float));   /* dW accumulates */
            fill_nan(col, ckk * n);
            rt_conv_fwd(&e, x, w, col, yt[pi], c->B, c->C, c->H, c->W, c->k, c->s, c->pad, OH,
                        OW, c->Cout);
            rt_conv_bwd_weight(&e, x, dyt, col, dw[pi], c->B, c->C, c->H, c->W, c->k, c->s,
                               c->pad, OH, OW, c->Cout);
            rt_conv_bwd_data(&e, w, dyt, col, dx[pi], c->B, c->C, c->H, c->W, c->k, c->s, c->pad,
                             OH, OW, c->Cout);
            int t = pool_threads[pi > 0], l = pi == 2 ? second : top;
            check_close(NAME("conv fwd %s t=%d l%d", tag, t, l), yt[pi], ryt, c->Cout * n, 1e-5);
            check_close(NAME("conv dW %s t=%d l%d", tag, t, l), dw[pi], rdw, nw, 1e-5);
            check_close(NAME("conv dx %s t=%d l%d", tag, t, l), dx[pi], rdx, nx, 1e-5);
        }
        rt_conv_direct_limit(top);
        check_same(NAME("conv fwd %s l%d vs l%d", tag, second, top), yt[2], yt[1],
                   (size_t)(c->Cout * n) * 4);
        check_same(NAME("conv dW %s l%d vs l%d", tag, second, top), dw[2], dw[1], (size_t)nw * 4);
        if (c->s == 1)
            check_same(NAME("conv dx %s l%d vs l%d", tag, second, top), dx[2], dx[1],
                       (size_t)nx * 4);
        check_same(NAME("conv fwd %s t=1 vs t=3", tag), yt[0], yt[1], (size_t)(c->Cout * n) * 4);
        check_same(NAME("conv dW %s t=1 vs t=3", tag), dw[0], dw[1], (size_t)nw * 4);
        check_same(NAME("conv dx %s t=1 vs t=3", tag), dx[0], dx[1], (size_t)nx * 4);
        free(x), free(w), free(dyt), free(dw0), free(ryt), free(rdw), free(rdx), free(col);
        for (int pi = 0; pi < 3; pi++)
            free(yt[pi]), free(dw[pi]), free(dx[pi]);
    }
}

/* ---- pooling -------------------------------------------------------------------------- */

typedef struct { int64_t planes, H, W, k, s; } pool_shape;

static const pool_shape pool_shapes[] = {
    {7, 6, 6, 2, 2}, {5, 7, 9, 3, 2}, {4, 5, 5, 3, 1}, {1, 4, 4, 4, 4}, {10, 8, 6, 2, 1},
    {3, 5, 7, 2, 3}, {64, 28, 28, 2, 2}, {2, 7, 7, 2, 2},
};

/* PyTorch's rule, written out plainly: scan the window in row-major order from -inf,
 * take a value when it is greater or NaN. Returns the plane offset of the argmax. */
static int64_t ref_argmax(const float *xp, const pool_shape *p, int64_t oh, int64_t ow)
{
    float m = -INFINITY;
    int64_t idx = oh * p->s * p->W + ow * p->s;
    for (int64_t ki = 0; ki < p->k; ki++)
        for (int64_t kj = 0; kj < p->k; kj++) {
            int64_t o = (oh * p->s + ki) * p->W + ow * p->s + kj;
            if (xp[o] > m || xp[o] != xp[o]) {
                m = xp[o];
                idx = o;
            }
        }
    return idx;
}

static void test_pools(void)
{
    char nm[160];
    for (size_t si = 0; si < sizeof pool_shapes / sizeof pool_shapes[0]; si++)
        for (int variant = 0; variant < 3; variant++) {
            /* 0: random values; 1: values on a coarse grid (ties: first max wins);
             * 2: random with NaNs sprinkled in (NaN wins, the last NaN in a window) */
            const pool_shape *p = &pool_shapes[si];
            int64_t OH = (p->H - p->k) / p->s + 1, OW = (p->W - p->k) / p->s + 1;
            int64_t hw = p->H * p->W, ohw = OH * OW, nx = p->planes * hw, ny = p->planes * ohw;
            char tag[96];
            snprintf(tag, sizeof tag, "%lldx%lldx%lld k%lld s%lld %s", (long long)p->planes,
                     (long long)p->H, (long long)p->W, (long long)p->k, (long long)p->s,
                     variant == 0 ? "random" : variant == 1 ? "ties" : "nan");
            float *x = fvec(nx), *dy = fvec(ny);
            for (int64_t i = 0; i < nx; i++) {
                if (variant == 1)
                    x[i] = roundf(x[i] * 2.0f) / 2.0f;
                if (variant == 2 && (i * 7919) % 13 == 0)
                    x[i] = NAN;
            }
            double *rmax = dvec(ny), *ravg = dvec(ny), *rdmax = dvec(nx), *rdavg = dvec(nx);
            for (int64_t pl = 0; pl < p->planes; pl++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        const float *xp = x + pl * hw;
                        int64_t o = pl * ohw + oh * OW + ow, am = ref_argmax(xp, p, oh, ow);
                        rmax[o] = xp[am];
                        rdmax[pl * hw + am] += dy[o];
                        double s = 0;
                        for (int64_t ki = 0; ki < p->k; ki++)
                            for (int64_t kj = 0; kj < p->k; kj++) {
                                int64_t q = (oh * p->s + ki) * p->W + ow * p->s + kj;
                                s += xp[q];
                                rdavg[pl * hw + q] += (double)dy[o] / (double)(p->k * p->k);
                            }
                        ravg[o] = s / (double)(p->k * p->k);
                    }
            float *ymax[2][2], *yavg[2][2], *dxmax[2][2], *dxavg[2][2];
            for (int pi = 0; pi < 2; pi++)
                for (int rep = 0; rep < 2; rep++) {
                    rt_exec e = exec_on(pi, 1);
                    ymax[pi][rep] = malloc((size_t)ny * 4), yavg[pi][rep] = malloc((size_t)ny * 4);
                    dxmax[pi][rep] = malloc((size_t)nx * 4), dxavg[pi][rep] = malloc((size_t)nx * 4);
                    fill_nan(ymax[pi][rep], ny), fill_nan(yavg[pi][rep], ny);
                    fill_nan(dxmax[pi][rep], nx), fill_nan(dxavg[pi][rep], nx);
                    rt_maxpool2d_fwd(&e, x, ymax[pi][rep], p->planes, p->H, p->W, p->k, p->s, OH, OW);
                    rt_maxpool2d_bwd(&e, x, dy, dxmax[pi][rep], p->planes, p->H, p->W, p->k, p->s,
                                     OH, OW);
                    rt_avgpool2d_fwd(&e, x, yavg[pi][rep], p->planes, p->H, p->W, p->k, p->s, OH, OW);
                    rt_avgpool2d_bwd(&e, dy, dxavg[pi][rep], p->planes, p->H, p->W, p->k, p->s,
                                     OH, OW);
                }
            for (int pi = 0; pi < 2; pi++) {
                int t = pool_threads[pi];
                /* max picks a value: exact; its gradient sums <= ceil(k/s)^2 floats */
                check_close(NAME("maxpool fwd %s t=%d", tag, t), ymax[pi][0], rmax, ny, 0);
                check_close(NAME("maxpool bwd %s t=%d", tag, t), dxmax[pi][0], rdmax, nx, 1e-6);
                if (variant != 2) {  /* with NaN inputs the averages are NaN, fine */
                    /* float window sums of <= 16 terms: a few ulp */
                    check_close(NAME("avgpool fwd %s t=%d", tag, t), yavg[pi][0], ravg, ny, 1e-6);
                    check_close(NAME("avgpool bwd %s t=%d", tag, t), dxavg[pi][0], rdavg, nx,
                                1e-6);
                }
            }
            check_same(NAME("pools %s rerun", tag), dxmax[1][0], dxmax[1][1], (size_t)nx * 4);
            int same = !memcmp(ymax[0][0], ymax[1][0], (size_t)ny * 4) &&
                       !memcmp(dxmax[0][0], dxmax[1][0], (size_t)nx * 4) &&
                       !memcmp(yavg[0][0], yavg[1][0], (size_t)ny * 4) &&
                       !memcmp(dxavg[0][0], dxavg[1][0], (size_t)nx * 4) &&
                       !memcmp(yavg[1][0], yavg[1][1], (size_t)ny * 4) &&
                       !memcmp(dxavg[1][0], dxavg[1][1], (size_t)nx * 4);
            NAME("pools %s t=1 vs t=3", tag);
            if (!same)
                fail(nm, "results differ bitwise");
            else
                pass(nm);
            free(x), free(dy), free(rmax), free(ravg), free(rdmax), free(rdavg);
            for (int pi = 0; pi < 2; pi++)
                for (int rep = 0; rep < 2; rep++)
                    free(ymax[pi][rep]), free(yavg[pi][rep]), free(dxmax[pi][rep]),
                        free(dxavg[pi][rep]);
        }
}

/* ---- LayerNorm ------------------------------------------------------------------------ */

static void ref_layernorm(const float *x, const float *w, const float *b, const float *dy,
                          int64_t R, int64_t d, double eps, double *y, double *mean,
                          double *rstd, double *dx, double *dw, double *db)
{
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * d, *g = dy + r * d;
        double mu = 0, var = 0, s1 = 0, s2 = 0;
        for (int64_t j = 0; j < d; j++)
            mu += xr[j];
        mu /= d;
        for (int64_t j = 0; j < d; j++)
            var += (xr[j] - mu) * (xr[j] - mu);
        var /= d;
        double rs = 1 / sqrt(var + eps);
        mean[r] = mu, rstd[r] = rs;
        for (int64_t j = 0; j < d; j++) {
            double xh = (xr[j] - mu) * rs;
            y[r * d + j] = xh * w[j] + b[j];
            s1 += (double)g[j] * w[j];
            s2 += (double)g[j] * w[j] * xh;
            dw[j] += (double)g[j] * xh;
            db[j] += g[j];
        }
        for (int64_t j = 0; j < d; j++) {
            double xh = (xr[j] - mu) * rs;
            dx[r * d + j] = rs * ((double)g[j] * w[j] - s1 / d - xh * s2 / d);
        }
    }
}

static void test_layernorm(void)
{
    char nm[160];
    /* (300, 257) and (5, 20000) have several row blocks of dw/db partials */
    const int64_t shapes[][2] = {{1, 1}, {2, 5}, {7, 64}, {300, 257}, {5, 1000}, {5, 20000}};
    const float eps = 1e-5f;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t R = shapes[si][0], d = shapes[si][1], n = R * d;
        char tag[64];
        snprintf(tag, sizeof tag, "%lldx%lld", (long long)R, (long long)d);
        float *x = fvec(n), *w = fvec(d), *b = fvec(d), *dy = fvec(n), *dw0 = fvec(d),
              *db0 = fvec(d);
        for (int64_t i = 0; i < n; i++)  /* an offset that naive one-pass stats would feel */
            x[i] = 3.0f + 2.0f * x[i];
        double *ry = dvec(n), *rm = dvec(R), *rr = dvec(R), *rdx = dvec(n), *rdw = dvec(d),
               *rdb = dvec(d);
        for (int64_t j = 0; j < d; j++)
            rdw[j] = dw0[j], rdb[j] = db0[j];
        ref_layernorm(x, w, b, dy, R, d, eps, ry, rm, rr, rdx, rdw, rdb);
        float *out[2][2][6];   /* y, mean, rstd, dx, dw, db */
        const int64_t sz[6] = {n, R, R, n, d, d};
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++) {
                rt_exec e = exec_on(pi, 1);
                float **o = out[pi][rep];
                for (int q = 0; q < 6; q++)
                    o[q] = malloc((size_t)sz[q] * 4), fill_nan(o[q], sz[q]);
                memcpy(o[4], dw0, (size_t)d * 4);
                memcpy(o[5], db0, (size_t)d * 4);
                rt_layernorm_fwd(&e, x, w, b, o[0], o[1], o[2], R, d, eps);
                rt_layernorm_bwd(&e, x, w, o[1], o[2], dy, NULL, o[3], o[4], o[5], R, d);
            }
        const char *what[6] = {"y", "mean", "rstd", "dx", "dw", "db"};
        const double *ref[6] = {ry, rm, rr, rdx, rdw, rdb};
        /* float arithmetic on O(1) values with stats from double: y, dx within a few ulp
         * of the largest element; dw, db are double sums rounded once. rstd for d = 1 is
         * 1/sqrt(eps) = 316 and y = b exactly. */
        for (int pi = 0; pi < 2; pi++)
            for (int q = 0; q < 6; q++)
                check_close(NAME("layernorm %s %s t=%d", what[q], tag, pool_threads[pi]),
                            out[pi][0][q], ref[q], sz[q], 1e-5);
        int same = 1, rerun = 1;
        for (int q = 0; q < 6; q++) {
            same &= !memcmp(out[0][0][q], out[1][0][q], (size_t)sz[q] * 4);
            rerun &= !memcmp(out[1][0][q], out[1][1][q], (size_t)sz[q] * 4);
        }
        if (!rerun)
            fail(NAME("layernorm %s rerun", tag), "results differ bitwise");
        else
            pass(NAME("layernorm %s rerun", tag));
        if (!same)
            fail(NAME("layernorm %s t=1 vs t=3", tag), "results differ bitwise");
        else
            pass(NAME("layernorm %s t=1 vs t=3", tag));
        free(x), free(w), free(b), free(dy), free(dw0), free(db0);
        free(ry), free(rm), free(rr), free(rdx), free(rdw), free(rdb);
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++)
                for (int q = 0; q < 6; q++)
                    free(out[pi][rep][q]);
    }
}

/* The addend: dx + add per element, one float add after dx as rt_layernorm_bwd
 * computes it alone (bitwise), into another buffer or in place (add = dx); dw, db as
 * without it. */
static void test_layernorm_addend(void)
{
    char nm[160];
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 64}, {300, 257}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t R = shapes[si][0], d = shapes[si][1], n = R * d;
        float *x = fvec(n), *w = fvec(d), *b = fvec(d), *dy = fvec(n), *g = fvec(n);
        float *y = malloc((size_t)n * 4), *mean = malloc((size_t)R * 4), *rstd = malloc((size_t)R * 4);
        float *dx0 = malloc((size_t)n * 4), *dx1 = malloc((size_t)n * 4), *dx2 = malloc((size_t)n * 4);
        float *want = malloc((size_t)n * 4), *dw[3], *db[3];
        for (int k = 0; k < 3; k++)
            dw[k] = calloc((size_t)d, 4), db[k] = calloc((size_t)d, 4);
        rt_exec e = exec_on(1, 1);
        rt_layernorm_fwd(&e, x, w, b, y, mean, rstd, R, d, 1e-5f);
        rt_layernorm_bwd(&e, x, w, mean, rstd, dy, NULL, dx0, dw[0], db[0], R, d);
        for (int64_t i = 0; i < n; i++)
            want[i] = g[i] + dx0[i];   /* the sum loop, "G + dx" */
        fill_nan(dx1, n);
        rt_layernorm_bwd(&e, x, w, mean, rstd, dy, g, dx1, dw[1], db[1], R, d);
        memcpy(dx2, g, (size_t)n * 4);
        rt_layernorm_bwd(&e, x, w, mean, rstd, dy, dx2, dx2, dw[2], db[2], R, d);
        check_same(NAME("layernorm_bwd addend %lldx%lld", (long long)R, (long long)d), dx1, want,
                   (size_t)n * 4);
        check_same(NAME("layernorm_bwd addend in place %lldx%lld", (long long)R, (long long)d), dx2,
                   want, (size_t)n * 4);
        int same = 1;
        for (int k = 1; k < 3; k++)
            same &= !memcmp(dw[k], dw[0], (size_t)d * 4) && !memcmp(db[k], db[0], (size_t)d * 4);
        if (!same)
            fail(NAME("layernorm_bwd addend %lldx%lld dw db", (long long)R, (long long)d),
                 "differ from the call without it");
        else
            pass(NAME("layernorm_bwd addend %lldx%lld dw db", (long long)R, (long long)d));
        free(x), free(w), free(b), free(dy), free(g), free(y), free(mean), free(rstd);
        free(dx0), free(dx1), free(dx2), free(want);
        for (int k = 0; k < 3; k++)
            free(dw[k]), free(db[k]);
    }
}

/* ---- losses --------------------------------------------------------------------------- */

static void test_cross_entropy(void)
{
    char nm[160];
    /* rows, classes, wide: logits on a coarse grid in [-4, 4] (rows with tied maxima),
     * or wide: spread over [-60, 60] (exp far into its range, down to underflow) */
    const int64_t shapes[][3] = {{1, 1, 0},  {2, 10, 0}, {37, 10, 0}, {300, 65, 0},
                                 {5, 1000, 0}, {1, 3, 0}, {41, 7, 1},  {9, 301, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t R = shapes[si][0], C = shapes[si][1], n = R * C;
        int wide = (int)shapes[si][2];
        char tag[64];
        snprintf(tag, sizeof tag, "%lldx%lld%s", (long long)R, (long long)C, wide ? " wide" : "");
        float *z = fvec(n);
        int32_t *t = malloc((size_t)R * sizeof(int32_t));
        for (int64_t i = 0; i < n; i++)
            z[i] = wide ? z[i] * 60.0f : roundf(z[i] * 8.0f) / 2.0f;
        for (int64_t r = 0; r < R; r++)
            t[r] = (int32_t)((r * 7 + 3) % C);
        if (R >= 2 && C >= 3) {  /* row 0: the target is the first of two maxima */
            z[0 * C + 1] = z[0 * C + 2] = 9.0f;
            t[0] = 1;
            z[1 * C + 1] = z[1 * C + 2] = 9.0f;  /* row 1: the second of them: wrong */
            t[1] = 2;
        }
        float gs = 1.0f / (float)R;
        double rloss = 0, *rd = dvec(n);
        int64_t rcorrect = 0;
        for (int64_t r = 0; r < R; r++) {
            const float *zr = z + r * C;
            double m = zr[0], s = 0;
            int64_t am = 0;
            for (int64_t j = 1; j < C; j++)
                if (zr[j] > m)
                    m = zr[j], am = j;
            for (int64_t j = 0; j < C; j++)
                s += exp(zr[j] - m);
            rloss += m + log(s) - zr[t[r]];
            rcorrect += am == t[r];
            for (int64_t j = 0; j < C; j++)
                rd[r * C + j] = (exp(zr[j] - m) / s - (j == t[r])) * gs;
        }
        float *dz[2][2];
        double loss[2][2];
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++) {
                rt_exec e = exec_on(pi, gs);
                e.correct = 3, e.terms = 11;  /* counts are accumulated into */
                dz[pi][rep] = malloc((size_t)n * 4);
                fill_nan(dz[pi][rep], n);
                rt_cross_entropy(&e, z, t, dz[pi][rep], R, C, C);
                loss[pi][rep] = e.loss_sum;
                if (e.correct - 3 != rcorrect || e.terms - 11 != R)
                    fail(NAME("cross_entropy %s counts t=%d", tag, pool_threads[pi]),
                         "correct %lld (want %lld), terms %lld (want %lld)",
                         (long long)(e.correct - 3), (long long)rcorrect,
                         (long long)(e.terms - 11), (long long)R);
                else if (rep == 0)
                    pass(NAME("cross_entropy %s counts t=%d", tag, pool_threads[pi]));
                /* without dlogits: the same loss, added to what is there (2L is exact) */
                rt_cross_entropy(&e, z, t, NULL, R, C, C);
                if (e.loss_sum != 2 * loss[pi][rep] || e.terms - 11 != 2 * R)
                    fail(NAME("cross_entropy %s no-grad, accumulate t=%d", tag,
                              pool_threads[pi]),
                         "%.17g vs 2 * %.17g", e.loss_sum, loss[pi][rep]);
            }
        for (int pi = 0; pi < 2; pi++) {
            /* float exp of O(1) arguments (~1 ulp) summed in double */
            check_scalar(NAME("cross_entropy %s loss t=%d", tag, pool_threads[pi]),
                         loss[pi][0], rloss, 1e-6);
            check_close(NAME("cross_entropy %s dlogits t=%d", tag, pool_threads[pi]), dz[pi][0],
                        rd, n, 1e-5);
        }
        NAME("cross_entropy %s loss deterministic", tag);
        if (loss[0][0] != loss[1][0] || loss[1][0] != loss[1][1])
            fail(nm, "%.17g %.17g %.17g",
                 loss[0][0], loss[1][0], loss[1][1]);
        else
            pass(nm);
        check_same(NAME("cross_entropy %s dlogits t=1 vs t=3", tag), dz[0][0], dz[1][0],
                   (size_t)n * 4);
        check_same(NAME("cross_entropy %s dlogits rerun", tag), dz[1][0], dz[1][1],
                   (size_t)n * 4);
        {   /* in place: dlogits written over the logits (a memory plan may alias them) */
            rt_exec e = exec_on(1, gs);
            float *zz = malloc((size_t)n * 4);
            memcpy(zz, z, (size_t)n * 4);
            rt_cross_entropy(&e, zz, t, zz, R, C, C);
            NAME("cross_entropy %s in place: loss", tag);
            if (e.loss_sum != loss[1][0])
                fail(nm, "%.17g vs %.17g", e.loss_sum, loss[1][0]);
            else
                pass(nm);
            check_same(NAME("cross_entropy %s in place: dlogits", tag), zz, dz[1][0], (size_t)n * 4);
            free(zz);
        }
        for (int inpl = 0; inpl < 2; inpl++) {
            /* rows ld > C apart (a padded vocabulary): the same numbers; the logits'
             * padding (NaN) not read (the loss would be NaN), dlogits' padding written 0
             * (the head's backward GEMMs run over the padded vocabulary), the logits'
             * left alone where dlogits is another buffer */
            int64_t ld = C + 5;
            float *zp = malloc((size_t)(R * ld) * 4), *gp = malloc((size_t)(R * ld) * 4);
            fill_nan(zp, R * ld);
            fill_nan(gp, R * ld);
            for (int64_t r = 0; r < R; r++)
                memcpy(zp + r * ld, z + r * C, (size_t)C * 4);
            rt_exec e = exec_on(1, gs);
            rt_cross_entropy(&e, zp, t, inpl ? zp : gp, R, C, ld);
            const float *g = inpl ? zp : gp;
            NAME("cross_entropy %s rows %lld apart%s", tag, (long long)ld, inpl ? ", in place" : "");
            int bad = e.loss_sum != loss[1][0];
            for (int64_t r = 0; r < R && !bad; r++) {
                bad = memcmp(g + r * ld, dz[1][0] + r * C, (size_t)C * 4) != 0;
                for (int64_t j = C; j < ld && !bad; j++)
                    bad = g[r * ld + j] != 0.0f || signbit(g[r * ld + j]) ||
                          (!inpl && !isnan(zp[r * ld + j]));
            }
            if (bad)
                fail(nm, "loss %.17g vs %.17g, or dlogits or the padding differ", e.loss_sum,
                     loss[1][0]);
            else
                pass(nm);
            free(zp), free(gp);
        }
        free(z), free(t), free(rd);
        for (int pi = 0; pi < 2; pi++)
            free(dz[pi][0]), free(dz[pi][1]);
    }
}

/* A label out of range is a runtime error (exit 2). The child re-executes this program
 * (a fork that goes on to start threads is not supported by ThreadSanitizer). */
static int bad_label_child(void)
{
    rt_pool *p = rt_pool_new(3);
    static float z[40 * 5];
    int32_t t[40] = {0};
    t[33] = 5;             /* found by a worker thread with 3 threads */
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.rt = p;
    e.grad_scale = 1;
    rt_cross_entropy(&e, z, t, z, 40, 5, 5);
    return 0;
}

static void test_cross_entropy_bad_label(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr))
            _exit(9);
        execl("/proc/self/exe", "test_kernels", "--bad-label-child", (char *)NULL);
        _exit(9);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == RT_EXIT_RUNTIME)
        pass("cross_entropy label out of range exits 2");
    else
        fail("cross_entropy label out of range exits 2", "status %#x", st);
}

static void test_mse(void)
{
    char nm[128];
    const int64_t ns[] = {1, 7, 4097, 20000};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k];
        float *y = fvec(n), *t = fvec(n), gs = 0.37f;
        double rloss = 0, *rd = dvec(n);
        for (int64_t i = 0; i < n; i++) {
            double d = (double)y[i] - t[i];
            rloss += d * d;
            rd[i] = 2 * d * gs;
        }
        float *dy[2][2];
        double loss[2][2];
        for (int pi = 0; pi < 2; pi++)
            for (int rep = 0; rep < 2; rep++) {
                rt_exec e = exec_on(pi, gs);
                dy[pi][rep] = malloc((size_t)n * 4);
                fill_nan(dy[pi][rep], n);
                rt_mse(&e, y, t, dy[pi][rep], n);
                loss[pi][rep] = e.loss_sum;
                if (e.terms != n)
                    fail(NAME("mse n=%lld terms", (long long)n), "%lld", (long long)e.terms);
                rt_exec e2 = exec_on(pi, gs);
                rt_mse(&e2, y, t, NULL, n);
                if (e2.loss_sum != loss[pi][rep])
                    fail(NAME("mse n=%lld no-grad loss", (long long)n), "differs");
            }
        for (int pi = 0; pi < 2; pi++) {
            /* y - t is exact or rounded once in float: 2^-24 relative per term */
            check_scalar(NAME("mse n=%lld loss t=%d", (long long)n, pool_threads[pi]), loss[pi][0],
                         rloss, 1e-6);
            check_close(NAME("mse n=%lld dy t=%d", (long long)n, pool_threads[pi]), dy[pi][0], rd,
                        n, 1e-6);
        }
        NAME("mse n=%lld deterministic", (long long)n);
        if (loss[0][0] != loss[1][0] || loss[1][0] != loss[1][1])
            fail(nm, "losses differ");
        else
            pass(nm);
        check_same(NAME("mse n=%lld dy t=1 vs t=3", (long long)n), dy[0][0], dy[1][0],
                   (size_t)n * 4);
        free(y), free(t), free(rd);
        for (int pi = 0; pi < 2; pi++)
            free(dy[pi][0]), free(dy[pi][1]);
    }
}

/* ---- finite differences --------------------------------------------------------------- *
 * Each check perturbs one float input by +-h, evaluates a scalar L in double from the
 * float outputs, and compares (L+ - L-) / (x+ - x-) (the actual float step) with the
 * analytic gradient from the backward kernel. Errors: truncation ~h^2 |L'''| / 6 and the
 * float rounding of the forward outputs, ~2^-24 * sum |terms| / (2h). The tolerance,
 * |fd - an| <= tol * (1 + |an|), is stated per kernel below. */

static int fd_bad;
static double fd_worst;

static void fd_compare(double fd, double an, double tol)
{
    double err = fabs(fd - an) / (1 + fabs(an));
    if (err > fd_worst)
        fd_worst = err;
    if (!(err <= tol))
        fd_bad++;
}

static void fd_report(const char *name, double tol)
{
    char nm[160];
    if (fd_bad)
        fail(name, "%d derivatives off, worst err %.3g > %.3g", fd_bad, fd_worst, tol);
    else {
        snprintf(nm, sizeof nm, "%s (worst %.2g, tol %.0e)", name, fd_worst, tol);
        pass(nm);
    }
    fd_bad = 0;
    fd_worst = 0;
}

static double dot_fd(const float *a, const float *r, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * r[i];
    return s;
}

/* L = <layernorm(x; w, b), r>, rows 3, d 6. h = 1e-2 on O(1) inputs: truncation with
 * |L'''| ~ rstd^3 ~ 5 is ~1e-4; rounding ~18 * 2^-24 / 0.02 ~ 5e-5. tol 1e-3. */
static void fd_layernorm(void)
{
    enum { R = 3, D = 6 };
    const float h = 1e-2f, eps = 1e-5f;
    float *x = fvec(R * D), *w = fvec(D), *b = fvec(D), *r = fvec(R * D);
    float y[R * D], mean[R], rstd[R], dx[R * D], dw[D] = {0}, db[D] = {0};
    rt_exec e = exec_on(1, 1);
    rt_layernorm_fwd(&e, x, w, b, y, mean, rstd, R, D, eps);
    rt_layernorm_bwd(&e, x, w, mean, rstd, r, NULL, dx, dw, db, R, D);
    float *vars[3] = {x, w, b}, *grads[3] = {dx, dw, db};
    int64_t lens[3] = {R * D, D, D};
    for (int v = 0; v < 3; v++)
        for (int64_t i = 0; i < lens[v]; i++) {
            float keep = vars[v][i], xp = keep + h, xm = keep - h;
            vars[v][i] = xp;
            rt_layernorm_fwd(&e, x, w, b, y, mean, rstd, R, D, eps);
            double lp = dot_fd(y, r, R * D);
            vars[v][i] = xm;
            rt_layernorm_fwd(&e, x, w, b, y, mean, rstd, R, D, eps);
            double lm = dot_fd(y, r, R * D);
            vars[v][i] = keep;
            fd_compare((lp - lm) / ((double)xp - xm), grads[v][i], 1e-3);
        }
    fd_report("fd layernorm dx dw db", 1e-3);
    free(x), free(w), free(b), free(r);
}

/* L = <pool(x), r>. Max and average pooling are piecewise linear: with inputs spaced
 * 0.05 apart and h = 1e-2 no argmax changes, so only rounding remains (~1e-5). tol 1e-4. */
static void fd_pools(void)
{
    const pool_shape shapes[] = {{2, 5, 7, 3, 2}, {3, 4, 4, 2, 2}, {1, 5, 5, 3, 1}};
    const float h = 1e-2f;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const pool_shape *p = &shapes[si];
        int64_t OH = (p->H - p->k) / p->s + 1, OW = (p->W - p->k) / p->s + 1;
        int64_t nx = p->planes * p->H * p->W, ny = p->planes * OH * OW;
        float *x = malloc((size_t)nx * 4), *r = fvec(ny), *y = malloc((size_t)ny * 4);
        float *dx = malloc((size_t)nx * 4);
        for (int64_t i = 0; i < nx; i++)  /* distinct values 0.05 apart, shuffled */
            x[i] = 0.05f * (float)((i * 37 + 11) % nx) - 1.0f;
        rt_exec e = exec_on(1, 1);
        for (int kind = 0; kind < 2; kind++) {
            if (kind == 0)
                rt_maxpool2d_bwd(&e, x, r, dx, p->planes, p->H, p->W, p->k, p->s, OH, OW);
            else
                rt_avgpool2d_bwd(&e, r, dx, p->planes, p->H, p->W, p->k, p->s, OH, OW);
            for (int64_t i = 0; i < nx; i++) {
                float keep = x[i], xp = keep + h, xm = keep - h;
                double l[2];
                for (int sgn = 0; sgn < 2; sgn++) {
                    x[i] = sgn ? xm : xp;
                    if (kind == 0)
                        rt_maxpool2d_fwd(&e, x, y, p->planes, p->H, p->W, p->k, p->s, OH, OW);
                    else
                        rt_avgpool2d_fwd(&e, x, y, p->planes, p->H, p->W, p->k, p->s, OH, OW);
                    l[sgn] = dot_fd(y, r, ny);
                }
                x[i] = keep;
                fd_compare((l[0] - l[1]) / ((double)xp - xm), dx[i], 1e-4);
            }
            char nm[128];
            snprintf(nm, sizeof nm, "fd %s %lldx%lldx%lld k%lld s%lld",
                     kind ? "avgpool" : "maxpool", (long long)p->planes, (long long)p->H,
                     (long long)p->W, (long long)p->k, (long long)p->s);
            fd_report(nm, 1e-4);
        }
        free(x), free(r), free(y), free(dx);
    }
}

/* L = loss_sum over 4 rows of 5 classes; dlogits / grad_scale is its gradient. Logits in
 * [-2, 2), h = 1e-2: the softmax's third derivatives are < 1, truncation < 2e-5; the loss
 * is a double sum of float exps, rounding ~4 * 2^-24 / 0.02 ~ 1e-5. tol 2e-4. */
static void fd_cross_entropy(void)
{
    enum { R = 4, C = 5 };
    const float h = 1e-2f, gs = 0.5f;
    float *z = fvec(R * C), dz[R * C];
    int32_t t[R] = {0, 4, 2, 2};
    for (int i = 0; i < R * C; i++)
        z[i] *= 2.0f;
    rt_exec e = exec_on(1, gs);
    rt_cross_entropy(&e, z, t, dz, R, C, C);
    for (int i = 0; i < R * C; i++) {
        float keep = z[i], xp = keep + h, xm = keep - h;
        rt_exec ep = exec_on(1, gs), em = exec_on(1, gs);
        z[i] = xp;
        rt_cross_entropy(&ep, z, t, NULL, R, C, C);
        z[i] = xm;
        rt_cross_entropy(&em, z, t, NULL, R, C, C);
        z[i] = keep;
        fd_compare((ep.loss_sum - em.loss_sum) / ((double)xp - xm), dz[i] / gs, 2e-4);
    }
    fd_report("fd cross_entropy dlogits", 2e-4);
    free(z);
}

/* L = loss_sum = sum (y - t)^2 is quadratic: the central difference is exact but for
 * rounding (~2^-24 / 0.02 ~ 3e-6). tol 1e-4. */
static void fd_mse(void)
{
    enum { N = 9 };
    const float h = 1e-2f, gs = 0.25f;
    float *y = fvec(N), *t = fvec(N), dy[N];
    rt_exec e = exec_on(1, gs);
    rt_mse(&e, y, t, dy, N);
    for (int i = 0; i < N; i++) {
        float keep = y[i], xp = keep + h, xm = keep - h;
        rt_exec ep = exec_on(1, gs), em = exec_on(1, gs);
        y[i] = xp;
        rt_mse(&ep, y, t, NULL, N);
        y[i] = xm;
        rt_mse(&em, y, t, NULL, N);
        y[i] = keep;
        fd_compare((ep.loss_sum - em.loss_sum) / ((double)xp - xm), dy[i] / gs, 1e-4);
    }
    fd_report("fd mse dy", 1e-4);
    free(y), free(t);
}

/* ---- RMSNorm and the gated linear unit ------------------------------------------- */

/* rt_rmsnorm_fwd/bwd against a double reference; 1 vs 3 threads bitwise; the addend
 * (in another buffer and in place) one float add after dx, as layernorm's. (300, 257)
 * and (5, 20000) have several row blocks of dw partials. */
static void test_rmsnorm(void)
{
    char nm[160];
    /* (no d = 1: there dx is the rounding left of x * rstd = +-1, relative to nothing) */
    const int64_t shapes[][2] = {{1, 3}, {3, 7}, {7, 64}, {300, 257}, {5, 20000}};
    const float eps = 1e-3f;   /* not the op's default: the eps given is the one used */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t R = shapes[si][0], d = shapes[si][1], n = R * d;
        float *x = fvec(n), *w = fvec(d), *dy = fvec(n), *g = fvec(n), *dw0 = fvec(d);
        double *ry = dvec(n), *rr = dvec(R), *rdx = dvec(n), *rdw = dvec(d);
        for (int64_t j = 0; j < d; j++)
            rdw[j] = dw0[j];
        for (int64_t r = 0; r < R; r++) {   /* the reference: all in double */
            const float *xr = x + r * d, *gr = dy + r * d;
            double ss = 0, s = 0;
            for (int64_t j = 0; j < d; j++)
                ss += (double)xr[j] * xr[j];
            double rs = 1.0 / sqrt(ss / d + eps);
            rr[r] = rs;
            for (int64_t j = 0; j < d; j++) {
                ry[r * d + j] = xr[j] * rs * w[j];
                s += (double)gr[j] * w[j] * xr[j] * rs;
                rdw[j] += (double)gr[j] * xr[j] * rs;
            }
            for (int64_t j = 0; j < d; j++)
                rdx[r * d + j] = rs * ((double)gr[j] * w[j] - xr[j] * rs * s / d);
        }
        float *o[2][6];   /* y, rstd, dx, dw, dx + g, dx + g in place */
        const int64_t sz[6] = {n, R, n, d, n, n};
        for (int pi = 0; pi < 2; pi++) {
            rt_exec e = exec_on(pi, 1);
            for (int q = 0; q < 6; q++)
                o[pi][q] = malloc((size_t)sz[q] * 4), fill_nan(o[pi][q], sz[q]);
            memcpy(o[pi][3], dw0, (size_t)d * 4);
            memcpy(o[pi][5], g, (size_t)n * 4);
            rt_rmsnorm_fwd(&e, x, w, o[pi][0], o[pi][1], R, d, eps);
            rt_rmsnorm_bwd(&e, x, w, o[pi][1], dy, NULL, o[pi][2], o[pi][3], R, d);
            float *dw1 = malloc((size_t)d * 4);
            rt_rmsnorm_bwd(&e, x, w, o[pi][1], dy, g, o[pi][4], dw1, R, d);
            rt_rmsnorm_bwd(&e, x, w, o[pi][1], dy, o[pi][5], o[pi][5], dw1, R, d);
            free(dw1);
        }
        char tag[64];
        snprintf(tag, sizeof tag, "%lldx%lld", (long long)R, (long long)d);
        const char *what[4] = {"y", "rstd", "dx", "dw"};
        const double *ref[4] = {ry, rr, rdx, rdw};
        for (int pi = 0; pi < 2; pi++)
            for (int q = 0; q < 4; q++)
                check_close(NAME("rmsnorm %s %s t=%d", what[q], tag, pool_threads[pi]), o[pi][q],
                            ref[q], sz[q], 1e-5);
        float *want = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            want[i] = g[i] + o[0][2][i];   /* the sum loop, "G + dx" */
        check_same(NAME("rmsnorm_bwd addend %s", tag), o[0][4], want, (size_t)n * 4);
        check_same(NAME("rmsnorm_bwd addend in place %s", tag), o[0][5], want, (size_t)n * 4);
        int same = 1;
        for (int q = 0; q < 6; q++)
            same &= !memcmp(o[0][q], o[1][q], (size_t)sz[q] * 4);
        if (!same)
            fail(NAME("rmsnorm %s t=1 vs t=3", tag), "results differ bitwise");
        else
            pass(NAME("rmsnorm %s t=1 vs t=3", tag));
        free(x), free(w), free(dy), free(g), free(dw0), free(ry), free(rr), free(rdx), free(rdw);
        free(want);
        for (int pi = 0; pi < 2; pi++)
            for (int q = 0; q < 6; q++)
                free(o[pi][q]);
    }
}

/* The bits of trainc_rt.h's elementwise rules for glu's act(a) and d act(a) times g:
 * what rt_glu_bwd's one evaluation of the activation must give. */
static void glu_rules(int act, float a, float g, float *y, float *d)
{
    switch (act) {
    case RT_GLU_SILU: *y = rt_silu(a), *d = rt_silu_bwd(a, g); break;
    case RT_GLU_GELU: *y = rt_gelu(a), *d = rt_gelu_bwd(a, g); break;
    case RT_GLU_GELU_TANH: *y = rt_gelu_tanh(a), *d = rt_gelu_tanh_bwd(a, g); break;
    case RT_GLU_SIGMOID: {
        float s = rt_sigmoidf(a);
        *y = s, *d = g * s * (1.0f - s);
        break;
    }
    default: *y = a < 0.0f ? 0.0f : a, *d = a <= 0.0f ? 0.0f : g; break;
    }
}

/* rt_glu_fwd/bwd for each RT_GLU_* against the elementwise rules of trainc_rt.h in
 * double where they are plain arithmetic (sigmoid, relu: exact in float here too),
 * within float rounding elsewhere, and bwd bitwise against the rules in float;
 * 1 vs 3 threads bitwise. */
static void test_glu(void)
{
    char nm[160];
    static const char *const acts[] = {"silu", "gelu", "gelu_tanh", "sigmoid", "relu"};
    const int64_t R = 37, h = 13, nx = R * 2 * h, ny = R * h;
    float *x = fvec(nx), *dy = fvec(ny);
    for (int64_t i = 0; i < nx; i++)
        x[i] *= 3.0f;
    for (int act = RT_GLU_SILU; act <= RT_GLU_RELU; act++) {
        double *ry = dvec(ny), *rdx = dvec(nx);
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < h; j++) {
                double a = x[r * 2 * h + j], u = x[r * 2 * h + h + j], g = dy[r * h + j];
                double s = 1.0 / (1.0 + exp(-a)), f, df;
                switch (act) {
                case RT_GLU_SILU: f = a * s, df = s * (1.0 + a * (1.0 - s)); break;
                case RT_GLU_GELU:
                    f = 0.5 * a * (1.0 + erf(a / sqrt(2.0)));
                    df = 0.5 * (1.0 + erf(a / sqrt(2.0))) + a * exp(-0.5 * a * a) / sqrt(2.0 * M_PI);
                    break;
                case RT_GLU_GELU_TANH: {
                    double k = sqrt(2.0 / M_PI), t = tanh(k * (a + 0.044715 * a * a * a));
                    f = 0.5 * a * (1.0 + t);
                    df = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * a * a);
                    break;
                }
                case RT_GLU_SIGMOID: f = s, df = s * (1.0 - s); break;
                default: f = a > 0 ? a : 0, df = a > 0; break;
                }
                ry[r * h + j] = f * u;
                rdx[r * 2 * h + j] = df * g * u;
                rdx[r * 2 * h + h + j] = f * g;
            }
        float *y[2], *dx[2];
        for (int pi = 0; pi < 2; pi++) {
            rt_exec e = exec_on(pi, 1);
            y[pi] = malloc((size_t)ny * 4), dx[pi] = malloc((size_t)nx * 4);
            fill_nan(y[pi], ny), fill_nan(dx[pi], nx);
            rt_glu_fwd(&e, x, y[pi], R, h, act);
            rt_glu_bwd(&e, x, dy, dx[pi], R, h, act);
            check_close(NAME("glu %s y t=%d", acts[act], pool_threads[pi]), y[pi], ry, ny, 1e-5);
            check_close(NAME("glu %s dx t=%d", acts[act], pool_threads[pi]), dx[pi], rdx, nx, 1e-5);
        }
        int64_t off = -1;
        for (int64_t i = 0; i < ny && off < 0; i++) {
            int64_t r = i / h, j = i % h, ia = r * 2 * h + j;
            float fy, fd, g = dy[i];
            glu_rules(act, x[ia], g * x[ia + h], &fy, &fd);
            float du = fy * g;
            if (memcmp(&dx[0][ia], &fd, 4) || memcmp(&dx[0][ia + h], &du, 4))
                off = i;
        }
        if (off >= 0)
            fail(NAME("glu %s dx bitwise the float rules'", acts[act]), "output %lld differs",
                 (long long)off);
        else
            pass(NAME("glu %s dx bitwise the float rules'", acts[act]));
        if (memcmp(y[0], y[1], (size_t)ny * 4) || memcmp(dx[0], dx[1], (size_t)nx * 4))
            fail(NAME("glu %s t=1 vs t=3", acts[act]), "results differ bitwise");
        else
            pass(NAME("glu %s t=1 vs t=3", acts[act]));
        for (int pi = 0; pi < 2; pi++)
            free(y[pi]), free(dx[pi]);
        free(ry), free(rdx);
    }
    free(x), free(dy);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--bad-label-child"))
        return bad_label_child();
    rt_blas_setup();
    pools[0] = rt_pool_new(1);
    pools[1] = rt_pool_new(3);
    if (rt_pool_threads(pools[0]) != 1 || rt_pool_threads(pools[1]) != 3)
        fail("rt_pool_threads", "wrong thread counts");
    test_parallel_for();
    test_gemm();
    test_gemm_threads();
    test_tanh();
    test_expf();
    test_gemm_bias();
    test_grad_epilogues();
    test_colsum();
    test_rowsum();
    test_conv();
    test_conv_calls();
    test_pools();
    test_layernorm();
    test_layernorm_addend();
    test_cross_entropy();
    test_cross_entropy_bad_label();
    test_mse();
    fd_layernorm();
    fd_pools();
    fd_cross_entropy();
    fd_mse();
    test_rmsnorm();   /* after the others: their random inputs stay as they were */
    test_glu();
    rt_pool_free(pools[0]);
    rt_pool_free(pools[1]);
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
