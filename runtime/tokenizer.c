/* tokenizer.c: the BPE of a Hugging Face tokenizer.json, byte-level (GPT-2, Llama 3,
 * Qwen2, GPT-4o, Tekken, StarCoder) or SentencePiece-style (Llama 2, Mistral;
 * tokenizer.h says what is read and what is refused): loading, the pre-tokenizer
 * patterns as hand-written matchers, the added-token split, the merges with a bounded
 * word cache, and the safe cut that lets a long text be encoded a part at a time.
 *
 * Ids are computed as `tokenizers` 0.19 computes them: the text is split on the added
 * tokens (the unnormalized ones first, then the normalized ones in what remains; each
 * leftmost-longest), each remaining part is cut into words by the pattern, each word's
 * bytes start as one symbol a byte (GPT-2's bytes_to_unicode names them in the
 * vocabulary), and the adjacent pair of the lowest merge rank, leftmost on ties, is
 * merged until none is left. SentencePiece-style: each part between added tokens has
 * its spaces written U+2581 (and one prepended, as the file says), is one word (or a
 * word from each U+2581 on, with Metaspace's split), and its symbols are characters;
 * a character the vocabulary lacks is its bytes' <0xXX> tokens (byte_fallback) or the
 * unk token. WordPiece (BERT's) reads its vocabulary here and its parts between added
 * tokens go to wordpiece.c. Unigram (XLM-RoBERTa's, T5's) reads its pieces and scores
 * here, normalizes each part between added tokens as the file says (Precompiled:
 * precompiled.c; Strip; Replace of space runs), cuts words as Metaspace does (the
 * SentencePiece-style path) and gives each word to unigram.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "tokenizer.h"
#include "unigram.h"
#include "wordpiece.h"

/* The patterns, by the exact string each file writes. */
typedef enum { PT_NONE, PT_GPT2, PT_LLAMA3, PT_QWEN2, PT_O200K, PT_TEKKEN } Pattern;

/* SentencePiece-style BPE, by where a U+2581 is prepended to a part of the text between
 * added tokens: SP_PREPEND, the normalizer Sequence[Prepend, Replace] (Llama 2's file):
 * every non-empty part; Metaspace's prepend_scheme: SP_FIRST, the part at the text's
 * start; SP_ALWAYS, every part; SP_NEVER, none (Metaspace's only where the part does not
 * already start with one). SP_OFF: byte-level. */
typedef enum { SP_OFF, SP_PREPEND, SP_FIRST, SP_ALWAYS, SP_NEVER } SpMode;
static const char meta[] = "\xE2\x96\x81";   /* U+2581, SentencePiece's space */

static const char re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* GPT-4o's (o200k; Phi-4-mini's) and Mistral's Tekken (Mistral Nemo, Small 3): words
 * cut at a lower-case letter after upper-case ones */
static const char re_o200k[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_tekken[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* String -> value, open addressing; keys live in a pool. */
typedef struct {
    uint64_t h;             /* 0: empty */
    uint32_t off, len;      /* the key in pool */
    uint32_t val, val2;
} Slot;

typedef struct {
    Slot *s;
    size_t cap, n;          /* cap a power of two */
    char *pool;
    size_t pool_n, pool_cap;
} StrMap;

/* (left id, right id) -> merge rank and the merged id. */
typedef struct {
    uint64_t key;           /* (a << 32 | b) + 1; 0: empty */
    uint32_t rank, id;
} PairSlot;

/* An added token: matched in the raw text before pre-tokenization; lstrip and rstrip:
 * its match takes the white space before it and after it; special: the file says so. */
typedef struct {
    char *s;
    uint32_t len, id;
    uint8_t lstrip, rstrip, special;
} Added;

/* The added tokens of one pass, bucketed by first byte, longest first in a bucket. */
typedef struct {
    Added *a;
    int n;
    int first[257];         /* bucket b is a[first[b] .. first[b + 1]) */
} AddedSet;

#define CACHE_SLOTS (1u << 17)   /* the word cache: at most half of them used ... */
#define CACHE_IDS (1u << 21)     /* ... and this many ids, then it starts over */
#define CACHE_START 1024         /* its slots and ids at first (a prompt's words), doubled
                                    as the text needs them */
#define CACHE_WORD_MAX 64        /* longer words are not cached */

/* A post-processor template's piece: a special token's id, or a sequence (TMPL_A, TMPL_B),
 * and the type id it gives. */
typedef struct {
    int64_t id;
    int type;
} TmplPiece;
enum { TMPL_A = -1, TMPL_B = -2 };

struct rt_tokenizer {
    Pattern pat;
    int digits;                  /* a Digits pre-tokenizer first (StarCoder's): 1, each digit
                                  * a word (individual_digits); 2, each run of them; 0, none */
    int nfc;                     /* the normalizer is NFC (rt_tok_unnormalized) */
    int ignore_merges;
    int64_t unk;                 /* -1: none; a byte no vocabulary entry names is dropped */
    int64_t byte_id[256];        /* the id of the single byte, -1 when none */
    uint32_t byte_char[256];     /* bytes_to_unicode */
    int16_t char_byte[0x200];    /* its inverse, -1 elsewhere */
    StrMap vocab;                /* the file's (byte-mapped) strings -> id */
    PairSlot *merges;
    size_t merges_cap;
    AddedSet raw_set, norm_set;  /* unnormalized, then normalized added tokens */
    int cut_ok;                  /* no added token holds a newline */
    int strips;                  /* an added token has lstrip or rstrip */
    SpMode sp;
    int sp_split;                /* Metaspace's split: a word from each U+2581 on */
    int sp_runs;                 /* no token holds another character then U+2581: a word
                                  * may start at each run of U+2581s, whatever the file */
    int byte_fallback, fuse_unk;
    int64_t fallback_id[256];    /* <0xXX>'s id, -1 when none */
    int nl_barrier;              /* SentencePiece-style: a newline merges with nothing */
    int cont;                    /* the next part continues a text: no U+2581 at its start */
    int word_space;              /* byte-level: a word given apart (rt_tok_encode_word) */
    int words_bare;              /* rt_tok_words_bare: no space before such a word */
    char *norm;                  /* scratch: a part with its spaces written U+2581; a word
                                  * with the space before it */
    size_t norm_cap;
    rt_ids prefix, suffix;       /* the post-processor's ids */
    TmplPiece *tmpl[2];          /* its single and pair templates (pair: NULL when none) */
    int n_tmpl[2];
    int64_t pad;                 /* padding.pad_id, else <pad>'s or [PAD]'s id, else -1 */
    int trim_offsets;            /* the byte-level post-processor trims its tokens' offsets of
                                    spaces (ByteLevel's, RobertaProcessing's trim_offsets) */
    int trim_keeps_first;        /* ... but for a text's first token's one space
                                    (its add_prefix_space) */
    int wp;                      /* the model is WordPiece (BERT's: wordpiece.c) */
    rt_wordpiece wpm;
    int bert_norm;               /* its BertNormalizer (bnorm), or none */
    rt_bert_norm bnorm;
    int ug;                      /* the model is Unigram (unigram.c) */
    rt_unigram ugm;
    double *ug_score;            /* [n_ids] its pieces' scores */
    int ug_steps[4], n_ug_steps; /* its normalizer's steps (UG_*), in order */
    rt_precompiled pc;           /* UG_PRECOMPILED's charsmap */
    int ug_cut;                  /* a text may be cut after a newline (ug_cuttable) */
    char *ug_buf[2];             /* scratch: a part as each step leaves it */
    size_t ug_cap[2];
    rt_change *ug_ch;            /* scratch: a step's changes (ug_offsets) */
    size_t ug_ch_cap;
    int64_t n_ids;
    char **piece;                /* [n_ids] the bytes of each id, NULL for none */
    uint32_t *piece_len;
    StrMap cache;                /* word bytes -> (offset, count) in cache_ids */
    uint32_t *cache_ids;
    size_t cache_ids_n, cache_ids_cap;
    uint32_t *sym;               /* BPE scratch, sym_cap ids (bpe_symbols sizes it) */
    size_t sym_cap;
    char *mapped;                /* scratch: a word in byte-mapped form */
    size_t mapped_cap;
};

extern const uint32_t rt_uni_letter[][2], rt_uni_number[][2], rt_uni_nfc_unsafe[][2];
extern const int rt_uni_letter_n, rt_uni_number_n, rt_uni_nfc_unsafe_n;
extern const uint32_t rt_uni_upper[][2], rt_uni_lower[][2], rt_uni_mark[][2];
extern const int rt_uni_upper_n, rt_uni_lower_n, rt_uni_mark_n;

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "trainc: error: tokenizer: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

void rt_ids_push(rt_ids *a, uint32_t id)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 1024;
        a->v = xrealloc(a->v, (size_t)a->cap * sizeof *a->v);
    }
    a->v[a->n++] = id;
}

int64_t rt_tok_one_id(rt_tokenizer *t, const char *text, int64_t *n)
{
    rt_ids ids = {0};
    rt_tok_encode_part(t, text, strlen(text), &ids);
    int64_t id = ids.n == 1 ? (int64_t)ids.v[0] : -1;
    *n = ids.n;
    rt_ids_free(&ids);
    return id;
}

void rt_ids_free(rt_ids *a)
{
    free(a->v);
    memset(a, 0, sizeof *a);
}

/* ---- hashing ------------------------------------------------------------------ */

static uint64_t hash_bytes(const void *key, size_t n)
{
    const unsigned char *p = key;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x2545F4914F6CDD1Dull);
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t v = 0;
    memcpy(&v, p, n);
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h | 1;
}

static void map_init(StrMap *m, size_t cap)
{
    memset(m, 0, sizeof *m);
    m->cap = cap;
    m->s = xrealloc(NULL, cap * sizeof *m->s);
    memset(m->s, 0, cap * sizeof *m->s);
}

static void map_free(StrMap *m)
{
    free(m->s);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

/* The slot of key: its entry, or the empty slot where it would go. */
static Slot *map_slot(const StrMap *m, const void *key, size_t len, uint64_t h)
{
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        Slot *s = &m->s[i];
        if (s->h == 0 || (s->h == h && s->len == len && memcmp(m->pool + s->off, key, len) == 0))
            return s;
    }
}

static Slot *map_find(const StrMap *m, const void *key, size_t len)
{
    Slot *s = map_slot(m, key, len, hash_bytes(key, len));
    return s->h ? s : NULL;
}

static void map_grow(StrMap *m);

/* Adds key (or finds it): the slot, its values for the caller to set. */
static Slot *map_put(StrMap *m, const void *key, size_t len)
{
    if (2 * (m->n + 1) > m->cap)
        map_grow(m);
    uint64_t h = hash_bytes(key, len);
    Slot *s = map_slot(m, key, len, h);
    if (s->h)
        return s;
    if (m->pool_n + len > m->pool_cap) {
        m->pool_cap = 2 * (m->pool_n + len) + 4096;
        m->pool = xrealloc(m->pool, m->pool_cap);
    }
    memcpy(m->pool + m->pool_n, key, len);
    *s = (Slot){.h = h, .off = (uint32_t)m->pool_n, .len = (uint32_t)len};
    m->pool_n += len;
    m->n++;
    return s;
}

static void map_grow(StrMap *m)
{
    Slot *old = m->s;
    size_t cap = m->cap;
    m->cap *= 2;
    m->s = xrealloc(NULL, m->cap * sizeof *m->s);
    memset(m->s, 0, m->cap * sizeof *m->s);
    for (size_t i = 0; i < cap; i++)
        if (old[i].h) {
            Slot *s = map_slot(m, m->pool + old[i].off, old[i].len, old[i].h);
            *s = old[i];
        }
    free(old);
}

static PairSlot *pair_slot(const rt_tokenizer *t, uint32_t a, uint32_t b)
{
    uint64_t key = ((uint64_t)a << 32 | b) + 1, h = key * 0x9E3779B97F4A7C15ull;
    for (size_t i = (h >> 20) & (t->merges_cap - 1);; i = (i + 1) & (t->merges_cap - 1))
        if (t->merges[i].key == key || t->merges[i].key == 0)
            return &t->merges[i];
}

/* ---- characters --------------------------------------------------------------- */

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

