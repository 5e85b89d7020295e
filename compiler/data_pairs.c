/* data_pairs.c: `trainc data pairs FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json
 * [--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY] [--rejected KEY]`: a
 * reward model's preference pairs, one JSON object a line in TRL's formats ({"chosen":
 * TEXT, "rejected": TEXT}, or with a "prompt" that goes before each, as TRL's
 * RewardTrainer joins them), as the rows an imported reward model trains on (import hf
 * --task reward: last_token's segments 2):
 *   DIR/train_x.npy   [N, 2T] i32  the chosen text's ids (Tokenizer.encode with its special
 *                                  tokens), padded on the left to T, then the rejected one's
 *   DIR/train_pos.npy [N, 2T] i32  each half's padding a sequence of its own (0 .. P-1), then
 *                                  its text's positions 0 .. L-1
 *   DIR/train_y.npy   [N]     i32  0: the first text is the chosen one
 * and DIR/val_*.npy from --val's file, or the last F of FILE's pairs (0.1; none with 0). A
 * pair whose text does not fit in T is left out (TRL filters by max_length so), counted.
 * The rows are streamed to NAME.part files that become NAME once all are complete. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "../runtime/tokenizer.h"

static const char pairs_usage[] =
    "usage: trainc data pairs FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json "
    "[--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY] [--rejected KEY]";

typedef struct {
    const char *file, *dir, *tok, *model, *val;
    const char *prompt, *chosen, *rejected;   /* the lines' keys */
    double val_frac;
} PairArgs;

static void parse_args(int argc, char **argv, PairArgs *a)
{
    *a = (PairArgs){.val_frac = 0.1, .prompt = "prompt", .chosen = "chosen",
                    .rejected = "rejected"};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        const char **opt = !strcmp(s, "--tokenizer") ? &a->tok : !strcmp(s, "--model") ? &a->model
                         : !strcmp(s, "--val") ? &a->val : !strcmp(s, "--prompt") ? &a->prompt
                         : !strcmp(s, "--chosen") ? &a->chosen
                         : !strcmp(s, "--rejected") ? &a->rejected : NULL;
        if (opt)
            *opt = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("pairs", opt_value(argc, argv, &i, s));
        else
            data_positional("pairs", pairs_usage, s, &a->file, &a->dir);
    }
    if (!a->file || !a->dir || !a->tok || !a->model)
        error_input("data pairs: missing %s\n%s", !a->file ? "the input file" : !a->dir
                    ? "the output folder" : !a->tok ? "--tokenizer TOK.json (the model's "
                    "tokenizer)" : "--model MODEL.json (its rows' length)", pairs_usage);
}

typedef struct {
    const PairArgs *a;
    const ClsModel *cm;
    rt_tokenizer *t;
    int64_t T;                 /* each text's room: half a row */
    int64_t left_out, tokens;
    rt_ids text, ids, types;
} PairJob;

/* Line ln's string at KEY (NULL where it may be absent and is) */
static const char *line_string(const cJSON *o, const char *key, int optional, const char *file,
                               int64_t ln)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && optional)
        return NULL;
    if (!cJSON_IsString(v))
        data_line_error(file, ln, v ? "'%s' must be a string" : "missing key '%s'", key);
    return v->valuestring;
}

/* The prompt (or NULL) and ANSWER as one text, encoded with the tokenizer's special tokens
 * into j->ids; 0 where it does not fit in j->T */
static int encode(PairJob *j, const char *prompt, const char *answer, const char *file,
                  int64_t ln)
{
    char *s = xasprintf("%s%s", prompt ? prompt : "", answer);
    size_t n = strlen(s);
    uint32_t cp;
    if (rt_tok_unnormalized(j->t, s, n, &cp) < n)
        data_line_error(file, ln, "U+%04X, which the tokenizer's NFC normalizer may change "
                        "(normalize the file first)", cp);
    j->text.n = 0;
    rt_tok_encode_text(j->t, s, n, &j->text);
    free(s);
    if (j->text.n + rt_tok_added(j->t, 0) > j->T)
        return 0;
    j->ids.n = j->types.n = 0;
    rt_tok_template(j->t, &j->text, NULL, &j->ids, &j->types);
    return 1;
}

