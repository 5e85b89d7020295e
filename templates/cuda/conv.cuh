/* conv.cuh: im2col / col2im for conv2d as GEMM, and max / average pooling (twins of
 * the functions of the same names in runtime/kernels.c); grouped and depthwise
 * convolution (twins of runtime/conv_grouped.c's); at the end, conv2d's direct and
 * implicit-GEMM kernels that need no columns (twins of runtime/conv.c's calls, which
 * sum in another order than its GEMMs: their section says how). Grid-stride loops, a
 * thread per output element (im2col: per channel of a column of outputs; the max-pool
 * backward over windows that tile the input: per window); every output is a gather, so
 * no two threads write one element, and but for the last section each sum runs in the
 * CPU's order: the results are the CPU's bit for bit.
 * Shapes are run-time values (the batch size varies).
 *
 * Index arithmetic. Splitting a flat index into (batch, channel, row, column) takes
 * divisions by run-time values; in 64 bits each is a long software routine on the GPU,
 * and with four to eight of them an element they were most of these kernels' time.
 * So where every index fits in 31 bits (the host's `wide` is 0: tensors below 2^31
 * elements) the kernels divide 32-bit indices by a multiply and a shift with the
 * constants the host worked out (rt_fdiv); else they take plain 64-bit divisions. Both
 * give the same quotients, so the results do not depend on the path. */

/* n / d for 0 <= n < 2^31 and 1 <= d < 2^31 (Granlund and Montgomery): with
 * l = ceil(log2 d), m = ceil(2^(31 + l) / d) < 2^32 and q = umulhi(n, m) >> (l - 1);
 * d = 1 has m = 0 (q = n). The host's twin is cuda_ops.c's fdiv. */
struct rt_fdiv {
    unsigned d, m, s;
};
__device__ __forceinline__ unsigned rt_fq(unsigned n, rt_fdiv f)
{
    return f.m ? __umulhi(n, f.m) >> f.s : n;
}

/* Quotient and remainder for each index type: I = unsigned divides by the rt_fdiv,
 * I = int64_t by the plain divisor. */
struct rt_ix32 {
    typedef unsigned I;
    typedef int S;   /* signed, for positions that may fall outside the image */
    __device__ static unsigned q(unsigned n, rt_fdiv f, int64_t) { return rt_fq(n, f); }
};
struct rt_ix64 {
    typedef int64_t I;
    typedef int64_t S;
    __device__ static int64_t q(int64_t n, rt_fdiv, int64_t d) { return n / d; }
};
#define RT_Q(X, n, f, d) X::q((n), (f), (d))

/* Each kernel below runs RUN's 64-bit instance where the host says `wide`, else its
 * 32-bit one. */
#define RT_BY_INDEX(RUN, ...)                                                                \
    do {                                                                                     \
        if (wide)                                                                            \
            RUN<rt_ix64>(__VA_ARGS__);                                                       \
        else                                                                                 \
            RUN<rt_ix32>(__VA_ARGS__);                                                       \
    } while (0)

/* i = (pl * h + row) * w + col, split (fw divides by w, fh by h) */
template <class X>
__device__ __forceinline__ void rt_split3(typename X::I i, int64_t w, rt_fdiv fw, int64_t h,
                                          rt_fdiv fh, typename X::I *pl, typename X::I *row,
                                          typename X::I *col)
{
    typedef typename X::I I;
    I r = RT_Q(X, i, fw, w);
    *col = i - r * (I)w;
    *pl = RT_Q(X, r, fh, h);
    *row = r - *pl * (I)h;
}

/* col[(ch*k + ki)*k + kj, (b*OH + oh)*OW + ow] = x[b, ch, oh*s - pad + ki, ow*s - pad + kj]
 * (0 outside the image)   x: [B, C, H, W], col: [C*k*k, B*OH*OW]
 * A thread takes one channel of a column (an output position) and walks its k*k rows;
 * a warp's stores to a row are consecutive. (A thread a whole column left a GPU idle
 * where the positions are few, a 1x1 or 7x7 output at a small batch, each thread then
 * a chain of C*k*k loads and stores: 12544 for 256 channels at 7x7.)
 * fd: OH*OW, OW, B*OH*OW */
template <class X>
__device__ __forceinline__ void rt_im2col_run(const act_t *x, act_t *col, int64_t B, int64_t C,
                                              int64_t H, int64_t W, int64_t k, int64_t s,
                                              int64_t pad, int64_t OH, int64_t OW,
                                              const rt_fdiv *fd)
{
    typedef typename X::I I;
    typedef typename X::S S;
    const I ncol = (I)(B * OH * OW), ohw = (I)(OH * OW), hw = (I)(H * W), kk = (I)(k * k);
    const I n = (I)C * ncol;
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (I)gridDim.x * blockDim.x) {
        I ch = RT_Q(X, t, fd[2], ncol), cc = t - ch * ncol;
        I b = RT_Q(X, cc, fd[0], ohw), p = cc - b * ohw;
        I oh = RT_Q(X, p, fd[1], OW), ow = p - oh * (I)OW;
        const S ih0 = (S)(oh * (I)s) - (S)pad, iw0 = (S)(ow * (I)s) - (S)pad;
        const act_t *xc = x + ((I)b * (I)C + ch) * hw;
        act_t *out = col + ch * kk * ncol + cc;
        for (S ih = ih0; ih < ih0 + (S)k; ih++)
            for (S iw = iw0; iw < iw0 + (S)k; iw++, out += ncol) {
                float v = 0.0f;
                if (ih >= 0 && ih < (S)H && iw >= 0 && iw < (S)W)
                    v = rt_ld(xc + (I)ih * (I)W + (I)iw);
                rt_st(out, v);
            }
    }
}

/* Launch: grid-stride over the C*B*OH*OW (channel, column) pairs (blocks of 256); fd as
 * rt_im2col_run's. */
extern "C" __global__ void __launch_bounds__(256)
rt_im2col(const act_t *x, act_t *col, int64_t B, int64_t C, int64_t H, int64_t W, int64_t k,
          int64_t s, int64_t pad, int64_t OH, int64_t OW, int wide, rt_fdiv f0, rt_fdiv f1,
          rt_fdiv f2)
{
    const rt_fdiv fd[3] = {f0, f1, f2};
    RT_BY_INDEX(rt_im2col_run, x, col, B, C, H, W, k, s, pad, OH, OW, fd);
}

/* dx[b, ch, ih, iw] = sum over (ki, kj) in order of the dcol entry that im2col took
 * from (ih, iw), if any   (overwrites dx)   dcol: [C*k*k, B*OH*OW], dx: [B, C, H, W]
 * fd: W, H, C, s */
