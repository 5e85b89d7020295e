/* validate.c: validation. A pass over data.val (validate.batches or limit_val_batches of
 * it), summed over ranks; its record in metrics.jsonl; best.safetensors kept for a
 * validation monitor; which steps validate (validate.every_steps, every_epochs,
 * every_fraction). */
#include <string.h>
#include "run.h"

Eval rt_validate(Run *r)
{
    Eval ev = {0};
    double loss = 0, margin = 0;
    int64_t terms = 0, correct = 0, n = 0;
    rt_loader_start(r->vl, 0, 0);
    const rt_batch *b;
    while ((b = rt_loader_next(r->vl))) {
        if (r->val_limit > 0 && n == r->val_limit)
            break;
        /* on a GPU queued without a wait: the slots alternate (the next batch's copy
         * runs during this pass) and the device adds every pass's loss into one sum,
         * read once at the end: the host's sum, in the same order */
        rt_bind_slot(r, b, n % 2 ? RT_CU_SLOT_EVAL1 : RT_CU_SLOT_EVAL, 0, 1, n == 0 ? 0 : -1);
        r->e.rng_key = 0;
        /* (evaluate sets train too; a CUDA graph's key reads these first: fixed here, not
         * the last training pass's, which validation does not use) */
        r->e.train = 0;
        r->e.grads_zero = 0;
        r->e.grad_scale = 1.0f;
        int graph = r->gpu ? rt_cu_graph_begin(&r->e) : RT_CU_GRAPH_NONE;
        if (graph != RT_CU_GRAPH_RAN)
            r->m->evaluate(&r->e);
        if (graph == RT_CU_GRAPH_CAPTURE && !rt_cu_graph_end(&r->e))
            r->m->evaluate(&r->e);   /* the capture failed and nothing ran */
        terms += r->e.terms;
        n++;
        if (r->gpu) {
            rt_cu_upload_done(&r->e);   /* b's host buffer is the loader's again */
            continue;
        }
        loss += r->e.loss_sum;
        correct += r->e.correct;
        margin += r->e.margin_sum;
    }
    if (r->gpu && n > 0) {
        r->e.terms = 0;         /* (ignore_index: the terms the device counted come back) */
        rt_end_pass(r);
        loss = r->e.loss_sum;
        correct = r->e.correct;
        margin = r->e.margin_sum;
        terms += r->e.terms;
    }
    if (r->world > 1) {           /* every rank sees the same numbers, so they stop together */
        double v[4] = {loss, (double)terms, (double)correct, margin};
        rt_allreduce_sum_f64(v, 4);
        loss = v[0];
        terms = (int64_t)v[1];
        correct = (int64_t)v[2];
        margin = v[3];
    }
    ev.loss = terms ? loss / (double)terms : NAN;
    ev.acc = terms ? (double)correct / (double)terms : NAN;
    ev.margin = terms ? margin / (double)terms : NAN;
    ev.terms = terms;
    return ev;
}

static void write_val_record(Run *r, const rt_loop_state *s, const Eval *ev, int ema)
{
    /* (the average in the weights' place: ema's for a while, swa's at the end) */
    char buf[512], a[32];
    int n = snprintf(buf, sizeof buf, "{\"step\":%lld,\"epoch\":%lld,\"val_loss\":%s",
                     (long long)s->step, (long long)s->epoch, rt_json_num(a, s->last_val_loss));
    if (ema || r->swa_done)
        n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"%s\":true", ema ? "ema" : "swa");
    if (rt_has_acc(r->m))
        n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"val_acc\":%s",
                      rt_json_num(a, s->last_val_acc));
    if (r->m->loss == RT_LOSS_DPO)
        n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"val_margin\":%s",
                      rt_json_num(a, ev->margin));
    snprintf(buf + n, sizeof buf - (size_t)n, "}");
    rt_metrics_line(r->mt, buf);
    rt_metrics_val_point(r->mt, s->step, s->last_val_loss);
}

/* Runs validation and records it; updates best.safetensors (and checkpoint.keep_best's
 * files) for a validation monitor.
 * With ema.validate, once the average has had a take, on the average in the weights'
 * place (best.safetensors then holds it). */
void rt_validation(Run *r, rt_loop_state *s, int best_mode)
{
    int ema = r->c.has_ema && r->c.ema_validate && rt_ema_ready(&r->c, s->step);
    if (ema)
        rt_ema_swap(r);
    Eval ev = rt_validate(r);
    s->last_val_step = s->step;
    s->last_val_loss = ev.loss;
    s->last_val_acc = ev.acc;
    write_val_record(r, s, &ev, ema);
    rt_metrics_plot(r->mt);
    if (ev.loss < s->best_val)
        s->best_val = ev.loss;
    int mon = r->c.has_early_stopping ? r->c.es_monitor : RT_MON_VAL_LOSS;
    if (mon != RT_MON_LOSS) {
        double v = mon == RT_MON_VAL_LOSS ? ev.loss : ev.acc;
        if (isfinite(v) && rt_better(best_mode, v, s->best_mon)) {
            s->best_mon = v;
            s->best_step = s->step;
            rt_save_weights(r, "best.safetensors");
        }
        rt_keep_best(r, s->step, best_mode, v, mon == RT_MON_VAL_LOSS ? "val_loss" : "val_acc");
    }
    if (ema)
        rt_ema_swap(r);
}

/* validate.every_fraction f as Lightning's float val_check_interval: every
 * max(1, floor(f x batches per epoch)) batches of an epoch, counted from its start
 * (Lightning: (batch_idx + 1) % val_check_batch == 0), in the epochs every_epochs
 * picks; the epoch's end only where it is such a batch. A step of `accumulate`
 * batches validates after its update when one of its batches is. The product in
 * double and truncated, as Python's int(f * n). */
int rt_val_due(const Run *r, int64_t epoch, int64_t before, int64_t after, int64_t step)
{
    const rt_train_config *c = &r->c;
    if (!r->has_val)
        return 0;
    int64_t every_e = rt_val_every_epochs(c);
    int in_epoch = every_e > 0 && (epoch + 1) % every_e == 0;
    if (!isnan(c->val_every_fraction)) {
        int64_t k = (int64_t)(c->val_every_fraction * (double)r->batches_per_epoch);
        if (k < 1)
            k = 1;
        return (every_e <= 0 || in_epoch) && after / k > before / k;
    }
    if (c->val_every_steps > 0 && step % c->val_every_steps == 0)
        return 1;
    return in_epoch && after >= r->batches_per_epoch;
}
