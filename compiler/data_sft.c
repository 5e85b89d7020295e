/* data_sft.c: `trainc data sft FILE.jsonl DIR --tokenizer TOK.json --seq-len T
 * [--val-frac F] [--eos TOKEN]`: supervised fine-tuning examples, one JSON object a line
 * with a "prompt" and a "completion" string (TRL's prompt-completion form), as .npy
 * arrays a language model trains on with the loss's ignore_index -100:
 *   DIR/train_x.npy [N, T] i32   the ids of prompt + completion (+ TOKEN), then padding
 *   DIR/train_y.npy [N, T] i32   the same shifted by one; -100 where the id predicted is
 *                                the prompt's or padding (only the completion is learned)
 * and DIR/val_x.npy, val_y.npy from the last F of the examples (0.1; none with 0).
 *
 * The ids are those of Tokenizer.encode(prompt + completion).ids (runtime/tokenizer.c),
 * the prompt's the first len(encode(prompt).ids) of them, as TRL masks them; --eos
 * appends TOKEN's id (an added token's content, say "<|eot_id|>") after each
 * completion, and pads with it (padding is 0 without). An example longer than T + 1
 * ids is cut there; one whose completion starts past that is left out (no target is
 * kept). Both counted.
 * With --chat FORMAT a line is a conversation, {"messages": [{"role": ..., "content":
 * ...}, ...]}, written as FORMAT's chat template writes it (runtime/chat.c: Llama 3's,
 * ChatML's, Gemma's, Phi-3's, Mistral's, Llama 2's and Zephyr's), the assistant's
 * contents and their end tokens learned, the rest -100.
 * --pack puts as many whole examples into a row as fit in T + 1 ids, in the file's order
 * (a row ends where the next example does not fit); the targets where an example's ids
 * are not learned stay -100, the seams included, and
 *   DIR/train_pos.npy [N, T] i32 each id's position in its example (0 at its first; the
 *                                padding after the last goes on counting)
 * for a model whose `positions` input cuts attention at the seams (without it, attention
 * sees across them).
 * The file is read twice (the examples counted, then encoded), the rows streamed to
 * NAME.part files that become NAME once all are complete: memory holds one example
 * (and, packing, one row). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data_chat.h"

#define SFT_IGNORE (-100)

static const char sft_usage[] =
    "usage: trainc data sft FILE.jsonl DIR --tokenizer TOK.json --seq-len T [--val-frac F] "
    "[--eos TOKEN | --chat llama3|chatml|gemma|phi3|mistral|llama2|zephyr] [--pack]";

typedef struct {
    const char *file, *dir, *tok, *eos;
    const rt_chat_format *chat;   /* --chat (runtime/chat.c) */
    int64_t T;
    double val_frac;
    int pack;                  /* --pack: whole examples packed into each row */
} SftArgs;
static int64_t parse_positive(const char *opt, const char *v, int64_t max)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < 1 || n > max)
        error_input("data sft: %s must be an integer in [1, %" PRId64 "], got '%s'", opt, max, v);
    return n;
}

static void parse_args(int argc, char **argv, SftArgs *a)
{
    *a = (SftArgs){.val_frac = 0.1};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--tokenizer"))
            a->tok = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--seq-len"))
            a->T = parse_positive(s, opt_value(argc, argv, &i, s), 1 << 20);
        else if (!strcmp(s, "--eos"))
            a->eos = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--pack"))
            a->pack = 1;
        else if (!strcmp(s, "--chat")) {
            const char *v = opt_value(argc, argv, &i, s);
            a->chat = rt_chat_find(v);
            if (!a->chat)
                error_input("data sft: --chat: unknown format '%s' (known: %s)", v, rt_chat_names());
        } else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("sft", opt_value(argc, argv, &i, s));
        else
            data_positional("sft", sft_usage, s, &a->file, &a->dir);
    }
    if (!a->file || !a->dir)
        error_input("data sft: missing the %s\n%s", a->file ? "output folder" : "input file",
                    sft_usage);
    if (!a->tok)
        error_input("data sft: --tokenizer TOK.json is required (the model's tokenizer)\n%s",
                    sft_usage);
    if (!a->T)
        error_input("data sft: --seq-len T is required (the model's input length)\n%s",
                    sft_usage);
    if (a->chat && a->eos)
        error_input("data sft: --eos is for prompt-completion lines; --chat %s ends each message "
                    "with its own token", a->chat->name);
}
/* DIR/NAME_x.npy, NAME_y.npy and (packing) NAME_pos.npy, [rows, T] each */
static void rows_open(DataRows *o, const SftArgs *a, const char *name)
{
    static const char *const keys[3] = {"x", "y", "pos"};
    data_rows_open(o, a->dir, name, a->pack ? 3 : 2, keys, (int64_t[]){a->T, a->T, a->T});
}

