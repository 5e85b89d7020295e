/* layernorm.cuh: LayerNorm and RMSNorm over the last axis of [rows, D] (twins of
 * rt_layernorm_fwd, rt_layernorm_bwd, rt_rmsnorm_fwd and rt_rmsnorm_bwd in
 * runtime/kernels.c), and attention's qk_norm "all_heads" (RMSNorm on the q and k
 * columns of qkv: rt_qk_norm_fwd, rt_qk_norm_bwd). Statistics in double, elementwise arithmetic in float, as on the
 * CPU. fp8-mixed's instances (RT_FP8) take one more argument, the slot the output's
 * (y's, dx's) absolute maximum is folded into (common.cuh's RT_FP8_SLOT), where the
 * output feeds an FP8 GEMM. */

/* Rows whose width is a multiple of 128, up to 1024 (GPT-2's 768), take a warp a row
 * with the row in registers (rt_ln_warp): 8 rows a block of 256 threads, the sums
 * warp butterflies, no barrier; a block a row took about 28 us for GPT-2's 8192 x 768
 * on an H200, 0.9 TB/s, its two block sums and three passes over the row in series.
 * Lane l holds the groups l, l + 32, ... of rt_ln_group elements (a warp's loads are
 * consecutive).
 * The host (cuda_ops.c) launches the shape the template takes. */
__host__ __device__ constexpr bool rt_ln_warp(int d) { return d % 128 == 0 && d <= 1024; }
/* The elements of a lane's group: 16 bytes of act_t (4 float, 8 bf16 or fp16) where the
 * width is a multiple of 32 of them (GPT-2's 768 in bf16: 3 groups of 8 a lane), else 4. */
template <int D> __host__ __device__ constexpr int rt_ln_group()
{
    return D % (32 * rt_vec_n<act_t>()) == 0 ? rt_vec_n<act_t>() : 4;
}
#define RT_LN_ROWS 8   /* rows (warps) a block of the warp kernels */
/* the kernels' thread bound (their registers: 255 a thread for a warp a row) */
__host__ __device__ constexpr int rt_ln_threads(int d)
{
    return rt_ln_warp(d) ? 32 * RT_LN_ROWS : 1024;
}
/* the calling warp's row in a warp kernel, or -1 past the last */
__device__ __forceinline__ int64_t rt_ln_warp_row(int64_t rows)
{
    const int64_t r = (int64_t)blockIdx.x * RT_LN_ROWS + (threadIdx.x >> 5);
    return r < rows ? r : -1;
}

/* G values of a layernorm's weight w (bias b) at j, or G ones (zeros) where it has none
 * (NULL): times 1 and plus 0 leave the values as they were */
template <int G>
__device__ __forceinline__ rt_vec<G> ln_ldv_or(const float *p, int j, float none)
{
    if (p)
        return rt_ldv<G>(p + j);
    rt_vec<G> o;
#pragma unroll
    for (int e = 0; e < G; e++)
        o.v[e] = none;
    return o;
}

/* Launch: grid (rows), block of 32..1024 threads (a multiple of 32); with rt_ln_warp(D)
 * grid (ceil(rows / RT_LN_ROWS)), block of 32 * RT_LN_ROWS.
 *   mean[r] = (float) mean of x[r]            (double sum)
 *   rstd[r] = (float) 1 / sqrt(var + eps)     (biased variance, two passes in double)
 *   y[r, j] = (x[r, j] - mean) * rstd * w[j] + b[j]   (w NULL: 1, b NULL: 0)
 * y may be x. */
template <int D>
__device__ __forceinline__ void layernorm_fwd_warp(const act_t *x, const float *w, const float *b,
                                                   act_t *y, float *mean, float *rstd, float eps,
                                                   int64_t rows RT_FP8_SLOT)
{
    constexpr int G = rt_ln_group<D>(), C = D / (32 * G);   /* C groups of G a lane */
    const int lane = threadIdx.x & 31;
    const int64_t r = rt_ln_warp_row(rows);
    if (r < 0)
        return;
    RT_FP8_FOLD_INIT();
    const act_t *xr = x + r * D;
    rt_vec<G> v[C];
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < C; k++) {
        v[k] = rt_ldv<G>(xr + G * (32 * k + lane));
#pragma unroll
        for (int e = 0; e < G; e++)
            s += v[k].v[e];
    }
    const double mu = rt_warp_sum(s) / (double)D;
    double q = 0.0;
#pragma unroll
    for (int k = 0; k < C; k++)
