/* layernorm.cuh: LayerNorm over the last axis of [rows, D] (twins of rt_layernorm_fwd
 * and rt_layernorm_bwd in runtime/kernels.c). Statistics in double, elementwise
 * arithmetic in float, as on the CPU. */

/* Launch: grid (rows), block of 32..1024 threads (a multiple of 32).
 *   mean[r] = (float) mean of x[r]            (double sum)
 *   rstd[r] = (float) 1 / sqrt(var + eps)     (biased variance, two passes in double)
 *   y[r, j] = (x[r, j] - mean) * rstd * w[j] + b[j]
 * y may be x. */
template <int D>
__device__ __forceinline__ void layernorm_fwd_row(const act_t *x, const float *w, const float *b,
                                                  act_t *y, float *mean, float *rstd, float eps)
{
    int64_t r = blockIdx.x;
    const act_t *xr = x + r * D;           /* [D] */
    double s = 0.0;
    rt_row_each(xr, D, [&](int j, float v) { s += v; });
    double mu = rt_block_sum(s) / (double)D;
    double q = 0.0;
    rt_row_each(xr, D, [&](int j, float v) {
        double dv = (double)v - mu;
        q += dv * dv;
    });
    double var = rt_block_sum(q) / (double)D;
    float m = (float)mu, rs = (float)(1.0 / sqrt(var + (double)eps));
    rt_row_map(xr, y + r * D, D, [&](int j, float v) { return (v - m) * rs * w[j] + b[j]; });
    if (threadIdx.x == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

#define RT_LAYERNORM_FWD(D)                                                                   \
    extern "C" __global__ void __launch_bounds__(1024) rt_layernorm_fwd_##D(                  \
        const act_t *x, const float *w, const float *b, act_t *y, float *mean, float *rstd,   \
        float eps)                                                                            \
    {                                                                                         \
        layernorm_fwd_row<D>(x, w, b, y, mean, rstd, eps);                                    \
    }

/* The input gradient of one row per block.
 *
 * Launch: grid (rows), block of 32..1024 threads (a multiple of 32).
 *   xh = (x - mean) * rstd, g = dy * w           (float)
 *   a  = mean_j g, c = mean_j g * xh             (double sums, rounded to float)
 *   dx = rstd * (g - a - xh * c)  (+ add)        (overwritten; dx may be dy, x or add)
 * add (NULL: none) is another gradient contribution summed in: one float add before
 * the store, as the separate sum kernel did (from dx unrounded: with 16-bit
 * activations one rounding fewer). The thread that writes dx[j] reads x[j], dy[j] and
 * add[j] first. dw and db come from rt_layernorm_dwdb, launched before this kernel (it
 * reads x and dy, which dx may overwrite). */
template <int D>
__device__ __forceinline__ void layernorm_bwd_row(const act_t *x, const float *w,
                                                  const float *mean, const float *rstd,
                                                  const act_t *dy, const act_t *add, act_t *dx)
{
    int64_t r = blockIdx.x;
    const act_t *xr = x + r * D, *dyr = dy + r * D;   /* [D] each */
    float m = mean[r], rs = rstd[r];
    double s1 = 0.0, s2 = 0.0;
    rt_row_each(xr, D, [&](int j, float v) {
        float xh = (v - m) * rs, g = rt_ld(dyr + j) * w[j];
        s1 += g;
        s2 += (double)g * xh;
    });
    float a = (float)(rt_block_sum(s1) / (double)D), c = (float)(rt_block_sum(s2) / (double)D);
    const act_t *addr = add ? add + r * D : NULL;
    rt_row_map(xr, dx + r * D, D, [&](int j, float v) {
        float xh = (v - m) * rs;
        float gx = rs * (rt_ld(dyr + j) * w[j] - a - xh * c);
        return addr ? gx + rt_ld(addr + j) : gx;
    });
}

#define RT_LAYERNORM_BWD(D)                                                                   \
    extern "C" __global__ void __launch_bounds__(1024) rt_layernorm_bwd_##D(                  \
        const act_t *x, const float *w, const float *mean, const float *rstd,                 \
        const act_t *dy, const act_t *add, act_t *dx)                                         \
    {                                                                                         \
        layernorm_bwd_row<D>(x, w, mean, rstd, dy, add, dx);                                  \
    }

/* Partial sums of dw and db over blocks of rows (the runtime shape needs no template).
 *
 * Launch: grid (ceil(d / 32), nrb), block (32, 8); rows [by * rb, (by + 1) * rb).
 *   part[by, j]       = sum over the block's rows of dy[r, j] * xh[r, j]   (double)
 *   part[nrb + by, j] = sum over the block's rows of dy[r, j]              (part: [2 * nrb, d])
 * Thread (tx, ty) owns column bx * 32 + tx and every 8th row from ty (a warp reads 32
 * consecutive floats of a row); the 8 row sums are then added in ty order.
 * rt_colsum_finish adds each half of part into dw and db. */
extern "C" __global__ void __launch_bounds__(256)
rt_layernorm_dwdb(const act_t *x, const act_t *dy, const float *mean, const float *rstd,
                  double *part, int64_t rows, int64_t d, int64_t rb)
{
    __shared__ double sw[8][32], sb[8][32];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t j = (int64_t)blockIdx.x * 32 + tx, nrb = gridDim.y;
    int64_t r0 = (int64_t)blockIdx.y * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
    double pw = 0.0, pb = 0.0;
    if (j < d)
        for (int64_t r = r0 + ty; r < r1; r += 8) {
            float g = rt_ld(dy + r * d + j), xh = (rt_ld(x + r * d + j) - mean[r]) * rstd[r];
            pw += (double)g * (double)xh;
            pb += (double)g;
        }
    sw[ty][tx] = pw;
    sb[ty][tx] = pb;
    __syncthreads();
    if (ty == 0 && j < d) {
        for (int k = 1; k < 8; k++) {
            pw += sw[k][tx];
            pb += sb[k][tx];
        }
        part[blockIdx.y * d + j] = pw;
        part[(nrb + blockIdx.y) * d + j] = pb;
    }
}
