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

/* What the model's spec says the rows are: T, the classes (and their names), and
 * whether it reads token types */
typedef struct {
    int64_t T, K;
    char **names;              /* K names, or NULL */
    int types;
} ClsModel;

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

/* MODEL.json's inputs: x [T], y's classes and names, types; a model without positions
 * (which keep the padding out of sight) exits 1 */
static ClsModel read_model(const char *path)
{
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
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "positions")))
        error_at(path, "$.model.positions", "missing: padded rows need the model's positions "
                 "(import hf writes \"positions\": \"pos\")");
    ClsModel cm = {.T = (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble,
                   .K = (int64_t)classes->valuedouble,
                   .types = cJSON_GetObjectItemCaseSensitive(in, "types") != NULL};
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

/* Line ln's class: a name among the model's, or an integer in [0, K) */
static int32_t line_class(const ClsModel *cm, const cJSON *v, const ClsArgs *a, const char *file,
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
        data_line_error(file, ln, "missing key '%s'", a->label);
    data_line_error(file, ln, "'%s' is %s: the model's classes are %s0 to %" PRId64, a->label,
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

/* One example as its row: x, types and pos [T], y [1] */
static void example_row(rt_tokenizer *t, rt_ids *a, rt_ids *b, int64_t T, int32_t pad,
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
    for (int64_t i = 0; i < T; i++) {
        int in = i < ids.n;
        row[0][i] = in ? (int32_t)ids.v[i] : pad;
        row[1][i] = in ? (int32_t)types.v[i] : 0;
        row[2][i] = (int32_t)(in ? i : i - ids.n);
    }
    c->tokens += ids.n;
    rt_ids_free(&ids);
    rt_ids_free(&types);
}

/* Encodes FILE's examples: the first n_train into tr's rows, the rest into va's */
static void encode_file(const ClsArgs *a, const ClsModel *cm, rt_tokenizer *t, const char *file,
                        int64_t n_train, DataRows *tr, DataRows *va, ClsCounts *c)
{
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
        y = a->unlabeled ? 0 : line_class(cm, cJSON_GetObjectItemCaseSensitive(o, a->label), a,
                                          file, ln);
        cJSON_Delete(o);
        example_row(t, &ta, a->pair ? &tb : NULL, cm->T, pad, row, c);
        const int32_t *const put[4] = {row[0], cm->types ? row[1] : row[2],
                                       cm->types ? row[2] : row[3], row[3]};
        data_rows_put(k++ < n_train ? tr : va, put);
    }
    data_lines_close(&in);
    free(row[0]), free(row[1]), free(row[2]);
    rt_ids_free(&ta), rt_ids_free(&tb);
}

/* DIR/NAME_{x,types,pos,y}.npy (types where the model reads them; y unless unlabeled) */
static void rows_open(DataRows *o, const ClsArgs *a, const ClsModel *cm, const char *name)
{
    const char *const with[4] = {"x", "types", "pos", "y"}, *const without[3] = {"x", "pos", "y"};
    int64_t T = cm->T;
    if (cm->types)
        data_rows_open(o, a->dir, name, 4 - a->unlabeled, with, (int64_t[]){T, T, T, 0});
    else
        data_rows_open(o, a->dir, name, 3 - a->unlabeled, without, (int64_t[]){T, T, 0});
}

/* The tokenizer, checked against the model: a pair template where the lines have pairs,
 * room for a token past the special ones */
static rt_tokenizer *load_tokenizer(const ClsArgs *a, const ClsModel *cm)
{
    char err[1024];
    rt_tokenizer *t = rt_tok_load(a->tok, err, sizeof err);
    if (!t)
        error_input("%s", err);
    if (a->pair && !rt_tok_has_pair(t))
        error_input("data classify: --pair: %s has no post-processor template for a pair of "
                    "texts", a->tok);
    if (rt_tok_added(t, a->pair != NULL) >= cm->T)
        error_input("data classify: %s's rows of %" PRId64 " hold no more than its %" PRId64
                    " special tokens", a->model, cm->T, rt_tok_added(t, a->pair != NULL));
    return t;
}

int data_classify(int argc, char **argv)
{
    ClsArgs a;
    parse_args(argc, argv, &a);
    ClsModel cm = read_model(a.model);
    rt_tokenizer *t = load_tokenizer(&a, &cm);
    const char *form = "{\"text\": ..., \"label\": ...}";
    int64_t n = data_count_lines(a.file, form),
            n_val = a.val || a.unlabeled ? 0 : (int64_t)((double)n * a.val_frac);
    if (!a.val && !a.unlabeled && a.val_frac > 0 && n_val == 0)
        error_input("%s: %" PRId64 " example%s: --val-frac %g leaves none for validation (use "
                    "--val-frac 0 for no val arrays)", a.file, n, n == 1 ? "" : "s", a.val_frac);
    int64_t n_valfile = a.val ? data_count_lines(a.val, form) : 0;
    if (rt_mkdir_p(a.dir) != 0)
        error_input("%s: cannot create folder: %s", a.dir, strerror(errno));
    DataRows tr = {0}, va = {0};
    ClsCounts c = {0};
    rows_open(&tr, &a, &cm, a.unlabeled ? "test" : "train");
    if (n_val || a.val)
        rows_open(&va, &a, &cm, "val");
    encode_file(&a, &cm, t, a.file, n - n_val, &tr, &va, &c);
    if (a.val)
        encode_file(&a, &cm, t, a.val, 0, &tr, &va, &c);
    data_rows_close(&tr);
    if (n_val || a.val)
        data_rows_close(&va);
    data_commit();
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
