/* test_data.c: unit tests of runtime/data.c (.npy reading, datasets, the batch
 * loader, random numbers). Bad-input cases run in a forked child whose exit code
 * and stderr are checked. Prints "ok NAME" / "FAIL NAME" lines; exits 1 on failure.
 *
 *   cc -std=gnu11 -O1 -g -fsanitize=address,undefined -Iruntime tests/unit/test_data.c \
 *      runtime/data.c runtime/util.c -lpthread -lm -o build/test_data
 * (also with -fsanitize=thread) */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "rt.h"

static int failures;
static char tmpdir[256];
static char made[128][300];    /* files written, removed at the end */
static int n_made;

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

/* ---- writing test files -------------------------------------------------- */

static const char *tpath(const char *name)
{
    static char buf[4][300];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_raw(const char *name, const void *bytes, size_t n)
{
    const char *p = tpath(name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(bytes, 1, n, f) != n) || fclose(f) != 0) {
        perror(p);
        exit(2);
    }
    int seen = 0;
    for (int i = 0; i < n_made; i++)
        seen |= strcmp(made[i], p) == 0;
    if (!seen && n_made < 128)
        snprintf(made[n_made++], sizeof made[0], "%s", p);
}

/* An .npy file with the given header dict text, padded as numpy pads it (header
 * ends in '\n', data aligned to 64). version 1: u16 length; 2 and 3: u32. */
static void write_npy_dict(const char *name, int version, const char *dict, const void *data,
                           size_t nbytes)
{
    size_t pre = version == 1 ? 10 : 12;
    size_t hlen = strlen(dict) + 1;
    while ((pre + hlen) % 64)
        hlen++;
    size_t total = pre + hlen + nbytes;
    unsigned char *buf = calloc(1, total);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version;
    buf[7] = 0;
    if (version == 1) {
        buf[8] = (unsigned char)hlen;
        buf[9] = (unsigned char)(hlen >> 8);
    } else {
        for (int i = 0; i < 4; i++)
            buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    }
    memset(buf + pre, ' ', hlen);
    memcpy(buf + pre, dict, strlen(dict));
    buf[pre + hlen - 1] = '\n';
    if (nbytes)
        memcpy(buf + pre + hlen, data, nbytes);
    write_raw(name, buf, total);
    free(buf);
}

static void write_npy(const char *name, int version, const char *descr, const char *shape,
                      const void *data, size_t nbytes)
{
    char dict[256];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
             descr, shape);
    write_npy_dict(name, version, dict, data, nbytes);
}

/* ---- forked error cases ----------------------------------------------------- */

#include "child.h"

static void child_open(const void *arg)
{
    rt_npy a;
    rt_npy_open(&a, tpath(arg));
    /* Touch every byte the header promised: ASan/the MMU would catch a lie. */
    unsigned sum = 0;
    for (int64_t i = 0; i < a.rows * a.row_bytes; i++)
        sum += a.data[i];
    rt_npy_close(&a);
    exit(sum == 12345678 ? 0 : 0);
}

/* ---- the test model: x u8 [3], y i32 [] with 4 classes ---------------------- */

static const rt_input xy_inputs[2] = {
    {.name = "x", .dtype = RT_U8, .rank = 1, .shape = {3}, .numel = 3},
    {.name = "y", .dtype = RT_I32, .rank = 0, .numel = 1, .classes = 4},
};
static const rt_model xy_model = {.abi = RT_ABI_VERSION, .name = "xy", .n_inputs = 2,
                                  .inputs = xy_inputs};
enum { XY_N = 10 };

/* Row r: x = {3r, 3r+1, 3r+2}, y = r % 4. */
static void write_xy(const char *xname, const char *yname)
{
    unsigned char x[XY_N * 3];
    int32_t y[XY_N];
    for (int r = 0; r < XY_N; r++) {
        for (int j = 0; j < 3; j++)
            x[r * 3 + j] = (unsigned char)(3 * r + j);
        y[r] = r % 4;
    }
    write_npy(xname, 1, "|u1", "(10, 3)", x, sizeof x);
    write_npy(yname, 2, "<i4", "(10,)", y, sizeof y);
}

typedef struct ds_case {
    const rt_model *m;
    rt_data_entry e[4];
    int n;
} ds_case;

static void child_dataset(const void *arg)
{
    const ds_case *c = arg;
    rt_dataset d;
    rt_dataset_open(&d, c->m, c->e, c->n, tmpdir, "train", -1);
    rt_dataset_close(&d);
}

static ds_case ds2(const rt_model *m, const char *x, const char *y)
{
    ds_case c = {.m = m, .n = 2};
    snprintf(c.e[0].key, sizeof c.e[0].key, "x");
    snprintf(c.e[0].path, sizeof c.e[0].path, "%s", x);
    snprintf(c.e[1].key, sizeof c.e[1].key, "y");
    snprintf(c.e[1].path, sizeof c.e[1].path, "%s", y);
    return c;
}

/* ---- random numbers ---------------------------------------------------------- */

