/* data.c: memory-mapped .npy arrays, datasets checked against the model, the
 * threaded batch loader (its shuffle draws from rng.c's generator; loader.augment's
 * crops and flips, augment.c's, applied to the training rows it gathers).
 *
 * Everything read from a file is distrusted: the .npy header is parsed with an
 * explicit end pointer, every size product is checked for overflow, and no byte
 * outside the mapping is ever touched, whatever the header claims. Bad files exit
 * through rt_input_error (exit 1) with a message that starts with the file name. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rt.h"

/* .npy data is little-endian and copied with memcpy; a big-endian host would need
 * byte swaps everywhere below. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data.c assumes a little-endian host"
#endif

/* ---- .npy files ------------------------------------------------------------ */

/* The header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
 * Parsed as a small Python literal: keys and strings in '' or "", True/False,
 * a tuple (or list) of non-negative integers (Python 2 'L' suffixes allowed). */
typedef struct hdr_cursor {
    const char *path;
    const char *start, *p, *end;
} hdr_cursor;

_Noreturn static void hdr_error(const hdr_cursor *c, const char *what)
{
    rt_input_error("%s: bad .npy header: %s at byte %td of the header", c->path, what,
                   c->p - c->start);
}

static void hdr_ws(hdr_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Skips whitespace, then consumes `ch` if it is next. */
static int hdr_accept(hdr_cursor *c, char ch)
{
    hdr_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static void hdr_string(hdr_cursor *c, char *out, size_t cap)
{
    hdr_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        hdr_error(c, "expected a quoted string");
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= cap)
            hdr_error(c, "string too long");
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        hdr_error(c, "unterminated string");
    c->p++;
    out[n] = 0;
}

static int hdr_bool(hdr_cursor *c)
{
    hdr_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        return 1;
    }
    if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        return 0;
    }
    hdr_error(c, "expected True or False");
}

/* (d0, d1, ...) with an optional trailing comma; () is rank 0. */
static int hdr_shape(hdr_cursor *c, int64_t *shape, int maxrank)
{
    char close;
    if (hdr_accept(c, '('))
        close = ')';
    else if (hdr_accept(c, '['))
        close = ']';
    else
        hdr_error(c, "expected a shape tuple");
    int rank = 0;
    for (;;) {
        if (hdr_accept(c, close))
            return rank;
        hdr_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            hdr_error(c, "expected a non-negative integer in the shape");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            int d = *c->p++ - '0';
            if (v > (INT64_MAX - d) / 10)
                hdr_error(c, "shape dimension too large");
            v = v * 10 + d;
        }
        if (c->p < c->end && (*c->p == 'L' || *c->p == 'l'))
            c->p++;
        if (rank >= maxrank)
            hdr_error(c, "more than 8 dimensions");
        shape[rank++] = v;
        if (!hdr_accept(c, ',')) {
            if (!hdr_accept(c, close))
                hdr_error(c, "expected ',' or the end of the shape");
            return rank;
        }
    }
}

/* Maps a descr string to a dtype; -1 when unsupported. Single-byte types carry
 * '|' (numpy's own spelling) or '<'. */
static int npy_dtype(const char *descr, int *elem)
{
    static const struct { const char *name; int dt, bytes; } known[] = {
        {"|u1", RT_U8, 1}, {"<u1", RT_U8, 1}, {"<u2", RT_U16, 2},
        {"<i4", RT_I32, 4}, {"<f4", RT_F32, 4}, {"<i8", RT_I64, 8},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(descr, known[i].name) == 0) {
            *elem = known[i].bytes;
            return known[i].dt;
        }
    return -1;
}

/* Parses the header dict into a; every key exactly once, nothing else. */
static void npy_parse_header(rt_npy *a, const char *h, size_t len)
{
    hdr_cursor c = {a->path, h, h, h + len};
    char key[32], descr[64];
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0, fortran = 0;
    if (!hdr_accept(&c, '{'))
        hdr_error(&c, "expected '{'");
    while (!hdr_accept(&c, '}')) {
        hdr_string(&c, key, sizeof key);
        if (!hdr_accept(&c, ':'))
            hdr_error(&c, "expected ':' after a key");
        if (strcmp(key, "descr") == 0 && !seen_descr) {
            hdr_ws(&c);
            if (c.p < c.end && (*c.p == '[' || *c.p == '('))
                rt_input_error("%s: structured dtypes are not supported (need one of "
                               "u1, u2, i4, i8, f4)", a->path);
            hdr_string(&c, descr, sizeof descr);
            seen_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !seen_fortran) {
            fortran = hdr_bool(&c);
            seen_fortran = 1;
        } else if (strcmp(key, "shape") == 0 && !seen_shape) {
            a->rank = hdr_shape(&c, a->shape, 8);
            seen_shape = 1;
        } else {
            rt_input_error("%s: bad .npy header: unexpected or repeated key '%s'", a->path,
                           key);
        }
        if (!hdr_accept(&c, ',')) {
            if (!hdr_accept(&c, '}'))
                hdr_error(&c, "expected ',' or '}'");
            break;
        }
    }
    if (!seen_descr || !seen_fortran || !seen_shape)
        rt_input_error("%s: bad .npy header: missing '%s'", a->path,
                       !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
    a->dtype = npy_dtype(descr, &a->elem_bytes);
    if (a->dtype < 0)
        rt_input_error("%s: big-endian or unsupported dtype '%s' (supported: little-endian "
                       "u1, u2, i4, i8, f4)", a->path, descr);
    if (fortran)
        rt_input_error("%s: fortran_order arrays are not supported (save a C-ordered array: "
                       "np.ascontiguousarray)", a->path);
}

/* a * b for non-negative values; -1 on overflow. */
static int64_t mul_nonneg(int64_t a, int64_t b)
{
    if (a != 0 && b > INT64_MAX / a)
        return -1;
    return a * b;
}

/* Reads a little-endian u16/u32 from the mapping (bounds checked by the caller). */
static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const unsigned char *p)
{
    return le16(p) | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Copies path into a fixed buffer of RT_PATH_MAX bytes (every mapped file keeps its
 * name for messages). */
static void copy_path(char *dst, const char *path)
{
    size_t plen = strlen(path);
    if (plen >= RT_PATH_MAX)
        rt_input_error("%.64s...: path longer than %d bytes", path, RT_PATH_MAX - 1);
    memcpy(dst, path, plen + 1);
}

/* Maps a regular file read-only; *len gets its size. A file shorter than min_len
 * (>= 1, so the mapping is never empty) exits 1 as "PATH: not a KIND (only N
 * bytes...)", with `detail` appended inside the parentheses. */
static int shard_key(int fd, char *key, size_t n);

/* key (when not NULL, of keylen bytes): the file's identity (shard_key), from the
 * descriptor mapped, or "" when it cannot be had */
static void *map_file(const char *path, size_t *len, size_t min_len, const char *kind,
                      const char *detail, char *key, size_t keylen)
{
    int64_t size;
    int fd = rt_open_regular(path, &size);   /* a FIFO: refused, not waited on */
    if (fd < 0) {
        if (errno == EINVAL)
            rt_input_error("%s: not a regular file", path);
        rt_input_error("%s: cannot open: %s", path, strerror(errno));
    }
    if (size < (int64_t)min_len) {
        close(fd);
        rt_input_error("%s: not a %s (only %jd bytes%s)", path, kind, (intmax_t)size, detail);
    }
    if ((uint64_t)size > SIZE_MAX) {
        close(fd);
        rt_input_error("%s: too large to map", path);
    }
    *len = (size_t)size;
    void *map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        rt_input_error("%s: cannot map: %s", path, strerror(e));
    }
    if (key && shard_key(fd, key, keylen) != 0)
        key[0] = 0;
    /* The mapping keeps the file alive; the descriptor is no longer needed. */
    if (close(fd) != 0)
        rt_fail("%s: close: %s", path, strerror(errno));
    return map;
}

