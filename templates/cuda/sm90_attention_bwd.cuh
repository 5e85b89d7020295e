/* sm90_attention_bwd.cuh: the attention backward for Hopper (sm_90a) on sm90.cuh's
 * primitives: the same contract and outputs (dqkv, and D scratch between its two
 * kernels) as attention.cuh's rt_attention_bwd_T_HD_CAUSAL and
 * rt_attention_bwd_kv_T_HD_CAUSAL, for bf16 or fp16 activations and heads 64 or 128
 * wide. Only where NVRTC compiles for sm_90a (RT_SM90A); runtime/cuda_ops.c launches it
 * there when the shape fits, else attention.cuh's kernels.
 *
 *   rt_attention_bwd90_T_HD_CAUSAL(mqkv, mdy, lse, y, dy, dqkv, D, H)      dq, and D
 *   rt_attention_bwd90_kv_T_HD_CAUSAL(mqkv, mdy, lse, y, dy, dqkv, D, H)   dk, dv
 *
 * mqkv, mdy: CUtensorMaps of qkv {3d, T, B} and dy {d, T, B} (16-bit values, columns,
 * rows, batch), boxes {64, 64, 1}, the 128-byte swizzle, zeros outside (rows past T).
 *
 * The Llama-family options (attention.cuh's rt_attention_ext_bwd_q_* and _kv_*):
 *
 *   rt_attention_ext_bwd90_q_T_HD_CAUSAL(mq, mv, mdy, lse, y, dy, dqkv, D, H, KV, W,
 *                                        scale, sl2, theta, factor, low, high, orig, ext, qkv,
 *                                        qn, kn, partq, partk, P_)
 *   rt_attention_ext_bwd90_kv_T_HD_CAUSAL(same arguments)
 *   rt_attention_ext_pk_bwd90_q_*, _kv_*: the same over packed rows, P_ their positions
 *     [B, T] (PK; NULL in the others): query p sees keys from p - P[p] alone and rope
 *     turns row p by P[p]; the query side skips the key tiles wholly before its rows'
 *     sequences, the key side the query tiles whose sequences start past its keys
 *
 * qkv and dqkv [B, T, (H + 2 KV) HD]; Q and K read through mq (query head h at column
 * h HD, key head kh at (H + kh) HD: rt_attention_prep90's copy where qk_norm or rope is
 * on, qkv's map where not), V through mv (qkv, column (H + KV + kh) HD). The query side's
 * grid is (tiles, H, B) as above, its key tiles K and V of head h / (H / KV) and only
 * those inside its rows' windows; the key side's grid is (tiles, KV, B): a block keeps
 * its K and V tiles resident while it streams the query tiles of all G = H / KV query
 * heads of its group (head after head), so dK and dV sum over the group in registers in
 * a fixed order, written once. dq and dk go back through the inverse rotation and
 * qk_norm's backward (attention.cuh's atx_tc_bwd, on the accumulators, the raw rows read
 * from qkv) before they are stored; each block's norm-weight gradient, summed over its
 * rows in a fixed order, goes to partq / partk for cuda_ops.c to add up in order.
 *
 * Not flash attention 3's backward: that one accumulates dQ with fp32 atomics, whose
 * order varies from run to run. Here, as in attention.cuh, two kernels, every sum in a
 * fixed order (the same bits every run):
 *
 *   query side (first): a block takes a tile of 128 query rows, its Q and dY resident in
 *     shared memory, and streams the key tiles (64 keys) that the rows see:
 *       S = Q K^T, dP = dY V^T         wgmma SS, m64 x n64, both operands K-major
 *       P = exp(scale S - lse), dS = P (dP - D)   on the accumulator fragments, fp32
 *       dQ += dS K                     wgmma RS (dS rounded to 16 bits), K MN-major
 *     D_i = dy_i . y_i (each lane a quarter of the row in double, the row's four lanes
 *     summed by a fixed butterfly) goes to D scratch for the second kernel.
 *   key side (second): a tile of 128 keys, K and V resident, streams the query tiles (64
 *     queries: Q, dY) that see them:
 *       S^T = K Q^T, dP^T = V dY^T     wgmma SS, m64 x n64
 *       P^T, dS^T as above (lse and D read from global memory as needed)
 *       dV += P^T dY, dK += dS^T Q     wgmma RS (P^T, dS^T rounded to 16 bits), MN-major
 *
 * Launch (both): grid (ceil(T / 128), H, B) taken tile-major (att_block_order: the
 * longest tiles of every head first), dynamic shared memory rt_att90b_smem(HD) bytes.
 * Warpgroups 0 and 1 consume: warpgroup c takes rows 64 c .. 64 c + 63 of the resident
 * tile; a streamed tile entirely masked for its rows (causal) is waited for and released
 * without products; every consumer thread arrives on the stage's "empty" mbarrier (count
 * 256) after its own wgmma.wait_group. One thread issues the TMA copies: the resident
 * pair once, then each streamed pair into stage j % 2 of a two-stage ring once the
 * stage's empty barrier says both consumers are done with it, counted on its "full"
 * mbarrier (transaction bytes).
 *   query side: 288 threads; the issuing thread is a producer warp's (warp 8).
 *   key side: 256 threads; thread 0 issues the first two pairs, then refills a stage
 *     after its own warpgroup's use of it (its warp waits for the other's).
 * Why no producer warpgroup with setmaxnreg, as the forward has: ptxas gives a thread
 * 168 registers in a block of more than eight warps (three warps share a quarter of the
 * register file), and with 384 threads and setmaxnreg it compiled the key side for 168
 * and spilled 720 bytes at heads 128: its accumulators alone (dK and dV, m64 x HD fp32
 * each) are 128 registers a thread. At 256 threads it has 255 and spills nothing.
 *
 * Shared memory: the resident tiles (2 x 128 rows), then two stages of two streamed
 * tiles (64 rows each), then the mbarriers (resident, full[2], empty[2]); a tile of R
 * rows is HD / 64 "panels" of [R][64] values one after another, each R x 128 bytes,
 * swizzled as sm90.cuh says (the TMA writes them so). 64 KiB for heads of 64, 128 KiB
 * for 128. The arithmetic is the sm_80 tensor-core kernels' (fp32 scores and
 * accumulators, the 16-bit roundings of P and dS for their products): dqkv agrees with
 * them within rounding, not bit for bit (the tensor cores sum in another order). */
