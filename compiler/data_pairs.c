/* data_pairs.c: `trainc data pairs FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json
 * [--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY] [--rejected KEY]
 * [--completion KEY] [--label KEY] [--kl-group N] [--eos TOKEN | --chat FORMAT]`: preference pairs, one JSON object a line in TRL's formats
 * ({"chosen": TEXT, "rejected": TEXT}, or with a "prompt" that goes before each answer;
 * with --chat, lists of messages: {"prompt": [...], "chosen": [...], "rejected": [...]},
 * or whole conversations whose last message is the answer), as the rows of an import with
 * --task reward (last_token's segments 2) or --task dpo, simpo, orpo or kto (their loss):
 *   DIR/train_x.npy   [N, 2T] i32  the chosen text's ids (Tokenizer.encode(prompt + answer)
 *                                  with its special tokens, then --eos's; with --chat the
 *                                  conversation as the template writes it), padded on the
 *                                  left to T, then the rejected one's
 *   DIR/train_pos.npy [N, 2T] i32  each half's padding a sequence of its own (0 .. P-1), then
 *                                  its text's positions 0 .. L-1
 *   DIR/train_y.npy   [N]     i32  a reward model's: 0, the first text is the chosen one
 *                     [N, 2T] i32  a dpo model's: the next id where it is the answer's (past
 *                                  the first len(encode(prompt)) ids; with --chat the
 *                                  answer's assistant messages and their end tokens),
 *                                  -100 elsewhere
 *   DIR/train_t.npy   [N, T]  i32  an orpo model's sft target (its loss's sft_target, named
 *                                  so): the chosen text's next id wherever it has one,
 *                                  prompt and answer, -100 on the padding
 *   DIR/train_label.npy [N] i32    a kto model's, from TRL's unpaired lines ({"prompt": ...,
 *                                  "completion": ..., "label": true|false}; --completion,
 *                                  --label name the keys): 1 where the completion is
 *                                  desirable. Its row's first text is the prompt and the
 *                                  completion, the second the prompt and the completion of
 *                                  the line before in its group of --kl-group lines (the
 *                                  group's first: its last; TRL's KL text), y as dpo's
 * and DIR/val_*.npy from --val's file, or the last F of FILE's pairs (0.1; none with 0). A
 * pair whose text does not fit in T is left out (TRL filters by max_length so), counted.
 * The rows are streamed to NAME.part files that become NAME once all are complete. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "data_chat.h"

static const char pairs_usage[] =
    "usage: trainc data pairs FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json "
    "[--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY] [--rejected KEY] "
    "[--completion KEY] [--label KEY] [--kl-group N] "
    "[--eos TOKEN | --chat llama3|chatml|gemma|phi3|mistral|llama2|zephyr]";

typedef struct {
    const char *file, *dir, *tok, *model, *val;
    const char *prompt, *chosen, *rejected;   /* the lines' keys */
    const char *completion, *label;           /* a kto model's lines' keys */
    const char *eos;           /* --eos: a token after each answer, or NULL */
    const rt_chat_format *chat; /* --chat: the lines are conversations (runtime/chat.c) */
    double val_frac;
    int64_t kl_group;          /* kto: the KL texts' completions rotate within groups of so
                                  many lines (TRL's per_device_train_batch_size, 8) */
} PairArgs;

static void parse_args(int argc, char **argv, PairArgs *a)
{
    *a = (PairArgs){.val_frac = 0.1, .prompt = "prompt", .chosen = "chosen",
                    .rejected = "rejected", .completion = "completion", .label = "label",
                    .kl_group = 8};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        const char **opt = !strcmp(s, "--tokenizer") ? &a->tok : !strcmp(s, "--model") ? &a->model
                         : !strcmp(s, "--val") ? &a->val : !strcmp(s, "--prompt") ? &a->prompt
                         : !strcmp(s, "--chosen") ? &a->chosen
                         : !strcmp(s, "--rejected") ? &a->rejected
                         : !strcmp(s, "--completion") ? &a->completion
                         : !strcmp(s, "--label") ? &a->label
                         : !strcmp(s, "--eos") ? &a->eos : NULL;
        if (opt)
            *opt = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("pairs", opt_value(argc, argv, &i, s));
        else if (!strcmp(s, "--kl-group"))
            a->kl_group = data_count_arg("pairs", s, opt_value(argc, argv, &i, s), 1, 1000000);
        else if (!strcmp(s, "--chat")) {
            const char *v = opt_value(argc, argv, &i, s);
            a->chat = rt_chat_find(v);
            if (!a->chat)
                error_input("data pairs: --chat: unknown format '%s' (known: %s)", v,
                            rt_chat_names());
        }
        else
            data_positional("pairs", pairs_usage, s, &a->file, &a->dir);
    }
    if (a->chat && a->eos)
        error_input("data pairs: --eos is for lines of text; --chat %s ends each message with "
                    "its own token", a->chat->name);
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
    int kto;                   /* a kto model's: a completion and a KL text a row, a label */
    int32_t eos;               /* --eos's id, or -1 */
    int64_t left_out, tokens;
    DataExample ex;            /* a half's text: its ids, each the answer's (learned) or not */
    rt_ids types, prompt;
} PairJob;

