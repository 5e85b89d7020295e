/* data_cmd.c: `trainc data fashion-mnist DIR [--from SRC]` and
 * `trainc data text FILE DIR [--val-frac F] [--shard-tokens N] [--tokenizer TOK.json]`
 * (`trainc data sft`: data_sft.c, with the staged writes below; the other kinds in their
 * own files: data_classify.c, data_images.c, ...).
 *
 * fashion-mnist converts the four IDX files of Fashion-MNIST (gzip'd as Debian's
 * dataset-fashion-mnist ships them, or plain) into .npy arrays the trainers map:
 *   DIR/train_x.npy [60000, 1, 28, 28] '|u1'    DIR/train_y.npy [60000] '<i4'
 *   DIR/test_x.npy  [10000, 1, 28, 28] '|u1'    DIR/test_y.npy  [10000] '<i4'
 * All four sources are read and checked before anything is written; each output
 * goes to NAME.tmp first and is renamed when complete.
 *
 * text tokenizes any file byte by byte (token = byte value, vocabulary 256) into
 * token shards (docs/spec.md, Data): the first 1 - F of the bytes go to
 * DIR/train_000000.bin, the last F to DIR/val_000000.bin (none when F = 0). A part
 * longer than --shard-tokens (default: the most one shard's int32 count allows)
 * continues in train_000001.bin and so on. Shards are written by rt_shard_write
 * (temp name, fsync, rename).
 *
 * With --tokenizer, the ids are those of a Hugging Face tokenizer.json's byte-level BPE
 * (runtime/tokenizer.c), uint16 for a vocabulary of at most 65536, else uint32, and F
 * is a fraction of the tokens. The file is read a part at a time (cut only where the
 * tokenizer says the ids cannot change: rt_tok_safe_cut) and its ids go to a raw file
 * in DIR, which is then mapped and cut into the shards; memory stays bounded by the
 * part size (1 MiB, or TRAINC_TEXT_CHUNK bytes: the tests force tiny parts) and the
 * longest stretch without a cut. */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "cmd.h"
#include "../runtime/tokenizer.h"

#define FASHION_DEFAULT_SRC "/usr/share/datasets/fashion-mnist"
#define FASHION_HINT "install Debian's dataset-fashion-mnist (make deps) or pass --from DIR"
#define FASHION_CLASSES 10
#define IDX_MAX_BYTES ((uint64_t)1 << 32)   /* far above Fashion-MNIST's 47 MB */

static const char data_usage[] =
    "usage: trainc data fashion-mnist DIR [--from SRC]\n"
    "       trainc data text FILE DIR [--val-frac F] [--shard-tokens N] [--tokenizer TOK.json]\n"
    "       trainc data sft FILE.jsonl DIR --tokenizer TOK.json --seq-len T [--val-frac F]\n"
    "                       [--eos TOKEN | --chat llama3|chatml|gemma|phi3|mistral|llama2|zephyr] [--pack]\n"
    "       trainc data classify FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
    "                       [--val FILE.jsonl | --val-frac F | --unlabeled] [--text KEY] [--pair KEY]\n"
    "                       [--label KEY]\n"
    "       trainc data tags FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
    "                       [--val FILE.jsonl | --val-frac F | --unlabeled] [--words KEY] [--tags KEY]\n"
    "                       [--all-pieces]\n"
    "       trainc data mlm FILE DIR --tokenizer TOK.json --model MODEL.json\n"
    "                       [--val FILE | --val-frac F] [--mask-prob P] [--copies K] [--seed S]\n"
    "                       [--group]\n"
    "       trainc data pairs FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
    "                       [--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY] [--rejected KEY]\n"
    "                       [--eos TOKEN | --chat FORMAT]\n"
    "       trainc data qa FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
    "                       [--val FILE.jsonl | --val-frac F | --unlabeled] [--stride S]\n"
    "       trainc data qa FILE.jsonl DIR --answers PRED.npy [--part test|val|train]\n"
    "                       [--n-best N] [--max-answer L] [--version-2 [--null-threshold D]]\n"
    "       trainc data images SRC DIR --model MODEL.json [--processor FILE]\n"
    "                          [--val SRC | --val-frac F | --unlabeled]";

