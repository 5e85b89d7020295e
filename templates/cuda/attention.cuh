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
 * A block of 128 threads works on one (batch row, head) pair and a tile of query rows
 * (forward, dq) or keys (dk, dv), bringing the other side's rows through shared memory
 * a tile at a time. Thread (ty, tx), ty = 0..15, tx = 0..7 (eight lanes of a warp share
 * a ty), holds a register tile: rows ty, ty + 16, ... and columns tx, tx + 8, ... of the
 * block's score tile and of its output rows, so a product of tiles reads one value a
 * row and one a column for all the products between them. Shared tiles have rows of
 * HD + 1 (or width + 1) floats: the reads above hit distinct banks or broadcast.
 * Everything adds in a fixed order (row sums across the eight lanes by a butterfly):
 * the results do not change from run to run. No atomics: dq and dk/dv are two kernels.
 * Heads up to 128 wide (the compiler refuses wider ones for these kernels).
 *
 * Where NVRTC compiles for sm_90a, each RT_ATTENTION_FWD instance also emits the Hopper
 * forward rt_attention_fwd90_T_HD_CAUSAL (sm90_attention.cuh: wgmma, TMA, warp
 * specialization), which cuda_ops.c takes for 16-bit activations and heads 64 or 128
 * wide; its y and lse are this forward's, read by the backward below.
 *
 * At the end of the file, attention_ext_*: the same with the Llama-family options
 * (grouped-query heads, qk_norm, rope, a window), twins of rt_attention_ext_*, on the
 * CUDA cores and, with 16-bit activations, on the tensor cores (attention_ext_*_tc).
 * Their instances emit the Hopper kernels too (rt_attention_ext_fwd90_*, _bwd90_*),
 * which cuda_ops.c takes on sm_90a for 16-bit activations and heads 64 or 128 wide. */

#define RT_ATT_THREADS 128

/* Tile shapes, shared with cuda_ops.c (att_rows): the forward's query tile is
 * 16 * rt_att_fr(HD) rows against key tiles of 8 * rt_att_fc(HD); the backward's tiles
 * are half as tall, since they hold twice the operands. All fit in 48 KiB. */
__host__ __device__ constexpr int rt_att_fr(int hd) { return hd > 64 ? 2 : 4; }
__host__ __device__ constexpr int rt_att_fc(int hd) { return hd > 64 ? 2 : 4; }
__host__ __device__ constexpr int rt_att_br(int hd) { return hd > 64 ? 1 : 2; }
__host__ __device__ constexpr int rt_att_bc(int hd) { return hd > 64 ? 2 : 4; }

/* rows [0, n) of an R x HD tile from rows of stride ld at src; rows [n, R) set to 0 */
template <int R, int HD>
__device__ __forceinline__ void att_load(float (*dst)[HD + 1], const act_t *src, int64_t ld, int n)
{
    for (int e = threadIdx.x; e < R * HD; e += RT_ATT_THREADS) {
        int i = e / HD, c = e % HD;
        dst[i][c] = i < n ? rt_ld(src + i * ld + c) : 0.0f;
    }
}

/* 8-lane butterflies (the lanes that share a ty) */
__device__ __forceinline__ float att_max8(float v)
{
    for (int o = 4; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float att_sum8(float v)
{
    for (int o = 4; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* A thread's RS x CS pairs (row ty + 16 r of tile A, row tx + 8 j of tile B) of the
 * product s = A B^T (rows of HD + 1 floats). */
template <int RS, int CS, int HD>
__device__ __forceinline__ void att_dots(float (*A)[HD + 1], float (*B)[HD + 1], float (*s)[CS])
{
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    for (int r = 0; r < RS; r++)
        for (int j = 0; j < CS; j++)
            s[r][j] = 0.0f;
    for (int c = 0; c < HD; c++) {
        float a[RS], bb[CS];
        for (int r = 0; r < RS; r++)
            a[r] = A[ty + 16 * r][c];
        for (int j = 0; j < CS; j++)
            bb[j] = B[tx + 8 * j][c];
        for (int r = 0; r < RS; r++)
            for (int j = 0; j < CS; j++)
                s[r][j] += a[r] * bb[j];
    }
}

/* A thread's RS x CS pairs (row ty + 16 r of tile A, row tx + 8 j of tile B) of two
 * products at once: s = A B^T and dp = A2 B2^T (rows of HD + 1 floats). */
template <int RS, int CS, int HD>
__device__ __forceinline__ void att_dots2(float (*A)[HD + 1], float (*B)[HD + 1],
                                          float (*A2)[HD + 1], float (*B2)[HD + 1],
                                          float (*s)[CS], float (*dp)[CS])
{
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    for (int r = 0; r < RS; r++)
        for (int j = 0; j < CS; j++)
            s[r][j] = dp[r][j] = 0.0f;
    for (int c = 0; c < HD; c++) {
        float a[RS], a2[RS], bb[CS], b2[CS];
        for (int r = 0; r < RS; r++)
            a[r] = A[ty + 16 * r][c], a2[r] = A2[ty + 16 * r][c];
        for (int j = 0; j < CS; j++)
            bb[j] = B[tx + 8 * j][c], b2[j] = B2[tx + 8 * j][c];
        for (int r = 0; r < RS; r++)
            for (int j = 0; j < CS; j++) {
                s[r][j] += a[r] * bb[j];
                dp[r][j] += a2[r] * b2[j];
            }
    }
}

/* acc[r][u] += sum_j P[ty + 16 r][j] * M[j][tx + 8 u] over the W columns of P (rows of
 * W + 1 floats) and the rows of M (HD + 1 floats): a thread's rows of P M. */
template <int RS, int CO, int W, int HD>
__device__ __forceinline__ void att_acc(float (*acc)[CO], float (*P)[W + 1], float (*M)[HD + 1])
{
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    for (int j = 0; j < W; j++) {
        float a[RS], bb[CO];
        for (int r = 0; r < RS; r++)
            a[r] = P[ty + 16 * r][j];
        for (int u = 0; u < CO; u++)
            bb[u] = tx + 8 * u < HD ? M[j][tx + 8 * u] : 0.0f;
        for (int r = 0; r < RS; r++)
            for (int u = 0; u < CO; u++)
                acc[r][u] += a[r] * bb[u];
    }
}

/* Launch: grid (ceil(T / BQ), H, B), 128 threads, BQ = 16 * rt_att_fr(HD); block x
 * takes query tile ceil(T / BQ) - 1 - x (causal: the long rows first). For each tile
 * of BK keys the tile's rows see:
 *   s_ij = scale * q_i . k_j (masked: -inf), m_i' = max(m_i, max_j s_ij),
 *   p_ij = exp(s_ij - m_i'), a_i = exp(m_i - m_i'), l_i = a_i l_i + sum_j p_ij,
 *   acc_i = a_i acc_i + sum_j p_ij v_j
 * then y_i = acc_i / l_i and lse_i = m_i + log l_i. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_fwd(const act_t *qkv, float *lse, act_t *y,
                                              int H RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();   /* fp8-mixed: y's maximum (common.cuh) */
    constexpr int RS = rt_att_fr(HD), CS = rt_att_fc(HD), BQ = 16 * RS, BK = 8 * CS;
    constexpr int CO = (HD + 7) / 8;   /* output columns a thread */
    constexpr int NQT = (T + BQ - 1) / BQ;
    static_assert(HD <= 128, "attention heads wider than 128");
    __shared__ float qs[BQ][HD + 1];   /* the tile's queries */
    __shared__ float ks[BK][HD + 1];   /* BK keys */
    __shared__ float vs[BK][HD + 1];   /* their values */
    __shared__ float ps[BQ][BK + 1];   /* p [query][key] */
    const int b = blockIdx.z, h = blockIdx.y, tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    float *L = lse + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD)), ninf = -rt_inf();
    for (int t = blockIdx.x; t < NQT; t += gridDim.x) {
        const int q0 = (NQT - 1 - t) * BQ, nq = T - q0 < BQ ? T - q0 : BQ;
        const int nkeys = CAUSAL ? (q0 + BQ < T ? q0 + BQ : T) : T;   /* keys the tile sees */
        __syncthreads();
        att_load<BQ, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
        float m[RS], l[RS], acc[RS][CO];
        for (int r = 0; r < RS; r++) {
            m[r] = ninf, l[r] = 0.0f;
            for (int u = 0; u < CO; u++)
                acc[r][u] = 0.0f;
        }
        for (int k0 = 0; k0 < nkeys; k0 += BK) {
            const int nk = T - k0 < BK ? T - k0 : BK;
            __syncthreads();
            att_load<BK, HD>(ks, k + (int64_t)k0 * ld, ld, nk);
            att_load<BK, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
            __syncthreads();
            float s[RS][CS];
            att_dots<RS, CS, HD>(qs, ks, s);
            for (int r = 0; r < RS; r++) {
                const int i = ty + 16 * r;
                float mx = ninf;
                for (int j = 0; j < CS; j++) {
                    const int kj = k0 + tx + 8 * j;
                    s[r][j] = kj >= T || (CAUSAL && kj > q0 + i) ? ninf : scale * s[r][j];
                    mx = fmaxf(mx, s[r][j]);
                }
                const float mn = fmaxf(m[r], att_max8(mx));
                /* a row that has seen no key yet keeps m = -inf: p = 0, a = 1 */
                const float al = mn == ninf ? 1.0f : expf(m[r] - mn);
                float sum = 0.0f;
                for (int j = 0; j < CS; j++) {
                    const float p = mn == ninf ? 0.0f : expf(s[r][j] - mn);
                    ps[i][tx + 8 * j] = p;
                    sum += p;
                }
                l[r] = al * l[r] + att_sum8(sum);
                m[r] = mn;
                for (int u = 0; u < CO; u++)
                    acc[r][u] *= al;
            }
            __syncthreads();
            att_acc<RS, CO, BK, HD>(acc, ps, vs);
        }
        for (int r = 0; r < RS; r++) {
            const int i = ty + 16 * r;
            if (i >= nq)
                continue;
            act_t *yr = y + ((int64_t)b * T + q0 + i) * d + (int64_t)h * HD;
            const float inv = 1.0f / l[r];
            for (int u = 0; u < CO; u++)
                if (tx + 8 * u < HD)
                    rt_st(yr + tx + 8 * u, RT_FP8_FOLDED(acc[r][u] * inv));
            if (tx == 0)
                L[q0 + i] = m[r] + logf(l[r]);
        }
    }
    RT_FP8_FOLD_END();
}

#if defined(RT_ACT_BF16) || defined(RT_ACT_F16)
/* ---- the forward on the tensor cores (16-bit activations) ---------------------------------
 *
 * Same launch, same tiles of 64 query rows, same results up to rounding: each of the
 * four warps takes 16 query rows, and S = Q K^T and O += P V are mma.sync m16n8k16
 * products (16-bit operands, fp32 accumulation) on register fragments, the online
 * softmax running on the S fragments in fp32 (flash attention 2's scheme). P is
 * rounded to 16 bits for its product with V, as there; l sums the unrounded p.
 * Fragments (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4): A's four registers
 * hold rows g, g + 8, g, g + 8 and columns 2t, 2t, 2t + 8, 2t + 8 (and the next
 * column); B's two hold rows 2t and 2t + 8 (and the next) of column g; C's four are
 * (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). S's fragments for keys 16j..16j+15
 * are exactly P's A fragment for that k-step. K and V tiles of 64 keys sit in shared
 * memory as 16-bit values, rows of HD + 8 (16-byte aligned; the eight rows an
 * ldmatrix reads start 16 bytes apart mod 128, so they hit all 32 banks), filled with
 * 16-byte loads; B fragments come out of them by ldmatrix (.trans where the product
 * runs down the tile's rows, as V's in P V), two n-tiles an instruction. The 16-byte
 * accesses need every row 16-byte aligned: heads a multiple of 16 wide do that in the
 * arena's 16-byte aligned tensors (cuda_ops.c checks the pointers).
 * Heads whose width is a multiple of 16, up to 128; other widths use the kernel above.
 * Heads wider than 64 stream tiles of 32 keys (32 queries in the key-side backward)
 * instead of 64, heads wider than 128 (the Llama-family kernels' alone) tiles of 16, so
 * that the two tiles of each operand fit in 48 KiB of shared memory. */
__host__ __device__ constexpr bool rt_att_tc(int hd) { return hd % 16 == 0 && hd <= 128; }
__host__ __device__ constexpr bool rt_att_tc_ext(int hd) { return hd % 16 == 0 && hd <= 256; }
/* rows of the tiles a tensor-core kernel streams through shared memory */
__host__ __device__ constexpr int rt_att_tc_stream(int hd)
{
    return hd > 128 ? 16 : hd > 64 ? 32 : 64;
}

/* two 16-bit values, the first in the low half */
__device__ __forceinline__ unsigned att_pack(unsigned short lo, unsigned short hi)
{
    return (unsigned)lo | (unsigned)hi << 16;
}

/* A fragments (16 rows from r0, all HD columns: KS k-steps) of a matrix of rows of
 * stride ld at p, read from global memory two values a load; rows past T read as 0 */
template <int KS, int T>
__device__ __forceinline__ void att_frag_a(unsigned (*f)[4], const act_t *p, int64_t ld, int r0, int t4)
{
    for (int s = 0; s < KS; s++)
        for (int r = 0; r < 4; r++) {
            const int row = r0 + 8 * (r & 1), col = 16 * s + 2 * t4 + 8 * (r >> 1);
            f[s][r] = row < T ? *(const unsigned *)(p + (int64_t)row * ld + col) : 0u;
        }
}

/* two floats rounded to 16 bits, the first in the low half (common.cuh's rt_pack2:
 * one cvt.rn.{bf16,f16}x2.f32 on the GPU) */
__device__ __forceinline__ unsigned att_pack2(float lo, float hi)
{
    const float v[2] = {lo, hi};
    return rt_pack2(v, (act_t *)0);
}

/* two values at p (an even column: 4-byte aligned), rounded to 16 bits, one store */
__device__ __forceinline__ void att_st2(act_t *p, float lo, float hi)
{
    *(unsigned *)p = att_pack2(lo, hi);
}

/* log2(e) and ln(2): the tensor-core kernels keep scores in log2 units (s log2 e), so
 * exp(s - m) is one exp2 (flash attention's scheme); lse is stored in natural units */
#define RT_LOG2E 1.44269504088896341f
#define RT_LN2 0.693147180559945309f

/* Asynchronous copies global -> shared (cp.async, sm_80 on), so that the next tile
 * streams in while the tensor cores work on this one: att_cp16 copies 16 bytes (att_cp4
 * 4), or writes zeros where `valid` is false (src must still be a valid address);
 * att_cp_commit closes the thread's group of copies, att_cp_wait<N> waits until at
 * most N of its groups are still in flight. A copy is visible to the other threads
 * after its issuer's wait and a __syncthreads. (The emulator has twins that make each
 * copy only at the wait covering it.) */
__device__ __forceinline__ void att_cp16(void *dst, const void *src, bool valid)
{
#if defined(RT_EMU)
    emu_cp_async(dst, src, 16, valid ? 16 : 0);
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(a), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#endif
}
__device__ __forceinline__ void att_cp4(void *dst, const void *src, bool valid)
{
#if defined(RT_EMU)
    emu_cp_async(dst, src, 4, valid ? 4 : 0);
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :
                 : "r"(a), "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
#endif
}
__device__ __forceinline__ void att_cp_commit()
{
#if defined(RT_EMU)
    emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void att_cp_wait()
{
#if defined(RT_EMU)
    emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* rows [r0, r0 + R) of two matrices HD wide (rows of stride la at a, lb at b) into the
 * shared tiles da and db as 16-bit values, 16 bytes a copy, asynchronously (att_cp16:
 * the caller commits and waits); rows past T as 0. r0 is a multiple of R. Where the
 * 128 threads divide the copies and a row's copies divide the threads (heads of 16,
 * 32, 64 or 128), each thread makes the same copies of rows RT_ATT_THREADS / (HD / 8)
 * apart: an unrolled loop of pointer steps, without the row check where R divides T. */
template <int R, int HD, int W, int T>
__device__ __forceinline__ void att_tiles16(unsigned short (*da)[W], unsigned short (*db)[W],
                                            const act_t *a, int64_t la, const act_t *b,
                                            int64_t lb, int r0)
{
    constexpr int CPR = HD / 8;   /* 16-byte copies a row */
    if constexpr (R * CPR % RT_ATT_THREADS == 0 && RT_ATT_THREADS % CPR == 0) {
        constexpr int N = R * CPR / RT_ATT_THREADS, STEP = RT_ATT_THREADS / CPR;
        const int row0 = threadIdx.x / CPR, c = 8 * (threadIdx.x % CPR);
        const act_t *pa = a + (int64_t)(r0 + row0) * la + c;
        const act_t *pb = b + (int64_t)(r0 + row0) * lb + c;
#pragma unroll
        for (int it = 0; it < N; it++) {
            const int row = row0 + it * STEP;
            const bool in = T % R == 0 || r0 + row < T;
            /* a row past T copies nothing (its source need only be a valid address) */
            att_cp16(&da[row][c], in ? pa + (int64_t)it * STEP * la : a, in);
            att_cp16(&db[row][c], in ? pb + (int64_t)it * STEP * lb : b, in);
        }
    } else {
        for (int e = threadIdx.x; e < R * CPR; e += RT_ATT_THREADS) {
            const int row = e / CPR, c = 8 * (e % CPR);
            const bool in = r0 + row < T;
            const int64_t rr = in ? r0 + row : 0;
            att_cp16(&da[row][c], a + rr * la + c, in);
            att_cp16(&db[row][c], b + rr * lb + c, in);
        }
    }
}

/* The tensor-core kernels' blocks: grid (tiles, H, B) as launched, but taken in the
 * order the hardware dispatches them (x fastest) as tile-major: the first H * B blocks
 * take tile 0 of every (batch row, head), and so on. Tile 0 is the most work (the
 * query tile with the most keys before it, or the key tile the most queries see), so
 * every head's longest tiles start first, not one head's after another's: a shorter
 * tail to the launch. */
__device__ __forceinline__ void att_block_order(int &b, int &h, int &tile0)
{
    /* in 32 bits (cuda_ops.c keeps the grid under 2^31 blocks): no 64-bit division */
    const unsigned hb_n = gridDim.y * gridDim.z;
    const unsigned l = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned hb = l % hb_n;
    tile0 = (int)(l / hb_n);
    h = (int)(hb % gridDim.y);
    b = (int)(hb / gridDim.y);
}

template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_fwd_tc(const act_t *qkv, float *lse, act_t *y,
                                                 int H RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();   /* fp8-mixed: y's maximum (common.cuh) */
    constexpr int BQ = 64, BK = rt_att_tc_stream(HD), KS = HD / 16, DN = HD / 8, W = HD + 8;
    constexpr int NQT = (T + BQ - 1) / BQ;
    /* 16-bit bits of K and V, two tiles of each: the next copied in while this one is used */
    __shared__ __align__(16) unsigned short ks[2][BK][W], vs[2][BK][W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b, h, tile0;
    att_block_order(b, h, tile0);
    const int g = lane >> 2, t4 = lane & 3;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    float *L = lse + ((int64_t)b * H + h) * T;
    const float sl2 = (float)(1.4426950408889634 / sqrt((double)HD)), ninf = -rt_inf();
    for (int tile = tile0; tile < NQT; tile += gridDim.x) {
        const int q0 = (NQT - 1 - tile) * BQ, r0 = q0 + 16 * warp + g;   /* rows r0, r0 + 8 */
        const int nkeys = CAUSAL ? (q0 + BQ < T ? q0 + BQ : T) : T;
        /* the first key tile's copy starts first (the buffers are free: every pass of
         * the loop below ends with a barrier) */
        att_tiles16<BK, HD, W, T>(ks[0], vs[0], k, ld, v, ld, 0);
        att_cp_commit();
        unsigned qa[KS][4];
        att_frag_a<KS, T>(qa, q, ld, r0, t4);
        float m[2] = {ninf, ninf}, l[2] = {0.0f, 0.0f}, o[DN][4];
        for (int n = 0; n < DN; n++)
            o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
        for (int k0 = 0, cb = 0; k0 < nkeys; k0 += BK, cb ^= 1) {
            if (k0 + BK < nkeys) {   /* the next tile in, then this one waited for */
                att_tiles16<BK, HD, W, T>(ks[cb ^ 1], vs[cb ^ 1], k, ld, v, ld, k0 + BK);
                att_cp_commit();
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            float sc[BK / 8][4];
            for (int n = 0; n < BK / 8; n += 2) {
                for (int r = 0; r < 4; r++)
                    sc[n][r] = sc[n + 1][r] = 0.0f;
                for (int s = 0; s < KS; s++) {
                    unsigned kb[4];
                    rt_bfrag<W>(kb, ks[cb], n, s, lane);
                    rt_mma16816(sc[n], qa[s], kb);
                    rt_mma16816(sc[n + 1], qa[s], kb + 2);
                }
            }
            /* scale (to log2 units), mask (only a tile that reaches past the diagonal
             * or past T has keys to mask), the rows' running max (over a row's 4 lanes) */
            const bool edge = (CAUSAL && k0 + BK - 1 > q0) || k0 + BK > T;
            float mx[2] = {ninf, ninf};
            for (int n = 0; n < BK / 8; n++)
                for (int r = 0; r < 4; r++) {
                    const int kj = k0 + 8 * n + 2 * t4 + (r & 1), i = r0 + 8 * (r >> 1);
                    sc[n][r] = edge && (kj >= T || (CAUSAL && kj > i)) ? ninf : sl2 * sc[n][r];
                    mx[r >> 1] = fmaxf(mx[r >> 1], sc[n][r]);
                }
            float al[2], ms[2];
            for (int u = 0; u < 2; u++) {
                mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 1));
                mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 2));
                const float mn = fmaxf(m[u], mx[u]);
                al[u] = mn == ninf ? 1.0f : rt_exp2_approx(m[u] - mn);
                m[u] = mn;
                l[u] *= al[u];
                /* a row with no key yet (only rows past T: every score -inf) gets
                 * p = 2^(-inf - 0) = 0 */
                ms[u] = mn == ninf ? 0.0f : mn;
            }
            for (int n = 0; n < DN; n++)
                for (int r = 0; r < 4; r++)
                    o[n][r] *= al[r >> 1];
            /* P = exp(S - m): its fragments, key step by key step, times V */
            for (int j = 0; j < BK / 16; j++) {
                unsigned pa[4];
                for (int r = 0; r < 4; r++) {
                    const int n = 2 * j + (r >> 1), u = r & 1;   /* S tile, row half */
                    const float p0 = rt_exp2_approx(sc[n][2 * u] - ms[u]);
                    const float p1 = rt_exp2_approx(sc[n][2 * u + 1] - ms[u]);
                    l[u] += p0 + p1;
                    pa[r] = att_pack2(p0, p1);
                }
                for (int n = 0; n < DN; n += 2) {
                    unsigned vb[4];
                    rt_bfrag_t<W>(vb, vs[cb], j, n, lane);
                    rt_mma16816(o[n], pa, vb);
                    rt_mma16816(o[n + 1], pa, vb + 2);
                }
            }
            __syncthreads();   /* tile cb read by all: the next pass may copy into it */
        }
        for (int u = 0; u < 2; u++) {
            l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
            l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
            const int i = r0 + 8 * u;
            if (i >= T)
                continue;
            act_t *yr = y + ((int64_t)b * T + i) * d + (int64_t)h * HD;
            const float inv = 1.0f / l[u];
            for (int n = 0; n < DN; n++)
                att_st2(yr + 8 * n + 2 * t4, RT_FP8_FOLDED(o[n][2 * u] * inv),
                        RT_FP8_FOLDED(o[n][2 * u + 1] * inv));
            if (t4 == 0)
                L[i] = (m[u] + log2f(l[u])) * RT_LN2;
        }
    }
    RT_FP8_FOLD_END();
}
#else
__host__ __device__ constexpr bool rt_att_tc(int hd) { return false; }
__host__ __device__ constexpr bool rt_att_tc_ext(int hd) { return false; }
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_fwd_tc(const act_t *qkv, float *lse, act_t *y,
                                                 int H RT_FP8_SLOT) {}
