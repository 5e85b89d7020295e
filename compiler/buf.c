/* buf.c: the text buffer every part of the compiler prints into (Buf: grown as
 * needed, always NUL-terminated), and the helpers that lay out generated C: statements
 * broken within WRAP_COLS columns, comments filled, strings as C literals. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "trainc.h"
#include "buf.h"

void buf_puts(Buf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2 + 256;
        b->s = realloc(b->s, b->cap);
        if (!b->s)
            die("out of memory");
    }
    memcpy(b->s + b->len, s, n + 1);
    b->len += n;
}

void buf_printf(Buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xcalloc(1, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf_puts(b, s);
    free(s);
}

/* Generated lines stay within this many columns where a statement can be broken. */
#define WRAP_COLS 100

/* The end of the token at s: a string or character literal, a comment, or one char. */
static const char *token_end(const char *s)
{
    if (*s == '"' || *s == '\'') {
        char q = *s++;
        while (*s && *s != q)
            s += s[0] == '\\' && s[1] ? 2 : 1;
        return *s ? s + 1 : s;
    }
    if (s[0] == '/' && s[1] == '*') {
        const char *e = strstr(s + 2, "*/");
        return e ? e + 2 : s + strlen(s);
    }
    return s + 1;
}

/* Prints a string literal's text [q, end) from column *cur on: cut after spaces into
 * adjacent literals, a line each, the next lines from column col, leaving room for
 * `tail` more characters after the last. */
static void wrapped_literal(Buf *b, const char *q, const char *end, size_t *cur, size_t col,
                            size_t tail)
{
    for (;;) {
        size_t room = WRAP_COLS > *cur + 2 + tail ? WRAP_COLS - *cur - 2 - tail : 1;
        const char *cut = end, *c = q;
        if ((size_t)(end - q) > room) {
            cut = NULL;
            for (; c < end && (!cut || (size_t)(c - q) < room); c += c[0] == '\\' ? 2 : 1)
                if (*c == ' ' && (!cut || (size_t)(c + 1 - q) <= room))
                    cut = c + 1;
            if (!cut || cut >= end)
                cut = end;
        }
        buf_printf(b, "\"%.*s\"", (int)(cut - q), q);
        *cur += (size_t)(cut - q) + 2;
        q = cut;
        if (q >= end)
            return;
        buf_printf(b, "\n%*s", (int)col, "");
        *cur = col;
    }
}

/* Prints INDENT STMT and a newline. A statement longer than WRAP_COLS is broken after
 * the commas inside its parentheses (and braces), filling each line, the continuation
 * lines lined up under the first argument (or 8 columns in when that is far); a string
 * literal that still does not fit is cut after spaces into adjacent literals. */
void buf_wrapped(Buf *b, const char *indent, const char *stmt)
{
    size_t ind = strlen(indent);
    const char *open = NULL;
    for (const char *t = stmt; *t && !open; t = token_end(t))
        if (*t == '(')
            open = t;
    if (ind + strlen(stmt) <= WRAP_COLS || !open) {
        buf_printf(b, "%s%s\n", indent, stmt);
        return;
    }
    size_t col = ind + (size_t)(open - stmt) + 1;
    if (col > 60)
        col = ind + 8;
    buf_printf(b, "%s%.*s", indent, (int)(open - stmt + 1), stmt);
    size_t cur = ind + (size_t)(open - stmt) + 1;
    int fresh = 1, depth = 1;   /* fresh: nothing yet after the indentation or the '(' */
    const char *p = open + 1;
    while (*p) {
        while (*p == ' ')
            p++;
        const char *e = p;   /* the piece: up to and with the next comma inside, or the rest */
        while (*e) {
            char c = *e;
            e = token_end(e);
            depth += (c == '(' || c == '{' || c == '[') - (c == ')' || c == '}' || c == ']');
            if (c == ',' && depth >= 1)
                break;
        }
        size_t len = (size_t)(e - p);
        int literal = *p == '"';
        if (!fresh && cur + 1 + len > WRAP_COLS && !(literal && cur + 24 < WRAP_COLS)) {
            buf_printf(b, "\n%*s", (int)col, "");
            cur = col;
            fresh = 1;
        }
        if (!fresh) {
            buf_puts(b, " ");
            cur++;
        }
        if (literal && cur + len > WRAP_COLS) {
            const char *lit = token_end(p);
            wrapped_literal(b, p + 1, lit - 1, &cur, col, (size_t)(e - lit));
            buf_printf(b, "%.*s", (int)(e - lit), lit);
            cur += (size_t)(e - lit);
        } else {
            buf_printf(b, "%.*s", (int)len, p);
            cur += len;
        }
        fresh = 0;
        p = e;
    }
    buf_puts(b, "\n");
}

/* Prints TEXT's words, each after a space, from column `cur` on; a word that would
 * pass WRAP_COLS (the last with `last` more columns after it) starts a new line that
 * begins with `cont` instead. */
void buf_words(Buf *b, size_t cur, const char *cont, const char *text, size_t last)
{
    size_t start = cur;
    for (const char *w = text; *w;) {
        while (*w == ' ')
            w++;
        size_t n = strcspn(w, " ");
        if (!n)
            break;
        int end = !w[n + strspn(w + n, " ")];
        if (cur + 1 + n + (end ? last : 0) > WRAP_COLS && cur > start) {
            buf_printf(b, "\n%s", cont);
            cur = strlen(cont);
            start = cur;
        }
        buf_printf(b, " %.*s", (int)n, w);
        cur += 1 + n;
        w += n;
    }
}

/* Prints INDENT, then TEXT as a comment filled within WRAP_COLS, continuation lines
 * INDENT " *". */
void buf_comment(Buf *b, const char *indent, const char *text)
{
    char *cont = xasprintf("%s *", indent);
    buf_printf(b, "%s/*", indent);
    buf_words(b, strlen(indent) + 2, cont, text, 3);
    buf_puts(b, " */\n");
    free(cont);
}

/* INDENT CODE and a comment after it on the line, or, when that would pass WRAP_COLS,
 * the comment on the lines before and CODE broken as buf_wrapped does. */
void buf_commented(Buf *b, const char *indent, const char *code, const char *comment)
{
    if (strlen(indent) + strlen(code) + strlen(comment) + 7 <= WRAP_COLS) {
        buf_printf(b, "%s%s /* %s */\n", indent, code, comment);
        return;
    }
    buf_comment(b, indent, comment);
    buf_wrapped(b, indent, code);
}

/* s as a C string literal, quotes included (also what -D and libtcc's defines take). */
void c_string(Buf *b, const char *s)
{
    buf_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 32 || c >= 127)
            buf_printf(b, "\\%03o", c);
        else
            buf_printf(b, "%c", c);
    }
    buf_puts(b, "\"");
}
