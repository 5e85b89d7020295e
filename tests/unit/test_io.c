/* test_io.c: unit tests of runtime/safetensors.c and runtime/metrics.c (weights files
 * and their hard links,
 * metrics.jsonl, loss.svg, JSON numbers, the progress line). Bad-input cases run in a
 * forked child whose exit code and stderr are checked. Prints "ok NAME" / "FAIL NAME"
 * lines; exits 1 on failure.
 *
 *   cc -std=gnu11 -O1 -g -fsanitize=address,undefined -Iruntime tests/unit/test_io.c \
 *      runtime/safetensors.c runtime/metrics.c runtime/tboard.c runtime/util.c -lcjson -lm -o build/test_io
 *
 * `build/test_io FILE` also leaves the round-trip weights in FILE, for
 * tests/st_check.py to read back. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "rt.h"

static int failures;
static char tmpdir[256];

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return 0;                                                                 \
        }                                                                             \
    } while (0)

static void report(const char *name, int ok)
{
    printf("%s %s\n", ok ? "ok" : "FAIL", name);
    fflush(stdout);
    if (!ok)
        failures++;
}

static const char *tpath(const char *name)
{
    static char buf[8][300];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_raw(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(bytes, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

/* The whole file, NUL-terminated; NULL when it cannot be read. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    size_t r;
    while (p && (r = fread(p + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q)
                free(p);
            p = q;
        }
    }
    fclose(f);
    if (p)
        p[n] = 0;
    if (len)
        *len = n;
    return p;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ---- forked error cases ------------------------------------------------------- */

#include "child.h"

/* ---- the test model: ranks 1 to 4, laid out out of order with a hole ------------- */

static const rt_param tm_params[4] = {
    {.name = "0.weight", .rank = 2, .shape = {3, 4}, .numel = 12, .offset = 0},
    {.name = "0.bias", .rank = 1, .shape = {3}, .numel = 3, .offset = 36},
    {.name = "conv.weight", .rank = 4, .shape = {2, 1, 2, 3}, .numel = 12, .offset = 12},
    {.name = "ln.w", .rank = 3, .shape = {2, 2, 2}, .numel = 8, .offset = 24},
};
static const rt_model tm = {.abi = RT_ABI_VERSION, .name = "tm", .n_params = 4,
                            .params = tm_params, .param_floats = 40, .n_trainable = 4,
                            .trainable_floats = 40};
enum { TM_FLOATS = 40 };

/* A header entry of a hand-made file. */
typedef struct hent {
    const char *name, *dtype, *shape;   /* shape as JSON text */
    long long begin, end;
} hent;

/* The test model's tensors in F32, tiled in params order: 140 bytes of data. */
static const hent tm_good[4] = {
    {"0.weight", "F32", "[3,4]", 0, 48},
    {"0.bias", "F32", "[3]", 48, 60},
    {"conv.weight", "F32", "[2,1,2,3]", 60, 108},
    {"ln.w", "F32", "[2,2,2]", 108, 140},
};

/* Writes a safetensors file by hand: a header from `h` (plus raw JSON members in
 * `extra`, or NULL), padded with spaces to 8, then `data`. */
static void write_st(const char *path, const hent *h, int n, const char *extra,
                     const void *data, size_t nbytes)
{
    char hdr[8192];
    size_t k = (size_t)snprintf(hdr, sizeof hdr, "{");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(hdr + k, sizeof hdr - k,
                              "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%lld,%lld]}",
                              i ? "," : "", h[i].name, h[i].dtype, h[i].shape, h[i].begin,
                              h[i].end);
    if (extra)
        k += (size_t)snprintf(hdr + k, sizeof hdr - k, "%s%s", n ? "," : "", extra);
    k += (size_t)snprintf(hdr + k, sizeof hdr - k, "}");
    while (k % 8)
        hdr[k++] = ' ';
    size_t total = 8 + k + nbytes;
    unsigned char *buf = calloc(1, total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)k >> (8 * i));
    memcpy(buf + 8, hdr, k);
    if (nbytes)
        memcpy(buf + 8 + k, data, nbytes);
    write_raw(path, buf, total);
    free(buf);
}

static void fill_params(float *p, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (float)(i * 0.37 - 5.0) * (i % 3 ? 1.0f : -1.0f);
}

/* The test model's values in file order (params order), for hand-made files. */
static void tm_data(float out[35])
{
    float p[TM_FLOATS];
    fill_params(p, TM_FLOATS);
    int k = 0;
    for (int i = 0; i < 4; i++)
        for (int64_t j = 0; j < tm_params[i].numel; j++)
            out[k++] = p[tm_params[i].offset + j];
}

/* Parameters equal bit for bit (the holes of the region are not parameters). */
static int same_params(const float *p, const float *q)
{
    for (int i = 0; i < tm.n_params; i++)
        if (memcmp(p + tm_params[i].offset, q + tm_params[i].offset,
                   4 * (size_t)tm_params[i].numel) != 0)
            return 0;
    return 1;
}

typedef struct read_case {
    const rt_model *m;
    const char *path;
} read_case;

static void child_read(const void *arg)
{
    const read_case *c = arg;
    float *p = calloc((size_t)c->m->param_floats + 1, sizeof *p);
    rt_safetensors_read(c->path, c->m, p, NULL);
    free(p);
}

