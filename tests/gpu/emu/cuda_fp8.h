/* cuda_fp8.h (the emulator's): the part of CUDA's cuda_fp8.h that kernels use, for
 * tests/gpu/emu. emu.h includes it before the kernels, and the emulator's folder is on
 * the include path of tests/gpu_emu.sh and of the fake NVRTC, so a kernel's own
 * `#include <cuda_fp8.h>` finds this file, already included (its guard is the real
 * header's). Real NVRTC 13.0 has no built-in cuda_fp8.h: there the program needs
 * --include-path=$CUDA_HOME/include (the toolkit's cuda_fp8.h, cuda_fp16.h, cuda_bf16.h).
 *
 * What is here, with the toolkit's values bit for bit (cuda_fp8.hpp of CUDA 13.0):
 *   __nv_fp8_storage_t (one byte), __nv_fp8x2_storage_t, __nv_fp8x4_storage_t;
 *   __nv_saturation_t (__NV_NOSAT, __NV_SATFINITE), __nv_fp8_interpretation_t
 *   (__NV_E4M3, __NV_E5M2);
 *   __nv_cvt_float_to_fp8, __nv_cvt_double_to_fp8, __nv_cvt_float2_to_fp8x2;
 *   __nv_fp8_e4m3 and __nv_fp8_e5m2 (member __x): explicit constructors from float,
 *   double and the integer types (through float), all __NV_SATFINITE; explicit
 *   conversions to float and double;
 *   __nv_fp8x2_e4m3, __nv_fp8x2_e5m2, __nv_fp8x4_e4m3 and __nv_fp8x4_e5m2: from and
 *   to float2 and float4 (x in the low byte).
 * Not here: __half and __nv_bfloat16 conversions, e8m0, arithmetic.
 * The scalar part (the types, the enums, the conversion functions and
 * emu_fp8_to_float, the exact widening) is C too: the fake cuBLASLt
 * (tests/fake_gpu/fake_cublaslt.c) takes its FP8 from here. The includer brings
 * <string.h> and <math.h> (emu.h: <cstring>, <cmath>).
 *
 * The formats. E4M3: bias 7, no infinity, 0x7F and 0xFF are NaN, largest 448 (0x7E),
 * smallest subnormal 2^-9. E5M2: IEEE-like, bias 15, 0x7C infinity, largest 57344
 * (0x7B), smallest subnormal 2^-16.
 * Narrowing rounds to nearest, ties to even, subnormals included. A value that rounds
 * past the largest finite one, or an infinity, becomes that largest value (with its
 * sign) under __NV_SATFINITE; under __NV_NOSAT a NaN (0x7F) in E4M3 and an infinity
 * in E5M2. A float NaN becomes 0x7F in both formats (the header makes it the canonical
 * 0x7FFFFFFF first); a double NaN keeps its sign, and in E5M2 its two top payload bits
 * (quiet). Widening is exact; every NaN becomes the float 0x7FFFE000, as the header's
 * device code makes it (through fp16's canonical NaN 0x7FFF and cvt.f32.f16; its host
 * code gives 0x7FFFFFFF). On the GPU, __NV_SATFINITE is the cvt.rn.satfinite
 * instruction: the same values, a NaN's bits its own. */
#ifndef __CUDA_FP8_H__
#define __CUDA_FP8_H__

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short int __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;

typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

/* A finite nonzero |x| is n 2^(e - M) with e = max(floor(log2 |x|), EMIN) and M the
 * mantissa's bits; since the encoding is monotonic, its code is (e - EMIN) 2^M + n
 * (subnormals: e = EMIN, n < 2^M), n rounded to an integer, ties to even. Scaling by a
 * power of two is exact in double for every |x| that does not underflow to 0. */
static inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(const double x, const __nv_saturation_t sat,
                                                        const __nv_fp8_interpretation_t fmt)
{
    const int M = fmt == __NV_E4M3 ? 3 : 2, EMIN = fmt == __NV_E4M3 ? -6 : -14;
    const unsigned maxcode = fmt == __NV_E4M3 ? 0x7Eu : 0x7Bu;
    const unsigned overflow = sat == __NV_SATFINITE ? maxcode : fmt == __NV_E4M3 ? 0x7Fu : 0x7Cu;
    unsigned long long bits;
    memcpy(&bits, &x, sizeof bits);
    const unsigned sign = (unsigned)(bits >> 63) << 7;
    const double a = fabs(x);
    unsigned code;
    if (a != a)
        code = fmt == __NV_E4M3 ? 0x7Fu : 0x7Eu | (unsigned)(bits >> 50 & 3u);
    else if (a == 0)
        code = 0;
    else if (a == __builtin_inf())
        code = overflow;
    else {
        int e;
        frexp(a, &e);
        e = e - 1 < EMIN ? EMIN : e - 1;
        const double n = nearbyint(ldexp(a, M - e));
        const double c = (double)((e - EMIN) << M) + n;
        code = c > maxcode ? overflow : (unsigned)c;
    }
    return (__nv_fp8_storage_t)(code | sign);
}

static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(const float x, const __nv_saturation_t sat,
                                                       const __nv_fp8_interpretation_t fmt)
{
    float c = x;
    if (x != x) {   /* the canonical NaN, positive: 0x7FFFFFFF */
        const unsigned nan = 0x7FFFFFFFu;
        memcpy(&c, &nan, sizeof c);
    }
    return __nv_cvt_double_to_fp8((double)c, sat, fmt);
}

