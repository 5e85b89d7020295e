/* wordpiece.c: BERT's tokenizer, as Hugging Face tokenizers 0.19 computes it (wordpiece.h).
 *
 * BertNormalizer: clean_text drops U+0000, U+FFFD and the characters of \p{C} other than
 * tab, newline and return, and writes each White_Space character as a space;
 * handle_chinese_chars puts a space on either side of each CJK ideograph; strip_accents
 * takes each character's NFD and drops the nonspacing marks (Mn); lowercase maps each
 * character to its lowercase (Python's str.lower of the one character, as Rust's
 * char::to_lowercase: no final sigma). BertPreTokenizer: words end at White_Space (which
 * goes) and each punctuation character (ASCII's, and \p{P}) is a word of its own.
 * WordPiece: a word longer than max_input_chars_per_word characters is unk; else the
 * longest vocabulary entry that starts it, then the longest entry (the prefix, "##",
 * before it) at each place after, and unk for the whole word when a place has none.
 * The Unicode tables are unicode.c's (Python's unicodedata; Hangul syllables decompose
 * by rule). */
#include <stdlib.h>
#include <string.h>
#include "wordpiece.h"

extern const uint32_t rt_uni_other[][2], rt_uni_punct[][2], rt_uni_mn[][2];
extern const int rt_uni_other_n, rt_uni_punct_n, rt_uni_mn_n;
extern const uint32_t rt_uni_lowercase[][3], rt_uni_nfd[][5];
extern const int rt_uni_lowercase_n, rt_uni_nfd_n;

/* A growing array of code points, each with the bytes of the text it came from [from,
 * to): what a push takes from at and at_end (a normalizer's output inherits its input's) */
typedef struct {
    uint32_t *v;
    size_t *from, *to;
    size_t n, cap;
    size_t at, at_end;
} Cps;

static void cps_push(Cps *a, uint32_t c)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = realloc(a->v, a->cap * sizeof *a->v);
        a->from = realloc(a->from, a->cap * sizeof *a->from);
        a->to = realloc(a->to, a->cap * sizeof *a->to);
        if (!a->v || !a->from || !a->to)
            abort();
    }
    a->from[a->n] = a->at, a->to[a->n] = a->at_end;
    a->v[a->n++] = c;
}

static void cps_free(Cps *a)
{
    free(a->v), free(a->from), free(a->to);
}

/* The row of a {cp, ...} table sorted by cp that maps c, or NULL */
static const uint32_t *map_row(const uint32_t *rows, int width, int n, uint32_t c)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        uint32_t k = rows[(size_t)mid * (size_t)width];
        if (c == k)
            return rows + (size_t)mid * (size_t)width;
        if (c < k)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

static int cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* c's NFD without its nonspacing marks, into out */
static void strip_accents(uint32_t c, Cps *out)
{
    if (c >= 0xAC00 && c <= 0xD7A3) {   /* a Hangul syllable: its jamo (none is Mn) */
        uint32_t s = c - 0xAC00;
        cps_push(out, 0x1100 + s / 588);
        cps_push(out, 0x1161 + s % 588 / 28);
        if (s % 28)
            cps_push(out, 0x11A7 + s % 28);
        return;
    }
    const uint32_t *r = map_row(&rt_uni_nfd[0][0], 5, rt_uni_nfd_n, c);
    for (int k = 0; k < (r ? 4 : 1); k++) {
        uint32_t d = r ? r[1 + k] : c;
        if (d && !rt_uni_in(d, rt_uni_mn, rt_uni_mn_n))
            cps_push(out, d);
    }
}

uint32_t rt_uni_tolower(uint32_t c, uint32_t *second)
{
    const uint32_t *r = map_row(&rt_uni_lowercase[0][0], 3, rt_uni_lowercase_n, c);
    *second = r ? r[2] : 0;
    return r ? r[1] : c;
}

static void lowercase(uint32_t c, Cps *out)
{
    uint32_t second;
    cps_push(out, rt_uni_tolower(c, &second));
    if (second)
        cps_push(out, second);
}

/* BertNormalizer's steps over s[0, n), in its order, into out */
static void normalize(const rt_bert_norm *f, const unsigned char *s, size_t n, Cps *out)
{
    Cps a = {0}, b = {0};
    for (size_t i = 0, len; i < n; i += len) {
        uint32_t c = rt_utf8_at(s, i, n, &len);
        if (f->clean_text && (c == 0 || c == 0xFFFD || c == 0xFFFFFFFFu ||
                              (c != '\t' && c != '\n' && c != '\r' &&
                               rt_uni_in(c, rt_uni_other, rt_uni_other_n))))
            continue;
        if (f->clean_text && rt_uni_space(c))
            c = ' ';
        a.at = i, a.at_end = i + len;
        int pad = f->chinese && cjk(c);
        if (pad)
            cps_push(&a, ' ');
        cps_push(&a, c);
        if (pad)
            cps_push(&a, ' ');
    }
    for (size_t i = 0; i < a.n; i++) {
        b.at = a.from[i], b.at_end = a.to[i];
        if (f->strip_accents)
            strip_accents(a.v[i], &b);
        else
            cps_push(&b, a.v[i]);
    }
    for (size_t i = 0; i < b.n; i++) {
        out->at = b.from[i], out->at_end = b.to[i];
        if (f->lowercase)
            lowercase(b.v[i], out);
        else
            cps_push(out, b.v[i]);
    }
    cps_free(&a);
    cps_free(&b);
}

