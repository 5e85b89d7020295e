/* data_sft.c: `trainc data sft FILE.jsonl DIR --tokenizer TOK.json --seq-len T
 * [--val-frac F] [--eos TOKEN]`: supervised fine-tuning examples, one JSON object a line
 * with a "prompt" and a "completion" string (TRL's prompt-completion form), as .npy
 * arrays a language model trains on with the loss's ignore_index -100:
 *   DIR/train_x.npy [N, T] i32   the ids of prompt + completion (+ TOKEN), then padding
 *   DIR/train_y.npy [N, T] i32   the same shifted by one; -100 where the id predicted is
 *                                the prompt's or padding (only the completion is learned)
 * and DIR/val_x.npy, val_y.npy from the last F of the examples (0.1; none with 0).
 *
 * The ids are those of Tokenizer.encode(prompt + completion).ids (runtime/tokenizer.c),
 * the prompt's the first len(encode(prompt).ids) of them, as TRL masks them; --eos
 * appends TOKEN's id (an added token's content, say "<|eot_id|>") after each
 * completion, and pads with it (padding is 0 without). An example longer than T + 1
 * ids is cut there; one whose completion starts past that is left out. Both counted.
 * The file is read twice (the examples counted, then encoded), the rows streamed to
 * NAME.part files that become NAME once all are complete: memory holds one example. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"
#include "../runtime/tokenizer.h"

#define SFT_IGNORE (-100)
#define NPY_HEADER 128     /* bytes: room for any [N, T] header, rewritten with N at the end */

static const char sft_usage[] =
    "usage: trainc data sft FILE.jsonl DIR --tokenizer TOK.json --seq-len T [--val-frac F] "
    "[--eos TOKEN]";

typedef struct {
    const char *file, *dir, *tok, *eos;
    int64_t T;
    double val_frac;
} SftArgs;

/* One output pair (x, y), streamed: rows appended, the header written at the end. */
typedef struct {
    const char *name;          /* "train" or "val" */
    char *path[2];             /* the .part files */
    FILE *f[2];
    int64_t rows;
} SftOut;

static int64_t parse_positive(const char *opt, const char *v, int64_t max)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < 1 || n > max)
        error_input("data sft: %s must be an integer in [1, %" PRId64 "], got '%s'", opt, max, v);
    return n;
}

static void parse_args(int argc, char **argv, SftArgs *a)
{
    *a = (SftArgs){.val_frac = 0.1};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--tokenizer"))
            a->tok = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--seq-len"))
            a->T = parse_positive(s, opt_value(argc, argv, &i, s), 1 << 20);
        else if (!strcmp(s, "--eos"))
            a->eos = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac")) {
            const char *v = opt_value(argc, argv, &i, s);
            char *end;
            a->val_frac = strtod(v, &end);
            if (!*v || *end || !(a->val_frac >= 0 && a->val_frac <= 0.5))
                error_input("data sft: --val-frac must be a number in [0, 0.5], got '%s'", v);
        } else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            printf("%s\n", sft_usage);
            exit(0);
        } else if (s[0] == '-' && s[1])
            error_input("data sft: unknown option '%s'\n%s", s, sft_usage);
        else if (!a->file)
            a->file = s;
        else if (!a->dir)
            a->dir = s;
        else
            error_input("data sft: unexpected argument '%s'\n%s", s, sft_usage);
    }
    if (!a->file || !a->dir)
        error_input("data sft: missing the %s\n%s", a->file ? "output folder" : "input file",
                    sft_usage);
    if (!a->tok)
        error_input("data sft: --tokenizer TOK.json is required (the model's tokenizer)\n%s",
                    sft_usage);
    if (!a->T)
        error_input("data sft: --seq-len T is required (the model's input length)\n%s",
                    sft_usage);
}

/* FILE:LINE: error: MESSAGE, exit 1 (the .part files are removed at exit). */
static _Noreturn __attribute__((format(printf, 3, 4))) void
line_error(const char *file, int64_t ln, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%" PRId64 ": error: ", file, ln);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(RT_EXIT_INPUT);
}

/* The examples of FILE: its lines that are not blank. */
static int64_t count_examples(const char *file)
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
        error_input("%s: no examples (one JSON object a line: {\"prompt\": ..., "
                    "\"completion\": ...})", file);
    return n;
}

