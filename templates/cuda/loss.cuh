/* loss.cuh: the losses (twins of rt_cross_entropy and rt_mse in runtime/kernels.c).
 * Each writes one value per row (or per block) into scratch; rt_loss_total
 * (common.cuh) then adds them into the device rt_cu_stat in a fixed order. */

/* Softmax cross entropy over one row of C logits per block, fused with its gradient.
 * Rows are LD elements apart (LD >= C: a vocabulary padded so that every row starts
 * 16-byte aligned, for the GEMMs and for this kernel's vector loads; the logits'
 * padding is not read, the gradient's is written 0: the head's backward GEMMs run
 * over the padded vocabulary).
 *
 * Launch: grid (rows), block of 32..1024 threads (a multiple of 32).
 *   loss[r]    = max + log(sum_j exp(z_j - max)) - z[target]   (double)
 *   correct[r] = 1 when the first argmax is the target (a NaN counts as the maximum)
 *   dlogits[r] = (softmax - onehot(target)) * grad_scale        when dlogits != NULL
 *                (and 0 in its padding, C to LD)
 * dlogits may be logits itself (the gradient overwrites the logits): every logit is
 * read by the pass that writes it, by the thread that writes it, and z[target] is read
 * before. The probabilities are never stored. A target outside [0, C) (the loader
 * checks labels, so only a bug gets here) makes the row's loss NaN, which the loop
 * reports as a diverged run, and its gradient 0. */
template <int C, int LD>
__device__ __forceinline__ void cross_entropy_row(const act_t *logits, const int32_t *target,
                                                  act_t *dlogits, double *loss, double *correct,
                                                  float grad_scale)
{
    int64_t r = blockIdx.x;
    const act_t *z = logits + r * LD;      /* [C] */
    int tg = target[r];
    bool bad = tg < 0 || tg >= C;
    /* pass 1: max and first argmax */
    float bv = -rt_inf();
    int bi = 0x7fffffff;
    rt_row_each(z, C, [&](int j, float v) {
        if (rt_argmax_better(v, j, bv, bi)) {
            bv = v;
            bi = j;
        }
    });
    float m;
    int am = rt_block_argmax(bv, bi, &m);
    /* pass 2: sum of exp(z - max), in double */
    double s = 0.0;
    rt_row_each(z, C, [&](int j, float v) { s += (double)expf(v - m); });
    s = rt_block_sum(s);
    float zt = bad ? 0.0f : rt_ld(z + tg);
    __syncthreads();   /* z[target] is read by every thread before pass 3 overwrites it */
    /* pass 3: the gradient, exp(z - max) / sum scaled, minus grad_scale at the target */
    if (dlogits) {
        float inv = (float)(1.0 / s), sc = inv * grad_scale;
        rt_row_map(z, dlogits + r * LD, C, [&](int j, float v) {
            if (bad)
                return 0.0f;
            float e = expf(v - m);
            return j == tg ? (e * inv - 1.0f) * grad_scale : e * sc;
        });
        for (int j = C + threadIdx.x; j < LD; j += blockDim.x)
            rt_st(dlogits + r * LD + j, 0.0f);
    }
    if (threadIdx.x == 0) {
        loss[r] = bad ? rt_nan_d() : (double)m + log(s) - (double)zt;
        correct[r] = !bad && am == tg ? 1.0 : 0.0;
    }
}

