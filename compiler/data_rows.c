/* data_rows.c: what the data commands that write .npy rows share (data_sft.c,
 * data_classify.c): a JSON-lines file's examples counted, read an object a line and its
 * errors named by line,
 * and arrays of i32 rows streamed to NAME.part files (data_stage) whose .npy headers
 * are written once the rows are counted. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"

#define NPY_HEADER 128     /* bytes: room for any [N, T] header, rewritten with N at the end */

void data_line_error(const char *file, int64_t ln, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%" PRId64 ": error: ", file, ln);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(RT_EXIT_INPUT);
}

double data_val_frac(const char *cmd, const char *v)
{
    char *end;
    double f = strtod(v, &end);
    if (!*v || *end || !(f >= 0 && f <= 0.5))
        error_input("data %s: --val-frac must be a number in [0, 0.5], got '%s'", cmd, v);
    return f;
}

double data_number_arg(const char *cmd, const char *flag, const char *v, double lo, double hi)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= lo && x <= hi))
        error_input("data %s: %s must be a number in [%g, %g], got '%s'", cmd, flag, lo, hi, v);
    return x;
}

int64_t data_count_arg(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= (double)lo && x <= (double)hi) || x != floor(x))
        error_input("data %s: %s must be a whole number in [%lld, %lld], got '%s'", cmd, flag,
                    (long long)lo, (long long)hi, v);
    return (int64_t)x;
}

int64_t data_char_byte(const char *s, int64_t n, int64_t k)
{
    for (int64_t i = 0, ch = 0; i <= n; i++)
        if (i == n || ((unsigned char)s[i] & 0xC0) != 0x80) {
            if (ch == k)
                return i;
            ch++;
        }
    return -1;
}

void data_positional(const char *cmd, const char *usage, const char *s, const char **file,
                     const char **dir)
{
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
        printf("%s\n", usage);
        exit(0);
    }
    if (s[0] == '-' && s[1])
        error_input("data %s: unknown option '%s'\n%s", cmd, s, usage);
    if (*file && *dir)
        error_input("data %s: unexpected argument '%s'\n%s", cmd, s, usage);
    *(*file ? dir : file) = s;
}

int64_t data_count_lines(const char *file, const char *form)
{
    FILE *f = fopen(file, "r");
    if (!f)
        error_input("%s: cannot open: %s", file, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int64_t n = 0;
    while (getline(&line, &cap, f) >= 0)
        n += line[strspn(line, " \t\r\n")] != 0;
    free(line);
    fclose(f);
    if (n == 0)
        error_input("%s: no examples (one JSON object a line: %s)", file, form);
    return n;
}

void data_lines_open(DataLines *r, const char *file, const char *form)
{
    *r = (DataLines){.file = file, .form = form, .f = fopen(file, "r")};
    if (!r->f)
        error_input("%s: cannot open: %s", file, strerror(errno));
}

cJSON *data_lines_next(DataLines *r)
{
    while (getline(&r->line, &r->cap, r->f) >= 0) {
        r->ln++;
        if (!r->line[strspn(r->line, " \t\r\n")])
            continue;
        cJSON *o = cJSON_Parse(r->line);
        if (!cJSON_IsObject(o))
            data_line_error(r->file, r->ln, "not a JSON object (each line is %s)", r->form);
        return o;
    }
    return NULL;
}

void data_lines_close(DataLines *r)
{
    fclose(r->f);
    free(r->line);
}

void data_rows_open(DataRows *o, const char *dir, const char *name, int n,
                    const char *const *keys, const int64_t *widths)
{
    o->name = name;
    o->n = n;
    o->rows = 0;
    for (int k = 0; k < n; k++) {
        char *final = xasprintf("%s/%s_%s.npy", dir, name, keys[k]);
        o->path[k] = xstrdup(data_stage(final));
        free(final);
        o->width[k] = widths[k];
        o->f[k] = fopen(o->path[k], "wb");
        if (!o->f[k])
            error_input("%s: cannot create: %s", o->path[k], strerror(errno));
        char zero[NPY_HEADER] = {0};
        if (fwrite(zero, 1, NPY_HEADER, o->f[k]) != NPY_HEADER)
            error_input("%s: cannot write: %s", o->path[k], strerror(errno));
    }
}

void data_rows_put(DataRows *o, const int32_t *const *rows)
{
    for (int k = 0; k < o->n; k++) {
        size_t w = (size_t)(o->width[k] ? o->width[k] : 1);
        if (fwrite(rows[k], sizeof(int32_t), w, o->f[k]) != w)
            error_input("%s: cannot write: %s", o->path[k], strerror(errno));
    }
    o->rows++;
}

/* The .npy v1.0 header of an i32 array [rows, width] ([rows]: width 0), NPY_HEADER bytes */
static void npy_header(char *h, int64_t rows, int64_t width)
{
    memset(h, ' ', NPY_HEADER);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = NPY_HEADER - 10, h[9] = 0;
    int n = width ? snprintf(h + 10, NPY_HEADER - 10, "{'descr': '<i4', 'fortran_order': False, "
                             "'shape': (%" PRId64 ", %" PRId64 "), }", rows, width)
                  : snprintf(h + 10, NPY_HEADER - 10, "{'descr': '<i4', 'fortran_order': False, "
                             "'shape': (%" PRId64 ",), }", rows);
    h[10 + n] = ' ';
    h[NPY_HEADER - 1] = '\n';
}

void data_rows_close(DataRows *o)
{
    for (int k = 0; k < o->n; k++) {
        char h[NPY_HEADER];
        npy_header(h, o->rows, o->width[k]);
        FILE *f = o->f[k];
        if (fseek(f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, f) != sizeof h || fflush(f) != 0 ||
            fsync(fileno(f)) != 0 || fclose(f) != 0)
            error_input("%s: cannot write: %s", o->path[k], strerror(errno));
    }
}
