/* chat.c: the chat templates (chat.h): their table, and a user's prompt written as one. */
#include <stdlib.h>
#include <string.h>
#include "chat.h"
#include "rt.h"
#include "tokenizer.h"

static const rt_chat_format formats[] = {
    /* Llama 3 Instruct's: {{ bos_token }} then '<|start_header_id|>' + role +
     * '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' a message */
    {"llama3", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
     "", 1, NULL, 0},
    /* ChatML's (Qwen, SmolLM, ...): '<|im_start|>' + role + '\n' + content + '<|im_end|>\n' */
    {"chatml", "", "<|im_start|>", "\n", "<|im_end|>", "\n", 0, NULL, 0},
    /* Gemma's (1.1, 2 and 3 instruction-tuned, without a system message): {{ bos_token }}
     * then '<start_of_turn>' + role + '\n' + content | trim + '<end_of_turn>\n', the
     * assistant's role written "model" */
    {"gemma", "<bos>", "<start_of_turn>", "\n", "<end_of_turn>", "\n", 1, "model", 1},
};

const rt_chat_format *rt_chat_find(const char *name)
{
    for (size_t k = 0; k < sizeof formats / sizeof *formats; k++)
        if (!strcmp(name, formats[k].name))
            return &formats[k];
    return NULL;
}

const char *rt_chat_names(void) { return "llama3, chatml, gemma"; }

char *rt_chat_prompt(const rt_chat_format *f, const char *user, size_t *n)
{
    size_t at = 0, len = strlen(user);
    if (f->trim)
        len = rt_utf8_strip(user, len, &at);
    const char *as = f->assistant ? f->assistant : "assistant";
    size_t cap = strlen(f->begin) + 2 * strlen(f->head) + 2 * strlen(f->mid) + strlen(f->end) +
                 strlen(f->after) + strlen(as) + len + 8;
    char *s = rt_xmalloc(cap);
    snprintf(s, cap, "%s%suser%s%.*s%s%s%s%s%s", f->begin, f->head, f->mid, (int)len, user + at,
             f->end, f->after, f->head, as, f->mid);
    *n = strlen(s);
    return s;
}
