/* emu.h: just enough of CUDA to run the runtime's kernels (templates/cuda/) on the
 * CPU, for tests/gpu_emu.sh and the fake GPU (tests/fake_gpu/). Each CUDA thread of a
 * block is a fiber (emu_fibers.cc); the fibers of one block run in turn on one OS
 * thread, switching at __syncthreads and at warp-level exchanges, and blocks run one
 * after the other. So __shared__ variables can be plain statics, and a run is
 * deterministic. Slow, but it executes the real kernel source, barriers and shuffles
 * included. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

/* the kernels see what NVRTC shows them (prelude.cuh declares its own integer types
 * only there; under nvcc it takes the C library's), and the prelude's typedefs of long
 * long are renamed: the host's differ */
#define __CUDACC_RTC__ 1
#define int64_t emu_i64
#define uint64_t emu_u64

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
};
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
/* FP8 (sm_89 and later): the toolkit's types and conversions, bit for bit */
#include "cuda_fp8.h"

void emu_syncthreads();
void emu_syncwarp();
unsigned emu_lane_id();
/* A warp exchange: this lane posts n bytes (at most 32), waits for the warp's other lanes
 * to post theirs, and gets the warp's 32 posts (lane l's at [l]). Two buffers serve in
 * turn, so a lane may post the next exchange while the others still read this one (and
 * none can post the one after before all have read this). */
struct emu_post {
    unsigned char b[32];
};
const emu_post *emu_exchange(const void *v, size_t n);
#define __syncthreads() emu_syncthreads()
#define __syncwarp() emu_syncwarp()
/* a kernel by name (emu_kernels.cc's table; nullptr if none), taking cuLaunchKernel's
 * argument pointers; emu_launch (emu_fibers.cc) runs it */
typedef void (*emu_kernel_fn)(void **);
extern "C" emu_kernel_fn emu_kernel(const char *name);

template <typename T> T __shfl_xor_sync(unsigned, T v, int o)
{
    static_assert(sizeof(T) <= sizeof(emu_post), "a shuffle of at most 32 bytes");
    const emu_post *p = emu_exchange(&v, sizeof v);
    T r;
    memcpy(&r, p[emu_lane_id() ^ (unsigned)o].b, sizeof r);
    return r;
}

