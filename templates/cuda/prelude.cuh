/* prelude.cuh: device helpers shared by every generated CUDA kernel; the twins of
 * the static inline functions in trainc_rt.h, so a fused kernel computes the same
 * expression on the CPU and on the GPU. NVRTC compiles it with the kernels: no host
 * header is included, so it gets its fixed-width types here; nvcc (compiling
 * kernels_cuda.cu by hand) has the C library's, which these would clash with. */
#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

/* Counter-based uniform [0,1): the same (key, index) gives the same number as the
 * CPU's rt_uniform, so dropout masks agree across backends and are never stored. */
__device__ __forceinline__ float rt_uniform(uint64_t key, uint64_t idx)
{
    uint64_t z = key ^ (idx * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* the CPU's rt_drop_index: the element a dropout mask draws (one rank's batch of N x B
 * rows numbers them) */
__device__ __forceinline__ uint64_t rt_drop_index(uint64_t i, uint64_t S, uint64_t part)
{
    uint64_t n = part >> 32;
    if (n <= 1)
        return i;
    uint64_t row = i / S;
    return (row * n + (part & 0xffffffffu)) * S + (i - row * S);
}

/* the CPU's rt_tanhf (trainc_rt.h) is plain arithmetic for its vector units; here CUDA's */
__device__ __forceinline__ float rt_tanhf(float x) { return tanhf(x); }
__device__ __forceinline__ float rt_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
/* a max pool's padding (N_PAD): whether a padded plane's element at (row, column), each
 * less the border, lies inside the plane [rows, cols] (trainc_rt.h's twin) */
__device__ __forceinline__ int rt_inside(int64_t r, int64_t c, int64_t rows, int64_t cols)
{
    return r >= 0 && r < rows && c >= 0 && c < cols;
}
__device__ __forceinline__ float rt_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float rt_gelu_bwd(float x, float dy)
{
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;
    return dy * (cdf + x * pdf);
}
__device__ __forceinline__ float rt_gelu_tanh(float x)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float rt_gelu_tanh_bwd(float x, float dy)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}
__device__ __forceinline__ float rt_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float rt_silu_bwd(float x, float dy)
{
    float s = rt_sigmoidf(x);
    return dy * s * (1.0f + x * (1.0f - s));
}
