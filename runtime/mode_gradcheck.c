/* mode_gradcheck.c: --gradcheck, a developer option: each parameter tensor's gradient
 * against central differences of the loss along a random direction (tests/). */
#include <stdlib.h>
#include <string.h>
#include "run.h"

static double loss_at(Run *r, const rt_batch *b)
{
    rt_bind_batch(r, b, 0);
    r->e.rng_key = 12345;
    r->e.grad_scale = 1.0f / (float)((double)b->rows * (double)r->m->loss_terms);
    r->m->forward(&r->e, 1);
    return r->e.loss_sum / (double)r->e.terms;
}

/* Central differences along a random unit direction of each parameter tensor,
 * against the analytic directional derivative <grad, v>. */
int rt_gradcheck(Run *r)
{
    const rt_model *m = r->m;
    rt_loader_start(r->tl, 0, 0);
    const rt_batch *b = rt_loader_next(r->tl);
    if (!b)
        rt_input_error("gradcheck: no batch");
    memset(r->grads, 0, (size_t)m->trainable_floats * sizeof(float));
    loss_at(r, b);
    m->backward(&r->e);
    /* the gradients, kept: the passes below run in training mode, and a chunked head's
     * loss call adds to its weight's gradient in the forward pass */
    float *grads = malloc((size_t)(m->trainable_floats ? m->trainable_floats : 1) * sizeof *grads);
    if (!grads)
        rt_fail("gradcheck: out of memory");
    memcpy(grads, r->grads, (size_t)m->trainable_floats * sizeof *grads);
    rt_rng rng;
    rt_rng_seed(&rng, 99);
    int bad = 0;
    const double h0 = 1e-2;
    double h = h0;
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *p = &m->params[i];
        if (p->frozen)
            continue;   /* (train.freeze: no gradient computed) */
        float *w = r->params + p->offset;
        const float *g = grads + p->offset;
        double *v = calloc((size_t)p->numel, sizeof *v);
        float *saved = malloc((size_t)p->numel * sizeof *saved);
        double nv = 0, an = 0;
        for (int64_t k = 0; k < p->numel; k++) {
            v[k] = rt_rng_normal(&rng);
            nv += v[k] * v[k];
        }
        nv = sqrt(nv);
        for (int64_t k = 0; k < p->numel; k++) {
            v[k] /= nv;
            an += v[k] * g[k];
            saved[k] = w[k];
        }
        /* A big step can cross a kink of relu or maxpool; a small one drowns in float32
         * rounding. A correct rule agrees at some step; a wrong one at none. */
        double best = INFINITY, fd = 0, best_h = h;
        for (int hi = 0; hi < 3 && best >= 2e-2; hi++, h /= 10) {
            for (int64_t k = 0; k < p->numel; k++)
                w[k] = (float)(saved[k] + h * v[k]);
            double lp = loss_at(r, b);
            for (int64_t k = 0; k < p->numel; k++)
                w[k] = (float)(saved[k] - h * v[k]);
            double lm = loss_at(r, b);
            memcpy(w, saved, (size_t)p->numel * sizeof *saved);
            double f = (lp - lm) / (2 * h);
            double err = fabs(f - an) / fmax(fmax(fabs(f), fabs(an)), 1e-2);
            if (err < best) {
                best = err;
                fd = f;
                best_h = h;
            }
        }
        h = h0;
        int ok = best < 2e-2;
        printf("gradcheck %-24s analytic % .6e  numeric % .6e  (h %.0e)  rel.err %.2e  %s\n", p->name,
               an, fd, best_h, best, ok ? "ok" : "FAIL");
        bad += !ok;
        free(v);
        free(saved);
    }
    free(grads);
    printf("gradcheck: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