static int test_rng(void)
{
    /* Reference values: xoshiro256** seeded by splitmix64 (checked against an
     * independent Python implementation). */
    rt_rng r;
    rt_rng_seed(&r, 0);
    CHECK(rt_rng_u64(&r) == 0x99ec5f36cb75f2b4ull);
    CHECK(rt_rng_u64(&r) == 0xbf6e1f784956452aull);
    CHECK(rt_rng_u64(&r) == 0x1a5f849d4933e6e0ull);
    rt_rng_seed(&r, 1337);
    CHECK(rt_rng_u64(&r) == 0xad0aa0a04f822edcull);
    CHECK(rt_rng_u64(&r) == 0xd0815851ce885defull);
    CHECK(rt_rng_u64(&r) == 0xc70b17471e263e43ull);

    rt_rng a, b;
    rt_rng_seed(&a, 42);
    rt_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++)
        CHECK(rt_rng_u64(&a) == rt_rng_u64(&b));
    rt_rng_seed(&b, 43);
    CHECK(rt_rng_u64(&a) != rt_rng_u64(&b));

    double s = 0, s2 = 0, lo = 1, hi = 0;
    enum { N = 200000 };
    rt_rng_seed(&r, 7);
    for (int i = 0; i < N; i++) {
        double u = rt_rng_uniform(&r);
        CHECK(u >= 0 && u < 1);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        s += u;
    }
    CHECK(fabs(s / N - 0.5) < 0.01 && lo < 0.001 && hi > 0.999);
    s = 0;
    for (int i = 0; i < N; i++) {
        double z = rt_rng_normal(&r);
        CHECK(isfinite(z));
        s += z;
        s2 += z * z;
    }
    CHECK(fabs(s / N) < 0.02 && fabs(s2 / N - 1) < 0.02);
    return 1;
}

/* Jumping ahead n draws lands where n draws land (init_params fills the parameters
 * on all threads from jumped states and must give the sequential fill's bits). */
static int test_rng_jump(void)
{
    static const uint64_t n[] = {0, 1, 2, 3, 63, 64, 255, 256, 257, 1000, 65537, 1234567};
    for (size_t i = 0; i < sizeof n / sizeof *n; i++) {
        rt_rng a, b;
        rt_rng_seed(&a, 1337 + i);
        b = a;
        for (uint64_t k = 0; k < n[i]; k++)
            rt_rng_u64(&a);
        rt_rng_jump(&b, n[i]);
        CHECK(!memcmp(&a, &b, sizeof a));
        CHECK(rt_rng_u64(&a) == rt_rng_u64(&b));
    }
    /* far jumps compose: (2^62 + 12345) + (2^63 - 1) = 2^63 + 2^62 + 12344 */
    rt_rng a, b;
    rt_rng_seed(&a, 9);
    b = a;
    rt_rng_jump(&a, (1ull << 62) + 12345);
    rt_rng_jump(&a, (1ull << 63) - 1);
    rt_rng_jump(&b, (1ull << 63) + (1ull << 62) + 12344);
    CHECK(!memcmp(&a, &b, sizeof a));
    rt_rng_seed(&a, 9);
    b = a;
    rt_rng_jump(&a, 1ull << 63);
    rt_rng_jump(&a, 1ull << 63);
    rt_rng_jump_pow2(&b, 64);
    CHECK(!memcmp(&a, &b, sizeof a));
    /* the authors' jump() (2^128 draws) and long_jump() (2^192), as published with
     * xoshiro256**: the characteristic polynomial found at run time is theirs */
    static const uint64_t JUMP[4] = {0x180ec6d33cfd0abaull, 0xd5a61266f0c9392cull,
                                     0xa9582618e03fc9aaull, 0x39abdc4529b1661cull};
    static const uint64_t LONG_JUMP[4] = {0x76e15d3efefdcbbfull, 0xc5004e441c522fb3ull,
                                          0x77710069854ee241ull, 0x39109bb02acbe635ull};
    rt_rng_seed(&a, 5);
    b = a;
    rt_rng_apply_poly(&a, JUMP);
    rt_rng_jump_pow2(&b, 128);
    CHECK(!memcmp(&a, &b, sizeof a));
    rt_rng_apply_poly(&a, LONG_JUMP);
    rt_rng_jump_pow2(&b, 192);
    CHECK(!memcmp(&a, &b, sizeof a));
    return 1;
}

/* rt_init_params on 1 to 7 threads: the bits of one sequential pass through the stream
 * (the loop below is the fill as it was before the pool took it over). Tensors of every
 * rule and of sizes that make the threads' parts start inside tensors of each kind;
 * offsets not in model order. */