#endif

/* the tensor-core forward where it applies, else the CUDA-core one (same launch) */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_fwd_any(const act_t *qkv, float *lse, act_t *y,
                                                  int H RT_FP8_SLOT)
{
    if constexpr (rt_att_tc(HD))
        attention_fwd_tc<T, HD, CAUSAL>(qkv, lse, y, H RT_FP8_SLOT_ARG);
    else
        attention_fwd<T, HD, CAUSAL>(qkv, lse, y, H RT_FP8_SLOT_ARG);
}

/* (fp8-mixed's instances take the slot y's maximum is folded into: RT_FP8_SLOT) */
#define RT_ATTENTION_FWD(T, HD, CAUSAL)                                                       \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_fwd_##T##_##HD##_##CAUSAL(const act_t *qkv, float *lse, act_t *y,        \
                                               int H RT_FP8_SLOT)                             \
    {                                                                                         \
        attention_fwd_any<T, HD, CAUSAL>(qkv, lse, y, H RT_FP8_SLOT_ARG);                     \
    }                                                                                         \
    RT_ATTENTION_FWD90(T, HD, CAUSAL)

/* Backward, first kernel: the query side.
 *
 * Launch: grid (ceil(T / BQ), H, B), 128 threads, BQ = 16 * rt_att_br(HD); block x
 * takes query tile ceil(T / BQ) - 1 - x.
 *   D[b, h, i] = dy_i . y_i                     (in double, rounded; D: [B, H, T] scratch)
 *   P_ij = exp(scale q_i . k_j - lse_i),  dS_ij = P_ij (dy_i . v_j - D_i), 0 where masked
 *   dq_i = scale * sum_j dS_ij k_j               (into dqkv's q columns)
 * D goes to scratch for the second kernel. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_q(const act_t *qkv, const float *lse,
                                                const act_t *y, const act_t *dy, act_t *dqkv,
                                                float *D, int H RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int RS = rt_att_br(HD), CS = rt_att_bc(HD), BQ = 16 * RS, BK = 8 * CS;
    constexpr int CO = (HD + 7) / 8, NQT = (T + BQ - 1) / BQ;
    static_assert(HD <= 128, "attention heads wider than 128");
    __shared__ float qs[BQ][HD + 1];
    __shared__ float dys[BQ][HD + 1];   /* the tile's dy rows */
    __shared__ float ks[BK][HD + 1];
    __shared__ float vs[BK][HD + 1];
    __shared__ float ds[BQ][BK + 1];    /* dS [query][key] */
    __shared__ float Lt[BQ], Dt[BQ];
    const int b = blockIdx.z, h = blockIdx.y, tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;   /* rows of stride d */
    const act_t *yh = y + (int64_t)b * T * d + (int64_t)h * HD;
    act_t *dq = dqkv + (int64_t)b * T * ld + (int64_t)h * HD;
    const float *Lh = lse + ((int64_t)b * H + h) * T;
    float *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int t = blockIdx.x; t < NQT; t += gridDim.x) {
        const int q0 = (NQT - 1 - t) * BQ, nq = T - q0 < BQ ? T - q0 : BQ;
        const int nkeys = CAUSAL ? (q0 + BQ < T ? q0 + BQ : T) : T;
        __syncthreads();
        att_load<BQ, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
        att_load<BQ, HD>(dys, dyh + (int64_t)q0 * d, d, nq);
        __syncthreads();
        /* D_i: warp w takes rows w, w + 4, ... */
        for (int i = warp; i < BQ; i += RT_ATT_THREADS / 32) {
            double a = 0.0;
            if (i < nq)
                for (int c = lane; c < HD; c += 32)
                    a += (double)(dys[i][c] * rt_ld(yh + (int64_t)(q0 + i) * d + c));
            const float Di = (float)rt_warp_sum(a);
            if (lane == 0) {
                Dt[i] = Di;
                Lt[i] = i < nq ? Lh[q0 + i] : 0.0f;
                if (i < nq)
                    Dh[q0 + i] = Di;
            }
        }
        float acc[RS][CO];
        for (int r = 0; r < RS; r++)
            for (int u = 0; u < CO; u++)
                acc[r][u] = 0.0f;
        for (int k0 = 0; k0 < nkeys; k0 += BK) {
            const int nk = T - k0 < BK ? T - k0 : BK;
            __syncthreads();
            att_load<BK, HD>(ks, k + (int64_t)k0 * ld, ld, nk);
            att_load<BK, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
            __syncthreads();
            float s[RS][CS], dp[RS][CS];
            att_dots2<RS, CS, HD>(qs, ks, dys, vs, s, dp);
            for (int r = 0; r < RS; r++)
                for (int j = 0; j < CS; j++) {
                    const int i = ty + 16 * r, kj = k0 + tx + 8 * j;
                    const bool masked = i >= nq || kj >= T || (CAUSAL && kj > q0 + i);
                    ds[i][tx + 8 * j] =
                        masked ? 0.0f : expf(scale * s[r][j] - Lt[i]) * (dp[r][j] - Dt[i]);
                }
            __syncthreads();
            att_acc<RS, CO, BK, HD>(acc, ds, ks);
        }
        for (int r = 0; r < RS; r++) {
            const int i = ty + 16 * r;
            if (i < nq)
                for (int u = 0; u < CO; u++)
                    if (tx + 8 * u < HD)
                        rt_st(dq + (int64_t)(q0 + i) * ld + tx + 8 * u, RT_FP8_FOLDED(scale * acc[r][u]));
        }
    }
    RT_FP8_FOLD_END();
}

/* Backward, second kernel: the key side, after the first (it reads D).
 *
 * Launch: grid (ceil(T / BK), H, B), 128 threads, BK = 16 * rt_att_br(HD) keys a
 * block, against query tiles of 8 * rt_att_bc(HD). Over the queries i that see key j
 * (i >= j when CAUSAL):
 *   dv_j = sum_i P_ij dy_i
 *   dk_j = scale * sum_i dS_ij q_i,   P, dS as in the first kernel
 * into dqkv's v and k columns. Here a thread's rows are keys, its columns queries. */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_kv(const act_t *qkv, const float *lse,
                                                 const act_t *dy, act_t *dqkv, const float *D,
                                                 int H RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int RS = rt_att_br(HD), CS = rt_att_bc(HD), BK = 16 * RS, BQ = 8 * CS;
    constexpr int CO = (HD + 7) / 8;
    static_assert(HD <= 128, "attention heads wider than 128");
    __shared__ float ks[BK][HD + 1];    /* the tile's keys */
    __shared__ float vs[BK][HD + 1];    /* and values */
    __shared__ float qs[BQ][HD + 1];
    __shared__ float dys[BQ][HD + 1];
    __shared__ float ps[BK][BQ + 1];    /* P [key][query] */
    __shared__ float ds[BK][BQ + 1];    /* dS [key][query] */
    __shared__ float Lt[BQ], Dt[BQ];
    const int b = blockIdx.z, h = blockIdx.y, tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;
    act_t *dk = dqkv + (int64_t)b * T * ld + d + (int64_t)h * HD, *dv = dk + d;
    const float *Lh = lse + ((int64_t)b * H + h) * T, *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int k0 = blockIdx.x * BK; k0 < T; k0 += gridDim.x * BK) {
        const int nk = T - k0 < BK ? T - k0 : BK;
        __syncthreads();
        att_load<BK, HD>(ks, k + (int64_t)k0 * ld, ld, nk);
        att_load<BK, HD>(vs, v + (int64_t)k0 * ld, ld, nk);
        float accv[RS][CO], acck[RS][CO];
        for (int r = 0; r < RS; r++)
            for (int u = 0; u < CO; u++)
                accv[r][u] = acck[r][u] = 0.0f;
        for (int q0 = CAUSAL ? k0 / BQ * BQ : 0; q0 < T; q0 += BQ) {
            const int nq = T - q0 < BQ ? T - q0 : BQ;
            __syncthreads();
            att_load<BQ, HD>(qs, q + (int64_t)q0 * ld, ld, nq);
            att_load<BQ, HD>(dys, dyh + (int64_t)q0 * d, d, nq);
            for (int i = threadIdx.x; i < BQ; i += RT_ATT_THREADS) {
                Lt[i] = i < nq ? Lh[q0 + i] : 0.0f;
                Dt[i] = i < nq ? Dh[q0 + i] : 0.0f;
            }
            __syncthreads();
            float s[RS][CS], dp[RS][CS];   /* [key][query] */
            att_dots2<RS, CS, HD>(ks, qs, vs, dys, s, dp);
            for (int r = 0; r < RS; r++)
                for (int j = 0; j < CS; j++) {
                    const int kj = k0 + ty + 16 * r, i = tx + 8 * j, qi = q0 + i;
                    const bool masked = qi >= T || kj >= T || (CAUSAL && kj > qi);
                    const float p = masked ? 0.0f : expf(scale * s[r][j] - Lt[i]);
                    ps[ty + 16 * r][i] = p;
                    ds[ty + 16 * r][i] = masked ? 0.0f : p * (dp[r][j] - Dt[i]);
                }
            __syncthreads();
            for (int i = 0; i < BQ; i++) {
                float p[RS], g[RS], a[CO], a2[CO];
                for (int r = 0; r < RS; r++)
                    p[r] = ps[ty + 16 * r][i], g[r] = ds[ty + 16 * r][i];
                for (int u = 0; u < CO; u++) {
                    const bool in = tx + 8 * u < HD;
                    a[u] = in ? dys[i][tx + 8 * u] : 0.0f;
                    a2[u] = in ? qs[i][tx + 8 * u] : 0.0f;
                }
                for (int r = 0; r < RS; r++)
                    for (int u = 0; u < CO; u++) {
                        accv[r][u] += p[r] * a[u];
                        acck[r][u] += g[r] * a2[u];
                    }
            }
        }
        for (int r = 0; r < RS; r++) {
            const int j = ty + 16 * r;
            if (j < nk)
                for (int u = 0; u < CO; u++)
                    if (tx + 8 * u < HD) {
                        rt_st(dv + (int64_t)(k0 + j) * ld + tx + 8 * u, RT_FP8_FOLDED(accv[r][u]));
                        rt_st(dk + (int64_t)(k0 + j) * ld + tx + 8 * u, RT_FP8_FOLDED(scale * acck[r][u]));
                    }
        }
    }
    RT_FP8_FOLD_END();
}