#pragma unroll
        for (int e = 0; e < G; e++) {
            const double d = (double)v[k].v[e] - mu;
            q += d * d;
        }
    const double var = rt_warp_sum(q) / (double)D;
    const float m = (float)mu, rs = (float)(1.0 / sqrt(var + (double)eps));
#pragma unroll
    for (int k = 0; k < C; k++) {
        const int j = G * (32 * k + lane);
        const rt_vec<G> wv = ln_ldv_or<G>(w, j, 1.0f), bv = ln_ldv_or<G>(b, j, 0.0f);
        rt_vec<G> o;
#pragma unroll
        for (int e = 0; e < G; e++)
            o.v[e] = (v[k].v[e] - m) * rs * wv.v[e] + bv.v[e];
        rt_stv(y + r * D + j, o);
        RT_FP8_FOLD_VEC(o, G);
    }
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
    RT_FP8_FOLD_WARP_END();
}

template <int D>
__device__ __forceinline__ void layernorm_fwd_row(const act_t *x, const float *w, const float *b,
                                                  act_t *y, float *mean, float *rstd,
                                                  float eps RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
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
    rt_row_map(xr, y + r * D, D,
               [&](int j, float v) {
                   return RT_FP8_FOLDED((v - m) * rs * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f));
               });
    if (threadIdx.x == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
    RT_FP8_FOLD_END();
}

template <int D>
__device__ __forceinline__ void layernorm_fwd_any(const act_t *x, const float *w, const float *b,
                                                  act_t *y, float *mean, float *rstd, float eps,
                                                  int64_t rows RT_FP8_SLOT)
{
    if constexpr (rt_ln_warp(D))
        layernorm_fwd_warp<D>(x, w, b, y, mean, rstd, eps, rows RT_FP8_SLOT_ARG);
    else
        layernorm_fwd_row<D>(x, w, b, y, mean, rstd, eps RT_FP8_SLOT_ARG);
}

#define RT_LAYERNORM_FWD(D)                                                                   \
    extern "C" __global__ void __launch_bounds__(rt_ln_threads(D)) rt_layernorm_fwd_##D(      \
        const act_t *x, const float *w, const float *b, act_t *y, float *mean, float *rstd,   \
        float eps, int64_t rows RT_FP8_SLOT)                                                  \
    {                                                                                         \
        layernorm_fwd_any<D>(x, w, b, y, mean, rstd, eps, rows RT_FP8_SLOT_ARG);              \
    }

/* The input gradient of one row per block (a warp a row where rt_ln_warp(D)).
 *
 * Launch: grid (rows), block of 32..1024 threads (a multiple of 32); with rt_ln_warp(D)
 * grid (ceil(rows / RT_LN_ROWS)), block of 32 * RT_LN_ROWS.
 *   xh = (x - mean) * rstd, g = dy * w           (float; w NULL: 1)
 *   a  = mean_j g, c = mean_j g * xh             (double sums, rounded to float)
 *   dx = rstd * (g - a - xh * c)  (+ add)        (overwritten; dx may be dy, x or add)
 * add (NULL: none) is another gradient contribution summed in: one float add before
 * the store, as the separate sum kernel did (from dx unrounded: with 16-bit
 * activations one rounding fewer). The thread that writes dx[j] reads x[j], dy[j] and
 * add[j] first. dw and db come from rt_layernorm_dwdb, launched before this kernel (it
 * reads x and dy, which dx may overwrite). */
