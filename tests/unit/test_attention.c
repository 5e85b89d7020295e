/* test_attention.c: runtime/attention.c against naive double-precision references:
 * attention forward and backward on odd shapes (T = 1 .. 70, causal or not, blocks of
 * the causal split cut in the middle), the embedding lookup and its gradient with
 * repeated indices; 1 and 3 threads giving the same bits; finite differences of the
 * attention backward; an out-of-range index exiting 2.
 *
 * Built by tests/run_all.sh (unit/build_attention), which lists its sources.
 * Prints "ok NAME" or "FAIL NAME ..." per check; exits 1 if any check failed.
 * `test_attention --torch FILE` instead compares with the PyTorch results that
 * tests/attention_ref.py writes to FILE (a check run by hand). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "rt.h"

static int failures;
static rt_pool *pools[2];      /* 1 and 3 threads */


/* ---- helpers ------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float urand(void)       /* [-1, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static float *fvec(int64_t n, float scale)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = scale * urand();
    return p;
}

/* Filled with NaN, so that an element the kernel forgets to write shows up. */
static float *nanvec(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static double *dvec(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

static rt_exec exec_on(rt_pool *p)
{
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.rt = p;
    e.grad_scale = 1;
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

/* max |got - ref| relative to max |ref| (floored at 1e-30); a NaN in got fails. */
static void check_close(const char *name, const float *got, const double *ref, int64_t n,
                        double tol)
{
    double err = 0, scale = 1e-30;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = isnan(got[i]) ? INFINITY : fabs(got[i] - ref[i]) / scale;
        if (d > err) {
            err = d;
            worst = i;
        }
    }
    if (!(err <= tol))
        fail(name, "rel err %.3g > %.3g at %lld: got %.9g, want %.9g", err, tol,
             (long long)worst, got[worst], ref[worst]);
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

/* ---- attention: the reference ------------------------------------------------- */

typedef struct { int64_t B, T, d, H; int causal; } att_shape;

/* P [B, H, T, T], y [B, T, d] and lse [B, H, T] in double, from the definition. */
static void ref_att_fwd(const att_shape *s, const float *qkv, double *P, double *y, double *lse)
{
    int64_t T = s->T, d = s->d, H = s->H, hd = d / H;
    double scale = 1.0 / sqrt((double)hd);
    double *row = dvec(T);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *q = qkv + (b * T + i) * 3 * d + h * hd;
                int64_t len = s->causal ? i + 1 : T;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < len; j++) {
                    const float *k = qkv + (b * T + j) * 3 * d + d + h * hd;
                    double acc = 0;
                    for (int64_t c = 0; c < hd; c++)
                        acc += (double)q[c] * k[c];
                    row[j] = acc * scale;
                    m = fmax(m, row[j]);
                }
                for (int64_t j = 0; j < len; j++)
                    sum += row[j] = exp(row[j] - m);
                lse[(b * H + h) * T + i] = m + log(sum);
                double *p = P + ((b * H + h) * T + i) * T;
                for (int64_t j = 0; j < T; j++)
                    p[j] = j < len ? row[j] / sum : 0.0;
                for (int64_t c = 0; c < hd; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < len; j++)
                        acc += p[j] * qkv[(b * T + j) * 3 * d + 2 * d + h * hd + c];
                    y[(b * T + i) * d + h * hd + c] = acc;
                }
            }
    free(row);
}