int rt_uni_in(uint32_t c, const uint32_t (*r)[2], int n)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < r[mid][0])
            hi = mid - 1;
        else if (c > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* \s as Oniguruma reads it: Unicode's White_Space. */
int rt_uni_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static int char_class(uint32_t c)
{
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
            return C_LETTER;
        if (c >= '0' && c <= '9')
            return C_NUMBER;
        return rt_uni_space(c) ? C_SPACE : C_OTHER;
    }
    if (rt_uni_space(c))
        return C_SPACE;
    if (rt_uni_in(c, rt_uni_letter, rt_uni_letter_n))
        return C_LETTER;
    if (rt_uni_in(c, rt_uni_number, rt_uni_number_n))
        return C_NUMBER;
    return C_OTHER;
}

/* The code point at s[i] (i < n) and its length in *len; a byte that starts no valid
 * UTF-8 sequence is one character of class other. */
uint32_t rt_utf8_at(const unsigned char *s, size_t i, size_t n, size_t *len)
{
    unsigned c = s[i];
    *len = 1;
    if (c < 0x80)
        return c;
    int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (k == 0 || c > 0xF4 || i + (size_t)k >= n)
        return 0xFFFFFFFFu;
    uint32_t v = c & (0x3F >> k);
    for (int j = 1; j <= k; j++) {
        if ((s[i + j] & 0xC0) != 0x80)
            return 0xFFFFFFFFu;
        v = v << 6 | (s[i + j] & 0x3F);
    }
    *len = (size_t)k + 1;
    return v;
}

/* Python's str.isspace(): White_Space, and the separators U+001C-U+001F. */
static int py_space(uint32_t c) { return rt_uni_space(c) || (c >= 0x1C && c <= 0x1F); }

size_t rt_utf8_strip(const char *text, size_t n, size_t *start)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t lo = 0, hi = n, len;
    while (lo < hi && py_space(rt_utf8_at(s, lo, hi, &len)))
        lo += len;
    while (hi > lo) {
        size_t at = hi - 1;   /* the last character's first byte */
        while (at > lo && hi - at < 4 && (s[at] & 0xC0) == 0x80)
            at--;
        if (!py_space(rt_utf8_at(s, at, hi, &len)) || at + len != hi)
            break;
        hi = at;
    }
    *start = lo;
    return hi - lo;
}

/* The class of the character at i, or -1 at the end. */
static int class_at(const unsigned char *s, size_t i, size_t n, size_t *len)
{
    if (i >= n) {
        *len = 0;
        return -1;
    }
    return char_class(rt_utf8_at(s, i, n, len));
}

/* The start of the run of white space that ends at s[i], lo at the earliest. */
static size_t space_before(const unsigned char *s, size_t lo, size_t i)
{
    while (i > lo) {
        size_t j = i - 1, len;
        while (j > lo && (s[j] & 0xC0) == 0x80)
            j--;
        if (!rt_uni_space(rt_utf8_at(s, j, i, &len)) || j + len != i)
            break;
        i = j;
    }
    return i;
}

/* The end of the run of characters of class k from i (max chars, 0: no limit). */
static size_t run_of(const unsigned char *s, size_t i, size_t n, int k, int max)
{
    size_t len;
    for (int c = 0; i < n && (max == 0 || c < max); c++) {
        if (class_at(s, i, n, &len) != k)
            break;
        i += len;
    }
    return i;
}

/* 's 't 're 've 'm 'll 'd at i (s[i] is the apostrophe): the end, or 0. Under (?i:)
 * letters match either case, and 's also the long s (U+017F), which folds to it. */
static size_t contraction(const unsigned char *s, size_t i, size_t n, int fold)
{
    static const char *const tails[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    for (int k = 0; k < 7; k++) {
        size_t j = i + 1;
        const char *p = tails[k];
        for (; *p && j < n; p++) {
            unsigned c = s[j];
            if (c == (unsigned char)*p || (fold && (c | 0x20) == (unsigned char)*p))
                j++;
            else if (fold && *p == 's' && c == 0xC5 && j + 1 < n && s[j + 1] == 0xBF)
                j += 2;
            else
                break;
        }
        if (!*p)
            return j;
    }
    return 0;
}

/* A run of \s from i: its end, and where its last character starts. */
static size_t space_run(const unsigned char *s, size_t i, size_t n, size_t *last, size_t *chars)
{
    size_t len;
    *chars = 0;
    *last = i;
    while (i < n && class_at(s, i, n, &len) == C_SPACE) {
        *last = i;
        i += len;
        ++*chars;
    }
    return i;
}

/* \s+(?!\S)|\s+ at a run [i, e): the whole run at the end of the text or when it is
 * one character, else all but its last character (which goes with what follows). */
static size_t space_tail(size_t e, size_t n, size_t last, size_t chars)
{
    return e == n || chars == 1 ? e : last;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const unsigned char *s, size_t i, size_t n)
{
    size_t len, len2, e;
    int k = class_at(s, i, n, &len);
    if (s[i] == '\'' && (e = contraction(s, i, n, 0)))
        return e;
    if (k != C_SPACE)
        return run_of(s, i, n, k, 0);
    int k2 = class_at(s, i + 1, n, &len2);
    if (s[i] == ' ' && k2 >= 0 && k2 != C_SPACE)
        return run_of(s, i + 1, n, k2, 0);
    size_t last, chars;
    e = space_run(s, i, n, &last, &chars);
    return space_tail(e, n, last, chars);
}

/* The alternatives Llama 3's, Qwen2's, GPT-4o's and Tekken's patterns end with, at i (a
 * character of class k, the next one of k2):  ?[^\s\p{L}\p{N}]+[\r\n]* (with slash,
 * GPT-4o's and Tekken's: [\r\n/]*)|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t other_or_space(const unsigned char *s, size_t i, size_t n, int k, int k2,
                             int slash)
{
    size_t j = s[i] == ' ' && k2 == C_OTHER ? i + 1 : i, e;
    if (j > i || k == C_OTHER) {
        e = run_of(s, j, n, C_OTHER, 0);
        while (e < n && (s[e] == '\r' || s[e] == '\n' || (slash && s[e] == '/')))
            e++;
        return e;
    }
    size_t last, chars;
    e = space_run(s, i, n, &last, &chars);
    for (size_t p = e; p > i; p--)   /* \s*[\r\n]+: through the run's last newline */
        if (s[p - 1] == '\r' || s[p - 1] == '\n')
            return p;
    return space_tail(e, n, last, chars);
}

/* Llama 3 (digits 3) and Qwen2 (digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_llama(const unsigned char *s, size_t i, size_t n, int digits)
{
    size_t len, len2, e;
    int k = class_at(s, i, n, &len);
    if (s[i] == '\'' && (e = contraction(s, i, n, 1)))
        return e;
    if (k == C_LETTER)
        return run_of(s, i, n, C_LETTER, 0);
    int k2 = class_at(s, i + len, n, &len2);
    if (k2 == C_LETTER && s[i] != '\r' && s[i] != '\n' && k != C_NUMBER)
        return run_of(s, i + len, n, C_LETTER, 0);
    if (k == C_NUMBER)
        return run_of(s, i, n, C_NUMBER, digits);
    return other_or_space(s, i, n, k, k2, 0);
}

/* A character's place in GPT-4o's and Tekken's letter classes: K_U for
 * [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], K_W for [\p{Ll}\p{Lm}\p{Lo}\p{M}] (Lm, Lo and marks
 * in both), 0 for neither (and at the end). */
enum { K_U = 1, K_W = 2 };
static int case_at(const unsigned char *s, size_t i, size_t n, size_t *len)
{
    if (i >= n) {
        *len = 0;
        return 0;
    }
    uint32_t c = rt_utf8_at(s, i, n, len);
    if (c < 0x80)
        return c >= 'A' && c <= 'Z' ? K_U : c >= 'a' && c <= 'z' ? K_W : 0;
    if (rt_uni_in(c, rt_uni_upper, rt_uni_upper_n))
        return K_U;
    if (rt_uni_in(c, rt_uni_lower, rt_uni_lower_n))
        return K_W;
    return rt_uni_in(c, rt_uni_letter, rt_uni_letter_n) || rt_uni_in(c, rt_uni_mark, rt_uni_mark_n)
               ? K_U | K_W : 0;
}

/* The end of the run of characters of class bit k (K_U, K_W) from i. */
static size_t case_run(const unsigned char *s, size_t i, size_t n, int k)
{
    size_t len;
    while (case_at(s, i, n, &len) & k)
        i += len;
    return i;
}

/* [U]*[W]+ from j, as a backtracking regex matches it (U* greedy, then given back a
 * character at a time until a W starts): the end, or 0 for no match. */
static size_t upper_lower(const unsigned char *s, size_t j, size_t n)
{
    size_t len, k = case_run(s, j, n, K_U);
    for (;;) {
        if (case_at(s, k, n, &len) & K_W)
            return case_run(s, k, n, K_W);
        if (k == j)
            return 0;
        do   /* one character back (the run holds whole UTF-8 sequences) */
            k--;
        while (k > j && (s[k] & 0xC0) == 0x80);
    }
}

/* GPT-4o (digits 3, contractions after a word) and Tekken (digits 1, none):
 * [^\r\n\p{L}\p{N}]?[U]*[W]+C?|[^\r\n\p{L}\p{N}]?[U]+[W]*C?|\p{N}{1,digits}|
 *  ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_cased(const unsigned char *s, size_t i, size_t n, int digits, int contr)
{
    size_t len, len2, e;
    int k = class_at(s, i, n, &len);
    int lead = k != C_LETTER && k != C_NUMBER && s[i] != '\r' && s[i] != '\n';
    for (int alt = 1; alt <= 2; alt++)
        for (int take = lead; take >= 0; take--) {   /* the optional lead, first taken */
            size_t j = take ? i + len : i, u = case_run(s, j, n, K_U);
            e = alt == 1 ? upper_lower(s, j, n) : u > j ? case_run(s, u, n, K_W) : 0;
            if (e && contr && e < n && s[e] == '\'' && (len2 = contraction(s, e, n, 1)))
                e = len2;
            if (e)
                return e;
        }
    if (k == C_NUMBER)
        return run_of(s, i, n, C_NUMBER, digits);
    return other_or_space(s, i, n, k, class_at(s, i + len, n, &len2), 1);
}

/* The end of the word that starts at i < n. */
static size_t next_word(const rt_tokenizer *t, const unsigned char *s, size_t i, size_t n)
{
    switch (t->pat) {
    case PT_GPT2: return match_gpt2(s, i, n);
    case PT_LLAMA3: return match_llama(s, i, n, 3);
    case PT_QWEN2: return match_llama(s, i, n, 1);
    case PT_O200K: return match_cased(s, i, n, 3, 1);
    case PT_TEKKEN: return match_cased(s, i, n, 1, 0);
    case PT_NONE: break;
    }
    return n;
}

/* ---- BPE ---------------------------------------------------------------------- */

static uint32_t pair_rank(const rt_tokenizer *t, uint32_t a, uint32_t b, uint32_t *id)
{
    const PairSlot *p = pair_slot(t, a, b);
    if (!p->key)
        return UINT32_MAX;
    *id = p->id;
    return p->rank;
}

/* t->sym with room for 10 n ids: a word of n bytes' symbols, and bpe_merge_long's
 * lists and heap over them */
static void sym_reserve(rt_tokenizer *t, size_t n)
{
    if (10 * n > t->sym_cap) {
        t->sym_cap = 10 * n + 64;
        t->sym = xrealloc(t->sym, t->sym_cap * sizeof *t->sym);
    }
}

/* The word's bytes as symbols, sym[0, m): a byte with no vocabulary entry is the unk
 * id, or dropped when there is none (as `tokenizers` does). */
static size_t bpe_symbols(rt_tokenizer *t, const unsigned char *w, size_t n)
{
    sym_reserve(t, n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id = t->byte_id[w[i]];
        if (id >= 0 || t->unk >= 0)
            t->sym[m++] = (uint32_t)(id < 0 ? t->unk : id);
    }
    return m;
}

/* SentencePiece-style: the word's characters as symbols, sym[0, m). A character the
 * vocabulary lacks: its bytes' <0xXX> ids with byte_fallback (when all exist), else the
 * unk id, one for a run of them with fuse_unk, or dropped when there is none. As in
 * `tokenizers`, a pending unk is written when the next character in the vocabulary
 * comes (or the word ends), not before a byte-fallback character. */