#define RT_ATT90B_THREADS 288      /* the query side: two consumer warpgroups, a producer warp */
#define RT_ATT90B_KV_THREADS 256   /* the key side: two consumer warpgroups */
#define RT_ATT90B_RES 128   /* rows of the resident tile: queries (dq), keys (dk, dv) */
#define RT_ATT90B_STR 64    /* rows of a streamed tile */
#define RT_ATT90B_STAGES 2

/* dynamic shared memory of either kernel for heads hd wide (cuda_ops.c: the same sum) */
__host__ __device__ constexpr int rt_att90b_smem(int hd)
{
    return (2 * RT_ATT90B_RES + 2 * RT_ATT90B_STAGES * RT_ATT90B_STR) * hd * 2 + 128 + 1024;
}

/* The geometry of a backward: the maps (att90b's header), H query and KV key/value heads,
 * the window W (0: none), rope (theta 0: none), qk_norm's weights (qn, kn; NULL: none)
 * and the blocks' partial weight gradients (partq [B, H, tiles, HD] from the query side,
 * partk [B, KV, tiles, HD] from the key side; cuda_ops.c sums them in order) */
struct att90b_geo {
    const rt_tmap *mq, *mv, *mdy;
    int H, KV, W;
    float scale, sl2;   /* the scores' factor, and it times log2(e) */
    float theta, factor, low, high;
    int orig;
    const float *ext;   /* the inverse frequencies (NULL: from theta) */
    const act_t *qkv;   /* the raw rows qk_norm's backward reads (NULL without it) */
    const float *qn, *kn;
    double *partq, *partk;
    const int *P;       /* packed rows' positions [B, T] (read by the PK kernels alone) */
};

#if RT_SM90A && (defined(RT_ACT_BF16) || defined(RT_ACT_F16))
#if defined(RT_ACT_F16)
#define RT_ATT90B_F16 true
#else
#define RT_ATT90B_F16 false
#endif

/* the warp reconverged after one thread's copies, before its warpgroup's wgmma
 * (.sync.aligned: every thread of the warp executes it together) */
__device__ __forceinline__ void att90b_syncwarp()
{
#if defined(RT_EMU)
    emu_syncwarp();
#else
    __syncwarp();
#endif
}

/* The shared layout's addresses (base: the 1024-aligned start). */
template <int HD> struct att90b_smem_map {
    static constexpr unsigned RB = RT_ATT90B_RES * HD * 2, SB = RT_ATT90B_STR * HD * 2;
    unsigned base;
    __device__ unsigned res(int i) const { return base + i * RB; }   /* i = 0, 1 */
    __device__ unsigned str(int s, int i) const { return base + 2 * RB + (2 * s + i) * SB; }
    __device__ unsigned bars() const { return base + 2 * RB + 2 * RT_ATT90B_STAGES * SB; }
    __device__ unsigned resbar() const { return bars(); }
    __device__ unsigned full(int s) const { return bars() + 8 * (1 + s); }
    __device__ unsigned empty(int s) const { return bars() + 8 * (1 + RT_ATT90B_STAGES + s); }
};

/* rows r0 .. r0 + R - 1, columns c0 .. c0 + HD - 1 of map (batch row b) into the tile at
 * dst (R rows): HD / 64 panels of R / 64 boxes each, counted on bar */
template <int R, int HD>
__device__ __forceinline__ void att90b_load(unsigned dst, const rt_tmap *map, unsigned bar, int c0,
                                            int r0, int b)
{
    for (int p = 0; p < HD / 64; p++)
        for (int r = 0; r < R / 64; r++)
            sm90_tma_load_3d(dst + p * R * 128 + r * 64 * 128, map, bar, c0 + 64 * p, r0 + 64 * r, b);
}

/* Where a kernel's streamed tiles come from: map sa at column csa into a stage's first
 * tile, map sb at csb into its second, batch row b; the j-th pair is head g = j / per's
 * (columns step g further), rows s0 + 64 (j % per) */
struct att90b_src {
    const rt_tmap *sa, *sb;
    int csa, csb, s0, b, per, step;
};

/* The resident pair (map ra at column ca, map rb at cb, rows from r0), counted on the
 * resident barrier */
template <int HD>
__device__ __forceinline__ void att90b_resident(att90b_smem_map<HD> sm, const rt_tmap *ra, int ca,
                                                const rt_tmap *rb, int cb, int r0, int b)
{
    sm90_tma_prefetch(ra);
    sm90_tma_prefetch(rb);
    sm90_mbar_arrive_expect_tx(sm.resbar(), 2 * sm.RB);
    att90b_load<RT_ATT90B_RES, HD>(sm.res(0), ra, sm.resbar(), ca, r0, b);
    att90b_load<RT_ATT90B_RES, HD>(sm.res(1), rb, sm.resbar(), cb, r0, b);
}

