/* data_classify.c: `trainc data classify FILE.jsonl DIR --tokenizer TOK.json --model
 * MODEL.json [--val FILE.jsonl | --val-frac F] [--text KEY] [--pair KEY] [--label KEY]`:
 * a text classifier's examples, one JSON object a line with a text (and a second text,
 * for pairs) and a label, as the padded rows an imported BERT or RoBERTa trains on
 * (hf_bert.c's inputs):
 *   DIR/train_x.npy     [N, T] i32  the ids of Tokenizer.encode(text[, pair]) with its
 *                                   special tokens, cut to T as transformers' tokenizer
 *                                   cuts with truncation=True (longest first), then padding
 *   DIR/train_types.npy [N, T] i32  their type ids (0 for the padding), where the model
 *                                   has a "types" input
 *   DIR/train_pos.npy   [N, T] i32  0 .. L-1 over the L ids, then 0 .. T-L-1 over the
 *                                   padding: a sequence of its own, which no text token sees
 *   DIR/train_y.npy     [N]    i32  the class: a label's index among the model's names, or
 *                                   the integer the line gives
 * and DIR/val_*.npy from --val's file, or the last F of FILE's examples (0.1; none with 0).
 * T, the classes and their names come from MODEL.json (an import's model.json).
 * The rows are streamed to NAME.part files that become NAME once all are complete. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "../runtime/tokenizer.h"

static const char cls_usage[] =
    "usage: trainc data classify FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json "
    "[--val FILE.jsonl | --val-frac F | --unlabeled] [--text KEY] [--pair KEY] [--label KEY]";

typedef struct {
    const char *file, *dir, *tok, *model, *val;
    const char *text, *pair, *label;     /* the lines' keys */
    double val_frac;
    int unlabeled;             /* --unlabeled: text alone, as DIR/test_*.npy for --predict */
} ClsArgs;

static void parse_args(int argc, char **argv, ClsArgs *a)
{
    *a = (ClsArgs){.val_frac = 0.1, .text = "text", .label = "label"};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        const char **opt = !strcmp(s, "--tokenizer") ? &a->tok : !strcmp(s, "--model") ? &a->model
                         : !strcmp(s, "--val") ? &a->val : !strcmp(s, "--text") ? &a->text
                         : !strcmp(s, "--pair") ? &a->pair : !strcmp(s, "--label") ? &a->label
                         : NULL;
        if (opt)
            *opt = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("classify", opt_value(argc, argv, &i, s));
        else if (!strcmp(s, "--unlabeled"))
            a->unlabeled = 1;
        else
            data_positional("classify", cls_usage, s, &a->file, &a->dir);
    }
    if (a->unlabeled && a->val)
        error_input("data classify: --unlabeled writes the rows a model predicts on, one set: "
                    "no --val");
    if (!a->file || !a->dir || !a->tok || !a->model)
        error_input("data classify: missing %s\n%s", !a->file ? "the input file" : !a->dir
                    ? "the output folder" : !a->tok ? "--tokenizer TOK.json (the model's "
                    "tokenizer)" : "--model MODEL.json (its rows' length and classes)", cls_usage);
}

/* Does a layer of LS (or of its bodies) attend without a causal mask (an encoder)? */
static int sees_all(const cJSON *ls)
{
    const cJSON *l;
    cJSON_ArrayForEach(l, ls) {
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(l, "causal")) ||
            sees_all(cJSON_GetObjectItemCaseSensitive(l, "body")) ||
            sees_all(cJSON_GetObjectItemCaseSensitive(l, "shortcut")))
            return 1;
    }
    return 0;
}

/* Is LS's last layer a decoder's token classifier head: a linear of other than the
 * vocabulary's outputs (a language model's head is the vocabulary's, or tied)? */
