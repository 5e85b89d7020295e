/* spec_read.h: what spec.c (the model spec and the entry points) and spec_train.c (the
 * training spec) share: the reading context and the checking helpers. Every error
 * exits 1 through error_at() with the place as a JSON path ("$.model.layers[3].out"). */
#ifndef TRAINC_SPEC_READ_H
#define TRAINC_SPEC_READ_H
#include "trainc.h"

/* Where each training-spec key came from in the file ("optimizer.nesterov" ->
 * "$.train.optimizer.nesterov"), for the cross-field rules' errors. */
typedef struct KeyPath {
    char *key, *path;
} KeyPath;

typedef struct KeyPaths {
    KeyPath *v;
    int n, cap;
} KeyPaths;

typedef struct Ctx {
    const char *file;          /* for error_at */
    Spec *s;
    KeyPaths *keys;            /* while reading "train" */
} Ctx;

/* Keeps a pointer reachable for good: suggestion lists and message parts built just
 * before error_at() exits, so that LeakSanitizer stays quiet on bad input. */
void *sp_keep(void *p);
/* User text for a one-line message: control characters escaped, at most 60 bytes. */
const char *sp_show(const char *s);
/* "$.a.b" for identifier keys, "$.a[\"x y\"]" otherwise. */
char *sp_path_key(const char *parent, const char *key);
/* A number as short as it reads back exactly: 25.5, 0.9, 1e-08, 1024. */
void sp_fmt_number(char *buf, size_t len, double d);
/* A value as an error message shows it, in buf: numbers and literals as written,
 * strings in quotes, containers by kind. */
const char *sp_got(const cJSON *v, char *buf, size_t len);
/* Whether w is one of the NULL-terminated words. */
int sp_in_list(const char *w, const char *const *words);
/* The key of `words` that `word` is another name for, or NULL. */
const char *sp_alias_of(const char *word, const char *const *words);
/* "unknown key 'K'; did you mean 'W'?" or, with no close word, the hint. */
_Noreturn void sp_unknown(const Ctx *c, const char *path, const char *what, const char *word,
                          const char *const *known, const char *hint);
/* "a, b, c" from a NULL-terminated list. */
char *sp_join(const char *const *words);
/* Rejects keys of obj outside `allowed`, pointing at the key. */
void sp_check_keys(const Ctx *c, const cJSON *obj, const char *path,
                   const char *const *allowed);
/* Exits 1 unless v is an object ("expected WHAT, got ..."). */
void sp_need_object(const Ctx *c, const cJSON *v, const char *path, const char *what);
/* obj's member key (case-sensitive), or NULL. */
const cJSON *sp_member(const cJSON *obj, const char *key);
/* obj's member key, or exit 1 naming it as missing. */
const cJSON *sp_require(const Ctx *c, const cJSON *obj, const char *path, const char *key);
/* The index of the model's input called name, or -1. */
int sp_find_input(const Spec *s, const char *name);
/* The model's input names, NULL-terminated, optionally with "tokens". */
const char **sp_input_names(const Spec *s, int with_tokens);

/* spec_train.c: "train" into c->s->train, checked against the model */
void parse_train(const Ctx *c, const cJSON *t);
int check_train_vs_model(const Spec *s, char *err, size_t errlen, char *key, size_t keylen);

#endif
