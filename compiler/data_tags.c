/* data_tags.c: `trainc data tags FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json
 * [--val FILE.jsonl | --val-frac F | --unlabeled] [--words KEY] [--tags KEY]
 * [--all-pieces]`: a token classifier's examples (named entities, parts of speech), one
 * JSON object a line with a text split into words and a tag for each word (Hugging Face
 * datasets' CoNLL-2003 form: {"tokens": ["EU", "rejects", ...], "ner_tags": [3, 0, ...]}),
 * as the padded rows an imported BertForTokenClassification (or RoBERTa's, DistilBERT's)
 * trains on:
 *   DIR/train_x.npy     [N, T] i32  the ids of transformers' tokenizer(words,
 *                                   is_split_into_words=True, truncation=True,
 *                                   max_length=T, padding="max_length")
 *   DIR/train_types.npy [N, T] i32  their type ids (0), where the model has a "types" input
 *   DIR/train_pos.npy   [N, T] i32  0 .. L-1 over the L ids, then 0 .. T-L-1 over the padding
 *   DIR/train_y.npy     [N, T] i32  each word's tag on its first piece, -100 on its other
 *                                   pieces (--all-pieces: the tag on each), the special
 *                                   tokens and the padding (the loss's ignore_index)
 *   DIR/train_words.npy [N, T] i32  each token's word (its index in the line's list), -1
 *                                   for the special tokens and the padding (word_ids())
 * and DIR/val_*.npy from --val's file, or the last F of FILE's examples (0.1; none with
 * 0); --unlabeled: DIR/test_*.npy without y, for --predict. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"
#include "../runtime/tokenizer.h"

static const char tags_usage[] =
    "usage: trainc data tags FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json "
    "[--val FILE.jsonl | --val-frac F | --unlabeled] [--words KEY] [--tags KEY] [--all-pieces]";

enum { IGNORE = -100 };   /* transformers' label of a token no class is asked of */

typedef struct {
    const char *file, *dir, *tok, *model, *val;
    const char *words, *tags;  /* the lines' keys */
    double val_frac;
    int unlabeled, all_pieces;
} TagArgs;

static void parse_args(int argc, char **argv, TagArgs *a)
{
    *a = (TagArgs){.val_frac = 0.1, .words = "tokens", .tags = "ner_tags"};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        const char **opt = !strcmp(s, "--tokenizer") ? &a->tok : !strcmp(s, "--model") ? &a->model
                         : !strcmp(s, "--val") ? &a->val : !strcmp(s, "--words") ? &a->words
                         : !strcmp(s, "--tags") ? &a->tags : NULL;
        if (opt)
            *opt = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("tags", opt_value(argc, argv, &i, s));
        else if (!strcmp(s, "--unlabeled"))
            a->unlabeled = 1;
        else if (!strcmp(s, "--all-pieces"))
            a->all_pieces = 1;
        else
            data_positional("tags", tags_usage, s, &a->file, &a->dir);
    }
    if (a->unlabeled && a->val)
        error_input("data tags: --unlabeled writes the rows a model predicts on, one set: no "
                    "--val");
    if (!a->file || !a->dir || !a->tok || !a->model)
        error_input("data tags: missing %s\n%s", !a->file ? "the input file" : !a->dir
                    ? "the output folder" : !a->tok ? "--tokenizer TOK.json (the model's "
                    "tokenizer)" : "--model MODEL.json (its rows' length and classes)", tags_usage);
}

/* A line's words and their pieces: ids, each piece's word, and each word's tag */
typedef struct {
    rt_ids ids, word, tag;
} Words;

/* Line ln's words at KEY, each encoded apart into w */
static int64_t line_words(rt_tokenizer *t, const cJSON *o, const char *key, const char *file,
                          int64_t ln, Words *w)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key), *e;
    if (!cJSON_IsArray(v))
        data_line_error(file, ln, v ? "'%s' must be a list of words" : "missing key '%s'", key);
    w->ids.n = w->word.n = 0;
    int64_t n = 0;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e))
            data_line_error(file, ln, "'%s'[%" PRId64 "] must be a string", key, n);
        size_t len = strlen(e->valuestring);
        uint32_t cp;
        if (rt_tok_unnormalized(t, e->valuestring, len, &cp) < len)
            data_line_error(file, ln, "U+%04X, which the tokenizer's NFC normalizer may change "
                            "(normalize the file first)", cp);
        rt_tok_encode_word(t, e->valuestring, len, &w->ids);
        while (w->word.n < w->ids.n)
            rt_ids_push(&w->word, (uint32_t)n);
        n++;
    }
    return n;
}

