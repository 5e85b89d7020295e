/* spec.c: reads the model and training specs (docs/spec.md) into a Spec: the checking
 * helpers both halves share (spec_read.h), the model spec, and the entry points.
 *
 * Checks, in order: JSON syntax (FILE:LINE:COL; spec_json.c), duplicate keys, the top-level
 * layout, the model (keys, types and ranges of every value, with "did you mean"),
 * layer- and parameter-name collisions, then the training spec (spec_train.c) through
 * the runtime's config table (runtime/config.c), so the compiler and a trainer's --set
 * take the same values. Shapes are the op files' business (ops/, from graph.c). Every
 * error exits 1 through error_at().
 */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "ops/op.h"
#include "spec_read.h"


const OpInfo op_info[OP__COUNT] = {
#define X(kind, name, keys, required, cls) [kind] = {name, keys, required, cls},
    OP_LIST(X)
#undef X
};

#define MAX_TENSORS 100000     /* parameter tensors after expanding repeats */
#define MAX_LAYERS 100000      /* layers after expanding repeats */
#define MAX_DIM 2147483647     /* any size or count in the model */
#define MOE_MAX_EXPERTS 1024   /* moe's experts (and top_k) */

/* The parsed JSON stays alive with the Spec: the model tree feeds the hash. */
typedef struct Canon {
    const Spec *s;
    cJSON *docs[2];
    char *model_json;          /* cJSON_PrintUnformatted of "model" */
    struct Canon *next;
} Canon;
static Canon *canons;

/* ---- small helpers ------------------------------------------------------- */

/* Keeps a pointer reachable for good: suggestion lists and message parts built just
 * before error_at() exits, so that LeakSanitizer stays quiet on bad input. */
void *sp_keep(void *p)
{
    static void **kept;
    static size_t n, cap;
    if (n == cap) {
        cap = cap ? 2 * cap : 16;
        void **v = xcalloc(cap, sizeof *v);
        if (n)
            memcpy(v, kept, n * sizeof *v);
        free(kept);
        kept = v;
    }
    kept[n++] = p;
    return p;
}

/* User text for a one-line message: control characters escaped, at most 60 bytes. */
const char *sp_show(const char *s)
{
    char *out = sp_keep(xcalloc(1, 4 * 60 + 4)), *o = out;
    size_t i = 0;
    for (; s[i] && i < 60; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n')
            o += sprintf(o, "\\n");
        else if (ch == '\t')
            o += sprintf(o, "\\t");
        else if (ch < 0x20 || ch == 0x7f)
            o += sprintf(o, "\\x%02x", ch);
        else
            *o++ = (char)ch;
    }
    if (s[i])
        strcpy(o, "...");
    return out;
}

static int is_ident(const char *s)
{
    if (!isalpha((unsigned char)*s) && *s != '_')
        return 0;
    for (s++; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

/* "$.a.b" for identifier keys, "$.a[\"x y\"]" otherwise. */
char *sp_path_key(const char *parent, const char *key)
{
    if (is_ident(key))
        return xasprintf("%s.%s", parent, key);
    return xasprintf("%s[\"%s\"]", parent, sp_show(key));
}

static char *path_index(const char *parent, int i) { return xasprintf("%s[%d]", parent, i); }

/* A number as short as it reads back exactly: 25.5, 0.9, 1e-08, 1024. */
void sp_fmt_number(char *buf, size_t len, double d)
{
    if (d == floor(d) && fabs(d) < 1e15) {
        snprintf(buf, len, "%.0f", d);
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

/* A value as an error message shows it: numbers and literals as written, strings in
 * quotes, containers by kind. */
const char *sp_got(const cJSON *v, char *buf, size_t len)
{
    if (cJSON_IsNumber(v))
        sp_fmt_number(buf, len, v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, len, "\"%s\"", sp_show(v->valuestring));
    else if (cJSON_IsBool(v))
        snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v))
        snprintf(buf, len, "null");
    else if (cJSON_IsArray(v))
        snprintf(buf, len, "an array");
    else
        snprintf(buf, len, "an object");
    return buf;
}

int sp_in_list(const char *w, const char *const *words)
{
    for (int i = 0; words[i]; i++)
        if (!strcmp(w, words[i]))
            return 1;
    return 0;
}

/* Other programs' names for keys of ours (PyTorch's, Keras's, nanoGPT's, Hugging
 * Face's), suggested when the object at hand takes the key they stand for. A NULL key:
 * a size a layer takes from its input. */
static const struct {
    const char *alias, *key;
} aliases[] = {
    {"kernel_size", "kernel"}, {"pool_size", "kernel"}, {"strides", "stride"},
    {"out_features", "out"}, {"out_channels", "out"}, {"units", "out"}, {"filters", "out"},
    {"use_bias", "bias"},
    {"num_embeddings", "vocab"}, {"vocab_size", "vocab"}, {"n_vocab", "vocab"},
    {"embedding_dim", "dim"}, {"embed_dim", "dim"}, {"n_embd", "dim"}, {"d_model", "dim"},
    {"hidden_size", "dim"},
    {"epsilon", "eps"}, {"layer_norm_eps", "eps"}, {"norm_eps", "eps"}, {"rms_norm_eps", "eps"},
    {"num_heads", "heads"}, {"n_head", "heads"}, {"n_heads", "heads"}, {"nhead", "heads"},
    {"num_attention_heads", "heads"}, {"is_causal", "causal"},
    {"num_key_value_heads", "kv_heads"}, {"n_kv_heads", "kv_heads"},
    {"num_kv_heads", "kv_heads"}, {"sliding_window", "window"}, {"rope_theta", "rope"},
    {"rope_scaling", "rope"}, {"attention_bias", "bias"}, {"use_qk_norm", "qk_norm"},
    {"block_size", "max_len"}, {"n_positions", "max_len"}, {"n_ctx", "max_len"},
    {"max_position_embeddings", "max_len"}, {"max_seq_len", "max_len"},
    {"context_length", "max_len"},
    {"num_layers", "count"}, {"n_layer", "count"}, {"num_hidden_layers", "count"},
    {"repeats", "count"}, {"times", "count"},
    {"rate", "p"}, {"dropout", "p"}, {"drop_prob", "p"},
    {"layers", "body"}, {"blocks", "body"}, {"type", "op"},
    {"num_classes", "classes"}, {"n_classes", "classes"}, {"id2label", "labels"},
    {"class_names", "labels"},
    {"learning_rate", "lr"},
    {"in_features", NULL}, {"in_channels", NULL}, {"normalized_shape", NULL},
    {"input_dim", NULL}, {"input_size", NULL}, {"in_dim", NULL},
};

/* The key of `words` that `word` is another name for, or NULL. */
const char *sp_alias_of(const char *word, const char *const *words)
{
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (aliases[i].key && !strcasecmp(word, aliases[i].alias) &&
            sp_in_list(aliases[i].key, words))
            return aliases[i].key;
    return NULL;
}

/* Whether `word` names the input's size (or width) for a layer that takes it from
 * its input: linear's in_features, layernorm's normalized_shape, attention's
 * embed_dim. */
static int names_input_size(const char *word, const char *const *words)
{
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (!strcasecmp(word, aliases[i].alias))
            return !aliases[i].key ||
                   (!strcmp(aliases[i].key, "dim") && !sp_in_list("dim", words));
    return 0;
}

/* "unknown key 'K'; did you mean 'W'?" or, with no close word, the hint. */
_Noreturn void sp_unknown(const Ctx *c, const char *path, const char *what,
                          const char *word, const char *const *words, const char *hint)
{
    const char *near = sp_alias_of(word, words);
    if (!near)
        near = rt_closest(word, words);
    if (near)
        error_at(c->file, path, "unknown %s '%s'; did you mean '%s'?", what, sp_show(word), near);
    if (hint)
        error_at(c->file, path, "unknown %s '%s'; %s", what, sp_show(word), hint);
    error_at(c->file, path, "unknown %s '%s'", what, sp_show(word));
}

/* "a, b, c" from a NULL-terminated list. */
char *sp_join(const char *const *words)
{
    size_t n = 1;
    for (int i = 0; words[i]; i++)
        n += strlen(words[i]) + 2;
    char *s = sp_keep(xcalloc(1, n));
    for (int i = 0; words[i]; i++) {
        if (i)
            strcat(s, ", ");
        strcat(s, words[i]);
    }
    return s;
}

/* Rejects keys of obj outside `allowed`, pointing at the key. */
void sp_check_keys(const Ctx *c, const cJSON *obj, const char *path,
                   const char *const *allowed)
{
    const cJSON *ch;
    cJSON_ArrayForEach(ch, obj) {
        if (sp_in_list(ch->string, allowed))
            continue;
        char *hint_list = sp_join(allowed);
        char *hint = sp_keep(xasprintf("expected one of %s", hint_list));
        sp_unknown(c, sp_keep(sp_path_key(path, ch->string)), "key", ch->string, allowed, hint);
    }
}

void sp_need_object(const Ctx *c, const cJSON *v, const char *path, const char *what)
{
    char b[300];
    if (!cJSON_IsObject(v))
        error_at(c->file, path, "expected %s, got %s", what, sp_got(v, b, sizeof b));
}

static int64_t get_int(const Ctx *c, const cJSON *v, const char *path, int64_t min,
                       int64_t max)
{
    char want[64], b[96];
    if (min == 1)
        snprintf(want, sizeof want, "a positive integer");
    else
        snprintf(want, sizeof want, "an integer >= %lld", (long long)min);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)min)
        error_at(c->file, path, "expected %s, got %s", want, sp_got(v, b, sizeof b));
    if (v->valuedouble > (double)max)
        error_at(c->file, path, "expected %s <= %lld, got %s", want, (long long)max,
                 sp_got(v, b, sizeof b));
    return (int64_t)v->valuedouble;
}

static double get_number(const Ctx *c, const cJSON *v, const char *path)
{
    char b[300];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        error_at(c->file, path, "expected a number, got %s", sp_got(v, b, sizeof b));
    return v->valuedouble;
}

static int get_bool(const Ctx *c, const cJSON *v, const char *path)
{
    char b[300];
    if (!cJSON_IsBool(v))
        error_at(c->file, path, "expected true or false, got %s", sp_got(v, b, sizeof b));
    return cJSON_IsTrue(v);
}

static const char *get_string(const Ctx *c, const cJSON *v, const char *path)
{
    char b[300];
    if (!cJSON_IsString(v))
        error_at(c->file, path, "expected a string, got %s", sp_got(v, b, sizeof b));
    return v->valuestring;
}

