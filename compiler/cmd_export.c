/* cmd_export.c: trainc export hf SPEC... --weights FILE -o DIR [--tokenizer FILE]: a
 * model of GPT-2's or Llama's shape (the layouts `trainc import hf` writes; a sliding
 * window makes it Mistral, qk_norm Qwen3) as DIR/config.json and DIR/model.safetensors
 * that transformers' from_pretrained loads. A layer such a model has no place for
 * exits 1 naming it, before anything is written. The tensors come from the family's
 * table (hf_arch.c), the one import walks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"

typedef struct Ex {
    const char *file;          /* the model spec, for errors */
    HfWeights w;               /* the trainc weights */
    HfOut out;
    const HfTensor **src;      /* per output tensor: its trainc tensor */
    int64_t *row0;             /* the first of its rows taken (a slice of qkv, gate_up) */
    int *tr;                   /* 1: transposed (GPT-2's Conv1D) */
    /* what the layers say */
    int gpt2;
    HfDims d;
    int64_t T, window;
    double eps, theta;
    const char *act;           /* gpt2: activation_function; llama: hidden_act */
    const cJSON *scaling;
    char *names[HF_N_SLOTS];   /* the layers' names, a block's after "<rep><i>." */
    char *rep;                 /* the repeat's prefix ("h." or "") */
} Ex;

