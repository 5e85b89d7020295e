/* The next token's draw (runtime/sampling.c): `test_sampling IN OUT` reads cases from
 * IN (each: int64 V, top_k and S; float64 top_p, temperature, the repetition penalty
 * and min_p; V float32 logits; S int32 ids seen), writes each case's distribution to OUT
 * (V float64: the kept weights normalized, 0 for the ids cut), for
 * tests/sampling_check.py to compare with transformers' RepetitionPenaltyLogitsProcessor,
 * TopKLogitsWarper, TopPLogitsWarper and MinPLogitsWarper. Here: 3000 draws of each case
 * (300 over a vocabulary past 10000) land on kept ids alone, at their probabilities (each id's count within 5 standard
 * deviations and 10 of its expectation). Exit 0, or 1 naming the case. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "sampling.h"

enum { DRAWS = 3000 };

/* draws of case k land where its weights say; 0, or 1 after naming what failed */
static int check_draws(int k, const rt_sampler *s, const float *logits, const double *p)
{
    long *count = calloc((size_t)s->V, sizeof *count);
    rt_rng rng;
    rt_rng_seed(&rng, 1234 + (uint64_t)k);
    int draws = s->V > 10000 ? DRAWS / 10 : DRAWS;   /* (a large vocabulary: fewer) */
    for (int i = 0; i < draws; i++)
        count[rt_sample_draw(s, logits, &rng)]++;
    int bad = 0;
    for (int64_t v = 0; v < s->V && !bad; v++) {
        double want = p[v] * draws, sd = sqrt(want * (1 - p[v]));
        if ((p[v] == 0 && count[v]) || fabs(count[v] - want) > 5 * sd + 10) {
            fprintf(stderr, "FAIL case %d: id %lld drawn %ld times of %d, probability %.6g\n",
                    k, (long long)v, count[v], draws, p[v]);
            bad = 1;
        }
    }
    free(count);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_sampling IN OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) {
        perror("test_sampling");
        return 2;
    }
    int failures = 0, k = 0;
    int64_t head[3];
    double opt[4];
    for (; fread(head, sizeof head, 1, in) == 1; k++) {
        if (fread(opt, sizeof opt, 1, in) != 1)
            return 2;
        rt_sampler s = {.V = head[0], .top_k = head[1], .top_p = opt[0], .temperature = opt[1],
                        .penalty = opt[2], .min_p = opt[3]};
        float *logits = malloc((size_t)s.V * sizeof *logits);
        double *p = malloc((size_t)s.V * sizeof *p);
        unsigned char *seen = calloc((size_t)s.V, 1);
        int32_t id;
        s.prob = malloc((size_t)s.V * sizeof *s.prob);
        s.order = malloc((size_t)s.V * sizeof *s.order);
        s.adjusted = malloc((size_t)s.V * sizeof *s.adjusted);
        s.seen = seen;
        if (fread(logits, sizeof *logits, (size_t)s.V, in) != (size_t)s.V)
            return 2;
        for (int64_t i = 0; i < head[2]; i++) {
            if (fread(&id, sizeof id, 1, in) != 1 || id < 0 || id >= s.V)
                return 2;
            seen[id] = 1;
        }
        int64_t top;
        double sum = rt_sample_weights(&s, logits, &top);
        for (int64_t v = 0; v < s.V; v++)
            p[v] = sum > 0 ? s.prob[v] / sum : v == top;
        fwrite(p, sizeof *p, (size_t)s.V, out);
        failures += check_draws(k, &s, logits, p);
        free(logits);
        free(p);
        free(s.prob);
        free(s.order);
        free(s.adjusted);
        free(seen);
    }
    fclose(in);
    if (fclose(out) != 0)
        return 2;
    printf("%d cases, %d failed\n", k, failures);
    return failures != 0;
}
