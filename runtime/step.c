/* step.c: one optimizer step. Its batches bound to the inputs (on a GPU copied ahead
 * into alternating slots), the forward and backward passes of each, the losses and
 * the gradients' norm (summed over ranks), and the update with clipping and
 * fp16-mixed's loss scaling. On one GPU a step whose numbers nothing needs at once is
 * queued without the host waiting for it ("steps without a wait"). */
#include <string.h>
#include "run.h"

uint64_t rt_mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Starts the copy of batch b into device slot `slot`: its inputs, or with the data on
 * the GPU (set 0 train, 1 val; -1: b holds data, as --sample's) its sample indices. */
static void upload(Run *r, const rt_batch *b, int slot, int set)
{
    if (r->data_on_gpu && set >= 0) {
        rt_cu_upload_index(&r->e, (const int32_t *)b->in[0], b->rows, slot, set);
        rt_cu_slot_epoch(&r->e, slot, b->epoch);   /* loader.augment's and mask's draws */
    } else
        rt_cu_upload_batch(&r->e, r->m, (const void *const *)b->in, b->rows, slot);
}

/* A batch's inputs for the next pass, and the pass's loss numbers reset (on a GPU
 * those of pass `pass` of a step; -1: the device's go on adding up). On a GPU the
 * inputs are copied asynchronously into device slot `slot` (RT_CU_SLOT_*): training
 * and validation each alternate two, so that the next batch's copy runs while this
 * one computes (see run_pass and validate.c); sampling uses the first validation
 * slot. On the CPU `slot` and `pass` mean nothing. */
void rt_bind_slot(Run *r, const rt_batch *b, int slot, int uploaded, int set, int pass)
{
    r->e.B = b->rows;
    r->e.loss_sum = 0;
    r->e.terms = 0;
    r->e.correct = 0;
    r->e.margin_sum = 0;
    if (r->gpu) {
        if (!uploaded)
            upload(r, b, slot, set);
        rt_cu_use_slot(&r->e, r->m, slot, b->rows);
        if (pass >= 0)
            rt_cu_begin_pass(&r->e, pass);
        return;
    }
    for (int k = 0; k < r->m->n_inputs; k++)
        r->e.in[k] = b->in[k];
}

/* A validation batch (set 1), a training batch outside a step (0), or one made
 * on the host (-1). */
void rt_bind_batch(Run *r, const rt_batch *b, int set)
{
    rt_bind_slot(r, b, RT_CU_SLOT_EVAL, 0, set, 0);
}

/* After a pass: on a GPU, wait for it and fetch its loss numbers (the batch's host
 * buffers are free again then: the pass waited for their copy). */
void rt_end_pass(Run *r)
{
    if (r->gpu)
        rt_cu_end_pass(&r->e);
}

/* "the training loss is nan after step N (...)": the message of a run that diverged,
 * `what` being the training loss or the gradient norm (a finite loss whose gradients
 * are not: their update would make the weights NaN, and a checkpoint after it would
 * keep them) */
void rt_diverged_why(char *why, size_t n, const char *what, double v, int64_t step)
{
    snprintf(why, n, "the %s is %s after step %lld (in the next step, which is not counted)", what,
             isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long)step);
}

/* Steps without a wait: on one GPU with the update queued, a step whose numbers nothing
 * needs at once (no record, validation, checkpoint, epoch's end or stop after it) is
 * queued and the host goes on to the next, its losses left in device_cuda.c's ring of
 * statistics; the next step that needs them waits once for all (rt_take_pending). The GPU
 * then never idles between steps while the host reads a loss. Must the host wait after
 * this step (k passes)? */
static int step_needs_wait(const Run *r, const rt_train_config *c, const rt_loop_state *s,
                           int64_t k)
{
    int64_t step = s->step + 1;
    return r->pend_n >= RT_CU_RING / 2 || !r->mem_logged || step % c->log_every == 0 ||
           s->batch + k >= r->batches_per_epoch ||
           rt_val_due(r, s->epoch, s->batch, s->batch + k, step) ||
           (s->es_pending && c->min_steps > 0 && step >= c->min_steps) ||
           (c->has_checkpoint && step % c->ckpt_every_steps == 0) ||
           (c->max_steps > 0 && step >= c->max_steps) ||
           (!isnan(c->max_time) && rt_now() - r->t0 >= c->max_time) || rt_signal_seen;
}

/* A pass's mean loss from its statistics on the device: over the terms the host counted,
 * or (cross_entropy's ignore_index) those the device did; 0 where there are none. */