template <int D>
__device__ __forceinline__ void layernorm_bwd_warp(const act_t *x, const float *w,
                                                   const float *mean, const float *rstd,
                                                   const act_t *dy, const act_t *add, act_t *dx,
                                                   int64_t rows RT_FP8_SLOT)
{
    constexpr int G = rt_ln_group<D>(), C = D / (32 * G);   /* C groups of G a lane */
    const int lane = threadIdx.x & 31;
    const int64_t r = rt_ln_warp_row(rows);
    if (r < 0)
        return;
    RT_FP8_FOLD_INIT();
    const float m = mean[r], rs = rstd[r];
    float xh[C][G], g[C][G];
    double s1 = 0.0, s2 = 0.0;
#pragma unroll
    for (int k = 0; k < C; k++) {   /* x and dy in, before dx (maybe x or dy) is written */
        const int j = G * (32 * k + lane);
        const rt_vec<G> xv = rt_ldv<G>(x + r * D + j), gv = rt_ldv<G>(dy + r * D + j);
        const rt_vec<G> wv = ln_ldv_or<G>(w, j, 1.0f);
#pragma unroll
        for (int e = 0; e < G; e++) {
            xh[k][e] = (xv.v[e] - m) * rs;
            g[k][e] = gv.v[e] * wv.v[e];
            s1 += g[k][e];
            s2 += (double)g[k][e] * xh[k][e];
        }
    }
    const float a = (float)(rt_warp_sum(s1) / (double)D), c = (float)(rt_warp_sum(s2) / (double)D);
#pragma unroll
    for (int k = 0; k < C; k++) {   /* add[j] is read just before dx[j] (maybe it) */
        const int j = G * (32 * k + lane);
        rt_vec<G> o = {};
        if (add)
            o = rt_ldv<G>(add + r * D + j);
#pragma unroll
        for (int e = 0; e < G; e++) {
            const float gx = rs * (g[k][e] - a - xh[k][e] * c);
            o.v[e] = add ? gx + o.v[e] : gx;
        }
        rt_stv(dx + r * D + j, o);
        RT_FP8_FOLD_VEC(o, G);
    }
    RT_FP8_FOLD_WARP_END();
}

template <int D>
__device__ __forceinline__ void layernorm_bwd_row(const act_t *x, const float *w,
                                                  const float *mean, const float *rstd,
                                                  const act_t *dy, const act_t *add,
                                                  act_t *dx RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
    int64_t r = blockIdx.x;
    const act_t *xr = x + r * D, *dyr = dy + r * D;   /* [D] each */
    float m = mean[r], rs = rstd[r];
    double s1 = 0.0, s2 = 0.0;
    rt_row_each(xr, D, [&](int j, float v) {
        float xh = (v - m) * rs, g = rt_ld(dyr + j) * (w ? w[j] : 1.0f);
        s1 += g;
        s2 += (double)g * xh;
    });
    float a = (float)(rt_block_sum(s1) / (double)D), c = (float)(rt_block_sum(s2) / (double)D);
    const act_t *addr = add ? add + r * D : NULL;
    rt_row_map(xr, dx + r * D, D, [&](int j, float v) {
        float xh = (v - m) * rs;
        float gx = rs * (rt_ld(dyr + j) * (w ? w[j] : 1.0f) - a - xh * c);
        return RT_FP8_FOLDED(addr ? gx + rt_ld(addr + j) : gx);
    });
    RT_FP8_FOLD_END();
}

template <int D>
__device__ __forceinline__ void layernorm_bwd_any(const act_t *x, const float *w,
                                                  const float *mean, const float *rstd,
                                                  const act_t *dy, const act_t *add, act_t *dx,
                                                  int64_t rows RT_FP8_SLOT)
{
    if constexpr (rt_ln_warp(D))
        layernorm_bwd_warp<D>(x, w, mean, rstd, dy, add, dx, rows RT_FP8_SLOT_ARG);
    else
        layernorm_bwd_row<D>(x, w, mean, rstd, dy, add, dx RT_FP8_SLOT_ARG);
}

