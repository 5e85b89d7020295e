/* test_tokens.c: unit tests of token shards in runtime/data.c (SPEC.md sections 3
 * and 5): writing and reading shards, the windows of a dataset of shards, the
 * loader's token batches, and every bad-shard error. Bad-input cases run in a
 * forked child whose exit code and stderr are checked. Prints "ok NAME" /
 * "FAIL NAME" lines; exits 1 on failure.
 *
 *   cc -std=gnu11 -O1 -g -fsanitize=address,undefined -Iruntime tests/unit/test_tokens.c \
 *      runtime/data.c runtime/util.c -lpthread -lm -o build/test_tokens */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "rt.h"

static int failures;
static char tmpdir[256];
static char made[256][300];    /* files and folders made, removed at the end (reversed) */
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

/* ---- test files ---------------------------------------------------------------- */

static const char *tpath(const char *name)
{
    static char buf[4][300];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void remember(const char *p)
{
    for (int i = 0; i < n_made; i++)
        if (strcmp(made[i], p) == 0)
            return;
    if (n_made < 256)
        snprintf(made[n_made++], sizeof made[0], "%s", p);
}

static void make_dir(const char *name)
{
    const char *p = tpath(name);
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        perror(p);
        exit(2);
    }
    remember(p);
}

static void write_raw(const char *name, const void *bytes, size_t n)
{
    const char *p = tpath(name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(bytes, 1, n, f) != n) || fclose(f) != 0) {
        perror(p);
        exit(2);
    }
    remember(p);
}

/* A shard written byte by byte here, independently of rt_shard_write: header
 * {magic, version, count} (the rest zero), then `ntok` tokens. `count` may lie. */
