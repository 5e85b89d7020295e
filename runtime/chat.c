/* chat.c: the chat templates (chat.h): their table, what each writes around a message,
 * and a user's message written as a turn of one. */
#include <string.h>
#include "chat.h"
#include "rt.h"
#include "tokenizer.h"

static const char *const llama3_tokens[] = {"<|begin_of_text|>", "<|start_header_id|>",
                                            "<|end_header_id|>", "<|eot_id|>", NULL};
static const char *const chatml_tokens[] = {"<|im_start|>", "<|im_end|>", NULL};
static const char *const gemma_tokens[] = {"<bos>", "<start_of_turn>", "<end_of_turn>", NULL};
static const char *const phi3_tokens[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
                                          "<|endoftext|>", NULL};

static const char *const mistral_tokens[] = {"<s>", "</s>", NULL};
static const char *const zephyr_tokens[] = {"</s>", NULL};

static const rt_chat_format formats[] = {
    /* Llama 3 Instruct's: {{ bos_token }} then '<|start_header_id|>' + role +
     * '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' a message */
    {.name = "llama3", .begin = "<|begin_of_text|>", .head = "<|start_header_id|>",
     .mid = "<|end_header_id|>\n\n", .end = "<|eot_id|>", .after = "", .tail = "", .trim = 1,
     .tokens = llama3_tokens},
    /* ChatML's (Qwen, SmolLM, ...): '<|im_start|>' + role + '\n' + content + '<|im_end|>\n' */
    {.name = "chatml", .begin = "", .head = "<|im_start|>", .mid = "\n", .end = "<|im_end|>",
     .after = "\n", .tail = "", .tokens = chatml_tokens},
    /* Gemma's (1.1, 2 and 3 instruction-tuned, without a system message): {{ bos_token }}
     * then '<start_of_turn>' + role + '\n' + content | trim + '<end_of_turn>\n', the
     * assistant's role written "model", the roles in turn */
    {.name = "gemma", .begin = "<bos>", .head = "<start_of_turn>", .mid = "\n",
     .end = "<end_of_turn>", .after = "\n", .tail = "", .trim = 1, .assistant = "model",
     .no_system = 1, .alternate = 1, .tokens = gemma_tokens},
    /* Phi-3.5-mini's and Phi-4-mini's (Phi-3-mini's but for an empty system message):
     * '<|' + role + '|>\n' + content + '<|end|>\n' for the system (with content), user
     * and assistant messages, other roles left out; eos_token ('<|endoftext|>') last
     * without a generation prompt */
    {.name = "phi3", .begin = "", .head = "<|", .mid = "|>\n", .end = "<|end|>", .after = "\n",
     .tail = "<|endoftext|>", .three_roles = 1, .empty_system_out = 1, .tokens = phi3_tokens},
    /* Mistral 7B Instruct v0.2's and Mixtral 8x7B Instruct's: {{ bos_token }} then
     * '[INST] ' + content + ' [/INST]' a user's message, content + eos_token an
     * assistant's; user and assistant alone, in turn, no system message */
    {.name = "mistral", .begin = "<s>", .head = "", .mid = "", .end = "</s>", .after = "",
     .tail = "", .no_system = 1, .alternate = 1, .user_open = "[INST] ",
     .user_close = " [/INST]", .reply_open = "", .tokens = mistral_tokens},
    /* Llama 2 Chat's (and Code Llama Instruct's): bos_token + '[INST] ' + content.strip()
     * + ' [/INST]' a user's message, ' ' + content.strip() + ' ' + eos_token an
     * assistant's; a system message first alone, written into the first user message
     * ('<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content, stripped whole); the roles in
     * turn. The model writes the space before eos_token: a reply ends at eos_token. */
    {.name = "llama2", .begin = "", .head = "", .mid = "", .end = " </s>", .after = "",
     .tail = "", .trim = 1, .alternate = 1, .user_open = "<s>[INST] ", .user_close = " [/INST]",
     .reply_open = " ", .sys_open = "<<SYS>>\n", .sys_close = "\n<</SYS>>\n\n", .stop = "</s>",
     .tokens = mistral_tokens},
    /* Zephyr's (TinyLlama 1.1B Chat, Zephyr 7B): '<|' + role + '|>\n' + content +
     * eos_token + '\n' for the system, user and assistant messages, other roles left out,
     * no bos_token; the generation prompt '<|assistant|>\n'. Its role tags are text, not
     * tokens of the tokenizer's own. */
    {.name = "zephyr", .begin = "", .head = "<|", .mid = "|>\n", .end = "</s>", .after = "\n",
     .tail = "", .three_roles = 1, .tokens = zephyr_tokens},
};

const rt_chat_format *rt_chat_find(const char *name)
{
    for (size_t k = 0; k < sizeof formats / sizeof *formats; k++)
        if (!strcmp(name, formats[k].name))
            return &formats[k];
    return NULL;
}

