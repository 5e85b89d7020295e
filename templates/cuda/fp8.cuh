/* fp8.cuh: fp8-mixed's casts, for cuda_blas.c's FP8 GEMMs of the linear layers: the
 * absolute maximum of a 16-bit operand (act_t), then its cast to FP8 (E4M3 for weights
 * and activations, E5M2 for gradients) scaled per tensor from that maximum, as
 * torchao's float8 "tensorwise" recipe does: s = FP8_MAX / amax (448 for E4M3, 57344
 * for E5M2; an amax of 0, or not finite, gives s = 1), q = fp8(x s) rounded to nearest,
 * ties to even, saturated to +-FP8_MAX (NaN stays NaN). The cast writes the
 * dequantization factor 1/s to device memory, where cuBLASLt's A/B scale pointers read
 * it: nothing goes through the host, so the step can run as a CUDA graph.
 *
 * The conversion is written as bit operations: NVRTC has no cuda_fp8.h built in (a
 * trainer compiles its kernels without the toolkit's headers), and the CPU emulator
 * (tests/gpu/emu) runs the same code. tests/gpu/check_ops.c holds both kernels against
 * a C twin that picks the nearest of the 256 codes by search.
 *
 * The maximum of most operands comes from the kernel that produced them, which folds
 * it into a slot as it writes (common.cuh's rt_fp8_amax_out, compiled into fp8-mixed's
 * instances only, under RT_FP8): the weights' from the optimizer step that rewrote
 * their 16-bit copy (one partial a chunk, optim.cuh; rt_fp8_chunk_amax once after the
 * copy is made from the host: the start, a resume, --init, a ZeRO-1 gather); the
 * activations' and gradients' from the fused elementwise kernels, the norms and the
 * bias-and-activation epilogue (rt_bias_act) that wrote them. rt_fp8_amax is the pass
 * left for the others: an operand that cuBLASLt wrote (a GEMM's output without our
 * epilogue kernel) or whose writer folds nothing (docs/cuda.md lists them). The cast
 * reads either the same way: nparts partial maxima (a slot is one). */

#define RT_FP8_PARTS 256   /* rt_fp8_amax's blocks at most: the partial maxima */

/* FP8 bits of f (e5m2: E5M2, else E4M3 "fn": no infinities, NaN 0x7f), satfinite */
__device__ __forceinline__ unsigned char rt_fp8_bits(float f, int e5m2)
{
    const int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const float top = e5m2 ? 57344.0f : 448.0f;
    const unsigned u = __float_as_uint(f), s = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (unsigned char)(s | 0x7fu);
    if (__uint_as_float(a) >= top)   /* (infinity too) */
        return (unsigned char)(s | (e5m2 ? 0x7bu : 0x7eu));
    const int ex = (int)(a >> 23) - 127;
    unsigned r;
    int sh;
    if (ex < 1 - bias) {
        /* subnormal in FP8: units of 2^(1 - bias - mb); the float's implicit bit made
         * explicit (a float subnormal is far below half a unit: 0) */
        sh = 23 + (1 - bias - ex) - mb;
        if (ex == -127 || sh > 31)
            return (unsigned char)s;
        const unsigned m = (a & 0x7fffffu) | 0x800000u;
        r = m >> sh;
        const unsigned rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;   /* 2^mb units: the smallest normal's code, as it should */
        return (unsigned char)(s | r);
    }
    sh = 23 - mb;
    r = (unsigned)(ex + bias) << mb | (a & 0x7fffffu) >> sh;
    const unsigned rem = a & ((1u << sh) - 1u), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1u)))
        r++;       /* a carry into the exponent is the next binade: still below top */
    return (unsigned char)(s | r);
}

/* Launch: 256 threads, at most RT_FP8_PARTS blocks, grid-stride. part[blockIdx.x] =
 * max |x[i, j]| over the block's share of i < rows, j < cols (rows ld apart); with fold,
 * that folded into the slot part[0] instead (as a producer's rt_fp8_amax_out would). */