/* dqkv [B, T, 3d] in double from the reference probabilities P and dy. */
static void ref_att_bwd(const att_shape *s, const float *qkv, const double *P, const float *dy,
                        double *dqkv)
{
    int64_t T = s->T, d = s->d, H = s->H, hd = d / H, ld = 3 * d;
    double scale = 1.0 / sqrt((double)hd);
    double *dS = dvec(T * T);
    memset(dqkv, 0, (size_t)(s->B * T * ld) * sizeof(double));
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < H; h++) {
            const double *p = P + (b * H + h) * T * T;
            const float *q = qkv + b * T * ld + h * hd, *k = q + d, *v = q + 2 * d;
            const float *g = dy + b * T * d + h * hd;
            double *dq = dqkv + b * T * ld + h * hd, *dk = dq + d, *dv = dq + 2 * d;
            for (int64_t i = 0; i < T; i++) {
                double dot = 0;
                for (int64_t j = 0; j < T; j++) {
                    double dp = 0;
                    for (int64_t c = 0; c < hd; c++)
                        dp += (double)g[i * d + c] * v[j * ld + c];
                    dS[i * T + j] = dp;
                    dot += dp * p[i * T + j];
                }
                for (int64_t j = 0; j < T; j++)
                    dS[i * T + j] = p[i * T + j] * (dS[i * T + j] - dot);
            }
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j < T; j++)
                    for (int64_t c = 0; c < hd; c++) {
                        dq[i * ld + c] += dS[i * T + j] * k[j * ld + c] * scale;
                        dk[j * ld + c] += dS[i * T + j] * q[i * ld + c] * scale;
                        dv[j * ld + c] += p[i * T + j] * g[i * d + c];
                    }
        }
    free(dS);
}

/* ---- attention: tests --------------------------------------------------------- */

static const att_shape att_shapes[] = {
    {1, 1, 4, 1, 1},   {1, 1, 4, 2, 0},   {2, 5, 8, 2, 1},   {2, 5, 8, 2, 0},
    {3, 17, 16, 4, 1}, {3, 17, 16, 4, 0}, {1, 17, 12, 1, 1}, {2, 5, 6, 2, 1},
    {2, 33, 8, 2, 1},  {1, 33, 8, 2, 0},  {1, 70, 16, 2, 1}, {2, 64, 64, 2, 1},
};

static void test_attention(void)
{
    char nm[160];
    for (size_t si = 0; si < sizeof att_shapes / sizeof att_shapes[0]; si++) {
        const att_shape *s = &att_shapes[si];
        int64_t B = s->B, T = s->T, d = s->d, H = s->H;
        int64_t nqkv = B * T * 3 * d, natt = B * H * T * T, nlse = B * H * T, ny = B * T * d;
        char tag[96];
        snprintf(tag, sizeof tag, "B=%lld T=%lld d=%lld H=%lld %s", (long long)B, (long long)T,
                 (long long)d, (long long)H, s->causal ? "causal" : "full");
        /* scores of a few units: softmax neither flat nor one-hot */
        float *qkv = fvec(nqkv, 2.0f), *dy = fvec(ny, 1.0f);
        float *lse[2], *y[2], *dqkv[2];
        for (int pi = 0; pi < 2; pi++) {
            rt_exec e = exec_on(pools[pi]);
            lse[pi] = nanvec(nlse), y[pi] = nanvec(ny), dqkv[pi] = nanvec(nqkv);
            rt_attention_fwd(&e, qkv, lse[pi], y[pi], B, T, d, H, s->causal);
            rt_attention_bwd(&e, qkv, lse[pi], y[pi], dy, dqkv[pi], B, T, d, H, s->causal);
        }
        double *rP = dvec(natt), *ry = dvec(ny), *rl = dvec(nlse), *rd = dvec(nqkv);
        ref_att_fwd(s, qkv, rP, ry, rl);
        ref_att_bwd(s, qkv, rP, dy, rd);
        check_close(NAME("attention fwd lse %s", tag), lse[0], rl, nlse, 1e-6);
        check_close(NAME("attention fwd y %s", tag), y[0], ry, ny, 1e-5);
        check_close(NAME("attention bwd dqkv %s", tag), dqkv[0], rd, nqkv, 1e-5);
        check_same(NAME("attention lse threads 1 vs 3 %s", tag), lse[0], lse[1],
                   (size_t)nlse * 4);
        check_same(NAME("attention y threads 1 vs 3 %s", tag), y[0], y[1], (size_t)ny * 4);
        check_same(NAME("attention dqkv threads 1 vs 3 %s", tag), dqkv[0], dqkv[1],
                   (size_t)nqkv * 4);
        free(qkv), free(dy), free(rP), free(ry), free(rl), free(rd);
        for (int pi = 0; pi < 2; pi++)
            free(lse[pi]), free(y[pi]), free(dqkv[pi]);
    }
}

