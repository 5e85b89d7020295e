/* util.c: the compiler's error tiers and allocation helpers. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "trainc.h"

void error_at(const char *file, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: %s: ", file, path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(RT_EXIT_INPUT);
}

void error_input(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("trainc: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(RT_EXIT_INPUT);
}

void die_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: internal error: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        die("out of memory");
    return p;
}

char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        die("out of memory");
    return p;
}

void add_words(char **args, int *na, int max, const char *s)
{
    char *copy = s ? xstrdup(s) : NULL;
    for (char *w = copy ? strtok(copy, " \t") : NULL; w && *na < max; w = strtok(NULL, " \t"))
        args[(*na)++] = w;
}

/* The same file spelled one way: "./specs//a.json" and "specs/./a.json" are both
 * "specs/a.json". Only "." and empty components go; ".." stays, since "x/.." is not
 * the folder above x when x is a symbolic link. */
char *path_tidy(const char *path)
{
    size_t n = strlen(path);
    char *out = xcalloc(1, n + 2), *o = out;
    if (path[0] == '/')
        *o++ = '/';
    for (const char *p = path; *p;) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len && !(len == 1 && p[0] == '.')) {
            if (o > out && o[-1] != '/')
                *o++ = '/';
            memcpy(o, p, len);
            o += len;
        }
        p += len + (end != NULL);
    }
    if (o == out)
        *o++ = '.';
    *o = 0;
    return out;
}

/* The one spelling of an existing file that emit writes, so that the same file gives
 * the same bytes however it was named: links, "." and ".." resolved (realpath), then
 * relative to the current folder when the file lies under it, else absolute. A path
 * that does not resolve is only tidied. */
char *path_canonical(const char *path)
{
    char *real = realpath(path, NULL);
    if (!real)
        return path_tidy(path);
    char *cwd = realpath(".", NULL);
    size_t n = cwd ? strlen(cwd) : 0;
    char *out = cwd && n > 1 && strncmp(real, cwd, n) == 0 && real[n] == '/'
        ? xstrdup(real + n + 1) : xstrdup(real);
    free(cwd);
    free(real);
    return out;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = xcalloc(1, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}
