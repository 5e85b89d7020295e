/* mode_sample.c: --sample, generation from a token model after training (or after
 * --eval): the vocabulary it may draw from and the prompt's ids, checked before
 * training, and the sampling loop. With --tokenizer the prompt is encoded and the
 * ids decoded by a tokenizer.json's BPE (tokenizer.c); without, ids are bytes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "chat.h"
#include "run.h"
#include "sampling.h"
#include "tokenizer.h"

/* The --tokenizer of this run, loaded once (a bad file exits 1 before training). */
static rt_tokenizer *sample_tokenizer(const char *path)
{
    static rt_tokenizer *tok;
    if (!tok) {
        char err[1024];
        tok = rt_tok_load(path, err, sizeof err);
        if (!tok)
            rt_input_error("--tokenizer %s", err);
    }
    return tok;
}

/* Exits 1 for text the tokenizer's NFC normalizer might change (what names the text). */
static void check_nfc(rt_tokenizer *t, const char *text, const char *what)
{
    uint32_t cp;
    size_t at = rt_tok_unnormalized(t, text, strlen(text), &cp);
    if (at < strlen(text))
        rt_input_error("%s: byte %zu: U+%04X, which the tokenizer's NFC normalizer may change; "
                       "trainc implements NFC only on text it leaves as it is", what, at, cp);
}

/* A user's message as --chat's template writes it (the first turn, after --system's
 * message if any, or one after a reply), encoded without the post-processor's tokens:
 * the template writes them, as apply_chat_template(tokenize=True) has it. */
static void chat_ids(const Opts *o, int first, const char *user, const char *what, rt_ids *ids)
{
    rt_tokenizer *t = sample_tokenizer(o->tokenizer);
    check_nfc(t, user, what);
    if (o->system)
        check_nfc(t, o->system, "--system");
    size_t n;
    char *text = rt_chat_turn(rt_chat_find(o->chat), first, o->system, user, &n);
    rt_tok_encode_part(t, text, n, ids);
    rt_xfree(text);
}

/* The prompt's ids: its bytes, or with a tokenizer the ids `tokenizers` gives it (its
 * post-processor's BOS included); with --chat, the ids of the user's turn and the
 * assistant's head as the template writes them (apply_chat_template(tokenize=True),
 * which adds no post-processor tokens: the template writes its BOS). No prompt: a
 * newline (with --chat, an empty message). */
static void prompt_ids(const Opts *o, rt_ids *ids)
{
    const char *p = o->prompt ? o->prompt : o->chat ? "" : "\n";
    if (o->chat) {
        chat_ids(o, 1, p, "--prompt", ids);
        return;
    }
    if (o->tokenizer) {
        rt_tokenizer *t = sample_tokenizer(o->tokenizer);
        check_nfc(t, p, "--prompt");
        rt_tok_encode(t, p, strlen(p), ids);
        return;
    }
    for (; *p; p++)
        rt_ids_push(ids, (unsigned char)*p);
}

/* A --stop's id: with a tokenizer the one id its text encodes to, else the number.
 * Exits 1 for text of several ids or an id past the vocabulary V. */
static int64_t stop_id(const Opts *o, const char *stop, int64_t V)
{
    int64_t id = -1, n;
    if (o->tokenizer) {
        id = rt_tok_one_id(sample_tokenizer(o->tokenizer), stop, &n);
        if (id < 0)
            rt_input_error("--stop '%s' is %lld tokens, not one (give an added token's content "
                           "as tokenizer.json lists it, e.g. \"<|eot_id|>\")", stop,
                           (long long)n);
    } else {
        char *end;
        id = strtoll(stop, &end, 10);
        if (*end || end == stop || id < 0)
            rt_input_error("--stop '%s': without --tokenizer, a token's id (a number)", stop);
    }
    if (id >= V)
        rt_input_error("--stop: id %lld is past the model's %lld ids", (long long)id, (long long)V);
    return id;
}

