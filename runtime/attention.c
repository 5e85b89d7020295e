/* attention.c: multi-head self-attention (forward and backward), with the Llama-family
 * options (grouped-query heads, qk_norm, rope with llama3 scaling, a sliding window),
 * and the embedding lookup: the kernels behind the `attention` and `embedding` ops.
 *
 * Attention works on one (batch row, key/value head) item at a time: its q, k, v are
 * strided views of qkv [B, T, (H + 2 KV) hd] (GPT-2: KV = H, [B, T, 3d]). Items are
 * split over the pool; each is computed by one thread with single-threaded OpenBLAS
 * calls whose shapes depend only on the shapes and options, so the bits do not depend
 * on the thread count. The T x T products are cut into row blocks of ATT_NB queries
 * (more without a mask at short T), so a thread's scratch grows with T, not T^2 (8 T^2
 * bytes would be 512 MiB a thread at T = 8192, outside the memory plan). With a causal
 * mask each block multiplies only the keys it can see, which skips most of the masked
 * upper triangle at the price of a few more BLAS calls; a window skips the keys out of its
 * reach the same way. An item's query heads (g = H / KV of them) are stacked into one
 * product with their key head, through qk_norm and rope (applied as the rows are
 * stacked; k once an item); GPT-2's heads are read in place.
 * Measured at T = 128, hd = 32 (the character GPT) on a 2-core AMD EPYC:
 * blocks of 32 beat 16 and 64 slightly and unblocked products by 15-20%; hand-written
 * SSE loops over the exact triangle took 1.7x as long as OpenBLAS on the blocks
 * (the runtime is built without -march, OpenBLAS picks AVX2 + FMA kernels at run time).
 * At T = 1024, d = 768, 12 heads (one thread, forward and backward, 2026-11-28): 116 ms
 * with 12 key/value heads, 73 with 4 (the group's stacked products), 83 with rope and
 * qk_norm too, 46 with a window of 256.
 *
 * Softmax follows PyTorch: exp(s - max) / sum over the visible keys, masked
 * probabilities exactly 0. Its sums are in double, always in the same order. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"
#include "rt_vec.h"

/* Rows (queries) per block of the products. */
#ifndef ATT_NB
#define ATT_NB 32
#endif
/* Without a mask no block skips work, and fewer, larger products are faster: a block
 * takes ATT_FLOATS / T rows when that is more than ATT_NB (T = 128: all of them; blocks
 * of 32 took up to 3 times as long there), so the scratch stays under 2 ATT_FLOATS
 * floats until ATT_NB rows take more. (Built with -DATT_FLOATS=256, test_attention's
 * shapes cut unmasked products into blocks too.) */
#ifndef ATT_FLOATS
#define ATT_FLOATS 65536
#endif

/* ---- short vectors (rt_vec.h) ------------------------------------------------ */

/* exp(x) for x <= 0 (scores minus their row maximum) on four lanes: rt_vec.h's exp4's
 * arithmetic without its clamp and its split 2^n (the softmax's inner loop, which the
 * whole exp4 made 15-30% slower): 2^n is the low bits of t shifted into the exponent
 * field (n + 127 in [1, 127]; the high bits fall off), and below -87.3 (where expf is
 * under 1.2e-38) the result is 0, so that no subnormal reaches the products with V and
 * -inf lanes (masked or padding) add nothing to a sum. */
static inline v4f expneg4(v4f x)
{
    v4f t, p = exp4_core(x, &t);
    return (v4f)((v4i)(p * (v4f)(((v4u)t + 127) << 23)) & ~(x < splat4(-87.3365448f)));
}

/* Four lanes, padded past n with `pad`. */
static inline v4f ld4_pad(const float *p, int64_t n, float pad)
{
    if (n >= 4)
        return ld4(p);
    v4f v = splat4(pad);
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}

static inline void st4_part(float *p, int64_t n, v4f v)
{
    if (n >= 4)
        st4(p, v);
    else
        memcpy(p, &v, (size_t)n * sizeof(float));
}

/* ---- attention -------------------------------------------------------------- */

/* Row-major C += alpha op(A) op(B) on the calling thread (OpenBLAS is kept
 * single-threaded by rt_blas_setup). Sizes fit int: att_setup checks. Callers zero C
 * first rather than pass beta = 0: OpenBLAS's own zeroing pass is slower than memset
 * at these sizes (about 10% of the backward at T = 128), and 0 + x is x. */
static void mm_acc(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                   int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, 1.0f, C, (int)ldc);
}

