/* moe.cuh: the mixture-of-experts layer's kernels, the twins of runtime/moe.c's calls
 * (their host side is runtime/cuda_moe.c). A token's k copies are grouped by expert
 * over the batch, in token order within a group; the integers (each copy's expert and
 * row, each group's first row) are held in fp32, as on the CPU. The groups' products
 * read the group offsets on the device, so no group size travels to the host and a
 * step stays one CUDA graph: act_t activations, fp32 weights, float sums; on the tensor
 * cores with 16-bit activations (the weights rounded to 16 bits as they load, the
 * values the parameter's 16-bit copy holds), tiled SIMT products in fp32. Shapes are
 * runtime arguments. */

#define RT_MOE_TILE 64   /* a GEMM block's tile of C: 64 x 64, 4 x 4 a thread */
#define RT_MOE_MAX_K 64  /* top_k at most (trainc_rt.h's) */
#define RT_MOE_BK 16     /* the inner dimension's step through shared memory */

/* copy j of token t: its expert, its row of the gathered buffers */
__device__ __forceinline__ int64_t rt_moe_expert(const float *idx, int64_t k, int64_t t, int64_t j)
{
    return (int64_t)idx[t * 2 * k + j];
}
__device__ __forceinline__ int64_t rt_moe_row(const float *idx, int64_t k, int64_t t, int64_t j)
{
    return (int64_t)idx[t * 2 * k + k + j];
}

/* The group that holds row r: the last g with offs[g] <= r (an empty group's first row
 * is its successor's) */
__device__ __forceinline__ int64_t rt_moe_group_of(const float *offs, int64_t E, int64_t r)
{
    int64_t lo = 0, hi = E - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if ((int64_t)offs[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* ---- routing ------------------------------------------------------------------------- */

/* p [E] the router's logits, in place their softmax; the k largest (the lower expert on a
 * tie) into ix [k] and their probabilities into g [k], over their sum with norm. The
 * arithmetic of moe.c's topk_task. */
__device__ void rt_moe_topk(float *p, float *g, float *ix, int64_t E, int64_t k, int norm)
{
    float mx = p[0];
    for (int64_t i = 1; i < E; i++)
        mx = p[i] > mx ? p[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < E; i++)
        sum += (p[i] = expf(p[i] - mx));
    for (int64_t i = 0; i < E; i++)
        p[i] = (float)(p[i] / sum);
    double chosen = 0.0;
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < E; i++) {
            bool taken = false;
            for (int64_t m = 0; m < j && !taken; m++)
                taken = (int64_t)ix[m] == i;
            if (!taken && (best < 0 || p[i] > p[best]))
                best = i;
        }
        ix[j] = (float)best;
        g[j] = p[best];
        chosen += p[best];
    }
    for (int64_t j = 0; j < k && norm; j++)
        g[j] = (float)(g[j] / chosen);
}

/* Launch: grid (cdiv(n, 128)), block 128: rt_moe_topk on probs[t] (the router's logits,
 * rt_moe_logits's), a thread a token: gate[t], idx[t]'s experts */
extern "C" __global__ void __launch_bounds__(128)
rt_moe_route(float *probs, float *gate, float *idx, int64_t n, int64_t E, int64_t k, int norm)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n)
        rt_moe_topk(probs + t * E, gate + t * k, idx + t * 2 * k, E, k, norm);
}

/* Launch: grid (E), block 256: cnt[e] = how many of the n k copies go to expert e. */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_count(const float *idx, int *cnt, int64_t n, int64_t k)
{
    const int64_t e = blockIdx.x;
    double c = 0.0;
    for (int64_t q = threadIdx.x; q < n * k; q += blockDim.x)
        c += rt_moe_expert(idx, k, q / k, q % k) == e;
    const double total = rt_block_sum(c);
    if (threadIdx.x == 0)
        cnt[e] = (int)total;
}

