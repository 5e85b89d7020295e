/* mode_sample.c: --sample, generation from a token model after training (or after
 * --eval): the vocabulary it may draw from and the prompts' ids, checked before
 * training, and the sampling loop. With --tokenizer the prompt is encoded and the
 * ids decoded by a tokenizer.json's BPE (tokenizer.c); without, ids are bytes. */
#include <cjson/cJSON.h>
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
 * the template writes them, as apply_chat_template(tokenize=True) has it. (A turn after
 * a reply begins with the reply's end token, an added token, so it encodes as the rest
 * of the conversation's text does.) */
static void chat_ids(const Opts *o, int first, const char *user, const char *what, rt_ids *ids)
{
    rt_tokenizer *t = sample_tokenizer(o->tokenizer);
    check_nfc(t, user, what);
    if (o->system)
        check_nfc(t, o->system, "--system");
    size_t n;
    char *text = rt_chat_turn(rt_chat_find(o->chat), first, o->system, user, &n);
    rt_tok_encode_text(t, text, n, ids);
    rt_xfree(text);
}

/* The prompts: --prompt's one (NULL where none is given), or --prompt-file's, a line
 * each. */
typedef struct {
    char **v;
    int64_t n;
} Prompts;

static void prompts_add(Prompts *p, const char *text, size_t len)
{
    p->v = realloc(p->v, (size_t)(p->n + 1) * sizeof *p->v);
    if (!p->v)
        rt_fail("out of memory reading --prompt-file");
    p->v[p->n] = rt_xmalloc(len + 1);
    memcpy(p->v[p->n], text, len);
    p->v[p->n++][len] = 0;
}

/* A .jsonl line: a JSON string, or an object whose "prompt" is one (TRL's
 * prompt-completion rows; other keys ignored); NULL for anything else. */
static const char *json_prompt(cJSON *j)
{
    if (cJSON_IsObject(j))
        j = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* --prompt-file's prompts: each line's text (its \n and a \r before it left out; empty
 * lines skipped), or, for FILE.jsonl, each line's JSON string (which may hold
 * newlines). Exits 1 for a file that cannot be read, a line with a NUL byte or other
 * JSON, and a file without prompts. */
static void prompts_read(const char *path, Prompts *p)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        rt_input_error("--prompt-file %s: %s", path, strerror(errno));
    size_t n = strlen(path), cap = 0;
    int jsonl = n >= 6 && !strcmp(path + n - 6, ".jsonl");
    char *line = NULL;
    ssize_t len;
    for (int64_t at = 1; (len = getline(&line, &cap, f)) >= 0; at++) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (strlen(line) != (size_t)len)
            rt_input_error("--prompt-file %s: line %lld holds a NUL byte", path, (long long)at);
        if (!len)
            continue;
        if (!jsonl) {
            prompts_add(p, line, (size_t)len);
            continue;
        }
        cJSON *j = cJSON_Parse(line);
        const char *text = json_prompt(j);
        if (!text)
            rt_input_error("--prompt-file %s: line %lld: a JSON string or an object with a "
                           "string \"prompt\" expected", path, (long long)at);
        prompts_add(p, text, strlen(text));
        cJSON_Delete(j);
    }
    int bad = ferror(f);
    fclose(f);
    free(line);
    if (bad)
        rt_input_error("--prompt-file %s: cannot read it", path);
    if (!p->n)
        rt_input_error("--prompt-file %s: no prompt in it (empty lines are skipped)", path);
}

static void prompts_open(const Opts *o, Prompts *p)
{
    *p = (Prompts){0};
    if (o->prompt_file)
        prompts_read(o->prompt_file, p);
    else if (o->prompt)
        prompts_add(p, o->prompt, strlen(o->prompt));
    else {
        p->v = rt_xmalloc(sizeof *p->v);
        p->v[0] = NULL;
        p->n = 1;
    }
}

static void prompts_close(Prompts *p)
{
    for (int64_t i = 0; i < p->n; i++)
        rt_xfree(p->v[i]);
    rt_xfree(p->v);
}

