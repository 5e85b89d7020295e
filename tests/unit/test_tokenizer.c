/* test_tokenizer.c: runtime/tokenizer.c without Python. Each supported pattern (GPT-2's,
 * Llama 3's, Qwen2's) cuts the texts below into the words `tokenizers` 0.19.1 cuts
 * (its pre_tokenize_str, written down here): a tokenizer.json with every byte and every
 * expected word whole in the vocabulary, ignore_merges and no merges, gives one id a
 * word, so the ids name the cut. Encoding the two sides of each safe cut gives the ids
 * of the whole text; unsupported parts of a file are refused by name. (The id-for-id
 * comparison with `tokenizers` itself is tests/tokenizer_hf.py.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "tokenizer.h"

static int failures;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return 0;                                                                 \
        }                                                                             \
    } while (0)

static void report(const char *name, int ok)
{
    printf("%s %s\n", ok ? "ok" : "FAIL", name);
    fflush(stdout);
    if (!ok)
        failures++;
}

static const char re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* the pieces tokenizers 0.19.1's pre_tokenize_str cuts (GPT-2's ByteLevel regex, and
 * Split(Regex) with Llama 3's and Qwen2's patterns, Isolated), byte-mapped back */
static const char *const cases[] = {
    "Hello world! It's IT'S they're THEY'RE we've I'm you'll he'd",
    "x'Sound y'" "\xc5" "\xbf" "ound don'T 'sup ''s",
    "1 12 123 1234 12345 3.14 " "\xc2" "\xb2" "\xc2" "\xb3" "\xc2" "\xbd" " " "\xd9" "\xa3" "\xd9" "\xa4" "\xd9" "\xa5",
    "  leading, trailing   ",
    "a  b   c" "\x09" "x" "\x09" "\x09" "y",
    "line" "\x0a" "next" "\x0a" "\x0a" "\x0a" "third" "\x0d" "\x0a" "fourth" "\x0d" "\x0d" "fifth" "\x0d",
    "old" "\x0d" "mac  " "\x0a" "  x  " "\x0a",
    "(hello) [x] {y} \"q\" #h @a $5 100% a&b",
    "!!!...??? --> <== ;;",
    "na" "\xc3" "\xaf" "ve caf" "\xc3" "\xa9" " r" "\xc3" "\xa9" "sum" "\xc3" "\xa9" " " "\xc3" "\x9f" " " "\xce" "\xa9" " " "\xd0" "\x9f" "\xd1" "\x80" "\xd0" "\xb8" "\xd0" "\xb2" "\xd0" "\xb5" "\xd1" "\x82" " " "\xe6" "\x97" "\xa5" "\xe6" "\x9c" "\xac" "\xe8" "\xaa" "\x9e" " " "\xed" "\x95" "\x9c" "\xea" "\xb5" "\xad" "\xec" "\x96" "\xb4",
    "emoji " "\xf0" "\x9f" "\x99" "\x82" "\xf0" "\x9f" "\x91" "\x8d" "\xf0" "\x9f" "\x8f" "\xbd" " " "\xe2" "\x9d" "\xa4" "\xef" "\xb8" "\x8f" " x" "\xf0" "\x9f" "\x99" "\x82" "y",
    "nbsp" "\xc2" "\xa0" "here" "\xe3" "\x80" "\x80" "ideo" "\xe2" "\x80" "\xa8" "ls" "\xe2" "\x80" "\x8a" "hair " "\xe2" "\x80" "\x8a" "\xe2" "\x80" "\x89" " of" "\xe2" "\x80" "\x8a" "\xe2" "\x80" "\x8a" "!? " "\xc2" "\x85" "nel",
    "end with newline" "\x0a",
    "tab" "\x09",
    " ",
    "\x0a" "\x0a",
    "'",
    "a1b2c3 x1y22z333w4444",
};
static const char *const want_gpt2[] = {
    "Hello", " world", "!", " It", "'s", " IT", "'", "S", " they", "'re", " THEY", "'", "RE", " we", "'ve", " I", "'m", " you", "'ll", " he", "'d", NULL,
    "x", "'", "Sound", " y", "'", "\xc5" "\xbf" "ound", " don", "'", "T", " '", "sup", " ''", "s", NULL,
    "1", " 12", " 123", " 1234", " 12345", " 3", ".", "14", " " "\xc2" "\xb2" "\xc2" "\xb3" "\xc2" "\xbd", " " "\xd9" "\xa3" "\xd9" "\xa4" "\xd9" "\xa5", NULL,
    " ", " leading", ",", " trailing", "   ", NULL,
    "a", " ", " b", "  ", " c", "\x09", "x", "\x09", "\x09", "y", NULL,
    "line", "\x0a", "next", "\x0a" "\x0a", "\x0a", "third", "\x0d", "\x0a", "fourth", "\x0d", "\x0d", "fifth", "\x0d", NULL,
    "old", "\x0d", "mac", "  " "\x0a" " ", " x", "  " "\x0a", NULL,
    "(", "hello", ")", " [", "x", "]", " {", "y", "}", " \"", "q", "\"", " #", "h", " @", "a", " $", "5", " 100", "%", " a", "&", "b", NULL,
    "!!!...???", " -->", " <==", " ;;", NULL,
    "na" "\xc3" "\xaf" "ve", " caf" "\xc3" "\xa9", " r" "\xc3" "\xa9" "sum" "\xc3" "\xa9", " " "\xc3" "\x9f", " " "\xce" "\xa9", " " "\xd0" "\x9f" "\xd1" "\x80" "\xd0" "\xb8" "\xd0" "\xb2" "\xd0" "\xb5" "\xd1" "\x82", " " "\xe6" "\x97" "\xa5" "\xe6" "\x9c" "\xac" "\xe8" "\xaa" "\x9e", " " "\xed" "\x95" "\x9c" "\xea" "\xb5" "\xad" "\xec" "\x96" "\xb4", NULL,
    "emoji", " " "\xf0" "\x9f" "\x99" "\x82" "\xf0" "\x9f" "\x91" "\x8d" "\xf0" "\x9f" "\x8f" "\xbd", " " "\xe2" "\x9d" "\xa4" "\xef" "\xb8" "\x8f", " x", "\xf0" "\x9f" "\x99" "\x82", "y", NULL,
    "nbsp", "\xc2" "\xa0", "here", "\xe3" "\x80" "\x80", "ideo", "\xe2" "\x80" "\xa8", "ls", "\xe2" "\x80" "\x8a", "hair", " " "\xe2" "\x80" "\x8a" "\xe2" "\x80" "\x89", " of", "\xe2" "\x80" "\x8a", "\xe2" "\x80" "\x8a", "!?", " ", "\xc2" "\x85", "nel", NULL,
    "end", " with", " newline", "\x0a", NULL,
    "tab", "\x09", NULL,
    " ", NULL,
    "\x0a" "\x0a", NULL,
    "'", NULL,
    "a", "1", "b", "2", "c", "3", " x", "1", "y", "22", "z", "333", "w", "4444", NULL,
};
static const char *const want_llama3[] = {
    "Hello", " world", "!", " It", "'s", " IT", "'S", " they", "'re", " THEY", "'RE", " we", "'ve", " I", "'m", " you", "'ll", " he", "'d", NULL,
    "x", "'S", "ound", " y", "'" "\xc5" "\xbf", "ound", " don", "'T", " '", "sup", " ''", "s", NULL,
    "1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "3", ".", "14", " ", "\xc2" "\xb2" "\xc2" "\xb3" "\xc2" "\xbd", " ", "\xd9" "\xa3" "\xd9" "\xa4" "\xd9" "\xa5", NULL,
    " ", " leading", ",", " trailing", "   ", NULL,
    "a", " ", " b", "  ", " c", "\x09" "x", "\x09", "\x09" "y", NULL,
    "line", "\x0a", "next", "\x0a" "\x0a" "\x0a", "third", "\x0d" "\x0a", "fourth", "\x0d" "\x0d", "fifth", "\x0d", NULL,
    "old", "\x0d", "mac", "  " "\x0a", " ", " x", "  " "\x0a", NULL,
    "(hello", ")", " [", "x", "]", " {", "y", "}", " \"", "q", "\"", " #", "h", " @", "a", " $", "5", " ", "100", "%", " a", "&b", NULL,
    "!!!...???", " -->", " <==", " ;;", NULL,
    "na" "\xc3" "\xaf" "ve", " caf" "\xc3" "\xa9", " r" "\xc3" "\xa9" "sum" "\xc3" "\xa9", " " "\xc3" "\x9f", " " "\xce" "\xa9", " " "\xd0" "\x9f" "\xd1" "\x80" "\xd0" "\xb8" "\xd0" "\xb2" "\xd0" "\xb5" "\xd1" "\x82", " " "\xe6" "\x97" "\xa5" "\xe6" "\x9c" "\xac" "\xe8" "\xaa" "\x9e", " " "\xed" "\x95" "\x9c" "\xea" "\xb5" "\xad" "\xec" "\x96" "\xb4", NULL,
    "emoji", " " "\xf0" "\x9f" "\x99" "\x82" "\xf0" "\x9f" "\x91" "\x8d" "\xf0" "\x9f" "\x8f" "\xbd", " " "\xe2" "\x9d" "\xa4" "\xef" "\xb8" "\x8f", " x", "\xf0" "\x9f" "\x99" "\x82" "y", NULL,
    "nbsp", "\xc2" "\xa0" "here", "\xe3" "\x80" "\x80" "ideo", "\xe2" "\x80" "\xa8" "ls", "\xe2" "\x80" "\x8a" "hair", " " "\xe2" "\x80" "\x8a" "\xe2" "\x80" "\x89", " of", "\xe2" "\x80" "\x8a", "\xe2" "\x80" "\x8a", "!?", " ", "\xc2" "\x85" "nel", NULL,
    "end", " with", " newline", "\x0a", NULL,
    "tab", "\x09", NULL,
    " ", NULL,
    "\x0a" "\x0a", NULL,
    "'", NULL,
    "a", "1", "b", "2", "c", "3", " x", "1", "y", "22", "z", "333", "w", "444", "4", NULL,
};
static const char *const want_qwen2[] = {
    "Hello", " world", "!", " It", "'s", " IT", "'S", " they", "'re", " THEY", "'RE", " we", "'ve", " I", "'m", " you", "'ll", " he", "'d", NULL,
    "x", "'S", "ound", " y", "'" "\xc5" "\xbf", "ound", " don", "'T", " '", "sup", " ''", "s", NULL,
    "1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5", " ", "3", ".", "1", "4", " ", "\xc2" "\xb2", "\xc2" "\xb3", "\xc2" "\xbd", " ", "\xd9" "\xa3", "\xd9" "\xa4", "\xd9" "\xa5", NULL,
    " ", " leading", ",", " trailing", "   ", NULL,
    "a", " ", " b", "  ", " c", "\x09" "x", "\x09", "\x09" "y", NULL,
    "line", "\x0a", "next", "\x0a" "\x0a" "\x0a", "third", "\x0d" "\x0a", "fourth", "\x0d" "\x0d", "fifth", "\x0d", NULL,
    "old", "\x0d", "mac", "  " "\x0a", " ", " x", "  " "\x0a", NULL,
    "(hello", ")", " [", "x", "]", " {", "y", "}", " \"", "q", "\"", " #", "h", " @", "a", " $", "5", " ", "1", "0", "0", "%", " a", "&b", NULL,
    "!!!...???", " -->", " <==", " ;;", NULL,
    "na" "\xc3" "\xaf" "ve", " caf" "\xc3" "\xa9", " r" "\xc3" "\xa9" "sum" "\xc3" "\xa9", " " "\xc3" "\x9f", " " "\xce" "\xa9", " " "\xd0" "\x9f" "\xd1" "\x80" "\xd0" "\xb8" "\xd0" "\xb2" "\xd0" "\xb5" "\xd1" "\x82", " " "\xe6" "\x97" "\xa5" "\xe6" "\x9c" "\xac" "\xe8" "\xaa" "\x9e", " " "\xed" "\x95" "\x9c" "\xea" "\xb5" "\xad" "\xec" "\x96" "\xb4", NULL,
    "emoji", " " "\xf0" "\x9f" "\x99" "\x82" "\xf0" "\x9f" "\x91" "\x8d" "\xf0" "\x9f" "\x8f" "\xbd", " " "\xe2" "\x9d" "\xa4" "\xef" "\xb8" "\x8f", " x", "\xf0" "\x9f" "\x99" "\x82" "y", NULL,
    "nbsp", "\xc2" "\xa0" "here", "\xe3" "\x80" "\x80" "ideo", "\xe2" "\x80" "\xa8" "ls", "\xe2" "\x80" "\x8a" "hair", " " "\xe2" "\x80" "\x8a" "\xe2" "\x80" "\x89", " of", "\xe2" "\x80" "\x8a", "\xe2" "\x80" "\x8a", "!?", " ", "\xc2" "\x85" "nel", NULL,
    "end", " with", " newline", "\x0a", NULL,
    "tab", "\x09", NULL,
    " ", NULL,
    "\x0a" "\x0a", NULL,
    "'", NULL,
    "a", "1", "b", "2", "c", "3", " x", "1", "y", "2", "2", "z", "3", "3", "3", "w", "4", "4", "4", "4", NULL,
};

