/* sample_next.c: the next token's logits for --sample (mode_sample.c), for each of N
 * sequences drawn together (--num-samples, several of --prompt-file's prompts): by the
 * window's forward pass over the N contexts, or by the decode program (compiler/decode.c)
 * with a key/value cache a sequence, which computes only the positions each lacks: the
 * prompts' in passes of up to Bmax positions (several sequences' in one), then each
 * token of the N sequences in one pass of N rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "run.h"

/* The logits' source for one generation. Slot b's cache holds positions [0, at[b]) of
 * sequence b's context (in fp32, in the GPU's memory where the run is on one; N caches
 * of rt_model.kv_floats). `on` where the caches serve: the model has the program and
 * TRAINC_KV_CACHE is not 0; a sequence's serves until its window slides (a slide moves
 * every id to another position: from then on its tokens are the window's pass, the
 * others' still the cache's). TRAINC_KV_CACHE=check also runs the window's pass for
 * each token the caches serve and reports the largest difference of the two logits
 * (over the largest logit) at the end. On a GPU a token's pass (one row a sequence) is
 * a CUDA graph from the second on, unless TRAINC_CUDA_GRAPH=0. */
struct rt_next {
    Run *r;
    int64_t N, V, T;          /* N: the slots */
    float *kv;                /* a host pointer, or the device's address */
    int32_t *ids;             /* a batch of the window's inputs: the rows' ids (the program
                                 reads one a row), then their places (slot T + position),
                                 uploaded whole on a GPU */
    int64_t *at;              /* [N]: the positions each slot's cache holds */
    int64_t *lead;            /* [N]: the sequence whose prompt's pass a sequence shares
                                 (itself: none; -1: its logits are the window's pass; -2:
                                 it ended, no logits) */
    unsigned char *slid;      /* [N]: the sequence's window slid */
    int64_t *end;             /* [2 Bmax]: a pass's rows that end a sequence, and which */
    int gpu;
    int graphs;               /* on a GPU: a token's passes as a graph */
    int64_t tokens;           /* a token's passes so far, with graph_rows rows */
    void *graph;              /* a token's pass, once captured */
    int64_t graph_rows;
    int64_t passes;           /* the decode program's passes */
    int on, check;
    int32_t *positions;       /* [N T]: 0 .. T - 1 a row, a window's positions input (a model
                                 with one: each context one sequence), or NULL */
    float *mine;              /* check: the window's logits [N, V] */
    int64_t checked;          /* check: tokens compared */
    double worst;             /* check: the largest difference over the largest logit */
};

/* On a GPU, the caches of N sequences, else of fewer (groups of `least`, halved until
 * they fit); k->N the sequences they hold, k->kv 0 where not even `least` fit. */
static void gpu_caches(rt_next *k, int64_t N, int64_t least)
{
    Run *r = k->r;
    size_t per = (size_t)r->m->kv_floats * sizeof(float);
    for (int64_t g = N / least; g >= 1 && !k->kv; g = g > 1 ? g / 2 : 0) {
        k->N = g * least;   /* (N: groups of least) */
        k->kv = (float *)(uintptr_t)rt_cu_try_alloc(&r->e, (size_t)k->N * per);
    }
    if (!k->kv)
        fprintf(stderr, "trainc: no room on the GPU for the key/value cache (%.1f MiB): "
                        "each token is the window's pass\n", (double)(N * per) / (1 << 20));
    else if (k->N < N)
        fprintf(stderr, "trainc: room on the GPU for %lld of the %lld sequences' key/value "
                        "caches (%.1f MiB each): the prompts go %lld at a time\n",
                (long long)k->N, (long long)N, (double)per / (1 << 20),
                (long long)(k->N / least));
}

/* The logits' source for up to N sequences at once; on a GPU with room for the caches
 * of fewer, of as many groups of `least` (a prompt's --num-samples) as fit
 * (rt_next_slots). */