/* A prompt's ids: its bytes, or with a tokenizer the ids `tokenizers` gives it (its
 * post-processor's BOS included); with --chat, the ids of the user's turn and the
 * assistant's head as the template writes them (apply_chat_template(tokenize=True),
 * which adds no post-processor tokens: the template writes its BOS). No prompt (NULL):
 * a newline (with --chat, an empty message). WHAT names it in errors. */
static void prompt_ids(const Opts *o, const char *text, const char *what, rt_ids *ids)
{
    const char *p = text ? text : o->chat ? "" : "\n";
    if (o->chat) {
        chat_ids(o, 1, p, what, ids);
        return;
    }
    if (o->tokenizer) {
        rt_tokenizer *t = sample_tokenizer(o->tokenizer);
        check_nfc(t, p, what);
        rt_tok_encode(t, p, strlen(p), ids);
        return;
    }
    for (; *p; p++)
        rt_ids_push(ids, (unsigned char)*p);
}

/* "--prompt", or "--prompt-file's prompt K" where there are several. */
static const char *prompt_name(const Opts *o, int64_t k, char *buf, size_t len)
{
    if (!o->prompt_file)
        return "--prompt";
    snprintf(buf, len, "--prompt-file's prompt %lld", (long long)k + 1);
    return buf;
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
    const char *end = rt_chat_stop(rt_chat_find(o->chat));
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

/* Exits 1 for a prompt (the K-th) with an id past the vocabulary V. */
static void check_prompt(const Opts *o, const char *text, int64_t k, int64_t V)
{
    char buf[64];
    const char *what = prompt_name(o, k, buf, sizeof buf);
    rt_ids ids = {0};
    if (text || o->tokenizer || o->chat)
        prompt_ids(o, text, what, &ids);
    for (int64_t i = 0; i < ids.n; i++)
        if (ids.v[i] >= V) {
            if (o->tokenizer)
                rt_input_error("%s: its token %lld is id %u, past the model's %lld ids "
                               "(a tokenizer for another model?)", what, (long long)i, ids.v[i],
                               (long long)V);
            rt_input_error("%s: byte 0x%02x is past the model's %lld ids (the prompt's bytes "
                           "are its ids; --tokenizer encodes text)", what, ids.v[i], (long long)V);
        }
    rt_ids_free(&ids);
}

/* --sample's vocabulary: the ids it may draw (the logits' width, or fewer when the
 * input's embedding has fewer rows: the logits past them are not drawn); exits 1 for
 * a model that is not a token model or a prompt id past the vocabulary. Checked
 * before training too, so a run is never trained and written, then refused. */
int64_t rt_sample_vocab(const rt_model *m, const Opts *o)
{
    if (m->gan && o->num_samples)
        rt_input_error("--num-samples is a token model's: a GAN's --sample N draws N samples");
    if (m->gan)
        return 0;   /* a GAN's samples are its generator's (gan_sample) */
    const rt_input *in = &m->inputs[0];
    int64_t T = in->rank == 1 ? in->shape[0] : 0;
    if (m->loss == RT_LOSS_DPO)   /* (its rows are pairs of texts) */
        rt_input_error("--sample: model '%s' trains by a preference loss over pairs of texts; "
                       "its weights are the language model's: sample with the spec of the same "
                       "checkpoint imported without --task (trainc import hf DIR -o OUT) and "
                       "--init these weights", m->name);
    if (!rt_token_model(m))
        rt_input_error("--sample needs a token model (an i32 [T] input and cross-entropy logits [T, vocab])");
    if (o->chat && !o->tokenizer)
        rt_input_error("--chat writes text in a chat template: it needs --tokenizer");
    if (o->system && !o->chat)
        rt_input_error("--system is a chat template's system message: it needs --chat");
    if (o->prompt && o->prompt_file)
        rt_input_error("--prompt and --prompt-file: give one of them");
    if (o->num_samples > 1 && o->chat && !o->prompt && !o->prompt_file)
        rt_input_error("--num-samples: a conversation (--chat without --prompt) has one reply "
                       "a turn");
    if (o->system && rt_chat_find(o->chat)->no_system)
        rt_input_error("--system: --chat %s has no system message (its template refuses one): "
                       "write it into the prompt", o->chat);
    int64_t V = m->pred_numel / T;
    if (in->vocab > 0 && in->vocab < V)
        V = in->vocab;
    Prompts ps;
    prompts_open(o, &ps);
    for (int64_t k = 0; k < ps.n; k++)
        check_prompt(o, ps.v[k], k, V);
    prompts_close(&ps);
    int64_t stop[RT_MAX_STOPS];
    stop_ids(o, V, stop);   /* (checked now, before training) */
    return V;
}

/* --num-samples N: the sequences are a pass's rows, so at most the batch size (checked
 * before training, once the training spec is read). */
void rt_sample_rows_check(const Run *r)
{
    if (r->o.num_samples > r->c.batch_size)
        rt_input_error("--num-samples %lld: at most the batch size, %lld (the rows a pass "
                       "holds; --set batch_size=N changes it)", (long long)r->o.num_samples,
                       (long long)r->c.batch_size);
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

/* One generation's state: N sequences drawn together, M of each prompt (--num-samples;
 * several of --prompt-file's prompts at once, a group of N / M), sequence b its context
 * window ctx[b, 0 .. n[b]) (at most T ids; each slides once full), the ids its
 * repetition penalty falls on (the prompt's, the turns', its sample's), its draws (each
 * prompt's first sequence's as one sample's) and its sample's ids; room for cap. */
typedef struct {
    Run *r;
    int64_t N, M, cap, T, V;
    int64_t doc;              /* the token that begins a document (loader.documents, a
                                 model with positions), or -1 */
    int64_t *n;               /* [cap] */
    int32_t *ctx, *tgt;       /* [cap, T] */
    unsigned char *seen;      /* [cap, V] */
    rt_sampler sampler;
    rt_rng *rng;              /* [cap] */
    int64_t stop[RT_MAX_STOPS];
    int n_stop;
    rt_next *next;
    float *logits;            /* [cap, V] */
    uint32_t *pick;           /* [cap]: the ids drawn last */
    unsigned char *done;      /* [cap]: ended at a stop id */
    unsigned char *cached;    /* [cap]: the logits from the sequence's cache */
    rt_ids *out;              /* [cap]: the sample's ids */
    int64_t drawn;            /* tokens drawn, all sequences and replies */
    int64_t served;           /* of those, from the cache's logits */
} Gen;

static void gen_open(Gen *g, Run *r, int64_t V, int64_t cap)
{
    int64_t T = r->m->inputs[0].shape[0], M = r->o.num_samples > 1 ? r->o.num_samples : 1;
    *g = (Gen){.r = r, .N = M, .M = M, .cap = cap, .T = T, .V = V,
               .doc = r->m->n_inputs == 3 ? r->c.documents : -1};
    g->n = rt_xmalloc((size_t)cap * sizeof *g->n);
    g->ctx = rt_xmalloc((size_t)(cap * T) * sizeof *g->ctx);
    g->tgt = rt_xmalloc((size_t)(cap * T) * sizeof *g->tgt);
    memset(g->tgt, 0, (size_t)(cap * T) * sizeof *g->tgt);
    g->seen = rt_xmalloc((size_t)(cap * V));
    g->rng = rt_xmalloc((size_t)cap * sizeof *g->rng);
    g->logits = rt_xmalloc((size_t)(cap * V) * sizeof *g->logits);
    g->pick = rt_xmalloc((size_t)cap * sizeof *g->pick);
    g->done = rt_xmalloc((size_t)cap);
    g->cached = rt_xmalloc((size_t)cap);
    g->out = rt_xmalloc((size_t)cap * sizeof *g->out);
    memset(g->out, 0, (size_t)cap * sizeof *g->out);
    g->sampler = (rt_sampler){.V = V, .temperature = r->o.temperature, .top_k = r->o.top_k,
                              .top_p = r->o.top_p, .min_p = r->o.min_p,
                              .penalty = r->o.repetition_penalty,
                              .prob = rt_xmalloc((size_t)V * sizeof(double)),
                              .order = rt_xmalloc((size_t)V * sizeof(int32_t)),
                              .adjusted = rt_xmalloc((size_t)V * sizeof(float))};
    g->n_stop = stop_ids(&r->o, V, g->stop);
    g->next = rt_next_open(r, cap, M, V);
}

/* A generation's start (each group of --prompt-file's prompts): N sequences, empty
 * contexts and caches, nothing seen, each prompt's sequence j's draws from the seed
 * (j = 0's from --sample-seed, else the training seed, as one sample's; j's from that
 * mixed with j), so that a prompt's samples are the ones --prompt would draw. */
static void gen_reset(Gen *g, int64_t N)
{
    Run *r = g->r;
    g->N = N;
    memset(g->n, 0, (size_t)N * sizeof *g->n);
    memset(g->seen, 0, (size_t)(N * g->V));
    uint64_t seed = r->o.sample_seed >= 0 ? (uint64_t)r->o.sample_seed : r->c.seed;
    for (int64_t b = 0; b < N; b++) {
        uint64_t j = (uint64_t)(b % g->M);
        rt_rng_seed(&g->rng[b], j ? rt_mix(seed, j) : seed);
    }
    r->e.rng_key = 0;
    rt_next_reset(g->next);
}

static void gen_close(Gen *g)
{
    rt_next_close(g->next);
    for (int64_t b = 0; b < g->cap; b++)
        rt_ids_free(&g->out[b]);
    rt_xfree(g->out);
    rt_xfree(g->done);
    rt_xfree(g->cached);
    rt_xfree(g->pick);
    rt_xfree(g->logits);
    rt_xfree(g->rng);
    rt_xfree(g->sampler.prob);
    rt_xfree(g->sampler.order);
    rt_xfree(g->sampler.adjusted);
    rt_xfree(g->seen);
    rt_xfree(g->ctx);
    rt_xfree(g->tgt);
    rt_xfree(g->n);
}

/* An id appended to sequence b's context (its window slides once full: the cache stops
 * serving) and to the ids its penalty falls on. A document's first token (g->doc) begins
 * the context anew: trained so, the model's attention sees nothing before it and its
 * positions restart there, so the logits are those of the context from it on. */
static void gen_push(Gen *g, int64_t b, uint32_t id)
{
    int64_t T = g->T;
    int32_t *c = g->ctx + b * T;
    if ((int64_t)id == g->doc) {
        g->n[b] = 0;
        rt_next_restart(g->next, b);
    }
    if (g->n[b] == T) {   /* (T >= 1: a token model's) */
        memmove(c, c + 1, (size_t)(T - 1) * sizeof *c);
        g->n[b]--;
        rt_next_slid(g->next, b);
    }
    c[g->n[b]++] = (int32_t)id;
    g->seen[b * g->V + id] = 1;
}

/* Each live sequence's next id drawn from its logits; a stop id ends the sequence (not
 * kept). With one sequence the id is printed as it comes. The sequences still live. */
static int64_t gen_draw(Gen *g, int64_t k)
{
    int64_t live = 0;
    for (int64_t b = 0; b < g->N; b++) {
        if (g->done[b])
            continue;
        g->sampler.seen = g->seen + b * g->V;
        int64_t pick = rt_sample_draw(&g->sampler, g->logits + b * g->V, &g->rng[b]);
        g->pick[b] = (uint32_t)pick;
        if (stops(g->stop, g->n_stop, pick)) {
            g->done[b] = 1;
            continue;
        }
        if (g->N == 1)
            put_id(&g->r->o, pick, k, g->V);
        rt_ids_push(&g->out[b], (uint32_t)pick);
        g->drawn++;
        g->served += g->cached[b];
        live++;
    }
    return live;
}

/* Sequences first .. first + M - 1's samples (one prompt's), once all are drawn: with
 * M > 1 each after a line naming it. */
static void print_samples(Gen *g, int64_t first)
{
    for (int64_t j = 0; j < g->M; j++) {
        const rt_ids *o = &g->out[first + j];
        if (g->M > 1)
            printf("--- sample %lld of %lld ---\n", (long long)j + 1, (long long)g->M);
        for (int64_t k = 0; k < o->n; k++)
            put_id(&g->r->o, o->v[k], k, g->V);
        putchar('\n');
    }
}

/* Up to --sample tokens drawn and appended to each sequence, until each has drawn a
 * stop id (not printed). One sequence: its ids printed as they come, then a newline;
 * several: the caller prints them (print_samples). The ids into g->out. */
static void gen_reply(Gen *g)
{
    Run *r = g->r;
    memset(g->done, 0, (size_t)g->N);
    for (int64_t b = 0; b < g->N; b++)
        g->out[b].n = 0;
    /* (stdout closed, as by `| head`: SIGPIPE is ignored, so the write error ends it) */
    for (int64_t k = 0; k < r->o.sample && !rt_signal_seen && !ferror(stdout); k++) {
        for (int64_t b = 0; b < g->N; b++)   /* causal attention: later positions do not matter */
            for (int64_t t = g->n[b]; t < g->T; t++)
                g->ctx[b * g->T + t] = 0;
        rt_next_logits(g->next, g->N, g->ctx, g->tgt, g->n, g->done, g->logits, g->cached);
        if (!gen_draw(g, k))
            break;
        for (int64_t b = 0; b < g->N; b++)
            if (!g->done[b])
                gen_push(g, b, g->pick[b]);
    }
    if (g->N == 1)
        putchar('\n');
    fflush(stdout);
}

/* --chat without --prompt: the user's turns from stdin, a line each (a "> " on stderr
 * where stdin is a terminal), each written as the template writes the next turn (the
 * assistant's reply closed by its end token, the user's message, the assistant's head)
 * and answered; until the end of stdin. One sequence (rt_sample_vocab refuses more). */
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
        rt_ids ids = {0};
        chat_ids(&r->o, first, line, "a turn", &ids);
        if (!r->o.quiet)
            print_ids("turn", ids.v, ids.n);
        for (int64_t i = 0; i < ids.n; i++) {
            if (ids.v[i] >= (uint32_t)g->V)
                rt_input_error("a turn's token %lld is id %u, past the model's %lld ids",
                               (long long)i, ids.v[i], (long long)g->V);
            gen_push(g, 0, ids.v[i]);
        }
        gen_reply(g);
        if (!r->o.quiet)
            print_ids("sample", g->out[0].v, g->out[0].n);
        rt_ids_free(&ids);
    }
    free(line);
}