/* One IDX array of unsigned bytes: dims[0] items of dims[1] x dims[2] (rank 1 or 3). */
typedef struct IdxArray {
    char *path;
    int rank;
    uint32_t dims[3];
    unsigned char *data;       /* [dims[0], ...] */
    size_t bytes;
} IdxArray;

/* A conversion writes several files; each is written as NAME.part and renamed to NAME
 * only once all of them are complete, so a failure (a full disk) leaves the folder as
 * it was: the .part files are removed at exit unless the set was committed. */
static char **staged_final, **staged_part;
static int n_staged, cap_staged;

static void staged_clear(void)
{
    for (int i = 0; i < n_staged; i++) {
        free(staged_final[i]);
        free(staged_part[i]);
    }
    n_staged = 0;
}

void data_abandon(void)
{
    for (int i = 0; i < n_staged; i++)
        unlink(staged_part[i]);
    staged_clear();
}

/* The name to write `final` under until data_commit (cmd.h). */
const char *data_stage(const char *final)
{
    if (n_staged == 0 && cap_staged == 0)
        atexit(data_abandon);
    if (n_staged == cap_staged) {
        cap_staged = cap_staged ? 2 * cap_staged : 16;
        staged_final = realloc(staged_final, (size_t)cap_staged * sizeof *staged_final);
        staged_part = realloc(staged_part, (size_t)cap_staged * sizeof *staged_part);
        if (!staged_final || !staged_part)
            die("out of memory");
    }
    staged_final[n_staged] = xstrdup(final);
    staged_part[n_staged] = xasprintf("%s.part", final);
    return staged_part[n_staged++];
}

void data_commit(void)
{
    for (int i = 0; i < n_staged; i++)
        if (rename(staged_part[i], staged_final[i]) != 0)
            error_input("%s: cannot rename to %s: %s", staged_part[i], staged_final[i],
                        strerror(errno));
    staged_clear();
}

static int path_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* SRC/NAME.gz, else SRC/NAME; exits 1 with the hint when neither exists. */
static char *find_source(const char *src, const char *name)
{
    char *gz = xasprintf("%s/%s.gz", src, name);
    if (path_exists(gz))
        return gz;
    free(gz);
    char *plain = xasprintf("%s/%s", src, name);
    if (path_exists(plain))
        return plain;
    error_input("%s: no %s.gz or %s; %s", src, name, name, FASHION_HINT);
}

/* Reads exactly n bytes; returns how many were read before EOF. An error closes f
 * and exits 1. */
