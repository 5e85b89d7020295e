/* fuzz_tokenizer.c: runtime/tokenizer.c on any bytes. An input whose first byte is 'J'
 * is a tokenizer.json for rt_tok_load (the loader's checks); one whose first byte is 'P'
 * is a Unigram tokenizer's precompiled_charsmap (its bytes, base64'd here: the trie
 * walk, the replacements, the grapheme clusters and the Viterbi over what it writes),
 * which then encodes texts and must give the whole text's ids when cut at its safe cut;
 * any other is a text for
 * small byte-level BPEs with each pattern (GPT-2's, Llama 3's, Qwen2's, GPT-4o's,
 * Tekken's; GPT-2's after StarCoder's Digits) and an added token, and a small
 * SentencePiece-style one (Metaspace, byte_fallback), and each must
 * decode back to the text and give the whole text's ids when cut at its safe cut (a
 * difference aborts: a crash for the fuzzer); so must GPT-2's and two SentencePiece-
 * style ones with added tokens that take white space (lstrip, rstrip), save decoding,
 * and a Unigram one (Strip, Replace of space runs, Metaspace, a normalized <mask>). */
#include "fuzz.h"
#include "tokenizer.h"

static const char *const patterns[] = {
    NULL,
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
    "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
    "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+",
    "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+"
    "[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
    "[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+",
    "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+|"
    "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*|"
    "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+",
    "digits",   /* StarCoder's: Digits (individual_digits), then ByteLevel with its regex */
};
enum { N_PATTERNS = sizeof patterns / sizeof *patterns };

/* The tokenizer.json text json[0, n) loaded (a failure aborts: the file is the target's) */
static rt_tokenizer *load_or_abort(char *json, int n)
{
    char err[1024];
    rt_tokenizer *t = rt_tok_load(fuzz_file((const uint8_t *)json, (size_t)n, ".json"), err,
                                  sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    free(json);
    return t;
}

/* Two more added tokens, for a tokenizer whose ids need not decode to the text: <l>
 * takes the white space before it (lstrip), <r> that after it (rstrip). */
static const char strips[] =
    ", {\"id\": 0, \"content\": \"<l>\", \"lstrip\": true, \"normalized\": false}, "
    "{\"id\": 0, \"content\": \"<r>\", \"rstrip\": true, \"normalized\": false}";

/* A tokenizer.json: the 256 bytes (GPT-2's byte map), a few merges, one added token
 * (and the added tokens in extra). */
static rt_tokenizer *small(const char *pattern, const char *extra)
{
    static const char *const merges[] = {"t h", "th e", "i n", "in g", "\\u0120 t", "\\u0120t h",
                                         "\\u0120th e", "e r", "a n", "\\u0120 a", "\\u0120a n",
                                         "' s", "1 2", "\\u0120 \\u0120", "\\u010a \\u010a", "= =",
                                         "== =="};
    enum { N_MERGES = sizeof merges / sizeof *merges };
    char *json = malloc(1 << 16);
    int n = sprintf(json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    int next = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int c = keep ? b : 256 + next++;
        if (c == '"' || c == '\\')
            n += sprintf(json + n, "\"\\%c\": %d, ", c, b);
        else
            n += sprintf(json + n, "\"\\u%04x\": %d, ", c, b);
    }
    for (int i = 0; i < N_MERGES; i++) {   /* each merge's result: its two sides joined */
        const char *sp = strchr(merges[i], ' ');
        n += sprintf(json + n, "\"%.*s%s\": %d, ", (int)(sp - merges[i]), merges[i], sp + 1, 256 + i);
    }
    n += sprintf(json + n, "\"<|x|>\": %d}, \"merges\": [", 256 + N_MERGES);
    for (int i = 0; i < N_MERGES; i++)
        n += sprintf(json + n, "%s\"%s\"", i ? ", " : "", merges[i]);
    n += sprintf(json + n, "]}, \"added_tokens\": [{\"id\": %d, \"content\": \"<|x|>\", "
                           "\"special\": true, \"normalized\": false}%s], \"pre_tokenizer\": ",
                 256 + N_MERGES, extra);
    if (!pattern)
        n += sprintf(json + n, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}}");
    else if (!strcmp(pattern, "digits"))
        n += sprintf(json + n, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                               "\"individual_digits\": true}, {\"type\": \"ByteLevel\", "
                               "\"add_prefix_space\": false}]}}");
    else
        n += sprintf(json + n, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                               "\"pattern\": {\"Regex\": \"%s\"}, \"behavior\": \"Isolated\"}, "
                               "{\"type\": \"ByteLevel\", \"use_regex\": false}]}}", pattern);
    return load_or_abort(json, n);
}

