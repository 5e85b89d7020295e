/* common.cuh: device helpers of the runtime's kernels (the other .cuh files): storage
 * loads and stores, warp and block reductions in a fixed order, row loops with 16-byte
 * loads, and the loss statistics the loop reads back.
 *
 * Determinism: every sum here is a butterfly inside a warp followed by the warp
 * partials added in warp order, so for a given block size the bits never change from
 * run to run. No atomics. */

/* The device rt_cu_stat of rt_cuda.h: loss kernels add their totals into it. */
struct rt_cu_stat {
    double loss_sum;
    unsigned long long correct;
    unsigned long long terms;  /* ignore_index: the targets counted (rt_ce_count) */
    float ce_scale;            /* and the loss's gradient scale, rows / terms */
    unsigned pad;
    double margin_sum;         /* dpo's pairs' margins (rt_cu_dpo: rt_sum_f64's add) */
};

/* ---- storage -------------------------------------------------------------------------- */

/* Activations and their gradients are stored as act_t: float, or with bf16-mixed
 * (RT_ACT_BF16, defined by the generated file) bfloat16, with fp16-mixed (RT_ACT_F16)
 * IEEE half. Parameters, parameter
 * gradients, optimizer state and the saved statistics (layernorm's mean and 1/std,
 * attention's log-sum-exp) stay float. Kernels read and write memory through the
 * overloads below, so they are written once for both: arithmetic is always float. */
__device__ __forceinline__ float rt_ld(const float *p) { return *p; }
__device__ __forceinline__ void rt_st(float *p, float v) { *p = v; }
/* Four consecutive elements (16 bytes of float, 8 of bf16 or fp16) at an aligned
 * address; the 16-bit ones are below, with the vectors. */
__device__ __forceinline__ float4 rt_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ void rt_st4(float *p, float4 v) { *(float4 *)p = v; }

/* The 16-bit conversions are written twice: as bit operations, which the CPU emulator
 * (tests/gpu/emu) runs, and on the GPU (sm_80 and later: RT_CVT_HW) as the hardware's
 * cvt, one instruction for what takes the integer pipe six or more. The two give the
 * same values (rounding to nearest, ties to even); a NaN stays a NaN, its payload the
 * hardware's on the GPU. */
#if !defined(RT_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define RT_CVT_HW 1
#endif

/* bfloat16: the top half of a float's bits. Widening is exact; narrowing rounds to
 * nearest, ties to even (as cvt.rn.bf16.f32 and torch do), and keeps NaN a NaN. */