extern "C" __global__ void __launch_bounds__(256)
rt_fp8_amax(const act_t *x, int64_t rows, int64_t cols, int64_t ld, float *part, int fold)
{
    float m = 0.0f;
    const int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = ld == cols ? i : i / cols * ld + i % cols;
        m = fmaxf(m, fabsf(rt_ld(x + k)));
    }
    m = rt_block_max(m);
    if (threadIdx.x == 0 && fold)
        atomicMax((unsigned *)part, __float_as_uint(m));
    else if (threadIdx.x == 0)
        part[blockIdx.x] = m;
}

/* Launch: 256 threads (a 32 x 8 layout over 32 x 32 tiles), any number of blocks,
 * after rt_fp8_amax or the tensor's producers wrote nparts partials (a slot: 1). Every
 * block takes amax = max(part), s as above; block 0 writes scale[0] = amax, scale[1] =
 * 1 / s. Then for i < rows, j < cols:
 *   trans 0: y[i * cols + j] = q(x[i * ld + j])     (y [rows, cols], packed)
 *   trans 1: y[j * rows + i] = q(x[i * ld + j])     (y [cols, rows], packed)
 *   trans 2: both, y as trans 0 and yt as trans 1 (a linear layer's dy, read by its two
 *            backward GEMMs: one maximum, one cast; the same bytes as the two casts)
 * the transpose through shared memory, so reads and writes both go along rows. yt is
 * read only with trans 2. */
extern "C" __global__ void __launch_bounds__(256)
rt_fp8_cast(const act_t *x, int64_t rows, int64_t cols, int64_t ld, const float *part,
            int nparts, int e5m2, int trans, unsigned char *y, unsigned char *yt,
            float *scale)
{
    __shared__ unsigned char tile[32][33];
    float amax = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        amax = fmaxf(amax, part[i]);
    amax = rt_block_max(amax);
    const float s = amax > 0.0f && amax < rt_inf() ? (e5m2 ? 57344.0f : 448.0f) / amax : 1.0f;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        scale[0] = amax;
        scale[1] = 1.0f / s;
    }
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int64_t tc = (cols + 31) / 32, tiles = (rows + 31) / 32 * tc;
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int64_t r0 = t / tc * 32, c0 = t % tc * 32;
        for (int k = ty; k < 32; k += 8) {
            const int64_t r = r0 + k, c = c0 + tx;
            const bool in = r < rows && c < cols;
            const unsigned char q = in ? rt_fp8_bits(rt_ld(x + r * ld + c) * s, e5m2) : 0;
            if (trans)
                tile[k][tx] = q;
            if (trans != 1 && in)
                y[r * cols + c] = q;
        }
        if (!trans)
            continue;
        __syncthreads();
        for (int k = ty; k < 32; k += 8) {
            const int64_t c = c0 + k, r = r0 + tx;
            if (c < cols && r < rows)
                (trans == 2 ? yt : y)[c * rows + r] = tile[tx][k];
        }
        __syncthreads();   /* the tile is written again for the next one */
    }
}

/* optim.cuh's rt_opt_chunk, as cuda_ops.c lays out the table (this file comes first) */
struct rt_fp8_chunk {
    int64_t off;   /* first element, from the start of the parameter region */
    int len;
    int flags;
};

/* Launch: grid (chunks), 256 threads. amax[c] = max |pc| over chunk c: the weights'
 * partial maxima (as fp8-mixed's rt_adamw and rt_sgd store them) for a 16-bit copy made
 * from the host's parameters (rt_param_copy): once at the start, after a resume or
 * --init, a ZeRO-1 gather. */
extern "C" __global__ void __launch_bounds__(256)
rt_fp8_chunk_amax(const act_t *pc, const rt_fp8_chunk *chunks, float *amax)
{
    const rt_fp8_chunk ck = chunks[blockIdx.x];
    float m = 0.0f;
    for (int k = threadIdx.x; k < ck.len; k += blockDim.x)
        m = fmaxf(m, fabsf(rt_ld(pc + ck.off + k)));
    m = rt_block_max(m);
    if (threadIdx.x == 0)
        amax[blockIdx.x] = m;
}