static double pass_mean(const rt_cu_stat *st, int64_t host_terms)
{
    double terms = (double)host_terms + (double)st->terms;
    return terms > 0 ? st->loss_sum / terms : 0.0;
}

/* Pending step q's sums of its batches' mean losses: *d, every pass's, *g 0; a GAN's,
 * *d the discriminator's turns (passes 2j) and *g the generator's (2j + 1), each over
 * its batch's rows (terms[j]). */
static void pending_sums(Run *r, const struct pending *q, const int64_t *terms, double *d,
                         double *g)
{
    *d = *g = 0;
    for (int64_t j = 0; j < q->k; j++) {
        if (!r->m->gan) {
            *d += pass_mean(rt_cu_place_stat(&r->e, q->at, (int)j), terms[j]);
            continue;
        }
        *d += rt_cu_place_stat(&r->e, q->at, (int)(2 * j))->loss_sum / (double)terms[j];
        *g += rt_cu_place_stat(&r->e, q->at, (int)(2 * j + 1))->loss_sum / (double)terms[j];
    }
}

/* After a wait for the last queued step: the pending steps' losses, in order, into the
 * running sums of the records (as train.c adds a step's at once); the first
 * that is not finite ends the run there: 1, with s->step its step (the steps after it
 * ran, but a diverged run saves nothing) and the message in why. ss: the last step's
 * doubles (the gradients' sum of squares; a GAN's, the generator's and the
 * discriminator's). */
int rt_take_pending(Run *r, rt_loop_state *s, char *why, size_t n, double ss[RT_CU_F64])
{
    int np = r->pend_n;
    r->pend_n = 0;
    for (int p = 0; p < np; p++) {
        const struct pending *q = &r->pend[p];
        double d, g;
        pending_sums(r, q, r->pend_terms + (size_t)p * (size_t)r->step_passes, &d, &g);
        double sum = d + g, sq = 0;
        for (int i = 0; i < RT_CU_F64; i++)
            sq += ss[i] = rt_cu_place_f64(&r->e, q->at, i);
        if (!isfinite(sum) || !isfinite(sq)) {
            rt_diverged_why(why, n, isfinite(sum) ? "gradient norm" : "training loss",
                         isfinite(sum) ? sq : sum, q->step);
            s->step = q->step;
            return 1;
        }
        s->last_loss = sum / (double)q->k;
        s->log_loss += d;
        s->log_g_loss += g;
        s->log_n += q->k;
        s->since_val_loss += sum;
        s->since_val_n += q->k;
    }
    return 0;
}

/* Steps without a wait: step s->step (k passes, their terms in r->pass_terms) was queued
 * with its numbers' copies; the host waits for them only where a step needs them
 * (step_needs_wait), then takes every pending step's (rt_take_pending: 1 when one
 * diverged; ss as there, left alone without a wait). */
int rt_step_pend(Run *r, rt_loop_state *s, Loop *L, int64_t k, double ss[RT_CU_F64])
{
    struct pending *q = &r->pend[r->pend_n];
    *q = (struct pending){rt_cu_step_place(&r->e), s->step, k};
    memcpy(r->pend_terms + (size_t)r->pend_n * (size_t)r->step_passes, r->pass_terms,
           (size_t)k * sizeof *r->pass_terms);
    r->pend_n++;
    if (!step_needs_wait(r, &r->c, s, k))
        return 0;
    rt_cu_step_wait(&r->e);
    return rt_take_pending(r, s, L->why, sizeof L->why, ss);
}

/* A training pass's forward and backward (prof: timed by instruction, --profile). */
static void train_pass(Run *r, rt_prof *prof)
{
    if (prof)
        rt_prof_pass_begin(&r->e, prof, 0);
    r->m->forward(&r->e, 1);
    if (prof)
        rt_prof_pass_end(&r->e);
    if (prof)
        rt_prof_pass_begin(&r->e, prof, 1);
    r->m->backward(&r->e);
    if (prof)
        rt_prof_pass_end(&r->e);
}

/* The device's parameters (and optimizer state) into the host copies, before files. */
void rt_pull_params(Run *r, int with_state)
{
    if (r->gpu)
        rt_cu_get_params(&r->e, r->m, r->params, r->layer_state, with_state ? r->state : NULL,
                         with_state ? r->state_floats : 0);
}

static rt_dptr dptr(const void *p) { return (rt_dptr)(uintptr_t)p; }

/* The gradient norm on a GPU from this rank's sum of squares (rt_cu_grad_sumsq); under
 * zero1 the shards' sums added over ranks (as rt_zero_grad_norm on the CPU). */