/* A string that must be one of `words` (with a suggestion when it is not). */
static int get_choice(const Ctx *c, const cJSON *v, const char *path,
                      const char *const *words)
{
    char b[300];
    if (!cJSON_IsString(v)) {
        char *list = sp_join(words);
        error_at(c->file, path, "expected one of %s, got %s", list, sp_got(v, b, sizeof b));
    }
    for (int i = 0; words[i]; i++)
        if (!strcmp(v->valuestring, words[i]))
            return i;
    char *list = sp_join(words);
    const char *near = rt_closest(v->valuestring, words);
    if (near)
        error_at(c->file, path, "expected one of %s, got '%s'; did you mean '%s'?", list,
                 sp_show(v->valuestring), near);
    error_at(c->file, path, "expected one of %s, got '%s'", list, sp_show(v->valuestring));
}

const cJSON *sp_member(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

const cJSON *sp_require(const Ctx *c, const cJSON *obj, const char *path, const char *key)
{
    const cJSON *v = sp_member(obj, key);
    if (!v)
        error_at(c->file, path, "missing key '%s'", key);
    return v;
}

/* ---- JSON ---------------------------------------------------------------- */

/* cJSON keeps both copies of a repeated key; JSON readers disagree on which wins, so
 * a repeated key is an error. */
static void check_duplicates(const char *file, const cJSON *v, const char *path)
{
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return;
    int i = 0;
    for (const cJSON *ch = v->child; ch; ch = ch->next, i++) {
        if (cJSON_IsObject(v))
            for (const cJSON *prev = v->child; prev != ch; prev = prev->next)
                if (!strcmp(prev->string, ch->string))
                    error_at(file, path, "duplicate key '%s'", sp_show(ch->string));
        if (!cJSON_IsObject(ch) && !cJSON_IsArray(ch))
            continue;
        char *sub = cJSON_IsObject(v) ? sp_path_key(path, ch->string) : path_index(path, i);
        check_duplicates(file, ch, sub);
        free(sub);
    }
}

/* ---- the model ------------------------------------------------------------- */

static const char *const dtype_names[] = {"u8", "u16", "i32", "f32", NULL};
const char *const glu_act_names[] = {"silu", "gelu", "gelu_tanh", "sigmoid", "relu", NULL};

int sp_find_input(const Spec *s, const char *name)
{
    for (int i = 0; i < s->n_inputs; i++)
        if (!strcmp(s->inputs[i].name, name))
            return i;
    return -1;
}

/* The model's input names, NULL-terminated, optionally with "tokens". */
const char **sp_input_names(const Spec *s, int with_tokens)
{
    const char **w = sp_keep(xcalloc((size_t)s->n_inputs + 2, sizeof *w));
    int n = 0;
    for (int i = 0; i < s->n_inputs; i++)
        w[n++] = s->inputs[i].name;
    if (with_tokens)
        w[n++] = "tokens";
    return w;
}

/* A name that must be one of the model's inputs. */
static int get_input_ref(const Ctx *c, const cJSON *v, const char *path)
{
    const char *name = get_string(c, v, path);
    int i = sp_find_input(c->s, name);
    if (i >= 0)
        return i;
    const char **names = sp_input_names(c->s, 0);
    char *hint = sp_keep(xasprintf("the model's inputs are %s", sp_join(names)));
    sp_unknown(c, path, "input", name, names, hint);
}

/* An input's scale or shift (KEY): a number, or (an extension) a list of one for each
 * channel, the input's first axis, into *list (NULL for a number); the number, or dflt
 * for a list */
static double conversion_key(const Ctx *c, const cJSON *x, const char *ip, const char *key,
                             const InputSpec *in, double **list, double dflt)
{
    char *kp = sp_path_key(ip, key), b[300];
    *list = NULL;
    if (!cJSON_IsArray(x)) {
        double v = get_number(c, x, kp);
        free(kp);
        return v;
    }
    if (in->rank < 2)
        error_at(c->file, kp, "a list is one number for each channel, the first of at least two "
                 "axes: input '%s' has %d, so it takes a number", in->name, in->rank);
    if (cJSON_GetArraySize(x) != in->shape[0])
        error_at(c->file, kp, "a list is one number for each channel: input '%s' has %lld "
                 "channels (its first axis), the list %d numbers", in->name,
                 (long long)in->shape[0], cJSON_GetArraySize(x));
    *list = xcalloc((size_t)in->shape[0], sizeof **list);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, x) {
        char *ep = path_index(kp, k);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
            error_at(c->file, ep, "expected a number, got %s", sp_got(e, b, sizeof b));
        (*list)[k++] = e->valuedouble;
        free(ep);
    }
    free(kp);
    return dflt;
}

/* labels (an extension): the names of the classes, one a class, for export hf */
static void parse_labels(const Ctx *c, const cJSON *x, const char *ip, InputSpec *in)
{
    char *lp = sp_path_key(ip, "labels"), b[300];
    if (!in->classes)
        error_at(c->file, lp, "labels name the classes: give classes too");
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != in->classes)
        error_at(c->file, lp, "expected a list of %lld names (one a class), got %s",
                 (long long)in->classes, sp_got(x, b, sizeof b));
    in->labels = xcalloc((size_t)in->classes, sizeof *in->labels);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, x) {
        if (!cJSON_IsString(e))
            error_at(c->file, path_index(lp, k), "expected a name, got %s", sp_got(e, b, sizeof b));
        in->labels[k++] = e->valuestring;
    }
    free(lp);
}

/* scale and shift: numbers, or lists by channel (then both kept as lists, and the numbers
 * are their defaults, 1 and 0) */
static void parse_conversion(const Ctx *c, const cJSON *ch, const char *ip, InputSpec *in)
{
    const cJSON *x;
    double *sl = NULL, *hl = NULL;
    if ((x = sp_member(ch, "scale"))) {
        in->scale = conversion_key(c, x, ip, "scale", in, &sl, 1);
        in->has_scale = 1;
    }
    if ((x = sp_member(ch, "shift"))) {
        in->shift = conversion_key(c, x, ip, "shift", in, &hl, 0);
        in->has_shift = 1;
    }
    if (!sl && !hl)
        return;
    int64_t C = in->shape[0];
    in->ch_scale = sl ? sl : xcalloc((size_t)C, sizeof *sl);
    in->ch_shift = hl ? hl : xcalloc((size_t)C, sizeof *hl);
    for (int64_t k = 0; k < C; k++) {
        if (!sl)
            in->ch_scale[k] = in->scale;
        if (!hl)
            in->ch_shift[k] = in->shift;
    }
    in->scale = 1;
    in->shift = 0;
}

static void parse_inputs(const Ctx *c, const cJSON *v, const char *path)
{
    Spec *s = c->s;
    sp_need_object(c, v, path, "an object mapping input names to {shape, dtype}");
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > RT_MAX_INPUTS)
        error_at(c->file, path, "expected 1 to %d inputs, got %d", RT_MAX_INPUTS, n);
    static const char *const keys[] = {"shape", "dtype", "scale", "shift", "classes", "labels",
                                       NULL};
    const cJSON *ch;
    cJSON_ArrayForEach(ch, v) {
        char *ip = sp_path_key(path, ch->string);
        if (!is_ident(ch->string))
            error_at(c->file, ip, "bad input name '%s': expected letters, digits and '_', "
                     "not starting with a digit", sp_show(ch->string));
        if (!strcmp(ch->string, "tokens"))
            error_at(c->file, ip, "the input name 'tokens' is reserved for token data "
                     "(train.data.train.tokens); choose another");
        if (strlen(ch->string) >= sizeof ((rt_data_entry *)0)->key)
            error_at(c->file, ip, "input name too long (at most %zu characters)",
                     sizeof ((rt_data_entry *)0)->key - 1);
        sp_need_object(c, ch, ip, "an object {\"shape\": [...], \"dtype\": ...}");
        sp_check_keys(c, ch, ip, keys);
        InputSpec *in = &s->inputs[s->n_inputs++];
        in->name = ch->string;
        in->path = ip;
        in->scale = 1;

        char *sp = sp_path_key(ip, "shape");
        const cJSON *shape = sp_require(c, ch, ip, "shape");
        char b[300];
        if (!cJSON_IsArray(shape))
            error_at(c->file, sp, "expected an array of sizes (per sample), got %s",
                     sp_got(shape, b, sizeof b));
        in->rank = cJSON_GetArraySize(shape);
        if (in->rank > RT_MAX_RANK)
            error_at(c->file, sp, "expected at most %d dimensions, got %d", RT_MAX_RANK,
                     in->rank);
        int k = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, shape) {
            char *dp = path_index(sp, k);
            in->shape[k++] = get_int(c, d, dp, 1, MAX_DIM);
            free(dp);
        }
        free(sp);

        sp = sp_path_key(ip, "dtype");
        in->dtype = get_choice(c, sp_require(c, ch, ip, "dtype"), sp, dtype_names);
        free(sp);
        parse_conversion(c, ch, ip, in);
        const cJSON *x;
        if ((x = sp_member(ch, "classes"))) {
            sp = sp_path_key(ip, "classes");
            if (in->dtype == RT_F32)
                error_at(c->file, sp, "classes needs an integer dtype (u8, u16 or i32); "
                         "input '%s' is f32", in->name);
            in->classes = get_int(c, x, sp, 2, MAX_DIM);
            free(sp);
        }
        if ((x = sp_member(ch, "labels")))
            parse_labels(c, x, ip, in);
    }
}

static void parse_init(const Ctx *c, const cJSON *v, const char *path, Init *init)
{
    static const char *const kinds[] = {"default", "normal", "gpt2", NULL};
    static const char *const keys[] = {"type", "std", NULL};
    char b[300];
    if (cJSON_IsString(v)) {
        int k = get_choice(c, v, path, kinds);
        if (k == INIT_NORMAL)
            error_at(c->file, path, "init normal needs a std: {\"type\": \"normal\", "
                     "\"std\": 0.02}");
        init->kind = k;
        return;
    }
    if (!cJSON_IsObject(v))
        error_at(c->file, path, "expected \"gpt2\" or {\"type\": \"normal\", \"std\": S}, "
                 "got %s", sp_got(v, b, sizeof b));
    sp_check_keys(c, v, path, keys);
    char *tp = sp_path_key(path, "type");
    init->kind = get_choice(c, sp_require(c, v, path, "type"), tp, kinds);
    free(tp);
    const cJSON *std = sp_member(v, "std");
    char *sp = sp_path_key(path, "std");
    if (init->kind == INIT_NORMAL) {
        if (!std)
            error_at(c->file, path, "missing key 'std'");
        init->std = get_number(c, std, sp);
        if (!(init->std > 0))
            error_at(c->file, sp, "expected a number > 0, got %s", sp_got(std, b, sizeof b));
    } else if (std)
        error_at(c->file, sp, "std applies to init type normal only");
    free(sp);
}

