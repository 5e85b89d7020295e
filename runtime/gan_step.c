/* gan_step.c: a GAN's optimizer step (docs/spec.md, "GANs"; compiler/gan.c says what
 * the model's four functions compute). For each micro-batch j of the step: its real
 * samples and z bound, the discriminator's turn (forward, backward); on the last one
 * the discriminator's update; then the generator's turn through the discriminator as
 * it is now; on the last one the generator's update. Each network clips its gradients
 * by their own norm and updates with its own optimizer (rt_config_for_net) over its
 * own range of the trained parameters' region (train.freeze's frozen ones lie after);
 * the optimizer state's parts span that region (rt_optim_state_parts), each network
 * using its range.
 *
 * On a GPU the same calls run on the device: the step's latent batches (drawn while the
 * step before ran) are copied in order before its first pass, each turn adds its loss
 * into its own pass statistics (2j: the discriminator's, 2j + 1: the generator's), and
 * each update's clip factor is worked out on the device from the sum of squares there;
 * each turn's passes are one CUDA graph from the second step on. The step's losses and
 * both sums of squares are copied behind it, and on one GPU the host waits for them only
 * where a step needs them (step.c's steps without a wait), else once a step.
 * In fp16-mixed the host reads each norm before its update (a network's update may be
 * skipped). */
#include <string.h>
#include "run.h"

static rt_dptr dptr(const void *p) { return (rt_dptr)(uintptr_t)p; }

/* Step `step`'s latent batches into z: micro-batch j's at z + j B n, `rows` of them (a
 * function of (seed, step, micro-batch, rank): the same z on every device and after a
 * resume, each rank its own). Each is a prefix of its full batch's draw, so a batch
 * drawn whole serves any number of rows. */
static void draw_into(Run *r, float *z, int64_t step, int64_t j, int64_t rows)
{
    int64_t n = r->m->gan_latent_numel, B = r->c.batch_size;
    rt_rng g;
    rt_rng_seed(&g, rt_mix(rt_mix(rt_mix(r->c.seed ^ 0x6A09E667F3BCC909ull, (uint64_t)step),
                                  (uint64_t)j), (uint64_t)r->rank));
    for (int64_t i = 0; i < rows * n; i++)
        z[j * B * n + i] = (float)rt_rng_normal(&g);
}

/* The step's drawn latent batches (none when z is a data input) in r->gan_z; on a GPU
 * taken from the batches drawn while the step before ran (draw_ahead) where it drew
 * them, and copied to the device in order with the passes (rt_cu_upload_ordered): the
 * two host buffers are pinned, each its own copies' event (gan_z's: r->gan_z_buf), and
 * one is written only once its last copy is done. */
static void draw_latents(Run *r, const rt_loop_state *s, int64_t k)
{
    const rt_model *m = r->m;
    int64_t n = m->gan_latent_numel, B = r->c.batch_size;
    if (m->gan_latent_input >= 0)
        return;
    size_t bytes = (size_t)(r->step_passes * B * n) * sizeof(float);
    if (!r->gan_z) {
        r->gan_z = rt_xmalloc(bytes);
        r->gan_z_next_step = -1;
        if (r->gpu) {
            r->gan_z_next = rt_xmalloc(bytes);
            rt_cu_pin(r->gan_z, bytes, NULL);
            rt_cu_pin(r->gan_z_next, bytes, NULL);
            r->gan_dz = rt_cu_alloc_fixed(&r->e, bytes);
        }
    }
    if (r->gan_z_next && r->gan_z_next_step == s->step) {
        float *t = r->gan_z;
        r->gan_z = r->gan_z_next;
        r->gan_z_next = t;
        r->gan_z_buf ^= 1;
    } else {
        if (r->gpu)
            rt_cu_upload_ordered_wait(&r->e, r->gan_z_buf);
        for (int64_t j = 0; j < k; j++)
            draw_into(r, r->gan_z, s->step, j, rt_loader_rows(r->tl, s->batch + j));
    }
    r->gan_z_next_step = -1;
    if (r->gpu)
        rt_cu_upload_ordered(&r->e, r->gan_dz, r->gan_z, (size_t)(k * B * n) * sizeof(float),
                             r->gan_z_buf);
}

