/* optim.cuh: the optimizer step over all parameters in one launch, and the gradient
 * norm (twins of rt_optim_step and rt_grad_norm in runtime/optim.c; under ZeRO-1, over
 * this rank's shard: rt_optim_step_range and rt_grad_sumsq).
 *
 * The parameters are cut into chunks of at most RT_OPT_CHUNK elements, none crossing a
 * tensor boundary; cuda_ops.c uploads the table of chunks once (rt_cu_optim_setup) and
 * block b works on chunk b. The update uses the _rn intrinsics, which the compiler never
 * fuses into FMAs: the same float operations in the same order as optim.c (built with
 * -ffp-contract=off), so a step gives the CPU's bits. */

#define RT_OPT_CHUNK 16384

/* One chunk of a parameter tensor (the layout of opt_chunk in cuda_ops.c). */
struct rt_opt_chunk {
    int64_t off;               /* first element, from the start of the parameter region */
    int len;                   /* elements, <= RT_OPT_CHUNK */
    int flags;                 /* RT_OPT_DECAY: weight decay applies (tensors of rank >= 2);
                                  RT_OPT_MUON: a matrix optimizer muon updates (rt_muon_*),
                                  which rt_adamw leaves */
};
#define RT_OPT_DECAY 1
#define RT_OPT_MUON 2

/* fp8-mixed (RT_FP8): rt_adamw and rt_sgd take one more argument, amax (NULL: none),
 * where block b stores the absolute maximum of chunk b's 16-bit copy as written:
 * fp8.cuh's partial maxima of the weights, read by the next forward's casts (the
 * weights do not change between the update and the next step's GEMMs; a chunk is one
 * tensor's). Other precisions' kernels compile without it. */
#ifdef RT_FP8
#define RT_FP8_AMAX_ARG , float *amax
#define RT_FP8_AMAX_INIT() float am_ = 0.0f
#define RT_FP8_AMAX1(x) am_ = fmaxf(am_, rt_fp8_stored_abs(x))
#define RT_FP8_AMAX4(q)                                                                            \
    am_ = fmaxf(fmaxf(fmaxf(am_, rt_fp8_stored_abs((q).x)), rt_fp8_stored_abs((q).y)),             \
                fmaxf(rt_fp8_stored_abs((q).z), rt_fp8_stored_abs((q).w)))
/* (amax and pc are the same for every block: all threads reach rt_block_max or none) */
#define RT_FP8_AMAX_STORE()                                                                        \
    do {                                                                                           \
        if (amax && pc) {                                                                          \
            am_ = rt_block_max(am_);                                                               \
            if (threadIdx.x == 0)                                                                  \
                amax[blockIdx.x] = am_;                                                            \
        }                                                                                          \
    } while (0)
#else
#define RT_FP8_AMAX_ARG
#define RT_FP8_AMAX_INIT() (void)0
#define RT_FP8_AMAX1(x) (void)0
#define RT_FP8_AMAX4(q) (void)0
#define RT_FP8_AMAX_STORE() (void)0
#endif

/* AdamW on one element; the scalars are optim.c's, rounded to float on the host. */
__device__ __forceinline__ void rt_adamw_elem(float &p, float &m, float &v, float g, float gs,
                                              float decay, float b1, float b2, float a1, float a2,
                                              float step_size, float bc2_sqrt, float eps)
{
    float gk = __fmul_rn(g, gs);
    float pk = __fmul_rn(p, decay);
    m = __fadd_rn(__fmul_rn(m, b1), __fmul_rn(gk, a1));
    v = __fadd_rn(__fmul_rn(v, b2), __fmul_rn(__fmul_rn(a2, gk), gk));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
    p = __fadd_rn(pk, __fmul_rn(-step_size, __fdiv_rn(m, denom)));
}

/* The gradients' scale with the clip factor worked out on the device from their sum of
 * squares (loop.c's rule for clip_grad_norm_, in the same double arithmetic, so the
 * same float): max_norm / (norm + 1e-6) where that is < 1, else 1; max_norm NaN: no
 * clipping. The host then need not wait for the norm before it queues the update. */
__device__ __forceinline__ float rt_clip_scale(double sumsq, double max_norm)
{
    const float coef = isnan(max_norm) ? 1.0f : (float)(max_norm / (sqrt(sumsq) + 1e-6));
    return coef < 1.0f ? coef : 1.0f;
}

