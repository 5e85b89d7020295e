/* swa.c: stochastic weight averaging (train.swa, docs/spec.md), Lightning's
 * StochasticWeightAveraging callback. From its first epoch the learning rate anneals to
 * swa.lr a step an epoch (torch's SWALR), and each epoch's start from then on takes the
 * weights into an equal average (the optimizer state's last part, where ema keeps its
 * own). A run that trains all its epochs ends with the average in the weights' place,
 * batchnorm's running statistics recomputed by one pass over the training data, and a
 * validation of it: model.safetensors holds it. */
#include <string.h>
#include "run.h"

/* The epoch (from 0) whose start takes the first average: Lightning's swa_start, from
 * swa_epoch_start's epoch (from 1) or its fraction of the epochs, int(E f) */
int64_t rt_swa_first_epoch(const rt_train_config *c)
{
    double f = c->swa_epoch_start;
    int64_t k = f < 1.0 ? (int64_t)((double)rt_epochs(c) * f) : (int64_t)f;
    return k > 1 ? k - 1 : 0;
}

/* The learning rate in epoch `epoch` of a run with swa: SWALR's, the rate of the
 * schedule at the first epoch's first step (lr0) annealed to swa.lr over
 * annealing_epochs epochs, lr0 (1 - a) + swa.lr a with a = anneal(min(1, j / A)) in
 * the j-th epoch from the first (with A 0, swa.lr from the first on). -1 before it. */
double rt_swa_lr(const Run *r, int64_t epoch)
{
    const rt_train_config *c = &r->c;
    int64_t first = rt_swa_first_epoch(c);
    if (!c->has_swa || r->lf || epoch < first)
        return -1.0;
    int64_t j = epoch - first, A = c->swa_anneal_epochs;
    if (A == 0 && j < 1)
        j = 1;   /* (SWALR's step count: max(1, step) without annealing) */
    double t = (double)j / (double)(A > 1 ? A : 1);
    t = t < 1.0 ? t : 1.0;
    double a = c->swa_anneal == RT_SWA_COS ? (1.0 - cos(M_PI * t)) / 2.0 : t;
    double lr0 = rt_lr_at(c, first * r->steps_per_epoch, r->total_steps > 0 ? r->total_steps : 1);
    return c->swa_lr * a + lr0 * (1.0 - a);
}

/* At an epoch's start (before its first batch): the weights taken into the average,
 * from the first epoch through the last (so the last epoch's training is not in it, as
 * Lightning's callback takes them at on_train_epoch_start); queued after the last
 * update on a GPU. The takes before are the epochs since the first. */
void rt_swa_epoch_start(Run *r, const rt_loop_state *s)
{
    const rt_train_config *c = &r->c;
    int64_t first = rt_swa_first_epoch(c);
    if (!c->has_swa || r->lf || s->batch != 0 || s->epoch < first || s->epoch >= rt_epochs(c))
        return;
    int64_t T = r->m->trainable_floats, at = (int64_t)rt_ema_part(c) * T;
    int64_t taken = s->epoch - first;
    if (r->gpu)
        rt_cu_swa_take(&r->e, (rt_dptr)(uintptr_t)r->e.params,
                       rt_cu_state(&r->e) + (rt_dptr)at * sizeof(float), T, taken);
    else
        rt_swa_take(r->e.rt, r->params, r->state + at, T, taken);
}

/* batchnorm's running statistics as torch's reset_running_stats leaves them: means 0,
 * variances 1, counts 0 (the layers' state is batchnorm's alone) */
static void reset_stats(Run *r)
{
    const rt_model *m = r->m;
    if (r->gpu)
        rt_cu_layer_state(&r->e, r->layer_state, 0);
    for (int i = 0; i < m->n_state; i++) {
        const rt_param *p = &m->state[i];
        float *v = r->layer_state + p->offset;
        size_t len = strlen(p->name);
        int var = len >= 11 && !strcmp(p->name + len - 11, "running_var");
        int64_t n = p->dtype == RT_I64 ? 2 * p->numel : p->numel;
        for (int64_t k = 0; k < n; k++)
            v[k] = var ? 1.0f : 0.0f;
    }
    if (r->gpu)
        rt_cu_layer_state(&r->e, r->layer_state, 1);
}

/* Lightning's extra epoch for batchnorm: the statistics reset, then the training data's
 * batches (epoch `epochs`'s order) forward in training mode, no gradient and no update,
 * each batchnorm's momentum 1 / (batches so far + 1) (torch's momentum None: the
 * running statistics the mean of the batches'); on several ranks rank 0's, as DDP's
 * broadcast_buffers. */
static void bn_pass(Run *r)
{
    const rt_train_config *c = &r->c;
    reset_stats(r);
    rt_loader_start(r->tl, rt_epochs(c), 0);
    r->e.train = 1;
    r->e.grad_scale = 1.0f;
    for (int64_t j = 0; j < r->batches_per_epoch; j++) {
        const rt_batch *b = rt_loader_next(r->tl);
        if (!b)
            rt_die("loader ended early");
        rt_bind_batch(r, b, 0);
        r->e.rng_key = rt_mix(rt_mix(c->seed, (uint64_t)-1), (uint64_t)j);
        r->e.bn_momentum = (float)(1.0 / (double)(j + 1));
        r->m->forward(&r->e, 1);
        rt_end_pass(r);
    }
    r->e.bn_momentum = 0.0f;
    if (r->world > 1)
        rt_share_layer_state(r);
}

/* After a run that trained all its epochs: the average in the weights' place (copied:
 * the trained weights are gone, as Lightning's transfer_weights leaves them), the
 * statistics pass where there is batchnorm, and a validation of it (its record says
 * "swa": true). 1: done (model.safetensors is to be written from the weights). */
int rt_swa_finish(Run *r, rt_loop_state *s, int best_mode)
{
    const rt_train_config *c = &r->c;
    if (!c->has_swa || r->lf || s->epoch < rt_epochs(c))
        return 0;
    int64_t T = r->m->trainable_floats, at = (int64_t)rt_ema_part(c) * T;
    if (r->gpu) {
        rt_cu_copy_dd(&r->e, (rt_dptr)(uintptr_t)r->e.params,
                      rt_cu_state(&r->e) + (rt_dptr)at * sizeof(float), (size_t)T * sizeof(float));
        rt_cu_copy_params16(&r->e, r->m);
    } else
        memcpy(r->params, r->state + at, (size_t)T * sizeof(float));
    if (r->m->n_state)
        bn_pass(r);
    r->swa_done = 1;
    if (r->has_val) {
        int64_t epoch = s->epoch;
        s->epoch = rt_epochs(c) - 1;   /* (its record: the last epoch's, as the last's) */
        rt_validation(r, s, best_mode);
        s->epoch = epoch;
    }
    return 1;
}
