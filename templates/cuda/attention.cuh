/* attention.cuh: causal (or full) multi-head self-attention with the probabilities kept
 * (twins of rt_attention_fwd and rt_attention_bwd in runtime/attention.c); T, the head
 * width HD = d/H and CAUSAL are compile-time constants.
 *
 *   qkv [B, T, 3d]: q, k, v side by side, head h at columns h*HD .. h*HD+HD-1 of each
 *   att [B, H, T, T]: softmax(q k^T * scale) with masked entries 0, scale = 1/sqrt(HD)
 *   y   [B, T, d]: att v, the heads side by side
 *
 * A block works on one (batch row, head) pair and a tile of TL query rows (forward, dq)
 * or TL keys (dk, dv), bringing the other side's rows through shared memory TL at a
 * time; 256 threads. Shared tiles have rows of HD + 1 floats, so that threads reading
 * one column of different rows hit different banks. Dot products and products of
 * tiles run in float in a fixed order, softmax sums in double: the results do not change
 * from run to run. These are plain tiled kernels for the contract that stores att; a
 * flash-attention version (att never stored) will replace them. */

#define RT_ATT_THREADS 256
/* Query rows (and keys) per tile: 32, or fewer for wide heads so that the backward's
 * five tiles fit in 48 KiB of static shared memory. cuda_ops.c's att_tile() is the
 * same rule (it only sets the grid: the kernels loop over tiles whatever the grid). */
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

/* the TL x TL block of the (b, h) probabilities at rows r0 .. r0+nr-1, keys c0 ..;
 * entries outside [0, T) x [0, T) set to 0 */
template <int T, int TL>
__device__ __forceinline__ void att_load_p(float (*dst)[TL + 1], const act_t *P, int r0, int c0)
{
    for (int e = threadIdx.x; e < TL * TL; e += RT_ATT_THREADS) {
        int i = e / TL, j = e % TL;
        dst[i][j] = r0 + i < T && c0 + j < T ? rt_ld(P + (int64_t)(r0 + i) * T + c0 + j) : 0.0f;
    }
}

/* Launch: grid (ceil(T / TL), H, B), 256 threads; block (x, h, b) takes the query tiles
 * x, x + gridDim.x, ...
 *   att[b, h, i, :] = softmax over keys j <= i (CAUSAL) or all j of scale * q_i . k_j
 *   y[b, i, h*HD ..] = sum_j att[b, h, i, j] v_j
 * The scores are written into att, turned into probabilities there (one warp per row),
 * then read back a tile at a time for att v. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_fwd(const act_t *qkv, act_t *att, act_t *y, int H)
{
    constexpr int TL = rt_att_tile(HD), NT = RT_ATT_THREADS;
    constexpr int OUT = (TL * HD + NT - 1) / NT;   /* y entries per thread */
    __shared__ float qs[TL][HD + 1];   /* the tile's queries */
    __shared__ float kv[TL][HD + 1];   /* TL keys, later TL values */
    __shared__ float ps[TL][TL + 1];   /* probabilities [query][key] */
    const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    act_t *P = att + ((int64_t)b * H + h) * T * T;   /* [T, T] */
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int q0 = blockIdx.x * TL; q0 < T; q0 += gridDim.x * TL) {
        const int nq = T - q0 < TL ? T - q0 : TL;
        const int nkeys = CAUSAL ? (q0 + TL < T ? q0 + TL : T) : T;   /* keys the tile sees */
        __syncthreads();
        att_load<TL, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
        /* scores, a TL x TL block at a time, into att */
        for (int k0 = 0; k0 < nkeys; k0 += TL) {
            __syncthreads();
            att_load<TL, HD>(kv, k + (int64_t)k0 * ld, ld, T - k0 < TL ? T - k0 : TL);
            __syncthreads();
            for (int e = threadIdx.x; e < TL * TL; e += NT) {
                int i = e / TL, j = e % TL;
                float dot = 0.0f;
                for (int c = 0; c < HD; c++)
                    dot += qs[i][c] * kv[j][c];
                if (i < nq && k0 + j < T)
                    rt_st(P + (int64_t)(q0 + i) * T + k0 + j, scale * dot);
            }
        }
        __syncthreads();
        /* softmax of each row in place: exp(s - max) / sum over the visible keys (the sum
         * in double), masked entries 0 */
        for (int i = warp; i < nq; i += NT / 32) {
            act_t *p = P + (int64_t)(q0 + i) * T;
            const int len = CAUSAL ? q0 + i + 1 : T;
            float mx = -rt_inf();
            for (int j = lane; j < len; j += 32)
                mx = fmaxf(mx, rt_ld(p + j));
            mx = rt_warp_max(mx);
            double s = 0.0;
            for (int j = lane; j < len; j += 32)
                s += (double)expf(rt_ld(p + j) - mx);
            const float inv = (float)(1.0 / rt_warp_sum(s));
            for (int j = lane; j < T; j += 32)
                rt_st(p + j, j < len ? expf(rt_ld(p + j) - mx) * inv : 0.0f);
        }
        /* y = att v over the keys the tile sees */
        float acc[OUT];
        for (int m = 0; m < OUT; m++)
            acc[m] = 0.0f;
        for (int k0 = 0; k0 < nkeys; k0 += TL) {
            __syncthreads();
            att_load<TL, HD>(kv, v + (int64_t)k0 * ld, ld, T - k0 < TL ? T - k0 : TL);
            att_load_p<T, TL>(ps, P, q0, k0);
            __syncthreads();
            for (int m = 0; m < OUT; m++) {
                int e = threadIdx.x + m * NT, i = e / HD, c = e % HD;
                if (e < TL * HD)
                    for (int j = 0; j < TL; j++)
                        acc[m] += ps[i][j] * kv[j][c];
            }
        }
        for (int m = 0; m < OUT; m++) {
            int e = threadIdx.x + m * NT, i = e / HD, c = e % HD;
            if (e < TL * HD && i < nq)
                rt_st(y + ((int64_t)b * T + q0 + i) * d + (int64_t)h * HD + c, acc[m]);
        }
    }
}

