/* sm90_attention.cuh: the attention forward for Hopper (sm_90a), flash attention 3's
 * scheme on sm90.cuh's primitives: the same contract, launch grid order and outputs (y,
 * and the lse the backward reads) as attention.cuh's rt_attention_fwd_T_HD_CAUSAL, for
 * bf16 or fp16 activations and heads 64 or 128 wide. Only where NVRTC compiles for sm_90a
 * (RT_SM90A); runtime/cuda_ops.c launches it there when the shape fits, else
 * attention.cuh's kernels.
 *
 *   rt_attention_fwd90_T_HD_CAUSAL(map, lse, y, H)   map: a CUtensorMap of qkv (below)
 *   rt_attention_ext_fwd90_T_HD_CAUSAL(mq, mv, lse, y, H, KV, W, sl2)   the Llama-family
 *     options of attention.cuh's rt_attention_ext_fwd_*: KV key/value heads (query head
 *     h reads h / (H / KV)), a window W > 0 (keys W or more positions back masked, and
 *     without the causal mask W or more ahead; key tiles wholly outside every row's
 *     window never loaded); qk_norm and rope applied
 *     beforehand by rt_attention_prep90 (below) into a scratch copy of q and k that mq
 *     maps, V read through mv from qkv itself. P_: packed rows' positions [B, T], read by
 *     the rt_attention_ext_pk_fwd90_* instances alone (PK; NULL in the others): row p
 *     sees keys from its sequence's start p - P[p] (atx_seq_start), and the key tiles
 *     wholly before its tile's first row's start are never loaded (atx_tile_first).
 *
 * Launch: grid (ceil(T / 128), H, B) taken tile-major (att_block_order: the longest query
 * tiles of every head first), 384 threads = three warpgroups, dynamic shared memory
 * rt_att90_smem(HD) bytes. A block takes one tile of BQ = 128 query rows:
 *
 *   warpgroup 0, the producer: gives back registers (setmaxnreg.dec), and one thread
 *     issues the TMA copies: the Q tile once, then for each key tile j the K tile and the
 *     V tile into stage j % 2 of a two-stage ring, each after the stage's "empty" mbarrier
 *     says both consumers are done with it, each counted on the stage's "full" mbarrier
 *     (arrive.expect_tx, then the copies' complete_tx)
 *   warpgroups 1 and 2, the consumers (setmaxnreg.inc): warpgroup c takes query rows
 *     64 c .. 64 c + 63 of the tile. Per key tile: wait for K; S = Q K^T by wgmma SS
 *     (m64 x n128 x k16, HD / 16 steps, both operands K-major); release K; mask, scale to
 *     log2 units and the online softmax on S's accumulator fragment in registers (as the
 *     sm_80 kernel: running max m and sum l per row, over the row's 4 lanes); P = exp2(S -
 *     m) rounded to 16 bits straight into wgmma RS A fragments (S's accumulator layout is
 *     the A fragment layout, k-step by k-step); wait for V; O += P V by wgmma RS (m64 x
 *     nHD x k16, BK / 16 steps, V MN-major through the descriptor); release V. At the end
 *     y = O / l and lse = (m + log2 l) ln 2, the rows past T left alone.
 *
 * The tensor map: qkv as a 3D tensor of 16-bit values {3d, T, B} (columns, rows, batch),
 * box {64, 128, 1}, the 128-byte swizzle, zeros outside (rows past T). Q, K and V are the
 * same map at columns h HD, d + h HD, 2 d + h HD (the Llama-family kernel: Q at h HD and
 * K at (H + kh) HD of mq, V at (H + KV + kh) HD of mv; one map where rope is off); a tile of 128 rows and HD columns is
 * HD / 64 boxes, "panels" of [128][64] values (16 KiB, 1024-aligned) one after another.
 * Shared memory: Q (BQ HD 2 bytes), two K and two V stages (BK HD 2 each), then the
 * mbarriers; 80 KiB for heads of 64, 160 KiB for 128.
 *
 * Each consumer thread arrives on a stage's empty barrier (count 256) after its own
 * wgmma.wait_group: the stage is free only once every consumer thread's products have
 * read it. Scores, P and the accumulators follow the sm_80 kernel's arithmetic: P rounded
 * to 16 bits for P V, l sums the unrounded p; sums run in another order (the tensor
 * cores'), so y agrees with it within rounding, not bit for bit. */