#if defined(RT_ACT_BF16) || defined(RT_ACT_F16)
/* The first backward kernel on the tensor cores (where the forward uses them): 64
 * query rows a block (cuda_ops.c launches ceil(T / 64) tiles then), 16 a warp; per key
 * tile S = Q K^T and dP = dY V^T as mma.sync, P = exp(scale S - lse) and
 * dS = P (dP - D) on the fragments in fp32, then dQ += dS K with dS rounded to 16
 * bits. D_i = dy_i . y_i as in the kernel above (double, a warp a row). */
/* D_i = dy_i . y_i for the BQ query rows from q0 (0 past T) into Dt (and Dh[q0 + i]
 * within T): each product in float, summed in double. Where a row's 16-byte pieces
 * (HD / 8) are a power of two, a group of that many lanes takes a row, each lane 8
 * elements, and all of a warp's rows are loaded before any sum (their loads overlap);
 * else a warp a row, one after another. */
template <int BQ, int HD, int T>
__device__ __forceinline__ void att_rows_dot(float *Dt, float *Dh, const act_t *dyh,
                                             const act_t *yh, int64_t d, int q0, int warp,
                                             int lane)
{
    constexpr int CPR = HD / 8, NW = RT_ATT_THREADS / 32;
    if constexpr (CPR <= 32 && (CPR & (CPR - 1)) == 0 && BQ % (NW * (32 / CPR)) == 0) {
        constexpr int RPW = 32 / CPR, IT = BQ / (NW * RPW);   /* rows a warp at once; passes */
        const int sub = lane / CPR, c = 8 * (lane % CPR);
        double a[IT];
#pragma unroll
        for (int it = 0; it < IT; it++) {
            const int i = (it * NW + warp) * RPW + sub;
            a[it] = 0.0;
            if (q0 + i < T) {
                const act_t *pd = dyh + (int64_t)(q0 + i) * d + c;
                const act_t *py = yh + (int64_t)(q0 + i) * d + c;
                const float4 d0 = rt_ld4(pd), d1 = rt_ld4(pd + 4);
                const float4 y0 = rt_ld4(py), y1 = rt_ld4(py + 4);
                a[it] += (double)(d0.x * y0.x), a[it] += (double)(d0.y * y0.y);
                a[it] += (double)(d0.z * y0.z), a[it] += (double)(d0.w * y0.w);
                a[it] += (double)(d1.x * y1.x), a[it] += (double)(d1.y * y1.y);
                a[it] += (double)(d1.z * y1.z), a[it] += (double)(d1.w * y1.w);
            }
        }
#pragma unroll
        for (int it = 0; it < IT; it++) {
            const int i = (it * NW + warp) * RPW + sub;
            const float Di = (float)rt_warp_sum(a[it], CPR);
            if (lane % CPR == 0) {
                Dt[i] = Di;
                if (q0 + i < T)
                    Dh[q0 + i] = Di;
            }
        }
    } else {
        for (int i = warp; i < BQ; i += NW) {   /* a warp a row */
            double a = 0.0;
            if (q0 + i < T)
                for (int c = lane; c < HD; c += 32)
                    a += (double)(rt_ld(dyh + (int64_t)(q0 + i) * d + c) *
                                  rt_ld(yh + (int64_t)(q0 + i) * d + c));
            const float Di = (float)rt_warp_sum(a);
            if (lane == 0) {
                Dt[i] = Di;
                if (q0 + i < T)
                    Dh[q0 + i] = Di;
            }
        }
    }
}

