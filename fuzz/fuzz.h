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

/* Runs body with exit() caught: FUZZ_RUN({ ... }); then fuzz_jumped says whether it
 * exited (the targets unmap what a rejected file left mapped: the real program would
 * have exited, and thousands of stale mappings slow the fuzzer down) */
#define FUZZ_RUN(...)                                                                         \
    do {                                                                                      \
        fuzz_armed = 1;                                                                       \
        fuzz_jumped = 1;                                                                      \
        if (!setjmp(fuzz_back)) {                                                             \
            __VA_ARGS__;                                                                      \
            fuzz_jumped = 0;                                                                  \
        }                                                                                     \
        fuzz_armed = 0;                                                                       \
    } while (0)
