/* conv.cuh: im2col / col2im for conv2d as GEMM, and max / average pooling (twins of
 * the functions of the same names in runtime/kernels.c). One thread per output element
 * in grid-stride loops; every output is a gather, so no two threads write one element
 * and each sum runs in the CPU's order: the results are the CPU's bit for bit.
 * Shapes are runtime values (the batch size varies); indices are int64. */

/* Launch: grid-stride over C*k*k * B*OH*OW (blocks of 256).
 *   col[(ch*k + ki)*k + kj, (b*OH + oh)*OW + ow] = x[b, ch, oh*s - pad + ki, ow*s - pad + kj]
 *   (0 outside the image)   x: [B, C, H, W], col: [C*k*k, B*OH*OW] */
extern "C" __global__ void __launch_bounds__(256)
rt_im2col(const act_t *x, act_t *col, int64_t B, int64_t C, int64_t H, int64_t W, int64_t k,
          int64_t s, int64_t pad, int64_t OH, int64_t OW)
{
    int64_t ncol = B * OH * OW, n = C * k * k * ncol;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t cr = i / ncol, cc = i % ncol;
        int64_t ch = cr / (k * k), ki = cr / k % k, kj = cr % k;
        int64_t b = cc / (OH * OW), oh = cc / OW % OH, ow = cc % OW;
        int64_t ih = oh * s - pad + ki, iw = ow * s - pad + kj;
        float v = 0.0f;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W)
            v = rt_ld(x + ((b * C + ch) * H + ih) * W + iw);
        rt_st(col + i, v);
    }
}

/* Launch: grid-stride over B*C*H*W (blocks of 256).
 *   dx[b, ch, ih, iw] = sum over (ki, kj) in order of the dcol entry that im2col took
 *   from (ih, iw), if any   (overwrites dx)   dcol: [C*k*k, B*OH*OW], dx: [B, C, H, W] */
extern "C" __global__ void __launch_bounds__(256)
rt_col2im(const act_t *dcol, act_t *dx, int64_t B, int64_t C, int64_t H, int64_t W, int64_t k,
          int64_t s, int64_t pad, int64_t OH, int64_t OW)
{
    int64_t ncol = B * OH * OW, n = B * C * H * W;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = i % W, ih = i / W % H, ch = i / (H * W) % C, b = i / (C * H * W);
        float acc = 0.0f;
        for (int64_t ki = 0; ki < k; ki++) {
            int64_t th = ih + pad - ki;   /* = oh * s */
            if (th < 0 || th % s != 0 || th / s >= OH)
                continue;
            for (int64_t kj = 0; kj < k; kj++) {
                int64_t tw = iw + pad - kj;
                if (tw < 0 || tw % s != 0 || tw / s >= OW)
                    continue;
                acc += rt_ld(dcol + (ch * k * k + ki * k + kj) * ncol + (b * OH + th / s) * OW +
                             tw / s);
            }
        }
        rt_st(dx + i, acc);
    }
}

/* PyTorch's max over the window at (ih0, iw0) of a plane, scanned row by row from
 * -inf: a greater value or a NaN replaces the current one. Returns the offset in the
 * plane of the element chosen (the first element when all are -inf). */
__device__ __forceinline__ int64_t rt_window_max(const act_t *xp, int64_t W, int64_t k,
                                                 int64_t ih0, int64_t iw0, float *maxv)
{
    float m = -rt_inf();
    int64_t at = ih0 * W + iw0;
    for (int64_t ki = 0; ki < k; ki++)
        for (int64_t kj = 0; kj < k; kj++) {
            float v = rt_ld(xp + (ih0 + ki) * W + iw0 + kj);
            if (v > m || isnan(v)) {
                m = v;
                at = (ih0 + ki) * W + iw0 + kj;
            }
        }
    *maxv = m;
    return at;
}