static void write_shard_raw(const char *name, int32_t magic, int32_t version, int32_t count,
                            const uint16_t *tok, size_t ntok)
{
    size_t n = 1024 + 2 * ntok;
    unsigned char *b = calloc(1, n);
    int32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            b[4 * i + j] = (unsigned char)((uint32_t)h[i] >> (8 * j));
    for (size_t i = 0; i < ntok; i++) {
        b[1024 + 2 * i] = (unsigned char)tok[i];
        b[1024 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
    }
    write_raw(name, b, n);
    free(b);
}

/* The same for uint32 tokens (magic 20240801, version 7). */
static void write_shard32_raw(const char *name, int32_t magic, int32_t version, int32_t count,
                              const uint32_t *tok, size_t ntok)
{
    size_t n = 1024 + 4 * ntok;
    unsigned char *b = calloc(1, n);
    int32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            b[4 * i + j] = (unsigned char)((uint32_t)h[i] >> (8 * j));
    for (size_t i = 0; i < ntok; i++)
        for (int j = 0; j < 4; j++)
            b[1024 + 4 * i + j] = (unsigned char)(tok[i] >> (8 * j));
    write_raw(name, b, n);
    free(b);
}

static void write_shard(const char *name, const uint16_t *tok, size_t ntok)
{
    write_shard_raw(name, 20240520, 1, (int32_t)ntok, tok, ntok);
}

/* ---- forked error cases --------------------------------------------------------- */

#include "child.h"

/* ---- models: x, y i32 [T], optionally with classes ------------------------------- */

typedef struct tok_model {
    rt_input in[2];
    rt_model m;
} tok_model;

static void tok_model_init(tok_model *t, int64_t T, int64_t classes_x, int64_t classes_y)
{
    memset(t, 0, sizeof *t);
    t->in[0] = (rt_input){.name = "x", .dtype = RT_I32, .rank = 1, .shape = {T}, .numel = T,
                          .classes = classes_x};
    t->in[1] = (rt_input){.name = "y", .dtype = RT_I32, .rank = 1, .shape = {T}, .numel = T,
                          .classes = classes_y};
    t->m = (rt_model){.abi = RT_ABI_VERSION, .name = "tok", .n_inputs = 2, .inputs = t->in};
}

typedef struct tok_case {
    const rt_model *m;
    rt_data_entry e[2];
    int n;
    const char *what;
} tok_case;

static tok_case tokens_entry(const rt_model *m, const char *glob)
{
    tok_case c = {.m = m, .n = 1, .what = "train"};
    snprintf(c.e[0].key, sizeof c.e[0].key, "tokens");
    snprintf(c.e[0].path, sizeof c.e[0].path, "%s", glob);
    return c;
}

static void child_dataset(const void *arg)
{
    const tok_case *c = arg;
    rt_dataset d;
    rt_dataset_open(&d, c->m, c->e, c->n, tmpdir, c->what, -1);
    rt_dataset_close(&d);
}

static void child_shard(const void *arg)
{
    rt_shard s;
    rt_shard_open(&s, tpath(arg), 0, NULL);
    /* Touch every token the header promised: ASan/the MMU would catch a lie. */
    unsigned sum = 0;
    for (int64_t i = 0; i < s.ntok; i++)
        sum += rt_shard_token(&s, i);
    rt_shard_close(&s);
    exit(sum == 12345678 ? 0 : 0);
}

/* ---- the reference: windows and orders written out independently ------------------ */

/* Window w of shards given as arrays (in sorted order): fills x, y [T]. Returns 0
 * when w is past the last window. */
static int ref_window(const uint16_t *const *tok, const int64_t *ntok, int ns, int64_t T,
                      int64_t w, int32_t *x, int32_t *y)
{
    for (int s = 0; s < ns; s++)
        for (int64_t off = 0; off + T + 1 <= ntok[s]; off += T, w--)
            if (w == 0) {
                for (int64_t t = 0; t < T; t++) {
                    x[t] = tok[s][off + t];
                    y[t] = tok[s][off + t + 1];
                }
                return 1;
            }
    return 0;
}

/* The order rule of data.c's loader comment, again. */
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

/* ---- shards ---------------------------------------------------------------------- */

static int file_size(const char *p, int64_t *n)
{
    struct stat st;
    if (stat(p, &st) != 0)
        return 0;
    *n = st.st_size;
    return 1;
}

static int test_shard_roundtrip(void)
{
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++)
        tok[i] = (uint16_t)(i * 7919u);
    tok[0] = 0;
    tok[1] = 65535;
    const char *p = tpath("rt16.bin");
    remember(p);
    CHECK(rt_shard_write(p, tok, 2, 1000) == 0);
    int64_t size;
    CHECK(file_size(p, &size) && size == 1024 + 2000);
    CHECK(access(tpath("rt16.bin.tmp"), F_OK) != 0);   /* renamed, not left behind */
    /* the bytes themselves, read without the runtime */
    FILE *f = fopen(p, "rb");
    CHECK(f);
    unsigned char b[1024 + 2000];
    CHECK(fread(b, 1, sizeof b, f) == sizeof b && fclose(f) == 0);
    CHECK(b[0] == 0x88 && b[1] == 0xd8 && b[2] == 0x34 && b[3] == 0x01);   /* 20240520 LE */
    CHECK(b[4] == 1 && b[5] == 0 && b[8] == 0xe8 && b[9] == 0x03 && b[10] == 0 && b[11] == 0);
    for (int i = 12; i < 1024; i++)
        CHECK(b[i] == 0);
    CHECK(b[1024 + 2] == 0xff && b[1024 + 3] == 0xff);

    rt_shard s;
    rt_shard_open(&s, p, 0, NULL);
    CHECK(s.ntok == 1000 && memcmp(s.tok, tok, sizeof tok) == 0);
    CHECK(strcmp(s.path, p) == 0);
    rt_shard_close(&s);
    CHECK(s.map == NULL && s.tok == NULL);

    /* bytes widen to tokens 0..255 */
    unsigned char bytes[300];
    for (int i = 0; i < 300; i++)
        bytes[i] = (unsigned char)(255 - i % 256);
    p = tpath("rt8.bin");
    remember(p);
    CHECK(rt_shard_write(p, bytes, 1, 300) == 0);
    rt_shard_open(&s, p, 256, "bytes");
    CHECK(s.ntok == 300);
    for (int i = 0; i < 300; i++)
        CHECK(s.width == 2 && rt_shard_token(&s, i) == bytes[i]);
    rt_shard_close(&s);

    /* more tokens than one chunk of the writer's buffer (32768) */
    enum { BIG = 100003 };
    static uint16_t big[BIG];
    for (int i = 0; i < BIG; i++)
        big[i] = (uint16_t)(i ^ (i >> 3));
    p = tpath("big.bin");
    remember(p);
    CHECK(rt_shard_write(p, big, 2, BIG) == 0);
    rt_shard_open(&s, p, 0, NULL);
    CHECK(s.ntok == BIG && memcmp(s.tok, big, sizeof big) == 0);
    rt_shard_close(&s);

    /* an empty shard is a valid shard */
    p = tpath("empty.bin");
    remember(p);
    CHECK(rt_shard_write(p, NULL, 2, 0) == 0);
    rt_shard_open(&s, p, 10, NULL);
    CHECK(s.ntok == 0);
    rt_shard_close(&s);

    /* an unwritable place: -1 with errno, nothing left behind */
    errno = 0;
    CHECK(rt_shard_write(tpath("no_such_dir/x.bin"), tok, 2, 10) == -1 && errno == ENOENT);
    CHECK(rt_shard_write(tpath("x.bin"), tok, 2, (int64_t)INT32_MAX + 1) == -1 &&
          errno == EFBIG);
    CHECK(access(tpath("x.bin"), F_OK) != 0 && access(tpath("x.bin.tmp"), F_OK) != 0);
    return 1;
}

/* ---- windows over several shards -------------------------------------------------- */

/* Three shards: tokens = 1000 * shard + position, so every token says where it came
 * from. Created in an order unlike the sorted one (s_10 < s_2 < s_a bytewise). */
enum { NS = 3 };
static const char *const win_names[NS] = {"win/s_10.bin", "win/s_2.bin", "win/s_a.bin"};
static const int64_t win_len[NS] = {13, 4, 10};   /* s_2 is shorter than T + 1 = 5 */
static uint16_t win_tok[NS][16];

static void write_windows(void)
{
    make_dir("win");
    int create_order[NS] = {2, 0, 1};
    for (int k = 0; k < NS; k++) {
        int s = create_order[k];
        for (int64_t i = 0; i < win_len[s]; i++)
            win_tok[s][i] = (uint16_t)(1000 * (s + 1) + i);
        write_shard(win_names[s], win_tok[s], (size_t)win_len[s]);
    }
}