/* ---- safetensors: writing and reading back ------------------------------------- */

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* __metadata__'s strings beside "format" (checkpoint.keep_best's step, monitor and
 * value), read back by rt_safetensors_meta; a missing key, a short buffer, a file that
 * is not safetensors: -1; the tensors as without them */
static int test_st_meta(void)
{
    float p[TM_FLOATS], q[TM_FLOATS];
    fill_params(p, TM_FLOATS);
    const char *path = tpath("meta.safetensors");
    const char *meta[] = {"step", "20", "monitor", "val_\"loss\"", "value", "1.25", NULL};
    CHECK(rt_safetensors_write_meta(path, &tm, p, NULL, meta) == 0);
    char v[32];
    CHECK(rt_safetensors_meta(path, "step", v, sizeof v) == 0 && !strcmp(v, "20"));
    CHECK(rt_safetensors_meta(path, "monitor", v, sizeof v) == 0 && !strcmp(v, "val_\"loss\""));
    CHECK(rt_safetensors_meta(path, "format", v, sizeof v) == 0 && !strcmp(v, "pt"));
    CHECK(rt_safetensors_meta(path, "value", v, 4) == -1);        /* "1.25" needs 5 */
    CHECK(rt_safetensors_meta(path, "epoch", v, sizeof v) == -1);
    write_raw(tpath("junk.safetensors"), "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    CHECK(rt_safetensors_meta(tpath("junk.safetensors"), "step", v, sizeof v) == -1);
    CHECK(rt_safetensors_meta(tpath("absent.safetensors"), "step", v, sizeof v) == -1);
    rt_safetensors_read(path, &tm, q, NULL);   /* (the model's floats: 35 of the 40) */
    CHECK(same_params(p, q));
    return 1;
}

static int test_st_roundtrip(const char *keep)
{
    float p[TM_FLOATS], q[TM_FLOATS];
    fill_params(p, TM_FLOATS);
    const char *path = keep ? keep : tpath("rt.safetensors");
    CHECK(rt_safetensors_write(path, &tm, p, NULL) == 0);
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!exists(tmp));

    /* Every byte: length, header layout as PyTorch's loader wants it, then data. */
    size_t len;
    unsigned char *b = (unsigned char *)slurp(path, &len);
    CHECK(b && len >= 8);
    uint64_t n = le64(b);
    CHECK(n % 8 == 0 && 8 + n + 35 * 4 == len && b[8] == '{');
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)b + 8, n, &end, 0);
    CHECK(h && cJSON_IsObject(h));
    for (const char *s = end; s < (const char *)b + 8 + n; s++)
        CHECK(*s == ' ');
    const cJSON *t = h->child;
    uint64_t off = 0;
    for (int i = 0; i < 4; i++, t = t->next) {
        const rt_param *pp = &tm_params[i];
        CHECK(t && strcmp(t->string, pp->name) == 0);
        CHECK(cJSON_GetArraySize(t) == 3);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        CHECK(cJSON_IsString(dt) && strcmp(dt->valuestring, "F32") == 0);
        CHECK(cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == pp->rank);
        for (int d = 0; d < pp->rank; d++)
            CHECK(cJSON_GetArrayItem(sh, d)->valuedouble == (double)pp->shape[d]);
        CHECK(cJSON_IsArray(of) && cJSON_GetArraySize(of) == 2);
        CHECK(cJSON_GetArrayItem(of, 0)->valuedouble == (double)off);
        CHECK(cJSON_GetArrayItem(of, 1)->valuedouble == (double)(off + 4 * pp->numel));
        /* Little-endian fp32 of exactly this parameter's floats. */
        for (int64_t j = 0; j < pp->numel; j++) {
            const unsigned char *e = b + 8 + n + off + 4 * j;
            uint32_t u = (uint32_t)e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16 |
                         (uint32_t)e[3] << 24, v;
            memcpy(&v, &p[pp->offset + j], 4);
            CHECK(u == v);
        }
        off += 4 * (uint64_t)pp->numel;
    }
    CHECK(t && strcmp(t->string, "__metadata__") == 0 && !t->next);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(t, "format");
    CHECK(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "pt") == 0);
    cJSON_Delete(h);
    free(b);

    /* Read back bit for bit; the hole between parameters is left alone. */
    for (int i = 0; i < TM_FLOATS; i++)
        q[i] = -1234.5f;
    rt_safetensors_read(path, &tm, q, NULL);
    CHECK(same_params(p, q));
    CHECK(q[32] == -1234.5f && q[35] == -1234.5f && q[39] == -1234.5f);

    /* Overwriting is atomic and leaves no temporary. */
    for (int i = 0; i < TM_FLOATS; i++)
        p[i] *= 2;
    CHECK(rt_safetensors_write(path, &tm, p, NULL) == 0);
    rt_safetensors_read(path, &tm, q, NULL);
    CHECK(same_params(p, q));
    CHECK(!exists(tmp));
    if (!keep)
        CHECK(unlink(path) == 0);

    /* A file readers can make of a hand-written header in another order. */
    float d[35];
    tm_data(d);
    hent rev[4] = {tm_good[3], tm_good[2], tm_good[1], tm_good[0]};
    write_st(tpath("rev.safetensors"), rev, 4, "\"__metadata__\":{\"format\":\"pt\",\"x\":\"y\"}",
             d, sizeof d);
    fill_params(p, TM_FLOATS);
    memset(q, 0, sizeof q);
    rt_safetensors_read(tpath("rev.safetensors"), &tm, q, NULL);
    CHECK(same_params(p, q));

    /* A model without parameters. */
    rt_model none = {.abi = RT_ABI_VERSION, .name = "none"};
    CHECK(rt_safetensors_write(tpath("none.safetensors"), &none, q, NULL) == 0);
    rt_safetensors_read(tpath("none.safetensors"), &none, q, NULL);

    /* Failure reports errno and leaves nothing behind. */
    errno = 0;
    CHECK(rt_safetensors_write(tpath("no/such/dir/w.safetensors"), &tm, p, NULL) == -1);
    CHECK(errno == ENOENT);
    return 1;
}