static double gpu_grad_norm(double ss)
{
    if (rt_zero_on())
        rt_allreduce_sum_f64(&ss, 1);
    return sqrt(ss);
}

/* A step's update from the gradients' norm (the true one, unscaled), with fp16-mixed's
 * GradScaler rule: inf/NaN gradients skip the update and halve the loss scale. */
static void update(Run *r, rt_loop_state *s, double norm, double lr, int scaler)
{
    const rt_train_config *c = &r->c;
    const rt_model *m = r->m;
    if (scaler && !isfinite(norm)) {
        s->loss_scale *= 0.5;
        s->scale_growth = 0;
        s->skipped++;
        return;
    }
    /* clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1; the unscaling
     * (a power of two) goes into the same factor, exactly (optim.cuh's rt_clip_scale
     * is the same arithmetic, where the GPU works the factor out itself) */
    double max_norm = rt_clip_norm(c);
    float coef = isnan(max_norm) ? 1.0f : (float)(max_norm / (norm + 1e-6));
    int clip = coef < 1.0f;
    float gs = (float)((clip ? (double)coef : 1.0) / s->loss_scale);
    clip |= s->loss_scale != 1.0;
    s->updates++;
    rt_state_part z = rt_zero_part();   /* clip_grad_value_ (the GPU's: optim_step) */
    if (!r->gpu && rt_clip_by_value(r->e.rt, c, r->grads + z.lo, z.hi - z.lo, &gs))
        clip = 0;
    if (r->gpu) {
        rt_cu_optim_step(&r->e, c, m, dptr(r->e.params), dptr(r->e.grads), rt_cu_state(&r->e),
                         s->updates, lr, gs, clip);
        if (rt_zero_on()) {   /* zero1: each rank updated its shard: gather */
            rt_nccl_gather_shards(&r->e, r->e.params, rt_zero_counts());
            rt_cu_copy_params16(&r->e, m);
        }
    } else
        rt_zero_optim_step(r->e.rt, c, m, r->params, r->grads, r->state, s->updates, lr, gs,
                           clip);
    if (scaler && ++s->scale_growth == c->ls_growth_interval) {
        /* GradScaler keeps the scale in fp32 and grows it only to a finite value */
        if (isfinite((float)(s->loss_scale * 2.0)))
            s->loss_scale *= 2.0;
        s->scale_growth = 0;
    }
}

/* Pass j of the step's k (window: the step's samples): its batch (on a GPU maybe
 * fetched and copied during the previous pass), forward and backward, its gradients
 * sent to the other ranks after the last one; on a GPU the next batch's copy started.
 * Returns the batch's rows. */
static int64_t run_pass(Run *r, const rt_loop_state *s, const Loop *L, const Step *st,
                        int64_t j, int64_t window)
{
    const rt_model *m = r->m;
    const rt_train_config *c = &r->c;
    const rt_batch *b = r->ahead ? r->ahead : rt_loader_next(r->tl);
    if (!b)
        rt_die("loader ended early");
    rt_bind_slot(r, b, r->slot, r->ahead != NULL, 0, (int)j);
    r->ahead = NULL;
    int64_t rows = b->rows;
    if (rows != rt_loader_rows(r->tl, s->batch + j))
        rt_die("batch %lld of epoch %lld has %lld rows, not %lld", (long long)(s->batch + j),
               (long long)s->epoch, (long long)rows,
               (long long)rt_loader_rows(r->tl, s->batch + j));
    r->e.rng_key = rt_mix(rt_mix(c->seed, (uint64_t)s->step), (uint64_t)j);
    /* fp16-mixed: the loss (so every gradient) times the loss scale */
    r->e.grad_scale = (float)(s->loss_scale / ((double)window * (double)m->loss_terms *
                                               (double)r->world));
    r->e.grads_zero = j == 0;     /* zeroed before: a first writer may store */
    rt_ddp_begin(j == st->k - 1); /* with accumulate: only the last micro-batch */
    /* on a GPU the pass may be a CUDA graph (device_cuda.c): launched as one,
     * or captured from the calls below */
    r->e.train = 1;
    int graph = r->gpu ? rt_cu_graph_begin(&r->e) : RT_CU_GRAPH_NONE;
    if (graph != RT_CU_GRAPH_RAN)
        train_pass(r, st->profiled ? L->prof : NULL);
    if (graph == RT_CU_GRAPH_CAPTURE && !rt_cu_graph_end(&r->e))
        train_pass(r, NULL);      /* the capture failed and nothing ran */
    rt_ddp_finish();
    if (r->gpu && s->batch + j + 1 < r->batches_per_epoch) {
        /* the pass is queued on the GPU: fetch the next batch now and start
         * its copy into the other slot, so it overlaps this pass. Its host
         * buffer is the loader's to refill once this batch's copy is done. */
        rt_cu_upload_done(&r->e);
        r->slot ^= 1;
        r->ahead = rt_loader_next(r->tl);
        if (r->ahead)
            upload(r, r->ahead, r->slot, 0);
    }
    return rows;
}