static int op_by_name(const char *name)
{
    for (int i = 0; i < OP__COUNT; i++)
        if (!strcmp(op_info[i].name, name))
            return i;
    return -1;
}

/* Whether layers of op `op` take "init": those with parameters, and the containers,
 * which pass it to their body. */
static int takes_init(int op)
{
    return op_info[op].cls == OPC_PARAM || op_info[op].cls == OPC_NORM ||
           op_info[op].cls == OPC_SEQ || op_info[op].cls == OPC_CONTAINER;
}

/* The keys layer op `op` takes: the common ones, then the op's own. */
static const char **layer_keys(int op)
{
    enum { MAX_KEYS = 24 };
    static const char *store[OP__COUNT][MAX_KEYS];
    static char words[OP__COUNT][160];
    const char **k = store[op];
    if (k[0])
        return k;
    int n = 0;
    k[n++] = "op";
    k[n++] = "name";
    k[n++] = "input";
    if (takes_init(op))
        k[n++] = "init";
    snprintf(words[op], sizeof words[op], "%s", op_info[op].keys);
    for (char *w = strtok(words[op], " "); w; w = strtok(NULL, " ")) {
        if (n == MAX_KEYS - 1)
            die("%s: more keys than layer_keys holds", op_info[op].name);
        k[n++] = w;
    }
    k[n] = NULL;
    return k;
}

static Layer *parse_layer(const Ctx *c, const cJSON *v, const char *path);

/* A container's list of layers (body, shortcut): into *out, its length into *n. */
static void parse_body(const Ctx *c, Layer ***out, int *n, const cJSON *v, const char *path)
{
    char b[300];
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        error_at(c->file, path, "expected a non-empty array of layers, got %s",
                 cJSON_IsArray(v) ? "[]" : sp_got(v, b, sizeof b));
    *n = cJSON_GetArraySize(v);
    *out = xcalloc((size_t)*n, sizeof **out);
    int i = 0;
    const cJSON *ch;
    cJSON_ArrayForEach(ch, v) {
        (*out)[i] = parse_layer(c, ch, path_index(path, i));
        i++;
    }
}

/* attention's "scaling" of type linear: {"rope_type": "linear", "factor": F}, every
 * frequency divided by F (transformers' inv_freq / factor). It runs as llama3 scaling
 * with original_max_position_embeddings 1 and low_freq_factor 1, whose rule divides
 * each frequency whose wavelength is past 1 / 1 by the factor: all of them (the
 * shortest is 2 pi), with nothing smoothed (high_freq_factor 2). */
static void parse_linear_scaling(const Ctx *c, Rope *r, const cJSON *v, const char *path)
{
    static const char *const keys[] = {"rope_type", "type", "factor", NULL};
    sp_check_keys(c, v, path, keys);
    char *fp = sp_keep(sp_path_key(path, "factor"));
    r->factor = get_number(c, sp_require(c, v, path, "factor"), fp);
    if (!(r->factor >= 1))
        error_at(c->file, fp, "expected a factor >= 1, got %g", r->factor);
    r->linear = 1;
    r->low = 1;
    r->high = 2;
    r->orig = 1;
}

/* A longrope factor list at KEY of V: numbers > 0, as many as the first list has (n,
 * 0 when this is the first). */
static double *longrope_list(const Ctx *c, const cJSON *v, const char *path, const char *key,
                             int *n)
{
    char *kp = sp_keep(sp_path_key(path, key));
    const cJSON *a = sp_require(c, v, path, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0)
        error_at(c->file, kp, "expected a list of numbers > 0 (one per pair of a head's "
                 "dimensions)");
    if (*n && cJSON_GetArraySize(a) != *n)
        error_at(c->file, kp, "%d numbers, where short_factor has %d", cJSON_GetArraySize(a), *n);
    *n = cJSON_GetArraySize(a);
    double *f = sp_keep(xcalloc((size_t)*n, sizeof *f));
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        char *ip = sp_keep(path_index(kp, i));
        f[i] = get_number(c, x, ip);
        if (!(f[i] > 0))
            error_at(c->file, ip, "expected a number > 0, got %g", f[i]);
        i++;
    }
    return f;
}

/* attention's "scaling" of type longrope (Phi-3's 128k models; transformers'
 * _compute_longrope_parameters): short_factor and long_factor (a divisor per
 * frequency: the short ones for a context up to original_max_position_embeddings, the
 * long ones past it), the context's factor over that, and attention_factor (cos and sin
 * times it; default sqrt(1 + ln(factor) / ln(original)), 1 for a factor up to 1). */
static void parse_longrope(const Ctx *c, Rope *r, const cJSON *v, const char *path)
{
    static const char *const keys[] = {"rope_type", "type", "short_factor", "long_factor",
                                       "factor", "original_max_position_embeddings",
                                       "attention_factor", NULL};
    sp_check_keys(c, v, path, keys);
    LongRope *lr = sp_keep(xcalloc(1, sizeof *lr));
    lr->short_f = longrope_list(c, v, path, "short_factor", &lr->n);
    lr->long_f = longrope_list(c, v, path, "long_factor", &lr->n);
    char *fp = sp_keep(sp_path_key(path, "factor"));
    char *op = sp_keep(sp_path_key(path, "original_max_position_embeddings"));
    lr->factor = get_number(c, sp_require(c, v, path, "factor"), fp);
    lr->orig = (double)get_int(c, sp_require(c, v, path, "original_max_position_embeddings"), op, 1,
                               MAX_DIM);
    if (!(lr->factor > 0))
        error_at(c->file, fp, "expected a number > 0, got %g", lr->factor);
    lr->attn = longrope_default_attn(lr->factor, lr->orig);
    const cJSON *af = sp_member(v, "attention_factor");
    if (af) {
        char *ap = sp_keep(sp_path_key(path, "attention_factor"));
        lr->attn = get_number(c, af, ap);
        lr->has_attn = 1;
        if (!(lr->attn > 0))
            error_at(c->file, ap, "expected a number > 0, got %g", lr->attn);
    }
    r->lr = lr;
}

/* attention's "scaling" of type yarn: factor (>= 1) and original_max_position_embeddings
 * required; beta_fast (32), beta_slow (1), attention_factor (0.1 ln factor + 1) */
static void parse_yarn(const Ctx *c, Rope *r, const cJSON *v, const char *path)
{
    static const char *const keys[] = {"rope_type", "type", "factor",
                                       "original_max_position_embeddings", "beta_fast",
                                       "beta_slow", "attention_factor", NULL};
    sp_check_keys(c, v, path, keys);
    Yarn *y = sp_keep(xcalloc(1, sizeof *y));
    char *fp = sp_keep(sp_path_key(path, "factor"));
    y->factor = get_number(c, sp_require(c, v, path, "factor"), fp);
    if (!(y->factor >= 1))
        error_at(c->file, fp, "expected a factor >= 1, got %g", y->factor);
    const char *op = sp_keep(sp_path_key(path, "original_max_position_embeddings"));
    y->orig = (double)get_int(c, sp_require(c, v, path, "original_max_position_embeddings"), op,
                              1, MAX_DIM);
    y->beta_fast = 32;
    y->beta_slow = 1;
    y->attn = 0.1 * log(y->factor) + 1.0;
    double *to[3] = {&y->beta_fast, &y->beta_slow, &y->attn};
    for (int k = 0; k < 3; k++) {
        const cJSON *e = sp_member(v, keys[k + 4]);
        if (!e)
            continue;
        char *kp = sp_keep(sp_path_key(path, keys[k + 4]));
        *to[k] = get_number(c, e, kp);
        if (!(*to[k] > 0))
            error_at(c->file, kp, "expected a number > 0, got %g", *to[k]);
    }
    y->has_attn = sp_member(v, "attention_factor") != NULL;
    r->factor = y->factor;
    r->yarn = y;
}

/* attention's "scaling": HF's rope_scaling of type llama3 (transformers'
 * _compute_llama3_parameters): factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings, all required; "rope_type" (or "type") llama3; or
 * of type linear, longrope or yarn. */
static void parse_rope_scaling(const Ctx *c, Rope *r, const cJSON *v, const char *path)
{
    static const char *const keys[] = {"rope_type", "type", "factor", "low_freq_factor",
                                       "high_freq_factor", "original_max_position_embeddings",
                                       NULL};
    static const char *const types[] = {"llama3", "linear", "longrope", "yarn", NULL};
    sp_need_object(c, v, path, "an object {\"rope_type\": \"llama3\", \"factor\": ...}");
    const cJSON *t = sp_member(v, "rope_type") ? sp_member(v, "rope_type") : sp_member(v, "type");
    if (!t)
        error_at(c->file, path, "missing key 'rope_type' (llama3, linear, longrope or yarn)");
    int type = get_choice(c, t, sp_keep(sp_path_key(path, t->string)), types);
    if (type == 1) {
        parse_linear_scaling(c, r, v, path);
        return;
    }
    if (type == 2) {
        parse_longrope(c, r, v, path);
        return;
    }
    if (type == 3) {
        parse_yarn(c, r, v, path);
        return;
    }
    const cJSON *ch;
    cJSON_ArrayForEach(ch, v) {
        char *kp = sp_keep(sp_path_key(path, ch->string));
        if (!sp_in_list(ch->string, keys))
            sp_unknown(c, kp, "key", ch->string, keys, NULL);
        if (!strcmp(ch->string, "rope_type") || !strcmp(ch->string, "type"))
            get_choice(c, ch, kp, types);
    }
    double *to[4] = {&r->factor, &r->low, &r->high, &r->orig};
    for (int k = 0; k < 4; k++) {
        char *kp = sp_keep(sp_path_key(path, keys[k + 2]));
        *to[k] = get_number(c, sp_require(c, v, path, keys[k + 2]), kp);
        if (!(*to[k] > 0))
            error_at(c->file, kp, "expected a number > 0, got %g", *to[k]);
    }
    if (r->factor < 1)
        error_at(c->file, sp_keep(sp_path_key(path, "factor")), "expected a factor >= 1, got %g",
                 r->factor);
    if (!(r->high > r->low))
        error_at(c->file, sp_keep(sp_path_key(path, "high_freq_factor")),
                 "expected high_freq_factor > low_freq_factor (%g), got %g", r->low,
                 r->high);
}