/* A SentencePiece-style tokenizer.json: the 256 <0xXX> tokens, U+2581 and a few
 * letters and merges, one added token (and those in extra), Metaspace without a
 * prepended U+2581 (so that the ids decode to the text as it is), or with Llama 2's
 * normalizer (prepend: a U+2581 before each part between added tokens). */
static rt_tokenizer *small_sp(const char *extra, int prepend)
{
    static const char json[] =
        "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"fuse_unk\": true, "
        "\"vocab\": {%s\"\\u2581\": 256, \"t\": 257, \"h\": 258, \"e\": 259, \"\\u2581t\": 260, "
        "\"th\": 261, \"the\": 262, \"\\u2581the\": 263, \"\\u2581\\u2581\": 264, \"<x>\": 265}, "
        "\"merges\": [\"t h\", \"th e\", \"\\u2581 t\", \"\\u2581 the\", \"\\u2581 \\u2581\"]}, "
        "\"added_tokens\": [{\"id\": 265, \"content\": \"<x>\", \"special\": true, "
        "\"normalized\": false}%s], %s}";
    static const char metaspace[] =
        "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
        "\"prepend_scheme\": \"never\", \"split\": false}";
    static const char llama2[] =
        "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", "
        "\"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
        "\"content\": \"\\u2581\"}]}";
    char bytes[256 * 16], *b = bytes;
    for (int i = 0; i < 256; i++)
        b += sprintf(b, "\"<0x%02X>\": %d, ", i, i);
    char *text = malloc(sizeof json + sizeof bytes + sizeof strips + sizeof llama2);
    return load_or_abort(text, sprintf(text, json, bytes, extra, prepend ? llama2 : metaspace));
}

/* A Unigram tokenizer.json: a few pieces with scores, unk, a normalized <mask> with
 * lstrip, Metaspace (always); its normalizer Precompiled (charsmap: base64, or NULL for
 * none), Strip of the right and Replace of space runs, XLM-R's. A new string, its
 * length in *n. */
static char *ug_json(const char *charsmap, int *n)
{
    static const char json[] =
        "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], "
        "[\"\\u2581\", -2], [\"t\", -3], [\"h\", -3.5], [\"e\", -3], [\"\\u2581the\", -4], "
        "[\"th\", -4.5], [\"\\u2581t\", -3.2], [\"a\", -3], [\"b\", -3.3], [\"<mask>\", 0]]}, "
        "\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true, "
        "\"normalized\": false}, {\"id\": 10, \"content\": \"<mask>\", \"special\": true, "
        "\"lstrip\": true, \"normalized\": true}], \"normalizer\": {\"type\": \"Sequence\", "
        "\"normalizers\": [%s%s%s{\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true}, "
        "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": \"\\u2581\"}]}, "
        "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
        "\"prepend_scheme\": \"always\", \"split\": true}}";
    const char *pre = charsmap ? "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"" : "";
    const char *post = charsmap ? "\"}, " : "";
    size_t len = sizeof json + (charsmap ? strlen(charsmap) : 0) + 128;
    char *text = malloc(len);
    *n = snprintf(text, len, json, pre, charsmap ? charsmap : "", post);
    return text;
}

