/* conv_cpu.c: one conv2d layer's three CPU calls (runtime/conv.c) timed alone, best of 7,
 * on a pool of T threads: the forward, the input gradient and the weight gradient at
 * batch 128, 3x3 with padding 1 (as resnet_fashion_cpu has them) or K x K with padding
 * K / 2. One JSON line.
 *
 *   cc -O2 -Iruntime bench/conv_cpu.c build/librt.a -lopenblas -lcjson -lm -lpthread -ldl \
 *       -o build/conv_cpu
 *   OPENBLAS_CORETYPE=SkylakeX TRAINC_CONV_DIRECT=0|1|avx2 build/conv_cpu C HW COUT STRIDE T [K]
 *
 * (OPENBLAS_CORETYPE: the core a trainer chooses on this CPU, see trainc --version;
 * TRAINC_CONV_DIRECT=0: im2col and OpenBLAS GEMMs instead of runtime/conv_direct.c; avx2:
 * its AVX2 kernels on a CPU with AVX-512, beside OPENBLAS_CORETYPE=Haswell, as a CPU
 * without AVX-512 runs. "direct" in the line: the level, 0 off, 1 AVX2, 2 AVX-512.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "micro.h"
#include "rt.h"

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: conv_cpu C HW COUT STRIDE THREADS [K]\n");
        return 2;
    }
    int64_t B = 128, C = atoi(argv[1]), H = atoi(argv[2]), W = H, Cout = atoi(argv[3]);
    int64_t s = atoi(argv[4]), k = argc > 6 ? atoi(argv[6]) : 3, pad = k / 2, OH = (H + 2 * pad - k) / s + 1, OW = OH;
    int threads = atoi(argv[5]);
    int64_t n = B * OH * OW, ckk = C * k * k;
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.rt = rt_pool_new(threads);
    e.grad_scale = 1;
    float *x = filled(B * C * H * W, 13), *w = filled(Cout * ckk, 7), *dy = filled(Cout * n, 5);
    float *yt = filled(Cout * n, 3), *col = filled(ckk * n, 3), *dx = filled(B * C * H * W, 3);
    float *dw = filled(Cout * ckk, 3);
    double best[3] = {1e9, 1e9, 1e9};
    for (int r = 0; r < 7; r++) {
        double t[4];
        t[0] = now();
        rt_conv_fwd(&e, x, w, col, yt, B, C, H, W, k, s, pad, OH, OW, Cout);
        t[1] = now();
        rt_conv_bwd_data(&e, w, dy, col, dx, B, C, H, W, k, s, pad, OH, OW, Cout);
        t[2] = now();
        rt_conv_bwd_weight(&e, x, dy, col, dw, B, C, H, W, k, s, pad, OH, OW, Cout);
        t[3] = now();
        for (int i = 0; i < 3; i++)
            if (t[i + 1] - t[i] < best[i])
                best[i] = t[i + 1] - t[i];
    }
    double flop = 2.0 * (double)(B * Cout * OH * OW * ckk);
    printf("{\"C\": %lld, \"HW\": %lld, \"out\": %lld, \"k\": %lld, \"stride\": %lld, "
           "\"threads\": %d, "
           "\"direct\": %d, \"fwd_ms\": %.3f, \"dx_ms\": %.3f, \"dw_ms\": %.3f, "
           "\"fwd_gflops\": %.1f, \"dx_gflops\": %.1f, \"dw_gflops\": %.1f}\n",
           (long long)C, (long long)H, (long long)Cout, (long long)k, (long long)s, threads,
           rt_conv_direct_cpu(), best[0] * 1e3, best[1] * 1e3, best[2] * 1e3,
           flop / best[0] / 1e9, flop / best[1] / 1e9, flop / best[2] / 1e9);
    return 0;
}
