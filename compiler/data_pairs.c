/* data_pairs.c: `trainc data pairs FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json
 * [--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY] [--rejected KEY]
 * [--eos TOKEN]`: preference pairs, one JSON object a line in TRL's formats ({"chosen":
 * TEXT, "rejected": TEXT}, or with a "prompt" that goes before each answer), as the rows
 * of an import with --task reward (last_token's segments 2) or --task dpo (the dpo loss):
 *   DIR/train_x.npy   [N, 2T] i32  the chosen text's ids (Tokenizer.encode(prompt + answer)
 *                                  with its special tokens, then --eos's), padded on the
 *                                  left to T, then the rejected one's
 *   DIR/train_pos.npy [N, 2T] i32  each half's padding a sequence of its own (0 .. P-1), then
 *                                  its text's positions 0 .. L-1
 *   DIR/train_y.npy   [N]     i32  a reward model's: 0, the first text is the chosen one
 *                     [N, 2T] i32  a dpo model's: the next id where it is the answer's (past
 *                                  the first len(encode(prompt)) ids), -100 elsewhere
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
    "[--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY] [--rejected KEY] "
    "[--eos TOKEN]";

typedef struct {
    const char *file, *dir, *tok, *model, *val;
    const char *prompt, *chosen, *rejected;   /* the lines' keys */
    const char *eos;           /* --eos: a token after each answer, or NULL */
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
                         : !strcmp(s, "--rejected") ? &a->rejected
                         : !strcmp(s, "--eos") ? &a->eos : NULL;
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
    int dpo;                   /* a dpo model's rows (y: the answers' next ids) */
    int32_t eos;               /* --eos's id, or -1 */
    int64_t left_out, tokens;
    int64_t np;                /* the text's first np ids are the prompt's */
    rt_ids ids, types, prompt;
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
 * (and --eos's after) into j->ids, the prompt's first j->np of them; 0 where it does not
 * fit in j->T */
static int encode(PairJob *j, const char *prompt, const char *answer, const char *file,
                  int64_t ln)
{
    char *s = xasprintf("%s%s", prompt ? prompt : "", answer);
    size_t n = strlen(s);
    uint32_t cp;
    if (rt_tok_unnormalized(j->t, s, n, &cp) < n)
        data_line_error(file, ln, "U+%04X, which the tokenizer's NFC normalizer may change "
                        "(normalize the file first)", cp);
    j->ids.n = j->prompt.n = 0;
    rt_tok_encode(j->t, s, n, &j->ids);
    free(s);
    if (j->eos >= 0)
        rt_ids_push(&j->ids, (uint32_t)j->eos);
    rt_tok_encode(j->t, prompt ? prompt : "", prompt ? strlen(prompt) : 0, &j->prompt);
    j->np = j->prompt.n < j->ids.n ? j->prompt.n : j->ids.n;
    j->types.n = 0;
    for (int64_t k = 0; k < j->ids.n; k++)
        rt_ids_push(&j->types, 0);
    return j->ids.n <= j->T;
}

/* A dpo row's targets for its half at y [T] (the text placed at its end): the next id
 * where it is the answer's, -100 elsewhere */
static void dpo_targets(const PairJob *j, int32_t *y)
{
    int64_t T = j->T, L = j->ids.n, P = T - L;
    for (int64_t i = 0; i < T; i++)
        y[i] = -100;
    for (int64_t k = j->np > 0 ? j->np - 1 : 0; k + 1 < L; k++)
        y[P + k] = (int32_t)j->ids.v[k + 1];
}

/* Encodes FILE's pairs: the first n_train into tr's rows, the rest into va's */
static void encode_file(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va)
{
    PairJob *j = ctx;
    const PairArgs *a = j->a;
    DataLines in;
    data_lines_open(&in, file, xasprintf("{\"%s\": ..., \"%s\": ...} (and \"%s\")", a->chosen,
                                         a->rejected, a->prompt));
    int32_t pad = (int32_t)(rt_tok_pad_id(j->t) >= 0 ? rt_tok_pad_id(j->t) : 0), y0 = 0;
    int64_t T = j->T, k = 0;
    int32_t *x = xcalloc((size_t)(2 * T), 4), *pos = xcalloc((size_t)(2 * T), 4),
            *ty = xcalloc((size_t)T, 4), *y = j->dpo ? xcalloc((size_t)(2 * T), 4) : &y0;
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
            if (fits && j->dpo)
                dpo_targets(j, y + h * T);
            tokens += j->ids.n;
        }
        cJSON_Delete(o);
        DataRows *to = k++ < n_train ? tr : va;
        j->left_out += !fits;
        j->tokens += fits ? tokens : 0;
        if (fits)
            data_rows_put(to, (const int32_t *const[]){x, pos, y});
    }
    data_lines_close(&in);
    free(x), free(pos), free(ty);
    if (j->dpo)
        free(y);
}

/* DIR/NAME_{x,pos,y}.npy (y [2T] for dpo) */
static void rows_open(void *ctx, DataRows *o, const char *name)
{
    const PairJob *j = ctx;
    data_cls_rows(o, j->a->dir, j->cm, name, 1, (const char *[]){"y"},
                  (int64_t[]){j->dpo ? 2 * j->T : 0});
}

/* --eos TOKEN's id: one token of the tokenizer, or exit 1 */
static int32_t eos_id(rt_tokenizer *t, const char *s)
{
    int64_t n, id = rt_tok_one_id(t, s, &n);
    if (id < 0)
        error_input("data pairs: --eos '%s' is %" PRId64 " tokens, not one (the tokenizer has no "
                    "such added token)", s, n);
    return (int32_t)id;
}

int data_pairs(int argc, char **argv)
{
    PairArgs a;
    parse_args(argc, argv, &a);
    ClsModel cm = data_cls_model(a.model, CLS_PAIRS);
    if (cm.T % 2 || cm.types)
        error_at(a.model, "$.model.inputs", "rows x and pos [2T] (two texts) and no token types "
                 "expected, as import hf --task reward or --task dpo writes them");
    PairJob j = {.a = &a, .cm = &cm, .T = cm.T / 2, .dpo = cm.kind == CLS_DPO};
    j.t = data_cls_tokenizer("pairs", a.tok, &(ClsModel){.T = j.T}, 0);
    j.eos = a.eos ? eos_id(j.t, a.eos) : -1;
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
    rt_ids_free(&j.prompt), rt_ids_free(&j.ids), rt_ids_free(&j.types);
    rt_tok_free(j.t);
    return 0;
}