static size_t gz_read_full(gzFile f, const char *path, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got < (1u << 30) ? n - got : (1u << 30);
        int r = gzread(f, (char *)buf + got, (unsigned)want);
        if (r < 0) {   /* f closed before the exit (the fuzz target goes on) */
            int zerr, err = errno;
            char msg[256];
            snprintf(msg, sizeof msg, "%s", gzerror(f, &zerr));
            gzclose_r(f);
            error_input("%s: cannot read: %s", path, zerr == Z_ERRNO ? strerror(err) : msg);
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return got;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads an IDX file of unsigned bytes with `rank` dimensions. The header is
 * 00 00 08 RANK, then RANK big-endian u32 sizes, then the bytes in C order. The
 * buffer grows with what the file holds (a header may promise gigabytes a short file
 * does not have); a rejected file is closed before the error. */
#define IDX_FAIL(...) (gzclose_r(f), error_input(__VA_ARGS__))
static void idx_read(IdxArray *a, char *path, int rank)
{
    memset(a, 0, sizeof *a);
    a->path = path;
    a->rank = rank;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        error_input("%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    unsigned char hdr[4 + 4 * 3];
    size_t hlen = 4 + 4 * (size_t)rank;
    size_t got = gz_read_full(f, path, hdr, hlen);
    if (got < 4 || hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08)
        IDX_FAIL("%s: not an IDX file of unsigned bytes (bad magic)", path);
    if (hdr[3] != rank)
        IDX_FAIL("%s: IDX file has %d dimensions, expected %d", path, hdr[3], rank);
    if (got < hlen)
        IDX_FAIL("%s: truncated IDX header", path);
    uint64_t total = 1;
    for (int i = 0; i < rank; i++) {
        a->dims[i] = be32(hdr + 4 + 4 * i);
        total *= a->dims[i];
        if (a->dims[i] == 0 || total > IDX_MAX_BYTES)
            IDX_FAIL("%s: implausible IDX size (dimension %d is %" PRIu32 ")", path, i,
                     a->dims[i]);
    }
    a->bytes = (size_t)total;
    size_t cap = 0;
    got = 0;
    while (got < a->bytes) {
        size_t want = a->bytes - got, step = cap ? cap : (size_t)1 << 20;
        if (want > step)
            want = step;
        if (got + want > cap) {
            cap = got + want;
            a->data = realloc(a->data, cap);
            if (!a->data)
                IDX_FAIL("%s: out of memory for %zu bytes", path, cap);
        }
        size_t n = gz_read_full(f, path, a->data + got, want);
        got += n;
        if (n < want)
            break;
    }
    if (got < a->bytes)
        IDX_FAIL("%s: truncated: the header promises %zu bytes of data, the file has %zu", path,
                 a->bytes, got);
    unsigned char extra;
    if (gz_read_full(f, path, &extra, 1) != 0)
        IDX_FAIL("%s: unexpected data after the %zu bytes the header promises", path, a->bytes);
    int rc = gzclose_r(f);
    if (rc != Z_OK)
        error_input("%s: cannot read: %s", path, rc == Z_ERRNO ? strerror(errno) : zError(rc));
}
#undef IDX_FAIL

/* Images [N, rows, cols] and labels [N] of one split; checked against each other. */
static void read_split(const char *src, const char *prefix, IdxArray *img, IdxArray *lab)
{
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    idx_read(img, find_source(src, name), 3);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    idx_read(lab, find_source(src, name), 1);
    if (img->dims[0] != lab->dims[0])
        error_input("%s: %" PRIu32 " labels, but %s has %" PRIu32 " images", lab->path,
                    lab->dims[0], img->path, img->dims[0]);
    for (size_t i = 0; i < lab->bytes; i++)
        if (lab->data[i] >= FASHION_CLASSES)
            error_input("%s: item %zu: label %d is outside 0..%d", lab->path, i, lab->data[i],
                        FASHION_CLASSES - 1);
}

/* Writes an .npy v1.0 file: magic, version, u16 header length, the header dict
 * padded with spaces and a final '\n' so that the data starts at a multiple of 64. */
static void write_npy(const char *dir, const char *name, const char *descr,
                      const int64_t *shape, int rank, const void *data, size_t bytes)
{
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    for (int i = 0; i < rank; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%" PRId64 "%s", shape[i],
                      rank == 1 ? "," : i + 1 < rank ? ", " : "");
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t hlen = (size_t)n + 1;
    while ((10 + hlen) % 64)
        hlen++;
    unsigned char pre[10 + 256];
    memcpy(pre, "\x93NUMPY\x01\x00", 8);
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    memset(pre + 10, ' ', hlen);
    memcpy(pre + 10, dict, (size_t)n);
    pre[10 + hlen - 1] = '\n';

    char *path = xasprintf("%s/%s", dir, name);
    const char *tmp = data_stage(path);   /* NAME.part: renamed to NAME with the others */
    FILE *f = fopen(tmp, "wb");
    if (!f)
        error_input("%s: cannot create: %s", tmp, strerror(errno));
    int ok = fwrite(pre, 1, 10 + hlen, f) == 10 + hlen && fwrite(data, 1, bytes, f) == bytes &&
             fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        error_input("%s: cannot write: %s (the files written before it are removed: the "
                    "folder is as it was)", tmp, strerror(err));
    }
    printf("wrote %s [", path);
    for (int i = 0; i < rank; i++)
        printf("%s%" PRId64, i ? ", " : "", shape[i]);
    printf("] %s\n", strcmp(descr, "|u1") == 0 ? "u8" : "i32");
    free(path);
}

/* Images become [N, 1, rows, cols] u8 (one channel, as conv2d expects); labels
 * [N] little-endian i32. */
static void write_split(const char *dir, const char *prefix, const IdxArray *img,
                        const IdxArray *lab)
{
    char name[64];
    int64_t xs[4] = {img->dims[0], 1, img->dims[1], img->dims[2]};
    snprintf(name, sizeof name, "%s_x.npy", prefix);
    write_npy(dir, name, "|u1", xs, 4, img->data, img->bytes);

    unsigned char *y = xcalloc(lab->bytes, 4);   /* [N] i32, little-endian */
    for (size_t i = 0; i < lab->bytes; i++)
        y[4 * i] = lab->data[i];
    int64_t ys[1] = {lab->dims[0]};
    snprintf(name, sizeof name, "%s_y.npy", prefix);
    write_npy(dir, name, "<i4", ys, 1, y, lab->bytes * 4);
    free(y);
}

static void idx_free(IdxArray *a)
{
    free(a->data);
    free(a->path);
}

static int fashion_mnist(const char *dir, const char *src)
{
    struct stat st;
    if (stat(src, &st) != 0 || !S_ISDIR(st.st_mode))
        error_input("%s: no such folder; %s", src, FASHION_HINT);
    IdxArray tr_x, tr_y, te_x, te_y;
    read_split(src, "train", &tr_x, &tr_y);
    read_split(src, "t10k", &te_x, &te_y);
    if (rt_mkdir_p(dir) != 0)
        error_input("%s: cannot create folder: %s", dir, strerror(errno));
    write_split(dir, "train", &tr_x, &tr_y);
    write_split(dir, "test", &te_x, &te_y);
    data_commit();
    idx_free(&tr_x);
    idx_free(&tr_y);
    idx_free(&te_x);
    idx_free(&te_y);
    if (fflush(stdout) != 0)
        error_input("stdout: %s", strerror(errno));
    return 0;
}

/* ---- text -> byte-level token shards -------------------------------------- */

#define TEXT_VAL_FRAC 0.1
#define TEXT_VAL_FRAC_MAX 0.5

/* An option's value: the next argument, or the text after "NAME=". */
static const char *text_opt_value(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (a[n] == '=')
        return a + n + 1;
    if (*i + 1 >= argc)
        error_input("data text: %s needs a value\n%s", name, data_usage);
    if (!strncmp(argv[*i + 1], "--", 2))
        error_input("data text: %s needs a value, got the option %s", name, argv[*i + 1]);
    return argv[++*i];
}

/* Is `a` the option `name`, alone or as "name=VALUE"? */
static int is_opt(const char *a, const char *name)
{
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == 0 || a[n] == '=');
}

static double parse_val_frac(const char *v)
{
    char *end;
    errno = 0;
    double f = strtod(v, &end);
    if (!*v || *end || errno || !(f >= 0 && f <= TEXT_VAL_FRAC_MAX))
        error_input("data text: --val-frac must be a number in [0, %g], got '%s'",
                    TEXT_VAL_FRAC_MAX, v);
    return f;
}

static int64_t parse_shard_tokens(const char *v)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < 1 || n > INT32_MAX)
        error_input("data text: --shard-tokens must be an integer in [1, %d], got '%s'",
                    INT32_MAX, v);
    return n;
}