static int test_init_params(void)
{
    static const struct { int init; float a; int64_t n; } t[] = {
        {RT_INIT_NORMAL, 0.02f, 100003}, {RT_INIT_CONST, 1.0f, 7}, {RT_INIT_UNIFORM, 0.5f, 333},
        {RT_INIT_NORMAL, 1.0f, 250001}, {RT_INIT_CONST, 0.0f, 70001}, {RT_INIT_UNIFORM, 0.125f, 90000},
        {RT_INIT_NORMAL, 3.0f, 1}};
    enum { NT = sizeof t / sizeof *t };
    rt_param p[NT];
    int64_t total = 0;
    for (int i = 0; i < NT; i++)
        total += t[i].n;
    int64_t off = total;
    for (int i = 0; i < NT; i++) {
        off -= t[i].n;
        p[i] = (rt_param){.name = "w", .rank = 1, .shape = {t[i].n}, .numel = t[i].n, .offset = off,
                          .init = t[i].init, .init_a = t[i].a};
    }
    rt_model m = {.n_params = NT, .params = p, .param_floats = total, .n_trainable = NT,
                  .trainable_floats = total};
    float *want = malloc((size_t)total * sizeof *want), *got = malloc((size_t)total * sizeof *got);
    rt_rng rng;
    rt_rng_seed(&rng, 1337);
    for (int i = 0; i < NT; i++)
        for (int64_t k = 0; k < p[i].numel; k++) {
            float *w = want + p[i].offset;
            switch (p[i].init) {
            case RT_INIT_UNIFORM: w[k] = (float)((2.0 * rt_rng_uniform(&rng) - 1.0) * p[i].init_a); break;
            case RT_INIT_NORMAL: w[k] = (float)(rt_rng_normal(&rng) * p[i].init_a); break;
            default: w[k] = p[i].init_a; break;
            }
        }
    for (int threads = 1; threads <= 7; threads++) {
        rt_pool *pool = rt_pool_new(threads);
        memset(got, 0xff, (size_t)total * sizeof *got);
        rt_init_params(pool, &m, got, 1337);
        CHECK(!memcmp(want, got, (size_t)total * sizeof *got));
        rt_pool_free(pool);
    }
    free(want);
    free(got);
    return 1;
}

/* ---- .npy reading ----------------------------------------------------------------- */

static int test_npy_u8_v1(void)
{
    unsigned char x[5 * 6];
    for (int i = 0; i < 30; i++)
        x[i] = (unsigned char)(i * 7);
    write_npy("u8.npy", 1, "|u1", "(5, 2, 3)", x, sizeof x);
    rt_npy a;
    rt_npy_open(&a, tpath("u8.npy"));
    CHECK(a.dtype == RT_U8 && a.rank == 3 && a.rows == 5 && a.row_bytes == 6);
    CHECK(a.elem_bytes == 1 && a.shape[1] == 2 && a.shape[2] == 3);
    CHECK(memcmp(a.data, x, sizeof x) == 0);
    int64_t idx[3] = {4, 0, 2};
    unsigned char out[18];
    rt_npy_gather(&a, idx, 3, out, RT_U8);
    CHECK(memcmp(out, x + 24, 6) == 0 && memcmp(out + 6, x, 6) == 0 &&
          memcmp(out + 12, x + 12, 6) == 0);
    rt_npy_close(&a);
    CHECK(a.map == NULL);
    return 1;
}

static int test_npy_kinds(void)
{
    rt_npy a;
    /* v2.0 header, i32 vector */
    int32_t y[7] = {3, -1, 4, 1, -5, 9, 2};
    write_npy("i32.npy", 2, "<i4", "(7,)", y, sizeof y);
    rt_npy_open(&a, tpath("i32.npy"));
    CHECK(a.dtype == RT_I32 && a.rank == 1 && a.rows == 7 && a.row_bytes == 4);
    int64_t idx[2] = {6, 4};
    int32_t o[2];
    rt_npy_gather(&a, idx, 2, o, RT_I32);
    CHECK(o[0] == 2 && o[1] == -5);
    rt_npy_close(&a);

    /* v3.0 header, f32, double quotes, keys reordered, odd spacing */
    float f[12];
    for (int i = 0; i < 12; i++)
        f[i] = 0.5f * (float)i - 1;
    write_npy_dict("f32.npy", 3, "{ \"shape\" : ( 4 ,3 ) ,\"fortran_order\":False,"
                                 "\"descr\":\"<f4\"}", f, sizeof f);
    rt_npy_open(&a, tpath("f32.npy"));
    CHECK(a.dtype == RT_F32 && a.rank == 2 && a.rows == 4 && a.row_bytes == 12);
    int64_t i3[1] = {3};
    float of[3];
    rt_npy_gather(&a, i3, 1, of, RT_F32);
    CHECK(of[0] == f[9] && of[1] == f[10] && of[2] == f[11]);
    rt_npy_close(&a);

    /* i64 read as i32 */
    int64_t l[12];
    for (int i = 0; i < 12; i++)
        l[i] = (i % 2 ? -1 : 1) * (int64_t)i * 100000;
    write_npy("i64.npy", 1, "<i8", "(6, 2)", l, sizeof l);
    rt_npy_open(&a, tpath("i64.npy"));
    CHECK(a.dtype == RT_I64 && a.rows == 6 && a.row_bytes == 16 && a.elem_bytes == 8);
    int64_t i2[2] = {5, 1};
    int32_t o4[4];
    rt_npy_gather(&a, i2, 2, o4, RT_I32);
    CHECK(o4[0] == 1000000 && o4[1] == -1100000 && o4[2] == 200000 && o4[3] == -300000);
    rt_npy_close(&a);

    /* u16, Python 2 long suffix, list instead of tuple; '<u1' spelling */
    uint16_t u[3] = {65535, 0, 300};
    write_npy("u16.npy", 1, "<u2", "[3L]", u, sizeof u);
    rt_npy_open(&a, tpath("u16.npy"));
    CHECK(a.dtype == RT_U16 && a.rows == 3 && a.row_bytes == 2);
    CHECK(memcmp(a.data, u, sizeof u) == 0);
    rt_npy_close(&a);
    unsigned char b[2] = {1, 2};
    write_npy("lu1.npy", 1, "<u1", "(2,)", b, 2);
    rt_npy_open(&a, tpath("lu1.npy"));
    CHECK(a.dtype == RT_U8 && a.rows == 2);
    rt_npy_close(&a);

    /* zero rows is a valid array */
    write_npy("empty.npy", 1, "<f4", "(0, 3)", NULL, 0);
    rt_npy_open(&a, tpath("empty.npy"));
    CHECK(a.rows == 0 && a.row_bytes == 12);
    rt_npy_close(&a);
    return 1;
}