/* The writer in pieces gives the same file as the writer in one go, and a range read
 * gives exactly the elements of the range (any [lo, hi), cutting tensors anywhere). */
/* rt_safetensors_link: PATH becomes a second name of SRC (one inode, two links), over
 * an existing PATH, also when PATH already names SRC (rename of two links to one file
 * does nothing: no PATH.tmp may be left); a missing SRC is -1 (ENOENT) and leaves
 * PATH as it was; a file written over PATH later leaves SRC alone. */
static int test_st_link(void)
{
    float p[TM_FLOATS], q[TM_FLOATS];
    fill_params(p, TM_FLOATS);
    const char *src = tpath("ck.safetensors"), *dst = tpath("final.safetensors");
    const char *tmp = tpath("final.safetensors.tmp"), *old = tpath("old.safetensors");
    CHECK(rt_safetensors_write(src, &tm, p, NULL) == 0);
    q[0] = 0;
    CHECK(rt_safetensors_write(old, &tm, q, NULL) == 0);
    CHECK(link(old, dst) == 0);                 /* PATH exists: another file */
    struct stat a, b;
    CHECK(rt_safetensors_link(src, dst) == 0);
    CHECK(stat(src, &a) == 0 && stat(dst, &b) == 0);
    CHECK(a.st_ino == b.st_ino && a.st_nlink == 2 && !exists(tmp));
    CHECK(rt_safetensors_link(src, dst) == 0);  /* again: PATH already names SRC */
    CHECK(stat(dst, &b) == 0 && a.st_ino == b.st_ino && b.st_nlink == 2 && !exists(tmp));
    memset(q, 0, sizeof q);
    rt_safetensors_read(dst, &tm, q, NULL);
    CHECK(same_params(p, q));
    errno = 0;
    CHECK(rt_safetensors_link(tpath("no_such_ck.safetensors"), dst) == -1 && errno == ENOENT);
    CHECK(stat(dst, &b) == 0 && a.st_ino == b.st_ino && !exists(tmp));
    fill_params(q, TM_FLOATS);
    q[1] += 1.0f;
    CHECK(rt_safetensors_write(dst, &tm, q, NULL) == 0);   /* a new file, by rename */
    CHECK(stat(src, &a) == 0 && a.st_nlink == 1);
    memset(q, 0, sizeof q);
    rt_safetensors_read(src, &tm, q, NULL);
    CHECK(same_params(p, q));
    return 1;
}

