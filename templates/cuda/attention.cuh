/* attention.cuh: causal (or full) multi-head self-attention without the T x T
 * probabilities in memory (flash attention; twins of rt_attention_fwd and
 * rt_attention_bwd in runtime/attention.c); T, the head width HD = d/H and CAUSAL are
 * compile-time constants.
 *
 *   qkv [B, T, 3d]: q, k, v side by side, head h at columns h*HD .. h*HD+HD-1 of each
 *   lse [B, H, T]:  log sum_j exp(s_ij) of each query row, s = q k^T * scale,
 *                   scale = 1/sqrt(HD), over the keys the row sees (j <= i if CAUSAL)
 *   y   [B, T, d]:  softmax(s) v, the heads side by side
 *
 * The forward keeps a running max and sum per query row while it goes over the keys a
 * tile at a time (online softmax) and writes y and lse; the backward recomputes each
 * probability as P_ij = exp(s_ij - lse_i) and needs D_i = dy_i . y_i (= sum_j dP_ij P_ij).
 *
 * A block works on one (batch row, head) pair and a tile of TL query rows (forward, dq)
 * or TL keys (dk, dv), bringing the other side's rows through shared memory TL at a
 * time; 256 threads. Shared tiles have rows of HD + 1 floats, so that threads reading
 * one column of different rows hit different banks. Everything adds in a fixed order:
 * the results do not change from run to run. No atomics: dq and dk/dv are two kernels. */

#define RT_ATT_THREADS 256
/* Query rows (and keys) per tile: 32, or fewer for wide heads so that the backward's
 * four row tiles and two TL x TL tiles fit in 48 KiB of static shared memory.
 * cuda_ops.c's att_tile() is the same rule (it only sets the grid: the kernels loop
 * over tiles whatever the grid). */
__host__ __device__ constexpr int rt_att_tile(int hd) { return hd > 128 ? 8 : hd > 64 ? 16 : 32; }

/* rows [0, n) of a TL x HD tile from rows of stride ld at src; rows [n, TL) set to 0 */
template <int TL, int HD>
__device__ __forceinline__ void att_load(float (*dst)[HD + 1], const act_t *src, int64_t ld, int n)
{
    for (int e = threadIdx.x; e < TL * HD; e += RT_ATT_THREADS) {
        int i = e / HD, c = e % HD;
        dst[i][c] = i < n ? rt_ld(src + i * ld + c) : 0.0f;
    }
}