/* rows x cols floats at p, row stride ld, set to 0 */
static void zero_rows(float *p, int64_t rows, int64_t cols, int64_t ld)
{
    if (cols == ld) {
        memset(p, 0, (size_t)(rows * cols) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < rows; i++)
        memset(p + i * ld, 0, (size_t)cols * sizeof(float));
}

static inline v4f max4(v4f a, v4f b)
{
#ifdef __SSE__
    return __builtin_ia32_maxps(a, b);
#else
    v4i gt = a > b;
    return (v4f)(((v4i)a & gt) | ((v4i)b & ~gt));
#endif
}

/* One row of probabilities in place: s[0, len) holds scores, s[len, n) is masked.
 * p = exp(s - max) / sum, masked entries set to 0; returns max + log(sum), the row's
 * log-sum-exp (what backward needs to recompute p). The sum is in double, in two
 * accumulators of four lanes over blocks of eight, then the tail: a fixed order for a
 * given len. */
static float softmax_row(float *restrict s, int64_t len, int64_t n)
{
    int64_t n8 = len & ~(int64_t)7, n4 = len & ~(int64_t)3, j;
    v4f mv = splat4(-INFINITY);
    for (j = 0; j < n4; j += 4)
        mv = max4(ld4(s + j), mv);
    if (n4 < len)
        mv = max4(ld4_pad(s + n4, len - n4, -INFINITY), mv);
    float m = mv[0];
    for (int k = 1; k < 4; k++)
        m = mv[k] > m ? mv[k] : m;
    mv = splat4(m);
    d4 sa = {{0, 0}, {0, 0}}, sb = sa;
    for (j = 0; j < n8; j += 8) {
        v4f e0 = expneg4(ld4(s + j) - mv), e1 = expneg4(ld4(s + j + 4) - mv);
        sa = add4d(sa, cvt4(e0));
        sb = add4d(sb, cvt4(e1));
        st4(s + j, e0);
        st4(s + j + 4, e1);
    }
    for (; j < len; j += 4) {
        v4f e0 = expneg4(ld4_pad(s + j, len - j, -INFINITY) - mv);
        sa = add4d(sa, cvt4(e0));
        st4_part(s + j, len - j, e0);
    }
    double sum = hsum4d(add4d(sa, sb));
    v4f inv = splat4((float)(1.0 / sum));
    for (j = 0; j < n4; j += 4)
        st4(s + j, ld4(s + j) * inv);
    for (; j < len; j++)
        s[j] *= inv[0];
    if (len < n)
        memset(s + len, 0, (size_t)(n - len) * sizeof(float));
    return (float)((double)m + log(sum));
}

/* One row of probabilities recomputed from scores s[0, len) and the forward's
 * log-sum-exp: p = exp(s - lse) (s - lse <= 0), masked entries [len, n) set to 0. */
static void probs_row(float *restrict s, float lse, int64_t len, int64_t n)
{
    v4f lv = splat4(lse);
    int64_t j;
    for (j = 0; j + 4 <= len; j += 4)
        st4(s + j, expneg4(ld4(s + j) - lv));
    if (j < len)
        st4_part(s + j, len - j, expneg4(ld4_pad(s + j, len - j, -INFINITY) - lv));
    if (len < n)
        memset(s + len, 0, (size_t)(n - len) * sizeof(float));
}

/* sum_c a[c] * b[c] over n floats, in double, in a fixed order. */
static float dot_row(const float *restrict a, const float *restrict b, int64_t n)
{
    d4 sa = {{0, 0}, {0, 0}};
    for (int64_t j = 0; j < n; j += 4)
        sa = add4d(sa, cvt4(ld4_pad(a + j, n - j, 0.0f) * ld4_pad(b + j, n - j, 0.0f)));
    return (float)hsum4d(sa);
}

/* One row of the softmax backward in place: g[0, len) holds dP, p the probabilities,
 * dot = sum_j dP_j p_j (= dy . y of the row, which backward computes instead).
 * dS = p * (dP - dot); entries [len, n) are masked and set to 0. */
static void softmax_bwd_row(float *restrict g, const float *restrict p, float dot, int64_t len,
                            int64_t n)
{
    int64_t n4 = len & ~(int64_t)3, j;
    v4f dv = splat4(dot);
    for (j = 0; j < n4; j += 4)
        st4(g + j, ld4(p + j) * (ld4(g + j) - dv));
    for (; j < len; j++)
        g[j] = p[j] * (g[j] - dot);
    if (len < n)
        memset(g + len, 0, (size_t)(n - len) * sizeof(float));
}

/* Soft-capping of a row's scores in place (Gemma 2's): s = cap tanh(s / cap); with dt,
 * each one's derivative 1 - tanh^2 as well, for the backward's dS. */
static void softcap_row(float *restrict s, float *restrict dt, float cap, int64_t len)
{
    for (int64_t j = 0; j < len; j++) {
        float t = tanhf(s[j] / cap);
        s[j] = cap * t;
        if (dt)
            dt[j] = 1.0f - t * t;
    }
}

typedef struct {
    const float *qkv;          /* [B, T, ld]: H query heads, then KV key, then KV value heads */
    const float *qn, *kn;      /* qk_norm's weights [hd], or NULL */
    float *lse;                /* [B, H, T] (forward) */
    const float *plse;         /* [B, H, T] (backward) */
    float *y;                  /* [B, T, d] (forward) */
    const float *py;           /* [B, T, d] (backward: the forward's output) */
    const float *dy;           /* [B, T, d] (backward) */
    float *dqkv;               /* [B, T, ld] (backward) */
    float *part;               /* [B * KV, 2 hd] qk_norm's weight gradients of each item */
    const float *cos, *sin;    /* rope: [T, hd / 2] each, or NULL */
    int64_t T, d, H, KV, g, hd, ld, nb;   /* g = H / KV; ld = (H + 2 KV) hd; nb: rows a block */
    int64_t window;            /* 0: none */
    const int32_t *pos;        /* [B, T]: each token's position in its packed sequence, or
                                  NULL (positions 0 .. T - 1, one sequence a row) */
    int32_t *ends;             /* [B, T], not causal with positions: where each token's
                                  sequence ends (one past its last place); else NULL */
    int causal;
    float scale;
    float cap;                 /* the scores' soft-cap, or 0: none */
} att_ctx;

/* Does q or k go through qk_norm or rope before the products (into scratch)? */
static int att_transforms(const att_ctx *c) { return c->qn != NULL || c->cos != NULL; }

/* Are a row block's query rows (and dy's) read in place, as GPT-2's heads are (one query
 * head a key head, no transforms), or stacked into scratch: the rows of the block for
 * each of the group's g heads, head after head, through the transforms, so that one
 * product with the key head serves the whole group? */
static int att_stacked(const att_ctx *c) { return c->g > 1 || att_transforms(c); }

/* Row i's visible keys [first, end) (indices in the row): the causal prefix, from where
 * the window starts and, with positions (pos: the batch row's), from where row i's
 * sequence starts, i - pos[i]. A block of rows [r0, r1) sees keys from its first row's
 * first: windows and sequences start later for later rows (positions count up from 0
 * in each sequence: att_positions). */
static int64_t att_first(const att_ctx *c, const int32_t *pos, int64_t i)
{
    int64_t f = c->window && i >= c->window ? i - c->window + 1 : 0;
    return pos && i - pos[i] > f ? i - pos[i] : f;
}

/* One past row i's last visible key: i + 1 (causal), the end of its sequence (not
 * causal, packed rows: ends, the batch row's), or T; not causal with a window, at most
 * i + window (a query sees the keys less than the window away on either side). A block's
 * last row's end is the block's: sequences and windows end later for later rows. */
static int64_t att_end(const att_ctx *c, const int32_t *ends, int64_t i)
{
    if (c->causal)
        return i + 1;
    int64_t e = ends ? ends[i] : c->T;
    return c->window && i + c->window < e ? i + c->window : e;
}

/* The position rope turns row i by: pos[i] in a packed row, else i. */
static int64_t att_rope_at(const int32_t *pos, int64_t i) { return pos ? pos[i] : i; }

/* One q or k row x (position t) to o [hd]: RMSNorm over hd with weight w (qk_norm, eps
 * 1e-6, sum in double; NULL: none), then the rotation of dims (j, j + hd/2) by t's
 * angles (rope; none without a table). */
static void att_load_row(const att_ctx *c, const float *x, const float *w, int64_t t, float *o)
{
    int64_t hd = c->hd, h2 = hd / 2;
    float r = 1.0f;
    if (w) {
        double ss = 0;
        for (int64_t j = 0; j < hd; j++)
            ss += (double)x[j] * x[j];
        r = (float)(1.0 / sqrt(ss / (double)hd + 1e-6));
    }
    for (int64_t j = 0; j < hd; j++)
        o[j] = w ? x[j] * r * w[j] : x[j];
    if (!c->cos)
        return;
    const float *cs = c->cos + t * h2, *sn = c->sin + t * h2;
    for (int64_t j = 0; j < h2; j++) {
        float a = o[j], b = o[j + h2];
        o[j] = a * cs[j] - b * sn[j];
        o[j + h2] = b * cs[j] + a * sn[j];
    }
}

/* att_load_row's backward: g [hd], the gradient of its output (overwritten), back
 * through the inverse rotation and RMSNorm to x's gradient dx [hd]; the weight's
 * gradient added to dw [hd] (double). */
static void att_unload_row(const att_ctx *c, const float *x, const float *w, int64_t t,
                           float *g, float *dx, double *dw)
{
    int64_t hd = c->hd, h2 = hd / 2;
    if (c->cos) {
        const float *cs = c->cos + t * h2, *sn = c->sin + t * h2;
        for (int64_t j = 0; j < h2; j++) {
            float a = g[j], b = g[j + h2];
            g[j] = a * cs[j] + b * sn[j];
            g[j + h2] = b * cs[j] - a * sn[j];
        }
    }
    if (!w) {
        memcpy(dx, g, (size_t)hd * sizeof(float));
        return;
    }
    double ss = 0, dot = 0;
    for (int64_t j = 0; j < hd; j++)
        ss += (double)x[j] * x[j];
    float r = (float)(1.0 / sqrt(ss / (double)hd + 1e-6));
    /* x^ = x r, y = w x^: dw += g x^, dx = r (u - x^ mean(u x^)) with u = g w */
    for (int64_t j = 0; j < hd; j++) {
        float xh = x[j] * r;
        dw[j] += (double)g[j] * xh;
        dot += (double)g[j] * w[j] * xh;
    }
    float m = (float)(dot / (double)hd);
    for (int64_t j = 0; j < hd; j++)
        dx[j] = r * (g[j] * w[j] - x[j] * r * m);
}

/* The rows [r0, r0 + m) of the g heads at src (heads hd apart, rows lds apart) stacked
 * into S [g m, hd] (head j's row r0 + i at row j m + i), through att_load_row with w
 * when tr (at the positions pos gives, or the rows' own). */
static void att_stack(const att_ctx *c, const float *src, int64_t lds, int64_t r0, int64_t m,
                      const float *w, int tr, const int32_t *pos, float *S)
{
    for (int64_t j = 0; j < c->g; j++)
        for (int64_t i = 0; i < m; i++) {
            const float *x = src + j * c->hd + (r0 + i) * lds;
            float *o = S + (j * m + i) * c->hd;
            if (tr)
                att_load_row(c, x, w, att_rope_at(pos, r0 + i), o);
            else
                memcpy(o, x, (size_t)c->hd * sizeof(float));
        }
}

/* One work item: batch row b, key/value head kh and its g query heads. q, dq, y, py, dy
 * point at the group's first head (the others hd further); lse at its first head's row
 * (the others T further); k (rows ldk apart: qkv's, or the transformed copy's hd) and
 * dk (the same layout), v and dv (rows ld apart); pos at row b's positions (or NULL). */
typedef struct {
    const float *q, *k, *v, *dy, *py;
    float *lse, *y, *dq, *dk, *dv;
    const float *plse;
    const int32_t *pos, *ends;
    int64_t ldk;
} att_item;

/* Forward of an item's row block [r0, r1) (the keys [k0, k0 + n) it sees): P =
 * softmax(q k^T * scale) for all its query rows at once in scratch P [g nb, T] (each
 * row's log-sum-exp to lse), y = P v. Stacked rows go through S [2 g nb, hd] (q, then
 * y); GPT-2's heads are read and written in place. */
static void att_fwd_block(const att_ctx *c, const att_item *it, int64_t r0, int64_t r1,
                          float *P, float *S)
{
    int64_t T = c->T, d = c->d, hd = c->hd, ld = c->ld, m = r1 - r0, M = c->g * m;
    int64_t k0 = att_first(c, it->pos, r0), n = att_end(c, it->ends, r1 - 1) - k0;
    int st = att_stacked(c);
    const float *Q = it->q + r0 * ld;
    int64_t ldq = ld;
    if (st) {
        att_stack(c, it->q, ld, r0, m, c->qn, att_transforms(c), it->pos, S);
        Q = S, ldq = hd;
    }
    zero_rows(P, M, n, T);
    mm_acc(0, 1, M, n, hd, c->scale, Q, ldq, it->k + k0 * it->ldk, it->ldk, P, T);
    for (int64_t r = 0; r < M; r++) {
        int64_t j = r / m, i = r0 + r % m;
        int64_t a = att_first(c, it->pos, i) - k0, len = att_end(c, it->ends, i) - k0;
        float *row = P + r * T;
        memset(row, 0, (size_t)a * sizeof(float));
        if (c->cap > 0)
            softcap_row(row + a, NULL, c->cap, len - a);
        it->lse[j * T + i] = softmax_row(row + a, len - a, n - a);
    }
    if (!st) {
        zero_rows(it->y + r0 * d, m, hd, d);
        mm_acc(0, 0, m, hd, n, 1.0f, P, T, it->v + k0 * ld, ld, it->y + r0 * d, d);
        return;
    }
    float *Y = S + M * hd;   /* [M, hd] */
    zero_rows(Y, M, hd, hd);
    mm_acc(0, 0, M, hd, n, 1.0f, P, T, it->v + k0 * ld, ld, Y, hd);
    for (int64_t r = 0; r < M; r++)
        memcpy(it->y + (r / m) * hd + (r0 + r % m) * d, Y + r * hd, (size_t)hd * sizeof(float));
}

/* Items (b, KV head) in [lo, hi): the key head (through qk_norm and rope into scratch
 * when they apply, once) serves its g query heads a row block at a time
 * (att_fwd_block). No T x T buffer outlives the call. */
static void att_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const att_ctx *c = ctx;
    int64_t T = c->T, d = c->d, hd = c->hd, ld = c->ld, g = c->g, tr = att_transforms(c);
    int64_t ns = att_stacked(c) ? 2 * g * c->nb * hd : 0;
    size_t floats = (size_t)(g * c->nb * T + ns + (tr ? T * hd : 0));
    float *P = malloc(floats * sizeof(float));   /* [g nb, T], S [2 g nb, hd], k [T, hd] */
    if (!P)
        rt_fail("out of memory allocating %lld bytes of attention scratch",
                (long long)(floats * 4));
    float *S = P + g * c->nb * T, *kt = S + ns;
    for (int64_t ix = lo; ix < hi; ix++) {
        int64_t b = ix / c->KV, kh = ix % c->KV;
        const float *base = c->qkv + b * T * ld;
        att_item it = {.q = base + kh * g * hd, .k = base + (c->H + kh) * hd,
                       .v = base + (c->H + c->KV + kh) * hd, .ldk = ld,
                       .lse = c->lse + (b * c->H + kh * g) * T, .y = c->y + b * T * d + kh * g * hd,
                       .pos = c->pos ? c->pos + b * T : NULL,
                       .ends = c->ends ? c->ends + b * T : NULL};
        if (tr) {
            for (int64_t t = 0; t < T; t++)
                att_load_row(c, it.k + t * ld, c->kn, att_rope_at(it.pos, t), kt + t * hd);
            it.k = kt, it.ldk = hd;
        }
        for (int64_t r0 = 0; r0 < T; r0 += c->nb)
            att_fwd_block(c, &it, r0, r0 + c->nb < T ? r0 + c->nb : T, P, S);
    }
    free(P);
}