/* attention's "rope": null, or {"theta": T} with an optional "scaling" and "dims" (a
 * partial rope: checked against the head width where the layer is built). */
static void parse_rope(const Ctx *c, Rope *r, const cJSON *v, const char *path)
{
    static const char *const keys[] = {"theta", "scaling", "dims", NULL};
    if (cJSON_IsNull(v))
        return;
    sp_need_object(c, v, path, "null or an object {\"theta\": 10000}");
    sp_check_keys(c, v, path, keys);
    char *tp = sp_keep(sp_path_key(path, "theta"));
    r->theta = get_number(c, sp_require(c, v, path, "theta"), tp);
    if (!(r->theta > 1))
        error_at(c->file, tp, "expected a number > 1, got %g", r->theta);
    const cJSON *sc = sp_member(v, "scaling");
    if (sc && !cJSON_IsNull(sc))
        parse_rope_scaling(c, r, sc, sp_keep(sp_path_key(path, "scaling")));
    const cJSON *dims = sp_member(v, "dims");
    if (dims && !cJSON_IsNull(dims))
        r->dims = get_int(c, dims, sp_keep(sp_path_key(path, "dims")), 2, MAX_DIM);
}

/* attention's "interleave": {"every": N, "window": ..., "rope": ...}: in a repeat,
 * iterations N - 1, 2N - 1, ... take the window and rope given (null: none) in place of
 * the layer's (Gemma 2 and 3's global layers among windowed ones, SmolLM3's layers
 * without rope). */
static void parse_interleave(const Ctx *c, Layer *l, const cJSON *v, const char *path)
{
    static const char *const keys[] = {"every", "window", "rope", NULL};
    sp_need_object(c, v, path, "an object {\"every\": N, \"window\": ..., \"rope\": ...}");
    sp_check_keys(c, v, path, keys);
    Interleave *il = &l->il;
    il->every = get_int(c, sp_require(c, v, path, "every"), sp_keep(sp_path_key(path, "every")), 1,
                        MAX_DIM);
    const cJSON *w = sp_member(v, "window"), *r = sp_member(v, "rope");
    if (!w && !r)
        error_at(c->file, path, "interleave changes nothing: give \"window\" or \"rope\" (null "
                 "for none)");
    if (w) {
        il->set_window = 1;
        il->window = cJSON_IsNull(w) ? 0
                                     : get_int(c, w, sp_keep(sp_path_key(path, "window")), 1,
                                               MAX_DIM);
    }
    if (r) {
        il->set_rope = 1;
        parse_rope(c, &il->rope, r, sp_keep(sp_path_key(path, "rope")));
    }
}

/* One op key of layer l (the key is known to be the op's). */
/* A layer's integer keys: the field and the range each takes. */
static const struct {
    const char *key;
    size_t at;                 /* offsetof(Layer, the int64_t field) */
    int64_t lo, hi;
} int_keys[] = {
    {"out", offsetof(Layer, out), 1, MAX_DIM},
    {"kernel", offsetof(Layer, kernel), 1, MAX_DIM},
    {"stride", offsetof(Layer, stride), 1, MAX_DIM},
    {"padding", offsetof(Layer, padding), 0, MAX_DIM},
    {"vocab", offsetof(Layer, vocab), 1, MAX_DIM},
    {"dim", offsetof(Layer, dim), 1, MAX_DIM},
    {"max_len", offsetof(Layer, max_len), 1, MAX_DIM},
    {"heads", offsetof(Layer, heads), 1, MAX_DIM},
    {"count", offsetof(Layer, count), 1, MAX_DIM},
    {"groups", offsetof(Layer, groups), 1, MAX_DIM},
    {"experts", offsetof(Layer, experts), 1, MOE_MAX_EXPERTS},
    {"top_k", offsetof(Layer, top_k), 1, RT_MOE_MAX_K},
    {"hidden", offsetof(Layer, hidden), 1, MAX_DIM},
    {"shared", offsetof(Layer, shared), 0, MAX_DIM},
    {"output_padding", offsetof(Layer, output_padding), 0, MAX_DIM},
    {"kv_heads", offsetof(Layer, kv_heads), 1, MAX_DIM},
    {"head_dim", offsetof(Layer, head_dim), 1, MAX_DIM},
    {"segments", offsetof(Layer, segments), 1, MAX_DIM},
    {"skip", offsetof(Layer, skip), 1, MAX_DIM},
    {"height", offsetof(Layer, height), 1, MAX_DIM},
};

/* A layer's true/false keys (attention's bias and qk_norm take strings too: below). */
static const struct {
    const char *key;
    size_t at;                 /* offsetof(Layer, the int field) */
} bool_keys[] = {
    {"norm_topk", offsetof(Layer, norm_topk)},
    {"shared_gate", offsetof(Layer, shared_gate)},
    {"bias", offsetof(Layer, bias)},
    {"causal", offsetof(Layer, causal)},
    {"affine", offsetof(Layer, affine)},
    {"sync", offsetof(Layer, sync)},
    {"first_sequence", offsetof(Layer, first_seq)},
};

/* A number key whose value must lie in [lo, hi], else an error saying what it
 * expected. */
static double number_in(const Ctx *c, const cJSON *v, const char *path, double lo, double hi,
                        const char *expected)
{
    char b[300];
    double x = get_number(c, v, path);
    if (!(x >= lo && x <= hi))
        error_at(c->file, path, "expected %s, got %s", expected, sp_got(v, b, sizeof b));
    return x;
}

/* Attention's keys that take more than a plain value: bias as "qkv" or "proj", qk_norm
 * as "all_heads", the scores' scale and soft-cap (null: none). 1 where key was one. */
static int parse_attention_key(const Ctx *c, Layer *l, const char *key, const cJSON *v,
                               const char *path)
{
    char b[300];
    if (!strcmp(key, "bias") && !cJSON_IsBool(v)) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "qkv") && strcmp(v->valuestring, "proj")))
            error_at(c->file, path, "expected true, false, \"qkv\" (q, k and v's biases alone) "
                     "or \"proj\" (the output projection's alone), got %s", sp_got(v, b, sizeof b));
        l->bias = 1;
        l->bias_qkv = !strcmp(v->valuestring, "qkv");
        l->bias_proj = !l->bias_qkv;
    } else if (!strcmp(key, "qk_norm") && cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "all_heads"))
            error_at(c->file, path, "expected true, false or \"all_heads\" (one RMSNorm over "
                     "all of q's heads and one over all of k's, as OLMo 2), got %s",
                     sp_got(v, b, sizeof b));
        l->qk_norm = QK_NORM_ALL_HEADS;
    } else if (!strcmp(key, "scale")) {
        l->att_scale = cJSON_IsNull(v) ? 0 : number_in(c, v, path, FLT_MIN, FLT_MAX,
            "a number > 0 within float's range (the scores' factor, 1 / sqrt(head width) "
            "when absent)");
    } else if (!strcmp(key, "softcap")) {
        l->att_softcap = cJSON_IsNull(v) ? 0 : number_in(c, v, path, FLT_MIN, FLT_MAX,
            "a number > 0 within float's range (the scores become softcap tanh(s / softcap))");
    } else
        return 0;
    return 1;
}

/* The keys whose values are numbers, choices, names or nested layers. 1 where key was
 * one. */
static int parse_other_key(const Ctx *c, Layer *l, const char *key, const cJSON *v,
                           const char *path)
{
    char b[300];
    if (!strcmp(key, "aux_loss"))
        l->aux_loss = number_in(c, v, path, 0, FLT_MAX, "a number >= 0 (the load-balancing "
                                "loss's coefficient, as transformers' router_aux_loss_coef)");
    else if (!strcmp(key, "negative_slope"))
        l->negative_slope = get_number(c, v, path);   /* any finite number, as torch's */
    else if (!strcmp(key, "by"))
        l->by = number_in(c, v, path, -FLT_MAX, FLT_MAX, "a number within float's range");
    else if (!strcmp(key, "init_value"))
        l->init_value = number_in(c, v, path, -FLT_MAX, FLT_MAX, "a number within float's range");
    else if (!strcmp(key, "drop_path")) {   /* a rate, or [first, last] over a repeat */
        int ramp = cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2;
        const cJSON *a0 = ramp ? cJSON_GetArrayItem(v, 0) : v, *a1 = ramp ? a0->next : v;
        if (!cJSON_IsNumber(a0) || !cJSON_IsNumber(a1) || !(a0->valuedouble >= 0) ||
            !(a0->valuedouble < 1) || !(a1->valuedouble >= 0) || !(a1->valuedouble < 1))
            error_at(c->file, path, "expected a number in [0, 1), or [first, last] of two, got "
                     "%s", sp_got(v, b, sizeof b));
        l->drop_path = a0->valuedouble, l->drop_path_end = a1->valuedouble;
        l->drop_path_ramp = ramp;
    } else if (!strcmp(key, "p")) {
        l->p = get_number(c, v, path);
        if (l->p < 0 || l->p >= 1)
            error_at(c->file, path, "expected a number in [0, 1), got %s", sp_got(v, b, sizeof b));
    } else if (!strcmp(key, "eps")) {
        l->eps = get_number(c, v, path);
        if (!(l->eps > 0))
            error_at(c->file, path, "expected a number > 0, got %s", sp_got(v, b, sizeof b));
    } else if (!strcmp(key, "momentum"))
        l->momentum = number_in(c, v, path, 0, 1, "a number in [0, 1]");
    else if (!strcmp(key, "qk_norm"))
        l->qk_norm = get_bool(c, v, path) ? QK_NORM_HEAD : 0;
    else if (!strcmp(key, "window"))
        l->window = cJSON_IsNull(v) ? 0 : get_int(c, v, path, 1, MAX_DIM);
    else if (!strcmp(key, "rope"))
        parse_rope(c, &l->rope, v, path);
    else if (!strcmp(key, "interleave"))
        parse_interleave(c, l, v, path);
    else if (!strcmp(key, "approximate")) {
        static const char *const modes[] = {"none", "tanh", NULL};
        l->gelu_tanh = get_choice(c, v, path, modes) == 1;
    } else if (!strcmp(key, "act"))
        l->glu_act = get_choice(c, v, path, glu_act_names);
    else if (!strcmp(key, "tie")) {
        l->tie = xstrdup(get_string(c, v, path));
        if (!is_ident(l->tie))
            error_at(c->file, path, "expected the name of an embedding layer, got %s",
                     sp_got(v, b, sizeof b));
    } else if (!strcmp(key, "body"))
        parse_body(c, &l->body, &l->n_body, v, path);
    else if (!strcmp(key, "shortcut"))
        parse_body(c, &l->shortcut, &l->n_shortcut, v, path);
    else
        return 0;
    return 1;
}