/* The j-th streamed pair into stage s, counted on the stage's full barrier */
template <int HD>
__device__ __forceinline__ void att90b_issue(att90b_smem_map<HD> sm, const att90b_src &src, int s, int j)
{
    constexpr int BS = RT_ATT90B_STR;
    const int g = j / src.per, r = src.s0 + BS * (j - g * src.per);
    sm90_mbar_arrive_expect_tx(sm.full(s), 2 * sm.SB);
    att90b_load<BS, HD>(sm.str(s, 0), src.sa, sm.full(s), src.csa + g * src.step, r, src.b);
    att90b_load<BS, HD>(sm.str(s, 1), src.sb, sm.full(s), src.csb + g * src.step, r, src.b);
}

/* The query side's producer thread: n streamed pairs into the ring, each once the
 * stage's empty barrier says both consumers are done with what it held */
template <int HD>
__device__ __forceinline__ void att90b_produce(att90b_smem_map<HD> sm, const att90b_src &src, int n)
{
    constexpr int S = RT_ATT90B_STAGES;
    for (int j = 0; j < n; j++) {
        sm90_mbar_wait(sm.empty(j % S), ((unsigned)(j / S) & 1u) ^ 1u);   /* first pass: at once */
        att90b_issue<HD>(sm, src, j % S, j);
    }
}
/* X = A B^T for A's 64 rows from row a0 of the R-row tile at ta and B's 64 rows at tb (a
 * streamed tile), over HD: k-step kk is panel kk / 4, 32 bytes a step within its rows */
template <int R, int HD>
__device__ __forceinline__ void att90b_ss(float *x, unsigned ta, int a0, unsigned tb)
{
    for (int kk = 0; kk < HD / 16; kk++) {
        const unsigned off = 32u * (unsigned)(kk & 3);
        const unsigned a = ta + (kk >> 2) * R * 128 + a0 * 128 + off;
        const unsigned bb = tb + (kk >> 2) * RT_ATT90B_STR * 128 + off;
        sm90_wgmma_ss<64, 0, RT_ATT90B_F16>(x, sm90_desc(a, 0, 1024), sm90_desc(bb, 0, 1024), kk > 0);
    }
}

/* The m64 x k64 accumulator fragment x rounded to 16 bits as RS A fragments: k-step kk
 * is x's 8-column groups 2 kk and 2 kk + 1. Packed before the wgmma.fence that precedes
 * their products (a register an RS wgmma reads must not be written after the fence). */
__device__ __forceinline__ void att90b_pack(unsigned (*a)[4], const float *x)
{
    for (int kk = 0; kk < RT_ATT90B_STR / 16; kk++)
        for (int r = 0; r < 4; r++)
            a[kk][r] = att_pack2(x[8 * kk + 2 * r], x[8 * kk + 2 * r + 1]);
}

/* acc (m64 x HD) += X M, X as att90b_pack's fragments a, M the streamed tile at tm read
 * MN-major (its rows the k index, the HD / 64 panels LBO apart) */
template <int HD>
__device__ __forceinline__ void att90b_rs(float *acc, unsigned (*a)[4], unsigned tm)
{
    for (int kk = 0; kk < RT_ATT90B_STR / 16; kk++)
        sm90_wgmma_rs<HD, 1, RT_ATT90B_F16>(acc, a[kk], sm90_desc(tm + kk * 16 * 128, RT_ATT90B_STR * 128, 1024), 1);
}

/* dq or dk (acc: the thread's accumulator rows u = 0, 1 at positions pos[u], -1 past T;
 * column c = 8 n + 2 t4 + e is acc[4 n + 2 u + e]) back through rope (f; NULL: none) and
 * qk_norm (w; NULL: none) to the raw rows' gradient, in place: attention.cuh's
 * atx_tc_bwd, whose rows are laid out so; x the raw rows (xr[u], NULL: zeros), dw the
 * thread's column sums of the norm weight's gradient */
template <int HD>
__device__ __forceinline__ void att90b_back(float *acc, const act_t *const xr[2], const int pos[2],
                                            const float *w, const float *f, float (*dw)[2], int t4)
{
    atx_rows2<HD / 8> g, x;
    for (int n = 0; n < HD / 8; n++)
        for (int u = 0; u < 2; u++)
            for (int e = 0; e < 2; e++)
                g.v[n][u][e] = acc[4 * n + 2 * u + e];
    if (w)
        atx_tc_ld(x, xr, t4);
    atx_tc_bwd(g, x, pos, w, f, dw, t4);
    for (int n = 0; n < HD / 8; n++)
        for (int u = 0; u < 2; u++)
            for (int e = 0; e < 2; e++)
                acc[4 * n + 2 * u + e] = g.v[n][u][e];
}

/* The block's qk_norm weight gradient into part[HD] (double): the consumer threads'
 * column sums (dw) over a warp's row lanes, then over the eight warps in order. The 256
 * consumer threads call it (a named barrier: the query side's producer warp has
 * returned). */
template <int HD>
__device__ __forceinline__ void att90b_dw(float (*dw)[2], double *part)
{
    __shared__ float red[8][HD];
    const int t = threadIdx.x;
    atx_dw_warp<HD / 8>(dw, red[t >> 5], t & 31);
    sm90_bar_sync(1, 256);
    if (t < HD) {
        double sum = 0.0;
        for (int k = 0; k < 8; k++)
            sum += (double)red[k][t];
        part[t] = sum;
    }
}