/* The prompt (or NULL) and ANSWER as one text, encoded with the tokenizer's special tokens
 * (and --eos's after) into j->ex, the ids past the prompt's first len(encode(prompt))
 * the answer's */
static void encode_text(PairJob *j, const char *prompt, const char *answer, const char *file,
                        int64_t ln)
{
    char *s = xasprintf("%s%s", prompt ? prompt : "", answer);
    data_check_normal(j->t, s, file, ln);
    rt_ids ids = {0};
    rt_tok_encode(j->t, s, strlen(s), &ids);
    free(s);
    if (j->eos >= 0)
        rt_ids_push(&ids, (uint32_t)j->eos);
    j->prompt.n = 0;
    rt_tok_encode(j->t, prompt ? prompt : "", prompt ? strlen(prompt) : 0, &j->prompt);
    int64_t np = j->prompt.n < ids.n ? j->prompt.n : ids.n;
    rt_ids head = {ids.v, np, np}, rest = {ids.v + np, ids.n - np, ids.n - np};
    data_ex_add(&j->ex, &head, 0);
    data_ex_add(&j->ex, &rest, 1);
    rt_ids_free(&ids);
}

/* --chat: the PROMPT's messages (or NULL) and the ANSWER's (the whole conversation where
 * there is no prompt: its last message the answer) as the template writes them into
 * j->ex, the answer's assistant messages learned */
static void encode_chat(PairJob *j, const cJSON *prompt, const cJSON *answer, const char *file,
                        int64_t ln)
{
    cJSON *ms = cJSON_CreateArray();
    const cJSON *m;
    cJSON_ArrayForEach(m, prompt)
        cJSON_AddItemToArray(ms, cJSON_Duplicate(m, 1));
    cJSON_ArrayForEach(m, answer)
        cJSON_AddItemToArray(ms, cJSON_Duplicate(m, 1));
    int n = cJSON_GetArraySize(ms), from = prompt ? cJSON_GetArraySize(prompt) : n - 1;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ms, n - 1), "role");
    if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant"))
        data_line_error(file, ln, "an answer ends with the assistant's message");
    data_chat_example(j->t, j->a->chat, ms, from, file, ln, j->T + 1, &j->ex);
    cJSON_Delete(ms);
}

/* A half of line ln's row into j->ex: o's prompt (if any) and the answer under KEY of FROM
 * (o itself; a kto row's KL text: another line, FROM_LN); 0 where it does not fit in j->T */
static int encode(PairJob *j, const cJSON *o, const cJSON *from, const char *key,
                  const char *file, int64_t ln, int64_t from_ln)
{
    const PairArgs *a = j->a;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, a->prompt);
    j->ex.ids.n = 0;
    if (a->chat)
        encode_chat(j, p ? data_chat_messages(o, a->prompt, file, ln) : NULL,
                    data_chat_messages(from, key, file, from_ln), file, from_ln);
    else
        encode_text(j, p ? data_field(o, a->prompt, file, ln) : NULL,
                    data_field(from, key, file, from_ln), file, from_ln);
    j->types.n = 0;
    for (int64_t k = 0; k < j->ex.ids.n; k++)
        rt_ids_push(&j->types, 0);
    return j->ex.ids.n <= j->T;
}

/* A half's targets at y [T] (the text placed at its end): the next id where it is the
 * answer's (a dpo row's y), or with ALL wherever there is one, prompt and answer (an orpo
 * row's sft target, TRL's ORPO's supervised term); -100 elsewhere, the padding too */
static void next_targets(const PairJob *j, int32_t *y, int all)
{
    const DataExample *ex = &j->ex;
    int64_t T = j->T, L = ex->ids.n, P = T - L;
    for (int64_t i = 0; i < T; i++)
        y[i] = -100;
    for (int64_t k = 0; k + 1 < L; k++)
        if (all || ex->learned[k + 1])
            y[P + k] = (int32_t)ex->ids.v[k + 1];
}

