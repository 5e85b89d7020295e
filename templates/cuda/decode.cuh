/* decode.cuh: the decode program's kernels (compiler/decode.c), --sample's key/value
 * cache on the GPU; rt_attention_decode and rt_pos_row_add in runtime/attention.c are
 * their C twins. A call's row b is the token at place[b] = slot * T + position: that
 * position of the slot's sequence, whose cache lies slot * seq floats in. The places are
 * read from device memory (the runtime's e->dplace), so that a CUDA graph of the pass
 * replays with each call's.
 * A layer's cache, fp32 whatever the activations, holds its keys K [KV, T, hd] (after
 * qk_norm and rope), then its values V [KV, T, hd]. The options are attention.cuh's
 * attention_ext_* (RT_ATTENTION_EXT_FWD_ARGS), whose rope frequencies it shares
 * (atx_freqs_n). Launches:
 *
 *   rt_attention_decode_kv   grid (B, KV), 128 threads, 2 hd floats of dynamic shared
 *     memory: row b's key head kh through qk_norm (kn) and rope at its position into K,
 *     its value head into V.
 *   rt_attention_decode   grid (B, H, S), 128 threads, 2 hd + RT_DEC_CHUNK floats of
 *     dynamic shared memory: query head h of row b (position t; through qn and rope)
 *     against the cached keys of positions first .. t (first: where the window starts)
 *     that fall in slice s of the S slices of ceil(T / S) positions (flash-decoding's
 *     split, so that a row's few heads still fill the GPU over a long context), a chunk
 *     of RT_DEC_CHUNK keys at a time: each warp a key's score (scaled, soft-capped), the
 *     chunk's maximum and sum folded into the running ones (the online softmax), then
 *     each thread the weighted sum of V over the chunk for its columns. With S = 1, y =
 *     that sum over the total; else the slice's maximum m, total l and sum o go to
 *     part[b, h, s] (hd + 2 floats; an empty slice m = -inf, l = 0, o = 0), and
 *   rt_attention_decode_merge   grid (B, H), 128 threads: y = sum_s o_s e^(m_s - M) /
 *     sum_s l_s e^(m_s - M), M the slices' largest m.
 * Query heads of one key/value head read the same rows, which the L2 serves.
 *
 * The key kernel runs before the others on the stream: every row's key is cached before
 * any row's query reads the cache. Sums run in another order than the CPU's, so y agrees
 * with it within rounding. */
#define RT_DEC_CHUNK 1024
#define RT_DEC_COLS 4   /* columns a thread: heads up to 4 x 128 = 512 wide */

/* qk_norm (w; NULL: none; eps 1e-6, the sum of squares in double as the CPU's) then rope
 * (f: atx_freqs_n's frequencies and amplitudes; NULL: none) of the hd values at x, at
 * position t, into o [hd] in shared memory. Every thread of the block calls it. */
__device__ __forceinline__ void dec_head(float *o, const act_t *x, const float *w, const float *f,
                                         int hd, int t)
{
    double ss = 0.0;
    for (int c = threadIdx.x; c < hd; c += RT_ATT_THREADS) {
        o[c] = rt_ld(x + c);
        ss += (double)o[c] * o[c];
    }
    const float r = w ? (float)(1.0 / sqrt(rt_block_sum(ss) / (double)hd + 1e-6)) : 1.0f;
    __syncthreads();
    if (w)
        for (int c = threadIdx.x; c < hd; c += RT_ATT_THREADS)
            o[c] = o[c] * r * w[c];
    __syncthreads();
    const int h2 = hd / 2;
    if (f)
        for (int j = threadIdx.x; j < h2; j += RT_ATT_THREADS) {
            const float ang = (float)t * f[j], m = f[h2 + j];
            const float cs = cosf(ang) * m, sn = sinf(ang) * m, a = o[j], b = o[j + h2];
            o[j] = a * cs - b * sn;
            o[j + h2] = b * cs + a * sn;
        }
    __syncthreads();
}

/* a float's sum over the warp's lanes (a fixed butterfly) */
__device__ __forceinline__ float dec_warp_sum(float v)
{
    for (int k = 16; k > 0; k >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, k);
    return v;
}

extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)
rt_attention_decode_kv(const act_t *qkv, const float *kn, float *kv, const int *place,
                       long long seq, int T, int H, int KV, int hd, float theta, float factor,
                       float low, float high, int orig, const float *ext)
{
    float *f = (float *)rt_dyn_smem(), *k = f + hd;   /* the frequencies [hd], the key [hd] */
    const int b = blockIdx.x, kh = blockIdx.y;
    const unsigned p = (unsigned)place[b], sl = p / (unsigned)T;   /* (places are >= 0) */
    const int t = (int)(p - sl * (unsigned)T);
    kv += sl * seq;
    if (theta > 0.0f)
        atx_freqs_n(f, hd, theta, factor, low, high, orig, ext);
    __syncthreads();
    const act_t *row = qkv + (int64_t)b * (H + 2 * KV) * hd;
    dec_head(k, row + (int64_t)(H + kh) * hd, kn, theta > 0.0f ? f : NULL, hd, t);
    float *K = kv + ((int64_t)kh * T + t) * hd, *V = kv + ((int64_t)(KV + kh) * T + t) * hd;
    const act_t *v = row + (int64_t)(H + KV + kh) * hd;
    for (int c = threadIdx.x; c < hd; c += RT_ATT_THREADS) {
        K[c] = k[c];
        V[c] = rt_ld(v + c);
    }
}