/* Maps FILE read-only; exits 1 when it is missing, not a regular file, or empty. */
static const unsigned char *map_text(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        error_input("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0)
        error_input("%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        error_input("%s: not a regular file", path);
    if (st.st_size == 0)
        error_input("%s: the file is empty (nothing to tokenize)", path);
    *len = (size_t)st.st_size;
    void *map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
        error_input("%s: cannot map: %s", path, strerror(errno));
    close(fd);
    return map;
}

/* Writes tokens [0, n) (elem bytes each: 1, 2 or 4) as DIR/PREFIX_000000.bin,
 * _000001, ... of at most `per` tokens each; returns the number of shards. */
static int write_part(const char *dir, const char *prefix, const void *tok, int elem,
                      int64_t n, int64_t per)
{
    const unsigned char *bytes = tok;
    int k = 0;
    for (int64_t lo = 0; lo < n; lo += per, k++) {
        int64_t len = n - lo < per ? n - lo : per;
        char *path = xasprintf("%s/%s_%06d.bin", dir, prefix, k);
        if (rt_shard_write(data_stage(path), bytes + lo * elem, elem, len) != 0)
            error_input("%s: cannot write: %s (the files written before it are removed: the "
                        "folder is as it was)", path, strerror(errno));
        printf("wrote %s: %" PRId64 " tokens\n", path, len);
        free(path);
    }
    return k;
}

/* A shard numbered after the ones just written would still match a glob such as
 * DIR/train_*.bin; say so rather than delete what may be someone's data. */
/* Files DIR/PREFIX_*.bin this conversion did not write (shards 0 .. next-1 are its
 * own): a glob for training takes them too, so each is named, all in one note. */
static void note_stale(const char *dir, const char *prefix, int next)
{
    char *pat = xasprintf("%s/%s_*.bin", dir, prefix);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0) {
        int n = 0;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            const char *base = strrchr(g.gl_pathv[i], '/');
            base = base ? base + 1 : g.gl_pathv[i];
            int idx = -1, end = 0;
            char fmt[64];
            snprintf(fmt, sizeof fmt, "%s_%%6d.bin%%n", prefix);
            if (sscanf(base, fmt, &idx, &end) == 1 && base[end] == 0 &&
                strlen(base) == strlen(prefix) + 11 && idx >= 0 && idx < next)
                continue;   /* written now */
            if (n++ == 0)
                fprintf(stderr, "trainc: note: not from this conversion (left as they are; "
                        "remove them before training on %s):\n", pat);
            fprintf(stderr, "  %s\n", g.gl_pathv[i]);
        }
        globfree(&g);
    }
    free(pat);
}

