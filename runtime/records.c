/* records.c: the run's records in metrics.jsonl: the start (model, device, memory),
 * the device's memory after the first step, a training record every log_every steps
 * (with the progress line) and the end (with the loss of the steps after the last
 * training record). Validation's record is validate.c's. */
#include <string.h>
#include "run.h"

void rt_record_start(Run *r)
{
    int threads = r->threads;
    int64_t resumed_from = r->resumed_from;
    char buf[2048], res[192] = "", dev[512] = "\"device\":\"cpu\"";
    if (r->gpu) {
        size_t pool, arena, fixed, all = rt_cu_allocated(&r->e, &pool, &arena, &fixed);
        snprintf(dev, sizeof dev,
                 "\"device\":\"cuda\",\"gpu\":\"%s\",\"arch\":\"%s\",\"kernels\":\"%s\","
                 "\"device_bytes\":%zu,\"device_pool_bytes\":%zu,\"device_arena_bytes\":%zu,"
                 "\"device_fixed_bytes\":%zu,\"device_data_bytes\":%zu",
                 rt_cu_name(&r->e), rt_cu_arch(&r->e), rt_cu_kernels_from(&r->e), all, pool, arena, fixed,
                 rt_cu_data_allocated(&r->e));
    }
    const char *strategies[] = {"ddp", "zero1", "zero2"};   /* RT_DIST_*; bytes: rank 0's */
    int64_t np = 0;
    for (int i = 0; i < r->m->n_params; i++)
        np += r->m->params[i].numel;
    if (resumed_from >= 0)
        snprintf(res, sizeof res, ",\"resumed_from\":%lld", (long long)resumed_from);
    if (r->world > 1)   /* what each step's gradient sum over the ranks carries */
        snprintf(res + strlen(res), sizeof res - strlen(res), ",\"reduced_bytes\":%lld",
                 (long long)rt_ddp_reduced_bytes());
    if (r->m->n_state)   /* the layers' state (batchnorm's running statistics) */
        snprintf(res + strlen(res), sizeof res - strlen(res), ",\"state_bytes\":%lld",
                 (long long)(r->m->state_floats * 4));
    snprintf(buf, sizeof buf,
             "{\"event\":\"start\",\"model\":\"%s\",\"params\":%lld,%s,\"precision\":\"%s\","
             "\"arena_bytes\":%lld,\"param_bytes\":%lld,\"optimizer_bytes\":%lld,\"ranks\":%d,"
             "\"grad_bytes\":%lld,\"strategy\":\"%s\",\"threads\":%d,\"batch_size\":%lld,"
             "\"spec_hash\":\"%s\"%s}",
             r->m->name, (long long)np, dev, rt_precision_name(r->gpu ? rt_model_precision(r->m) : RT_PREC_FP32),
             (long long)(r->e.Bmax * rt_arena_row(r->m) * r->e.arena_scale),
             (long long)(r->m->param_floats * 4),
             (long long)(rt_optim_state_parts(&r->c) * (rt_zero_part().hi - rt_zero_part().lo) * 4),
             r->world, (long long)rt_zero_grad_bytes(), strategies[r->c.dist], threads,
             (long long)r->c.batch_size, r->m->spec_hash, res);
    rt_metrics_line(r->mt, buf);
}

/* What the device really holds after a whole step (our allocations, the CUDA context,
 * cuBLASLt's own), next to what we allocated: once, on a GPU. */
void rt_record_memory(Run *r, const rt_loop_state *s)
{
    size_t fr = 0, tot = 0, pool, arena, fixed;
    size_t all = rt_cu_allocated(&r->e, &pool, &arena, &fixed);
    rt_cu_sync(&r->e);
    rt_cu_mem_info(&fr, &tot);
    char buf[384], gr[128] = "";
    size_t chunk = 0, gpeak = 0;
    rt_cu_grads_mapped(&r->e, &gpeak, &chunk);
    if (gpeak)   /* zero2: the most gradient memory backed at once */
        snprintf(gr, sizeof gr, ",\"grad_peak_bytes\":%zu,\"grad_chunk_bytes\":%zu", gpeak,
                 chunk);
    snprintf(buf, sizeof buf, "{\"event\":\"device_memory\",\"step\":%lld,\"used_bytes\":%zu,"
             "\"allocated_bytes\":%zu,\"context_bytes\":%zu,\"total_bytes\":%zu%s}",
             (long long)s->step, tot - fr, all, rt_cu_context_bytes(&r->e), tot, gr);
    rt_metrics_line(r->mt, buf);
    r->mem_logged = 1;
}

