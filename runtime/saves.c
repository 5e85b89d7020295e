/* saves.c: what a run saves of its weights: checkpoints (every rank takes part),
 * best.safetensors (best_k.c: the K best) and the final model.safetensors and ema.safetensors (rank 0 writes);
 * and train.ema's average put in the weights' place for a while (validation, its file). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "run.h"

/* Rank 0 writes PATH, with meta (key, value, ..., NULL) in its __metadata__ */
void rt_write_weights_meta(Run *r, const char *path, const char *const *meta)
{
    rt_pull_params(r, 0);
    if (rt_safetensors_write_meta(path, r->m, r->params, r->layer_state, meta) != 0)
        rt_fail("cannot write %s: %s%s", path, strerror(errno), rt_full_hint(errno));
}

/* Rank 0 writes OUT/file */
static void write_weights(Run *r, const char *file)
{
    char path[RT_PATH_MAX + 64];
    rt_join_path(path, sizeof path, r->out, file);
    rt_write_weights_meta(r, path, NULL);
}

/* Every rank calls it during training (rank 0 writes; the others wait in
 * rt_barrier_solo, not in the next step's collectives, whose watchdog does not know
 * rank 0 is writing). */
void rt_save_weights(Run *r, const char *file)
{
    if (r->rank == 0)
        write_weights(r, file);
    rt_barrier_solo();
}

/* The trained weights and ema's average (the state's last part) exchanged, and the
 * GPU's 16-bit copy made anew from them: the average in the weights' place, or back */
void rt_ema_swap(Run *r)
{
    int64_t T = r->m->trainable_floats, at = (int64_t)rt_ema_part(&r->c) * T;
    if (r->gpu) {
        rt_dptr p = (rt_dptr)(uintptr_t)r->e.params;
        rt_cu_swap(&r->e, p, rt_cu_state(&r->e) + (rt_dptr)at * sizeof(float), T);
        rt_cu_copy_params16(&r->e, r->m);
    } else
        rt_swap_floats(r->e.rt, r->params, r->state + at, T);
}

/* OUT/ema.safetensors: ema's average (the frozen weights and the layers' state as they
 * are), where it has had a take by this step */
static void save_ema(Run *r, int64_t step)
{
    if (!r->c.has_ema || !rt_ema_ready(&r->c, step))
        return;
    rt_ema_swap(r);
    write_weights(r, "ema.safetensors");
    rt_ema_swap(r);
}

/* The final weights. Right after a checkpoint, model.safetensors is a second name of
 * the weights file of that checkpoint (of this step: the same bytes, 0.5 GB once, not
 * twice, for GPT-2); written where the file system has no hard links. */
void rt_save_final(Run *r, int after_ckpt, int64_t step)
{
    if (r->rank != 0)
        return;
    rt_out_check(r->out);
    save_ema(r, step);
    char src[RT_PATH_MAX + 96], dst[RT_PATH_MAX + 64];
    rt_join_path(dst, sizeof dst, r->out, "model.safetensors");
    if (after_ckpt) {
        snprintf(src, sizeof src, "%s/checkpoints/step_%08lld/model.safetensors", r->out,
                 (long long)step);
        if (rt_safetensors_link(src, dst) == 0)
            return;
    }
    write_weights(r, "model.safetensors");   /* (rank 0 alone: the end's barrier waits) */
}

/* Every rank calls it, and waits for rank 0's files in rt_barrier_solo. */
void rt_checkpoint(Run *r, rt_loop_state *s)
{
    if (r->rank != 0 && !rt_zero_on()) {
        rt_barrier_solo();    /* DDP: every rank holds the same state; ZeRO: its shard */
        return;
    }
    if (r->rank == 0)
        rt_out_check(r->out);
    rt_metrics_sync(r->mt);
    s->metrics_bytes = rt_file_size(r->out, "metrics.jsonl");
    rt_pull_params(r, 1);
    int n;
    char **lines = rt_config_dump(&r->c, &n);
    s->elapsed = rt_now() - r->t0;
    int n_spec;
    char **spec = rt_spec_lines(r->m, &n_spec);
    if (rt_ckpt_save(r->out, r->m, &r->c, s, r->params, r->layer_state, r->state, rt_zero_part(), lines, n,
                     spec, n_spec) != 0) {
        int err = errno;
        if (r->rank == 0)
            rt_out_check(r->out);    /* a folder moved away says so, not "no such file" */
        rt_fail("cannot write a checkpoint in %s/checkpoints: %s%s", r->out, strerror(err),
                rt_full_hint(err));
    }
    rt_free_lines(lines, n);
    rt_free_lines(spec, n_spec);
    rt_have_ckpt = 1;
    rt_barrier_solo();
}