/* The outputs whose window (size k, stride s) covers input position p: [*lo, *hi]. */
__device__ __forceinline__ void rt_covering(int64_t p, int64_t k, int64_t s, int64_t n_out,
                                            int64_t *lo, int64_t *hi)
{
    *lo = p - k + 1 <= 0 ? 0 : (p - k + s) / s;
    *hi = p / s < n_out - 1 ? p / s : n_out - 1;
}

/* Launch: grid-stride over planes*OH*OW (blocks of 256).
 *   y[pl, oh, ow] = max of x[pl, oh*s .. +k, ow*s .. +k]   x: [planes, H, W] */
extern "C" __global__ void __launch_bounds__(256)
rt_maxpool2d_fwd(const act_t *x, act_t *y, int64_t planes, int64_t H, int64_t W, int64_t k,
                 int64_t s, int64_t OH, int64_t OW)
{
    int64_t n = planes * OH * OW;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = i % OW, oh = i / OW % OH, pl = i / (OH * OW);
        float m;
        rt_window_max(x + pl * H * W, W, k, oh * s, ow * s, &m);
        rt_st(y + i, m);
    }
}

/* Launch: grid-stride over planes*H*W (blocks of 256).
 *   dx[pl, ih, iw] = sum, over the windows covering (ih, iw) in (oh, ow) order, of
 *   dy[pl, oh, ow] where the window's max was taken at (ih, iw)   (overwrites dx) */
extern "C" __global__ void __launch_bounds__(256)
rt_maxpool2d_bwd(const act_t *x, const act_t *dy, act_t *dx, int64_t planes, int64_t H,
                 int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW)
{
    int64_t n = planes * H * W;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = i % W, ih = i / W % H, pl = i / (H * W);
        int64_t oh0, oh1, ow0, ow1;
        rt_covering(ih, k, s, OH, &oh0, &oh1);
        rt_covering(iw, k, s, OW, &ow0, &ow1);
        const act_t *xp = x + pl * H * W;
        float acc = 0.0f;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                float m;
                if (rt_window_max(xp, W, k, oh * s, ow * s, &m) == ih * W + iw)
                    acc += rt_ld(dy + (pl * OH + oh) * OW + ow);
            }
        rt_st(dx + i, acc);
    }
}

/* Launch: grid-stride over planes*OH*OW (blocks of 256).
 *   y[pl, oh, ow] = (sum of the window, row by row from 0) / (k*k)   (a division, as
 *   PyTorch) */
extern "C" __global__ void __launch_bounds__(256)
rt_avgpool2d_fwd(const act_t *x, act_t *y, int64_t planes, int64_t H, int64_t W, int64_t k,
                 int64_t s, int64_t OH, int64_t OW)
{
    int64_t n = planes * OH * OW;
    float div = (float)(k * k);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = i % OW, oh = i / OW % OH, pl = i / (OH * OW);
        const act_t *win = x + (pl * H + oh * s) * W + ow * s;
        float sum = 0.0f;
        for (int64_t ki = 0; ki < k; ki++)
            for (int64_t kj = 0; kj < k; kj++)
                sum += rt_ld(win + ki * W + kj);
        rt_st(y + i, sum / div);
    }
}

/* Launch: grid-stride over planes*H*W (blocks of 256).
 *   dx[pl, ih, iw] = sum over the covering windows in (oh, ow) order of dy / (k*k)
 *   (overwrites dx) */
extern "C" __global__ void __launch_bounds__(256)
rt_avgpool2d_bwd(const act_t *dy, act_t *dx, int64_t planes, int64_t H, int64_t W, int64_t k,
                 int64_t s, int64_t OH, int64_t OW)
{
    int64_t n = planes * H * W;
    float div = (float)(k * k);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = i % W, ih = i / W % H, pl = i / (H * W);
        int64_t oh0, oh1, ow0, ow1;
        rt_covering(ih, k, s, OH, &oh0, &oh1);
        rt_covering(iw, k, s, OW, &ow0, &ow1);
        float acc = 0.0f;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                acc += rt_ld(dy + (pl * OH + oh) * OW + ow) / div;
        rt_st(dx + i, acc);
    }
}