#if (defined(RT_ACT_BF16) || defined(RT_ACT_F16)) && !defined(RT_CE_THREE_PASSES)
/* The same row with the row held in registers: 16-bit logits, rows 16-byte aligned
 * (LD a multiple of 8), 8192 <= C <= 65536, a block of 1024 threads. Thread t loads
 * its vectors of 8 values (16 bytes; vector t + 1024 k, k < CE_NV) all at once, and the
 * max, the sum and the gradient then come from those registers: the row is read from
 * memory once, not three times (GPT-2's rows are 100 KB, 1.6 GB of logits at B=16, more
 * than the L2 cache keeps between passes). The per-value work is kept small, since at
 * GPT-2's size the loop's instructions, not memory, set the time (Nsight Compute on an
 * H100, 2026-11-27: issue slots 69% busy, the integer pipe 54%, DRAM 37%, with expf
 * twice a value, the sum in double and every value's index checked):
 *   - a vector wholly inside the row (all but the last of a C not a multiple of 8)
 *     takes no index check; every gradient value is written as exp(z - max) / sum
 *     scaled, then the thread that wrote the target's vector rewrites that one value;
 *   - exp(z - max) = 2^(z log2 e - ml), ml = max log2 e rounded to float: one FMA and
 *     ex2.approx (relative error about 2^-22). Every term then carries the same factor
 *     2^dl, dl = max log2 e - ml (exact by an FMA): the gradient's ratio cancels it,
 *     the loss takes dl ln 2 off log(sum);
 *   - a vector's 8 terms are summed in float, the vectors' sums in double;
 *   - the max is fmaxf's, its first index found afterwards in the one vector where
 *     the thread's max first occurs.
 * A NaN or +inf in the row makes the sum NaN (fmaxf passes a NaN over; z - max is NaN
 * for an infinite max), as does a row of -inf; a max whose ml is not finite (|max| >
 * 2.36e38, which bf16 holds) fails its own test. Such a row goes to cross_entropy_row
 * (its rules for NaN and inf) before anything is written; so does a block of another
 * size or an unaligned row; -inf under a finite max stays (its term is 0). The sum's
 * order and the exponential differ from cross_entropy_row's.
 * Returns whether it did the row. (RT_CE_THREE_PASSES, defined by a file generated with
 * TRAINC_CE_REGS=0, leaves this path out: the kernel as it was, for benchmarks.) */
/* a vector of 8 16-bit values (four words, low half first) as floats, and back */
__device__ __forceinline__ void ce_unpack(uint4 q, float x[8])
{
    rt_unpack2(q.x, (const act_t *)0, x), rt_unpack2(q.y, (const act_t *)0, x + 2);
    rt_unpack2(q.z, (const act_t *)0, x + 4), rt_unpack2(q.w, (const act_t *)0, x + 6);
}
__device__ __forceinline__ uint4 ce_pack(const float g[8])
{
    return make_uint4(rt_pack2(g, (act_t *)0), rt_pack2(g + 2, (act_t *)0),
                      rt_pack2(g + 4, (act_t *)0), rt_pack2(g + 6, (act_t *)0));
}
template <int C, int LD>
__device__ __forceinline__ bool cross_entropy_row_regs(const act_t *logits, const int32_t *target,
                                                       act_t *dlogits, double *loss,
                                                       double *correct, float grad_scale)
{
    /* vectors in the row, vectors wholly inside it, vectors a thread */
    constexpr int NV8 = (C + 7) / 8, WHOLE = C / 8, CE_NV = (NV8 + 1023) / 1024;
    constexpr float L2E = 1.4426950408889634f;   /* log2(e) */
    int64_t r = blockIdx.x;
    const act_t *z = logits + r * LD;      /* [C] */
    act_t *dz = dlogits ? dlogits + r * LD : NULL;
    if (blockDim.x != 1024 || !rt_aligned16(z) || (dz && !rt_aligned16(dz)))
        return false;
    const int t = threadIdx.x, tg = target[r];
    /* vector t + 1024 k is whole: for the early k, known when compiled */
    auto whole = [&](int k) { return 1024 * k + 1023 < WHOLE || t + 1024 * k < WHOLE; };
    bool bad = tg < 0 || tg >= C;
    float zt = bad ? 0.0f : rt_ld(z + tg);
    uint4 q[CE_NV];
#pragma unroll
    for (int k = 0; k < CE_NV; k++)   /* k = 0: every thread's (C >= 8192); past the
                                         * row 0, never used (j >= C) */
        q[k] = k == 0 || t + 1024 * k < NV8 ? *(const uint4 *)(z + (int64_t)(t + 1024 * k) * 8)
                                            : make_uint4(0u, 0u, 0u, 0u);
    /* pass 1 (registers): the thread's max and the first vector holding it, then the
     * first index of the max in that vector */
    float bv = -rt_inf();
    int bk = 0;
#pragma unroll
    for (int k = 0; k < CE_NV; k++) {
        const int v = t + 1024 * k;
        float x[8], vm = -rt_inf();
        ce_unpack(q[k], x);
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (whole(k) || v * 8 + e < C)
                vm = fmaxf(vm, x[e]);
        if (vm > bv) {
            bv = vm;
            bk = k;
        }
    }
    uint4 qb = q[0];   /* vector bk, taken by selects (an index into q would put q in memory) */
#pragma unroll
    for (int k = 1; k < CE_NV; k++)
        if (k == bk)
            qb = q[k];
    float xb[8];
    ce_unpack(qb, xb);
    int bi = 0x7fffffff;
#pragma unroll
    for (int e = 7; e >= 0; e--)
        if (xb[e] == bv)
            bi = (t + 1024 * bk) * 8 + e;
    float m;
    int am = rt_block_argmax(bv, bi, &m);
    const float ml = m * L2E;
    /* pass 2 (registers): sum of exp(z - max), each vector's in float, in double */
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < CE_NV; k++) {
        const int v = t + 1024 * k;
        float x[8], sv = 0.0f;
        ce_unpack(q[k], x);
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (whole(k) || v * 8 + e < C)
                sv += rt_exp2_approx(fmaf(x[e], L2E, -ml));
        s += (double)sv;
    }
    s = rt_block_sum(s);   /* its barriers: every thread has read z[target] before pass 3 */
    if (s != s || !(fabsf(ml) < rt_inf()))
        return false;      /* a NaN or an infinity in the row, or a max past float's
                            * range once times log2 e: nothing is written yet */
    /* pass 3: the gradient, exp(z - max) / sum scaled (0 past C, and in the padding
     * vectors up to LD; all 0 for a bad target), then the target's value rewritten by
     * the thread that stored its vector: (exp(z[target] - max) / sum - 1) scaled */
    if (dz) {
        const float inv = (float)(1.0 / s), sc = inv * grad_scale, scb = bad ? 0.0f : sc;
#pragma unroll
        for (int k = 0; k < CE_NV; k++) {
            const int v = t + 1024 * k;
            if (v >= NV8)
                continue;
            float x[8];
            ce_unpack(q[k], x);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float g = rt_exp2_approx(fmaf(x[e], L2E, -ml)) * scb;
                x[e] = whole(k) || v * 8 + e < C ? g : 0.0f;
            }
            *(uint4 *)(dz + (int64_t)v * 8) = ce_pack(x);
        }
        if (!bad && t == tg / 8 % 1024)
            rt_st(dz + tg, (rt_exp2_approx(fmaf(zt, L2E, -ml)) * inv - 1.0f) * grad_scale);
        for (int v = NV8 + t; v < LD / 8; v += 1024)
            *(uint4 *)(dz + (int64_t)v * 8) = make_uint4(0u, 0u, 0u, 0u);
    }
    if (t == 0) {
        const double dl = (double)fmaf(m, L2E, -ml);   /* every term's 2^dl (above) */
        loss[r] = bad ? rt_nan_d() : (double)m + (log(s) - dl * 0.6931471805599453) - (double)zt;
        correct[r] = !bad && am == tg ? 1.0 : 0.0;
    }
    return true;
}
#define RT_CE_REGS(C, LD) ((C) >= 8192 && (C) <= 65536 && (LD) % 8 == 0)
#else
#define RT_CE_REGS(C, LD) false
#endif