static int test_npy_errors(void)
{
    unsigned char x[12] = {0};
    int ok = 1;
    write_raw("bad_magic.npy", "\x93NUMPZ\x01\x00\x10\x00{}                              ", 40);
    ok &= expect_input_error(child_open, "bad_magic.npy", "bad_magic.npy", "not a .npy file",
                             "bad magic", NULL);
    write_raw("short.npy", "\x93NUM", 4);
    ok &= expect_input_error(child_open, "short.npy", "short.npy", "not a .npy file", NULL);
    write_raw("zero.npy", "", 0);
    ok &= expect_input_error(child_open, "zero.npy", "not a .npy file", NULL);
    write_npy("trunc.npy", 1, "|u1", "(5, 3)", x, 12);
    ok &= expect_input_error(child_open, "trunc.npy", "trunc.npy", "header says 5 rows of 3 bytes",
                             "only 12 bytes", NULL);
    write_raw("trunc_hdr.npy", "\x93NUMPY\x01\x00\xff\x7f{'descr'", 19);
    ok &= expect_input_error(child_open, "trunc_hdr.npy", "truncated .npy header", NULL);
    write_raw("trunc_v2.npy", "\x93NUMPY\x02\x00\x01\x00\x00", 11);
    ok &= expect_input_error(child_open, "trunc_v2.npy", "truncated .npy header", NULL);
    write_npy("big.npy", 1, ">f4", "(3,)", x, 12);
    ok &= expect_input_error(child_open, "big.npy", "big.npy", "big-endian", "'>f4'", NULL);
    write_npy("i1.npy", 1, "|i1", "(3,)", x, 3);
    ok &= expect_input_error(child_open, "i1.npy", "unsupported dtype '|i1'", NULL);
    write_npy("f8.npy", 1, "<f8", "(1,)", x, 8);
    ok &= expect_input_error(child_open, "f8.npy", "unsupported dtype '<f8'", NULL);
    write_npy_dict("fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 3)}",
                   x, 12);
    ok &= expect_input_error(child_open, "fortran.npy", "fortran.npy",
                             "fortran_order arrays are not supported", NULL);
    write_npy("huge.npy", 1, "<f4", "(4611686018427387904, 4611686018427387904, 2)", x, 12);
    ok &= expect_input_error(child_open, "huge.npy", "impossibly large", NULL);
    write_npy("huge2.npy", 1, "<i8", "(576460752303423488,)", x, 12);
    ok &= expect_input_error(child_open, "huge2.npy", "header says", NULL);
    write_npy("toolong.npy", 1, "<f4", "(99999999999999999999,)", x, 12);
    ok &= expect_input_error(child_open, "toolong.npy", "bad .npy header", "too large", NULL);
    write_npy_dict("nokey.npy", 1, "{'descr': '<f4', 'fortran_order': False}", x, 12);
    ok &= expect_input_error(child_open, "nokey.npy", "missing 'shape'", NULL);
    write_npy_dict("dupkey.npy", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                                    "'shape': (3,)}", x, 12);
    ok &= expect_input_error(child_open, "dupkey.npy", "repeated key 'descr'", NULL);
    write_npy_dict("garbage.npy", 1, "{'descr' '<f4'", x, 12);
    ok &= expect_input_error(child_open, "garbage.npy", "garbage.npy", "bad .npy header", NULL);
    write_npy_dict("unterminated.npy", 1, "{'descr': '<f4", x, 12);
    ok &= expect_input_error(child_open, "unterminated.npy", "unterminated string", NULL);
    write_npy_dict("struct.npy", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, "
                                    "'shape': (3,)}", x, 12);
    ok &= expect_input_error(child_open, "struct.npy", "structured", NULL);
    write_npy("scalar.npy", 1, "<f4", "()", x, 4);
    ok &= expect_input_error(child_open, "scalar.npy", "0-d", NULL);
    write_npy("rank9.npy", 1, "<f4", "(1,1,1,1,1,1,1,1,1)", x, 4);
    ok &= expect_input_error(child_open, "rank9.npy", "more than 8 dimensions", NULL);
    unsigned char v4[64] = "\x93NUMPY\x04\x00\x10\x00";
    write_raw("v4.npy", v4, sizeof v4);
    ok &= expect_input_error(child_open, "v4.npy", "unsupported .npy version 4.0", NULL);
    ok &= expect_input_error(child_open, "does_not_exist.npy", "does_not_exist.npy",
                             "cannot open", "No such file or directory", NULL);
    return ok;
}

/* Mutates bytes of a valid file at random: opening must either succeed and read
 * only what exists, or exit 1; never crash (the child runs under the sanitizers). */
