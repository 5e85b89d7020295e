/* epilogue.cuh: a linear layer's GEMM epilogue as a kernel of its own, for when
 * cuBLASLt cannot take it (cuda_blas.c's rt_cu_gemm_bias and rt_cu_gemm_dgelu fall back
 * here, or TRAINC_GEMM_EPILOGUE=0 asks for it): the arithmetic of the fused elementwise
 * kernel "+ bias (+ act)" or "+ bias + residual" (rt_gemm_bias in runtime/kernels.c on
 * the CPU), in cuBLASLt's order, and of "gelu (tanh) backward" (rt_gemm_dgelu); the
 * add of a bias gradient that cuBLASLt's BGRADB epilogue stored in scratch; and the sum
 * of a K-sliced weight gradient's partial products (cuda_blas.c's ksplit_gemm). */

/* Launch: grid-stride, 256 threads. For i < M, j < N, at k = i * ldc + j:
 *   v = out[k] (+ R[k]) + bias[j];  C[k] = v (C not NULL);  Y[k] = act(v) (act: 1 ReLU,
 *   2 GELU tanh)
 * out is C or Y (the GEMM's product, overwritten in place); R (NULL: none) is a
 * residual, added before the bias as cuBLASLt adds its beta C. fp8-mixed's instance
 * folds the maximum of the output (Y, or C without act) into amax_slot, as rt_dgelu
 * does D's (common.cuh's RT_FP8_SLOT). */
extern "C" __global__ void __launch_bounds__(256)
rt_bias_act(const act_t *out, const act_t *R, act_t *C, act_t *Y, const float *bias, int64_t M,
            int64_t N, int64_t ldc, int act RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
    const bool narrow = M * N <= 0x7fffffff;   /* 32-bit remainders (a 64-bit one is slow) */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * N;
         i += (int64_t)gridDim.x * blockDim.x) {
        /* rows packed (ldc == N, the usual case): no division for k */
        const int64_t j = narrow ? (int64_t)((unsigned)i % (unsigned)N) : i % N;
        const int64_t k = ldc == N ? i : i / N * ldc + j;
        float v = rt_ld(out + k);
        if (R)
            v = v + rt_ld(R + k);
        v = v + bias[j];
        if (C)
            rt_st(C + k, v);
        if (act == 1)
            v = v < 0.0f ? 0.0f : v;   /* NaN stays NaN, as torch.relu */
        else if (act == 2)
            v = rt_gelu_tanh(v);
        if (act)
            rt_st(Y + k, v);
        RT_FP8_FOLD(v);   /* (the output: Y, or C without act) */
    }
    RT_FP8_FOLD_END();
}

/* Launch: grid-stride, 256 threads. For i < M, j < N, at k = i * ld + j:
 *   D[k] = rt_gelu_tanh_bwd(pre[k], D[k])
 * D holds the GEMM's product (the gradient at the GELU's output), overwritten in place
 * by the gradient at its input; pre is the GELU's input. */
extern "C" __global__ void __launch_bounds__(256)
rt_dgelu(act_t *D, const act_t *pre, int64_t M, int64_t N, int64_t ld RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * N;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = ld == N ? i : i / N * ld + i % N;
        const float d = rt_gelu_tanh_bwd(rt_ld(pre + k), rt_ld(D + k));
        rt_st(D + k, d);
        RT_FP8_FOLD(d);
    }
    RT_FP8_FOLD_END();
}

/* Launch: grid-stride, 256 threads. y[i] += x[i] for i < n (fp32: a bias gradient). */
extern "C" __global__ void __launch_bounds__(256)
rt_add_into(const float *x, float *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

/* Launch: blocks of 32 x 8 threads, ceil(n / 32) of them, n = M N (+ M with db). For
 * i < M, j < N, at k = i * ldc + j:
 *   C[k] = beta C[k] + the sum over s < parts of part[s * ps + i * N + j]
 * and, with db (not NULL), for i < M:
 *   db[i] = (store ? 0 : db[i]) + the sum over s < parts of bpart[s * bs + i]
 * The partial products of a K-sliced GEMM (cuda_blas.c's ksplit_gemm), fp32, ps >= M N
 * apart, into a parameter gradient (fp32), and the partial sums of dy its BGRADB
 * epilogue stored, bs >= M apart, into the bias gradient; beta 0 stores without
 * reading C. A block takes 32 sums, each over its 8 rows of threads: row y adds the
 * partials s = y, y + 8, ... in order (a warp reads 32 neighbours: 128 bytes), then
 * row 0 adds the 8 rows' sums in row order. The order depends on the shape only: the
 * same bits every step. (A thread a sum, the partials one after another, left a 64 x
 * 64 gradient of 128 slices 16 blocks for the whole GPU: 28 us a sum on an H100.) */
extern "C" __global__ void __launch_bounds__(256)
rt_ksplit_sum(const float *part, float *C, int64_t parts, int64_t ps, int64_t M, int64_t N,
              int64_t ldc, float beta, const float *bpart, float *db, int64_t bs, int store)
{
    __shared__ float rows[8][33];
    const int64_t mn = M * N, n = mn + (db ? M : 0);
    const int64_t i = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (i < n) {
        const float *x = i < mn ? part + i : bpart + (i - mn);
        const int64_t step = i < mn ? ps : bs;
        for (int64_t q = threadIdx.y; q < parts; q += 8)
            s += x[q * step];
    }
    rows[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || i >= n)
        return;
    for (int y = 1; y < 8; y++)
        s += rows[y][threadIdx.x];
    if (i < mn) {
        float *c = C + (ldc == N ? i : i / N * ldc + i % N);
        *c = beta == 0.0f ? s : beta * *c + s;
    } else
        db[i - mn] = store ? s : db[i - mn] + s;
}