static int test_st_pieces(void)
{
    float p[TM_FLOATS], q[TM_FLOATS], r[TM_FLOATS + 1];
    fill_params(p, TM_FLOATS);
    char one[300];
    snprintf(one, sizeof one, "%s", tpath("one.safetensors"));
    CHECK(rt_safetensors_write(one, &tm, p, NULL) == 0);
    for (int split = 1; split <= 5; split++) {
        char name[64];
        snprintf(name, sizeof name, "pieces%d.safetensors", split);
        const char *path = tpath(name);
        rt_st_out *w = rt_st_open(path, &tm);
        CHECK(w);
        for (int i = 0; i < tm.n_params; i++) {   /* each tensor in `split`-float puts */
            const rt_param *pp = &tm.params[i];
            for (int64_t k = 0; k < pp->numel; k += split)
                CHECK(rt_st_put(w, p + pp->offset + k, k + split <= pp->numel ? split : pp->numel - k) == 0);
        }
        CHECK(rt_st_close(w) == 0);
        size_t la, lb;
        char *a = slurp(one, &la), *b = slurp(path, &lb);
        CHECK(a && b && la == lb && memcmp(a, b, la) == 0);
        free(a);
        free(b);
    }
    rt_safetensors_read(one, &tm, q, NULL);
    for (int lo = 0; lo <= TM_FLOATS; lo += 3)
        for (int hi = lo; hi <= TM_FLOATS; hi += 5) {
            for (int i = 0; i <= TM_FLOATS; i++)
                r[i] = -77;
            rt_safetensors_read_range(one, &tm, lo, hi, r);
            for (int k = lo; k < hi; k++) {      /* tensor elements read, the gaps left */
                int in_tensor = 0;
                for (int i = 0; i < tm.n_params; i++)
                    in_tensor |= k >= tm.params[i].offset && k < tm.params[i].offset + tm.params[i].numel;
                CHECK(r[k - lo] == (in_tensor ? q[k] : -77));
            }
            for (int k = hi - lo; k <= TM_FLOATS; k++)
                CHECK(r[k] == -77);
        }
    /* a failed open reports errno; a close after a failed put removes the file */
    errno = 0;
    CHECK(!rt_st_open(tpath("no/such/dir/p.safetensors"), &tm) && errno == ENOENT);
    return 1;
}

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static int test_st_dtypes(void)
{
    /* 0.weight F64, 0.bias F16, conv.weight BF16, ln.w F32, at unaligned offsets. */
    unsigned char data[96 + 6 + 24 + 32];
    float want[TM_FLOATS] = {0};
    for (int i = 0; i < 12; i++) {
        double v = 0.1 * i - 0.55;
        memcpy(data + 8 * i, &v, 8);
        want[i] = (float)v;
    }
    uint16_t hb[3] = {0x3c00, 0xc100, 0x0001};   /* 1, -2.5, 2^-24 */
    float hv[3] = {1.0f, -2.5f, 0x1p-24f};
    for (int i = 0; i < 3; i++) {
        data[96 + 2 * i] = (unsigned char)hb[i];
        data[96 + 2 * i + 1] = (unsigned char)(hb[i] >> 8);
        want[36 + i] = hv[i];
    }
    for (int i = 0; i < 12; i++) {
        float v = 0.5f * (float)i - 3.0f;
        uint16_t u = bf16_of(v);
        data[102 + 2 * i] = (unsigned char)u;
        data[102 + 2 * i + 1] = (unsigned char)(u >> 8);
        want[12 + i] = v;
    }
    for (int i = 0; i < 8; i++) {
        float v = 1.0f / (float)(i + 1);
        memcpy(data + 126 + 4 * i, &v, 4);
        want[24 + i] = v;
    }
    hent h[4] = {{"0.weight", "F64", "[3,4]", 0, 96},
                 {"0.bias", "F16", "[3]", 96, 102},
                 {"conv.weight", "BF16", "[2,1,2,3]", 102, 126},
                 {"ln.w", "F32", "[2,2,2]", 126, 158}};
    write_st(tpath("dt.safetensors"), h, 4, NULL, data, sizeof data);
    float q[TM_FLOATS] = {0};
    rt_safetensors_read(tpath("dt.safetensors"), &tm, q, NULL);
    for (int i = 0; i < 39; i++)
        CHECK(q[i] == want[i]);
    for (int lo = 0; lo < 39; lo += 5) {      /* converted in parts, from any offset */
        float r[TM_FLOATS] = {0};
        rt_safetensors_read_range(tpath("dt.safetensors"), &tm, lo, lo + 7, r);
        for (int i = lo; i < lo + 7 && i < 39; i++)
            CHECK(r[i - lo] == want[i]);
    }

    /* Every half-precision value against the compiler's own conversion. */
#ifdef __FLT16_MAX__
    static const rt_param hp = {.name = "h", .rank = 1, .shape = {65536}, .numel = 65536};
    rt_model hm = {.abi = RT_ABI_VERSION, .name = "h", .n_params = 1, .params = &hp,
                   .param_floats = 65536, .n_trainable = 1, .trainable_floats = 65536};
    unsigned char *all = malloc(2 * 65536);
    float *got = malloc(4 * 65536);
    CHECK(all && got);
    for (int i = 0; i < 65536; i++) {
        all[2 * i] = (unsigned char)i;
        all[2 * i + 1] = (unsigned char)(i >> 8);
    }
    hent he = {"h", "F16", "[65536]", 0, 2 * 65536};
    write_st(tpath("half.safetensors"), &he, 1, NULL, all, 2 * 65536);
    rt_safetensors_read(tpath("half.safetensors"), &hm, got, NULL);
    for (int i = 0; i < 65536; i++) {
        uint16_t u = (uint16_t)i;
        _Float16 x;
        memcpy(&x, &u, 2);
        float r = (float)x;
        CHECK(isnan(r) ? isnan(got[i]) : memcmp(&r, &got[i], 4) == 0);
    }
    free(all);
    free(got);
#endif
    return 1;
}

/* ---- safetensors: every way a file can be wrong ------------------------------------ */

typedef struct bad_case {
    const char *file;
    hent h[5];
    int n;
    const char *extra;
    size_t data_bytes;          /* 140 unless set */
    const char *words[3];
} bad_case;

