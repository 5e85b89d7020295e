/* data_chat.h: the JSON-lines data commands' shared parts (data_chat.c: data sft, data
 * pairs). */
#ifndef DATA_CHAT_H
#define DATA_CHAT_H
#include "cmd.h"
#include "../runtime/chat.h"
#include "../runtime/tokenizer.h"

/* Line ln's value of KEY in o, a string, or exit 1 naming the line */
const char *data_field(const cJSON *o, const char *key, const char *file, int64_t ln);
/* A text the tokenizer encodes as it is (no NFC change: tokenizer.h), or exit 1 */
void data_check_normal(rt_tokenizer *t, const char *s, const char *file, int64_t ln);
/* One example's ids, each learned (its target kept) or not */
typedef struct DataExample {
    rt_ids ids;
    unsigned char *learned;
    int64_t cap;
} DataExample;
/* Appends ids (all learned or none) to ex */
void data_ex_add(DataExample *ex, const rt_ids *ids, int learned);
/* The id of the one token S encodes to (--eos's, a chat template's own), or exit 1 naming
 * data command CMD and WHAT S is */
int32_t data_one_token(rt_tokenizer *t, const char *s, const char *cmd, const char *what);
/* Every token chat template F writes is one of t's, or exit 1; its end token's id */
int32_t data_chat_tokens(rt_tokenizer *t, const rt_chat_format *f, const char *cmd);
/* Line ln's conversation at KEY, a non-empty list, or exit 1 */
const cJSON *data_chat_messages(const cJSON *o, const char *key, const char *file, int64_t ln);
/* A conversation (the messages MS) as the chat template F writes it, appended to ex: the
 * ids of the whole text (no post-processor: the template writes its tokens), those of each
 * assistant's content and closing token from message FROM on learned. A learned span's
 * ids are those its text adds to what comes before it, so each edge within the first
 * `keep` ids (the rest is cut) must fall where the tokenizer cuts anyway, else exit 1;
 * edges past them are not looked at, so a long conversation costs no more than its first
 * `keep` ids' worth of prefixes. */
void data_chat_example(rt_tokenizer *t, const rt_chat_format *f, const cJSON *ms,
                       int from, const char *file, int64_t ln, int64_t keep, DataExample *ex);

#endif