/* Launch: grid (E), block 256.
 *   offs[e] = cnt[0] + ... + cnt[e - 1]   (offs[E] the copies in all)
 *   each copy of expert e: row offs[e] + how many of e's copies come before it */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_rows(float *idx, float *offs, const int *cnt, int64_t n, int64_t E, int64_t k)
{
    __shared__ int tot[8];
    const int64_t e = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t base = 0;
    for (int64_t x = 0; x < e; x++)
        base += cnt[x];
    if (threadIdx.x == 0) {
        offs[e] = (float)base;
        if (e == E - 1)
            offs[E] = (float)(base + cnt[e]);
    }
    for (int64_t q0 = 0; q0 < n * k; q0 += 256) {
        const int64_t q = q0 + threadIdx.x;
        const bool mine = q < n * k && rt_moe_expert(idx, k, q / k, q % k) == e;
        const unsigned b = __ballot_sync(0xffffffffu, mine);
        if (lane == 0)
            tot[warp] = __popc(b);
        __syncthreads();
        int before = __popc(b & ((1u << lane) - 1u)), all = 0;
        for (int w = 0; w < 8; w++) {
            before += w < warp ? tot[w] : 0;
            all += tot[w];
        }
        if (mine)
            idx[q / k * 2 * k + k + q % k] = (float)(base + before);
        base += all;
        __syncthreads();
    }
}

/* ---- the load-balancing loss (over the L layers that have it) --------------------------- */

/* Launch: grid (E), block 256: this layer's row of the loss's statistics,
 *   row[e] = offs[e + 1] - offs[e] (the copies of e), row[E + e] = sum_t probs[t, e]
 * (double sum) */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_stats(const float *probs, const float *offs, float *row, int64_t n, int64_t E)
{
    const int64_t e = blockIdx.x;
    double s = 0.0;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x)
        s += probs[t * E + e];
    s = rt_block_sum(s);
    if (threadIdx.x == 0) {
        row[e] = offs[e + 1] - offs[e];
        row[E + e] = (float)s;
    }
}

/* Launch: grid 1, block 32 (thread 0), after the loss. With F_e and P_e the layers'
 * counts and summed probabilities of e over the L n tokens (moe.c's rt_moe_aux):
 *   stats->loss_sum += coef E sum_e F_e P_e terms   (terms: the host's count, or under
 *                                                    ignore_index the device's, st->terms)
 *   agrad[e] = coef E / (L n) F_e w      (w: the pass's gradient scale times its rows) */
extern "C" __global__ void __launch_bounds__(32)
rt_moe_aux(const float *stats, float *agrad, int64_t L, int64_t n, int64_t E, float coef, double w,
           double terms, rt_cu_stat *st)
{
    if (threadIdx.x != 0)
        return;
    const double rows = (double)L * (double)n, scale = (double)coef * (double)E / rows * w;
    double aux = 0.0;
    for (int64_t x = 0; x < E; x++) {
        double f = 0.0, p = 0.0;
        for (int64_t l = 0; l < L; l++) {
            f += stats[l * 2 * E + x];
            p += stats[l * 2 * E + E + x];
        }
        aux += f / rows * (p / rows);
        agrad[x] = (float)(scale * (f / rows));
    }
    st->loss_sum += (double)coef * (double)E * aux * (terms + (double)st->terms);
}

/* ---- copies gathered and summed ------------------------------------------------------- */

/* Launch: grid (min(n, many), grid-stride over tokens), block 256:
 * xg[row(t, j)] = x[t] for each of t's k copies. */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_gather(const act_t *x, const float *idx, act_t *xg, int64_t n, int64_t d, int64_t k)
{
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x)
        for (int64_t j = 0; j < k; j++) {
            act_t *dst = xg + rt_moe_row(idx, k, t, j) * d;
            for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
                dst[i] = x[t * d + i];
        }
}

/* Launch: grid (min(n, many), grid-stride over tokens), block 256:
 * y[t] = sum_j w[t, j] src[row(t, j)], j in order, float (w NULL: weights 1). */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_sum(const act_t *src, const float *idx, const float *w, act_t *y, int64_t n, int64_t d,
           int64_t k)
{
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x)
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
            float s = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                const float v = rt_ld(src + rt_moe_row(idx, k, t, j) * d + i);
                const float wj = w ? w[t * k + j] : 1.0f;
                s = j ? s + wj * v : wj * v;
            }
            rt_st(y + t * d + i, s);
        }
}

/* ---- the backward's per-token parts --------------------------------------------------- */