/* Scores in the hundreds: exp would overflow without subtracting the row maximum. */
static void test_attention_large_scores(void)
{
    att_shape s = {1, 9, 8, 2, 1};
    int64_t nqkv = 9 * 24, natt = 2 * 81, nlse = 2 * 9, ny = 9 * 8;
    float *qkv = fvec(nqkv, 30.0f), *lse = nanvec(nlse), *y = nanvec(ny);
    double *rP = dvec(natt), *ry = dvec(ny), *rl = dvec(nlse);
    rt_exec e = exec_on(pools[1]);
    rt_attention_fwd(&e, qkv, lse, y, s.B, s.T, s.d, s.H, s.causal);
    ref_att_fwd(&s, qkv, rP, ry, rl);
    check_close("attention fwd lse large scores", lse, rl, nlse, 1e-5);
    check_close("attention fwd y large scores", y, ry, ny, 1e-5);
    free(qkv), free(lse), free(y), free(rP), free(ry), free(rl);
}

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

static double dot_fd(const float *a, const float *r, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * r[i];
    return s;
}

/* L = <y(qkv), R>; dL/dqkv from the backward with dy = R. h = 1e-2 on inputs of O(1):
 * truncation ~h^2 |L'''| ~ 1e-4, rounding ~ny * 2^-24 / 0.02 ~ 1e-4. tol 1e-3. */
static void fd_attention(void)
{
    const att_shape shapes[] = {{2, 5, 6, 2, 1}, {1, 6, 8, 2, 0}, {1, 35, 4, 1, 1}};
    const float h = 1e-2f;
    char nm[160];
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const att_shape *s = &shapes[si];
        int64_t B = s->B, T = s->T, d = s->d, H = s->H;
        int64_t nqkv = B * T * 3 * d, ny = B * T * d;
        float *qkv = fvec(nqkv, 1.0f), *r = fvec(ny, 1.0f), *att = nanvec(B * H * T),
              *y = nanvec(ny), *dqkv = nanvec(nqkv);
        rt_exec e = exec_on(pools[1]);
        rt_attention_fwd(&e, qkv, att, y, B, T, d, H, s->causal);
        rt_attention_bwd(&e, qkv, att, y, r, dqkv, B, T, d, H, s->causal);
        for (int64_t i = 0; i < nqkv; i++) {
            float keep = qkv[i], xp = keep + h, xm = keep - h;
            qkv[i] = xp;
            rt_attention_fwd(&e, qkv, att, y, B, T, d, H, s->causal);
            double lp = dot_fd(y, r, ny);
            qkv[i] = xm;
            rt_attention_fwd(&e, qkv, att, y, B, T, d, H, s->causal);
            double lm = dot_fd(y, r, ny);
            qkv[i] = keep;
            fd_compare((lp - lm) / ((double)xp - xm), dqkv[i], 1e-3);
        }
        NAME("fd attention dqkv B=%lld T=%lld d=%lld H=%lld %s (worst %.2g, tol 1e-3)",
             (long long)B, (long long)T, (long long)d, (long long)H,
             s->causal ? "causal" : "full", fd_worst);
        if (fd_bad)
            fail(nm, "%d derivatives off", fd_bad);
        else
            pass(nm);
        fd_bad = 0;
        fd_worst = 0;
        free(qkv), free(r), free(att), free(y), free(dqkv);
    }
}

/* ---- embedding ------------------------------------------------------------------ */