/* Launch: grid (chunks), 256 threads.
 *   m = b1 m + a1 g';  v = b2 v + a2 g'^2;  p = p * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * with g' = g * gs and decay = 1 for tensors without weight decay. p, g: the parameter
 * region's layout; m, v: the state of the part of it starting at element slo (ZeRO-1:
 * this rank's shard; else 0 and the whole region), which the chunks lie in. 16-byte
 * accesses when the chunk and all four arrays allow.
 * pc: with bf16-mixed, the parameters' act_t copy (the GEMMs' operands), rewritten
 * from the new p; NULL otherwise. sumsq: NULL, or the gradients' sum of squares on the
 * device, and then gs = rt_clip_scale(*sumsq, max_norm). */
extern "C" __global__ void __launch_bounds__(256)
rt_adamw(float *p, act_t *pc, const float *g, float *m, float *v, int64_t slo,
         const rt_opt_chunk *chunks, float gs, const double *sumsq, double max_norm, float decay,
         float b1, float b2, float a1, float a2, float step_size, float bc2_sqrt, float eps
         RT_FP8_AMAX_ARG)
{
    rt_opt_chunk ck = chunks[blockIdx.x];
    if (ck.flags & RT_OPT_MUON)
        return;
    RT_FP8_AMAX_INIT();
    if (sumsq)
        gs = rt_clip_scale(*sumsq, max_norm);
    float dec = ck.flags & RT_OPT_DECAY ? decay : 1.0f;
    p += ck.off, g += ck.off, m += ck.off - slo, v += ck.off - slo;
    if (pc)
        pc += ck.off;
    if (ck.len % 4 == 0 && rt_aligned16(p, g, m, v)) {
        for (int k = threadIdx.x * 4; k < ck.len; k += blockDim.x * 4) {
            float4 pv = *(float4 *)(p + k), gv = *(const float4 *)(g + k);
            float4 mv = *(float4 *)(m + k), vv = *(float4 *)(v + k);
            rt_adamw_elem(pv.x, mv.x, vv.x, gv.x, gs, dec, b1, b2, a1, a2, step_size, bc2_sqrt, eps);
            rt_adamw_elem(pv.y, mv.y, vv.y, gv.y, gs, dec, b1, b2, a1, a2, step_size, bc2_sqrt, eps);
            rt_adamw_elem(pv.z, mv.z, vv.z, gv.z, gs, dec, b1, b2, a1, a2, step_size, bc2_sqrt, eps);
            rt_adamw_elem(pv.w, mv.w, vv.w, gv.w, gs, dec, b1, b2, a1, a2, step_size, bc2_sqrt, eps);
            *(float4 *)(p + k) = pv;
            *(float4 *)(m + k) = mv;
            *(float4 *)(v + k) = vv;
            if (pc) {
                rt_st4(pc + k, pv);
                RT_FP8_AMAX4(pv);
            }
        }
    } else {
        for (int k = threadIdx.x; k < ck.len; k += blockDim.x) {
            rt_adamw_elem(p[k], m[k], v[k], g[k], gs, dec, b1, b2, a1, a2, step_size, bc2_sqrt,
                          eps);
            if (pc) {
                rt_st(pc + k, p[k]);
                RT_FP8_AMAX1(p[k]);
            }
        }
    }
    RT_FP8_AMAX_STORE();
}

/* SGD as torch.optim.SGD; mode: 0 no momentum, 1 the first step with momentum (the
 * buffer starts as the gradient), 2 momentum, 3 Nesterov momentum. */
__device__ __forceinline__ void rt_sgd_elem(float &p, float *buf, float g, float gs, float wd,
                                            float lr, float mom, int mode, int nesterov)
{
    float d = __fadd_rn(__fmul_rn(g, gs), __fmul_rn(wd, p));
    float step = d;
    if (mode == 1) {
        *buf = d;
        if (nesterov)
            step = __fadd_rn(d, __fmul_rn(mom, d));
    } else if (mode >= 2) {
        float bk = __fadd_rn(__fmul_rn(*buf, mom), d);
        *buf = bk;
        step = mode == 3 ? __fadd_rn(d, __fmul_rn(mom, bk)) : bk;
    }
    p = __fadd_rn(p, __fmul_rn(-lr, step));
}