/* One key of a layer (op_info's keys for its op) into l. */
static void parse_layer_key(const Ctx *c, Layer *l, const char *key, const cJSON *v,
                            const char *path)
{
    for (size_t i = 0; i < sizeof int_keys / sizeof *int_keys; i++)
        if (!strcmp(key, int_keys[i].key)) {
            *(int64_t *)((char *)l + int_keys[i].at) =
                get_int(c, v, path, int_keys[i].lo, int_keys[i].hi);
            return;
        }
    if (l->op == OP_ATTENTION && parse_attention_key(c, l, key, v, path))
        return;
    for (size_t i = 0; i < sizeof bool_keys / sizeof *bool_keys; i++)
        if (!strcmp(key, bool_keys[i].key)) {
            *(int *)((char *)l + bool_keys[i].at) = get_bool(c, v, path);
            return;
        }
    if (!parse_other_key(c, l, key, v, path))
        die("op key '%s' of %s has no parser", key, op_info[l->op].name);
}

/* attention's keys against each other (those against the input's width are checked
 * when the graph is built: hd even with rope). */
static void check_attention_keys(const Ctx *c, const Layer *l, const cJSON *v, const char *path)
{
    if (l->kv_heads && l->heads % l->kv_heads)
        error_at(c->file, sp_keep(sp_path_key(path, "kv_heads")), "kv_heads %lld does not divide "
                 "heads %lld (each key/value head serves heads / kv_heads query heads)",
                 (long long)l->kv_heads, (long long)l->heads);
    if (sp_member(v, "eps") && l->qk_norm != QK_NORM_ALL_HEADS)
        error_at(c->file, sp_keep(sp_path_key(path, "eps")), "eps is qk_norm \"all_heads\"'s (the "
                 "per-head qk_norm's is 1e-6)");
}

/* A layer with every key's default (docs/spec.md) */
static Layer *new_layer(const char *path)
{
    Layer *l = xcalloc(1, sizeof *l);
    l->path = (char *)path;
    l->bias = 1;
    l->causal = 1;
    l->groups = 1;
    l->segments = 1;
    l->negative_slope = 0.01;   /* torch.nn.LeakyReLU's */
    l->init_value = 1e-6;       /* HF ConvNeXt's layer_scale_init_value */
    l->p = 0.5;
    l->eps = 1e-5;
    l->momentum = 0.1;
    l->affine = 1;
    l->norm_topk = 1;
    l->stride = 0;       /* filled by check_layer: 1 for conv2d, the kernel for pools */
    return l;
}

/* The layer's "op" (required, a known one), and the eps default that goes with it */
static void parse_op(const Ctx *c, Layer *l, const cJSON *v, const char *path)
{
    const cJSON *opv = sp_require(c, v, path, "op");
    char *opp = sp_path_key(path, "op");
    const char *opname = get_string(c, opv, opp);
    l->op = op_by_name(opname);
    if (l->op < 0) {
        const char *names[OP__COUNT + 1];
        for (int i = 0; i < OP__COUNT; i++)
            names[i] = op_info[i].name;
        names[OP__COUNT] = NULL;
        sp_unknown(c, opp, "op", opname, names, NULL);
    }
    free(opp);
    if (l->op == OP_RMSNORM || l->op == OP_ATTENTION)   /* attention's: qk_norm's */
        l->eps = 1e-6;   /* torch.nn.RMSNorm's and HF Llama's usual; layernorm's is 1e-5 */
}

/* A key the layer's op does not take (keys: those it takes), at kp: exit 1, saying
 * what it takes */
static void refuse_key(const Ctx *c, const Layer *l, const char *key, const char **keys,
                       const char *kp)
{
    const char *op = op_info[l->op].name;
    char *list = sp_join(keys);
    if (!strcmp(key, "init"))
        error_at(c->file, kp, "%s has no parameters to initialize (init applies to layers "
                 "with parameters, and to residual and repeat, which pass it to their body)", op);
    if (names_input_size(key, keys) && takes_init(l->op) &&
        op_info[l->op].cls != OPC_CONTAINER && l->op != OP_EMBEDDING)
        error_at(c->file, kp, "unknown key '%s'; %s takes its input's size from the layer "
                 "before: remove the key (%s takes %s)", sp_show(key), op, op, list);
    char *hint = sp_keep(xasprintf("%s takes %s", op, list));
    sp_unknown(c, kp, "key", key, keys, hint);
}

/* One key of the layer's object (a key its op takes) */
static void parse_layer_entry(const Ctx *c, Layer *l, const cJSON *ch, const char *kp)
{
    if (!strcmp(ch->string, "op")) {
    } else if (!strcmp(ch->string, "name")) {
        const char *name = get_string(c, ch, kp);
        if (!is_ident(name))
            error_at(c->file, kp, "expected a name of letters, digits and '_', not starting "
                     "with a digit, got \"%s\"", sp_show(name));
        l->name = xstrdup(name);
    } else if (!strcmp(ch->string, "input")) {
        l->input = c->s->inputs[get_input_ref(c, ch, kp)].name;
    } else if (!strcmp(ch->string, "init")) {
        parse_init(c, ch, kp, &l->init);
        l->has_init = 1;
    } else {
        parse_layer_key(c, l, ch->string, ch, kp);
    }
}

/* What the layer's keys must say together: the op's required keys, an init with
 * something to initialize, attention's and moe's combinations; then the stride's
 * default */
static void check_layer(const Ctx *c, Layer *l, const cJSON *v, const char *path)
{
    char req[64];
    snprintf(req, sizeof req, "%s", op_info[l->op].required);
    for (char *k = strtok(req, " "); k; k = strtok(NULL, " "))
        if (!sp_member(v, k) && !(l->op == OP_LINEAR && l->tie))
            error_at(c->file, path, "missing key '%s' (%s needs %s)", k, op_info[l->op].name,
                     op_info[l->op].required);
    if (l->has_init && l->op == OP_LINEAR && l->tie && !l->bias) {
        char *ip = sp_keep(sp_path_key(path, "init"));
        error_at(c->file, ip, "this linear has no parameters of its own to initialize (its "
                 "weight is that of the embedding '%s', and it has no bias)", l->tie);
    }
    if (l->op == OP_ATTENTION)
        check_attention_keys(c, l, v, path);
    if (l->op == OP_MOE && l->top_k > l->experts)
        error_at(c->file, sp_keep(sp_path_key(path, "top_k")), "top_k %lld is more than the %lld "
                 "experts (each token goes to top_k of them)", (long long)l->top_k,
                 (long long)l->experts);
    if (l->op == OP_MOE && l->shared_gate && !l->shared)
        error_at(c->file, sp_keep(sp_path_key(path, "shared_gate")), "shared_gate gates the shared "
                 "expert: give its hidden width as \"shared\"");
    if (!l->stride)
        l->stride = l->op == OP_MAXPOOL2D || l->op == OP_AVGPOOL2D ? l->kernel : 1;
}

static Layer *parse_layer(const Ctx *c, const cJSON *v, const char *path)
{
    sp_need_object(c, v, path, "a layer object {\"op\": ...}");
    Layer *l = new_layer(path);
    parse_op(c, l, v, path);
    const char **keys = layer_keys(l->op);
    const cJSON *ch;
    cJSON_ArrayForEach(ch, v) {
        char *kp = sp_path_key(path, ch->string);
        if (!sp_in_list(ch->string, keys))
            refuse_key(c, l, ch->string, keys, kp);
        parse_layer_entry(c, l, ch, kp);
        free(kp);
    }
    check_layer(c, l, v, path);
    return l;
}

/* ---- layer and parameter names (docs/spec.md) ------------------------- */

typedef struct PName {
    char *name;
    const Layer *layer;
    int order;
    int param;                 /* a parameter's name, else a layer's */
} PName;

typedef struct PNames {
    PName *v;
    int n, cap;
} PNames;

/* Parameter tensors a layer owns, as suffixes of its name (its op file says). */
static int layer_params(const Layer *l, const char **out)
{
    const OpDef *d = op_defs[l->op];
    return d->params ? d->params(l, out) : 0;
}

/* Parameter tensors (layers: 0) or layers (1) in a list of layers with repeats
 * expanded, saturating at limit + 1. */
static int64_t count_expanded(Layer **ls, int n, int layers, int64_t limit)
{
    int64_t total = 0;
    const char *names[8];
    for (int i = 0; i < n && total <= limit; i++) {
        const Layer *l = ls[i];
        int64_t t = layers ? 1 : layer_params(l, names);
        if (l->op == OP_RESIDUAL)
            t += count_expanded(l->body, l->n_body, layers, limit) +
                 count_expanded(l->shortcut, l->n_shortcut, layers, limit);
        else if (l->op == OP_REPEAT) {
            int64_t b = count_expanded(l->body, l->n_body, layers, limit);
            t += b && l->count > limit / b ? limit + 1 : b * l->count;
        }
        total += t;
    }
    return total > limit ? limit + 1 : total;
}

static void add_pname(PNames *p, char *name, const Layer *l, int param)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        PName *v = xcalloc((size_t)p->cap, sizeof *v);
        if (p->n)
            memcpy(v, p->v, (size_t)p->n * sizeof *v);
        free(p->v);
        p->v = v;
    }
    p->v[p->n] = (PName){name, l, p->n, param};
    p->n++;
}

/* Names per docs/spec.md: named containers add their name, unnamed ones
 * nothing; repeat adds the iteration index; a layer ends with its name or index. Every
 * layer's full name goes in (an unnamed container has none), then its parameters'. */