static int test_npy_fuzz(void)
{
    float f[6] = {1, 2, 3, 4, 5, 6};
    write_npy("seed.npy", 1, "<f4", "(2, 3)", f, sizeof f);
    FILE *fp = fopen(tpath("seed.npy"), "rb");
    CHECK(fp);
    unsigned char orig[256];
    size_t n = fread(orig, 1, sizeof orig, fp);
    CHECK(fclose(fp) == 0 && n == 128 + 24);
    rt_rng r;
    rt_rng_seed(&r, 99);
    for (int t = 0; t < 300; t++) {
        unsigned char buf[256];
        memcpy(buf, orig, n);
        size_t len = n;
        int k = 1 + (int)(rt_rng_u64(&r) % 4);
        for (int i = 0; i < k; i++) {
            size_t pos = rt_rng_u64(&r) % 128;   /* the preamble and header */
            static const char pool[] = "0123456789(),:'\"{} L\x93\xff\x00";
            buf[pos] = (rt_rng_u64(&r) & 1) ? (unsigned char)rt_rng_u64(&r)
                                            : (unsigned char)pool[rt_rng_u64(&r) % 23];
        }
        if (rt_rng_u64(&r) % 4 == 0)
            len = rt_rng_u64(&r) % (n + 1);
        write_raw("fuzz.npy", buf, len);
        char err[4096];
        int code = run_child(child_open, "fuzz.npy", err, sizeof err);
        if (code != 0 && code != 1) {
            fprintf(stderr, "  fuzz case %d: exit %d: %s", t, code, err);
            return 0;
        }
    }
    return 1;
}

/* ---- datasets --------------------------------------------------------------------- */

static int test_dataset(void)
{
    write_xy("x.npy", "y.npy");
    ds_case c = ds2(&xy_model, "x.npy", "y.npy");
    rt_dataset d;
    rt_dataset_open(&d, &xy_model, c.e, c.n, tmpdir, "train", -1);
    CHECK(d.n == 2 && d.rows == XY_N && d.arr[0].dtype == RT_U8 && d.arr[1].dtype == RT_I32);
    rt_dataset_close(&d);
    /* an absolute path ignores base_dir; entry order does not matter */
    ds_case c2 = ds2(&xy_model, "y.npy", tpath("x.npy"));
    snprintf(c2.e[0].key, sizeof c2.e[0].key, "y");
    snprintf(c2.e[1].key, sizeof c2.e[1].key, "x");
    rt_dataset_open(&d, &xy_model, c2.e, c2.n, tmpdir, "val", -1);
    CHECK(d.rows == XY_N);
    rt_dataset_close(&d);
    /* i64 labels for an i32 input */
    int64_t y64[XY_N];
    for (int r = 0; r < XY_N; r++)
        y64[r] = r % 4;
    write_npy("y64.npy", 1, "<i8", "(10,)", y64, sizeof y64);
    c = ds2(&xy_model, "x.npy", "y64.npy");
    rt_dataset_open(&d, &xy_model, c.e, c.n, tmpdir, "train", -1);
    CHECK(d.arr[1].dtype == RT_I64);
    rt_dataset_close(&d);
    return 1;
}

static int test_dataset_errors(void)
{
    int ok = 1;
    unsigned char x[XY_N * 4] = {0};
    int32_t y[XY_N] = {0};
    write_npy("x_shape.npy", 1, "|u1", "(10, 4)", x, 40);
    ds_case c = ds2(&xy_model, "x_shape.npy", "y.npy");
    ok &= expect_input_error(child_dataset, &c, "x_shape.npy", "$.train.data.train.x",
                             "per-sample shape [4]", "does not match", "[3]", NULL);
    write_npy("x_rank.npy", 1, "|u1", "(10, 3, 1)", x, 30);
    c = ds2(&xy_model, "x_rank.npy", "y.npy");
    ok &= expect_input_error(child_dataset, &c, "per-sample shape [3, 1]", NULL);
    /* (10, 1) would do for a scalar target: one value a sample either way */
    int32_t y2[2 * XY_N] = {0};
    write_npy("y_2d.npy", 1, "<i4", "(10, 2)", y2, sizeof y2);
    c = ds2(&xy_model, "x.npy", "y_2d.npy");
    ok &= expect_input_error(child_dataset, &c, "y_2d.npy", "per-sample shape [2]", "[]", NULL);
    c = ds2(&xy_model, "x.npy", "x.npy");
    ok &= expect_input_error(child_dataset, &c, "$.train.data.train.y", "dtype u8",
                             "does not match model input 'y' (i32)", NULL);
    int32_t bad[XY_N] = {0, 1, 2, 3, 0, 1, 2, 9, 0, 1};
    write_npy("y_bad.npy", 1, "<i4", "(10,)", bad, sizeof bad);
    c = ds2(&xy_model, "x.npy", "y_bad.npy");
    ok &= expect_input_error(child_dataset, &c, "y_bad.npy", "row 7", "label 9",
                             "outside [0, 4)", NULL);
    int32_t neg[XY_N] = {0, -1};
    write_npy("y_neg.npy", 1, "<i4", "(10,)", neg, sizeof neg);
    c = ds2(&xy_model, "x.npy", "y_neg.npy");
    ok &= expect_input_error(child_dataset, &c, "row 1", "label -1", NULL);
    write_npy("y_short.npy", 1, "<i4", "(9,)", y, 36);
    c = ds2(&xy_model, "x.npy", "y_short.npy");
    ok &= expect_input_error(child_dataset, &c, "y_short.npy", "9 rows", "has 10", NULL);
    c = ds2(&xy_model, "x.npy", "y.npy");
    c.n = 1;
    ok &= expect_input_error(child_dataset, &c, "$.train.data.train", "no file for model input 'y'",
                             NULL);
    c = ds2(&xy_model, "x.npy", "y.npy");
    snprintf(c.e[2].key, sizeof c.e[2].key, "z");
    snprintf(c.e[2].path, sizeof c.e[2].path, "y.npy");
    c.n = 3;
    ok &= expect_input_error(child_dataset, &c, "$.train.data.train.z", "no input named 'z'",
                             NULL);
    c = ds2(&xy_model, "missing_x.npy", "y.npy");
    ok &= expect_input_error(child_dataset, &c, "missing_x.npy", "cannot open", NULL);
    /* i64 value beyond i32 for an input without classes */
    static const rt_input i_inputs[1] = {
        {.name = "t", .dtype = RT_I32, .rank = 1, .shape = {2}, .numel = 2}};
    static const rt_model i_model = {.name = "t", .n_inputs = 1, .inputs = i_inputs};
    int64_t big[4] = {1, 2, 3, (int64_t)1 << 40};
    write_npy("t_big.npy", 1, "<i8", "(2, 2)", big, sizeof big);
    ds_case ct = {.m = &i_model, .n = 1};
    snprintf(ct.e[0].key, sizeof ct.e[0].key, "t");
    snprintf(ct.e[0].path, sizeof ct.e[0].path, "t_big.npy");
    ok &= expect_input_error(child_dataset, &ct, "t_big.npy", "row 1", "1099511627776",
                             "does not fit in i32", NULL);
    return ok;
}

