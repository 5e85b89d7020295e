/* sampling.h: the next token's draw for --sample (sampling.c), apart from the trainer so
 * that tests/unit/test_sampling.c can check the filters against transformers'. */
#ifndef RT_SAMPLING_H
#define RT_SAMPLING_H

#include <stdint.h>
#include "rt.h"

typedef struct rt_sampler {
    int64_t V;                 /* the vocabulary drawn from: ids [0, V) */
    double temperature;        /* > 0 */
    int64_t top_k;             /* keep the k most likely ids (ties at the k-th kept); 0: all */
    double top_p;              /* keep the most likely ids holding top_p of the mass; 1: all */
    double min_p;              /* keep the ids at least min_p times as likely as the most; 0: all */
    double penalty;            /* repetition penalty (> 0; 1: none) on the ids seen marks */
    const unsigned char *seen; /* V flags: the ids of the prompt and the sample so far */
    float *adjusted;           /* V floats of scratch: the logits with the penalty applied */
    double *prob;              /* V doubles of scratch: the kept ids' weights, 0 elsewhere */
    int32_t *order;            /* V ints of scratch: a heap of the ids by logit (sampling.c) */
} rt_sampler;

/* The kept ids' weights exp(logit / T - max) into s->prob (each seen id's logit first
 * divided by the penalty, multiplied where negative), 0 for those top_k, top_p and min_p
 * leave out; their sum, or 0 when logit / T overflows (the argmax then in *top). */
double rt_sample_weights(const rt_sampler *s, const float *logits, int64_t *top);

/* An id drawn by rng from the weights rt_sample_weights gives (one uniform draw in
 * every case); the argmax where logit / temperature overflows. */
int64_t rt_sample_draw(const rt_sampler *s, const float *logits, rt_rng *rng);

#endif