#define RT_ATT90_THREADS 384
#define RT_ATT90_BQ 128
#define RT_ATT90_BK 128
#define RT_ATT90_STAGES 2

/* dynamic shared memory of the forward for heads hd wide (cuda_ops.c: the same sum) */
__host__ __device__ constexpr int rt_att90_smem(int hd)
{
    return (RT_ATT90_BQ + 2 * RT_ATT90_STAGES * RT_ATT90_BK) * hd * 2 + 128 + 1024;
}

/* qk_norm (weights qn for the q heads, kn for the k heads; NULL: none) then rope (theta
 * 0: none; ext: the inverse frequencies, or NULL: from theta) as attention.cuh's
 * atx_tc_fwd computes them (fp32, the RMS over the head's row, rounded to 16 bits once),
 * on the q and k heads of rows [0, rows) of qkv
 * [rows, (H + 2 KV) hd] into qk [rows, (H + KV) hd] (row r at position r % T, or P[r]:
 * packed rows' positions [rows], NULL without), for the
 * Hopper kernels' TMA copies (plain CUDA: defined for every target, launched only with
 * them). 128 threads, RT_PREP90_ROWS rows a block; warp w takes heads w, w + 4, ..., its
 * lane l the column pairs (j, j + hd / 2) for j = l, l + 32 (< hd / 2): a head's sum of
 * squares is its warp's. */
#define RT_PREP90_ROWS 16
extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)
rt_attention_prep90(const act_t *qkv, act_t *qk, const float *qn, const float *kn, int64_t rows,
                    int T, int H, int KV, int hd, float theta, float factor, float low,
                    float high, int orig, const float *ext, const int *P)
{
    __shared__ float fr[128];   /* the frequencies, then the amplitudes */
    if (theta > 0.0f)
        atx_freqs_n(fr, hd, theta, factor, low, high, orig, ext);
    __syncthreads();
    const int half = hd / 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nh = H + KV;
    const int64_t ldi = (int64_t)(H + 2 * KV) * hd, ldo = (int64_t)nh * hd;
    for (int64_t r = (int64_t)blockIdx.x * RT_PREP90_ROWS, re = r + RT_PREP90_ROWS; r < re && r < rows; r++) {
        float sn[2] = {0.0f, 0.0f}, cs[2] = {1.0f, 1.0f};
        for (int q = 0; q < 2; q++)
            if (theta > 0.0f && lane + 32 * q < half) {
                sincosf((float)(P ? P[r] : (int)(r % T)) * fr[lane + 32 * q], &sn[q], &cs[q]);
                sn[q] *= fr[half + lane + 32 * q], cs[q] *= fr[half + lane + 32 * q];
            }
        for (int hh = warp; hh < nh; hh += RT_ATT_THREADS / 32) {
            const act_t *x = qkv + r * ldi + (int64_t)hh * hd;
            act_t *o = qk + r * ldo + (int64_t)hh * hd;
            const float *w = hh < H ? qn : kn;
            float a[2] = {0.0f, 0.0f}, b[2] = {0.0f, 0.0f}, ss = 0.0f;
            for (int q = 0; q < 2; q++)
                if (lane + 32 * q < half) {
                    a[q] = rt_ld(x + lane + 32 * q), b[q] = rt_ld(x + lane + 32 * q + half);
                    ss += a[q] * a[q] + b[q] * b[q];
                }
            const float rr = w ? 1.0f / sqrtf(rt_warp_sum(ss) / (float)hd + 1e-6f) : 1.0f;
            for (int q = 0; q < 2; q++) {
                const int j = lane + 32 * q;
                if (j >= half)
                    continue;
                float u = a[q], v = b[q];
                if (w)
                    u = u * rr * w[j], v = v * rr * w[j + half];
                rt_st(o + j, u * cs[q] - v * sn[q]);
                rt_st(o + j + half, v * cs[q] + u * sn[q]);
            }
        }
    }
}

