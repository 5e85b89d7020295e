/* glu.cuh: the gated linear unit over rows of 2h, forward and backward, each one pass
 * (twins of rt_glu_fwd and rt_glu_bwd in runtime/kernels.c, the same float arithmetic);
 * the shape is a runtime argument. act is trainc_rt.h's RT_GLU_*: 0 silu, 1 gelu,
 * 2 gelu (tanh), 3 sigmoid, 4 relu. */

__device__ __forceinline__ float rt_glu_act(int act, float a)
{
    switch (act) {
    case 0: return rt_silu(a);
    case 1: return rt_gelu(a);
    case 2: return rt_gelu_tanh(a);
    case 3: return rt_sigmoidf(a);
    default: return a < 0.0f ? 0.0f : a;   /* NaN stays NaN, as torch.relu */
    }
}

/* d act(a) times g */
__device__ __forceinline__ float rt_glu_act_bwd(int act, float a, float g)
{
    switch (act) {
    case 0: return rt_silu_bwd(a, g);
    case 1: return rt_gelu_bwd(a, g);
    case 2: return rt_gelu_tanh_bwd(a, g);
    case 3: {
        float s = rt_sigmoidf(a);
        return g * s * (1.0f - s);
    }
    default: return a <= 0.0f ? 0.0f : g;   /* torch's threshold_backward */
    }
}

/* Launch: grid-stride over rows * h (blocks of 256).
 *   y[r, j] = act(x[r, j]) * x[r, h + j]          x: [rows, 2h], y: [rows, h] */
extern "C" __global__ void __launch_bounds__(256)
rt_glu_fwd(const act_t *x, act_t *y, int64_t rows, int64_t h, int act)
{
    const int64_t n = rows * h, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const int64_t r = i / h, j = i - r * h;
        const act_t *xr = x + r * 2 * h;
        rt_st(y + i, rt_glu_act(act, rt_ld(xr + j)) * rt_ld(xr + h + j));
    }
}

/* Launch: grid-stride over rows * h (blocks of 256).
 *   dx[r, j]     = act'(a) * (dy[r, j] * u)       a = x[r, j], u = x[r, h + j]
 *   dx[r, h + j] = act(a) * dy[r, j]              (dx [rows, 2h] overwritten; not x) */
extern "C" __global__ void __launch_bounds__(256)
rt_glu_bwd(const act_t *x, const act_t *dy, act_t *dx, int64_t rows, int64_t h, int act)
{
    const int64_t n = rows * h, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const int64_t r = i / h, j = i - r * h;
        const float a = rt_ld(x + r * 2 * h + j), u = rt_ld(x + r * 2 * h + h + j);
        const float g = rt_ld(dy + i);
        rt_st(dx + r * 2 * h + j, rt_glu_act_bwd(act, a, g * u));
        rt_st(dx + r * 2 * h + h + j, rt_glu_act(act, a) * g);
    }
}