/* fp16-mixed, a GAN's: each network's loss scale and skipped steps, into buf. */
static const char *gan_scales(const Loop *L, const rt_loop_state *s, char *buf, size_t n)
{
    char a[32], b[32];
    buf[0] = 0;
    if (L->scaler)
        snprintf(buf, n, ",\"loss_scale_d\":%s,\"loss_scale_g\":%s,\"skipped_steps_d\":%lld,"
                 "\"skipped_steps_g\":%lld", rt_json_num(a, s->loss_scale_d),
                 rt_json_num(b, s->loss_scale), (long long)s->skipped_d, (long long)s->skipped);
    return buf;
}

/* The training record of the last log_every steps (the mean of their batches'
 * losses, the samples a second since L->log_t) and the progress line; the sums
 * start again. */
void rt_record_train(Run *r, rt_loop_state *s, Loop *L, const Step *st, double now)
{
    char buf[512], a[32], bb[32], cc[32], d[32];
    double sps = (double)L->timed_samples / fmax(now - L->log_t, 1e-9);
    double mean = s->log_loss / (double)s->log_n;
    char tps[160] = "";
    if (r->train.tokens) {
        char t1[32];
        snprintf(tps, sizeof tps, ",\"tokens_per_s\":%s",
                 rt_json_num(t1, sps * (double)r->train.T));
    }
    if (L->scaler) {
        char t1[32];
        size_t u = strlen(tps);
        snprintf(tps + u, sizeof tps - u, ",\"loss_scale\":%s,\"skipped_steps\":%lld",
                 rt_json_num(t1, s->loss_scale), (long long)s->skipped);
    }
    if (r->m->gan) {   /* a GAN's: each network's loss and gradient norm */
        char g[32], nd[32];
        snprintf(buf, sizeof buf,
                 "{\"step\":%lld,\"epoch\":%lld,\"d_loss\":%s,\"g_loss\":%s,\"lr\":%s,"
                 "\"grad_norm_d\":%s,\"grad_norm_g\":%s,\"samples_per_s\":%s%s,\"time_s\":%.3f}",
                 (long long)s->step, (long long)s->epoch, rt_json_num(a, mean),
                 rt_json_num(g, s->log_g_loss / (double)s->log_n), rt_json_num(bb, st->lr),
                 rt_json_num(nd, st->norm_d), rt_json_num(cc, st->norm_g), rt_json_num(d, sps),
                 gan_scales(L, s, tps, sizeof tps), now - r->t0);
    } else
        snprintf(buf, sizeof buf,
                 "{\"step\":%lld,\"epoch\":%lld,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,\"samples_per_s\":%s%s,\"time_s\":%.3f}",
                 (long long)s->step, (long long)s->epoch, rt_json_num(a, mean),
                 rt_json_num(bb, st->lr), rt_json_num(cc, st->norm), rt_json_num(d, sps), tps,
                 now - r->t0);
    rt_metrics_line(r->mt, buf);
    rt_metrics_train_point(r->mt, s->step, mean);
    if (r->m->gan) {
        rt_metrics_gan(r->mt);
        rt_metrics_val_point(r->mt, s->step, s->log_g_loss / (double)s->log_n);
    }
    rt_progress(r->o.quiet, s->step, r->total_steps, s->epoch, mean, sps, now - r->t0);
    s->log_loss = 0;
    s->log_g_loss = 0;
    s->log_n = 0;
    s->log_samples = 0;
    L->timed_samples = 0;
    L->log_t = now;
}

const char *const rt_end_names[] = {"epochs", "max_steps", "max_time", "early_stopping",
                                    "diverged", "interrupted"};

/* The end record (best_val_loss null without validation); metrics.jsonl closed.
 * The steps after the last multiple of log_every had no training record: their mean
 * loss (over their batches, as a training record's) and their number go into it, so
 * the last stretch of a run is never invisible. Returns the run's seconds the record
 * says. */
double rt_record_end(Run *r, const rt_loop_state *s, int end)
{
    char buf[640], a[32], g[32], tail[128] = "";
    double t = rt_now() - r->t0;
    int64_t since = s->step % r->c.log_every;
    if (s->log_n > 0 && since > 0 && r->m->gan)
        snprintf(tail, sizeof tail, ",\"d_loss\":%s,\"g_loss\":%s,\"steps_since_record\":%lld",
                 rt_json_num(a, s->log_loss / (double)s->log_n),
                 rt_json_num(g, s->log_g_loss / (double)s->log_n), (long long)since);
    else if (s->log_n > 0 && since > 0)
        snprintf(tail, sizeof tail, ",\"loss\":%s,\"steps_since_record\":%lld",
                 rt_json_num(a, s->log_loss / (double)s->log_n), (long long)since);
    snprintf(buf, sizeof buf, "{\"event\":\"end\",\"reason\":\"%s\",\"step\":%lld%s,"
             "\"best_val_loss\":%s,\"time_s\":%.3f}", rt_end_names[end], (long long)s->step, tail,
             rt_json_num(a, r->has_val ? s->best_val : NAN), t);
    rt_metrics_line(r->mt, buf);
    rt_metrics_close(r->mt);
    return t;
}