/* Line `ln`'s value of key, a string. */
static const char *field(const cJSON *o, const char *key, const char *file, int64_t ln)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        line_error(file, ln, "missing key '%s' (each line is {\"prompt\": ..., "
                   "\"completion\": ...})", key);
    if (!cJSON_IsString(v))
        line_error(file, ln, "'%s' must be a string", key);
    return v->valuestring;
}

/* A text the tokenizer encodes as it is (no NFC change: tokenizer.h), or exit 1. */
static void check_normal(rt_tokenizer *t, const char *s, const char *file, int64_t ln)
{
    uint32_t cp;
    size_t n = strlen(s);
    if (rt_tok_unnormalized(t, s, n, &cp) < n)
        line_error(file, ln, "U+%04X, which the tokenizer's NFC normalizer may change "
                   "(normalize the file first: Python's unicodedata.normalize('NFC', s))", cp);
}

static void out_open(SftOut *o, const char *dir, const char *name)
{
    static const char *const xy[2] = {"x", "y"};
    o->name = name;
    for (int k = 0; k < 2; k++) {
        char *final = xasprintf("%s/%s_%s.npy", dir, name, xy[k]);
        o->path[k] = xstrdup(data_stage(final));
        free(final);
        o->f[k] = fopen(o->path[k], "wb");
        if (!o->f[k])
            error_input("%s: cannot create: %s", o->path[k], strerror(errno));
        char zero[NPY_HEADER] = {0};
        if (fwrite(zero, 1, NPY_HEADER, o->f[k]) != NPY_HEADER)
            error_input("%s: cannot write: %s", o->path[k], strerror(errno));
    }
}

/* The .npy v1.0 header of an [rows, T] i32 array, NPY_HEADER bytes, then the file closed. */
static void out_close(SftOut *o, int64_t T)
{
    for (int k = 0; k < 2; k++) {
        char h[NPY_HEADER];
        memset(h, ' ', sizeof h);
        memcpy(h, "\x93NUMPY\x01\x00", 8);
        h[8] = NPY_HEADER - 10, h[9] = 0;
        int n = snprintf(h + 10, NPY_HEADER - 10, "{'descr': '<i4', 'fortran_order': False, "
                         "'shape': (%" PRId64 ", %" PRId64 "), }", o->rows, T);
        h[10 + n] = ' ';
        h[NPY_HEADER - 1] = '\n';
        FILE *f = o->f[k];
        if (fseek(f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, f) != sizeof h || fflush(f) != 0 ||
            fsync(fileno(f)) != 0 || fclose(f) != 0)
            error_input("%s: cannot write: %s", o->path[k], strerror(errno));
    }
}

static void out_row(SftOut *o, const int32_t *x, const int32_t *y, int64_t T)
{
    for (int k = 0; k < 2; k++)
        if (fwrite(k ? y : x, sizeof(int32_t), (size_t)T, o->f[k]) != (size_t)T)
            error_input("%s: cannot write: %s", o->path[k], strerror(errno));
    o->rows++;
}

/* The id of the one token `s` encodes to (--eos), or exit 1. */
static int32_t eos_id(rt_tokenizer *t, const char *s)
{
    rt_ids ids = {0};
    rt_tok_encode_part(t, s, strlen(s), &ids);
    if (ids.n != 1)
        error_input("data sft: --eos '%s' is %" PRId64 " tokens, not one (give an added token's "
                    "content as tokenizer.json lists it, e.g. \"<|eot_id|>\")", s, ids.n);
    int32_t id = (int32_t)ids.v[0];
    rt_ids_free(&ids);
    return id;
}

typedef struct {
    int64_t cut, dropped, tokens;
} SftCounts;

/* One example's row: x the first T ids, y the next T with the prompt's and the
 * padding's -100. Returns 0 (nothing written) when no completion id is within it. */
static int example_row(const uint32_t *ids, int64_t n, int64_t n_prompt, int64_t T, int32_t pad,
                       int32_t *x, int32_t *y)
{
    int any = 0;
    for (int64_t i = 0; i < T; i++) {
        x[i] = i < n ? (int32_t)ids[i] : pad;
        int learned = i + 1 < n && i + 1 >= n_prompt;
        y[i] = learned ? (int32_t)ids[i + 1] : SFT_IGNORE;
        any |= learned;
    }
    return any;
}