/* Launch: grid (ceil(T / TL), H, B), 256 threads; block (x, h, b) takes the query tiles
 * x, x + gridDim.x, ...   For each tile of TL keys the tile's rows see:
 *   s_ij = scale * q_i . k_j (masked: -inf), m_i' = max(m_i, max_j s_ij),
 *   p_ij = exp(s_ij - m_i'), a_i = exp(m_i - m_i'), l_i = a_i l_i + sum_j p_ij,
 *   acc_i = a_i acc_i + sum_j p_ij v_j
 * then y_i = acc_i / l_i and lse_i = m_i + log l_i. One warp updates a row's m and l
 * (lane j: key j; TL <= 32). */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_fwd(const act_t *qkv, float *lse, act_t *y, int H)
{
    constexpr int TL = rt_att_tile(HD), NT = RT_ATT_THREADS, NW = NT / 32;
    constexpr int SE = (TL * TL + NT - 1) / NT;    /* scores per thread */
    constexpr int OUT = (TL * HD + NT - 1) / NT;   /* y entries per thread */
    static_assert(TL <= 32, "a warp holds a tile row");
    __shared__ float qs[TL][HD + 1];   /* the tile's queries */
    __shared__ float ks[TL][HD + 1];   /* TL keys */
    __shared__ float vs[TL][HD + 1];   /* their values */
    __shared__ float ps[TL][TL + 1];   /* scores, then p [query][key] */
    __shared__ float mrow[TL], lrow[TL], arow[TL];
    const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    float *L = lse + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD)), ninf = -rt_inf();
    for (int q0 = blockIdx.x * TL; q0 < T; q0 += gridDim.x * TL) {
        const int nq = T - q0 < TL ? T - q0 : TL;
        const int nkeys = CAUSAL ? (q0 + TL < T ? q0 + TL : T) : T;   /* keys the tile sees */
        __syncthreads();
        att_load<TL, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
        for (int i = threadIdx.x; i < TL; i += NT)
            mrow[i] = ninf, lrow[i] = 0.0f;
        float acc[OUT];
        for (int m = 0; m < OUT; m++)
            acc[m] = 0.0f;
        for (int k0 = 0; k0 < nkeys; k0 += TL) {
            const int nk = T - k0 < TL ? T - k0 : TL;
            __syncthreads();
            att_load<TL, HD>(ks, k + (int64_t)k0 * ld, ld, nk);
            att_load<TL, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
            __syncthreads();
            /* scores: entry e = threadIdx.x + m * NT is (e / TL, e % TL) */
            float s[SE];
            for (int m = 0; m < SE; m++)
                s[m] = 0.0f;
            for (int c = 0; c < HD; c++)
                for (int m = 0; m < SE; m++) {
                    int e = threadIdx.x + m * NT;
                    if (e < TL * TL)
                        s[m] += qs[e / TL][c] * ks[e % TL][c];
                }
            for (int m = 0; m < SE; m++) {
                int e = threadIdx.x + m * NT, i = e / TL, j = e % TL;
                if (e < TL * TL)
                    ps[i][j] = j >= nk || (CAUSAL && k0 + j > q0 + i) ? ninf : scale * s[m];
            }
            __syncthreads();
            /* the running max and sum, p in place of the scores */
            for (int i = warp; i < TL; i += NW) {
                const float sv = lane < TL ? ps[i][lane] : ninf, mold = mrow[i];
                const float mx = fmaxf(mold, rt_warp_max(sv));
                /* a row that has seen no key yet keeps m = -inf: p = 0, a = 1 */
                const float p = mx == ninf ? 0.0f : expf(sv - mx);
                const float a = mx == ninf ? 1.0f : expf(mold - mx);
                const float sum = (float)rt_warp_sum((double)p);
                if (lane < TL)
                    ps[i][lane] = p;
                if (lane == 0)
                    mrow[i] = mx, lrow[i] = a * lrow[i] + sum, arow[i] = a;
            }
            __syncthreads();
            /* acc = a acc + p v: entry e = threadIdx.x + m * NT is (e / HD, e % HD) */
            for (int m = 0; m < OUT; m++) {
                int e = threadIdx.x + m * NT;
                if (e < TL * HD)
                    acc[m] *= arow[e / HD];
            }
            for (int j = 0; j < TL; j++)
                for (int m = 0; m < OUT; m++) {
                    int e = threadIdx.x + m * NT;
                    if (e < TL * HD)
                        acc[m] += ps[e / HD][j] * vs[j][e % HD];
                }
        }
        for (int m = 0; m < OUT; m++) {
            int e = threadIdx.x + m * NT, i = e / HD, c = e % HD;
            if (e < TL * HD && i < nq)
                rt_st(y + ((int64_t)b * T + q0 + i) * d + (int64_t)h * HD + c, acc[m] / lrow[i]);
        }
        for (int i = threadIdx.x; i < nq; i += NT)
            L[q0 + i] = mrow[i] + logf(lrow[i]);
    }
}

#define RT_ATTENTION_FWD(T, HD, CAUSAL)                                                       \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_fwd_##T##_##HD##_##CAUSAL(const act_t *qkv, float *lse, act_t *y, int H) \
    {                                                                                         \
        attention_fwd<T, HD, CAUSAL>(qkv, lse, y, H);                                         \
    }

/* The block's TL x TL pairs (query i of the q tile, key j of the k tile), entry
 * e = threadIdx.x + m * NT being (e / TL, e % TL):
 *   s[m] = q_i . k_j   and   dp[m] = dy_i . v_j
 * over shared tiles of queries, keys, dy rows and values. */
template <int TL, int HD, int SE>
__device__ __forceinline__ void att_dots(float (*qs)[HD + 1], float (*ks)[HD + 1],
                                         float (*dys)[HD + 1], float (*vs)[HD + 1], float *s,
                                         float *dp)
{
    for (int m = 0; m < SE; m++)
        s[m] = dp[m] = 0.0f;
    for (int c = 0; c < HD; c++)
        for (int m = 0; m < SE; m++) {
            int e = threadIdx.x + m * RT_ATT_THREADS;
            if (e < TL * TL) {
                int i = e / TL, j = e % TL;
                s[m] += qs[i][c] * ks[j][c];
                dp[m] += dys[i][c] * vs[j][c];
            }
        }
}

