/* mode_predict.c: --predict FILE.npy, the model's prediction (its last layer's output:
 * a classifier's logits, a regression's values, a language model's logits) for every
 * row of FILE (and of its siblings, one for each of the model's other inputs: a text
 * classifier's test_x.npy, test_types.npy, test_pos.npy), by validation's program (evaluation mode: no dropout, batchnorm's
 * running statistics), written as OUT/predictions.npy, float32 [N, prediction shape],
 * a batch at a time (through predictions.npy.tmp, renamed once whole). Nothing is
 * trained; the loss's target is not read. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "run.h"

/* What --predict cannot do, checked with the options (nothing loaded yet). */
void rt_predict_check(const rt_model *m, const Opts *o)
{
    if (!o->predict)
        return;
    if (m->gan)
        rt_input_error("--predict is for a model with a loss; a GAN's generator makes samples "
                       "with --sample N");
    if (m->pred_rank == 0)
        rt_input_error("--predict needs the logits whole, and this model's language-model head "
                       "computes them a chunk of rows at a time (its %lld classes): build it "
                       "with TRAINC_HEAD_CHUNKS=1 to keep them whole", (long long)m->head_wrows);
}

/* The inputs --predict reads: the model's inputs besides the loss's target, each from
 * its file (paths[k]; NULL for the target). One is FILE; with several, FILE is
 * PREFIX_NAME.npy for one input NAME, and each other input's file is PREFIX_OTHER.npy
 * beside it (as `trainc data classify` names them: test_x.npy, test_types.npy, ...). */
static void predict_paths(const rt_model *m, const char *file, char **paths)
{
    int n = 0, named = -1;
    size_t len = strlen(file), at = 0;
    for (int k = 0; k < m->n_inputs; k++) {
        paths[k] = NULL;
        if (k == m->target_input)
            continue;
        n++;
        size_t nl = strlen(m->inputs[k].name);
        if (named < 0 && len > nl + 5 && !strcmp(file + len - 4, ".npy") &&
            file[len - nl - 5] == '_' && !strncmp(file + len - nl - 4, m->inputs[k].name, nl))
            named = k, at = len - nl - 5;   /* (the prefix's length) */
    }
    if (n == 0)
        rt_input_error("--predict: model '%s' has no input besides its target", m->name);
    if (n > 1 && named < 0)
        rt_input_error("--predict %s: model '%s' has %d inputs besides its target: name one's "
                       "file PREFIX_NAME.npy (data classify's test_x.npy) and the others lie "
                       "beside it as PREFIX_OTHER.npy", file, m->name, n);
    for (int k = 0; k < m->n_inputs; k++)
        if (k != m->target_input) {
            size_t cap = at + strlen(m->inputs[k].name) + 8;
            paths[k] = rt_xmalloc(n == 1 ? len + 1 : cap);
            if (n == 1)
                memcpy(paths[k], file, len + 1);
            else
                snprintf(paths[k], cap, "%.*s_%s.npy", (int)at, file, m->inputs[k].name);
        }
}

/* Each input's file opened and checked against it, the same rows in each */
static int64_t predict_open(const rt_model *m, char **paths, rt_npy *a)
{
    int64_t N = -1;
    for (int k = 0; k < m->n_inputs; k++) {
        if (!paths[k])
            continue;
        rt_npy_open(&a[k], paths[k]);
        rt_npy_check_input(&a[k], &m->inputs[k], "--predict");
        if (N >= 0 && a[k].rows != N)
            rt_input_error("%s: --predict: %lld rows, and the model's other inputs' files %lld",
                           a[k].path, (long long)a[k].rows, (long long)N);
        N = a[k].rows;
    }
    if (N == 0)
        rt_input_error("--predict: the arrays have no rows");
    return N;
}

/* The prediction of the pass's first `rows` samples into out (rows x pred_numel floats,
 * row-major), the rows of its last axis eval_pred_ld apart in the arena gathered. */