static int text_to_shards(const char *file, const char *dir, double val_frac, int64_t per)
{
    size_t len;
    const unsigned char *bytes = map_text(file, &len);
    int64_t n = (int64_t)len;
    int64_t n_val = (int64_t)floor((double)n * val_frac);
    if (n_val > n / 2)   /* guard the rounding of n * val_frac */
        n_val = n / 2;
    if (val_frac > 0 && n_val == 0)
        error_input("%s: %" PRId64 " byte%s: --val-frac %g leaves no byte for validation "
                    "(use --val-frac 0 for no val shard)", file, n, n == 1 ? "" : "s",
                    val_frac);
    int64_t n_train = n - n_val;
    if (rt_mkdir_p(dir) != 0)
        error_input("%s: cannot create folder: %s", dir, strerror(errno));
    int nt = write_part(dir, "train", bytes, 1, n_train, per);
    int nv = write_part(dir, "val", bytes + n_train, 1, n_val, per);
    data_commit();
    printf("%s: %" PRId64 " bytes -> %" PRId64 " train + %" PRId64 " val tokens "
           "(byte-level, vocabulary 256)\n", file, n, n_train, n_val);
    note_stale(dir, "train", nt);
    note_stale(dir, "val", nv);
    munmap((void *)bytes, len);
    if (fflush(stdout) != 0)
        error_input("stdout: %s", strerror(errno));
    return 0;
}

/* ---- text -> BPE token shards ---------------------------------------------- */

#define TEXT_CHUNK ((size_t)1 << 20)

static char *ids_tmp;   /* the raw ids' file, removed at exit */

static void ids_tmp_cleanup(void)
{
    if (ids_tmp)
        unlink(ids_tmp);
}

/* The part size: TRAINC_TEXT_CHUNK bytes when set (the tests' small parts). */
static size_t text_chunk(void)
{
    const char *e = getenv("TRAINC_TEXT_CHUNK");
    if (!e || !*e)
        return TEXT_CHUNK;
    char *end;
    unsigned long long v = strtoull(e, &end, 10);
    if (*end || v < 1 || v > ((size_t)1 << 30))
        error_input("TRAINC_TEXT_CHUNK must be a byte count in [1, 2^30], got '%s'", e);
    return (size_t)v;
}

/* Appends ids to f as little-endian integers of `width` bytes. */
static void put_ids(FILE *f, const rt_ids *ids, int width)
{
    unsigned char buf[1 << 16];
    int64_t per = (int64_t)sizeof buf / width;
    for (int64_t lo = 0; lo < ids->n; lo += per) {
        int64_t k = ids->n - lo < per ? ids->n - lo : per;
        for (int64_t i = 0; i < k; i++)
            for (int j = 0; j < width; j++)
                buf[width * i + j] = (unsigned char)(ids->v[lo + i] >> (8 * j));
        if (fwrite(buf, (size_t)width, (size_t)k, f) != (size_t)k)
            error_input("%s: cannot write: %s", ids_tmp, strerror(errno));
    }
}

/* Tokenizes `file` a part at a time into `out`: each part ends at the last safe cut in
 * what has been read (none yet: read on), the last one at the end of the file, so the
 * ids are those of the whole file encoded at once. Returns the number of ids. */
