/* spec_json.c: reads a spec file as JSON, strictly: whole (at most 64 MiB), UTF-8,
 * RFC 8259 (what cJSON takes beyond it refused), one value; every error as
 * FILE:LINE:COL with what is wrong there (spec.c then checks the keys and values). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "trainc.h"


char *spec_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        error_input("cannot read %s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = xcalloc(1, cap + 1);
    for (;;) {
        size_t got_n = fread(buf + n, 1, cap - n, f);
        n += got_n;
        if (n < cap) {
            if (ferror(f))
                error_input("cannot read %s: %s", path, strerror(errno));
            break;
        }
        /* a spec is a few KB (a model of 100k layers: a few MB); past 64 MiB it is not
         * one (a device such as /dev/zero would be read until memory ran out) */
        if (cap >= (size_t)64 << 20)
            error_input("%s: more than 64 MiB: not a spec file", path);
        char *bigger = xcalloc(1, 2 * cap + 1);
        memcpy(bigger, buf, n);
        free(buf);
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

static _Noreturn void syntax_error(const char *file, const char *text, size_t off,
                                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static _Noreturn void syntax_error(const char *file, const char *text, size_t off,
                                   const char *fmt, ...)
{
    /* the column counts characters (UTF-8 code points, the bytes before off being
     * well-formed), not bytes: "é" is one column */
    int line = 1;
    size_t col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)text[i] & 0xc0) != 0x80)
            col++;
    }
    fprintf(stderr, "%s:%d:%zu: error: ", file, line, col);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(RT_EXIT_INPUT);
}

/* Up to 16 characters from off, stopping at a line end: what the error is near. */
static const char *near_text(const char *text, size_t off, char *buf)
{
    size_t n = 0;
    while (n < 16 && text[off + n] && text[off + n] != '\n' && text[off + n] != '\r') {
        unsigned char ch = (unsigned char)text[off + n];
        buf[n] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
        n++;
    }
    buf[n] = 0;
    return buf;
}

/* cJSON reports only where it stopped; this turns that into a place and a reason. */
static _Noreturn void json_error(const char *file, const char *text, size_t len, size_t off)
{
    char near[20];
    size_t end = len;    /* just after the last non-blank character */
    while (end > 0 && isspace((unsigned char)text[end - 1]))
        end--;
    if (len == 0)
        syntax_error(file, text, 0, "unexpected end of file (the file is empty)");
    if (end == 0)
        syntax_error(file, text, len, "unexpected end of file (the file holds only white "
                     "space)");
    /* cJSON reports a failed object key one character late (parse_string starts past
     * the quote it expected): step back when a key was due */
    if (off > 0 && off <= len && text[off - 1] != '"' && !isspace((unsigned char)text[off - 1])) {
        size_t q = off - 1;
        while (q > 0 && isspace((unsigned char)text[q - 1]))
            q--;
        if (q > 0 && (text[q - 1] == '{' || text[q - 1] == ','))
            off--;
    }
    /* nesting and strings at the end tell a truncated file from a bad character */
    int depth = 0, in_str = 0, esc = 0, depth_at_off = 0;
    size_t str_start = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (i == off)
            depth_at_off = depth;
        if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
            str_start = i;
        } else if (ch == '{' || ch == '[')
            depth++;
        else if (ch == '}' || ch == ']')
            depth--;
    }
    if (depth_at_off >= CJSON_NESTING_LIMIT)
        syntax_error(file, text, off, "JSON nested deeper than %d levels", CJSON_NESTING_LIMIT);
    if (in_str && off <= str_start + 1)
        syntax_error(file, text, str_start, "unterminated string");
    if (off >= end) {
        if (depth > 0 || in_str)
            syntax_error(file, text, len, "unexpected end of file");
        off = end - 1;
    }
    syntax_error(file, text, off, "invalid JSON near '%s'", near_text(text, off, near));
}

/* Offset of the first byte of text[0, len) that does not belong to well-formed UTF-8
 * (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), or len. */
