/* kernels.h: what the CPU kernels' files share (kernels.c: the thread pool and the
 * GEMMs; im2col.c, pooling.c, norms.c, glu.c, losses.c): an exec's pool, a rounded-up
 * division, and sums in double over fixed lanes (the same bits whatever the caller). */
#ifndef RT_KERNELS_H
#define RT_KERNELS_H
#include "rt.h"
#include "rt_vec.h"

/* e's thread pool; exits naming the fault where e has none */
rt_pool *rt_pool_of(const rt_exec *e);

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* sum x[j] in double: eight lanes, added in a fixed order. */
static inline double sum_f64(const float *restrict x, int64_t n)
{
    d4 a0 = {{0, 0}, {0, 0}}, a1 = a0;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        a0 = add4d(a0, cvt4(ld4(x + j)));
        a1 = add4d(a1, cvt4(ld4(x + j + 4)));
    }
    double t = hsum4d(add4d(a0, a1));
    for (; j < n; j++)
        t += x[j];
    return t;
}

/* sum (x[j] - mu)^2 in double. */
static inline double sqdev_f64(const float *restrict x, int64_t n, double mu)
{
    d4 a0 = {{0, 0}, {0, 0}}, a1 = a0, m = {{mu, mu}, {mu, mu}};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        d4 d0 = cvt4(ld4(x + j)), d1 = cvt4(ld4(x + j + 4));
        d0 = (d4){d0.lo - m.lo, d0.hi - m.hi};
        d1 = (d4){d1.lo - m.lo, d1.hi - m.hi};
        a0 = add4d(a0, mul4d(d0, d0));
        a1 = add4d(a1, mul4d(d1, d1));
    }
    double t = hsum4d(add4d(a0, a1));
    for (; j < n; j++)
        t += (x[j] - mu) * (x[j] - mu);
    return t;
}

#endif
