/* align.c: a normalized text with the alignments tokenizers' NormalizedString keeps (each
 * byte's span in the original text), through the changes its normalizers make
 * (transform_range), so that a token's offsets are those `tokenizers` gives: the first
 * byte's start to the last byte's end (convert_offsets). Unigram's offsets (tokenizer.c)
 * use it. */
#include <stdlib.h>
#include <string.h>
#include "unigram.h"
#include "wordpiece.h"

static void *grow(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        abort();
    return p;
}

static void reserve(rt_altext *x, size_t n)
{
    if (n <= x->cap && x->s)
        return;
    x->cap = 2 * n + 64;
    x->s = grow(x->s, x->cap);
    x->al = grow(x->al, x->cap * sizeof *x->al);
}

void rt_at_set(rt_altext *x, const unsigned char *s, size_t n, size_t base)
{
    reserve(x, n);
    memcpy(x->s, s, n);
    x->n = n;
    for (size_t i = 0, len; i < n; i += len) {
        rt_utf8_at(s, i, n, &len);
        for (size_t j = i; j < i + len && j < n; j++)
            x->al[j] = (rt_span){(uint32_t)(base + i), (uint32_t)(base + i + len)};
    }
}

void rt_at_put(rt_altext *x, const unsigned char *s, size_t n, rt_span al)
{
    reserve(x, x->n + n);
    memcpy(x->s + x->n, s, n);
    for (size_t j = 0; j < n; j++)
        x->al[x->n + j] = al;
    x->n += n;
}

void rt_at_slice(rt_altext *x, size_t from, size_t to)
{
    memmove(x->s, x->s + from, to - from);
    memmove(x->al, x->al + from, (to - from) * sizeof *x->al);
    x->n = to - from;
}

/* the byte length of the character at s[i], 0 at the end */
static size_t char_len(const rt_altext *x, size_t i)
{
    size_t len = 0;
    if (i < x->n)
        rt_utf8_at(x->s, i, x->n, &len);
    return len;
}

static size_t put_utf8(unsigned char *o, uint32_t c)
{
    if (c < 0x80)
        return o[0] = (unsigned char)c, 1;
    if (c < 0x800)
        return o[0] = (unsigned char)(0xC0 | c >> 6), o[1] = (unsigned char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | c >> 12);
        o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | c >> 18);
    o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

void rt_at_transform(rt_altext *x, const rt_change *d, size_t nd, size_t removed)
{
    rt_altext y = {0};
    reserve(&y, 4 * nd);
    size_t at = 0;   /* the old text's next character: transform_range's offset */
    for (size_t k = 0; k < removed; k++)
        at += char_len(x, at);
    for (size_t k = 0; k < nd; k++) {
        rt_span al = {0, 0};
        if (d[k].change > 0)
            al = at >= 1 ? x->al[at - 1] : al;   /* new: the byte before's */
        else if (at < x->n)
            al = x->al[at];
        if (d[k].change <= 0)
            at += char_len(x, at);   /* the character it replaces */
        for (int32_t r = 0; r < -d[k].change; r++)
            at += char_len(x, at);   /* and those it removes */
        size_t len = put_utf8(y.s + y.n, d[k].c);
        for (size_t j = 0; j < len; j++)
            y.al[y.n + j] = al;
        y.n += len;
    }
    rt_at_free(x);
    *x = y;
}

void rt_at_free(rt_altext *x)
{
    free(x->s);
    free(x->al);
    *x = (rt_altext){0};
}
