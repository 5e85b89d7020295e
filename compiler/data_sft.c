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
#include "cmd.h"
#include "../runtime/chat.h"
#include "../runtime/tokenizer.h"

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

/* One example's ids, each learned (its target kept) or not. */
typedef struct {
    rt_ids ids;
    unsigned char *learned;
    int64_t cap;
} Example;

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

/* Line `ln`'s value of key, a string. */
static const char *field(const cJSON *o, const char *key, const char *file, int64_t ln)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        data_line_error(file, ln, "missing key '%s'", key);
    if (!cJSON_IsString(v))
        data_line_error(file, ln, "'%s' must be a string", key);
    return v->valuestring;
}

/* A text the tokenizer encodes as it is (no NFC change: tokenizer.h), or exit 1. */
static void check_normal(rt_tokenizer *t, const char *s, const char *file, int64_t ln)
{
    uint32_t cp;
    size_t n = strlen(s);
    if (rt_tok_unnormalized(t, s, n, &cp) < n)
        data_line_error(file, ln, "U+%04X, which the tokenizer's NFC normalizer may change "
                   "(normalize the file first: Python's unicodedata.normalize('NFC', s))", cp);
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

/* Appends ids (all learned or none) to ex. */
static void ex_add(Example *ex, const rt_ids *ids, int learned)
{
    for (int64_t i = 0; i < ids->n; i++) {
        if (ex->ids.n == ex->cap) {
            ex->cap = ex->cap ? 2 * ex->cap : 256;
            ex->learned = realloc(ex->learned, (size_t)ex->cap);
            if (!ex->learned)
                die("out of memory");
        }
        ex->learned[ex->ids.n] = (unsigned char)learned;
        rt_ids_push(&ex->ids, ids->v[i]);
    }
}

/* A prompt-completion line: the ids of prompt + completion (+ eos), those past the
 * prompt's learned. */
static void completion_example(rt_tokenizer *t, const cJSON *o, int32_t eos, const char *file,
                               int64_t ln, Example *ex)
{
    const char *p = field(o, "prompt", file, ln), *c = field(o, "completion", file, ln);
    char *both = xasprintf("%s%s", p, c);
    check_normal(t, both, file, ln);
    rt_ids pids = {0}, ids = {0};
    rt_tok_encode(t, p, strlen(p), &pids);
    rt_tok_encode(t, both, strlen(both), &ids);
    if (eos >= 0)
        rt_ids_push(&ids, (uint32_t)eos);
    int64_t np = pids.n < ids.n ? pids.n : ids.n;
    rt_ids head = {ids.v, np, np}, rest = {ids.v + np, ids.n - np, ids.n - np};
    ex_add(ex, &head, 0);
    ex_add(ex, &rest, 1);
    rt_ids_free(&pids), rt_ids_free(&ids);
    free(both);
}

/* A conversation's text as the chat template writes it, and the byte spans learned
 * (each assistant's content and what closes it): span[2k] to span[2k + 1]. */
typedef struct {
    Buf text;
    size_t *span;
    int n_span;
} ChatText;

/* A ROLE message of content c (n bytes) appended: open, content, close, after; an
 * assistant's content and close learned (and in the [INST] form its open). */
static void chat_message(ChatText *ct, const rt_chat_format *f, const char *role, const char *c,
                         size_t n)
{
    int reply = !strcmp(role, "assistant");
    size_t at = ct->text.len;
    char *open = rt_chat_open(f, role);
    buf_puts(&ct->text, open);
    free(open);
    if (!f->user_open)
        at = ct->text.len;
    buf_printf(&ct->text, "%.*s%s", (int)n, c, rt_chat_close(f, role));
    if (reply) {
        ct->span = realloc(ct->span, (size_t)(ct->n_span + 2) * sizeof *ct->span);
        if (!ct->span)
            die("out of memory");
        ct->span[ct->n_span++] = at;
        ct->span[ct->n_span++] = ct->text.len;
    }
    buf_puts(&ct->text, f->after);
}

/* Exits 1 naming line ln where the template takes no ROLE message as message k (0-based
 * of all) or, not counting a system message written into a user's, as message turn. */
static void check_role(const rt_chat_format *f, const char *role, int k, int turn,
                       const char *file, int64_t ln)
{
    int is_system = !strcmp(role, "system");
    if (f->no_system && is_system)
        data_line_error(file, ln, "--chat %s has no system message (its template refuses one): "
                   "write it into the first user message", f->name);
    if (f->sys_open && is_system && k != 0)
        data_line_error(file, ln, "--chat %s takes a system message first alone (its template writes "
                   "it into the first user message; message %d is 'system')", f->name, k + 1);
    if (f->three_roles && !is_system && strcmp(role, "user") && strcmp(role, "assistant"))
        data_line_error(file, ln, "--chat %s writes system, user and assistant messages alone "
                   "(its template leaves a '%s' message out)", f->name, role);
    const char *why = f->sys_open && is_system ? NULL : rt_chat_role_error(f, turn, role);
    if (why)
        data_line_error(file, ln, "--chat %s %s (message %d is '%s')", f->name, why, k + 1, role);
}

/* The conversation of line ln as the template writes it, or exit 1 naming the line where
 * the template refuses it. */
static void chat_text(const rt_chat_format *f, const cJSON *ms, const char *file, int64_t ln,
                      ChatText *ct)
{
    buf_puts(&ct->text, f->begin);
    const cJSON *m;
    const char *system = NULL;   /* sys_open: the system message, for the first user's */
    int k = 0, turn = 0;
    cJSON_ArrayForEach(m, ms) {
        if (!cJSON_IsObject(m))
            data_line_error(file, ln, "a message is not an object {\"role\": ..., \"content\": ...}");
        const char *role = field(m, "role", file, ln), *c = field(m, "content", file, ln);
        check_role(f, role, k++, turn, file, ln);
        if (f->sys_open && !strcmp(role, "system")) {
            system = c;
            continue;
        }
        turn++;
        if (rt_chat_left_out(f, role, strlen(c)))
            continue;
        size_t n;
        if (!strcmp(role, "user")) {
            char *u = rt_chat_user_content(f, system, c, &n);
            chat_message(ct, f, role, u, n);
            free(u);
            system = NULL;
            continue;
        }
        c = rt_chat_content(f, c, &n);
        chat_message(ct, f, role, c, n);
    }
    buf_puts(&ct->text, f->tail);
}

/* How many of all's ids text[0, n) encodes to; where they are not the first of all's (a
 * token across the cut), -1 - the place of the first that differs. */
static int64_t ids_before(rt_tokenizer *t, const char *text, size_t n, const rt_ids *all)
{
    rt_ids ids = {0};
    rt_tok_encode_text(t, text, n, &ids);
    int64_t k = 0;
    while (k < ids.n && k < all->n && ids.v[k] == all->v[k])
        k++;
    int64_t r = k == ids.n ? k : -1 - k;
    rt_ids_free(&ids);
    return r;
}

/* A conversation line, as the chat template writes it: the ids of the whole text (no
 * post-processor: the template writes its tokens), those of each assistant's content and
 * closing token learned. A learned span's ids are those its text adds to what comes
 * before it, so each edge within the first `keep` ids (the row's T + 1: the rest is cut)
 * must fall where the tokenizer cuts anyway; edges past them are not looked at, so a long
 * conversation costs no more than its first T + 1 ids' worth of prefixes. */
static void chat_example(rt_tokenizer *t, const rt_chat_format *f, const cJSON *o, const char *file,
                         int64_t ln, int64_t keep, Example *ex)
{
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) == 0)
        data_line_error(file, ln, "expected \"messages\": a non-empty list of {\"role\": ..., "
                   "\"content\": ...}");
    ChatText ct = {0};
    chat_text(f, ms, file, ln, &ct);
    const char *text = ct.text.s ? ct.text.s : "";
    check_normal(t, text, file, ln);
    rt_ids all = {0};
    rt_tok_encode_text(t, text, ct.text.len, &all);
    int64_t done = 0;
    for (int k = 0; k <= ct.n_span; k++) {   /* spans learned and not, in turn */
        int past = done >= keep;   /* the rest is cut: its edges not looked at */
        int64_t to = k < ct.n_span && !past ? ids_before(t, text, ct.span[k], &all) : all.n;
        if (to < 0 && -1 - to >= keep)   /* the edge's ids differ only past the cut */
            to = all.n, past = 1;
        if (to < done)
            data_line_error(file, ln, "a token across the edge of an assistant's message: not a "
                       "text --chat %s can mask", f->name);
        /* (a text of no ids, Llama 2's lone system message, has no all.v to add to) */
        rt_ids part = {all.n ? all.v + done : NULL, to - done, to - done};
        ex_add(ex, &part, k % 2);   /* (past the cut it matters not) */
        done = to;
        if (past)
            break;
    }
    rt_ids_free(&all);
    free(ct.text.s);
    free(ct.span);
}