/* On a GPU, once the step's passes are queued: the next step's latent batches, each of
 * a full batch (whatever rows the next step's batches have, theirs are a prefix), so
 * the host draws them while the device runs this step, once the buffer's copy for the
 * step before is done */
static void draw_ahead(Run *r, const rt_loop_state *s)
{
    if (!r->gan_z_next)
        return;
    rt_cu_upload_ordered_wait(&r->e, r->gan_z_buf ^ 1);
    for (int64_t j = 0; j < r->step_passes; j++)
        draw_into(r, r->gan_z_next, s->step + 1, j, r->c.batch_size);
    r->gan_z_next_step = s->step + 1;
}

/* Micro-batch j's z as input n_inputs (drawn), after its batch is bound. */
static void bind_latent(Run *r, int64_t j)
{
    const rt_model *m = r->m;
    if (m->gan_latent_input >= 0)
        return;
    int64_t at = j * r->c.batch_size * m->gan_latent_numel;
    r->e.in[m->n_inputs] = r->gpu ? (void *)(uintptr_t)(r->gan_dz + (rt_dptr)at * sizeof(float))
                                  : (void *)(r->gan_z + at);
}

/* Network d's loss scale, its clean steps since it changed, its skipped steps (fp16-mixed:
 * one GradScaler a network; 1, unused, otherwise). */
static double *scale_of(rt_loop_state *s, int d) { return d ? &s->loss_scale_d : &s->loss_scale; }

/* GradScaler's rule after network d's update was made (finite) or skipped. */
static void scaler_after(const Run *r, rt_loop_state *s, int d, int finite)
{
    double *scale = scale_of(s, d);
    int64_t *growth = d ? &s->scale_growth_d : &s->scale_growth;
    if (!finite) {
        *scale *= 0.5;
        *growth = 0;
        ++*(d ? &s->skipped_d : &s->skipped);
    } else if (++*growth == r->c.ls_growth_interval) {
        if (isfinite((float)(*scale * 2.0)))   /* kept in fp32, grown to a finite value */
            *scale *= 2.0;
        *growth = 0;
    }
}

/* Network d's update (0: the generator, 1: the discriminator) from its gradients, at
 * optimizer step t; returns their norm (unscaled). In fp16-mixed, gradients that are
 * not finite skip the update and halve the network's loss scale. */
static double net_update(Run *r, rt_loop_state *s, int d, int64_t t, int scaler)
{
    const rt_model *m = r->m;
    rt_train_config cn;
    rt_config_for_net(&r->c, d, &cn);
    int64_t lo = d ? m->gan_gen_floats : 0, hi = d ? m->trainable_floats : m->gan_gen_floats;
    double lr = rt_lr_at(&cn, s->step, r->total_steps > 0 ? r->total_steps : 1);
    if (r->gpu && !scaler) {     /* clipped on the device; the norm read at the step's end */
        rt_cu_gan_update_queued(&r->e, &cn, m, d, dptr(r->e.params), dptr(r->e.grads),
                                rt_cu_state(&r->e), t, lr, r->gan_norms + (rt_dptr)d * sizeof(double));
        return NAN;
    }
    double ss = r->gpu ? rt_cu_gan_grad_sumsq(&r->e, m, d, dptr(r->e.grads))
                       : rt_grad_sumsq(r->e.rt, m, lo, hi, r->grads + lo);
    double scale = *scale_of(s, d);
    double norm = sqrt(ss) / scale;
    if (scaler && !isfinite(norm)) {
        scaler_after(r, s, d, 0);
        return norm;
    }
    /* clip_grad_norm_ of this network's parameters, as step.c's update */
    double max_norm = rt_clip_norm(&cn);
    float coef = isnan(max_norm) ? 1.0f : (float)(max_norm / (norm + 1e-6));
    int clip = coef < 1.0f;
    float gs = (float)((clip ? (double)coef : 1.0) / scale);
    clip |= scale != 1.0;
    if (!r->gpu && rt_clip_by_value(r->e.rt, &cn, r->grads + lo, hi - lo, &gs))
        clip = 0;   /* clip_grad_value_ (the GPU's: optim_step) */
    if (r->gpu)
        rt_cu_gan_optim_step(&r->e, &cn, m, d, dptr(r->e.params), dptr(r->e.grads),
                             rt_cu_state(&r->e), t, lr, gs, clip);
    else
        rt_optim_step_strided(r->e.rt, &cn, m, lo, hi, r->params, r->grads + lo,
                              r->state ? r->state + lo : NULL, m->trainable_floats, t, lr, gs, clip);
    if (scaler)
        scaler_after(r, s, d, 1);
    return norm;
}

