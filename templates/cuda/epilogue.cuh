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
 * residual, added before the bias as cuBLASLt adds its beta C. */
extern "C" __global__ void __launch_bounds__(256)
rt_bias_act(const act_t *out, const act_t *R, act_t *C, act_t *Y, const float *bias, int64_t M,
            int64_t N, int64_t ldc, int act)
{
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
            rt_st(Y + k, v < 0.0f ? 0.0f : v);   /* NaN stays NaN, as torch.relu */
        else if (act == 2)
            rt_st(Y + k, rt_gelu_tanh(v));
    }
}

/* Launch: grid-stride, 256 threads. For i < M, j < N, at k = i * ld + j:
 *   D[k] = rt_gelu_tanh_bwd(pre[k], D[k])
 * D holds the GEMM's product (the gradient at the GELU's output), overwritten in place
 * by the gradient at its input; pre is the GELU's input. */
extern "C" __global__ void __launch_bounds__(256)
rt_dgelu(act_t *D, const act_t *pre, int64_t M, int64_t N, int64_t ld)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * N;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = ld == N ? i : i / N * ld + i % N;
        rt_st(D + k, rt_gelu_tanh_bwd(rt_ld(pre + k), rt_ld(D + k)));
    }
}

/* Launch: grid-stride, 256 threads. y[i] += x[i] for i < n (fp32: a bias gradient). */
extern "C" __global__ void __launch_bounds__(256)
rt_add_into(const float *x, float *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

/* Launch: grid-stride, 256 threads. For i < M, j < N, at k = i * ldc + j:
 *   C[k] = beta C[k] + the sum over s < parts of part[s * ps + i * N + j], in s order
 * and, with db (not NULL), for i < M:
 *   db[i] = (store ? 0 : db[i]) + the sum over s < parts of bpart[s * bs + i]
 * The partial products of a K-sliced GEMM (cuda_blas.c's ksplit_gemm), fp32, ps >= M N
 * apart, into a parameter gradient (fp32), and the partial sums of dy its BGRADB
 * epilogue stored, bs >= M apart, into the bias gradient; beta 0 stores without
 * reading C. */
extern "C" __global__ void __launch_bounds__(256)
rt_ksplit_sum(const float *part, float *C, int64_t parts, int64_t ps, int64_t M, int64_t N,
              int64_t ldc, float beta, const float *bpart, float *db, int64_t bs, int store)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * N; i += stride) {
        float s = 0.0f;
        for (int64_t q = 0; q < parts; q++)
            s += part[q * ps + i];
        float *c = C + (ldc == N ? i : i / N * ldc + i % N);
        *c = beta == 0.0f ? s : beta * *c + s;
    }
    if (!db)
        return;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M; i += stride) {
        float s = 0.0f;
        for (int64_t q = 0; q < parts; q++)
            s += bpart[q * bs + i];
        db[i] = store ? s : db[i] + s;
    }
}