template <int C, int LD>
__device__ __forceinline__ void cross_entropy(const act_t *logits, const int32_t *target,
                                              act_t *dlogits, double *loss, double *correct,
                                              float grad_scale)
{
#if (defined(RT_ACT_BF16) || defined(RT_ACT_F16)) && !defined(RT_CE_THREE_PASSES)
    if constexpr (RT_CE_REGS(C, LD))
        if (cross_entropy_row_regs<C, LD>(logits, target, dlogits, loss, correct, grad_scale))
            return;
#endif
    cross_entropy_row<C, LD>(logits, target, dlogits, loss, correct, grad_scale);
}

/* cross_entropy's ignore_index (st != NULL: the pass's statistics, where rt_ce_count
 * left the scale): a row whose target is `ignore` adds a loss and a correct of 0 and
 * writes a gradient row of 0 (the padding too), the block's threads alike; the others'
 * grad_scale is times st->ce_scale, so that the mean is over the targets counted.
 * Returns whether the row is ignored. */
template <int LD>
__device__ __forceinline__ bool ce_ignored(const int32_t *target, act_t *dlogits, double *loss,
                                           double *correct, const rt_cu_stat *st, int ignore,
                                           float &grad_scale)
{
    if (!st)
        return false;
    int64_t r = blockIdx.x;
    if (target[r] != ignore) {
        grad_scale *= st->ce_scale;
        return false;
    }
    if (dlogits)
        for (int j = threadIdx.x; j < LD; j += blockDim.x)
            rt_st(dlogits + r * LD + j, 0.0f);
    if (threadIdx.x == 0)
        loss[r] = correct[r] = 0.0;
    return true;
}

/* The targets of target[0, rows) other than `ignore` (one block of 1024 threads): added
 * to st->terms, and st->ce_scale = rows / them (0 for none), the loss kernels' factor. */