enum { N_CASES = sizeof cases / sizeof *cases };

/* GPT-2's bytes_to_unicode, as UTF-8: s[0, n) byte-mapped (a vocabulary key). */
static char *mapped(const char *s, size_t n)
{
    static int map[256];
    if (!map['!']) {
        int next = 0;
        for (int b = 0; b < 256; b++) {
            int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            map[b] = keep ? b : 256 + next++;
        }
    }
    char *out = malloc(2 * n + 1), *p = out;
    for (size_t i = 0; i < n; i++) {
        int c = map[(unsigned char)s[i]];
        if (c < 0x80) {
            *p++ = (char)c;
        } else {
            *p++ = (char)(0xC0 | c >> 6);
            *p++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *p = 0;
    return out;
}

/* Adds key with the next id unless it is there. */
static void vocab_add(cJSON *vocab, const char *s, size_t n)
{
    char *key = mapped(s, n);
    if (!cJSON_GetObjectItemCaseSensitive(vocab, key))
        cJSON_AddNumberToObject(vocab, key, cJSON_GetArraySize(vocab));
    free(key);
}

static cJSON *byte_level(int use_regex)
{
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddFalseToObject(bl, "add_prefix_space");
    cJSON_AddBoolToObject(bl, "use_regex", use_regex);
    return bl;
}

/* A tokenizer.json with every byte and every word of want whole; pattern NULL: GPT-2's
 * ByteLevel. The caller frees it. */
static cJSON *words_json(const char *pattern, const char *const *want)
{
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddTrueToObject(model, "ignore_merges");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON_AddArrayToObject(model, "merges");
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        vocab_add(vocab, &c, 1);
    }
    for (int k = 0, i = 0; k < N_CASES; k++, i++)
        for (; want[i]; i++)
            vocab_add(vocab, want[i], strlen(want[i]));
    if (!pattern) {
        cJSON_AddItemToObject(root, "pre_tokenizer", byte_level(1));
        return root;
    }
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers"), *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", pattern);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddFalseToObject(split, "invert");
    cJSON_AddItemToArray(list, split);
    cJSON_AddItemToArray(list, byte_level(0));
    return root;
}