/* Backward, first kernel: the query side.
 *
 * Launch: grid (ceil(T / TL), H, B), 256 threads; block (x, h, b) takes the query tiles
 * x, x + gridDim.x, ...
 *   D[b, h, i] = dy_i . y_i                     (in double, rounded; D: [B, H, T] scratch)
 *   P_ij = exp(scale q_i . k_j - lse_i),  dS_ij = P_ij (dy_i . v_j - D_i), 0 where masked
 *   dq_i = scale * sum_j dS_ij k_j               (into dqkv's q columns)
 * D goes to scratch for the second kernel. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_q(const act_t *qkv, const float *lse,
                                                const act_t *y, const act_t *dy, act_t *dqkv,
                                                float *D, int H)
{
    constexpr int TL = rt_att_tile(HD), NT = RT_ATT_THREADS, NW = NT / 32;
    constexpr int SE = (TL * TL + NT - 1) / NT;
    constexpr int OUT = (TL * HD + NT - 1) / NT;   /* dq entries per thread */
    __shared__ float qs[TL][HD + 1];
    __shared__ float dys[TL][HD + 1];   /* the tile's dy rows */
    __shared__ float ks[TL][HD + 1];
    __shared__ float vs[TL][HD + 1];
    __shared__ float ds[TL][TL + 1];    /* dS [query][key] */
    __shared__ float Lt[TL], Dt[TL];
    const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;   /* rows of stride d */
    const act_t *yh = y + (int64_t)b * T * d + (int64_t)h * HD;
    act_t *dq = dqkv + (int64_t)b * T * ld + (int64_t)h * HD;
    const float *Lh = lse + ((int64_t)b * H + h) * T;
    float *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int q0 = blockIdx.x * TL; q0 < T; q0 += gridDim.x * TL) {
        const int nq = T - q0 < TL ? T - q0 : TL;
        const int nkeys = CAUSAL ? (q0 + TL < T ? q0 + TL : T) : T;
        __syncthreads();
        att_load<TL, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
        att_load<TL, HD>(dys, dyh + (int64_t)q0 * d, d, nq);
        __syncthreads();
        /* D_i: warp w takes rows w, w + NW, ... */
        for (int i = warp; i < TL; i += NW) {
            double acc = 0.0;
            if (i < nq)
                for (int c = lane; c < HD; c += 32)
                    acc += (double)(dys[i][c] * rt_ld(yh + (int64_t)(q0 + i) * d + c));
            const float Di = (float)rt_warp_sum(acc);
            if (lane == 0) {
                Dt[i] = Di;
                Lt[i] = i < nq ? Lh[q0 + i] : 0.0f;
                if (i < nq)
                    Dh[q0 + i] = Di;
            }
        }
        float acc[OUT];
        for (int m = 0; m < OUT; m++)
            acc[m] = 0.0f;
        for (int k0 = 0; k0 < nkeys; k0 += TL) {
            const int nk = T - k0 < TL ? T - k0 : TL;
            __syncthreads();
            att_load<TL, HD>(ks, k + (int64_t)k0 * ld, ld, nk);
            att_load<TL, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
            __syncthreads();
            float s[SE], dp[SE];
            att_dots<TL, HD, SE>(qs, ks, dys, vs, s, dp);
            for (int m = 0; m < SE; m++) {
                int e = threadIdx.x + m * NT, i = e / TL, j = e % TL;
                if (e < TL * TL) {
                    bool masked = i >= nq || j >= nk || (CAUSAL && k0 + j > q0 + i);
                    ds[i][j] = masked ? 0.0f : expf(scale * s[m] - Lt[i]) * (dp[m] - Dt[i]);
                }
            }
            __syncthreads();
            for (int j = 0; j < TL; j++)
                for (int m = 0; m < OUT; m++) {
                    int e = threadIdx.x + m * NT;
                    if (e < TL * HD)
                        acc[m] += ds[e / HD][j] * ks[j][e % HD];
                }
        }
        for (int m = 0; m < OUT; m++) {
            int e = threadIdx.x + m * NT, i = e / HD, c = e % HD;
            if (e < TL * HD && i < nq)
                rt_st(dq + (int64_t)(q0 + i) * ld + c, scale * acc[m]);
        }
    }
}

