#define _GNU_SOURCE
/* util.c: the runtime's error tiers, allocation, clocks and folders. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "rt.h"

const char *rt_spec_file;

/* The place a message starts with comes first, as in docs/runs.md's "FILE: error: MESSAGE".
 * A message "PATH: ..." (a data file, weights, a checkpoint: a first part with a '/'
 * or a '.', no space unless it exists, not an option) becomes "PATH: error: ...". One
 * about a value of the training spec, "$.train.x: ..." or "training spec: ...",
 * becomes "SPEC: error: ...", SPEC the training spec's file (rt_spec_file). Anything
 * else: "trainc: error: ...". */
static void print_error(const char *msg)
{
    static const char *const spec_words[] = {"training spec: ", "train spec: "};
    const char *spec = rt_spec_file && *rt_spec_file ? rt_spec_file : NULL;
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(spec_words[k]);
        if (!strncmp(msg, spec_words[k], n)) {
            if (spec)
                fprintf(stderr, "%s: error: %s\n", spec, msg + n);
            else
                fprintf(stderr, "trainc: error: %s\n", msg);
            return;
        }
    }
    if (!strncmp(msg, "$.", 2)) {
        fprintf(stderr, "%s: error: %s\n", spec ? spec : "trainc", msg);
        return;
    }
    const char *colon = strstr(msg, ": ");
    size_t n = colon ? (size_t)(colon - msg) : 0;
    char path[RT_PATH_MAX];
    struct stat st;
    int place = n && msg[0] != '-' && (memchr(msg, '/', n) || memchr(msg, '.', n));
    if (place && memchr(msg, ' ', n))   /* a path with spaces: one that is there */
        place = n < sizeof path && (memcpy(path, msg, n), path[n] = 0, stat(path, &st) == 0);
    if (place) {
        fprintf(stderr, "%.*s: error: %s\n", (int)n, msg, colon + 2);
        return;
    }
    fprintf(stderr, "trainc: error: %s\n", msg);
}

void rt_input_error(const char *fmt, ...)
{
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_error(msg);
    exit(RT_EXIT_INPUT);
}

void rt_fail(const char *fmt, ...)
{
    /* one write: under mpirun the ranks' stderr meet in one stream, and a message
     * written in pieces can have another rank's between them */
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "trainc: error: %s\n", msg);
    exit(RT_EXIT_RUNTIME);
}

void rt_die_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: internal error: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void *rt_xmalloc(size_t n)
{
    void *p = NULL;
    n = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        rt_fail("out of memory allocating %zu bytes; lower batch_size", n);
    memset(p, 0, n ? n : 64);
    return p;
}

void rt_xfree(void *p) { free(p); }

const char *volatile rt_tmp_live;

FILE *rt_tmp_open(const char *path)
{
    static char live[RT_PATH_MAX + 48];   /* (rt_tmp_live's: written while it is NULL) */
    char tmp[RT_PATH_MAX + 48];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    /* a new file: a stale .tmp may be a second name of a file kept elsewhere */
    if (unlink(tmp) != 0 && errno != ENOENT)
        return NULL;
    /* named before it exists: a signal between the fopen and the naming would leave it */
    rt_tmp_live = NULL;
    memcpy(live, tmp, sizeof live);
    rt_tmp_live = live;
    FILE *f = fopen(tmp, "wx");
    if (!f)
        rt_tmp_live = NULL;
    return f;
}

int rt_tmp_commit(FILE *f, const char *path)
{
    char tmp[RT_PATH_MAX + 48];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int err = ferror(f) ? EIO : 0;
    if (fclose(f) != 0 && !err)
        err = errno;
    if (!err && rename(tmp, path) != 0)
        err = errno;
    if (err)
        unlink(tmp);
    /* forgotten once renamed or removed: a signal before that still removes it */
    if (rt_tmp_live && !strcmp(rt_tmp_live, tmp))
        rt_tmp_live = NULL;
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

const char *rt_full_hint(int err)
{
    return err == ENOSPC || err == EDQUOT || err == EFBIG ? " (is the disk full?)" : "";
}

/* ---- XXH64 (Yann Collet's xxHash, 64-bit, as its specification defines it) ----
 * Four 64-bit lanes take 32-byte stripes (acc = rotl(acc + w * P2, 31) * P1); the
 * lanes are merged, the tail folded in 8, 4 and 1 bytes at a time, and the result
 * avalanched. About 10 GB/s a core: GPT-2's 1.5 GB checkpoint in a fraction of a
 * second. */
#define XXP1 0x9E3779B185EBCA87ull
#define XXP2 0xC2B2AE3D27D4EB4Full
#define XXP3 0x165667B19E3779F9ull
#define XXP4 0x85EBCA77C2B2AE63ull
#define XXP5 0x27D4EB2F165667C5ull

typedef struct {
    uint64_t v[4], total;
    unsigned char buf[32];
    size_t nbuf;
} xxh64;

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t xx_round(uint64_t acc, uint64_t w) { return rotl64(acc + w * XXP2, 31) * XXP1; }
static uint64_t xx_merge(uint64_t h, uint64_t v) { return (h ^ xx_round(0, v)) * XXP1 + XXP4; }

static uint64_t rd64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);          /* little-endian hosts only (x86-64, aarch64) */
    return w;
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

static void xx_init(xxh64 *x, uint64_t seed)
{
    x->v[0] = seed + XXP1 + XXP2;
    x->v[1] = seed + XXP2;
    x->v[2] = seed;
    x->v[3] = seed - XXP1;
    x->total = 0;
    x->nbuf = 0;
}