/* Loads the JSON through a file, as the commands do; NULL with the error in err. */
static rt_tokenizer *load_json(cJSON *root, char *err, size_t errlen)
{
    char path[] = "/tmp/test_tokenizer_XXXXXX";
    int fd = mkstemp(path);
    char *text = cJSON_PrintUnformatted(root);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    rt_tokenizer *t = rt_tok_load(path, err, errlen);
    unlink(path);
    return t;
}

/* Each case cut into want's words: one id a word, each id's bytes that word. */
static int test_cuts(const char *pattern, const char *const *want)
{
    char err[1024];
    cJSON *root = words_json(pattern, want);
    rt_tokenizer *t = load_json(root, err, sizeof err);
    cJSON_Delete(root);
    if (!t)
        fprintf(stderr, "  %s\n", err);
    CHECK(t);
    for (int k = 0, i = 0; k < N_CASES; k++, i++) {
        rt_ids ids = {0};
        rt_tok_encode(t, cases[k], strlen(cases[k]), &ids);
        for (int64_t j = 0; j < ids.n; j++, i++) {
            size_t len;
            const char *piece = rt_tok_piece(t, ids.v[j], &len);
            if (!want[i] || len != strlen(want[i]) || memcmp(piece, want[i], len) != 0) {
                fprintf(stderr, "  case %d, word %lld: got '%.*s', want '%s'\n", k,
                        (long long)j, (int)len, piece, want[i] ? want[i] : "(none)");
                return 0;
            }
        }
        CHECK(want[i] == NULL);
        rt_ids_free(&ids);
    }
    rt_tok_free(t);
    return 1;
}

