/* micro.h: what bench/conv_cpu.c and bench/bn_cpu.c share: a clock and filled arrays. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n floats 0.01 (i % mod) */
static float *filled(int64_t n, int mod)
{
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = 0.01f * (float)(i % mod);
    return p;
}