/* Launch: grid (min(n, many), grid-stride over tokens), block 256. For each copy (t, j)
 * at row p, in order (gate_task's arithmetic):
 *   dgate[t, j] = sum_i da[p, i] a[p, i]   (double sum; da still G W, unweighted)
 *   da[p] *= gate[t, j];  g[p] *= gate[t, j] */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_gate_grad(const act_t *a, const float *gate, const float *idx, act_t *da, act_t *g,
                 float *dgate, int64_t n, int64_t d, int64_t hid, int64_t k)
{
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x)
        for (int64_t j = 0; j < k; j++) {
            const int64_t p = rt_moe_row(idx, k, t, j);
            const float w = gate[t * k + j];
            act_t *dap = da + p * hid, *gp = g + p * d;
            double s = 0.0;
            for (int64_t i = threadIdx.x; i < hid; i += blockDim.x)
                s += (double)rt_ld(dap + i) * rt_ld(a + p * hid + i);
            const double dot = rt_block_sum(s);
            if (threadIdx.x == 0)
                dgate[t * k + j] = (float)dot;
            for (int64_t i = threadIdx.x; i < hid; i += blockDim.x)
                rt_st(dap + i, rt_ld(dap + i) * w);
            for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
                rt_st(gp + i, rt_ld(gp + i) * w);
            __syncthreads();
        }
}

/* The router logits' gradient of token t from its gate weights' (router_task's
 * arithmetic): dp through the renormalization (norm), then the softmax; the
 * load-balancing loss's agrad on every expert (NULL: none) */
__device__ void rt_moe_router_grad(const float *p, const float *g, const float *w,
                                   const float *idx, const float *agrad, float *dl, int64_t t,
                                   int64_t E, int64_t k, int norm)
{
    double chosen = 0.0, wg = 0.0, pdp = 0.0, dp[RT_MOE_MAX_K];
    for (int64_t j = 0; j < k; j++) {
        chosen += p[rt_moe_expert(idx, k, t, j)];
        wg += (double)w[j] * g[j];
    }
    for (int64_t j = 0; j < k; j++) {
        dp[j] = norm ? (g[j] - wg) / chosen : g[j];
        pdp += p[rt_moe_expert(idx, k, t, j)] * dp[j];
    }
    double pa = 0.0;
    for (int64_t i = 0; agrad && i < E; i++)
        pa += (double)p[i] * agrad[i];
    for (int64_t i = 0; i < E; i++)
        dl[i] = (float)(p[i] * ((agrad ? agrad[i] : 0.0) - pdp - pa));
    for (int64_t j = 0; j < k; j++) {
        const int64_t x = rt_moe_expert(idx, k, t, j);
        dl[x] += (float)(p[x] * dp[j]);
    }
}

/* Launch: grid (cdiv(n, 128)), block 128: dl[t] = rt_moe_router_grad, a thread a token
 * (agrad the load-balancing loss's, or NULL) */
extern "C" __global__ void __launch_bounds__(128)
rt_moe_router_grads(const float *probs, const float *gate, const float *idx, const float *dgate,
                    const float *agrad, float *dl, int64_t n, int64_t E, int64_t k, int norm)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n)
        rt_moe_router_grad(probs + t * E, dgate + t * k, gate + t * k, idx, agrad, dl + t * E, t,
                           E, k, norm);
}

/* ---- the groups' GEMMs ---------------------------------------------------------------- */

/* A thread's 4 x 4 of a tile's sums over the 16 k of the step in shared memory: rows
 * r0 .. r0 + 3 of A's tile, columns c0 .. c0 + 3 of B's, in k order */
