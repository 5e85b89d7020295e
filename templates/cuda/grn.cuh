/* grn.cuh: ConvNeXt V2's global response normalization over each sample's x [T, C]
 * (twins of rt_grn_fwd and rt_grn_bwd in runtime/norms.c). Activations are act_t; the
 * weight, bias and saved norms g [B, C + 1] (each channel's L2 norm over the T rows,
 * then their mean + 1e-6) are float.
 *
 * Forward (rt_cu_grn_fwd launches them in this order):
 *   rt_grn_norms  grid (C / 32, B), 32 x 8 threads: channel c's sum of squares over the
 *                 sample's rows, 8 lanes of rows added in lane order, in double; g = sqrt
 *   rt_grn_mean   a block a sample: g[C] = mean of its C norms + 1e-6
 *   rt_grn_apply  y = w (x N) + b + x, N = g[c] / g[C], elementwise
 * Backward:
 *   rt_grn_bwd_sums    the norms' grid: a = sum dy x, s = sum dy -> part [B, C, 2]
 *   rt_grn_bwd_coef    a block a sample: K = sum w a G; coef = (w a / D - K / (D^2 C)) / G
 *                      (0 where G is 0), D = g[C]
 *   rt_grn_bwd_params  a thread a channel: dw += sum over the samples of a N, db += s,
 *                      in sample order (each NULL: not wanted)
 *   rt_grn_dx          dx = dy (1 + w N) + coef x (dx may be dy: each element is read
 *                      before it is written)
 * Every sum has a fixed order, so the bits repeat from run to run; they differ from the
 * CPU's order by rounding only. */

/* 8 row lanes' partial sums of channel lane tx added in lane order, by lane 0 */
__device__ __forceinline__ double rt_grn_lanes(double v, double (*sh)[32])
{
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    double t = 0.0;
    for (int k = 0; k < 8; k++)
        t += sh[k][threadIdx.x];
    return t;
}

extern "C" __global__ void __launch_bounds__(256)
rt_grn_norms(const act_t *x, float *g, int64_t T, int64_t C)
{
    __shared__ double sh[8][32];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, s = blockIdx.y;
    double acc = 0.0;
    if (c < C)
        for (int64_t t = threadIdx.y; t < T; t += 8) {
            const double v = rt_ld(x + (s * T + t) * C + c);
            acc += v * v;
        }
    const double tot = rt_grn_lanes(acc, sh);
    if (c < C && threadIdx.y == 0)
        g[s * (C + 1) + c] = (float)sqrt(tot);
}

extern "C" __global__ void __launch_bounds__(256)
rt_grn_mean(float *g, int64_t C)
{
    float *gs = g + (int64_t)blockIdx.x * (C + 1);
    double v = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        v += gs[c];
    v = rt_block_sum(v);
    if (threadIdx.x == 0)
        gs[C] = (float)(v / (double)C) + 1e-6f;
}

extern "C" __global__ void __launch_bounds__(256)
rt_grn_apply(const act_t *x, const float *w, const float *b, const float *g, act_t *y, int64_t T,
             int64_t C, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % C;
        const float *gs = g + i / (T * C) * (C + 1);
        const float v = rt_ld(x + i), nc = gs[c] / gs[C];
        rt_st(y + i, w[c] * (v * nc) + b[c] + v);
    }
}

extern "C" __global__ void __launch_bounds__(256)
rt_grn_bwd_sums(const act_t *x, const act_t *dy, double *part, int64_t T, int64_t C)
{
    __shared__ double sh[8][32];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, s = blockIdx.y;
    double a = 0.0, d = 0.0;
    if (c < C)
        for (int64_t t = threadIdx.y; t < T; t += 8) {
            const int64_t i = (s * T + t) * C + c;
            const double dv = rt_ld(dy + i);
            a += dv * rt_ld(x + i);
            d += dv;
        }
    const double ta = rt_grn_lanes(a, sh);
    __syncthreads();   /* sh is written again */
    const double td = rt_grn_lanes(d, sh);
    if (c < C && threadIdx.y == 0) {
        part[(s * C + c) * 2] = ta;
        part[(s * C + c) * 2 + 1] = td;
    }
}

extern "C" __global__ void __launch_bounds__(256)
rt_grn_bwd_coef(const double *part, const float *g, const float *w, float *coef, int64_t C)
{
    const int64_t s = blockIdx.x;
    const double *ps = part + s * C * 2;
    const float *gs = g + s * (C + 1);
    double k = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        k += (double)w[c] * ps[2 * c] * gs[c];
    const double K = rt_block_sum(k), D = gs[C];
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const double dG = w[c] * ps[2 * c] / D - K / (D * D * (double)C);
        coef[s * C + c] = gs[c] > 0 ? (float)(dG / gs[c]) : 0.0f;
    }
}

extern "C" __global__ void __launch_bounds__(256)
rt_grn_bwd_params(const double *part, const float *g, float *dw, float *db, int64_t B, int64_t C)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double sw = 0.0, sb = 0.0;
    for (int64_t s = 0; s < B; s++) {
        const float *gs = g + s * (C + 1);
        sw += part[(s * C + c) * 2] * (double)(gs[c] / gs[C]);
        sb += part[(s * C + c) * 2 + 1];
    }
    if (dw)
        dw[c] += (float)sw;
    if (db)
        db[c] += (float)sb;
}

extern "C" __global__ void __launch_bounds__(256)
rt_grn_dx(const act_t *x, const act_t *dy, const float *w, const float *g, const float *coef,
          act_t *dx, int64_t T, int64_t C, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % C, s = i / (T * C);
        const float *gs = g + s * (C + 1);
        const float nc = gs[c] / gs[C];
        rt_st(dx + i, rt_ld(dy + i) * (1.0f + w[c] * nc) + coef[s * C + c] * rt_ld(x + i));
    }
}