#define RT_LAYERNORM_BWD(D)                                                                   \
    extern "C" __global__ void __launch_bounds__(rt_ln_threads(D)) rt_layernorm_bwd_##D(      \
        const act_t *x, const float *w, const float *mean, const float *rstd,                 \
        const act_t *dy, const act_t *add, act_t *dx, int64_t rows RT_FP8_SLOT)               \
    {                                                                                         \
        layernorm_bwd_any<D>(x, w, mean, rstd, dy, add, dx, rows RT_FP8_SLOT_ARG);            \
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

/* ---- RMSNorm (twins of rt_rmsnorm_fwd and rt_rmsnorm_bwd in runtime/kernels.c) ------------
 * The same shapes as layernorm's kernels (a warp a row where rt_ln_warp(D), else a block
 * a row; the host launches them with ln_launch), without the mean: the sum of squares in
 * double, elementwise arithmetic in float in the CPU's order.
 *
 * Launch: as RT_LAYERNORM_FWD.
 *   rstd[r] = (float) 1 / sqrt(mean_j x[r, j]^2 + eps)    (double sum)
 *   y[r, j] = x[r, j] * rstd * w[j]
 * y may be x. */
template <int D>
__device__ __forceinline__ void rmsnorm_fwd_warp(const act_t *x, const float *w, act_t *y,
                                                 float *rstd, float eps, int64_t rows RT_FP8_SLOT)
{
    constexpr int G = rt_ln_group<D>(), C = D / (32 * G);   /* C groups of G a lane */
    const int lane = threadIdx.x & 31;
    const int64_t r = rt_ln_warp_row(rows);
    if (r < 0)
        return;
    RT_FP8_FOLD_INIT();
    const act_t *xr = x + r * D;
    rt_vec<G> v[C];
    double q = 0.0;
#pragma unroll
    for (int k = 0; k < C; k++) {
        v[k] = rt_ldv<G>(xr + G * (32 * k + lane));
#pragma unroll
        for (int e = 0; e < G; e++)
            q += (double)v[k].v[e] * (double)v[k].v[e];
    }
    const double ms = rt_warp_sum(q) / (double)D;
    const float rs = (float)(1.0 / sqrt(ms + (double)eps));
#pragma unroll
    for (int k = 0; k < C; k++) {
        const int j = G * (32 * k + lane);
        const rt_vec<G> wv = rt_ldv<G>(w + j);
        rt_vec<G> o;
#pragma unroll
        for (int e = 0; e < G; e++)
            o.v[e] = v[k].v[e] * rs * wv.v[e];
        rt_stv(y + r * D + j, o);
        RT_FP8_FOLD_VEC(o, G);
    }
    if (lane == 0)
        rstd[r] = rs;
    RT_FP8_FOLD_WARP_END();
}

template <int D>
__device__ __forceinline__ void rmsnorm_fwd_row(const act_t *x, const float *w, act_t *y,
                                                float *rstd, float eps RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
    int64_t r = blockIdx.x;
    const act_t *xr = x + r * D;           /* [D] */
    double q = 0.0;
    rt_row_each(xr, D, [&](int j, float v) { q += (double)v * (double)v; });
    double ms = rt_block_sum(q) / (double)D;
    float rs = (float)(1.0 / sqrt(ms + (double)eps));
    rt_row_map(xr, y + r * D, D, [&](int j, float v) { return RT_FP8_FOLDED(v * rs * w[j]); });
    if (threadIdx.x == 0)
        rstd[r] = rs;
    RT_FP8_FOLD_END();
}

#define RT_RMSNORM_FWD(D)                                                                     \
    extern "C" __global__ void __launch_bounds__(rt_ln_threads(D)) rt_rmsnorm_fwd_##D(        \
        const act_t *x, const float *w, act_t *y, float *rstd, float eps,                     \
        int64_t rows RT_FP8_SLOT)                                                             \
    {                                                                                         \
        if constexpr (rt_ln_warp(D))                                                          \
            rmsnorm_fwd_warp<D>(x, w, y, rstd, eps, rows RT_FP8_SLOT_ARG);                    \
        else                                                                                  \
            rmsnorm_fwd_row<D>(x, w, y, rstd, eps RT_FP8_SLOT_ARG);                           \
    }

/* The input gradient of a row (a warp a row where rt_ln_warp(D)).
 *
 * Launch: as RT_LAYERNORM_BWD.
 *   xh = x * rstd, g = dy * w                    (float)
 *   m  = mean_j g * xh                           (double sum, rounded to float)
 *   dx = rstd * (g - xh * m)  (+ add)            (overwritten; dx may be dy, x or add)
 * add as layernorm's: another gradient contribution (a residual's) summed in, read just
 * before dx[j] is written. dw comes from rt_rmsnorm_dw, launched before this kernel. */
template <int D>
__device__ __forceinline__ void rmsnorm_bwd_warp(const act_t *x, const float *w,
                                                 const float *rstd, const act_t *dy,
                                                 const act_t *add, act_t *dx,
                                                 int64_t rows RT_FP8_SLOT)
{
    constexpr int G = rt_ln_group<D>(), C = D / (32 * G);   /* C groups of G a lane */
    const int lane = threadIdx.x & 31;
    const int64_t r = rt_ln_warp_row(rows);
    if (r < 0)
        return;
    RT_FP8_FOLD_INIT();
    const float rs = rstd[r];
    float xh[C][G], g[C][G];
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < C; k++) {   /* x and dy in, before dx (maybe x or dy) is written */
        const int j = G * (32 * k + lane);
        const rt_vec<G> xv = rt_ldv<G>(x + r * D + j), gv = rt_ldv<G>(dy + r * D + j);
        const rt_vec<G> wv = rt_ldv<G>(w + j);
#pragma unroll
        for (int e = 0; e < G; e++) {
            xh[k][e] = xv.v[e] * rs;
            g[k][e] = gv.v[e] * wv.v[e];
            s += (double)g[k][e] * xh[k][e];
        }
    }
    const float m = (float)(rt_warp_sum(s) / (double)D);