/* Every window of dataset d against the reference, through a loader in order. */
static int check_all_windows(const rt_model *m, const rt_dataset *d, int64_t T)
{
    const uint16_t *tok[NS] = {win_tok[0], win_tok[1], win_tok[2]};
    rt_loader *l = rt_loader_new(m, d, 2, 0, 0, 1, 0, 1);
    int32_t x[16], y[16];
    int64_t w = 0;
    for (const rt_batch *b; (b = rt_loader_next(l));)
        for (int64_t i = 0; i < b->rows; i++, w++) {
            CHECK(ref_window(tok, win_len, NS, T, w, x, y));
            CHECK(memcmp((const int32_t *)b->in[0] + i * T, x, (size_t)T * 4) == 0);
            CHECK(memcmp((const int32_t *)b->in[1] + i * T, y, (size_t)T * 4) == 0);
        }
    CHECK(w == d->rows && !ref_window(tok, win_len, NS, T, w, x, y));
    rt_loader_free(l);
    return 1;
}

static int test_windows(void)
{
    write_windows();
    tok_model tm;
    tok_model_init(&tm, 4, 0, 0);
    tok_case c = tokens_entry(&tm.m, "win/s_*.bin");
    rt_dataset d;
    rt_dataset_open(&d, &tm.m, c.e, c.n, tmpdir, "train", -1);
    /* floor((13-1)/4) + 0 + floor((10-1)/4) = 3 + 0 + 2 */
    CHECK(d.tokens && d.n == 2 && d.T == 4 && d.n_shards == 3 && d.rows == 5);
    CHECK(strstr(d.shards[0].path, "s_10.bin") && strstr(d.shards[1].path, "s_2.bin") &&
          strstr(d.shards[2].path, "s_a.bin"));
    CHECK(d.win_start[0] == 0 && d.win_start[1] == 3 && d.win_start[2] == 3 &&
          d.win_start[3] == 5);
    /* spelled out once: window 3 is s_a at offset 0, window 4 at offset 4 */
    rt_loader *l = rt_loader_new(&tm.m, &d, 5, 0, 1, 1, 0, 1);
    const rt_batch *b = rt_loader_next(l);
    CHECK(b && b->rows == 5);
    const int32_t *x = b->in[0], *y = b->in[1];
    CHECK(x[0] == 1000 && x[3] == 1003 && y[0] == 1001 && y[3] == 1004);
    CHECK(x[2 * 4] == 1008 && y[2 * 4 + 3] == 1012);       /* last window of s_10 */
    CHECK(x[3 * 4] == 3000 && y[3 * 4 + 3] == 3004);
    CHECK(x[4 * 4] == 3004 && x[4 * 4 + 3] == 3007 && y[4 * 4 + 3] == 3008);
    CHECK(rt_loader_next(l) == NULL);
    rt_loader_free(l);
    CHECK(check_all_windows(&tm.m, &d, 4));
    rt_dataset_close(&d);
    CHECK(d.shards == NULL && d.n_shards == 0);

    /* T = 1: every token but the last starts a window; s_2 now has 3. An absolute
     * glob ignores base_dir. */
    tok_model_init(&tm, 1, 0, 0);
    c = tokens_entry(&tm.m, tpath("win/s_*.bin"));
    rt_dataset_open(&d, &tm.m, c.e, c.n, "/nonexistent", "val", -1);
    CHECK(d.rows == 12 + 3 + 9);
    CHECK(check_all_windows(&tm.m, &d, 1));
    rt_dataset_close(&d);

    /* T + 1 == the longest shard: exactly one window */
    tok_model_init(&tm, 12, 0, 0);
    c = tokens_entry(&tm.m, "win/*.bin");
    rt_dataset_open(&d, &tm.m, c.e, c.n, tmpdir, "train", -1);
    CHECK(d.rows == 1);
    CHECK(check_all_windows(&tm.m, &d, 12));
    rt_dataset_close(&d);

    /* a plain path (no wildcard) is a glob matching one file */
    tok_model_init(&tm, 4, 0, 0);
    c = tokens_entry(&tm.m, "win/s_a.bin");
    rt_dataset_open(&d, &tm.m, c.e, c.n, tmpdir, "train", -1);
    CHECK(d.n_shards == 1 && d.rows == 2);
    rt_dataset_close(&d);
    return 1;
}

/* ---- loader.documents: the model's positions from each window's tokens -------------- */

/* x, the positions (second, so the next tokens are the third) and y, each [T] */
typedef struct doc_model {
    rt_input in[3];
    rt_model m;
    int64_t documents;
} doc_model;

static void doc_model_init(doc_model *t, int64_t T, int positions, int64_t documents)
{
    memset(t, 0, sizeof *t);
    t->in[0] = (rt_input){.name = "x", .dtype = RT_I32, .rank = 1, .shape = {T}, .numel = T};
    t->in[1] = (rt_input){.name = "pos", .dtype = RT_I32, .rank = 1, .shape = {T}, .numel = T,
                          .positions = positions};
    t->in[2] = (rt_input){.name = "y", .dtype = RT_I32, .rank = 1, .shape = {T}, .numel = T};
    t->m = (rt_model){.abi = RT_ABI_VERSION, .name = "doc", .n_inputs = 3, .inputs = t->in};
    t->documents = documents;
}

static void child_documents(const void *arg)
{
    const doc_model *t = arg;
    tok_case c = tokens_entry(&t->m, "win/s_a.bin");
    rt_dataset d;
    rt_dataset_open(&d, &t->m, c.e, c.n, tmpdir, "train", t->documents);
    rt_dataset_close(&d);
}