static void collect_names(PNames *p, Layer **ls, int n, const char *prefix)
{
    const char *suffixes[8];
    for (int i = 0; i < n; i++) {
        const Layer *l = ls[i];
        char *full = l->name ? xasprintf("%s%s", prefix, l->name)
                             : xasprintf("%s%d", prefix, i);
        if (l->op == OP_RESIDUAL || l->op == OP_REPEAT) {
            char *inner = l->name ? xasprintf("%s.", full) : xstrdup(prefix);
            if (l->name)
                add_pname(p, full, l, 0);
            else
                free(full);
            if (l->op == OP_RESIDUAL) {
                collect_names(p, l->body, l->n_body, inner);
                char *sc = xasprintf("%sshortcut.", inner);   /* graph.c names them so */
                collect_names(p, l->shortcut, l->n_shortcut, sc);
                free(sc);
            } else
                for (int64_t it = 0; it < l->count; it++) {
                    char *iter = xasprintf("%s%lld.", inner, (long long)it);
                    collect_names(p, l->body, l->n_body, iter);
                    free(iter);
                }
            free(inner);
            continue;
        }
        int k = layer_params(l, suffixes);
        for (int j = 0; j < k; j++)
            add_pname(p, xasprintf("%s.%s", full, suffixes[j]), l, 1);
        /* a name nothing is called by (an unnamed layer without parameters: the gelu
         * and the dropout at index 2 of a GPT block's two unnamed residuals) cannot
         * clash with anything a user or a weights file sees */
        if (l->name || k > 0)
            add_pname(p, full, l, 0);
        else
            free(full);
    }
}

static int cmp_pname(const void *a, const void *b)
{
    const PName *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->order - y->order;
}

/* Two layers that end with the same name are an error that says to name one
 * (docs/spec.md, Parameter names): any two named layers or layers with parameters with
 * the same full name (repeat's iterations differ by their index), and any two
 * parameters with the same name. */
static void check_names(const Ctx *c)
{
    Spec *s = c->s;
    if (count_expanded(s->layers, s->n_layers, 0, MAX_TENSORS) > MAX_TENSORS)
        error_at(c->file, "$.model.layers", "more than %d parameter tensors (after "
                 "expanding repeat); this is surely a mistake", MAX_TENSORS);
    if (count_expanded(s->layers, s->n_layers, 1, MAX_LAYERS) > MAX_LAYERS)
        error_at(c->file, "$.model.layers", "more than %d layers (after expanding repeat); "
                 "this is surely a mistake", MAX_LAYERS);
    if (s->gan && count_expanded(s->disc, s->n_disc, 0, MAX_TENSORS) > MAX_TENSORS)
        error_at(c->file, "$.model.gan.discriminator", "more than %d parameter tensors "
                 "(after expanding repeat); this is surely a mistake", MAX_TENSORS);
    PNames p = {0};
    /* a GAN's parameters are generator.NAME and discriminator.NAME */
    collect_names(&p, s->layers, s->n_layers, s->gan ? "generator." : "");
    if (s->gan)
        collect_names(&p, s->disc, s->n_disc, "discriminator.");
    if (p.n > 1)   /* (none: p.v is NULL, which qsort may not be given) */
        qsort(p.v, (size_t)p.n, sizeof *p.v, cmp_pname);
    /* report the clash whose second layer comes first in the file */
    const PName *first = NULL, *second = NULL;
    for (int i = 1; i < p.n; i++)
        if (!strcmp(p.v[i].name, p.v[i - 1].name) && p.v[i].layer != p.v[i - 1].layer &&
            (!second || p.v[i].order < second->order)) {
            first = &p.v[i - 1];
            second = &p.v[i];
        }
    if (second)
        error_at(c->file, second->layer->path, "%s name '%s' is also used by the layer at %s; "
                 "give one of them a (different) \"name\"",
                 second->param && first->param ? "parameter" : "layer", second->name,
                 first->layer->path);
    for (int i = 0; i < p.n; i++)
        free(p.v[i].name);
    free(p.v);
}

/* ---- ties -------------------------------------------------------------------- */

static const Layer *find_named(Layer **ls, int n, const char *name, int in_repeat,
                               int *found_in_repeat)
{
    for (int i = 0; i < n; i++) {
        if (ls[i]->name && !strcmp(ls[i]->name, name)) {
            *found_in_repeat = in_repeat;
            return ls[i];
        }
        if (ls[i]->body) {
            const Layer *l = find_named(ls[i]->body, ls[i]->n_body, name,
                                        in_repeat || ls[i]->op == OP_REPEAT, found_in_repeat);
            if (l)
                return l;
        }
    }
    return NULL;
}

/* The ties of layers ls[0 .. n), each naming an embedding of its network's layers
 * (root: the model's, or a GAN generator's or discriminator's). */
static void check_ties(const Ctx *c, Layer **ls, int n, Layer **root, int n_root)
{
    for (int i = 0; i < n; i++) {
        Layer *l = ls[i];
        if (l->body)
            check_ties(c, l->body, l->n_body, root, n_root);
        if (l->shortcut)
            check_ties(c, l->shortcut, l->n_shortcut, root, n_root);
        if (!l->tie)
            continue;
        char *tp = sp_path_key(l->path, "tie");
        int in_repeat = 0;
        const Layer *e = find_named(root, n_root, l->tie, 0, &in_repeat);
        if (!e)
            error_at(c->file, tp, "no layer is named '%s' (tie names an embedding layer)",
                     l->tie);
        if (e->op != OP_EMBEDDING)
            error_at(c->file, tp, "'%s' is a %s; tie needs an embedding", l->tie,
                     op_info[e->op].name);
        if (in_repeat)
            error_at(c->file, tp, "embedding '%s' is inside a repeat; tie needs a single "
                     "embedding", l->tie);
        if (l->out && l->out != e->vocab)
            error_at(c->file, l->path, "out %lld differs from the vocab %lld of the tied "
                     "embedding '%s'", (long long)l->out, (long long)e->vocab, l->tie);
        l->out = e->vocab;
        free(tp);
    }
}

/* $.model.loss.label_smoothing: F.cross_entropy's, a number in [0, 1] (0: none) */
static void parse_label_smoothing(const Ctx *c, Spec *s, const cJSON *loss)
{
    const char *path = "$.model.loss.label_smoothing";
    const cJSON *v = sp_member(loss, "label_smoothing");
    char b[300];
    if (!v)
        return;
    if (s->loss != LOSS_CROSS_ENTROPY && (s->loss != LOSS_DPO || s->pref != PREF_DPO))
        error_at(c->file, path, "label_smoothing applies to cross_entropy and dpo alone");
    s->label_smoothing = get_number(c, v, path);
    double ls = s->label_smoothing;
    if (s->loss == LOSS_DPO && !(ls >= 0 && ls < 0.5))   /* (the chance a pair's labels flipped) */
        error_at(c->file, path, "expected a number in [0, 0.5), got %s", sp_got(v, b, sizeof b));
    if (!(ls >= 0 && ls <= 1))
        error_at(c->file, path, "expected a number in [0, 1], got %s", sp_got(v, b, sizeof b));
}

/* $.model.loss.ignore_index: F.cross_entropy's, an integer (no default: every target
 * counts); targets equal to it add no loss term and no gradient */
static void parse_ignore_index(const Ctx *c, Spec *s, const cJSON *loss)
{
    const char *path = "$.model.loss.ignore_index";
    const cJSON *v = sp_member(loss, "ignore_index");
    if (s->loss == LOSS_DPO) {   /* (TRL's label_pad_token_id) */
        s->has_ignore = 1;
        s->ignore_index = -100;
    }
    if (!v)
        return;
    if (s->loss != LOSS_CROSS_ENTROPY && s->loss != LOSS_DPO)
        error_at(c->file, path, "ignore_index applies to cross_entropy and the preference losses "
                 "(dpo, ipo, simpo, orpo, kto, cpo), not mse");
    s->has_ignore = 1;
    s->ignore_index = (int32_t)get_int(c, v, path, INT32_MIN, INT32_MAX);
}

/* orpo's sft_target: an integer input other than the first and the target, of rank 1 (its
 * length, half the logits' rows, is checked with the graph: ops/loss.c) */
static void parse_sft_target(const Ctx *c, Spec *s, const cJSON *v, int target)
{
    const char *path = "$.model.loss.sft_target";
    if (s->loss != LOSS_DPO || s->pref != PREF_ORPO)
        error_at(c->file, path, "applies to orpo alone (its supervised term's targets)");
    int k = get_input_ref(c, v, path);
    const InputSpec *in = &s->inputs[k];
    if (k == 0 || k == target || in->dtype == RT_F32 || in->rank != 1 || in->has_scale ||
        in->has_shift)
        error_at(c->file, in->path, "orpo's sft_target '%s' holds the chosen text's next ids "
                 "(prompt and answer; -100 elsewhere): an integer input of shape [T] without "
                 "scale or shift, not the first input or the target (trainc data pairs writes "
                 "it)", in->name);
    s->sft_target = in->name;
}

/* simpo's keys: beta (2.0, > 0), gamma (1.0, >= 0), the SimPO paper's (gamma / beta
 * 0.5), and cpo_alpha (0, >= 0: TRL's CPO-SimPO); orpo's: beta (0.1, > 0: the ORPO
 * paper's lambda, TRL's ORPOConfig's beta); cpo's: beta (0.1) and cpo_alpha (1.0, TRL's
 * CPOConfig's); none has a reference */
static void parse_no_reference(const Ctx *c, Spec *s, const cJSON *loss)
{
    const cJSON *b = sp_member(loss, "beta"), *g = sp_member(loss, "gamma");
    const cJSON *a = sp_member(loss, "cpo_alpha");
    const char *op = pref_names[s->pref];
    int simpo = s->pref == PREF_SIMPO, cpo = s->pref == PREF_CPO;
    if (sp_member(loss, "reference"))
        error_at(c->file, "$.model.loss.reference", "%s has no reference model (dpo has)", op);
    if (g && !simpo)
        error_at(c->file, "$.model.loss.gamma", "applies to simpo (%s has none)", op);
    if (a && !simpo && !cpo)
        error_at(c->file, "$.model.loss.cpo_alpha", "applies to cpo and simpo (%s has none)", op);
    s->dpo_beta = b ? number_in(c, b, "$.model.loss.beta", FLT_MIN, FLT_MAX,
                                simpo ? "a number > 0 (SimPO's beta, 2.0 by default)"
                                : cpo ? "a number > 0 (CPO's beta, 0.1 by default)"
                                      : "a number > 0 (ORPO's lambda, 0.1 by default)")
                    : simpo ? 2.0 : 0.1;
    s->cpo_alpha = a ? number_in(c, a, "$.model.loss.cpo_alpha", 0, FLT_MAX,
                                 "a number >= 0 (the chosen answers' cross entropy's weight)")
                     : cpo ? 1.0 : 0.0;
    if (simpo)
        s->simpo_gamma = g ? number_in(c, g, "$.model.loss.gamma", 0, FLT_MAX,
                                       "a number >= 0 (SimPO's target margin, 1.0 by default)")
                           : 1.0;
}

