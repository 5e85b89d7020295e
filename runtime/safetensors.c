/* safetensors.c: the weights format PyTorch users load with safetensors.torch.
 *
 * Layout: u64 little-endian N, then N bytes of JSON header (padded with spaces so the
 * data starts 8-byte aligned), then the data: each tensor's bytes, little-endian, at
 * [begin, end) of the region after the header.
 *   {"0.weight":{"dtype":"F32","shape":[128,784],"data_offsets":[0,401408]}, ...,
 *    "__metadata__":{"format":"pt"}}
 * We write fp32 in the order of m->params. We read F32, F64, F16 and BF16 and apply
 * the reference loader's rules (the tensors tile the data region exactly), so a file
 * we accept is one PyTorch accepts too. Reading uses pread against sizes checked
 * up front: a hostile file cannot make us read outside it. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "rt.h"

/* The reference implementation refuses headers over 100 MB; so do we, which also
 * bounds the malloc a hostile length field can ask for. */
#define ST_MAX_HEADER 100000000ull
/* Integers in the header arrive as doubles; beyond 2^53 they are not exact. */
#define ST_MAX_INT 9007199254740992.0
#define ST_MAX_DIMS 32

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ST_HOST_LE 1
#else
#define ST_HOST_LE 0
#endif

/* ---- a growable text buffer for the header --------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra)
{
    if (b->oom || b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    sb_reserve(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A JSON string literal. Model names are plain, but a name is data, not syntax. */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20)
            sb_printf(b, "\\u%04x", c);
        else
            sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

/* ---- writing --------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* numel fp32 values, little-endian whatever the host is. */
static int write_floats(int fd, const float *x, int64_t numel)
{
    if (ST_HOST_LE)
        return write_all(fd, x, (size_t)numel * 4);
    unsigned char buf[4096];
    for (int64_t i = 0; i < numel;) {
        size_t k = 0;
        for (; k < sizeof buf / 4 && i < numel; k++, i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            put_le32(buf + 4 * k, u);
        }
        if (write_all(fd, buf, 4 * k) != 0)
            return -1;
    }
    return 0;
}

/* The header JSON, space-padded so 8 + its length is a multiple of 8; meta: NULL, or
 * key, value, ..., NULL: strings for __metadata__ beside "format". */