static int token_head(const cJSON *ls)
{
    const cJSON *last = cJSON_GetArrayItem(ls, cJSON_GetArraySize(ls) - 1);
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(last, "op");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(last, "out");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ls, 0), "vocab");
    return cJSON_IsString(op) && !strcmp(op->valuestring, "linear") && cJSON_IsNumber(out) &&
           cJSON_IsNumber(vocab) && out->valuedouble != vocab->valuedouble;
}

/* Is a layer of LS a last_token with segments 2 (a reward model's pair of texts)? */
static int reads_pairs(const cJSON *ls)
{
    const cJSON *l, *k;
    cJSON_ArrayForEach(l, ls) {
        k = cJSON_GetObjectItemCaseSensitive(l, "segments");
        if (cJSON_IsNumber(k) && k->valuedouble == 2)
            return 1;
    }
    return 0;
}

/* The kind of model M's inputs IN and layers make: a class for each text (y []), a
 * reward model's pair of texts (y [], last_token's segments 2), a language model trained
 * by dpo over pairs, a class for each token (an encoder's, or a causal one's whose head
 * is not the vocabulary's), a masked LM (y [T], its last layer tied to an embedding), a
 * question answerer (its last layer span), or a language model (y [T], causal: data
 * text's and data sft's) */
static int model_kind(const cJSON *m, const cJSON *in)
{
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(in, "y");
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(m, "layers");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "loss"),
                                                       "op");
    for (int k = 0; cJSON_IsString(op) && k < PREF__COUNT; k++)   /* (dpo's kin) */
        if (!strcmp(op->valuestring, pref_names[k]))
            return CLS_DPO;
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(y, "shape")) != 1)
        return reads_pairs(ls) ? CLS_PAIRS : CLS_TEXT;
    const cJSON *last = cJSON_GetArrayItem(ls, cJSON_GetArraySize(ls) - 1);
    const cJSON *last_op = cJSON_GetObjectItemCaseSensitive(last, "op");
    if (cJSON_IsString(last_op) && !strcmp(last_op->valuestring, "span"))
        return CLS_QA;
    if (!sees_all(ls))
        return token_head(ls) ? CLS_TOKENS : CLS_LM;
    return cJSON_GetObjectItemCaseSensitive(last, "tie") ? CLS_MLM : CLS_TOKENS;
}

ClsModel data_cls_model(const char *path, int kind)
{
    static const char *const what[] = {"a class for each text", "a class for each token",
                                       "a masked language model", "a language model",
                                       "a reward model", "a language model trained by dpo",
                                       "an answer's span"};
    static const char *const cmd[] = {"classify", "tags", "mlm", "text` or `trainc data sft",
                                      "pairs", "pairs", "qa"};
    char *text = hf_slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(m, "inputs");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(in, "x"),
                *y = cJSON_GetObjectItemCaseSensitive(in, "y");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(x, "shape");
    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(y, "classes");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 1 || !cJSON_IsNumber(classes))
        error_at(path, "$.model.inputs", "a text classifier's inputs x [T] and y with classes "
                 "expected (as import hf writes a BERT's or RoBERTa's)");
    int has = model_kind(m, in);
    if (kind == CLS_PAIRS && has == CLS_DPO)   /* (data pairs writes both kinds' rows) */
        kind = CLS_DPO;
    if (has != kind)
        error_at(path, "$.model.inputs.y", "%s: its rows are `trainc data %s`'s", what[has],
                 cmd[has]);
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "positions")))
        error_at(path, "$.model.positions", "missing: padded rows need the model's positions "
                 "(import hf writes \"positions\": \"pos\")");
    const cJSON *l;
    int left = 0;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(m, "layers"))
        left |= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(l, "op")) &&
                !strcmp(cJSON_GetObjectItemCaseSensitive(l, "op")->valuestring, "last_token");
    ClsModel cm = {.T = (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble, .left = left,
                   .K = (int64_t)classes->valuedouble,
                   .types = cJSON_GetObjectItemCaseSensitive(in, "types") != NULL,
                   .kind = kind};
    const cJSON *sft = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(m, "loss"), "sft_target");
    if (kind == CLS_DPO && cJSON_IsString(sft))
        cm.sft = xstrdup(sft->valuestring);
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(m, "loss"), "label");
    if (kind == CLS_DPO && cJSON_IsString(label))
        cm.label = xstrdup(label->valuestring);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(y, "labels"), *e;
    if (cJSON_GetArraySize(labels) == cm.K) {
        cm.names = xcalloc((size_t)cm.K, sizeof *cm.names);
        int k = 0;
        cJSON_ArrayForEach(e, labels)
            cm.names[k++] = xstrdup(cJSON_IsString(e) ? e->valuestring : "");
    }
    cJSON_Delete(root);
    free(text);
    return cm;
}