/* kto's keys beside dpo's: label, an integer input [] (1: the row's completion is
 * desirable, 0: it is not), desirable_weight and undesirable_weight (1.0, > 0: TRL's
 * KTOConfig's); on another loss they are errors */
static void parse_kto(const Ctx *c, Spec *s, const cJSON *loss, int target)
{
    static const char *const keys[] = {"label", "desirable_weight", "undesirable_weight"};
    const char *path = "$.model.loss.label";
    for (int i = 0; s->pref != PREF_KTO && i < 3; i++)
        if (sp_member(loss, keys[i]))
            error_at(c->file, xasprintf("$.model.loss.%s", keys[i]), "applies to kto alone");
    if (s->loss != LOSS_DPO || s->pref != PREF_KTO)
        return;
    int k = get_input_ref(c, sp_require(c, loss, "$.model.loss", "label"), path);
    const InputSpec *in = &s->inputs[k];
    if (k == 0 || k == target || in->dtype == RT_F32 || in->rank != 0 || in->has_scale ||
        in->has_shift || (in->classes && in->classes != 2))
        error_at(c->file, in->path, "kto's label '%s' says whether each row's completion is "
                 "desirable (1) or not (0): an integer input of shape [] (classes 2, if given), "
                 "not the first input or the target (trainc data pairs writes it)", in->name);
    s->kto_label = in->name;
    for (int i = 0; i < 2; i++) {
        const cJSON *w = sp_member(loss, keys[1 + i]);
        s->kto_weights[i] = w ? number_in(c, w, xasprintf("$.model.loss.%s", keys[1 + i]),
                                          FLT_MIN, FLT_MAX, "a number > 0 (1.0 by default)")
                              : 1.0;
    }
}

/* dpo's keys: beta (0.1, > 0) and reference, an f32 input [2] not otherwise read (the
 * reference model's summed log-probabilities of each pair's two answers); ipo's and kto's
 * the same (kto's other keys: parse_kto); simpo's and orpo's (parse_no_reference); beta,
 * gamma and reference on another loss are errors */
static void parse_dpo(const Ctx *c, Spec *s, const cJSON *loss, int target)
{
    const cJSON *b = sp_member(loss, "beta"), *ref = sp_member(loss, "reference");
    const cJSON *g = sp_member(loss, "gamma");
    if (s->loss != LOSS_DPO) {
        if (b || ref || g)
            error_at(c->file, b ? "$.model.loss.beta" : ref ? "$.model.loss.reference"
                                                           : "$.model.loss.gamma",
                     "applies to the dpo, ipo, simpo, orpo, kto and cpo losses alone");
        if (sp_member(loss, "rpo_alpha"))
            error_at(c->file, "$.model.loss.rpo_alpha", "applies to the dpo loss alone");
        if (sp_member(loss, "cpo_alpha"))
            error_at(c->file, "$.model.loss.cpo_alpha", "applies to the cpo and simpo losses alone");
        return;
    }
    if (!PREF_HAS_REFERENCE(s->pref)) {
        parse_no_reference(c, s, loss);
        return;
    }
    if (g)
        error_at(c->file, "$.model.loss.gamma", "applies to simpo (%s has none)",
                 pref_names[s->pref]);
    if (sp_member(loss, "cpo_alpha"))
        error_at(c->file, "$.model.loss.cpo_alpha", "applies to cpo and simpo (%s has none)",
                 pref_names[s->pref]);
    const cJSON *rpo = sp_member(loss, "rpo_alpha");
    if (rpo && s->pref != PREF_DPO)
        error_at(c->file, "$.model.loss.rpo_alpha", "applies to dpo alone (%s has none)",
                 pref_names[s->pref]);
    s->rpo_alpha = rpo ? number_in(c, rpo, "$.model.loss.rpo_alpha", 0, FLT_MAX,
                                   "a number >= 0 (RPO's weight of the chosen answers' cross "
                                   "entropy; 0, none, by default)")
                       : 0.0;
    s->dpo_beta = b ? number_in(c, b, "$.model.loss.beta", FLT_MIN, FLT_MAX,
                                "a number > 0 (DPO's beta, 0.1 by default)")
                    : 0.1;
    int k = get_input_ref(c, sp_require(c, loss, "$.model.loss", "reference"),
                          "$.model.loss.reference");
    const InputSpec *in = &s->inputs[k];
    if (k == 0 || k == target || in->dtype != RT_F32 || in->rank != 1 || in->shape[0] != 2 ||
        in->classes || in->has_scale || in->has_shift)
        error_at(c->file, in->path, "%s's reference input '%s' holds the reference model's "
                 "log-probabilities of a row's two answers: an f32 input of "
                 "shape [2] without classes, scale or shift, not the first input or the target "
                 "(trainc run --reference writes it)", pref_names[s->pref], in->name);
    s->reference = in->name;
}

/* A non-empty array of layers at path into *out. */
static void parse_layer_list(const Ctx *c, const cJSON *v, const char *path, Layer ***out, int *n)
{
    char b[300];
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        error_at(c->file, path, "expected a non-empty array of layers, got %s",
                 cJSON_IsArray(v) ? "[]" : sp_got(v, b, sizeof b));
    *n = cJSON_GetArraySize(v);
    *out = xcalloc((size_t)*n, sizeof **out);
    int i = 0;
    const cJSON *ch;
    cJSON_ArrayForEach(ch, v) {
        (*out)[i] = parse_layer(c, ch, path_index(path, i));
        i++;
    }
}

/* $.model.gan.latent: {"shape": [...], "input": null or a model input's name}. */
static void parse_latent(const Ctx *c, const cJSON *v)
{
    Spec *s = c->s;
    const char *lp = "$.model.gan.latent";
    static const char *const keys[] = {"shape", "input", NULL};
    sp_need_object(c, v, lp, "an object {\"shape\": [...], \"input\": null}");
    sp_check_keys(c, v, lp, keys);
    const cJSON *shape = sp_require(c, v, lp, "shape");
    char b[300];
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) < 1 ||
        cJSON_GetArraySize(shape) > RT_MAX_RANK)
        error_at(c->file, "$.model.gan.latent.shape", "expected an array of 1 to %d sizes, "
                 "got %s", RT_MAX_RANK, sp_got(shape, b, sizeof b));
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        char *dp = path_index("$.model.gan.latent.shape", s->latent_rank);
        s->latent_shape[s->latent_rank++] = get_int(c, d, dp, 1, MAX_DIM);
        free(dp);
    }
    s->latent_input = -1;
    const cJSON *in = sp_member(v, "input");
    if (!in || cJSON_IsNull(in))
        return;
    const char *ip = "$.model.gan.latent.input";
    s->latent_input = get_input_ref(c, in, ip);
    const InputSpec *z = &s->inputs[s->latent_input];
    if (z->rank != s->latent_rank ||
        memcmp(z->shape, s->latent_shape, sizeof(int64_t) * (size_t)z->rank))
        error_at(c->file, ip, "input '%s' has shape %s, the latent shape is %s", z->name,
                 shape_str(z->rank, z->shape), shape_str(s->latent_rank, s->latent_shape));
    if (z->dtype != RT_F32)
        error_at(c->file, ip, "input '%s' is %s; latent vectors are f32", z->name,
                 rt_dtype_name(z->dtype));
}

/* $.model.gan (docs/spec.md, "GANs"): the generator's layers go into s->layers, the
 * discriminator's into s->disc; the real samples are the one other input. */
static void parse_gan(const Ctx *c, const cJSON *v)
{
    Spec *s = c->s;
    const char *gp = "$.model.gan";
    static const char *const keys[] = {"latent", "generator", "discriminator", "loss", NULL};
    static const char *const losses[] = {"bce", "hinge", NULL};
    sp_need_object(c, v, gp, "an object {\"latent\", \"generator\", \"discriminator\", "
                   "\"loss\"}");
    sp_check_keys(c, v, gp, keys);
    s->gan = 1;
    parse_latent(c, sp_require(c, v, gp, "latent"));
    parse_layer_list(c, sp_require(c, v, gp, "generator"), "$.model.gan.generator", &s->layers,
                     &s->n_layers);
    parse_layer_list(c, sp_require(c, v, gp, "discriminator"), "$.model.gan.discriminator",
                     &s->disc, &s->n_disc);
    s->loss = get_choice(c, sp_require(c, v, gp, "loss"), "$.model.gan.loss", losses) == 0
                  ? LOSS_GAN_BCE : LOSS_GAN_HINGE;
    s->loss_target = "";
    s->real_input = -1;
    for (int k = 0; k < s->n_inputs; k++) {
        if (k == s->latent_input)
            continue;
        if (s->real_input >= 0)
            error_at(c->file, s->inputs[k].path, "a GAN reads one input of real samples "
                     "('%s') besides the latent one; '%s' is read by nothing",
                     s->inputs[s->real_input].name, s->inputs[k].name);
        s->real_input = k;
    }
    if (s->real_input < 0)
        error_at(c->file, "$.model.inputs", "a GAN needs an input of real samples besides "
                 "the latent one");
    for (int i = 0; i < s->n_layers + s->n_disc; i++) {
        const Layer *l = i < s->n_layers ? s->layers[i] : s->disc[i - s->n_layers];
        if (l->input)
            error_at(c->file, l->path, "a GAN's layers read their network's input: "
                     "\"input\" is for models with \"layers\"");
    }
}

/* dpo's loss_type (DPO_*; TRL's): "sigmoid" by default; label_smoothing goes with the
 * sigmoid and robust alone */
static void parse_dpo_type(const Ctx *c, Spec *s, const cJSON *loss)
{
    const char *path = "$.model.loss.loss_type";
    const cJSON *v = sp_member(loss, "loss_type");
    if (!v)
        return;
    if (s->loss != LOSS_DPO || s->pref != PREF_DPO)
        error_at(c->file, path, "applies to the dpo loss alone");
    s->dpo_type = get_choice(c, v, path, dpo_type_names);
    if (s->label_smoothing > 0 && s->dpo_type != DPO_SIGMOID && s->dpo_type != DPO_ROBUST)
        error_at(c->file, "$.model.loss.label_smoothing", "applies to dpo's loss_type sigmoid "
                 "and robust alone (%s has none)", dpo_type_names[s->dpo_type]);
}