static size_t sp_symbols(rt_tokenizer *t, const unsigned char *w, size_t n)
{
    sym_reserve(t, n);
    size_t m = 0, len;
    int unk = 0;   /* an unk pending */
    for (size_t i = 0; i < n; i += len) {
        rt_utf8_at(w, i, n, &len);
        const Slot *s = map_find(&t->vocab, w + i, len);
        if (s) {
            if (unk)
                t->sym[m++] = (uint32_t)t->unk;
            unk = 0;
            t->sym[m++] = s->val;
            continue;
        }
        size_t k = 0;
        while (t->byte_fallback && k < len && t->fallback_id[w[i + k]] >= 0)
            k++;
        if (t->byte_fallback && k == len) {
            for (k = 0; k < len; k++)
                t->sym[m++] = (uint32_t)t->fallback_id[w[i + k]];
            continue;
        }
        if (t->unk >= 0 && unk && !t->fuse_unk)
            t->sym[m++] = (uint32_t)t->unk;
        unk = t->unk >= 0;
    }
    if (unk)
        t->sym[m++] = (uint32_t)t->unk;
    return m;
}

/* A candidate merge of a long word: the pair starting at symbol pos. */
typedef struct {
    uint32_t rank, pos;
} Cand;

static int cand_less(Cand a, Cand b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(Cand *h, size_t *n, Cand c)
{
    size_t i = (*n)++;
    for (; i > 0 && cand_less(c, h[(i - 1) / 2]); i = (i - 1) / 2)
        h[i] = h[(i - 1) / 2];
    h[i] = c;
}

static Cand heap_pop(Cand *h, size_t *n)
{
    Cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(h[c + 1], h[c]))
            c++;
        if (!cand_less(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* bpe_merge for long words, in O(m log m) as `tokenizers` does it: the symbols a
 * linked list (a merged-away symbol is marked dead), the candidate pairs in a heap by
 * (rank, position); a popped candidate whose pair has changed since is skipped. The
 * same merges as the plain loop: the lowest rank first, the leftmost of equals. */
static void bpe_merge_long(rt_tokenizer *t, size_t m, rt_ids *out)
{
    uint32_t *sym = t->sym, *next = sym + m, *prev = next + m, *dead = prev + m;
    Cand *heap = (Cand *)(dead + m);   /* at most m - 1 + 2 (m - 1) candidates: the rest */
    size_t nh = 0;
    uint32_t id;
    for (size_t i = 0; i < m; i++) {
        next[i] = (uint32_t)i + 1;
        prev[i] = (uint32_t)i - 1;   /* UINT32_MAX for the first */
        dead[i] = 0;
        uint32_t r = i + 1 < m ? pair_rank(t, sym[i], sym[i + 1], &id) : UINT32_MAX;
        if (r != UINT32_MAX)
            heap_push(heap, &nh, (Cand){r, (uint32_t)i});
    }
    while (nh > 0) {
        Cand c = heap_pop(heap, &nh);
        uint32_t p = c.pos, q = next[p];
        if (dead[p] || q >= m || pair_rank(t, sym[p], sym[q], &id) != c.rank)
            continue;   /* stale */
        sym[p] = id;
        dead[q] = 1;
        next[p] = next[q];
        if (next[q] < m)
            prev[next[q]] = p;
        uint32_t r;
        if (prev[p] != UINT32_MAX && (r = pair_rank(t, sym[prev[p]], sym[p], &id)) != UINT32_MAX)
            heap_push(heap, &nh, (Cand){r, prev[p]});
        if (next[p] < m && (r = pair_rank(t, sym[p], sym[next[p]], &id)) != UINT32_MAX)
            heap_push(heap, &nh, (Cand){r, p});
    }
    for (uint32_t i = 0; i < m; i = next[i])
        rt_ids_push(out, sym[i]);
}

#ifndef BPE_LONG
#define BPE_LONG 48   /* symbols from which the heap beats rescanning the pairs */
#endif

/* The word's bytes as symbols, then the pair of the lowest rank merged (the leftmost
 * of equals) until no pair has a merge. sym[m] symbols; rank[i] and nid[i] are the
 * rank and merged id of the pair (sym[i], sym[i + 1]). */
static void bpe_merge(rt_tokenizer *t, const unsigned char *w, size_t n, rt_ids *out)
{
    size_t m = t->sp ? sp_symbols(t, w, n) : bpe_symbols(t, w, n);
    if (m >= BPE_LONG) {
        bpe_merge_long(t, m, out);
        return;
    }
    uint32_t *sym = t->sym, *rank = sym + n, *nid = rank + n;
    for (size_t i = 0; i + 1 < m; i++)
        rank[i] = pair_rank(t, sym[i], sym[i + 1], &nid[i]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == UINT32_MAX)
            break;
        sym[best] = nid[best];
        size_t tail = m - best - 2;   /* symbols after the merged pair */
        memmove(sym + best + 1, sym + best + 2, tail * sizeof *sym);
        if (tail > 0) {
            memmove(rank + best + 1, rank + best + 2, (tail - 1) * sizeof *rank);
            memmove(nid + best + 1, nid + best + 2, (tail - 1) * sizeof *nid);
        }
        m--;
        if (best + 1 < m)
            rank[best] = pair_rank(t, sym[best], sym[best + 1], &nid[best]);
        if (best > 0)
            rank[best - 1] = pair_rank(t, sym[best - 1], sym[best], &nid[best - 1]);
    }
    for (size_t i = 0; i < m; i++)
        rt_ids_push(out, sym[i]);
}

/* A word's ids into the cache: it grows to CACHE_SLOTS and CACHE_IDS, then starts over */
static void cache_put(rt_tokenizer *t, const unsigned char *w, size_t n, const uint32_t *ids,
                      size_t k)
{
    if (t->cache_ids_n + k > t->cache_ids_cap && t->cache_ids_cap < CACHE_IDS) {
        t->cache_ids_cap *= 2;
        t->cache_ids = xrealloc(t->cache_ids, t->cache_ids_cap * sizeof *t->cache_ids);
    }
    int full = 2 * (t->cache.n + 1) > t->cache.cap && t->cache.cap >= CACHE_SLOTS;
    if (full || t->cache_ids_n + k > t->cache_ids_cap) {
        memset(t->cache.s, 0, t->cache.cap * sizeof *t->cache.s);   /* start over */
        t->cache.n = t->cache.pool_n = t->cache_ids_n = 0;
    }
    Slot *s = map_put(&t->cache, w, n);
    s->val = (uint32_t)t->cache_ids_n;
    s->val2 = (uint32_t)k;
    memcpy(t->cache_ids + t->cache_ids_n, ids, k * sizeof *ids);
    t->cache_ids_n += k;
}

/* The vocabulary's id of the word as a whole (its bytes mapped), or -1. */
static int64_t whole_word(rt_tokenizer *t, const unsigned char *w, size_t n)
{
    if (t->sp) {   /* no byte map */
        Slot *s = map_find(&t->vocab, w, n);
        return s ? (int64_t)s->val : -1;
    }
    if (2 * n > t->mapped_cap) {
        t->mapped_cap = 2 * n + 64;
        t->mapped = xrealloc(t->mapped, t->mapped_cap);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = t->byte_char[w[i]];
        if (c < 0x80) {
            t->mapped[k++] = (char)c;
        } else {   /* all mapped characters are below U+0800 */
            t->mapped[k++] = (char)(0xC0 | c >> 6);
            t->mapped[k++] = (char)(0x80 | (c & 0x3F));
        }
    }
    Slot *s = map_find(&t->vocab, t->mapped, k);
    return s ? (int64_t)s->val : -1;
}

static void encode_word(rt_tokenizer *t, const unsigned char *w, size_t n, rt_ids *out)
{
    if (t->ug) {
        rt_ug_encode(&t->ugm, w, n, out, NULL);
        return;
    }
    if (n == 1 && !t->sp && t->byte_id[w[0]] >= 0) {
        rt_ids_push(out, (uint32_t)t->byte_id[w[0]]);
        return;
    }
    if (t->ignore_merges) {
        int64_t id = whole_word(t, w, n);
        if (id >= 0) {
            rt_ids_push(out, (uint32_t)id);
            return;
        }
    }
    if (n <= CACHE_WORD_MAX) {
        Slot *s = map_find(&t->cache, w, n);
        if (s) {
            for (uint32_t i = 0; i < s->val2; i++)
                rt_ids_push(out, t->cache_ids[s->val + i]);
            return;
        }
    }
    int64_t start = out->n;
    bpe_merge(t, w, n, out);
    if (n <= CACHE_WORD_MAX)
        cache_put(t, w, n, out->v + start, (size_t)(out->n - start));
}

/* ---- encoding ----------------------------------------------------------------- */

/* The leftmost-longest match of an added token of set in s[i, n): where it starts (n
 * when there is none), the token in *tok. */
static size_t added_find(const AddedSet *set, const unsigned char *s, size_t i, size_t n,
                         const Added **tok)
{
    if (set->n == 0)
        return n;
    for (; i < n; i++)
        for (int k = set->first[s[i]]; k < set->first[s[i] + 1]; k++) {
            const Added *a = &set->a[k];
            if (a->len <= n - i && memcmp(s + i, a->s, a->len) == 0) {
                *tok = a;
                return i;
            }
        }
    return n;
}

/* The match of added token a found at s[*at], as tokenizers' find_matches takes it:
 * with lstrip *at moves back over the white space before it (to lo at the earliest);
 * its end, after the white space that follows with rstrip. */
static size_t added_span(const Added *a, const unsigned char *s, size_t lo, size_t *at, size_t n)
{
    size_t end = *at + a->len;
    if (a->lstrip)
        *at = space_before(s, lo, *at);
    return a->rstrip ? run_of(s, end, n, C_SPACE, 0) : end;
}

/* The end of the piece Digits cuts from i < n: one digit (\p{N}: Rust's is_numeric),
 * a run of them, or the run of other characters up to the next digit. */
static size_t digits_piece(const rt_tokenizer *t, const unsigned char *s, size_t i, size_t n)
{
    size_t len;
    if (class_at(s, i, n, &len) == C_NUMBER)
        return t->digits == 1 ? i + len : run_of(s, i, n, C_NUMBER, 0);
    while (i < n && class_at(s, i, n, &len) != C_NUMBER)
        i += len;
    return i;
}

static void encode_words(rt_tokenizer *t, const unsigned char *s, size_t n, rt_ids *out)
{
    for (size_t p = 0; p < n;) {   /* the pattern runs within each of Digits' pieces */
        size_t q = t->digits ? digits_piece(t, s, p, n) : n;
        for (size_t i = p; i < q;) {
            size_t e = next_word(t, s, i, q);
            encode_word(t, s + i, e - i, out);
            i = e;
        }
        p = q;
    }
}

/* A span between added tokens; a word given apart (t->word_space) with a space before
 * it unless it starts with one, as ByteLevel's add_prefix_space puts it before each
 * such span of each word */
static void encode_span(rt_tokenizer *t, const unsigned char *s, size_t n, rt_ids *out)
{
    if (!t->word_space || n == 0 || s[0] == ' ') {
        encode_words(t, s, n, out);
        return;
    }
    if (n + 1 > t->norm_cap)
        t->norm = xrealloc(t->norm, t->norm_cap = n + 64);
    t->norm[0] = ' ';
    memcpy(t->norm + 1, s, n);
    encode_words(t, (const unsigned char *)t->norm, n + 1, out);
}

/* The normalized added tokens, then the words of what lies between them (WordPiece:
 * wordpiece.c's, none of its added tokens normalized). */
static void encode_normalized(rt_tokenizer *t, const unsigned char *s, size_t n, rt_ids *out)
{
    if (t->wp) {
        rt_wp_encode(t->bert_norm ? &t->bnorm : NULL, &t->wpm, s, n, out, NULL);
        return;
    }
    for (size_t i = 0; i < n;) {
        const Added *a = NULL;
        size_t at = added_find(&t->norm_set, s, i, n, &a);
        size_t end = a ? added_span(a, s, i, &at, n) : n;
        encode_span(t, s + i, at - i, out);
        if (!a)
            break;
        rt_ids_push(out, a->id);
        i = end;
    }
}

/* SentencePiece-style: does a part between added tokens, s[0, n), get a U+2581 before
 * it? start: it starts a part (not the continuation of one across a cut); first: at
 * the text's start. */
static int sp_prepends(const rt_tokenizer *t, const unsigned char *s, size_t n, int start,
                       int first)
{
    int has = n >= 3 && memcmp(s, meta, 3) == 0;   /* before spaces are written U+2581 */
    if (n == 0 || !start)
        return 0;
    switch (t->sp) {
    case SP_PREPEND: return 1;
    case SP_FIRST: return first && s[0] != ' ' && !has;
    case SP_ALWAYS: return s[0] != ' ' && !has;
    default: return 0;
    }
}

/* Does a U+2581 start at w[i], after a character other than U+2581? */
static int run_start(const unsigned char *w, size_t i)
{
    return memcmp(w + i, meta, 3) == 0 && !(i >= 3 && memcmp(w + i - 3, meta, 3) == 0);
}

/* The end of the word that starts at w[b] of w[0, k): at the next U+2581 with split, at
 * the next run of them with sp_runs, else k */
static size_t sp_cut(const rt_tokenizer *t, const unsigned char *w, size_t b, size_t k)
{
    for (size_t i = b + 1; (t->sp_split || t->sp_runs) && i + 3 <= k; i++)
        if (t->sp_split ? memcmp(w + i, meta, 3) == 0 : run_start(w, i))
            return i;
    return k;
}

/* SentencePiece-style: a part between added tokens with its spaces written U+2581 (and
 * one prepended when sp_prepends says), as one word or, with split, a word from each
 * U+2581 on. Without split, when no token holds another character then a U+2581
 * (sp_runs: so no merge joins the two), a word from each run of U+2581s on gives the
 * merges of the whole, in words short enough for the cache. */
static void sp_encode(rt_tokenizer *t, const unsigned char *s, size_t n, int start, int first,
                      rt_ids *out)
{
    if (4 * n + 3 > t->norm_cap)
        t->norm = xrealloc(t->norm, t->norm_cap = 4 * n + 64);
    size_t k = 0;
    if (sp_prepends(t, s, n, start, first)) {
        memcpy(t->norm, meta, 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ') {
            memcpy(t->norm + k, meta, 3);
            k += 3;
        } else {
            t->norm[k++] = (char)s[i];
        }
    const unsigned char *w = (const unsigned char *)t->norm;
    for (size_t b = 0, e; b < k; b = e) {
        e = sp_cut(t, w, b, k);
        encode_word(t, w + b, e - b, out);
    }
}

/* Unigram's normalizer steps, each the text as the one before left it */
enum { UG_PRECOMPILED, UG_STRIP_LEFT, UG_STRIP_RIGHT, UG_STRIP_BOTH, UG_SPACE_RUNS };

/* A Strip step's kept part of s[0, n), [*a, *b): without the white space at its left,
 * its right or both ends */
static void strip_bounds(int step, const unsigned char *s, size_t n, size_t *a, size_t *b)
{
    size_t len;
    *a = 0, *b = n;
    while (step != UG_STRIP_RIGHT && *a < n && rt_uni_space(rt_utf8_at(s, *a, n, &len)))
        *a += len;
    while (step != UG_STRIP_LEFT && *b > *a) {   /* (the last character's start) */
        size_t c = *b - 1;
        while (c > *a && (s[c] & 0xC0) == 0x80)
            c--;
        if (!rt_uni_space(rt_utf8_at(s, c, *b, &len)))
            break;
        *b = c;
    }
}

/* One step on s[0, n) into t->ug_buf[k]; its length */
static size_t ug_step(rt_tokenizer *t, int step, const unsigned char *s, size_t n, int k)
{
    if (step == UG_PRECOMPILED) {
        size_t m;
        rt_pc_normalize(&t->pc, s, n, &t->ug_buf[k], &t->ug_cap[k], &m);
        return m;
    }
    if (3 * n + 1 > t->ug_cap[k])
        t->ug_buf[k] = xrealloc(t->ug_buf[k], t->ug_cap[k] = 3 * n + 64);
    unsigned char *o = (unsigned char *)t->ug_buf[k];
    size_t a, b, m = 0;
    if (step == UG_SPACE_RUNS) {   /* Replace(Regex " {2,}", U+2581) */
        for (size_t i = 0; i < n; i++)
            if (s[i] == ' ' && i + 1 < n && s[i + 1] == ' ') {
                while (i + 1 < n && s[i + 1] == ' ')
                    i++;
                memcpy(o + m, meta, 3);
                m += 3;
            } else {
                o[m++] = s[i];
            }
        return m;
    }
    strip_bounds(step, s, n, &a, &b);
    memcpy(o, s + a, b - a);
    return b - a;
}

/* Unigram: a part between unnormalized added tokens, normalized, cut at the normalized
 * added tokens, and each piece between them SentencePiece-style (sp_encode: spaces
 * written U+2581, one prepended as Metaspace says, a word from each U+2581 on) */
static void ug_part(rt_tokenizer *t, const unsigned char *s, size_t n, int first, rt_ids *out)
{
    for (int k = 0; k < t->n_ug_steps; k++) {
        n = ug_step(t, t->ug_steps[k], s, n, k % 2);
        s = (const unsigned char *)t->ug_buf[k % 2];
    }
    for (size_t i = 0; i < n;) {
        const Added *a = NULL;
        size_t at = added_find(&t->norm_set, s, i, n, &a);
        size_t end = a ? added_span(a, s, i, &at, n) : n;
        sp_encode(t, s + i, at - i, 1, first && i == 0, out);
        if (!a)
            break;
        rt_ids_push(out, a->id);
        i = end;
    }
}

/* ---- Unigram's offsets: the same steps on a text with its alignments (align.c) ---- */

/* ug_step's twin on x: Precompiled by its changes, a Strip as a cut, a run of spaces
 * written U+2581 aligned to its last space (tokenizers' Replace) */
static void ug_step_aligned(rt_tokenizer *t, int step, rt_altext *x)
{
    if (step == UG_PRECOMPILED) {
        size_t nd;
        rt_pc_changes(&t->pc, x->s, x->n, &t->ug_ch, &t->ug_ch_cap, &nd);
        rt_at_transform(x, t->ug_ch, nd, 0);
        return;
    }
    if (step == UG_SPACE_RUNS) {
        rt_altext y = {0};
        rt_at_set(&y, x->s, 0, 0);
        for (size_t i = 0, e; i < x->n; i = e) {
            e = i + 1;
            while (x->s[i] == ' ' && e < x->n && x->s[e] == ' ')
                e++;
            rt_at_put(&y, e - i >= 2 ? (const unsigned char *)meta : x->s + i, e - i >= 2 ? 3 : 1,
                      x->al[e - 1]);
        }
        rt_at_free(x);
        *x = y;
        return;
    }
    size_t a, b;
    strip_bounds(step, x->s, x->n, &a, &b);
    rt_at_slice(x, a, b);
}

/* a token over x's bytes [from, to): its span in the text, offs += (start, end) */
static void push_span(rt_ids *offs, const rt_altext *x, size_t from, size_t to)
{
    rt_ids_push(offs, from < to ? x->al[from].a : 0);
    rt_ids_push(offs, from < to ? x->al[to - 1].b : 0);
}

/* sp_encode's twin for Unigram on x[i, at), each id's span too: its spaces written U+2581
 * (each aligned to its space), one prepended as sp_prepends says (aligned to the first
 * character, as NormalizedString::prepend), the words cut as sp_cut says */
static void sp_offsets(rt_tokenizer *t, const rt_altext *x, size_t i, size_t at, int first,
                       rt_ids *out, rt_ids *offs)
{
    rt_altext w = {0};
    rt_at_set(&w, x->s + i, at - i, 0);
    memcpy(w.al, x->al + i, (at - i) * sizeof *w.al);
    size_t nd = 0, len;
    if (3 * w.n + 2 > t->ug_ch_cap)
        t->ug_ch = xrealloc(t->ug_ch, (t->ug_ch_cap = 3 * w.n + 64) * sizeof *t->ug_ch);
    int pre = sp_prepends(t, w.s, w.n, 1, first);
    for (size_t k = 0; k < w.n; k += len) {
        uint32_t c = rt_utf8_at(w.s, k, w.n, &len);
        if (pre && k == 0)   /* U+2581 in the first's place, the first new after it */
            t->ug_ch[nd++] = (rt_change){0x2581, 0};
        t->ug_ch[nd++] = c == ' ' ? (rt_change){0x2581, 0} : (rt_change){c, pre && k == 0};
    }
    rt_at_transform(&w, t->ug_ch, nd, 0);
    rt_ids lens = {0};
    for (size_t b = 0, e; b < w.n; b = e) {
        e = sp_cut(t, w.s, b, w.n);
        int64_t m = lens.n;
        rt_ug_encode(&t->ugm, w.s + b, e - b, out, &lens);
        for (size_t p = b; m < lens.n; p += lens.v[m++])
            push_span(offs, &w, p, p + lens.v[m]);
    }
    rt_ids_free(&lens);
    rt_at_free(&w);
}

/* ug_part's twin with offsets: s[0, n) at `base` in the text */
static void ug_offsets(rt_tokenizer *t, const unsigned char *s, size_t n, size_t base, int first,
                       rt_ids *out, rt_ids *offs)
{
    rt_altext x = {0};
    rt_at_set(&x, s, n, base);
    for (int k = 0; k < t->n_ug_steps; k++)
        ug_step_aligned(t, t->ug_steps[k], &x);
    for (size_t i = 0; i < x.n;) {
        const Added *a = NULL;
        size_t at = added_find(&t->norm_set, x.s, i, x.n, &a);
        size_t end = a ? added_span(a, x.s, i, &at, x.n) : x.n;
        sp_offsets(t, &x, i, at, first && i == 0, out, offs);
        if (!a)
            break;
        rt_ids_push(out, a->id);
        push_span(offs, &x, at, end);
        i = end;
    }
    rt_at_free(&x);
}

/* Byte-level: the ids of out[m, out->n), the encoding of s[0, n), matched in turn to the
 * bytes they stand for (a space before the first that the text lacks: ByteLevel's
 * add_prefix_space); their spans [first, past last) appended to offs, from base; -1 where
 * they do not spell s (a byte dropped, an added token's stripped white space) */
static int piece_offsets(const rt_tokenizer *t, const unsigned char *s, size_t n, const rt_ids *out,
                         int64_t m, size_t base, rt_ids *offs)
{
    size_t p = 0;
    for (int64_t k = m; k < out->n; k++) {
        size_t len;
        const char *pc = rt_tok_piece(t, out->v[k], &len);
        if (!pc)
            return -1;
        if (p == 0 && len > 0 && pc[0] == ' ' && (n == 0 || s[0] != ' '))
            pc++, len--;
        if (len > n - p || memcmp(s + p, pc, len) != 0)
            return -1;
        rt_ids_push(offs, (uint32_t)(base + p));
        rt_ids_push(offs, (uint32_t)(base + p + len));
        p += len;
    }
    return p == n ? 0 : -1;
}

/* tokenizers' offsets of a byte-level token: whole characters (a piece of one takes all of
 * it), then, with trim_offsets, without the spaces at either end (the text's first token
 * keeps one with add_prefix_space) */
static void char_offsets(const rt_tokenizer *t, const unsigned char *s, size_t n, uint32_t *o)
{
    size_t a = o[0], b = o[1];
    while (a > 0 && a < n && (s[a] & 0xC0) == 0x80)
        a--;
    while (b > a && b < n && (s[b] & 0xC0) == 0x80)
        b++;
    if (t->trim_offsets) {
        size_t lead = 0, trail = 0;
        while (a + lead < b && s[a + lead] == ' ')
            lead++;
        while (b - trail > a && s[b - trail - 1] == ' ')
            trail++;
        if (a == 0 && t->trim_keeps_first && lead == 1)
            lead = 0;
        a = a + lead < b ? a + lead : b;
        b = b - trail > a ? b - trail : a;
    }
    o[0] = (uint32_t)a, o[1] = (uint32_t)b;
}

/* The ids of the text s[i, at) between two added tokens with their bytes (from s), as
 * encode_part's offsets ask: WordPiece's pieces from its normalizer's origins, byte-level
 * ones matched to the text (piece_offsets) */
static int span_offsets(rt_tokenizer *t, const unsigned char *s, size_t i, size_t at,
                        rt_ids *out, rt_ids *offs)
{
    int64_t m = out->n, o = offs->n;
    if (t->ug) {
        ug_offsets(t, s + i, at - i, i, i == 0, out, offs);
        return 0;
    }
    if (!t->wp) {
        encode_normalized(t, s + i, at - i, out);
        return piece_offsets(t, s + i, at - i, out, m, i, offs);
    }
    rt_wp_encode(t->bert_norm ? &t->bnorm : NULL, &t->wpm, s + i, at - i, out, offs);
    for (int64_t k = o; k < offs->n; k++)
        offs->v[k] += (uint32_t)i;
    return 0;
}

/* The ids of s[0, n): its unnormalized added tokens, and what lies between them as the
 * model encodes it; with offs (WordPiece and byte-level alone), each id's bytes too (-1
 * where they do not spell the text: span_offsets) */
static int encode_part(rt_tokenizer *t, const unsigned char *s, size_t n, rt_ids *out,
                       rt_ids *offs)
{
    for (size_t i = 0; i < n;) {
        const Added *a = NULL;
        size_t at = added_find(&t->raw_set, s, i, n, &a);
        size_t end = a ? added_span(a, s, i, &at, n) : n;
        if (offs) {
            if (span_offsets(t, s, i, at, out, offs) != 0)
                return -1;
        } else if (t->ug) {
            ug_part(t, s + i, at - i, i == 0 && !t->cont, out);
        } else if (t->sp) {   /* a continued part's first piece gets no U+2581 */
            sp_encode(t, s + i, at - i, i > 0 || !t->cont, i == 0 && !t->cont, out);
        } else {
            encode_normalized(t, s + i, at - i, out);
        }
        if (!a)
            break;
        rt_ids_push(out, a->id);
        if (offs) {
            rt_ids_push(offs, (uint32_t)at);
            rt_ids_push(offs, (uint32_t)end);
        }
        i = end;
    }
    t->cont = 1;
    return 0;
}

void rt_tok_encode_part(rt_tokenizer *t, const char *text, size_t n, rt_ids *out)
{
    encode_part(t, (const unsigned char *)text, n, out, NULL);
}

void rt_tok_encode_text(rt_tokenizer *t, const char *text, size_t n, rt_ids *out)
{
    t->cont = 0;   /* a text starts */
    rt_tok_encode_part(t, text, n, out);
}

int rt_tok_encode_word(rt_tokenizer *t, const char *word, size_t n, rt_ids *out)
{
    if (t->digits && !t->wp && !t->words_bare)
        return -1;   /* (add_prefix_space would put a space before each of Digits' pieces) */
    /* GPT-2's pattern: the space GPT2TokenizerFast's and RobertaTokenizerFast's
     * add_prefix_space puts before the word; any other: the word as a text of its own (a
     * pre-tokenized word is normalized and split alone: Llama 3's, Qwen2's, SentencePiece
     * style's U+2581 before each) */
    t->word_space = !t->words_bare && !t->wp && !t->ug && !t->sp && t->pat == PT_GPT2;
    rt_tok_encode_text(t, word, n, out);
    t->word_space = 0;
    return 0;
}

void rt_tok_words_bare(rt_tokenizer *t, int bare) { t->words_bare = bare; }

int rt_tok_encode_offsets(rt_tokenizer *t, const char *text, size_t n, rt_ids *out, rt_ids *offs)
{
    if ((t->sp && !t->ug) || n >= UINT32_MAX)
        return -1;   /* (SentencePiece-style BPE) */
    const unsigned char *s = (const unsigned char *)text;
    int64_t first = offs->n;
    t->cont = 0;   /* a text starts */
    if (encode_part(t, s, n, out, offs) != 0)
        return -1;
    for (int64_t k = first; !t->wp && !t->ug && k < offs->n; k += 2)
        char_offsets(t, s, n, offs->v + k);
    return 0;
}

void rt_tok_prefix(rt_tokenizer *t, rt_ids *out)
{
    t->cont = 0;   /* a text starts */
    for (int64_t i = 0; i < t->prefix.n; i++)
        rt_ids_push(out, t->prefix.v[i]);
}

void rt_tok_suffix(const rt_tokenizer *t, rt_ids *out)
{
    for (int64_t i = 0; i < t->suffix.n; i++)
        rt_ids_push(out, t->suffix.v[i]);
}

void rt_tok_encode(rt_tokenizer *t, const char *text, size_t n, rt_ids *out)
{
    rt_tok_prefix(t, out);
    rt_tok_encode_part(t, text, n, out);
    rt_tok_suffix(t, out);
}

/* Does an added token with strip start at s[i] (as far as s[0, n) shows: a prefix of it
 * at the end counts), or end there? */
static int strip_token_at(const rt_tokenizer *t, const unsigned char *s, size_t i, size_t n,
                          int ends)
{
    const AddedSet *sets[2] = {&t->raw_set, &t->norm_set};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < sets[k]->n; j++) {
            const Added *a = &sets[k]->a[j];
            if (ends ? a->rstrip && a->len <= i && memcmp(s + i - a->len, a->s, a->len) == 0
                     : a->lstrip && memcmp(s + i, a->s, a->len < n - i ? a->len : n - i) == 0)
                return 1;
        }
    return 0;
}

/* Is a cut at s[p] (0 < p < n) beyond the reach of the added tokens' lstrip and rstrip?
 * Not where the white space from p on ends at an lstrip token, which would take it and
 * what lies before p, nor where the white space before p follows an rstrip token (it
 * could go on after p; SentencePiece-style, the part after p would start a piece, not
 * continue one). */
static int strips_apart(const rt_tokenizer *t, const unsigned char *s, size_t p, size_t n)
{
    if (!t->strips)
        return 1;
    size_t q = run_of(s, p, n, C_SPACE, 0);
    return q < n && !strip_token_at(t, s, q, n, 0) && !strip_token_at(t, s, space_before(s, 0, p), n, 1);
}

/* A cut after a newline that sits between two printable ASCII characters: every
 * pattern ends a word at the newline whatever follows it (the newline is a word of
 * its own, or ends one of punctuation; GPT-4o's and Tekken's take a '/' after that
 * newline too: no cut before one), and starts the next word at the character after
 * it, which no pattern joins to a newline before it. No added token spans it
 * (none holds a newline: cut_ok). SentencePiece-style: after any newline whose symbol
 * is in no merge (nl_barrier): the merges on either side of it are those of the
 * whole, and the part after it is a continuation (no U+2581 prepended). */
size_t rt_tok_safe_cut(const rt_tokenizer *t, const char *text, size_t n, size_t from)
{
    const unsigned char *s = (const unsigned char *)text;
    if (t->ug) {   /* after a newline the charsmap writes as a space (ug_cuttable) */
        for (size_t p = n ? n - 1 : 0; t->ug_cut && p >= 2 && p >= from; p--)
            if (s[p - 1] == '\n' && s[p - 2] > 0x20 && s[p - 2] < 0x7F && s[p] > 0x20 &&
                s[p] < 0x7F && strips_apart(t, s, p, n))
                return p;
        return 0;
    }
    if (t->sp) {   /* after a newline that merges with nothing (nl_barrier) */
        if (!t->cut_ok || !t->nl_barrier)
            return 0;
        for (size_t p = n ? n - 1 : 0; p >= 1 && p >= from; p--)
            if (s[p - 1] == '\n' && strips_apart(t, s, p, n))
                return p;
        return 0;
    }
    if (!t->cut_ok || (t->pat == PT_NONE && !t->wp) || n < 3)
        return 0;
    int slash = t->pat == PT_O200K || t->pat == PT_TEKKEN;   /* [\r\n/]* after punctuation */
    for (size_t p = n - 1; p >= 2 && p >= from; p--)
        if (s[p - 1] == '\n' && s[p - 2] > 0x20 && s[p - 2] < 0x7F && s[p] > 0x20 && s[p] < 0x7F &&
            !(slash && s[p] == '/') && strips_apart(t, s, p, n))
            return p;
    return 0;
}

size_t rt_tok_unnormalized(const rt_tokenizer *t, const char *text, size_t n, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)text;
    if (!t->nfc)
        return n;
    size_t len;
    for (size_t i = 0; i < n; i += len) {
        if (s[i] < 0x80) {   /* ASCII is its own NFC */
            len = 1;
            continue;
        }
        uint32_t c = rt_utf8_at(s, i, n, &len);
        if (c <= 0x10FFFF && rt_uni_in(c, rt_uni_nfc_unsafe, rt_uni_nfc_unsafe_n)) {
            *cp = c;
            return i;
        }
    }
    return n;
}

int64_t rt_tok_vocab(const rt_tokenizer *t)
{
    return t->n_ids;
}

const char *rt_tok_piece(const rt_tokenizer *t, uint32_t id, size_t *len)
{
    if (id >= t->n_ids || !t->piece[id])
        return NULL;
    *len = t->piece_len[id];
    return t->piece[id];
}

/* ---- loading ------------------------------------------------------------------ */

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), -1)

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for
 * U+0100 on, in byte order. */