template <class X>
__device__ __forceinline__ void rt_col2im_run(const act_t *dcol, act_t *dx, int64_t B, int64_t C,
                                              int64_t H, int64_t W, int64_t k, int64_t s,
                                              int64_t pad, int64_t OH, int64_t OW,
                                              const rt_fdiv *fd)
{
    typedef typename X::I I;
    typedef typename X::S S;
    const I ncol = (I)(B * OH * OW), n = (I)(B * C) * (I)(H * W);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I pl, ih, iw;
        rt_split3<X>(i, W, fd[0], H, fd[1], &pl, &ih, &iw);
        I b = RT_Q(X, pl, fd[2], C), ch = pl - b * (I)C;
        float acc = 0.0f;
        for (I ki = 0; ki < (I)k; ki++) {
            S th = (S)(ih + (I)pad) - (S)ki;   /* = oh * s */
            if (th < 0)
                break;
            I oh = RT_Q(X, (I)th, fd[3], s);
            if ((I)th != oh * (I)s || oh >= (I)OH)
                continue;
            for (I kj = 0; kj < (I)k; kj++) {
                S tw = (S)(iw + (I)pad) - (S)kj;
                if (tw < 0)
                    break;
                I ow = RT_Q(X, (I)tw, fd[3], s);
                if ((I)tw != ow * (I)s || ow >= (I)OW)
                    continue;
                acc += rt_ld(dcol + ((ch * (I)k + ki) * (I)k + kj) * ncol + (b * (I)OH + oh) * (I)OW +
                             ow);
            }
        }
        rt_st(dx + i, acc);
    }
}

/* Launch: grid-stride over B*C*H*W (blocks of 256); fd as rt_col2im_run's. */
extern "C" __global__ void __launch_bounds__(256)
rt_col2im(const act_t *dcol, act_t *dx, int64_t B, int64_t C, int64_t H, int64_t W, int64_t k,
          int64_t s, int64_t pad, int64_t OH, int64_t OW, int wide, rt_fdiv f0, rt_fdiv f1,
          rt_fdiv f2, rt_fdiv f3)
{
    const rt_fdiv fd[4] = {f0, f1, f2, f3};
    RT_BY_INDEX(rt_col2im_run, dcol, dx, B, C, H, W, k, s, pad, OH, OW, fd);
}

/* PyTorch's max over the k x k window at (ih0, iw0) of a plane of width W, scanned row
 * by row from -inf: a greater value or a NaN replaces the current one. Returns the
 * offset in the plane of the element chosen (the first element when all are -inf). */
template <typename I>
__device__ __forceinline__ I rt_window_max(const act_t *xp, I W, I k, I ih0, I iw0, float *maxv)
{
    float m = -rt_inf();
    I at = ih0 * W + iw0;
    for (I ki = 0; ki < k; ki++)
        for (I kj = 0; kj < k; kj++) {
            float v = rt_ld(xp + (ih0 + ki) * W + iw0 + kj);
            if (v > m || isnan(v)) {
                m = v;
                at = (ih0 + ki) * W + iw0 + kj;
            }
        }
    *maxv = m;
    return at;
}

/* The outputs whose window (size k, stride s; fs divides by s) covers input position
 * p: [*lo, *hi] (empty when *lo > *hi). */
template <class X>
__device__ __forceinline__ void rt_covering(typename X::I p, typename X::I k, typename X::I s,
                                            rt_fdiv fs, typename X::I n_out, typename X::I *lo,
                                            typename X::I *hi)
{
    typedef typename X::I I;
    I q = RT_Q(X, p, fs, s);
    *lo = p + 1 <= k ? 0 : RT_Q(X, p - k + s, fs, s);
    *hi = q < n_out - 1 ? q : n_out - 1;
}

/* A backward pooling thread's input element i of [planes, H, W]: its plane and place,
 * and the outputs whose windows cover it, rows [oh0, oh1] and columns [ow0, ow1]. */
template <class X>
struct rt_pool_in {
    typename X::I pl, ih, iw, oh0, oh1, ow0, ow1;
};
template <class X>
__device__ __forceinline__ rt_pool_in<X> rt_pool_input(typename X::I i, int64_t H, int64_t W,
                                                       int64_t k, int64_t s, int64_t OH,
                                                       int64_t OW, const rt_fdiv *fd)
{
    typedef typename X::I I;
    rt_pool_in<X> p;
    rt_split3<X>(i, W, fd[0], H, fd[1], &p.pl, &p.ih, &p.iw);
    rt_covering<X>(p.ih, (I)k, (I)s, fd[2], (I)OH, &p.oh0, &p.oh1);
    rt_covering<X>(p.iw, (I)k, (I)s, fd[2], (I)OW, &p.ow0, &p.ow1);
    return p;
}

/* The four pooling kernels: x [planes, H, W], y and dy [planes, OH, OW]; window k,
 * stride s, no padding. A thread takes outputs of y (forward) or of dx (backward);
 * fd: the width and the height of what it takes (OW, OH or W, H), then s. */
template <class X>
__device__ __forceinline__ void rt_maxpool_fwd_run(const act_t *x, act_t *y, int64_t planes,
                                                   int64_t H, int64_t W, int64_t k, int64_t s,
                                                   int64_t OH, int64_t OW, const rt_fdiv *fd)
{
    typedef typename X::I I;
    const I n = (I)(planes * OH * OW);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I pl, oh, ow;
        rt_split3<X>(i, OW, fd[0], OH, fd[1], &pl, &oh, &ow);
        float m;
        rt_window_max<I>(x + pl * (I)(H * W), (I)W, (I)k, oh * (I)s, ow * (I)s, &m);
        rt_st(y + i, m);
    }
}

template <class X>
__device__ __forceinline__ void rt_maxpool_bwd_run(const act_t *x, const act_t *dy, act_t *dx,
                                                   int64_t planes, int64_t H, int64_t W,
                                                   int64_t k, int64_t s, int64_t OH, int64_t OW,
                                                   const rt_fdiv *fd)
{
    typedef typename X::I I;
    const I n = (I)(planes * H * W);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const rt_pool_in<X> p = rt_pool_input<X>(i, H, W, k, s, OH, OW, fd);
        const act_t *xp = x + p.pl * (I)(H * W);
        float acc = 0.0f;
        for (I oh = p.oh0; oh <= p.oh1; oh++)
            for (I ow = p.ow0; ow <= p.ow1; ow++) {
                float m;
                if (rt_window_max<I>(xp, (I)W, (I)k, oh * (I)s, ow * (I)s, &m) == p.ih * (I)W + p.iw)
                    acc += rt_ld(dy + (p.pl * (I)OH + oh) * (I)OW + ow);
            }
        rt_st(dx + i, acc);
    }
}