/* The ids a sample ends at into ids (RT_MAX_STOPS of room): --stop's, else with --chat
 * the template's end token; their number. */
static int stop_ids(const Opts *o, int64_t V, int64_t *ids)
{
    for (int i = 0; i < o->n_stop; i++)
        ids[i] = stop_id(o, o->stop[i], V);
    if (o->n_stop || !o->chat)
        return o->n_stop;
    const char *end = rt_chat_find(o->chat)->end;
    int64_t n;
    ids[0] = rt_tok_one_id(sample_tokenizer(o->tokenizer), end, &n);
    if (ids[0] < 0 || ids[0] >= V)
        rt_input_error("--chat %s: the tokenizer has no token '%s' the model knows (a tokenizer "
                       "for another template? --stop names the end)", o->chat, end);
    return 1;
}

/* Is id one of the n ids? */
static int stops(const int64_t *ids, int n, int64_t id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

/* --sample's vocabulary: the ids it may draw (the logits' width, or fewer when the
 * input's embedding has fewer rows: the logits past them are not drawn); exits 1 for
 * a model that is not a token model or a prompt id past the vocabulary. Checked
 * before training too, so a run is never trained and written, then refused. */
int64_t rt_sample_vocab(const rt_model *m, const Opts *o)
{
    if (m->gan)
        return 0;   /* a GAN's samples are its generator's (gan_sample) */
    const rt_input *in = &m->inputs[0];
    int64_t T = in->rank == 1 ? in->shape[0] : 0;
    if (!rt_token_model(m))
        rt_input_error("--sample needs a token model (an i32 [T] input and cross-entropy logits [T, vocab])");
    if (o->chat && !o->tokenizer)
        rt_input_error("--chat writes text in a chat template: it needs --tokenizer");
    if (o->system && !o->chat)
        rt_input_error("--system is a chat template's system message: it needs --chat");
    if (o->system && rt_chat_find(o->chat)->no_system)
        rt_input_error("--system: --chat %s has no system message (its template refuses one): "
                       "write it into the prompt", o->chat);
    int64_t V = m->pred_numel / T;
    if (in->vocab > 0 && in->vocab < V)
        V = in->vocab;
    rt_ids ids = {0};
    if (o->prompt || o->tokenizer)
        prompt_ids(o, &ids);
    for (int64_t i = 0; i < ids.n; i++)
        if (ids.v[i] >= V) {
            if (o->tokenizer)
                rt_input_error("--prompt: its token %lld is id %u, past the model's %lld ids "
                               "(a tokenizer for another model?)", (long long)i, ids.v[i],
                               (long long)V);
            rt_input_error("--prompt: byte 0x%02x is past the model's %lld ids (the prompt's "
                           "bytes are its ids; --tokenizer encodes text)", ids.v[i], (long long)V);
        }
    rt_ids_free(&ids);
    int64_t stop[RT_MAX_STOPS];
    stop_ids(o, V, stop);   /* (checked now, before training) */
    return V;
}

/* One sampled id as output: its bytes by the tokenizer (an id it does not name prints
 * nothing, as its decode skips it), its byte for a vocabulary of at most 256, else
 * its number. */
static void put_id(const Opts *o, int64_t id, int64_t k, int64_t V)
{
    if (o->tokenizer) {
        size_t len;
        const char *s = rt_tok_piece(sample_tokenizer(o->tokenizer), (uint32_t)id, &len);
        if (s)
            fwrite(s, 1, len, stdout);
    } else if (V <= 256) {
        putchar((int)id);
    } else {
        printf("%s%lld", k ? " " : "", (long long)id);
    }
}

/* "WHAT: N tokens: ID ..." on stderr. */
static void print_ids(const char *what, const uint32_t *v, int64_t n)
{
    fprintf(stderr, "%s: %lld tokens:", what, (long long)n);
    for (int64_t i = 0; i < n; i++)
        fprintf(stderr, " %u", v[i]);
    fputc('\n', stderr);
}

/* A chunked head (rt_model.head_d > 0), whose programs never hold the logits whole:
 * position pos's, x's row times W^T (the GEMM the head's call makes), into row 0 of
 * validation's chunk scratch after its pass. */
static void head_row(Run *r, int64_t pos)
{
    const rt_model *m = r->m;
    const float *x = rt_act_adv(&r->e, rt_arena_at(r, m->head_x_offset), pos * m->head_d);
    float *z = (float *)rt_arena_at(r, m->pred_offset);
    rt_gemm(&r->e, 0, 1, 1, m->head_wrows, m->head_d, 1.0f, x, m->head_d,
            r->e.params + m->head_w_offset, m->head_d, 0.0f, z, m->pred_ld);
}

/* One forward pass over the context ctx (n ids, the rest 0) and the logits of its last
 * position, as host floats: in the arena on the CPU, else downloaded into row (16-bit
 * values widened). */
static const float *last_logits(Run *r, int32_t *ctx, int32_t *tgt, int64_t n,
                                int64_t V, float *row)
{
    const rt_model *m = r->m;
    int64_t T = m->inputs[0].shape[0];
    int64_t ld = m->pred_ld > 0 ? m->pred_ld : m->pred_numel / T;   /* rows ld apart */
    rt_batch one = {.rows = 1, .in = {ctx, tgt}};
    rt_bind_batch(r, &one, -1);
    int64_t at_row = n - 1;   /* the last position's logits: pred's row */
    if (m->pred_eval)
        m->evaluate(&r->e);
    else
        m->forward(&r->e, 0);
    if (m->head_d > 0) {   /* computed into row 0 */
        head_row(r, n - 1);
        at_row = 0;
    }
    rt_end_pass(r);
    if (!r->gpu)
        return (const float *)rt_arena_at(r, m->pred_offset) + at_row * ld;
    rt_arena_read(r, m->pred_offset, at_row * ld, V, m->act16 != 0, row);
    return row;
}

/* The decode program's cache for one sample (decode.c in the compiler): positions
 * [0, at) of the context are in it (in fp32, in the GPU's memory where the run is on
 * one). `on` while it serves: the model has the program, TRAINC_KV_CACHE is not 0, and
 * the window has not slid (a slide moves every id to another position: from then on
 * each token is the window's pass). TRAINC_KV_CACHE=check also runs the window's pass
 * for each token the cache serves and reports the largest difference of the two logits
 * (over the largest logit) at the end. On a GPU a pass of one row (each new token) is a
 * CUDA graph from the second on, unless TRAINC_CUDA_GRAPH=0. */
typedef struct {
    float *kv;                /* a host pointer, or the device's address */
    int32_t *ids;             /* on a GPU: a batch of the window's inputs, uploaded whole:
                                 the rows' ids (the program reads one a row), then the
                                 first row's position (where the kernels read it) */
    int graphs;               /* on a GPU: one-row passes as a graph */
    int64_t ones;             /* one-row passes so far */
    void *graph;              /* the one-row pass's, once captured */
    int64_t at;
    int on, check;
    int cached;               /* the last logits came from the cache */
    int64_t served;           /* tokens drawn from the cache's logits */
    float *mine;              /* check: the cache's logits, kept while the window's pass runs */
    int64_t checked;          /* check: tokens compared */
    double worst;             /* check: the largest difference over the largest logit */
} Cache;

static Cache cache_open(Run *r, int64_t V)
{
    const char *v = getenv("TRAINC_KV_CACHE");
    Cache k = {.on = r->m->decode && !(v && !strcmp(v, "0")), .check = v && !strcmp(v, "check")};
    size_t bytes = (size_t)r->m->kv_floats * sizeof(float);
    if (k.on && r->gpu) {   /* (kept for the run: sampling ends it) */
        k.kv = (float *)(uintptr_t)rt_cu_try_alloc(&r->e, bytes);
        if (!k.kv) {
            fprintf(stderr, "trainc: no room on the GPU for the key/value cache (%.1f MiB): "
                            "each token is the window's pass\n", (double)bytes / (1 << 20));
            k.on = 0;
            return k;
        }
        size_t n = (size_t)(r->e.Bmax * r->m->inputs[0].numel);
        k.ids = rt_xmalloc(n * sizeof(int32_t));
        memset(k.ids, 0, n * sizeof(int32_t));
        const char *g = getenv("TRAINC_CUDA_GRAPH");
        k.graphs = !(g && !strcmp(g, "0"));
    } else if (k.on)
        k.kv = rt_xmalloc(bytes);
    if (k.on && k.check)
        k.mine = rt_xmalloc((size_t)V * sizeof(float));
    return k;
}

static void cache_close(Cache *k)
{
    if (k->check)
        fprintf(stderr, "trainc: key/value cache check: %lld tokens, the largest difference "
                        "%.3g of the largest logit\n", (long long)k->checked, k->worst);
    if (!k->ids)
        rt_xfree(k->kv);
    rt_cu_graph_free(k->graph);
    rt_xfree(k->ids);
    rt_xfree(k->mine);
}

/* check: the cache's logits z against the window's pass on the same context. */
static const float *cache_check(Run *r, Cache *k, const float *z, int32_t *ctx, int32_t *tgt,
                                int64_t n, int64_t V, float *row)
{
    memcpy(k->mine, z, (size_t)V * sizeof(float));
    const float *w = last_logits(r, ctx, tgt, n, V, row);
    double top = 0, diff = 0;
    for (int64_t i = 0; i < V; i++) {
        top = fabs(w[i]) > top ? fabs(w[i]) : top;
        diff = fabs(w[i] - k->mine[i]) > diff ? fabs(w[i] - k->mine[i]) : diff;
    }
    diff = top > 0 ? diff / top : diff;
    k->worst = diff > k->worst || isnan(diff) ? diff : k->worst;
    k->checked++;
    return k->mine;
}

/* The decode program's pass over the rows bound. On a GPU a one-row pass runs as
 * always the first time (which settles what the host decides once: GEMM plans, kernels
 * loaded, constants uploaded), is captured as a CUDA graph the second, and is that graph
 * after: one launch a token. A capture that fails leaves graphs off. */
static void decode_pass(Run *r, Cache *k, int64_t rows)
{
    rt_exec *e = &r->e;
    if (!r->gpu || rows != 1 || !k->graphs || k->ones++ == 0) {
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

/* The logits after the context ctx[0, n) (n at most T), as last_logits gives them: from
 * the cache, the positions it lacks through the decode program (Bmax of them a call, as
 * rows: a prompt's in few passes over the weights), else by the window's pass. On a
 * GPU the rows' ids and the first one's position go up in a batch of the window's size
 * (rt_bind_batch copies that much: rows T >= rows + 1 ids), the logits come down into
 * row. */
static const float *next_logits(Run *r, Cache *k, int32_t *ctx, int32_t *tgt, int64_t n,
                                int64_t V, float *row)
{
    const rt_model *m = r->m;
    k->cached = k->on && k->at < n;
    if (!k->cached)
        return last_logits(r, ctx, tgt, n, V, row);
    rt_exec *e = &r->e;
    int64_t rows = 0;
    for (; k->at < n; k->at += rows) {
        rows = n - k->at < e->Bmax ? n - k->at : e->Bmax;
        rt_batch some = {.rows = rows, .in = {&ctx[k->at], NULL}};
        if (r->gpu) {
            memcpy(k->ids, &ctx[k->at], (size_t)rows * sizeof *k->ids);
            k->ids[rows] = (int32_t)k->at;
            some.in[0] = some.in[1] = k->ids;
        }
        rt_bind_batch(r, &some, -1);
        e->pos = k->at;
        e->kv = k->kv;
        e->dpos = r->gpu ? (const int32_t *)e->in[0] + rows : NULL;
        decode_pass(r, k, rows);
    }
    const float *z = row;
    if (r->gpu) {
        rt_end_pass(r);
        rt_arena_read(r, m->decode_pred_offset, (rows - 1) * m->decode_pred_ld, V,
                      m->act16 != 0, row);
    } else
        z = (const float *)rt_arena_at(r, m->decode_pred_offset) + (rows - 1) * m->decode_pred_ld;
    return k->check ? cache_check(r, k, z, ctx, tgt, n, V, row) : z;
}

/* A GAN's --sample N: the generator in evaluation mode (batchnorm's running statistics)
 * on N latent vectors drawn from --sample-seed (else the seed), Bmax at a time, into
 * OUT/samples.npy [N, sample shape] and, for images [C, H, W] with C 1 or 3, OUT/samples.png
 * (a grid 8 wide, as torchvision's make_grid with normalize). Under --eval these two are
 * all it writes (into --out, made if missing). */
static void gan_sample(Run *r)
{
    const rt_model *m = r->m;
    const rt_input *x = &m->inputs[m->gan_latent_input == 0 ? 1 : 0];
    int64_t N = r->o.sample, per = m->pred_numel, zn = m->gan_latent_numel;
    float *out = rt_xmalloc((size_t)(N * per) * sizeof(float));
    float *z = rt_xmalloc((size_t)(r->e.Bmax * zn) * sizeof(float));
    /* (as wide as any input's batch row) */
    int64_t widest = zn;
    for (int k = 0; k < m->n_inputs; k++)
        widest = m->inputs[k].numel > widest ? m->inputs[k].numel : widest;
    float *blank = rt_xmalloc((size_t)(r->e.Bmax * widest) * sizeof(float));
    memset(blank, 0, (size_t)(r->e.Bmax * widest) * sizeof(float));
    rt_dptr dz = r->gpu ? rt_cu_alloc_fixed(&r->e, (size_t)(r->e.Bmax * zn) * sizeof(float)) : 0;
    rt_rng g;
    rt_rng_seed(&g, rt_mix(r->o.sample_seed >= 0 ? (uint64_t)r->o.sample_seed : r->c.seed,
                           0x5A4D504C45ull));
    for (int64_t at = 0; at < N && !rt_signal_seen; at += r->e.Bmax) {
        int64_t rows = N - at < r->e.Bmax ? N - at : r->e.Bmax;
        for (int64_t i = 0; i < rows * zn; i++)
            z[i] = (float)rt_rng_normal(&g);
        rt_batch one = {.rows = rows};
        for (int k = 0; k < m->n_inputs; k++)   /* (the real samples: read by nothing here) */
            one.in[k] = k == m->gan_latent_input ? (void *)z : (void *)blank;
        rt_bind_batch(r, &one, -1);
        if (m->gan_latent_input < 0 && r->gpu) {   /* (past the inputs a batch binds) */
            rt_cu_sync(&r->e);
            rt_cu_upload(dz, z, (size_t)(rows * zn) * sizeof(float));
            r->e.in[m->n_inputs] = (void *)(uintptr_t)dz;
        } else if (m->gan_latent_input < 0)
            r->e.in[m->n_inputs] = z;
        m->evaluate(&r->e);
        rt_end_pass(r);
        rt_arena_read(r, m->pred_offset, 0, rows * per, m->act16 != 0, out + at * per);
    }
    char path[RT_PATH_MAX + 32];
    if (rt_mkdir_p(r->out) != 0)   /* (--eval makes no folder of its own) */
        rt_input_error("cannot make %s for the samples: %s", r->out, strerror(errno));
    rt_join_path(path, sizeof path, r->out, "samples.npy");
    if (rt_npy_write_f32(path, out, N, x->rank, x->shape) != 0)
        rt_input_error("cannot write %s: %s", path, strerror(errno));
    fprintf(stderr, "trainc: %lld samples in %s", (long long)N, path);
    if (x->rank == 3 && (x->shape[0] == 1 || x->shape[0] == 3)) {
        rt_join_path(path, sizeof path, r->out, "samples.png");
        if (rt_png_grid_write(path, out, N, (int)x->shape[0], (int)x->shape[1], (int)x->shape[2],
                              8) != 0)
            rt_input_error("cannot write %s: %s", path, strerror(errno));
        fprintf(stderr, " and %s", path);
    }
    fputc('\n', stderr);
    rt_xfree(blank);
    rt_xfree(z);
    rt_xfree(out);
}

/* One generation's state: the context window ctx[0, n) (at most T ids), the ids the
 * repetition penalty falls on (the prompt's, the turns', the sample's), the draws. */
typedef struct {
    Run *r;
    int64_t T, V, n;
    int32_t *ctx, *tgt;
    unsigned char *seen;
    rt_sampler sampler;
    rt_rng rng;
    int64_t stop[RT_MAX_STOPS];
    int n_stop;
    Cache cache;
    float *row;
    int64_t drawn;            /* tokens printed, all replies */
} Gen;

static void gen_open(Gen *g, Run *r, int64_t V)
{
    int64_t T = r->m->inputs[0].shape[0];
    *g = (Gen){.r = r, .T = T, .V = V};
    g->ctx = rt_xmalloc((size_t)T * sizeof *g->ctx);
    g->tgt = rt_xmalloc((size_t)T * sizeof *g->tgt);
    g->seen = rt_xmalloc((size_t)V);
    memset(g->seen, 0, (size_t)V);
    rt_rng_seed(&g->rng, r->o.sample_seed >= 0 ? (uint64_t)r->o.sample_seed : r->c.seed);
    g->row = rt_xmalloc((size_t)V * sizeof *g->row);
    g->sampler = (rt_sampler){.V = V, .temperature = r->o.temperature, .top_k = r->o.top_k,
                              .top_p = r->o.top_p, .min_p = r->o.min_p,
                              .penalty = r->o.repetition_penalty, .seen = g->seen,
                              .prob = rt_xmalloc((size_t)V * sizeof(double)),
                              .order = rt_xmalloc((size_t)V * sizeof(int32_t)),
                              .adjusted = rt_xmalloc((size_t)V * sizeof(float))};
    r->e.rng_key = 0;
    g->n_stop = stop_ids(&r->o, V, g->stop);
    g->cache = cache_open(r, V);
}

static void gen_close(Gen *g)
{
    cache_close(&g->cache);
    rt_xfree(g->sampler.prob);
    rt_xfree(g->sampler.order);
    rt_xfree(g->sampler.adjusted);
    rt_xfree(g->seen);
    rt_xfree(g->row);
    rt_xfree(g->ctx);
    rt_xfree(g->tgt);
}

/* id appended to the context (the window slides once full: the cache stops serving)
 * and to the ids the penalty falls on. */
static void gen_push(Gen *g, uint32_t id)
{
    if (g->n == g->T) {   /* (T >= 1: a token model's) */
        for (int64_t i = 1; i < g->T; i++)
            g->ctx[i - 1] = g->ctx[i];
        g->n--;
        g->cache.on = 0;
    }
    g->ctx[g->n++] = (int32_t)id;
    g->seen[id] = 1;
}

/* Up to --sample tokens drawn, printed and appended, until a stop id (not printed),
 * then a newline; with a tokenizer the drawn ids also into out. */
static void gen_reply(Gen *g, rt_ids *out)
{
    Run *r = g->r;
    /* (stdout closed, as by `| head`: SIGPIPE is ignored, so the write error ends it) */
    for (int64_t k = 0; k < r->o.sample && !rt_signal_seen && !ferror(stdout); k++) {
        for (int64_t t = g->n; t < g->T; t++)
            g->ctx[t] = 0;          /* causal attention: later positions do not matter */
        const float *logits = next_logits(r, &g->cache, g->ctx, g->tgt, g->n, g->V, g->row);
        int64_t pick = rt_sample_draw(&g->sampler, logits, &g->rng);
        if (stops(g->stop, g->n_stop, pick))
            break;
        put_id(&r->o, pick, k, g->V);
        g->drawn++;
        g->cache.served += g->cache.cached;
        if (r->o.tokenizer)
            rt_ids_push(out, (uint32_t)pick);
        gen_push(g, (uint32_t)pick);
    }
    putchar('\n');
    fflush(stdout);
}

/* --chat without --prompt: the user's turns from stdin, a line each (a "> " on stderr
 * where stdin is a terminal), each written as the template writes the next turn (the
 * assistant's reply closed by its end token, the user's message, the assistant's head)
 * and answered; until the end of stdin. */
static void chat_turns(Gen *g)
{
    Run *r = g->r;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (int first = 1; !rt_signal_seen; first = 0) {
        if (isatty(0))
            fputs("> ", stderr);
        if ((len = getline(&line, &cap, stdin)) < 0)
            break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        rt_ids ids = {0}, reply = {0};
        chat_ids(&r->o, first, line, "a turn", &ids);
        if (!r->o.quiet)
            print_ids("turn", ids.v, ids.n);
        for (int64_t i = 0; i < ids.n; i++) {
            if (ids.v[i] >= (uint32_t)g->V)
                rt_input_error("a turn's token %lld is id %u, past the model's %lld ids",
                               (long long)i, ids.v[i], (long long)g->V);
            gen_push(g, ids.v[i]);
        }
        gen_reply(g, &reply);
        if (!r->o.quiet)
            print_ids("sample", reply.v, reply.n);
        rt_ids_free(&ids);
        rt_ids_free(&reply);
    }
    free(line);
}

/* Generation from a token model: the context window (at most T ids) goes through the
 * forward pass with B = 1, the logits at its last position are drawn from (sampling.c:
 * the repetition penalty, the temperature, top_k, top_p and min_p), and the id is
 * appended (the window slides once full). A model with a decode program computes
 * only the new position each token, its keys and values cached, until the window
 * slides (next_logits). Without a tokenizer ids are bytes for `trainc
 * data text` shards, so a vocabulary of at most 256 ids is printed as bytes, a larger
 * one as numbers a space apart. --chat without --prompt: a conversation (chat_turns).
 * A GAN's --sample is gan_sample's. */
void rt_sample(Run *r)
{
    if (r->m->gan) {
        gan_sample(r);
        return;
    }
    Gen g;
    gen_open(&g, r, rt_sample_vocab(r->m, &r->o));
    double t0 = rt_now();
    if (r->o.chat && !r->o.prompt)
        chat_turns(&g);
    else {
        rt_ids ids = {0};
        /* no prompt, no tokenizer: the one id below, not the newline's 10, which a
         * vocabulary of 10 or fewer does not have (an embedding index past it: an error
         * on the CPU, NaN logits and zero bytes on the GPU) */
        if (r->o.prompt || r->o.tokenizer)
            prompt_ids(&r->o, &ids);
        if (r->o.tokenizer && !r->o.quiet)   /* what the prompt became, for a reader to check */
            print_ids("prompt", ids.v, ids.n);
        for (int64_t i = 0; i < ids.n; i++)
            gen_push(&g, ids.v[i]);
        if (g.n == 0)
            gen_push(&g, 10 % (uint32_t)g.V);   /* a newline, where the vocabulary has it */
        ids.n = 0;   /* from here: the sample's ids */
        gen_reply(&g, &ids);
        if (r->o.tokenizer && !r->o.quiet)   /* the sample's ids, beside its text */
            print_ids("sample", ids.v, ids.n);
        rt_ids_free(&ids);
    }
    if (!r->o.quiet) {
        double dt = rt_now() - t0;
        fprintf(stderr, "trainc: sampled %lld tokens in %.2f s, %.1f a second (%lld from the "
                        "key/value cache)\n", (long long)g.drawn, dt,
                dt > 0 ? (double)g.drawn / dt : 0.0, (long long)g.cache.served);
    }
    gen_close(&g);
}