/* A row's x, y and (packing) pos [T] each */
static void row_put(DataRows *o, const int32_t *x, const int32_t *y, const int32_t *pos)
{
    data_rows_put(o, (const int32_t *const[]){x, y, pos});
}

typedef struct {
    int64_t cut, dropped, tokens, packed;   /* packed: the examples written */
} SftCounts;
/* A prompt-completion line: the ids of prompt + completion (+ eos), those past the
 * prompt's learned. */
static void completion_example(rt_tokenizer *t, const cJSON *o, int32_t eos, const char *file,
                               int64_t ln, DataExample *ex)
{
    const char *p = data_field(o, "prompt", file, ln), *c = data_field(o, "completion", file, ln);
    char *both = xasprintf("%s%s", p, c);
    data_check_normal(t, both, file, ln);
    rt_ids pids = {0}, ids = {0};
    rt_tok_encode(t, p, strlen(p), &pids);
    rt_tok_encode(t, both, strlen(both), &ids);
    if (eos >= 0)
        rt_ids_push(&ids, (uint32_t)eos);
    int64_t np = pids.n < ids.n ? pids.n : ids.n;
    rt_ids head = {ids.v, np, np}, rest = {ids.v + np, ids.n - np, ids.n - np};
    data_ex_add(ex, &head, 0);
    data_ex_add(ex, &rest, 1);
    rt_ids_free(&pids), rt_ids_free(&ids);
    free(both);
}
/* One example's row: x the first T ids, y the next T, -100 where that id is not learned
 * (and past the example: padding). Returns 0 (nothing written) when no target is kept. */
static int example_row(const DataExample *ex, int64_t T, int32_t pad, int32_t *x, int32_t *y)
{
    int any = 0;
    int64_t n = ex->ids.n;
    for (int64_t i = 0; i < T; i++) {
        x[i] = i < n ? (int32_t)ex->ids.v[i] : pad;
        int learned = i + 1 < n && ex->learned[i + 1];
        y[i] = learned ? (int32_t)ex->ids.v[i + 1] : SFT_IGNORE;
        any |= learned;
    }
    return any;
}

/* --pack's row being filled: whole examples' ids (at most T + 1), each learned or not,
 * and each one's position in its example. */
typedef struct {
    DataExample row;
    int32_t *pos;              /* [T + 1] */
    DataRows *out;               /* where it goes */
} Packer;

/* The row as it is (padded, the padding's positions going on from the last id's) into
 * its output, and a new one begun. */
static void pack_flush(Packer *p, int64_t T, int32_t pad, int32_t *x, int32_t *y)
{
    for (int64_t i = p->row.ids.n; i > 0 && i < T; i++)
        p->pos[i] = p->pos[i - 1] + 1;
    if (p->row.ids.n && example_row(&p->row, T, pad, x, y))
        row_put(p->out, x, y, p->pos);
    p->row.ids.n = 0;
}

/* ex (its first T + 1 ids) into the row for out: after the examples there if they fit
 * together in T + 1 ids, else in a row of its own after theirs. */
static void pack_add(Packer *p, DataRows *out, const DataExample *ex, int64_t T, int32_t pad, int32_t *x,
                     int32_t *y)
{
    int64_t n = ex->ids.n < T + 1 ? ex->ids.n : T + 1;
    if (p->out != out || p->row.ids.n + n > T + 1)
        pack_flush(p, T, pad, x, y);
    p->out = out;
    for (int64_t i = 0; i < n; i++) {
        rt_ids one = {&ex->ids.v[i], 1, 1};
        p->pos[p->row.ids.n] = (int32_t)i;
        data_ex_add(&p->row, &one, ex->learned[i]);
    }
}

/* The ids of padding: --eos's, a chat template's end token, else 0. */
static int32_t pad_id(rt_tokenizer *t, const SftArgs *a)
{
    if (a->chat)
        return data_chat_tokens(t, a->chat, "sft");
    return a->eos ? data_one_token(t, a->eos, "sft", "--eos") : 0;
}

