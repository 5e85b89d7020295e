/* rt_vec.h: the runtime's short vectors (kernels.h's files, attention.c, batchnorm.c). The
 * runtime is built with -O3 and no -march, where gcc vectorizes few loops, so the hot
 * loops use GCC vector types (SSE2 on x86-64, NEON on arm64; AVX2 in the functions built
 * a second time for it). Elementwise vector arithmetic rounds exactly as the scalar code
 * would; only sums are reordered, always in the same way for a given length. */
#ifndef RT_VEC_H
#define RT_VEC_H

#include <stdint.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
/* Four doubles as two 16-byte halves: gcc keeps these in registers, where a v4d
 * without AVX would live in memory. */
typedef struct { v2d lo, hi; } d4;

static inline v4f ld4(const float *p) { v4f v; memcpy(&v, p, sizeof v); return v; }
static inline void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }
static inline v4f splat4(float a) { return (v4f){a, a, a, a}; }
static inline d4 ld4d(const double *p) { d4 v; memcpy(&v, p, sizeof v); return v; }
static inline void st4d(double *p, d4 v) { memcpy(p, &v, sizeof v); }

static inline d4 cvt4(v4f v)   /* cvtps2pd twice */
{
    v4d w = __builtin_convertvector(v, v4d);
    d4 r;
    memcpy(&r, &w, sizeof r);
    return r;
}

/* min(hi, max(lo, x)) on four lanes; a NaN stays NaN */
static inline v4f clamp4(v4f x, float lo, float hi)
{
#ifdef __SSE__
    return _mm_min_ps(splat4(hi), _mm_max_ps(splat4(lo), x));   /* (NaN: the second operand) */
#else
    v4i l = x < splat4(lo), h = x > splat4(hi);
    return (v4f)(((v4i)x & ~(l | h)) | ((v4i)splat4(lo) & l) | ((v4i)splat4(hi) & h));
#endif
}

/* Cephes' exp on four lanes, the part its callers share: x = n ln2 + r (|r| <= ln2/2, n
 * rounded to nearest by adding 1.5 * 2^23, so the low bits of *t = n + 1.5 * 2^23 hold
 * n), and p(r) ~ e^r. For x within [-104, 89]. */
static inline v4f exp4_core(v4f x, v4f *t)
{
    *t = x * splat4(1.44269504088896341f) + splat4(12582912.0f);
    v4f n = *t - splat4(12582912.0f);
    v4f r = (x - n * splat4(0.693145751953125f)) - n * splat4(1.42860682030941723e-6f);
    return r * r * (splat4(5.0000001201e-1f) + r * (splat4(1.6666665459e-1f) +
           r * (splat4(4.1665795894e-2f) + r * (splat4(8.3334519073e-3f) +
           r * (splat4(1.3981999507e-3f) + r * splat4(1.9875691500e-4f)))))) + r + splat4(1.0f);
}

/* trainc_rt.h's rt_expf on four lanes, with the same bits (within 0.97 ulp of exp; 0
 * below about -103.97, inf above 88.72, NaN stays NaN): the same operations in the same
 * order, but 2^n split as 2^floor(n/2) 2^ceil(n/2), where rt_expf truncates n/2: either
 * way p times the first factor is exact, so the product rounds once. (A NaN lane's p is
 * NaN.) */
static inline v4f exp4(v4f x)
{
    v4f t, p = exp4_core(clamp4(x, -104.0f, 89.0f), &t);
    v4i k = (v4i)t - 0x4b400000, k1 = k >> 1, k2 = k - k1;   /* (0x4b400000: 1.5 * 2^23) */
    return p * (v4f)((v4u)(k1 + 127) << 23) * (v4f)((v4u)(k2 + 127) << 23);
}

static inline d4 add4d(d4 a, d4 b) { return (d4){a.lo + b.lo, a.hi + b.hi}; }
static inline d4 mul4d(d4 a, d4 b) { return (d4){a.lo * b.lo, a.hi * b.hi}; }
static inline double hsum4d(d4 a) { return (a.lo[0] + a.lo[1]) + (a.hi[0] + a.hi[1]); }

#endif