static void test_embedding(void)
{
    const int64_t shapes[][3] = {   /* rows, V, dim */
        {1, 1, 1}, {7, 3, 5}, {40, 5, 16}, {33, 11, 17}, {100, 7, 40}, {257, 50, 130},
    };
    char nm[160];
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], V = shapes[si][1], dim = shapes[si][2];
        int32_t *idx = malloc((size_t)rows * sizeof(int32_t));
        for (int64_t r = 0; r < rows; r++)   /* few distinct ids: many repeats */
            idx[r] = (int32_t)((urand() + 1.0f) * 0.5f * (float)V) % (int32_t)V;
        float *w = fvec(V * dim, 1.0f), *dout = fvec(rows * dim, 1.0f);
        float *dw0 = fvec(V * dim, 1.0f);    /* accumulated into, as parameter gradients */
        float *out[2], *dw[2], *rdw = malloc((size_t)(V * dim) * sizeof(float));
        double *rout = dvec(rows * dim);
        /* the reference: float adds in row order, which the kernel must match exactly */
        memcpy(rdw, dw0, (size_t)(V * dim) * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < dim; j++) {
                rout[r * dim + j] = w[idx[r] * dim + j];
                rdw[idx[r] * dim + j] += dout[r * dim + j];
            }
        for (int pi = 0; pi < 2; pi++) {
            rt_exec e = exec_on(pools[pi]);
            out[pi] = nanvec(rows * dim);
            dw[pi] = malloc((size_t)(V * dim) * sizeof(float));
            memcpy(dw[pi], dw0, (size_t)(V * dim) * sizeof(float));
            rt_embedding_fwd(&e, idx, w, out[pi], rows, V, dim);
            rt_embedding_bwd(&e, idx, dout, dw[pi], rows, V, dim);
        }
        char tag[64];
        snprintf(tag, sizeof tag, "rows=%lld V=%lld dim=%lld", (long long)rows, (long long)V,
                 (long long)dim);
        check_close(NAME("embedding fwd %s", tag), out[0], rout, rows * dim, 0);
        check_same(NAME("embedding bwd = row-order reference %s", tag), dw[0], rdw,
                   (size_t)(V * dim) * 4);
        check_same(NAME("embedding fwd threads 1 vs 3 %s", tag), out[0], out[1],
                   (size_t)(rows * dim) * 4);
        check_same(NAME("embedding bwd threads 1 vs 3 %s", tag), dw[0], dw[1],
                   (size_t)(V * dim) * 4);
        free(idx), free(w), free(dout), free(dw0), free(rdw), free(rout);
        for (int pi = 0; pi < 2; pi++)
            free(out[pi]), free(dw[pi]);
    }
}

/* An index out of range is a runtime error (exit 2). The child re-executes this
 * program (a fork that goes on to start threads is not supported by ThreadSanitizer). */
static int bad_index_child(int bwd)
{
    rt_pool *p = rt_pool_new(3);
    static float w[4 * 16], buf[40 * 16];
    int32_t idx[40] = {0};
    idx[33] = bwd ? -1 : 4;    /* found by a worker thread with 3 threads */
    rt_exec e = exec_on(p);
    if (bwd)
        rt_embedding_bwd(&e, idx, buf, w, 40, 4, 16);
    else
        rt_embedding_fwd(&e, idx, w, buf, 40, 4, 16);
    rt_pool_free(p);
    return 0;
}

static void test_embedding_bad_index(void)
{
    for (int bwd = 0; bwd < 2; bwd++) {
        const char *name = bwd ? "embedding bwd index out of range exits 2"
                               : "embedding fwd index out of range exits 2";
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stderr))
                _exit(9);
            execl("/proc/self/exe", "test_attention", "--bad-index-child", bwd ? "1" : "0",
                  (char *)NULL);
            _exit(9);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == RT_EXIT_RUNTIME)
            pass(name);
        else
            fail(name, "status %#x", st);
    }
}