/* A prompt (TEXT, the K-th of P; NULL: a newline) into sequences first .. first + M - 1;
 * with a tokenizer its ids on stderr. */
static void prompt_push(Gen *g, const char *text, int64_t k, int64_t P, int64_t first)
{
    Run *r = g->r;
    rt_ids ids = {0};
    char buf[64];
    /* no prompt, no tokenizer: the one id below, not the newline's 10, which a
     * vocabulary of 10 or fewer does not have (an embedding index past it: an error on
     * the CPU, NaN logits and zero bytes on the GPU) */
    if (text || r->o.tokenizer)
        prompt_ids(&r->o, text, prompt_name(&r->o, k, buf, sizeof buf), &ids);
    if (r->o.tokenizer && !r->o.quiet) {   /* what the prompt became, for a reader to check */
        snprintf(buf, sizeof buf, "prompt %lld", (long long)k + 1);
        print_ids(P > 1 ? buf : "prompt", ids.v, ids.n);
    }
    uint32_t nl = 10 % (uint32_t)g->V;   /* a newline, where the vocabulary has it */
    for (int64_t b = first; b < first + g->M; b++) {
        for (int64_t i = 0; i < ids.n; i++)
            gen_push(g, b, ids.v[i]);
        if (g->n[b] == 0)
            gen_push(g, b, nl);
    }
    rt_ids_free(&ids);
}