extern "C" __global__ void __launch_bounds__(1024)
rt_ce_count(const int32_t *target, int64_t rows, int ignore, rt_cu_stat *st)
{
    double n = 0.0;
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x)
        n += target[i] != ignore;
    n = rt_block_sum(n);
    if (threadIdx.x == 0) {
        st->terms += (unsigned long long)n;
        st->ce_scale = n > 0.0 ? (float)((double)rows / n) : 0.0f;
    }
}

#define RT_CROSS_ENTROPY(C, LD)                                                               \
    extern "C" __global__ void __launch_bounds__(1024) rt_cross_entropy_##C##_##LD(           \
        const act_t *logits, const int32_t *target, act_t *dlogits, double *loss,             \
        double *correct, float grad_scale, const rt_cu_stat *st, int ignore)                  \
    {                                                                                         \
        if (!ce_ignored<LD>(target, dlogits, loss, correct, st, ignore, grad_scale))          \
            cross_entropy<C, LD>(logits, target, dlogits, loss, correct, grad_scale);         \
    }

/* Label-smoothed cross entropy (F.cross_entropy's label_smoothing = ls > 0): the twin
 * of rt_cross_entropy_ls in runtime/kernels.c; launch and layout as cross_entropy_row.
 * The targets are (1 - ls) onehot + ls / C, so with lse = max + log(sum exp(z - max))
 *   loss[r]    = lse - (1 - ls) z[target] - (ls / C) sum_j z_j   (double)
 *   dlogits[r] = (softmax - ls / C - (1 - ls) onehot(target)) * grad_scale
 * Pass 1 also sums the logits (in double, with rt_block_sum's fixed order); dlogits may
 * be logits, as in cross_entropy_row. */
template <int C, int LD>
__device__ __forceinline__ void cross_entropy_ls_row(const act_t *logits, const int32_t *target,
                                                     act_t *dlogits, double *loss,
                                                     double *correct, float grad_scale, float ls)
{
    int64_t r = blockIdx.x;
    const act_t *z = logits + r * LD;      /* [C] */
    int tg = target[r];
    bool bad = tg < 0 || tg >= C;
    float bv = -rt_inf();
    int bi = 0x7fffffff;
    double sz = 0.0;
    rt_row_each(z, C, [&](int j, float v) {
        if (rt_argmax_better(v, j, bv, bi)) {
            bv = v;
            bi = j;
        }
        sz += (double)v;
    });
    float m;
    int am = rt_block_argmax(bv, bi, &m);
    sz = rt_block_sum(sz);
    double s = 0.0;
    rt_row_each(z, C, [&](int j, float v) { s += (double)expf(v - m); });
    s = rt_block_sum(s);
    float zt = bad ? 0.0f : rt_ld(z + tg);
    __syncthreads();   /* z[target] is read by every thread before pass 3 overwrites it */
    if (dlogits) {
        float inv = (float)(1.0 / s), u = ls / (float)C;
        rt_row_map(z, dlogits + r * LD, C, [&](int j, float v) {
            if (bad)
                return 0.0f;
            return (expf(v - m) * inv - u - (j == tg ? 1.0f - ls : 0.0f)) * grad_scale;
        });
        for (int j = C + threadIdx.x; j < LD; j += blockDim.x)
            rt_st(dlogits + r * LD + j, 0.0f);
    }
    if (threadIdx.x == 0) {
        loss[r] = bad ? rt_nan_d()
                      : (double)m + log(s) - (1.0 - (double)ls) * (double)zt - (double)ls / C * sz;
        correct[r] = !bad && am == tg ? 1.0 : 0.0;
    }
}

#define RT_CROSS_ENTROPY_LS(C, LD)                                                            \
    extern "C" __global__ void __launch_bounds__(1024) rt_cross_entropy_ls_##C##_##LD(        \
        const act_t *logits, const int32_t *target, act_t *dlogits, double *loss,             \
        double *correct, float grad_scale, float ls, const rt_cu_stat *st, int ignore)        \
    {                                                                                         \
        if (!ce_ignored<LD>(target, dlogits, loss, correct, st, ignore, grad_scale))          \
            cross_entropy_ls_row<C, LD>(logits, target, dlogits, loss, correct, grad_scale,   \
                                        ls);                                                  \
    }

/* Mean squared error terms, RT_MSE_CHUNK elements per block.
 *
 * Launch: grid (ceil(n / RT_MSE_CHUNK)), block of 256 threads.
 *   part[b] = sum over the block's elements of (y - t)^2   (the difference in float, as
 *             kernels.c, squared and summed in double)
 *   dy      = 2 (y - t) grad_scale                         when dy != NULL
 * dy may be y. */
