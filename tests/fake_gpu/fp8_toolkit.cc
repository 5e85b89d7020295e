/* fp8_toolkit.cc: CUDA's own cuda_fp8.h (the toolkit's, compiled for the host: its
 * software conversions) behind plain functions, the oracle tests/fake_gpu/fp8_emu_check.cc
 * holds the emulator's cuda_fp8.h to. A translation unit of its own: the two headers
 * share their include guard. */
#include <cuda_fp8.h>

extern "C" unsigned char tk_float_to_fp8(float x, int satfinite, int e5m2)
{
    return __nv_cvt_float_to_fp8(x, satfinite ? __NV_SATFINITE : __NV_NOSAT, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

extern "C" unsigned char tk_double_to_fp8(double x, int satfinite, int e5m2)
{
    return __nv_cvt_double_to_fp8(x, satfinite ? __NV_SATFINITE : __NV_NOSAT, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

extern "C" float tk_fp8_to_float(unsigned char v, int e5m2)
{
    if (e5m2) {
        __nv_fp8_e5m2 f;
        f.__x = v;
        return float(f);
    }
    __nv_fp8_e4m3 f;
    f.__x = v;
    return float(f);
}

/* the structs' constructors (from float, __NV_SATFINITE) */
extern "C" unsigned char tk_ctor(float x, int e5m2)
{
    return e5m2 ? __nv_fp8_e5m2(x).__x : __nv_fp8_e4m3(x).__x;
}

extern "C" unsigned tk_x4(float a, float b, float c, float d)
{
    return __nv_fp8x4_e4m3(float4{a, b, c, d}).__x;
}

extern "C" unsigned tk_x2_e5m2(float a, float b)
{
    return __nv_fp8x2_e5m2(float2{a, b}).__x;
}