/* Encodes each example into train's rows, the last n_val into val's. */
static void encode_examples(const SftArgs *a, rt_tokenizer *t, int64_t n, int64_t n_val,
                            DataRows *tr, DataRows *va, SftCounts *c)
{
    DataLines in;
    data_lines_open(&in, a->file,
                    a->chat ? "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]}"
                            : "{\"prompt\": ..., \"completion\": ...}");
    int32_t pad = pad_id(t, a), eos = a->eos ? pad : -1;
    int32_t *x = xcalloc((size_t)a->T, sizeof *x), *y = xcalloc((size_t)a->T, sizeof *y);
    DataExample ex = {0};
    Packer pk = {.pos = xcalloc((size_t)(a->T + 1), sizeof(int32_t))};
    int64_t k = 0;
    for (cJSON *o; (o = data_lines_next(&in));) {
        ex.ids.n = 0;
        if (a->chat)
            data_chat_example(t, a->chat, data_chat_messages(o, "messages", a->file, in.ln), 0,
                              a->file, in.ln, a->T + 1, &ex);
        else
            completion_example(t, o, eos, a->file, in.ln, &ex);
        cJSON_Delete(o);
        c->cut += ex.ids.n > a->T + 1;
        if (!example_row(&ex, a->T, pad, x, y)) {
            c->dropped++;
            k++;
            continue;
        }
        c->tokens += ex.ids.n < a->T + 1 ? ex.ids.n : a->T + 1;
        c->packed++;
        DataRows *out = k++ < n - n_val ? tr : va;
        if (a->pack)
            pack_add(&pk, out, &ex, a->T, pad, x, y);
        else
            row_put(out, x, y, NULL);
    }
    pack_flush(&pk, a->T, pad, x, y);
    data_lines_close(&in);
    free(x), free(y), free(ex.learned), free(pk.row.learned), free(pk.pos);
    rt_ids_free(&ex.ids);
    rt_ids_free(&pk.row.ids);
}

int data_sft(int argc, char **argv)
{
    SftArgs a;
    parse_args(argc, argv, &a);
    char err[1024];
    rt_tokenizer *t = rt_tok_load(a.tok, err, sizeof err);
    if (!t)
        error_input("%s", err);
    int64_t n = data_count_lines(a.file, a.chat ? "{\"messages\": [...]}" : "{\"prompt\": ..., \"completion\": ...}"), n_val = (int64_t)((double)n * a.val_frac);
    if (a.val_frac > 0 && n_val == 0)
        error_input("%s: %" PRId64 " example%s: --val-frac %g leaves none for validation (use "
                    "--val-frac 0 for no val arrays)", a.file, n, n == 1 ? "" : "s", a.val_frac);
    if (rt_mkdir_p(a.dir) != 0)
        error_input("%s: cannot create folder: %s", a.dir, strerror(errno));
    DataRows tr = {0}, va = {0};
    rows_open(&tr, &a, "train");
    if (n_val)
        rows_open(&va, &a, "val");
    SftCounts c = {0};
    encode_examples(&a, t, n, n_val, &tr, &va, &c);
    if (tr.rows == 0 || (n_val && va.rows == 0))
        error_input("%s: no %s example has a completion token within --seq-len %" PRId64,
                    a.file, tr.rows ? "validation" : "training", a.T);
    data_rows_close(&tr);
    if (n_val)
        data_rows_close(&va);
    data_commit();
    printf("%s: %" PRId64 " examples -> %" PRId64 " train + %" PRId64 " val rows of %" PRId64
           " (%" PRId64 " tokens; %" PRId64 " cut at %" PRId64 " tokens, %" PRId64
           " left out: no learned token within them), vocabulary %" PRId64 "\n",
           a.file, n, tr.rows, va.rows, a.T, c.tokens, c.cut, a.T + 1, c.dropped, rt_tok_vocab(t));
    if (a.pack)
        printf("packed: %.2f examples a row, %.1f%% of the rows' %" PRId64 " ids an example's\n",
               (double)c.packed / (double)(tr.rows + va.rows), 100.0 * (double)c.tokens /
               (double)((tr.rows + va.rows) * (a.T + 1)), (tr.rows + va.rows) * (a.T + 1));
    printf("train with the model's loss {\"op\": \"cross_entropy\", \"target\": \"y\", "
           "\"ignore_index\": -100} and data {\"x\": \"%s/train_x.npy\", \"y\": \"%s/train_y.npy\"",
           a.dir, a.dir);
    if (a.pack)
        printf(", \"pos\": \"%s/train_pos.npy\"", a.dir);
    printf("}\n");
    if (a.pack)
        printf("with the model's input \"pos\": {\"shape\": [%" PRId64 "], \"dtype\": \"i32\"} and "
               "\"positions\": \"pos\", attention is cut at the seams (each example sees itself "
               "alone)\n", a.T);
    rt_tok_free(t);
    return 0;
}