/* ---- the loader ----------------------------------------------------------------------- */

/* The documented order rule, written out again independently of data.c. */
static void ref_order(int64_t *order, int64_t n, int shuffle, uint64_t seed, int64_t epoch)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    rt_rng r;
    rt_rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1)));
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t m = (uint64_t)i + 1, x;
        do
            x = rt_rng_u64(&r);
        while (x < (0 - m) % m);
        int64_t j = (int64_t)(x % m), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Checks that batch b holds rows order[k*B ...] with the xy pattern. */
static int check_xy_batch(const rt_batch *b, const int64_t *order, int64_t B, int64_t epoch,
                          int64_t k, int drop_last)
{
    int64_t want_rows = XY_N - k * B < B ? XY_N - k * B : B;
    CHECK(b && b->epoch == epoch && b->index == k && b->rows == want_rows);
    CHECK(!drop_last || b->rows == B);
    const unsigned char *x = b->in[0];
    const int32_t *y = b->in[1];
    for (int64_t i = 0; i < b->rows; i++) {
        int64_t r = order[k * B + i];
        CHECK(x[3 * i] == 3 * r && x[3 * i + 1] == 3 * r + 1 && x[3 * i + 2] == 3 * r + 2);
        CHECK(y[i] == r % 4);
    }
    return 1;
}

static int test_loader_xy(void)
{
    ds_case c = ds2(&xy_model, "x.npy", "y.npy");
    rt_dataset d;
    rt_dataset_open(&d, &xy_model, c.e, c.n, tmpdir, "train", -1);
    const int64_t B = 4;
    const uint64_t seed = 1337;
    int64_t order[XY_N], prev[XY_N];
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int drop = 0; drop <= 1; drop++)
            for (int workers = 0; workers <= 3; workers += workers ? 2 : 1)
                for (int prefetch = 1; prefetch <= 4; prefetch *= 2) {
                    rt_loader *l = rt_loader_new(&xy_model, &d, B, shuffle, drop, seed, workers,
                                                 prefetch);
                    CHECK(rt_loader_batches(l) == (drop ? 2 : 3));
                    for (int64_t e = 0; e < 2; e++) {
                        ref_order(order, XY_N, shuffle, seed, e);
                        /* a permutation */
                        int seen[XY_N] = {0};
                        for (int i = 0; i < XY_N; i++)
                            seen[order[i]]++;
                        for (int i = 0; i < XY_N; i++)
                            CHECK(seen[i] == 1);
                        if (e == 1 && shuffle)
                            CHECK(memcmp(order, prev, sizeof order) != 0);
                        memcpy(prev, order, sizeof order);
                        rt_loader_start(l, e, 0);
                        for (int64_t k = 0; k < rt_loader_batches(l); k++)
                            CHECK(check_xy_batch(rt_loader_next(l), order, B, e, k, drop));
                        CHECK(rt_loader_next(l) == NULL);
                        CHECK(rt_loader_next(l) == NULL);
                    }
                    /* mid-epoch start, also while batches are being prefetched */
                    rt_loader_start(l, 0, 0);
                    CHECK(rt_loader_next(l) != NULL);
                    rt_loader_start(l, 1, 1);
                    ref_order(order, XY_N, shuffle, seed, 1);
                    for (int64_t k = 1; k < rt_loader_batches(l); k++)
                        CHECK(check_xy_batch(rt_loader_next(l), order, B, 1, k, drop));
                    CHECK(rt_loader_next(l) == NULL);
                    /* start past the end: an empty epoch */
                    rt_loader_start(l, 5, 99);
                    CHECK(rt_loader_next(l) == NULL);
                    rt_loader_free(l);
                }
    /* without a start the loader delivers epoch 0 from batch 0 */
    rt_loader *l = rt_loader_new(&xy_model, &d, B, 1, 0, seed, 2, 2);
    ref_order(order, XY_N, 1, seed, 0);
    CHECK(check_xy_batch(rt_loader_next(l), order, B, 0, 0, 0));
    rt_loader_free(l);
    /* a loader freed before any use, and one freed with batches in flight */
    rt_loader_free(rt_loader_new(&xy_model, &d, B, 1, 0, seed, 3, 4));
    l = rt_loader_new(&xy_model, &d, 1, 1, 0, seed, 3, 4);
    rt_loader_start(l, 3, 0);
    rt_loader_free(l);
    /* batch larger than the dataset */
    l = rt_loader_new(&xy_model, &d, 16, 0, 1, seed, 1, 1);
    CHECK(rt_loader_batches(l) == 0);
    rt_loader_start(l, 0, 0);
    CHECK(rt_loader_next(l) == NULL);
    rt_loader_free(l);
    l = rt_loader_new(&xy_model, &d, 16, 0, 0, seed, 1, 1);
    CHECK(rt_loader_batches(l) == 1);
    ref_order(order, XY_N, 0, seed, 0);
    CHECK(check_xy_batch(rt_loader_next(l), order, 16, 0, 0, 0));
    rt_loader_free(l);
    rt_dataset_close(&d);
    return 1;
}