#define RT_ATTENTION_FWD(T, HD, CAUSAL)                                                       \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_fwd_##T##_##HD##_##CAUSAL(const act_t *qkv, act_t *att, act_t *y, int H) \
    {                                                                                         \
        attention_fwd<T, HD, CAUSAL>(qkv, att, y, H);                                         \
    }

/* Backward, first kernel: the query side.
 *
 * Launch: grid (ceil(T / TL), H, B), 256 threads; block (x, h, b) takes the query tiles
 * x, x + gridDim.x, ...   With dP = dy v^T and P = att:
 *   D[b, h, i]   = sum_j dP_ij P_ij                  (double, rounded to float; D: [B, H, T])
 *   dS_ij        = P_ij (dP_ij - D_i), 0 where masked
 *   dq_i         = scale * sum_j dS_ij k_j           (into dqkv's q columns)
 * Two sweeps over the visible keys: D first, then dS and dq (dP computed again). D goes
 * to scratch for the second kernel. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_q(const act_t *qkv, const act_t *att,
                                                const act_t *dy, act_t *dqkv, float *D, int H)
{
    constexpr int TL = rt_att_tile(HD), NT = RT_ATT_THREADS;
    constexpr int OUT = (TL * HD + NT - 1) / NT;        /* dq entries per thread */
    constexpr int RW = (TL + NT / 32 - 1) / (NT / 32);  /* rows per warp for D */
    __shared__ float dys[TL][HD + 1];   /* the tile's dy rows */
    __shared__ float ks[TL][HD + 1];
    __shared__ float vs[TL][HD + 1];
    __shared__ float ps[TL][TL + 1];    /* P [query][key] */
    __shared__ float ds[TL][TL + 1];    /* dP, then dS */
    __shared__ float Dt[TL];
    const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    const act_t *P = att + ((int64_t)b * H + h) * T * T;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;   /* rows of stride d */
    act_t *dq = dqkv + (int64_t)b * T * ld + (int64_t)h * HD;
    float *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int q0 = blockIdx.x * TL; q0 < T; q0 += gridDim.x * TL) {
        const int nq = T - q0 < TL ? T - q0 : TL;
        const int nkeys = CAUSAL ? (q0 + TL < T ? q0 + TL : T) : T;
        __syncthreads();
        att_load<TL, HD>(dys, dyh + (int64_t)q0 * d, d, nq);
        /* sweep 1: D_i; warp w sums rows w, w + 8, ... over lanes j, j + 32, ... */
        double dacc[RW];
        for (int r = 0; r < RW; r++)
            dacc[r] = 0.0;
        for (int k0 = 0; k0 < nkeys; k0 += TL) {
            __syncthreads();
            att_load<TL, HD>(vs, v + (int64_t)k0 * ld, ld, T - k0 < TL ? T - k0 : TL);
            att_load_p<T, TL>(ps, P, q0, k0);
            __syncthreads();
            for (int e = threadIdx.x; e < TL * TL; e += NT) {
                int i = e / TL, j = e % TL;
                float dot = 0.0f;
                for (int c = 0; c < HD; c++)
                    dot += dys[i][c] * vs[j][c];
                ds[i][j] = dot;
            }
            __syncthreads();
            for (int r = 0; r < RW; r++) {
                int i = warp + r * (NT / 32);
                if (i < TL)
                    for (int j = lane; j < TL; j += 32)
                        if (!(CAUSAL && k0 + j > q0 + i))
                            dacc[r] += (double)(ds[i][j] * ps[i][j]);
            }
        }
        for (int r = 0; r < RW; r++) {
            int i = warp + r * (NT / 32);
            float Di = (float)rt_warp_sum(dacc[r]);
            if (i < TL && lane == 0) {
                Dt[i] = Di;
                if (i < nq)
                    Dh[q0 + i] = Di;
            }
        }
        /* sweep 2: dS and dq */
        float acc[OUT];
        for (int m = 0; m < OUT; m++)
            acc[m] = 0.0f;
        for (int k0 = 0; k0 < nkeys; k0 += TL) {
            __syncthreads();
            int nk = T - k0 < TL ? T - k0 : TL;
            att_load<TL, HD>(ks, k + (int64_t)k0 * ld, ld, nk);
            att_load<TL, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
            att_load_p<T, TL>(ps, P, q0, k0);
            __syncthreads();
            for (int e = threadIdx.x; e < TL * TL; e += NT) {
                int i = e / TL, j = e % TL;
                float dot = 0.0f;
                for (int c = 0; c < HD; c++)
                    dot += dys[i][c] * vs[j][c];
                bool masked = (CAUSAL && k0 + j > q0 + i) || i >= nq || j >= nk;
                ds[i][j] = masked ? 0.0f : ps[i][j] * (dot - Dt[i]);
            }
            __syncthreads();
            for (int m = 0; m < OUT; m++) {
                int e = threadIdx.x + m * NT, i = e / HD, c = e % HD;
                if (e < TL * HD)
                    for (int j = 0; j < TL; j++)
                        acc[m] += ds[i][j] * ks[j][c];
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
 *   dk_j = scale * sum_i dS_ij q_i,   dS_ij = P_ij (dy_i . v_j - D_i)
 * into dqkv's v and k columns. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_kv(const act_t *qkv, const act_t *att,
                                                 const act_t *dy, act_t *dqkv, const float *D,
                                                 int H)
{
    constexpr int TL = rt_att_tile(HD), NT = RT_ATT_THREADS;
    constexpr int OUT = (TL * HD + NT - 1) / NT;   /* dk (and dv) entries per thread */
    __shared__ float vs[TL][HD + 1];    /* the tile's values */
    __shared__ float qs[TL][HD + 1];
    __shared__ float dys[TL][HD + 1];
    __shared__ float ps[TL][TL + 1];    /* P [query][key] */
    __shared__ float ds[TL][TL + 1];    /* dS [query][key] */
    __shared__ float Dt[TL];
    const int b = blockIdx.z, h = blockIdx.y;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *v = q + 2 * d;
    const act_t *P = att + ((int64_t)b * H + h) * T * T;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;
    act_t *dk = dqkv + (int64_t)b * T * ld + d + (int64_t)h * HD, *dv = dk + d;
    const float *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int k0 = blockIdx.x * TL; k0 < T; k0 += gridDim.x * TL) {
        const int nk = T - k0 < TL ? T - k0 : TL;
        __syncthreads();
        att_load<TL, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
        float accv[OUT], acck[OUT];
        for (int m = 0; m < OUT; m++)
            accv[m] = acck[m] = 0.0f;
        for (int q0 = CAUSAL ? k0 : 0; q0 < T; q0 += TL) {
            const int nq = T - q0 < TL ? T - q0 : TL;
            __syncthreads();
            att_load<TL, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
            att_load<TL, HD>(dys, dyh + (int64_t)q0 * d, d, nq);
            att_load_p<T, TL>(ps, P, q0, k0);
            for (int i = threadIdx.x; i < TL; i += NT)
                Dt[i] = i < nq ? Dh[q0 + i] : 0.0f;
            __syncthreads();
            for (int e = threadIdx.x; e < TL * TL; e += NT) {
                int i = e / TL, j = e % TL;
                float dot = 0.0f;
                for (int c = 0; c < HD; c++)
                    dot += dys[i][c] * vs[j][c];
                bool masked = (CAUSAL && k0 + j > q0 + i) || i >= nq || j >= nk;
                ds[i][j] = masked ? 0.0f : ps[i][j] * (dot - Dt[i]);
            }
            __syncthreads();
            for (int m = 0; m < OUT; m++) {
                int e = threadIdx.x + m * NT, j = e / HD, c = e % HD;
                if (e < TL * HD)
                    for (int i = 0; i < TL; i++) {
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
        rt_attention_bwd_##T##_##HD##_##CAUSAL(const act_t *qkv, const act_t *att,            \
                                               const act_t *dy, act_t *dqkv, float *D, int H) \
    {                                                                                         \
        attention_bwd_q<T, HD, CAUSAL>(qkv, att, dy, dqkv, D, H);                             \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_bwd_kv_##T##_##HD##_##CAUSAL(const act_t *qkv, const act_t *att,         \
                                                  const act_t *dy, act_t *dqkv,               \
                                                  const float *D, int H)                      \
    {                                                                                         \
        attention_bwd_kv<T, HD, CAUSAL>(qkv, att, dy, dqkv, D, H);                            \
    }
