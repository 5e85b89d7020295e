/* sample_draw.c: what one --sample draw costs on the host (runtime/sampling.c) over a
 * vocabulary of V ids (default Llama 3's 128256; logits normal, sd 3, temperature 0.8),
 * for the --top-k and --top-p given: `sample_draw K P [V]` prints one JSON line, the
 * mean of 200 draws after 20. bench/sample_draw.sh builds it against two sampling.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "sampling.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: sample_draw TOP_K TOP_P [V]\n");
        return 2;
    }
    int64_t V = argc > 3 ? atoll(argv[3]) : 128256;
    rt_rng g;
    rt_rng_seed(&g, 1);
    float *l = malloc((size_t)V * sizeof *l);
    for (int64_t v = 0; v < V; v++)
        l[v] = (float)(rt_rng_normal(&g) * 3.0);
    rt_sampler s = {.V = V, .temperature = 0.8, .top_k = atoll(argv[1]), .top_p = atof(argv[2]),
                    .penalty = 1, .prob = malloc((size_t)V * sizeof(double)),
                    .order = malloc((size_t)V * sizeof(int32_t)),
                    .adjusted = malloc((size_t)V * sizeof(float))};
    long picks = 0;
    for (int i = 0; i < 20; i++)
        picks += rt_sample_draw(&s, l, &g);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 200; i++)
        picks += rt_sample_draw(&s, l, &g);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = ((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6) / 200;
    printf("{\"V\":%lld,\"top_k\":%s,\"top_p\":%s,\"ms_per_draw\":%.3f,\"picks\":%ld}\n", (long long)V,
           argv[1], argv[2], ms, picks);
    return 0;
}