static const bad_case bad_cases[] = {
    {"shape.st", {{"0.weight", "F32", "[4,3]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60},
                  {"conv.weight", "F32", "[2,1,2,3]", 60, 108}, {"ln.w", "F32", "[2,2,2]", 108, 140}},
     4, NULL, 0, {"tensor '0.weight' has shape [4, 3], the model expects [3, 4]"}},
    {"rank.st", {{"0.weight", "F32", "[12]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60},
                 {"conv.weight", "F32", "[2,1,2,3]", 60, 108}, {"ln.w", "F32", "[2,2,2]", 108, 140}},
     4, NULL, 0, {"tensor '0.weight' has shape [12], the model expects [3, 4]"}},
    {"missing.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60},
                    {"conv.weight", "F32", "[2,1,2,3]", 60, 108}},
     3, NULL, 108, {"missing tensor 'ln.w'"}},
    {"missing2.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60}},
     2, NULL, 60, {"missing tensor 'conv.weight' (and 1 more)"}},
    {"extra.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60},
                  {"conv.weight", "F32", "[2,1,2,3]", 60, 108}, {"ln.w", "F32", "[2,2,2]", 108, 140},
                  {"foo", "F32", "[1]", 140, 144}},
     5, NULL, 144, {"unexpected tensor 'foo' (the model has no parameter of that name)"}},
    {"dup.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60},
                {"0.bias", "F32", "[3]", 60, 72}},
     3, NULL, 72, {"tensor '0.bias' appears twice"}},
    {"i32.st", {{"0.weight", "I32", "[3,4]", 0, 48}}, 1, NULL, 48,
     {"tensor '0.weight' has dtype I32", "F32, F64, F16 or BF16"}},
    {"f33.st", {{"0.weight", "F33", "[3,4]", 0, 48}}, 1, NULL, 48,
     {"tensor '0.weight' has unknown dtype 'F33'"}},
    {"range.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60},
                  {"conv.weight", "F32", "[2,1,2,3]", 60, 108}, {"ln.w", "F32", "[2,2,2]", 108, 140}},
     4, NULL, 100, {"tensor 'conv.weight' has data_offsets [60, 108], outside the 100 bytes"}},
    {"size.st", {{"0.weight", "F32", "[3,4]", 0, 44}}, 1, NULL, 140,
     {"tensor '0.weight' has data_offsets [0, 44] (44 bytes), but F32 of 12 elements takes 48"}},
    {"gap.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 52, 64},
                {"conv.weight", "F32", "[2,1,2,3]", 64, 112}, {"ln.w", "F32", "[2,2,2]", 112, 144}},
     4, NULL, 144, {"bytes [48, 52) of the data belong to no tensor"}},
    {"tail.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 48, 60},
                 {"conv.weight", "F32", "[2,1,2,3]", 60, 108}, {"ln.w", "F32", "[2,2,2]", 108, 140}},
     4, NULL, 148, {"bytes [140, 148) of the data belong to no tensor"}},
    {"overlap.st", {{"0.weight", "F32", "[3,4]", 0, 48}, {"0.bias", "F32", "[3]", 40, 52},
                    {"conv.weight", "F32", "[2,1,2,3]", 52, 100}, {"ln.w", "F32", "[2,2,2]", 100, 132}},
     4, NULL, 132, {"tensor '0.bias' has data_offsets [40, 52], overlapping tensor '0.weight'"}},
    {"frac.st", {{"0.weight", "F32", "[3,4.5]", 0, 48}}, 1, NULL, 48,
     {"tensor '0.weight'", "non-negative integers"}},
    {"neg.st", {{"0.weight", "F32", "[3,4]", -4, 44}}, 1, NULL, 48,
     {"tensor '0.weight'", "\"data_offsets\" must be [begin, end]"}},
    {"meta.st", {{"0.weight", "F32", "[3,4]", 0, 48}}, 1, "\"__metadata__\":{\"n\":1}", 48,
     {"__metadata__ must be an object of strings"}},
    {"entry.st", {{0}}, 0, "\"0.weight\":[1,2]", 0,
     {"tensor '0.weight': the header entry is not an object"}},
    {"nodtype.st", {{0}}, 0, "\"0.weight\":{\"shape\":[3,4],\"data_offsets\":[0,48]}", 48,
     {"tensor '0.weight': \"dtype\" is missing"}},
    {"ctrl.st", {{0}}, 0, "\"a\\u001b[31mb\":{}", 0, {"unexpected tensor 'a?[31mb'"}},
};

static void child_bad(const void *arg)
{
    const bad_case *c = arg;
    read_case r = {&tm, tpath(c->file)};
    child_read(&r);
}

static void child_path(const void *arg)
{
    read_case r = {&tm, arg};
    child_read(&r);
}

/* Raw bytes for the cases a header table cannot express. */
static void write_bytes_case(const char *name, const char *bytes, size_t n)
{
    write_raw(tpath(name), bytes, n);
}

static int test_st_errors(void)
{
    float d[40] = {0};
    tm_data(d);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        write_st(tpath(c->file), c->h, c->n, c->extra, d, c->data_bytes ? c->data_bytes : 140);
        char where[300];
        snprintf(where, sizeof where, "%s: ", tpath(c->file));
        if (!expect_input_error(child_bad, c, where, c->words[0],
                                c->words[1] ? c->words[1] : "", (const char *)NULL)) {
            fprintf(stderr, "  case %s\n", c->file);
            return 0;
        }
    }

    /* Headers that are not what they claim. */
    write_bytes_case("short.st", "\x10\0\0", 3);
    CHECK(expect_input_error(child_path, tpath("short.st"), "short.st: error: not a safetensors file",
                             (const char *)NULL));
    unsigned char big[64] = {0x15, 0xcd, 0x5b, 0x07};   /* 123456789 */
    write_bytes_case("big.st", (const char *)big, sizeof big);
    CHECK(expect_input_error(child_path, tpath("big.st"),
                             "big.st: error: not a safetensors file (header length 123456789 exceeds "
                             "the file size)", (const char *)NULL));
    write_bytes_case("json.st", "\x08\0\0\0\0\0\0\0{abc:1} ", 16);
    CHECK(expect_input_error(child_path, tpath("json.st"), "json.st: error: not a safetensors file",
                             "not valid JSON", (const char *)NULL));
    write_bytes_case("arr.st", "\x08\0\0\0\0\0\0\0[1,2]   ", 16);
    CHECK(expect_input_error(child_path, tpath("arr.st"), "does not start with '{'",
                             (const char *)NULL));
    write_bytes_case("junk.st", "\x08\0\0\0\0\0\0\0{}  x   ", 16);
    CHECK(expect_input_error(child_path, tpath("junk.st"), "bytes after the header",
                             (const char *)NULL));
    write_bytes_case("zero.st", "\0\0\0\0\0\0\0\0", 8);
    CHECK(expect_input_error(child_path, tpath("zero.st"), "not a safetensors file",
                             (const char *)NULL));
    CHECK(expect_input_error(child_path, tpath("nonexistent.st"), "nonexistent.st: error: cannot open",
                             (const char *)NULL));
    CHECK(expect_input_error(child_path, tmpdir, "not a regular file", (const char *)NULL));

    /* A header over the 100 MB limit, in a sparse file so it costs no disk. */
    int fd = open(tpath("huge.st"), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    CHECK(fd >= 0);
    unsigned char len8[8];
    uint64_t hl = 100000256;
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hl >> (8 * i));
    CHECK(write(fd, len8, 8) == 8 && ftruncate(fd, 8 + 100000256 + 8) == 0 && close(fd) == 0);
    CHECK(expect_input_error(child_path, tpath("huge.st"), "100 MB limit", (const char *)NULL));
    CHECK(unlink(tpath("huge.st")) == 0);
    return 1;
}