/* Ids and labels of u8/u16 files (SPEC.md's input dtypes): x u16 [3] feeds an embedding
 * of vocab 300, y u8 [] is a class target of 4 classes, both read as i32 by the kernels
 * (rt_input.widen). Bad values are caught when the files are opened, train or val,
 * naming the file, row and element; the loader's batches hold the values as i32. */
static const rt_input id_inputs[2] = {
    {.name = "x", .dtype = RT_U16, .rank = 1, .shape = {3}, .numel = 3, .vocab = 300, .widen = 1},
    {.name = "y", .dtype = RT_U8, .rank = 0, .numel = 1, .classes = 4, .widen = 1},
};
static const rt_model id_model = {.abi = RT_ABI_VERSION, .name = "ids", .n_inputs = 2,
                                  .inputs = id_inputs};

static void child_dataset_val(const void *arg)
{
    const ds_case *c = arg;
    rt_dataset d;
    rt_dataset_open(&d, c->m, c->e, c->n, tmpdir, "val", -1);
    rt_dataset_close(&d);
}

static int test_ids(void)
{
    /* row r: x = {30r, 30r + 1, 299 - r}, y = r % 4 */
    uint16_t x[XY_N * 3];
    unsigned char y[XY_N];
    for (int r = 0; r < XY_N; r++) {
        x[3 * r] = (uint16_t)(30 * r);
        x[3 * r + 1] = (uint16_t)(30 * r + 1);
        x[3 * r + 2] = (uint16_t)(299 - r);
        y[r] = (unsigned char)(r % 4);
    }
    write_npy("id_x.npy", 1, "<u2", "(10, 3)", x, sizeof x);
    write_npy("id_y.npy", 1, "|u1", "(10,)", y, sizeof y);
    ds_case c = ds2(&id_model, "id_x.npy", "id_y.npy");
    rt_dataset d;
    rt_dataset_open(&d, &id_model, c.e, c.n, tmpdir, "train", -1);
    rt_loader *l = rt_loader_new(&id_model, &d, 4, 1, 0, 7, 2, 2);
    int64_t order[XY_N];
    ref_order(order, XY_N, 1, 7, 0);
    rt_loader_start(l, 0, 0);
    for (int64_t k = 0; k < 3; k++) {
        const rt_batch *b = rt_loader_next(l);
        CHECK(b && b->rows == (k < 2 ? 4 : 2));
        const int32_t *bx = b->in[0], *by = b->in[1];
        for (int64_t i = 0; i < b->rows; i++) {
            int64_t r = order[4 * k + i];
            CHECK(bx[3 * i] == 30 * r && bx[3 * i + 1] == 30 * r + 1 && bx[3 * i + 2] == 299 - r);
            CHECK(by[i] == r % 4);
        }
    }
    CHECK(rt_loader_next(l) == NULL);
    rt_loader_free(l);
    /* rt_npy_gather widens on its own too */
    int64_t idx[2] = {9, 0};
    int32_t o[6];
    rt_npy_gather(&d.arr[0], idx, 2, o, RT_I32);
    CHECK(o[0] == 270 && o[1] == 271 && o[2] == 290 && o[3] == 0 && o[4] == 1 && o[5] == 299);
    rt_npy_gather(&d.arr[1], idx, 2, o, RT_I32);
    CHECK(o[0] == 1 && o[1] == 0);
    rt_dataset_close(&d);

    int ok = 1;
    x[3 * 6 + 2] = 300;   /* row 6, element 2: one past the vocabulary */
    write_npy("id_x_big.npy", 1, "<u2", "(10, 3)", x, sizeof x);
    c = ds2(&id_model, "id_x_big.npy", "id_y.npy");
    ok &= expect_input_error(child_dataset, &c, "id_x_big.npy", "$.train.data.train.x",
                             "row 6, element 2: id 300 is outside [0, 300)",
                             "model input 'x' feeds an embedding with vocab 300", NULL);
    ok &= expect_input_error(child_dataset_val, &c, "id_x_big.npy", "$.train.data.val.x",
                             "row 6, element 2: id 300", NULL);
    y[8] = 4;
    write_npy("id_y_big.npy", 1, "|u1", "(10,)", y, sizeof y);
    c = ds2(&id_model, "id_x.npy", "id_y_big.npy");
    ok &= expect_input_error(child_dataset, &c, "id_y_big.npy", "row 8: label 4 is outside [0, 4)",
                             NULL);
    /* the files must hold the declared dtype: i32 ids for a u16 input are refused */
    int32_t x32[XY_N * 3] = {0};
    write_npy("id_x32.npy", 1, "<i4", "(10, 3)", x32, sizeof x32);
    c = ds2(&id_model, "id_x32.npy", "id_y.npy");
    ok &= expect_input_error(child_dataset, &c, "id_x32.npy", "dtype i32 does not match model "
                             "input 'x' (u16)", NULL);
    /* an i32 input with a vocab: negative ids too */
    static const rt_input n_inputs[1] = {
        {.name = "t", .dtype = RT_I32, .rank = 1, .shape = {2}, .numel = 2, .vocab = 5}};
    static const rt_model n_model = {.name = "t", .n_inputs = 1, .inputs = n_inputs};
    int32_t t[4] = {0, 4, -1, 2};
    write_npy("t_neg.npy", 1, "<i4", "(2, 2)", t, sizeof t);
    ds_case ct = {.m = &n_model, .n = 1};
    snprintf(ct.e[0].key, sizeof ct.e[0].key, "t");
    snprintf(ct.e[0].path, sizeof ct.e[0].path, "t_neg.npy");
    ok &= expect_input_error(child_dataset, &ct, "t_neg.npy", "row 1, element 0: id -1 is outside "
                             "[0, 5)", NULL);
    return ok;
}