/* s_a's tokens 3000 .. 3009 (test_windows wrote them) in windows of 4, a document
 * beginning at 3002: positions 0 1 0 1, then 0 1 2 3 (a window starts one) */
static int test_documents(void)
{
    doc_model t;
    doc_model_init(&t, 4, 1, 3002);
    tok_case c = tokens_entry(&t.m, "win/s_a.bin");
    rt_dataset d;
    rt_dataset_open(&d, &t.m, c.e, c.n, tmpdir, "train", 3002);
    CHECK(d.tokens && d.n == 3 && d.pos_in == 1 && d.y_in == 2 && d.rows == 2);
    rt_loader *l = rt_loader_new(&t.m, &d, 2, 0, 1, 1, 0, 1);
    const rt_batch *b = rt_loader_next(l);
    CHECK(b && b->rows == 2);
    const int32_t *x = b->in[0], *pos = b->in[1], *y = b->in[2];
    static const int32_t want[8] = {0, 1, 0, 1, 0, 1, 2, 3};
    CHECK(memcmp(pos, want, sizeof want) == 0);
    CHECK(x[0] == 3000 && x[7] == 3007 && y[0] == 3001 && y[7] == 3008);
    rt_loader_free(l);
    rt_dataset_close(&d);
    int ok = 1;
    doc_model_init(&t, 4, 1, -1);   /* positions, no loader.documents */
    ok &= expect_input_error(child_documents, &t, "$.train.data.train.tokens",
                             "token shards hold no positions", "loader.documents", NULL);
    doc_model_init(&t, 4, 0, 3002);   /* loader.documents, no positions */
    ok &= expect_input_error(child_documents, &t, "$.train.loader.documents",
                             "the model has none", NULL);
    return ok;
}

/* ---- shuffled batches: deterministic, independent of workers ---------------------- */

enum { SH_T = 8 };
static const int64_t sh_len[3] = {1001, 5, 777};   /* 125 + 0 + 97 windows */
static uint16_t sh_tok[3][1001];

/* All batches of epochs 0 and 1, concatenated: x then y of each batch. */
static int run_epochs(const rt_model *m, const rt_dataset *d, int64_t B, int shuffle, int drop,
                      uint64_t seed, int workers, int prefetch, int32_t *out, int64_t *n_out)
{
    rt_loader *l = rt_loader_new(m, d, B, shuffle, drop, seed, workers, prefetch);
    int64_t n = 0;
    for (int64_t e = 0; e < 2; e++) {
        rt_loader_start(l, e, 0);
        int64_t k = 0;
        for (const rt_batch *b; (b = rt_loader_next(l)); k++) {
            CHECK(b->epoch == e && b->index == k);
            CHECK(drop ? b->rows == B : b->rows >= 1 && b->rows <= B);
            memcpy(out + n, b->in[0], (size_t)(b->rows * SH_T) * 4);
            n += b->rows * SH_T;
            memcpy(out + n, b->in[1], (size_t)(b->rows * SH_T) * 4);
            n += b->rows * SH_T;
        }
        CHECK(k == rt_loader_batches(l));
    }
    rt_loader_free(l);
    *n_out = n;
    return 1;
}

static int test_shuffle(void)
{
    make_dir("sh");
    static const char *const names[3] = {"sh/a.bin", "sh/b.bin", "sh/c.bin"};
    for (int s = 0; s < 3; s++) {
        for (int64_t i = 0; i < sh_len[s]; i++)
            sh_tok[s][i] = (uint16_t)(s * 20000 + i * 13 % 1009);
        write_shard(names[s], sh_tok[s], (size_t)sh_len[s]);
    }
    tok_model tm;
    tok_model_init(&tm, SH_T, 0, 60000);
    tok_case c = tokens_entry(&tm.m, "sh/*.bin");
    rt_dataset d;
    rt_dataset_open(&d, &tm.m, c.e, c.n, tmpdir, "train", -1);
    enum { NW = 125 + 97 };
    CHECK(d.rows == NW);
    const uint16_t *tok[3] = {sh_tok[0], sh_tok[1], sh_tok[2]};
    const int64_t B = 16;
    const uint64_t seed = 1337;
    static int32_t ref[2 * 2 * NW * SH_T], got[2 * 2 * NW * SH_T];
    static int64_t order[NW];
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int drop = 0; drop <= 1; drop++) {
            /* the reference stream: windows in the documented order */
            int64_t n = 0, nb = drop ? NW / B : (NW + B - 1) / B;
            for (int64_t e = 0; e < 2; e++) {
                ref_order(order, NW, shuffle, seed, e);
                for (int64_t k = 0; k < nb; k++) {
                    int64_t rows = NW - k * B < B ? NW - k * B : B;
                    int32_t *x = ref + n, *y = ref + n + rows * SH_T;
                    for (int64_t i = 0; i < rows; i++)
                        CHECK(ref_window(tok, sh_len, 3, SH_T, order[k * B + i], x + i * SH_T,
                                         y + i * SH_T));
                    n += 2 * rows * SH_T;
                }
            }
            for (int workers = 0; workers <= 4; workers += workers < 1 ? 1 : 3)
                for (int prefetch = 1; prefetch <= 3; prefetch += 2) {
                    int64_t m = 0;
                    CHECK(run_epochs(&tm.m, &d, B, shuffle, drop, seed, workers, prefetch, got,
                                     &m));
                    CHECK(m == n && memcmp(got, ref, (size_t)n * 4) == 0);
                }
        }
    /* shuffling does shuffle, per epoch and per seed */
    int64_t o0[NW], o1[NW], o2[NW];
    ref_order(o0, NW, 1, seed, 0);
    ref_order(o1, NW, 1, seed, 1);
    ref_order(o2, NW, 1, seed + 1, 0);
    CHECK(memcmp(o0, o1, sizeof o0) != 0 && memcmp(o0, o2, sizeof o0) != 0);
    int64_t a = 0, b = 0;
    CHECK(run_epochs(&tm.m, &d, B, 1, 0, seed, 2, 2, got, &a));
    CHECK(run_epochs(&tm.m, &d, B, 1, 0, seed + 1, 2, 2, ref, &b));
    CHECK(a == b && memcmp(got, ref, (size_t)a * 4) != 0);
    /* a restart mid-epoch gives the same batches as the full epoch */
    rt_loader *l = rt_loader_new(&tm.m, &d, B, 1, 0, seed, 3, 2);
    rt_loader_start(l, 1, 0);
    static int32_t full[NW * SH_T];
    int64_t k = 0;
    for (const rt_batch *bt; (bt = rt_loader_next(l)); k++)
        if (k == 5)
            memcpy(full, bt->in[1], (size_t)(bt->rows * SH_T) * 4);
    rt_loader_start(l, 1, 5);
    const rt_batch *bt = rt_loader_next(l);
    CHECK(bt && bt->index == 5 && memcmp(full, bt->in[1], (size_t)(B * SH_T) * 4) == 0);
    rt_loader_free(l);
    rt_dataset_close(&d);
    return 1;
}