/* Launch: grid (chunks), 256 threads.
 *   d = g * gs + wd * p (wd 0 for tensors without weight decay); buf updated as torch;
 *   p -= lr * (d, buf, or d + mom * buf)
 * buf (the momentum buffer, from element slo of the region as rt_adamw's m) is NULL
 * for mode 0. sumsq, max_norm: as rt_adamw's. */
extern "C" __global__ void __launch_bounds__(256)
rt_sgd(float *p, act_t *pc, const float *g, float *buf, int64_t slo, const rt_opt_chunk *chunks,
       float gs, const double *sumsq, double max_norm, float wd, float lr, float mom, int mode,
       int nesterov RT_FP8_AMAX_ARG)
{
    rt_opt_chunk ck = chunks[blockIdx.x];
    RT_FP8_AMAX_INIT();
    if (sumsq)
        gs = rt_clip_scale(*sumsq, max_norm);
    float w = ck.flags & RT_OPT_DECAY ? wd : 0.0f;
    p += ck.off, g += ck.off;
    float *b = buf ? buf + (ck.off - slo) : 0;
    for (int k = threadIdx.x; k < ck.len; k += blockDim.x) {
        rt_sgd_elem(p[k], b ? b + k : 0, g[k], gs, w, lr, mom, mode, nesterov);
        if (pc) {
            rt_st(pc + ck.off + k, p[k]);
            RT_FP8_AMAX1(p[k]);
        }
    }
    RT_FP8_AMAX_STORE();
}

/* Launch: grid (chunks), 256 threads. clip_grad_value_ after the unscaling
 * (grad_clip_algorithm value; optim.c's rt_clip_values is the twin), in place, before
 * rt_adamw, rt_sgd or rt_muon_momentum read the gradients with gs 1:
 *   g = clamp(g * gs, -v, v), NaN kept */
extern "C" __global__ void __launch_bounds__(256)
rt_clip_values(float *g, const rt_opt_chunk *chunks, float gs, float v)
{
    rt_opt_chunk ck = chunks[blockIdx.x];
    g += ck.off;
    for (int k = threadIdx.x; k < ck.len; k += blockDim.x) {
        float x = __fmul_rn(g[k], gs);
        g[k] = x > v ? v : x < -v ? -v : x;
    }
}

/* Launch: grid-stride, 256 threads.
 *   pc[i] = p[i] as act_t   (bf16-mixed: the GEMMs' copy of parameters loaded from the
 *   host: initial weights, --init, a checkpoint) */
extern "C" __global__ void __launch_bounds__(256)
rt_param_copy(const float *p, act_t *pc, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        rt_st(pc + i, p[i]);
}

/* Launch: grid-stride, 256 threads. train.ema's take of the weights (optim.c's
 * rt_ema_take is the twin):
 *   ema[i] = p[i] on the first take, else ema[i] + w (p[i] - ema[i]) in one rounding
 *   (w = 1 - decay: torch's lerp, as AveragedModel's EMA takes it) */
extern "C" __global__ void __launch_bounds__(256)
rt_ema_take(const float *p, float *ema, int64_t n, float w, int first)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ema[i] = first ? p[i] : fmaf(w, p[i] - ema[i], ema[i]);
}

/* Launch: grid-stride, 256 threads. train.swa's take of the weights (optim.c's
 * rt_swa_take is the twin): avg[i] = p[i] on the first take, else
 * avg[i] + (p[i] - avg[i]) / k (k = the takes before it + 1), each operation rounded */
extern "C" __global__ void __launch_bounds__(256)
rt_swa_take(const float *p, float *avg, int64_t n, float k, int first)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        avg[i] = first ? p[i] : __fadd_rn(avg[i], __fdiv_rn(__fsub_rn(p[i], avg[i]), k));
}

/* Launch: grid-stride, 256 threads. a[i] and b[i] exchanged (validation on ema's average,
 * then back) */