/* A turn's two passes (d 1: the discriminator's, 0: the generator's), each network's
 * gradients reduced over ranks on the step's last micro-batch only; with prof (--profile)
 * timed by instruction as step.c's passes are. */
static void turn_calls(Run *r, int d, int last, rt_prof *prof)
{
    const rt_model *m = r->m;
    if (prof)
        rt_prof_pass_begin(&r->e, prof, 0);
    if (d)
        m->forward(&r->e, 1);
    else
        m->gan_forward_g(&r->e);
    if (prof) {
        rt_prof_pass_end(&r->e);
        rt_prof_pass_begin(&r->e, prof, 1);
    }
    rt_ddp_begin_range(last, d ? m->gan_gen_floats : 0,
                       d ? m->trainable_floats : m->gan_gen_floats);
    if (d)
        m->backward(&r->e);
    else
        m->gan_backward_g(&r->e);
    rt_ddp_finish();
    if (prof)
        rt_prof_pass_end(&r->e);
}

/* A turn: on a GPU as a CUDA graph once a turn of its kind has run (device_cuda.c's
 * graphs of training passes, keyed by the pass statistics it adds into, its input slot
 * and grad_scale); its loss term's mean into *sum on the CPU (a GPU's is read at the
 * step's end, from the pass's statistics). */
static void turn(Run *r, int d, int last, double *sum, int64_t rows, rt_prof *prof)
{
    int graph = r->gpu ? rt_cu_graph_begin(&r->e) : RT_CU_GRAPH_NONE;
    if (graph != RT_CU_GRAPH_RAN)
        turn_calls(r, d, last, prof);
    if (graph == RT_CU_GRAPH_CAPTURE && !rt_cu_graph_end(&r->e))
        turn_calls(r, d, last, NULL);    /* the capture failed and nothing ran */
    if (!r->gpu)
        *sum += r->e.loss_sum / (double)rows;
}

/* net_update timed as the step's optimizer part under --profile (prof not NULL) */
static double timed_update(Run *r, rt_loop_state *s, int d, int64_t t, int scaler, rt_prof *prof)
{
    if (prof)
        rt_prof_optimizer_begin(&r->e, prof);
    double norm = net_update(r, s, d, t, scaler);
    if (prof)
        rt_prof_pass_end(&r->e);
    return norm;
}

/* Micro-batch j of the step's k: both turns, and after the last one's each the update.
 * Returns the batch's rows. */
static int64_t gan_pass(Run *r, rt_loop_state *s, Step *st, int64_t j, int64_t window,
                        const Loop *L)
{
    int scaler = L->scaler;
    rt_prof *prof = st->profiled ? L->prof : NULL;
    const rt_batch *b = rt_loader_next(r->tl);
    if (!b)
        rt_die("loader ended early");
    rt_bind_slot(r, b, r->slot, 0, 0, (int)(2 * j));
    int64_t rows = b->rows;
    bind_latent(r, j);
    r->e.rng_key = rt_mix(rt_mix(r->c.seed, (uint64_t)s->step), (uint64_t)j);
    /* each turn's loss gradient times its network's loss scale (fp16-mixed) */
    r->e.grad_scale = (float)(s->loss_scale_d / ((double)window * (double)r->world));
    r->e.grads_zero = j == 0;
    r->e.train = 1;
    turn(r, 1, j == st->k - 1, &st->gan_d, rows, prof);
    if (j == st->k - 1)
        st->norm_d = timed_update(r, s, 1, s->updates - s->skipped_d, scaler, prof);
    r->e.loss_sum = 0;
    r->e.grad_scale = (float)(s->loss_scale / ((double)window * (double)r->world));
    if (r->gpu)
        rt_cu_begin_pass(&r->e, (int)(2 * j + 1));
    turn(r, 0, j == st->k - 1, &st->gan_g, rows, prof);
    if (j == st->k - 1)
        st->norm_g = timed_update(r, s, 0, s->updates - s->skipped, scaler, prof);
    if (r->gpu) {   /* the batch's copy done (the loader may refill its buffer); the next
                       batch into the other slot, while this one's passes run */
        rt_cu_upload_done(&r->e);
        r->slot ^= 1;
    }
    return rows;
}

