/* chat.h: the chat templates trainc writes (Llama 3 Instruct's, ChatML's, Gemma's,
 * Phi-3's, Mistral's, Llama 2 Chat's, Zephyr's), for `trainc data sft --chat` (conversations into training rows) and the
 * trainer's --chat (a prompt as a user's turn, the assistant's to follow). */
#ifndef RT_CHAT_H
#define RT_CHAT_H

/* A chat template: each message is head ROLE mid CONTENT end after, the first after
 * begin, the last followed by tail (a conversation written whole, without a generation
 * prompt); a generation prompt is head ASSISTANT mid. With user_open (the [INST] form
 * of Mistral and Llama 2) no ROLE is written: a user's message is user_open CONTENT
 * user_close, an assistant's reply_open CONTENT end (all of it learned), and there is no
 * generation prompt. With sys_open (Llama 2's) a system message, first alone, is written
 * into the first user message's CONTENT: sys_open SYSTEM sys_close USER, trimmed whole
 * where the template trims. As the models' chat_template writes a conversation (without
 * a system message or a date of its own). */
typedef struct rt_chat_format {
    const char *name;
    const char *begin, *head, *mid, *end, *after, *tail;
    int trim;                  /* CONTENT without its leading and trailing white space
                                  (Jinja's trim: Python's str.strip()) */
    const char *assistant;     /* the ROLE written for "assistant" (NULL: itself) */
    int no_system;             /* the template refuses a system message */
    int three_roles;           /* the template writes system, user and assistant messages
                                  alone (others are refused) */
    int empty_system_out;      /* the template leaves an empty system message out */
    int alternate;             /* the template refuses a conversation whose roles do not
                                  alternate user, assistant, user, ... */
    const char *user_open, *user_close;   /* the [INST] form (above), or NULL */
    const char *reply_open;    /* the [INST] form: what an assistant's message begins with */
    const char *sys_open, *sys_close;     /* a system message inside the first user's */
    const char *stop;          /* the one token a reply ends at, where end is more than it
                                  (Llama 2's end " </s>": the model writes the space); NULL:
                                  end */
    const char *const *tokens; /* the template's own tokens, which the tokenizer must have
                                  as added tokens (NULL-ended) */
} rt_chat_format;

/* Whether the template writes nothing for a ROLE message of content_len bytes (with
 * empty_system_out: an empty system message). */
int rt_chat_left_out(const rt_chat_format *f, const char *role, size_t content_len);

/* A message's content c as the template writes it: *len bytes from the returned pointer
 * (trimmed where the template trims). */
const char *rt_chat_content(const rt_chat_format *f, const char *c, size_t *len);

/* A user's message's content as the template writes it (trimmed where the template
 * trims), with a system message (system, or NULL) written into it where the template
 * does that (sys_open); rt_xmalloc'd, *len its bytes. */
char *rt_chat_user_content(const rt_chat_format *f, const char *system, const char *user,
                           size_t *len);

/* The one token a reply ends at (stop, or end). */
const char *rt_chat_stop(const rt_chat_format *f);

/* What the template writes before a ROLE message's content (rt_xmalloc'd), and after
 * it (end, or the [INST] form's user_close; then comes after). */
char *rt_chat_open(const rt_chat_format *f, const char *role);
const char *rt_chat_close(const rt_chat_format *f, const char *role);

/* Why a conversation's message k (0-based, a system message written into a user's not
 * counted) of ROLE breaks the template's rule of roles (the [INST] form: user and
 * assistant alone; alternate: user first, then in turn), or NULL. */
const char *rt_chat_role_error(const rt_chat_format *f, int k, const char *role);

/* The format named name, or NULL; the names, ", "-joined. */
const rt_chat_format *rt_chat_find(const char *name);
const char *rt_chat_names(void);

/* A user's message as the template writes it with a generation prompt: begin, the
 * system message's turn (system, or NULL: none; with sys_open inside the user's), the
 * user's turn, then the assistant's head (first: apply_chat_template([{"role": "system",
 * "content": system}, {"role": "user", "content": user}], add_generation_prompt=True));
 * or (not first) what follows an assistant's reply in a conversation: the reply's end
 * token (rt_chat_stop), after, then the user's turn and the head. rt_xmalloc'd, *n its
 * bytes. */
char *rt_chat_turn(const rt_chat_format *f, int first, const char *system, const char *user,
                   size_t *n);

#endif