/* Backward, second kernel: the key side, after the first (it reads D).
 *
 * Launch: grid (ceil(T / TL), H, B), 256 threads; block (x, h, b) takes the key tiles
 * x, x + gridDim.x, ...   Over the queries i that see key j (i >= j when CAUSAL):
 *   dv_j = sum_i P_ij dy_i
 *   dk_j = scale * sum_i dS_ij q_i,   P, dS as in the first kernel
 * into dqkv's v and k columns. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_kv(const act_t *qkv, const float *lse,
                                                 const act_t *dy, act_t *dqkv, const float *D,
                                                 int H)
{
    constexpr int TL = rt_att_tile(HD), NT = RT_ATT_THREADS;
    constexpr int SE = (TL * TL + NT - 1) / NT;
    constexpr int OUT = (TL * HD + NT - 1) / NT;   /* dk (and dv) entries per thread */
    __shared__ float ks[TL][HD + 1];    /* the tile's keys */
    __shared__ float vs[TL][HD + 1];    /* and values */
    __shared__ float qs[TL][HD + 1];
    __shared__ float dys[TL][HD + 1];
    __shared__ float ps[TL][TL + 1];    /* P [query][key] */
    __shared__ float ds[TL][TL + 1];    /* dS [query][key] */
    __shared__ float Lt[TL], Dt[TL];
    const int b = blockIdx.z, h = blockIdx.y;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;
    act_t *dk = dqkv + (int64_t)b * T * ld + d + (int64_t)h * HD, *dv = dk + d;
    const float *Lh = lse + ((int64_t)b * H + h) * T, *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int k0 = blockIdx.x * TL; k0 < T; k0 += gridDim.x * TL) {
        const int nk = T - k0 < TL ? T - k0 : TL;
        __syncthreads();
        att_load<TL, HD>(ks, k + (int64_t)k0 * ld, ld, nk);
        att_load<TL, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
        float accv[OUT], acck[OUT];
        for (int m = 0; m < OUT; m++)
            accv[m] = acck[m] = 0.0f;
        for (int q0 = CAUSAL ? k0 : 0; q0 < T; q0 += TL) {
            const int nq = T - q0 < TL ? T - q0 : TL;
            __syncthreads();
            att_load<TL, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
            att_load<TL, HD>(dys, dyh + (int64_t)q0 * d, d, nq);
            for (int i = threadIdx.x; i < TL; i += NT) {
                Lt[i] = i < nq ? Lh[q0 + i] : 0.0f;
                Dt[i] = i < nq ? Dh[q0 + i] : 0.0f;
            }
            __syncthreads();
            float s[SE], dp[SE];
            att_dots<TL, HD, SE>(qs, ks, dys, vs, s, dp);
            for (int m = 0; m < SE; m++) {
                int e = threadIdx.x + m * NT, i = e / TL, j = e % TL;
                if (e < TL * TL) {
                    bool masked = i >= nq || j >= nk || (CAUSAL && k0 + j > q0 + i);
                    float p = masked ? 0.0f : expf(scale * s[m] - Lt[i]);
                    ps[i][j] = p;
                    ds[i][j] = masked ? 0.0f : p * (dp[m] - Dt[i]);
                }
            }
            __syncthreads();
            /* entry e = threadIdx.x + m * NT is (key e / HD, column e % HD) */
            for (int i = 0; i < TL; i++)
                for (int m = 0; m < OUT; m++) {
                    int e = threadIdx.x + m * NT, j = e / HD, c = e % HD;
                    if (e < TL * HD) {
                        accv[m] += ps[i][j] * dys[i][c];
                        acck[m] += ds[i][j] * qs[i][c];
                    }
                }
        }
        for (int m = 0; m < OUT; m++) {
            int e = threadIdx.x + m * NT, j = e / HD, c = e % HD;
            if (e < TL * HD && j < nk) {
                rt_st(dv + (int64_t)(k0 + j) * ld + c, accv[m]);
                rt_st(dk + (int64_t)(k0 + j) * ld + c, scale * acck[m]);
            }
        }
    }
}

#define RT_ATTENTION_BWD(T, HD, CAUSAL)                                                       \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_bwd_##T##_##HD##_##CAUSAL(const act_t *qkv, const float *lse,            \
                                               const act_t *y, const act_t *dy, act_t *dqkv,  \
                                               float *D, int H)                               \
    {                                                                                         \
        attention_bwd_q<T, HD, CAUSAL>(qkv, lse, y, dy, dqkv, D, H);                          \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_bwd_kv_##T##_##HD##_##CAUSAL(const act_t *qkv, const float *lse,         \
                                                  const act_t *y, const act_t *dy,            \
                                                  act_t *dqkv, float *D, int H)               \
    {                                                                                         \
        attention_bwd_kv<T, HD, CAUSAL>(qkv, lse, dy, dqkv, D, H);                            \
    }