/* Backward of an item's row block [r0, r1) (the keys [k0, k0 + n) it sees), all the
 * group's query rows at once, with scratch P, dS [g nb, T], for stacked rows S
 * [3 g nb, hd] (q, dy, dq) and with a soft-cap G [g nb, T] (its derivative):
 *   P = exp(q k^T * scale - lse)                                     (recomputed)
 *   dP = dy v^T, dS = P * (dP - dy . y), dq = dS k * scale
 *   (soft-capped: P = exp(cap tanh(q k^T scale / cap) - lse), dS times G = 1 - tanh^2)
 *   dv[k0, k0 + n) += P^T dy, dk[k0, k0 + n) += dS^T q * scale       (summed over blocks)
 * so the scratch grows with T, not T^2 (Llama-length sequences, T = 2048 to 8192, would
 * otherwise take 8 T^2 bytes a thread outside the memory plan). dk and dv add the row
 * blocks in order: a fixed order, whatever the thread count. Stacked dq goes back
 * through the transforms (att_unload_row; q_norm's weight gradient into dw). */
static void att_bwd_block(const att_ctx *c, const att_item *it, int64_t r0, int64_t r1,
                          float *P, float *dS, float *G, float *S, double *dw)
{
    int64_t T = c->T, d = c->d, hd = c->hd, ld = c->ld, m = r1 - r0, M = c->g * m;
    int64_t k0 = att_first(c, it->pos, r0), n = att_end(c, it->ends, r1 - 1) - k0;
    int st = att_stacked(c);
    const float *Q = it->q + r0 * ld, *DY = it->dy + r0 * d;
    int64_t ldq = ld, lddy = d;
    if (st) {
        att_stack(c, it->q, ld, r0, m, c->qn, att_transforms(c), it->pos, S);
        att_stack(c, it->dy, d, r0, m, NULL, 0, NULL, S + M * hd);
        Q = S, ldq = hd, DY = S + M * hd, lddy = hd;
    }
    zero_rows(P, M, n, T);
    mm_acc(0, 1, M, n, hd, c->scale, Q, ldq, it->k + k0 * it->ldk, it->ldk, P, T);
    for (int64_t r = 0; r < M; r++) {
        int64_t j = r / m, i = r0 + r % m;
        int64_t f = att_first(c, it->pos, i) - k0, len = att_end(c, it->ends, i) - k0;
        memset(P + r * T, 0, (size_t)f * sizeof(float));
        if (c->cap > 0)
            softcap_row(P + r * T + f, G + r * T + f, c->cap, len - f);
        probs_row(P + r * T + f, it->plse[j * T + i], len - f, n - f);
    }
    zero_rows(dS, M, n, T);
    mm_acc(0, 1, M, n, hd, 1.0f, DY, lddy, it->v + k0 * ld, ld, dS, T);
    for (int64_t r = 0; r < M; r++) {
        int64_t j = r / m, i = r0 + r % m;
        int64_t f = att_first(c, it->pos, i) - k0, len = att_end(c, it->ends, i) - k0;
        memset(dS + r * T, 0, (size_t)f * sizeof(float));
        softmax_bwd_row(dS + r * T + f, P + r * T + f,
                        dot_row(it->dy + j * hd + i * d, it->py + j * hd + i * d, hd), len - f,
                        n - f);
        for (int64_t k = f; c->cap > 0 && k < len; k++)
            dS[r * T + k] *= G[r * T + k];
    }
    float *dq = st ? S + 2 * M * hd : it->dq + r0 * ld;
    int64_t lddq = st ? hd : ld;
    zero_rows(dq, M, hd, lddq);
    mm_acc(0, 0, M, hd, n, c->scale, dS, T, it->k + k0 * it->ldk, it->ldk, dq, lddq);
    mm_acc(1, 0, n, hd, M, 1.0f, P, T, DY, lddy, it->dv + k0 * ld, ld);
    mm_acc(1, 0, n, hd, M, c->scale, dS, T, Q, ldq, it->dk + k0 * it->ldk, it->ldk);
    for (int64_t r = 0; st && r < M; r++) {
        int64_t j = r / m, i = r0 + r % m;
        att_unload_row(c, it->q + j * hd + i * ld, c->qn, att_rope_at(it->pos, i), dq + r * hd,
                       it->dq + j * hd + i * ld, dw);
    }
}