/* Encoding both sides of the safe cut of every prefix of every case (and of all cases
 * joined) gives the ids of the whole. */
static int test_safe_cut(const char *pattern, const char *const *want)
{
    char err[1024], all[4096] = "";
    cJSON *root = words_json(pattern, want);
    rt_tokenizer *t = load_json(root, err, sizeof err);
    cJSON_Delete(root);
    CHECK(t);
    for (int k = 0; k < N_CASES; k++)
        strcat(strcat(all, cases[k]), "\n");
    int cuts = 0;
    for (int k = 0; k <= N_CASES; k++) {
        const char *s = k < N_CASES ? cases[k] : all;
        size_t n = strlen(s);
        rt_ids whole = {0};
        rt_tok_encode_part(t, s, n, &whole);
        for (size_t len = 1; len <= n; len++) {
            size_t p = rt_tok_safe_cut(t, s, len, 0);
            if (p == 0)
                continue;
            CHECK(p < len);
            rt_ids two = {0};
            rt_tok_encode_part(t, s, p, &two);
            rt_tok_encode_part(t, s + p, n - p, &two);
            CHECK(two.n == whole.n && memcmp(two.v, whole.v, (size_t)two.n * 4) == 0);
            rt_ids_free(&two);
            cuts++;
        }
        rt_ids_free(&whole);
    }
    CHECK(cuts > 100);
    rt_tok_free(t);
    return 1;
}