/* The same where the windows tile the input (stride = window): a thread per cell of
 * [planes, ceil(H/k), ceil(W/k)] finds its window's maximum once and writes the cell's
 * k*k elements of dx: dy + 0 at the maximum (the sum above over its one window, so a
 * -0 becomes +0 as there) and 0 elsewhere; a cell past the last window (the rows and
 * columns of an H or W that k does not divide) writes 0s. Each x and dy element is read
 * once, each dx element written once. fd: the cells' width, then their height. */
template <class X>
__device__ __forceinline__ void rt_maxpool_bwd_tiles_run(const act_t *x, const act_t *dy,
                                                         act_t *dx, int64_t planes, int64_t H,
                                                         int64_t W, int64_t k, int64_t OH,
                                                         int64_t OW, const rt_fdiv *fd)
{
    typedef typename X::I I;
    const I CH = (I)((H + k - 1) / k), CW = (I)((W + k - 1) / k), n = (I)planes * CH * CW;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I pl, ch, cw;
        rt_split3<X>(i, CW, fd[0], CH, fd[1], &pl, &ch, &cw);
        const I ih0 = ch * (I)k, iw0 = cw * (I)k;
        const act_t *xp = x + pl * (I)(H * W);
        act_t *dxp = dx + pl * (I)(H * W);
        I at = (I)(H * W);   /* no element: a cell past the last window */
        float g = 0.0f;
        if (ch < (I)OH && cw < (I)OW) {
            float m;
            at = rt_window_max<I>(xp, (I)W, (I)k, ih0, iw0, &m);
            g = 0.0f + rt_ld(dy + (pl * (I)OH + ch) * (I)OW + cw);
        }
        for (I ih = ih0; ih < ih0 + (I)k && ih < (I)H; ih++)
            for (I iw = iw0; iw < iw0 + (I)k && iw < (I)W; iw++)
                rt_st(dxp + ih * (I)W + iw, ih * (I)W + iw == at ? g : 0.0f);
    }
}

/* y = (sum of the window, row by row from 0) / (k*k)   (a division, as PyTorch) */
template <class X>
__device__ __forceinline__ void rt_avgpool_fwd_run(const act_t *x, act_t *y, int64_t planes,
                                                   int64_t H, int64_t W, int64_t k, int64_t s,
                                                   int64_t OH, int64_t OW, const rt_fdiv *fd)
{
    typedef typename X::I I;
    const I n = (I)(planes * OH * OW);
    const float div = (float)(k * k);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I pl, oh, ow;
        rt_split3<X>(i, OW, fd[0], OH, fd[1], &pl, &oh, &ow);
        const act_t *win = x + (pl * (I)H + oh * (I)s) * (I)W + ow * (I)s;
        float sum = 0.0f;
        for (I ki = 0; ki < (I)k; ki++)
            for (I kj = 0; kj < (I)k; kj++)
                sum += rt_ld(win + ki * (I)W + kj);
        rt_st(y + i, sum / div);
    }
}

/* dx = sum over the covering windows in (oh, ow) order of dy / (k*k) */
template <class X>
__device__ __forceinline__ void rt_avgpool_bwd_run(const act_t *dy, act_t *dx, int64_t planes,
                                                   int64_t H, int64_t W, int64_t k, int64_t s,
                                                   int64_t OH, int64_t OW, const rt_fdiv *fd)
{
    typedef typename X::I I;
    const I n = (I)(planes * H * W);
    const float div = (float)(k * k);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const rt_pool_in<X> p = rt_pool_input<X>(i, H, W, k, s, OH, OW, fd);
        float acc = 0.0f;
        for (I oh = p.oh0; oh <= p.oh1; oh++)
            for (I ow = p.ow0; ow <= p.ow1; ow++)
                acc += rt_ld(dy + (p.pl * (I)OH + oh) * (I)OW + ow) / div;
        rt_st(dx + i, acc);
    }
}

/* Launch: grid-stride over planes*OH*OW (forward) or planes*H*W (backward), blocks of
 * 256; f0, f1, f2 as the pooling kernels' fd above. */
extern "C" __global__ void __launch_bounds__(256)
rt_maxpool2d_fwd(const act_t *x, act_t *y, int64_t planes, int64_t H, int64_t W, int64_t k,
                 int64_t s, int64_t OH, int64_t OW, int wide, rt_fdiv f0, rt_fdiv f1, rt_fdiv f2)
{
    const rt_fdiv fd[3] = {f0, f1, f2};
    RT_BY_INDEX(rt_maxpool_fwd_run, x, y, planes, H, W, k, s, OH, OW, fd);
}

extern "C" __global__ void __launch_bounds__(256)
rt_maxpool2d_bwd(const act_t *x, const act_t *dy, act_t *dx, int64_t planes, int64_t H,
                 int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW, int wide, rt_fdiv f0,
                 rt_fdiv f1, rt_fdiv f2)
{
    const rt_fdiv fd[3] = {f0, f1, f2};
    RT_BY_INDEX(rt_maxpool_bwd_run, x, dy, dx, planes, H, W, k, s, OH, OW, fd);
}

/* Launch: grid-stride over planes*ceil(H/k)*ceil(W/k), blocks of 256, where s = k; f0,
 * f1 divide by ceil(W/k) and ceil(H/k). */
extern "C" __global__ void __launch_bounds__(256)
rt_maxpool2d_bwd_tiles(const act_t *x, const act_t *dy, act_t *dx, int64_t planes, int64_t H,
                       int64_t W, int64_t k, int64_t OH, int64_t OW, int wide, rt_fdiv f0,
                       rt_fdiv f1)
{
    const rt_fdiv fd[2] = {f0, f1};
    RT_BY_INDEX(rt_maxpool_bwd_tiles_run, x, dy, dx, planes, H, W, k, OH, OW, fd);
}

extern "C" __global__ void __launch_bounds__(256)
rt_avgpool2d_fwd(const act_t *x, act_t *y, int64_t planes, int64_t H, int64_t W, int64_t k,
                 int64_t s, int64_t OH, int64_t OW, int wide, rt_fdiv f0, rt_fdiv f1, rt_fdiv f2)
{
    const rt_fdiv fd[3] = {f0, f1, f2};
    RT_BY_INDEX(rt_avgpool_fwd_run, x, y, planes, H, W, k, s, OH, OW, fd);
}