template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_q_tc(const act_t *qkv, const float *lse,
                                                   const act_t *y, const act_t *dy, act_t *dqkv,
                                                   float *D, int H RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int BQ = 64, BK = rt_att_tc_stream(HD), KS = HD / 16, DN = HD / 8, W = HD + 8;
    constexpr int NQT = (T + BQ - 1) / BQ;
    __shared__ __align__(16) unsigned short ks[2][BK][W], vs[2][BK][W];   /* two tiles each */
    __shared__ float Dt[BQ];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b, h, tile0;
    att_block_order(b, h, tile0);
    const int g = lane >> 2, t4 = lane & 3;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;
    const act_t *yh = y + (int64_t)b * T * d + (int64_t)h * HD;
    act_t *dq = dqkv + (int64_t)b * T * ld + (int64_t)h * HD;
    const float *Lh = lse + ((int64_t)b * H + h) * T;
    float *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    const float sl2 = (float)(1.4426950408889634 / sqrt((double)HD));
    for (int tile = tile0; tile < NQT; tile += gridDim.x) {
        const int q0 = (NQT - 1 - tile) * BQ, r0 = q0 + 16 * warp + g;
        const int nkeys = CAUSAL ? (q0 + BQ < T ? q0 + BQ : T) : T;
        __syncthreads();   /* Dt read by all */
        att_tiles16<BK, HD, W, T>(ks[0], vs[0], k, ld, v, ld, 0);   /* under D's arithmetic */
        att_cp_commit();
        att_rows_dot<BQ, HD, T>(Dt, Dh, dyh, yh, d, q0, warp, lane);   /* D */
        __syncthreads();
        unsigned qa[KS][4], da[KS][4];   /* Q and dY fragments of the warp's rows */
        att_frag_a<KS, T>(qa, q, ld, r0, t4);
        att_frag_a<KS, T>(da, dyh, d, r0, t4);
        float Lr[2], Dr[2], acc[DN][4];
        for (int u = 0; u < 2; u++) {
            const int i = r0 + 8 * u;
            Lr[u] = i < T ? Lh[i] * RT_LOG2E : 0.0f;   /* in log2 units */
            Dr[u] = Dt[i - q0];
        }
        for (int n = 0; n < DN; n++)
            acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        for (int k0 = 0, cb = 0; k0 < nkeys; k0 += BK, cb ^= 1) {
            if (k0 + BK < nkeys) {   /* the next tile in, then this one waited for */
                att_tiles16<BK, HD, W, T>(ks[cb ^ 1], vs[cb ^ 1], k, ld, v, ld, k0 + BK);
                att_cp_commit();
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            float sc[BK / 8][4], dp[BK / 8][4];
            const bool edge = (CAUSAL && k0 + BK - 1 > q0) || k0 + BK > T || q0 + BQ > T;
            for (int n = 0; n < BK / 8; n += 2) {   /* n-tiles n and n + 1 */
                for (int r = 0; r < 4; r++)
                    sc[n][r] = dp[n][r] = sc[n + 1][r] = dp[n + 1][r] = 0.0f;
                for (int s = 0; s < KS; s++) {
                    unsigned kb[4], vb[4];
                    rt_bfrag<W>(kb, ks[cb], n, s, lane);
                    rt_bfrag<W>(vb, vs[cb], n, s, lane);
                    rt_mma16816(sc[n], qa[s], kb);
                    rt_mma16816(dp[n], da[s], vb);
                    rt_mma16816(sc[n + 1], qa[s], kb + 2);
                    rt_mma16816(dp[n + 1], da[s], vb + 2);
                }
                for (int c = n; c < n + 2; c++)
                    for (int r = 0; r < 4; r++) {   /* dS = P (dP - D), 0 where masked */
                        const int kj = k0 + 8 * c + 2 * t4 + (r & 1), i = r0 + 8 * (r >> 1);
                        const bool masked = edge && (i >= T || kj >= T || (CAUSAL && kj > i));
                        const float p = rt_exp2_approx(sl2 * sc[c][r] - Lr[r >> 1]);
                        sc[c][r] = masked ? 0.0f : p * (dp[c][r] - Dr[r >> 1]);
                    }
            }
            for (int j = 0; j < BK / 16; j++) {   /* dQ += dS K */
                unsigned sa[4];
                for (int r = 0; r < 4; r++) {
                    const int n = 2 * j + (r >> 1), u = r & 1;
                    sa[r] = att_pack2(sc[n][2 * u], sc[n][2 * u + 1]);
                }
                for (int n = 0; n < DN; n += 2) {
                    unsigned kb[4];
                    rt_bfrag_t<W>(kb, ks[cb], j, n, lane);
                    rt_mma16816(acc[n], sa, kb);
                    rt_mma16816(acc[n + 1], sa, kb + 2);
                }
            }
            __syncthreads();   /* tile cb read by all: the next pass may copy into it */
        }
        for (int u = 0; u < 2; u++) {
            const int i = r0 + 8 * u;
            if (i >= T)
                continue;
            for (int n = 0; n < DN; n++)
                att_st2(dq + (int64_t)i * ld + 8 * n + 2 * t4, RT_FP8_FOLDED(scale * acc[n][2 * u]),
                        RT_FP8_FOLDED(scale * acc[n][2 * u + 1]));
        }
    }
    RT_FP8_FOLD_END();
}

/* The second backward kernel on the tensor cores: 64 keys a block, 16 a warp, over the
 * query tiles that see them; per 16 queries S^T = K Q^T and dP^T = V dY^T as mma.sync
 * (the keys are the rows, so P^T and dS^T come out as the A fragments of
 * dV += P^T dY and dK += dS^T Q), P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - D). */
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_kv_tc(const act_t *qkv, const float *lse,
                                                    const act_t *dy, act_t *dqkv, const float *D,
                                                    int H RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int BQ = rt_att_tc_stream(HD), BK = 64, KS = HD / 16, DN = HD / 8, W = HD + 8;
    constexpr int NKT = (T + BK - 1) / BK;
    /* two query tiles of each (the next copied in while this one is used); Lt holds
     * lse in natural units, as stored */
    __shared__ __align__(16) unsigned short qs[2][BQ][W], dys[2][BQ][W];
    __shared__ __align__(16) float Lt[2][BQ], Dt[2][BQ];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b, h, tile0;
    att_block_order(b, h, tile0);
    const int g = lane >> 2, t4 = lane & 3;
    const int64_t d = (int64_t)H * HD, ld = 3 * d;
    const act_t *q = qkv + (int64_t)b * T * ld + (int64_t)h * HD, *k = q + d, *v = q + 2 * d;
    const act_t *dyh = dy + (int64_t)b * T * d + (int64_t)h * HD;
    act_t *dk = dqkv + (int64_t)b * T * ld + d + (int64_t)h * HD, *dv = dk + d;
    const float *Lh = lse + ((int64_t)b * H + h) * T, *Dh = D + ((int64_t)b * H + h) * T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    const float sl2 = (float)(1.4426950408889634 / sqrt((double)HD));
    /* query tile i0 (its Q, dY, lse and D) into buffer u, asynchronously, as one group */
    auto tiles = [&](int u, int i0) {
        att_tiles16<BQ, HD, W, T>(qs[u], dys[u], q, ld, dyh, d, i0);
        for (int e = threadIdx.x; e < BQ; e += RT_ATT_THREADS) {
            const bool in = i0 + e < T;
            att_cp4(&Lt[u][e], Lh + (in ? i0 + e : 0), in);
            att_cp4(&Dt[u][e], Dh + (in ? i0 + e : 0), in);
        }
        att_cp_commit();
    };
    for (int tile = tile0; tile < NKT; tile += gridDim.x) {
        const int k0 = tile * BK, j0 = k0 + 16 * warp + g;   /* the warp's keys j0, j0 + 8 */
        const int ifirst = CAUSAL ? k0 : 0;
        tiles(0, ifirst);   /* the buffers are free: every pass below ends with a barrier */
        unsigned ka[KS][4], va[KS][4];   /* K and V fragments of the warp's keys */
        att_frag_a<KS, T>(ka, k, ld, j0, t4);
        att_frag_a<KS, T>(va, v, ld, j0, t4);
        float gk[DN][4], gv[DN][4];
        for (int n = 0; n < DN; n++)
            for (int r = 0; r < 4; r++)
                gk[n][r] = gv[n][r] = 0.0f;
        for (int i0 = ifirst, cb = 0; i0 < T; i0 += BQ, cb ^= 1) {   /* the queries that see them */
            if (i0 + BQ < T) {   /* the next tile in, then this one waited for */
                tiles(cb ^ 1, i0 + BQ);
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            const bool edge = (CAUSAL && i0 < k0 + BK - 1) || i0 + BQ > T || k0 + BK > T;
            for (int j = 0; j < BQ / 16; j++) {   /* 16 queries at a time */
                float st[2][4], dpt[2][4];
                for (int r = 0; r < 4; r++)
                    st[0][r] = dpt[0][r] = st[1][r] = dpt[1][r] = 0.0f;
                for (int s = 0; s < KS; s++) {   /* n-tiles 2j (c = 0) and 2j + 1 (c = 1) */
                    unsigned qb[4], db[4];
                    rt_bfrag<W>(qb, qs[cb], 2 * j, s, lane);
                    rt_bfrag<W>(db, dys[cb], 2 * j, s, lane);
                    rt_mma16816(st[0], ka[s], qb);
                    rt_mma16816(dpt[0], va[s], db);
                    rt_mma16816(st[1], ka[s], qb + 2);
                    rt_mma16816(dpt[1], va[s], db + 2);
                }
                for (int c = 0; c < 2; c++) {
                    const int n = 2 * j + c;
                    for (int r = 0; r < 4; r++) {   /* P^T into st, dS^T into dpt */
                        const int il = 8 * n + 2 * t4 + (r & 1), i = i0 + il, kj = j0 + 8 * (r >> 1);
                        const bool masked = edge && (i >= T || kj >= T || (CAUSAL && kj > i));
                        const float lt = Lt[cb][il] * RT_LOG2E;   /* in log2 units */
                        const float p = masked ? 0.0f : rt_exp2_approx(sl2 * st[c][r] - lt);
                        st[c][r] = p;
                        dpt[c][r] = p * (dpt[c][r] - Dt[cb][il]);
                    }
                }
                unsigned pa[4], sa[4];
                for (int r = 0; r < 4; r++) {
                    const int c = r >> 1, u = r & 1;
                    pa[r] = att_pack2(st[c][2 * u], st[c][2 * u + 1]);
                    sa[r] = att_pack2(dpt[c][2 * u], dpt[c][2 * u + 1]);
                }
                for (int n = 0; n < DN; n += 2) {   /* dV += P^T dY, dK += dS^T Q */
                    unsigned yb[4], qb[4];
                    rt_bfrag_t<W>(yb, dys[cb], j, n, lane);
                    rt_bfrag_t<W>(qb, qs[cb], j, n, lane);
                    rt_mma16816(gv[n], pa, yb);
                    rt_mma16816(gk[n], sa, qb);
                    rt_mma16816(gv[n + 1], pa, yb + 2);
                    rt_mma16816(gk[n + 1], sa, qb + 2);
                }
            }
            __syncthreads();   /* tile cb read by all: the next pass may copy into it */
        }
        for (int u = 0; u < 2; u++) {
            const int kj = j0 + 8 * u;
            if (kj >= T)
                continue;
            for (int n = 0; n < DN; n++) {
                const int64_t at = (int64_t)kj * ld + 8 * n + 2 * t4;
                att_st2(dv + at, RT_FP8_FOLDED(gv[n][2 * u]), RT_FP8_FOLDED(gv[n][2 * u + 1]));
                att_st2(dk + at, RT_FP8_FOLDED(scale * gk[n][2 * u]),
                        RT_FP8_FOLDED(scale * gk[n][2 * u + 1]));
            }
        }
    }
    RT_FP8_FOLD_END();
}
#else
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_q_tc(const act_t *qkv, const float *lse,
                                                   const act_t *y, const act_t *dy, act_t *dqkv,
                                                   float *D, int H RT_FP8_SLOT) {}
template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_kv_tc(const act_t *qkv, const float *lse,
                                                    const act_t *dy, act_t *dqkv, const float *D,
                                                    int H RT_FP8_SLOT) {}
#endif

template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_kv_any(const act_t *qkv, const float *lse,
                                                     const act_t *dy, act_t *dqkv, const float *D,
                                                     int H RT_FP8_SLOT)
{
    if constexpr (rt_att_tc(HD))
        attention_bwd_kv_tc<T, HD, CAUSAL>(qkv, lse, dy, dqkv, D, H RT_FP8_SLOT_ARG);
    else
        attention_bwd_kv<T, HD, CAUSAL>(qkv, lse, dy, dqkv, D, H RT_FP8_SLOT_ARG);
}

template <int T, int HD, int CAUSAL>
__device__ __forceinline__ void attention_bwd_q_any(const act_t *qkv, const float *lse,
                                                    const act_t *y, const act_t *dy, act_t *dqkv,
                                                    float *D, int H RT_FP8_SLOT)
{
    if constexpr (rt_att_tc(HD))
        attention_bwd_q_tc<T, HD, CAUSAL>(qkv, lse, y, dy, dqkv, D, H RT_FP8_SLOT_ARG);
    else
        attention_bwd_q<T, HD, CAUSAL>(qkv, lse, y, dy, dqkv, D, H RT_FP8_SLOT_ARG);
}

#define RT_ATTENTION_BWD(T, HD, CAUSAL)                                                       \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_bwd_##T##_##HD##_##CAUSAL(const act_t *qkv, const float *lse,            \
                                               const act_t *y, const act_t *dy, act_t *dqkv,  \
                                               float *D, int H RT_FP8_SLOT)                   \
    {                                                                                         \
        attention_bwd_q_any<T, HD, CAUSAL>(qkv, lse, y, dy, dqkv, D, H RT_FP8_SLOT_ARG);      \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                              \
        rt_attention_bwd_kv_##T##_##HD##_##CAUSAL(const act_t *qkv, const float *lse,         \
                                                  const act_t *y, const act_t *dy,            \
                                                  act_t *dqkv, float *D, int H RT_FP8_SLOT)   \
    {                                                                                         \
        attention_bwd_kv_any<T, HD, CAUSAL>(qkv, lse, dy, dqkv, D, H RT_FP8_SLOT_ARG);        \
    }                                                                                         \
    RT_ATTENTION_BWD90(T, HD, CAUSAL)

/* ---- attention with the Llama-family options (twins of rt_attention_ext_fwd and _bwd) ----
 *
 * qkv [B, T, (H + 2 KV) HD]: H query heads, then KV key heads, then KV value heads; query
 * head h reads key/value head h / G (G = H / KV). qk_norm (weights qn, kn [HD], or NULL)
 * and rope (theta > 0, llama3 scaling when factor > 0) are applied as the q and k tiles
 * are loaded, a thread a row (atx_fwd_rows); a window W > 0 masks keys W or more
 * positions back (without the causal mask, W or more ahead as well: atx_outside), and
 * the tiles wholly outside it are never loaded. CUDA cores, fp32
 * arithmetic, any activation type; with 16-bit activations and heads a multiple of 16
 * wide, the tensor-core versions further down (attention_ext_*_tc) take the call.
 *
 * GQA: a block takes one key/value head and a tile of query rows that are (head,
 * position) pairs of all its G query heads, NP = BQ / G positions each (row i: head
 * G k + i / NP, position p0 + i % NP), so each K/V tile brought into shared memory
 * serves the whole group; the key-side backward keeps its K/V tile while it walks the
 * G heads' queries. The launches: grid (tiles, KV, B), 128 threads. The scores' factor
 * is an argument, `scale` (1 / sqrt(HD) unless the attention gives one). */

/* The kernels' arguments after the tensors: H, KV, the window W, rope's theta, factor,
 * low, high and orig, the inverse frequencies ext [HD/2] (NULL: from theta), the
 * scores' factor (the attention's scale), that factor times
 * log2(e), sl2, for the tensor-core kernels' exp2 (an argument, not a product computed
 * here, which ptxas would hold in a register through the loops: an argument is read
 * from the constant bank where used), the scores' soft-cap (the CAP kernels'), and packed
 * rows' positions P_ [B, T], which the PK kernels read (P, NULL in the others, where the
 * compiler drops every line of it): query p sees keys from p - P[p] (its sequence's
 * start) alone, and rope turns row p by P[p] (atx_rope_pos, atx_seq_start) */
#define RT_ATTENTION_EXT_FWD_ARGS                                                              \
    const act_t *qkv, const float *qn, const float *kn, float *lse, act_t *y, int H, int KV,    \
        int W, float theta, float factor, float low, float high, int orig, const float *ext,   \
        float scale, float sl2, float cap, const int *P_ RT_FP8_SLOT
#define RT_ATTENTION_EXT_FWD_PASS                                                              \
    qkv, qn, kn, lse, y, H, KV, W, theta, factor, low, high, orig, ext, scale, sl2,            \
        cap, P_ RT_FP8_SLOT_ARG
#define RT_ATTENTION_EXT_ARGS                                                                  \
    const act_t *qkv, const float *qn, const float *kn, const float *lse, const act_t *y,       \
        const act_t *dy, act_t *dqkv, float *D, double *partq, double *partk, int H, int KV,    \
        int W, float theta, float factor, float low, float high, int orig, const float *ext,   \
        float scale, float sl2, float cap, const int *P_ RT_FP8_SLOT
#define RT_ATTENTION_EXT_PASS                                                                  \
    qkv, qn, kn, lse, y, dy, dqkv, D, partq, partk, H, KV, W, theta, factor, low, high,         \
        orig, ext, scale, sl2, cap, P_ RT_FP8_SLOT_ARG

/* A score of the soft-capped kernels (CAP: Gemma 2's attn_logit_softcapping) from
 * x = scale q.k: cap tanh(x / cap), and *g its derivative 1 - tanh^2 (the factor of
 * the backward's dS); without CAP, x and 1. As the CPU's softcap_row. */
template <bool CAP>
__device__ __forceinline__ float att_score(float x, float cap, float *g)
{
    if constexpr (CAP) {
        const float t = tanhf(x / cap);
        *g = 1.0f - t * t;
        return cap * t;
    } else {
        *g = 1.0f;
        return x;
    }
}

/* The first key of a query outside packed rows, for atx_masked's lo: kj < it is false for
 * every kj, so the compiler drops the test (0 would leave a compare of kj against 0) */
#define RT_ATT_ANY_KEY (-2147483647 - 1)

/* Packed rows' positions (Pb: a batch row's [T], or NULL): the position rope turns row p
 * (>= 0) by, and the first key query p sees, its sequence's start (0 without). As
 * runtime/attention.c's att_rope_at and att_first. */
__device__ __forceinline__ int atx_rope_pos(const int *Pb, int p)
{
    return Pb && p >= 0 ? Pb[p] : p;
}
__device__ __forceinline__ int atx_seq_start(const int *Pb, int p)
{
    return Pb && p >= 0 ? p - Pb[p] : 0;
}

/* Packed rows without a causal mask (each sequence sees itself whole): is key kj in
 * another sequence than the one that starts at lo? (Keys past T are nobody's.) As
 * runtime/attention.c's att_end, from the key's side. */
__device__ __forceinline__ bool atx_apart(const int *Pb, int kj, int lo, int T)
{
    return kj >= T || kj - Pb[kj] != lo;
}

/* The first key a tile of queries from position p0 sees past k (its window's start, or
 * 0), packed rows P at batch row b (NULL: k): the sequence start of its first query,
 * since positions count up from 0 in each sequence (the loader checks) and the other
 * queries' sequences start there or later. The key tiles before it are skipped. */
__device__ __forceinline__ int atx_tile_first(const int *P, int b, int T, int p0, int k)
{
    const int s = P ? p0 - P[(int64_t)b * T + p0] : k;
    return s > k ? s : k;
}

/* Is key kj out of the window W (0: none) of the query at position p: W or more
 * positions back, or without the causal mask W or more ahead too (a window on both
 * sides, ModernBERT's local layers)? */
template <int CAUSAL>
__device__ __forceinline__ bool atx_outside(int p, int kj, int W)
{
    return W > 0 && (kj <= p - W || (!CAUSAL && kj >= p + W));
}

/* One past the last key the queries before p1 see: p1 (causal), or T, or with a window
 * on both sides the last query's reach, p1 - 1 + W, where that is less. */
template <int T, int CAUSAL>
__device__ __forceinline__ int atx_key_end(int p1, int W)
{
    return CAUSAL ? p1 : W > 0 && p1 - 1 + W < T ? p1 - 1 + W : T;
}

/* The first query that sees key k0: k0 (causal), or 0, or with a window on both sides
 * the first in its reach, k0 - W + 1. */
template <int CAUSAL>
__device__ __forceinline__ int atx_query_first(int k0, int W)
{
    return CAUSAL ? k0 : W > 0 && k0 >= W ? k0 - W + 1 : 0;
}

/* Can the window W hide one of the keys k0 .. k1 from one of the queries p0 .. p1? (A
 * tile of scores where none of the tests can hide a key skips them.) */
template <int CAUSAL>
__device__ __forceinline__ bool atx_window_edge(int p0, int p1, int k0, int k1, int W)
{
    return W > 0 && (k0 <= p1 - W || (!CAUSAL && k1 >= p0 + W));
}

/* rope's inverse frequencies f[hd/2], in float32 as runtime/attention.c's rope_table,
 * then each pair's amplitude f[hd/2 + j] (cos and sin times it: longrope's attention
 * factor on the rotated pairs, else 1) (every thread of the block calls it; threads
 * RT_ATT_THREADS apart share the work); ext: the compiler's table of both (a partial
 * rope's, longrope's), or NULL: from theta, amplitudes 1 */
__device__ __forceinline__ void atx_freqs_n(float *f, int hd, float theta, float factor,
                                            float low, float high, int orig, const float *ext)
{
    for (int j = threadIdx.x; j < hd / 2; j += RT_ATT_THREADS) {
        f[hd / 2 + j] = ext ? ext[hd / 2 + j] : 1.0f;
        float inv = ext ? ext[j] : 1.0f / powf(theta, (float)(2 * j) / (float)hd);
        if (factor > 0.0f) {
            const float wavelen = 2.0f * 3.14159265358979323846f / inv;
            const float lo_wl = (float)orig / low, hi_wl = (float)orig / high;
            float sc = wavelen > lo_wl ? inv / factor : inv;
            if (!(wavelen < hi_wl) && !(wavelen > lo_wl)) {
                const float sm = ((float)orig / wavelen - low) / (high - low);
                sc = (1 - sm) * sc / factor + sm * sc;
            }
            inv = sc;
        }
        f[j] = inv;
    }
}

template <int HD>
__device__ __forceinline__ void atx_freqs(float *f, float theta, float factor, float low,
                                          float high, int orig, const float *ext)
{
    atx_freqs_n(f, HD, theta, factor, low, high, orig, ext);
}

/* rows [0, R) of a tile: row i the HD values at base + off[i] (0 where off[i] < 0) */
template <int R, int HD>
__device__ __forceinline__ void atx_load(float (*dst)[HD + 1], const act_t *base,
                                         const long long *off)
{
    for (int e = threadIdx.x; e < R * HD; e += RT_ATT_THREADS) {
        const int i = e / HD, c = e % HD;
        dst[i][c] = off[i] >= 0 ? rt_ld(base + off[i] + c) : 0.0f;
    }
}

/* qk_norm (w, or NULL: none) then rope (f, or NULL) on the rows whose pos >= 0, a thread
 * a row: t = rope(t / rms(t) * w) at position pos[i] (Pb: packed rows', atx_rope_pos) */
template <int R, int HD>
__device__ __forceinline__ void atx_fwd_rows(float (*t)[HD + 1], const int *pos, const float *w,
                                             const float *f, const int *Pb)
{
    for (int i = threadIdx.x; i < R; i += RT_ATT_THREADS) {
        if (pos[i] < 0)
            continue;
        if (w) {
            double ss = 0.0;
            for (int c = 0; c < HD; c++)
                ss += (double)t[i][c] * t[i][c];
            const float r = (float)(1.0 / sqrt(ss / (double)HD + 1e-6));
            for (int c = 0; c < HD; c++)
                t[i][c] = t[i][c] * r * w[c];
        }
        if (f)
            for (int j = 0; j < HD / 2; j++) {
                const float ang = (float)atx_rope_pos(Pb, pos[i]) * f[j], m = f[HD / 2 + j];
                const float cs = cosf(ang) * m, sn = sinf(ang) * m;
                const float a = t[i][j], b = t[i][j + HD / 2];
                t[i][j] = a * cs - b * sn;
                t[i][j + HD / 2] = b * cs + a * sn;
            }
    }
}

/* atx_fwd_rows' backward, a thread a row: g (the gradient of the transformed rows) back
 * through the inverse rotation and RMSNorm (from the raw rows at qkv + off[i]) to
 * dqkv + off[i]; with w, xh[i] receives the row's x / rms(x) for the weight's gradient
 * (atx_dw), g[i] the gradient after the rotation */
template <int R, int HD>
__device__ __forceinline__ void atx_bwd_rows(float (*g)[HD + 1], float (*xh)[HD + 1],
                                             const act_t *qkv, act_t *dqkv, const long long *off,
                                             const int *pos, const float *w, const float *f,
                                             const int *Pb RT_FP8_REF)
{
    for (int i = threadIdx.x; i < R; i += RT_ATT_THREADS) {
        if (pos[i] < 0)
            continue;
        if (f)
            for (int j = 0; j < HD / 2; j++) {
                const float ang = (float)atx_rope_pos(Pb, pos[i]) * f[j], m = f[HD / 2 + j];
                const float cs = cosf(ang) * m, sn = sinf(ang) * m;
                const float a = g[i][j], b = g[i][j + HD / 2];
                g[i][j] = a * cs + b * sn;
                g[i][j + HD / 2] = b * cs - a * sn;
            }
        const act_t *x = qkv + off[i];
        act_t *dx = dqkv + off[i];
        if (!w) {
            for (int c = 0; c < HD; c++)
                rt_st(dx + c, RT_FP8_FOLDED(g[i][c]));
            continue;
        }
        double ss = 0.0, dot = 0.0;
        for (int c = 0; c < HD; c++) {
            const float v = rt_ld(x + c);
            ss += (double)v * v;
        }
        const float r = (float)(1.0 / sqrt(ss / (double)HD + 1e-6));
        for (int c = 0; c < HD; c++) {
            const float v = rt_ld(x + c) * r;
            xh[i][c] = v;
            dot += (double)g[i][c] * w[c] * v;
        }
        const float m = (float)(dot / (double)HD);
        for (int c = 0; c < HD; c++)
            rt_st(dx + c, RT_FP8_FOLDED(r * (g[i][c] * w[c] - rt_ld(x + c) * r * m)));
    }
}

/* column c's sum over the valid rows of g * xh (a norm weight's gradient), in double */
template <int R, int HD>
__device__ __forceinline__ double atx_dw(float (*g)[HD + 1], float (*xh)[HD + 1], const int *pos,
                                         int c)
{
    double s = 0.0;
    if (c < HD)
        for (int i = 0; i < R; i++)
            if (pos[i] >= 0)
                s += (double)(g[i][c] * xh[i][c]);
    return s;
}

/* The query rows of a tile of NP positions from p0 for the G heads of key/value head kh:
 * pos[i] (-1: none), off[i], the row's offset in a batch row of qkv (rows ld apart), and
 * with packed rows (Pb) lo[i], its first key (atx_seq_start) */
__device__ __forceinline__ void atx_qrows(int *pos, long long *off, int *lo, int R, int p0, int NP,
                                          int G, int kh, int T, int64_t ld, int HD, const int *Pb)
{
    for (int i = threadIdx.x; i < R; i += RT_ATT_THREADS) {
        const int p = p0 + i % NP, h = kh * G + i / NP;
        const bool ok = i < G * NP && p < T;
        pos[i] = ok ? p : -1;
        off[i] = ok ? (long long)p * ld + (long long)h * HD : -1;
        if (Pb)
            lo[i] = atx_seq_start(Pb, pos[i]);
    }
}

/* The key rows k0 .. k0 + n - 1 of key head kh (its value rows are KV HD further) */
__device__ __forceinline__ void atx_krows(int *pos, long long *off, int R, int k0, int n, int H,
                                          int kh, int64_t ld, int HD)
{
    for (int i = threadIdx.x; i < R; i += RT_ATT_THREADS) {
        pos[i] = i < n ? k0 + i : -1;
        off[i] = i < n ? (long long)(k0 + i) * ld + (long long)(H + kh) * HD : -1;
    }
}

/* Is key kj hidden from the query at position p (p < 0: no query), whose sequence starts
 * at key lo? Packed rows (Pb) without a causal mask: a key of a later sequence too. */
template <int T, int CAUSAL>
__device__ __forceinline__ bool atx_masked(int p, int kj, int W, int lo, const int *Pb)
{
    return p < 0 || kj >= T || (CAUSAL && kj > p) || atx_outside<CAUSAL>(p, kj, W) || kj < lo ||
           (!CAUSAL && Pb && atx_apart(Pb, kj, lo, T));
}

/* The forward: as attention_fwd, over tiles of (head, position) query rows; the keys a
 * tile sees run from its first position's window start to its last position. */
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_fwd(RT_ATTENTION_EXT_FWD_ARGS)
{
    const int *P = PK ? P_ : nullptr;   /* (packed rows: the PK kernels alone) */
    RT_FP8_FOLD_INIT();   /* fp8-mixed: y's maximum (common.cuh) */
    constexpr int RS = rt_att_fr(HD), CS = rt_att_fc(HD), BQ = 16 * RS, BK = 8 * CS;
    constexpr int CO = (HD + 7) / 8;
    static_assert(HD <= 128, "attention heads wider than 128");
    __shared__ float qs[BQ][HD + 1], ks[BK][HD + 1], vs[BK][HD + 1], ps[BQ][BK + 1];
    __shared__ float fr[HD + 1];
    __shared__ long long qoff[BQ], koff[BK];
    __shared__ int qpos[BQ], kpos[BK], qlo[BQ];
    const int b = blockIdx.z, kh = blockIdx.y, tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int G = H / KV, NP = BQ / G, NPT = (T + NP - 1) / NP;
    const int64_t d = (int64_t)H * HD, ld = (int64_t)(H + 2 * KV) * HD;
    const act_t *base = qkv + (int64_t)b * T * ld;
    const int *Pb = P ? P + (int64_t)b * T : nullptr;
    const float *f = theta > 0.0f ? fr : nullptr;
    const float ninf = -rt_inf();
    if (f)
        atx_freqs<HD>(fr, theta, factor, low, high, orig, ext);
    for (int t = blockIdx.x; t < NPT; t += gridDim.x) {
        const int p0 = (NPT - 1 - t) * NP, p1 = p0 + NP < T ? p0 + NP : T;
        const int kwin = W > 0 && p0 >= W ? p0 - W + 1 : 0, kend = atx_key_end<T, CAUSAL>(p1, W);
        const int kbeg = atx_tile_first(P, b, T, p0, kwin);
        __syncthreads();
        atx_qrows(qpos, qoff, qlo, BQ, p0, NP, G, kh, T, ld, HD, Pb);
        __syncthreads();
        atx_load<BQ, HD>(qs, base, qoff);
        __syncthreads();
        atx_fwd_rows<BQ, HD>(qs, qpos, qn, f, Pb);
        float m[RS], l[RS], acc[RS][CO];
        for (int r = 0; r < RS; r++) {
            m[r] = ninf, l[r] = 0.0f;
            for (int u = 0; u < CO; u++)
                acc[r][u] = 0.0f;
        }
        for (int k0 = kbeg; k0 < kend; k0 += BK) {
            __syncthreads();
            atx_krows(kpos, koff, BK, k0, T - k0 < BK ? T - k0 : BK, H, kh, ld, HD);
            __syncthreads();
            atx_load<BK, HD>(ks, base, koff);
            atx_load<BK, HD>(vs, base + KV * HD, koff);
            __syncthreads();
            atx_fwd_rows<BK, HD>(ks, kpos, kn, f, Pb);
            __syncthreads();
            float s[RS][CS];
            att_dots<RS, CS, HD>(qs, ks, s);
            for (int r = 0; r < RS; r++) {
                const int i = ty + 16 * r;
                float mx = ninf;
                for (int j = 0; j < CS; j++) {
                    const int kj = k0 + tx + 8 * j;
                    float g;
                    const int lo = P ? qlo[i] : RT_ATT_ANY_KEY;
                    s[r][j] = atx_masked<T, CAUSAL>(qpos[i], kj, W, lo, Pb)
                                  ? ninf : att_score<CAP>(scale * s[r][j], cap, &g);
                    mx = fmaxf(mx, s[r][j]);
                }
                const float mn = fmaxf(m[r], att_max8(mx));
                const float al = mn == ninf ? 1.0f : expf(m[r] - mn);
                float sum = 0.0f;
                for (int j = 0; j < CS; j++) {
                    const float p = mn == ninf ? 0.0f : expf(s[r][j] - mn);
                    ps[i][tx + 8 * j] = p;
                    sum += p;
                }
                l[r] = al * l[r] + att_sum8(sum);
                m[r] = mn;
                for (int u = 0; u < CO; u++)
                    acc[r][u] *= al;
            }
            __syncthreads();
            att_acc<RS, CO, BK, HD>(acc, ps, vs);
        }
        for (int r = 0; r < RS; r++) {
            const int i = ty + 16 * r, p = qpos[i], h = kh * G + i / NP;
            if (p < 0)
                continue;
            act_t *yr = y + ((int64_t)b * T + p) * d + (int64_t)h * HD;
            const float inv = 1.0f / l[r];
            for (int u = 0; u < CO; u++)
                if (tx + 8 * u < HD)
                    rt_st(yr + tx + 8 * u, RT_FP8_FOLDED(acc[r][u] * inv));
            if (tx == 0)
                lse[((int64_t)b * H + h) * T + p] = m[r] + logf(l[r]);
        }
    }
    RT_FP8_FOLD_END();
}

/* Backward, query side: as attention_bwd_q over (head, position) rows; D_i = dy_i . y_i
 * to D [B, H, T]; dq through atx_bwd_rows when q was transformed, the rows' q_norm
 * weight gradient summed into partq [B, KV, gridDim.x, HD] (a block's rows in order). */
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_q(RT_ATTENTION_EXT_ARGS)
{
    const int *P = PK ? P_ : nullptr;   /* (packed rows: the PK kernels alone) */
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int RS = rt_att_br(HD), CS = rt_att_bc(HD), BQ = 16 * RS, BK = 8 * CS;
    constexpr int CO = (HD + 7) / 8;
    static_assert(HD <= 128, "attention heads wider than 128");
    __shared__ float qs[BQ][HD + 1], dys[BQ][HD + 1], ks[BK][HD + 1], vs[BK][HD + 1];
    __shared__ float ds[BQ][BK + 1], Lt[BQ], Dt[BQ], fr[HD + 1];
    __shared__ long long qoff[BQ], koff[BK];
    __shared__ int qpos[BQ], kpos[BK], qlo[BQ];
    const int b = blockIdx.z, kh = blockIdx.y, tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int G = H / KV, NP = BQ / G, NPT = (T + NP - 1) / NP;
    const int64_t d = (int64_t)H * HD, ld = (int64_t)(H + 2 * KV) * HD;
    const act_t *base = qkv + (int64_t)b * T * ld;
    const int *Pb = P ? P + (int64_t)b * T : nullptr;
    act_t *dbase = dqkv + (int64_t)b * T * ld;
    const float *f = theta > 0.0f ? fr : nullptr;
    const bool tr = qn != nullptr || f != nullptr;
    double dw = 0.0;
    if (f)
        atx_freqs<HD>(fr, theta, factor, low, high, orig, ext);
    for (int t = blockIdx.x; t < NPT; t += gridDim.x) {
        const int p0 = (NPT - 1 - t) * NP, p1 = p0 + NP < T ? p0 + NP : T;
        const int kwin = W > 0 && p0 >= W ? p0 - W + 1 : 0, kend = atx_key_end<T, CAUSAL>(p1, W);
        const int kbeg = atx_tile_first(P, b, T, p0, kwin);
        __syncthreads();
        atx_qrows(qpos, qoff, qlo, BQ, p0, NP, G, kh, T, ld, HD, Pb);
        __syncthreads();
        atx_load<BQ, HD>(qs, base, qoff);
        for (int e = threadIdx.x; e < BQ * HD; e += RT_ATT_THREADS) {
            const int i = e / HD, c = e % HD, p = qpos[i], h = kh * G + i / NP;
            dys[i][c] = p >= 0 ? rt_ld(dy + ((int64_t)b * T + p) * d + (int64_t)h * HD + c) : 0.0f;
        }
        __syncthreads();
        atx_fwd_rows<BQ, HD>(qs, qpos, qn, f, Pb);
        for (int i = warp; i < BQ; i += RT_ATT_THREADS / 32) {   /* D_i, a warp a row */
            const int p = qpos[i], h = kh * G + i / NP;
            double a = 0.0;
            if (p >= 0)
                for (int c = lane; c < HD; c += 32)
                    a += (double)(dys[i][c] * rt_ld(y + ((int64_t)b * T + p) * d + (int64_t)h * HD + c));
            const float Di = (float)rt_warp_sum(a);
            if (lane == 0) {
                Dt[i] = Di;
                Lt[i] = p >= 0 ? lse[((int64_t)b * H + h) * T + p] : 0.0f;
                if (p >= 0)
                    D[((int64_t)b * H + h) * T + p] = Di;
            }
        }
        float acc[RS][CO];
        for (int r = 0; r < RS; r++)
            for (int u = 0; u < CO; u++)
                acc[r][u] = 0.0f;
        for (int k0 = kbeg; k0 < kend; k0 += BK) {
            __syncthreads();
            atx_krows(kpos, koff, BK, k0, T - k0 < BK ? T - k0 : BK, H, kh, ld, HD);
            __syncthreads();
            atx_load<BK, HD>(ks, base, koff);
            atx_load<BK, HD>(vs, base + KV * HD, koff);
            __syncthreads();
            atx_fwd_rows<BK, HD>(ks, kpos, kn, f, Pb);
            __syncthreads();
            float s[RS][CS], dp[RS][CS];
            att_dots2<RS, CS, HD>(qs, ks, dys, vs, s, dp);
            for (int r = 0; r < RS; r++)
                for (int j = 0; j < CS; j++) {
                    const int i = ty + 16 * r, kj = k0 + tx + 8 * j;
                    float g;
                    const float z = att_score<CAP>(scale * s[r][j], cap, &g);
                    const int lo = P ? qlo[i] : RT_ATT_ANY_KEY;
                    ds[i][tx + 8 * j] = atx_masked<T, CAUSAL>(qpos[i], kj, W, lo, Pb)
                                            ? 0.0f
                                            : expf(z - Lt[i]) * (dp[r][j] - Dt[i]) * g;
                }
            __syncthreads();
            att_acc<RS, CO, BK, HD>(acc, ds, ks);
        }
        if (!tr) {
            for (int r = 0; r < RS; r++) {
                const int i = ty + 16 * r;
                if (qpos[i] >= 0)
                    for (int u = 0; u < CO; u++)
                        if (tx + 8 * u < HD)
                            rt_st(dbase + qoff[i] + tx + 8 * u, RT_FP8_FOLDED(scale * acc[r][u]));
            }
            continue;
        }
        __syncthreads();   /* qs and dys take d q' and q^ now */
        for (int r = 0; r < RS; r++)
            for (int u = 0; u < CO; u++)
                if (tx + 8 * u < HD)
                    qs[ty + 16 * r][tx + 8 * u] = scale * acc[r][u];
        __syncthreads();
        atx_bwd_rows<BQ, HD>(qs, dys, base, dbase, qoff, qpos, qn, f, Pb RT_FP8_REF_ARG);
        __syncthreads();
        if (qn)
            dw += atx_dw<BQ, HD>(qs, dys, qpos, threadIdx.x);
    }
    if (qn && threadIdx.x < HD)
        partq[(((int64_t)b * KV + kh) * gridDim.x + blockIdx.x) * HD + threadIdx.x] = dw;
    RT_FP8_FOLD_END();
}

/* Backward, key side, after the query side (it reads D): a block keeps a tile of keys
 * and values of head kh and walks the queries of the G heads that read it (from the
 * tile's first key to its last key's window end):
 *   dv_j = sum_i P_ij dy_i,  dk_j = scale * sum_i dS_ij q_i
 * dk through atx_bwd_rows when k was transformed, the k_norm weight gradient into
 * partk [B, KV, gridDim.x, HD]. */
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_kv(RT_ATTENTION_EXT_ARGS)
{
    const int *P = PK ? P_ : nullptr;   /* (packed rows: the PK kernels alone) */
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int RS = rt_att_br(HD), CS = rt_att_bc(HD), BK = 16 * RS, BQ = 8 * CS;
    constexpr int CO = (HD + 7) / 8;
    static_assert(HD <= 128, "attention heads wider than 128");
    __shared__ float ks[BK][HD + 1], vs[BK][HD + 1], qs[BQ][HD + 1], dys[BQ][HD + 1];
    __shared__ float ps[BK][BQ + 1], ds[BK][BQ + 1], Lt[BQ], Dt[BQ], fr[HD + 1];
    __shared__ long long koff[BK], qoff[BQ];
    __shared__ int kpos[BK], qpos[BQ], qfirst[BQ];
    const int b = blockIdx.z, kh = blockIdx.y, tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int G = H / KV;
    const int64_t d = (int64_t)H * HD, ld = (int64_t)(H + 2 * KV) * HD;
    const act_t *base = qkv + (int64_t)b * T * ld;
    const int *Pb = P ? P + (int64_t)b * T : nullptr;
    act_t *dbase = dqkv + (int64_t)b * T * ld;
    const float *f = theta > 0.0f ? fr : nullptr;
    const bool tr = kn != nullptr || f != nullptr;
    double dw = 0.0;
    if (f)
        atx_freqs<HD>(fr, theta, factor, low, high, orig, ext);
    for (int k0 = blockIdx.x * BK; k0 < T; k0 += gridDim.x * BK) {
        const int nk = T - k0 < BK ? T - k0 : BK;
        const int qlo = atx_query_first<CAUSAL>(k0, W) / BQ * BQ;
        const int qhi = W > 0 && k0 + nk - 1 + W < T ? k0 + nk - 1 + W : T;
        __syncthreads();
        atx_krows(kpos, koff, BK, k0, nk, H, kh, ld, HD);
        __syncthreads();
        atx_load<BK, HD>(ks, base, koff);
        atx_load<BK, HD>(vs, base + KV * HD, koff);
        __syncthreads();
        atx_fwd_rows<BK, HD>(ks, kpos, kn, f, Pb);
        float accv[RS][CO], acck[RS][CO];
        for (int r = 0; r < RS; r++)
            for (int u = 0; u < CO; u++)
                accv[r][u] = acck[r][u] = 0.0f;
        for (int h = kh * G; h < (kh + 1) * G; h++)
            for (int q0 = qlo; q0 < qhi; q0 += BQ) {
                if (P && atx_tile_first(P, b, T, q0, 0) > k0 + nk - 1)
                    break;   /* packed rows: this query tile and the later ones see no key */
                const int nq = T - q0 < BQ ? T - q0 : BQ;
                __syncthreads();
                for (int i = threadIdx.x; i < BQ; i += RT_ATT_THREADS) {
                    qpos[i] = i < nq ? q0 + i : -1;
                    if (Pb)
                        qfirst[i] = atx_seq_start(Pb, qpos[i]);
                    qoff[i] = i < nq ? (long long)(q0 + i) * ld + (long long)h * HD : -1;
                    Lt[i] = i < nq ? lse[((int64_t)b * H + h) * T + q0 + i] : 0.0f;
                    Dt[i] = i < nq ? D[((int64_t)b * H + h) * T + q0 + i] : 0.0f;
                }
                __syncthreads();
                atx_load<BQ, HD>(qs, base, qoff);
                for (int e = threadIdx.x; e < BQ * HD; e += RT_ATT_THREADS) {
                    const int i = e / HD, c = e % HD;
                    dys[i][c] = i < nq ? rt_ld(dy + ((int64_t)b * T + q0 + i) * d + (int64_t)h * HD + c) : 0.0f;
                }
                __syncthreads();
                atx_fwd_rows<BQ, HD>(qs, qpos, qn, f, Pb);
                __syncthreads();
                float s[RS][CS], dp[RS][CS];   /* [key][query] */
                att_dots2<RS, CS, HD>(ks, qs, vs, dys, s, dp);
                for (int r = 0; r < RS; r++)
                    for (int j = 0; j < CS; j++) {
                        const int kj = k0 + ty + 16 * r, i = tx + 8 * j;
                        const int lo = P ? qfirst[i] : RT_ATT_ANY_KEY;
                        const bool masked = atx_masked<T, CAUSAL>(qpos[i], kj, W, lo, Pb);
                        float g;
                        const float z = att_score<CAP>(scale * s[r][j], cap, &g);
                        const float p = masked ? 0.0f : expf(z - Lt[i]);
                        ps[ty + 16 * r][i] = p;
                        ds[ty + 16 * r][i] = masked ? 0.0f : p * (dp[r][j] - Dt[i]) * g;
                    }
                __syncthreads();
                for (int i = 0; i < BQ; i++) {
                    float p[RS], g[RS], a[CO], a2[CO];
                    for (int r = 0; r < RS; r++)
                        p[r] = ps[ty + 16 * r][i], g[r] = ds[ty + 16 * r][i];
                    for (int u = 0; u < CO; u++) {
                        const bool in = tx + 8 * u < HD;
                        a[u] = in ? dys[i][tx + 8 * u] : 0.0f;
                        a2[u] = in ? qs[i][tx + 8 * u] : 0.0f;
                    }
                    for (int r = 0; r < RS; r++)
                        for (int u = 0; u < CO; u++) {
                            accv[r][u] += p[r] * a[u];
                            acck[r][u] += g[r] * a2[u];
                        }
                }
            }
        for (int r = 0; r < RS; r++) {
            const int j = ty + 16 * r;
            if (j < nk)
                for (int u = 0; u < CO; u++)
                    if (tx + 8 * u < HD) {
                        rt_st(dbase + koff[j] + KV * HD + tx + 8 * u, RT_FP8_FOLDED(accv[r][u]));
                        if (!tr)
                            rt_st(dbase + koff[j] + tx + 8 * u, RT_FP8_FOLDED(scale * acck[r][u]));
                    }
        }
        if (!tr)
            continue;
        __syncthreads();   /* ks and vs take d k' and k^ now */
        for (int r = 0; r < RS; r++)
            for (int u = 0; u < CO; u++)
                if (tx + 8 * u < HD)
                    ks[ty + 16 * r][tx + 8 * u] = scale * acck[r][u];
        __syncthreads();
        atx_bwd_rows<BK, HD>(ks, vs, base, dbase, koff, kpos, kn, f, Pb RT_FP8_REF_ARG);
        __syncthreads();
        if (kn)
            dw += atx_dw<BK, HD>(ks, vs, kpos, threadIdx.x);
    }
    if (kn && threadIdx.x < HD)
        partk[(((int64_t)b * KV + kh) * gridDim.x + blockIdx.x) * HD + threadIdx.x] = dw;
    RT_FP8_FOLD_END();
}

#if defined(RT_ACT_BF16) || defined(RT_ACT_F16)
/* ---- the Llama-family options on the tensor cores (16-bit activations) --------------------
 *
 * The tensor-core kernels above (same fragments, tiles of 64 rows, K and V or Q and dY
 * streamed through two 16-bit shared tiles by cp.async, online softmax in log2 units)
 * over attention_ext's rows: a block takes one key/value head kh, and its 64 query rows
 * are (head, position) pairs of the G query heads that share it (row i: head
 * G kh + i / NP, position p0 + i % NP, NP = 64 / G), so each K/V tile serves them all;
 * the key-side backward keeps its 64 keys while it walks the G heads' query tiles.
 *
 * qk_norm and rope run in fp32: on a warp's own rows in registers (atx_tc_fwd: a
 * thread's values of rows g, g + 8 at columns 8n + 2t and 8n + 2t + 1, n < HD / 8, so
 * rope's partner of column c < HD / 2, c + HD / 2, is the same thread's n + HD / 16, and
 * a row's RMS sums over its four lanes), and on a streamed tile in shared memory after
 * its copy lands (atx_tc_tile: 128 / R threads a row), rounded to 16 bits there as the
 * products' operands are. The backward recomputes P from lse, and takes dq and dk back
 * through the inverse rotation and the norm (atx_tc_bwd) in the accumulators' layout,
 * the norm weights' gradients summed a column a thread, then over the block in a fixed
 * order, into the same partials as the CUDA-core kernels (block slot = its tile0).
 * Heads a multiple of 16 wide up to 256 (rt_att_tc_ext); others take the kernels above,
 * which take heads up to 128 wide (the compiler refuses wider ones in fp32). */

/* The tensor-core kernels' score in log2 units from the product acc = q.k: sl2 acc
 * (= scale log2(e) acc), or soft-capped (CAP) log2(e) cap tanh(scale acc / cap) */
template <bool CAP>
__device__ __forceinline__ float att_score2(float acc, float scale, float sl2, float cap,
                                            float *g)
{
    if constexpr (CAP)
        return RT_LOG2E * att_score<true>(scale * acc, cap, g);
    *g = 1.0f;
    return sl2 * acc;
}

/* a thread's values of its two rows: v[n][u][e] at row g + 8u, column 8n + 2t + e */
template <int DN> struct atx_rows2 {
    float v[DN][2][2];
};

/* the two rows at p[0], p[1] (NULL: zeros) into a thread's columns */
template <int DN>
__device__ __forceinline__ void atx_tc_ld(atx_rows2<DN> &x, const act_t *const p[2], int t4)
{
    for (int u = 0; u < 2; u++)
        for (int n = 0; n < DN; n++)
            for (int e = 0; e < 2; e++)
                x.v[n][u][e] = p[u] ? rt_ld(p[u] + 8 * n + 2 * t4 + e) : 0.0f;
}

/* x's A fragments of a product (k-step s: columns 16s .. 16s + 15) */
template <int DN>
__device__ __forceinline__ void atx_tc_frag(unsigned (*a)[4], const atx_rows2<DN> &x)
{
    for (int s = 0; s < DN / 2; s++)
        for (int r = 0; r < 4; r++) {
            const int n = 2 * s + (r >> 1), u = r & 1;
            a[s][r] = att_pack2(x.v[n][u][0], x.v[n][u][1]);
        }
}

/* x's two rows into rows g and g + 8 of a warp's shared 16-bit tile M (rows of W
 * values), rounded as atx_tc_frag rounds them: rt_afrag reads its fragments back */
template <int DN, int W>
__device__ __forceinline__ void atx_tc_st(unsigned short (*M)[W], const atx_rows2<DN> &x, int g,
                                          int t4)
{
    for (int u = 0; u < 2; u++)
        for (int n = 0; n < DN; n++)
            *(unsigned *)&M[g + 8 * u][8 * n + 2 * t4] = att_pack2(x.v[n][u][0], x.v[n][u][1]);
}

/* a row's sum over its four lanes (the lanes of one g) */
__device__ __forceinline__ float atx_sum4(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* qk_norm (w, or NULL) then rope (f, or NULL) on a thread's two rows at positions
 * pos[u] (rows with pos < 0 hold zeros and stay so): as atx_fwd_rows, the RMS in fp32 */
template <int DN>
__device__ __forceinline__ void atx_tc_fwd(atx_rows2<DN> &x, const int pos[2], const float *w,
                                           const float *f, int t4)
{
    constexpr int HD = 8 * DN;
    for (int u = 0; u < 2; u++) {
        if (w) {
            float ss = 0.0f;
            for (int n = 0; n < DN; n++)
                ss += x.v[n][u][0] * x.v[n][u][0] + x.v[n][u][1] * x.v[n][u][1];
            const float r = 1.0f / sqrtf(atx_sum4(ss) / (float)HD + 1e-6f);
            for (int n = 0; n < DN; n++)
                for (int e = 0; e < 2; e++)
                    x.v[n][u][e] = x.v[n][u][e] * r * w[8 * n + 2 * t4 + e];
        }
        if (f && pos[u] >= 0)
            for (int n = 0; n < DN / 2; n++)
                for (int e = 0; e < 2; e++) {
                    float sn, cs;
                    sincosf((float)pos[u] * f[8 * n + 2 * t4 + e], &sn, &cs);
                    const float m = f[HD / 2 + 8 * n + 2 * t4 + e];
                    sn *= m, cs *= m;
                    const float a = x.v[n][u][e], b = x.v[n + DN / 2][u][e];
                    x.v[n][u][e] = a * cs - b * sn;
                    x.v[n + DN / 2][u][e] = b * cs + a * sn;
                }
    }
}

/* atx_tc_fwd's backward: g (the gradient of the transformed rows) through the inverse
 * rotation and the norm (from the raw rows x) to the raw rows' gradient, in place; with
 * w, dw[n][e] += the column's g w-less product with x / rms(x) over the two rows */
template <int DN>
__device__ __forceinline__ void atx_tc_bwd(atx_rows2<DN> &g, const atx_rows2<DN> &x,
                                           const int pos[2], const float *w, const float *f,
                                           float (*dw)[2], int t4)
{
    constexpr int HD = 8 * DN;
    for (int u = 0; u < 2; u++) {
        if (f && pos[u] >= 0)
            for (int n = 0; n < DN / 2; n++)
                for (int e = 0; e < 2; e++) {
                    float sn, cs;
                    sincosf((float)pos[u] * f[8 * n + 2 * t4 + e], &sn, &cs);
                    const float m = f[HD / 2 + 8 * n + 2 * t4 + e];
                    sn *= m, cs *= m;
                    const float a = g.v[n][u][e], b = g.v[n + DN / 2][u][e];
                    g.v[n][u][e] = a * cs + b * sn;
                    g.v[n + DN / 2][u][e] = b * cs - a * sn;
                }
        if (!w)
            continue;
        float ss = 0.0f, dot = 0.0f;
        for (int n = 0; n < DN; n++)
            ss += x.v[n][u][0] * x.v[n][u][0] + x.v[n][u][1] * x.v[n][u][1];
        const float r = 1.0f / sqrtf(atx_sum4(ss) / (float)HD + 1e-6f);
        for (int n = 0; n < DN; n++)
            for (int e = 0; e < 2; e++) {
                const float xh = x.v[n][u][e] * r, gw = g.v[n][u][e] * w[8 * n + 2 * t4 + e];
                dw[n][e] += g.v[n][u][e] * xh;
                dot += gw * xh;
            }
        const float m = atx_sum4(dot) / (float)HD;
        for (int n = 0; n < DN; n++)
            for (int e = 0; e < 2; e++)
                g.v[n][u][e] = r * (g.v[n][u][e] * w[8 * n + 2 * t4 + e] - x.v[n][u][e] * r * m);
    }
}

/* qk_norm (w, or NULL) then rope (f, or NULL) on the R rows of a shared 16-bit tile
 * (rows of W values), row i at position pos0 + i (rows past T hold zeros: they stay
 * zeros; Pb: packed rows', atx_rope_pos); 128 / R threads a row (2, 4 or 8, neighbouring
 * lanes), each the column pairs (j, j + HD / 2) with j = its lane in the row's group,
 * then every 128 / R'th */
template <int R, int HD, int W>
__device__ __forceinline__ void atx_tc_tile(unsigned short (*M)[W], int pos0, const float *w,
                                            const float *f, const int *Pb, int T)
{
    constexpr int TPR = RT_ATT_THREADS / R;
    static_assert(TPR * R == RT_ATT_THREADS && (TPR == 2 || TPR == 4 || TPR == 8), "tile rows");
    const int i = threadIdx.x / TPR, j0 = threadIdx.x % TPR;
    const int pos = pos0 + i < T ? atx_rope_pos(Pb, pos0 + i) : pos0 + i;
    act_t *row = (act_t *)M[i];
    if (w) {
        float ss = 0.0f;
        for (int c = j0; c < HD; c += TPR) {
            const float v = rt_ld(row + c);
            ss += v * v;
        }
        for (int o = 1; o < TPR; o <<= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float r = 1.0f / sqrtf(ss / (float)HD + 1e-6f);
        for (int c = j0; c < HD; c += TPR)
            rt_st(row + c, rt_ld(row + c) * r * w[c]);
    }
    if (f)
        for (int j = j0; j < HD / 2; j += TPR) {
            float sn, cs;
            sincosf((float)pos * f[j], &sn, &cs);
            sn *= f[HD / 2 + j], cs *= f[HD / 2 + j];
            const float a = rt_ld(row + j), b = rt_ld(row + j + HD / 2);
            rt_st(row + j, a * cs - b * sn);
            rt_st(row + j + HD / 2, b * cs + a * sn);
        }
}

/* Is key kj hidden from the query at position p (p < 0: no query), whose sequence starts
 * at key lo? As atx_masked. */
template <int T, int CAUSAL>
__device__ __forceinline__ bool atx_tc_masked(int p, int kj, int W, int lo, const int *Pb)
{
    return p < 0 || kj >= T || (CAUSAL && kj > p) || atx_outside<CAUSAL>(p, kj, W) || kj < lo ||
           (!CAUSAL && Pb && atx_apart(Pb, kj, lo, T));
}

/* Packed rows' P (or NULL) at batch row b: its [T] row */
__device__ __forceinline__ const int *atx_prow(const int *P, int b, int T)
{
    return P ? P + (int64_t)b * T : nullptr;
}

/* The thread's two query rows (pos, rows 16 warp + g + 8u of the tile): their rope
 * positions rp, and their first keys into Sq (each row's four lanes write the same value
 * and read only their own: shared memory in place of two registers through the loops) */
__device__ __forceinline__ void atx_tc_seq(const int pos[2], const int *Pb, int rp[2], int *Sq,
                                           int warp, int g)
{
    for (int u = 0; u < 2; u++) {
        rp[u] = atx_rope_pos(Pb, pos[u]);
        Sq[16 * warp + g + 8 * u] = atx_seq_start(Pb, pos[u]);
    }
}

/* The thread's two query rows of tile p0: position (-1: none) and head */
__device__ __forceinline__ void atx_tc_qrows(int pos[2], int hq[2], int p0, int NP, int G, int kh,
                                             int T, int warp, int g)
{
    for (int u = 0; u < 2; u++) {
        const int i = 16 * warp + g + 8 * u, p = p0 + i % NP;
        pos[u] = i < G * NP && p < T ? p : -1;
        hq[u] = kh * G + (i < G * NP ? i / NP : 0);
    }
}

/* f(c) for each column c < HD a thread of the block owns: threadIdx.x, then 128 further
 * on (unrolled: heads up to 128 wide take the one test, and no register for a loop) */
template <int HD, typename F>
__device__ __forceinline__ void atx_cols(F f)
{
#pragma unroll
    for (int k = 0; k < (HD + RT_ATT_THREADS - 1) / RT_ATT_THREADS; k++)
        if (threadIdx.x + k * RT_ATT_THREADS < HD)
            f((int)threadIdx.x + k * RT_ATT_THREADS);
}

/* a warp's column sums of a norm weight's gradient (dw: a thread's columns 8 n + 2 t4 + e
 * over its rows) over the lanes of its rows, into red[8 n + 2 t4 + e] by lanes 0-3 */
template <int DN>
__device__ __forceinline__ void atx_dw_warp(const float (*dw)[2], float *red, int lane)
{
    for (int n = 0; n < DN; n++)
        for (int e = 0; e < 2; e++) {
            float v = dw[n][e];
            for (int o = 4; o < 32; o <<= 1)
                v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane < 4)
                red[8 * n + 2 * lane + e] = v;
        }
}

/* a tile's norm-weight gradient (dw: a thread's columns over its rows, zeroed here)
 * summed over a column's lanes and then the warps in a fixed order into acc[c], the
 * running sum of column c (thread c mod 128's alone; in shared memory, not a register,
 * since the backward kernels have none to spare). Every thread calls it. */
template <int DN>
__device__ __forceinline__ void atx_tc_dw_add(float (*dw)[2], double *acc, int lane, int warp)
{
    constexpr int HD = 8 * DN;
    __shared__ float red[RT_ATT_THREADS / 32][HD];
    atx_dw_warp<DN>(dw, red[warp], lane);
    for (int n = 0; n < DN; n++)
        dw[n][0] = dw[n][1] = 0.0f;
    __syncthreads();
    atx_cols<HD>([&](int c) {
        for (int w = 0; w < RT_ATT_THREADS / 32; w++)
            acc[c] += (double)red[w][c];
    });
    __syncthreads();   /* red read: the next tile may write it */
}

/* The forward: grid (ceil(T / NP), KV, B), NP = 64 / G; query tile t covers positions
 * p0 .. p0 + NP - 1 (the last tile first), its keys from the first position's window
 * start (down to a tile boundary) to the last position. */
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_fwd_tc(RT_ATTENTION_EXT_FWD_ARGS)
{
    const int *P = PK ? P_ : nullptr;   /* (packed rows: the PK kernels alone) */
    RT_FP8_FOLD_INIT();   /* fp8-mixed: y's maximum (common.cuh) */
    constexpr int BQ = 64, BK = rt_att_tc_stream(HD), KS = HD / 16, DN = HD / 8, WD = HD + 8;
    __shared__ __align__(16) unsigned short ks[2][BK][WD], vs[2][BK][WD];
    __shared__ float fr[HD];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int b, kh, tile0;
    att_block_order(b, kh, tile0);
    const int G = H / KV, NP = BQ / G, NPT = (T + NP - 1) / NP;
    const int64_t d = (int64_t)H * HD, ld = (int64_t)(H + 2 * KV) * HD;
    const act_t *base = qkv + (int64_t)b * T * ld;
    const act_t *k = base + (int64_t)(H + kh) * HD, *v = k + (int64_t)KV * HD;
    __shared__ int Sq[BQ];   /* packed rows: each query row's first key (atx_tc_seq) */
    const float *f = theta > 0.0f ? fr : nullptr;
    const bool trk = kn != nullptr || f != nullptr;
    const float ninf = -rt_inf();
    if (f)
        atx_freqs<HD>(fr, theta, factor, low, high, orig, ext);
    __syncthreads();
    for (int tile = tile0; tile < NPT; tile += gridDim.x) {
        const int p0 = (NPT - 1 - tile) * NP, p1 = p0 + NP < T ? p0 + NP : T;
        const int kwin = W > 0 && p0 >= W ? p0 - W + 1 : 0, kend = atx_key_end<T, CAUSAL>(p1, W);
        const int kbeg = atx_tile_first(P, b, T, p0, kwin) / BK * BK;
        const bool full = G * NP == BQ && p0 + NP <= T;   /* every row a position */
        att_tiles16<BK, HD, WD, T>(ks[0], vs[0], k, ld, v, ld, kbeg);
        att_cp_commit();
        int pos[2], hq[2];
        atx_tc_qrows(pos, hq, p0, NP, G, kh, T, warp, g);
        unsigned qa[KS][4];
        {
            int rp[2];
            if (P)
                atx_tc_seq(pos, atx_prow(P, b, T), rp, Sq, warp, g);
            atx_rows2<DN> x;
            const act_t *pr[2];
            for (int u = 0; u < 2; u++)
                pr[u] = pos[u] >= 0 ? base + (int64_t)pos[u] * ld + (int64_t)hq[u] * HD : nullptr;
            atx_tc_ld(x, pr, t4);
            atx_tc_fwd(x, P ? rp : pos, qn, f, t4);
            atx_tc_frag(qa, x);
        }
        float m[2] = {ninf, ninf}, l[2] = {0.0f, 0.0f}, o[DN][4];
        for (int n = 0; n < DN; n++)
            o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
        for (int k0 = kbeg, cb = 0; k0 < kend; k0 += BK, cb ^= 1) {
            if (k0 + BK < kend) {   /* the next tile in, then this one waited for */
                att_tiles16<BK, HD, WD, T>(ks[cb ^ 1], vs[cb ^ 1], k, ld, v, ld, k0 + BK);
                att_cp_commit();
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            if (trk) {
                atx_tc_tile<BK, HD, WD>(ks[cb], k0, kn, f, atx_prow(P, b, T), T);
                __syncthreads();
            }
            float sc[BK / 8][4];
            for (int n = 0; n < BK / 8; n += 2) {
                for (int r = 0; r < 4; r++)
                    sc[n][r] = sc[n + 1][r] = 0.0f;
                for (int s = 0; s < KS; s++) {
                    unsigned kb[4];
                    rt_bfrag<WD>(kb, ks[cb], n, s, lane);
                    rt_mma16816(sc[n], qa[s], kb);
                    rt_mma16816(sc[n + 1], qa[s], kb + 2);
                }
            }
            /* only a tile that reaches past a row's diagonal or window start, past T,
             * or with rows of no position has keys to mask (packed rows: any tile; P
             * first, so that without it the test is the same code) */
            const bool edge = P || !full || k0 + BK > T || (CAUSAL && k0 + BK - 1 > p0) ||
                              atx_window_edge<CAUSAL>(p0, p1 - 1, k0, k0 + BK - 1, W);
            float mx[2] = {ninf, ninf};
            for (int n = 0; n < BK / 8; n++)
                for (int r = 0; r < 4; r++) {
                    const int kj = k0 + 8 * n + 2 * t4 + (r & 1), u = r >> 1;
                    float g;
                    const int lo = P ? Sq[16 * warp + (lane >> 2) + 8 * u] : RT_ATT_ANY_KEY;
                    sc[n][r] = edge && atx_tc_masked<T, CAUSAL>(pos[u], kj, W, lo,
                                                                   atx_prow(P, b, T))
                                   ? ninf : att_score2<CAP>(sc[n][r], scale, sl2, cap, &g);
                    mx[u] = fmaxf(mx[u], sc[n][r]);
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
            for (int n = 0; n < DN; n++)
                for (int r = 0; r < 4; r++)
                    o[n][r] *= al[r >> 1];
            for (int j = 0; j < BK / 16; j++) {   /* O += P V */
                unsigned pa[4];
                for (int r = 0; r < 4; r++) {
                    const int n = 2 * j + (r >> 1), u = r & 1;
                    const float e0 = rt_exp2_approx(sc[n][2 * u] - ms[u]);
                    const float e1 = rt_exp2_approx(sc[n][2 * u + 1] - ms[u]);
                    l[u] += e0 + e1;
                    pa[r] = att_pack2(e0, e1);
                }
                for (int n = 0; n < DN; n += 2) {
                    unsigned vb[4];
                    rt_bfrag_t<WD>(vb, vs[cb], j, n, lane);
                    rt_mma16816(o[n], pa, vb);
                    rt_mma16816(o[n + 1], pa, vb + 2);
                }
            }
            __syncthreads();   /* tile cb read by all: the next pass may copy into it */
        }
        for (int u = 0; u < 2; u++) {
            l[u] = atx_sum4(l[u]);
            if (pos[u] < 0)
                continue;
            act_t *yr = y + ((int64_t)b * T + pos[u]) * d + (int64_t)hq[u] * HD;
            const float inv = 1.0f / l[u];
            for (int n = 0; n < DN; n++)
                att_st2(yr + 8 * n + 2 * t4, RT_FP8_FOLDED(o[n][2 * u] * inv),
                        RT_FP8_FOLDED(o[n][2 * u + 1] * inv));
            if (t4 == 0)
                lse[((int64_t)b * H + hq[u]) * T + pos[u]] = (m[u] + log2f(l[u])) * RT_LN2;
        }
    }
    RT_FP8_FOLD_END();
}

/* Backward, query side: grid (ceil(T / NP), KV, B) as the forward's. Per key tile
 * S = Q K^T and dP = dY V^T, P = exp(scale S - lse), dS = P (dP - D), dQ += dS K;
 * D_i = dy_i . y_i (double over a thread's columns, then its row's four lanes) to
 * D [B, H, T]; dq through atx_tc_bwd when q was transformed, the q_norm weight's
 * gradient into partq [B, KV, gridDim.x, HD] (slot tile0). Heads wider than 128 (WIDE)
 * keep dY's fragments in dynamic shared memory (64 rows of HD + 8 16-bit values, the
 * launch's: cuda_ops.c's att_ext_tc_smem), not in registers: Q's, dY's and dQ's would
 * need 256 of them a thread. */
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_q_tc(RT_ATTENTION_EXT_ARGS)
{
    const int *P = PK ? P_ : nullptr;   /* (packed rows: the PK kernels alone) */
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int BQ = 64, BK = rt_att_tc_stream(HD), KS = HD / 16, DN = HD / 8, WD = HD + 8;
    constexpr bool WIDE = HD > 128;
    __shared__ __align__(16) unsigned short ks[2][BK][WD], vs[2][BK][WD];
    __shared__ float fr[HD], Lt[BQ], Dt[BQ];   /* the tile's rows' lse (log2 units), D */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    unsigned short (*dyw)[WD] = WIDE ? (unsigned short (*)[WD])rt_dyn_smem() + 16 * warp : nullptr;
    int b, kh, tile0;
    att_block_order(b, kh, tile0);
    const int G = H / KV, NP = BQ / G, NPT = (T + NP - 1) / NP;
    const int64_t d = (int64_t)H * HD, ld = (int64_t)(H + 2 * KV) * HD;
    const act_t *base = qkv + (int64_t)b * T * ld;
    const act_t *k = base + (int64_t)(H + kh) * HD, *v = k + (int64_t)KV * HD;
    act_t *dbase = dqkv + (int64_t)b * T * ld;
    __shared__ int Sq[BQ];   /* packed rows: each query row's first key (atx_tc_seq) */
    const float *f = theta > 0.0f ? fr : nullptr;
    const bool trk = kn != nullptr || f != nullptr, trq = qn != nullptr || f != nullptr;
    __shared__ double dwc[HD];   /* q_norm's weight gradient, column c thread c mod 128's */
    atx_cols<HD>([&](int c) { dwc[c] = 0.0; });
    if (f)
        atx_freqs<HD>(fr, theta, factor, low, high, orig, ext);
    __syncthreads();
    for (int tile = tile0; tile < NPT; tile += gridDim.x) {
        const int p0 = (NPT - 1 - tile) * NP, p1 = p0 + NP < T ? p0 + NP : T;
        const int kwin = W > 0 && p0 >= W ? p0 - W + 1 : 0, kend = atx_key_end<T, CAUSAL>(p1, W);
        const int kbeg = atx_tile_first(P, b, T, p0, kwin) / BK * BK;
        const bool full = G * NP == BQ && p0 + NP <= T;
        att_tiles16<BK, HD, WD, T>(ks[0], vs[0], k, ld, v, ld, kbeg);
        att_cp_commit();
        int pos[2], hq[2];
        atx_tc_qrows(pos, hq, p0, NP, G, kh, T, warp, g);
        /* the thread's query rows, NULL for none */
        auto qrow = [&](int u) -> const act_t * {
            return pos[u] >= 0 ? base + (int64_t)pos[u] * ld + (int64_t)hq[u] * HD : nullptr;
        };
        unsigned qa[KS][4], da[WIDE ? 1 : KS][4];   /* Q and dY fragments of the thread's rows */
        {
            atx_rows2<DN> x, dyr;
            const act_t *pq[2] = {qrow(0), qrow(1)}, *pd[2];
            for (int u = 0; u < 2; u++) {
                const bool in = pos[u] >= 0;
                const int64_t at = ((int64_t)b * T + pos[u]) * d + (int64_t)hq[u] * HD;
                pd[u] = in ? dy + at : nullptr;
                double a = 0.0;   /* D: the thread's part of dy . y */
                if (in)
                    for (int n = 0; n < DN; n++)
                        for (int e = 0; e < 2; e++) {
                            const int c = 8 * n + 2 * t4 + e;
                            a += (double)(rt_ld(dy + at + c) * rt_ld(y + at + c));
                        }
                a += __shfl_xor_sync(0xffffffffu, a, 1);
                a += __shfl_xor_sync(0xffffffffu, a, 2);
                const int64_t row = ((int64_t)b * H + hq[u]) * T + pos[u];
                const int i = 16 * warp + g + 8 * u;
                /* (the previous tile's last pass ended with a barrier: Lt, Dt are free) */
                if (t4 == 0) {
                    Dt[i] = (float)a;
                    Lt[i] = in ? lse[row] * RT_LOG2E : 0.0f;
                    if (in)
                        D[row] = (float)a;
                }
            }
            atx_tc_ld(x, pq, t4);
            atx_tc_ld(dyr, pd, t4);
            int rp[2];
            if (P)
                atx_tc_seq(pos, atx_prow(P, b, T), rp, Sq, warp, g);
            atx_tc_fwd(x, P ? rp : pos, qn, f, t4);
            atx_tc_frag(qa, x);
            if constexpr (WIDE) {
                atx_tc_st(dyw, dyr, g, t4);
                __syncwarp();
            } else {
                atx_tc_frag(da, dyr);
            }
        }
        float acc[DN][4];
        for (int n = 0; n < DN; n++)
            acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        for (int k0 = kbeg, cb = 0; k0 < kend; k0 += BK, cb ^= 1) {
            if (k0 + BK < kend) {
                att_tiles16<BK, HD, WD, T>(ks[cb ^ 1], vs[cb ^ 1], k, ld, v, ld, k0 + BK);
                att_cp_commit();
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            if (trk) {
                atx_tc_tile<BK, HD, WD>(ks[cb], k0, kn, f, atx_prow(P, b, T), T);
                __syncthreads();
            }
            const bool edge = P || !full || k0 + BK > T || (CAUSAL && k0 + BK - 1 > p0) ||
                              atx_window_edge<CAUSAL>(p0, p1 - 1, k0, k0 + BK - 1, W);
            float sc[BK / 8][4], dp[BK / 8][4];
            for (int n = 0; n < BK / 8; n += 2) {
                for (int r = 0; r < 4; r++)
                    sc[n][r] = dp[n][r] = sc[n + 1][r] = dp[n + 1][r] = 0.0f;
                for (int s = 0; s < KS; s++) {
                    unsigned kb[4], vb[4], ad[4];
                    rt_bfrag<WD>(kb, ks[cb], n, s, lane);
                    rt_bfrag<WD>(vb, vs[cb], n, s, lane);
                    if constexpr (WIDE)
                        rt_afrag<WD>(ad, dyw, s, lane);
                    else
                        for (int r = 0; r < 4; r++)
                            ad[r] = da[s][r];
                    rt_mma16816(sc[n], qa[s], kb);
                    rt_mma16816(dp[n], ad, vb);
                    rt_mma16816(sc[n + 1], qa[s], kb + 2);
                    rt_mma16816(dp[n + 1], ad, vb + 2);
                }
                for (int c = n; c < n + 2; c++)
                    for (int r = 0; r < 4; r++) {   /* dS = P (dP - D), 0 where masked */
                        const int kj = k0 + 8 * c + 2 * t4 + (r & 1), u = r >> 1;
                        const int i = 16 * warp + g + 8 * u;
                        const int lo = P ? Sq[i] : RT_ATT_ANY_KEY;
                        const bool masked =
                            edge && atx_tc_masked<T, CAUSAL>(pos[u], kj, W, lo, atx_prow(P, b, T));
                        float gc;
                        const float z = att_score2<CAP>(sc[c][r], scale, sl2, cap, &gc);
                        const float p = rt_exp2_approx(z - Lt[i]);
                        sc[c][r] = masked ? 0.0f : p * (dp[c][r] - Dt[i]) * gc;
                    }
            }
            for (int j = 0; j < BK / 16; j++) {   /* dQ += dS K */
                unsigned sa[4];
                for (int r = 0; r < 4; r++) {
                    const int n = 2 * j + (r >> 1), u = r & 1;
                    sa[r] = att_pack2(sc[n][2 * u], sc[n][2 * u + 1]);
                }
                for (int n = 0; n < DN; n += 2) {
                    unsigned kb[4];
                    rt_bfrag_t<WD>(kb, ks[cb], j, n, lane);
                    rt_mma16816(acc[n], sa, kb);
                    rt_mma16816(acc[n + 1], sa, kb + 2);
                }
            }
            __syncthreads();   /* tile cb read by all: the next pass may copy into it */
        }
        atx_rows2<DN> gq, x;
        for (int n = 0; n < DN; n++)
            for (int u = 0; u < 2; u++)
                for (int e = 0; e < 2; e++)
                    gq.v[n][u][e] = scale * acc[n][2 * u + e];
        float dw[DN][2] = {};
        if (trq) {
            const act_t *pq[2] = {qrow(0), qrow(1)};
            atx_tc_ld(x, pq, t4);
            const int *Pb = atx_prow(P, b, T);
            const int rp[2] = {atx_rope_pos(Pb, pos[0]), atx_rope_pos(Pb, pos[1])};
            atx_tc_bwd(gq, x, P ? rp : pos, qn, f, dw, t4);
        }
        for (int u = 0; u < 2; u++)
            if (pos[u] >= 0) {
                act_t *dq = dbase + (int64_t)pos[u] * ld + (int64_t)hq[u] * HD;
                for (int n = 0; n < DN; n++)
                    att_st2(dq + 8 * n + 2 * t4, RT_FP8_FOLDED(gq.v[n][u][0]), RT_FP8_FOLDED(gq.v[n][u][1]));
            }
        if (qn)
            atx_tc_dw_add<DN>(dw, dwc, lane, warp);
    }
    if (qn)
        atx_cols<HD>([&](int c) {
            partq[(((int64_t)b * KV + kh) * gridDim.x + tile0) * HD + c] = dwc[c];
        });
    RT_FP8_FOLD_END();
}

/* Backward, key side, after the query side (it reads D): grid (ceil(T / 64), KV, B); a
 * block keeps 64 keys of head kh (16 a warp; K through atx_tc_fwd as A fragments, V as
 * they are) and walks the query tiles of the G heads that read them, from the tile's
 * first key to its last key's window end: per 16 queries S^T = K Q^T and dP^T = V dY^T,
 * P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - D), dV += P^T dY, dK += dS^T Q (Q
 * through atx_tc_tile in shared memory). dk through atx_tc_bwd when k was transformed,
 * the k_norm weight's gradient into partk [B, KV, gridDim.x, HD] (slot tile0). Heads
 * wider than 128 (WIDE) walk the query tiles twice, dV's pass then dK's (S^T computed
 * in both), in one set of accumulators, and keep V's fragments in dynamic shared memory
 * (64 rows of HD + 8 16-bit values, the launch's): K's, V's, dK's and dV's would need
 * 384 registers a thread. */
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_kv_tc(RT_ATTENTION_EXT_ARGS)
{
    const int *P = PK ? P_ : nullptr;   /* (packed rows: the PK kernels alone) */
    RT_FP8_FOLD_INIT();   /* fp8-mixed: dqkv's maximum (common.cuh) */
    constexpr int BQ = rt_att_tc_stream(HD), BK = 64, KS = HD / 16, DN = HD / 8, WD = HD + 8;
    constexpr int NKT = (T + BK - 1) / BK;
    constexpr bool WIDE = HD > 128;
    __shared__ __align__(16) unsigned short qs[2][BQ][WD], dys[2][BQ][WD];
    __shared__ __align__(16) float Lt[2][BQ], Dt[2][BQ];
    __shared__ float fr[HD];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    unsigned short (*vw)[WD] = WIDE ? (unsigned short (*)[WD])rt_dyn_smem() + 16 * warp : nullptr;
    int b, kh, tile0;
    att_block_order(b, kh, tile0);
    const int G = H / KV;
    const int64_t d = (int64_t)H * HD, ld = (int64_t)(H + 2 * KV) * HD;
    const act_t *base = qkv + (int64_t)b * T * ld;
    act_t *dbase = dqkv + (int64_t)b * T * ld;
    __shared__ __align__(16) int Pt[2][BQ];   /* packed rows: the query tiles' positions */
    const float *f = theta > 0.0f ? fr : nullptr;
    const bool trk = kn != nullptr || f != nullptr, trq = qn != nullptr || f != nullptr;
    __shared__ double dwc[HD];   /* k_norm's weight gradient, column c thread c mod 128's */
    atx_cols<HD>([&](int c) { dwc[c] = 0.0; });
    if (f)
        atx_freqs<HD>(fr, theta, factor, low, high, orig, ext);
    __syncthreads();
    const act_t *dyb = dy + (int64_t)b * T * d;
    const float *Lb = lse + (int64_t)b * H * T, *Db = D + (int64_t)b * H * T;
    /* query tile i0 of head h (its Q, dY, lse and D) into buffer u, as one group */
    auto tiles = [&](int u, int h, int i0) {
        const float *Lh = Lb + (int64_t)h * T, *Dh = Db + (int64_t)h * T;
        att_tiles16<BQ, HD, WD, T>(qs[u], dys[u], base + (int64_t)h * HD, ld,
                                    dyb + (int64_t)h * HD, d, i0);
        for (int e = threadIdx.x; e < BQ; e += RT_ATT_THREADS) {
            const bool in = i0 + e < T;
            att_cp4(&Lt[u][e], Lh + (in ? i0 + e : 0), in);
            att_cp4(&Dt[u][e], Dh + (in ? i0 + e : 0), in);
            if (P)
                att_cp4(&Pt[u][e], P + (int64_t)b * T + (in ? i0 + e : 0), in);
        }
        att_cp_commit();
    };
    for (int tile = tile0; tile < NKT; tile += gridDim.x) {
        const int k0 = tile * BK, j0 = k0 + 16 * warp + g;   /* the warp's keys j0, j0 + 8 */
        const int nk = T - k0 < BK ? T - k0 : BK;
        const int qlo = CAUSAL ? k0 : atx_query_first<CAUSAL>(k0, W) / BQ * BQ;
        const int qhi = W > 0 && k0 + nk - 1 + W < T ? k0 + nk - 1 + W : T;
        const int NQ = (qhi - qlo + BQ - 1) / BQ;   /* query tiles a head */
        tiles(0, kh * G, qlo);
        /* the thread's key rows j0 + 8u (v: KV HD further), NULL past T */
        auto krow = [&](int u) -> const act_t * {
            const int j = j0 + 8 * u;
            return j < T ? base + (int64_t)j * ld + (int64_t)(H + kh) * HD : nullptr;
        };
        /* the positions of those rows (-1: none); recomputed where needed, not held */
        auto kpos = [&](int u) { return j0 + 8 * u < T ? j0 + 8 * u : -1; };
        unsigned ka[KS][4], va[WIDE ? 1 : KS][4];
        {
            const int *Pb = atx_prow(P, b, T);
            const int pos[2] = {atx_rope_pos(Pb, kpos(0)), atx_rope_pos(Pb, kpos(1))};
            atx_rows2<DN> x, vr;
            const act_t *pk[2] = {krow(0), krow(1)};
            const act_t *pv[2] = {pk[0] ? pk[0] + (int64_t)KV * HD : nullptr,
                                  pk[1] ? pk[1] + (int64_t)KV * HD : nullptr};
            atx_tc_ld(x, pk, t4);
            atx_tc_ld(vr, pv, t4);
            atx_tc_fwd(x, pos, kn, f, t4);
            atx_tc_frag(ka, x);
            if constexpr (WIDE) {
                atx_tc_st(vw, vr, g, t4);
                __syncwarp();
            } else {
                atx_tc_frag(va, vr);
            }
        }
        /* dK's accumulators, and dV's (WIDE: dV's pass uses dK's) */
        float acc[WIDE ? 1 : 2][DN][4];
        float (&gk)[DN][4] = acc[0], (&gv)[DN][4] = acc[WIDE ? 0 : 1];
        /* The (head, query tile) pairs from the one in flight in buffer 0: dV += P^T dY
         * (dov), dK += dS^T Q (dok), from zero. */
        auto walk = [&](bool dov, bool dok) {
            for (int n = 0; n < DN; n++)
                for (int r = 0; r < 4; r++) {
                    if (dok)
                        gk[n][r] = 0.0f;
                    if (dov)
                        gv[n][r] = 0.0f;
                }
            for (int it = 0, cb = 0; it < G * NQ; it++, cb ^= 1) {
                const int i0 = qlo + it % NQ * BQ;
                if (it + 1 < G * NQ) {   /* the next tile in, then this one waited for */
                    tiles(cb ^ 1, kh * G + (it + 1) / NQ, qlo + (it + 1) % NQ * BQ);
                    att_cp_wait<1>();
                } else {
                    att_cp_wait<0>();
                }
                __syncthreads();
                /* packed rows: a query tile whose first query's sequence starts past the
                 * keys (and so every query's: atx_tile_first) adds nothing */
                const bool none = P && i0 - Pt[cb][0] > k0 + nk - 1;
                if (trq && !none) {
                    atx_tc_tile<BQ, HD, WD>(qs[cb], i0, qn, f, atx_prow(P, b, T), T);
                    __syncthreads();
                }
                const bool edge = P || (CAUSAL && i0 < k0 + BK - 1) || i0 + BQ > T ||
                                  k0 + BK > T ||
                                  atx_window_edge<CAUSAL>(i0, i0 + BQ - 1, k0, k0 + BK - 1, W);
                for (int j = 0; !none && j < BQ / 16; j++) {   /* 16 queries at a time */
                    float st[2][4], dpt[2][4];
                    for (int r = 0; r < 4; r++)
                        st[0][r] = dpt[0][r] = st[1][r] = dpt[1][r] = 0.0f;
                    for (int s = 0; s < KS; s++) {   /* S^T = K Q^T; dP^T = V dY^T (dok) */
                        unsigned qb[4], db[4], av[4];
                        rt_bfrag<WD>(qb, qs[cb], 2 * j, s, lane);
                        if (dok) {
                            rt_bfrag<WD>(db, dys[cb], 2 * j, s, lane);
                            if constexpr (WIDE)
                                rt_afrag<WD>(av, vw, s, lane);
                            else
                                for (int r = 0; r < 4; r++)
                                    av[r] = va[s][r];
                        }
                        rt_mma16816(st[0], ka[s], qb);
                        if (dok)
                            rt_mma16816(dpt[0], av, db);
                        rt_mma16816(st[1], ka[s], qb + 2);
                        if (dok)
                            rt_mma16816(dpt[1], av, db + 2);
                    }
                    for (int c = 0; c < 2; c++) {
                        const int n = 2 * j + c;
                        for (int r = 0; r < 4; r++) {   /* P^T into st, dS^T into dpt */
                            const int il = 8 * n + 2 * t4 + (r & 1), i = i0 + il;
                            const int kj = j0 + 8 * (r >> 1);
                            const bool masked =
                                edge && (i >= T || atx_tc_masked<T, CAUSAL>(i, kj, W,
                                                                            P ? i - Pt[cb][il]
                                                                              : RT_ATT_ANY_KEY,
                                                                            atx_prow(P, b, T)));
                            const float lt = Lt[cb][il] * RT_LOG2E;   /* in log2 units */
                            float gc = 1.0f;   /* the cap's derivative (CAP) */
                            const float p =
                                masked ? 0.0f
                                       : rt_exp2_approx(
                                             att_score2<CAP>(st[c][r], scale, sl2, cap, &gc) - lt);
                            st[c][r] = p;
                            dpt[c][r] = p * (dpt[c][r] - Dt[cb][il]) * gc;
                        }
                    }
                    unsigned pa[4], sa[4];
                    for (int r = 0; r < 4; r++) {
                        const int c = r >> 1, u = r & 1;
                        pa[r] = att_pack2(st[c][2 * u], st[c][2 * u + 1]);
                        sa[r] = att_pack2(dpt[c][2 * u], dpt[c][2 * u + 1]);
                    }
                    for (int n = 0; n < DN; n += 2) {   /* dV += P^T dY, dK += dS^T Q */
                        unsigned yb[4], qb[4];
                        if (dov)
                            rt_bfrag_t<WD>(yb, dys[cb], j, n, lane);
                        if (dok)
                            rt_bfrag_t<WD>(qb, qs[cb], j, n, lane);
                        if (dov)
                            rt_mma16816(gv[n], pa, yb);
                        if (dok)
                            rt_mma16816(gk[n], sa, qb);
                        if (dov)
                            rt_mma16816(gv[n + 1], pa, yb + 2);
                        if (dok)
                            rt_mma16816(gk[n + 1], sa, qb + 2);
                    }
                }
                __syncthreads();   /* tile cb read by all: the next pass may copy into it */
            }
        };
        auto store_dv = [&]() {
            for (int u = 0; u < 2; u++)
                if (kpos(u) >= 0) {
                    act_t *dv = dbase + (int64_t)kpos(u) * ld + (int64_t)(H + KV + kh) * HD;
                    for (int n = 0; n < DN; n++)
                        att_st2(dv + 8 * n + 2 * t4, RT_FP8_FOLDED(gv[n][2 * u]),
                                RT_FP8_FOLDED(gv[n][2 * u + 1]));
                }
        };
        if constexpr (WIDE) {   /* dV's walk, then dK's from the first tile again */
            walk(true, false);
            store_dv();
            tiles(0, kh * G, qlo);
            walk(false, true);
        } else {
            walk(true, true);
            store_dv();
        }
        const int pos[2] = {kpos(0), kpos(1)};
        atx_rows2<DN> gr, x;
        for (int n = 0; n < DN; n++)
            for (int u = 0; u < 2; u++)
                for (int e = 0; e < 2; e++)
                    gr.v[n][u][e] = scale * gk[n][2 * u + e];
        float dw[DN][2] = {};
        if (trk) {
            const act_t *pk[2] = {krow(0), krow(1)};
            atx_tc_ld(x, pk, t4);
            const int *Pb = atx_prow(P, b, T);
            const int rp[2] = {atx_rope_pos(Pb, pos[0]), atx_rope_pos(Pb, pos[1])};
            atx_tc_bwd(gr, x, P ? rp : pos, kn, f, dw, t4);
        }
        for (int u = 0; u < 2; u++)
            if (pos[u] >= 0) {
                act_t *dk = dbase + (int64_t)pos[u] * ld + (int64_t)(H + kh) * HD;
                for (int n = 0; n < DN; n++)
                    att_st2(dk + 8 * n + 2 * t4, RT_FP8_FOLDED(gr.v[n][u][0]), RT_FP8_FOLDED(gr.v[n][u][1]));
            }
        if (kn)
            atx_tc_dw_add<DN>(dw, dwc, lane, warp);
    }
    if (kn)
        atx_cols<HD>([&](int c) {
            partk[(((int64_t)b * KV + kh) * gridDim.x + tile0) * HD + c] = dwc[c];
        });
    RT_FP8_FOLD_END();
}
#else
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_fwd_tc(RT_ATTENTION_EXT_FWD_ARGS) {}
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_q_tc(RT_ATTENTION_EXT_ARGS) {}
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_kv_tc(RT_ATTENTION_EXT_ARGS) {}
#endif

/* the tensor-core kernels where they apply (rt_att_tc_ext), else the CUDA-core ones (heads
 * up to 128 wide: a wider instance in fp32, which the compiler never emits, is empty and
 * the runtime refuses it); the launch's grid follows (cuda_ops.c: 64 rows a tile on the
 * tensor cores) */
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_fwd_any(RT_ATTENTION_EXT_FWD_ARGS)
{
    if constexpr (rt_att_tc_ext(HD))
        attention_ext_fwd_tc<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_FWD_PASS);
    else if constexpr (HD <= 128)
        attention_ext_fwd<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_FWD_PASS);
}
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_q_any(RT_ATTENTION_EXT_ARGS)
{
    if constexpr (rt_att_tc_ext(HD))
        attention_ext_bwd_q_tc<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_PASS);
    else if constexpr (HD <= 128)
        attention_ext_bwd_q<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_PASS);
}
template <int T, int HD, int CAUSAL, bool CAP, bool PK>
__device__ __forceinline__ void attention_ext_bwd_kv_any(RT_ATTENTION_EXT_ARGS)
{
    if constexpr (rt_att_tc_ext(HD))
        attention_ext_bwd_kv_tc<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_PASS);
    else if constexpr (HD <= 128)
        attention_ext_bwd_kv<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_PASS);
}