inline unsigned __ballot_sync(unsigned, int pred)
{
    const int v = pred != 0;
    const emu_post *p = emu_exchange(&v, sizeof v);
    unsigned m = 0;
    for (unsigned l = 0; l < 32; l++) {
        int q;
        memcpy(&q, p[l].b, sizeof q);
        m |= (unsigned)(q != 0) << l;
    }
    return m;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

/* The kernels' one use of inline PTX, mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}
 * (common.cuh's rt_mma16816), as the warp executes it: each lane's A (4 registers) and
 * B (2) fragments are exchanged, and each lane takes, with the PTX ISA's fragment
 * layout (lane l holds A's rows l / 4 and l / 4 + 8 at k = 2 (l % 4) + {0, 1, 8, 9},
 * and B's column l / 4 at the same k), its rows g, g + 8 of A and columns 2t, 2t + 1
 * of B (g = lane / 4, t = lane % 4), and adds its four products to c, in k order, in
 * fp32. (The emulator's own indices: no bounds checks.) */
#define RT_EMU 1
template <float (*cvt)(unsigned short)>
__attribute__((no_sanitize("bounds"))) void emu_mma_16816(float c[4], const unsigned a[4], const unsigned b[2])
{
    const unsigned v[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const emu_post *p = emu_exchange(v, sizeof v);
    const unsigned g = emu_lane_id() >> 2, t = emu_lane_id() & 3;
    float A[2][16], B[2][16];   /* rows g, g + 8; columns 2t, 2t + 1 */
    for (unsigned q = 0; q < 4; q++) {
        unsigned x[4], y[2];
        memcpy(x, p[4 * g + q].b, sizeof x);
        for (unsigned r = 0; r < 4; r++) {
            const unsigned k = 2 * q + 8 * (r >> 1);
            A[r & 1][k] = cvt((unsigned short)(x[r] & 0xffff));
            A[r & 1][k + 1] = cvt((unsigned short)(x[r] >> 16));
        }
        for (unsigned j = 0; j < 2; j++) {
            memcpy(y, p[4 * (2 * t + j) + q].b + sizeof x, sizeof y);
            for (unsigned r = 0; r < 2; r++) {
                const unsigned k = 2 * q + 8 * r;
                B[j][k] = cvt((unsigned short)(y[r] & 0xffff));
                B[j][k + 1] = cvt((unsigned short)(y[r] >> 16));
            }
        }
    }
    for (unsigned r = 0; r < 4; r++) {
        float s = c[r];
        for (int k = 0; k < 16; k++)
            s += A[r >> 1][k] * B[r & 1][k];
        c[r] = s;
    }
}
/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (common.cuh's rt_ldsm4, rt_ldsm4t): lane
 * l gives the address of row l % 8 of matrix l / 8; the addresses are exchanged, and
 * lane l's register r gets matrix r's row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1
 * (trans: column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1), the first in the low half.
 * A row address that is not 16-byte aligned, which the GPU faults on, stops the run. */
inline void emu_ldmatrix_x4(unsigned r[4], const unsigned short *p, bool trans)
{
    if ((uintptr_t)p % 16 != 0) {
        fprintf(stderr, "emu: ldmatrix row address %p is not 16-byte aligned\n", (const void *)p);
        abort();
    }
    const unsigned short *rows[32];
    const emu_post *x = emu_exchange(&p, sizeof p);
    for (unsigned l = 0; l < 32; l++)
        memcpy(&rows[l], x[l].b, sizeof p);
    const unsigned g = emu_lane_id() >> 2, t = emu_lane_id() & 3;
    for (unsigned m = 0; m < 4; m++) {
        const unsigned short *const *M = rows + 8 * m;
        const unsigned short lo = trans ? M[2 * t][g] : M[g][2 * t];
        const unsigned short hi = trans ? M[2 * t + 1][g] : M[g][2 * t + 1];
        r[m] = (unsigned)lo | (unsigned)hi << 16;
    }
}
/* cp.async.cg.shared.global [dst], [src], bytes, src_bytes (attention.cuh's att_cp16,
 * att_cp4) and its commit_group / wait_group. As on the GPU, a copy is only known to
 * have landed once the thread that issued it has waited for its group, and the
 * destination is undefined from the issue on: the emulator fills it with NaN bits at
 * the issue and makes the copy at the cp.async.wait_group that covers its group (the
 * bytes past src_bytes zero-filled). So a kernel that reads a tile before waiting for
 * it, or copies into a tile other threads still read (a barrier missing), reads NaN
 * and fails its checks. A copy never waited for when the
 * block ends, a size other than 4, 8 or 16, or a misaligned address stops the run. */
void emu_cp_async(void *dst, const void *src, unsigned bytes, unsigned src_bytes);
void emu_cp_async_commit();
void emu_cp_async_wait(int n);
inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
inline float __uint_as_float(unsigned i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
inline unsigned __float_as_uint(float f)
{
    unsigned i;
    memcpy(&i, &f, sizeof i);
    return i;
}
/* blocks run one after another, a block's fibers in turn: a plain read-modify-write */
inline unsigned atomicMax(unsigned *p, unsigned v)
{
    unsigned old = *p;
    if (v > old)
        *p = v;
    return old;
}
inline double __longlong_as_double(long long i)
{
    double d;
    memcpy(&d, &i, sizeof d);
    return d;
}
/* the host is built with -ffp-contract=off: these are what their names say */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsqrt_rn(double a) { return sqrt(a); }
using std::isnan;
#include "emu_sm90.h"