/* Where a block's tiles come from: query head h and its key/value head kh, Q and K
 * through mq, V through mv, H query and KV key/value heads (plain attention: KV = H,
 * mq = mv), key tiles jb .. nkt - 1 (jb > 0: a window) */
struct att90_src {
    const rt_tmap *mq, *mv;
    int h, kh, H, KV, jb, nkt, b;
};

#if RT_SM90A && (defined(RT_ACT_BF16) || defined(RT_ACT_F16))
#if defined(RT_ACT_F16)
#define RT_ATT90_F16 true
#else
#define RT_ATT90_F16 false
#endif

/* The producer's thread: Q, then K and V of each key tile into the ring. */
template <int HD>
__device__ __forceinline__ void att90_produce(const att90_src &src, unsigned base, int q0)
{
    constexpr int S = RT_ATT90_STAGES, P = HD / 64;
    constexpr unsigned QB = RT_ATT90_BQ * HD * 2, KB = RT_ATT90_BK * HD * 2;
    const unsigned bars = base + QB + 2 * S * KB;   /* q, kfull[S], vfull[S], kempty[S], vempty[S] */
    const int kc = (src.H + src.kh) * HD, vc = (src.H + src.KV + src.kh) * HD;
    sm90_tma_prefetch(src.mq);
    if (src.mv != src.mq)
        sm90_tma_prefetch(src.mv);
    sm90_mbar_arrive_expect_tx(bars, QB);
    for (int p = 0; p < P; p++)
        sm90_tma_load_3d(base + p * RT_ATT90_BQ * 128, src.mq, bars, src.h * HD + 64 * p, q0, src.b);
    for (int j = src.jb; j < src.nkt; j++) {
        const int s = (j - src.jb) % S;
        const unsigned ph = (unsigned)((j - src.jb) / S) & 1u;
        const unsigned ks = base + QB + s * KB, vs = base + QB + (S + s) * KB;
        const unsigned kfull = bars + 8 * (1 + s), vfull = bars + 8 * (1 + S + s);
        const unsigned kempty = bars + 8 * (1 + 2 * S + s), vempty = bars + 8 * (1 + 3 * S + s);
        sm90_mbar_wait(kempty, ph ^ 1u);   /* the first pass: a fresh barrier's parity 1 */
        sm90_mbar_arrive_expect_tx(kfull, KB);
        for (int p = 0; p < P; p++)
            sm90_tma_load_3d(ks + p * RT_ATT90_BK * 128, src.mq, kfull, kc + 64 * p, j * RT_ATT90_BK, src.b);
        sm90_mbar_wait(vempty, ph ^ 1u);
        sm90_mbar_arrive_expect_tx(vfull, KB);
        for (int p = 0; p < P; p++)
            sm90_tma_load_3d(vs + p * RT_ATT90_BK * 128, src.mv, vfull, vc + 64 * p, j * RT_ATT90_BK, src.b);
    }
}