int32_t data_cls_class(const ClsModel *cm, const cJSON *v, const char *key, const char *file,
                       int64_t ln)
{
    if (cJSON_IsString(v))
        for (int64_t k = 0; cm->names && k < cm->K; k++)
            if (!strcmp(cm->names[k], v->valuestring))
                return (int32_t)k;
    if (cJSON_IsNumber(v) && v->valuedouble == (double)(int64_t)v->valuedouble &&
        v->valuedouble >= 0 && v->valuedouble < (double)cm->K)
        return (int32_t)v->valuedouble;
    if (!v)
        data_line_error(file, ln, "missing key '%s'", key);
    data_line_error(file, ln, "'%s' is %s: the model's classes are %s0 to %" PRId64, key,
                    cJSON_IsString(v) ? xasprintf("\"%s\"", v->valuestring) : "no class",
                    cm->names ? "its labels' names or " : "", cm->K - 1);
}

/* Line ln's text at KEY, encoded (no special tokens) */
static void line_text(rt_tokenizer *t, const cJSON *o, const char *key, const char *file,
                      int64_t ln, rt_ids *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v))
        data_line_error(file, ln, v ? "'%s' must be a string" : "missing key '%s'", key);
    size_t n = strlen(v->valuestring);
    uint32_t cp;
    if (rt_tok_unnormalized(t, v->valuestring, n, &cp) < n)
        data_line_error(file, ln, "U+%04X, which the tokenizer's NFC normalizer may change "
                        "(normalize the file first)", cp);
    out->n = 0;
    rt_tok_encode_text(t, v->valuestring, n, out);
}

/* The lengths A and B keep of n1 and n2 ids within m, as tokenizers' LongestFirst
 * truncation cuts a pair: the shorter kept whole when it fits in half, else half each
 * (the odd one to the longer; to the second where they are equal) */
static void longest_first(int64_t n1, int64_t n2, int64_t m, int64_t *k1, int64_t *k2)
{
    *k1 = n1, *k2 = n2;
    if (n1 + n2 <= m)
        return;
    int64_t half = m / 2;
    if (n1 > n2) {
        *k2 = n2 <= half ? n2 : half;
        *k1 = m - *k2;
    } else {
        *k1 = n1 <= half ? n1 : half;
        *k2 = m - *k1;
    }
}

typedef struct {
    int64_t cut, tokens;
} ClsCounts;

void data_cls_place(const rt_ids *ids, const rt_ids *types, int64_t T, int32_t pad, int left,
                    int32_t *x, int32_t *ty, int32_t *pos)
{
    int64_t P = left ? T - ids->n : 0;   /* (the padding before the text) */
    for (int64_t i = 0; i < T; i++) {
        int64_t k = i - P;   /* the text's place */
        int in = k >= 0 && k < ids->n;
        x[i] = in ? (int32_t)ids->v[k] : pad;
        ty[i] = in ? (int32_t)types->v[k] : 0;
        pos[i] = (int32_t)(in ? k : left ? i : i - ids->n);
    }
}

/* One example as its row: x, types and pos [T], y [1]; the padding after the text, or
 * before it (LEFT: a decoder's classifier reads the row's last token) */