__device__ __forceinline__ void moe_tile_fma(const float (*As)[RT_MOE_TILE],
                                             const float (*Bs)[RT_MOE_TILE], float (*acc)[4], int r0,
                                             int c0)
{
#pragma unroll
    for (int kk = 0; kk < RT_MOE_BK; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                acc[i][j] += As[kk][r0 + i] * Bs[kk][c0 + j];
}

/* acc = the 64 x 64 tile (rows r0 .., columns n0 ..) of A W^T (TRANS_W: W [N, K]) or A W
 * (W [K, N]), A [.., K] read below row r1, 4 x 4 a thread, K in steps of 16 through
 * shared memory (As, Ws), float sums in k order; every thread of the block calls it */
template <bool TRANS_W, typename TA>
__device__ __forceinline__ void moe_tile(const TA *A, const float *W, int64_t r0, int64_t r1,
                                         int64_t n0, int64_t N, int64_t K, float (*acc)[4],
                                         float (*As)[RT_MOE_TILE], float (*Ws)[RT_MOE_TILE])
{
    const int tr = (threadIdx.x >> 4) * 4, tn = (threadIdx.x & 15) * 4;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += RT_MOE_BK) {
        for (int q = threadIdx.x; q < RT_MOE_TILE * RT_MOE_BK; q += blockDim.x) {
            const int rr = q / RT_MOE_BK, kk = q % RT_MOE_BK;
            const int64_t r = r0 + rr, kx = k0 + kk;
            As[kk][rr] = r < r1 && kx < K ? rt_ld(A + r * K + kx) : 0.0f;
            /* W's loads along its contiguous axis */
            const int nn = TRANS_W ? q / RT_MOE_BK : q % RT_MOE_TILE;
            const int kw = TRANS_W ? q % RT_MOE_BK : q / RT_MOE_TILE;
            const int64_t nx = n0 + nn, kwx = k0 + kw;
            Ws[kw][nn] = nx < N && kwx < K ? (TRANS_W ? W[nx * K + kwx] : W[kwx * N + nx]) : 0.0f;
        }
        __syncthreads();
        moe_tile_fma(As, Ws, acc, tr, tn);
        __syncthreads();
    }
}

/* C[r, :] = A[r, :] op(W_g) for the rows r of each group g: W_g = w + g N K, [N, K]
 * transposed (TRANS_W: C = A W_g^T, the forward's) or [K, N] as it is (the input
 * gradient's). A [R, K], C [R, N], rows contiguous. A block computes a 64 x 64 tile
 * of C (moe_tile); a tile whose rows span several groups runs once per group, keeping
 * that group's rows. Launch: grid (cdiv(R, 64), cdiv(N, 64)), block 256. */
template <bool TRANS_W>
__device__ __forceinline__ void moe_gemm_rows(const act_t *A, const float *w, act_t *C,
                                              const float *offs, int64_t R, int64_t N,
                                              int64_t K, int64_t E)
{
    __shared__ float As[RT_MOE_BK][RT_MOE_TILE], Ws[RT_MOE_BK][RT_MOE_TILE];
    const int64_t r0 = (int64_t)blockIdx.x * RT_MOE_TILE, n0 = (int64_t)blockIdx.y * RT_MOE_TILE;
    const int64_t r1 = r0 + RT_MOE_TILE < R ? r0 + RT_MOE_TILE : R;
    const int tr = (threadIdx.x >> 4) * 4, tn = (threadIdx.x & 15) * 4;
    for (int64_t g = rt_moe_group_of(offs, E, r0); g < E && (int64_t)offs[g] < r1; g++) {
        const int64_t g0 = (int64_t)offs[g] > r0 ? (int64_t)offs[g] : r0;
        const int64_t g1 = (int64_t)offs[g + 1] < r1 ? (int64_t)offs[g + 1] : r1;
        if (g0 >= g1)
            continue;
        float acc[4][4];
        moe_tile<TRANS_W>(A, w + g * N * K, r0, r1, n0, N, K, acc, As, Ws);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                const int64_t r = r0 + tr + i, nx = n0 + tn + j;
                if (r >= g0 && r < g1 && nx < N)
                    rt_st(C + r * N + nx, acc[i][j]);
            }
    }
}

/* ---- the router's products (one weight, fp32: SIMT in every precision) ---------------- */