/* Many restarts at random points with several workers: every batch must still be
 * exactly what the order rule says (run under -fsanitize=thread for races).
 * Model: t i32 [2] from an i64 file (t = {r, -7r}), u u16 [] (u = r * 3). */
static int test_loader_stress(void)
{
    enum { N = 1000 };
    static const rt_input in[2] = {
        {.name = "t", .dtype = RT_I32, .rank = 1, .shape = {2}, .numel = 2},
        {.name = "u", .dtype = RT_U16, .rank = 0, .numel = 1},
    };
    static const rt_model m = {.name = "stress", .n_inputs = 2, .inputs = in};
    static int64_t t[N * 2];
    static uint16_t u[N];
    for (int r = 0; r < N; r++) {
        t[2 * r] = r;
        t[2 * r + 1] = -7 * r;
        u[r] = (uint16_t)(3 * r);
    }
    write_npy("t.npy", 2, "<i8", "(1000, 2)", t, sizeof t);
    write_npy("u.npy", 1, "<u2", "(1000,)", u, sizeof u);
    ds_case c = {.m = &m, .n = 2};
    snprintf(c.e[0].key, sizeof c.e[0].key, "t");
    snprintf(c.e[0].path, sizeof c.e[0].path, "t.npy");
    snprintf(c.e[1].key, sizeof c.e[1].key, "u");
    snprintf(c.e[1].path, sizeof c.e[1].path, "u.npy");
    rt_dataset d;
    rt_dataset_open(&d, &m, c.e, c.n, tmpdir, "train", -1);
    const int64_t B = 7;
    rt_loader *l = rt_loader_new(&m, &d, B, 1, 0, 5, 3, 2);
    CHECK(rt_loader_batches(l) == 143);
    static int64_t order[N];
    rt_rng r;
    rt_rng_seed(&r, 1);
    for (int round = 0; round < 150; round++) {
        int64_t e = (int64_t)(rt_rng_u64(&r) % 4);
        int64_t first = (int64_t)(rt_rng_u64(&r) % 150);
        int64_t take = (int64_t)(rt_rng_u64(&r) % 12);
        if (round % 10 == 0)
            take = 200;   /* sometimes run to the end */
        ref_order(order, N, 1, 5, e);
        rt_loader_start(l, e, first);
        for (int64_t k = first; k < first + take; k++) {
            const rt_batch *b = rt_loader_next(l);
            if (k >= 143) {
                CHECK(b == NULL);
                break;
            }
            CHECK(b && b->index == k && b->epoch == e);
            CHECK(b->rows == (k == 142 ? N - 142 * B : B));
            const int32_t *bt = b->in[0];
            const uint16_t *bu = b->in[1];
            for (int64_t i = 0; i < b->rows; i++) {
                int64_t row = order[k * B + i];
                CHECK(bt[2 * i] == row && bt[2 * i + 1] == -7 * row && bu[i] == 3 * row);
            }
        }
    }
    rt_loader_free(l);
    rt_dataset_close(&d);
    return 1;
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_data.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    report("rng", test_rng());
    report("rng_jump", test_rng_jump());
    report("init_params", test_init_params());
    report("npy_u8_v1", test_npy_u8_v1());
    report("npy_kinds", test_npy_kinds());
    report("npy_errors", test_npy_errors());
    report("npy_fuzz", test_npy_fuzz());
    report("dataset", test_dataset());
    report("dataset_errors", test_dataset_errors());
    report("ids", test_ids());
    report("loader_xy", test_loader_xy());
    report("loader_stress", test_loader_stress());
    for (int i = 0; i < n_made; i++)
        if (unlink(made[i]) != 0)
            perror(made[i]);
    if (rmdir(tmpdir) != 0)
        perror(tmpdir);
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures != 0;
}