/* the exact value of an fp8 code (not a toolkit function: the structs' widening) */
static inline float emu_fp8_to_float(const __nv_fp8_storage_t v, const __nv_fp8_interpretation_t fmt)
{
    const int M = fmt == __NV_E4M3 ? 3 : 2, EMIN = fmt == __NV_E4M3 ? -6 : -14;
    const unsigned mag = v & 0x7Fu, field = mag >> M, frac = mag & ((1u << M) - 1);
    float r;
    if (fmt == __NV_E4M3 ? mag == 0x7Fu : field == 31 && frac != 0) {
        const unsigned nan = 0x7FFFE000u;
        memcpy(&r, &nan, sizeof r);
        return r;
    }
    if (fmt == __NV_E5M2 && field == 31)
        r = __builtin_inff();
    else if (field == 0)
        r = ldexpf((float)frac, EMIN - M);
    else
        r = ldexpf((float)((1u << M) | frac), (int)field - 1 + EMIN - M);
    return v & 0x80u ? -r : r;
}

#ifdef __cplusplus
/* x in the low byte, as cvt.rn.satfinite.e4m3x2.f32 d, y, x packs them */
static inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(const float2 x, const __nv_saturation_t sat,
                                                            const __nv_fp8_interpretation_t fmt)
{
    return (__nv_fp8x2_storage_t)(__nv_cvt_float_to_fp8(x.y, sat, fmt) << 8 |
                                  __nv_cvt_float_to_fp8(x.x, sat, fmt));
}

/* __nv_fp8_e4m3 and __nv_fp8_e5m2 (and the x4 structs): structs of those names, as in
 * the toolkit, each written once here as a template they derive from */
template <__nv_fp8_interpretation_t F> struct emu_fp8 {
    __nv_fp8_storage_t __x;
    emu_fp8() = default;
    explicit emu_fp8(const float f) { __x = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, F); }
    explicit emu_fp8(const double f) { __x = __nv_cvt_double_to_fp8(f, __NV_SATFINITE, F); }
    explicit emu_fp8(const unsigned short int v) : emu_fp8((float)v) {}
    explicit emu_fp8(const unsigned int v) : emu_fp8((float)v) {}
    explicit emu_fp8(const unsigned long int v) : emu_fp8((float)v) {}
    explicit emu_fp8(const unsigned long long int v) : emu_fp8((float)v) {}
    explicit emu_fp8(const short int v) : emu_fp8((float)v) {}
    explicit emu_fp8(const int v) : emu_fp8((float)v) {}
    explicit emu_fp8(const long int v) : emu_fp8((float)v) {}
    explicit emu_fp8(const long long int v) : emu_fp8((float)v) {}
    explicit operator float() const { return emu_fp8_to_float(__x, F); }
    explicit operator double() const { return (double)emu_fp8_to_float(__x, F); }
};
struct __nv_fp8_e4m3 : emu_fp8<__NV_E4M3> {
    using emu_fp8::emu_fp8;
};
struct __nv_fp8_e5m2 : emu_fp8<__NV_E5M2> {
    using emu_fp8::emu_fp8;
};
static_assert(sizeof(__nv_fp8_e4m3) == 1 && alignof(__nv_fp8_e4m3) == 1, "one byte, as on the GPU");

template <__nv_fp8_interpretation_t F> struct alignas(2) emu_fp8x2 {
    __nv_fp8x2_storage_t __x;
    emu_fp8x2() = default;
    explicit emu_fp8x2(const float2 f) { __x = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, F); }
    explicit operator float2() const
    {
        return float2{emu_fp8_to_float((__nv_fp8_storage_t)__x, F),
                      emu_fp8_to_float((__nv_fp8_storage_t)(__x >> 8), F)};
    }
};
struct __nv_fp8x2_e4m3 : emu_fp8x2<__NV_E4M3> {
    using emu_fp8x2::emu_fp8x2;
};
struct __nv_fp8x2_e5m2 : emu_fp8x2<__NV_E5M2> {
    using emu_fp8x2::emu_fp8x2;
};

template <__nv_fp8_interpretation_t F> struct alignas(4) emu_fp8x4 {
    __nv_fp8x4_storage_t __x;
    emu_fp8x4() = default;
    explicit emu_fp8x4(const float4 f)
    {
        __x = (__nv_fp8x4_storage_t)__nv_cvt_float2_to_fp8x2(float2{f.x, f.y}, __NV_SATFINITE, F) |
              (__nv_fp8x4_storage_t)__nv_cvt_float2_to_fp8x2(float2{f.z, f.w}, __NV_SATFINITE, F) << 16;
    }
    explicit operator float4() const
    {
        return float4{emu_fp8_to_float((__nv_fp8_storage_t)__x, F),
                      emu_fp8_to_float((__nv_fp8_storage_t)(__x >> 8), F),
                      emu_fp8_to_float((__nv_fp8_storage_t)(__x >> 16), F),
                      emu_fp8_to_float((__nv_fp8_storage_t)(__x >> 24), F)};
    }
};
struct __nv_fp8x4_e4m3 : emu_fp8x4<__NV_E4M3> {
    using emu_fp8x4::emu_fp8x4;
};
struct __nv_fp8x4_e5m2 : emu_fp8x4<__NV_E5M2> {
    using emu_fp8x4::emu_fp8x4;
};
#endif /* __cplusplus */

#endif