static int build_header(sbuf *b, const rt_model *m, const char *const *meta)
{
    uint64_t off = 0;
    sb_printf(b, "{");
    for (int i = 0; i < m->n_params + m->n_state; i++) {
        /* the parameters, then the layers' state (int64 counts as I64) */
        const rt_param *p = i < m->n_params ? &m->params[i] : &m->state[i - m->n_params];
        int i64 = i >= m->n_params && p->dtype == RT_I64;
        uint64_t bytes = (uint64_t)p->numel * (i64 ? 8 : 4);
        sb_json_str(b, p->name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", i64 ? "I64" : "F32");
        for (int d = 0; d < p->rank; d++)
            sb_printf(b, "%s%lld", d ? "," : "", (long long)p->shape[d]);
        sb_printf(b, "],\"data_offsets\":[%llu,%llu]},", (unsigned long long)off,
                  (unsigned long long)(off + bytes));
        off += bytes;
    }
    sb_printf(b, "\"__metadata__\":{\"format\":\"pt\"");
    for (int i = 0; meta && meta[i] && meta[i + 1]; i += 2) {
        sb_printf(b, ",");
        sb_json_str(b, meta[i]);
        sb_printf(b, ":");
        sb_json_str(b, meta[i + 1]);
    }
    sb_printf(b, "}}");
    while (!b->oom && b->len % 8)
        sb_printf(b, " ");
    return b->oom ? -1 : 0;
}

/* fsync of the folder makes the rename itself durable. Some file systems cannot
 * fsync a folder (EINVAL); there is nothing more to do on those. */
static int fsync_parent(const char *path)
{
    char dir[RT_PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    if (rc != 0 && errno == EINVAL)
        rc = 0;
    int e = errno;
    if (close(fd) != 0 && rc == 0)
        return -1;
    errno = e;
    return rc;
}

int rt_safetensors_link(const char *src, const char *path)
{
    char tmp[RT_PATH_MAX + 8];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    unlink(tmp);   /* a stale one from a crash */
    if (link(src, tmp) != 0)
        return -1;
    int rc = rename(tmp, path), e = errno;
    unlink(tmp);   /* gone after the rename, but for one over a link to the same file */
    errno = e;
    return rc != 0 ? -1 : fsync_parent(path);
}

int rt_link_or_copy(const char *src, const char *path)
{
    if (rt_safetensors_link(src, path) == 0)
        return 0;
    FILE *in = fopen(src, "rb");
    if (!in)
        return -1;
    FILE *out = rt_tmp_open(path);
    if (!out) {
        int e = errno;
        fclose(in);
        errno = e;
        return -1;
    }
    static char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            break;
    int bad = ferror(in);
    fclose(in);
    if (bad || fflush(out) != 0 || fsync(fileno(out)) != 0) {
        int e = bad ? EIO : errno;
        char tmp[RT_PATH_MAX + 48];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        fclose(out);
        unlink(tmp);
        errno = e;
        return -1;
    }
    return rt_tmp_commit(out, path);   /* a failed write shows here (ferror) */
}

struct rt_st_out {
    char path[RT_PATH_MAX], tmp[RT_PATH_MAX + 8];
    int fd;
    int err;                   /* the first errno, 0 while all is well */
};

rt_st_out *rt_st_open(const char *path, const rt_model *m)
{
    return rt_st_open_meta(path, m, NULL);
}

rt_st_out *rt_st_open_meta(const char *path, const rt_model *m, const char *const *meta)
{
    if (strlen(path) >= RT_PATH_MAX) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    rt_st_out *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    sbuf h = {0};
    if (build_header(&h, m, meta) != 0) {
        free(h.p);
        free(w);
        errno = ENOMEM;
        return NULL;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    /* a new file, never into the inode of a .tmp left linked to a checkpoint by a crash
     * (rt_safetensors_link makes a .tmp second name, then renames it) */
    if (unlink(w->tmp) != 0 && errno != ENOENT) {
        free(h.p);
        free(w);
        return NULL;
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (w->fd < 0) {
        int e = errno;
        free(h.p);
        free(w);
        errno = e;
        return NULL;
    }
    if (write_all(w->fd, len8, 8) != 0 || write_all(w->fd, h.p, h.len) != 0)
        w->err = errno;
    free(h.p);
    return w;
}

int rt_st_put(rt_st_out *w, const float *x, int64_t n)
{
    if (!w->err && write_floats(w->fd, x, n) != 0)
        w->err = errno;
    return w->err ? -1 : 0;
}

int rt_st_close(rt_st_out *w)
{
    int rc = w->err ? -1 : 0, e = w->err;
    if (rc == 0 && fsync(w->fd) != 0) {
        rc = -1;
        e = errno;
    }
    if (close(w->fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(w->tmp, w->path) != 0) {
        rc = -1;
        e = errno;
    }
    if (rc != 0) {
        unlink(w->tmp);    /* may already be gone; the first error is the one to report */
        free(w);
        errno = e;
        return -1;
    }
    rc = fsync_parent(w->path);
    free(w);
    return rc;
}

/* The layers' state after the parameters: F32 as it is, an int64 count as 8 bytes
 * little-endian. */
static void put_state(rt_st_out *w, const rt_model *m, const float *state)
{
    for (int i = 0; i < m->n_state; i++) {
        const rt_param *p = &m->state[i];
        if (p->dtype != RT_I64) {
            rt_st_put(w, state + p->offset, p->numel);
            continue;
        }
        for (int64_t j = 0; j < p->numel; j++) {
            int64_t v;
            unsigned char le[8];
            memcpy(&v, state + p->offset + 2 * j, 8);
            for (int b = 0; b < 8; b++)
                le[b] = (unsigned char)((uint64_t)v >> (8 * b));
            if (!w->err && write_all(w->fd, le, 8) != 0)
                w->err = errno;
        }
    }
}

int rt_safetensors_write(const char *path, const rt_model *m, const float *params,
                         const float *state)
{
    return rt_safetensors_write_meta(path, m, params, state, NULL);
}

int rt_safetensors_write_meta(const char *path, const rt_model *m, const float *params,
                              const float *state, const char *const *meta)
{
    if (m->n_state && !state)
        rt_die("writing %s: the model has state but none was given", path);
    rt_st_out *w = rt_st_open_meta(path, m, meta);
    if (!w)
        return -1;
    for (int i = 0; i < m->n_params; i++)
        rt_st_put(w, params + m->params[i].offset, m->params[i].numel);
    put_state(w, m, state);
    return rt_st_close(w);
}

/* ---- reading --------------------------------------------------------------- */

int rt_safetensors_meta(const char *path, const char *key, char *out, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    unsigned char len8[8];
    uint64_t len = 0;
    char *h = NULL;
    int rc = -1;
    if (pread(fd, len8, 8, 0) == 8) {
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)len8[i] << (8 * i);
        h = len > 0 && len <= (1u << 26) ? malloc(len + 1) : NULL;
    }
    if (h && pread(fd, h, len, 8) == (ssize_t)len) {
        h[len] = 0;
        cJSON *root = cJSON_Parse(h);
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, key);
        if (cJSON_IsString(v) && strlen(v->valuestring) < n) {
            snprintf(out, n, "%s", v->valuestring);
            rc = 0;
        }
        cJSON_Delete(root);
    }
    free(h);
    close(fd);
    return rc;
}

enum { ST_F32, ST_F64, ST_F16, ST_BF16, ST_I64 };   /* ST_I64: state counts only */
static const struct { const char *name; int dt, size; } st_dtypes[] = {
    {"F32", ST_F32, 4}, {"F64", ST_F64, 8}, {"F16", ST_F16, 2}, {"BF16", ST_BF16, 2},
};
/* Valid safetensors dtypes we do not take as weights, for a precise message. */
static const char *const st_other_dtypes[] = {
    "BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F8_E4M3", "F8_E5M2",
    "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", NULL,
};

/* What the header says about one model parameter. */
typedef struct st_entry {
    const char *name;          /* the model's name (the file's is equal) */
    int dt, esize;
    uint64_t begin, end;       /* in the data region */
    int seen;
} st_entry;

typedef struct st_file {
    const char *path;
    int fd;
    uint64_t size;
    uint64_t data_start;       /* 8 + N */
    uint64_t data_len;
    char *header;              /* N bytes + NUL */
    cJSON *root;
    st_entry *ent;             /* one per model parameter, then one per state tensor */
} st_file;

/* A name taken from the file, made safe to print: control bytes become '?' and long
 * names are cut, so a hostile header cannot write escape sequences to the terminal. */
static const char *printable(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s && n + 4 < cap; s++)
        out[n++] = ((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s;
    if (*s)
        memcpy(out + n, "...", 3), n += 3;
    out[n] = 0;
    return out;
}

static void fmt_shape(char *out, size_t cap, int rank, const int64_t *dims)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* A JSON number that is an exact integer in [0, 2^53]. */
static int json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_INT) || d != (double)(uint64_t)d)
        return 0;
    *out = (uint64_t)d;
    return 1;
}

static int dtype_of(const char *s, int *dt, int *size)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *dt = st_dtypes[i].dt;
            *size = st_dtypes[i].size;
            return 1;
        }
    return 0;
}

