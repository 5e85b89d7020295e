/* rt_half.h: bf16 and fp16 <-> float on the host, bit for bit what the GPU kernels do
 * (templates/cuda/common.cuh: rt_float_bf16, rt_float_f16 and their inverses): widening
 * is exact; narrowing rounds to nearest, ties to even, keeps NaN a (quiet) NaN, and
 * sends fp16's overflow (|x| >= 65520) to infinity. Used where the host reads or writes
 * 16-bit device data: --sample's logits, tests/gpu/check_ops, the fake cuBLASLt. */
#ifndef RT_HALF_H
#define RT_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t rt_half_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float rt_half_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float rt_bf16_to_float(uint16_t h) { return rt_half_float((uint32_t)h << 16); }

static inline uint16_t rt_float_to_bf16(float f)
{
    uint32_t u = rt_half_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float rt_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {   /* zero or subnormal: m x 2^-24, exact in float */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (e == 31)    /* infinity, NaN */
        return rt_half_float(sign | 0x7f800000u | (m << 13));
    return rt_half_float(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t rt_float_to_f16(float f)
{
    uint32_t u = rt_half_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)             /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u)            /* 65520 and up (and infinity): infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {          /* a normal fp16: rebias, round 23 -> 10 bits */
        a -= 0x38000000u;
        return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
    }
    if (a < 0x33000000u)             /* below half the smallest subnormal: zero */
        return (uint16_t)sign;
    /* a subnormal: the 24-bit significand shifted right, rounded to nearest even */
    uint32_t M = (a & 0x7fffffu) | 0x800000u, s = 126u - (a >> 23);
    uint32_t q = M >> s, rem = M & ((1u << s) - 1u), half = 1u << (s - 1u);
    q += rem > half || (rem == half && (q & 1u));
    return (uint16_t)(sign | q);
}

#endif