/* ---- the vocabulary check ------------------------------------------------------------ */

static int test_vocab(void)
{
    make_dir("voc");
    uint16_t tok[20];
    for (int i = 0; i < 20; i++)
        tok[i] = (uint16_t)(i * 15);   /* 0 .. 285 */
    write_shard("voc/a.bin", tok, 20);
    tok[7] = 299;
    write_shard("voc/b.bin", tok, 20);
    tok[7] = 300;
    write_shard("voc/c.bin", tok, 20);
    int ok = 1;
    tok_model t300, t290x, tnone, t65536;
    tok_model_init(&t300, 4, 0, 300);
    tok_model_init(&t290x, 4, 290, 300);
    tok_model_init(&tnone, 4, 0, 0);
    tok_model_init(&t65536, 4, 65536, 0);
    rt_dataset d;
    tok_case c = tokens_entry(&t300.m, "voc/[ab].bin");
    rt_dataset_open(&d, &t300.m, c.e, c.n, tmpdir, "train", -1);
    ok &= d.rows == 2 * 4;
    rt_dataset_close(&d);
    /* 300 is outside [0, 300): the file and the position are named */
    c = tokens_entry(&t300.m, "voc/*.bin");
    ok &= expect_input_error(child_dataset, &c, "voc/c.bin", "token 300 at position 7",
                             "outside the vocabulary [0, 300)", "model input 'y' has 300 classes",
                             NULL);
    /* the smaller vocabulary of the two inputs applies (each token feeds both) */
    /* (a.bin holds 0..285 only: it passes; b.bin's 299 does not) */
    c = tokens_entry(&t290x.m, "voc/a.bin");
    rt_dataset_open(&d, &t290x.m, c.e, c.n, tmpdir, "train", -1);
    rt_dataset_close(&d);
    c = tokens_entry(&t290x.m, "voc/b.bin");
    ok &= expect_input_error(child_dataset, &c, "voc/b.bin", "token 299 at position 7",
                             "[0, 290)", "model input 'x' has 290 classes", NULL);
    /* an embedding's vocab (rt_input.vocab) is a bound too, below the classes here:
     * the ids the embedding reads are checked at load, not in its kernel mid-run */
    tok_model temb;
    tok_model_init(&temb, 4, 0, 300);
    temb.in[0].vocab = 286;
    c = tokens_entry(&temb.m, "voc/a.bin");
    rt_dataset_open(&d, &temb.m, c.e, c.n, tmpdir, "train", -1);   /* 0 .. 285 */
    rt_dataset_close(&d);
    c = tokens_entry(&temb.m, "voc/b.bin");
    ok &= expect_input_error(child_dataset, &c, "voc/b.bin", "token 299 at position 7",
                             "[0, 286)", "model input 'x' feeds an embedding with vocab 286",
                             NULL);
    c.what = "val";
    ok &= expect_input_error(child_dataset, &c, "voc/b.bin", "token 299 at position 7", NULL);
    temb.in[0].vocab = 0;
    temb.in[1].vocab = 250;   /* on y (a model may embed its targets): the smaller applies */
    c = tokens_entry(&temb.m, "voc/a.bin");
    ok &= expect_input_error(child_dataset, &c, "voc/a.bin", "token 255 at position 17",
                             "[0, 250)", "model input 'y' feeds an embedding with vocab 250",
                             NULL);
    /* no classes, or a vocabulary above every uint16: nothing to check */
    c = tokens_entry(&tnone.m, "voc/*.bin");
    rt_dataset_open(&d, &tnone.m, c.e, c.n, tmpdir, "train", -1);
    ok &= d.rows == 3 * 4;
    rt_dataset_close(&d);
    c = tokens_entry(&t65536.m, "voc/*.bin");
    rt_dataset_open(&d, &t65536.m, c.e, c.n, tmpdir, "train", -1);
    rt_dataset_close(&d);
    /* positions around the scan's chunks of 4096 tokens */
    enum { NV = 10000 };
    static uint16_t many[NV];
    const int64_t where[] = {0, 4095, 4096, 8191, 8195, NV - 1};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        for (int i = 0; i < NV; i++)
            many[i] = (uint16_t)(i % 300);
        many[where[k]] = 300;
        write_shard("voc/many.bin", many, NV);
        char pos[64];
        snprintf(pos, sizeof pos, "token 300 at position %" PRId64 " ", where[k]);
        c = tokens_entry(&t300.m, "voc/many.bin");
        ok &= expect_input_error(child_dataset, &c, "voc/many.bin", pos, NULL);
    }
    /* rt_shard_open on its own */
    rt_shard s;
    rt_shard_open(&s, tpath("voc/c.bin"), 301, NULL);
    rt_shard_close(&s);
    return ok;
}