static void byte_map_init(rt_tokenizer *t)
{
    int next = 0;
    memset(t->char_byte, 0xFF, sizeof t->char_byte);
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_char[b] = keep ? (uint32_t)b : 256u + (uint32_t)next++;
        t->char_byte[t->byte_char[b]] = (int16_t)b;
    }
}

static int vocab_id(const rt_tokenizer *t, const char *s, int64_t *id)
{
    Slot *sl = map_find(&t->vocab, s, strlen(s));
    *id = sl ? (int64_t)sl->val : -1;
    return sl != NULL;
}

static int is_false(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return !v || cJSON_IsNull(v) || cJSON_IsFalse(v);
}

static int is_str(const cJSON *o, const char *key, const char *want)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && strcmp(v->valuestring, want) == 0;
}

static int is_empty_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && !*v->valuestring);
}

/* One merge, "a b" or ["a", "b"], into the pair table with its rank. */
static int add_merge(rt_tokenizer *t, const cJSON *mg, uint32_t rank, char *err, size_t errlen)
{
    char *own = NULL;   /* "a b" with the space cut: a, then b */
    const char *a, *b;
    if (cJSON_IsString(mg)) {
        own = xrealloc(NULL, strlen(mg->valuestring) + 1);
        strcpy(own, mg->valuestring);
        char *sp = strchr(own, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
            free(own);
            return FAIL("model.merges[%u]: '%s' is not two tokens a space apart", rank,
                        mg->valuestring);
        }
        *sp = 0;
        a = own;
        b = sp + 1;
    } else if (cJSON_IsArray(mg) && cJSON_GetArraySize(mg) == 2 &&
               cJSON_IsString(cJSON_GetArrayItem(mg, 0)) && cJSON_IsString(cJSON_GetArrayItem(mg, 1))) {
        a = cJSON_GetArrayItem(mg, 0)->valuestring;
        b = cJSON_GetArrayItem(mg, 1)->valuestring;
    } else {
        return FAIL("model.merges[%u]: neither a string \"a b\" nor a pair [a, b]", rank);
    }
    int64_t ia, ib, inew;
    char *ab = xrealloc(NULL, strlen(a) + strlen(b) + 1);
    strcpy(ab, a);
    strcat(ab, b);
    int ok = vocab_id(t, a, &ia) && vocab_id(t, b, &ib) && vocab_id(t, ab, &inew);
    free(ab);
    if (!ok)
        snprintf(err, errlen, "model.merges[%u]: '%s' + '%s': a token or their merge is not in "
                 "the vocabulary", rank, a, b);
    free(own);
    if (!ok)
        return -1;
    PairSlot *p = pair_slot(t, (uint32_t)ia, (uint32_t)ib);
    p->key = ((uint64_t)ia << 32 | (uint64_t)ib) + 1;   /* a later duplicate wins, as in tokenizers */
    p->rank = rank;
    p->id = (uint32_t)inew;
    return 0;
}

