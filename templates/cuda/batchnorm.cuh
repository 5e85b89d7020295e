/* batchnorm.cuh: BatchNorm per channel of x [B, C, HW] (twins of rt_batchnorm_fwd and
 * rt_batchnorm_bwd in runtime/batchnorm.c). Activations are act_t; the weight, bias,
 * saved mean and 1/std and the running statistics are float, the count an int64.
 *
 * Forward (rt_cu_batchnorm_fwd launches them in this order):
 *   rt_bn_stats   grid (C, P), 256 threads: part p of channel c's B * HW values, in one
 *                 pass, its sum and sum of squares in double -> part[c, p, 0..1]
 *   rt_bn_finish  a thread a channel: the P partials added in order; training: mean,
 *                 1/std saved, the running statistics and the count updated (run_mean
 *                 NULL: a replay, no update); evaluation: from the running ones. Writes
 *                 the normalization's scale[c] = rstd w and shift[c] = b - mean scale[c]
 * The normalization y = x scale + shift is the generated code's elementwise kernel, fused
 * with the activation after it.
 * Backward:
 *   rt_bn_bwd_stats   the same grid: sum dy and sum (x - mean) dy in one pass
 *   rt_bn_bwd_finish  dw += sum (x - mean) dy rstd, db += sum dy (each NULL: affine
 *                     false); gk[c] = (sum dy / n, sum (x - mean) dy rstd^2 / n)
 *   rt_bn_dx          dx = (dy - gk.x - (x - mean) gk.y) rstd w (dx may be dy: each
 *                     element is read before it is written)
 * With sync on several GPUs (SyncBatchNorm), rt_bn_part_sums adds each channel's P
 * partials in order into [C, 2], NCCL sums those over the ranks, and the finishing
 * kernels read them as one partial (P = 1); the backward's dw and db come from this
 * rank's sums before that (DDP averages them as every gradient).
 * Every sum has a fixed order (rt_block_sum, then the partials in p order), so the bits
 * repeat from run to run; they differ from the CPU's order by rounding only. */

/* A walk over the flat indices k, k + step, k + 2 step, ... of a tensor seen as
 * [n_outer, HW]: the outer index o (mod n_outer) and the place hw are carried from one
 * to the next, so that only the first costs divisions (a 64-bit one is a long routine
 * on the GPU; the walk adds and compares). The statistics walk a channel's B * HW
 * elements (o the sample), rt_bn_dx the whole [B * C, HW] tensor (o the channel). */
struct rt_bn_walk {
    int64_t o, hw, n, d_o, d_hw;
    __device__ rt_bn_walk(int64_t k, int64_t step, int64_t HW, int64_t n_outer)
        : o(k / HW % n_outer), hw(k % HW), n(n_outer), d_o(step / HW % n_outer), d_hw(step % HW) {}
    __device__ void next(int64_t HW)
    {
        o += d_o;
        hw += d_hw;
        if (hw >= HW) {
            hw -= HW;
            o++;
        }
        if (o >= n)
            o -= n;
    }
};

extern "C" __global__ void __launch_bounds__(256)
rt_bn_stats(const act_t *x, double *part, int64_t B, int64_t C, int64_t HW)
{
    const int64_t c = blockIdx.x, p = blockIdx.y, P = gridDim.y, n = B * HW;
    const int64_t chunk = (n + P - 1) / P, k0 = p * chunk, k1 = k0 + chunk < n ? k0 + chunk : n;
    double s = 0.0, q = 0.0;
    rt_bn_walk w(k0 + threadIdx.x, blockDim.x, HW, B);
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x, w.next(HW)) {
        const double v = rt_ld(x + (w.o * C + c) * HW + w.hw);
        s += v;
        q += v * v;
    }
    s = rt_block_sum(s);
    q = rt_block_sum(q);
    if (threadIdx.x == 0) {
        part[(c * P + p) * 2] = s;
        part[(c * P + p) * 2 + 1] = q;
    }
}

/* s, q: channel c's P partials (part[c, p, 0..1]) added in p order */
__device__ __forceinline__ void rt_bn_parts_sum(const double *part, int64_t P, int64_t c,
                                                double &s, double &q)
{
    s = 0.0, q = 0.0;
    for (int64_t p = 0; p < P; p++) {
        s += part[(c * P + p) * 2];
        q += part[(c * P + p) * 2 + 1];
    }
}