/* D_i = dy_i . y_i for rows i and i + 8 (the thread's rows; 0 past T): lane t4 of the
 * row's four sums columns HD / 4 t4 .. in double, then the four by a butterfly */
template <int T, int HD>
__device__ __forceinline__ void att90b_rows_dot(float Dr[2], const act_t *dyh, const act_t *yh,
                                                int64_t d, int i, int t4)
{
    for (int u = 0; u < 2; u++) {
        double a = 0.0;
        if (i + 8 * u < T) {
            const act_t *pd = dyh + (int64_t)(i + 8 * u) * d + t4 * (HD / 4);
            const act_t *py = yh + (int64_t)(i + 8 * u) * d + t4 * (HD / 4);
            for (int c = 0; c < HD / 4; c += 4) {
                const float4 x = rt_ld4(pd + c), z = rt_ld4(py + c);
                a += (double)(x.x * z.x), a += (double)(x.y * z.y);
                a += (double)(x.z * z.z), a += (double)(x.w * z.w);
            }
        }
        a += __shfl_xor_sync(0xffffffffu, a, 1);
        a += __shfl_xor_sync(0xffffffffu, a, 2);
        Dr[u] = (float)a;
    }
}

/* The query side's consumer warpgroup c: query rows q0 + 64 c .. + 63, over the key
 * tiles jb .. nkt - 1 (W: the window, 0 none; fr: rope's frequencies, or NULL; Pb: the
 * batch row's positions, PK, or NULL) */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void att90b_consume_q(att90b_smem_map<HD> sm, int c, int q0, int jb,
                                                 int nkt, int W, float scale, float sl2,
                                                 const int *Pb, const float *fr,
                                                 const float *wn,
                                                 const act_t *xq, double *part,
                                                 const float *Lh, float *Dh, const act_t *dyh,
                                                 const act_t *yh, act_t *dq, int64_t d,
                                                 int64_t ld RT_FP8_SLOT)
{
    constexpr int S = RT_ATT90B_STAGES, BK = RT_ATT90B_STR;
    const int t = threadIdx.x & 127, w = t >> 5, g = (t & 31) >> 2, t4 = t & 3;
    const int rb = q0 + 64 * c, r0 = rb + 16 * w + g;   /* this thread's rows r0, r0 + 8 */
    /* their sequences' starts, and the warpgroup's first row's (packed rows; else none) */
    const int lo[2] = {PK ? atx_seq_start(Pb, r0 < T ? r0 : -1) : RT_ATT_ANY_KEY,
                       PK ? atx_seq_start(Pb, r0 + 8 < T ? r0 + 8 : -1) : RT_ATT_ANY_KEY};
    const int lob = PK ? atx_seq_start(Pb, rb < T ? rb : -1) : 0;
    float Lr[2], Dr[2], acc[HD / 2];
    att90b_rows_dot<T, HD>(Dr, dyh, yh, d, r0, t4);
    for (int u = 0; u < 2; u++) {
        const int i = r0 + 8 * u;
        Lr[u] = i < T ? Lh[i] * RT_LOG2E : 0.0f;   /* in log2 units */
        if (t4 == 0 && i < T)
            Dh[i] = Dr[u];
    }
    for (int i = 0; i < HD / 2; i++)
        acc[i] = 0.0f;
    sm90_mbar_wait(sm.resbar(), 0);   /* Q and dY */
    for (int j = 0; j < nkt - jb; j++) {
        const int s = j % S, k0 = (jb + j) * BK;
        sm90_mbar_wait(sm.full(s), (unsigned)(j / S) & 1u);
        /* every key past this warpgroup's rows, or out of all their windows or sequences */
        if ((CAUSAL && k0 > rb + 63) || (W > 0 && k0 + BK - 1 <= rb - W) ||
            (!CAUSAL && W > 0 && k0 >= rb + 63 + W) || (PK && k0 + BK <= lob)) {
            sm90_mbar_arrive(sm.empty(s));
            continue;
        }
        float sc[BK / 2], dp[BK / 2];
        sm90_wgmma_fence();
        att90b_ss<RT_ATT90B_RES, HD>(sc, sm.res(0), 64 * c, sm.str(s, 0));   /* S = Q K^T */
        att90b_ss<RT_ATT90B_RES, HD>(dp, sm.res(1), 64 * c, sm.str(s, 1));   /* dP = dY V^T */
        sm90_wgmma_commit();
        sm90_wgmma_wait<0>();
        sm90_pin<BK / 2>(sc);
        sm90_pin<BK / 2>(dp);
        const bool edge = PK || (CAUSAL && k0 + BK - 1 > rb) || k0 + BK > T || rb + 64 > T ||
                          atx_window_edge<CAUSAL>(rb, rb + 63, k0, k0 + BK - 1, W);
        for (int e = 0; e < BK / 2; e++) {   /* dS = P (dP - D), 0 where masked */
            const int u = (e >> 1) & 1, kj = k0 + 8 * (e >> 2) + 2 * t4 + (e & 1), i = r0 + 8 * u;
            const bool masked = edge && (i >= T || kj >= T || (CAUSAL && kj > i) ||
                                         atx_outside<CAUSAL>(i, kj, W) || kj < lo[u] ||
                                         (!CAUSAL && PK && atx_apart(Pb, kj, lo[u], T)));
            const float p = rt_exp2_approx(sl2 * sc[e] - Lr[u]);
            sc[e] = masked ? 0.0f : p * (dp[e] - Dr[u]);
        }
        unsigned sa[RT_ATT90B_STR / 16][4];
        att90b_pack(sa, sc);
        sm90_pin<HD / 2>(acc);
        sm90_pin<RT_ATT90B_STR / 16>(sa);
        sm90_wgmma_fence();
        att90b_rs<HD>(acc, sa, sm.str(s, 0));   /* dQ += dS K */
        sm90_wgmma_commit();
        sm90_wgmma_wait<0>();
        sm90_pin<HD / 2>(acc);
        sm90_mbar_arrive(sm.empty(s));   /* K and V read */
    }
    for (int i = 0; i < HD / 2; i++)
        acc[i] *= scale;
    float dw[HD / 8][2] = {};
    if (fr || wn) {   /* q was normalized and rotated: back to the raw rows */
        const int p[2] = {r0 < T ? atx_rope_pos(Pb, r0) : -1, r0 + 8 < T ? atx_rope_pos(Pb, r0 + 8) : -1};
        const act_t *xr[2] = {p[0] >= 0 ? xq + (int64_t)r0 * ld : nullptr,
                              p[1] >= 0 ? xq + (int64_t)(r0 + 8) * ld : nullptr};
        att90b_back<HD>(acc, xr, p, wn, fr, dw, t4);
    }
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    for (int u = 0; u < 2; u++) {
        const int i = r0 + 8 * u;
        if (i >= T)
            continue;
        for (int n = 0; n < HD / 8; n++)
            att_st2(dq + (int64_t)i * ld + 8 * n + 2 * t4, RT_FP8_FOLDED(acc[4 * n + 2 * u]),
                    RT_FP8_FOLDED(acc[4 * n + 2 * u + 1]));
    }
    /* per warp, not per block: the producer warp has returned (no block barrier) */
    RT_FP8_FOLD_WARP_END();
    if (wn)
        att90b_dw<HD>(dw, part);
}

