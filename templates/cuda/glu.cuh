/* glu.cuh: the gated linear unit over rows of 2h, forward and backward, each one pass
 * over its tensors (twins of rt_glu_fwd and rt_glu_bwd in runtime/kernels.c, the same
 * float arithmetic); the shape is a runtime argument. act is trainc_rt.h's RT_GLU_*:
 * 0 silu, 1 gelu, 2 gelu (tanh), 3 sigmoid, 4 relu. fp8-mixed's instances (RT_FP8) fold
 * the output's (y's, dx's) absolute maximum into one more argument, a slot (common.cuh's
 * RT_FP8_SLOT), where it feeds an FP8 GEMM. */

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

/* Rows r = blockIdx.x, + gridDim.x, ...; a block's threads over a row's h columns, V
 * at a time: V = rt_vec_n<act_t>() (16-byte accesses) where h is a multiple of it and
 * the tensors are 16-byte aligned (then every row of both halves is), else 1. */
template <int V>
__device__ __forceinline__ void glu_fwd_rows(const act_t *x, act_t *y, int64_t rows, int64_t h,
                                             int act RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const act_t *a = x + r * 2 * h, *u = a + h;
        act_t *yr = y + r * h;
        for (int64_t j = (int64_t)threadIdx.x * V; j < h; j += (int64_t)blockDim.x * V) {
            if constexpr (V == 1) {
                rt_st(yr + j, RT_FP8_FOLDED(rt_glu_act(act, rt_ld(a + j)) * rt_ld(u + j)));
            } else {
                const rt_vec<V> av = rt_ldv<V>(a + j), uv = rt_ldv<V>(u + j);
                rt_vec<V> o;
#pragma unroll
                for (int e = 0; e < V; e++)
                    o.v[e] = rt_glu_act(act, av.v[e]) * uv.v[e];
                rt_stv(yr + j, o);
                RT_FP8_FOLD_VEC(o, V);
            }
        }
    }
    RT_FP8_FOLD_END();
}

template <int V>
__device__ __forceinline__ void glu_bwd_rows(const act_t *x, const act_t *dy, act_t *dx,
                                             int64_t rows, int64_t h, int act RT_FP8_SLOT)
{
    RT_FP8_FOLD_INIT();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const act_t *a = x + r * 2 * h, *u = a + h, *g = dy + r * h;
        act_t *da = dx + r * 2 * h, *du = da + h;
        for (int64_t j = (int64_t)threadIdx.x * V; j < h; j += (int64_t)blockDim.x * V) {
            if constexpr (V == 1) {
                const float av = rt_ld(a + j), gv = rt_ld(g + j);
                rt_st(da + j, RT_FP8_FOLDED(rt_glu_act_bwd(act, av, gv * rt_ld(u + j))));
                rt_st(du + j, RT_FP8_FOLDED(rt_glu_act(act, av) * gv));
            } else {
                const rt_vec<V> av = rt_ldv<V>(a + j), uv = rt_ldv<V>(u + j);
                const rt_vec<V> gv = rt_ldv<V>(g + j);
                rt_vec<V> oa, ou;
#pragma unroll
                for (int e = 0; e < V; e++) {
                    oa.v[e] = rt_glu_act_bwd(act, av.v[e], gv.v[e] * uv.v[e]);
                    ou.v[e] = rt_glu_act(act, av.v[e]) * gv.v[e];
                }
                rt_stv(da + j, oa);
                rt_stv(du + j, ou);
                RT_FP8_FOLD_VEC(oa, V);
                RT_FP8_FOLD_VEC(ou, V);
            }
        }
    }
    RT_FP8_FOLD_END();
}

/* Launch: grid (at most rows), block of 256; rows as glu_fwd_rows.
 *   y[r, j] = act(x[r, j]) * x[r, h + j]          x: [rows, 2h], y: [rows, h] */
extern "C" __global__ void __launch_bounds__(256)
rt_glu_fwd(const act_t *x, act_t *y, int64_t rows, int64_t h, int act RT_FP8_SLOT)
{
    if (h % rt_vec_n<act_t>() == 0 && rt_aligned16(x, y))
        glu_fwd_rows<rt_vec_n<act_t>()>(x, y, rows, h, act RT_FP8_SLOT_ARG);
    else
        glu_fwd_rows<1>(x, y, rows, h, act RT_FP8_SLOT_ARG);
}

/* Launch: as rt_glu_fwd.
 *   dx[r, j]     = act'(a) * (dy[r, j] * u)       a = x[r, j], u = x[r, h + j]
 *   dx[r, h + j] = act(a) * dy[r, j]              (dx [rows, 2h] overwritten; not x) */
extern "C" __global__ void __launch_bounds__(256)
rt_glu_bwd(const act_t *x, const act_t *dy, act_t *dx, int64_t rows, int64_t h,
           int act RT_FP8_SLOT)
{
    if (h % rt_vec_n<act_t>() == 0 && rt_aligned16(x, dy, dx))
        glu_bwd_rows<rt_vec_n<act_t>()>(x, dy, dx, rows, h, act RT_FP8_SLOT_ARG);
    else
        glu_bwd_rows<1>(x, dy, dx, rows, h, act RT_FP8_SLOT_ARG);
}

/* The gated variant (a moe layer's shared expert with shared_gate): rows of 2h + 1, the
 * last column g; a block a row at a time, one element a thread (odd rows: no vectors).
 * Launch: as rt_glu_fwd.
 *   y[r, j] = act(a) * u * sigmoid(g)             a = x[r, j], u = x[r, h + j] */
extern "C" __global__ void __launch_bounds__(256)
rt_glu_gated_fwd(const act_t *x, act_t *y, int64_t rows, int64_t h, int act)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const act_t *a = x + r * (2 * h + 1), *u = a + h;
        const float s = rt_sigmoidf(rt_ld(a + 2 * h));
        for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
            rt_st(y + r * h + j, rt_glu_act(act, rt_ld(a + j)) * rt_ld(u + j) * s);
    }
}

/* Launch: as rt_glu_fwd.
 *   dx[r, j]     = act'(a) * (dy * s * u)         s = sigmoid(x[r, 2h])
 *   dx[r, h + j] = act(a) * dy * s
 *   dx[r, 2h]    = s (1 - s) * sum over j of dy * act(a) * u      (rt_block_sum) */
extern "C" __global__ void __launch_bounds__(256)
rt_glu_gated_bwd(const act_t *x, const act_t *dy, act_t *dx, int64_t rows, int64_t h, int act)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const act_t *a = x + r * (2 * h + 1), *u = a + h, *gr = dy + r * h;
        act_t *da = dx + r * (2 * h + 1), *du = da + h;
        const float s = rt_sigmoidf(rt_ld(a + 2 * h));
        double dot = 0.0;
        for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
            const float av = rt_ld(a + j), uv = rt_ld(u + j), d = rt_ld(gr + j), g = d * s;
            const float y = rt_glu_act(act, av);
            rt_st(da + j, rt_glu_act_bwd(act, av, g * uv));
            rt_st(du + j, y * g);
            dot += (double)(d * (y * uv));
        }
        dot = rt_block_sum(dot);
        if (threadIdx.x == 0)
            rt_st(da + 2 * h, (float)dot * s * (1.0f - s));
    }
}