static int punctuation(uint32_t c)
{
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E) || (c > 0x7F && rt_uni_in(c, rt_uni_punct, rt_uni_punct_n));
}

size_t rt_put_utf8(uint32_t c, char *w)
{
    if (c < 0x80)
        return w[0] = (char)c, 1;
    if (c < 0x800)
        return w[0] = (char)(0xC0 | c >> 6), w[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        w[0] = (char)(0xE0 | c >> 12), w[1] = (char)(0x80 | (c >> 6 & 0x3F));
        return w[2] = (char)(0x80 | (c & 0x3F)), 3;
    }
    w[0] = (char)(0xF0 | c >> 18), w[1] = (char)(0x80 | (c >> 12 & 0x3F));
    w[2] = (char)(0x80 | (c >> 6 & 0x3F));
    return w[3] = (char)(0x80 | (c & 0x3F)), 4;
}

/* A span's scratch for its words (wp_scratch sizes it for its longest): a word's UTF-8
 * (w), each character's first byte there (at), and the prefix then a piece (tmp) */
typedef struct {
    char *w, *tmp;
    size_t *at;
} Scratch;

static Scratch wp_scratch(const rt_wordpiece *wp, size_t n)
{
    Scratch s = {malloc(4 * n + 1), malloc(wp->prefix_len + 4 * n + 1),
                 malloc((n + 1) * sizeof *s.at)};
    if (!s.w || !s.tmp || !s.at)
        abort();
    memcpy(s.tmp, wp->prefix, wp->prefix_len);
    return s;
}

/* The bytes of the text code points w[a, b) came from, appended to offs (NULL: none) */
static void piece_span(const Cps *w, size_t a, size_t b, rt_ids *offs)
{
    if (offs) {
        rt_ids_push(offs, (uint32_t)w->from[a]);
        rt_ids_push(offs, (uint32_t)w->to[b - 1]);
    }
}

/* One word, code points cs[w0, w0 + n): its pieces' ids, or unk; with offs, the bytes of
 * the text each stands for (unk: the whole word's) */
static void word_pieces(const rt_wordpiece *wp, Scratch *sc, const Cps *cs, size_t w0, size_t n,
                        rt_ids *out, rt_ids *offs)
{
    const uint32_t *c = cs->v + w0;
    int64_t mark_offs = offs ? offs->n : 0;
    if ((int64_t)n > wp->max_chars) {
        rt_ids_push(out, (uint32_t)wp->unk);
        piece_span(cs, w0, w0 + n, offs);
        return;
    }
    size_t pl = wp->prefix_len, *at = sc->at;
    at[0] = 0;
    for (size_t i = 0; i < n; i++)   /* at[i]: character i's first byte in w */
        at[i + 1] = at[i] + rt_put_utf8(c[i], sc->w + at[i]);
    size_t mark = out->n;
    for (size_t start = 0, end; start < n; start = end) {
        int64_t id = -1;
        for (end = n; end > start && id < 0; end -= id < 0) {
            size_t len = at[end] - at[start];
            if (start == 0) {
                id = wp->lookup(wp->ctx, sc->w, len);
            } else {
                memcpy(sc->tmp + pl, sc->w + at[start], len);
                id = wp->lookup(wp->ctx, sc->tmp, pl + len);
            }
        }
        if (id < 0) {   /* no piece starts here: the whole word is unk */
            out->n = mark;
            rt_ids_push(out, (uint32_t)wp->unk);
            if (offs)
                offs->n = mark_offs;
            piece_span(cs, w0, w0 + n, offs);
            break;
        }
        rt_ids_push(out, (uint32_t)id);
        piece_span(cs, w0 + start, w0 + end, offs);
    }
}

void rt_wp_encode(const rt_bert_norm *norm, const rt_wordpiece *wp, const unsigned char *s,
                  size_t n, rt_ids *out, rt_ids *offs)
{
    Cps cs = {0};
    if (norm)
        normalize(norm, s, n, &cs);
    else
        for (size_t i = 0, len; i < n; i += len) {
            uint32_t c = rt_utf8_at(s, i, n, &len);
            cs.at = i, cs.at_end = i + len;
            cps_push(&cs, c == 0xFFFFFFFFu ? 0xFFFD : c);
        }
    Scratch sc = wp_scratch(wp, cs.n < (size_t)wp->max_chars ? cs.n : (size_t)wp->max_chars);
    size_t w = 0;   /* the current word's first code point */
    for (size_t i = 0; i <= cs.n; i++) {
        uint32_t c = i < cs.n ? cs.v[i] : ' ';
        int space = rt_uni_space(c), punct = !space && punctuation(c);
        if (!space && !punct)
            continue;
        if (i > w)
            word_pieces(wp, &sc, &cs, w, i - w, out, offs);
        if (punct)
            word_pieces(wp, &sc, &cs, i, 1, out, offs);
        w = i + 1;
    }
    free(sc.w), free(sc.tmp), free(sc.at);
    cps_free(&cs);
}
