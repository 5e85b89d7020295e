/* data_cmd.c: `trainc data fashion-mnist DIR [--from SRC]`.
 *
 * Converts the four IDX files of Fashion-MNIST (gzip'd as Debian's
 * dataset-fashion-mnist ships them, or plain) into .npy arrays the trainers map:
 *   DIR/train_x.npy [60000, 1, 28, 28] '|u1'    DIR/train_y.npy [60000] '<i4'
 *   DIR/test_x.npy  [10000, 1, 28, 28] '|u1'    DIR/test_y.npy  [10000] '<i4'
 * All four sources are read and checked before anything is written; each output
 * goes to NAME.tmp first and is renamed when complete. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "trainc.h"

#define FASHION_DEFAULT_SRC "/usr/share/datasets/fashion-mnist"
#define FASHION_HINT "install Debian's dataset-fashion-mnist (make deps) or pass --from DIR"
#define FASHION_CLASSES 10
#define IDX_MAX_BYTES ((uint64_t)1 << 32)   /* far above Fashion-MNIST's 47 MB */

static const char data_usage[] = "usage: trainc data fashion-mnist DIR [--from SRC]";

/* One IDX array of unsigned bytes: dims[0] items of dims[1] x dims[2] (rank 1 or 3). */
typedef struct IdxArray {
    char *path;
    int rank;
    uint32_t dims[3];
    unsigned char *data;       /* [dims[0], ...] */
    size_t bytes;
} IdxArray;

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

/* Reads exactly n bytes; returns how many were read before EOF. */
static size_t gz_read_full(gzFile f, const char *path, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got < (1u << 30) ? n - got : (1u << 30);
        int r = gzread(f, (char *)buf + got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            error_input("%s: cannot read: %s", path,
                        zerr == Z_ERRNO ? strerror(errno) : msg);
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
 * 00 00 08 RANK, then RANK big-endian u32 sizes, then the bytes in C order. */
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
        error_input("%s: not an IDX file of unsigned bytes (bad magic)", path);
    if (hdr[3] != rank)
        error_input("%s: IDX file has %d dimensions, expected %d", path, hdr[3], rank);
    if (got < hlen)
        error_input("%s: truncated IDX header", path);
    uint64_t total = 1;
    for (int i = 0; i < rank; i++) {
        a->dims[i] = be32(hdr + 4 + 4 * i);
        total *= a->dims[i];
        if (a->dims[i] == 0 || total > IDX_MAX_BYTES)
            error_input("%s: implausible IDX size (dimension %d is %" PRIu32 ")", path, i,
                        a->dims[i]);
    }
    a->bytes = (size_t)total;
    a->data = xcalloc(1, a->bytes);
    got = gz_read_full(f, path, a->data, a->bytes);
    if (got < a->bytes)
        error_input("%s: truncated: the header promises %zu bytes of data, the file has %zu",
                    path, a->bytes, got);
    unsigned char extra;
    if (gz_read_full(f, path, &extra, 1) != 0)
        error_input("%s: unexpected data after the %zu bytes the header promises", path,
                    a->bytes);
    int rc = gzclose_r(f);
    if (rc != Z_OK)
        error_input("%s: cannot read: %s", path, rc == Z_ERRNO ? strerror(errno) : zError(rc));
}

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
    char *tmp = xasprintf("%s.tmp", path);
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
        error_input("%s: cannot write: %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        error_input("%s: cannot rename to %s: %s", tmp, path, strerror(err));
    }
    printf("wrote %s [", path);
    for (int i = 0; i < rank; i++)
        printf("%s%" PRId64, i ? ", " : "", shape[i]);
    printf("] %s\n", strcmp(descr, "|u1") == 0 ? "u8" : "i32");
    free(tmp);
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
    idx_free(&tr_x);
    idx_free(&tr_y);
    idx_free(&te_x);
    idx_free(&te_y);
    if (fflush(stdout) != 0)
        error_input("stdout: %s", strerror(errno));
    return 0;
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
    if (strcmp(kind, "fashion-mnist") != 0) {
        fprintf(stderr, "trainc: error: data: unknown dataset kind '%s' (known: fashion-mnist)\n",
                kind);
        return 1;
    }
    const char *dir = NULL, *src = FASHION_DEFAULT_SRC;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--from") == 0) {
            if (i + 1 >= argc)
                error_input("data: --from needs a folder\n%s", data_usage);
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