/* Encodes each example into train's rows, the last n_val into val's. */
static void encode_examples(const SftArgs *a, rt_tokenizer *t, int64_t n, int64_t n_val,
                            SftOut *tr, SftOut *va, SftCounts *c)
{
    FILE *f = fopen(a->file, "r");
    if (!f)
        error_input("%s: cannot open: %s", a->file, strerror(errno));
    int32_t eos = a->eos ? eos_id(t, a->eos) : -1, pad = a->eos ? eos : 0;
    int32_t *x = xcalloc((size_t)a->T, sizeof *x), *y = xcalloc((size_t)a->T, sizeof *y);
    rt_ids ids = {0}, pids = {0};
    char *line = NULL, *both = NULL;
    size_t cap = 0;
    int64_t ln = 0, k = 0;
    while (getline(&line, &cap, f) >= 0) {
        ln++;
        if (!line[strspn(line, " \t\r\n")])
            continue;
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o))
            line_error(a->file, ln, "not a JSON object (each line is {\"prompt\": ..., "
                       "\"completion\": ...})");
        const char *p = field(o, "prompt", a->file, ln), *cpl = field(o, "completion", a->file, ln);
        free(both);
        both = xasprintf("%s%s", p, cpl);
        check_normal(t, both, a->file, ln);
        ids.n = pids.n = 0;
        rt_tok_encode(t, p, strlen(p), &pids);
        rt_tok_encode(t, both, strlen(both), &ids);
        if (a->eos)
            rt_ids_push(&ids, (uint32_t)eos);
        cJSON_Delete(o);
        c->cut += ids.n > a->T + 1;
        if (!example_row(ids.v, ids.n, pids.n, a->T, pad, x, y)) {
            c->dropped++;
            k++;
            continue;
        }
        c->tokens += ids.n < a->T + 1 ? ids.n : a->T + 1;
        out_row(k++ < n - n_val ? tr : va, x, y, a->T);
    }
    fclose(f);
    free(line), free(both), free(x), free(y);
    rt_ids_free(&ids), rt_ids_free(&pids);
}

int data_sft(int argc, char **argv)
{
    SftArgs a;
    parse_args(argc, argv, &a);
    char err[1024];
    rt_tokenizer *t = rt_tok_load(a.tok, err, sizeof err);
    if (!t)
        error_input("%s", err);
    int64_t n = count_examples(a.file), n_val = (int64_t)((double)n * a.val_frac);
    if (a.val_frac > 0 && n_val == 0)
        error_input("%s: %" PRId64 " example%s: --val-frac %g leaves none for validation (use "
                    "--val-frac 0 for no val arrays)", a.file, n, n == 1 ? "" : "s", a.val_frac);
    if (rt_mkdir_p(a.dir) != 0)
        error_input("%s: cannot create folder: %s", a.dir, strerror(errno));
    SftOut tr = {0}, va = {0};
    out_open(&tr, a.dir, "train");
    if (n_val)
        out_open(&va, a.dir, "val");
    SftCounts c = {0};
    encode_examples(&a, t, n, n_val, &tr, &va, &c);
    if (tr.rows == 0 || (n_val && va.rows == 0))
        error_input("%s: no %s example has a completion token within --seq-len %" PRId64,
                    a.file, tr.rows ? "validation" : "training", a.T);
    out_close(&tr, a.T);
    if (n_val)
        out_close(&va, a.T);
    data_commit();
    printf("%s: %" PRId64 " examples -> %" PRId64 " train + %" PRId64 " val rows of %" PRId64
           " (%" PRId64 " tokens; %" PRId64 " cut at %" PRId64 " tokens, %" PRId64
           " left out: no completion token within them), vocabulary %" PRId64 "\n",
           a.file, n, tr.rows, va.rows, a.T, c.tokens, c.cut, a.T + 1, c.dropped, rt_tok_vocab(t));
    printf("train with the model's loss {\"op\": \"cross_entropy\", \"target\": \"y\", "
           "\"ignore_index\": -100} and data {\"x\": \"%s/train_x.npy\", \"y\": \"%s/train_y.npy\"}\n",
           a.dir, a.dir);
    rt_tok_free(t);
    return 0;
}