/* One example's row: x the first T ids, y the next T, -100 where that id is not learned
 * (and past the example: padding). Returns 0 (nothing written) when no target is kept. */
static int example_row(const Example *ex, int64_t T, int32_t pad, int32_t *x, int32_t *y)
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
    Example row;
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
static void pack_add(Packer *p, DataRows *out, const Example *ex, int64_t T, int32_t pad, int32_t *x,
                     int32_t *y)
{
    int64_t n = ex->ids.n < T + 1 ? ex->ids.n : T + 1;
    if (p->out != out || p->row.ids.n + n > T + 1)
        pack_flush(p, T, pad, x, y);
    p->out = out;
    for (int64_t i = 0; i < n; i++) {
        rt_ids one = {&ex->ids.v[i], 1, 1};
        p->pos[p->row.ids.n] = (int32_t)i;
        ex_add(&p->row, &one, ex->learned[i]);
    }
}

/* The id of one token `what` (--eos, a chat template's own) encodes to, or exit 1. */
static int32_t one_token(rt_tokenizer *t, const char *s, const char *what)
{
    int64_t n, id = rt_tok_one_id(t, s, &n);
    if (id < 0)
        error_input("data sft: %s '%s' is %" PRId64 " tokens, not one (the tokenizer has no such "
                    "added token)", what, s, n);
    return (int32_t)id;
}

/* The ids of padding: --eos's, a chat template's end token, else 0. */
static int32_t pad_id(rt_tokenizer *t, const SftArgs *a)
{
    if (a->chat) {
        for (const char *const *k = a->chat->tokens; *k; k++)
            one_token(t, *k, "--chat's token");
        return one_token(t, rt_chat_stop(a->chat), "--chat's token");
    }
    return a->eos ? one_token(t, a->eos, "--eos") : 0;
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
    Example ex = {0};
    Packer pk = {.pos = xcalloc((size_t)(a->T + 1), sizeof(int32_t))};
    int64_t k = 0;
    for (cJSON *o; (o = data_lines_next(&in));) {
        ex.ids.n = 0;
        if (a->chat)
            chat_example(t, a->chat, o, a->file, in.ln, a->T + 1, &ex);
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