static int64_t bpe_stream(rt_tokenizer *t, const char *file, FILE *out, int width)
{
    FILE *in = fopen(file, "rb");
    if (!in)
        error_input("%s: cannot open: %s", file, strerror(errno));
    size_t chunk = text_chunk(), n = 0, cap = 0, cut, seen = 0;   /* seen: no cut below */
    char *buf = NULL;
    rt_ids ids = {0};
    int64_t total = 0, done = 0;   /* ids written; bytes of the file encoded */
    int eof = 0;
    rt_tok_prefix(t, &ids);
    while (!eof) {
        if (n + chunk > cap) {
            cap = n + chunk;
            buf = realloc(buf, cap);
            if (!buf)
                die("out of memory for a part of %zu bytes", cap);
        }
        size_t got = fread(buf + n, 1, chunk, in);
        n += got;
        if (got < chunk) {
            if (ferror(in))
                error_input("%s: cannot read: %s", file, strerror(errno));
            eof = 1;
        }
        /* the places up to the third-last byte seen were looked at before */
        cut = eof ? n : rt_tok_safe_cut(t, buf, n, seen > 2 ? seen - 2 : 0);
        seen = n;
        if (cut == 0)
            continue;
        uint32_t cp;
        size_t at = rt_tok_unnormalized(t, buf, cut, &cp);
        if (at < cut)
            error_input("%s: byte %" PRId64 ": U+%04X, which the tokenizer's NFC normalizer may "
                        "change; trainc implements NFC only on text it leaves as it is "
                        "(normalize the file first: Python's unicodedata.normalize('NFC', s))",
                        file, done + (int64_t)at, cp);
        done += (int64_t)cut;
        rt_tok_encode_part(t, buf, cut, &ids);
        if (eof)
            rt_tok_suffix(t, &ids);
        put_ids(out, &ids, width);
        total += ids.n;
        ids.n = 0;
        memmove(buf, buf + cut, n - cut);
        n -= cut;
        seen = n;
    }
    fclose(in);
    free(buf);
    rt_ids_free(&ids);
    return total;
}

/* The raw ids of `file` in DIR/.tokens.part, mapped: [*n] of `width` bytes each. */
static const void *bpe_ids(rt_tokenizer *t, const char *file, const char *dir, int width,
                           int64_t *n)
{
    ids_tmp = xasprintf("%s/.tokens.part", dir);
    atexit(ids_tmp_cleanup);
    FILE *f = fopen(ids_tmp, "w+b");
    if (!f)
        error_input("%s: cannot create: %s", ids_tmp, strerror(errno));
    *n = bpe_stream(t, file, f, width);
    if (fflush(f) != 0)
        error_input("%s: cannot write: %s", ids_tmp, strerror(errno));
    if (*n == 0)
        error_input("%s: no tokens (the tokenizer gives no id for its bytes)", file);
    void *map = mmap(NULL, (size_t)*n * (size_t)width, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    if (map == MAP_FAILED)
        error_input("%s: cannot map: %s", ids_tmp, strerror(errno));
    fclose(f);   /* the mapping stays */
    return map;
}

static int text_bpe_to_shards(const char *file, const char *dir, double val_frac, int64_t per,
                              const char *tok_path)
{
    char err[1024];
    rt_tokenizer *t = rt_tok_load(tok_path, err, sizeof err);
    if (!t)
        error_input("%s", err);
    struct stat st;
    if (stat(file, &st) != 0)
        error_input("%s: cannot open: %s", file, strerror(errno));
    if (!S_ISREG(st.st_mode))
        error_input("%s: not a regular file", file);
    if (st.st_size == 0)
        error_input("%s: the file is empty (nothing to tokenize)", file);
    int64_t vocab = rt_tok_vocab(t);
    int width = vocab <= 65536 ? 2 : 4;
    if (rt_mkdir_p(dir) != 0)
        error_input("%s: cannot create folder: %s", dir, strerror(errno));
    int64_t n;
    const unsigned char *ids = bpe_ids(t, file, dir, width, &n);
    int64_t n_val = (int64_t)floor((double)n * val_frac);
    if (n_val > n / 2)
        n_val = n / 2;
    if (val_frac > 0 && n_val == 0)
        error_input("%s: %" PRId64 " token%s: --val-frac %g leaves no token for validation "
                    "(use --val-frac 0 for no val shard)", file, n, n == 1 ? "" : "s", val_frac);
    int64_t n_train = n - n_val;
    int nt = write_part(dir, "train", ids, width, n_train, per);
    int nv = write_part(dir, "val", ids + n_train * width, width, n_val, per);
    data_commit();
    printf("%s: %" PRId64 " bytes -> %" PRId64 " train + %" PRId64 " val tokens (%s, "
           "vocabulary %" PRId64 ", uint%d)\n", file, (int64_t)st.st_size, n_train, n_val,
           tok_path, vocab, 8 * width);
    note_stale(dir, "train", nt);
    note_stale(dir, "val", nv);
    munmap((void *)ids, (size_t)n * (size_t)width);
    rt_tok_free(t);
    if (fflush(stdout) != 0)
        error_input("stdout: %s", strerror(errno));
    return 0;
}

static int cmd_text(int argc, char **argv)
{
    const char *file = NULL, *dir = NULL, *tok = NULL;
    double val_frac = TEXT_VAL_FRAC;
    int64_t per = INT32_MAX;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (is_opt(a, "--val-frac")) {
            val_frac = parse_val_frac(text_opt_value(argc, argv, &i, "--val-frac"));
        } else if (is_opt(a, "--shard-tokens")) {
            per = parse_shard_tokens(text_opt_value(argc, argv, &i, "--shard-tokens"));
        } else if (is_opt(a, "--tokenizer")) {
            tok = text_opt_value(argc, argv, &i, "--tokenizer");
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("%s\n", data_usage);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            error_input("data text: unknown option '%s'\n%s", a, data_usage);
        } else if (!file) {
            file = a;
        } else if (!dir) {
            dir = a;
        } else {
            error_input("data text: unexpected argument '%s'\n%s", a, data_usage);
        }
    }
    if (!file || !*file)
        error_input("data text: missing the input file\n%s", data_usage);
    if (!dir || !*dir)
        error_input("data text: missing the output folder\n%s", data_usage);
    if (tok)
        return text_bpe_to_shards(file, dir, val_frac, per, tok);
    return text_to_shards(file, dir, val_frac, per);
}