/* ---- PyTorch results (tests/attention_ref.py) ---------------------------------- *
 * FILE holds cases, each: int64 B, T, d, H, KV, causal, window, qk_norm, rope, orig, n_ext;
 * float64 theta, factor, low, high (rope and its llama3 scaling), scale and softcap
 * (the scores' factor and soft-cap, 0: none); float32 ext [n_ext] (inverse frequencies):
 * rt_attention_ext_fwd's arguments; then float32 qkv [B,T,(H+2KV)hd], with
 * qk_norm qn, kn [hd], dy [B,T,d], and PyTorch's lse [B,H,T] (torch.logsumexp of the
 * scores), y [B,T,d], dqkv, with qk_norm dqn, dkn; up to EOF. */

static int read_all(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static float *read_floats(FILE *f, int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!read_all(f, p, (size_t)n * sizeof(float))) {
        fprintf(stderr, "truncated reference file\n");
        exit(2);
    }
    return p;
}

typedef struct {
    int64_t B, T, d, H, KV, causal, window, qk_norm, rope, orig, n_ext, packed;
    double theta, factor, low, high, scale, softcap;
    const float *ext;          /* NULL when n_ext is 0 */
    const int32_t *pos;        /* [B, T] packed rows' positions, or NULL */
} ext_case;

/* One case's forward and backward on pool pi: GPT-2's calls without options (and the
 * options call beside them, which must give the same bits), rt_attention_ext_* with. */
static void ext_run(const ext_case *c, int pi, const float *qkv, const float *qn,
                    const float *kn, const float *dy, float *lse, float *y, float *dqkv,
                    float *dqn, float *dkn)
{
    rt_exec e = exec_on(pools[pi]);
    float th = c->rope ? (float)c->theta : 0.0f;
    rt_attention_ext_fwd(&e, qkv, qn, kn, lse, y, c->B, c->T, c->d, c->H, c->KV, (int)c->causal,
                         c->window, th, (float)c->factor, (float)c->low, (float)c->high,
                         c->orig, c->ext, (float)c->scale, (float)c->softcap, c->pos);
    rt_attention_ext_bwd(&e, qkv, qn, kn, lse, y, dy, dqkv, dqn, dkn, c->B, c->T, c->d, c->H,
                         c->KV, (int)c->causal, c->window, th, (float)c->factor, (float)c->low,
                         (float)c->high, c->orig, c->ext, (float)c->scale, (float)c->softcap,
                         c->pos);
}

/* elementwise absolute error against torch's float32 results within 1e-4 */
static void torch_cmp(const char *tag, const char *what, const float *got, const float *want,
                      int64_t n)
{
    char nm[300];
    double err = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        err = fmax(err, isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]));
        mx = fmax(mx, fabs(want[i]));
    }
    NAME("torch %s %s (max abs err %.2g, max |x| %.2g)", what, tag, err, mx);
    if (!(err <= 1e-4))
        fail(nm, "exceeds 1e-4");
    else
        pass(nm);
}

/* The decode program's call (rt_attention_decode) over each batch row's sequence, its
 * positions in passes of 1, 2, 3, ... rows (the cache filled as --sample fills it, a
 * prompt's chunks then one token at a time): y into out [B, T, d]. The layer's part of
 * the cache starts 3 floats in, and nothing before or after it is written: 0, else 1. */
static int decode_run(const ext_case *c, int pi, const float *qkv, const float *qn,
                      const float *kn, float *out)
{
    int64_t hd = c->d / c->H, ld = (c->H + 2 * c->KV) * hd, off = 3, n_kv = 2 * c->KV * c->T * hd;
    float *kv = nanvec(off + n_kv + 5);
    int32_t *place = malloc((size_t)c->T * sizeof *place);
    float th = c->rope ? (float)c->theta : 0.0f;
    rt_exec e = exec_on(pools[pi]);
    e.kv = kv, e.kv_T = c->T, e.place = place;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t at = 0, n = 1; at < c->T; at += n, n++) {
            n = n < c->T - at ? n : c->T - at;
            for (int64_t i = 0; i < n; i++)
                place[i] = (int32_t)(at + i);
            rt_attention_decode(&e, qkv + (b * c->T + at) * ld, qn, kn, out + (b * c->T + at) * c->d,
                                off, n, c->T, c->d, c->H, c->KV, 1, c->window, th, (float)c->factor,
                                (float)c->low, (float)c->high, c->orig, c->ext, (float)c->scale,
                                (float)c->softcap);
        }
    int outside = 0;
    for (int64_t i = 0; i < off + n_kv + 5; i++)
        outside += (i < off || i >= off + n_kv) && !isnan(kv[i]);
    free(kv), free(place);
    return outside != 0;
}