/* A file part trainc does not read is refused, named. */
static int refused(const char *key, const char *json_value, const char *named)
{
    char err[1024];
    cJSON *root = words_json(re_llama3, want_llama3);
    cJSON *v = cJSON_Parse(json_value);
    if (strcmp(key, "model.type") == 0)
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "type", v);
    else
        cJSON_AddItemToObject(root, key, v);
    rt_tokenizer *t = load_json(root, err, sizeof err);
    cJSON_Delete(root);
    CHECK(!t);
    if (!strstr(err, named))
        fprintf(stderr, "  '%s' does not name %s\n", err, named);
    CHECK(strstr(err, named));
    return 1;
}

static int test_refusals(void)
{
    return refused("normalizer", "{\"type\": \"NFKC\"}", "'NFKC'") &&
           refused("model.type", "\"WordLevel\"", "'WordLevel'") &&
           refused("post_processor", "{\"type\": \"BertProcessing\"}",
                   "BertProcessing: \"cls\" is not [token, id]") &&
           refused("post_processor", "{\"type\": \"Precompiled\"}", "'Precompiled'") &&
           refused("added_tokens", "[{\"id\": 5, \"content\": \"<x>\", \"single_word\": true}]",
                   "single_word");
}

int main(void)
{
    report("words/gpt2", test_cuts(NULL, want_gpt2));
    report("words/gpt2_split", test_cuts(re_gpt2, want_gpt2));
    report("words/llama3", test_cuts(re_llama3, want_llama3));
    report("words/qwen2", test_cuts(re_qwen2, want_qwen2));
    report("safe_cut/gpt2", test_safe_cut(NULL, want_gpt2));
    report("safe_cut/llama3", test_safe_cut(re_llama3, want_llama3));
    report("safe_cut/qwen2", test_safe_cut(re_qwen2, want_qwen2));
    report("refusals", test_refusals());
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures != 0;
}