#pragma unroll
    for (int k = 0; k < C; k++) {   /* add[j] is read just before dx[j] (maybe it) */
        const int j = G * (32 * k + lane);
        rt_vec<G> o = {};
        if (add)
            o = rt_ldv<G>(add + r * D + j);
#pragma unroll
        for (int e = 0; e < G; e++) {
            const float gx = rs * (g[k][e] - xh[k][e] * m);
            o.v[e] = add ? gx + o.v[e] : gx;
        }
        rt_stv(dx + r * D + j, o);
        RT_FP8_FOLD_VEC(o, G);
    }
    RT_FP8_FOLD_WARP_END();
}

template <int D>
__device__ __forceinline__ void rmsnorm_bwd_row(const act_t *x, const float *w,
                                                const float *rstd, const act_t *dy,
                                                const act_t *add, act_t *dx RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
    int64_t r = blockIdx.x;
    const act_t *xr = x + r * D, *dyr = dy + r * D;   /* [D] each */
    float rs = rstd[r];
    double s = 0.0;
    rt_row_each(xr, D, [&](int j, float v) { s += (double)(rt_ld(dyr + j) * w[j]) * (v * rs); });
    float m = (float)(rt_block_sum(s) / (double)D);
    const act_t *addr = add ? add + r * D : NULL;
    rt_row_map(xr, dx + r * D, D, [&](int j, float v) {
        float gx = rs * (rt_ld(dyr + j) * w[j] - v * rs * m);
        return RT_FP8_FOLDED(addr ? gx + rt_ld(addr + j) : gx);
    });
    RT_FP8_FOLD_END();
}

#define RT_RMSNORM_BWD(D)                                                                     \
    extern "C" __global__ void __launch_bounds__(rt_ln_threads(D)) rt_rmsnorm_bwd_##D(        \
        const act_t *x, const float *w, const float *rstd, const act_t *dy, const act_t *add, \
        act_t *dx, int64_t rows RT_FP8_SLOT)                                                  \
    {                                                                                         \
        if constexpr (rt_ln_warp(D))                                                          \
            rmsnorm_bwd_warp<D>(x, w, rstd, dy, add, dx, rows RT_FP8_SLOT_ARG);               \
        else                                                                                  \
            rmsnorm_bwd_row<D>(x, w, rstd, dy, add, dx RT_FP8_SLOT_ARG);                      \
    }

/* Partial sums of dw over blocks of rows, as rt_layernorm_dwdb's (without db).
 *
 * Launch: grid (ceil(d / 32), nrb), block (32, 8); rows [by * rb, (by + 1) * rb).
 *   part[by, j] = sum over the block's rows of dy[r, j] * (x[r, j] * rstd[r])   (double)
 * rt_colsum_finish adds part [nrb, d] into dw. */
extern "C" __global__ void __launch_bounds__(256)
rt_rmsnorm_dw(const act_t *x, const act_t *dy, const float *rstd, double *part, int64_t rows,
              int64_t d, int64_t rb)
{
    __shared__ double sw[8][32];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t j = (int64_t)blockIdx.x * 32 + tx;
    int64_t r0 = (int64_t)blockIdx.y * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
    double pw = 0.0;
    if (j < d)
        for (int64_t r = r0 + ty; r < r1; r += 8)
            pw += (double)rt_ld(dy + r * d + j) * (double)(rt_ld(x + r * d + j) * rstd[r]);
    sw[ty][tx] = pw;
    __syncthreads();
    if (ty == 0 && j < d) {
        for (int k = 1; k < 8; k++)
            pw += sw[k][tx];
        part[blockIdx.y * d + j] = pw;
    }
}

/* ---- qk_norm over all heads (twins of rt_qk_norm_fwd and rt_qk_norm_bwd) ------------------
 * OLMo 2's: in each row of qkv, [q dq | k dk | v dv], RMSNorm over q's columns (weight
 * wq) and over k's (wk), v copied; rmsnorm's arithmetic, a block a row.
 *
 * Launch: grid (rows), block of 256.
 *   rstd[r, s] = (float) 1 / sqrt(mean_j x_s[j]^2 + eps)   (s: q, then k; double sum)
 *   y_s[j] = x_s[j] * rstd * w_s[j];  y_v = x_v */