/* One call over the rows `rows` (n of them: row i is sequence rows[i] / T's position
 * rows[i] % T, its place): their qkv rows gathered from qkv [B, T, ld], y scattered into
 * out [B, T, d]. */
static void decode_call(const ext_case *c, rt_exec *e, const float *qkv, const float *qn,
                        const float *kn, float *out, float *kv, int64_t off, int64_t n_kv,
                        const int32_t *rows, int64_t n)
{
    int64_t hd = c->d / c->H, ld = (c->H + 2 * c->KV) * hd;
    float *in = nanvec(n * ld), *ys = nanvec(n * c->d);
    float th = c->rope ? (float)c->theta : 0.0f;
    for (int64_t i = 0; i < n; i++)
        memcpy(in + i * ld, qkv + rows[i] * ld, (size_t)ld * 4);
    e->kv = kv, e->kv_seq = n_kv, e->kv_T = c->T, e->place = rows;
    rt_attention_decode(e, in, qn, kn, ys, off, n, c->T, c->d, c->H, c->KV, 1, c->window, th,
                        (float)c->factor, (float)c->low, (float)c->high, c->orig, c->ext,
                        (float)c->scale, (float)c->softcap);
    for (int64_t i = 0; i < n; i++)
        memcpy(out + rows[i] * c->d, ys + i * c->d, (size_t)c->d * 4);
    free(in), free(ys);
}

/* The same with the batch rows as sequences of their own, each with its cache (n_kv floats
 * after the one before's), as --num-samples and --prompt-file's prompts fill them: the
 * first p_b positions of every sequence b (p_b = T/2 + b % 3, at most T - 1) in one call,
 * then one call a token over every sequence not yet full, each row at its own position.
 * 0, else 1 as decode_run. */
static int decode_run_seqs(const ext_case *c, int pi, const float *qkv, const float *qn,
                           const float *kn, float *out)
{
    int64_t hd = c->d / c->H, off = 3, n_kv = 2 * c->KV * c->T * hd, all = c->B * n_kv;
    float *kv = nanvec(off + all + 5);
    int32_t *rows = malloc((size_t)(c->B * c->T) * sizeof *rows);
    int64_t *at = malloc((size_t)c->B * sizeof *at), n = 0;
    rt_exec e = exec_on(pools[pi]);
    for (int64_t b = 0; b < c->B; b++) {
        at[b] = c->T / 2 + b % 3 < c->T - 1 ? c->T / 2 + b % 3 : c->T - 1;
        for (int64_t t = 0; t < at[b]; t++)
            rows[n++] = (int32_t)(b * c->T + t);
    }
    decode_call(c, &e, qkv, qn, kn, out, kv, off, n_kv, rows, n);
    for (;;) {
        n = 0;
        for (int64_t b = 0; b < c->B; b++)
            if (at[b] < c->T)
                rows[n++] = (int32_t)(b * c->T + at[b]++);
        if (!n)
            break;
        decode_call(c, &e, qkv, qn, kn, out, kv, off, n_kv, rows, n);
    }
    int outside = 0;
    for (int64_t i = 0; i < off + all + 5; i++)
        outside += (i < off || i >= off + all) && !isnan(kv[i]);
    free(kv), free(rows), free(at);
    return outside != 0;
}

/* The case again with every row one sequence (pos[b, t] = t): y and dqkv bit for bit
 * those of the call without positions (y0, dqkv0). */