/* The kernels of an instance: NAME is rt_attention_ext (plain), rt_attention_ext_cap
 * (soft-capped scores, CAP; no sm_90a kernels, cuda_ops.c sends those to these),
 * rt_attention_ext_pk (packed rows: the model's positions, PK; sm_90a kernels of its own,
 * sm90_attention*.cuh's rt_attention_ext_pk_*90_*) or rt_attention_ext_cap_pk (both) */
#define RT_ATTENTION_EXT_FWD_K(NAME, CAP, PK, T, HD, CAUSAL)                                   \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                               \
        NAME##_fwd_##T##_##HD##_##CAUSAL(RT_ATTENTION_EXT_FWD_ARGS)                             \
    {                                                                                          \
        attention_ext_fwd_any<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_FWD_PASS);              \
    }
#define RT_ATTENTION_EXT_BWD_K(NAME, CAP, PK, T, HD, CAUSAL)                                   \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                               \
        NAME##_bwd_q_##T##_##HD##_##CAUSAL(RT_ATTENTION_EXT_ARGS)                               \
    {                                                                                          \
        attention_ext_bwd_q_any<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_PASS);                \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(RT_ATT_THREADS)                               \
        NAME##_bwd_kv_##T##_##HD##_##CAUSAL(RT_ATTENTION_EXT_ARGS)                              \
    {                                                                                          \
        attention_ext_bwd_kv_any<T, HD, CAUSAL, CAP, PK>(RT_ATTENTION_EXT_PASS);               \
    }