struct rt_bf16 {
    unsigned short bits;
};
__device__ __forceinline__ float rt_bf16_float(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned short rt_float_bf16(float f)
{
#if defined(RT_CVT_HW)
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
__device__ __forceinline__ float rt_ld(const rt_bf16 *p) { return rt_bf16_float(p->bits); }
__device__ __forceinline__ void rt_st(rt_bf16 *p, float v) { p->bits = rt_float_bf16(v); }
/* fp16 (IEEE half): narrowing rounds to nearest even, |x| >= 65520 becomes infinity
 * (fp16-mixed's loss scaling then skips the step), tiny values become subnormals. */
struct rt_f16 {
    unsigned short bits;
};
__device__ __forceinline__ float rt_f16_float(unsigned short h)
{
#if defined(RT_CVT_HW)
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
#else
    unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (e == 31)
        return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
#endif
}
__device__ __forceinline__ unsigned short rt_float_f16(float f)
{
#if defined(RT_CVT_HW)
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u)
        return (unsigned short)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        a -= 0x38000000u;
        return (unsigned short)(sign | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
    }
    if (a < 0x33000000u)
        return (unsigned short)sign;
    unsigned M = (a & 0x7fffffu) | 0x800000u, s = 126u - (a >> 23);
    unsigned q = M >> s, rem = M & ((1u << s) - 1u), half = 1u << (s - 1u);
    q += rem > half || (rem == half && (q & 1u));
    return (unsigned short)(sign | q);
#endif
}
__device__ __forceinline__ float rt_ld(const rt_f16 *p) { return rt_f16_float(p->bits); }
__device__ __forceinline__ void rt_st(rt_f16 *p, float v) { p->bits = rt_float_f16(v); }
#if defined(RT_ACT_BF16)
typedef rt_bf16 act_t;
/* act_t's bits <-> float (tensor-core operands are handled as raw 16-bit values) */
__device__ __forceinline__ float rt_act16_float(unsigned short b) { return rt_bf16_float(b); }
__device__ __forceinline__ unsigned short rt_float_act16(float f) { return rt_float_bf16(f); }
#elif defined(RT_ACT_F16)
typedef rt_f16 act_t;
__device__ __forceinline__ float rt_act16_float(unsigned short b) { return rt_f16_float(b); }
__device__ __forceinline__ unsigned short rt_float_act16(float f) { return rt_float_f16(f); }
#else
typedef float act_t;
#endif
/* ---- 16-byte vectors ------------------------------------------------------------------ */

/* N consecutive elements, widened to float: the unit of the vector loops (the fused
 * elementwise kernels, rows, layernorm). Memory is moved 16 bytes a load or store: 4
 * floats, or 8 bf16 or fp16 values; rt_vec_n<E>() is that count for storage E. A
 * rt_vec<8> of float is two 16-byte accesses, a rt_vec<4> of a 16-bit type one of 8
 * bytes (a kernel mixing the two takes the 16-bit type's 8 lanes). p must be aligned
 * to 16 bytes (8 for a rt_vec<4> of a 16-bit type). */
template <int N> struct rt_vec {
    float v[N];
};
template <typename E> __host__ __device__ constexpr int rt_vec_n() { return 16 / (int)sizeof(E); }

__device__ __forceinline__ void rt_unpack2(unsigned u, const rt_bf16 *, float *o)
{
    o[0] = __uint_as_float(u << 16);
    o[1] = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ void rt_unpack2(unsigned u, const rt_f16 *, float *o)
{
    o[0] = rt_f16_float((unsigned short)u);
    o[1] = rt_f16_float((unsigned short)(u >> 16));
}
/* Two values at once: cvt.rn.{bf16,f16}x2.f32 (sm_80 and later) puts its first
 * operand in the high half. */
__device__ __forceinline__ unsigned rt_pack2(const float *v, rt_bf16 *)
{
#if defined(RT_CVT_HW)
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(v[1]), "f"(v[0]));
    return r;
#else
    return (unsigned)rt_float_bf16(v[0]) | (unsigned)rt_float_bf16(v[1]) << 16;
#endif
}
__device__ __forceinline__ unsigned rt_pack2(const float *v, rt_f16 *)
{
#if defined(RT_CVT_HW)
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(v[1]), "f"(v[0]));
    return r;
#else
    return (unsigned)rt_float_f16(v[0]) | (unsigned)rt_float_f16(v[1]) << 16;
#endif
}

template <int N> __device__ __forceinline__ rt_vec<N> rt_ldv(const float *p)
{
    static_assert(N % 4 == 0, "float vectors are whole float4s");
    rt_vec<N> r;
#pragma unroll
    for (int k = 0; k < N / 4; k++) {
        const float4 a = ((const float4 *)p)[k];
        r.v[4 * k] = a.x, r.v[4 * k + 1] = a.y, r.v[4 * k + 2] = a.z, r.v[4 * k + 3] = a.w;
    }
    return r;
}
template <int N> __device__ __forceinline__ void rt_stv(float *p, const rt_vec<N> &r)
{
    static_assert(N % 4 == 0, "float vectors are whole float4s");
#pragma unroll
    for (int k = 0; k < N / 4; k++)
        ((float4 *)p)[k] = make_float4(r.v[4 * k], r.v[4 * k + 1], r.v[4 * k + 2], r.v[4 * k + 3]);
}
/* bf16 and fp16: a uint4 (8 values) a load, or for N = 4 a uint2 */
template <int N, typename H> __device__ __forceinline__ rt_vec<N> rt_ldv(const H *p)
{
    static_assert(N == 4 || N % 8 == 0, "16-bit vectors are a uint2 or whole uint4s");
    rt_vec<N> r;
    if constexpr (N == 4) {
        const uint2 u = *(const uint2 *)p;
        rt_unpack2(u.x, p, r.v), rt_unpack2(u.y, p, r.v + 2);
    }
    else {
#pragma unroll
        for (int k = 0; k < N / 8; k++) {
            const uint4 u = ((const uint4 *)p)[k];
            float *o = r.v + 8 * k;
            rt_unpack2(u.x, p, o), rt_unpack2(u.y, p, o + 2);
            rt_unpack2(u.z, p, o + 4), rt_unpack2(u.w, p, o + 6);
        }
    }
    return r;
}
template <int N, typename H> __device__ __forceinline__ void rt_stv(H *p, const rt_vec<N> &r)
{
    static_assert(N == 4 || N % 8 == 0, "16-bit vectors are a uint2 or whole uint4s");
    if constexpr (N == 4) {
        uint2 u;
        u.x = rt_pack2(r.v, p), u.y = rt_pack2(r.v + 2, p);
        *(uint2 *)p = u;
    }
    else {
#pragma unroll
        for (int k = 0; k < N / 8; k++) {
            const float *v = r.v + 8 * k;
            uint4 u;
            u.x = rt_pack2(v, p), u.y = rt_pack2(v + 2, p);
            u.z = rt_pack2(v + 4, p), u.w = rt_pack2(v + 6, p);
            ((uint4 *)p)[k] = u;
        }
    }
}
template <typename H> __device__ __forceinline__ float4 rt_ld4(const H *p)
{
    const rt_vec<4> r = rt_ldv<4>(p);
    return make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
}
template <typename H> __device__ __forceinline__ void rt_st4(H *p, float4 v)
{
    rt_stv(p, rt_vec<4>{{v.x, v.y, v.z, v.w}});
}
/* Are all these addresses 16-byte aligned? */
template <typename... P> __device__ __forceinline__ bool rt_aligned16(const P *...p)
{
    return (((unsigned long long)p | ...) & 15) == 0;
}