/* The vocabulary's entry S[0, n) as an id, or -1 (WordPiece's lookup) */
static int64_t vocab_lookup(void *ctx, const char *s, size_t n)
{
    const Slot *x = map_find(&((rt_tokenizer *)ctx)->vocab, s, n);
    return x ? (int64_t)x->val : -1;
}

/* model.vocab's entries as they are, into t->vocab (ids set t->n_ids) */
static int load_vocab(rt_tokenizer *t, const cJSON *vocab, char *err, size_t errlen)
{
    if (!cJSON_IsObject(vocab))
        return FAIL("model: \"vocab\" must be an object");
    map_init(&t->vocab, 1024);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= 0x7FFFFFFF ||
            e->valuedouble != (double)(int64_t)e->valuedouble)
            return FAIL("model.vocab['%s']: the id must be an integer in [0, 2^31)", e->string);
        if (!*e->string)   /* JSON's "\u0000" reads as an empty C string */
            return FAIL("model.vocab: token %d is empty or holds U+0000, which trainc does not "
                        "read", (int)e->valuedouble);
        map_put(&t->vocab, e->string, strlen(e->string))->val = (uint32_t)e->valuedouble;
        if ((int64_t)e->valuedouble >= t->n_ids)
            t->n_ids = (int64_t)e->valuedouble + 1;
    }
    return 0;
}