void rt_npy_open(rt_npy *a, const char *path)
{
    memset(a, 0, sizeof *a);
    copy_path(a->path, path);
    /* Magic (6) + version (2) + header length (2 or 4) at least. */
    size_t len;
    void *map = map_file(path, &len, 10, ".npy file", "", NULL, 0);
    a->map = map;
    a->map_len = len;
    const unsigned char *b = map;

    if (memcmp(b, "\x93NUMPY", 6) != 0)
        rt_input_error("%s: not a .npy file (bad magic)", path);
    int major = b[6], minor = b[7];
    size_t pre, hlen;
    if (major == 1) {
        pre = 10;
        hlen = le16(b + 8);
    } else if (major == 2 || major == 3) {
        if (len < 12)
            rt_input_error("%s: truncated .npy header", path);
        pre = 12;
        hlen = le32(b + 8);
    } else {
        rt_input_error("%s: unsupported .npy version %d.%d (known: 1.0, 2.0, 3.0)", path, major,
                       minor);
    }
    if (hlen > len - pre)
        rt_input_error("%s: truncated .npy header (header says %zu bytes, the file has %zu)",
                       path, hlen, len - pre);
    npy_parse_header(a, (const char *)b + pre, hlen);

    if (a->rank == 0)
        rt_input_error("%s: a 0-d array has no rows (need shape [N, ...])", path);
    int64_t per_row = a->elem_bytes;
    for (int i = 1; i < a->rank && per_row >= 0; i++)
        per_row = mul_nonneg(per_row, a->shape[i]);
    int64_t total = per_row < 0 ? -1 : mul_nonneg(per_row, a->shape[0]);
    if (total < 0)
        rt_input_error("%s: header shape is impossibly large", path);
    a->rows = a->shape[0];
    a->row_bytes = per_row;
    size_t have = len - pre - hlen;
    if ((uint64_t)total > (uint64_t)have)
        rt_input_error("%s: header says %" PRId64 " rows of %" PRId64 " bytes but the file has "
                       "only %zu bytes of data (truncated?)", path, a->rows, a->row_bytes, have);
    a->data = b + pre + hlen;
}

void rt_npy_close(rt_npy *a)
{
    if (a->map && munmap(a->map, a->map_len) != 0)
        rt_die("munmap %s: %s", a->path, strerror(errno));
    a->map = NULL;
    a->data = NULL;
}

static size_t dtype_bytes(int dt)
{
    switch (dt) {
    case RT_U8: return 1;
    case RT_U16: return 2;
    case RT_I32: case RT_F32: return 4;
    case RT_I64: return 8;
    }
    rt_die("bad dtype %d", dt);
}

/* dst[n, row] = a[idx[i], row]; rows copied as they are, i64 narrowed to i32, or u8
 * and u16 widened to i32. */
void rt_npy_gather(const rt_npy *a, const int64_t *idx, int64_t n, void *dst, int to)
{
    unsigned char *out = dst;
    if (a->dtype == to) {
        size_t rb = (size_t)a->row_bytes;
        for (int64_t i = 0; i < n; i++) {
            if (idx[i] < 0 || idx[i] >= a->rows)
                rt_die("%s: row %" PRId64 " out of [0, %" PRId64 ")", a->path, idx[i], a->rows);
            memcpy(out + (size_t)i * rb, a->data + (size_t)idx[i] * rb, rb);
        }
        return;
    }
    if ((a->dtype == RT_U8 || a->dtype == RT_U16) && to == RT_I32) {
        int64_t per = a->row_bytes / a->elem_bytes;   /* elements per row */
        int32_t *o = dst;
        for (int64_t i = 0; i < n; i++) {
            if (idx[i] < 0 || idx[i] >= a->rows)
                rt_die("%s: row %" PRId64 " out of [0, %" PRId64 ")", a->path, idx[i], a->rows);
            const unsigned char *src = a->data + (size_t)idx[i] * (size_t)a->row_bytes;
            if (a->dtype == RT_U8)
                for (int64_t j = 0; j < per; j++)
                    o[i * per + j] = src[j];
            else
                for (int64_t j = 0; j < per; j++) {
                    uint16_t v;
                    memcpy(&v, src + 2 * j, 2);
                    o[i * per + j] = v;
                }
        }
        return;
    }
    if (a->dtype != RT_I64 || to != RT_I32)
        rt_die("%s: cannot convert %s to %s", a->path, rt_dtype_name(a->dtype),
               rt_dtype_name(to));
    int64_t per = a->row_bytes / 8;   /* elements per row */
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= a->rows)
            rt_die("%s: row %" PRId64 " out of [0, %" PRId64 ")", a->path, idx[i], a->rows);
        const unsigned char *src = a->data + (size_t)idx[i] * (size_t)a->row_bytes;
        for (int64_t j = 0; j < per; j++) {
            int64_t v;
            memcpy(&v, src + 8 * j, 8);
            if (v < INT32_MIN || v > INT32_MAX)
                rt_input_error("%s: row %" PRId64 ": value %" PRId64 " does not fit in i32",
                               a->path, idx[i], v);
            int32_t w = (int32_t)v;
            memcpy(out + 4 * (size_t)(i * per + j), &w, 4);
        }
    }
}

/* ---- token shards ------------------------------------------------------------ */

/* The position of the first token >= vocab, or -1: searched only once max_token
 * (a loop the compiler vectorizes, one per token width; shards run to 10^8 tokens)
 * has said that one exists. */
static int64_t first_out_of_vocab(const rt_shard *s, int64_t vocab)
{
    for (int64_t i = 0; i < s->ntok; i++)
        if (rt_shard_token(s, i) >= vocab)
            return i;
    return -1;
}

static uint32_t max_token16(const uint16_t *tok, int64_t n)
{
    uint16_t mx = 0;
    for (int64_t i = 0; i < n; i++)
        mx = tok[i] > mx ? tok[i] : mx;   /* (vectorized) */
    return mx;
}

static uint32_t max_token32(const uint32_t *tok, int64_t n)
{
    uint32_t mx = 0;
    for (int64_t i = 0; i < n; i++)
        mx = tok[i] > mx ? tok[i] : mx;   /* (vectorized) */
    return mx;
}

static uint32_t max_token(const rt_shard *s)
{
    return s->width == 4 ? max_token32(s->tok, s->ntok) : max_token16(s->tok, s->ntok);
}

/* A shard's largest token, remembered in the cache folder (rt_cache_dir, "shards/")
 * by the file's identity: device, inode, size, and the times of its last change of
 * data (mtime) and of anything (ctime), in nanoseconds; a shard rewritten or replaced
 * changes one of them, and is read again. So a dataset of many GB is read once, not
 * at every start (a 200M-token shard: 0.1 s from the page cache, more from a disk).
 * The entry holds its key, so a hash collision reads as a miss. Any failure to read
 * or write the cache costs a scan, nothing else. */