/* Items (b, KV head) in [lo, hi): dk and dv of the key/value head summed over its g
 * query heads, a row block at a time (att_bwd_block); with qk_norm or rope, k is
 * transformed once into scratch as the forward did, and dk taken back through the
 * transforms after the blocks; the norms' weight gradients go to the item's row of
 * part. */
static void att_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    const att_ctx *c = ctx;
    int64_t T = c->T, d = c->d, hd = c->hd, ld = c->ld, g = c->g, tr = att_transforms(c);
    int64_t ns = att_stacked(c) ? 3 * g * c->nb * hd : 0, np = g * c->nb * T;
    size_t floats = (size_t)((c->cap > 0 ? 3 : 2) * np + ns + (tr ? 2 * T * hd : 0));
    float *P = malloc(floats * sizeof(float)), *dS = P + np;
    if (!P)
        rt_fail("out of memory allocating %lld bytes of attention scratch",
                (long long)(floats * 4));
    float *S = dS + np, *kt = S + ns, *dkt = kt + T * hd;
    float *G = S + ns + (tr ? 2 * T * hd : 0);   /* with a soft-cap */
    double *dw = tr ? calloc((size_t)(2 * hd), sizeof(double)) : NULL;
    if (tr && !dw)
        rt_fail("out of memory allocating attention scratch");
    for (int64_t ix = lo; ix < hi; ix++) {
        int64_t b = ix / c->KV, kh = ix % c->KV;
        const float *base = c->qkv + b * T * ld, *k = base + (c->H + kh) * hd;
        float *dbase = c->dqkv + b * T * ld;
        att_item it = {.q = base + kh * g * hd, .k = k, .v = base + (c->H + c->KV + kh) * hd,
                       .dy = c->dy + b * T * d + kh * g * hd, .py = c->py + b * T * d + kh * g * hd,
                       .plse = c->plse + (b * c->H + kh * g) * T, .dq = dbase + kh * g * hd,
                       .dk = dbase + (c->H + kh) * hd, .dv = dbase + (c->H + c->KV + kh) * hd,
                       .pos = c->pos ? c->pos + b * T : NULL,
                       .ends = c->ends ? c->ends + b * T : NULL, .ldk = ld};
        if (tr) {
            for (int64_t t = 0; t < T; t++)
                att_load_row(c, k + t * ld, c->kn, att_rope_at(it.pos, t), kt + t * hd);
            it.k = kt, it.dk = dkt, it.ldk = hd;
            memset(dw, 0, (size_t)(2 * hd) * sizeof(double));
        }
        zero_rows(it.dk, T, hd, it.ldk);
        zero_rows(it.dv, T, hd, ld);
        for (int64_t r0 = 0; r0 < T; r0 += c->nb)
            att_bwd_block(c, &it, r0, r0 + c->nb < T ? r0 + c->nb : T, P, dS, G, S, dw);
        if (!tr)
            continue;
        for (int64_t t = 0; t < T; t++)
            att_unload_row(c, k + t * ld, c->kn, att_rope_at(it.pos, t), dkt + t * hd,
                           dbase + (c->H + kh) * hd + t * ld, dw + hd);
        if (c->part)
            for (int64_t j = 0; j < 2 * hd; j++)
                c->part[ix * 2 * hd + j] = (float)dw[j];
    }
    free(dw);
    free(P);
}