extern "C" __global__ void __launch_bounds__(256)
rt_avgpool2d_bwd(const act_t *dy, act_t *dx, int64_t planes, int64_t H, int64_t W, int64_t k,
                 int64_t s, int64_t OH, int64_t OW, int wide, rt_fdiv f0, rt_fdiv f1, rt_fdiv f2)
{
    const rt_fdiv fd[3] = {f0, f1, f2};
    RT_BY_INDEX(rt_avgpool_bwd_run, dy, dx, planes, H, W, k, s, OH, OW, fd);
}

/* ---- conv2d with groups > 1 (grouped, depthwise): twins of runtime/conv_grouped.c ----
 * x [B, C, H, W], w [Cout, C / G, k, k] (fp32 parameters), y [B, Cout, OH, OW]; output
 * channel co reads the input channels of its group g = co / (Cout / G). Products and
 * sums in the CPU's order with __fmul_rn / __fadd_rn (no contraction into FMAs): the
 * forward pass and the input gradient are the CPU's bit for bit; the weight gradient
 * sums in double over the block (rt_block_sum's order), within rounding of the CPU's.
 * The forward pass and the input gradient split their indices as im2col does (the
 * section's head: divisions by multiplies where the host says `wide` is 0); the weight
 * gradient's blocks split theirs once, in 64 bits, its inner loop over a plane's
 * positions (OH*OW < 2^31) in 32. */

/* y[b, co, oh, ow] = sum over (ci, ki, kj) in order of w[co, ci, ki, kj] x[b, g Cg + ci,
 * oh s - pad + ki, ow s - pad + kj] (+ bias[co])   fd: OW, OH, Cout, Cout / G */
template <class X>
__device__ __forceinline__ void rt_gconv_fwd_run(const act_t *x, const float *w, const float *bias,
                                                 act_t *y, int64_t B, int64_t C, int64_t H,
                                                 int64_t W, int64_t k, int64_t s, int64_t pad,
                                                 int64_t OH, int64_t OW, int64_t Cout, int64_t G,
                                                 const rt_fdiv *fd)
{
    typedef typename X::I I;
    typedef typename X::S S;
    const I Cg = (I)(C / G), Cog = (I)(Cout / G), kk = (I)(k * k), hw = (I)(H * W);
    const I n = (I)(B * Cout) * (I)(OH * OW);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I pl, oh, ow;
        rt_split3<X>(i, OW, fd[0], OH, fd[1], &pl, &oh, &ow);
        I b = RT_Q(X, pl, fd[2], Cout), co = pl - b * (I)Cout;
        I g = RT_Q(X, co, fd[3], Cog);
        const act_t *xb = x + ((I)b * (I)C + g * Cg) * hw;
        const float *wc = w + co * Cg * kk;
        const S ih0 = (S)(oh * (I)s) - (S)pad, iw0 = (S)(ow * (I)s) - (S)pad;
        float acc = 0.0f;
        for (I ci = 0; ci < Cg; ci++)
            for (S ki = 0; ki < (S)k; ki++) {
                S ih = ih0 + ki;
                if (ih < 0 || ih >= (S)H)
                    continue;
                for (S kj = 0; kj < (S)k; kj++) {
                    S iw = iw0 + kj;
                    if (iw >= 0 && iw < (S)W)
                        acc = __fadd_rn(acc, __fmul_rn(wc[(ci * (I)k + (I)ki) * (I)k + (I)kj],
                                                       rt_ld(xb + ci * hw + (I)ih * (I)W + (I)iw)));
                }
            }
        rt_st(y + i, bias ? __fadd_rn(acc, bias[co]) : acc);
    }
}

/* Launch: grid-stride over the B*Cout*OH*OW outputs (blocks of 256); fd as
 * rt_gconv_fwd_run's. Overwrites y. */
extern "C" __global__ void __launch_bounds__(256)
rt_gconv_fwd(const act_t *x, const float *w, const float *bias, act_t *y, int64_t B, int64_t C,
             int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH, int64_t OW,
             int64_t Cout, int64_t G, int wide, rt_fdiv f0, rt_fdiv f1, rt_fdiv f2, rt_fdiv f3)
{
    const rt_fdiv fd[4] = {f0, f1, f2, f3};
    RT_BY_INDEX(rt_gconv_fwd_run, x, w, bias, y, B, C, H, W, k, s, pad, OH, OW, Cout, G, fd);
}

/* dx[b, ci, ih, iw] = sum over (co', ki, kj) in order of dy[b, co, oh, ow] w[co, c', ki, kj]
 * where oh s - pad + ki = ih (ow alike)   fd: W, H, C, C / G, s */
template <class X>
__device__ __forceinline__ void rt_gconv_bwd_data_run(const act_t *dy, const float *w, act_t *dx,
                                                      int64_t B, int64_t C, int64_t H, int64_t W,
                                                      int64_t k, int64_t s, int64_t pad,
                                                      int64_t OH, int64_t OW, int64_t Cout,
                                                      int64_t G, const rt_fdiv *fd)
{
    typedef typename X::I I;
    typedef typename X::S S;
    const I Cg = (I)(C / G), Cog = (I)(Cout / G), kk = (I)(k * k), ohw = (I)(OH * OW);
    const I n = (I)(B * C) * (I)(H * W);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I pl, ih, iw;
        rt_split3<X>(i, W, fd[0], H, fd[1], &pl, &ih, &iw);
        I b = RT_Q(X, pl, fd[2], C), ci = pl - b * (I)C;
        I g = RT_Q(X, ci, fd[3], Cg), cl = ci - g * Cg;
        float acc = 0.0f;
        for (I cq = 0; cq < Cog; cq++) {
            I co = g * Cog + cq;
            const act_t *dyp = dy + ((I)b * (I)Cout + co) * ohw;
            const float *wc = w + (co * Cg + cl) * kk;
            for (I ki = 0; ki < (I)k; ki++) {
                S th = (S)(ih + (I)pad) - (S)ki;   /* = oh s */
                if (th < 0)
                    break;
                I oh = RT_Q(X, (I)th, fd[4], s);
                if ((I)th != oh * (I)s || oh >= (I)OH)
                    continue;
                for (I kj = 0; kj < (I)k; kj++) {
                    S tw = (S)(iw + (I)pad) - (S)kj;
                    if (tw < 0)
                        break;
                    I ow = RT_Q(X, (I)tw, fd[4], s);
                    if ((I)tw != ow * (I)s || ow >= (I)OW)
                        continue;
                    acc = __fadd_rn(acc, __fmul_rn(rt_ld(dyp + oh * (I)OW + ow), wc[ki * (I)k + kj]));
                }
            }
        }
        rt_st(dx + i, acc);
    }
}