static void xx_stripe(xxh64 *x, const unsigned char *p)
{
    for (int i = 0; i < 4; i++)
        x->v[i] = xx_round(x->v[i], rd64(p + 8 * i));
}

static void xx_update(xxh64 *x, const void *data, size_t n)
{
    const unsigned char *p = data;
    x->total += n;
    if (x->nbuf) {
        size_t take = 32 - x->nbuf < n ? 32 - x->nbuf : n;
        memcpy(x->buf + x->nbuf, p, take);
        x->nbuf += take;
        p += take;
        n -= take;
        if (x->nbuf < 32)
            return;
        xx_stripe(x, x->buf);
        x->nbuf = 0;
    }
    for (; n >= 32; p += 32, n -= 32)
        xx_stripe(x, p);
    memcpy(x->buf, p, n);
    x->nbuf = n;
}

static uint64_t xx_digest(const xxh64 *x)
{
    uint64_t h;
    if (x->total >= 32) {
        h = rotl64(x->v[0], 1) + rotl64(x->v[1], 7) + rotl64(x->v[2], 12) + rotl64(x->v[3], 18);
        for (int i = 0; i < 4; i++)
            h = xx_merge(h, x->v[i]);
    } else
        h = x->v[2] + XXP5;    /* the seed plus P5 */
    h += x->total;
    const unsigned char *p = x->buf;
    size_t n = x->nbuf;
    for (; n >= 8; p += 8, n -= 8)
        h = rotl64(h ^ xx_round(0, rd64(p)), 27) * XXP1 + XXP4;
    if (n >= 4) {
        h = rotl64(h ^ ((uint64_t)rd32(p) * XXP1), 23) * XXP2 + XXP3;
        p += 4;
        n -= 4;
    }
    for (; n > 0; p++, n--)
        h = rotl64(h ^ (*p * XXP5), 11) * XXP1;
    h ^= h >> 33;
    h *= XXP2;
    h ^= h >> 29;
    h *= XXP3;
    return h ^ (h >> 32);
}

uint64_t rt_xxh64(const void *p, size_t n, uint64_t seed)
{
    xxh64 x;
    xx_init(&x, seed);
    xx_update(&x, p, n);
    return xx_digest(&x);
}

int rt_open_regular(const char *path, int64_t *size)
{
    /* O_NONBLOCK: a FIFO opens at once (and is refused) instead of waiting for a writer;
     * reads of a regular file do not see the flag */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct stat st;
    int serr = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (serr) {
        close(fd);
        errno = serr;
        return -1;
    }
    if (size)
        *size = (int64_t)st.st_size;
    return fd;
}

int rt_file_xxh64(const char *path, uint64_t *hash, int64_t *bytes)
{
    /* a regular file only: a FIFO or a device (a checkpoint file replaced by a link to
     * /dev/zero) would be read forever; those fail with EINVAL */
    int fd = rt_open_regular(path, NULL);
    if (fd < 0)
        return -1;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    xxh64 x;
    xx_init(&x, 0);
    for (;;) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            free(buf);
            close(fd);
            errno = err;
            return -1;
        }
        if (r == 0)
            break;
        xx_update(&x, buf, (size_t)r);
    }
    free(buf);
    close(fd);
    *hash = xx_digest(&x);
    *bytes = (int64_t)x.total;
    return 0;
}

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir of buf, then, where it made the folder, an fsync of the folder it is in: the new
 * entry on the disk before anything written into it is (a checkpoint fsynced inside a
 * folder whose own name a power loss takes would be lost with it) */
static int mkdir_synced(char *buf)
{
    if (mkdir(buf, 0777) != 0)
        return errno == EEXIST ? 0 : -1;
    char *slash = strrchr(buf, '/');
    const char *parent = !slash ? "." : slash == buf ? "/" : buf;
    if (slash && slash != buf)
        *slash = 0;
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (slash && slash != buf)
        *slash = '/';
    if (fd >= 0) {
        fsync(fd);   /* (a file system without directory fsync: nothing more to do) */
        close(fd);
    }
    return 0;
}

int rt_mkdir_p(const char *path)
{
    char buf[RT_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir_synced(buf) != 0)
            return -1;
        *p = '/';
    }
    if (mkdir_synced(buf) != 0)
        return -1;
    struct stat st;
    if (stat(buf, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {   /* a file of that name is not the folder asked for */
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

const char *rt_dtype_name(int dt)
{
    switch (dt) {
    case RT_U8: return "u8";
    case RT_U16: return "u16";
    case RT_I32: return "i32";
    case RT_F32: return "f32";
    case RT_I64: return "i64";
    }
    return "?";
}

/* The CPUs this process may run on (its affinity mask: mpirun binds ranks, containers
 * limit them), at least 1. */
int rt_cpus_usable(void)
{
    int n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    return n < 1 ? 1 : n;
}

/* $TRAINC_CACHE_DIR, else $XDG_CACHE_HOME/trainc, else ~/.cache/trainc. */
int rt_cache_dir(char *dir, size_t n)
{
    const char *d = getenv("TRAINC_CACHE_DIR");
    if (d && *d)
        return snprintf(dir, n, "%s", d) < (int)n ? 0 : -1;
    d = getenv("XDG_CACHE_HOME");
    if (d && *d)
        return snprintf(dir, n, "%s/trainc", d) < (int)n ? 0 : -1;
    d = getenv("HOME");
    if (d && *d)
        return snprintf(dir, n, "%s/.cache/trainc", d) < (int)n ? 0 : -1;
    return -1;
}

/* FNV-1a, 64 bits: the kernel cache's and the shard cache's file names */
uint64_t rt_fnv1a(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}