/* rope's angles, as Hugging Face computes them in float32 (LlamaRotaryEmbedding;
 * llama3 scaling as transformers' _compute_llama3_parameters): inv_freq[j] =
 * 1 / theta^(2j / hd), or ext[j] where the compiler worked them out (a partial rope's,
 * longrope's), scaled for long wavelengths; cos, sin [T, hd/2] of t inv_freq[j] for
 * the positions 0 .. T - 1 (or with place, the decode program's rows' positions,
 * place[t] % W), times the pair's amplitude ext[hd/2 + j] (longrope's attention factor;
 * 1 without ext). */
static void rope_table(float *cosv, float *sinv, int64_t T, const int32_t *place,
                       int64_t W, int64_t hd, float theta, float factor, float low, float high,
                       int64_t orig, const float *ext)
{
    int64_t h2 = hd / 2;
    for (int64_t j = 0; j < h2; j++) {
        float inv = ext ? ext[j] : 1.0f / powf(theta, (float)(2 * j) / (float)hd);
        if (factor > 0) {
            float wavelen = 2.0f * (float)M_PI / inv;
            float lo_wl = (float)orig / low, hi_wl = (float)orig / high;
            float scaled = wavelen > lo_wl ? inv / factor : inv;
            if (!(wavelen < hi_wl) && !(wavelen > lo_wl)) {
                float smooth = ((float)orig / wavelen - low) / (high - low);
                scaled = (1 - smooth) * scaled / factor + smooth * scaled;
            }
            inv = scaled;
        }
        float m = ext ? ext[h2 + j] : 1.0f;
        for (int64_t t = 0; t < T; t++) {
            float a = (float)(place ? place[t] % W : t) * inv;
            cosv[t * h2 + j] = cosf(a) * m;
            sinv[t * h2 + j] = sinf(a) * m;
        }
    }
}