/* ---- safetensors: mutated files never crash the reader ----------------------------- */

/* splitmix64: the fuzzer's own generator (rt_rng lives in data.c, not linked here). */
static uint64_t fuzz_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int test_st_fuzz(void)
{
    float p[TM_FLOATS];
    fill_params(p, TM_FLOATS);
    CHECK(rt_safetensors_write(tpath("seed.st"), &tm, p, NULL) == 0);
    size_t n;
    unsigned char *seed = (unsigned char *)slurp(tpath("seed.st"), &n);
    CHECK(seed);
    uint64_t hl = le64(seed);
    static const char alphabet[] = "{}[]\",:0123456789-.eE FBI_\\u";
    uint64_t r = 2024;
    unsigned char *buf = malloc(n + 64);
    CHECK(buf);
    int ok_reads = 0, errors = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(buf, seed, n);
        size_t len = n;
        int kind = (int)(fuzz_next(&r) % 7);
        int edits = 1 + (int)(fuzz_next(&r) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = 8 + fuzz_next(&r) % hl;   /* inside the header */
            if (kind == 0)
                buf[at] = (unsigned char)fuzz_next(&r);
            else if (kind == 1 || kind == 2)
                buf[at] = (unsigned char)alphabet[fuzz_next(&r) % (sizeof alphabet - 1)];
            else if (kind == 3)
                len = fuzz_next(&r) % n;          /* truncated anywhere */
            else if (kind == 4)
                buf[fuzz_next(&r) % 8] = (unsigned char)fuzz_next(&r);
            else if (kind == 5 && buf[at] >= '0' && buf[at] <= '9')
                buf[at] = (unsigned char)('0' + fuzz_next(&r) % 10);   /* still JSON */
            else if (kind == 6)
                buf[8 + hl + fuzz_next(&r) % (n - 8 - hl)] = (unsigned char)fuzz_next(&r);
        }
        write_raw(tpath("fuzz.st"), buf, len);
        char err[4096];
        read_case rc = {&tm, tpath("fuzz.st")};
        int code = run_child(child_read, &rc, err, sizeof err);
        const char *nl = strchr(err, '\n');    /* one line, ending the output */
        int sane = (code == 0 && err[0] == 0) ||
                   (code == 1 && error_line(err) && nl && !nl[1]);
        if (!sane || strstr(err, "Sanitizer") || strstr(err, "runtime error")) {
            fprintf(stderr, "  fuzz case %d (kind %d): exit %d, stderr: %s\n", it, kind, code,
                    err);
            char keep[300];
            snprintf(keep, sizeof keep, "%s.crash", tpath("fuzz.st"));
            write_raw(keep, buf, len);
            fprintf(stderr, "  kept as %s\n", keep);
            free(buf);
            free(seed);
            return 0;
        }
        code == 0 ? ok_reads++ : errors++;
    }
    printf("  fuzz: %d read, %d rejected\n", ok_reads, errors);
    free(buf);
    free(seed);
    return errors > 0 && ok_reads > 0;
}

/* ---- metrics ------------------------------------------------------------------------- */