/* Launch: grid (cdiv(n, 64), cdiv(E, 64)), block 256.
 *   probs[t, e] = x[t] . wr[e]        (the router's logits, float sums in d order) */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_logits(const act_t *x, const float *wr, float *probs, int64_t n, int64_t d, int64_t E)
{
    __shared__ float As[RT_MOE_BK][RT_MOE_TILE], Ws[RT_MOE_BK][RT_MOE_TILE];
    const int64_t r0 = (int64_t)blockIdx.x * RT_MOE_TILE, e0 = (int64_t)blockIdx.y * RT_MOE_TILE;
    const int tr = (threadIdx.x >> 4) * 4, tn = (threadIdx.x & 15) * 4;
    float acc[4][4];
    moe_tile<true>(x, wr, r0, n, e0, E, d, acc, As, Ws);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int64_t t = r0 + tr + i, e = e0 + tn + j;
            if (t < n && e < E)
                probs[t * E + e] = acc[i][j];
        }
}

/* Launch: grid (cdiv(n, 64), cdiv(d, 64)), block 256.
 *   dx[t, i] = sum_j dxg[row(t, j), i] (in j order) + sum_e dl[t, e] wr[e, i] */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_token_grad(const act_t *dxg, const float *wr, const float *idx, const float *dl,
                  act_t *dx, int64_t n, int64_t d, int64_t E, int64_t k)
{
    __shared__ float As[RT_MOE_BK][RT_MOE_TILE], Ws[RT_MOE_BK][RT_MOE_TILE];
    const int64_t r0 = (int64_t)blockIdx.x * RT_MOE_TILE, i0 = (int64_t)blockIdx.y * RT_MOE_TILE;
    const int tr = (threadIdx.x >> 4) * 4, tn = (threadIdx.x & 15) * 4;
    float acc[4][4];
    moe_tile<false>(dl, wr, r0, n, i0, d, E, acc, As, Ws);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int64_t t = r0 + tr + a, i = i0 + tn + b;
            if (t >= n || i >= d)
                continue;
            float s = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                const float v = rt_ld(dxg + rt_moe_row(idx, k, t, j) * d + i);
                s = j ? s + v : v;
            }
            rt_st(dx + t * d + i, s + acc[a][b]);
        }
}

#if !defined(RT_ACT_BF16) && !defined(RT_ACT_F16)
extern "C" __global__ void __launch_bounds__(256)
rt_moe_gemm_nt(const act_t *A, const float *w, act_t *C, const float *offs, int64_t R,
               int64_t N, int64_t K, int64_t E)
{
    moe_gemm_rows<true>(A, w, C, offs, R, N, K, E);
}

extern "C" __global__ void __launch_bounds__(256)
rt_moe_gemm_nn(const act_t *A, const float *w, act_t *C, const float *offs, int64_t R,
               int64_t N, int64_t K, int64_t E)
{
    moe_gemm_rows<false>(A, w, C, offs, R, N, K, E);
}
#endif

/* The weights' gradient: C_g[m, n] += sum_{r in g} A[r, m] B[r, n], C_g = c + g M N,
 * group g = blockIdx.z its rows [offs[g], offs[g + 1]) (offs NULL: one group, all R
 * rows). A block a 64 x 64 tile of C_g, 4 x 4 a thread, the rows in steps of 16, float
 * sums in row order. Launch: grid (cdiv(N, 64), cdiv(M, 64), groups), block 256. */
template <typename TA>
__device__ __forceinline__ void moe_gemm_wgrad(const TA *A, const act_t *B, float *c,
                                               const float *offs, int64_t R, int64_t M,
                                               int64_t N)
{
    __shared__ float As[RT_MOE_BK][RT_MOE_TILE], Bs[RT_MOE_BK][RT_MOE_TILE];
    const int64_t g = blockIdx.z;
    const int64_t q0 = offs ? (int64_t)offs[g] : 0, q1 = offs ? (int64_t)offs[g + 1] : R;
    const int64_t n0 = (int64_t)blockIdx.x * RT_MOE_TILE, m0 = (int64_t)blockIdx.y * RT_MOE_TILE;
    const int tm = (threadIdx.x >> 4) * 4, tn = (threadIdx.x & 15) * 4;
    float acc[4][4] = {};
    for (int64_t r0 = q0; r0 < q1; r0 += RT_MOE_BK) {
        for (int q = threadIdx.x; q < RT_MOE_TILE * RT_MOE_BK; q += blockDim.x) {
            const int kk = q / RT_MOE_TILE, xx = q % RT_MOE_TILE;
            const int64_t r = r0 + kk, m = m0 + xx, nx = n0 + xx;
            As[kk][xx] = r < q1 && m < M ? rt_ld(A + r * M + m) : 0.0f;
            Bs[kk][xx] = r < q1 && nx < N ? rt_ld(B + r * N + nx) : 0.0f;
        }
        __syncthreads();
        moe_tile_fma(As, Bs, acc, tm, tn);
        __syncthreads();
    }
    float *C = c + g * M * N;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int64_t m = m0 + tm + i, nx = n0 + tn + j;
            if (m < M && nx < N)
                C[m * N + nx] += acc[i][j];
        }
}