#define RT_MSE_CHUNK 8192

/* A GAN's loss term on the discriminator's logits z [rows] (twin of kernels.c's
 * rt_gan_loss; term: RT_GAN_*, trainc_rt.h's order), RT_MSE_CHUNK rows per block.
 *   part[b] = sum over the block's rows of the term's loss  (in double)
 *   dz      = d(term)/dz * grad_scale                         when dz != NULL */
extern "C" __global__ void __launch_bounds__(256)
rt_gan_loss(const act_t *z, act_t *dz, double *part, int64_t rows, int term, float grad_scale)
{
    int64_t i0 = (int64_t)blockIdx.x * RT_MSE_CHUNK;
    int len = rows - i0 < RT_MSE_CHUNK ? (int)(rows - i0) : RT_MSE_CHUNK;
    double s = 0.0;
    for (int k = threadIdx.x; k < len; k += blockDim.x) {
        float v = rt_ld(z + i0 + k), d;
        double x = (double)v;
        if (term <= 1) {         /* bce: softplus(z) - y z, its gradient sigmoid(z) - y */
            float y = term == 0 ? 1.0f : 0.0f;
            s += (x > 0 ? x : 0.0) - (double)y * x + log1p(exp(-fabs(x)));
            d = 1.0f / (1.0f + expf(-v)) - y;
        } else if (term == 2) {  /* relu(1 - z) */
            s += v < 1.0f ? 1.0 - x : 0.0;
            d = v < 1.0f ? -1.0f : 0.0f;
        } else if (term == 3) {  /* relu(1 + z) */
            s += v > -1.0f ? 1.0 + x : 0.0;
            d = v > -1.0f ? 1.0f : 0.0f;
        } else {                 /* -z */
            s -= x;
            d = -1.0f;
        }
        if (dz)
            rt_st(dz + i0 + k, d * grad_scale);
    }
    s = rt_block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}
extern "C" __global__ void __launch_bounds__(256)
rt_mse(const act_t *y, const float *t, act_t *dy, double *part, int64_t n, float grad_scale)
{
    int64_t i0 = (int64_t)blockIdx.x * RT_MSE_CHUNK;
    int len = n - i0 < RT_MSE_CHUNK ? (int)(n - i0) : RT_MSE_CHUNK;
    double s = 0.0;
    for (int k = threadIdx.x; k < len; k += blockDim.x) {
        float d = rt_ld(y + i0 + k) - rt_ld(t + i0 + k);
        s += (double)d * (double)d;
        if (dy)
            rt_st(dy + i0 + k, 2.0f * d * grad_scale);
    }
    s = rt_block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* Direct preference optimization (the twin of rt_dpo in runtime/losses.c): a sample is a
 * pair of answers, rows [0, T) the chosen one's logits, [T, 2T) the rejected one's.
 * rt_dpo_rows: each row's cross entropy as cross_entropy's (softmax - onehot kept in
 * dlogits times grad_scale, the caller's beta grad_scale), nll[r] = -log p(target) and 0
 * on a row whose target is `ignore` (its gradient row 0). Launch as cross_entropy_row. */
#define RT_DPO_ROWS(C, LD)                                                                    \
    extern "C" __global__ void __launch_bounds__(1024) rt_dpo_rows_##C##_##LD(                \
        const act_t *logits, const int32_t *target, act_t *dlogits, double *nll,              \
        double *correct, float grad_scale, int ignore)                                        \
    {                                                                                         \
        int64_t r = blockIdx.x;                                                               \
        if (target[r] != ignore) {                                                            \
            cross_entropy<C, LD>(logits, target, dlogits, nll, correct, grad_scale);          \
            return;                                                                           \
        }                                                                                     \
        if (dlogits)                                                                          \
            for (int j = threadIdx.x; j < LD; j += blockDim.x)                                \
                rt_st(dlogits + r * LD + j, 0.0f);                                            \
        if (threadIdx.x == 0)                                                                 \
            nll[r] = correct[r] = 0.0;                                                        \
    }

/* rt_dpo_pairs' kinds (trainc_rt.h's RT_PREF_*, in its order) */
#define RT_DPO_SIGMOID 0
#define RT_DPO_IPO 1
#define RT_DPO_ORPO 2
#define RT_DPO_KTO 3
#define RT_DPO_CPO 4
#define RT_DPO_ROBUST 5
#define RT_DPO_HINGE 6
#define RT_DPO_NCA_PAIR 7
#define RT_DPO_SPPO_HARD 8
#define RT_DPO_APO_ZERO 9
#define RT_DPO_APO_DOWN 10

/* rt_orpo_targets: orpo's row targets eff [samples * 2T]: the answers' (y) where they
 * count, else on a chosen row its sft target's (sft [samples, T]), else `ignore`; one
 * thread a row (the twin of orpo_targets in runtime/losses.c) */
extern "C" __global__ void __launch_bounds__(256)
rt_orpo_targets(const int32_t *y, const int32_t *sft, int32_t *eff, int64_t samples, int64_t T,
                int ignore)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= samples * 2 * T)
        return;
    int64_t s = r / (2 * T), t = r % (2 * T);
    eff[r] = y[r] != ignore || t >= T ? y[r] : sft[s * T + t];
}

