/* optim.c: the optimizers, the learning-rate schedules and gradient clipping, with
 * exactly the update rules of torch.optim.SGD, torch.optim.AdamW and
 * torch.nn.utils.clip_grad_norm_ (SPEC.md section 3). Arithmetic is fp32 like
 * PyTorch's on fp32 tensors; norms are accumulated in double. */
#include <math.h>
#include <string.h>
#include "rt_loop.h"

double rt_lr_at(const rt_train_config *c, int64_t step, int64_t total)
{
    double lr = c->lr;
    if (c->warmup_steps > 0 && step < c->warmup_steps)
        return lr * (double)(step + 1) / (double)c->warmup_steps;
    int64_t s = step - c->warmup_steps;
    double span = (double)(total - c->warmup_steps);
    double progress = span > 0 ? (double)s / span : 1.0;
    if (progress > 1.0)
        progress = 1.0;
    if (progress < 0.0)
        progress = 0.0;
    double f = c->final_lr_frac;
    switch (c->sched) {
    case RT_SCHED_CONSTANT: return lr;
    case RT_SCHED_STEP: return lr * pow(c->gamma, (double)(s / c->sched_every_steps));
    case RT_SCHED_COSINE: return lr * (f + (1.0 - f) * 0.5 * (1.0 + cos(M_PI * progress)));
    case RT_SCHED_LINEAR: return lr * (1.0 - (1.0 - f) * progress);
    }
    rt_die("bad schedule %d", c->sched);
}

double rt_grad_norm(const rt_model *m, const float *grads)
{
    double total = 0;
    for (int i = 0; i < m->n_params; i++) {
        const float *g = grads + m->params[i].offset;
        double s = 0;
        for (int64_t k = 0; k < m->params[i].numel; k++)
            s += (double)g[k] * (double)g[k];
        total += s;
    }
    return sqrt(total);
}

void rt_clip_grads(const rt_model *m, float *grads, double norm, double max_norm)
{
    float coef = (float)(max_norm / (norm + 1e-6));
    if (coef >= 1.0f)
        return;
    for (int i = 0; i < m->n_params; i++) {
        float *g = grads + m->params[i].offset;
        for (int64_t k = 0; k < m->params[i].numel; k++)
            g[k] *= coef;
    }
}

int64_t rt_optim_state_floats(const rt_train_config *c, const rt_model *m)
{
    if (c->opt == RT_OPT_ADAMW)
        return 2 * m->param_floats;
    return c->momentum > 0 ? m->param_floats : 0;
}

/* t: the number of this step, from 1 (AdamW's bias correction). */
void rt_optim_step(const rt_train_config *c, const rt_model *m, float *params, const float *grads,
                   float *state, int64_t t, double lr)
{
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *pp = &m->params[i];
        float *p = params + pp->offset;
        const float *g = grads + pp->offset;
        int64_t n = pp->numel;
        float wd = pp->rank >= 2 ? (float)c->weight_decay : 0.0f;
        if (c->opt == RT_OPT_ADAMW) {
            float *m1 = state + pp->offset, *m2 = state + m->param_floats + pp->offset;
            /* PyTorch takes 1 - beta in double, then rounds: (float)(1 - 0.9) != 1 - 0.9f */
            float b1 = (float)c->beta1, b2 = (float)c->beta2;
            float a1 = (float)(1.0 - c->beta1), a2 = (float)(1.0 - c->beta2);
            double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
            float step_size = (float)(lr / bc1);
            float bc2_sqrt = (float)sqrt(bc2);
            float decay = (float)(1.0 - lr * wd);
            float eps = (float)c->eps;
            for (int64_t k = 0; k < n; k++) {
                float gk = g[k];
                if (wd != 0.0f)
                    p[k] *= decay;
                m1[k] = m1[k] * b1 + gk * a1;
                m2[k] = m2[k] * b2 + a2 * gk * gk;
                float denom = sqrtf(m2[k]) / bc2_sqrt + eps;
                p[k] += -step_size * (m1[k] / denom);
            }
        } else {
            float mom = (float)c->momentum, lrf = (float)lr;
            float *buf = c->momentum > 0 ? state + pp->offset : NULL;
            for (int64_t k = 0; k < n; k++) {
                float d = g[k];
                if (wd != 0.0f)
                    d = d + wd * p[k];
                if (buf) {
                    buf[k] = t == 1 ? d : buf[k] * mom + d;
                    d = c->nesterov ? d + mom * buf[k] : buf[k];
                }
                p[k] += -lrf * d;
            }
        }
    }
}

void rt_rowsum_add(rt_exec *e, const float *x, float *db, int64_t rows, int64_t cols)
{
    (void)e;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        double s = 0;
        for (int64_t j = 0; j < cols; j++)
            s += row[j];
        db[r] += (float)s;
    }
}