#if !defined(RT_ACT_BF16) && !defined(RT_ACT_F16)
extern "C" __global__ void __launch_bounds__(256)
rt_moe_gemm_tn(const act_t *A, const act_t *B, float *c, const float *offs, int64_t R, int64_t M,
               int64_t N)
{
    moe_gemm_wgrad(A, B, c, offs, R, M, N);
}
#endif

/* the router's weight gradient: A the logits' gradient, fp32 */
extern "C" __global__ void __launch_bounds__(256)
rt_moe_gemm_tn_f32a(const float *A, const act_t *B, float *c, const float *offs, int64_t R,
                    int64_t M, int64_t N)
{
    moe_gemm_wgrad(A, B, c, offs, R, M, N);
}

#if defined(RT_ACT_BF16) || defined(RT_ACT_F16)
/* ---- the groups' GEMMs on the tensor cores (16-bit activations) -------------------------
 * The same products as the SIMT ones above (the same names, the same arguments), each
 * block an RT_TG_M x RT_TG_N tile through common.cuh's rt_tc_mma: both operands in
 * shared memory as 16-bit rows along the inner dimension, chunks of RT_TG_K, fp32
 * sums in the tensor cores' order (within rounding of the CPU's, as cuBLASLt's are). */

/* Row tile t of the groups (each group's rows cut into tiles of RT_TG_M from its first
 * row, group after group: at most cdiv(R, RT_TG_M) + E of them): its group and rows
 * [r0, r1); false past the last. Every thread of a block walks the offsets alike. */
__device__ __forceinline__ bool moe_row_tile(const float *offs, int64_t E, int64_t t, int64_t *g,
                                             int64_t *r0, int64_t *r1)
{
    for (int64_t e = 0; e < E; e++) {
        const int64_t a = (int64_t)offs[e], b = (int64_t)offs[e + 1];
        const int64_t n = (b - a + RT_TG_M - 1) / RT_TG_M;
        if (t < n) {
            *g = e;
            *r0 = a + t * RT_TG_M;
            *r1 = *r0 + RT_TG_M < b ? *r0 + RT_TG_M : b;
            return true;
        }
        t -= n;
    }
    return false;
}

/* C[r, :] = A[r, :] op(W_g) as moe_gemm_rows: rows of A (the group's, RT_TG_M of them)
 * times RT_TG_N columns of W_g, which loads along its contiguous axis (K for TRANS_W's
 * [N, K], N for [K, N]). Launch: grid (cdiv(R, RT_TG_M) + E, cdiv(N, RT_TG_N)), block 128. */
