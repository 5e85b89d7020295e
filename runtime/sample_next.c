/* sample_next.c: the next token's logits for --sample (mode_sample.c), for each of N
 * sequences drawn together (--num-samples): by the window's forward pass over the N
 * contexts, or by the decode program (compiler/decode.c) with its key/value cache, which
 * computes only the positions it lacks: a prompt's in passes of up to Bmax positions of
 * one sequence, then each token of the N sequences in one pass of N rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "run.h"

/* The logits' source for one generation. The cache holds positions [0, at) of each
 * sequence's context (in fp32, in the GPU's memory where the run is on one; N caches of
 * rt_model.kv_floats). `on` while it serves: the model has the program, TRAINC_KV_CACHE
 * is not 0, and the windows have not slid (a slide moves every id to another position:
 * from then on each token is the window's pass). TRAINC_KV_CACHE=check also runs the
 * window's pass for each token the cache serves and reports the largest difference of
 * the two logits (over the largest logit) at the end. On a GPU a token's pass (one row a
 * sequence) is a CUDA graph from the second on, unless TRAINC_CUDA_GRAPH=0. */
struct rt_next {
    Run *r;
    int64_t N, V, T;
    float *kv;                /* a host pointer, or the device's address */
    int32_t *ids;             /* a batch of the window's inputs: the rows' ids (the program
                                 reads one a row), then on a GPU the first row's position
                                 (where the kernels read it), uploaded whole */
    int gpu;
    int graphs;               /* on a GPU: a token's passes as a graph */
    int64_t tokens;           /* a token's passes so far */
    void *graph;              /* a token's pass, once captured */
    int64_t at;
    int on, check;
    float *mine;              /* check: the window's logits [N, V] */
    int64_t checked;          /* check: tokens compared */
    double worst;             /* check: the largest difference over the largest logit */
};

rt_next *rt_next_open(Run *r, int64_t N, int64_t V)
{
    const char *v = getenv("TRAINC_KV_CACHE");
    rt_next *k = rt_xmalloc(sizeof *k);
    *k = (rt_next){.r = r, .N = N, .V = V, .T = r->m->inputs[0].shape[0], .gpu = r->gpu,
                   .on = r->m->decode && !(v && !strcmp(v, "0")),
                   .check = v && !strcmp(v, "check")};
    size_t bytes = (size_t)(N * r->m->kv_floats) * sizeof(float);
    if (k->on && r->gpu) {   /* (kept for the run: sampling ends it) */
        k->kv = (float *)(uintptr_t)rt_cu_try_alloc(&r->e, bytes);
        if (!k->kv) {
            fprintf(stderr, "trainc: no room on the GPU for the key/value cache (%.1f MiB): "
                            "each token is the window's pass\n", (double)bytes / (1 << 20));
            k->on = 0;
            return k;
        }
        const char *g = getenv("TRAINC_CUDA_GRAPH");
        k->graphs = !(g && !strcmp(g, "0"));
    } else if (k->on)
        k->kv = rt_xmalloc(bytes);
    if (k->on) {
        size_t n = (size_t)(r->e.Bmax * r->m->inputs[0].numel);   /* (>= Bmax + 1: T >= 2) */
        k->ids = rt_xmalloc(n * sizeof(int32_t));
        memset(k->ids, 0, n * sizeof(int32_t));
    }
    if (k->on && k->check)
        k->mine = rt_xmalloc((size_t)(N * V) * sizeof(float));
    return k;
}

void rt_next_close(rt_next *k)
{
    if (k->check)
        fprintf(stderr, "trainc: key/value cache check: %lld tokens, the largest difference "
                        "%.3g of the largest logit\n", (long long)k->checked, k->worst);
    if (!k->gpu)
        rt_xfree(k->kv);
    rt_cu_graph_free(k->graph);
    rt_xfree(k->ids);
    rt_xfree(k->mine);
    rt_xfree(k);
}

void rt_next_slid(rt_next *k) { k->on = 0; }