/* "--- prompt K of P ---" before a prompt's output, where there are several. */
static void prompt_head(int64_t k, int64_t P)
{
    if (P > 1)
        printf("--- prompt %lld of %lld ---\n", (long long)k + 1, (long long)P);
}

/* Prompts k0 .. k0 + G - 1 of ps (G of them: M sequences each, a pass's rows) and their
 * replies, drawn together; each prompt's output after a line naming it, where there are
 * several, and is what --prompt with its text prints (one sequence: as it comes); with a
 * tokenizer the ids on stderr beside the text. */
static void group_reply(Gen *g, const Prompts *ps, int64_t k0, int64_t G)
{
    Run *r = g->r;
    int64_t P = ps->n, M = g->M;
    gen_reset(g, G * M);
    for (int64_t p = 0; p < G; p++)
        prompt_push(g, ps->v[k0 + p], k0 + p, P, p * M);
    if (g->N == 1)
        prompt_head(k0, P);
    gen_reply(g);
    for (int64_t p = 0; p < G; p++) {
        if (g->N > 1) {
            prompt_head(k0 + p, P);
            print_samples(g, p * M);
        }
        for (int64_t j = 0; j < M && r->o.tokenizer && !r->o.quiet; j++) {
            char what[80];   /* the sample's ids, beside its text */
            int n = P > 1 ? snprintf(what, sizeof what, "prompt %lld ", (long long)(k0 + p) + 1) : 0;
            snprintf(what + n, sizeof what - (size_t)n, M > 1 ? "sample %lld" : "sample",
                     (long long)j + 1);
            print_ids(what, g->out[p * M + j].v, g->out[p * M + j].n);
        }
    }
    fflush(stdout);
}