/* One row's arrays (x, pos [2T]; y [2T] or a reward model's 0; orpo's t [T]; kto's label) */
typedef struct {
    int32_t *x, *pos, *y, *st, *ty, y0, label, pad;
} PairRow;

/* Line ln's row into r: its halves the answers under KEYS of FROM (kto: the KL text's from
 * another line, FROM_LN); 0 where a text does not fit in T (then counted as left out),
 * else its tokens are counted */
static int encode_row(PairJob *j, const cJSON *o, const cJSON *const from[2],
                      const char *const keys[2], const char *file, int64_t ln,
                      const int64_t from_ln[2], PairRow *r)
{
    int64_t T = j->T, tokens = 0;
    int fits = 1;
    for (int h = 0; h < 2 && fits; h++) {
        fits = encode(j, o, from[h], keys[h], file, ln, from_ln[h]);
        if (fits)
            data_cls_place(&j->ex.ids, &j->types, T, r->pad, 1, r->x + h * T, r->ty,
                           r->pos + h * T);
        if (fits && j->dpo)
            next_targets(j, r->y + h * T, 0);
        if (fits && h == 0 && j->cm->sft)
            next_targets(j, r->st, 1);
        tokens += j->ex.ids.n;
    }
    j->left_out += !fits;
    j->tokens += fits ? tokens : 0;
    return fits;
}

/* r's arrays into TO, in rows_open's order */
static void put_row(const PairJob *j, DataRows *to, const PairRow *r)
{
    const int32_t *rows[5] = {r->x, r->pos, j->dpo ? r->y : &r->y0};
    int k = 3;
    if (j->cm->sft)
        rows[k++] = r->st;
    if (j->kto)
        rows[k++] = &r->label;
    data_rows_put(to, rows);
}

static PairRow row_alloc(const PairJob *j)
{
    int64_t T = j->T;
    return (PairRow){.x = xcalloc((size_t)(2 * T), 4), .pos = xcalloc((size_t)(2 * T), 4),
                     .y = xcalloc((size_t)(2 * T), 4), .st = xcalloc((size_t)T, 4),
                     .ty = xcalloc((size_t)T, 4),
                     .pad = (int32_t)(rt_tok_pad_id(j->t) >= 0 ? rt_tok_pad_id(j->t) : 0)};
}

static void row_free(PairRow *r)
{
    free(r->x), free(r->pos), free(r->y), free(r->st), free(r->ty);
}

/* Encodes FILE's pairs: the first n_train into tr's rows, the rest into va's */
static void encode_file(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va)
{
    PairJob *j = ctx;
    const PairArgs *a = j->a;
    DataLines in;
    data_lines_open(&in, file, xasprintf("{\"%s\": %s, \"%s\": %s} (and \"%s\")", a->chosen,
                                         a->chat ? "[...]" : "...", a->rejected,
                                         a->chat ? "[...]" : "...", a->prompt));
    PairRow r = row_alloc(j);
    int64_t k = 0;
    for (cJSON *o; (o = data_lines_next(&in));) {
        const int64_t ln = in.ln;
        if (encode_row(j, o, (const cJSON *const[]){o, o}, (const char *const[]){a->chosen,
                       a->rejected}, file, ln, (const int64_t[]){ln, ln}, &r))
            put_row(j, k < n_train ? tr : va, &r);
        k++;
        cJSON_Delete(o);
    }
    data_lines_close(&in);
    row_free(&r);
}

/* A kto line's label (true or 1: desirable; false or 0: not) */
static int32_t kto_label(const PairJob *j, const cJSON *o, const char *file, int64_t ln)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, j->a->label);
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v);
    if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1))
        return (int32_t)v->valuedouble;
    data_line_error(file, ln, "\"%s\": true (a desirable completion) or false expected",
                    j->a->label);
}

/* A group of kto lines (os[n], their line numbers lns) as rows into TO: each line's
 * completion, then its prompt with the line before's completion (the first line's: the
 * group's last), the KL text TRL's KTOTrainer pairs so */
static void kto_group(PairJob *j, cJSON **os, const int64_t *lns, int n, const char *file,
                      DataRows *to, PairRow *r)
{
    const char *key = j->a->completion;
    for (int i = 0; i < n; i++) {
        int p = (i + n - 1) % n;
        r->label = kto_label(j, os[i], file, lns[i]);
        if (encode_row(j, os[i], (const cJSON *const[]){os[i], os[p]},
                       (const char *const[]){key, key}, file, lns[i],
                       (const int64_t[]){lns[i], lns[p]}, r))
            put_row(j, to, r);
    }
    for (int i = 0; i < n; i++)
        cJSON_Delete(os[i]);
}