/* Encodes FILE's pairs: the first n_train into tr's rows, the rest into va's */
static void encode_file(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va)
{
    PairJob *j = ctx;
    const PairArgs *a = j->a;
    DataLines in;
    data_lines_open(&in, file, xasprintf("{\"%s\": ..., \"%s\": ...} (and \"%s\")", a->chosen,
                                         a->rejected, a->prompt));
    int32_t pad = (int32_t)(rt_tok_pad_id(j->t) >= 0 ? rt_tok_pad_id(j->t) : 0), y = 0;
    int64_t T = j->T, k = 0;
    int32_t *x = xcalloc((size_t)(2 * T), 4), *pos = xcalloc((size_t)(2 * T), 4),
            *ty = xcalloc((size_t)T, 4);
    for (cJSON *o; (o = data_lines_next(&in));) {
        const int64_t ln = in.ln;
        const char *prompt = line_string(o, a->prompt, 1, file, ln);
        const char *ans[2] = {line_string(o, a->chosen, 0, file, ln),
                              line_string(o, a->rejected, 0, file, ln)};
        int fits = 1;
        int64_t tokens = 0;
        for (int h = 0; h < 2 && fits; h++) {
            fits = encode(j, prompt, ans[h], file, ln);
            if (fits)
                data_cls_place(&j->ids, &j->types, T, pad, 1, x + h * T, ty, pos + h * T);
            tokens += j->ids.n;
        }
        cJSON_Delete(o);
        DataRows *to = k++ < n_train ? tr : va;
        j->left_out += !fits;
        j->tokens += fits ? tokens : 0;
        if (fits)
            data_rows_put(to, (const int32_t *const[]){x, pos, &y});
    }
    data_lines_close(&in);
    free(x), free(pos), free(ty);
}

/* DIR/NAME_{x,pos,y}.npy */
static void rows_open(void *ctx, DataRows *o, const char *name)
{
    const PairJob *j = ctx;
    data_cls_rows(o, j->a->dir, j->cm, name, 1, (const char *[]){"y"}, (int64_t[]){0});
}

int data_pairs(int argc, char **argv)
{
    PairArgs a;
    parse_args(argc, argv, &a);
    ClsModel cm = data_cls_model(a.model, CLS_PAIRS);
    if (cm.T % 2 || cm.types)
        error_at(a.model, "$.model.inputs", "a reward model's rows x and pos [2T] (two texts) "
                 "and no token types expected, as import hf --task reward writes them");
    PairJob j = {.a = &a, .cm = &cm, .T = cm.T / 2};
    j.t = data_cls_tokenizer("pairs", a.tok, &(ClsModel){.T = j.T}, 0);
    const char *form = "{\"chosen\": ..., \"rejected\": ...}";
    ClsSplit sp = data_cls_split(a.file, a.val, a.val_frac, 0, a.dir, form);
    DataRows tr = {0}, va = {0};
    data_cls_write(&(ClsWrite){rows_open, encode_file, &j}, a.file, a.val, 0, &sp, &tr, &va);
    if (tr.rows == 0)
        error_input("data pairs: %s: no pair fits in the model's %" PRId64 " tokens a text (its "
                    "rows are 2 x %" PRId64 ")", a.file, j.T, j.T);
    printf("%s%s: %" PRId64 " pairs -> %" PRId64 " train + %" PRId64 " val rows of 2 x %" PRId64
           " (%" PRId64 " tokens, %.1f%% of the rows; %" PRId64 " left out: a text longer than %"
           PRId64 " tokens), padding id %lld\n",
           a.file, a.val ? xasprintf(" and %s", a.val) : "", sp.n + sp.n_valfile, tr.rows,
           va.rows, j.T, j.tokens,
           100.0 * (double)j.tokens / (double)((tr.rows + va.rows) * cm.T), j.left_out, j.T,
           (long long)(rt_tok_pad_id(j.t) >= 0 ? rt_tok_pad_id(j.t) : 0));
    rt_ids_free(&j.text), rt_ids_free(&j.ids), rt_ids_free(&j.types);
    rt_tok_free(j.t);
    return 0;
}