/* Line ln's tags at KEY, one for each of its n words */
static void line_tags(const ClsModel *cm, const cJSON *o, const TagArgs *a, int64_t n,
                      const char *file, int64_t ln, Words *w)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a->tags), *e;
    if (!cJSON_IsArray(v))
        data_line_error(file, ln, v ? "'%s' must be a list of tags" : "missing key '%s'",
                        a->tags);
    if (cJSON_GetArraySize(v) != n)
        data_line_error(file, ln, "%d tags for %" PRId64 " words", cJSON_GetArraySize(v), n);
    w->tag.n = 0;
    cJSON_ArrayForEach(e, v) {
        int64_t k = w->tag.n;
        rt_ids_push(&w->tag, (uint32_t)data_cls_class(cm, e, xasprintf("%s[%" PRId64 "]",
                                                                        a->tags, k), file, ln));
    }
}

typedef struct {
    int64_t cut, tokens, tagged;
} TagCounts;

/* One example as its row: x, types, pos, y and words [T]; the pieces past T's room cut */
static void example_row(rt_tokenizer *t, Words *w, const TagArgs *a, int64_t T, int32_t pad,
                        int64_t before, int32_t *row[5], TagCounts *c)
{
    int64_t m = T - rt_tok_added(t, 0);
    c->cut += w->ids.n > m;
    if (w->ids.n > m)
        w->ids.n = m;
    rt_ids ids = {0}, types = {0};
    rt_tok_template(t, &w->ids, NULL, &ids, &types);
    for (int64_t i = 0; i < T; i++) {
        int in = i < ids.n, piece = i >= before && i - before < w->ids.n;
        int32_t wd = piece ? (int32_t)w->word.v[i - before] : -1;
        int first = piece && (i == before || (int32_t)w->word.v[i - before - 1] != wd);
        row[0][i] = in ? (int32_t)ids.v[i] : pad;
        row[1][i] = in ? (int32_t)types.v[i] : 0;
        row[2][i] = (int32_t)(in ? i : i - ids.n);
        int tagged = !a->unlabeled && piece && (first || a->all_pieces);
        row[3][i] = tagged ? (int32_t)w->tag.v[wd] : IGNORE;
        row[4][i] = wd;
        c->tagged += row[3][i] != IGNORE;
    }
    c->tokens += ids.n;
    rt_ids_free(&ids);
    rt_ids_free(&types);
}

/* What the rows are written with (data_cls_write's ctx) */
typedef struct {
    const TagArgs *a;
    const ClsModel *cm;
    rt_tokenizer *t;
    TagCounts c;
} TagJob;

/* Encodes FILE's examples: the first n_train into tr's rows, the rest into va's */
static void encode_file(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va)
{
    TagJob *j = ctx;
    const TagArgs *a = j->a;
    const ClsModel *cm = j->cm;
    rt_tokenizer *t = j->t;
    TagCounts *c = &j->c;
    DataLines in;
    data_lines_open(&in, file, xasprintf("{\"%s\": [WORD, ...], \"%s\": [TAG, ...]}", a->words,
                                         a->tags));
    int32_t pad = (int32_t)(rt_tok_pad_id(t) >= 0 ? rt_tok_pad_id(t) : 0);
    int32_t *row[5];
    for (int k = 0; k < 5; k++)
        row[k] = xcalloc((size_t)cm->T, sizeof(int32_t));
    rt_ids pre = {0};
    rt_tok_prefix(t, &pre);   /* (where the words' pieces start in a row) */
    Words w = {0};
    int64_t k = 0;
    for (cJSON *o; (o = data_lines_next(&in));) {
        int64_t n = line_words(t, o, a->words, file, in.ln, &w);
        if (!a->unlabeled)
            line_tags(cm, o, a, n, file, in.ln, &w);
        cJSON_Delete(o);
        example_row(t, &w, a, cm->T, pad, pre.n, row, c);
        const int32_t *put[5] = {row[0]};
        int j = 1;
        if (cm->types)
            put[j++] = row[1];
        put[j++] = row[2];
        if (!a->unlabeled)
            put[j++] = row[3];
        put[j] = row[4];
        data_rows_put(k++ < n_train ? tr : va, put);
    }
    data_lines_close(&in);
    for (int r = 0; r < 5; r++)
        free(row[r]);
    rt_ids_free(&w.ids), rt_ids_free(&pre);
    rt_ids_free(&w.word), rt_ids_free(&w.tag);
}