__device__ __forceinline__ float qkn_fwd_part(const act_t *x, const float *w, act_t *y, int d,
                                              float eps)
{
    double q = 0.0;
    rt_row_each(x, d, [&](int j, float v) { q += (double)v * (double)v; });
    const double ms = rt_block_sum(q) / (double)d;
    const float rs = (float)(1.0 / sqrt(ms + (double)eps));
    rt_row_map(x, y, d, [&](int j, float v) { return v * rs * w[j]; });
    return rs;
}

extern "C" __global__ void __launch_bounds__(256)
rt_qk_norm_fwd(const act_t *x, const float *wq, const float *wk, act_t *y, float *rstd,
               int64_t rows, int64_t dq, int64_t dk, int64_t dv, float eps)
{
    const int64_t r = blockIdx.x, w = dq + dk + dv;
    const act_t *xr = x + r * w;
    act_t *yr = y + r * w;
    const float rq = qkn_fwd_part(xr, wq, yr, (int)dq, eps);
    const float rk = qkn_fwd_part(xr + dq, wk, yr + dq, (int)dk, eps);
    rt_row_map(xr + dq + dk, yr + dq + dk, (int)dv, [&](int j, float v) { return v; });
    if (threadIdx.x == 0) {
        rstd[2 * r] = rq;
        rstd[2 * r + 1] = rk;
    }
}

/* Launch: as rt_qk_norm_fwd.
 *   xh = x_s * rstd, g = dy_s * w_s               (float)
 *   m  = mean_j g * xh                            (double sum, rounded to float)
 *   dx_s = rstd * (g - xh * m);  dx_v = dy_v      (dx is neither x nor dy)
 * dwq and dwk come from rt_qk_norm_dw. */
__device__ __forceinline__ void qkn_bwd_part(const act_t *x, const float *w, float rs,
                                             const act_t *dy, act_t *dx, int d)
{
    double s = 0.0;
    rt_row_each(x, d, [&](int j, float v) { s += (double)(rt_ld(dy + j) * w[j]) * (v * rs); });
    const float m = (float)(rt_block_sum(s) / (double)d);
    rt_row_map(x, dx, d, [&](int j, float v) { return rs * (rt_ld(dy + j) * w[j] - v * rs * m); });
}

extern "C" __global__ void __launch_bounds__(256)
rt_qk_norm_bwd(const act_t *x, const float *wq, const float *wk, const float *rstd,
               const act_t *dy, act_t *dx, int64_t rows, int64_t dq, int64_t dk, int64_t dv)
{
    const int64_t r = blockIdx.x, w = dq + dk + dv;
    const act_t *xr = x + r * w, *dyr = dy + r * w;
    act_t *dxr = dx + r * w;
    qkn_bwd_part(xr, wq, rstd[2 * r], dyr, dxr, (int)dq);
    qkn_bwd_part(xr + dq, wk, rstd[2 * r + 1], dyr + dq, dxr + dq, (int)dk);
    rt_row_map(dyr + dq + dk, dxr + dq + dk, (int)dv, [&](int j, float v) { return v; });
}

/* Partial sums of dwq and dwk over blocks of rows, as rt_rmsnorm_dw's, on the q and k
 * columns of qkv.
 *
 * Launch: grid (ceil((dq + dk) / 32), nrb), block (32, 8); rows [by * rb, (by + 1) * rb).
 *   part[by, j] (j < dq), part[nrb dq + by dk + j - dq] (k's):
 *     sum over the block's rows of dy[r, j] * (x[r, j] * rstd[r, s])   (double)
 * rt_colsum_finish adds each part into dwq and dwk. */
extern "C" __global__ void __launch_bounds__(256)
rt_qk_norm_dw(const act_t *x, const act_t *dy, const float *rstd, double *part, int64_t rows,
              int64_t dq, int64_t dk, int64_t dv, int64_t rb, int64_t nrb)
{
    __shared__ double sw[8][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * 32 + tx, w = dq + dk + dv, s = j >= dq;
    const int64_t r0 = (int64_t)blockIdx.y * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
    double pw = 0.0;
    if (j < dq + dk)
        for (int64_t r = r0 + ty; r < r1; r += 8)
            pw += (double)rt_ld(dy + r * w + j) * (double)(rt_ld(x + r * w + j) * rstd[2 * r + s]);
    sw[ty][tx] = pw;
    __syncthreads();
    if (ty == 0 && j < dq + dk) {
        for (int k = 1; k < 8; k++)
            pw += sw[k][tx];
        if (s)
            part[nrb * dq + blockIdx.y * dk + (j - dq)] = pw;
        else
            part[blockIdx.y * dq + j] = pw;
    }
}
