/* emu.h: just enough of CUDA to run the runtime's kernels (templates/cuda/) on the
 * CPU, for tests/gpu_emu.sh. Each CUDA thread of a block is a fiber (ucontext); the
 * fibers of one block run in turn on one OS thread, switching at __syncthreads and at
 * warp-level exchanges, and blocks run one after the other. So __shared__ variables
 * can be plain statics, and a run is deterministic. Slow, but it executes the real
 * kernel source, barriers and shuffles included. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

/* the device prelude's typedefs of long long: renamed, the host's differ */
#define int64_t emu_i64
#define uint64_t emu_u64

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
};
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

void emu_syncthreads();
void emu_syncwarp();
unsigned emu_lane_id();
void *emu_slot();              /* this thread's 8-byte exchange slot */
void *emu_slot_of(unsigned lane);
#define __syncthreads() emu_syncthreads()

template <typename T> T __shfl_xor_sync(unsigned, T v, int o)
{
    memcpy(emu_slot(), &v, sizeof v);
    emu_syncwarp();
    T r;
    memcpy(&r, emu_slot_of(emu_lane_id() ^ (unsigned)o), sizeof r);
    emu_syncwarp();
    return r;
}

inline unsigned __ballot_sync(unsigned, int pred)
{
    int p = pred != 0;
    memcpy(emu_slot(), &p, sizeof p);
    emu_syncwarp();
    unsigned m = 0;
    for (unsigned l = 0; l < 32; l++) {
        int q;
        memcpy(&q, emu_slot_of(l), sizeof q);
        m |= (unsigned)(q != 0) << l;
    }
    emu_syncwarp();
    return m;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
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
inline double __longlong_as_double(long long i)
{
    double d;
    memcpy(&d, &i, sizeof d);
    return d;
}
/* the host is built with -ffp-contract=off: these are what their names say */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
using std::isnan;
