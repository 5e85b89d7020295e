/* train.c: the training loop. Epochs of steps (step.c does one) until a limit
 * (epochs, max_steps, max_time), early stopping, a divergence or a signal; after each
 * step the records, validation and the monitored value, the limits and checkpoints;
 * at the end a last checkpoint and validation, the final weights, the end record and
 * the message that says how the run went. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "run.h"

void rt_state_fresh(const Run *r, rt_loop_state *s)
{
    const rt_train_config *c = &r->c;
    int best_mode = c->has_early_stopping ? c->es_mode : RT_MODE_MIN;
    memset(s, 0, sizeof *s);
    s->es_best = c->es_mode == RT_MODE_MIN ? INFINITY : -INFINITY;
    s->loss_scale = c->precision == RT_PREC_FP16 ? c->ls_init : 1.0;
    s->loss_scale_d = s->loss_scale;
    s->best_val = INFINITY;
    s->best_mon = best_mode == RT_MODE_MIN ? INFINITY : -INFINITY;
    s->best_step = -1;
    s->last_val_step = -1;
    s->last_val_loss = s->last_val_acc = s->last_loss = NAN;
}

/* How the loop runs (queued updates, steps without a wait, --profile, CUDA graphs),
 * and whether a resumed run is at a limit already (L->end set, said). */
static void loop_start(Run *r, rt_loop_state *s, Loop *L)
{
    const rt_train_config *c = &r->c;
    memset(L, 0, sizeof *L);
    L->best_mode = c->has_early_stopping ? c->es_mode : RT_MODE_MIN;
    L->scaler = c->precision == RT_PREC_FP16;
    /* On one GPU without loss scaling, a step's update is queued before the host reads
     * its loss: the kernel works out the clip factor from the norm on the device (the
     * same arithmetic as step.c's update), so the host waits once a step, for the loss
     * and the norm, while the GPU runs the update. Loss scaling (the step may be
     * skipped) and several ranks (the loss and ZeRO's norm go through MPI) wait before
     * it. TRAINC_QUEUED_UPDATE=0: the old order everywhere (to measure what this is
     * worth; the numbers are the same). */
    const char *qu = getenv("TRAINC_QUEUED_UPDATE");
    L->queued_update = r->gpu && !L->scaler && r->world == 1 && !r->m->gan &&
                       !(qu && strcmp(qu, "0") == 0);   /* (a GAN's step: gan_step.c) */
    /* and the host does not wait for a step's loss until a step needs it (step.c's
     * step_needs_wait; not for --lr-find, whose every step decides; TRAINC_STEP_WAIT=1:
     * a wait every step); so too a GAN's steps, whose updates gan_step.c queues on one
     * GPU without loss scaling */
    const char *sw = getenv("TRAINC_STEP_WAIT");
    int gan_queued = r->gpu && r->m->gan && !L->scaler && r->world == 1;   /* (gan_step.c) */
    L->lazy = (L->queued_update || gan_queued) && !r->lf && !(sw && strcmp(sw, "1") == 0);
    L->es = (rt_stopper){.best = s->es_best, .wait = s->es_wait};
    /* --profile: steps after this process's first two are timed instruction by
     * instruction (prof.c) */
    L->prof = r->o.profile ? rt_prof_new(r->gpu, r->m->n_instructions) : NULL;
    if (L->prof && r->gpu)
        rt_cu_prof_setup(&r->e, r->m->n_instructions + 1);
    if (r->gpu) {
        /* training passes as CUDA graphs: not where the pass changes every step (dropout's
         * key) or waits on other ranks, nor under --profile; TRAINC_CUDA_GRAPH=0 for none */
        const char *cg = getenv("TRAINC_CUDA_GRAPH");
        rt_cu_graphs_enable(&r->e, !L->prof && !r->m->has_dropout && r->world == 1 &&
                                       !(cg && strcmp(cg, "0") == 0));
    }
    L->end = -1;
    L->val_scheduled = r->has_val && (c->val_every_steps > 0 || rt_val_every_epochs(c) > 0 ||
                                      !isnan(c->val_every_fraction));
    /* samples_per_s: the samples since log_t, which restarts here (a resumed run's
     * log_samples holds samples trained before it) and leaves out the time spent in
     * validation and checkpoints */
    L->log_t = rt_now();
    /* a checkpoint taken at an epoch's end leaves batch == batches: roll over */
    if (s->batch >= r->batches_per_epoch) {
        s->epoch++;
        s->batch = 0;
    }
    if (rt_epochs(c) > 0 && s->epoch >= rt_epochs(c))
        L->end = END_EPOCHS;
    if (c->max_steps > 0 && s->step >= c->max_steps)
        L->end = END_MAX_STEPS;
    if (!isnan(c->max_time) && s->elapsed >= c->max_time)
        L->end = END_MAX_TIME;    /* resumed, its time spent: not one step more */
    if (c->has_early_stopping && s->es_stopped) {   /* as it stopped, so it stays */
        L->end = END_EARLY;
        snprintf(L->why, sizeof L->why, "stopped early at step %lld, before this resume",
                 (long long)s->step);
    }
    /* a stop held by min_epochs/min_steps that a resume lowering them frees: now */
    if (L->end < 0 && c->has_early_stopping && s->es_pending &&
        rt_es_min_reached(c, s->epoch, s->step)) {
        L->end = END_EARLY;
        L->es_deferred = 1;   /* (its last validation, as after_step's) */
        s->es_stopped = 1;
        snprintf(L->why, sizeof L->why, "patience ran out before step %lld; held until "
                 "min_epochs and min_steps, reached now", (long long)s->step);
    }
    if (L->end >= 0 && r->rank == 0)   /* resumed past a limit: say which, and how to go on */
        rt_resumed_at_limit(c, s, L->end);
}