static void example_row(rt_tokenizer *t, rt_ids *a, rt_ids *b, int64_t T, int32_t pad, int left,
                        int32_t *row[4], ClsCounts *c)
{
    int64_t m = T - rt_tok_added(t, b != NULL), k1, k2;
    longest_first(a->n, b ? b->n : 0, m, &k1, &k2);
    c->cut += k1 < a->n || (b && k2 < b->n);
    a->n = k1;
    if (b)
        b->n = k2;
    rt_ids ids = {0}, types = {0};
    rt_tok_template(t, a, b, &ids, &types);
    data_cls_place(&ids, &types, T, pad, left, row[0], row[1], row[2]);
    c->tokens += ids.n;
    rt_ids_free(&ids);
    rt_ids_free(&types);
}

/* What the rows are written with (data_cls_write's ctx) */
typedef struct {
    const ClsArgs *a;
    const ClsModel *cm;
    rt_tokenizer *t;
    ClsCounts c;
} ClsJob;

/* Encodes FILE's examples: the first n_train into tr's rows, the rest into va's */
static void encode_file(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va)
{
    ClsJob *j = ctx;
    const ClsArgs *a = j->a;
    const ClsModel *cm = j->cm;
    rt_tokenizer *t = j->t;
    ClsCounts *c = &j->c;
    DataLines in;
    data_lines_open(&in, file, xasprintf("{\"%s\": ..., %s\"%s\": ...}", a->text,
                                         a->pair ? xasprintf("\"%s\": ..., ", a->pair) : "",
                                         a->label));
    int32_t pad = (int32_t)(rt_tok_pad_id(t) >= 0 ? rt_tok_pad_id(t) : 0), y;
    int32_t *row[4] = {xcalloc((size_t)cm->T, 4), xcalloc((size_t)cm->T, 4),
                       xcalloc((size_t)cm->T, 4), &y};
    rt_ids ta = {0}, tb = {0};
    int64_t k = 0;
    for (cJSON *o; (o = data_lines_next(&in));) {
        const int64_t ln = in.ln;
        line_text(t, o, a->text, file, ln, &ta);
        if (a->pair)
            line_text(t, o, a->pair, file, ln, &tb);
        y = a->unlabeled ? 0 : data_cls_class(cm, cJSON_GetObjectItemCaseSensitive(o, a->label),
                                              a->label, file, ln);
        cJSON_Delete(o);
        example_row(t, &ta, a->pair ? &tb : NULL, cm->T, pad, cm->left, row, c);
        const int32_t *const put[4] = {row[0], cm->types ? row[1] : row[2],
                                       cm->types ? row[2] : row[3], row[3]};
        data_rows_put(k++ < n_train ? tr : va, put);
    }
    data_lines_close(&in);
    free(row[0]), free(row[1]), free(row[2]);
    rt_ids_free(&ta), rt_ids_free(&tb);
}

void data_cls_rows(DataRows *o, const char *dir, const ClsModel *cm, const char *name, int n,
                   const char *const *extra, const int64_t *extra_t)
{
    const char *keys[DATA_ROWS_MAX] = {"x", "types", "pos"};
    int64_t T = cm->T, dims[DATA_ROWS_MAX] = {T, T, T};
    int k = 3;
    if (!cm->types)
        keys[1] = "pos", k = 2;
    for (int i = 0; i < n; i++)
        keys[k] = extra[i], dims[k++] = extra_t[i];
    data_rows_open(o, dir, name, k, keys, dims);
}

rt_tokenizer *data_cls_tokenizer(const char *cmd, const char *tok, const ClsModel *cm, int pair)
{
    char err[1024];
    rt_tokenizer *t = rt_tok_load(tok, err, sizeof err);
    if (!t)
        error_input("%s", err);
    if (pair && !rt_tok_has_pair(t))
        error_input("data %s: --pair: %s has no post-processor template for a pair of texts",
                    cmd, tok);
    if (rt_tok_added(t, pair) >= cm->T)
        error_input("data %s: the model's rows of %" PRId64 " hold no more than %s's %" PRId64
                    " special tokens", cmd, cm->T, tok, rt_tok_added(t, pair));
    return t;
}