/* The next prompt's generation (--prompt-file): the caches hold nothing, and serve again
 * where they were made (a token's graph stays: the same buffers, the position read from
 * the device). */
void rt_next_reset(rt_next *k)
{
    k->at = 0;
    k->on = k->kv != NULL;
}

/* A chunked head (rt_model.head_d > 0), whose programs never hold the logits whole:
 * row `at`'s logits, x's row times W^T (the GEMM the head's call makes), into row 0 of
 * validation's chunk scratch after its pass. */
static void head_row(Run *r, int64_t at)
{
    const rt_model *m = r->m;
    const float *x = rt_act_adv(&r->e, rt_arena_at(r, m->head_x_offset), at * m->head_d);
    float *z = (float *)rt_arena_at(r, m->pred_offset);
    rt_gemm(&r->e, 0, 1, 1, m->head_wrows, m->head_d, 1.0f, x, m->head_d,
            r->e.params + m->head_w_offset, m->head_d, 0.0f, z, m->pred_ld);
}

/* One forward pass over the N contexts ctx [N, T] (n ids each, the rest 0) and the
 * logits of each one's last position into z [N, V] (16-bit values widened). */
static void window_logits(rt_next *k, int32_t *ctx, int32_t *tgt, int64_t n, float *z)
{
    Run *r = k->r;
    const rt_model *m = r->m;
    int64_t T = k->T, V = k->V;
    int64_t ld = m->pred_ld > 0 ? m->pred_ld : m->pred_numel / T;   /* rows ld apart */
    rt_batch all = {.rows = k->N, .in = {ctx, tgt}};
    rt_bind_batch(r, &all, -1);
    if (m->pred_eval)
        m->evaluate(&r->e);
    else
        m->forward(&r->e, 0);
    for (int64_t b = 0; b < k->N; b++) {
        int64_t at = b * T + n - 1;   /* sequence b's last position: pred's row */
        if (m->head_d > 0) {   /* computed into row 0 */
            head_row(r, at);
            at = 0;
        }
        rt_end_pass(r);
        rt_arena_read(r, m->pred_offset, at * ld, V, m->act16 != 0, z + b * V);
    }
}

/* The decode program's pass over the rows bound. On a GPU a token's pass (tok) runs as
 * always the first time (which settles what the host decides once: GEMM plans, kernels
 * loaded, constants uploaded), is captured as a CUDA graph the second, and is that graph
 * after: one launch a token. A capture that fails leaves graphs off. */
static void decode_pass(rt_next *k, int tok)
{
    Run *r = k->r;
    rt_exec *e = &r->e;
    if (!k->gpu || !tok || !k->graphs || k->tokens++ == 0) {
        r->m->decode(e);
    } else if (k->graph) {
        rt_cu_graph_run(e, k->graph);
    } else if (!rt_cu_capture_begin(e)) {
        k->graphs = 0;
        r->m->decode(e);
    } else {
        r->m->decode(e);
        if (!(k->graph = rt_cu_capture_end(e))) {
            k->graphs = 0;
            r->m->decode(e);
        }
    }
}

/* The decode program over `rows` rows whose ids k->ids holds (seq: one a sequence, at
 * position k->at; else positions k->at ... of the first sequence). On a GPU the ids and
 * the first row's position go up in a batch of the window's size (rt_bind_batch copies
 * that much: rows T >= rows + 1 ids). */
static void decode_rows(rt_next *k, int64_t rows, int seq, int tok)
{
    Run *r = k->r;
    rt_exec *e = &r->e;
    rt_batch some = {.rows = rows, .in = {k->ids, NULL}};
    if (k->gpu) {
        k->ids[rows] = (int32_t)k->at;
        some.in[1] = k->ids;
    }
    rt_bind_batch(r, &some, -1);
    e->pos = k->at;
    e->kv = k->kv;
    e->kv_seq = seq ? r->m->kv_floats : 0;
    e->dpos = k->gpu ? (const int32_t *)e->in[0] + rows : NULL;
    decode_pass(k, tok);
    e->kv_seq = 0;
}