static att_ctx att_setup(int64_t T, int64_t d, int64_t H, int64_t KV, int causal)
{
    if (H <= 0 || d % H != 0 || KV <= 0 || H % KV != 0)
        rt_die("attention: d = %lld, H = %lld, KV = %lld: need H | d and KV | H", (long long)d,
               (long long)H, (long long)KV);
    int64_t hd = d / H, ld = (H + 2 * KV) * hd;
    if (ld > INT_MAX || T > INT_MAX)
        rt_die("attention: T = %lld, d = %lld exceed the BLAS int range", (long long)T,
               (long long)d);
    int64_t nb = causal || ATT_FLOATS / T < ATT_NB ? ATT_NB : ATT_FLOATS / T;
    att_ctx c = {.T = T, .d = d, .H = H, .KV = KV, .g = H / KV, .hd = hd, .ld = ld,
                 .nb = nb < T ? nb : T, .causal = causal};
    c.scale = (float)(1.0 / sqrt((double)c.hd));
    return c;
}

/* The options of rt_attention_ext_*: the window, qk_norm's weights, the scores' factor
 * and soft-cap, and rope's table for positions [0, rows), or with place the decode
 * program's rows' (malloc'd into c->cos, c->sin; the caller frees c->cos). */
static void att_options(att_ctx *c, const float *qn, const float *kn, int64_t window,
                        float theta, float factor, float low, float high, int64_t orig,
                        const float *ext, float scale, float cap, const int32_t *place,
                        int64_t rows)
{
    if ((qn != NULL) != (kn != NULL) || window < 0 || (theta > 0 && c->hd % 2) ||
        !(scale > 0) || !(cap >= 0))
        rt_die("attention: bad options (qk_norm weights %p, %p; window %lld; rope with hd "
               "%lld; scale %g; soft-cap %g)", (const void *)qn, (const void *)kn,
               (long long)window, (long long)c->hd, (double)scale, (double)cap);
    c->qn = qn, c->kn = kn, c->window = window, c->scale = scale, c->cap = cap;
    if (window && !c->causal && c->nb > ATT_NB)   /* blocks that skip the keys out of reach */
        c->nb = ATT_NB;
    if (theta > 0) {
        size_t n = (size_t)(rows * (c->hd / 2));
        float *t = malloc(2 * n * sizeof(float) + 1);
        if (!t)
            rt_fail("out of memory allocating the rope table (T = %lld)", (long long)rows);
        rope_table(t, t + n, rows, place, c->T, c->hd, theta, factor, low, high, orig, ext);
        c->cos = t, c->sin = t + n;
    }
}

/* Packed rows' positions (NULL: none), checked: each token's within its sequence,
 * counting up from 0 (0, or the place before's + 1; the loader checked the data, this
 * guards the calls). Without a causal mask, each token's sequence end goes to c->ends
 * (freed by att_done). */
static void att_positions(att_ctx *c, const int32_t *pos, int64_t B)
{
    int64_t T = c->T;
    for (int64_t i = 0; pos && i < B * T; i++)
        if (pos[i] != 0 && (i % T == 0 || pos[i] != pos[i - 1] + 1))
            rt_fail("attention: position %d at row %lld, place %lld: not 0 nor one more than "
                    "the place before's", (int)pos[i], (long long)(i / T), (long long)(i % T));
    c->pos = pos;
    if (!pos || c->causal)
        return;
    if (!(c->ends = malloc((size_t)(B * T) * sizeof(int32_t))))
        rt_fail("out of memory allocating attention's sequence ends");
    for (int64_t i = B * T - 1; i >= 0; i--)
        c->ends[i] = i % T == T - 1 || pos[i + 1] == 0 ? (int32_t)(i % T + 1) : c->ends[i + 1];
}

/* Frees what att_options and att_positions allocated. */
static void att_done(att_ctx *c)
{
    free((void *)c->cos);
    free(c->ends);
}

void rt_attention_fwd(rt_exec *e, const float *qkv, float *lse, float *y, int64_t B, int64_t T,
                      int64_t d, int64_t H, int causal)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->attention_fwd(e, qkv, lse, y, B, T, d, H, causal);
        return;
    }
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    att_ctx c = att_setup(T, d, H, H, causal);
    c.qkv = qkv;
    c.lse = lse;
    c.y = y;
    rt_pool_run(e->rt, B * H, 1, att_fwd_task, &c);
}

void rt_attention_bwd(rt_exec *e, const float *qkv, const float *lse, const float *y,
                      const float *dy, float *dqkv, int64_t B, int64_t T, int64_t d, int64_t H,
                      int causal)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->attention_bwd(e, qkv, lse, y, dy, dqkv, B, T, d, H, causal);
        return;
    }
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    att_ctx c = att_setup(T, d, H, H, causal);
    c.qkv = qkv;
    c.plse = lse;
    c.py = y;
    c.dy = dy;
    c.dqkv = dqkv;
    rt_pool_run(e->rt, B * H, 1, att_bwd_task, &c);
}

void rt_attention_ext_fwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                          float *lse, float *y, int64_t B, int64_t T, int64_t d, int64_t H,
                          int64_t KV, int causal, int64_t window, float theta, float factor,
                          float low, float high, int64_t orig, const float *ext, float scale,
                          float softcap, const int32_t *pos)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        if (!RT_GPU(e)->attention_ext_fwd)
            rt_fail("attention with kv_heads, rope, qk_norm, a window, a scale or a soft-cap has "
                    "no GPU kernel in this build: run it with --device cpu");
        RT_GPU(e)->attention_ext_fwd(e, qkv, qn, kn, lse, y, B, T, d, H, KV, causal, window, theta,
                                     factor, low, high, orig, ext, scale, softcap, pos);
        return;
    }
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    att_ctx c = att_setup(T, d, H, KV, causal);
    att_options(&c, qn, kn, window, theta, factor, low, high, orig, ext, scale, softcap, NULL, T);
    att_positions(&c, pos, B);
    c.qkv = qkv;
    c.lse = lse;
    c.y = y;
    rt_pool_run(e->rt, B * KV, 1, att_fwd_task, &c);
    att_done(&c);
}