/* A consumer warpgroup (c = 0, 1): query rows q0 + 64 c .. + 63 of the tile (Pb: the
 * batch row's positions, PK; NULL). */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void att90_consume(unsigned base, int c, int q0, int jb, int nkt,
                                              int W, float sl2, float *L, act_t *y, int64_t d,
                                              int h, int b, const int *Pb RT_FP8_SLOT)
{
    constexpr int S = RT_ATT90_STAGES, BK = RT_ATT90_BK, NS = BK / 2, NO = HD / 2;
    constexpr unsigned QB = RT_ATT90_BQ * HD * 2, KB = BK * HD * 2;
    constexpr bool F16 = RT_ATT90_F16;
    const unsigned bars = base + QB + 2 * S * KB;
    const int t = threadIdx.x & 127, w = t >> 5, g = (t & 31) >> 2, t4 = t & 3;
    const int r0 = q0 + 64 * c + 16 * w + g;   /* this thread's rows r0, r0 + 8 */
    /* their sequences' starts (packed rows; else no key is before them) */
    const int lo[2] = {PK ? atx_seq_start(Pb, r0 < T ? r0 : -1) : RT_ATT_ANY_KEY,
                       PK ? atx_seq_start(Pb, r0 + 8 < T ? r0 + 8 : -1) : RT_ATT_ANY_KEY};
    const float ninf = -rt_inf();
    float m[2] = {ninf, ninf}, l[2] = {0.0f, 0.0f}, o[NO];
    for (int i = 0; i < NO; i++)
        o[i] = 0.0f;
    sm90_mbar_wait(bars, 0);   /* Q */
    for (int j = jb; j < nkt; j++) {
        const int s = (j - jb) % S, k0 = j * BK;
        const unsigned ph = (unsigned)((j - jb) / S) & 1u;
        const unsigned ks = base + QB + s * KB, vs = base + QB + (S + s) * KB;
        /* S = Q K^T: k-step ks16 is panel ks16 / 4, 32 bytes a step within its rows */
        float sc[NS];
        sm90_mbar_wait(bars + 8 * (1 + s), ph);
        sm90_wgmma_fence();
        for (int kk = 0; kk < HD / 16; kk++) {
            const unsigned off = 32u * (unsigned)(kk & 3);
            const unsigned qa = base + (kk >> 2) * RT_ATT90_BQ * 128 + c * 64 * 128 + off;
            const unsigned kb = ks + (kk >> 2) * BK * 128 + off;
            sm90_wgmma_ss<BK, 0, F16>(sc, sm90_desc(qa, 0, 1024), sm90_desc(kb, 0, 1024), kk > 0);
        }
        sm90_wgmma_commit();
        sm90_wgmma_wait<0>();
        sm90_pin<NS>(sc);
        sm90_mbar_arrive(bars + 8 * (1 + 2 * S + s));   /* K read */
        /* scale, mask (tiles reaching past the diagonal, past T, before a row's window
         * or, packed, its sequence), the rows' max */
        const int rb = q0 + 64 * c;
        const bool edge = PK || (CAUSAL && k0 + BK - 1 > rb) || k0 + BK > T ||
                          atx_window_edge<CAUSAL>(rb, rb + 63, k0, k0 + BK - 1, W);
        float mx[2] = {ninf, ninf};
        for (int i = 0; i < NS; i++) {
            const int u = (i >> 1) & 1, kj = k0 + 8 * (i >> 2) + 2 * t4 + (i & 1), row = r0 + 8 * u;
            const bool hid = kj >= T || (CAUSAL && kj > row) || atx_outside<CAUSAL>(row, kj, W) || kj < lo[u] ||
                             (!CAUSAL && PK && atx_apart(Pb, kj, lo[u], T));
            sc[i] = edge && hid ? ninf : sl2 * sc[i];
            mx[u] = fmaxf(mx[u], sc[i]);
        }
        float al[2], ms[2];
        for (int u = 0; u < 2; u++) {
            mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 1));
            mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 2));
            const float mn = fmaxf(m[u], mx[u]);
            al[u] = mn == ninf ? 1.0f : rt_exp2_approx(m[u] - mn);
            m[u] = mn;
            l[u] *= al[u];
            ms[u] = mn == ninf ? 0.0f : mn;   /* a row with no key yet: p = 0 */
        }
        for (int i = 0; i < NO; i++)
            o[i] *= al[(i >> 1) & 1];
        /* P's A fragments: k-step kk covers S's columns 16 kk .. 16 kk + 15, i.e. its
         * 8-column groups 2 kk (a[0], a[1]) and 2 kk + 1 (a[2], a[3]) */
        unsigned pa[BK / 16][4];
        for (int kk = 0; kk < BK / 16; kk++)
            for (int r = 0; r < 4; r++) {
                const int i = 4 * (2 * kk + (r >> 1)) + 2 * (r & 1), u = r & 1;
                const float p0 = rt_exp2_approx(sc[i] - ms[u]), p1 = rt_exp2_approx(sc[i + 1] - ms[u]);
                l[u] += p0 + p1;
                pa[kk][r] = att_pack2(p0, p1);
            }
        /* O += P V: V's k16 x HD slice at key 16 kk, the HD / 64 panels LBO apart */
        sm90_mbar_wait(bars + 8 * (1 + S + s), ph);
        sm90_pin<NO>(o);   /* (o's rescale above, before the fence) */
        sm90_pin<BK / 16>(pa);
        sm90_wgmma_fence();
        for (int kk = 0; kk < BK / 16; kk++)
            sm90_wgmma_rs<HD, 1, F16>(o, pa[kk], sm90_desc(vs + kk * 16 * 128, BK * 128, 1024), 1);
        sm90_wgmma_commit();
        sm90_wgmma_wait<0>();
        sm90_pin<NO>(o);
        sm90_mbar_arrive(bars + 8 * (1 + 3 * S + s));   /* V read */
    }
    RT_FP8_FOLD_INIT();   /* fp8-mixed: the maximum of the y this thread stores */
    for (int u = 0; u < 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
        const int i = r0 + 8 * u;
        if (i >= T)
            continue;
        act_t *yr = y + ((int64_t)b * T + i) * d + (int64_t)h * HD;
        const float inv = 1.0f / l[u];
        for (int n = 0; n < HD / 8; n++) {
            const float y0 = o[4 * n + 2 * u] * inv, y1 = o[4 * n + 2 * u + 1] * inv;
            att_st2(yr + 8 * n + 2 * t4, y0, y1);
            RT_FP8_FOLD(y0);
            RT_FP8_FOLD(y1);
        }
        if (t4 == 0)
            L[i] = (m[u] + log2f(l[u])) * RT_LN2;
    }
    /* per warp, not per block: the producer warpgroup has returned (no block barrier) */
    RT_FP8_FOLD_WARP_END();
}

