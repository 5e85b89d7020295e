/* data_chat.c: what the data commands that read JSON lines share (data sft, data pairs):
 * a line's string fields, the tokenizer's normalization check, an example's ids each
 * learned or not, and a conversation written as a chat template writes it (runtime/
 * chat.c's formats) with the assistant's messages learned. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "data_chat.h"

/* Line `ln`'s value of key, a string. */
const char *data_field(const cJSON *o, const char *key, const char *file, int64_t ln)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        data_line_error(file, ln, "missing key '%s'", key);
    if (!cJSON_IsString(v))
        data_line_error(file, ln, "'%s' must be a string", key);
    return v->valuestring;
}

/* A text the tokenizer encodes as it is (no NFC change: tokenizer.h), or exit 1. */
void data_check_normal(rt_tokenizer *t, const char *s, const char *file, int64_t ln)
{
    uint32_t cp;
    size_t n = strlen(s);
    if (rt_tok_unnormalized(t, s, n, &cp) < n)
        data_line_error(file, ln, "U+%04X, which the tokenizer's NFC normalizer may change "
                   "(normalize the file first: Python's unicodedata.normalize('NFC', s))", cp);
}

/* Appends ids (all learned or none) to ex. */
void data_ex_add(DataExample *ex, const rt_ids *ids, int learned)
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

/* A conversation's text as the chat template writes it, and the byte spans learned
 * (each assistant's content and what closes it): span[2k] to span[2k + 1]. */
typedef struct {
    Buf text;
    size_t *span;
    int n_span;
} ChatText;

/* A ROLE message of content c (n bytes) appended: open, content, close, after; an
 * assistant's content and close learned where LEARN (and in the [INST] form its open). */
static void chat_message(ChatText *ct, const rt_chat_format *f, const char *role, const char *c,
                         size_t n, int learn)
{
    int reply = learn && !strcmp(role, "assistant");
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

/* The conversation of line ln as the template writes it, the assistant's messages from
 * message FROM on learned, or exit 1 naming the line where the template refuses it. */
static void chat_text(const rt_chat_format *f, const cJSON *ms, int from, const char *file,
                      int64_t ln, ChatText *ct)
{
    buf_puts(&ct->text, f->begin);
    const cJSON *m;
    const char *system = NULL;   /* sys_open: the system message, for the first user's */
    int k = 0, turn = 0;
    cJSON_ArrayForEach(m, ms) {
        if (!cJSON_IsObject(m))
            data_line_error(file, ln, "a message is not an object {\"role\": ..., \"content\": ...}");
        const char *role = data_field(m, "role", file, ln), *c = data_field(m, "content", file, ln);
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
            chat_message(ct, f, role, u, n, 0);
            free(u);
            system = NULL;
            continue;
        }
        c = rt_chat_content(f, c, &n);
        chat_message(ct, f, role, c, n, k - 1 >= from);
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

int32_t data_one_token(rt_tokenizer *t, const char *s, const char *cmd, const char *what)
{
    int64_t n, id = rt_tok_one_id(t, s, &n);
    if (id < 0)
        error_input("data %s: %s '%s' is %" PRId64 " tokens, not one (the tokenizer has no such "
                    "added token)", cmd, what, s, n);
    return (int32_t)id;
}

int32_t data_chat_tokens(rt_tokenizer *t, const rt_chat_format *f, const char *cmd)
{
    for (const char *const *k = f->tokens; *k; k++)
        data_one_token(t, *k, cmd, "--chat's token");
    return data_one_token(t, rt_chat_stop(f), cmd, "--chat's token");
}

const cJSON *data_chat_messages(const cJSON *o, const char *key, const char *file, int64_t ln)
{
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) == 0)
        data_line_error(file, ln, "expected \"%s\": a non-empty list of {\"role\": ..., "
                        "\"content\": ...}", key);
    return ms;
}

void data_chat_example(rt_tokenizer *t, const rt_chat_format *f, const cJSON *ms, int from,
                       const char *file, int64_t ln, int64_t keep, DataExample *ex)
{
    ChatText ct = {0};
    chat_text(f, ms, from, file, ln, &ct);
    const char *text = ct.text.s ? ct.text.s : "";
    data_check_normal(t, text, file, ln);
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
        data_ex_add(ex, &part, k % 2);   /* (past the cut it matters not) */
        done = to;
        if (past)
            break;
    }
    rt_ids_free(&all);
    free(ct.text.s);
    free(ct.span);
}
