/* bn_cpu.c: batchnorm's two CPU calls (runtime/batchnorm.c) timed alone, best of 7, on a
 * pool of T threads: the training forward's statistics and the backward (its sums and
 * dx), at batch 128 over [C, HW] planes as resnet_fashion_cpu has them. One JSON line.
 *
 *   cc -O2 -Iruntime bench/bn_cpu.c build/librt.a $(mpicc --showme:link) -lopenblas -lcjson \
 *       -lm -lpthread -ldl -o build/bn_cpu
 *   build/bn_cpu C HW T */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "micro.h"
#include "rt.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: bn_cpu C HW THREADS\n");
        return 2;
    }
    int64_t B = 128, C = atoi(argv[1]), HW = atoi(argv[2]), n = B * C * HW;
    int threads = atoi(argv[3]);
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.rt = rt_pool_new(threads);
    e.train = 1;
    float *x = filled(n, 13), *dy = filled(n, 5), *dx = filled(n, 3), *w = filled(C, 7);
    float *b = filled(C, 3), *v[8];
    for (int i = 0; i < 8; i++)
        v[i] = filled(C, 1);   /* scale, shift, mean, rstd, run_mean, run_var, dw, db */
    float count[2] = {0, 0};
    double best[2] = {1e9, 1e9};
    for (int r = 0; r < 7; r++) {
        double t[3];
        t[0] = now();
        rt_batchnorm_fwd(&e, x, w, b, v[0], v[1], v[2], v[3], v[4], v[5], count, B, C, HW,
                         1e-5f, 0.1f, 0);
        t[1] = now();
        rt_batchnorm_bwd(&e, x, w, v[2], v[3], dy, dx, v[6], v[7], B, C, HW, 0);
        t[2] = now();
        for (int i = 0; i < 2; i++)
            if (t[i + 1] - t[i] < best[i])
                best[i] = t[i + 1] - t[i];
    }
    printf("{\"C\": %lld, \"HW\": %lld, \"threads\": %d, \"stats_ms\": %.3f, \"bwd_ms\": %.3f, "
           "\"stats_GBs\": %.1f, \"bwd_GBs\": %.1f}\n",
           (long long)C, (long long)HW, threads, best[0] * 1e3, best[1] * 1e3,
           4.0 * (double)n / best[0] / 1e9, 20.0 * (double)n / best[1] / 1e9);
    return 0;
}