/* One streamed query tile (stage s, queries from i0) for the key side's warpgroup c (keys
 * from kb, this thread's j0 and j0 + 8; sl2 the scores' factor times log2(e); Pb the
 * batch row's positions, PK, or NULL): dV += P^T dY, dK += dS^T Q */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void att90b_kv_tile(att90b_smem_map<HD> sm, int s, int c, int i0, int kb,
                                               int j0, int t4, int W, float sl2, const float *Lh,
                                               const float *Dh, const int *Pb, float *gk, float *gv)
{
    constexpr int BQ = RT_ATT90B_STR;
    float st[BQ / 2], dpt[BQ / 2];
    sm90_wgmma_fence();
    att90b_ss<RT_ATT90B_RES, HD>(st, sm.res(0), 64 * c, sm.str(s, 0));    /* S^T = K Q^T */
    att90b_ss<RT_ATT90B_RES, HD>(dpt, sm.res(1), 64 * c, sm.str(s, 1));   /* dP^T = V dY^T */
    sm90_wgmma_commit();
    sm90_wgmma_wait<0>();
    sm90_pin<BQ / 2>(st);
    sm90_pin<BQ / 2>(dpt);
    const bool edge = PK || (CAUSAL && i0 < kb + 63) || i0 + BQ > T ||
                      atx_window_edge<CAUSAL>(i0, i0 + BQ - 1, kb, kb + 63, W);
    for (int e = 0; e < BQ / 2; e++) {   /* P^T into st, dS^T into dpt */
        const int i = i0 + 8 * (e >> 2) + 2 * t4 + (e & 1), kj = j0 + 8 * ((e >> 1) & 1);
        /* (query i's sequence start: the row's lanes read the same ones, L1) */
        const bool masked = edge && (i >= T || (CAUSAL && kj > i) || atx_outside<CAUSAL>(i, kj, W) ||
                                     (PK && kj < atx_seq_start(Pb, i)) ||
                                     (!CAUSAL && PK && atx_apart(Pb, kj, atx_seq_start(Pb, i), T)));
        /* lse (in log2 units) and D of query i from global memory (the row's lanes read
         * the same ones: L1) */
        const float lt = i < T ? Lh[i] * RT_LOG2E : 0.0f, Di = i < T ? Dh[i] : 0.0f;
        const float p = masked ? 0.0f : rt_exp2_approx(sl2 * st[e] - lt);
        st[e] = p;
        dpt[e] = p * (dpt[e] - Di);
    }
    unsigned pa[BQ / 16][4], sa[BQ / 16][4];
    att90b_pack(pa, st);
    att90b_pack(sa, dpt);
    sm90_pin<HD / 2>(gv);
    sm90_pin<HD / 2>(gk);
    sm90_pin<BQ / 16>(pa);
    sm90_pin<BQ / 16>(sa);
    sm90_wgmma_fence();
    att90b_rs<HD>(gv, pa, sm.str(s, 1));   /* dV += P^T dY */
    att90b_rs<HD>(gk, sa, sm.str(s, 0));   /* dK += dS^T Q */
    sm90_wgmma_commit();
    sm90_wgmma_wait<0>();
    sm90_pin<HD / 2>(gv);
    sm90_pin<HD / 2>(gk);
}