/* rt_sft_term: orpo's and rpo's supervised term, one block: the chosen texts' cross
 * entropy, the mean of nll over all their rows whose target (rt_orpo_targets') is not
 * `ignore`, times w, into sft[0], and d(it)/d(such a row's nll) per unit of beta
 * grad_scale (grad_scale counts the samples), w samples / (count beta), into sft[1] (the
 * twin of sft_term in runtime/losses.c) */
extern "C" __global__ void __launch_bounds__(1024)
rt_sft_term(const double *nll, const int32_t *target, double *sft, int64_t samples, int64_t T,
            int ignore, float beta, float w)
{
    double sum = 0.0, count = 0.0;
    for (int64_t k = threadIdx.x; k < samples * T; k += blockDim.x) {
        int64_t r = 2 * (k / T) * T + k % T;
        sum += nll[r];
        count += target[r] != ignore;
    }
    sum = rt_block_sum(sum);
    count = rt_block_sum(count);
    if (threadIdx.x == 0) {
        sft[0] = count > 0 ? (double)w * sum / count : 0.0;
        sft[1] = count > 0 ? (double)w * (double)samples / (count * (double)beta) : 0.0;
    }
}

/* rt_kto_kl: kto's KL estimate, one block: the mean over the samples of each KL text's
 * (a row's second half) log-probability, the sum of -nll over its rows whose target is
 * not `ignore`, less the reference's ref[2 s + 1], over `ranks` into stat[0] (on several
 * GPUs the host adds the ranks' shares; rt_dpo_pairs takes it at least 0: the twin of
 * kto_kl in runtime/losses.c) */
extern "C" __global__ void __launch_bounds__(1024)
rt_kto_kl(const double *nll, const int32_t *target, const float *ref, double *stat,
          int64_t samples, int64_t T, int ignore, int ranks)
{
    double sum = 0.0;
    for (int64_t s = threadIdx.x; s < samples; s += blockDim.x) {
        double lp = 0.0;
        for (int64_t t = 0; t < T; t++) {
            int64_t row = (2 * s + 1) * T + t;
            if (target[row] != ignore)
                lp -= nll[row];
        }
        sum += lp - (double)ref[2 * s + 1];
    }
    sum = rt_block_sum(sum);
    if (threadIdx.x == 0)
        stat[0] = sum / (double)samples / (double)ranks;
}

/* log(1 - e^m) for a mean log-probability m <= 0, 1 - e^m (at least DBL_MIN) into q */
__device__ __forceinline__ double rt_log1m_exp(double m, double &q)
{
    q = fmax(-expm1(m), 2.2250738585072014e-308);
    return log(q);
}