/* ---- errors ---------------------------------------------------------------------------- */

static int test_shard_errors(void)
{
    int ok = 1;
    uint16_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    write_shard_raw("magic.bin", 20240521, 1, 10, tok, 10);
    ok &= expect_input_error(child_shard, "magic.bin", "magic.bin", "not a token shard",
                             "bad magic 20240521", "20240520", NULL);
    write_shard_raw("version.bin", 20240520, 2, 10, tok, 10);
    ok &= expect_input_error(child_shard, "version.bin", "version.bin",
                             "unsupported token shard version 2", NULL);
    write_shard_raw("count.bin", 20240520, 1, 11, tok, 10);
    ok &= expect_input_error(child_shard, "count.bin", "count.bin", "header says 11 tokens",
                             "only 20 bytes", "truncated", NULL);
    write_shard_raw("hugecount.bin", 20240520, 1, INT32_MAX, tok, 10);
    ok &= expect_input_error(child_shard, "hugecount.bin", "hugecount.bin",
                             "header says 2147483647 tokens", NULL);
    write_shard_raw("negcount.bin", 20240520, 1, -5, tok, 10);
    ok &= expect_input_error(child_shard, "negcount.bin", "negative token count -5", NULL);
    write_shard_raw("extra.bin", 20240520, 1, 9, tok, 10);
    ok &= expect_input_error(child_shard, "extra.bin", "extra.bin", "header says 9 tokens",
                             "holds 20 bytes", NULL);
    unsigned char hdr[1023] = {0x88, 0xd8, 0x34, 0x01, 1};
    write_raw("short.bin", hdr, sizeof hdr);
    ok &= expect_input_error(child_shard, "short.bin", "short.bin", "not a token shard",
                             "only 1023 bytes", "shorter than the 1024-byte header", NULL);
    write_raw("zero.bin", "", 0);
    ok &= expect_input_error(child_shard, "zero.bin", "zero.bin", "only 0 bytes", NULL);
    ok &= expect_input_error(child_shard, "missing.bin", "missing.bin", "cannot open",
                             "No such file or directory", NULL);
    make_dir("adir.bin");
    ok &= expect_input_error(child_shard, "adir.bin", "adir.bin", "not a regular file", NULL);
    return ok;
}

/* Mutated headers and lengths: opening must succeed and read only what exists, or
 * exit 1; never crash (the child runs under the sanitizers). */
static int test_shard_fuzz(void)
{
    uint16_t tok[40];
    for (int i = 0; i < 40; i++)
        tok[i] = (uint16_t)i;
    unsigned char orig[1024 + 80] = {0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0, 40};
    memcpy(orig + 1024, tok, 80);
    rt_rng r;
    rt_rng_seed(&r, 7);
    for (int t = 0; t < 200; t++) {
        unsigned char buf[sizeof orig];
        memcpy(buf, orig, sizeof orig);
        size_t len = sizeof orig;
        for (int i = 0, k = 1 + (int)(rt_rng_u64(&r) % 3); i < k; i++)
            buf[rt_rng_u64(&r) % 16] = (unsigned char)rt_rng_u64(&r);
        if (rt_rng_u64(&r) % 3 == 0)
            len = rt_rng_u64(&r) % (sizeof orig + 1);
        write_raw("fuzz.bin", buf, len);
        char err[4096];
        int code = run_child(child_shard, "fuzz.bin", err, sizeof err);
        if (code != 0 && code != 1) {
            fprintf(stderr, "  fuzz case %d: exit %d: %s", t, code, err);
            return 0;
        }
    }
    return 1;
}