static void same_as_positions(const ext_case *c, const float *qkv, const float *qn,
                              const float *kn, const float *dy, const float *y0,
                              const float *dqkv0, const char *tag)
{
    int64_t hd = c->d / c->H, nqkv = c->B * c->T * (c->H + 2 * c->KV) * hd;
    int64_t ny = c->B * c->T * c->d, nlse = c->B * c->H * c->T;
    char nm[300];
    int32_t *pos = malloc((size_t)(c->B * c->T) * sizeof *pos);
    for (int64_t i = 0; i < c->B * c->T; i++)
        pos[i] = (int32_t)(i % c->T);
    ext_case p = *c;
    p.pos = pos;
    float *lse = nanvec(nlse), *y = nanvec(ny), *dqkv = nanvec(nqkv);
    float *dqn = calloc((size_t)hd, 4), *dkn = calloc((size_t)hd, 4);
    ext_run(&p, 1, qkv, qn, kn, dy, lse, y, dqkv, qn ? dqn : NULL, qn ? dkn : NULL);
    check_same(NAME("ext positions 0 .. T-1 = none, y %s", tag), y, y0, (size_t)ny * 4);
    check_same(NAME("ext positions 0 .. T-1 = none, dqkv %s", tag), dqkv, dqkv0, (size_t)nqkv * 4);
    free(pos), free(lse), free(y), free(dqkv), free(dqn), free(dkn);
}

static void torch_case(FILE *f, const ext_case *c)
{
    char tag[200], nm[300];
    int64_t hd = c->d / c->H, nqkv = c->B * c->T * (c->H + 2 * c->KV) * hd;
    int64_t ny = c->B * c->T * c->d, nlse = c->B * c->H * c->T, nw = c->qk_norm ? hd : 0;
    int plain_scale = (float)c->scale == (float)(1.0 / sqrt((double)hd));
    snprintf(tag, sizeof tag,
             "B=%lld T=%lld d=%lld H=%lld KV=%lld %s window %lld%s%s%s%s scale %g softcap %g%s",
             (long long)c->B, (long long)c->T, (long long)c->d, (long long)c->H,
             (long long)c->KV, c->causal ? "causal" : "full", (long long)c->window,
             c->qk_norm ? " qk_norm" : "", c->rope ? " rope" : "",
             c->rope && c->factor > 0 ? " llama3" : "", c->ext ? " inverse frequencies" : "", c->scale,
             c->softcap, c->pos ? " packed" : "");
    float *qkv = read_floats(f, nqkv), *qn = read_floats(f, nw), *kn = read_floats(f, nw);
    float *dy = read_floats(f, ny), *tl = read_floats(f, nlse), *ty = read_floats(f, ny);
    float *td = read_floats(f, nqkv), *tdq = read_floats(f, nw), *tdk = read_floats(f, nw);
    float *lse[2], *y[2], *dqkv[2], *dqn[2], *dkn[2];
    for (int pi = 0; pi < 2; pi++) {
        lse[pi] = nanvec(nlse), y[pi] = nanvec(ny), dqkv[pi] = nanvec(nqkv);
        dqn[pi] = calloc((size_t)hd, 4), dkn[pi] = calloc((size_t)hd, 4);
        ext_run(c, pi, qkv, nw ? qn : NULL, nw ? kn : NULL, dy, lse[pi], y[pi], dqkv[pi],
                nw ? dqn[pi] : NULL, nw ? dkn[pi] : NULL);
    }
    torch_cmp(tag, "lse", lse[0], tl, nlse);
    torch_cmp(tag, "y", y[0], ty, ny);
    torch_cmp(tag, "dqkv", dqkv[0], td, nqkv);
    if (nw) {
        torch_cmp(tag, "d q_norm.weight", dqn[0], tdq, hd);
        torch_cmp(tag, "d k_norm.weight", dkn[0], tdk, hd);
    }
    check_same(NAME("ext threads 1 vs 3 y %s", tag), y[0], y[1], (size_t)ny * 4);
    check_same(NAME("ext threads 1 vs 3 dqkv %s", tag), dqkv[0], dqkv[1], (size_t)nqkv * 4);
    check_same(NAME("ext threads 1 vs 3 d norms %s", tag), dqn[0], dqn[1], (size_t)hd * 4);
    if (c->causal && !c->pos)   /* positions 0 .. T - 1 given: the same bits as none */
        same_as_positions(c, qkv, nw ? qn : NULL, nw ? kn : NULL, dy, y[0], dqkv[0], tag);
    if (c->causal && !c->pos) {   /* the decode program's call: torch's y, position by position */
        float *yd[2] = {nanvec(ny), nanvec(ny)};
        int outside = 0;
        for (int pi = 0; pi < 2; pi++)
            outside += decode_run(c, pi, qkv, nw ? qn : NULL, nw ? kn : NULL, yd[pi]);
        if (outside)
            fail(NAME("decode %s", tag), "wrote outside the layer's part of the cache");
        torch_cmp(tag, "decode y", yd[0], ty, ny);
        check_same(NAME("decode threads 1 vs 3 y %s", tag), yd[0], yd[1], (size_t)ny * 4);
        if (decode_run_seqs(c, 1, qkv, nw ? qn : NULL, nw ? kn : NULL, yd[1]))
            fail(NAME("decode sequences %s", tag), "wrote outside the sequences' caches");
        torch_cmp(tag, "decode sequences y", yd[1], ty, ny);
        free(yd[0]), free(yd[1]);
    }
    if (c->KV == c->H && !c->window && !c->qk_norm && !c->rope && plain_scale && !c->softcap &&
        !c->pos) {
        /* without options the options call is GPT-2's, bit for bit */
        rt_exec e = exec_on(pools[1]);
        rt_attention_fwd(&e, qkv, lse[1], y[1], c->B, c->T, c->d, c->H, (int)c->causal);
        rt_attention_bwd(&e, qkv, lse[1], y[1], dy, dqkv[1], c->B, c->T, c->d, c->H,
                         (int)c->causal);
        check_same(NAME("ext = gpt-2's call y %s", tag), y[0], y[1], (size_t)ny * 4);
        check_same(NAME("ext = gpt-2's call dqkv %s", tag), dqkv[0], dqkv[1], (size_t)nqkv * 4);
    }
    free(qkv), free(qn), free(kn), free(dy), free(tl), free(ty), free(td), free(tdq), free(tdk);
    for (int pi = 0; pi < 2; pi++)
        free(lse[pi]), free(y[pi]), free(dqkv[pi]), free(dqn[pi]), free(dkn[pi]);
}