extern "C" __global__ void __launch_bounds__(256)
rt_bn_finish(const double *part, int64_t P, int64_t C, double n, const float *w, const float *b,
             float *mean, float *rstd, float *run_mean, float *run_var, long long *count,
             float *scale, float *shift, float eps, float momentum, int train)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (train && run_mean && c == 0)
        *count += 1;
    if (c >= C)
        return;
    const float wc = w ? w[c] : 1.0f, bc = b ? b[c] : 0.0f;
    if (!train) {   /* evaluation: the running statistics */
        const float rs = (float)(1.0 / sqrt((double)run_var[c] + (double)eps)), a = rs * wc;
        scale[c] = a;
        shift[c] = bc - run_mean[c] * a;
        return;
    }
    double s, q;
    rt_bn_parts_sum(part, P, c, s, q);
    const double mu = s / n;
    double var = q / n - mu * mu;
    var = var > 0.0 ? var : 0.0;
    const float m = (float)mu, rs = (float)(1.0 / sqrt(var + (double)eps)), a = rs * wc;
    mean[c] = m;
    rstd[c] = rs;
    scale[c] = a;
    shift[c] = bc - m * a;
    if (run_mean) {
        const double unb = n > 1.0 ? var * n / (n - 1.0) : rt_nan_d(), mo = momentum;
        run_mean[c] = (float)(mo * mu + (1.0 - mo) * run_mean[c]);
        run_var[c] = (float)(mo * unb + (1.0 - mo) * run_var[c]);
    }
}

/* SyncBatchNorm's: tot[c, 0..1] = the P partials of channel c, added in order */
extern "C" __global__ void __launch_bounds__(256)
rt_bn_part_sums(const double *part, int64_t P, int64_t C, double *tot)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double s, q;
    rt_bn_parts_sum(part, P, c, s, q);
    tot[2 * c] = s;
    tot[2 * c + 1] = q;
}

extern "C" __global__ void __launch_bounds__(256)
rt_bn_bwd_stats(const act_t *x, const act_t *dy, const float *mean, double *part, int64_t B,
                int64_t C, int64_t HW)
{
    const int64_t c = blockIdx.x, p = blockIdx.y, P = gridDim.y, n = B * HW;
    const int64_t chunk = (n + P - 1) / P, k0 = p * chunk, k1 = k0 + chunk < n ? k0 + chunk : n;
    const float m = mean[c];
    double s = 0.0, q = 0.0;
    rt_bn_walk w(k0 + threadIdx.x, blockDim.x, HW, B);
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x, w.next(HW)) {
        const int64_t at = (w.o * C + c) * HW + w.hw;
        const float g = rt_ld(dy + at);
        s += g;
        q += (double)(rt_ld(x + at) - m) * g;
    }
    s = rt_block_sum(s);
    q = rt_block_sum(q);
    if (threadIdx.x == 0) {
        part[(c * P + p) * 2] = s;
        part[(c * P + p) * 2 + 1] = q;
    }
}

extern "C" __global__ void __launch_bounds__(256)
rt_bn_bwd_finish(const double *part, int64_t P, int64_t C, double n, const float *rstd,
                 float *dw, float *db, float *gk)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double s, q;
    rt_bn_parts_sum(part, P, c, s, q);
    const double r = rstd[c];
    if (dw)
        dw[c] += (float)(q * r);
    if (db)
        db[c] += (float)s;
    gk[2 * c] = (float)(s / n);
    gk[2 * c + 1] = (float)(q * r * r / n);
}

extern "C" __global__ void __launch_bounds__(256)
rt_bn_dx(const act_t *x, const act_t *dy, act_t *dx, const float *mean, const float *rstd,
         const float *w, const float *gk, int64_t C, int64_t HW, int64_t total)
{
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    rt_bn_walk at(first, stride, HW, C);   /* at.o: element i's channel */
    for (int64_t i = first; i < total; i += stride, at.next(HW)) {
        const int64_t c = at.o;
        const float sc = rstd[c] * (w ? w[c] : 1.0f);
        rt_st(dx + i, (rt_ld(dy + i) - gk[2 * c] - (rt_ld(x + i) - mean[c]) * gk[2 * c + 1]) * sc);
    }
}