/* Launch: grid-stride over B*C*H*W (blocks of 256); fd as rt_gconv_bwd_data_run's.
 * Overwrites dx. */
extern "C" __global__ void __launch_bounds__(256)
rt_gconv_bwd_data(const act_t *dy, const float *w, act_t *dx, int64_t B, int64_t C, int64_t H,
                  int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH, int64_t OW,
                  int64_t Cout, int64_t G, int wide, rt_fdiv f0, rt_fdiv f1, rt_fdiv f2,
                  rt_fdiv f3, rt_fdiv f4)
{
    const rt_fdiv fd[5] = {f0, f1, f2, f3, f4};
    RT_BY_INDEX(rt_gconv_bwd_data_run, dy, w, dx, B, C, H, W, k, s, pad, OH, OW, Cout, G, fd);
}

/* Block j < Cout*Cg*k*k: dw[j] += sum over (b, oh, ow) of dy[b, co, oh, ow] x[b, c, ih, iw]
 * (each product in float, the sum in double); block Cout*Cg*k*k + co (when db != NULL):
 * db[co] += sum over (b, oh, ow) of dy. Launch: grid (Cout*Cg*k*k (+ Cout)), 256 threads. */
extern "C" __global__ void __launch_bounds__(256)
rt_gconv_bwd_weight(const act_t *x, const act_t *dy, float *dw, float *db, int64_t B, int64_t C,
                    int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                    int64_t OW, int64_t Cout, int64_t G)
{
    const int64_t Cg = C / G, Cog = Cout / G, nw = Cout * Cg * k * k;
    const int64_t j = blockIdx.x;
    const int ohw = (int)(OH * OW), ow_n = (int)OW;   /* a plane's positions: 32 bits */
    double acc = 0.0;
    if (j < nw) {
        int64_t co = j / (Cg * k * k), cl = j / (k * k) % Cg, ki = j / k % k, kj = j % k;
        int64_t cx = co / Cog * Cg + cl;
        for (int64_t b = 0; b < B; b++) {
            const act_t *dyp = dy + (b * Cout + co) * ohw, *xp = x + (b * C + cx) * H * W;
            for (int q = threadIdx.x; q < ohw; q += blockDim.x) {
                int oh = q / ow_n, ow = q - oh * ow_n;
                int64_t ih = oh * s - pad + ki, iw = ow * s - pad + kj;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    acc += (double)__fmul_rn(rt_ld(dyp + q), rt_ld(xp + ih * W + iw));
            }
        }
    } else {
        int64_t co = j - nw;
        for (int64_t b = 0; b < B; b++)
            for (int q = threadIdx.x; q < ohw; q += blockDim.x)
                acc += (double)rt_ld(dy + (b * Cout + co) * ohw + q);
    }
    acc = rt_block_sum(acc);
    if (threadIdx.x == 0) {
        if (j < nw)
            dw[j] += (float)acc;
        else
            db[j - nw] += (float)acc;
    }
}

/* ---- conv2d with groups 1 without im2col's columns: twins of runtime/conv.c ----------
 * The GEMM path (im2col, a GEMM, col2im) writes and reads a column matrix of C*k*k rows
 * and B*OH*OW columns; these kernels compute the same products from x and dy in place
 * (cuda_ops.c decides by shape which path a call takes). Layouts are the GEMM path's:
 * yt and dyt [Cout, B*OH*OW] (the epilogue and the transposition around the calls stay
 * as they are), w [Cout, C*k*k] fp32, x and dx [B, C, H, W]. fp32 accumulation, a fixed
 * order for every sum (no atomics): each call gives the same bits on every run and
 * every GPU. */

/* Direct forward for few input values a window (C*k*k <= RT_CONV_DIRECT_KK, the first
 * layer: a GEMM of K = 9 for one grey channel): yt[co, p] = sum over j = (ci, ki, kj) in
 * order of w[co, j] x_p[j] (x_p: position p's window, 0 outside the image), each
 * product and sum rounded (__fmul_rn, __fadd_rn). A thread takes one position and
 * RT_CONV_DIRECT_CO output channels: the window is read once into registers, the
 * weights (Cout*C*k*k <= RT_CONV_DIRECT_W) once a block into shared memory. Launch:
 * grid-stride over ceil(Cout / RT_CONV_DIRECT_CO) * B*OH*OW (positions fastest: a
 * warp's stores to a row of yt are consecutive), blocks of 256. */
#define RT_CONV_DIRECT_KK 32
#define RT_CONV_DIRECT_W 4096
#define RT_CONV_DIRECT_CO 8

/* A window's offsets j < C*k*k: tab[0][j] = ci H W + ki W + kj, its place from the
 * window's corner in the image; tab[1][j] = ki, tab[2][j] = kj. Worked out once a
 * block (no division per element); C H W < 2^31 (the host's rule), so 32 bits. */
__device__ __forceinline__ void rt_conv_taps(int (*tab)[RT_CONV_DIRECT_KK], int C, int k, int H,
                                             int W)
{
    for (int j = threadIdx.x; j < C * k * k; j += blockDim.x) {
        const int ci = j / (k * k), ki = j / k % k, kj = j % k;
        tab[0][j] = (ci * H + ki) * W + kj;
        tab[1][j] = ki;
        tab[2][j] = kj;
    }
}

/* position p's window into xv (j < C*k*k, the rest 0): a window inside the image
 * loads without a test, one on its edge tests each element. p < 2^31 splits in 32 bits. */
__device__ __forceinline__ void rt_conv_window(const act_t *x, int64_t p, int64_t C, int64_t H,
                                               int64_t W, int64_t s, int64_t pad, int64_t OH,
                                               int64_t OW, const int (*tab)[RT_CONV_DIRECT_KK],
                                               int k, int ckk, float *xv)
{
    int64_t b;
    int oh, ow;
    if (p <= 0x7fffffff && OH * OW <= 0x7fffffff) {
        const unsigned up = (unsigned)p, ohw = (unsigned)(OH * OW), q = up % ohw;
        b = up / ohw, oh = (int)(q / (unsigned)OW), ow = (int)(q % (unsigned)OW);
    } else {
        const int64_t q = p % (OH * OW);
        b = p / (OH * OW), oh = (int)(q / OW), ow = (int)(q % OW);
    }
    const int ih0 = oh * (int)s - (int)pad, iw0 = ow * (int)s - (int)pad;
    const act_t *xb = x + b * C * H * W;
    const int c0 = ih0 * (int)W + iw0;   /* the corner's place (negative off the image) */
    if (ih0 >= 0 && iw0 >= 0 && ih0 + k <= H && iw0 + k <= W) {
#pragma unroll
        for (int j = 0; j < RT_CONV_DIRECT_KK; j++)
            xv[j] = j < ckk ? rt_ld(xb + (c0 + tab[0][j])) : 0.0f;
        return;
    }
#pragma unroll
    for (int j = 0; j < RT_CONV_DIRECT_KK; j++) {
        const int ih = ih0 + tab[1][j], iw = iw0 + tab[2][j];
        xv[j] = j < ckk && ih >= 0 && ih < H && iw >= 0 && iw < W ? rt_ld(xb + (c0 + tab[0][j]))
                                                                   : 0.0f;
    }
}