static const cJSON *get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNull(v) ? NULL : v;
}
static double num(const cJSON *o, const char *k, double d)
{
    const cJSON *v = get(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : d;
}
static int flag(const cJSON *o, const char *k, int d)
{
    const cJSON *v = get(o, k);
    return v ? cJSON_IsTrue(v) : d;
}
static const char *str(const cJSON *o, const char *k, const char *d)
{
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : d;
}
static const char *op(const cJSON *l) { return str(l, "op", ""); }

/* A layer's name as SPEC section 2 makes it: PREFIX then its name or its index. */
static char *lname(const cJSON *l, int idx, const char *prefix)
{
    const char *n = str(l, "name", NULL);
    return n ? xasprintf("%s%s", prefix, n) : xasprintf("%s%d", prefix, idx);
}

_Noreturn static void refuse(const Ex *e, const char *path, const cJSON *l, const char *why)
{
    error_at(e->file, path, "%s%s%s: %s", l ? "op '" : "", l ? op(l) : "", l ? "'" : "", why);
}

static void same_eps(Ex *e, const cJSON *l, const char *path)
{
    double eps = num(l, "eps", e->gpt2 ? 1e-5 : 1e-6);
    if (e->eps == 0)
        e->eps = eps;
    else if (eps != e->eps)
        refuse(e, path, l, xasprintf("eps %g where an earlier norm has %g: config.json holds one",
                                     eps, e->eps));
}

/* One norm layer at PATH: layernorm for GPT-2, rmsnorm for Llama. */
static char *norm(Ex *e, const cJSON *l, int idx, const char *prefix, const char *path)
{
    if (strcmp(op(l), e->gpt2 ? "layernorm" : "rmsnorm"))
        refuse(e, path, l, e->gpt2 ? "GPT-2 has a layernorm here" : "Llama has an rmsnorm here");
    same_eps(e, l, path);
    return lname(l, idx, prefix);
}

static void attention(Ex *e, const cJSON *l, const char *path)
{
    if (strcmp(op(l), "attention"))
        refuse(e, path, l, "an attention layer expected here");
    if (!flag(l, "causal", 1))
        refuse(e, path, l, "causal false: a causal language model's attention is causal");
    e->d.H = (int64_t)num(l, "heads", 0);
    e->d.KV = (int64_t)num(l, "kv_heads", (double)e->d.H);
    e->d.bias = flag(l, "bias", 1);
    e->d.qk_norm = flag(l, "qk_norm", 0);
    e->window = (int64_t)num(l, "window", 0);
    const cJSON *rope = get(l, "rope");
    if (e->gpt2 && (rope || e->d.KV != e->d.H || !e->d.bias || e->d.qk_norm || e->window))
        refuse(e, path, l, "rope, kv_heads, bias false, qk_norm and window have no place in "
                           "GPT-2 (with learned positions)");
    if (!e->gpt2 && !rope)
        refuse(e, path, l, "no rope: a Llama-shaped model takes its positions from rope");
    e->theta = num(rope, "theta", 10000);
    e->scaling = get(rope, "scaling");
    if (e->window && (e->d.bias || e->d.qk_norm))
        refuse(e, path, l, "a window with bias or qk_norm: Mistral has neither");
    if (e->d.qk_norm && e->window)
        refuse(e, path, l, "qk_norm with a window: Qwen3 windows only some layers");
}

/* The MLP branch after its norm: fc, gelu, proj (GPT-2) or gate_up, glu, down. */
static void mlp(Ex *e, const cJSON *b, const char *prefix, const char *path)
{
    if (cJSON_GetArraySize(b) != 4)
        refuse(e, path, NULL, "the MLP branch holds a norm, a linear, the activation and a "
                              "linear, and nothing else");
    const cJSON *up = cJSON_GetArrayItem(b, 1), *act = cJSON_GetArrayItem(b, 2),
                *down = cJSON_GetArrayItem(b, 3);
    char *p1 = xasprintf("%s[1]", path), *p2 = xasprintf("%s[2]", path),
         *p3 = xasprintf("%s[3]", path);
    if (strcmp(op(up), "linear") || get(up, "tie"))
        refuse(e, p1, up, "a linear expected here");
    if (strcmp(op(down), "linear") || get(down, "tie") || num(down, "out", 0) != e->d.D)
        refuse(e, p3, down, "a linear back to the model width expected here");
    if (flag(up, "bias", 1) != e->gpt2 || flag(down, "bias", 1) != e->gpt2)
        refuse(e, flag(up, "bias", 1) != e->gpt2 ? p1 : p3, NULL,
               e->gpt2 ? "GPT-2's MLP linears have biases" : "Llama's MLP linears have no bias");
    if (e->gpt2) {
        if (strcmp(op(act), "gelu"))
            refuse(e, p2, act, "GPT-2's MLP activation is gelu");
        e->act = !strcmp(str(act, "approximate", "none"), "tanh") ? "gelu_new" : "gelu";
        e->d.FF = (int64_t)num(up, "out", 0);
    } else {
        if (strcmp(op(act), "glu"))
            refuse(e, p2, act, "Llama's MLP activation is a glu");
        const char *a = str(act, "act", "silu");
        e->act = !strcmp(a, "gelu_tanh") ? "gelu_pytorch_tanh" : a;
        e->d.FF = (int64_t)num(up, "out", 0) / 2;
    }
    e->names[HF_UP] = lname(up, 1, prefix);
    e->names[HF_DOWN] = lname(down, 3, prefix);
}

/* The repeat's body: a residual [norm, attention], then a residual [norm, MLP]. */
static void blocks(Ex *e, const cJSON *rep, const char *path)
{
    const cJSON *body = get(rep, "body");
    e->d.L = (int64_t)num(rep, "count", 0);
    e->rep = str(rep, "name", NULL) ? xasprintf("%s.", str(rep, "name", "")) : xstrdup("");
    if (cJSON_GetArraySize(body) != 2)
        refuse(e, path, rep, "a block holds two residual branches (attention, MLP), nothing else");
    for (int k = 0; k < 2; k++) {
        const cJSON *r = cJSON_GetArrayItem(body, k);
        char *rp = xasprintf("%s.body[%d]", path, k);
        if (strcmp(op(r), "residual") || get(r, "shortcut"))
            refuse(e, rp, r, "a residual branch without shortcut expected here");
        const char *rn = str(r, "name", NULL);
        char *prefix = rn ? xasprintf("%s.", rn) : xstrdup("");
        const cJSON *b = get(r, "body");
        char *bp = xasprintf("%s.body", rp);
        if (cJSON_GetArraySize(b) < 2)
            refuse(e, bp, NULL, "a branch starts with a norm");
        e->names[k ? HF_NORM2 : HF_NORM1] = norm(e, cJSON_GetArrayItem(b, 0), 0, prefix, xasprintf("%s[0]", bp));
        if (k == 0) {
            if (cJSON_GetArraySize(b) != 2)
                refuse(e, xasprintf("%s[2]", bp), cJSON_GetArrayItem(b, 2),
                       "the attention branch holds a norm and the attention, nothing else");
            attention(e, cJSON_GetArrayItem(b, 1), xasprintf("%s[1]", bp));
            e->names[HF_ATTN] = lname(cJSON_GetArrayItem(b, 1), 1, prefix);
        } else
            mlp(e, b, prefix, bp);
    }
}

/* The model's layers: embedding, [pos_embedding], repeat, norm, head linear. */
static void match(Ex *e, const cJSON *model)
{
    if (get(model, "gan"))
        refuse(e, "$.model.gan", NULL, "a GAN is no causal language model");
    const cJSON *ls = get(model, "layers");
    int n = cJSON_GetArraySize(ls), i = 0;
    const cJSON *l = cJSON_GetArrayItem(ls, 0);
    if (strcmp(op(l), "embedding"))
        refuse(e, "$.model.layers[0]", l, "a language model starts with its token embedding");
    e->d.V = (int64_t)num(l, "vocab", 0);
    e->d.D = (int64_t)num(l, "dim", 0);
    e->names[HF_EMBED] = lname(l, 0, "");
    l = cJSON_GetArrayItem(ls, ++i);
    e->gpt2 = l && !strcmp(op(l), "pos_embedding");
    if (e->gpt2) {
        e->d.max_pos = (int64_t)num(l, "max_len", 0);
        e->names[HF_POS] = lname(l, i, "");
        l = cJSON_GetArrayItem(ls, ++i);
    }
    char *path = xasprintf("$.model.layers[%d]", i);
    if (!l || strcmp(op(l), "repeat"))
        refuse(e, path, l, "the blocks are a repeat here");
    blocks(e, l, path);
    if (i + 3 > n)
        refuse(e, "$.model.layers", NULL, "after the blocks come the final norm and the head");
    e->names[HF_FINAL] = norm(e, cJSON_GetArrayItem(ls, i + 1), i + 1, "",
                         xasprintf("$.model.layers[%d]", i + 1));
    l = cJSON_GetArrayItem(ls, i + 2);
    path = xasprintf("$.model.layers[%d]", i + 2);
    if (strcmp(op(l), "linear") || flag(l, "bias", 1))
        refuse(e, path, l, "the head is a linear without bias");
    e->d.tie = get(l, "tie") != NULL;
    if (e->d.tie && strcmp(str(l, "tie", ""), str(cJSON_GetArrayItem(ls, 0), "name", "")))
        refuse(e, path, l, "a head tied to another layer than the token embedding");
    e->names[HF_HEAD] = lname(l, i + 2, "");
    if (i + 3 < n)
        refuse(e, xasprintf("$.model.layers[%d]", i + 3), cJSON_GetArrayItem(ls, i + 3),
               "after the blocks come the final norm and the head, nothing else");
    if (!e->gpt2 && e->d.qk_norm && e->eps != 1e-6)
        refuse(e, "$.model.layers", NULL, "qk_norm (Qwen3) with rmsnorm eps other than 1e-6: "
                                          "Qwen3's config holds one eps for all its norms");
}

/* ---- the weights ----------------------------------------------------------------- */

/* HF tensor THEIRS: rows [row0, row0 + rows) of our OURS (shape [d0, d1], d1 0 for a
 * vector), or with tr all of it transposed. */
static void add(Ex *e, const char *theirs, const char *ours, int64_t d0, int64_t d1, int64_t row0,
                int64_t rows, int tr)
{
    HfTensor *t = hf_find(&e->w, ours);
    if (!t)
        error_input("%s: no tensor '%s' (the spec's model has it)", e->w.paths[0], ours);
    if (t->rank != (d1 ? 2 : 1) || t->shape[0] != d0 || (d1 && t->shape[1] != d1))
        error_input("%s: tensor '%s' does not have the shape the spec gives it ([%lld%s%.0lld])",
                    e->w.paths[0], ours, (long long)d0, d1 ? ", " : "", (long long)d1);
    t->used = 1;
    int k = e->out.n;
    e->src = realloc(e->src, (size_t)(k + 1) * sizeof *e->src);
    e->row0 = realloc(e->row0, (size_t)(k + 1) * sizeof *e->row0);
    e->tr = realloc(e->tr, (size_t)(k + 1) * sizeof *e->tr);
    if (!e->src || !e->row0 || !e->tr)
        die("out of memory");
    e->src[k] = t;
    e->row0[k] = row0;
    e->tr[k] = tr;
    int64_t shape[2] = {tr ? d1 : rows, tr ? d0 : d1};
    hf_out_add(&e->out, theirs, d1 ? 2 : 1, shape);
}

/* hf_walk's visit: the transformers tensors of one of our parameters. */
static void place(void *ctx, const HfMap *m, int64_t block, int n, const HfPart *parts)
{
    Ex *e = ctx;
    char *ours = block < 0 ? xasprintf("%s.%s", e->names[m->slot], m->ours)
                           : xasprintf("%s%lld.%s.%s", e->rep, (long long)block,
                                       e->names[m->slot], m->ours);
    int64_t d0 = 0, d1 = parts[0].rank > 1 ? parts[0].shape[1] : 0, row0 = 0;
    for (int k = 0; k < n; k++)
        d0 += parts[k].shape[0];
    if (m->transpose) {   /* ours [out, in], theirs [in, out] */
        d0 = parts[0].shape[1];
        d1 = parts[0].shape[0];
    }
    for (int k = 0; k < n; k++) {
        add(e, parts[k].name, ours, d0, d1, row0, parts[k].shape[0], m->transpose);
        row0 += parts[k].shape[0];
    }
}

static void plan_tensors(Ex *e)
{
    const HfFamily *f = e->gpt2 ? &hf_gpt2 : &hf_llama;
    hf_walk(f, f->prefix, &e->d, place, e);
    for (int i = 0; i < e->w.n; i++)
        if (!e->w.t[i].used)
            error_input("%s: tensor '%s' is no parameter of the spec's model", e->w.paths[0],
                        e->w.t[i].name);
}

static void write_tensors(const Ex *e, const char *path)
{
    rt_st_out *o = hf_out_open(&e->out, path);
    if (!o)
        cannot_write("export", path);
    for (int k = 0; k < e->out.n; k++) {
        const HfTensor *t = e->src[k];
        float *x = hf_read(&e->w, t);
        const rt_param *p = &e->out.p[k];
        if (e->tr[k]) {   /* ours [d0, d1] -> theirs [d1, d0] */
            float *y = malloc((size_t)t->numel * sizeof *y);
            if (!y)
                die("out of memory");
            hf_transpose(y, x, t->shape[0], t->shape[1]);
            rt_st_put(o, y, p->numel);
            free(y);
        } else {
            int64_t cols = t->rank > 1 ? t->shape[1] : 1;
            rt_st_put(o, x + e->row0[k] * cols, p->numel);
        }
        free(x);
    }
    if (rt_st_close(o) != 0)
        cannot_write("export", path);
}

/* ---- config.json and the command ---------------------------------------------------- */

static cJSON *config(const Ex *e)
{
    cJSON *c = cJSON_CreateObject();
    const char *arch = e->gpt2 ? "GPT2LMHeadModel" : e->d.qk_norm ? "Qwen3ForCausalLM"
                     : e->window ? "MistralForCausalLM" : "LlamaForCausalLM";
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray(&arch, 1));
    cJSON_AddStringToObject(c, "model_type", e->gpt2 ? "gpt2" : e->d.qk_norm ? "qwen3"
                                             : e->window ? "mistral" : "llama");
    cJSON_AddNumberToObject(c, "vocab_size", (double)e->d.V);
    if (e->gpt2) {
        cJSON_AddNumberToObject(c, "n_embd", (double)e->d.D);
        cJSON_AddNumberToObject(c, "n_layer", (double)e->d.L);
        cJSON_AddNumberToObject(c, "n_head", (double)e->d.H);
        cJSON_AddNumberToObject(c, "n_positions", (double)e->d.max_pos);
        cJSON_AddNumberToObject(c, "n_inner", (double)e->d.FF);
        cJSON_AddNumberToObject(c, "layer_norm_epsilon", e->eps);
        cJSON_AddStringToObject(c, "activation_function", e->act);
        /* trainc's spec has no dropout layer here: none in transformers either */
        cJSON_AddNumberToObject(c, "attn_pdrop", 0);
        cJSON_AddNumberToObject(c, "embd_pdrop", 0);
        cJSON_AddNumberToObject(c, "resid_pdrop", 0);
    } else {
        cJSON_AddNumberToObject(c, "hidden_size", (double)e->d.D);
        cJSON_AddNumberToObject(c, "intermediate_size", (double)e->d.FF);
        cJSON_AddNumberToObject(c, "num_hidden_layers", (double)e->d.L);
        cJSON_AddNumberToObject(c, "num_attention_heads", (double)e->d.H);
        cJSON_AddNumberToObject(c, "num_key_value_heads", (double)e->d.KV);
        cJSON_AddNumberToObject(c, "max_position_embeddings", (double)e->T);
        cJSON_AddNumberToObject(c, "rms_norm_eps", e->eps);
        cJSON_AddNumberToObject(c, "rope_theta", e->theta);
        cJSON_AddStringToObject(c, "hidden_act", e->act);
        if (e->scaling)
            cJSON_AddItemToObject(c, "rope_scaling", cJSON_Duplicate(e->scaling, 1));
        if (!e->window)
            cJSON_AddBoolToObject(c, "attention_bias", e->d.bias);
        if (e->window)   /* transformers 4.40: a query sees sliding_window positions before it */
            cJSON_AddNumberToObject(c, "sliding_window", (double)(e->window - 1));
        if (e->d.qk_norm) {
            cJSON_AddNumberToObject(c, "head_dim", (double)(e->d.D / e->d.H));
            cJSON_AddFalseToObject(c, "use_sliding_window");
        }
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", e->d.tie);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

/* The model object of SPEC...'s first file (spec_load has validated it). */
static cJSON *model_of(const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        error_input("%s: cannot read: %s", file, strerror(errno));
    char *s = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 4096 > cap && !(s = realloc(s, cap = 2 * cap + 4096)))
            die("out of memory");
        n += r = fread(s + n, 1, cap - n - 1, f);
    } while (r > 0);
    fclose(f);
    s[n] = 0;
    cJSON *root = cJSON_Parse(s);
    return cJSON_GetObjectItemCaseSensitive(root, "model");
}

