/* precompiled.c: SentencePiece's Precompiled normalizer as tokenizers 0.19 applies it
 * (its NFKC-like rules compiled into the tokenizer.json's precompiled_charsmap: a
 * double-array trie over UTF-8 strings, each value the offset of a NUL-ended
 * replacement), and the extended grapheme clusters it looks up whole (UAX #29, the
 * classes from graphemes.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unigram.h"
#include "wordpiece.h"

/* ---- the charsmap ---------------------------------------------------------------------- */

static int b64_value(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
         : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 (padding optional) into a new buffer; its length in *n, NULL if bad */
static unsigned char *b64_decode(const char *s, size_t *n)
{
    size_t len = strlen(s), k = 0;
    unsigned char *out = malloc(len / 4 * 3 + 3);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; out && i < len && s[i] != '='; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = acc << 6 | (uint32_t)v;
        if ((bits += 6) >= 8) {
            bits -= 8;
            out[k++] = (unsigned char)(acc >> bits);
        }
    }
    *n = k;
    return out;
}

int rt_pc_load(rt_precompiled *p, const char *b64, char *err, size_t errlen)
{
    size_t n = 0;
    unsigned char *b = b64_decode(b64, &n);
    uint32_t size = n >= 4 ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                 (uint32_t)b[3] << 24 : 0;
    if (!b || n < 4 || size % 4 || size < 4 || size > n - 4) {
        free(b);
        snprintf(err, errlen, "precompiled_charsmap is not SentencePiece's (base64 of a trie "
                 "and its replacements)");
        return -1;
    }
    *p = (rt_precompiled){.trie_n = size / 4, .repl_n = n - 4 - size};
    p->trie = malloc(size);
    p->repl = malloc(p->repl_n + 1);
    for (size_t i = 0; i < p->trie_n; i++) {
        const unsigned char *u = b + 4 + 4 * i;
        p->trie[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                     (uint32_t)u[3] << 24;
    }
    memcpy(p->repl, b + 4 + size, p->repl_n);
    p->repl[p->repl_n] = 0;
    free(b);
    return 0;
}

void rt_pc_free(rt_precompiled *p)
{
    free(p->trie);
    free(p->repl);
}

/* A trie unit's parts (Darts-clone's layout) */
static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }

/* The replacement of the shortest prefix of s[0, n) the trie holds, or NULL */
static const char *transform(const rt_precompiled *p, const unsigned char *s, size_t n)
{
    if (p->trie_n == 0)
        return NULL;
    size_t pos = unit_offset(p->trie[0]);
    for (size_t i = 0; i < n && s[i]; i++) {
        pos ^= s[i];
        if (pos >= p->trie_n || unit_label(p->trie[pos]) != s[i])
            return NULL;
        uint32_t u = p->trie[pos];
        pos ^= unit_offset(u);
        if (pos >= p->trie_n)
            return NULL;
        if (u >> 8 & 1) {   /* a leaf: the value's replacement */
            uint32_t at = p->trie[pos] & 0x7FFFFFFFu;
            return at < p->repl_n ? p->repl + at : NULL;
        }
    }
    return NULL;
}

static void put(char **out, size_t *cap, size_t *k, const void *s, size_t n)
{
    if (*k + n + 1 > *cap) {
        *cap = 2 * (*k + n + 1) + 64;
        *out = realloc(*out, *cap);
        if (!*out)
            abort();
    }
    memcpy(*out + *k, s, n);
    *k += n;
}

/* Precompiled's walk of s[0, n), as tokenizers 0.19 makes it: each extended grapheme
 * cluster shorter than 6 bytes whose leading bytes the trie knows is replaced whole, else
 * each character, replaced where the trie knows it; emit(ctx, the part, its bytes, its
 * replacement or NULL) in order */
typedef void (*pc_emit)(void *ctx, const unsigned char *part, size_t n, const char *repl);
static void pc_walk(const rt_precompiled *p, const unsigned char *s, size_t n, pc_emit emit,
                    void *ctx)
{
    for (size_t i = 0; i < n;) {
        size_t e = rt_grapheme_end(s, i, n);
        const char *r = e - i < 6 ? transform(p, s + i, e - i) : NULL;
        if (r) {
            emit(ctx, s + i, e - i, r);
            i = e;
            continue;
        }
        for (size_t len; i < e; i += len) {   /* character by character */
            rt_utf8_at(s, i, n, &len);
            emit(ctx, s + i, len, transform(p, s + i, len));
        }
    }
}

typedef struct {
    char **out;
    size_t *cap, k;
} TextOut;

static void emit_text(void *ctx, const unsigned char *part, size_t n, const char *repl)
{
    TextOut *o = ctx;
    put(o->out, o->cap, &o->k, repl ? repl : (const char *)part, repl ? strlen(repl) : n);
}

void rt_pc_normalize(const rt_precompiled *p, const unsigned char *s, size_t n, char **out,
                     size_t *cap, size_t *out_n)
{
    TextOut o = {out, cap, 0};
    put(out, cap, &o.k, "", 0);
    pc_walk(p, s, n, emit_text, &o);
    *out_n = o.k;
}

typedef struct {
    rt_change **out;
    size_t *cap, k;
} ChangesOut;

static void put_change(ChangesOut *o, uint32_t c)
{
    if (o->k + 1 > *o->cap) {
        *o->cap = 2 * o->k + 64;
        *o->out = realloc(*o->out, *o->cap * sizeof **o->out);
        if (!*o->out)
            abort();
    }
    (*o->out)[o->k++] = (rt_change){c, 0};
}