extern "C" __global__ void __launch_bounds__(256)
rt_conv_direct_fwd(const act_t *x, const float *w, act_t *yt, int64_t B, int64_t C, int64_t H,
                   int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH, int64_t OW,
                   int64_t Cout)
{
    __shared__ float ws[RT_CONV_DIRECT_W];
    __shared__ int tab[3][RT_CONV_DIRECT_KK];
    const int ckk = (int)(C * k * k);
    for (int j = threadIdx.x; j < Cout * ckk; j += blockDim.x)
        ws[j] = w[j];
    rt_conv_taps(tab, (int)C, (int)k, (int)H, (int)W);
    __syncthreads();
    const int64_t np = B * OH * OW, n = (Cout + RT_CONV_DIRECT_CO - 1) / RT_CONV_DIRECT_CO * np;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t cg = i / np, p = i - cg * np;
        float xv[RT_CONV_DIRECT_KK];
        rt_conv_window(x, p, C, H, W, s, pad, OH, OW, tab, (int)k, ckk, xv);
        for (int64_t co = cg * RT_CONV_DIRECT_CO; co < (cg + 1) * RT_CONV_DIRECT_CO && co < Cout;
             co++) {
            const float *wc = ws + co * ckk;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < RT_CONV_DIRECT_KK; j++)
                if (j < ckk)
                    acc = __fadd_rn(acc, __fmul_rn(wc[j], xv[j]));
            rt_st(yt + co * np + p, acc);
        }
    }
}

/* Direct weight gradient for the same shapes: dw[co, j] += sum over positions p of
 * dyt[co, p] x_p[j]. Block (slice, co) takes positions [slice L, slice L + L): each
 * thread sums its positions (a stride of 256, L / 256 of them) in fp32, rt_block_sum
 * adds the threads in double, and part[(co * S + slice) * C*k*k + j] keeps the slice's
 * sums; rt_conv_direct_dw_sum adds a weight's S slices in order. Every sum's order
 * follows the shape (L, S: the host's choice from the shape alone). Launch: grid (S,
 * Cout), 256 threads. */
extern "C" __global__ void __launch_bounds__(256)
rt_conv_direct_dw_part(const act_t *x, const act_t *dyt, double *part, int64_t B, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                       int64_t OW, int64_t L)
{
    __shared__ int tab[3][RT_CONV_DIRECT_KK];
    const int ckk = (int)(C * k * k);
    rt_conv_taps(tab, (int)C, (int)k, (int)H, (int)W);
    __syncthreads();
    const int64_t np = B * OH * OW, co = blockIdx.y, p0 = (int64_t)blockIdx.x * L;
    const int64_t p1 = p0 + L < np ? p0 + L : np;
    float acc[RT_CONV_DIRECT_KK];
#pragma unroll
    for (int j = 0; j < RT_CONV_DIRECT_KK; j++)
        acc[j] = 0.0f;
    for (int64_t p = p0 + threadIdx.x; p < p1; p += blockDim.x) {
        float xv[RT_CONV_DIRECT_KK];
        rt_conv_window(x, p, C, H, W, s, pad, OH, OW, tab, (int)k, ckk, xv);
        const float g = rt_ld(dyt + co * np + p);
#pragma unroll
        for (int j = 0; j < RT_CONV_DIRECT_KK; j++)
            acc[j] = __fadd_rn(acc[j], __fmul_rn(g, xv[j]));
    }
    double *out = part + (co * gridDim.x + blockIdx.x) * ckk;
#pragma unroll
    for (int j = 0; j < RT_CONV_DIRECT_KK; j++)
        if (j < ckk) {   /* ckk is the block's: every thread takes the barriers */
            double t = rt_block_sum((double)acc[j]);
            if (threadIdx.x == 0)
                out[j] = t;
        }
}

/* dw[i] += (float)(sum over slices in order of part[(co * S + slice) * C*k*k + j]),
 * i = co * C*k*k + j. Launch: grid-stride over Cout*C*k*k, blocks of 256. */
extern "C" __global__ void __launch_bounds__(256)
rt_conv_direct_dw_sum(const double *part, float *dw, int64_t n, int64_t ckk, int64_t S)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t co = i / ckk, j = i - co * ckk;
        double t = 0.0;
        for (int64_t sl = 0; sl < S; sl++)
            t += part[(co * S + sl) * ckk + j];
        dw[i] += (float)t;
    }
}

/* Implicit-GEMM input gradient for stride 1 (no col2im): dx[b, c, ih, iw] = sum over
 * taps t = (ki, kj) in order, then output channels co in order, of w[co, c, ki, kj]
 * dyt[co, (b, ih + pad - ki, iw + pad - kj)] (terms outside dy left out), fused
 * multiply-adds (fmaf, exact on the GPU and in the emulators) into an fp32 accumulator. The GEMM dx^T [P, C] = G [P, K]
 * w' [K, C] with P = B*H*W positions, K = k*k*Cout and G gathered from dyt as it is
 * used. A block takes a tile of RT_IG_P positions x RT_IG_C channels and walks K in
 * chunks of RT_IG_K output channels of one tap: both operands' chunks in shared memory,
 * each thread 4 positions (32 apart) x 4 channels. Launch: grid (ceil(P / RT_IG_P),
 * ceil(C / RT_IG_C)), 256 threads. Overwrites dx. */
