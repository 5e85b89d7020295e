/* rt_vec.h: the runtime's short vectors (kernels.c, attention.c, batchnorm.c). The
 * runtime is built with -O3 and no -march, where gcc vectorizes few loops, so the hot
 * loops use GCC vector types (SSE2 on x86-64, NEON on arm64; AVX2 in the functions built
 * a second time for it). Elementwise vector arithmetic rounds exactly as the scalar code
 * would; only sums are reordered, always in the same way for a given length. */
#ifndef RT_VEC_H
#define RT_VEC_H

#include <stdint.h>
#include <string.h>

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

static inline d4 add4d(d4 a, d4 b) { return (d4){a.lo + b.lo, a.hi + b.hi}; }
static inline d4 mul4d(d4 a, d4 b) { return (d4){a.lo * b.lo, a.hi * b.hi}; }
static inline double hsum4d(d4 a) { return (a.lo[0] + a.lo[1]) + (a.hi[0] + a.hi[1]); }

#endif
