/* mode_reference.c: --reference, the reference model's side of dpo (docs/spec.md's
 * "dpo"): the weights the trainer starts from (--init, else the spec's initialization)
 * score every row of data.train and data.val, and each pair's two answers' log-
 * probabilities (the loss's dpo_logps, validation's program: no dropout) are written to
 * the files those splits name for the loss's reference input, float32 [N, 2], a batch at
 * a time (through NAME.tmp, renamed once whole). The rows are read as training reads
 * them, the reference input (not there yet) as zeros; nothing else is written. */
#include <errno.h>
#include <string.h>
#include "run.h"

/* What --reference cannot do, checked with the options (nothing loaded yet). */
void rt_reference_check(const rt_model *m, const Opts *o)
{
    if (!o->reference)
        return;
    if (m->loss != RT_LOSS_DPO)
        rt_input_error("--reference writes the reference model's log-probabilities of a dpo "
                       "model's pairs; model '%s' has no dpo loss", m->name);
    if (m->reference_input < 0)
        rt_input_error("--reference: model '%s' trains by simpo, orpo or cpo, which have no "
                       "reference model", m->name);
    if (o->predict || o->sample || o->resume || o->gradcheck || o->lr_find)
        rt_input_error("--reference runs on its own: not with %s", o->predict ? "--predict"
                       : o->sample ? "--sample" : o->resume ? "--resume"
                       : o->gradcheck ? "--gradcheck" : "--lr-find");
}

/* Each split's file of the reference input (into r->ref_path[split], resolved against the
 * model's data folder), its entry then emptied: the dataset opens it as zeros. */
void rt_reference_entries(Run *r)
{
    const rt_model *m = r->m;
    const char *name = m->inputs[m->reference_input].name;
    rt_train_config *c = &r->c;
    rt_data_entry *sets[2] = {c->train, c->val};
    int counts[2] = {c->n_train, c->n_val};
    for (int s = 0; s < 2; s++) {
        r->ref_path[s][0] = 0;
        for (int j = 0; j < counts[s]; j++) {
            if (strcmp(sets[s][j].key, name))
                continue;
            rt_join_path(r->ref_path[s], sizeof r->ref_path[s], m->data_dir, sets[s][j].path);
            sets[s][j].path[0] = 0;
        }
        if (counts[s] && !r->ref_path[s][0])
            rt_input_error("train spec: $.train.data.%s: no file for model input '%s' (where "
                           "--reference writes it)", s ? "val" : "train", name);
    }
}

/* Split d's rows a batch at a time through validation's program; each pair's two log-
 * probabilities into the file at path. */
static void score_split(Run *r, const rt_dataset *d, const char *path, const char *what)
{
    const rt_model *m = r->m;
    int64_t N = d->rows, Bmax = r->e.Bmax;
    void *xb[RT_MAX_INPUTS] = {0};
    for (int k = 0; k < m->n_inputs; k++)
        xb[k] = rt_xmalloc((size_t)(Bmax * m->inputs[k].numel) * 4);
    float *out = rt_xmalloc((size_t)(Bmax * 2) * sizeof *out);
    int64_t *idx = rt_xmalloc((size_t)Bmax * sizeof *idx);
    FILE *f = rt_npy_stream_open(path, N, 1, (int64_t[]){2});
    if (!f)
        rt_input_error("cannot write %s: %s", path, strerror(errno));
    const rt_npy *from[RT_MAX_INPUTS];
    for (int k = 0; k < m->n_inputs; k++)
        from[k] = &d->arr[k];
    double t0 = rt_now();
    for (int64_t at = 0; at < N; at += Bmax) {
        int64_t rows = N - at < Bmax ? N - at : Bmax;
        rt_eval_rows(r, from, at, rows, xb, idx);
        rt_arena_read(r, m->eval_logps_offset, 0, rows * 2, 0, out);
        fwrite(out, sizeof *out, (size_t)(rows * 2), f);   /* (an error: at the commit) */
    }
    if (rt_tmp_commit(f, path) != 0)
        rt_input_error("cannot write %s: %s", path, strerror(errno));
    printf("{\"event\":\"reference\",\"split\":\"%s\",\"rows\":%lld,\"time_s\":%.3f}\n", what,
           (long long)N, rt_now() - t0);
    fflush(stdout);
    fprintf(stderr, "trainc: reference: %lld %s pairs -> %s\n", (long long)N, what, path);
    for (int k = 0; k < m->n_inputs; k++)
        rt_xfree(xb[k]);
    rt_xfree(idx);
    rt_xfree(out);
}

void rt_reference(Run *r)
{
    if (r->world > 1)
        rt_input_error("--reference runs on one rank (without mpirun, or -np 1)");
    score_split(r, &r->train, r->ref_path[0], "train");
    if (r->has_val)
        score_split(r, &r->val, r->ref_path[1], "val");
}