/* The decode program's call: row b is the token at position place[b] % T of sequence
 * place[b] / T (e->place), whose cache (seq floats after the sequence before's) holds
 * the positions before it or gets them from rows before b, which write their keys first. */
typedef struct {
    att_ctx c;                 /* qkv, y [B, ld] and [B, d]; cos, sin: row b's position's */
    float *kv;                 /* the layer's cache in the first sequence's: K [KV, T,
                                  hd], then V */
    const int32_t *place;
    int64_t seq, most;         /* most: the rows' last position + 1 */
} dec_ctx;

/* Row b's position (its rope table row is b) and its layer's cache. */
static int64_t dec_pos(const dec_ctx *x, int64_t b) { return x->place[b] % x->c.T; }
static float *dec_cache(const dec_ctx *x, int64_t b)
{
    return x->kv + x->place[b] / x->c.T * x->seq;
}

/* Items (b, KV head) in [lo, hi): row b's key (qk_norm, rope) and value into its cache at
 * its position. */
static void dec_kv_task(void *ctx, int64_t lo, int64_t hi)
{
    const dec_ctx *x = ctx;
    const att_ctx *c = &x->c;
    int64_t T = c->T, hd = c->hd;
    for (int64_t ix = lo; ix < hi; ix++) {
        int64_t b = ix / c->KV, kh = ix % c->KV, t = dec_pos(x, b);
        const float *row = c->qkv + b * c->ld;
        float *K = dec_cache(x, b) + kh * T * hd, *V = K + c->KV * T * hd;
        att_load_row(c, row + (c->H + kh) * hd, c->kn, b, K + t * hd);
        memcpy(V + t * hd, row + (c->H + c->KV + kh) * hd, (size_t)hd * sizeof(float));
    }
}

/* Items (b, KV head) in [lo, hi): each of the group's query heads of row b (position
 * t): scores against the cache's keys in its window up to t, soft-cap, softmax
 * (softmax_row, as the window's pass), y = p V. */
static void dec_q_task(void *ctx, int64_t lo, int64_t hi)
{
    const dec_ctx *x = ctx;
    const att_ctx *c = &x->c;
    int64_t T = c->T, hd = c->hd, most = x->most;
    float *s = malloc((size_t)(most + 2 * hd) * sizeof(float)), *q = s + most, *o = q + hd;
    if (!s)
        rt_fail("out of memory allocating %lld bytes of attention scratch",
                (long long)((most + 2 * hd) * 4));
    for (int64_t ix = lo; ix < hi; ix++) {
        int64_t b = ix / c->KV, kh = ix % c->KV, t = dec_pos(x, b);
        int64_t first = att_first(c, NULL, t), n = t + 1 - first;
        const float *row = c->qkv + b * c->ld;
        const float *K = dec_cache(x, b) + kh * T * hd + first * hd, *V = K + c->KV * T * hd;
        for (int64_t j = 0; j < c->g; j++) {
            int64_t h = kh * c->g + j;
            att_load_row(c, row + h * hd, c->qn, b, q);
            for (int64_t i = 0; i < n; i++)
                s[i] = c->scale * dot_row(q, K + i * hd, hd);
            if (c->cap > 0)
                softcap_row(s, NULL, c->cap, n);
            softmax_row(s, n, n);
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int64_t i = 0; i < n; i++)
                for (int64_t k = 0; k < hd; k++)
                    o[k] += s[i] * V[i * hd + k];
            memcpy(c->y + b * c->d + h * hd, o, (size_t)hd * sizeof(float));
        }
    }
    free(s);
}

/* The rows' places (e->place, B of them) checked against the window T: their last
 * position + 1. */
static int64_t dec_places(const rt_exec *e, int64_t B, int64_t T)
{
    if (!e->place || !e->kv || e->kv_T != T || e->kv_seq < 0)
        rt_die("attention decode: places %p, cache %p, window %lld against %lld, %lld floats "
               "a sequence", (const void *)e->place, (void *)e->kv, (long long)e->kv_T,
               (long long)T, (long long)e->kv_seq);
    int64_t most = 0;
    for (int64_t b = 0; b < B; b++) {
        if (e->place[b] < 0)
            rt_die("attention decode: row %lld's place %d", (long long)b, (int)e->place[b]);
        most = e->place[b] % T + 1 > most ? e->place[b] % T + 1 : most;
    }
    return most;
}

void rt_attention_decode(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                         float *y, int64_t kv_off, int64_t B, int64_t T, int64_t d, int64_t H,
                         int64_t KV, int causal, int64_t window, float theta, float factor,
                         float low, float high, int64_t orig, const float *ext, float scale,
                         float softcap)
{
    if (!causal)
        rt_die("attention decode: not causal");
    int64_t most = dec_places(e, B, T);
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->attention_decode(e, qkv, qn, kn, y, kv_off, B, T, d, H, KV, window, theta,
                                    factor, low, high, orig, ext, scale, softcap);
        return;
    }
    if (B <= 0)
        return;
    dec_ctx x = {.c = att_setup(T, d, H, KV, 1), .kv = e->kv + kv_off, .place = e->place,
                 .seq = e->kv_seq, .most = most};
    att_options(&x.c, qn, kn, window, theta, factor, low, high, orig, ext, scale, softcap,
                e->place, B);
    x.c.qkv = qkv;
    x.c.y = y;
    rt_pool_run(e->rt, B * KV, 1, dec_kv_task, &x);   /* (all rows' keys before any query) */
    rt_pool_run(e->rt, B * KV, 1, dec_q_task, &x);
    free((void *)x.c.cos);
}

void rt_pos_row_add(rt_exec *e, const float *x, const float *w, float *y, int64_t B, int64_t d)
{
    if (!e->place || e->kv_T <= 0)
        rt_die("pos_row_add: places %p, window %lld", (const void *)e->place, (long long)e->kv_T);
    if (e->dev) { /* on a GPU: cuda_ops.c */
        RT_GPU(e)->pos_row_add(e, x, w, y, B, d);
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        const float *r = w + e->place[b] % e->kv_T * d;
        for (int64_t i = 0; i < d; i++)
            y[b * d + i] = x[b * d + i] + r[i];
    }
}

