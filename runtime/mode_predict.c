/* mode_predict.c: --predict FILE.npy, the model's prediction (its last layer's output:
 * a classifier's logits, a regression's values, a language model's logits) for every
 * row of FILE, by validation's program (evaluation mode: no dropout, batchnorm's
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

/* The input --predict reads: the model's one input besides the loss's target. */
static int predict_input(const rt_model *m)
{
    int x = -1;
    for (int k = 0; k < m->n_inputs; k++) {
        if (k == m->target_input)
            continue;
        if (x >= 0)
            rt_input_error("--predict reads one input, and model '%s' has '%s' and '%s' besides "
                           "its target", m->name, m->inputs[x].name, m->inputs[k].name);
        x = k;
    }
    if (x < 0)
        rt_input_error("--predict: model '%s' has no input besides its target", m->name);
    return x;
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

/* --predict: FILE's rows a batch at a time through validation's program. */
void rt_predict(Run *r)
{
    const rt_model *m = r->m;
    if (r->world > 1)
        rt_input_error("--predict runs on one rank (without mpirun, or -np 1)");
    int xi = predict_input(m);
    const rt_input *in = &m->inputs[xi];
    rt_npy a;
    rt_npy_open(&a, r->o.predict);
    rt_npy_check_input(&a, in, "--predict");
    int64_t N = a.rows, Bmax = r->e.Bmax, per = m->pred_numel;
    if (N == 0)
        rt_input_error("%s: --predict: the array has no rows", a.path);
    /* the input's batch (its dtype as the loader gives it) and zeros for the others */
    size_t elem = rt_batch_dtype(in) == RT_U8 ? 1 : rt_batch_dtype(in) == RT_U16 ? 2 : 4;
    void *xb = rt_xmalloc((size_t)(Bmax * in->numel) * elem);
    int64_t widest = 1;
    for (int k = 0; k < m->n_inputs; k++)
        widest = m->inputs[k].numel > widest ? m->inputs[k].numel : widest;
    void *blank = rt_xmalloc((size_t)(Bmax * widest) * 4);
    memset(blank, 0, (size_t)(Bmax * widest) * 4);
    float *out = rt_xmalloc((size_t)(Bmax * per) * sizeof *out);
    int64_t *idx = rt_xmalloc((size_t)Bmax * sizeof *idx);
    char path[RT_PATH_MAX + 32];
    if (rt_mkdir_p(r->out) != 0)
        rt_input_error("cannot make %s for the predictions: %s", r->out, strerror(errno));
    rt_join_path(path, sizeof path, r->out, "predictions.npy");
    FILE *f = rt_npy_stream_open(path, N, m->pred_rank, m->pred_shape);
    if (!f)
        rt_input_error("cannot write %s: %s", path, strerror(errno));
    double t0 = rt_now();
    for (int64_t at = 0; at < N; at += Bmax) {
        int64_t rows = N - at < Bmax ? N - at : Bmax;
        for (int64_t i = 0; i < rows; i++)
            idx[i] = at + i;
        rt_npy_gather(&a, idx, rows, xb, rt_batch_dtype(in));
        rt_batch one = {.rows = rows};
        for (int k = 0; k < m->n_inputs; k++)
            one.in[k] = k == xi ? xb : blank;
        rt_bind_batch(r, &one, -1);
        m->evaluate(&r->e);
        rt_end_pass(r);
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
    fprintf(stderr, "trainc: predict: %lld rows of %s -> %s\n", (long long)N, a.path, path);
    rt_npy_close(&a);
    rt_xfree(idx);
    rt_xfree(out);
    rt_xfree(blank);
    rt_xfree(xb);
}