/* ---- the command ----------------------------------------------------------- */

static int cmd_fashion(int argc, char **argv)
{
    const char *dir = NULL, *src = FASHION_DEFAULT_SRC;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--from") == 0) {
            if (i + 1 >= argc)
                error_input("data: --from needs a folder\n%s", data_usage);
            if (!strncmp(argv[i + 1], "--", 2))
                error_input("data: --from needs a folder, got the option %s", argv[i + 1]);
            src = argv[++i];
        } else if (strncmp(a, "--from=", 7) == 0) {
            src = a + 7;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("%s\n", data_usage);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            error_input("data: unknown option '%s'\n%s", a, data_usage);
        } else if (!dir) {
            dir = a;
        } else {
            error_input("data: unexpected argument '%s'\n%s", a, data_usage);
        }
    }
    if (!dir || !*dir)
        error_input("data: missing the output folder\n%s", data_usage);
    if (!*src)
        error_input("data: --from needs a folder\n%s", data_usage);
    return fashion_mnist(dir, src);
}

int cmd_data(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "trainc: error: data: missing the dataset kind\n%s\n", data_usage);
        return 1;
    }
    const char *kind = argv[1];
    if (strcmp(kind, "-h") == 0 || strcmp(kind, "--help") == 0) {
        printf("%s\n", data_usage);
        return 0;
    }
    if (strcmp(kind, "fashion-mnist") == 0)
        return cmd_fashion(argc, argv);
    if (strcmp(kind, "text") == 0)
        return cmd_text(argc, argv);
    if (strcmp(kind, "sft") == 0)
        return data_sft(argc, argv);
    if (strcmp(kind, "classify") == 0)
        return data_classify(argc, argv);
    if (strcmp(kind, "tags") == 0)
        return data_tags(argc, argv);
    if (strcmp(kind, "mlm") == 0)
        return data_mlm(argc, argv);
    if (strcmp(kind, "pairs") == 0)
        return data_pairs(argc, argv);
    if (strcmp(kind, "qa") == 0)
        return data_qa(argc, argv);
    if (strcmp(kind, "images") == 0)
        return data_images(argc, argv);
    fprintf(stderr, "trainc: error: data: unknown dataset kind '%s' (known: fashion-mnist, "
            "text, sft, classify, tags, mlm, pairs, qa, images)\n%s\n", kind, data_usage);
    return 1;
}