/* On a GPU the host does not wait between the passes of a step (each has its own loss
 * statistics); after the last: the gradients' sum of squares, maybe the update, then
 * one wait for the losses and the sum (lazy: only when a step needs them). Returns 1
 * when a step queued without a wait diverged. */
static int gpu_step_end(Run *r, rt_loop_state *s, Loop *L, Step *st)
{
    const rt_model *m = r->m;
    if (st->profiled)
        rt_prof_optimizer_begin(&r->e, L->prof);
    rt_dptr ss = rt_cu_grad_sumsq_queue(&r->e, m, dptr(r->e.grads));
    rt_cu_step_queue(&r->e, ss, 1);
    if (L->queued_update) {
        s->updates++;
        rt_cu_optim_step_clip(&r->e, &r->c, m, dptr(r->e.params), dptr(r->e.grads),
                              rt_cu_state(&r->e), s->updates, st->lr, ss);
        st->queued = 1;
    }
    if (st->profiled)
        rt_prof_pass_end(&r->e);
    if (L->lazy) {    /* steps without a wait */
        double sq[RT_CU_F64] = {0};
        int diverged = rt_step_pend(r, s, L, st->k, sq);
        st->gpu_sumsq = sq[0];
        return diverged;
    }
    st->gpu_sumsq = rt_cu_step_wait(&r->e);
    for (int64_t i = 0; i < st->k; i++)
        st->loss += pass_mean(rt_cu_pass_stat(&r->e, (int)i), r->pass_terms[i]);
    return 0;
}

int64_t rt_step_start(Run *r, const rt_loop_state *s, int64_t *k)
{
    *k = r->batches_per_epoch - s->batch;
    if (*k > r->c.accumulate)
        *k = r->c.accumulate;
    /* the step's samples: each micro-batch's mean loss weighs its rows / window,
     * so the update is that of one batch of them all, also when the epoch's
     * last batch is short (drop_last false) */
    int64_t window = 0;
    for (int64_t j = 0; j < *k; j++)
        window += rt_loader_rows(r->tl, s->batch + j);
    if (r->gpu)
        rt_cu_grads_clear(&r->e, r->m->trainable_floats);
    else
        rt_zero_clear_grads(r->grads);
    return window;
}

int rt_step_passes(Run *r, rt_loop_state *s, Loop *L, Step *st)
{
    if (r->m->gan)
        return rt_gan_step_passes(r, s, L, st);
    const rt_train_config *c = &r->c;
    int64_t k, window = rt_step_start(r, s, &k);
    /* (st->loss adds the passes' mean losses; rt_step_agree makes it their mean) */
    *st = (Step){.k = k, .norm = NAN, .profiled = L->prof && L->run_steps >= 2, .t0 = rt_now()};
    double swa_lr = rt_swa_lr(r, s->epoch);   /* (train.swa's epochs: SWALR's) */
    st->lr = r->lf ? rt_lrfind_lr(r->lf, s->step)
             : swa_lr >= 0 ? swa_lr : rt_lr_at(c, s->step, r->total_steps > 0 ? r->total_steps : 1);
    int diverged = 0;
    for (int64_t j = 0; j < k; j++) {
        st->samples += run_pass(r, s, L, st, j, window);
        if (!r->gpu) {   /* (ignore_index: a batch of ignored targets adds 0) */
            st->loss += r->e.terms ? r->e.loss_sum / (double)r->e.terms : 0.0;
            continue;
        }
        r->pass_terms[j] = r->e.terms;
        if (j == k - 1)
            diverged = gpu_step_end(r, s, L, st);
    }
    return L->lazy && diverged;
}