/* WordPiece (BERT's): its vocabulary, unk_token (needed), continuing_subword_prefix,
 * max_input_chars_per_word */
static int load_wordpiece(rt_tokenizer *t, const cJSON *model, char *err, size_t errlen)
{
    if (load_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), err, errlen))
        return -1;
    t->wp = 1;
    t->wpm = (rt_wordpiece){.lookup = vocab_lookup, .ctx = t, .max_chars = 100};
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(model, "max_input_chars_per_word");
    if (!cJSON_IsString(unk) || !vocab_id(t, unk->valuestring, &t->wpm.unk))
        return FAIL("model.unk_token: WordPiece needs one in its vocabulary");
    const char *p = cJSON_IsString(pre) ? pre->valuestring : "##";
    if (strlen(p) >= sizeof t->wpm.prefix)
        return FAIL("model.continuing_subword_prefix: over %d bytes", (int)sizeof t->wpm.prefix - 1);
    strcpy(t->wpm.prefix, p);
    t->wpm.prefix_len = strlen(p);
    if (cJSON_IsNumber(max) && max->valuedouble >= 1)
        t->wpm.max_chars = (int64_t)max->valuedouble;
    t->unk = t->wpm.unk;
    return 0;
}

/* Unigram: vocab, a list of [piece, score] (a piece's id its place); unk_id (needed:
 * a character no piece covers is unk); byte_fallback false */
static int load_unigram(rt_tokenizer *t, const cJSON *model, char *err, size_t errlen)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_id");
    int n = cJSON_GetArraySize(vocab);
    if (!cJSON_IsArray(vocab) || n == 0)
        return FAIL("model.vocab: a Unigram model's is a list of [piece, score]");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return FAIL("model.byte_fallback: true with a Unigram model is not supported");
    if (!cJSON_IsNumber(unk) || unk->valuedouble < 0 || unk->valuedouble >= n)
        return FAIL("model.unk_id: a Unigram model needs one among its %d pieces", n);
    map_init(&t->vocab, 1024);
    t->ug_score = xrealloc(NULL, (size_t)n * sizeof *t->ug_score);
    double lowest = 0;
    size_t longest = 1;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(vocab, i), *p = cJSON_GetArrayItem(e, 0);
        const cJSON *sc = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsString(p) || !*p->valuestring || !cJSON_IsNumber(sc))
            return FAIL("model.vocab[%d]: not [piece, score] (a non-empty string without "
                        "U+0000, a number)", i);
        size_t len = strlen(p->valuestring);
        map_put(&t->vocab, p->valuestring, len)->val = (uint32_t)i;
        t->ug_score[i] = sc->valuedouble;
        lowest = i == 0 || sc->valuedouble < lowest ? sc->valuedouble : lowest;
        longest = len > longest ? len : longest;
    }
    t->n_ids = n;
    t->ug = 1;
    t->unk = (int64_t)unk->valuedouble;
    t->ugm = (rt_unigram){.lookup = vocab_lookup, .ctx = t, .score = t->ug_score, .unk = t->unk,
                          .unk_score = lowest - 10.0, .max_len = longest};
    return 0;
}

static int load_model(rt_tokenizer *t, const cJSON *model, char *err, size_t errlen)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model) || !cJSON_IsString(type))
        return FAIL("model: missing, or without a \"type\"");
    if (strcmp(type->valuestring, "WordPiece") == 0)
        return load_wordpiece(t, model, err, errlen);
    if (strcmp(type->valuestring, "Unigram") == 0)
        return load_unigram(t, model, err, errlen);
    if (strcmp(type->valuestring, "BPE") != 0)
        return FAIL("model type '%s' is not supported (BPE, WordPiece, Unigram)", type->valuestring);
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
        return FAIL("model.dropout: BPE dropout is not supported (random ids)");
    if (!is_empty_str(model, "continuing_subword_prefix") || !is_empty_str(model, "end_of_word_suffix"))
        return FAIL("model: continuing_subword_prefix and end_of_word_suffix are not supported");
    t->byte_fallback = !is_false(model, "byte_fallback");
    t->fuse_unk = !is_false(model, "fuse_unk");
    t->ignore_merges = !is_false(model, "ignore_merges");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return FAIL("model: \"vocab\" must be an object and \"merges\" a list");
    if (load_vocab(t, vocab, err, errlen))
        return -1;
    const cJSON *e;
    size_t nm = (size_t)cJSON_GetArraySize(merges);
    for (t->merges_cap = 1024; t->merges_cap < 2 * nm; t->merges_cap *= 2) {}
    t->merges = xrealloc(NULL, t->merges_cap * sizeof *t->merges);
    memset(t->merges, 0, t->merges_cap * sizeof *t->merges);
    uint32_t rank = 0;
    cJSON_ArrayForEach(e, merges)
        if (add_merge(t, e, rank++, err, errlen))
            return -1;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    t->unk = -1;
    if (cJSON_IsString(unk) && !vocab_id(t, unk->valuestring, &t->unk))
        return FAIL("model.unk_token '%s' is not in the vocabulary", unk->valuestring);
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        uint32_t u = t->byte_char[b];
        if (u < 0x80)
            c[0] = (char)u;
        else {
            c[0] = (char)(0xC0 | u >> 6);
            c[1] = (char)(0x80 | (u & 0x3F));
        }
        vocab_id(t, c, &t->byte_id[b]);
        char fb[8];
        snprintf(fb, sizeof fb, "<0x%02X>", b);
        vocab_id(t, fb, &t->fallback_id[b]);
    }
    return 0;
}

static int added_cmp(const void *pa, const void *pb)
{
    const Added *a = pa, *b = pb;
    if ((unsigned char)a->s[0] != (unsigned char)b->s[0])
        return (unsigned char)a->s[0] - (unsigned char)b->s[0];
    return a->len > b->len ? -1 : a->len < b->len;
}

static void added_index(AddedSet *set)
{
    if (set->n > 1)
        qsort(set->a, (size_t)set->n, sizeof *set->a, added_cmp);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        set->first[b] = k;
        while (k < set->n && b < 256 && (unsigned char)set->a[k].s[0] == b)
            k++;
    }
}

/* The id `tokenizers` gives an added token, whatever id the file writes: an earlier
 * added token's with the same content, else the vocabulary's, else the next after the
 * vocabulary and the added tokens so far (AddedVocabulary::add_tokens). */
static uint32_t added_id(const rt_tokenizer *t, const char *content, int64_t *max_added)
{
    const AddedSet *sets[2] = {&t->raw_set, &t->norm_set};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < sets[k]->n; i++)
            if (strcmp(sets[k]->a[i].s, content) == 0)
                return sets[k]->a[i].id;
    int64_t id, size = (int64_t)t->vocab.n;
    if (!vocab_id(t, content, &id))
        id = *max_added < 0 ? size : *max_added >= size ? *max_added + 1 : size;
    if (id > *max_added)
        *max_added = id;
    return (uint32_t)id;
}

static int load_added(rt_tokenizer *t, const cJSON *added, char *err, size_t errlen)
{
    int64_t max_added = -1;
    t->cut_ok = 1;
    if (!added || cJSON_IsNull(added))
        return 0;
    if (!cJSON_IsArray(added))
        return FAIL("added_tokens must be a list");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= 0x7FFFFFFF ||
            !cJSON_IsString(content) || !*content->valuestring)
            return FAIL("added_tokens[%d]: needs an integer \"id\" and a non-empty \"content\"", i);
        if (!is_false(e, "single_word"))
            return FAIL("added_tokens[%d] '%s': single_word is not supported", i,
                        content->valuestring);
        uint32_t tid = added_id(t, content->valuestring, &max_added);
        AddedSet *set = is_false(e, "normalized") ? &t->raw_set : &t->norm_set;
        set->a = xrealloc(set->a, (size_t)(set->n + 1) * sizeof *set->a);
        set->a[set->n++] = (Added){.s = strdup(content->valuestring),
                                   .len = (uint32_t)strlen(content->valuestring), .id = tid,
                                   .lstrip = !is_false(e, "lstrip"),
                                   .rstrip = !is_false(e, "rstrip"),
                                   .special = cJSON_IsTrue(
                                       cJSON_GetObjectItemCaseSensitive(e, "special"))};
        t->strips |= !is_false(e, "lstrip") || !is_false(e, "rstrip");
        if (strchr(content->valuestring, '\n'))
            t->cut_ok = 0;
        if ((int64_t)tid >= t->n_ids)
            t->n_ids = (int64_t)tid + 1;
        i++;
    }
    added_index(&t->raw_set);
    added_index(&t->norm_set);
    return 0;
}

static const char *type_of(const cJSON *o)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "(no type)";
}

/* ByteLevel: no prefix space; its own regex (GPT-2's) or none. */
static int byte_level(const cJSON *bl, int *use_regex, char *err, size_t errlen)
{
    if (!is_false(bl, "add_prefix_space"))
        return FAIL("pre_tokenizer ByteLevel: add_prefix_space true is not supported");
    const cJSON *ur = cJSON_GetObjectItemCaseSensitive(bl, "use_regex");
    *use_regex = !ur || cJSON_IsTrue(ur);
    return 0;
}

/* Split(Regex) with one of the known patterns, each match a word of its own. */
static int split_pattern(rt_tokenizer *t, const cJSON *sp, char *err, size_t errlen)
{
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sp, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
    if (!cJSON_IsString(re))
        return FAIL("pre_tokenizer Split: only a {\"Regex\": ...} pattern is supported");
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 || !is_false(sp, "invert"))
        return FAIL("pre_tokenizer Split: only behavior Isolated, not inverted, is supported");
    if (strcmp(re->valuestring, re_gpt2) == 0)
        t->pat = PT_GPT2;
    else if (strcmp(re->valuestring, re_llama3) == 0)
        t->pat = PT_LLAMA3;
    else if (strcmp(re->valuestring, re_qwen2) == 0)
        t->pat = PT_QWEN2;
    else if (strcmp(re->valuestring, re_o200k) == 0)
        t->pat = PT_O200K;
    else if (strcmp(re->valuestring, re_tekken) == 0)
        t->pat = PT_TEKKEN;
    else
        return FAIL("pre_tokenizer Split: the pattern '%s' is not supported (known: GPT-2's, "
                    "Llama 3's, Qwen2's, GPT-4o's and Tekken's)", re->valuestring);
    return 0;
}

/* Metaspace with replacement U+2581: prepend_scheme (or the older add_prefix_space),
 * split (true unless it says otherwise). */
static int metaspace(rt_tokenizer *t, const cJSON *ms, char *err, size_t errlen)
{
    if (!is_str(ms, "replacement", meta))
        return FAIL("pre_tokenizer Metaspace: only the replacement U+2581 is supported");
    const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(ms, "prepend_scheme");
    if (cJSON_IsString(scheme)) {
        static const char *const names[] = {"first", "always", "never"};
        static const SpMode modes[] = {SP_FIRST, SP_ALWAYS, SP_NEVER};
        for (int k = 0; k < 3; k++)
            if (strcmp(scheme->valuestring, names[k]) == 0)
                t->sp = modes[k];
        if (!t->sp)
            return FAIL("pre_tokenizer Metaspace: prepend_scheme '%s' is not supported",
                        scheme->valuestring);
    } else {
        t->sp = is_false(ms, "add_prefix_space") ? SP_NEVER : SP_ALWAYS;
    }
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(ms, "split");
    t->sp_split = !split || cJSON_IsTrue(split);
    return 0;
}

/* A Split on the string " ", not inverted: after a normalizer that wrote every space as
 * U+2581 (transformers' later Gemma files) it finds nothing to split. */
static int space_split(const cJSON *pt)
{
    return cJSON_IsObject(pt) && strcmp(type_of(pt), "Split") == 0 &&
           is_str(cJSON_GetObjectItemCaseSensitive(pt, "pattern"), "String", " ") &&
           is_false(pt, "invert");
}