static int shard_key(int fd, char *key, size_t n)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    snprintf(key, n, "trainc-shard-max 1 %llu %llu %lld %lld.%09ld %lld.%09ld",
             (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
             (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
             (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
    return 0;
}

static int shard_cache_path(const char *key, char *path, size_t n)
{
    char dir[RT_PATH_MAX];
    if (rt_cache_dir(dir, sizeof dir) != 0)
        return -1;
    return snprintf(path, n, "%s/shards/%016llx", dir,
                    (unsigned long long)rt_fnv1a(key, strlen(key))) < (int)n ? 0 : -1;
}

static int shard_max_cached(const char *key, uint32_t *mx)
{
    char path[RT_PATH_MAX + 64], line[512];
    if (shard_cache_path(key, path, sizeof path) != 0)
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t kl = strlen(key);
    if (!ok || strncmp(line, key, kl) || line[kl] != ' ')
        return -1;
    char *end;
    unsigned long v = strtoul(line + kl + 1, &end, 10);
    if (end == line + kl + 1 || *end != '\n' || v > UINT32_MAX)
        return -1;
    *mx = (uint32_t)v;
    return 0;
}

static void shard_max_put(const char *key, uint32_t mx)
{
    char path[RT_PATH_MAX + 64], tmp[RT_PATH_MAX + 96], dir[RT_PATH_MAX + 64];
    if (shard_cache_path(key, path, sizeof path) != 0)
        return;
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    if (rt_mkdir_p(dir) != 0)
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    int bad = fprintf(f, "%s %" PRIu32 "\n", key, mx) < 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
        unlink(tmp);
}

/* The header is 256 int32: [0] magic, [1] version, [2] token count, the rest zero;
 * the magic and version give the token width (uint16, or uint32 for vocabularies
 * over 65536). The file must hold exactly that many tokens after it (llm.c checks
 * the same), so a shard written with another token width or cut short is caught. */
static void shard_header(rt_shard *s, const char *path, size_t len)
{
    const unsigned char *b = s->map;
    uint32_t magic = le32(b), version = le32(b + 4);
    int32_t count = (int32_t)le32(b + 8);
    if (magic != RT_SHARD_MAGIC && magic != RT_SHARD32_MAGIC)
        rt_input_error("%s: not a token shard (bad magic %" PRIu32 ", expected %d for uint16 "
                       "tokens or %d for uint32)", path, magic, RT_SHARD_MAGIC,
                       RT_SHARD32_MAGIC);
    s->width = magic == RT_SHARD32_MAGIC ? 4 : 2;
    int want_version = s->width == 4 ? RT_SHARD32_VERSION : RT_SHARD_VERSION;
    if (version != (uint32_t)want_version)
        rt_input_error("%s: unsupported token shard version %" PRIu32 " (known with magic %"
                       PRIu32 ": %d)", path, version, magic, want_version);
    if (count < 0)
        rt_input_error("%s: bad token shard header: negative token count %" PRId32, path,
                       count);
    const char *type = s->width == 4 ? "uint32" : "uint16";
    uint64_t want = (uint64_t)s->width * (uint64_t)count, have = len - RT_SHARD_HEADER_BYTES;
    if (want > have)
        rt_input_error("%s: header says %" PRId32 " tokens (%" PRIu64 " bytes as %s) but the "
                       "file holds only %" PRIu64 " bytes after the header (truncated?)", path,
                       count, want, type, have);
    if (want < have)
        rt_input_error("%s: header says %" PRId32 " tokens (%" PRIu64 " bytes as %s) but the "
                       "file holds %" PRIu64 " bytes after the header (not %s tokens, or a "
                       "wrong count?)", path, count, want, type, have, type);
    s->ntok = count;
    /* The mapping is page-aligned and the header 1024 bytes: tokens are aligned. */
    s->tok = b + RT_SHARD_HEADER_BYTES;
}

void rt_shard_open(rt_shard *s, const char *path, int64_t vocab, const char *vocab_from)
{
    memset(s, 0, sizeof *s);
    copy_path(s->path, path);
    size_t len;
    char key[256];
    s->map = map_file(path, &len, RT_SHARD_HEADER_BYTES, "token shard",
                      ", shorter than the 1024-byte header", key, sizeof key);
    s->map_len = len;
    shard_header(s, path, len);
    /* uint16 tokens all lie inside a vocabulary over 65535; uint32 ones are read into
     * i32 inputs, so they are checked against 2^31 at least */
    if (s->width == 4 && (vocab <= 0 || vocab > INT32_MAX)) {
        vocab = (int64_t)INT32_MAX + 1;
        vocab_from = "token ids are read as i32";
    }
    if (vocab <= 0 || (s->width == 2 && vocab > UINT16_MAX))
        return;
    uint32_t mx;
    int keyed = key[0] != 0;
    if (!keyed || shard_max_cached(key, &mx) != 0) {
        mx = max_token(s);
        if (keyed)
            shard_max_put(key, mx);
    }
    if (mx < vocab)
        return;
    int64_t i = first_out_of_vocab(s, vocab);
    if (i >= 0)
        rt_input_error("%s: token %" PRIu32 " at position %" PRId64 " is outside the "
                       "vocabulary [0, %" PRId64 ")%s%s%s", path, rt_shard_token(s, i), i,
                       vocab, vocab_from ? " (" : "", vocab_from ? vocab_from : "",
                       vocab_from ? ")" : "");
}

void rt_shard_close(rt_shard *s)
{
    if (s->map && munmap(s->map, s->map_len) != 0)
        rt_die("munmap %s: %s", s->path, strerror(errno));
    s->map = NULL;
    s->tok = NULL;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Header, then the tokens converted to little-endian uint16 (elem_bytes 1, 2) or
 * uint32 (4) a chunk at a time (so bytes need no second copy of the whole input).
 * Returns 0 or -1 with errno. */
static int shard_put(FILE *f, const void *tok, int elem_bytes, int64_t n)
{
    int width = elem_bytes == 4 ? 4 : 2;
    unsigned char hdr[RT_SHARD_HEADER_BYTES] = {0};
    put_le32(hdr, width == 4 ? RT_SHARD32_MAGIC : RT_SHARD_MAGIC);
    put_le32(hdr + 4, width == 4 ? RT_SHARD32_VERSION : RT_SHARD_VERSION);
    put_le32(hdr + 8, (uint32_t)n);
    if (fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr)
        return -1;
    unsigned char buf[1 << 16];   /* 32768 uint16 or 16384 uint32 tokens, little-endian */
    const unsigned char *src = tok;
    int64_t chunk = (int64_t)sizeof buf / width;
    for (int64_t lo = 0; lo < n;) {
        int64_t k = n - lo < chunk ? n - lo : chunk;
        for (int64_t i = 0; i < k; i++) {
            uint32_t v = 0;
            if (elem_bytes == 1)
                v = src[lo + i];
            else if (elem_bytes == 2) {
                uint16_t h;
                memcpy(&h, src + 2 * (lo + i), 2);
                v = h;
            } else
                memcpy(&v, src + 4 * (lo + i), 4);
            for (int j = 0; j < width; j++)
                buf[width * i + j] = (unsigned char)(v >> (8 * j));
        }
        if (fwrite(buf, (size_t)width, (size_t)k, f) != (size_t)k)
            return -1;
        lo += k;
    }
    return fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -1;
}

int rt_shard_write(const char *path, const void *tok, int elem_bytes, int64_t n)
{
    if ((elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4) || n < 0 || (n > 0 && !tok))
        rt_die("rt_shard_write(%s, elem_bytes %d, n %" PRId64 ")", path, elem_bytes, n);
    if (n > INT32_MAX) {
        errno = EFBIG;   /* the header's count is an int32 */
        return -1;
    }
    char tmp[RT_PATH_MAX + 8];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return -1;
    int rc = shard_put(f, tok, elem_bytes, n);
    int err = errno;
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        err = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        err = errno;
    }
    if (rc != 0) {
        unlink(tmp);
        errno = err;
    }
    return rc;
}

/* ---- datasets ---------------------------------------------------------------- */

static void shape_str(char *buf, size_t cap, const int64_t *shape, int rank)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* Element j of the mapped array as an integer (integer dtypes only). */
static int64_t npy_int_at(const rt_npy *a, int64_t j)
{
    const unsigned char *p = a->data + (size_t)j * (size_t)a->elem_bytes;
    switch (a->dtype) {
    case RT_U8: return p[0];
    case RT_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case RT_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case RT_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    }
    rt_die("not an integer dtype: %d", a->dtype);
}

/* Scans every element once: class labels within [0, classes), an embedding's ids
 * within [0, vocab), i64 values within i32 (so that neither the loader's narrowing in
 * a worker thread nor a kernel can meet a bad value after training started). */
static void check_values(const rt_npy *a, const rt_input *in, const char *where)
{
    if (a->dtype == RT_F32)
        return;
    int64_t per = in->numel > 0 ? in->numel : 1;
    int64_t total = a->rows * per, prev = -1;
    char at[96];
    for (int64_t j = 0; j < total; j++) {
        int64_t v = npy_int_at(a, j);
        int bad_label = in->classes > 0 && (v < 0 || v >= in->classes) &&
                        !(in->has_ignore && v == in->ignore);
        int bad_id = in->vocab > 0 && (v < 0 || v >= in->vocab);
        /* positions count up from 0 in each sequence: 0, or the place before's + 1 */
        int bad_pos = in->positions && v != 0 && (j % per == 0 || v != prev + 1);
        prev = v;
        if (bad_label || bad_id || bad_pos) {
            if (per == 1)
                snprintf(at, sizeof at, "row %" PRId64, j);
            else
                snprintf(at, sizeof at, "row %" PRId64 ", element %" PRId64, j / per, j % per);
        }
        if (bad_label)
            rt_input_error("%s: %s: %s: label %" PRId64 " is outside [0, %" PRId64 ") (model "
                           "input '%s' has %" PRId64 " classes)", a->path, where, at, v,
                           in->classes, in->name, in->classes);
        if (bad_id)
            rt_input_error("%s: %s: %s: id %" PRId64 " is outside [0, %" PRId64 ") (model "
                           "input '%s' feeds an embedding with vocab %" PRId64 ")", a->path,
                           where, at, v, in->vocab, in->name, in->vocab);
        if (bad_pos)
            rt_input_error("%s: %s: %s: position %" PRId64 " where %s (model input '%s' holds "
                           "each token's position in its sequence: 0 where one starts, else one "
                           "more than the place before's)", a->path, where, at, v,
                           j % per ? "0 or one more than the place before's is" : "a row starts at 0",
                           in->name);
        if (a->dtype == RT_I64 && (v < INT32_MIN || v > INT32_MAX))
            rt_input_error("%s: %s: row %" PRId64 ": value %" PRId64 " does not fit in i32",
                           a->path, where, j / per, v);
    }
}

/* a (opened) as data of model input `in`: its dtype, its per-sample shape, and its
 * values (labels, ids, i64 within i32); exits 1 naming a->path and where otherwise. */
void rt_npy_check_input(const rt_npy *a, const rt_input *in, const char *where)
{
    if (a->dtype != in->dtype && !(a->dtype == RT_I64 && in->dtype == RT_I32))
        rt_input_error("%s: %s: dtype %s does not match model input '%s' (%s)%s", a->path,
                       where, rt_dtype_name(a->dtype), in->name, rt_dtype_name(in->dtype),
                       in->dtype == RT_I32 ? "; i64 is also accepted" : "");
    /* File shape [N, *input shape]; a scalar input wants [N]. One value a sample
     * is one value however the file's rows are shaped: [N] for a [1] target (a
     * regression's y), [N, 1] for a scalar one. */
    int same = a->rank == in->rank + 1;
    for (int k = 0; same && k < in->rank; k++)
        same = a->shape[k + 1] == in->shape[k];
    int64_t file_numel = 1;
    for (int k = 1; k < a->rank; k++)
        file_numel *= a->shape[k];
    if (in->numel == 1 && file_numel == 1)
        same = 1;
    if (!same) {
        char fs[160], is[160];
        shape_str(fs, sizeof fs, a->shape + 1, a->rank - 1);
        shape_str(is, sizeof is, in->shape, in->rank);
        rt_input_error("%s: %s: per-sample shape %s (file shape [N, ...] minus N) does not "
                       "match model input '%s' shape %s", a->path, where, fs, in->name, is);
    }
    if (in->classes > 0 && in->dtype == RT_F32)
        rt_input_error("%s: %s: model input '%s' has classes but f32 data", a->path, where,
                       in->name);
    if (in->classes > 0 || in->vocab > 0 || in->positions || a->dtype == RT_I64)
        check_values(a, in, where);
}

/* base_dir/path unless path is absolute or base_dir empty. */
static void join_path(char *out, const char *base_dir, const char *path, const char *where)
{
    int n;
    if (path[0] == '/' || !base_dir || !base_dir[0] || strcmp(base_dir, ".") == 0)
        n = snprintf(out, RT_PATH_MAX, "%s", path);
    else
        n = snprintf(out, RT_PATH_MAX, "%s%s%s", base_dir,
                     base_dir[strlen(base_dir) - 1] == '/' ? "" : "/", path);
    if (n < 0 || n >= RT_PATH_MAX)
        rt_input_error("%s: path '%.64s...' is longer than %d bytes", where, path,
                       RT_PATH_MAX - 1);
}

/* ---- token datasets ---------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The smallest bound of the two inputs (their `classes`, and the `vocab` of an
 * embedding reading one): every token lands in both (shifted by one), so each must be
 * valid for either. 0 = no check. */
static int64_t token_vocab(const rt_model *m, int y_in, char *from, size_t cap)
{
    int64_t vocab = 0;
    for (int k = 0; k < 2; k++) {
        const rt_input *in = &m->inputs[k ? y_in : 0];
        if (in->classes > 0 && (vocab == 0 || in->classes < vocab)) {
            vocab = in->classes;
            snprintf(from, cap, "model input '%s' has %" PRId64 " classes", in->name,
                     in->classes);
        }
        if (in->vocab > 0 && (vocab == 0 || in->vocab < vocab)) {
            vocab = in->vocab;
            snprintf(from, cap, "model input '%s' feeds an embedding with vocab %" PRId64,
                     in->name, in->vocab);
        }
    }
    return vocab;
}

/* Matches `pattern` and returns its files sorted bytewise (glob sorts with the
 * locale's collation; the order of samples must not depend on it). */
static char **match_files(const char *pattern, const char *where, size_t *count, glob_t *g)
{
    int rc = glob(pattern, 0, NULL, g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g->gl_pathc == 0))
        rt_input_error("train spec: %s: no file matches '%s'", where, pattern);
    if (rc == GLOB_NOSPACE)
        rt_fail("%s: out of memory matching '%s'", where, pattern);
    if (rc != 0)
        rt_input_error("train spec: %s: cannot read the folders of '%s'", where, pattern);
    qsort(g->gl_pathv, g->gl_pathc, sizeof(char *), cmp_str);
    *count = g->gl_pathc;
    return g->gl_pathv;
}

/* Windows of a shard of n tokens: starts 0, T, 2T, ... with T + 1 tokens available. */
static int64_t shard_windows(int64_t n, int64_t T) { return n > T ? (n - 1) / T : 0; }

/* Whether input in is i32 of shape [T] (a window's). */
static int window_input(const rt_input *in, int64_t T)
{
    return in && in->dtype == RT_I32 && in->rank == 1 && in->shape[0] == T && T >= 1;
}

/* Token data's inputs: the tokens (the first), the next tokens, and where the model has
 * them its positions, which loader.documents fills (d->y_in, d->pos_in, d->doc). */
static void tokens_inputs(rt_dataset *d, const rt_model *m, int64_t documents,
                          const char *where)
{
    d->pos_in = -1;
    for (int i = 1; i < m->n_inputs; i++)
        if (m->inputs[i].positions)
            d->pos_in = i;
    if (d->pos_in >= 0 && documents < 0)
        rt_input_error("train spec: %s: token shards hold no positions, and the model reads "
                       "them (\"positions\": \"%s\"): set loader.documents to the token that "
                       "begins each document (attention then stays inside documents), or read "
                       ".npy data (trainc data sft --pack writes them)", where,
                       m->inputs[d->pos_in].name);
    if (d->pos_in < 0 && documents >= 0)
        rt_input_error("train spec: $.train.loader.documents: it fills the model's positions "
                       "input, and the model has none (\"positions\": \"pos\" and an i32 input "
                       "pos of shape [T])");
    d->y_in = d->pos_in == 1 ? 2 : 1;
    d->doc = documents;
    int64_t T = m->inputs[0].shape[0];
    if (m->n_inputs != (d->pos_in >= 0 ? 3 : 2) || !window_input(&m->inputs[0], T) ||
        !window_input(&m->inputs[d->y_in], T) ||
        (d->pos_in >= 0 && !window_input(&m->inputs[d->pos_in], T)))
        rt_input_error("train spec: %s: token data needs a model with two i32 inputs of shape "
                       "[T] (the tokens and the next tokens)%s", where, d->pos_in >= 0 ?
                       ", and its positions, i32 [T] too" : "");
}

static void tokens_open(rt_dataset *d, const rt_model *m, const rt_data_entry *entries, int n,
                        const char *base_dir, const char *what, int64_t documents)
{
    char where[128];
    snprintf(where, sizeof where, "$.train.data.%s.tokens", what);
    if (n != 1)
        rt_input_error("train spec: %s: tokens must be the only entry of data.%s", where, what);
    tokens_inputs(d, m, documents, where);
    const rt_input *a = &m->inputs[0];
    char vocab_from[160];
    int64_t vocab = token_vocab(m, d->y_in, vocab_from, sizeof vocab_from);
    if (vocab && documents >= vocab)
        rt_input_error("train spec: $.train.loader.documents: token %lld lies past the "
                       "vocabulary (%s)", (long long)documents, vocab_from);
    char pattern[RT_PATH_MAX];
    join_path(pattern, base_dir, entries[0].path, where);

    glob_t g;
    size_t nf;
    char **files = match_files(pattern, where, &nf, &g);
    if (nf > INT32_MAX)
        rt_input_error("train spec: %s: '%s' matches more than %d files", where, pattern,
                       INT32_MAX);
    d->n = m->n_inputs;
    d->tokens = 1;
    d->T = a->shape[0];
    d->n_shards = (int)nf;
    d->shards = rt_xmalloc(sizeof(rt_shard) * nf);
    d->win_start = rt_xmalloc(sizeof(int64_t) * (nf + 1));
    int64_t longest = 0;
    for (size_t i = 0; i < nf; i++) {
        rt_shard_open(&d->shards[i], files[i], vocab, vocab ? vocab_from : NULL);
        d->win_start[i + 1] = d->win_start[i] + shard_windows(d->shards[i].ntok, d->T);
        longest = d->shards[i].ntok > longest ? d->shards[i].ntok : longest;
    }
    globfree(&g);
    d->rows = d->win_start[nf];
    if (d->rows == 0)
        rt_input_error("%s data: shards matching '%s' hold no window of T+1 = %" PRId64
                       " tokens (%zu shard%s, the longest has %" PRId64 " tokens)", what,
                       pattern, d->T + 1, nf, nf == 1 ? "" : "s", longest);
}

/* The shard holding window w: the last s with win_start[s] <= w (shards without
 * windows have win_start[s] == win_start[s + 1] and are skipped). */
static int shard_of(const rt_dataset *d, int64_t w)
{
    int lo = 0, hi = d->n_shards;   /* win_start[lo] <= w < win_start[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (d->win_start[mid] <= w)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* pos[t]: x[t]'s place in its document, a document beginning at each token doc and
 * at the window's start (0 there, else one more than the place before's) */
static void document_positions(const int32_t *x, int64_t T, int64_t doc, int32_t *pos)
{
    pos[0] = 0;
    for (int64_t t = 1; t < T; t++)
        pos[t] = x[t] == doc ? 0 : pos[t - 1] + 1;
}

/* x[i, t] = tok[o + t], y[i, t] = tok[o + 1 + t] for t < T, where o is the start
 * of window idx[i]; x, y: [n, T] i32; pos (NULL without): document_positions. */
static void tokens_gather(const rt_dataset *d, const int64_t *idx, int64_t n, int32_t *x,
                          int32_t *y, int32_t *pos)
{
    int64_t T = d->T;
    for (int64_t i = 0; i < n; i++) {
        int64_t w = idx[i];
        if (w < 0 || w >= d->rows)
            rt_die("window %" PRId64 " out of [0, %" PRId64 ")", w, d->rows);
        int s = shard_of(d, w);
        const rt_shard *sh = &d->shards[s];
        int64_t o = (w - d->win_start[s]) * T;
        int32_t *xi = x + i * T, *yi = y + i * T;
        /* uint32 ids fit an i32: rt_shard_open checked them against 2^31 at least */
        if (sh->width == 4) {
            const uint32_t *p = (const uint32_t *)sh->tok + o;
            for (int64_t t = 0; t < T; t++)
                xi[t] = (int32_t)p[t];
            for (int64_t t = 0; t < T; t++)
                yi[t] = (int32_t)p[t + 1];
        } else {
            const uint16_t *p = (const uint16_t *)sh->tok + o;
            for (int64_t t = 0; t < T; t++)
                xi[t] = p[t];
            for (int64_t t = 0; t < T; t++)
                yi[t] = p[t + 1];
        }
        if (pos)
            document_positions(xi, T, d->doc, pos + i * T);
    }
}

/* a: `rows` rows of input in's shape, all zero, in anonymous memory (rt_npy_close unmaps) */
static void npy_zeros(rt_npy *a, const rt_input *in, int64_t rows)
{
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "(zeros for %s)", in->name);
    a->dtype = in->dtype;
    a->rank = in->rank + 1;
    a->shape[0] = a->rows = rows;
    for (int k = 0; k < in->rank; k++)
        a->shape[k + 1] = in->shape[k];
    a->elem_bytes = 4;
    a->row_bytes = in->numel * 4;
    a->map_len = (size_t)(rows * a->row_bytes);
    a->map = mmap(NULL, a->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a->map == MAP_FAILED)
        rt_fail("cannot map %zu bytes: %s", a->map_len, strerror(errno));
    a->data = a->map;
}

int rt_dataset_absent(const rt_data_entry *entries, int n, const char *base_dir)
{
    for (int j = 0; j < n; j++) {
        char path[RT_PATH_MAX];
        join_path(path, base_dir, entries[j].path, entries[j].key);
        glob_t g;
        int found = strcmp(entries[j].key, "tokens") ? access(path, F_OK) == 0
                                                     : glob(path, 0, NULL, &g) == 0;
        if (!strcmp(entries[j].key, "tokens") && found)
            globfree(&g);
        if (found)
            return 0;
    }
    return 1;
}

void rt_dataset_open(rt_dataset *d, const rt_model *m, const rt_data_entry *entries, int n,
                     const char *base_dir, const char *what, int64_t documents)
{
    memset(d, 0, sizeof *d);
    if (m->n_inputs < 1 || m->n_inputs > RT_MAX_INPUTS)
        rt_die("model has %d inputs", m->n_inputs);
    for (int j = 0; j < n; j++)
        if (strcmp(entries[j].key, "tokens") == 0) {
            tokens_open(d, m, entries, n, base_dir, what, documents);
            return;
        }
    if (documents >= 0)
        rt_input_error("train spec: $.train.loader.documents: it fills the positions of token "
                       "data (data.%s.tokens); .npy data bring their own", what);
    /* Every entry must name a model input: a stray key is a typo, not data to skip. */
    for (int j = 0; j < n; j++) {
        int found = 0;
        for (int i = 0; i < m->n_inputs; i++)
            found |= strcmp(entries[j].key, m->inputs[i].name) == 0;
        if (!found)
            rt_input_error("train spec: $.train.data.%s.%s: the model has no input named '%s'",
                           what, entries[j].key, entries[j].key);
    }
    d->n = m->n_inputs;
    int zeros = -1;
    for (int i = 0; i < m->n_inputs; i++) {
        const rt_input *in = &m->inputs[i];
        const rt_data_entry *e = NULL;
        for (int j = 0; j < n && !e; j++)
            if (strcmp(entries[j].key, in->name) == 0)
                e = &entries[j];
        if (!e)
            rt_input_error("train spec: $.train.data.%s: no file for model input '%s'", what,
                           in->name);
        if (!e->path[0] && m->loss == RT_LOSS_DPO && i == m->reference_input && i > 0) {
            zeros = i;   /* (--reference: the input it writes, zeros till then) */
            continue;
        }
        char where[128], path[RT_PATH_MAX];
        snprintf(where, sizeof where, "$.train.data.%s.%s", what, in->name);
        join_path(path, base_dir, e->path, where);
        rt_npy *a = &d->arr[i];
        if (access(path, R_OK) != 0)   /* the key too, for a file that is not there */
            rt_input_error("%s: %s: cannot open: %s%s", path, where, strerror(errno),
                           m->loss == RT_LOSS_DPO && i == m->reference_input
                               ? " (the reference model's log-probabilities: the trainer's "
                                 "--reference with --init REFERENCE_WEIGHTS writes them)"
                               : "");
        rt_npy_open(a, path);

        rt_npy_check_input(a, in, where);
        if (a->rows == 0)
            rt_input_error("%s: %s: the array has no rows", path, where);
        if (i > 0 && a->rows != d->rows)
            rt_input_error("%s: %s: %" PRId64 " rows, but %s has %" PRId64 " (every input of "
                           "a dataset needs the same number of rows)", path, where, a->rows,
                           d->arr[0].path, d->rows);
        d->rows = a->rows;
    }
    if (zeros > 0)
        npy_zeros(&d->arr[zeros], &m->inputs[zeros], d->rows);
}

static uint64_t fp_bytes(uint64_t h, const unsigned char *p, int64_t n)
{
    const int64_t edge = 64 << 10;
    h = rt_xxh64(&n, sizeof n, h);
    h = rt_xxh64(p, (size_t)(n < edge ? n : edge), h);
    return n > edge ? rt_xxh64(p + n - edge, (size_t)edge, h) : h;
}

uint64_t rt_dataset_fingerprint(const rt_dataset *d)
{
    uint64_t h = rt_xxh64(&d->rows, sizeof d->rows, 0x7261696e);
    if (d->tokens)
        for (int i = 0; i < d->n_shards; i++)
            h = fp_bytes(h, (const unsigned char *)d->shards[i].tok,
                         d->shards[i].ntok * d->shards[i].width);
    else
        for (int i = 0; i < d->n; i++)
            h = fp_bytes(h, d->arr[i].data, d->arr[i].rows * d->arr[i].row_bytes);
    return h ? h : 1;
}

void rt_dataset_close(rt_dataset *d)
{
    for (int i = 0; i < d->n; i++)
        rt_npy_close(&d->arr[i]);
    for (int i = 0; i < d->n_shards; i++)
        rt_shard_close(&d->shards[i]);
    rt_xfree(d->shards);
    rt_xfree(d->win_start);
    d->shards = NULL;
    d->win_start = NULL;
    d->n_shards = 0;
    d->tokens = 0;
    d->n = 0;
}

/* ---- the batch loader ----------------------------------------------------------
 *
 * Sample order of epoch e (a pure function of seed, e and the row count N):
 *   without shuffle: order[i] = i;
 *   with shuffle: order starts as the identity; rt_rng is seeded with
 *     seed ^ (0x9E3779B97F4A7C15 * (e + 1))   (mod 2^64)
 *   and for i = N-1 down to 1: j = rt_rng_below(i + 1); swap(order[i], order[j]),
 *   where rt_rng_below(n) draws rt_rng_u64 values, rejects those below 2^64 mod n and
 *   returns the first accepted one mod n (Fisher-Yates without modulo bias).
 * Batch b of the epoch holds rows order[b*B .. min(b*B + B, N)); with drop_last the
 * epoch has floor(N / B) batches, else ceil(N / B), the last one possibly short.
 *
 * Sharded (rt_loader_set_shard, world W > 1), exactly torch's DistributedSampler on
 * that order: the epoch's list is the order above, cut to floor(N / W) * W samples
 * with drop_last, else padded to ceil(N / W) * W by repeating it from its start;
 * rank r takes its entries r, r + W, r + 2W, ... (so local[k] = order[(r + kW) mod N])
 * and forms batches from those n = floor or ceil(N / W) samples by the rule above
 * with n for N. Every rank draws the same permutation (same seed and epoch), so the
 * ranks' lists are disjoint up to the padding and together cover the epoch.
 * Split (rt_loader_set_split, for validation): the same entries r, r + W, ... but
 * below N only, so every sample is seen exactly once over the ranks.
 *
 * Threads: batch k always goes to slot k % nslots, and a worker may claim batch k
 * only when that slot is free, so slots are filled in order and the content of
 * every batch depends on (order, k) alone, never on the number of workers. One
 * mutex guards all the bookkeeping; workers fill a claimed slot outside it (the
 * slot's buffers then belong to that worker alone). rt_loader_start bumps the
 * generation, waits until no slot is being filled (so `order` can be rewritten),
 * frees every slot and lets the workers claim again from the new position. */

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct loader_slot {
    rt_batch b;                /* b.in[i]: [B, numel_i] in input i's dtype */
    int state;                 /* SLOT_* */
    unsigned char *aug;        /* loader.augment: one image, the source of its crop */
} loader_slot;

struct rt_loader {
    const rt_model *m;
    const rt_dataset *d;
    int64_t B, nb;             /* batch size, batches per epoch */
    int shuffle, drop_last;
    uint64_t seed;
    int rank, world;           /* the DistributedSampler shard; 0, 1 unsharded */
    int64_t n;                 /* this rank's samples per epoch (N unsharded) */
    int nworkers, nslots;
    int indices;               /* rt_loader_indices_only: batches hold sample indices */
    int64_t aug_pad;           /* loader.augment (rt_loader_set_augment): crop padding, */
    int aug, aug_hflip;        /* on, flips */
    int aug_rrc;               /* random_resized_crop (rt_loader_set_rrc) in the crop's place */
    rt_rrc rrc;
    int aug_jitter;            /* color_jitter (rt_loader_set_jitter) after them */
    rt_jitter jitter;
    int mask, mask_in, mask_tgt; /* loader.mask (rt_loader_set_mask): on, its two inputs */
    rt_mask_rule mask_rule;
    int64_t *order;            /* [n]: this rank's samples of the current epoch, in order */
    int64_t *perm;             /* [N]: the whole epoch's order when sharded, else NULL */
    loader_slot *slots;        /* [nslots] */
    pthread_t *threads;        /* [nworkers] */

    pthread_mutex_t mu;
    pthread_cond_t work_cv;    /* workers: a slot was freed, a start, or stop */
    pthread_cond_t done_cv;    /* consumer and start: a slot became ready or idle */
    int64_t epoch;
    int64_t next_claim;        /* next batch index a worker will take */
    int64_t next_take;         /* next batch index rt_loader_next returns */
    uint64_t gen;              /* bumped by every start; stale fills are discarded */
    int filling;               /* slots in SLOT_FILLING */
    int paused, started, stop;
};

#define PT_CHECK(call)                                                                \
    do {                                                                              \
        int pt_err_ = (call);                                                         \
        if (pt_err_ != 0)                                                             \
            rt_die("%s: %s", #call, strerror(pt_err_));                               \
    } while (0)

/* The whole epoch's order of all N samples into order[N]. */
static void epoch_order(const rt_loader *l, int64_t epoch, int64_t *order)
{
    int64_t n = l->d->rows;
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!l->shuffle)
        return;
    rt_rng r;
    rt_rng_seed(&r, l->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1)));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rt_rng_below(&r, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* This rank's list: the epoch order itself, or every world-th entry of it from
 * `rank`, wrapping around into the padding (DistributedSampler's rule). */
static void make_order(rt_loader *l, int64_t epoch)
{
    if (l->world == 1) {
        epoch_order(l, epoch, l->order);
        return;
    }
    epoch_order(l, epoch, l->perm);
    int64_t N = l->d->rows;
    for (int64_t k = 0; k < l->n; k++)
        l->order[k] = l->perm[(l->rank + k * l->world) % N];
}

static size_t slot_bytes(const rt_loader *l, int i);

/* loader.augment on the rows of a batch just gathered (each input [C, H, W]): row i, the
 * dataset's row order[lo + i], copied aside and cropped (or resized-cropped) and flipped
 * back into place, then color-jittered there */
static void augment_batch(const rt_loader *l, loader_slot *s, int64_t epoch, int64_t lo,
                          int64_t rows)
{
    for (int i = 0; i < l->d->n; i++) {
        const rt_input *in = &l->m->inputs[i];
        if (in->rank != 3)
            continue;
        size_t elem = dtype_bytes(rt_batch_dtype(in)), rb = (size_t)in->numel * elem;
        for (int64_t r = 0; r < rows; r++) {
            unsigned char *row = (unsigned char *)s->b.in[i] + (size_t)r * rb;
            int64_t top, left, box[4];
            int flip;
            uint64_t bits = rt_aug_bits(l->seed, epoch, l->order[lo + r]);
            rt_aug_draw(bits, l->aug_pad, l->aug_hflip, &top, &left, &flip);
            memcpy(s->aug, row, rb);
            if (l->aug_rrc) {   /* (u8 images: the compiler's check) */
                rt_rrc_box(&l->rrc, bits, in->shape[1], in->shape[2], box);
                rt_resized_crop(s->aug, row, in->shape[0], in->shape[1], in->shape[2], box, flip);
            } else
                rt_augment_image(s->aug, row, in->shape[0], in->shape[1], in->shape[2], (int)elem,
                                 l->aug_pad, top, left, flip);
            if (l->aug_jitter) {   /* (u8 images of 1 or 3 channels) */
                rt_jitter_draw jd;
                rt_jitter_draw_of(&l->jitter, bits, &jd);
                rt_color_jitter(row, in->shape[0], in->shape[1], in->shape[2], &l->jitter, &jd);
            }
        }
    }
}

void rt_loader_set_augment(rt_loader *l, int64_t pad, int hflip)
{
    size_t most = 1;
    for (int i = 0; i < l->m->n_inputs; i++)
        if (slot_bytes(l, i) / (size_t)l->B > most)
            most = slot_bytes(l, i) / (size_t)l->B;
    for (int s = 0; s < l->nslots; s++)
        l->slots[s].aug = rt_xmalloc(most);
    l->aug = 1;
    l->aug_pad = pad;
    l->aug_hflip = hflip;
}

void rt_loader_set_rrc(rt_loader *l, const rt_rrc *k)
{
    l->aug_rrc = 1;
    l->rrc = *k;
}

void rt_loader_set_jitter(rt_loader *l, const rt_jitter *k)
{
    l->aug_jitter = 1;
    l->jitter = *k;
}

void rt_loader_set_mask(rt_loader *l, const rt_mask_rule *k, int in, int tgt)
{
    l->mask = 1;
    l->mask_rule = *k;
    l->mask_in = in;
    l->mask_tgt = tgt;
}

/* Assembles batch k of the current order into s (no lock needed: the caller owns s
 * and `order` does not change while any slot is being filled). */
static void fill_batch(const rt_loader *l, loader_slot *s, int64_t epoch, int64_t k)
{
    int64_t lo = k * l->B;
    int64_t rows = l->n - lo < l->B ? l->n - lo : l->B;
    if (l->indices)
        for (int64_t i = 0; i < rows; i++)
            ((int32_t *)s->b.in[0])[i] = (int32_t)l->order[lo + i];
    else if (l->d->tokens)
        tokens_gather(l->d, l->order + lo, rows, s->b.in[0], s->b.in[l->d->y_in],
                      l->d->pos_in >= 0 ? s->b.in[l->d->pos_in] : NULL);
    else
        for (int i = 0; i < l->d->n; i++)
            rt_npy_gather(&l->d->arr[i], l->order + lo, rows, s->b.in[i],
                          rt_batch_dtype(&l->m->inputs[i]));
    if (l->aug && !l->indices && !l->d->tokens)
        augment_batch(l, s, epoch, lo, rows);
    if (l->mask && !l->indices && !l->d->tokens)
        rt_mask_rows(s->b.in[l->mask_in], s->b.in[l->mask_tgt], l->order + lo, rows,
                     l->m->inputs[l->mask_in].numel, &l->mask_rule, epoch);
    s->b.rows = rows;
    s->b.epoch = epoch;
    s->b.index = k;
}

static int can_claim(const rt_loader *l)
{
    return !l->paused && l->started && l->next_claim < l->nb &&
           l->slots[l->next_claim % l->nslots].state == SLOT_FREE;
}

static void *worker_main(void *arg)
{
    rt_loader *l = arg;
    PT_CHECK(pthread_mutex_lock(&l->mu));
    for (;;) {
        while (!l->stop && !can_claim(l))
            PT_CHECK(pthread_cond_wait(&l->work_cv, &l->mu));
        if (l->stop)
            break;
        int64_t k = l->next_claim++;
        loader_slot *s = &l->slots[k % l->nslots];
        uint64_t gen = l->gen;
        int64_t epoch = l->epoch;
        s->state = SLOT_FILLING;
        l->filling++;
        PT_CHECK(pthread_mutex_unlock(&l->mu));

        fill_batch(l, s, epoch, k);

        PT_CHECK(pthread_mutex_lock(&l->mu));
        l->filling--;
        /* A start in between made this batch stale; start itself resets the slots,
         * so only a fill of the current generation publishes its result. */
        s->state = gen == l->gen ? SLOT_READY : SLOT_FREE;
        PT_CHECK(pthread_cond_broadcast(&l->done_cv));
    }
    PT_CHECK(pthread_mutex_unlock(&l->mu));
    return NULL;
}

/* A slot's buffer for input i: B rows; input 0's has room for B int32 indices too
 * (index mode). */
static size_t slot_bytes(const rt_loader *l, int i)
{
    size_t numel = (size_t)(l->m->inputs[i].numel > 0 ? l->m->inputs[i].numel : 1);
    size_t bytes = (size_t)l->B * numel * dtype_bytes(rt_batch_dtype(&l->m->inputs[i]));
    return i == 0 && bytes < (size_t)l->B * 4 ? (size_t)l->B * 4 : bytes;
}

rt_loader *rt_loader_new(const rt_model *m, const rt_dataset *d, int64_t batch, int shuffle,
                         int drop_last, uint64_t seed, int workers, int prefetch)
{
    if (batch < 1 || d->n != m->n_inputs || d->rows < 0)
        rt_die("rt_loader_new: batch %" PRId64 ", %d arrays for %d inputs", batch, d->n,
               m->n_inputs);
    rt_loader *l = rt_xmalloc(sizeof *l);
    l->m = m;
    l->d = d;
    l->B = batch;
    l->n = d->rows;
    l->nb = drop_last ? l->n / batch : (l->n + batch - 1) / batch;
    l->rank = 0;
    l->world = 1;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->seed = seed;
    l->nworkers = workers > 0 ? workers : 0;
    /* With workers, one slot more than `prefetch`: the consumer holds one batch while
     * `prefetch` more are assembled. Without workers one slot is enough. */
    l->nslots = l->nworkers ? (prefetch > 1 ? prefetch : 1) + 1 : 1;
    l->order = rt_xmalloc(sizeof(int64_t) * (size_t)(d->rows > 0 ? d->rows : 1));
    l->slots = rt_xmalloc(sizeof(loader_slot) * (size_t)l->nslots);
    for (int s = 0; s < l->nslots; s++) {
        for (int i = 0; i < m->n_inputs; i++) {
            l->slots[s].b.in[i] = rt_xmalloc(slot_bytes(l, i));
        }
        l->slots[s].aug = NULL;
    }
    l->aug = l->aug_hflip = l->aug_rrc = l->aug_jitter = 0;
    l->aug_pad = 0;
    l->mask = 0;
    PT_CHECK(pthread_mutex_init(&l->mu, NULL));
    PT_CHECK(pthread_cond_init(&l->work_cv, NULL));
    PT_CHECK(pthread_cond_init(&l->done_cv, NULL));
    if (l->nworkers) {
        l->threads = rt_xmalloc(sizeof(pthread_t) * (size_t)l->nworkers);
        /* Workers block the asynchronous signals, so SIGINT/SIGTERM always reach
         * the training thread (which writes the interrupt checkpoint). */
        sigset_t block, old;
        if (sigemptyset(&block) != 0)
            rt_die("sigemptyset");
        int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            if (sigaddset(&block, sigs[i]) != 0)
                rt_die("sigaddset");
        PT_CHECK(pthread_sigmask(SIG_BLOCK, &block, &old));
        for (int w = 0; w < l->nworkers; w++) {
            int err = pthread_create(&l->threads[w], NULL, worker_main, l);
            if (err != 0)
                rt_fail("cannot start data loader thread %d: %s; lower loader.workers", w,
                        strerror(err));
        }
        PT_CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL));
    }
    return l;
}

int64_t rt_loader_batches(const rt_loader *l) { return l->nb; }

int64_t rt_loader_rows(const rt_loader *l, int64_t b)
{
    int64_t left = l->n - b * l->B;
    return left < l->B ? left : l->B;
}

void rt_loader_indices_only(rt_loader *l)
{
    if (l->started || l->d->rows > INT32_MAX)
        rt_die("rt_loader_indices_only: after start, or %" PRId64 " rows", l->d->rows);
    l->indices = 1;   /* in[0] of every slot has room for B int32 indices */
}

void rt_loader_set_shard(rt_loader *l, int rank, int world)
{
    if (world < 1 || rank < 0 || rank >= world)
        rt_die("rt_loader_set_shard: rank %d of world %d", rank, world);
    /* Workers read `order` and `nb` once started; changing them later would need
     * the pause dance of rt_loader_start for no use: the shard is fixed per run. */
    if (l->started)
        rt_die("rt_loader_set_shard after the loader started");
    int64_t N = l->d->rows;
    l->rank = rank;
    l->world = world;
    l->n = l->drop_last ? N / world : (N + world - 1) / world;
    l->nb = l->drop_last ? l->n / l->B : (l->n + l->B - 1) / l->B;
    rt_xfree(l->perm);
    /* order[] (N entries) already holds the n <= N local ones. */
    l->perm = world > 1 ? rt_xmalloc(sizeof(int64_t) * (size_t)(N > 0 ? N : 1)) : NULL;
}

void rt_loader_set_limit(rt_loader *l, int64_t batches)
{
    if (l->started)
        rt_die("rt_loader_set_limit after the loader started");
    if (batches < l->nb)
        l->nb = batches;
}

void rt_loader_set_split(rt_loader *l, int rank, int world)
{
    rt_loader_set_shard(l, rank, world);
    /* entries rank, rank + W, ... below N only: no padding, nothing dropped */
    int64_t N = l->d->rows;
    l->n = rank < N ? (N - rank + world - 1) / world : 0;
    l->nb = l->drop_last ? l->n / l->B : (l->n + l->B - 1) / l->B;
}

void rt_loader_start(rt_loader *l, int64_t epoch, int64_t first)
{
    if (epoch < 0 || first < 0)
        rt_die("rt_loader_start(%" PRId64 ", %" PRId64 ")", epoch, first);
    PT_CHECK(pthread_mutex_lock(&l->mu));
    l->paused = 1;
    l->gen++;
    while (l->filling > 0)
        PT_CHECK(pthread_cond_wait(&l->done_cv, &l->mu));
    for (int s = 0; s < l->nslots; s++)
        l->slots[s].state = SLOT_FREE;
    /* No fill is in flight and none can start while paused: `order` is ours. */
    make_order(l, epoch);
    l->epoch = epoch;
    l->next_claim = l->next_take = first < l->nb ? first : l->nb;
    l->started = 1;
    l->paused = 0;
    PT_CHECK(pthread_cond_broadcast(&l->work_cv));
    PT_CHECK(pthread_mutex_unlock(&l->mu));
}

const rt_batch *rt_loader_next(rt_loader *l)
{
    if (!l->started)
        rt_loader_start(l, 0, 0);   /* only the consumer writes `started` */
    if (l->nworkers == 0) {
        /* Synchronous: the caller assembles each batch into the one slot. */
        if (l->next_take >= l->nb)
            return NULL;
        int64_t k = l->next_take++;
        fill_batch(l, &l->slots[0], l->epoch, k);
        return &l->slots[0].b;
    }
    PT_CHECK(pthread_mutex_lock(&l->mu));
    for (int s = 0; s < l->nslots; s++)
        if (l->slots[s].state == SLOT_HELD) {
            l->slots[s].state = SLOT_FREE;
            PT_CHECK(pthread_cond_broadcast(&l->work_cv));
        }
    loader_slot *s = NULL;
    if (l->next_take < l->nb) {
        s = &l->slots[l->next_take % l->nslots];
        while (s->state != SLOT_READY)
            PT_CHECK(pthread_cond_wait(&l->done_cv, &l->mu));
        if (s->b.index != l->next_take || s->b.epoch != l->epoch)
            rt_die("loader slot holds batch %" PRId64 " of epoch %" PRId64 ", want %" PRId64,
                   s->b.index, s->b.epoch, l->next_take);
        s->state = SLOT_HELD;
        l->next_take++;
    }
    PT_CHECK(pthread_mutex_unlock(&l->mu));
    return s ? &s->b : NULL;
}

void rt_loader_each_buffer(rt_loader *l, void (*fn)(void *p, size_t n, void *ctx), void *ctx)
{
    for (int s = 0; s < l->nslots; s++)
        for (int i = 0; i < l->m->n_inputs; i++)
            fn(l->slots[s].b.in[i], slot_bytes(l, i), ctx);
}

void rt_loader_free(rt_loader *l)
{
    if (!l)
        return;
    PT_CHECK(pthread_mutex_lock(&l->mu));
    l->stop = 1;
    PT_CHECK(pthread_cond_broadcast(&l->work_cv));
    PT_CHECK(pthread_mutex_unlock(&l->mu));
    for (int w = 0; w < l->nworkers; w++)
        PT_CHECK(pthread_join(l->threads[w], NULL));
    PT_CHECK(pthread_cond_destroy(&l->work_cv));
    PT_CHECK(pthread_cond_destroy(&l->done_cv));
    PT_CHECK(pthread_mutex_destroy(&l->mu));
    for (int s = 0; s < l->nslots; s++) {
        for (int i = 0; i < l->m->n_inputs; i++)
            rt_xfree(l->slots[s].b.in[i]);
        rt_xfree(l->slots[s].aug);
    }
    rt_xfree(l->slots);
    rt_xfree(l->order);
    rt_xfree(l->perm);
    rt_xfree(l->threads);
    rt_xfree(l);
}