int rt_chat_left_out(const rt_chat_format *f, const char *role, size_t content_len)
{
    return f->empty_system_out && !content_len && !strcmp(role, "system");
}

const char *rt_chat_names(void) { return "llama3, chatml, gemma, phi3, mistral, llama2, zephyr"; }

const char *rt_chat_stop(const rt_chat_format *f) { return f->stop ? f->stop : f->end; }

/* s (cap bytes) with a appended. */
static void add(char *s, size_t cap, const char *a, size_t n)
{
    size_t at = strlen(s);
    if (at + n < cap) {
        memcpy(s + at, a, n);
        s[at + n] = 0;
    }
}

const char *rt_chat_content(const rt_chat_format *f, const char *c, size_t *len)
{
    size_t at = 0;
    *len = strlen(c);
    if (f->trim)
        *len = rt_utf8_strip(c, *len, &at);
    return c + at;
}

char *rt_chat_user_content(const rt_chat_format *f, const char *system, const char *user,
                           size_t *len)
{
    const char *parts[] = {"", system, "", user};
    if (system && f->sys_open)
        parts[0] = f->sys_open, parts[2] = f->sys_close;
    else
        parts[1] = "";
    size_t n = 1;
    for (int k = 0; k < 4; k++)
        n += strlen(parts[k]);
    char *s = rt_xmalloc(n);   /* (zeroed) */
    for (int k = 0; k < 4; k++)
        add(s, n, parts[k], strlen(parts[k]));
    const char *c = rt_chat_content(f, s, len);   /* trimmed whole */
    memmove(s, c, *len);
    s[*len] = 0;
    return s;
}

char *rt_chat_open(const rt_chat_format *f, const char *role)
{
    if (!strcmp(role, "assistant") && f->assistant)
        role = f->assistant;
    const char *parts[] = {f->head, role, f->mid};
    if (f->user_open)   /* the [INST] form writes no role */
        parts[0] = parts[2] = "", parts[1] = strcmp(role, "user") ? f->reply_open : f->user_open;
    size_t n = strlen(parts[0]) + strlen(parts[1]) + strlen(parts[2]) + 1;
    char *s = rt_xmalloc(n);
    for (int k = 0; k < 3; k++)
        add(s, n, parts[k], strlen(parts[k]));
    return s;
}

const char *rt_chat_close(const rt_chat_format *f, const char *role)
{
    return f->user_open && !strcmp(role, "user") ? f->user_close : f->end;
}

const char *rt_chat_role_error(const rt_chat_format *f, int k, const char *role)
{
    int user = !strcmp(role, "user");
    if (f->alternate && user != (k % 2 == 0))
        return "needs the roles in turn, as its template does: user, assistant, user, ...";
    if (f->user_open && !user && strcmp(role, "assistant"))
        return f->sys_open
                   ? "writes user and assistant messages alone after a system message first "
                     "(its template leaves others out)"
                   : "writes user and assistant messages alone (its template refuses others)";
    return NULL;
}

char *rt_chat_turn(const rt_chat_format *f, int first, const char *system, const char *user,
                   size_t *n)
{
    size_t ul, sl = 0;
    const char *sys = system && first ? rt_chat_content(f, system, &sl) : NULL;
    /* (with sys_open the system message is written into the user's) */
    char *u = rt_chat_user_content(f, sys && f->sys_open ? system : NULL, user, &ul);
    if (sys && (rt_chat_left_out(f, "system", sl) || f->sys_open))
        sys = NULL;
    char *sys_open = rt_chat_open(f, "system"), *user_open = rt_chat_open(f, "user");
    char *head = rt_chat_open(f, "assistant");   /* the generation prompt (none: [INST]) */
    /* first: begin and the system message's turn; else what follows the assistant's reply */
    const char *parts[] = {first ? f->begin : rt_chat_stop(f), first ? "" : f->after,
                           sys ? sys_open : "", NULL, sys ? rt_chat_close(f, "system") : "",
                           sys ? f->after : "", user_open, NULL, rt_chat_close(f, "user"),
                           f->after, f->user_open ? "" : head};
    size_t cap = sl + ul + 1;
    for (size_t k = 0; k < sizeof parts / sizeof *parts; k++)
        cap += parts[k] ? strlen(parts[k]) : 0;
    char *s = rt_xmalloc(cap);
    int contents = 0;   /* (NULL: the content after it, the system message's or the user's) */
    for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
        if (parts[k])
            add(s, cap, parts[k], strlen(parts[k]));
        else if (contents++ == 0)
            add(s, cap, sys ? sys : "", sl);
        else
            add(s, cap, u, ul);
    }
    rt_xfree(u);
    rt_xfree(sys_open), rt_xfree(user_open), rt_xfree(head);
    *n = strlen(s);
    return s;
}