#define RT_IG_P 128
#define RT_IG_C 32
#define RT_IG_K 16
extern "C" __global__ void __launch_bounds__(256)
rt_conv_igemm_dx(const float *w, const act_t *dyt, act_t *dx, int64_t B, int64_t C, int64_t H,
                 int64_t W, int64_t k, int64_t pad, int64_t OH, int64_t OW, int64_t Cout)
{
    __shared__ float gs[RT_IG_K][RT_IG_P];
    __shared__ __align__(16) float wsh[RT_IG_K][RT_IG_C];
    const int tid = threadIdx.x, tx = tid & 31, ty = tid >> 5;
    const int64_t hw = H * W, np = B * hw, ohw = OH * OW, ncol = B * ohw, kk = k * k;
    const int64_t pt = (int64_t)blockIdx.x * RT_IG_P, c0 = (int64_t)blockIdx.y * RT_IG_C;
    /* the position this thread gathers for (rows tid / RT_IG_P + 2 r of a chunk) */
    const int lp = tid & (RT_IG_P - 1), lr = tid / RT_IG_P;
    const int64_t gp = pt + lp, gb = gp / hw, gq = gp - gb * hw, gih = gq / W, giw = gq - gih * W;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int jj = 0; jj < 4; jj++)
            acc[i][jj] = 0.0f;
    for (int64_t t = 0; t < kk; t++) {
        const int64_t ki = t / k, kj = t - ki * k, oh = gih + pad - ki, ow = giw + pad - kj;
        const int64_t off = gp < np && oh >= 0 && oh < OH && ow >= 0 && ow < OW
                                ? gb * ohw + oh * OW + ow
                                : -1;
        for (int64_t co0 = 0; co0 < Cout; co0 += RT_IG_K) {
            __syncthreads();   /* the last chunk's readers are done */
            for (int r = lr; r < RT_IG_K; r += 256 / RT_IG_P) {
                const int64_t co = co0 + r;
                gs[r][lp] = off >= 0 && co < Cout ? rt_ld(dyt + co * ncol + off) : 0.0f;
            }
            for (int e = tid; e < RT_IG_K * RT_IG_C; e += 256) {
                const int r = e / RT_IG_C, cc = e - r * RT_IG_C;
                const int64_t co = co0 + r, c = c0 + cc;
                wsh[r][cc] = co < Cout && c < C ? w[(co * C + c) * kk + t] : 0.0f;
            }
            __syncthreads();
            const int64_t nr = Cout - co0 < RT_IG_K ? Cout - co0 : RT_IG_K;
            for (int r = 0; r < nr; r++) {
                const float4 wv = *(const float4 *)&wsh[r][ty * 4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float g = gs[r][tx + 32 * i];
                    acc[i][0] = fmaf(g, wv.x, acc[i][0]);
                    acc[i][1] = fmaf(g, wv.y, acc[i][1]);
                    acc[i][2] = fmaf(g, wv.z, acc[i][2]);
                    acc[i][3] = fmaf(g, wv.w, acc[i][3]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t p = pt + tx + 32 * i;
        if (p >= np)
            continue;
        const int64_t b = p / hw, q = p - b * hw;
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            const int64_t c = c0 + ty * 4 + jj;
            if (c < C)
                rt_st(dx + (b * C + c) * hw + q, acc[i][jj]);
        }
    }
}

#if defined(RT_ACT_BF16) || defined(RT_ACT_F16)
/* Implicit GEMMs on the tensor cores (16-bit activations). The forward: the GEMM path's
 * yt [Cout, P] = w [Cout, K] col [K, P] (K = C*k*k, P = B*OH*OW, any stride) without
 * col. The input gradient at stride 1: dx [B, C, H, W] = the convolution of dyt with
 * the weights' taps reversed and their two channel axes swapped, padding k - 1 - pad
 * (dx[b, c, ih, iw] = sum over (co, t') of w[co, c, k*k - 1 - t'] dyt[co, (b, ih - k + 1
 * + pad + ki', iw - k + 1 + pad + kj')]), without dcol and col2im. Both are M output
 * channels x P positions of one gather: a block takes RT_TG_M channels x RT_TG_N
 * positions and walks K in chunks of RT_TG_K, the chunk of w rounded to 16 bits (the
 * GEMM path's operand: the parameter's 16-bit copy holds the same values) and the
 * positions' window values, both in shared memory as 16-bit rows (K contiguous, 8
 * values of padding: the eight rows an ldmatrix reads hit distinct banks), then
 * mma.sync m16n8k16 with fp32 accumulators (common.cuh's rt_tc_mma). Four warps,
 * 2 x 2 over the tile: each 32 channels x 64 positions. A thread gathers one
 * position's window: (channel, ki, kj) advanced with carries along the chunk, no
 * division an element. The sums run in the tensor cores' order: within rounding of
 * the CPU's, as cuBLASLt's are.
 * in: the gathered tensor, images ims apart, its Cg channels chs apart, each Hg x Wg;
 * out: [M, P] (the forward's yt) or [B, M, Ho, Wo] (dx). */

/* the next window value's (channel, ki, kj) */
__device__ __forceinline__ void conv_tc_next(int64_t &ci, int64_t &ki, int64_t &kj, int64_t k)
{
    if (++kj == k) {
        kj = 0;
        if (++ki == k) {
            ki = 0;
            ci++;
        }
    }
}

template <bool DX>
__device__ __forceinline__ void conv_tc(const act_t *in, const float *w, act_t *out, int64_t B,
                                        int64_t Cg, int64_t Hg, int64_t Wg, int64_t k, int64_t s,
                                        int64_t pad, int64_t Ho, int64_t Wo, int64_t M,
                                        int64_t chs, int64_t ims)
{
    __shared__ __align__(16) unsigned short as[RT_TG_M][RT_TG_K + 8];
    __shared__ __align__(16) unsigned short bs[RT_TG_N][RT_TG_K + 8];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    const int64_t ohw = Ho * Wo, np = B * ohw, kk = k * k, K = Cg * kk;
    const int64_t p0 = (int64_t)blockIdx.x * RT_TG_N, c0 = (int64_t)blockIdx.y * RT_TG_M;
    /* this thread's position (tid < RT_TG_N): its window's corner and image */
    const int64_t p = p0 + tid, b = p / ohw, q = p - b * ohw, oh = q / Wo, ow = q - oh * Wo;
    const int64_t ih0 = oh * s - pad, iw0 = ow * s - pad;
    const unsigned short *xb = (const unsigned short *)in + b * ims;
    float acc[2][8][4];
    rt_tc_clear(acc);
    for (int64_t j0 = 0; j0 < K; j0 += RT_TG_K) {
        __syncthreads();   /* the last chunk's readers are done */
        for (int e = tid; e < RT_TG_M * RT_TG_K; e += 128) {
            const int r = e / RT_TG_K, c = e - r * RT_TG_K;
            const int64_t m = c0 + r, j = j0 + c;
            float v = 0.0f;
            if (m < M && j < K) {
                if (DX) {   /* j = (co, t'): w[co, m, k*k - 1 - t'] */
                    const int64_t co = j / kk, t = j - co * kk;
                    v = w[(co * M + m) * kk + kk - 1 - t];
                } else {
                    v = w[m * K + j];
                }
            }
            as[r][c] = rt_float_act16(v);
        }
        /* position tid's window values j0 .. j0 + RT_TG_K - 1 */
        int64_t ci = j0 / kk, ki = (j0 - ci * kk) / k, kj = j0 - ci * kk - ki * k;
        for (int c = 0; c < RT_TG_K; c++) {
            const int64_t ih = ih0 + ki, iw = iw0 + kj;
            bs[tid][c] = p < np && ci < Cg && ih >= 0 && ih < Hg && iw >= 0 && iw < Wg
                             ? xb[ci * chs + ih * Wg + iw]
                             : (unsigned short)0;
            conv_tc_next(ci, ki, kj, k);
        }
        __syncthreads();
        rt_tc_mma(acc, as, bs, wm, wn, lane);
    }
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int64_t pp = p0 + 64 * wn + 8 * n + 2 * t4 + u;
            if (pp >= np)
                continue;
            const int64_t pb = pp / ohw, o = DX ? pb * M * ohw + (pp - pb * ohw) : pp;
            const int64_t ld = DX ? ohw : np;   /* between two channels of out */
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t m = c0 + 32 * wm + 16 * i + g + 8 * h;
                    if (m < M)
                        rt_st(out + m * ld + o, acc[i][n][2 * h + u]);
                }
        }
}