#define RT_ATTENTION_EXT_FWD(T, HD, CAUSAL)                                                    \
    RT_ATTENTION_EXT_FWD_K(rt_attention_ext, false, false, T, HD, CAUSAL)                      \
    RT_ATTENTION_EXT_FWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_BWD(T, HD, CAUSAL)                                                    \
    RT_ATTENTION_EXT_BWD_K(rt_attention_ext, false, false, T, HD, CAUSAL)                      \
    RT_ATTENTION_EXT_BWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_CAP_FWD(T, HD, CAUSAL)                                                \
    RT_ATTENTION_EXT_FWD_K(rt_attention_ext_cap, true, false, T, HD, CAUSAL)
#define RT_ATTENTION_EXT_CAP_BWD(T, HD, CAUSAL)                                                \
    RT_ATTENTION_EXT_BWD_K(rt_attention_ext_cap, true, false, T, HD, CAUSAL)
#define RT_ATTENTION_EXT_PK_FWD(T, HD, CAUSAL)                                                 \
    RT_ATTENTION_EXT_FWD_K(rt_attention_ext_pk, false, true, T, HD, CAUSAL)                    \
    RT_ATTENTION_EXT_PK_FWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_PK_BWD(T, HD, CAUSAL)                                                 \
    RT_ATTENTION_EXT_BWD_K(rt_attention_ext_pk, false, true, T, HD, CAUSAL)                    \
    RT_ATTENTION_EXT_PK_BWD90(T, HD, CAUSAL)
#define RT_ATTENTION_EXT_CAP_PK_FWD(T, HD, CAUSAL)                                             \
    RT_ATTENTION_EXT_FWD_K(rt_attention_ext_cap_pk, true, true, T, HD, CAUSAL)
#define RT_ATTENTION_EXT_CAP_PK_BWD(T, HD, CAUSAL)                                             \
    RT_ATTENTION_EXT_BWD_K(rt_attention_ext_cap_pk, true, true, T, HD, CAUSAL)