/* The decode program's logits of rows [row, row + rows) into z (rows V apart). */
static void decode_read(rt_next *k, int64_t row, int64_t rows, float *z)
{
    Run *r = k->r;
    const rt_model *m = r->m;
    if (k->gpu)
        rt_end_pass(r);
    for (int64_t b = 0; b < rows; b++)
        rt_arena_read(r, m->decode_pred_offset, (row + b) * m->decode_pred_ld, k->V,
                      m->act16 != 0, z + b * k->V);
}

/* The first sequence's positions [at, n) through the decode program, Bmax of them a pass
 * (a prompt's in few passes over the weights), the last one's logits into z; with
 * several sequences (at 0: the prompt, which they share) its cache then copied into the
 * others' and its logits theirs too. */
static void prefill(rt_next *k, const int32_t *ctx, int64_t n, float *z)
{
    Run *r = k->r;
    int64_t rows = 0, first = k->at, B = r->e.Bmax;
    for (; k->at < n; k->at += rows) {
        rows = n - k->at < B ? n - k->at : B;
        memcpy(k->ids, &ctx[k->at], (size_t)rows * sizeof *k->ids);
        decode_rows(k, rows, 0, rows == 1 && k->N == 1);
    }
    decode_read(k, rows - 1, 1, z);
    for (int64_t b = 1; b < k->N; b++)
        memcpy(z + b * k->V, z, (size_t)k->V * sizeof(float));
    if (k->N == 1)
        return;
    if (first != 0)
        rt_die("sample: sequences part at position %lld, not the prompt's 0", (long long)first);
    size_t per = (size_t)r->m->kv_floats * sizeof(float);
    if (!k->gpu) {
        for (int64_t b = 1; b < k->N; b++)
            memcpy((char *)k->kv + b * per, k->kv, per);
        return;
    }
    void *host = rt_xmalloc(per);   /* (a round trip: once a generation) */
    rt_cu_download(host, (rt_dptr)(uintptr_t)k->kv, per);
    for (int64_t b = 1; b < k->N; b++)
        rt_cu_upload((rt_dptr)(uintptr_t)k->kv + b * per, host, per);
    rt_xfree(host);
}

/* check: the cache's logits z [N, V] against the window's pass on the same contexts. */
static void check_logits(rt_next *k, int32_t *ctx, int32_t *tgt, int64_t n, const float *z)
{
    window_logits(k, ctx, tgt, n, k->mine);
    for (int64_t b = 0; b < k->N; b++) {
        const float *w = k->mine + b * k->V, *c = z + b * k->V;
        double top = 0, diff = 0;
        for (int64_t i = 0; i < k->V; i++) {
            top = fabs(w[i]) > top ? fabs(w[i]) : top;
            diff = fabs(w[i] - c[i]) > diff ? fabs(w[i] - c[i]) : diff;
        }
        diff = top > 0 ? diff / top : diff;
        k->worst = diff > k->worst || isnan(diff) ? diff : k->worst;
    }
    k->checked++;
}

/* Each sequence's logits after its context ctx [N, T] (n ids each, at most T) into z
 * [N, V]: from the cache, through the decode program for the positions it lacks (the
 * first sequence's, or one new position of each), else by the window's pass. 1 where
 * the cache served them. */
int rt_next_logits(rt_next *k, int32_t *ctx, int32_t *tgt, int64_t n, float *z)
{
    if (!k->on || k->at >= n) {
        window_logits(k, ctx, tgt, n, z);
        return 0;
    }
    if (k->N > 1 && k->at > 0) {   /* each sequence's one new position, a row each */
        if (n != k->at + 1)
            rt_die("sample: %lld positions, the cache %lld", (long long)n, (long long)k->at);
        for (int64_t b = 0; b < k->N; b++)
            k->ids[b] = ctx[b * k->T + k->at];
        decode_rows(k, k->N, 1, 1);
        k->at++;
        decode_read(k, 0, k->N, z);
    } else
        prefill(k, ctx, n, z);
    if (k->check)
        check_logits(k, ctx, tgt, n, z);
    return 1;
}