static int test_dataset_errors(void)
{
    int ok = 1;
    tok_model tm;
    tok_model_init(&tm, 128, 0, 0);
    /* a glob matching nothing, relative to base_dir and absolute */
    tok_case c = tokens_entry(&tm.m, "data/x/*.bin");
    ok &= expect_input_error(child_dataset, &c, "$.train.data.train.tokens", "no file matches",
                             "/data/x/*.bin'", NULL);
    c = tokens_entry(&tm.m, "/nonexistent_trainc/*.bin");
    c.what = "val";
    ok &= expect_input_error(child_dataset, &c, "$.train.data.val.tokens",
                             "no file matches '/nonexistent_trainc/*.bin'", NULL);
    /* shards that hold no window of T + 1 tokens (win/: 13, 4 and 10 tokens) */
    c = tokens_entry(&tm.m, "win/s_*.bin");
    ok &= expect_input_error(child_dataset, &c, "train data: shards matching '",
                             "win/s_*.bin' hold no window of T+1 = 129 tokens", "3 shards",
                             "the longest has 13 tokens", NULL);
    tok_model t13;
    tok_model_init(&t13, 13, 0, 0);
    c = tokens_entry(&t13.m, "win/s_10.bin");
    c.what = "val";
    ok &= expect_input_error(child_dataset, &c, "val data: shards matching",
                             "no window of T+1 = 14 tokens", "1 shard,", NULL);
    /* a bad shard among good ones is named */
    make_dir("mixed");
    uint16_t tok[20] = {0};
    write_shard("mixed/a.bin", tok, 20);
    write_shard_raw("mixed/b.bin", 20240520, 1, 30, tok, 20);
    tok_model t4;
    tok_model_init(&t4, 4, 0, 0);
    c = tokens_entry(&t4.m, "mixed/*.bin");
    ok &= expect_input_error(child_dataset, &c, "mixed/b.bin", "header says 30 tokens", NULL);
    /* tokens with other entries; models that do not fit token data */
    c = tokens_entry(&t4.m, "win/*.bin");
    snprintf(c.e[1].key, sizeof c.e[1].key, "x");
    snprintf(c.e[1].path, sizeof c.e[1].path, "x.npy");
    c.n = 2;
    ok &= expect_input_error(child_dataset, &c, "tokens must be the only entry of data.train",
                             NULL);
    tok_model bad;
    tok_model_init(&bad, 4, 0, 0);
    bad.in[1].dtype = RT_U16;
    c = tokens_entry(&bad.m, "win/*.bin");
    ok &= expect_input_error(child_dataset, &c, "$.train.data.train.tokens",
                             "two i32 inputs of shape [T]", NULL);
    tok_model_init(&bad, 4, 0, 0);
    bad.in[1].shape[0] = 5;
    bad.in[1].numel = 5;
    ok &= expect_input_error(child_dataset, &c, "two i32 inputs of shape [T]", NULL);
    tok_model_init(&bad, 4, 0, 0);
    bad.m.n_inputs = 1;
    ok &= expect_input_error(child_dataset, &c, "two i32 inputs of shape [T]", NULL);
    return ok;
}

/* ---- uint32 shards (vocabularies over 65536) ------------------------------------ */

static int test_shard32(void)
{
    /* rt_shard_write's bytes: magic 20240801, version 7, count, then LE uint32 */
    enum { N32 = 20000 };   /* more than one chunk of the writer's buffer (16384) */
    static uint32_t tok[N32];
    for (int i = 0; i < N32; i++)
        tok[i] = (uint32_t)i * 2654435761u % 128256u;
    tok[0] = 128255;
    tok[1] = 65536;
    tok[2] = 0;
    const char *p = tpath("rt32.bin");
    remember(p);
    CHECK(rt_shard_write(p, tok, 4, N32) == 0);
    int64_t size;
    CHECK(file_size(p, &size) && size == 1024 + 4 * N32);
    FILE *f = fopen(p, "rb");
    CHECK(f);
    unsigned char b[1024 + 8];
    CHECK(fread(b, 1, sizeof b, f) == sizeof b && fclose(f) == 0);
    CHECK(b[0] == 0xa1 && b[1] == 0xd9 && b[2] == 0x34 && b[3] == 0x01);   /* 20240801 LE */
    CHECK(b[4] == 7 && b[5] == 0 && b[8] == 0x20 && b[9] == 0x4e && b[10] == 0);   /* 20000 */
    for (int i = 12; i < 1024; i++)
        CHECK(b[i] == 0);
    CHECK(b[1024] == 0xff && b[1025] == 0xf4 && b[1026] == 0x01 && b[1027] == 0);  /* 128255 */
    CHECK(b[1028] == 0 && b[1029] == 0 && b[1030] == 1 && b[1031] == 0);           /* 65536 */
    rt_shard s;
    rt_shard_open(&s, p, 128256, "llama 3");
    CHECK(s.width == 4 && s.ntok == N32 && memcmp(s.tok, tok, sizeof tok) == 0);
    CHECK(rt_shard_token(&s, 0) == 128255 && rt_shard_token(&s, 1) == 65536);
    rt_shard_close(&s);

    /* windows of a uint32 shard reach the i32 inputs whole: ids above 65535 */
    make_dir("w32");
    uint32_t w[41];
    for (int i = 0; i < 41; i++)
        w[i] = 70000u * (uint32_t)(i % 2) + (uint32_t)i;   /* 0, 70001, 2, 70003, ... */
    write_shard32_raw("w32/a.bin", 20240801, 7, 41, w, 41);
    tok_model tm;
    tok_model_init(&tm, 8, 0, 0);
    tm.in[0].vocab = 70041;
    tok_case c = tokens_entry(&tm.m, "w32/*.bin");
    rt_dataset d;
    rt_dataset_open(&d, &tm.m, c.e, c.n, tmpdir, "train", -1);
    CHECK(d.rows == 5 && d.shards[0].width == 4);
    rt_loader *l = rt_loader_new(&tm.m, &d, 5, 0, 1, 1, 0, 1);
    const rt_batch *bt = rt_loader_next(l);
    CHECK(bt && bt->rows == 5);
    const int32_t *x = bt->in[0], *y = bt->in[1];
    for (int i = 0; i < 5; i++)
        for (int t = 0; t < 8; t++)
            CHECK(x[8 * i + t] == (int32_t)w[8 * i + t] && y[8 * i + t] == (int32_t)w[8 * i + t + 1]);
    rt_loader_free(l);
    uint64_t fp = rt_dataset_fingerprint(&d);
    rt_dataset_close(&d);
    /* the fingerprint covers the uint32 tokens' high halves */
    w[3] += 1u << 20;
    write_shard32_raw("w32/a.bin", 20240801, 7, 41, w, 41);
    tm.in[0].vocab = 0;
    rt_dataset_open(&d, &tm.m, c.e, c.n, tmpdir, "train", -1);
    CHECK(rt_dataset_fingerprint(&d) != fp);
    rt_dataset_close(&d);
    return 1;
}