/* DIR/NAME_{x,types,pos,y,words}.npy (types where the model reads them; y unless
 * unlabeled) */
static void rows_open(void *ctx, DataRows *o, const char *name)
{
    const TagJob *j = ctx;
    const char *const keys[2] = {"y", "words"};
    int u = j->a->unlabeled;
    data_cls_rows(o, j->a->dir, j->cm, name, 2 - u, keys + u, (int64_t[]){j->cm->T, j->cm->T});
}

/* Is the tokenizer at TOK transformers' plain PreTrainedTokenizerFast (its
 * tokenizer_config.json beside it says so, without add_prefix_space true: ModernBERT's)?
 * That class encodes words as tokenizer.json's pre-tokenizer says, no space before them;
 * GPT-2's and RoBERTa's classes ask for add_prefix_space=True with words. */
static int plain_fast(const char *tok)
{
    const char *slash = strrchr(tok, '/');
    char *cfg = slash ? xasprintf("%.*s/tokenizer_config.json", (int)(slash - tok), tok)
                      : xstrdup("tokenizer_config.json");
    char *text = access(cfg, R_OK) == 0 ? hf_slurp(cfg, NULL) : NULL;
    free(cfg);
    cJSON *c = text ? cJSON_Parse(text) : NULL;
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(c, "tokenizer_class");
    int plain = cJSON_IsString(cls) && !strcmp(cls->valuestring, "PreTrainedTokenizerFast") &&
                !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_prefix_space"));
    cJSON_Delete(c);
    free(text);
    return plain;
}

/* The tokenizer, which must encode words apart */
static rt_tokenizer *load_tokenizer(const TagArgs *a, const ClsModel *cm)
{
    rt_tokenizer *t = data_cls_tokenizer("tags", a->tok, cm, 0);
    rt_tok_words_bare(t, plain_fast(a->tok));
    rt_ids probe = {0};
    if (rt_tok_encode_word(t, "a", 1, &probe) != 0)
        error_input("data tags: %s: Digits before ByteLevel (StarCoder's pre-tokenizer): "
                    "transformers' add_prefix_space, which words ask for, puts a space "
                    "before each of its pieces; trainc encodes words apart for the other "
                    "tokenizers", a->tok);
    rt_ids_free(&probe);
    return t;
}

int data_tags(int argc, char **argv)
{
    TagArgs a;
    parse_args(argc, argv, &a);
    ClsModel cm = data_cls_model(a.model, CLS_TOKENS);
    rt_tokenizer *t = load_tokenizer(&a, &cm);
    ClsSplit sp = data_cls_split(a.file, a.val, a.val_frac, a.unlabeled, a.dir,
                                 xasprintf("{\"%s\": [WORD, ...], \"%s\": [TAG, ...]}", a.words,
                                           a.tags));
    DataRows tr = {0}, va = {0};
    TagJob j = {&a, &cm, t, {0}};
    data_cls_write(&(ClsWrite){rows_open, encode_file, &j}, a.file, a.val, a.unlabeled, &sp, &tr,
                   &va);
    data_commit();
    const TagCounts c = j.c;
    const int64_t n = sp.n, n_valfile = sp.n_valfile;
    if (a.unlabeled)
        printf("%s: %" PRId64 " examples -> %" PRId64 " rows of %" PRId64 " to predict on (%" PRId64
               " cut to fit; each token's word in test_words.npy): --predict %s/test_x.npy\n",
               a.file, n, tr.rows, cm.T, c.cut, a.dir);
    else
        printf("%s%s: %" PRId64 " examples -> %" PRId64 " train + %" PRId64 " val rows of %" PRId64
               " (%" PRId64 " tokens, %" PRId64 " of them tagged; %" PRId64 " cut to fit), %"
               PRId64 " classes\n",
               a.file, a.val ? xasprintf(" and %s", a.val) : "", n + n_valfile, tr.rows, va.rows,
               cm.T, c.tokens, c.tagged, c.cut, cm.K);
    rt_tok_free(t);
    return 0;
}