ClsSplit data_cls_split(const char *file, const char *val, double frac, int unlabeled,
                        const char *dir, const char *form)
{
    ClsSplit sp = {.n = data_count_lines(file, form)};
    sp.n_val = val || unlabeled ? 0 : (int64_t)((double)sp.n * frac);
    if (!val && !unlabeled && frac > 0 && sp.n_val == 0)
        error_input("%s: %" PRId64 " example%s: --val-frac %g leaves none for validation (use "
                    "--val-frac 0 for no val arrays)", file, sp.n, sp.n == 1 ? "" : "s", frac);
    sp.n_valfile = val ? data_count_lines(val, form) : 0;
    if (rt_mkdir_p(dir) != 0)
        error_input("%s: cannot create folder: %s", dir, strerror(errno));
    return sp;
}

void data_cls_write(const ClsWrite *w, const char *file, const char *val, int unlabeled,
                    const ClsSplit *sp, DataRows *tr, DataRows *va)
{
    int has_val = sp->n_val || val;
    w->open(w->ctx, tr, unlabeled ? "test" : "train");
    if (has_val)
        w->open(w->ctx, va, "val");
    w->encode(w->ctx, file, sp->n - sp->n_val, tr, va);
    if (val)
        w->encode(w->ctx, val, 0, tr, va);
    data_rows_close(tr);
    if (has_val)
        data_rows_close(va);
}

/* DIR/NAME_{x,types,pos,y}.npy (types where the model reads them; y unless unlabeled) */
static void rows_open(void *ctx, DataRows *o, const char *name)
{
    const ClsJob *j = ctx;
    data_cls_rows(o, j->a->dir, j->cm, name, !j->a->unlabeled, (const char *[]){"y"},
                  (int64_t[]){0});
}

int data_classify(int argc, char **argv)
{
    ClsArgs a;
    parse_args(argc, argv, &a);
    ClsModel cm = data_cls_model(a.model, CLS_TEXT);
    rt_tokenizer *t = data_cls_tokenizer("classify", a.tok, &cm, a.pair != NULL);
    ClsSplit sp = data_cls_split(a.file, a.val, a.val_frac, a.unlabeled, a.dir,
                                 "{\"text\": ..., \"label\": ...}");
    DataRows tr = {0}, va = {0};
    ClsJob j = {&a, &cm, t, {0}};
    data_cls_write(&(ClsWrite){rows_open, encode_file, &j}, a.file, a.val, a.unlabeled, &sp, &tr,
                   &va);
    data_commit();
    const ClsCounts c = j.c;
    const int64_t n = sp.n, n_valfile = sp.n_valfile;
    if (a.unlabeled)
        printf("%s: %" PRId64 " examples -> %" PRId64 " rows of %" PRId64 " to predict on (%" PRId64
               " cut to fit): --predict %s/test_x.npy\n",
               a.file, n, tr.rows, cm.T, c.cut, a.dir);
    else
        printf("%s%s: %" PRId64 " examples -> %" PRId64 " train + %" PRId64 " val rows of %" PRId64
               " (%" PRId64 " tokens, %.1f%% of the rows; %" PRId64 " cut to fit), %" PRId64
               " classes, padding id %lld\n",
               a.file, a.val ? xasprintf(" and %s", a.val) : "", n + n_valfile, tr.rows, va.rows,
               cm.T, c.tokens, 100.0 * (double)c.tokens / (double)((tr.rows + va.rows) * cm.T),
               c.cut, cm.K, (long long)(rt_tok_pad_id(t) >= 0 ? rt_tok_pad_id(t) : 0));
    rt_tok_free(t);
    return 0;
}