static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        error_input("export: --tokenizer %s: %s", src, strerror(errno));
    FILE *out = rt_tmp_open(dst);
    if (!out)
        cannot_write("export", dst);
    char buf[1 << 16];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, r, out);
    fclose(in);
    return rt_tmp_commit(out, dst);
}

int cmd_export(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "hf"))
        error_input("export: usage: trainc export hf SPEC... --weights FILE -o DIR "
                    "[--tokenizer FILE]");
    int n = spec_args(argc, argv, 2, "export");
    const char *weights = NULL, *out = NULL, *tok = NULL;
    for (int i = 2 + n; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out"))
            out = opt_value(argc, argv, &i, argv[i]);
        else if (!strcmp(argv[i], "--weights"))
            weights = opt_value(argc, argv, &i, "--weights");
        else if (!strcmp(argv[i], "--tokenizer"))
            tok = opt_value(argc, argv, &i, "--tokenizer");
        else
            unknown_arg("export", argv[i]);
    }
    if (!weights || !out)
        error_input("export: usage: trainc export hf SPEC... --weights FILE -o DIR "
                    "[--tokenizer FILE]");
    if (tok && access(tok, R_OK) != 0)
        error_input("export: --tokenizer %s: %s", tok, strerror(errno));
    spec_load(n, argv + 2);   /* every error a spec can have, reported as check does */
    Ex e = {.file = argv[2]};
    const cJSON *model = model_of(argv[2]);
    match(&e, model);
    const cJSON *in = get(get(model, "inputs"), str(cJSON_GetArrayItem(get(model, "layers"), 0),
                                                    "input", "x"));
    e.T = (int64_t)cJSON_GetArrayItem(get(in, "shape"), 0)->valuedouble;
    hf_weights_file(&e.w, weights);
    plan_tensors(&e);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hf_print_json(f, config(&e));
    fclose(f);
    if (rt_mkdir_p(out) != 0)
        cannot_write("export", out);
    write_tensors(&e, xasprintf("%s/model.safetensors", out));
    hf_write_text("export", xasprintf("%s/config.json", out), text);
    if (tok && copy_file(tok, xasprintf("%s/tokenizer.json", out)) != 0)
        cannot_write("export", xasprintf("%s/tokenizer.json", out));
    printf("trainc: export: %s -> %s/config.json (%s), %s/model.safetensors (%d tensors)\n",
           weights, out, e.gpt2 ? "gpt2" : e.d.qk_norm ? "qwen3" : e.window ? "mistral" : "llama",
           out, e.out.n);
    return 0;
}