/* On a GPU, the step's end: its losses and both networks' sums of squares (where the
 * updates were queued) copied behind it; then, without a wait where the loop allows
 * (step.c's rt_step_pend, the numbers taken when a step needs them), else after one:
 * each turn's loss from its pass's statistics and the two norms. 1 when a step queued
 * without a wait diverged. */
static int gpu_step_end(Run *r, rt_loop_state *s, Loop *L, Step *st, const int64_t *rows)
{
    double ss[RT_CU_F64] = {0};   /* (gan_norms: the generator's, the discriminator's) */
    rt_cu_step_queue(&r->e, r->gan_norms, L->scaler ? 0 : 2);   /* (fp16-mixed: read apart) */
    if (L->lazy) {
        int diverged = rt_step_pend(r, s, L, st->k, ss);
        st->norm_d = sqrt(ss[1]);
        st->norm_g = sqrt(ss[0]);
        st->gpu_sumsq = ss[0] + ss[1];
        return diverged;
    }
    rt_cu_step_wait(&r->e);
    for (int64_t j = 0; j < st->k; j++) {
        st->gan_d += rt_cu_pass_stat(&r->e, (int)(2 * j))->loss_sum / (double)rows[j];
        st->gan_g += rt_cu_pass_stat(&r->e, (int)(2 * j + 1))->loss_sum / (double)rows[j];
    }
    if (L->scaler)
        return 0;
    int at = rt_cu_step_place(&r->e);
    st->norm_d = sqrt(rt_cu_place_f64(&r->e, at, 1));
    st->norm_g = sqrt(rt_cu_place_f64(&r->e, at, 0));
    return 0;
}

int rt_gan_step_passes(Run *r, rt_loop_state *s, Loop *L, Step *st)
{
    const rt_train_config *c = &r->c;
    int64_t k, window = rt_step_start(r, s, &k);
    *st = (Step){.k = k, .norm = NAN, .profiled = L->prof && L->run_steps >= 2, .t0 = rt_now()};
    st->lr = rt_lr_at(c, s->step, r->total_steps > 0 ? r->total_steps : 1);
    s->updates++;   /* a network's t (AdamW's bias correction): this, less its skipped steps */
    if (r->gpu && !r->gan_norms)
        r->gan_norms = rt_cu_alloc_fixed(&r->e, 2 * sizeof(double));
    draw_latents(r, s, k);
    int64_t *rows = r->pass_terms;   /* (step_passes of them) */
    for (int64_t j = 0; j < k; j++)
        st->samples += rows[j] = gan_pass(r, s, st, j, window, L);
    int diverged = 0;
    if (r->gpu) {
        draw_ahead(r, s);
        diverged = gpu_step_end(r, s, L, st, rows);
    }
    /* the updates are made: what rt_step_update checks (without a wait: the pending
     * steps' numbers, taken in gpu_step_end) */
    st->loss = st->gan_d + st->gan_g;
    st->queued = 1;
    /* (fp16-mixed: a skipped update's norm is not finite; the step goes on) */
    if (!L->lazy)
        st->gpu_sumsq = L->scaler ? 0.0 : st->norm_d * st->norm_d + st->norm_g * st->norm_g;
    return L->lazy && diverged;
}