/* The scores of keys c0 .. c0 + n - 1 against q into s[0, n): a warp a key, its lanes
 * over the head's columns */
__device__ __forceinline__ void dec_scores(float *s, const float *q, const float *K, int c0, int n,
                                           int hd, float scale, float cap)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = warp; i < n; i += RT_ATT_THREADS / 32) {
        const float *kr = K + (int64_t)(c0 + i) * hd;
        float dot = 0.0f;
        for (int c = lane; c < hd; c += 32)
            dot += q[c] * kr[c];
        dot = scale * dec_warp_sum(dot);
        if (lane == 0)
            s[i] = cap > 0.0f ? cap * tanhf(dot / cap) : dot;
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)
rt_attention_decode(const act_t *qkv, const float *qn, const float *kv, act_t *y, float *part,
                    const int *place, long long seq, int T, int H, int KV, int hd, int W,
                    float theta, float factor, float low, float high, int orig,
                    const float *ext, float scale, float cap)
{
    float *f = (float *)rt_dyn_smem(), *q = f + hd, *s = q + hd;   /* frequencies, q, scores */
    const int b = blockIdx.x, h = blockIdx.y, kh = h / (H / KV);
    const unsigned p = (unsigned)place[b], sl = p / (unsigned)T;
    const int t = (int)(p - sl * (unsigned)T);
    kv += sl * seq;
    const int S = gridDim.z, L = (T + S - 1) / S, s0 = blockIdx.z * L;
    const int first = W > 0 && t >= W ? t - W + 1 : 0;
    const int lo = first > s0 ? first : s0, hi = t + 1 < s0 + L ? t + 1 : s0 + L;   /* [lo, hi) */
    if (theta > 0.0f)
        atx_freqs_n(f, hd, theta, factor, low, high, orig, ext);
    __syncthreads();
    dec_head(q, qkv + (int64_t)b * (H + 2 * KV) * hd + (int64_t)h * hd, qn,
             theta > 0.0f ? f : NULL, hd, t);
    const float *K = kv + (int64_t)kh * T * hd, *V = kv + (int64_t)(KV + kh) * T * hd;
    float m = -rt_inf(), l = 0.0f, o[RT_DEC_COLS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c0 = lo; c0 < hi; c0 += RT_DEC_CHUNK) {
        const int n = hi - c0 < RT_DEC_CHUNK ? hi - c0 : RT_DEC_CHUNK;
        dec_scores(s, q, K, c0, n, hd, scale, cap);
        float mc = -rt_inf();
        for (int i = threadIdx.x; i < n; i += RT_ATT_THREADS)
            mc = fmaxf(mc, s[i]);
        const float mn = fmaxf(m, rt_block_max(mc)), alpha = expf(m - mn);
        double sum = 0.0;
        for (int i = threadIdx.x; i < n; i += RT_ATT_THREADS) {
            s[i] = expf(s[i] - mn);
            sum += s[i];
        }
        l = l * alpha + (float)rt_block_sum(sum);   /* (its barrier: s is whole after it) */
        for (int k = 0; k < RT_DEC_COLS; k++) {
            const int c = threadIdx.x + k * RT_ATT_THREADS;
            if (c >= hd)
                break;
            float acc = o[k] * alpha;
            for (int i = 0; i < n; i++)
                acc += s[i] * V[(int64_t)(c0 + i) * hd + c];
            o[k] = acc;
        }
        m = mn;
        __syncthreads();   /* (s is the next chunk's) */
    }
    if (S > 1) {   /* the slice's maximum, total and sum, for the merge */
        float *p = part + (((int64_t)b * H + h) * S + blockIdx.z) * (hd + 2);
        if (threadIdx.x == 0)
            p[0] = m, p[1] = l;
        for (int k = 0; k < RT_DEC_COLS && (int)threadIdx.x + k * RT_ATT_THREADS < hd; k++)
            p[2 + threadIdx.x + k * RT_ATT_THREADS] = o[k];
        return;
    }
    act_t *out = y + (int64_t)b * H * hd + (int64_t)h * hd;
    for (int k = 0; k < RT_DEC_COLS; k++) {
        const int c = threadIdx.x + k * RT_ATT_THREADS;
        if (c < hd)
            rt_st(out + c, o[k] / l);
    }
}

extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)
rt_attention_decode_merge(const float *part, act_t *y, int H, int hd, int S)
{
    const int b = blockIdx.x, h = blockIdx.y;
    const float *p = part + ((int64_t)b * H + h) * S * (hd + 2);
    float M = -rt_inf(), L = 0.0f;
    for (int s = 0; s < S; s++)
        M = fmaxf(M, p[s * (hd + 2)]);
    for (int s = 0; s < S; s++)   /* (an empty slice: l = 0, e^-inf = 0) */
        L += p[s * (hd + 2) + 1] * expf(p[s * (hd + 2)] - M);
    act_t *out = y + (int64_t)b * H * hd + (int64_t)h * hd;
    for (int c = threadIdx.x; c < hd; c += RT_ATT_THREADS) {
        float acc = 0.0f;
        for (int s = 0; s < S; s++)
            acc += p[s * (hd + 2) + 2 + c] * expf(p[s * (hd + 2)] - M);
        rt_st(out + c, acc / L);
    }
}