__device__ __forceinline__ float rt_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double rt_nan_d() { return __longlong_as_double(0x7ff8000000000000ll); }
/* 2^x by the hardware's approximation (ex2.approx.ftz: relative error about 2^-22; a
 * result below 2^-126 is 0), one MUFU instruction where exp2f's exact one takes a range
 * check and two scalings around it. 2^-inf = 0. For the probabilities of the 16-bit
 * kernels (attention, the loss), whose error it stays far below. */
__device__ __forceinline__ float rt_exp2_approx(float x)
{
#if defined(RT_EMU)
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

/* ---- reductions ----------------------------------------------------------------------- */

/* Butterfly over the 32 lanes of a warp (or within aligned groups of `width` lanes, a
 * power of two): every lane gets the total, always added in the same order. */
__device__ __forceinline__ double rt_warp_sum(double v, int width = 32)
{
    for (int o = width / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float rt_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024; every thread
 * must call it); every thread gets the total. Warp sums, then each thread adds the
 * warp sums in warp order. */
__device__ __forceinline__ double rt_block_sum(double v)
{
    __shared__ double part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = rt_warp_sum(v);
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < nw; w++)
        t += part[w];
    __syncthreads();   /* part may be written again by the next call */
    return t;
}

/* Maximum over the block (same rules as rt_block_sum). NaN is not propagated by fmaxf:
 * callers that need NaN semantics use rt_block_argmax. */
__device__ __forceinline__ float rt_block_max(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = rt_warp_max(v);
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    float t = part[0];
    for (int w = 1; w < nw; w++)
        t = fmaxf(t, part[w]);
    __syncthreads();
    return t;
}

#ifdef RT_FP8
/* fp8-mixed (the generated file defines RT_FP8): a kernel that produces a linear GEMM's
 * operand folds the operand's absolute maximum into a slot as it writes it, so that
 * fp8.cuh's cast needs no pass of its own over it (fp8.cuh says which kernels do).
 * The maximum is of the values as stored (rounded to act_t, as the cast reads them)
 * with fmaxf from 0, which drops a NaN as rt_fp8_amax does: the same float. */
__device__ __forceinline__ float rt_fp8_stored_abs(float v)
{
    return fabsf(rt_act16_float(rt_float_act16(v)));
}
/* Every thread of the (one-dimensional) block calls it (it synchronizes) with its
 * running maximum m (>= 0, not NaN); thread 0 folds the block's into *slot (NULL: none).
 * The fold is an atomic maximum on the bits, which order as the floats do for
 * non-negative ones: the result is the maximum whatever order the blocks arrive in (no
 * run-to-run difference, which the rule against atomics guards). The slot starts at 0
 * each pass (rt_fp8_amax_reset) and several kernels may fold into it. */
__device__ __forceinline__ void rt_fp8_amax_out(float m, unsigned *slot)
{
    m = rt_block_max(m);
    if (slot && threadIdx.x == 0)
        atomicMax(slot, __float_as_uint(m));
}
/* A producer's fp8-mixed instance: one more argument, the slot (NULL: none), as its
 * last pointer; a running maximum of what it stores, folded as it ends (every thread
 * gets there: no early return). */
#define RT_FP8_SLOT , unsigned *amax_slot
#define RT_FP8_FOLD_INIT() float amax_m = 0.0f
#define RT_FP8_FOLD(v) (amax_m = fmaxf(amax_m, rt_fp8_stored_abs(v)))
#define RT_FP8_FOLD_END()                                                                          \
    do {                                                                                           \
        if (amax_slot)                                                                             \
            rt_fp8_amax_out(amax_m, amax_slot);                                                    \
    } while (0)
/* the same for the norms' templates: the slot handed down (RT_FP8_SLOT_ARG), a value
 * folded where a row map returns it, a vector's lanes, and a warp kernel's end (lane 0
 * of each warp folds its warp's maximum: a warp past the last row has returned) */
#define RT_FP8_SLOT_ARG , amax_slot
__device__ __forceinline__ float rt_fp8_folded(float &m, float v)
{
    m = fmaxf(m, rt_fp8_stored_abs(v));
    return v;
}
#define RT_FP8_FOLDED(v) rt_fp8_folded(amax_m, (v))
/* a helper that stores for a producer: its running maximum by reference */
#define RT_FP8_REF , float &amax_m
#define RT_FP8_REF_ARG , amax_m
#define RT_FP8_FOLD_VEC(o, n)                                                                      \
    for (int e_ = 0; e_ < (n); e_++)                                                               \
    RT_FP8_FOLD((o).v[e_])
#define RT_FP8_FOLD_WARP_END()                                                                     \
    do {                                                                                           \
        const float w_ = rt_warp_max(amax_m);                                                      \
        if (amax_slot && (threadIdx.x & 31) == 0)                                                  \
            atomicMax(amax_slot, __float_as_uint(w_));                                             \
    } while (0)
#else
#define RT_FP8_SLOT
#define RT_FP8_FOLD_INIT() (void)0
#define RT_FP8_FOLD(v) (void)0
#define RT_FP8_FOLD_END() (void)0
#define RT_FP8_SLOT_ARG
#define RT_FP8_FOLDED(v) (v)
#define RT_FP8_REF
#define RT_FP8_REF_ARG
#define RT_FP8_FOLD_VEC(o, n) (void)0
#define RT_FP8_FOLD_WARP_END() (void)0
#endif

/* torch.argmax's choice between two candidates (value, index): a NaN beats any number,
 * a greater value wins, and among equals (or two NaNs) the lower index. */
__device__ __forceinline__ bool rt_argmax_better(float v, int i, float bv, int bi)
{
    bool vn = isnan(v), bn = isnan(bv);
    if (vn != bn)
        return vn;
    if (!vn && v != bv)
        return v > bv;
    return i < bi;
}

/* (max, first argmax) over the block; *m is NaN when any candidate is NaN, and the
 * index is then the first NaN's. Threads without a candidate pass (-inf, INT_MAX). */
__device__ __forceinline__ int rt_block_argmax(float v, int i, float *m)
{
    __shared__ float pv[32];
    __shared__ int pi[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (rt_argmax_better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    if (lane == 0) {
        pv[warp] = v;
        pi[warp] = i;
    }
    __syncthreads();
    float bv = pv[0];
    int bi = pi[0];
    for (int w = 1; w < nw; w++)
        if (rt_argmax_better(pv[w], pi[w], bv, bi)) {
            bv = pv[w];
            bi = pi[w];
        }
    __syncthreads();
    *m = bv;
    return bi;
}

/* ---- rows ------------------------------------------------------------------------------ */

/* Elements of p before its first 16-byte aligned address (n when p is not even
 * element-aligned, which the runtime never passes, or when the row is short). */
template <typename E>
__device__ __forceinline__ int rt_head(const E *p, int n)
{
    unsigned long long a = (unsigned long long)p;
    int h = (a & (sizeof(E) - 1)) ? n : (int)((16 - (a & 15)) & 15) / (int)sizeof(E);
    return h < n ? h : n;
}

/* Calls f(j, p[j]) for every j in [0, n), the threads of the block taking a strided
 * share: a scalar head up to the first 16-byte boundary, 16-byte loads for the middle,
 * a scalar tail. Which thread sees which j depends only on (p mod 16, n, blockDim). */
template <typename E, typename F>
__device__ __forceinline__ void rt_row_each(const E *p, int n, F f)
{
    constexpr int N = rt_vec_n<E>();
    const int head = rt_head(p, n), nv = (n - head) / N;
    for (int j = threadIdx.x; j < head; j += blockDim.x)
        f(j, rt_ld(p + j));
    for (int k = threadIdx.x; k < nv; k += blockDim.x) {
        const int j = head + k * N;
        const rt_vec<N> v = rt_ldv<N>(p + j);
#pragma unroll
        for (int e = 0; e < N; e++)
            f(j + e, v.v[e]);
    }
    for (int j = head + nv * N + threadIdx.x; j < n; j += blockDim.x)
        f(j, rt_ld(p + j));
}

/* dst[j] = f(j, src[j]) for j in [0, n), as rt_row_each; 16-byte stores too when dst
 * and src share their alignment (dst may be src: each element is read, then written,
 * by the same thread). */
template <typename E, typename F>
__device__ __forceinline__ void rt_row_map(const E *src, E *dst, int n, F f)
{
    if (((unsigned long long)src & 15) != ((unsigned long long)dst & 15)) {
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            rt_st(dst + j, f(j, rt_ld(src + j)));
        return;
    }
    constexpr int N = rt_vec_n<E>();
    const int head = rt_head(src, n), nv = (n - head) / N;
    for (int j = threadIdx.x; j < head; j += blockDim.x)
        rt_st(dst + j, f(j, rt_ld(src + j)));
    for (int k = threadIdx.x; k < nv; k += blockDim.x) {
        const int j = head + k * N;
        rt_vec<N> v = rt_ldv<N>(src + j);
#pragma unroll
        for (int e = 0; e < N; e++)
            v.v[e] = f(j + e, v.v[e]);
        rt_stv(dst + j, v);
    }
    for (int j = head + nv * N + threadIdx.x; j < n; j += blockDim.x)
        rt_st(dst + j, f(j, rt_ld(src + j)));
}

/* ---- the loss statistics ---------------------------------------------------------------- */

/* Launch: 1 block of 1024 threads.
 * stats->loss_sum += sum of loss[0, n); stats->correct += sum of correct[0, n) when
 * correct is not NULL (whole numbers held in double). Each thread adds a strided share
 * in index order, then rt_block_sum: a fixed order, so the loss of a batch has the same
 * bits on every run. The single block is fine: n is at most the batch's loss terms (or
 * block partials), and this runs once per loss call. */
extern "C" __global__ void __launch_bounds__(1024)
rt_loss_total(const double *loss, const double *correct, int64_t n, rt_cu_stat *stats)
{
    double s = 0.0, c = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        s += loss[i];
        if (correct)
            c += correct[i];
    }
    s = rt_block_sum(s);
    c = rt_block_sum(c);
    if (threadIdx.x == 0) {
        stats->loss_sum += s;
        stats->correct += (unsigned long long)c;
    }
}

/* the block's dynamic shared memory (the launch's bytes of it), 16-byte aligned */
__device__ __forceinline__ unsigned char *rt_dyn_smem()
{
#if defined(RT_EMU)
    return (unsigned char *)emu_dyn_smem();
#else
    extern __shared__ __align__(16) unsigned char rt_dyn[];
    return rt_dyn;
#endif
}

#if defined(RT_ACT_BF16) || defined(RT_ACT_F16)
/* ---- tensor-core primitives (16-bit activations): attention.cuh's and conv.cuh's -------
 * mma.sync m16n8k16 with 16-bit operands and fp32 accumulators, and ldmatrix. Fragments
 * (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4): A's four registers hold rows g,
 * g + 8, g, g + 8 and columns 2t, 2t, 2t + 8, 2t + 8 (and the next column); B's two hold
 * rows 2t and 2t + 8 (and the next) of column g; C's four are (g, 2t), (g, 2t + 1),
 * (g + 8, 2t), (g + 8, 2t + 1). */
/* D += A B on one m16n8k16 tile (the emulator has a twin of the instruction) */
__device__ __forceinline__ void rt_mma16816(float c[4], const unsigned a[4], const unsigned b[2])
{
#if defined(RT_EMU)
    emu_mma_16816<rt_act16_float>(c, a, b);
#elif defined(RT_ACT_BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* ldmatrix .x4 from shared memory: lane l gives the address of row l % 8 of matrix
 * l / 8 (8 16-bit values, 16-byte aligned); register r of lane l gets matrix r's row
 * l / 4, columns 2 (l % 4) (low half) and 2 (l % 4) + 1. rt_ldsm4t (.trans): column
 * l / 4, rows 2 (l % 4) and 2 (l % 4) + 1. (The emulator has a twin of each.) */
__device__ __forceinline__ void rt_ldsm4(unsigned r[4], const unsigned short *p)
{
#if defined(RT_EMU)
    emu_ldmatrix_x4(r, p, false);
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}
__device__ __forceinline__ void rt_ldsm4t(unsigned r[4], const unsigned short *p)
{
#if defined(RT_EMU)
    emu_ldmatrix_x4(r, p, true);
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

/* B fragments of n-tiles n and n + 1 (b[0..1], b[2..3]) for k-step s of a product
 * with M^T, M a shared tile whose rows are the n index and columns the k index (K in
 * S = Q K^T): matrices (rows 8n, columns 16s), (8n, 16s + 8), (8n + 8, 16s),
 * (8n + 8, 16s + 8). */
template <int W>
__device__ __forceinline__ void rt_bfrag(unsigned b[4], unsigned short (*M)[W], int n, int s, int lane)
{
    rt_ldsm4(b, &M[8 * n + (lane & 7) + ((lane >> 4) << 3)][16 * s + (lane & 8)]);
}

/* B fragments of n-tiles n and n + 1 for k-step j of a product with M, M a shared
 * tile whose rows are the k index and columns the n index (V in P V): transposed
 * matrices (rows 16j, columns 8n), (16j + 8, 8n), (16j, 8n + 8), (16j + 8, 8n + 8). */
template <int W>
__device__ __forceinline__ void rt_bfrag_t(unsigned b[4], unsigned short (*M)[W], int j, int n, int lane)
{
    rt_ldsm4t(b, &M[16 * j + (lane & 7) + (lane & 8)][8 * n + ((lane >> 4) << 3)]);
}

/* The A fragment (a[0..3]) for k-step s of a product with M, a shared tile of 16 rows
 * (the m index) whose columns are the k index (dY in dP = dY V^T): matrices (rows 0,
 * columns 16s), (8, 16s), (0, 16s + 8), (8, 16s + 8). */
template <int W>
__device__ __forceinline__ void rt_afrag(unsigned a[4], unsigned short (*M)[W], int s, int lane)
{
    rt_ldsm4(a, &M[lane & 15][16 * s + ((lane >> 4) << 3)]);
}

/* A block tile of RT_TG_M x RT_TG_N sums over chunks of RT_TG_K (two 16-bit tiles in
 * shared memory, the K axis contiguous, 8 values of padding a row), four warps */
#define RT_TG_M 64
#define RT_TG_N 128
#define RT_TG_K 32

__device__ __forceinline__ void rt_tc_clear(float (*acc)[8][4])
{
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[i][j][r] = 0.0f;
}

/* acc += the warp's 32 x 64 part of as [RT_TG_M, K chunk] bs [RT_TG_N, K chunk]^T: warp
 * (wm, wn) of the block's four takes rows 32 wm.. of as and rows 64 wn.. of bs, two m16
 * tiles by eight n8; acc[i][n][r] is the sum of as's row 32 wm + 16 i + lane / 4 + 8 (r / 2)
 * with bs's row 64 wn + 8 n + 2 (lane % 4) + r % 2 (conv.cuh's and moe.cuh's tiles) */
__device__ __forceinline__ void rt_tc_mma(float (*acc)[8][4], unsigned short (*as)[RT_TG_K + 8],
                                          unsigned short (*bs)[RT_TG_K + 8], int wm, int wn, int lane)
{
#pragma unroll
    for (int ks = 0; ks < RT_TG_K / 16; ks++) {
        unsigned a[2][4];
#pragma unroll
        for (int i = 0; i < 2; i++)
            rt_ldsm4(a[i], &as[32 * wm + 16 * i + (lane & 7) + (lane & 8)][16 * ks + ((lane >> 4) << 3)]);
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
            unsigned bf[4];
            rt_bfrag(bf, bs + 64 * wn, n, ks, lane);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                rt_mma16816(acc[i][n], a[i], bf);
                rt_mma16816(acc[i][n + 1], a[i], bf + 2);
            }
        }
    }
}
/* f(m, n, v) for each of the thread's sums v of an rt_tc_mma tile: m its row of as (0 ..
 * RT_TG_M), n its row of bs (0 .. RT_TG_N), as rt_tc_mma's comment places them */
template <typename F>
__device__ __forceinline__ void rt_tc_each(float (*acc)[8][4], int wm, int wn, int lane, F f)
{
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                f(32 * wm + 16 * i + g + 8 * (q >> 1), 64 * wn + 8 * n + 2 * t4 + (q & 1),
                  acc[i][n][q]);
}

#endif