static int test_json_num(void)
{
    static const struct { double v; const char *want; } cases[] = {
        {0, "0"}, {1.5, "1.5"}, {-2, "-2"}, {123456789, "123456789"}, {(double)0.1f, "0.100000001"},
        {1e300, "1e+300"}, {-3.25e-7, "-3.25e-07"}, {NAN, "null"}, {INFINITY, "null"},
        {-INFINITY, "null"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        const char *s = rt_json_num(buf, cases[i].v);
        CHECK(s == buf);
        if (strcmp(s, cases[i].want) != 0) {
            fprintf(stderr, "  rt_json_num(%g) = %s, want %s\n", cases[i].v, s, cases[i].want);
            return 0;
        }
        cJSON *j = cJSON_Parse(s);
        CHECK(j && (isfinite(cases[i].v) ? cJSON_IsNumber(j) : cJSON_IsNull(j)));
        cJSON_Delete(j);
    }
    return 1;
}

/* The number of "x,y" pairs in the n-th polyline's points. */
static int polyline_points(const char *svg, int which)
{
    const char *p = svg;
    for (int i = 0; i <= which; i++) {
        p = strstr(p, "<polyline");
        if (!p)
            return -1;
        p++;
    }
    p = strstr(p, "points=\"");
    if (!p)
        return -1;
    p += 8;
    const char *e = strchr(p, '"');
    int n = 0;
    for (; p < e; p++)
        n += *p == ',';
    return n;
}

static int svg_sane(const char *svg)
{
    CHECK(svg && strncmp(svg, "<?xml", 5) == 0);
    CHECK(strstr(svg, "<svg") && strstr(svg, "</svg>") && count(svg, "<polyline") == 2);
    CHECK((strstr(svg, ">loss</text>") || strstr(svg, ">loss (log scale)</text>")) &&
          strstr(svg, ">train</text>") &&
          strstr(svg, ">validation</text>") && strstr(svg, ">step</text>"));
    CHECK(!strstr(svg, "nan") && !strstr(svg, "inf") && !strstr(svg, "href"));
    CHECK(count(svg, "<") == count(svg, ">"));
    return 1;
}

static int test_metrics(void)
{
    char dir[300], path[400], svgp[400], tmpp[400];
    snprintf(dir, sizeof dir, "%s/run/a", tmpdir);   /* created on open */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(svgp, sizeof svgp, "%s/loss.svg", dir);
    snprintf(tmpp, sizeof tmpp, "%s/loss.svg.tmp", dir);

    rt_metrics *mt = rt_metrics_open(dir, 0);
    CHECK(mt);
    /* Nothing drawn yet: still a valid plot. */
    rt_metrics_plot(mt);
    char *svg = slurp(svgp, NULL);
    CHECK(svg_sane(svg) && polyline_points(svg, 0) == 0);
    free(svg);

    rt_metrics_line(mt, "{\"event\":\"start\",\"params\":35}");
    char *now = slurp(path, NULL);      /* flushed at once */
    CHECK(now && strcmp(now, "{\"event\":\"start\",\"params\":35}\n") == 0);
    free(now);
    /* One point: shown as a dot. */
    rt_metrics_train_point(mt, 1, 2.5);
    rt_metrics_plot(mt);
    svg = slurp(svgp, NULL);
    CHECK(svg_sane(svg) && polyline_points(svg, 0) == 1 && strstr(svg, "r=\"2\""));
    free(svg);

    char line[200], a[32], b[32];
    for (int s = 2; s <= 100; s++) {
        double loss = s == 50 ? NAN : s == 60 ? INFINITY : 2.5 / s;
        rt_metrics_train_point(mt, s, loss);
        if (s % 10 == 0) {
            snprintf(line, sizeof line, "{\"step\":%d,\"loss\":%s,\"lr\":%s}", s,
                     rt_json_num(a, loss), rt_json_num(b, 0.01));
            rt_metrics_line(mt, line);
        }
        if (s % 25 == 0) {
            rt_metrics_val_point(mt, s, 3.0 / s);
            snprintf(line, sizeof line, "{\"step\":%d,\"epoch\":0,\"val_loss\":%s}", s,
                     rt_json_num(a, 3.0 / s));
            rt_metrics_line(mt, line);
        }
    }
    rt_metrics_val_point(mt, 100, NAN);   /* replaces the one at step 100 */
    rt_metrics_plot(mt);
    CHECK(!exists(tmpp));
    svg = slurp(svgp, NULL);
    CHECK(svg_sane(svg));
    CHECK(polyline_points(svg, 0) == 98 && polyline_points(svg, 1) == 3);
    CHECK(!strstr(svg, "log scale"));   /* 2.5 down to 0.025: two decades, linear */
    CHECK(count(svg, "r=\"3\"") == 3 + 1);   /* markers + the legend's */
    free(svg);
    rt_metrics_close(mt);

    /* Every line complete and valid JSON. */
    char *text = slurp(path, NULL);
    CHECK(text);
    CHECK(strstr(text, "\"step\":50,\"loss\":null") && strstr(text, "\"step\":60,\"loss\":null"));
    int lines = 0;
    for (char *s = text, *e; (e = strchr(s, '\n')); s = e + 1, lines++) {
        *e = 0;
        cJSON *j = cJSON_Parse(s);
        CHECK(j && cJSON_IsObject(j));
        cJSON_Delete(j);
    }
    CHECK(lines == 1 + 10 + 4);
    free(text);

    /* Resuming appends, and the plot still has the old run's points (those in the
     * file, the logged ones), with the resumed steps replacing repeats. */
    mt = rt_metrics_open(dir, 1);
    rt_metrics_line(mt, "{\"event\":\"start\",\"resumed_from\":80}");
    rt_metrics_train_point(mt, 90, 0.02);
    rt_metrics_train_point(mt, 95, 0.01);
    rt_metrics_plot(mt);
    rt_metrics_close(mt);
    text = slurp(path, NULL);
    CHECK(text && count(text, "\n") == 16 &&
          strstr(text, "{\"event\":\"start\",\"params\":35}\n") == text);
    free(text);
    svg = slurp(svgp, NULL);
    /* Logged train steps 10..80 without 50, 60 (null): 6, then 90 and 95. */
    CHECK(svg_sane(svg) && polyline_points(svg, 0) == 8 && polyline_points(svg, 1) == 4);
    free(svg);

    /* A long run: all points kept, about 2000 drawn, the file stays small. */
    mt = rt_metrics_open(dir, 0);
    for (int s = 1; s <= 100000; s++)
        rt_metrics_train_point(mt, s, 1.0 / s + 1e-3 * (s % 7));
    rt_metrics_val_point(mt, 100000, 0.5);
    rt_metrics_plot(mt);
    rt_metrics_close(mt);
    size_t len;
    svg = slurp(svgp, &len);
    CHECK(svg_sane(svg));
    int np = polyline_points(svg, 0);
    CHECK(np >= 1900 && np <= 2001 && len < 64 * 1024);
    /* 1 down to 1e-3: three decades, so a log scale with ticks at 0.001 ... 1 */
    CHECK(strstr(svg, "(log scale)") && strstr(svg, ">0.001</text>") && strstr(svg, ">1</text>") &&
          strstr(svg, ">0.01</text>"));
    free(svg);
    text = slurp(path, NULL);
    CHECK(text && text[0] == 0);   /* truncated on open */
    free(text);

    /* Flat and huge values still give a finite plot. */
    mt = rt_metrics_open(dir, 0);
    rt_metrics_train_point(mt, 5, 1e300);
    rt_metrics_train_point(mt, 6, -1e300);
    rt_metrics_train_point(mt, 7, 1e300);
    rt_metrics_plot(mt);
    rt_metrics_close(mt);
    svg = slurp(svgp, NULL);
    CHECK(svg_sane(svg) && polyline_points(svg, 0) == 3);
    free(svg);
    return 1;
}

static void child_metrics_unwritable(const void *arg)
{
    rt_metrics_open(arg, 0);
}

static int test_metrics_errors(void)
{
    /* A regular file where the folder should be: bad input (--out), exits 1 naming it */
    write_raw(tpath("notadir"), "x", 1);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/sub", tpath("notadir"));
    char err[4096];
    int code = run_child(child_metrics_unwritable, dir, err, sizeof err);
    CHECK(code == 1 && error_line(err) && strstr(err, "notadir"));
    return 1;
}

/* ---- the progress line ------------------------------------------------------------------ */

/* Runs fn with stderr on a pseudo-terminal; returns what it wrote. */
static int run_on_pty(child_fn fn, char *out, size_t cap)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0)
        return -1;
    const char *slave_name = ptsname(master);
    if (!slave_name)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int s = open(slave_name, O_RDWR | O_NOCTTY);
        if (s < 0 || dup2(s, 2) < 0)
            _exit(99);
        fn(NULL);
        _exit(0);
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(master, out + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)   /* EIO once the child is gone and the slave closed */
            break;
        n += (size_t)r;
        if (n == cap - 1)
            break;
    }
    out[n] = 0;
    close(master);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void child_progress(const void *arg)
{
    (void)arg;
    rt_progress(0, 120, 4680, 0, 0.51234, 12345, 10.0);
    rt_progress(0, 121, 4680, 0, 0.5, 12345, 10.1);   /* too soon: not drawn */
    usleep(150000);
    rt_progress(0, 240, 4680, 1, 0.25, 12000, 20.0);  /* 120 steps per 10 s: 370 s left */
    rt_progress(1, 300, 4680, 1, 0.25, 12000, 20.0);  /* quiet */
    rt_progress(0, 250, 4680, 1, 0.125, 12000, 20.5); /* too soon; done draws it */
    rt_progress_done(0);
    rt_progress(0, 5, 0, 0, 1.0, 0, 1.0);             /* unknown total */
    rt_progress(0, 6, 0, 0, NAN, 0, 2.0);
    rt_progress_done(0);
}

