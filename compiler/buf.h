/* buf.h: the text buffer (buf.c) the compiler prints generated code, messages and
 * names into. */
#ifndef BUF_H
#define BUF_H

#include <stddef.h>

typedef struct Buf {
    char *s;                 /* NUL-terminated; NULL until the first print */
    size_t len, cap;
} Buf;
void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_puts(Buf *b, const char *s);
/* s as a C string literal, quotes included */
void c_string(Buf *b, const char *s);
/* INDENT STMT and a newline, a long statement broken after commas within 100 columns */
void buf_wrapped(Buf *b, const char *indent, const char *stmt);
/* TEXT's words from column cur on, lines past 100 columns continued with `cont` */
void buf_words(Buf *b, size_t cur, const char *cont, const char *text, size_t last);
/* TEXT as a filled comment at INDENT */
void buf_comment(Buf *b, const char *indent, const char *text);
/* INDENT CODE with a comment after it, or the comment on the lines before */
void buf_commented(Buf *b, const char *indent, const char *code, const char *comment);

#endif