template <bool TRANS_W>
__device__ __forceinline__ void moe_tc_rows(const act_t *A, const float *w, act_t *C,
                                            const float *offs, int64_t N, int64_t K, int64_t E)
{
    __shared__ __align__(16) unsigned short as[RT_TG_M][RT_TG_K + 8];
    __shared__ __align__(16) unsigned short bs[RT_TG_N][RT_TG_K + 8];
    int64_t g, r0, r1;
    if (!moe_row_tile(offs, E, blockIdx.x, &g, &r0, &r1))
        return;   /* (the whole block) */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    const int64_t n0 = (int64_t)blockIdx.y * RT_TG_N;
    const unsigned short *a16 = (const unsigned short *)A;
    const float *W = w + g * N * K;
    float acc[2][8][4];
    rt_tc_clear(acc);
    for (int64_t k0 = 0; k0 < K; k0 += RT_TG_K) {
        __syncthreads();   /* the last chunk's readers are done */
        for (int e = tid; e < RT_TG_M * RT_TG_K; e += 128) {
            const int r = e / RT_TG_K, c = e % RT_TG_K;
            const int64_t row = r0 + r, kx = k0 + c;
            as[r][c] = row < r1 && kx < K ? a16[row * K + kx] : (unsigned short)0;
        }
        for (int e = tid; e < RT_TG_N * RT_TG_K; e += 128) {
            const int f = TRANS_W ? e / RT_TG_K : e % RT_TG_N;
            const int c = TRANS_W ? e % RT_TG_K : e / RT_TG_N;
            const int64_t nx = n0 + f, kx = k0 + c;
            const float v = nx < N && kx < K ? (TRANS_W ? W[nx * K + kx] : W[kx * N + nx]) : 0.0f;
            bs[f][c] = rt_float_act16(v);
        }
        __syncthreads();
        rt_tc_mma(acc, as, bs, wm, wn, lane);
    }
    rt_tc_each(acc, wm, wn, lane, [&](int m, int n, float v) {
        const int64_t row = r0 + m, col = n0 + n;
        if (row < r1 && col < N)
            rt_st(C + row * N + col, v);
    });
}

extern "C" __global__ void __launch_bounds__(128)
rt_moe_gemm_nt(const act_t *A, const float *w, act_t *C, const float *offs, int64_t R,
               int64_t N, int64_t K, int64_t E)
{
    moe_tc_rows<true>(A, w, C, offs, N, K, E);
}

extern "C" __global__ void __launch_bounds__(128)
rt_moe_gemm_nn(const act_t *A, const float *w, act_t *C, const float *offs, int64_t R,
               int64_t N, int64_t K, int64_t E)
{
    moe_tc_rows<false>(A, w, C, offs, N, K, E);
}

/* The weights' gradient as moe_gemm_wgrad (group g = blockIdx.z, offs given): an
 * RT_TG_M x RT_TG_N tile of C_g over the group's rows in chunks of RT_TG_K, A's and B's
 * rows loaded along m and n and kept with the rows contiguous. Launch: grid (cdiv(N,
 * RT_TG_N), cdiv(M, RT_TG_M), groups), block 128. */
extern "C" __global__ void __launch_bounds__(128)
rt_moe_gemm_tn(const act_t *A, const act_t *B, float *c, const float *offs, int64_t R, int64_t M,
               int64_t N)
{
    __shared__ __align__(16) unsigned short as[RT_TG_M][RT_TG_K + 8];
    __shared__ __align__(16) unsigned short bs[RT_TG_N][RT_TG_K + 8];
    const int64_t g = blockIdx.z, q0 = (int64_t)offs[g], q1 = (int64_t)offs[g + 1];
    if (q0 >= q1)
        return;   /* no row: nothing to add */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    const int64_t n0 = (int64_t)blockIdx.x * RT_TG_N, m0 = (int64_t)blockIdx.y * RT_TG_M;
    const unsigned short *a16 = (const unsigned short *)A, *b16 = (const unsigned short *)B;
    float acc[2][8][4];
    rt_tc_clear(acc);
    for (int64_t r0 = q0; r0 < q1; r0 += RT_TG_K) {
        __syncthreads();
        for (int e = tid; e < RT_TG_M * RT_TG_K; e += 128) {
            const int x = e % RT_TG_M, q = e / RT_TG_M;
            const int64_t r = r0 + q, m = m0 + x;
            as[x][q] = r < q1 && m < M ? a16[r * M + m] : (unsigned short)0;
        }
        for (int e = tid; e < RT_TG_N * RT_TG_K; e += 128) {
            const int x = e % RT_TG_N, q = e / RT_TG_N;
            const int64_t r = r0 + q, nx = n0 + x;
            bs[x][q] = r < q1 && nx < N ? b16[r * N + nx] : (unsigned short)0;
        }
        __syncthreads();
        rt_tc_mma(acc, as, bs, wm, wn, lane);
    }
    float *C = c + g * M * N;
    rt_tc_each(acc, wm, wn, lane, [&](int mi, int ni, float v) {
        const int64_t m = m0 + mi, nx = n0 + ni;
        if (m < M && nx < N)
            C[m * N + nx] += v;
    });
}
#endif