static size_t utf8_bad(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 0;
        if (n == 0 || i + n >= len)   /* not a lead byte, or cut short by the end */
            return i;
        unsigned cp = c & (0x3fu >> n);
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const unsigned least[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += n + 1;
    }
    return len;
}

/* What cJSON takes and RFC 8259 does not, in a text cJSON parsed whole: a number
 * with a leading zero (064), a bare point (64., .5) or a bare exponent (1e), a '+'
 * sign, a control character inside a string (a raw line break), an unknown escape.
 * Another JSON reader would refuse the file or read it otherwise. */
static void strict_json(const char *file, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '"') {
            for (i++; i < len && text[i] != '"'; i++) {
                unsigned char c = (unsigned char)text[i];
                if (c < 0x20)
                    syntax_error(file, text, i, "a control character (0x%02x) inside a string; "
                                 "write it as an escape (\\n, \\t) or leave it out", c);
                if (c != '\\')
                    continue;
                c = (unsigned char)text[++i];
                if (c == 'u') {
                    for (int k = 1; k <= 4; k++)
                        if (!isxdigit((unsigned char)text[i + k]))
                            syntax_error(file, text, i - 1, "\\u takes 4 hex digits");
                    /* C strings end at a NUL: "mlp\u0000x" would be read as "mlp" */
                    if (!strncmp(text + i + 1, "0000", 4))
                        syntax_error(file, text, i - 1, "\\u0000 (a NUL character) in a string");
                    i += 4;
                } else if (!strchr("\"\\/bfnrt", c) || !c)
                    syntax_error(file, text, i - 1, "unknown escape '\\%c' in a string", c);
            }
        } else if (ch == '-' || ch == '+' || ch == '.' || isdigit((unsigned char)ch)) {
            size_t j = i, start = i;
            int ok = 1;
            if (text[j] == '+')
                ok = 0;
            if (text[j] == '-' || text[j] == '+')
                j++;
            if (text[j] == '0')
                j++;
            else if (isdigit((unsigned char)text[j]))
                while (isdigit((unsigned char)text[j]))
                    j++;
            else
                ok = 0;
            if (isdigit((unsigned char)text[j]))
                ok = 0;                      /* 064 */
            if (text[j] == '.') {
                j++;
                if (!isdigit((unsigned char)text[j]))
                    ok = 0;                  /* 64. */
                while (isdigit((unsigned char)text[j]))
                    j++;
            }
            if (text[j] == 'e' || text[j] == 'E') {
                j++;
                if (text[j] == '+' || text[j] == '-')
                    j++;
                if (!isdigit((unsigned char)text[j]))
                    ok = 0;                  /* 1e */
                while (isdigit((unsigned char)text[j]))
                    j++;
            }
            size_t e = start;
            while (e < len && strchr("+-.0123456789eE", text[e]))
                e++;
            if (!ok || e != j)
                syntax_error(file, text, start, "'%.*s' is not a JSON number (no leading zeros, "
                             "a digit on both sides of the point, no '+' sign)",
                             (int)(e - start < 40 ? e - start : 40), text + start);
            i = e - 1;
        }
    }
}

cJSON *spec_parse_json(const char *file, const char *text, size_t len)
{
    const char *nul = memchr(text, 0, len);
    if (nul)
        syntax_error(file, text, (size_t)(nul - text), "NUL byte in file");
    size_t bad = utf8_bad(text, len);
    if (bad < len)
        syntax_error(file, text, bad, "not valid UTF-8 (byte 0x%02x); specs are UTF-8 text",
                     (unsigned char)text[bad]);
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithOpts(text, &end, 0);
    if (!doc)
        json_error(file, text, len, end && end >= text ? (size_t)(end - text) : 0);
    const char *p = end;
    while (*p && isspace((unsigned char)*p))
        p++;
    if (*p) {
        char near[20];
        syntax_error(file, text, (size_t)(p - text),
                     "unexpected text after the end of the JSON value: '%s'",
                     near_text(text, (size_t)(p - text), near));
    }
    strict_json(file, text, len);
    return doc;
}