void rt_attention_ext_bwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                          const float *lse, const float *y, const float *dy, float *dqkv,
                          float *dqn, float *dkn, int64_t B, int64_t T, int64_t d, int64_t H,
                          int64_t KV, int causal, int64_t window, float theta, float factor,
                          float low, float high, int64_t orig, const float *ext, float scale,
                          float softcap, const int32_t *pos)
{
    if (e->dev) { /* on a GPU: cuda_ops.c */
        if (!RT_GPU(e)->attention_ext_bwd)
            rt_fail("attention with kv_heads, rope, qk_norm, a window, a scale or a soft-cap has "
                    "no GPU kernel in this build: run it with --device cpu");
        RT_GPU(e)->attention_ext_bwd(e, qkv, qn, kn, lse, y, dy, dqkv, dqn, dkn, B, T, d, H, KV,
                                     causal, window, theta, factor, low, high, orig, ext, scale,
                                     softcap, pos);
        return;
    }
    if (B <= 0 || T <= 0 || d <= 0)
        return;
    att_ctx c = att_setup(T, d, H, KV, causal);
    att_options(&c, qn, kn, window, theta, factor, low, high, orig, ext, scale, softcap, NULL, T);
    att_positions(&c, pos, B);
    c.qkv = qkv;
    c.plse = lse;
    c.py = y;
    c.dy = dy;
    c.dqkv = dqkv;
    /* qk_norm: each item's weight gradients, added up in item order after the run (the
     * same bits whatever the thread count) */
    if (qn && (dqn || dkn) && !(c.part = calloc((size_t)(B * KV * 2 * c.hd), sizeof(float))))
        rt_fail("out of memory allocating qk_norm's gradient partials");
    rt_pool_run(e->rt, B * KV, 1, att_bwd_task, &c);
    for (int64_t j = 0; c.part && j < 2 * c.hd; j++) {
        double s = 0;
        for (int64_t it = 0; it < B * KV; it++)
            s += c.part[it * 2 * c.hd + j];
        float *dw = j < c.hd ? dqn : dkn;
        if (dw)
            dw[j % c.hd] += (float)s;
    }
    free(c.part);
    att_done(&c);
}

/* ---- embedding ----------------------------------------------------------------- */

/* Columns of dw per task of the backward: one 64-byte line, so no two threads write
 * the same line. */
#define EMB_CG 16

typedef struct {
    const int32_t *idx;        /* [rows] */
    const float *w;            /* [V, dim] (forward) */
    float *out;                /* [rows, dim] (forward) */
    const float *dout;         /* [rows, dim] (backward) */
    float *dw;                 /* [V, dim] (backward) */
    int64_t rows, V, dim;
    _Atomic int64_t bad;       /* first row whose index is out of range, or rows */
} emb_ctx;

static void note_bad(emb_ctx *c, int64_t r)
{
    int64_t old = atomic_load(&c->bad);
    while (r < old && !atomic_compare_exchange_weak(&c->bad, &old, r))
        ;
}

static void emb_fwd_task(void *ctx, int64_t lo, int64_t hi)
{
    emb_ctx *c = ctx;
    size_t bytes = (size_t)c->dim * sizeof(float);
    for (int64_t r = lo; r < hi; r++) {
        int32_t t = c->idx[r];
        if (t < 0 || t >= c->V) {
            note_bad(c, r);
            continue;
        }
        memcpy(c->out + r * c->dim, c->w + (int64_t)t * c->dim, bytes);
    }
}

/* Column groups [lo, hi): every row in order, so rows with the same index are added
 * in row order whatever the thread count. */
static void emb_bwd_task(void *ctx, int64_t lo, int64_t hi)
{
    emb_ctx *c = ctx;
    int64_t dim = c->dim, j0 = lo * EMB_CG, j1 = hi * EMB_CG < dim ? hi * EMB_CG : dim;
    for (int64_t r = 0; r < c->rows; r++) {
        int32_t t = c->idx[r];
        if (t < 0 || t >= c->V) {
            note_bad(c, r);
            continue;
        }
        float *restrict dw = c->dw + (int64_t)t * dim;
        const float *restrict g = c->dout + r * dim;
        for (int64_t j = j0; j < j1; j++)
            dw[j] += g[j];
    }
}

static void emb_check(emb_ctx *c)
{
    int64_t bad = atomic_load(&c->bad);
    if (bad < c->rows)
        rt_fail("embedding: index %d at row %lld out of range [0, %lld)", (int)c->idx[bad],
                (long long)bad, (long long)c->V);
}

void rt_embedding_fwd(rt_exec *e, const int32_t *idx, const float *w, float *out, int64_t rows,
                      int64_t V, int64_t dim)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->embedding_fwd(e, idx, w, out, rows, V, dim);
        return;
    }
    if (rows <= 0 || dim <= 0)
        return;
    emb_ctx c = {.idx = idx, .w = w, .out = out, .rows = rows, .V = V, .dim = dim, .bad = rows};
    int64_t grain = 32768 / dim;
    rt_pool_run(e->rt, rows, grain < 1 ? 1 : grain, emb_fwd_task, &c);
    emb_check(&c);
}

void rt_embedding_bwd(rt_exec *e, const int32_t *idx, const float *dout, float *dw, int64_t rows,
                      int64_t V, int64_t dim)
{
    if (e->dev) { /* on a GPU: cuda_ops.c, cuda_blas.c */
        RT_GPU(e)->embedding_bwd(e, idx, dout, dw, rows, V, dim);
        return;
    }
    if (rows <= 0 || dim <= 0)
        return;
    emb_ctx c = {.idx = idx, .dout = dout, .dw = dw, .rows = rows, .V = V, .dim = dim,
                 .bad = rows};
    /* about 32K elements a task at least */
    int64_t groups = (dim + EMB_CG - 1) / EMB_CG, grain = 32768 / (rows * EMB_CG);
    rt_pool_run(e->rt, groups, grain < 1 ? 1 : grain, emb_bwd_task, &c);
    emb_check(&c);
}