/* Reads the 8-byte length and the header; checks sizes before trusting them. */
static void read_header(st_file *f)
{
    const char *path = f->path;
    unsigned char len8[8];
    if (f->size < 8)
        rt_input_error("%s: not a safetensors file (only %llu bytes)", path,
                       (unsigned long long)f->size);
    ssize_t r;
    while ((r = pread(f->fd, len8, 8, 0)) < 0 && errno == EINTR)
        ;
    if (r != 8)
        rt_input_error("%s: cannot read: %s", path, r < 0 ? strerror(errno) : "short read");
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)len8[i] << (8 * i);
    if (n > f->size - 8)
        rt_input_error("%s: not a safetensors file (header length %llu exceeds the file size)",
                       path, (unsigned long long)n);
    if (n > ST_MAX_HEADER)
        rt_input_error("%s: header length %llu is over the 100 MB limit", path,
                       (unsigned long long)n);
    if (n < 2)
        rt_input_error("%s: not a safetensors file (header length %llu)", path,
                       (unsigned long long)n);
    f->data_start = 8 + n;
    f->data_len = f->size - f->data_start;
    f->header = malloc(n + 1);
    if (!f->header)
        rt_fail("out of memory reading the header of %s", path);
    size_t got = 0;
    while (got < n) {
        r = pread(f->fd, f->header + got, n - got, (off_t)(8 + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rt_input_error("%s: cannot read: %s", path, r < 0 ? strerror(errno) : "short read");
        got += (size_t)r;
    }
    f->header[n] = 0;
    if (f->header[0] != '{')
        rt_input_error("%s: not a safetensors file (the header does not start with '{')", path);

    /* a \u0000 escape would end a name early in C ("1.weight\u0000x" read as 1.weight):
     * refused, found as a backslash that is not itself escaped, then u0000 */
    for (size_t i = 0, esc = 0; i < n; i++) {
        if (f->header[i] == '\\') {
            esc = !esc;
            continue;
        }
        if (esc && f->header[i] == 'u' && i + 4 < n && !strncmp(f->header + i + 1, "0000", 4))
            rt_input_error("%s: the header holds \\u0000 (a NUL character) in a string, at byte "
                           "%zu", path, i - 1 + 8);
        esc = 0;
    }
    const char *end = NULL;
    f->root = cJSON_ParseWithLengthOpts(f->header, n, &end, 0);
    if (!f->root || !cJSON_IsObject(f->root)) {
        size_t at = end && end >= f->header && end <= f->header + n ? (size_t)(end - f->header) : 0;
        rt_input_error("%s: not a safetensors file (the header is not valid JSON, near byte %zu "
                       "of the header)", path, at + 8);
    }
    /* Only the padding may follow the object. */
    for (const char *p = end; p < f->header + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            rt_input_error("%s: not a safetensors file (bytes after the header's JSON object, "
                           "at byte %zu)", path, (size_t)(p - f->header) + 8);
}

static void check_metadata(const st_file *f, const cJSON *md)
{
    if (!cJSON_IsObject(md))
        rt_input_error("%s: __metadata__ must be an object of strings", f->path);
    for (const cJSON *c = md->child; c; c = c->next)
        if (!cJSON_IsString(c))
            rt_input_error("%s: __metadata__ must be an object of strings", f->path);
}

/* One header entry against model parameter `p`: dtype, shape, offsets. */
static void check_entry(st_file *f, const rt_param *p, st_entry *e, const cJSON *t)
{
    const char *path = f->path, *name = p->name;
    if (!cJSON_IsObject(t))
        rt_input_error("%s: tensor '%s': the header entry is not an object", path, name);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    if (!cJSON_IsString(dt))
        rt_input_error("%s: tensor '%s': \"dtype\" is missing or not a string", path, name);
    if (p->dtype == RT_I64) {   /* a state count (num_batches_tracked) */
        if (strcmp(dt->valuestring, "I64") != 0)
            rt_input_error("%s: tensor '%s' has dtype %s; this count must be I64", path, name,
                           dt->valuestring);
        e->dt = ST_I64;
        e->esize = 8;
    } else if (!dtype_of(dt->valuestring, &e->dt, &e->esize)) {
        char buf[64];
        for (int i = 0; st_other_dtypes[i]; i++)
            if (strcmp(dt->valuestring, st_other_dtypes[i]) == 0)
                rt_input_error("%s: tensor '%s' has dtype %s; weights must be F32, F64, F16 or "
                               "BF16", path, name, st_other_dtypes[i]);
        rt_input_error("%s: tensor '%s' has unknown dtype '%s'", path, name,
                       printable(buf, sizeof buf, dt->valuestring));
    }

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    if (!cJSON_IsArray(sh))
        rt_input_error("%s: tensor '%s': \"shape\" is missing or not a list", path, name);
    int64_t dims[ST_MAX_DIMS];
    int rank = 0;
    for (const cJSON *c = sh->child; c; c = c->next) {
        uint64_t v;
        if (!json_uint(c, &v))
            rt_input_error("%s: tensor '%s': \"shape\" must list non-negative integers", path,
                           name);
        if (rank == ST_MAX_DIMS)
            rt_input_error("%s: tensor '%s' has more than %d dimensions", path, name,
                           ST_MAX_DIMS);
        dims[rank++] = (int64_t)v;
    }
    int same = rank == p->rank;
    for (int d = 0; same && d < rank; d++)
        same = dims[d] == p->shape[d];
    if (!same) {
        char got[ST_MAX_DIMS * 20], want[RT_MAX_RANK * 24];
        fmt_shape(got, sizeof got, rank, dims);
        fmt_shape(want, sizeof want, p->rank, p->shape);
        rt_input_error("%s: tensor '%s' has shape %s, the model expects %s", path, name, got,
                       want);
    }

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        !json_uint(off->child, &e->begin) || !json_uint(off->child->next, &e->end))
        rt_input_error("%s: tensor '%s': \"data_offsets\" must be [begin, end], two "
                       "non-negative integers", path, name);
    if (e->end < e->begin || e->end > f->data_len)
        rt_input_error("%s: tensor '%s' has data_offsets [%llu, %llu], outside the %llu bytes "
                       "of data", path, name, (unsigned long long)e->begin,
                       (unsigned long long)e->end, (unsigned long long)f->data_len);
    /* The shape equals the model's, so numel is the model's and cannot overflow. */
    uint64_t want = (uint64_t)p->numel * (uint64_t)e->esize;
    if (e->end - e->begin != want)
        rt_input_error("%s: tensor '%s' has data_offsets [%llu, %llu] (%llu bytes), but %s of "
                       "%lld elements takes %llu bytes", path, name,
                       (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)(e->end - e->begin), dt->valuestring,
                       (long long)p->numel, (unsigned long long)want);
}

/* Entry k of a file: parameter k, then the state tensors. */
static const rt_param *entry_param(const rt_model *m, int k)
{
    return k < m->n_params ? &m->params[k] : &m->state[k - m->n_params];
}

/* Matches every header entry with a parameter or state tensor; unknown names and
 * repeats are errors, and so are missing tensors but, with `adapters`, train.lora's
 * (rt_param.lora: they keep the values they have). Returns how many of those. */
static int check_entries(st_file *f, const rt_model *m, int adapters)
{
    for (const cJSON *t = f->root->child; t; t = t->next) {
        char buf[128];
        if (!t->string)
            rt_input_error("%s: not a safetensors file (a header entry has no name)", f->path);
        if (strcmp(t->string, "__metadata__") == 0) {
            check_metadata(f, t);
            continue;
        }
        int k = 0, n = m->n_params + m->n_state;
        while (k < n && strcmp(entry_param(m, k)->name, t->string) != 0)
            k++;
        if (k == n)
            rt_input_error("%s: unexpected tensor '%s' (the model has no parameter of that "
                           "name)", f->path, printable(buf, sizeof buf, t->string));
        if (f->ent[k].seen)
            rt_input_error("%s: tensor '%s' appears twice in the header", f->path,
                           entry_param(m, k)->name);
        f->ent[k].seen = 1;
        f->ent[k].name = entry_param(m, k)->name;
        check_entry(f, entry_param(m, k), &f->ent[k], t);
    }
    int missing = 0, first = -1, left = 0;
    for (int k = 0; k < m->n_params + m->n_state; k++)
        if (!f->ent[k].seen && adapters && k < m->n_params && m->params[k].lora)
            left++;
        else if (!f->ent[k].seen) {
            missing++;
            if (first < 0)
                first = k;
        }
    if (missing == 1)
        rt_input_error("%s: missing tensor '%s'", f->path, entry_param(m, first)->name);
    if (missing > 1)
        rt_input_error("%s: missing tensor '%s' (and %d more)", f->path,
                       entry_param(m, first)->name, missing - 1);
    return left;
}

static int by_offsets(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The reference loader's rule: the tensors tile the data region, no gaps, no overlaps. */
static void check_tiling(const st_file *f, int n)
{
    const st_entry **order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
    if (!order)
        rt_fail("out of memory reading %s", f->path);
    int seen = 0;
    for (int i = 0; i < n; i++)
        if (f->ent[i].seen)   /* (a train.lora adapter --init leaves out: none) */
            order[seen++] = &f->ent[i];
    n = seen;
    qsort(order, (size_t)n, sizeof *order, by_offsets);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        const st_entry *e = order[i];
        if (e->begin < at)
            rt_input_error("%s: tensor '%s' has data_offsets [%llu, %llu], overlapping tensor "
                           "'%s'", f->path, e->name, (unsigned long long)e->begin,
                           (unsigned long long)e->end, order[i - 1]->name);
        if (e->begin > at)
            rt_input_error("%s: bytes [%llu, %llu) of the data belong to no tensor", f->path,
                           (unsigned long long)at, (unsigned long long)e->begin);
        at = e->end;
    }
    if (at != f->data_len)
        rt_input_error("%s: bytes [%llu, %llu) of the data belong to no tensor", f->path,
                       (unsigned long long)at, (unsigned long long)f->data_len);
    free(order);
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);        /* inf, nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13); /* rebias 15 -> 127 */
    } else if (man == 0) {
        bits = sign;
    } else {                                            /* subnormal: man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* n elements of dtype dt from little-endian bytes to fp32. */
static void convert(float *dst, const unsigned char *src, int64_t n, int dt)
{
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *s = src;
        switch (dt) {
        case ST_F32: {
            uint32_t u = (uint32_t)s[4 * i] | (uint32_t)s[4 * i + 1] << 8 |
                         (uint32_t)s[4 * i + 2] << 16 | (uint32_t)s[4 * i + 3] << 24;
            memcpy(&dst[i], &u, 4);
            break;
        }
        case ST_F64: {
            uint64_t u = 0;
            for (int b = 0; b < 8; b++)
                u |= (uint64_t)s[8 * i + b] << (8 * b);
            double d;
            memcpy(&d, &u, 8);
            dst[i] = (float)d;
            break;
        }
        case ST_F16:
            dst[i] = half_to_float((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
            break;
        case ST_BF16: {
            uint32_t u = (uint32_t)(s[2 * i] | s[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &u, 4);
            break;
        }
        }
    }
}

int rt_st_to_f32(float *dst, const void *src, int64_t n, const char *dtype)
{
    int dt, size;
    if (!dtype_of(dtype, &dt, &size))
        return -1;
    convert(dst, src, n, dt);
    return size;
}

static void pread_all(const st_file *f, void *buf, size_t n, uint64_t at)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(f->fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rt_input_error("%s: cannot read: %s", f->path,
                           r < 0 ? strerror(errno) : "the file is shorter than it was");
        p += r;
        n -= (size_t)r;
        at += (uint64_t)r;
    }
}

/* Copies elements [k0, k1) of one tensor into dst, converting to fp32. */
static void load_tensor(const st_file *f, const st_entry *e, float *dst, int64_t k0, int64_t k1)
{
    int64_t numel = k1 - k0;
    uint64_t at = f->data_start + e->begin + (uint64_t)k0 * (uint64_t)e->esize;
    if (e->dt == ST_F32 && ST_HOST_LE) {
        pread_all(f, dst, (size_t)numel * 4, at);
        return;
    }
    enum { CHUNK = 1 << 16 };   /* elements per read */
    unsigned char *buf = malloc((size_t)CHUNK * 8);
    if (!buf)
        rt_fail("out of memory reading %s", f->path);
    for (int64_t i = 0; i < numel; i += CHUNK) {
        int64_t k = numel - i < CHUNK ? numel - i : CHUNK;
        pread_all(f, buf, (size_t)k * (size_t)e->esize, at + (uint64_t)i * (uint64_t)e->esize);
        convert(dst + i, buf, k, e->dt);
    }
    free(buf);
}

/* An int64 count into its two float slots. */
static void load_i64(const st_file *f, const st_entry *e, float *dst, int64_t numel)
{
    for (int64_t j = 0; j < numel; j++) {
        unsigned char le[8];
        pread_all(f, le, 8, f->data_start + e->begin + (uint64_t)j * 8);
        uint64_t u = 0;
        for (int b = 0; b < 8; b++)
            u |= (uint64_t)le[b] << (8 * b);
        int64_t v = (int64_t)u;
        memcpy(dst + 2 * j, &v, 8);
    }
}

/* Parameters [lo, hi) into dst (dst[k - lo]: element k), and with state != NULL the
 * layers' state; every tensor is checked either way. */
static int read_file(const char *path, const rt_model *m, int64_t lo, int64_t hi, float *dst,
                     float *state, int adapters)
{
    st_file f = {.path = path};
    int64_t size;
    f.fd = rt_open_regular(path, &size);   /* a FIFO: refused, not waited on */
    if (f.fd < 0) {
        if (errno == EINVAL)
            rt_input_error("%s: not a regular file", path);
        rt_input_error("%s: cannot open: %s", path, strerror(errno));
    }
    f.size = (uint64_t)size;

    read_header(&f);
    int n = m->n_params + m->n_state;
    f.ent = calloc((size_t)(n > 0 ? n : 1), sizeof *f.ent);
    if (!f.ent)
        rt_fail("out of memory reading %s", path);
    int left = check_entries(&f, m, adapters);
    check_tiling(&f, n);
    for (int k = 0; k < m->n_params; k++) {
        const rt_param *p = &m->params[k];
        if (!f.ent[k].seen)
            continue;
        int64_t k0 = lo > p->offset ? lo - p->offset : 0;
        int64_t k1 = hi < p->offset + p->numel ? hi - p->offset : p->numel;
        if (k1 > k0)
            load_tensor(&f, &f.ent[k], dst + (p->offset + k0 - lo), k0, k1);
    }
    for (int k = 0; state && k < m->n_state; k++) {
        const rt_param *p = &m->state[k];
        if (p->dtype == RT_I64)
            load_i64(&f, &f.ent[m->n_params + k], state + p->offset, p->numel);
        else
            load_tensor(&f, &f.ent[m->n_params + k], state + p->offset, 0, p->numel);
    }

    cJSON_Delete(f.root);
    free(f.header);
    free(f.ent);
    if (close(f.fd) != 0)
        rt_input_error("%s: cannot read: %s", path, strerror(errno));
    return left;
}

void rt_safetensors_read_range(const char *path, const rt_model *m, int64_t lo, int64_t hi,
                               float *dst)
{
    read_file(path, m, lo, hi, dst, NULL, 0);
}

/* The whole file: every parameter and the state (adapters: train.lora's may be missing) */
static int read_whole(const char *path, const rt_model *m, float *params, float *state,
                      int adapters)
{
    if (m->n_state && !state)
        rt_die("reading %s: the model has state but no place for it was given", path);
    return read_file(path, m, 0, m->param_floats, params, state, adapters);
}

void rt_safetensors_read(const char *path, const rt_model *m, float *params, float *state)
{
    read_whole(path, m, params, state, 0);
}

int rt_safetensors_read_init(const char *path, const rt_model *m, float *params, float *state)
{
    return read_whole(path, m, params, state, 1);
}