/* The weight gradient on the tensor cores: dw [Cout, K] += dyt [Cout, P] col^T [P, K]
 * without col, P split into slices of L positions (the host's choice from the shape
 * alone, as rt_conv_direct_dw_part's). Block (slice, n tile, m tile) takes RT_TG_M
 * output channels x RT_TG_N window values j and walks its slice in chunks of RT_TG_K
 * positions: dyt's rows (16-bit, copied) and the positions' values x_p[j] gathered
 * from x, both in shared memory with the positions contiguous, then mma.sync into fp32
 * accumulators; the slice's sums go to part[(co * S + slice) * K + j] (double, the
 * direct kernels' layout), which rt_conv_direct_dw_sum adds into dw in slice order. A
 * warp of the gather takes one chunk's 32 positions (lane = position, so a warp's
 * loads of one j run along a row of x) and 32 of the tile's j, (ci, ki, kj) advanced
 * with carries. Launch: grid (S, ceil(K / RT_TG_N), ceil(Cout / RT_TG_M)), 128
 * threads. */
extern "C" __global__ void __launch_bounds__(128)
rt_conv_igemm_dw_tc(const act_t *x, const act_t *dyt, double *part, int64_t B, int64_t C,
                    int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                    int64_t OW, int64_t Cout, int64_t L)
{
    __shared__ __align__(16) unsigned short as[RT_TG_M][RT_TG_K + 8];
    __shared__ __align__(16) unsigned short bs[RT_TG_N][RT_TG_K + 8];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    const int64_t ohw = OH * OW, np = B * ohw, kk = k * k, K = C * kk, hw = H * W;
    const int64_t S = gridDim.x, pa = (int64_t)blockIdx.x * L, pz = pa + L < np ? pa + L : np;
    const int64_t n0 = (int64_t)blockIdx.y * RT_TG_N, c0 = (int64_t)blockIdx.z * RT_TG_M;
    const unsigned short *dy = (const unsigned short *)dyt, *xs = (const unsigned short *)x;
    /* this thread's 32 window values j of the tile, from (ci, ki, kj) of its first */
    const int64_t jf = n0 + 32 * warp, ci0 = jf / kk, ki0 = (jf - ci0 * kk) / k;
    const int64_t kj0 = jf - ci0 * kk - ki0 * k;
    float acc[2][8][4];
    rt_tc_clear(acc);
    for (int64_t q0 = pa; q0 < pz; q0 += RT_TG_K) {
        __syncthreads();   /* the last chunk's readers are done */
        for (int e = tid; e < RT_TG_M * RT_TG_K; e += 128) {
            const int r = e / RT_TG_K, c = e - r * RT_TG_K;
            const int64_t co = c0 + r, pp = q0 + c;
            as[r][c] = co < Cout && pp < pz ? dy[co * np + pp] : (unsigned short)0;
        }
        /* position q0 + lane's window corner, then its values for this warp's j */
        const int64_t p = q0 + lane, b = p / ohw, q = p - b * ohw, oh = q / OW, ow = q - oh * OW;
        const int64_t ih0 = oh * s - pad, iw0 = ow * s - pad;
        const unsigned short *xb = xs + b * C * hw;
        int64_t ci = ci0, ki = ki0, kj = kj0;
        for (int c = 0; c < 32; c++) {
            const int64_t ih = ih0 + ki, iw = iw0 + kj;
            bs[32 * warp + c][lane] = p < pz && ci < C && ih >= 0 && ih < H && iw >= 0 && iw < W
                                          ? xb[ci * hw + ih * W + iw]
                                          : (unsigned short)0;
            conv_tc_next(ci, ki, kj, k);
        }
        __syncthreads();
        rt_tc_mma(acc, as, bs, wm, wn, lane);
    }
    rt_tc_each(acc, wm, wn, lane, [&](int m, int n, float v) {
        const int64_t co = c0 + m, j = n0 + n;
        if (co < Cout && j < K)
            part[(co * S + blockIdx.x) * K + j] = v;
    });
}

/* Launch: grid (ceil(B*OH*OW / RT_TG_N), ceil(Cout / RT_TG_M)), 128 threads. Overwrites yt. */
extern "C" __global__ void __launch_bounds__(128)
rt_conv_igemm_fwd_tc(const act_t *x, const float *w, act_t *yt, int64_t B, int64_t C, int64_t H,
                     int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH, int64_t OW,
                     int64_t Cout)
{
    conv_tc<false>(x, w, yt, B, C, H, W, k, s, pad, OH, OW, Cout, H * W, C * H * W);
}

/* Stride 1. Launch: grid (ceil(B*H*W / RT_TG_N), ceil(C / RT_TG_M)), 128 threads.
 * Overwrites dx. */
extern "C" __global__ void __launch_bounds__(128)
rt_conv_igemm_dx_tc(const float *w, const act_t *dyt, act_t *dx, int64_t B, int64_t C, int64_t H,
                    int64_t W, int64_t k, int64_t pad, int64_t OH, int64_t OW, int64_t Cout)
{
    conv_tc<true>(dyt, w, dx, B, Cout, OH, OW, k, 1, k - 1 - pad, H, W, C, B * OH * OW, OH * OW);
}
#endif