extern "C" __global__ void __launch_bounds__(256)
rt_swap(float *a, float *b, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

/* Launch: grid (chunks), 256 threads.
 *   part[c] = sum of g^2 over chunk c (double), 0 for a frozen tensor's */
extern "C" __global__ void __launch_bounds__(256)
rt_grad_norm_part(const float *g, const rt_opt_chunk *chunks, double *part)
{
    rt_opt_chunk ck = chunks[blockIdx.x];
    double s = 0.0;
    rt_row_each(g + ck.off, ck.len, [&](int j, float x) { s += (double)x * (double)x; });
    s = rt_block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* Launch: 1 block of 1024 threads.
 *   *out = sum of part[0, n), or *out += it with add (dpo's margins into the pass
 *   statistics)   (each thread a strided share in order, then rt_block_sum) */
extern "C" __global__ void __launch_bounds__(1024)
rt_sum_f64(const double *part, int64_t n, double *out, int add)
{
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += part[i];
    s = rt_block_sum(s);
    if (threadIdx.x == 0)
        *out = add ? *out + s : s;
}

/* ---- optimizer muon's matrices (twins of runtime/muon.c; cuda_ops.c's muon_param runs
 * them, the Newton-Schulz iteration's GEMMs by cuBLASLt in fp32) ---- */

/* torch's lerp: self + w (end - self), or for w >= 0.5 end - (end - self)(1 - w) (a - b
 * as a + -b: the same float) */
__device__ __forceinline__ float rt_lerp(float self, float end, float w)
{
    float d = __fadd_rn(end, -self);
    return w < 0.5f ? __fadd_rn(self, __fmul_rn(w, d))
                    : __fadd_rn(end, -__fmul_rn(d, __fadd_rn(1.0f, -w)));
}

/* Launch: grid-stride, 256 threads.
 *   buf = lerp(buf, g', w), u = nesterov ? lerp(g', buf, mom) : buf, g' = g * gs (gs from
 *   sumsq as rt_adamw's), w = 1 - mom rounded on the host */
extern "C" __global__ void __launch_bounds__(256)
rt_muon_momentum(const float *g, float *buf, float *u, int64_t n, float gs, const double *sumsq,
                 double max_norm, float w, float mom, int nesterov)
{
    if (sumsq)
        gs = rt_clip_scale(*sumsq, max_norm);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float gk = __fmul_rn(g[i], gs), b = rt_lerp(buf[i], gk, w);
        buf[i] = b;
        u[i] = nesterov ? rt_lerp(gk, b, mom) : b;
    }
}

/* Launch: grid-stride, 256 threads.
 *   dst = src, n floats (the iterations' GEMM operands that beta adds to) */
extern "C" __global__ void __launch_bounds__(256)
rt_muon_copy(const float *src, float *dst, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/* Launch: grid-stride, 256 threads.
 *   X [m, n] = the block U [rows, cols], transposed when tall (rows > cols: m = cols) */
extern "C" __global__ void __launch_bounds__(256)
rt_muon_load(const float *U, float *X, int64_t rows, int64_t cols, int tall)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        X[tall ? c * rows + r : i] = U[i];
    }
}

/* Launch: 1 block of 1024 threads.
 *   *ss = sum of X[0, n)^2 in double (each thread a strided share, then rt_block_sum) */
extern "C" __global__ void __launch_bounds__(1024)
rt_muon_sumsq(const float *X, int64_t n, double *ss)
{
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += (double)X[i] * (double)X[i];
    s = rt_block_sum(s);
    if (threadIdx.x == 0)
        *ss = s;
}

/* Launch: grid-stride, 256 threads.
 *   X /= max(|X|_F, eps), |X|_F = sqrt(*ss) rounded to float */
extern "C" __global__ void __launch_bounds__(256)
rt_muon_normalize(float *X, int64_t n, const double *ss, float eps)
{
    float norm = (float)sqrt(*ss), d = norm > eps ? norm : eps;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        X[i] = __fdiv_rn(X[i], d);
}

/* Launch: grid-stride, 256 threads.
 *   the block's rows of p: p = p * decay - alpha X' (X' = X [m, n] back in the block's
 *   layout); pc (bf16-mixed: the GEMMs' copy) rewritten */
extern "C" __global__ void __launch_bounds__(256)
rt_muon_apply(float *p, act_t *pc, const float *X, int64_t rows, int64_t cols, int tall,
              float decay, float alpha)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        float x = X[tall ? c * rows + r : i];
        float v = __fadd_rn(__fmul_rn(p[i], decay), __fmul_rn(-alpha, x));
        p[i] = v;
        if (pc)
            rt_st(pc + i, v);
    }
}