/* --lr-find after a step: the range test records nothing else. 1: the epoch or the
 * test is over. */
static int lrfind_step(Run *r, rt_loop_state *s, Loop *L, const Step *st, int lf_over)
{
    rt_progress(r->o.quiet, s->step, r->total_steps, s->epoch, st->loss,
                (double)st->samples / fmax(rt_now() - L->log_t, 1e-9), rt_now() - r->t0);
    L->log_t = rt_now();
    int epoch_end = s->batch >= r->batches_per_epoch;
    if (epoch_end) {
        s->epoch++;
        s->batch = 0;
    }
    if (lf_over || st->sig_stop)
        L->end = lf_over ? END_MAX_STEPS : END_INTERRUPTED;
    return L->end >= 0 || epoch_end;
}

/* The monitored value at a validation, or at an epoch's end where no validation is
 * scheduled (monitor loss): the best weights for monitor loss, early stopping. */
static void monitor(Run *r, rt_loop_state *s, Loop *L, int val_now)
{
    const rt_train_config *c = &r->c;
    int mon = c->has_early_stopping ? c->es_monitor : RT_MON_VAL_LOSS;
    double v = mon == RT_MON_VAL_LOSS ? s->last_val_loss
               : mon == RT_MON_VAL_ACC ? s->last_val_acc
                                       : s->since_val_loss / (double)(s->since_val_n ? s->since_val_n : 1);
    s->since_val_loss = 0;
    s->since_val_n = 0;
    if (mon == RT_MON_LOSS && isfinite(v) && rt_better(L->best_mode, v, s->best_mon)) {
        s->best_mon = v;
        s->best_step = s->step;
        if (val_now)
            rt_save_weights(r, "best.safetensors");
    }
    if (mon == RT_MON_LOSS && val_now)
        rt_keep_best(r, s->step, L->best_mode, v, "loss");
    if (!c->has_early_stopping)
        return;
    int stop = rt_es_check(c, &L->es, v, L->why, sizeof L->why);
    s->es_best = L->es.best;
    s->es_wait = L->es.wait;
    /* patience's stop waits for min_epochs and min_steps (after_step ends the run
     * once both are reached, this step or a later one); once asked it stays asked,
     * as Lightning's trainer.should_stop */
    if (stop == RT_ES_PATIENCE) {
        s->es_pending = 1;
        L->es_asked_step = s->step;
    } else if (stop) {
        L->end = stop == RT_ES_DIVERGED ? END_DIVERGED : END_EARLY;
    }
    s->es_stopped = stop == RT_ES_STOP;
    if (stop == RT_ES_DIVERGED) {   /* checked after step s->step, the end record's */
        size_t u = strlen(L->why);
        snprintf(L->why + u, sizeof L->why - u, " at step %lld", (long long)s->step);
    }
}