/* ByteLevel (GPT-2), or Sequence[Split(Regex), ByteLevel(use_regex false)] (Llama 3,
 * Qwen2), Sequence[Digits, ByteLevel] (StarCoder's: Digits cuts each digit, or each
 * run of them with individual_digits false, apart first), or Sequence[ByteLevel]; none
 * (or a Split on " ", which finds none) after a SentencePiece-style normalizer,
 * Metaspace without a normalizer. */
static int load_pre(rt_tokenizer *t, const cJSON *pt, char *err, size_t errlen)
{
    int use_regex = 0;
    int bert = cJSON_IsObject(pt) && strcmp(type_of(pt), "BertPreTokenizer") == 0;
    if (t->wp || bert)   /* WordPiece's words, and theirs alone */
        return t->wp && bert ? 0 : FAIL("pre_tokenizer %s with a %s model is not supported "
                                         "(BertPreTokenizer and WordPiece go together)",
                                         cJSON_IsObject(pt) ? type_of(pt) : "none",
                                         t->wp ? "WordPiece" : "BPE");
    if (t->sp && (!pt || cJSON_IsNull(pt) || space_split(pt)))
        return 0;
    if (t->sp)
        return FAIL("pre_tokenizer type '%s' after Llama 2's normalizer is not supported "
                    "(none)", type_of(pt));
    if (cJSON_IsObject(pt) && strcmp(type_of(pt), "Metaspace") == 0)
        return t->nfc ? FAIL("pre_tokenizer Metaspace after a normalizer is not supported")
                      : metaspace(t, pt, err, errlen);
    if (!cJSON_IsObject(pt))
        return FAIL("pre_tokenizer: none (a ByteLevel pre-tokenizer, Metaspace, or Llama 2's "
                    "normalizer is needed)");
    if (strcmp(type_of(pt), "ByteLevel") == 0) {
        if (byte_level(pt, &use_regex, err, errlen))
            return -1;
        t->pat = use_regex ? PT_GPT2 : PT_NONE;
        return 0;
    }
    if (strcmp(type_of(pt), "Sequence") != 0)
        return FAIL("pre_tokenizer type '%s' is not supported (ByteLevel, or Sequence of "
                    "Split and ByteLevel)", type_of(pt));
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    int n = cJSON_GetArraySize(list), split = 0;
    const cJSON *last = cJSON_GetArrayItem(list, n - 1);
    if (n < 1 || n > 2 || strcmp(type_of(last), "ByteLevel") != 0)
        return FAIL("pre_tokenizer Sequence: only [Split, ByteLevel], [Digits, ByteLevel] or "
                    "[ByteLevel] is supported");
    if (n == 2) {
        const cJSON *first = cJSON_GetArrayItem(list, 0);
        if (strcmp(type_of(first), "Digits") == 0)
            t->digits = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(first, "individual_digits"))
                            ? 1 : 2;
        else if (strcmp(type_of(first), "Split") != 0)
            return FAIL("pre_tokenizer type '%s' is not supported in a Sequence (Split or "
                        "Digits, then ByteLevel)", type_of(first));
        else if (split_pattern(t, first, err, errlen))
            return -1;
        split = !t->digits;
    }
    if (byte_level(last, &use_regex, err, errlen))
        return -1;
    if (split && use_regex)
        return FAIL("pre_tokenizer Sequence: a Split before a ByteLevel that splits again "
                    "(use_regex true) is not supported");
    if (!split)
        t->pat = use_regex ? PT_GPT2 : PT_NONE;
    return 0;
}

/* Replace(String " ", "▁"): SentencePiece's spaces. */
static int sp_replace(const cJSON *rep)
{
    return strcmp(type_of(rep), "Replace") == 0 &&
           is_str(cJSON_GetObjectItemCaseSensitive(rep, "pattern"), "String", " ") &&
           is_str(rep, "content", meta);
}

/* Llama 2's normalizer: Sequence[Prepend("▁"), Replace(String " ", "▁")]. */
static int sp_normalizer(const cJSON *list)
{
    const cJSON *pre = cJSON_GetArrayItem(list, 0);
    return cJSON_GetArraySize(list) == 2 && strcmp(type_of(pre), "Prepend") == 0 &&
           is_str(pre, "prepend", meta) && sp_replace(cJSON_GetArrayItem(list, 1));
}

/* One of a Unigram model's normalizer steps: Precompiled, Strip, or Replace(Regex " {2,}",
 * U+2581) (XLM-RoBERTa's and T5's, as transformers converts SentencePiece's models) */
static int ug_normalizer(rt_tokenizer *t, const cJSON *nm, char *err, size_t errlen)
{
    const char *type = type_of(nm);
    if (t->n_ug_steps == 4)
        return FAIL("normalizer: more than 4 steps are not supported");
    int *step = &t->ug_steps[t->n_ug_steps++];
    if (strcmp(type, "Precompiled") == 0) {
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(nm, "precompiled_charsmap");
        *step = UG_PRECOMPILED;
        if (t->pc.trie)
            return FAIL("normalizer: two Precompiled steps are not supported");
        return cJSON_IsString(map) ? rt_pc_load(&t->pc, map->valuestring, err, errlen)
                                   : FAIL("normalizer Precompiled: no precompiled_charsmap");
    }
    if (strcmp(type, "Strip") == 0) {
        int l = !is_false(nm, "strip_left"), r = !is_false(nm, "strip_right");
        *step = l && r ? UG_STRIP_BOTH : l ? UG_STRIP_LEFT : UG_STRIP_RIGHT;
        if (!l && !r)
            t->n_ug_steps--;   /* (strips nothing) */
        return 0;
    }
    *step = UG_SPACE_RUNS;
    if (strcmp(type, "Replace") == 0 && is_str(nm, "content", meta) &&
        is_str(cJSON_GetObjectItemCaseSensitive(nm, "pattern"), "Regex", " {2,}"))
        return 0;
    return FAIL("normalizer type '%s' with a Unigram model is not supported (Precompiled, "
                "Strip, Replace of Regex \" {2,}\" by U+2581)", type);
}

/* None, NFC (Qwen2), alone or as a Sequence's one member (NFC is applied only where it
 * is the identity: rt_tok_unnormalized), Llama 2's (SentencePiece-style, SP_PREPEND), or
 * its Replace alone (Gemma's: nothing prepended, SP_NEVER). */
static int load_normalizer(rt_tokenizer *t, const cJSON *nm, char *err, size_t errlen)
{
    if (!nm || cJSON_IsNull(nm))
        return 0;
    if (t->ug && strcmp(type_of(nm), "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(nm, "normalizers"))
            if (ug_normalizer(t, e, err, errlen))
                return -1;
        return 0;
    }
    if (t->ug)
        return ug_normalizer(t, nm, err, errlen);
    if (strcmp(type_of(nm), "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(nm, "normalizers");
        if (cJSON_GetArraySize(list) == 0)
            return 0;
        if (cJSON_GetArraySize(list) == 1)
            return load_normalizer(t, cJSON_GetArrayItem(list, 0), err, errlen);
        if (sp_normalizer(list)) {
            t->sp = SP_PREPEND;
            return 0;
        }
    }
    if (strcmp(type_of(nm), "NFC") == 0) {
        t->nfc = 1;
        return 0;
    }
    if (strcmp(type_of(nm), "BertNormalizer") == 0) {
        if (!t->wp)
            return FAIL("normalizer BertNormalizer with a %s model is not supported (WordPiece's)",
                        "BPE");
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(nm, "strip_accents");
        t->bert_norm = 1;
        t->bnorm = (rt_bert_norm){.clean_text = !is_false(nm, "clean_text"),
                                  .chinese = !is_false(nm, "handle_chinese_chars"),
                                  .lowercase = !is_false(nm, "lowercase")};
        t->bnorm.strip_accents = cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : t->bnorm.lowercase;
        return 0;
    }
    if (sp_replace(nm)) {
        t->sp = SP_NEVER;
        return 0;
    }
    return FAIL("normalizer type '%s' is not supported (none, NFC, BertNormalizer, or Llama 2's "
                "Prepend and Replace of spaces by U+2581, or that Replace alone)", type_of(nm));
}

/* Appends a piece to template k (0 single, 1 pair). */
static void tmpl_add(rt_tokenizer *t, int k, int64_t id, int type)
{
    t->tmpl[k] = xrealloc(t->tmpl[k], (size_t)(t->n_tmpl[k] + 1) * sizeof *t->tmpl[k]);
    t->tmpl[k][t->n_tmpl[k]++] = (TmplPiece){id, type};
}

/* TemplateProcessing's template KEY ("single": k 0, "pair": 1) as pieces: its special
 * tokens' ids (a token may stand for several) and $A (and $B), each with its type id */
static int template_pieces(rt_tokenizer *t, const cJSON *pp, int k, char *err, size_t errlen)
{
    const char *key = k ? "pair" : "single", *want = k ? "AB" : "A";
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens"), *e;
    int seen = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, key)) {
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *st = sq ? sq : cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(st, "id");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(st, "type_id");
        int type = cJSON_IsNumber(ty) ? ty->valueint : 0;
        if (sq) {
            if (!cJSON_IsString(name) || seen >= (int)strlen(want) ||
                name->valuestring[0] != want[seen] || name->valuestring[1])
                return FAIL("post_processor TemplateProcessing: a %s template with %s is needed",
                            key, k ? "$A, then $B" : "one $A");
            tmpl_add(t, k, seen++ ? TMPL_B : TMPL_A, type);
            continue;
        }
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(specials, cJSON_IsString(name) ? name->valuestring : "");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tok, "ids"), *id;
        if (!cJSON_IsArray(ids))
            return FAIL("post_processor TemplateProcessing: a special token of \"%s\" is not in "
                        "\"special_tokens\"", key);
        cJSON_ArrayForEach(id, ids)
            tmpl_add(t, k, (int64_t)id->valuedouble, type);
    }
    return seen == (int)strlen(want) ? 0 : FAIL("post_processor TemplateProcessing: \"%s\" has "
                                                 "no $%c", key, want[seen]);
}

/* The single template's special ids before and after $A (rt_tok_prefix, rt_tok_suffix) */
static void single_ids(rt_tokenizer *t)
{
    int seen_a = 0;
    for (int i = 0; i < t->n_tmpl[0]; i++) {
        if (t->tmpl[0][i].id == TMPL_A)
            seen_a = 1;
        else
            rt_ids_push(seen_a ? &t->suffix : &t->prefix, (uint32_t)t->tmpl[0][i].id);
    }
}

/* TemplateProcessing: its single template, and its pair one where it has one */
static int template_ids(rt_tokenizer *t, const cJSON *pp, char *err, size_t errlen)
{
    if (template_pieces(t, pp, 0, err, errlen))
        return -1;
    const cJSON *pair = cJSON_GetObjectItemCaseSensitive(pp, "pair");
    char ignored[256];   /* a pair template not of $A then $B: none (what reads one says so) */
    if (cJSON_GetArraySize(pair) > 0 && template_pieces(t, pp, 1, ignored, sizeof ignored)) {
        free(t->tmpl[1]);
        t->tmpl[1] = NULL, t->n_tmpl[1] = 0;
    }
    single_ids(t);
    return 0;
}

/* RobertaProcessing and BertProcessing: cls $A sep, and for a pair cls $A sep sep $B sep
 * (RoBERTa's: every type id 0, which is what its model reads: transformers gives it no
 * token_type_ids) or cls $A sep $B sep (BERT's, $B and its sep type 1) */
static int cls_sep_ids(rt_tokenizer *t, const cJSON *pp, int roberta, char *err, size_t errlen)
{
    int64_t id[2];
    const char *keys[2] = {"cls", "sep"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(pp, keys[k]);
        const cJSON *n = cJSON_GetArrayItem(v, 1);
        if (cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(n) || n->valuedouble < 0)
            return FAIL("post_processor %s: \"%s\" is not [token, id]", type_of(pp), keys[k]);
        id[k] = (int64_t)n->valuedouble;
    }
    int64_t single[3] = {id[0], TMPL_A, id[1]}, pair[6] = {id[0], TMPL_A, id[1], id[1], TMPL_B, id[1]};
    for (int i = 0; i < 3; i++)
        tmpl_add(t, 0, single[i], 0);
    for (int i = 0; i < 6; i++) {
        if (!roberta && i == 3)
            continue;   /* (BERT's pair has one sep between) */
        tmpl_add(t, 1, pair[i], !roberta && i >= 4);
    }
    single_ids(t);
    return 0;
}