/* tokenizers' replace() of a part by repl: the replacement's characters (0), then its
 * size against the part's in characters: the last ones new (1), or the last one (or the
 * one before it, for an empty replacement) taking the removal; a part kept, its
 * character (0) */
static void emit_changes(void *ctx, const unsigned char *part, size_t n, const char *repl)
{
    ChangesOut *o = ctx;
    size_t len, old_chars = 0, new_chars = 0;
    if (!repl) {
        put_change(o, rt_utf8_at(part, 0, n, &len));
        return;
    }
    for (size_t i = 0; i < n; i++)
        old_chars += (part[i] & 0xC0) != 0x80;
    const unsigned char *u = (const unsigned char *)repl;
    size_t rn = strlen(repl);
    for (size_t i = 0; i < rn; i += len, new_chars++)
        put_change(o, rt_utf8_at(u, i, rn, &len));
    rt_change *c = *o->out;
    if (new_chars > old_chars)
        for (size_t j = o->k - (new_chars - old_chars); j < o->k; j++)
            c[j].change = 1;
    else if (new_chars < old_chars && o->k > 0)
        c[o->k - 1].change -= (int32_t)(old_chars - new_chars);
}

void rt_pc_changes(const rt_precompiled *p, const unsigned char *s, size_t n, rt_change **out,
                   size_t *cap, size_t *out_n)
{
    ChangesOut o = {out, cap, 0};
    pc_walk(p, s, n, emit_changes, &o);
    *out_n = o.k;
}

/* ---- extended grapheme clusters (UAX #29) ---------------------------------------------- */

extern const uint32_t rt_gcb_ranges[][4];
extern const int rt_gcb_ranges_n;

enum { G_OTHER, G_CR, G_LF, G_CONTROL, G_EXTEND, G_ZWJ, G_RI, G_PREPEND, G_SPACING, G_L, G_V,
       G_T, G_LV, G_LVT };
enum { F_PICT = 1, F_CONSONANT = 2, F_LINKER = 4, F_INCB_EXTEND = 8 };

/* c's class, and its flags in *flags */
static int gcb(uint32_t c, int *flags)
{
    *flags = 0;
    if (c >= 0xAC00 && c <= 0xD7A3)   /* Hangul syllables: LV, or LVT */
        return (c - 0xAC00) % 28 == 0 ? G_LV : G_LVT;
    int lo = 0, hi = rt_gcb_ranges_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < rt_gcb_ranges[mid][0])
            hi = mid - 1;
        else if (c > rt_gcb_ranges[mid][1])
            lo = mid + 1;
        else {
            *flags = (int)rt_gcb_ranges[mid][3];
            return (int)rt_gcb_ranges[mid][2];
        }
    }
    return G_OTHER;
}

/* What the rules that look back further than one character know of the cluster so far */
typedef struct {
    int ri;        /* Regional_Indicators in a row at its end */
    int pict;      /* 1: it ends in ExtPict Extend*, 2: in ExtPict Extend* ZWJ (GB11) */
    int conj;      /* 1: it ends in a Consonant [Extend Linker]*, 2: with a Linker (GB9c) */
} Seen;

static void seen_add(Seen *st, int k, int f)
{
    st->ri = k == G_RI ? st->ri + 1 : 0;
    st->pict = f & F_PICT ? 1 : st->pict == 1 && k == G_EXTEND ? 1 : st->pict == 1 && k == G_ZWJ ? 2 : 0;
    if (f & F_CONSONANT)
        st->conj = 1;
    else if (st->conj && f & F_LINKER)
        st->conj = 2;
    else if (!(st->conj && f & F_INCB_EXTEND))
        st->conj = 0;
}

/* No break between a (what precedes, with st) and b? */
static int joined(int a, int b, int bf, const Seen *st)
{
    if (a == G_CR && b == G_LF)                                        /* GB3 */
        return 1;
    if (a == G_CR || a == G_LF || a == G_CONTROL || b == G_CR || b == G_LF || b == G_CONTROL)
        return 0;                                                      /* GB4, GB5 */
    if ((a == G_L && (b == G_L || b == G_V || b == G_LV || b == G_LVT)) ||          /* GB6 */
        ((a == G_LV || a == G_V) && (b == G_V || b == G_T)) ||                      /* GB7 */
        ((a == G_LVT || a == G_T) && b == G_T))                                     /* GB8 */
        return 1;
    if (b == G_EXTEND || b == G_ZWJ || b == G_SPACING || a == G_PREPEND)  /* GB9, 9a, 9b */
        return 1;
    if (st->conj == 2 && bf & F_CONSONANT)                             /* GB9c */
        return 1;
    if (st->pict == 2 && bf & F_PICT)                                  /* GB11 */
        return 1;
    return a == G_RI && b == G_RI && st->ri % 2 == 1;                  /* GB12, GB13 */
}

size_t rt_grapheme_end(const unsigned char *s, size_t i, size_t n)
{
    size_t len;
    int f, a = gcb(rt_utf8_at(s, i, n, &len), &f);
    Seen st = {0, 0, 0};
    seen_add(&st, a, f);
    for (i += len; i < n; i += len) {
        int bf, b = gcb(rt_utf8_at(s, i, n, &len), &bf);
        if (!joined(a, b, bf, &st))
            break;
        seen_add(&st, b, bf);
        a = b;
    }
    return i;
}