/* After a step's records and validation: the epoch's end, the limits, a signal, a
 * checkpoint. 1: the epoch or the run is over. */
static int after_step(Run *r, rt_loop_state *s, Loop *L, const Step *st, int epoch_end,
                      double now)
{
    const rt_train_config *c = &r->c;
    if (epoch_end) {
        s->epoch++;
        s->batch = 0;
    }
    /* (before the epochs limit: a stop asked for at the last epoch's end is early
     * stopping's) */
    if (L->end < 0 && s->es_pending && rt_es_min_reached(c, s->epoch, s->step)) {
        L->end = END_EARLY;
        s->es_stopped = 1;
        L->es_deferred = L->es_asked_step != s->step;
        if (L->es_deferred)
            snprintf(L->why, sizeof L->why, "patience ran out earlier; held until %s%s%s reached",
                     c->min_epochs > 0 ? "min_epochs" : "",
                     c->min_epochs > 0 && c->min_steps > 0 ? " and " : "",
                     c->min_steps > 0 ? "min_steps" : "");
    }
    if (epoch_end && L->end < 0 && rt_epochs(c) > 0 && s->epoch >= rt_epochs(c))
        L->end = END_EPOCHS;
    if (L->end < 0 && c->max_steps > 0 && s->step >= c->max_steps)
        L->end = END_MAX_STEPS;
    if (L->end < 0 && !isnan(c->max_time) &&
        (r->world > 1 ? st->now_stop > 0 : now - r->t0 >= c->max_time))
        L->end = END_MAX_TIME;
    if (L->end < 0 && st->sig_stop)
        L->end = END_INTERRUPTED;
    int ckpt_epoch = epoch_end && c->ckpt_every_epochs > 0 && s->epoch % c->ckpt_every_epochs == 0;
    if (L->end < 0 && c->has_checkpoint && (s->step % c->ckpt_every_steps == 0 || ckpt_epoch)) {
        double tc = rt_now();
        rt_checkpoint(r, s);
        L->log_t += rt_now() - tc;
    }
    return L->end >= 0 || epoch_end;
}

/* One step and what follows it. 1: the epoch or the run is over. */
static int train_step(Run *r, rt_loop_state *s, Loop *L)
{
    const rt_train_config *c = &r->c;
    Step st;
    if (rt_step_passes(r, s, L, &st)) {   /* a step queued without a wait diverged */
        L->end = END_DIVERGED;
        return 1;
    }
    rt_step_agree(r, &st);
    /* --lr-find: the point; the test is over at its last step, or where the loss
     * blows up (not finite: the rate is past what trains, not a divergence) */
    const int lf_over = r->lf && rt_lrfind_add(r->lf, st.lr, st.loss);
    if (rt_step_update(r, s, L, &st, lf_over))
        return 1;
    if (r->lf)
        return lrfind_step(r, s, L, &st, lf_over);
    if (r->gpu && !r->mem_logged)
        rt_record_memory(r, s);
    if (!L->lazy) {   /* (lazy: rt_take_pending adds them) */
        s->last_loss = st.loss;
        s->log_loss += r->m->gan ? st.gan_d : st.batch_sum;
        s->log_g_loss += st.gan_g;
        s->log_n += st.k;
        s->since_val_loss += st.batch_sum;
        s->since_val_n += st.k;
    }
    s->log_samples += st.samples;
    L->timed_samples += st.samples;
    double now = rt_now();
    if (s->step % c->log_every == 0)
        rt_record_train(r, s, L, &st, now);
    int epoch_end = s->batch >= r->batches_per_epoch;
    int val_now = rt_val_due(r, s->epoch, s->batch - st.k, s->batch, s->step);
    if (val_now) {
        double tv = rt_now();
        rt_validation(r, s, L->best_mode);
        L->log_t += rt_now() - tv;
    }
    if (val_now || (!L->val_scheduled && epoch_end && c->has_early_stopping))
        monitor(r, s, L, val_now);
    return after_step(r, s, L, &st, epoch_end, now);
}

