/* mode_sample.c: --sample, generation from a token model after training (or after
 * --eval): the vocabulary it may draw from, checked before training, and the sampling
 * loop. */
#include <stdlib.h>
#include <string.h>
#include "run.h"

static rt_dptr dptr(const void *p) { return (rt_dptr)(uintptr_t)p; }

/* --sample's vocabulary: the ids it may draw (the logits' width, or fewer when the
 * input's embedding has fewer rows: the logits past them are not drawn); exits 1 for
 * a model that is not a token model or a prompt byte that is no id. Checked before
 * training too, so a run is never trained and written, then refused. */
int64_t rt_sample_vocab(const rt_model *m, const char *prompt)
{
    const rt_input *in = &m->inputs[0];
    int64_t T = in->rank == 1 ? in->shape[0] : 0;
    if (!rt_token_model(m))
        rt_input_error("--sample needs a token model (an i32 [T] input and cross-entropy logits [T, vocab])");
    int64_t V = m->pred_numel / T;
    if (in->vocab > 0 && in->vocab < V)
        V = in->vocab;
    for (const char *p = prompt; p && *p; p++)
        if ((unsigned char)*p >= V)
            rt_input_error("--prompt: byte 0x%02x is past the model's %lld ids (the prompt's "
                           "bytes are its ids)", (unsigned char)*p, (long long)V);
    return V;
}

/* Generation from a token model: the context window (at most T ids) goes through the
 * forward pass with B = 1, the logits at its last position are sampled with the
 * temperature, and the id is appended (the window slides once full). Ids are bytes
 * for `trainc data text` shards, so a vocabulary of at most 256 ids is printed as
 * bytes; a larger one as numbers a space apart. */
void rt_sample(Run *r)
{
    const rt_model *m = r->m;
    const rt_input *in = &m->inputs[0];
    int64_t T = in->shape[0];
    int64_t V = rt_sample_vocab(m, r->o.prompt);
    int64_t ld = m->pred_ld > 0 ? m->pred_ld : m->pred_numel / T;   /* rows ld apart */
    int32_t *ctx = rt_xmalloc((size_t)T * sizeof *ctx), *tgt = rt_xmalloc((size_t)T * sizeof *tgt);
    int64_t n = 0;
    /* no prompt: the one id below, not the newline's 10, which a vocabulary of 10 or
     * fewer does not have (an embedding index past it: an error on the CPU, NaN logits
     * and zero bytes on the GPU) */
    const char *p = r->o.prompt ? r->o.prompt : "";
    for (; *p; p++) {
        if (n == T) {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof *ctx);
            n--;
        }
        ctx[n++] = (unsigned char)*p;
    }
    if (n == 0)
        ctx[n++] = 10 % (int32_t)V;   /* a newline, where the vocabulary has it */
    rt_rng rng;
    rt_rng_seed(&rng, r->o.sample_seed >= 0 ? (uint64_t)r->o.sample_seed : r->c.seed);
    double *prob = rt_xmalloc((size_t)V * sizeof *prob);
    float *row = rt_xmalloc((size_t)V * sizeof *row);
    r->e.rng_key = 0;
    /* (stdout closed, as by `| head`: SIGPIPE is ignored, so the write error ends it) */
    for (int64_t k = 0; k < r->o.sample && !rt_signal_seen && !ferror(stdout); k++) {
        for (int64_t t = n; t < T; t++)
            ctx[t] = 0;             /* causal attention: later positions do not matter */
        rt_batch one = {.rows = 1, .in = {ctx, tgt}};
        rt_bind_batch(r, &one, -1);
        m->forward(&r->e, 0);
        rt_end_pass(r);
        const float *logits;
        if (r->gpu && m->act16) {   /* the last position's logits, from the device */
            const uint16_t *at = (const uint16_t *)(r->e.arena + r->e.Bmax * m->pred_offset) + (n - 1) * ld;
            uint16_t *h = (uint16_t *)prob;   /* free until the loop below */
            rt_cu_download(h, dptr(at), (size_t)V * sizeof *h);
            for (int64_t v = 0; v < V; v++)
                row[v] = m->act16 == RT_PREC_BF16 ? rt_bf16_to_float(h[v]) : rt_f16_to_float(h[v]);
            logits = row;
        } else if (r->gpu) {
            logits = (const float *)(r->e.arena + r->e.Bmax * m->pred_offset) + (n - 1) * ld;
            rt_cu_download(row, dptr(logits), (size_t)V * sizeof *row);
            logits = row;
        } else {
            logits = (const float *)(r->e.arena + r->e.Bmax * m->pred_offset * r->e.arena_scale) +
                     (n - 1) * ld;
        }
        double mx = -INFINITY, sum = 0;
        int64_t top = 0;
        for (int64_t v = 0; v < V; v++) {
            mx = fmax(mx, (double)logits[v] / r->o.temperature);
            if (logits[v] > logits[top])
                top = v;   /* the argmax (T > 0), for when logit / T overflows */
        }
        for (int64_t v = 0; v < V; v++)
            sum += prob[v] = exp((double)logits[v] / r->o.temperature - mx);
        double u = rt_rng_uniform(&rng) * sum, acc = 0;
        int64_t pick = V - 1;
        for (int64_t v = 0; v < V; v++) {
            acc += prob[v];
            if (u < acc) {
                pick = v;
                break;
            }
        }
        if (isinf(mx))   /* a temperature so small that logit / T overflows: greedy */
            pick = top;
        if (V <= 256)
            putchar((int)pick);
        else
            printf("%s%lld", k ? " " : "", (long long)pick);
        if (n == T) {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof *ctx);
            n--;
        }
        ctx[n++] = (int32_t)pick;
    }
    putchar('\n');
    fflush(stdout);
    rt_xfree(prob);
    rt_xfree(row);
    rt_xfree(ctx);
    rt_xfree(tgt);
}