static int torch_check(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 2;
    }
    int64_t hdr[12];
    double fl[6];
    while (read_all(f, hdr, sizeof hdr)) {
        if (!read_all(f, fl, sizeof fl)) {
            fprintf(stderr, "truncated reference file\n");
            exit(2);
        }
        float *ext = read_floats(f, hdr[10]);
        int32_t *pos = hdr[11] ? (int32_t *)read_floats(f, hdr[0] * hdr[1]) : NULL;
        ext_case c = {hdr[0], hdr[1], hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7], hdr[8],
                      hdr[9], hdr[10], hdr[11], fl[0], fl[1], fl[2], fl[3], fl[4], fl[5],
                      hdr[10] ? ext : NULL, pos};
        torch_case(f, &c);
        free(ext), free(pos);
    }
    fclose(f);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--bad-index-child"))
        return bad_index_child(atoi(argv[2]));
    rt_blas_setup();
    pools[0] = rt_pool_new(1);
    pools[1] = rt_pool_new(3);
    if (argc == 3 && !strcmp(argv[1], "--torch")) {
        int rc = torch_check(argv[2]);
        rt_pool_free(pools[0]);
        rt_pool_free(pools[1]);
        printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
        return rc;
    }
    test_attention();
    test_attention_large_scores();
    fd_attention();
    test_embedding();
    test_embedding_bad_index();
    rt_pool_free(pools[0]);
    rt_pool_free(pools[1]);
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