/* A run that stopped between validations ends with one, so the last record tells how
 * good the final weights are; its record has the epoch of the last step (one that
 * ended an epoch has moved s->epoch on). A monitored value that is not finite there
 * is a divergence, as at any validation. */
static void last_validation(Run *r, rt_loop_state *s, Loop *L)
{
    const rt_train_config *c = &r->c;
    /* (a stop that min_epochs/min_steps held validates as Lightning's does when
     * should_stop and _can_stop_early come true between validations) */
    if (!r->has_val || s->last_val_step == s->step ||
        !(L->end == END_MAX_STEPS || L->end == END_MAX_TIME || L->end == END_EPOCHS ||
          (L->end == END_EARLY && L->es_deferred)))
        return;
    int64_t epoch = s->epoch;
    if (s->batch == 0 && s->epoch > 0)
        s->epoch--;
    rt_validation(r, s, L->best_mode);
    s->epoch = epoch;
    if (c->has_early_stopping && c->es_check_finite && c->es_monitor != RT_MON_LOSS) {
        double v = c->es_monitor == RT_MON_VAL_LOSS ? s->last_val_loss : s->last_val_acc;
        if (!isfinite((float)v)) {
            snprintf(L->why, sizeof L->why, "the monitored value is %s, not finite, at the "
                     "validation after the last step %lld",
                     isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long)s->step);
            L->end = END_DIVERGED;
        }
    }
}

/* rank 0's message of a run that diverged */
static void say_diverged(const Run *r, const Loop *L)
{
    /* (gradients that overflow: clipping cannot help, 0 x inf is NaN) */
    int grads = strstr(L->why, "gradient norm") != NULL;
    fprintf(stderr, "trainc: diverged: %s.\n  %s%s\n", L->why,
            grads ? "Look for extreme values in the data, or try a lower optimizer.lr or "
                    "precision fp32."
                  : "Try a lower optimizer.lr, a grad_clip (e.g. --set grad_clip=1.0), or "
                    "precision fp32.",
            r->c.has_checkpoint && rt_have_ckpt
                ? "\n  The checkpoints from before it are kept in checkpoints/ (the newest "
                  "may hold weights already on their way there: an earlier one and a lower "
                  "lr may be the better start)."
                : "");
}

/* rank 0's message of a run that ended (t: its seconds), then --sample; the exit code */
static int say_end(Run *r, const rt_loop_state *s, const Loop *L, double t, int code)
{
    const rt_train_config *c = &r->c;
    int end = L->end;
    fprintf(stderr, "trainc: %s after %lld step%s in %.1f s: %s %.4f", rt_end_names[end],
            (long long)s->step, s->step == 1 ? "" : "s", t,
            r->m->gan ? "d_loss + g_loss" : "loss", rt_nan_plain(s->last_loss));
    if (r->has_val && s->last_val_step >= 0) {
        fprintf(stderr, ", val_loss %.4f", rt_nan_plain(s->last_val_loss));
        if (rt_has_acc(r->m))
            fprintf(stderr, ", val_acc %.2f%%", 100.0 * s->last_val_acc);
    }
    if (end == END_EARLY)
        fprintf(stderr, " (%s)", L->why);
    if (r->world > 1)
        fprintf(stderr, " (%d ranks)", r->world);
    if (r->o.fast_dev_run) {   /* (outdir.c removes the folder at exit) */
        fprintf(stderr, "\n  fast dev run: %lld training step%s", (long long)s->step,
                s->step == 1 ? "" : "s");
        if (r->has_val && s->last_val_step >= 0)
            fprintf(stderr, " and %lld validation batch%s", (long long)c->val_batches,
                    c->val_batches == 1 ? "" : "es");
        fprintf(stderr, " ran; nothing kept (%s/ is removed)\n", r->out);
    } else
        fprintf(stderr, "\n  outputs in %s/\n", r->out);
    if (r->swa_done) {   /* (swa.c: the takes at the starts of epochs first .. epochs - 1) */
        int64_t first = rt_swa_first_epoch(c) + 1, last = rt_epochs(c);
        fprintf(stderr, "  swa: model.safetensors holds the average of the weights at the "
                "starts of epochs %lld to %lld%s\n", (long long)first, (long long)last,
                r->m->n_state ? ", batchnorm's statistics recomputed" : "");
    }
    if (r->o.sample > 0 && end != END_INTERRUPTED) {
        rt_sampling = 1;
        rt_sample(r);
        if (rt_signal_seen) {   /* a signal while sampling stops it; the outputs are whole */
            fprintf(stderr, "trainc: sampling interrupted; the run's outputs are written\n");
            code = RT_EXIT_INTERRUPTED;
        }
    }
    int steps_left = c->max_steps > 0 && s->step < c->max_steps;
    if (end == END_EPOCHS && (steps_left || !isnan(c->max_time)))
        fprintf(stderr, "  note: epochs %lld came before %s: --set epochs=null trains to %s\n",
                (long long)rt_epochs(c), steps_left ? "max_steps" : "max_time",
                steps_left && !isnan(c->max_time) ? "max_steps or max_time"
                : steps_left ? "max_steps" : "max_time");
    if (end == END_INTERRUPTED)
        fprintf(stderr, "  interrupted: a checkpoint was written; continue with --resume %s\n", r->out);
    return code;
}