/* The key side's warpgroup c: keys k0 + 64 c .. + 63, over G heads' nqt query tiles
 * from i00 each (the pair j: head j / nqt's tile j % nqt; Lh, Dh the group's first head's
 * rows, a head T further each); W the window (0: none), fr rope's frequencies (or NULL).
 * Thread 0 also refills the ring: the pair after next into a stage once both warpgroups
 * are done with it (the first two pairs were issued before the loop); its whole warp
 * waits for that, so no lane waits at the warp's reconvergence for another warpgroup. */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void att90b_consume_kv(att90b_smem_map<HD> sm, const att90b_src &src,
                                                  int c, int k0, int i00, int nqt, int G, int W,
                                                  float scale, float sl2, const int *Pb,
                                                  const float *fr, const float *wn,
                                                  const act_t *xk, double *part, const float *Lh,
                                                  const float *Dh, act_t *dk, act_t *dv,
                                                  int64_t ld RT_FP8_SLOT)
{
    constexpr int S = RT_ATT90B_STAGES, BQ = RT_ATT90B_STR;
    const int t = threadIdx.x & 127, w = t >> 5, g = (t & 31) >> 2, t4 = t & 3;
    const int kb = k0 + 64 * c, j0 = kb + 16 * w + g;   /* this thread's keys j0, j0 + 8 */
    float gk[HD / 2], gv[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        gk[i] = gv[i] = 0.0f;
    sm90_mbar_wait(sm.resbar(), 0);   /* K and V */
    for (int j = 0; j < G * nqt; j++) {
        const int s = j % S, g = j / nqt, i0 = i00 + (j - g * nqt) * BQ;
        const unsigned ph = (unsigned)(j / S) & 1u;
        sm90_mbar_wait(sm.full(s), ph);
        /* else every query is before these keys, out of all their windows, or (packed)
         * in sequences that start after them */
        if ((!CAUSAL || i0 + BQ - 1 >= kb) && !(W > 0 && i0 - W >= kb + 63) &&
            !(!CAUSAL && W > 0 && kb >= i0 + BQ - 1 + W) &&
            !(PK && atx_seq_start(Pb, i0) > kb + 63))
            att90b_kv_tile<T, HD, CAUSAL, PK>(sm, s, c, i0, kb, j0, t4, W, sl2, Lh + (int64_t)g * T,
                                              Dh + (int64_t)g * T, Pb, gk, gv);
        sm90_mbar_arrive(sm.empty(s));   /* Q and dY read */
        if (threadIdx.x < 32 && j + S < G * nqt) {   /* warp 0 waits, its first thread copies */
            sm90_mbar_wait(sm.empty(s), ph);
            if (threadIdx.x == 0)
                att90b_issue<HD>(sm, src, s, j + S);
        }
        att90b_syncwarp();
    }
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    const int p[2] = {j0 < T ? j0 : -1, j0 + 8 < T ? j0 + 8 : -1};
    const int rp[2] = {j0 < T ? atx_rope_pos(Pb, j0) : -1, j0 + 8 < T ? atx_rope_pos(Pb, j0 + 8) : -1};
    for (int u = 0; u < 2; u++)   /* dv; then dk, back to the raw rows where k was transformed */
        if (p[u] >= 0)
            for (int n = 0; n < HD / 8; n++)
                att_st2(dv + (int64_t)p[u] * ld + 8 * n + 2 * t4, RT_FP8_FOLDED(gv[4 * n + 2 * u]),
                        RT_FP8_FOLDED(gv[4 * n + 2 * u + 1]));
    for (int i = 0; i < HD / 2; i++)
        gk[i] *= scale;
    float dw[HD / 8][2] = {};
    if (fr || wn) {
        const act_t *xr[2] = {p[0] >= 0 ? xk + (int64_t)j0 * ld : nullptr,
                              p[1] >= 0 ? xk + (int64_t)(j0 + 8) * ld : nullptr};
        att90b_back<HD>(gk, xr, rp, wn, fr, dw, t4);
    }
    for (int u = 0; u < 2; u++)
        if (p[u] >= 0)
            for (int n = 0; n < HD / 8; n++)
                att_st2(dk + (int64_t)p[u] * ld + 8 * n + 2 * t4, RT_FP8_FOLDED(gk[4 * n + 2 * u]),
                        RT_FP8_FOLDED(gk[4 * n + 2 * u + 1]));
    RT_FP8_FOLD_WARP_END();
    if (wn)
        att90b_dw<HD>(dw, part);
}

/* The block's mbarriers, by thread `by` (the one that will issue the copies) */
template <int HD>
__device__ __forceinline__ void att90b_bars(att90b_smem_map<HD> sm, unsigned by)
{
    if (threadIdx.x == by) {
        sm90_mbar_init(sm.resbar(), 1);
        for (int s = 0; s < RT_ATT90B_STAGES; s++) {
            sm90_mbar_init(sm.full(s), 1);     /* the issuing thread's arrival */
            sm90_mbar_init(sm.empty(s), 256);  /* every consumer thread */
        }
        sm90_fence_barrier_init();
    }
    __syncthreads();
}

/* rope's frequencies into fr (theta 0: none, NULL returned); before att90b_bars, whose
 * block barrier publishes them */
template <int HD>
__device__ __forceinline__ const float *att90b_freqs(float *fr, const att90b_geo &g)
{
    if (g.theta <= 0.0f)
        return nullptr;
    atx_freqs<HD>(fr, g.theta, g.factor, g.low, g.high, g.orig, g.ext);
    return fr;
}

/* The query side: 288 threads, warpgroups 0 and 1 consume, warp 8 produces; grid
 * (tiles, H, B) */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void attention_bwd90_q(const att90b_geo &geo, const float *lse,
                                                  const act_t *y, const act_t *dy, act_t *dqkv,
                                                  float *D RT_FP8_SLOT)
{
    static_assert(HD == 64 || HD == 128, "the sm_90a backward takes heads 64 or 128 wide");
    constexpr int BQ = RT_ATT90B_RES, BK = RT_ATT90B_STR, NQT = (T + BQ - 1) / BQ;
    __shared__ float frs[HD];
    const att90b_smem_map<HD> sm{sm90_smem(sm90_dyn_smem())};
    const int H = geo.H, KV = geo.KV, W = geo.W;
    int b, h, tile0;
    att_block_order(b, h, tile0);
    const int kh = h / (H / KV), q0 = (NQT - 1 - tile0) * BQ, d = H * HD;
    const int nkeys = atx_key_end<T, CAUSAL>(q0 + BQ < T ? q0 + BQ : T, W);
    const int nkt = (nkeys + BK - 1) / BK;
    /* the first row's window, or its sequence's start (packed rows) */
    const int jb = atx_tile_first(PK ? geo.P : nullptr, b, T, q0, W > 0 && q0 >= W ? q0 - W + 1 : 0) / BK;
    const float *fr = att90b_freqs<HD>(frs, geo);
    att90b_bars<HD>(sm, 256);
    if (threadIdx.x >= 256) {
        if (threadIdx.x == 256) {   /* Q, dY resident; K, V streamed */
            att90b_resident<HD>(sm, geo.mq, h * HD, geo.mdy, h * HD, q0, b);
            att90b_produce<HD>(sm, att90b_src{geo.mq, geo.mv, (H + kh) * HD, (H + KV + kh) * HD,
                                              jb * BK, b, nkt - jb, 0},
                               nkt - jb);
        }
        return;
    }
    const int64_t ld = (int64_t)(H + 2 * KV) * HD, bh = (int64_t)b * H + h;
    double *part = geo.qn ? geo.partq + (bh * gridDim.x + tile0) * HD : nullptr;
    att90b_consume_q<T, HD, CAUSAL, PK>(sm, threadIdx.x >> 7, q0, jb, nkt, W, geo.scale, geo.sl2,
                                        PK ? geo.P + (int64_t)b * T : nullptr, fr, geo.qn,
                                    geo.qkv + (int64_t)b * T * ld + h * HD, part, lse + bh * T,
                                    D + bh * T, dy + (int64_t)b * T * d + h * HD,
                                    y + (int64_t)b * T * d + h * HD,
                                    dqkv + (int64_t)b * T * ld + h * HD, d, ld RT_FP8_SLOT_ARG);
}

/* The key side: 256 threads, two consumer warpgroups; thread 0 issues the copies; grid
 * (tiles, KV, B) */
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void attention_bwd90_kv(const att90b_geo &geo, const float *lse,
                                                   act_t *dqkv, const float *D RT_FP8_SLOT)
{
    static_assert(HD == 64 || HD == 128, "the sm_90a backward takes heads 64 or 128 wide");
    constexpr int BK = RT_ATT90B_RES, BQ = RT_ATT90B_STR;
    __shared__ float frs[HD];
    const att90b_smem_map<HD> sm{sm90_smem(sm90_dyn_smem())};
    const int H = geo.H, KV = geo.KV, W = geo.W, G = H / KV;
    int b, kh, tile0;
    att_block_order(b, kh, tile0);
    const int k0 = tile0 * BK;
    /* the queries that see these keys: from the first (causal) to the last key's window */
    const int i00 = CAUSAL ? k0 : atx_query_first<CAUSAL>(k0, W) / BQ * BQ;
    const int iend = W > 0 && k0 + BK - 1 + W < T ? k0 + BK - 1 + W : T;
    int nqt = (iend - i00 + BQ - 1) / BQ;
    /* packed rows: not the query tiles whose sequences start past these keys (a run at
     * the end: the starts count up; the first tile holds query k0, which sees key k0) */
    const int *Pb = PK ? geo.P + (int64_t)b * T : nullptr;
    while (PK && nqt > 1 && atx_seq_start(Pb, i00 + (nqt - 1) * BQ) > k0 + BK - 1)
        nqt--;
    /* Q, dY of the group's heads streamed, head after head */
    const att90b_src src{geo.mq, geo.mdy, kh * G * HD, kh * G * HD, i00, b, nqt, HD};
    const float *fr = att90b_freqs<HD>(frs, geo);
    att90b_bars<HD>(sm, 0);
    if (threadIdx.x == 0) {   /* K, V resident; the first two pairs */
        att90b_resident<HD>(sm, geo.mq, (H + kh) * HD, geo.mv, (H + KV + kh) * HD, k0, b);
        for (int j = 0; j < RT_ATT90B_STAGES && j < G * nqt; j++)
            att90b_issue<HD>(sm, src, j, j);
    }
    att90b_syncwarp();
    const int64_t ld = (int64_t)(H + 2 * KV) * HD, bh = (int64_t)b * H + kh * G;
    const int64_t at = (int64_t)b * T * ld + (int64_t)(H + kh) * HD;
    act_t *dk = dqkv + at;
    double *part = geo.kn ? geo.partk + (((int64_t)b * KV + kh) * gridDim.x + tile0) * HD : nullptr;
    att90b_consume_kv<T, HD, CAUSAL, PK>(sm, src, threadIdx.x >> 7, k0, i00, nqt, G, W, geo.scale,
                                         geo.sl2, Pb, fr, geo.kn,
                                     geo.qkv + at, part, lse + bh * T, D + bh * T, dk, dk + (int64_t)KV * HD,
                                     ld RT_FP8_SLOT_ARG);
}

#else
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void attention_bwd90_q(const att90b_geo &geo, const float *lse,
                                                  const act_t *y, const act_t *dy, act_t *dqkv,
                                                  float *D RT_FP8_SLOT) {}
template <int T, int HD, int CAUSAL, bool PK>
__device__ __forceinline__ void attention_bwd90_kv(const att90b_geo &geo, const float *lse,
                                                   act_t *dqkv, const float *D RT_FP8_SLOT) {}
#endif

/* Emitted with each RT_ATTENTION_BWD (RT_ATTENTION_EXT_BWD) instance (attention.cuh)
 * where NVRTC compiles for sm_90a; cuda_ops.c launches them only for 16-bit activations
 * and heads of 64 or 128. */
#if RT_SM90A
#define RT_ATTENTION_BWD90(T, HD, CAUSAL)                                                         \
    extern "C" __global__ void __launch_bounds__(RT_ATT90B_THREADS, 1)                            \
        rt_attention_bwd90_##T##_##HD##_##CAUSAL(                                                 \
            const __grid_constant__ rt_tmap mqkv, const __grid_constant__ rt_tmap mdy,            \
            const float *lse, const act_t *y, const act_t *dy, act_t *dqkv, float *D,             \
            int H RT_FP8_SLOT)                                                                    \
    {                                                                                             \
        if constexpr (HD == 64 || HD == 128)                                                      \
            attention_bwd90_q<T, HD, CAUSAL, false>(                                              \
                att90b_geo{&mqkv, &mqkv, &mdy, H, H, 0, (float)(1.0 / sqrt((double)HD)),         \
                           (float)(1.4426950408889634 / sqrt((double)HD)), 0.0f, 0.0f, 0.0f,      \
                           0.0f, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,         \
                           nullptr},                                                              \
                lse, y, dy,                                                                       \
                dqkv, D RT_FP8_SLOT_ARG);                                                         \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(RT_ATT90B_KV_THREADS, 1)                         \
        rt_attention_bwd90_kv_##T##_##HD##_##CAUSAL(                                              \
            const __grid_constant__ rt_tmap mqkv, const __grid_constant__ rt_tmap mdy,            \
            const float *lse, const act_t *y, const act_t *dy, act_t *dqkv, float *D,             \
            int H RT_FP8_SLOT)                                                                    \
    {                                                                                             \
        if constexpr (HD == 64 || HD == 128)                                                      \
            attention_bwd90_kv<T, HD, CAUSAL, false>(                                             \
                att90b_geo{&mqkv, &mqkv, &mdy, H, H, 0, (float)(1.0 / sqrt((double)HD)),         \
                           (float)(1.4426950408889634 / sqrt((double)HD)), 0.0f, 0.0f, 0.0f,      \
                           0.0f, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,         \
                           nullptr},                                                              \
                lse, dqkv,                                                                        \
                D RT_FP8_SLOT_ARG);                                                               \
    }