/* A block: grid (ceil(T / 128), heads, B) as att_block_order takes it; src.mq, src.mv,
 * src.H, src.KV as att90_src says, W the window (0: none), P packed rows' positions [B,
 * T] (PK; NULL) */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void attention_fwd90(att90_src src, float *lse, act_t *y, int W,
                                                float sl2, const int *P RT_FP8_SLOT)
{
    static_assert(HD == 64 || HD == 128, "the sm_90a forward takes heads 64 or 128 wide");
    constexpr int S = RT_ATT90_STAGES, NQT = (T + RT_ATT90_BQ - 1) / RT_ATT90_BQ;
    constexpr unsigned QB = RT_ATT90_BQ * HD * 2, KB = RT_ATT90_BK * HD * 2;
    const unsigned base = sm90_smem(sm90_dyn_smem()), bars = base + QB + 2 * S * KB;
    int tile0;
    att_block_order(src.b, src.h, tile0);
    src.kh = src.h / (src.H / src.KV);
    const int q0 = (NQT - 1 - tile0) * RT_ATT90_BQ, d = src.H * HD;
    const int nkeys = atx_key_end<T, CAUSAL>(q0 + RT_ATT90_BQ < T ? q0 + RT_ATT90_BQ : T, W);
    src.nkt = (nkeys + RT_ATT90_BK - 1) / RT_ATT90_BK;
    /* the first row's window, or its sequence's start (packed rows) */
    src.jb = atx_tile_first(PK ? P : nullptr, src.b, T, q0, W > 0 && q0 >= W ? q0 - W + 1 : 0) /
             RT_ATT90_BK;
    if (threadIdx.x == 0) {
        sm90_mbar_init(bars, 1);
        for (int s = 0; s < S; s++) {
            sm90_mbar_init(bars + 8 * (1 + s), 1);             /* K full: the producer's arrival */
            sm90_mbar_init(bars + 8 * (1 + S + s), 1);         /* V full */
            sm90_mbar_init(bars + 8 * (1 + 2 * S + s), 256);   /* K empty: every consumer thread */
            sm90_mbar_init(bars + 8 * (1 + 3 * S + s), 256);   /* V empty */
        }
        sm90_fence_barrier_init();
    }
    __syncthreads();
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        sm90_setmaxnreg_dec<40>();
        if (threadIdx.x == 0)
            att90_produce<HD>(src, base, q0);
        return;
    }
    sm90_setmaxnreg_inc<232>();
    att90_consume<T, HD, CAUSAL, PK>(base, wg - 1, q0, src.jb, src.nkt, W, sl2,
                                     lse + ((int64_t)src.b * src.H + src.h) * T, y, d, src.h,
                                     src.b, PK ? P + (int64_t)src.b * T : nullptr RT_FP8_SLOT_ARG);
}

