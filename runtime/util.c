/* util.c: the runtime's error tiers, allocation, clocks and folders. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "rt.h"

void rt_input_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("trainc: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(RT_EXIT_INPUT);
}

void rt_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("trainc: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
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

FILE *rt_tmp_open(const char *path)
{
    char tmp[RT_PATH_MAX + 48];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    return fopen(tmp, "w");
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
    if (err) {
        unlink(tmp);
        errno = err;
        return -1;
    }
    return 0;
}

const char *rt_full_hint(int err)
{
    return err == ENOSPC || err == EDQUOT || err == EFBIG ? " (is the disk full?)" : "";
}

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
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