/* the Llama-family options (the header's second pair) */
#define RT_ATTENTION_EXT_BWD90_ARGS                                                               \
    const __grid_constant__ rt_tmap mq, const __grid_constant__ rt_tmap mv,                       \
        const __grid_constant__ rt_tmap mdy, const float *lse, const act_t *y, const act_t *dy,   \
        act_t *dqkv, float *D, int H, int KV, int W, float scale, float sl2, float theta,         \
        float factor, float low, float high, int orig, const float *ext, const act_t *qkv,        \
        const float *qn, const float *kn, double *partq, double *partk, const int *P_ RT_FP8_SLOT
#define RT_ATTENTION_EXT_BWD90_GEO                                                                \
    att90b_geo {                                                                                  \
        &mq, &mv, &mdy, H, KV, W, scale, sl2, theta, factor, low, high, orig, ext, qkv, qn, kn,    \
            partq, partk, P_                                                                      \
    }
/* NAME: rt_attention_ext, or rt_attention_ext_pk (packed rows, PK) */
#define RT_ATTENTION_EXT_BWD90_K(NAME, PK, T, HD, CAUSAL)                                         \
    extern "C" __global__ void __launch_bounds__(RT_ATT90B_THREADS, 1)                            \
        NAME##_bwd90_q_##T##_##HD##_##CAUSAL(RT_ATTENTION_EXT_BWD90_ARGS)                         \
    {                                                                                             \
        if constexpr (HD == 64 || HD == 128)                                                      \
            attention_bwd90_q<T, HD, CAUSAL, PK>(RT_ATTENTION_EXT_BWD90_GEO, lse, y, dy, dqkv,    \
                                                 D RT_FP8_SLOT_ARG);                              \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(RT_ATT90B_KV_THREADS, 1)                         \
        NAME##_bwd90_kv_##T##_##HD##_##CAUSAL(RT_ATTENTION_EXT_BWD90_ARGS)                        \
    {                                                                                             \
        if constexpr (HD == 64 || HD == 128)                                                      \
            attention_bwd90_kv<T, HD, CAUSAL, PK>(RT_ATTENTION_EXT_BWD90_GEO, lse, dqkv,          \
                                                  D RT_FP8_SLOT_ARG);                             \
    }
#define RT_ATTENTION_EXT_BWD90(T, HD, CAUSAL)                                                     \
    RT_ATTENTION_EXT_BWD90_K(rt_attention_ext, false, T, HD, CAUSAL)
#define RT_ATTENTION_EXT_PK_BWD90(T, HD, CAUSAL)                                                  \
    RT_ATTENTION_EXT_BWD90_K(rt_attention_ext_pk, true, T, HD, CAUSAL)
#else
#define RT_ATTENTION_BWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_BWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_PK_BWD90(T, HD, CAUSAL)
#endif