#else
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void attention_fwd90(att90_src src, float *lse, act_t *y, int W,
                                                float sl2, const int *P RT_FP8_SLOT) {}
#endif

/* Emitted with each RT_ATTENTION_FWD (RT_ATTENTION_EXT_FWD) instance (attention.cuh)
 * where NVRTC compiles for sm_90a; cuda_ops.c launches them only for 16-bit activations
 * and heads of 64 or 128. */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void attention_fwd90_any(const att90_src &src, float *lse, act_t *y,
                                                    int W, float sl2, const int *P RT_FP8_SLOT)
{
    if constexpr (HD == 64 || HD == 128)
        attention_fwd90<T, HD, CAUSAL, PK>(src, lse, y, W, sl2, P RT_FP8_SLOT_ARG);
}
#if RT_SM90A
#define RT_ATTENTION_FWD90(T, HD, CAUSAL)                                                       \
    extern "C" __global__ void __launch_bounds__(RT_ATT90_THREADS, 1)                           \
        rt_attention_fwd90_##T##_##HD##_##CAUSAL(const __grid_constant__ rt_tmap map, float *lse, \
                                                 act_t *y, int H RT_FP8_SLOT)                   \
    {                                                                                           \
        attention_fwd90_any<T, HD, CAUSAL, false>(                                              \
            att90_src{&map, &map, 0, 0, H, H, 0, 0, 0}, lse, y, 0,                              \
            (float)(1.4426950408889634 / sqrt((double)HD)), nullptr RT_FP8_SLOT_ARG);           \
    }
/* the Llama-family options: NAME rt_attention_ext, or rt_attention_ext_pk (packed rows) */
#define RT_ATTENTION_EXT_FWD90_K(NAME, PK, T, HD, CAUSAL)                                       \
    extern "C" __global__ void __launch_bounds__(RT_ATT90_THREADS, 1)                           \
        NAME##_fwd90_##T##_##HD##_##CAUSAL(                                                     \
            const __grid_constant__ rt_tmap mq, const __grid_constant__ rt_tmap mv, float *lse, \
            act_t *y, int H, int KV, int W, float sl2, const int *P_ RT_FP8_SLOT)               \
    {                                                                                           \
        attention_fwd90_any<T, HD, CAUSAL, PK>(att90_src{&mq, &mv, 0, 0, H, KV, 0, 0, 0}, lse,  \
                                               y, W, sl2, P_ RT_FP8_SLOT_ARG);                  \
    }
#define RT_ATTENTION_EXT_FWD90(T, HD, CAUSAL) RT_ATTENTION_EXT_FWD90_K(rt_attention_ext, false, T, HD, CAUSAL)
#define RT_ATTENTION_EXT_PK_FWD90(T, HD, CAUSAL)                                                \
    RT_ATTENTION_EXT_FWD90_K(rt_attention_ext_pk, true, T, HD, CAUSAL)
#else
#define RT_ATTENTION_FWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_FWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_PK_FWD90(T, HD, CAUSAL)
#endif