__device__ __forceinline__ double rt_sigmoid_f64(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* softplus(x) = log(1 + e^x), without overflow */
__device__ __forceinline__ double rt_softplus_f64(double x)
{
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

/* dpo's other loss types (RT_DPO_ROBUST on; trainc_rt.h's RT_PREF_*) from the answers'
 * log-ratios against the reference, a = lc - rc and b = lr - rr: the pair's loss into
 * loss and each answer's factor, -d(loss)/d(its log-probability) per unit of beta, into
 * f; returns u = beta (a - b) (the twin of type_step in runtime/losses.c) */
__device__ double rt_dpo_type(int kind, double a, double b, double beta, double ls,
                              double &loss, double f[2])
{
    double u = beta * (a - b);
    if (kind == RT_DPO_ROBUST) {
        double k = 1.0 / (1.0 - 2.0 * ls), sg = rt_sigmoid_f64(-u);
        loss = k * ((1.0 - ls) * rt_softplus_f64(-u) - ls * rt_softplus_f64(u));
        f[0] = k * ((1.0 - ls) * sg + ls * (1.0 - sg));
        f[1] = -f[0];
    } else if (kind == RT_DPO_HINGE) {
        loss = fmax(1.0 - u, 0.0);
        f[0] = 1.0 - u > 0 ? 1.0 : 0.0;
        f[1] = -f[0];
    } else if (kind == RT_DPO_NCA_PAIR) {
        double ca = beta * a, cb = beta * b;
        loss = rt_softplus_f64(-ca) + 0.5 * rt_softplus_f64(ca) + 0.5 * rt_softplus_f64(cb);
        f[0] = rt_sigmoid_f64(-ca) - 0.5 * rt_sigmoid_f64(ca);
        f[1] = -0.5 * rt_sigmoid_f64(cb);
    } else if (kind == RT_DPO_SPPO_HARD) {
        double h = 0.5 / beta, ma = a - h, mb = b + h;
        loss = ma * ma + mb * mb;
        f[0] = -2.0 * ma / beta;
        f[1] = -2.0 * mb / beta;
    } else if (kind == RT_DPO_APO_ZERO) {
        double sa = rt_sigmoid_f64(beta * a), sb = rt_sigmoid_f64(beta * b);
        loss = 1.0 - sa + sb;
        f[0] = sa * (1.0 - sa);
        f[1] = -sb * (1.0 - sb);
    } else {   /* RT_DPO_APO_DOWN */
        double sa = rt_sigmoid_f64(beta * a), su = rt_sigmoid_f64(u);
        loss = sa + 1.0 - su;
        f[0] = su * (1.0 - su) - sa * (1.0 - sa);
        f[1] = -su * (1.0 - su);
    }
    return u;
}

/* rt_dpo_pairs: one thread a pair. Its answers' log-probabilities (the sums of -nll over
 * their rows whose target is not `ignore`, in row order, in double; without a reference,
 * ref NULL, simpo's: the means over those rows) into logps [2]; u = beta ((lc - rc) - (lr -
 * rr)) with the reference's ref [2], or beta (mc - mr) - gamma: loss[s] = softplus(-u),
 * right[s] = u > 0, margin[s] = u (every kind's), and each answer's gradient factor, +-sigmoid(-u) (simpo's over the
 * answer's rows; rt_dpo_rows scaled the rows by beta grad_scale); with label smoothing ls
 * loss[s] = (1 - ls) softplus(-u) + ls softplus(u), the factor's sigmoid(-u) then
 * (1 - ls) sigmoid(-u) - ls sigmoid(u). kind RT_DPO_IPO, IPO's: the means (the
 * reference's sums over the same counts), u = (mc - rc) - (mr - rr), loss[s] =
 * (u - 1 / (2 beta))^2, the factors -+2 (u - 1 / (2 beta)) / beta over the lengths.
 * kind RT_DPO_ORPO, ORPO's: the means, z = (mc - mr) - (log(1 - e^mc) - log(1 - e^mr)),
 * loss[s] = beta softplus(-z) + stat[0] (rt_sft_term), the factors sigmoid(-z) /
 * (1 - e^mc) / nc + stat[1] and -sigmoid(-z) / (1 - e^mr) / nr. kind RT_DPO_KTO, KTO's:
 * the sums, KL = stat[0] (rt_kto_kl) at least 0, u = beta (lc - rc - KL) where label[s] (desirable),
 * else beta (KL - (lc - rc)), loss[s] = w (1 - sigmoid(u)) (w: wd or wu), the factors
 * +-w sigmoid(u) (1 - sigmoid(u)) and 0 (the KL text). The sigmoid kind with sft
 * (rpo_alpha, cpo_alpha): plus stat[0] (rt_sft_term) in the loss, stat[1] in the chosen
 * factor. kind RT_DPO_CPO: the sigmoid over the sums without a reference, u = beta
 * (lc - lr). The kinds from RT_DPO_ROBUST: dpo's other loss types over the sums
 * (rt_dpo_type), sft as the sigmoid's. */
extern "C" __global__ void __launch_bounds__(256)
rt_dpo_pairs(const double *nll, const int32_t *target, const float *ref, const double *stat,
             const int32_t *label, float *logps, double *loss, double *right, double *margin,
             float *factor,
             int64_t samples, int64_t T, int ignore, float beta, float gamma, float ls, int kind,
             float wd, float wu, int sft)
{
    int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= samples)
        return;
    double lp[2] = {0.0, 0.0}, n[2] = {0.0, 0.0}, r[2] = {0.0, 0.0}, g, u;
    for (int h = 0; h < 2; h++) {
        for (int64_t t = 0; t < T; t++) {
            int64_t row = (2 * s + h) * T + t;
            if (target[row] != ignore) {
                lp[h] -= nll[row];
                n[h] += 1.0;
            }
        }
        r[h] = ref ? (double)ref[2 * s + h] : 0.0;
        if ((!ref && kind != RT_DPO_CPO) || kind == RT_DPO_IPO) {
            lp[h] = n[h] > 0 ? lp[h] / n[h] : 0.0;
            r[h] = n[h] > 0 ? r[h] / n[h] : 0.0;
        }
    }
    if (kind == RT_DPO_IPO) {
        u = (lp[0] - r[0]) - (lp[1] - r[1]);
        double m = u - 1.0 / (2.0 * (double)beta);
        loss[s] = m * m;
        g = -2.0 * m / (double)beta;
        factor[2 * s] = (float)(n[0] > 0 ? g / n[0] : 0.0);
        factor[2 * s + 1] = (float)(n[1] > 0 ? -g / n[1] : 0.0);
    } else if (kind == RT_DPO_ORPO) {
        double qc, qr;
        u = (lp[0] - lp[1]) - (rt_log1m_exp(lp[0], qc) - rt_log1m_exp(lp[1], qr));
        loss[s] = (double)beta * rt_softplus_f64(-u) + stat[0];
        g = rt_sigmoid_f64(-u);
        factor[2 * s] = (float)(n[0] > 0 ? g / (qc * n[0]) + stat[1] : 0.0);
        factor[2 * s + 1] = (float)(n[1] > 0 ? -g / (qr * n[1]) : 0.0);
    } else if (kind == RT_DPO_KTO) {
        bool good = label[s] != 0;
        double lr = lp[0] - r[0], kl = fmax(stat[0], 0.0);
        u = good ? (double)beta * (lr - kl) : (double)beta * (kl - lr);
        double sg = rt_sigmoid_f64(u), w = good ? (double)wd : (double)wu;
        loss[s] = w * (1.0 - sg);
        g = w * sg * (1.0 - sg);
        factor[2 * s] = (float)(good ? g : -g);
        factor[2 * s + 1] = 0.0f;
    } else if (kind >= RT_DPO_ROBUST) {
        double f[2], l;
        u = rt_dpo_type(kind, lp[0] - r[0], lp[1] - r[1], (double)beta, (double)ls, l, f);
        loss[s] = l + (sft ? stat[0] : 0.0);
        factor[2 * s] = (float)(f[0] + (sft && n[0] > 0 ? stat[1] : 0.0));
        factor[2 * s + 1] = (float)f[1];
    } else {
        u = ref ? (double)beta * ((lp[0] - r[0]) - (lp[1] - r[1]))
                : (double)beta * (lp[0] - lp[1]) - (double)gamma;
        double sp = rt_softplus_f64(-u);
        loss[s] = (1.0 - (double)ls) * sp + (double)ls * (sp + u)   /* softplus(u) = sp + u */
                  + (sft ? stat[0] : 0.0);
        double sg = rt_sigmoid_f64(-u);
        g = (1.0 - (double)ls) * sg - (double)ls * (1.0 - sg);
        bool sums = ref || kind == RT_DPO_CPO;
        factor[2 * s] = (float)((sums ? g : n[0] > 0 ? g / n[0] : 0.0) +
                                (sft && n[0] > 0 ? stat[1] : 0.0));
        factor[2 * s + 1] = (float)(sums ? -g : n[1] > 0 ? -g / n[1] : 0.0);
    }
    right[s] = u > 0 ? 1.0 : 0.0;
    margin[s] = u;
    logps[2 * s] = (float)lp[0];
    logps[2 * s + 1] = (float)lp[1];
}

/* rt_dpo_scale: row r's gradient (C values, rows ld apart) times its answer's factor,
 * factor[r / T] where its target is not `ignore`, else orpo's supervised term's, sft[1]
 * (sft NULL: 1; the row is 0 then); one block a row. */
extern "C" __global__ void __launch_bounds__(256)
rt_dpo_scale(act_t *dlogits, const float *factor, const int32_t *target, const double *sft,
             int64_t T, int64_t C, int64_t ld, int ignore)
{
    int64_t r = blockIdx.x;
    float f = target[r] != ignore ? factor[r / T] : sft ? (float)sft[1] : 1.0f;
    act_t *g = dlogits + r * ld;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
        rt_st(g + j, rt_ld(g + j) * f);
}
