/* fuzz.h: what the libFuzzer targets share (see fuzz/README.md).
 *
 * trainc answers bad input by printing a message and calling exit(1) (or 2); under the
 * fuzzer that is a normal outcome, not a crash. The targets are linked with
 * -Wl,--wrap=exit, so such an exit jumps back here and the next input runs. Memory a
 * rejected input leaves behind is not freed (the real program exits), so the runs
 * use -detect_leaks=0. Each input goes through a file, since the readers take paths. */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static jmp_buf fuzz_back;
static int fuzz_armed, fuzz_jumped;   /* fuzz_jumped: the last FUZZ_RUN ended in exit() */

void __real_exit(int status);
void __wrap_exit(int status)
{
    if (fuzz_armed) {
        fuzz_armed = 0;
        longjmp(fuzz_back, 1);
    }
    __real_exit(status);
}

/* File descriptors a rejected input leaves open (the real program exits): those in
 * [lo, lo + 64) that were closed before the body ran are closed again after it jumps
 * back; without this a reader's open file on an error path would pile up until fopen
 * fails with EMFILE. fuzz_fds_mark before the body, fuzz_fds_close after a jump. */
static int fuzz_fd_lo;
static unsigned long long fuzz_fd_open;
static void fuzz_fds_mark(void)
{
    int probe = dup(0);
    if (probe >= 0)
        close(probe);
    fuzz_fd_lo = probe < 0 ? 3 : probe;
    fuzz_fd_open = 0;
    for (int i = 0; i < 64; i++)
        if (fcntl(fuzz_fd_lo + i, F_GETFD) != -1)
            fuzz_fd_open |= 1ull << i;
}
static void fuzz_fds_close(void)
{
    for (int i = 0; i < 64; i++)
        if (!(fuzz_fd_open >> i & 1) && fcntl(fuzz_fd_lo + i, F_GETFD) != -1)
            close(fuzz_fd_lo + i);
}

/* the input in a file of this process's own, with the given suffix; returns its path */
static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/trainc-fuzz-%d%s", (int)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) {
        perror(path);
        abort();
    }
    return path;
}

/* The first occurrence of the separator sep in [at, end), or end: where an input's
 * part ends (the targets that make several files of one input) */
static inline const uint8_t *fuzz_cut(const uint8_t *at, const uint8_t *end, const char *sep)
{
    size_t k = strlen(sep);
    for (; at + k <= end; at++)
        if (memcmp(at, sep, k) == 0)
            return at;
    return end;
}

/* Runs body with exit() caught: FUZZ_RUN({ ... }); then fuzz_jumped says whether it
 * exited (the targets unmap what a rejected file left mapped: the real program would
 * have exited, and thousands of stale mappings slow the fuzzer down) */
#define FUZZ_RUN(...)                                                                         \
    do {                                                                                      \
        fuzz_fds_mark();                                                                      \
        fuzz_armed = 1;                                                                       \
        fuzz_jumped = 1;                                                                      \
        if (!setjmp(fuzz_back)) {                                                             \
            __VA_ARGS__;                                                                      \
            fuzz_jumped = 0;                                                                  \
        }                                                                                     \
        fuzz_armed = 0;                                                                       \
        if (fuzz_jumped)                                                                      \
            fuzz_fds_close();                                                                 \
    } while (0)