static void prediction_rows(Run *r, int64_t rows, float *out)
{
    const rt_model *m = r->m;
    int64_t last = m->pred_shape[m->pred_rank - 1], ld = m->eval_pred_ld;
    int64_t lines = rows * (m->pred_numel / last);
    float *host = rt_xmalloc((size_t)(lines * ld) * sizeof *host);
    rt_arena_read(r, m->eval_pred_offset, 0, lines * ld, m->eval_pred16, host);
    for (int64_t j = 0; j < lines; j++)
        memcpy(out + j * last, host + j * ld, (size_t)last * sizeof *out);
    rt_xfree(host);
}

void rt_eval_rows(Run *r, const rt_npy *const *a, int64_t at, int64_t rows, void **xb,
                  int64_t *idx)
{
    const rt_model *m = r->m;
    for (int64_t i = 0; i < rows; i++)
        idx[i] = at + i;
    rt_batch one = {.rows = rows};
    for (int k = 0; k < m->n_inputs; k++) {
        if (a[k])
            rt_npy_gather(a[k], idx, rows, xb[k], rt_batch_dtype(&m->inputs[k]));
        one.in[k] = xb[k];
    }
    rt_bind_batch(r, &one, -1);
    m->evaluate(&r->e);
    rt_end_pass(r);
}

/* --predict: FILE's rows (and its siblings', for the model's other inputs) a batch at a
 * time through validation's program. */
void rt_predict(Run *r)
{
    const rt_model *m = r->m;
    if (r->world > 1)
        rt_input_error("--predict runs on one rank (without mpirun, or -np 1)");
    char *paths[RT_MAX_INPUTS];
    rt_npy a[RT_MAX_INPUTS];
    predict_paths(m, r->o.predict, paths);
    int64_t N = predict_open(m, paths, a), Bmax = r->e.Bmax, per = m->pred_numel;
    /* each input's batch (its dtype as the loader gives it); zeros for the target */
    void *xb[RT_MAX_INPUTS] = {0};
    for (int k = 0; k < m->n_inputs; k++)
        xb[k] = memset(rt_xmalloc((size_t)(Bmax * m->inputs[k].numel) * 4), 0,
                       (size_t)(Bmax * m->inputs[k].numel) * 4);
    float *out = rt_xmalloc((size_t)(Bmax * per) * sizeof *out);
    int64_t *idx = rt_xmalloc((size_t)Bmax * sizeof *idx);
    char path[RT_PATH_MAX + 32];
    if (rt_mkdir_p(r->out) != 0)
        rt_input_error("cannot make %s for the predictions: %s", r->out, strerror(errno));
    rt_join_path(path, sizeof path, r->out, "predictions.npy");
    FILE *f = rt_npy_stream_open(path, N, m->pred_rank, m->pred_shape);
    if (!f)
        rt_input_error("cannot write %s: %s", path, strerror(errno));
    const rt_npy *from[RT_MAX_INPUTS];
    for (int k = 0; k < m->n_inputs; k++)
        from[k] = paths[k] ? &a[k] : NULL;
    double t0 = rt_now();
    for (int64_t at = 0; at < N; at += Bmax) {
        int64_t rows = N - at < Bmax ? N - at : Bmax;
        rt_eval_rows(r, from, at, rows, xb, idx);
        prediction_rows(r, rows, out);
        fwrite(out, sizeof *out, (size_t)(rows * per), f);   /* (an error: at the commit) */
    }
    if (rt_tmp_commit(f, path) != 0)
        rt_input_error("cannot write %s: %s", path, strerror(errno));
    printf("{\"event\":\"predict\",\"rows\":%lld,\"shape\":[", (long long)N);
    for (int i = 0; i < m->pred_rank; i++)
        printf("%s%lld", i ? "," : "", (long long)m->pred_shape[i]);
    printf("],\"time_s\":%.3f}\n", rt_now() - t0);
    fflush(stdout);
    fprintf(stderr, "trainc: predict: %lld rows of %s -> %s\n", (long long)N, r->o.predict, path);
    for (int k = 0; k < m->n_inputs; k++) {
        if (paths[k]) {
            rt_npy_close(&a[k]);
            rt_xfree(paths[k]);
        }
        rt_xfree(xb[k]);
    }
    rt_xfree(idx);
    rt_xfree(out);
}
