/* chat.c: the chat templates (chat.h): their table, and a user's message written as a
 * turn of one. */
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

static const rt_chat_format formats[] = {
    /* Llama 3 Instruct's: {{ bos_token }} then '<|start_header_id|>' + role +
     * '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' a message */
    {"llama3", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
     "", "", 1, NULL, 0, 0, llama3_tokens},
    /* ChatML's (Qwen, SmolLM, ...): '<|im_start|>' + role + '\n' + content + '<|im_end|>\n' */
    {"chatml", "", "<|im_start|>", "\n", "<|im_end|>", "\n", "", 0, NULL, 0, 0, chatml_tokens},
    /* Gemma's (1.1, 2 and 3 instruction-tuned, without a system message): {{ bos_token }}
     * then '<start_of_turn>' + role + '\n' + content | trim + '<end_of_turn>\n', the
     * assistant's role written "model" */
    {"gemma", "<bos>", "<start_of_turn>", "\n", "<end_of_turn>", "\n", "", 1, "model", 1, 0,
     gemma_tokens},
    /* Phi-3.5-mini's and Phi-4-mini's (Phi-3-mini's but for an empty system message):
     * '<|' + role + '|>\n' + content + '<|end|>\n' for the system (with content), user
     * and assistant messages, other roles left out; eos_token ('<|endoftext|>') last
     * without a generation prompt */
    {"phi3", "", "<|", "|>\n", "<|end|>", "\n", "<|endoftext|>", 0, NULL, 0, 1, phi3_tokens},
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
    return f->three_roles && !content_len && !strcmp(role, "system");
}

const char *rt_chat_names(void) { return "llama3, chatml, gemma, phi3"; }

/* s (cap bytes) with a appended. */
static void add(char *s, size_t cap, const char *a, size_t n)
{
    size_t at = strlen(s);
    if (at + n < cap) {
        memcpy(s + at, a, n);
        s[at + n] = 0;
    }
}

/* A message's content as the template writes it: *len bytes from the returned pointer
 * (trimmed where the template trims). */
static const char *content(const rt_chat_format *f, const char *c, size_t *len)
{
    size_t at = 0;
    *len = strlen(c);
    if (f->trim)
        *len = rt_utf8_strip(c, *len, &at);
    return c + at;
}

char *rt_chat_turn(const rt_chat_format *f, int first, const char *system, const char *user,
                   size_t *n)
{
    size_t ul, sl = 0;
    const char *u = content(f, user, &ul), *sys = system && first ? content(f, system, &sl) : NULL;
    if (sys && rt_chat_left_out(f, "system", sl))
        sys = NULL;
    const char *as = f->assistant ? f->assistant : "assistant";
    /* (NULL: the content after it, the system message's or the user's) */
    const char *parts[] = {first ? f->begin : f->end, first ? "" : f->after,
                           sys ? f->head : "", sys ? "system" : "", sys ? f->mid : "", NULL,
                           sys ? f->end : "", sys ? f->after : "",
                           f->head, "user", f->mid, NULL, f->end, f->after, f->head, as, f->mid};
    size_t cap = sl + ul + 1;
    for (size_t k = 0; k < sizeof parts / sizeof *parts; k++)
        cap += parts[k] ? strlen(parts[k]) : 0;
    char *s = rt_xmalloc(cap);
    int contents = 0;
    for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
        if (parts[k])
            add(s, cap, parts[k], strlen(parts[k]));
        else if (contents++ == 0)
            add(s, cap, sys ? sys : "", sl);
        else
            add(s, cap, u, ul);
    }
    *n = strlen(s);
    return s;
}