/* A switch of a JSON object, its default where it is absent */
static int flag_of(const cJSON *o, const char *key, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* ByteLevel (offsets only), TemplateProcessing, or a Sequence of them. */
static int load_post(rt_tokenizer *t, const cJSON *pp, char *err, size_t errlen)
{
    if (pp && (!strcmp(type_of(pp), "ByteLevel") || !strcmp(type_of(pp), "RobertaProcessing"))) {
        t->trim_offsets = flag_of(pp, "trim_offsets", 1);
        t->trim_keeps_first = flag_of(pp, "add_prefix_space", 1);
    }
    if (!pp || cJSON_IsNull(pp) || strcmp(type_of(pp), "ByteLevel") == 0)
        return 0;
    if (strcmp(type_of(pp), "TemplateProcessing") == 0)
        return template_ids(t, pp, err, errlen);
    if (strcmp(type_of(pp), "RobertaProcessing") == 0 || strcmp(type_of(pp), "BertProcessing") == 0)
        return cls_sep_ids(t, pp, type_of(pp)[0] == 'R', err, errlen);
    if (strcmp(type_of(pp), "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors"))
            if (load_post(t, e, err, errlen))
                return -1;
        return 0;
    }
    return FAIL("post_processor type '%s' is not supported (ByteLevel, TemplateProcessing, "
                "RobertaProcessing, BertProcessing)", type_of(pp));
}

/* Is id in a merge, either side? */
static int in_merge(const rt_tokenizer *t, uint32_t id)
{
    for (size_t i = 0; i < t->merges_cap; i++) {
        uint64_t k = t->merges[i].key - 1;
        if (t->merges[i].key && ((uint32_t)(k >> 32) == id || (uint32_t)k == id))
            return 1;
    }
    return 0;
}

/* What SentencePiece-style asks of the rest: byte_fallback only there, added tokens
 * unnormalized (matched in the text as written); whether a newline is a barrier for
 * the safe cut (its symbol, a vocabulary entry or <0x0A>, in no merge; no ignore_merges,
 * whose whole-word lookup could span it). */
/* Unigram: may a text be cut after a newline between two printable ASCII characters
 * (rt_tok_safe_cut)? Where the charsmap writes the newline as a space, a Strip after it
 * takes that space from the end of the part before the cut, and Metaspace (always, split)
 * prepends the U+2581 it would have become to the part after it: the ids of the whole. */
static int ug_cuttable(rt_tokenizer *t)
{
    int pc = -1, strip = -1;
    for (int k = 0; k < t->n_ug_steps; k++) {
        if (t->ug_steps[k] == UG_PRECOMPILED)
            pc = k;
        if (t->ug_steps[k] == UG_STRIP_RIGHT || t->ug_steps[k] == UG_STRIP_BOTH)
            strip = k;
    }
    if (pc < 0 || strip < pc || t->sp != SP_ALWAYS || !t->sp_split || !t->cut_ok)
        return 0;
    char *out = NULL;
    size_t cap = 0, n = 0;
    rt_pc_normalize(&t->pc, (const unsigned char *)"\n", 1, &out, &cap, &n);
    int space = n == 1 && out[0] == ' ';
    free(out);
    return space;
}

static int sp_check(rt_tokenizer *t, char *err, size_t errlen)
{
    if (t->wp && t->norm_set.n > 0)
        return FAIL("added_tokens: '%s' is normalized, which WordPiece here does not support "
                    "(only normalized false, as BERT's special tokens)", t->norm_set.a[0].s);
    if (t->wp)
        return 0;
    if (t->ug) {
        t->ug_cut = ug_cuttable(t);
        return t->sp ? 0 : FAIL("pre_tokenizer: a Unigram model needs Metaspace");
    }
    if (!t->sp)
        return t->byte_fallback ? FAIL("model.byte_fallback with a byte-level pre-tokenizer is "
                                       "not supported (SentencePiece-style BPE has it)") : 0;
    if (t->norm_set.n > 0)
        return FAIL("added_tokens: '%s' is normalized, which a SentencePiece-style tokenizer "
                    "does not support (only normalized false)", t->norm_set.a[0].s);
    int64_t nl;
    if (!vocab_id(t, "\n", &nl) && t->byte_fallback)
        nl = t->fallback_id['\n'];
    t->nl_barrier = nl >= 0 && !t->ignore_merges && !in_merge(t, (uint32_t)nl);
    int64_t id;
    t->sp_runs = !t->ignore_merges && vocab_id(t, meta, &id);   /* no unk for a U+2581 */
    for (size_t i = 0; t->sp_runs && i < t->vocab.cap; i++) {
        const Slot *s = &t->vocab.s[i];
        const unsigned char *p = (const unsigned char *)t->vocab.pool + s->off;
        for (size_t j = 1; s->h && j + 3 <= s->len && t->sp_runs; j++)
            t->sp_runs = !run_start(p, j);
    }
    return 0;
}

static void set_piece(rt_tokenizer *t, uint32_t id, const char *s, size_t len)
{
    free(t->piece[id]);
    t->piece[id] = xrealloc(NULL, len + 1);
    memcpy(t->piece[id], s, len);
    t->piece[id][len] = 0;
    t->piece_len[id] = (uint32_t)len;
}

/* A SentencePiece-style vocabulary entry's bytes into buf: <0xXX> (with byte_fallback)
 * its byte, U+2581 a space, the rest as written. */
static size_t sp_piece(const rt_tokenizer *t, const char *p, size_t n, char *buf)
{
    static const char hex[] = "0123456789ABCDEF";
    const char *hi = n == 6 && p[5] == '>' ? memchr(hex, p[3], 16) : NULL;
    const char *lo = hi ? memchr(hex, p[4], 16) : NULL;
    if (t->byte_fallback && lo && memcmp(p, "<0x", 3) == 0) {
        buf[0] = (char)((hi - hex) << 4 | (lo - hex));
        return 1;
    }
    size_t k = 0;
    for (size_t j = 0; j < n; j++)
        if (j + 3 <= n && memcmp(p + j, meta, 3) == 0) {
            buf[k++] = ' ';
            j += 2;
        } else {
            buf[k++] = p[j];
        }
    return k;
}

/* Each id's bytes: a vocabulary entry with the byte map undone (a character outside
 * the map kept as it is; SentencePiece-style, sp_piece), an added token's content as
 * written. */
static void build_pieces(rt_tokenizer *t)
{
    t->piece = xrealloc(NULL, (size_t)t->n_ids * sizeof *t->piece);
    t->piece_len = xrealloc(NULL, (size_t)t->n_ids * sizeof *t->piece_len);
    memset(t->piece, 0, (size_t)t->n_ids * sizeof *t->piece);
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < t->vocab.cap; i++) {
        const Slot *s = &t->vocab.s[i];
        if (!s->h)
            continue;
        const unsigned char *p = (const unsigned char *)t->vocab.pool + s->off;
        if (s->len + 1 > cap)
            buf = xrealloc(buf, cap = s->len + 1);
        if (t->sp) {
            set_piece(t, s->val, buf, sp_piece(t, (const char *)p, s->len, buf));
            continue;
        }
        if (t->wp) {   /* (a later piece's "##" kept) */
            set_piece(t, s->val, (const char *)p, s->len);
            continue;
        }
        size_t k = 0, len;
        for (size_t j = 0; j < s->len; j += len) {
            uint32_t c = rt_utf8_at(p, j, s->len, &len);
            if (c < 0x200 && t->char_byte[c] >= 0)
                buf[k++] = (char)t->char_byte[c];
            else
                memcpy(buf + k, p + j, len), k += len;
        }
        set_piece(t, s->val, buf, k);
    }
    free(buf);
    AddedSet *sets[2] = {&t->raw_set, &t->norm_set};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < sets[k]->n; i++)
            set_piece(t, sets[k]->a[i].id, sets[k]->a[i].s, sets[k]->a[i].len);
}

static char *read_all(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap)
            buf = xrealloc(buf, cap = cap ? 2 * cap : 1 << 20);
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        snprintf(err, errlen, "%s: cannot read", path);
        return NULL;
    }
    *len = n;
    return buf;
}

rt_tokenizer *rt_tok_load(const char *path, char *err, size_t errlen)
{
    size_t len;
    char *text = read_all(path, &len, err, errlen);
    if (!text)
        return NULL;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: not a JSON object (a tokenizer.json)", path);
        cJSON_Delete(root);
        return NULL;
    }
    rt_tokenizer *t = xrealloc(NULL, sizeof *t);
    memset(t, 0, sizeof *t);
    byte_map_init(t);
    char msg[768] = "";
    int bad = load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), msg, sizeof msg) ||
              load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), msg, sizeof msg) ||
              load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), msg, sizeof msg) ||
              load_pre(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), msg, sizeof msg) ||
              load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), msg, sizeof msg) ||
              sp_check(t, msg, sizeof msg);
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "padding"), "pad_id");
    t->pad = cJSON_IsNumber(pad) && pad->valuedouble >= 0 ? (int64_t)pad->valuedouble : -1;
    cJSON_Delete(root);
    if (bad) {
        snprintf(err, errlen, "%s: %s", path, msg);
        rt_tok_free(t);
        return NULL;
    }
    build_pieces(t);
    map_init(&t->cache, CACHE_START);
    t->cache_ids_cap = CACHE_START;
    t->cache_ids = xrealloc(NULL, t->cache_ids_cap * sizeof *t->cache_ids);
    int64_t n;
    for (const char *const *k = (const char *const[]){"<pad>", "[PAD]", NULL}; t->pad < 0 && *k; k++)
        t->pad = rt_tok_one_id(t, *k, &n);
    return t;
}

int rt_tok_has_pair(const rt_tokenizer *t) { return t->n_tmpl[1] > 0; }

int rt_tok_special(const rt_tokenizer *t, uint32_t id)
{
    const AddedSet *sets[2] = {&t->raw_set, &t->norm_set};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < sets[k]->n; i++)
            if (sets[k]->a[i].id == id && sets[k]->a[i].special)
                return 1;
    return 0;
}

int64_t rt_tok_pad_id(const rt_tokenizer *t) { return t->pad; }

int64_t rt_tok_added(const rt_tokenizer *t, int pair)
{
    int64_t n = 0;
    for (int i = 0; i < t->n_tmpl[pair]; i++)
        n += t->tmpl[pair][i].id >= 0;
    return n;
}

void rt_tok_template(const rt_tokenizer *t, const rt_ids *a, const rt_ids *b, rt_ids *ids,
                     rt_ids *types)
{
    int k = b != NULL;
    for (int i = 0; i < t->n_tmpl[k]; i++) {
        const TmplPiece *p = &t->tmpl[k][i];
        const rt_ids *seq = p->id == TMPL_A ? a : p->id == TMPL_B ? b : NULL;
        for (int64_t j = 0; j < (seq ? seq->n : 1); j++) {
            rt_ids_push(ids, seq ? seq->v[j] : (uint32_t)p->id);
            rt_ids_push(types, (uint32_t)p->type);
        }
    }
    if (!t->n_tmpl[k])   /* no post-processor: the sequences as they are, type 0 */
        for (const rt_ids *seq = a; seq; seq = seq == a ? b : NULL)
            for (int64_t j = 0; j < seq->n; j++) {
                rt_ids_push(ids, seq->v[j]);
                rt_ids_push(types, seq == a ? 0 : 1);
            }
}

void rt_tok_free(rt_tokenizer *t)
{
    if (!t)
        return;
    map_free(&t->vocab);
    map_free(&t->cache);
    free(t->merges);
    AddedSet *sets[2] = {&t->raw_set, &t->norm_set};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < sets[k]->n; i++)
            free(sets[k]->a[i].s);
        free(sets[k]->a);
    }
    rt_ids_free(&t->prefix);
    rt_ids_free(&t->suffix);
    free(t->tmpl[0]);
    free(t->tmpl[1]);
    for (int64_t i = 0; t->piece && i < t->n_ids; i++)
        free(t->piece[i]);
    free(t->piece);
    free(t->piece_len);
    free(t->cache_ids);
    free(t->sym);
    free(t->mapped);
    free(t->norm);
    free(t->ug_score);
    rt_pc_free(&t->pc);
    free(t->ug_buf[0]);
    free(t->ug_buf[1]);
    free(t->ug_ch);
    free(t);
}