static void child_progress_pipe(const void *arg)
{
    (void)arg;
    rt_progress(0, 1, 10, 0, 1.0, 10, 0.5);
    rt_progress_done(0);
}

static int test_progress(void)
{
    char out[4096];
    int code = run_on_pty(child_progress, out, sizeof out);
    if (code == -1) {
        printf("  (no pseudo-terminal here: progress checked on a pipe only)\n");
    } else {
        CHECK(code == 0);
        CHECK(strstr(out, "\rstep 120/4680  epoch 0  loss 0.5123  1.23e+04 samples/s\033[K"));
        CHECK(!strstr(out, "step 121"));
        CHECK(strstr(out, "\rstep 240/4680  epoch 1  loss 0.2500  1.2e+04 samples/s  "
                          "ETA 6m10s\033[K"));
        CHECK(!strstr(out, "step 300"));
        CHECK(strstr(out, "\rstep 250/4680  epoch 1  loss 0.1250"));
        CHECK(strstr(out, "\rstep 5  epoch 0  loss 1.0000\033[K"));
        CHECK(!strstr(out, "step 5/"));
        CHECK(strstr(out, "\rstep 6  epoch 0  loss nan\033[K"));   /* drawn by done */
        CHECK(count(out, "\n") == 2);
    }
    char err[512];
    code = run_child(child_progress_pipe, NULL, err, sizeof err);
    CHECK(code == 0 && err[0] == 0);   /* not a terminal: silent */
    return 1;
}

/* ---- main ---------------------------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    if (remove(path) != 0)
        perror(path);
    return 0;
}

int main(int argc, char **argv)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_io.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    report("st_roundtrip", test_st_roundtrip(argc > 1 ? argv[1] : NULL));
    report("st_meta", test_st_meta());
    report("st_pieces", test_st_pieces());
    report("st_link", test_st_link());
    report("st_dtypes", test_st_dtypes());
    report("st_errors", test_st_errors());
    report("st_fuzz", test_st_fuzz());
    report("json_num", test_json_num());
    report("metrics", test_metrics());
    report("metrics_errors", test_metrics_errors());
    report("progress", test_progress());
    if (nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        perror(tmpdir);
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures != 0;
}