/* After the loop: --profile's report, a checkpoint to continue from, the last
 * validation, the final weights and the end record; what rank 0 says; the exit code. */
static int train_end(Run *r, rt_loop_state *s, Loop *L)
{
    const rt_train_config *c = &r->c;
    if (L->prof) {
        if (rt_prof_report(L->prof, r->out, r->rank == 0) != 0)
            fprintf(stderr, "trainc: warning: %s/profile.json: cannot write: %s\n", r->out,
                    strerror(errno));
        rt_prof_free(L->prof);
    }
    /* a checkpoint to continue from: before the validation below, which a run
     * resumed from it to go further would not have had at this step (its records
     * come after the checkpoint's metrics bytes, and the best weights then are kept
     * in the checkpoint), so that the resumed run reads as one uninterrupted */
    int last_ckpt = L->end == END_INTERRUPTED || (c->has_checkpoint && L->end != END_DIVERGED);
    if (last_ckpt)
        rt_checkpoint(r, s);
    last_validation(r, s, L);
    /* swa's average in the weights' place (after the checkpoint, which keeps both) */
    int swa = L->end == END_EPOCHS && rt_swa_finish(r, s, L->best_mode);
    /* the final weights, then the end record */
    if (L->end != END_DIVERGED)
        rt_save_final(r, last_ckpt && !swa, s->step);
    rt_metrics_plot(r->mt);   /* without validation too: the training loss alone */
    double t = rt_record_end(r, s, L->end);
    int code = L->end == END_DIVERGED ? RT_EXIT_DIVERGED
               : L->end == END_INTERRUPTED ? RT_EXIT_INTERRUPTED : RT_EXIT_OK;
    rt_run_close_gpu(r);
    if (r->rank != 0) {
        rt_barrier_solo();    /* rank 0's last files, its message, --sample */
        rt_dist_finalize();
        return code;
    }
    if (L->end == END_DIVERGED)
        say_diverged(r, L);
    else
        code = say_end(r, s, L, t, code);
    rt_barrier_solo();
    rt_dist_finalize();
    return code;
}

int rt_train(Run *r, rt_loop_state *s)
{
    Loop L;
    loop_start(r, s, &L);
    while (L.end < 0) {
        r->ahead = NULL;
        rt_swa_epoch_start(r, s);
        rt_loader_start(r->tl, s->epoch, s->batch);
        while (!train_step(r, s, &L))
            ;
    }
    if (r->pend_n) {   /* steps queued without a wait, then a stop on the clock or a signal */
        double ss[RT_CU_F64];
        rt_cu_step_wait(&r->e);
        if (rt_take_pending(r, s, L.why, sizeof L.why, ss))
            L.end = END_DIVERGED;
    }
    rt_progress_done(r->o.quiet);
    if (r->lf)
        return rt_lrfind_end(r, L.end == END_INTERRUPTED);
    return train_end(r, s, &L);
}
