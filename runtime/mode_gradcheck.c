/* mode_gradcheck.c: --gradcheck, a developer option: each parameter tensor's gradient
 * against central differences of the loss along a random direction (tests/). A GAN's
 * discriminator is checked against d_loss, its generator against g_loss (through the
 * discriminator as it is), on one batch and one fixed draw of z. */
#include <stdlib.h>
#include <string.h>
#include "run.h"

/* What the losses are taken on: the batch and, for a GAN that draws z, its z */
typedef struct Point {
    const rt_batch *b;
    float *z;
} Point;

/* The batch bound as a training pass binds it (a GAN's drawn z after its inputs) */
static void bind(Run *r, const Point *at)
{
    rt_bind_batch(r, at->b, 0);
    if (at->z)
        r->e.in[r->m->n_inputs] = at->z;
    r->e.rng_key = 12345;
    r->e.grad_scale = 1.0f / (float)((double)at->b->rows * (double)r->m->loss_terms);
}

/* The loss the gradient of network `net` is of: the model's (net -1), a GAN's d_loss
 * (1) or g_loss (0; the generator's forward is the discriminator's turn's) */
static double loss_at(Run *r, const Point *at, int net)
{
    bind(r, at);
    r->m->forward(&r->e, 1);
    if (net < 0)
        return r->e.loss_sum / (double)r->e.terms;
    if (net == 1)
        return r->e.loss_sum / (double)at->b->rows;
    r->e.loss_sum = 0;
    r->m->gan_forward_g(&r->e);
    return r->e.loss_sum / (double)at->b->rows;
}

/* The analytic gradients into r->grads: the model's, or a GAN's two networks' (each
 * from its own turn; the discriminator's turn leaves no gradient in the generator) */
static void analytic(Run *r, const Point *at)
{
    const rt_model *m = r->m;
    memset(r->grads, 0, (size_t)m->trainable_floats * sizeof(float));
    loss_at(r, at, m->gan ? 1 : -1);
    m->backward(&r->e);
    if (!m->gan)
        return;
    loss_at(r, at, 0);
    m->gan_backward_g(&r->e);
}

/* Parameter p's check: central differences of the loss of its network along a random
 * unit direction v (from rng) against <g, v>, at steps h0, h0 / 10, h0 / 100 until one
 * agrees within 2e-2. A big step can cross a kink of relu or maxpool; a small one
 * drowns in float32 rounding. A correct rule agrees at some step; a wrong one at none.
 * 1 when it agrees (the line printed either way). */
static int check_param(Run *r, const Point *at, const rt_param *p, const float *g, int net,
                       rt_rng *rng)
{
    float *w = r->params + p->offset;
    double *v = calloc((size_t)p->numel, sizeof *v);
    float *saved = malloc((size_t)p->numel * sizeof *saved);
    if (!v || !saved)
        rt_fail("gradcheck: out of memory");
    double nv = 0, an = 0;
    for (int64_t k = 0; k < p->numel; k++) {
        v[k] = rt_rng_normal(rng);
        nv += v[k] * v[k];
    }
    nv = sqrt(nv);
    for (int64_t k = 0; k < p->numel; k++) {
        v[k] /= nv;
        an += v[k] * g[k];
        saved[k] = w[k];
    }
    double best = INFINITY, fd = 0, h = 1e-2, best_h = h;
    for (int hi = 0; hi < 3 && best >= 2e-2; hi++, h /= 10) {
        for (int64_t k = 0; k < p->numel; k++)
            w[k] = (float)(saved[k] + h * v[k]);
        double lp = loss_at(r, at, net);
        for (int64_t k = 0; k < p->numel; k++)
            w[k] = (float)(saved[k] - h * v[k]);
        double lm = loss_at(r, at, net);
        memcpy(w, saved, (size_t)p->numel * sizeof *saved);
        double f = (lp - lm) / (2 * h);
        double err = fabs(f - an) / fmax(fmax(fabs(f), fabs(an)), 1e-2);
        if (err < best) {
            best = err;
            fd = f;
            best_h = h;
        }
    }
    int ok = best < 2e-2;
    printf("gradcheck %-24s analytic % .6e  numeric % .6e  (h %.0e)  rel.err %.2e  %s\n", p->name,
           an, fd, best_h, best, ok ? "ok" : "FAIL");
    free(v);
    free(saved);
    return ok;
}

/* A GAN's z for the batch, drawn once (standard normal, seeded), or NULL where z is a
 * data input */
static float *fixed_latents(const Run *r, int64_t rows)
{
    const rt_model *m = r->m;
    if (!m->gan || m->gan_latent_input >= 0)
        return NULL;
    float *z = rt_xmalloc((size_t)(rows * m->gan_latent_numel) * sizeof *z);
    rt_rng g;
    rt_rng_seed(&g, 7);
    for (int64_t i = 0; i < rows * m->gan_latent_numel; i++)
        z[i] = (float)rt_rng_normal(&g);
    return z;
}

int rt_gradcheck(Run *r)
{
    const rt_model *m = r->m;
    rt_loader_start(r->tl, 0, 0);
    const rt_batch *b = rt_loader_next(r->tl);
    if (!b)
        rt_input_error("gradcheck: no batch");
    Point at = {b, fixed_latents(r, b->rows)};
    analytic(r, &at);
    /* the gradients, kept: the passes below run in training mode, and a chunked head's
     * loss call adds to its weight's gradient in the forward pass */
    float *grads = malloc((size_t)(m->trainable_floats ? m->trainable_floats : 1) * sizeof *grads);
    if (!grads)
        rt_fail("gradcheck: out of memory");
    memcpy(grads, r->grads, (size_t)m->trainable_floats * sizeof *grads);
    rt_rng rng;
    rt_rng_seed(&rng, 99);
    int bad = 0;
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *p = &m->params[i];
        if (p->frozen)
            continue;   /* (train.freeze: no gradient computed) */
        int net = !m->gan ? -1 : p->offset >= m->gan_gen_floats;
        bad += !check_param(r, &at, p, grads + p->offset, net, &rng);
    }
    free(grads);
    rt_xfree(at.z);
    printf("gradcheck: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