/* d[0, n) as standard base64 (a new string) */
static char *base64(const uint8_t *d, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(4 * (n / 3) + 8), *w = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        *w++ = abc[v >> 18 & 63];
        *w++ = abc[v >> 12 & 63];
        *w++ = i + 1 < n ? abc[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? abc[v & 63] : '=';
    }
    *w = 0;
    return o;
}

/* s[0, n) with each U+2581 written as a space (what a SentencePiece-style decode
 * gives for it), into a new string of *m bytes */
static char *meta_as_space(const char *s, size_t n, size_t *m)
{
    char *d = malloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            d[k++] = ' ';
            i += 2;
        } else {
            d[k++] = s[i];
        }
    *m = k;
    return d;
}

/* The two sides of the safe cut give the whole's ids; strict: the ids decode to the
 * text (every byte has its id, as in the small tokenizers; sp: U+2581 as a space). */
static void check_text(rt_tokenizer *t, const char *s, size_t n, int strict, int sp)
{
    rt_ids whole = {0}, two = {0}, bos = {0};
    rt_tok_prefix(t, &bos);   /* a text starts */
    rt_tok_encode_part(t, s, n, &whole);
    size_t at = 0, len, m = n;
    const char *want = sp ? meta_as_space(s, n, &m) : s;
    for (int64_t i = 0; strict && i < whole.n; i++) {
        const char *p = rt_tok_piece(t, whole.v[i], &len);
        if (!p || at + len > m || memcmp(p, want + at, len) != 0)
            abort();
        at += len;
    }
    if (strict && at != m)
        abort();
    if (sp)
        free((char *)want);
    size_t cut = rt_tok_safe_cut(t, s, n, 0);
    if (cut) {
        rt_tok_prefix(t, &bos);
        rt_tok_encode_part(t, s, cut, &two);
        rt_tok_encode_part(t, s + cut, n - cut, &two);
        if (two.n != whole.n || memcmp(two.v, whole.v, (size_t)two.n * sizeof *two.v) != 0)
            abort();
    }
    rt_ids_free(&whole);
    rt_ids_free(&two);
    rt_ids_free(&bos);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static rt_tokenizer *small_t[N_PATTERNS + 1], *strip_t[3], *ug;
    if (!small_t[0]) {
        for (int k = 0; k < N_PATTERNS; k++)
            small_t[k] = small(patterns[k], "");
        small_t[N_PATTERNS] = small_sp("", 0);
        strip_t[0] = small(NULL, strips);
        strip_t[1] = small_sp(strips, 0);
        strip_t[2] = small_sp(strips, 1);
        int n;
        char *json = ug_json(NULL, &n);
        ug = load_or_abort(json, n);
    }
    if (size > 0 && data[0] == 'P') {   /* a charsmap: loaded (or refused), then texts */
        static const char *const texts[] = {
            "the a\nb  e\xcc\x81 \xef\xac\x81 <mask> x\r\ny \xea\xb0\x80", "t\nh"};
        char *map = base64(data + 1, size - 1), err[1024];
        int n;
        char *json = ug_json(map, &n);
        rt_tokenizer *t = rt_tok_load(fuzz_file((const uint8_t *)json, (size_t)n, ".json"), err,
                                      sizeof err);
        for (int k = 0; t && k < 2; k++)
            check_text(t, texts[k], strlen(texts[k]), 0, 0);
        rt_tok_free(t);
        free(json);
        free(map);
        return 0;
    }
    if (size > 0 && data[0] == 'J') {
        char err[1024];
        rt_tokenizer *t = rt_tok_load(fuzz_file(data + 1, size - 1, ".json"), err, sizeof err);
        if (t) {
            check_text(t, "Hello world, it's 2024!\n  x", 27, 0, 0);
            rt_tok_free(t);
        }
        return 0;
    }
    for (int k = 0; k <= N_PATTERNS; k++)
        check_text(small_t[k], (const char *)data, size, 1, k == N_PATTERNS);
    for (int k = 0; k < 3; k++)
        check_text(strip_t[k], (const char *)data, size, 0, k > 0);
    check_text(ug, (const char *)data, size, 0, 0);
    return 0;
}