void rt_step_agree(Run *r, Step *st)
{
    const rt_train_config *c = &r->c;
    /* st->loss holds the sum of the k batches' mean losses: the train record's loss is
     * the mean over batches, so it adds the sum and counts k */
    st->batch_sum = st->loss;
    st->loss /= (double)st->k;
    if (st->queued)
        st->norm = sqrt(st->gpu_sumsq);
    st->now_stop = 0;
    /* a signal counts at this step only if every rank saw it: with several ranks,
     * one that lands after the exchange below waits for the next step's, or this
     * rank would stop while the others go on (and wait on it forever) */
    st->sig_stop = rt_signal_seen != 0;
    if (r->world == 1)
        return;
    /* the mean loss over ranks, and stop requests any rank has (a signal, its clock)
     * become every rank's, so all stop at the same step */
    double v[5] = {st->batch_sum, rt_signal_seen ? 1.0 : 0.0,
                   !isnan(c->max_time) && rt_now() - r->t0 >= c->max_time ? 1.0 : 0.0,
                   st->gan_d, st->gan_g};
    rt_allreduce_sum_f64(v, 5);
    st->gan_d = v[3] / (double)r->world;   /* (a GAN's two losses: 0 otherwise) */
    st->gan_g = v[4] / (double)r->world;
    /* every rank has the same k (the sampler gives each the same number of
     * batches), so these are the same numbers on every rank */
    st->batch_sum = v[0] / (double)r->world;
    st->loss = st->batch_sum / (double)st->k;
    st->sig_stop = v[1] > 0;
    st->now_stop = v[2];
    st->samples *= r->world;
    /* the layers' state (batchnorm's running statistics) is rank 0's, as DDP's
     * broadcast_buffers makes it before each forward: every rank validates, saves and
     * goes on with the same (with sync they are the same already) */
    rt_share_layer_state(r);
}

void rt_share_layer_state(Run *r)
{
    if (!r->m->n_state)
        return;
    if (r->gpu)
        rt_cu_layer_state(&r->e, r->layer_state, 0);
    rt_broadcast(r->layer_state, r->m->state_floats * (int64_t)sizeof(float), 0);
    if (r->gpu)
        rt_cu_layer_state(&r->e, r->layer_state, 1);
}

/* train.ema: step n's take of the trained weights into the average (rt_ema_takes), after
 * its update (queued after it on a GPU) */
static void ema_step(Run *r, int64_t n)
{
    int first;
    if (r->lf || !rt_ema_takes(&r->c, n, &first))
        return;
    int64_t T = r->m->trainable_floats, at = (int64_t)rt_ema_part(&r->c) * T;
    if (r->gpu)
        rt_cu_ema_take(&r->e, dptr(r->e.params), rt_cu_state(&r->e) + (rt_dptr)at * sizeof(float),
                       T, r->c.ema_decay, first);
    else
        rt_ema_take(r->e.rt, r->params, r->state + at, T, r->c.ema_decay, first);
}

int rt_step_update(Run *r, rt_loop_state *s, Loop *L, Step *st, int lf_over)
{
    if (!r->lf && !L->lazy && !isfinite(st->loss)) {
        /* (a queued update has run: a diverged run's weights are not saved).
         * This step is not counted (the end record says s->step): the message
         * numbers the steps as the end record does. */
        L->end = END_DIVERGED;
        rt_diverged_why(L->why, sizeof L->why, "training loss", st->loss, s->step);
        return 1;
    }
    /* the gradients hold loss_scale x the true ones (1 but in fp16-mixed) */
    if (!st->queued && !lf_over) {
        if (st->profiled)
            rt_prof_optimizer_begin(&r->e, L->prof);
        st->norm = (r->gpu ? gpu_grad_norm(st->gpu_sumsq)
                           : rt_zero_grad_norm(r->e.rt, r->m, r->grads)) / s->loss_scale;
        if (st->profiled)
            rt_prof_pass_end(&r->e);
    }
    if (!r->lf && !L->lazy && !L->scaler && !isfinite(st->norm)) {
        /* a finite loss, gradients that are not: not applied here (a queued
         * update has run, as for a loss that is not finite: nothing is saved);
         * fp16-mixed skips such a step instead (update) */
        L->end = END_DIVERGED;
        rt_diverged_why(L->why, sizeof L->why, "gradient norm", st->norm, s->step);
        return 1;
    }
    if (!st->queued && !lf_over) {
        if (st->profiled)
            rt_prof_optimizer_begin(&r->e, L->prof);
        update(r, s, st->norm, st->lr, L->scaler);
        if (st->profiled)
            rt_prof_pass_end(&r->e);
    }
    ema_step(r, s->step + 1);
    s->batch += st->k;
    s->step++;
    if (st->profiled)
        rt_prof_step(L->prof, rt_now() - st->t0);
    L->run_steps++;
    return 0;
}