rt_next *rt_next_open(Run *r, int64_t N, int64_t least, int64_t V)
{
    const char *v = getenv("TRAINC_KV_CACHE");
    rt_next *k = rt_xmalloc(sizeof *k);
    *k = (rt_next){.r = r, .N = N, .V = V, .T = r->m->inputs[0].shape[0], .gpu = r->gpu,
                   .on = r->m->decode && !(v && !strcmp(v, "0")),
                   .check = v && !strcmp(v, "check")};
    if (r->m->n_inputs == 3) {   /* (rt_token_model: the third, the positions) */
        k->positions = rt_xmalloc((size_t)(N * k->T) * sizeof(int32_t));
        for (int64_t i = 0; i < N * k->T; i++)
            k->positions[i] = (int32_t)(i % k->T);
    }
    if (k->on && r->gpu) {   /* (kept for the run: sampling ends it) */
        gpu_caches(k, N, least);
        if (!k->kv) {
            k->on = 0;
            k->N = N;
            return k;
        }
        const char *g = getenv("TRAINC_CUDA_GRAPH");
        k->graphs = !(g && !strcmp(g, "0"));
    } else if (k->on)
        k->kv = rt_xmalloc((size_t)(N * r->m->kv_floats) * sizeof(float));
    N = k->N;
    if (k->on) {
        size_t n = (size_t)(r->e.Bmax * r->m->inputs[0].numel);   /* (>= 2 Bmax: T >= 2) */
        k->ids = rt_xmalloc(n * sizeof(int32_t));
        memset(k->ids, 0, n * sizeof(int32_t));
        k->at = rt_xmalloc((size_t)N * sizeof *k->at);
        k->lead = rt_xmalloc((size_t)N * sizeof *k->lead);
        k->slid = rt_xmalloc((size_t)N);
        k->end = rt_xmalloc((size_t)(2 * r->e.Bmax) * sizeof *k->end);
        memset(k->at, 0, (size_t)N * sizeof *k->at);
        memset(k->slid, 0, (size_t)N);
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
    rt_xfree(k->at);
    rt_xfree(k->lead);
    rt_xfree(k->slid);
    rt_xfree(k->end);
    rt_xfree(k->positions);
    rt_xfree(k->mine);
    rt_xfree(k);
}

void rt_next_slid(rt_next *k, int64_t b)
{
    if (k->on)
        k->slid[b] = 1;
}

/* Sequence b's context begins anew (a document's first token, loader.documents): its
 * cache holds nothing and serves again, from position 0. */
void rt_next_restart(rt_next *k, int64_t b)
{
    if (k->on) {
        k->at[b] = 0;
        k->slid[b] = 0;
    }
}

int64_t rt_next_passes(const rt_next *k) { return k->passes; }

int64_t rt_next_slots(const rt_next *k) { return k->N; }

/* The next generation (--prompt-file's next prompts): the caches hold nothing, and no
 * window has slid (a token's graph stays: the same buffers, the places read from the
 * device). */
void rt_next_reset(rt_next *k)
{
    if (k->on) {
        memset(k->at, 0, (size_t)k->N * sizeof *k->at);
        memset(k->slid, 0, (size_t)k->N);
    }
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

/* One forward pass over the N contexts ctx [N, T] (n[b] ids in row b, the rest 0) and
 * the logits of each one's last position into z [N, V] (16-bit values widened). */
static void window_logits(rt_next *k, int64_t N, int32_t *ctx, int32_t *tgt, const int64_t *n,
                          float *z)
{
    Run *r = k->r;
    const rt_model *m = r->m;
    int64_t T = k->T, V = k->V;
    int64_t ld = m->pred_ld > 0 ? m->pred_ld : m->pred_numel / T;   /* rows ld apart */
    rt_batch all = {.rows = N, .in = {ctx, tgt, k->positions}};
    rt_bind_batch(r, &all, -1);
    if (m->pred_eval)
        m->evaluate(&r->e);
    else
        m->forward(&r->e, 0);
    for (int64_t b = 0; b < N; b++) {
        int64_t at = b * T + n[b] - 1;   /* sequence b's last position: pred's row */
        if (m->head_d > 0) {   /* computed into row 0 */
            head_row(r, at);
            at = 0;
        }
        rt_end_pass(r);
        rt_arena_read(r, m->pred_offset, at * ld, V, m->act16 != 0, z + b * V);
    }
}

/* The decode program's pass over `rows` rows. On a GPU a token's pass (tok: a row a
 * sequence) runs as always the first time with its number of rows (which settles what
 * the host decides once: GEMM plans, kernels loaded, constants uploaded), is captured as
 * a CUDA graph the second, and is that graph after: one launch a token. A capture that
 * fails leaves graphs off. */
static void decode_pass(rt_next *k, int64_t rows, int tok)
{
    Run *r = k->r;
    rt_exec *e = &r->e;
    k->passes++;
    if (tok && rows != k->graph_rows) {   /* (the last of --prompt-file's groups: fewer) */
        rt_cu_graph_free(k->graph);
        k->graph = NULL;
        k->tokens = 0;
        k->graph_rows = rows;
    }
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

/* The decode program over `rows` rows: their ids in k->ids, their places (slot T +
 * position) after them. On a GPU both go up in a batch of the window's size
 * (rt_bind_batch copies that much: rows T >= 2 rows ids). */
static void decode_rows(rt_next *k, int64_t rows, int tok)
{
    Run *r = k->r;
    rt_exec *e = &r->e;
    rt_batch some = {.rows = rows, .in = {k->ids, NULL, NULL}};
    if (k->gpu)   /* (what the program does not read: the ids again) */
        some.in[1] = some.in[2] = k->ids;
    rt_bind_batch(r, &some, -1);
    e->kv = k->kv;
    e->kv_seq = r->m->kv_floats;
    e->kv_T = k->T;
    e->place = k->ids + rows;
    e->dplace = k->gpu ? (const int32_t *)e->in[0] + rows : NULL;
    decode_pass(k, rows, tok);
}

/* A pass of fill's: `rows` ids in k->ids, their places from k->ids + Bmax moved next to
 * them, through the decode program; the logits of the rows that end a sequence (end:
 * `ends` pairs of row and sequence) into z [N, V]. */
static void fill_pass(rt_next *k, int64_t rows, int tok, const int64_t *end, int64_t ends,
                      float *z)
{
    Run *r = k->r;
    const rt_model *m = r->m;
    memmove(k->ids + rows, k->ids + r->e.Bmax, (size_t)rows * sizeof *k->ids);
    decode_rows(k, rows, tok);
    if (k->gpu && ends)
        rt_end_pass(r);
    for (int64_t i = 0; i < ends; i++)
        rt_arena_read(r, m->decode_pred_offset, end[2 * i] * m->decode_pred_ld, k->V,
                      m->act16 != 0, z + end[2 * i + 1] * k->V);
}

/* The positions each leading sequence b < N lacks, [at[b], n[b]), through the decode
 * program in sequence order, up to Bmax rows a pass (a prompt's in few passes over the
 * weights, several prompts' together); each one's last position's logits into z [N, V].
 * One position of each sequence served: a token's pass (tok), a row a sequence. */
static void fill(rt_next *k, int64_t N, const int32_t *ctx, const int64_t *n, float *z, int tok)
{
    int64_t B = k->r->e.Bmax, rows = 0, ends = 0, *end = k->end;
    for (int64_t b = 0; b < N; b++) {
        if (k->lead[b] < 0)
            continue;
        for (int64_t t = k->lead[b] == b ? k->at[b] : n[b]; t < n[b]; t++) {
            k->ids[rows] = ctx[b * k->T + t];
            k->ids[B + rows] = (int32_t)(b * k->T + t);   /* its place */
            if (t == n[b] - 1)
                end[2 * ends] = rows, end[2 * ends++ + 1] = b;
            if (++rows == B) {
                fill_pass(k, rows, tok, end, ends, z);
                rows = ends = 0;
            }
        }
        k->at[b] = n[b];
    }
    if (rows)
        fill_pass(k, rows, tok, end, ends, z);
}

/* Sequences that share a leader's prompt (lead[b] != b): its cache copied into theirs,
 * its logits into their rows of z [N, V]. */
static void share(rt_next *k, int64_t N, float *z)
{
    size_t per = (size_t)k->r->m->kv_floats * sizeof(float);
    char *kv = (char *)k->kv;
    for (int64_t b = 0; b < N; b++) {
        int64_t l = k->lead[b];
        if (l == b || l < 0)
            continue;
        memcpy(z + b * k->V, z + l * k->V, (size_t)k->V * sizeof(float));
        if (k->gpu)   /* (queued after the pass that wrote it, before the next) */
            rt_cu_copy_dd(&k->r->e, (rt_dptr)(uintptr_t)(kv + b * per),
                          (rt_dptr)(uintptr_t)(kv + l * per), per);
        else
            memcpy(kv + b * per, kv + l * per, per);
    }
}

/* check: the cache's logits z [N, V] against the window's pass on the same contexts. */
static void check_logits(rt_next *k, int64_t N, int32_t *ctx, int32_t *tgt, const int64_t *n,
                         const float *z)
{
    window_logits(k, N, ctx, tgt, n, k->mine);
    for (int64_t b = 0; b < N; b++) {
        if (k->lead[b] == -2)   /* (ended: its logits not made) */
            continue;
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

/* The sequences whose windows slid (lead[b] = -1): their logits by the window's pass over
 * their contexts alone, into their rows of z [N, V]. */
static void window_slid(rt_next *k, int64_t N, const int32_t *ctx, const int64_t *n, float *z)
{
    int64_t U = 0, T = k->T, V = k->V;
    for (int64_t b = 0; b < N; b++)
        U += k->lead[b] == -1;
    if (!U)
        return;
    int32_t *c = rt_xmalloc((size_t)(2 * U * T) * sizeof *c), *tgt = c + U * T;
    int64_t *m = rt_xmalloc((size_t)U * sizeof *m);
    float *zu = rt_xmalloc((size_t)(U * V) * sizeof *zu);
    memset(tgt, 0, (size_t)(U * T) * sizeof *tgt);
    for (int64_t b = 0, u = 0; b < N; b++)
        if (k->lead[b] == -1) {
            memcpy(c + u * T, ctx + b * T, (size_t)T * sizeof *c);
            m[u++] = n[b];
        }
    window_logits(k, U, c, tgt, m, zu);
    for (int64_t b = 0, u = 0; b < N; b++)
        if (k->lead[b] == -1)
            memcpy(z + b * V, zu + u++ * V, (size_t)V * sizeof *z);
    rt_xfree(zu);
    rt_xfree(m);
    rt_xfree(c);
}

/* Which sequences the caches serve and how: not those that ended (done[b]: lead[b] =
 * -2) nor those whose windows slid (-1); the others lead (lead[b] = b), or share the one
 * before's prompt: an empty cache and the same context as sequence b - 1, whose cache is
 * empty too (--num-samples' sequences of one prompt). 1 where the pass is a token's: one
 * new position of each sequence the caches serve, none shared. */
static int leaders(rt_next *k, int64_t N, const int32_t *ctx, const int64_t *n,
                   const unsigned char *done)
{
    int tok = 1;
    for (int64_t b = 0; b < N; b++) {
        const int32_t *mine = ctx + b * k->T;
        k->lead[b] = done[b] ? -2 : k->slid[b] || k->at[b] >= n[b] ? -1 : b;
        if (k->lead[b] == b && b > 0 && k->lead[b - 1] >= 0 && k->at[b] == 0 &&
            k->at[b - 1] == 0 && n[b] == n[b - 1] &&
            !memcmp(mine, mine - k->T, (size_t)n[b] * sizeof *mine))
            k->lead[b] = k->lead[b - 1];
        tok &= k->lead[b] < 0 || (k->lead[b] == b && n[b] - k->at[b] == 1);
    }
    return tok;
}

/* Each sequence's logits after its context ctx [N, T] (n[b] ids in row b, at most T)
 * into z [N, V]: from the caches, through the decode program for the positions they lack
 * (a prompt's, or one new position of each), else (the caches off, a window slid) by the
 * window's pass; none for a sequence that ended (done[b], where the caches serve);
 * cached[b] 1 where sequence b's came from its cache. */
void rt_next_logits(rt_next *k, int64_t N, int32_t *ctx, int32_t *tgt, const int64_t *n,
                    const unsigned char *done, float *z, unsigned char *cached)
{
    if (N > k->N)
        rt_die("sample: %lld sequences, caches for %lld", (long long)N, (long long)k->N);
    if (!k->on) {
        window_logits(k, N, ctx, tgt, n, z);
        memset(cached, 0, (size_t)N);
        return;
    }
    fill(k, N, ctx, n, z, leaders(k, N, ctx, n, done));
    share(k, N, z);
    window_slid(k, N, ctx, n, z);
    int any = 0;
    for (int64_t b = 0; b < N; b++)
        any |= cached[b] = k->lead[b] >= 0;
    if (k->check && any)
        check_logits(k, N, ctx, tgt, n, z);
}