/* Encodes FILE's kto lines, in groups of --kl-group (a group ends at the split too): the
 * first n_train into tr's rows, the rest into va's */
static void encode_kto_file(void *ctx, const char *file, int64_t n_train, DataRows *tr,
                            DataRows *va)
{
    PairJob *j = ctx;
    const PairArgs *a = j->a;
    DataLines in;
    data_lines_open(&in, file, xasprintf("{\"%s\": %s, \"%s\": true|false} (and \"%s\")",
                                         a->completion, a->chat ? "[...]" : "...", a->label,
                                         a->prompt));
    PairRow r = row_alloc(j);
    cJSON **os = xcalloc((size_t)a->kl_group, sizeof *os);
    int64_t *lns = xcalloc((size_t)a->kl_group, sizeof *lns), k = 0;
    int n = 0;
    for (cJSON *o; (o = data_lines_next(&in));) {
        if (n > 0 && k == n_train) {   /* (the split) */
            kto_group(j, os, lns, n, file, tr, &r);
            n = 0;
        }
        os[n] = o, lns[n++] = in.ln;
        if (n == a->kl_group) {
            kto_group(j, os, lns, n, file, k < n_train ? tr : va, &r);
            n = 0;
        }
        k++;
    }
    if (n > 0)
        kto_group(j, os, lns, n, file, k <= n_train ? tr : va, &r);
    data_lines_close(&in);
    row_free(&r);
    free(os), free(lns);
}

/* DIR/NAME_{x,pos,y}.npy (y [2T] for dpo), an orpo model's sft target [T], a kto model's
 * label */
static void rows_open(void *ctx, DataRows *o, const char *name)
{
    const PairJob *j = ctx;
    const char *keys[3] = {"y"};
    int64_t widths[3] = {j->dpo ? 2 * j->T : 0};
    int n = 1;
    if (j->cm->sft)
        keys[n] = j->cm->sft, widths[n++] = j->T;
    if (j->kto)
        keys[n] = j->cm->label, widths[n++] = 0;
    data_cls_rows(o, j->a->dir, j->cm, name, n, keys, widths);
}

int data_pairs(int argc, char **argv)
{
    PairArgs a;
    parse_args(argc, argv, &a);
    ClsModel cm = data_cls_model(a.model, CLS_PAIRS);
    if (cm.T % 2 || cm.types)
        error_at(a.model, "$.model.inputs", "rows x and pos [2T] (two texts) and no token types "
                 "expected, as import hf --task reward or --task dpo writes them");
    PairJob j = {.a = &a, .cm = &cm, .T = cm.T / 2, .dpo = cm.kind == CLS_DPO,
                 .kto = cm.label != NULL};
    j.t = data_cls_tokenizer("pairs", a.tok, &(ClsModel){.T = j.T}, 0);
    j.eos = a.eos ? data_one_token(j.t, a.eos, "pairs", "--eos") : -1;
    if (a.chat)   /* (the template's own tokens) */
        data_chat_tokens(j.t, a.chat, "pairs");
    const char *form = j.kto ? "{\"completion\": ..., \"label\": ...}"
                             : "{\"chosen\": ..., \"rejected\": ...}";
    ClsSplit sp = data_cls_split(a.file, a.val, a.val_frac, 0, a.dir, form);
    DataRows tr = {0}, va = {0};
    data_cls_write(&(ClsWrite){rows_open, j.kto ? encode_kto_file : encode_file, &j}, a.file,
                   a.val, 0, &sp, &tr, &va);
    if (tr.rows == 0)   /* (nothing committed: the .part files go at exit) */
        error_input("data pairs: %s: no pair fits in the model's %" PRId64 " tokens a text (its "
                    "rows are 2 x %" PRId64 ")", a.file, j.T, j.T);
    data_commit();
    printf("%s%s: %" PRId64 " pairs -> %" PRId64 " train + %" PRId64 " val rows of 2 x %" PRId64
           " (%" PRId64 " tokens, %.1f%% of the rows; %" PRId64 " left out: a text longer than %"
           PRId64 " tokens), padding id %lld\n",
           a.file, a.val ? xasprintf(" and %s", a.val) : "", sp.n + sp.n_valfile, tr.rows,
           va.rows, j.T, j.tokens,
           100.0 * (double)j.tokens / (double)((tr.rows + va.rows) * cm.T), j.left_out, j.T,
           (long long)(rt_tok_pad_id(j.t) >= 0 ? rt_tok_pad_id(j.t) : 0));
    rt_ids_free(&j.prompt), rt_ids_free(&j.ex.ids), rt_ids_free(&j.types);
    free(j.ex.learned);
    rt_tok_free(j.t);
    return 0;
}