static int test_vocab32(void)
{
    int ok = 1;
    make_dir("v32");
    uint32_t tok[40];
    for (int i = 0; i < 40; i++)
        tok[i] = 69960u + (uint32_t)i;   /* 69960 .. 69999 */
    write_shard32_raw("v32/a.bin", 20240801, 7, 40, tok, 40);
    tok[31] = 70000;
    write_shard32_raw("v32/b.bin", 20240801, 7, 40, tok, 40);
    tok_model tm;
    tok_model_init(&tm, 4, 0, 70000);
    tm.in[0].vocab = 70000;
    tok_case c;
    rt_dataset d;
    /* a vocabulary over 65535 no longer says "every token fits": uint32 ids are read;
     * the scan's maximum (70000) is cached, in a cache folder of this test's own, and
     * the second open fails on the cached maximum as the first did on the scan */
    char cache[300], pat[400], entry[400];
    snprintf(cache, sizeof cache, "%s", tpath("v32cache"));
    setenv("TRAINC_CACHE_DIR", cache, 1);
    c = tokens_entry(&tm.m, "v32/*.bin");
    for (int pass = 0; pass < 2; pass++)
        ok &= expect_input_error(child_dataset, &c, "v32/b.bin", "token 70000 at position 31",
                                 "outside the vocabulary [0, 70000)", NULL);
    /* entries "KEY MAX" hold maxima above 65535 (a.bin's 69999, b.bin's 70000) */
    glob_t g;
    snprintf(pat, sizeof pat, "%s/shards/*", cache);
    CHECK(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc == 2);
    remember(cache);
    snprintf(pat, sizeof pat, "%s/shards", cache);
    remember(pat);
    int seen = 0;
    for (size_t k = 0; k < g.gl_pathc; k++) {
        FILE *f = fopen(g.gl_pathv[k], "r");
        CHECK(f && fgets(entry, sizeof entry, f));
        fclose(f);
        remember(g.gl_pathv[k]);
        CHECK(strncmp(entry, "trainc-shard-max ", 17) == 0);
        seen |= (strstr(entry, " 69999\n") != NULL) | (strstr(entry, " 70000\n") != NULL) << 1;
    }
    globfree(&g);
    CHECK(seen == 3);
    c = tokens_entry(&tm.m, "v32/a.bin");   /* passes on its cached 69999 */
    rt_dataset_open(&d, &tm.m, c.e, c.n, tmpdir, "train", -1);
    rt_dataset_close(&d);
    unsetenv("TRAINC_CACHE_DIR");
    /* no vocabulary: ids must still fit the i32 inputs */
    tok[5] = 0x80000000u;
    write_shard32_raw("v32/big.bin", 20240801, 7, 40, tok, 40);
    tok_model tn;
    tok_model_init(&tn, 4, 0, 0);
    c = tokens_entry(&tn.m, "v32/big.bin");
    ok &= expect_input_error(child_dataset, &c, "v32/big.bin", "token 2147483648 at position 5",
                             "[0, 2147483648)", "token ids are read as i32", NULL);
    /* header errors of the uint32 format */
    write_shard32_raw("v32/ver.bin", 20240801, 1, 40, tok, 40);
    ok &= expect_input_error(child_shard, "v32/ver.bin", "unsupported token shard version 1",
                             "magic 20240801: 7", NULL);
    write_shard32_raw("v32/short.bin", 20240801, 7, 41, tok, 40);
    ok &= expect_input_error(child_shard, "v32/short.bin", "header says 41 tokens",
                             "164 bytes as uint32", "only 160 bytes", NULL);
    /* uint16 tokens under the uint32 magic: the length gives it away */
    uint16_t half[40] = {0};
    write_shard_raw("v32/u16.bin", 20240801, 7, 40, half, 40);
    ok &= expect_input_error(child_shard, "v32/u16.bin", "160 bytes as uint32",
                             "holds only 80 bytes", NULL);
    write_shard_raw("v32/u16b.bin", 20240801, 7, 10, half, 40);
    ok &= expect_input_error(child_shard, "v32/u16b.bin", "header says 10 tokens",
                             "not uint32 tokens", NULL);
    return ok;
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_tokens.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    report("shard_roundtrip", test_shard_roundtrip());
    report("windows", test_windows());
    report("documents", test_documents());
    report("shuffle", test_shuffle());
    report("vocab", test_vocab());
    report("shard_errors", test_shard_errors());
    report("shard_fuzz", test_shard_fuzz());
    report("dataset_errors", test_dataset_errors());
    report("shard32", test_shard32());
    report("vocab32", test_vocab32());
    for (int i = n_made - 1; i >= 0; i--)
        if (remove(made[i]) != 0)
            perror(made[i]);
    if (rmdir(tmpdir) != 0)
        perror(tmpdir);
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures != 0;
}