/* Generation from a token model: the context window (at most T ids) goes through the
 * forward pass, the logits at its last position are drawn from (sampling.c: the
 * repetition penalty, the temperature, top_k, top_p and min_p), and the id is appended
 * (the window slides once full); --num-samples M sequences from one prompt together, a
 * batch row each; --prompt-file's prompts as many at once as a pass's rows hold (Bmax /
 * M), each as --prompt. A model with a decode program computes only the new position of
 * each sequence each token, its keys and values cached, until a window slides
 * (sample_next.c). Without a tokenizer ids are bytes for `trainc data text` shards, so a
 * vocabulary of at most 256 ids is printed as bytes, a larger one as numbers a space
 * apart. --chat without --prompt: a conversation (chat_turns). A GAN's --sample is
 * gan_sample's. */
void rt_sample(Run *r)
{
    if (r->m->gan) {
        gan_sample(r);
        return;
    }
    Prompts ps;
    prompts_open(&r->o, &ps);
    int64_t M = r->o.num_samples > 1 ? r->o.num_samples : 1, G = r->e.Bmax / M;
    G = G > ps.n ? ps.n : G < 1 ? 1 : G;
    Gen g;
    gen_open(&g, r, rt_sample_vocab(r->m, &r->o), G * M);
    G = rt_next_slots(g.next) / M;   /* (fewer where the GPU has room for fewer caches) */
    double t0 = rt_now();
    if (r->o.chat && !r->o.prompt && !r->o.prompt_file) {
        gen_reset(&g, 1);
        chat_turns(&g);
    } else
        for (int64_t k = 0; k < ps.n && !rt_signal_seen && !ferror(stdout); k += G)
            group_reply(&g, &ps, k, k + G > ps.n ? ps.n - k : G);
    prompts_close(&ps);
    if (!r->o.quiet) {
        double dt = rt_now() - t0;
        fprintf(stderr, "trainc: sampled %lld tokens in %.2f s, %.1f a second (%lld from the "
                        "key/value cache in %lld passes)\n", (long long)g.drawn, dt,
                dt > 0 ? (double)g.drawn / dt : 0.0, (long long)g.served,
                (long long)rt_next_passes(g.next));
    }
    gen_close(&g);
}