/* $.model.layers and $.model.loss. */
static void parse_layers_loss(const Ctx *c, const cJSON *m)
{
    Spec *s = c->s;
    const char *mp = "$.model";
    parse_layer_list(c, sp_require(c, m, mp, "layers"), "$.model.layers", &s->layers, &s->n_layers);
    const cJSON *loss = sp_require(c, m, mp, "loss");
    static const char *const loss_keys[] = {"op", "target", "label_smoothing", "ignore_index",
                                            "beta", "reference", "gamma", "sft_target", "label",
                                            "desirable_weight", "undesirable_weight",
                                            "rpo_alpha", "cpo_alpha", "loss_type", NULL};
    static const char *const losses[] = {"cross_entropy", "mse", "dpo", "simpo", "ipo", "orpo",
                                         "kto", "cpo", NULL};
    static const int kinds[] = {LOSS_CROSS_ENTROPY, LOSS_MSE, LOSS_DPO, LOSS_DPO, LOSS_DPO,
                                LOSS_DPO, LOSS_DPO, LOSS_DPO};
    sp_need_object(c, loss, "$.model.loss", "an object {\"op\": ..., \"target\": ...}");
    sp_check_keys(c, loss, "$.model.loss", loss_keys);
    int op = get_choice(c, sp_require(c, loss, "$.model.loss", "op"), "$.model.loss.op", losses);
    s->loss = kinds[op];
    s->pref = s->loss == LOSS_DPO ? op - 2 : PREF_DPO;   /* (losses[] in PREF_* order) */
    int t = get_input_ref(c, sp_require(c, loss, "$.model.loss", "target"),
                          "$.model.loss.target");
    s->loss_target = s->inputs[t].name;
    parse_label_smoothing(c, s, loss);
    parse_ignore_index(c, s, loss);
    parse_dpo(c, s, loss, t);
    parse_dpo_type(c, s, loss);
    if (sp_member(loss, "sft_target"))
        parse_sft_target(c, s, sp_member(loss, "sft_target"), t);
    parse_kto(c, s, loss, t);
    const char *opn = losses[op];
    if (s->loss != LOSS_MSE && s->inputs[t].dtype == RT_F32)
        error_at(c->file, "$.model.loss.target", "%s needs an integer target (u8, u16 or i32); "
                 "input '%s' is f32", opn, s->loss_target);
    /* docs/spec.md: an integer target carries classes, which the data's labels are checked
     * against before training (else a bad label fails mid-run) */
    if (s->loss != LOSS_MSE && !s->inputs[t].classes)
        error_at(c->file, s->inputs[t].path, "missing key 'classes': a %s target needs its "
                 "number of classes (the logits' width), e.g. \"classes\": 10, to check the "
                 "labels against", opn);
}

/* $.model.positions (an extension): the integer input [T] holding each token's position
 * in its sequence of a packed row; the attention layers cut their mask there (graph.c
 * checks T against theirs), the data each position against its place (the loader). */
static void parse_positions(const Ctx *c, const cJSON *m)
{
    Spec *s = c->s;
    const cJSON *v = sp_member(m, "positions");
    if (!v)
        return;
    const char *at = "$.model.positions";
    if (s->gan)
        error_at(c->file, at, "a GAN has no attention to cut: \"positions\" is for models "
                 "with \"layers\"");
    int k = get_input_ref(c, v, at);
    const InputSpec *in = &s->inputs[k];
    if (!strcmp(in->name, s->loss_target) || k == 0)
        error_at(c->file, at, "input '%s' is %s; the positions need an input of their own, "
                 "after the tokens", in->name, k ? "the loss's target" : "the first input (the "
                 "first layer's)");
    if (in->dtype == RT_F32 || in->rank != 1 || in->classes || in->has_scale || in->has_shift)
        error_at(c->file, in->path, "the positions input '%s' holds a token's position in its "
                 "sequence: an integer input of shape [T] (u8, u16 or i32) without classes, "
                 "scale or shift", in->name);
    s->positions = in->name;
}

static void parse_model(const Ctx *c, const cJSON *m)
{
    Spec *s = c->s;
    const char *mp = "$.model";
    static const char *const keys[] = {"name",  "inputs", "layers",    "loss",
                                       "gan",   "init",   "positions", NULL};
    sp_need_object(c, m, mp, "an object");
    sp_check_keys(c, m, mp, keys);

    const cJSON *name = sp_require(c, m, mp, "name");
    s->name = (char *)get_string(c, name, "$.model.name");
    size_t len = strlen(s->name), ok = strspn(s->name, "abcdefghijklmnopqrstuvwxyz"
                                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-");
    if (len == 0 || ok != len || strspn(s->name, ".") == len || len > 100)
        error_at(c->file, "$.model.name", "expected a name of letters, digits, '_', '.' "
                 "and '-' (it names the run folder), got \"%s\"", sp_show(s->name));

    parse_inputs(c, sp_require(c, m, mp, "inputs"), "$.model.inputs");
    const cJSON *gan = sp_member(m, "gan");
    if (gan) {
        const char *both = sp_member(m, "layers") ? "layers" : sp_member(m, "loss") ? "loss" : NULL;
        if (both)
            error_at(c->file, xasprintf("$.model.%s", both), "a model with \"gan\" has no "
                     "\"%s\": the generator and discriminator are its layers, gan.loss "
                     "its loss", both);
        parse_gan(c, gan);
    } else
        parse_layers_loss(c, m);

    parse_positions(c, m);
    const cJSON *init = sp_member(m, "init");
    if (init) {
        parse_init(c, init, "$.model.init", &s->init);
        s->has_init = 1;
    }
    check_ties(c, s->layers, s->n_layers, s->layers, s->n_layers);
    if (s->gan)
        check_ties(c, s->disc, s->n_disc, s->disc, s->n_disc);
    check_names(c);
}

/* ---- the entry points --------------------------------------------------------- */

static void check_top(const char *file, const cJSON *doc)
{
    static const char *const keys[] = {"trainc", "model", "train", NULL};
    Ctx c = {file, NULL, NULL};
    sp_need_object(&c, doc, "$", "an object {\"model\": ..., \"train\": ...}");
    sp_check_keys(&c, doc, "$", keys);
    const cJSON *v = sp_member(doc, "trainc");
    if (v) {
        char b[300];
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
            error_at(file, "$.trainc", "expected the spec version 1, got %s",
                     sp_got(v, b, sizeof b));
        if (v->valuedouble != 1)
            error_at(file, "$.trainc", "unsupported spec version %s; this trainc reads "
                     "version 1", sp_got(v, b, sizeof b));
    }
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return xstrdup(".");
    if (slash == path)
        return xstrdup("/");
    return xasprintf("%.*s", (int)(slash - path), path);
}

Spec *spec_load(int nfiles, char **files)
{
    if (nfiles < 1 || nfiles > 2)
        error_input("expected one spec file (with \"model\" and \"train\") or two (the model "
                    "spec, then the training spec), got %d", nfiles);
    Canon *canon = xcalloc(1, sizeof *canon);
    for (int i = 0; i < nfiles; i++) {
        size_t len;
        char *text = spec_read_file(files[i], &len);
        canon->docs[i] = spec_parse_json(files[i], text, len);
        free(text);
        check_duplicates(files[i], canon->docs[i], "$");
        check_top(files[i], canon->docs[i]);
    }
    Spec *s = xcalloc(1, sizeof *s);
    canon->s = s;
    canon->next = canons;
    canons = canon;

    const cJSON *model = sp_member(canon->docs[0], "model");
    const cJSON *train = sp_member(canon->docs[nfiles - 1], "train");
    if (!model)
        error_at(files[0], "$", nfiles == 1 ? "missing key 'model'"
                                            : "missing key 'model' (the first file is the "
                                              "model spec)");
    if (!train)
        error_at(files[nfiles - 1], "$", nfiles == 1
                 ? "missing key 'train' (give the training spec here or as a second file)"
                 : "missing key 'train' (the second file is the training spec)");
    if (nfiles == 2 && sp_member(canon->docs[0], "train"))
        error_at(files[0], "$.train", "the first file is the model spec; give \"train\" in "
                 "the second file only");
    if (nfiles == 2 && sp_member(canon->docs[1], "model"))
        error_at(files[1], "$.model", "the second file is the training spec; give \"model\" "
                 "in the first file only");

    s->model_file = xstrdup(files[0]);
    s->train_file = xstrdup(files[nfiles - 1]);
    s->data_dir = dir_of(path_canonical(s->train_file)); /* emit's bytes: not the spelling */
    KeyPaths keys = {0};
    Ctx c = {s->model_file, s, &keys};
    parse_model(&c, model);
    c.file = s->train_file;
    parse_train(&c, train);
    canon->model_json = cJSON_PrintUnformatted(model);
    if (!canon->model_json)
        die("out of memory");
    spec_finish(s);
    return s;
}

void spec_set(Spec *s, const char *assignment)
{
    char err[512];
    if (rt_config_set_arg(&s->train, assignment, err, sizeof err))
        error_input("%s", err);
}

void spec_sets_done(Spec *s)
{
    /* a value can be fine alone and wrong with the rest (nesterov without momentum):
     * checked once all of them are in, so their order does not matter */
    char err[512];
    char key[256] = "", path[300];
    if (check_train_vs_model(s, err, sizeof err, key, sizeof key) ||
        rt_config_check(&s->train, err, sizeof err, key, sizeof key)) {
        /* the place as for a value in the spec file: the key the rule blames */
        snprintf(path, sizeof path, "$.train%s%s", key[0] ? "." : "", key);
        error_at(s->train_file, path, "%s", err);
    }
    spec_finish(s);
}

static uint64_t fnv1a(uint64_t h, const char *p)
{
    for (; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 0x100000001b3ull;
    }
    return h;
}

void spec_finish(Spec *s)
{
    for (int i = 0; i < s->n_train_lines; i++)
        free(s->train_lines[i]);
    free(s->train_lines);
    s->train_lines = rt_config_dump(&s->train, &s->n_train_lines);

    const char *model_json = "";
    for (const Canon *c = canons; c; c = c->next)
        if (c->s == s && c->model_json)
            model_json = c->model_json;
    uint64_t h = fnv1a(0xcbf29ce484222325ull, model_json);
    snprintf(s->model_hash, sizeof s->model_hash, "%016llx", (unsigned long long)h);
    for (int i = 0; i < s->n_train_lines; i++) {
        h = fnv1a(h, s->train_lines[i]);
        h = fnv1a(h, "\n");
    }
    snprintf(s->hash, sizeof s->hash, "%016llx", (unsigned long long)h);
}
