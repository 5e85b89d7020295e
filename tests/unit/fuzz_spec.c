/* fuzz_spec.c: libFuzzer harness for spec_load (compiler/spec.c, runtime/config.c).
 *
 * spec_load exits on bad input, so each input runs in a forked child: exit 0 (a good
 * spec) and exit 1 (a bad one, with a message) are fine; a signal, a sanitizer report
 * or any other status is a bug, and the harness aborts so libFuzzer keeps the input.
 * The child hands its coverage counters back through shared memory before it exits
 * (an on_exit handler that also keeps libFuzzer's own exit hook from running), so
 * libFuzzer is guided by what the parser did, not blind.
 * A good spec must also survive the config round trip: its canonical lines, applied
 * to the defaults, must give the same lines again.
 *
 *   clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -Wl,--wrap=__sanitizer_cov_8bit_counters_init -Iruntime -Icompiler \
 *     tests/unit/fuzz_spec.c compiler/spec.c compiler/util.c runtime/config.c \
 *     runtime/util.c -lcjson -lm -o build/fuzz_spec
 *   mkdir -p build/fuzz_corpus && build/fuzz_spec -max_total_time=60 -max_len=4096 \
 *     build/fuzz_corpus tests/bad
 * (about 100 inputs/s per process: fork and ASan; add -jobs=N -workers=N)
 */
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "trainc.h"

/* Sanitizer reports end the child with a status of their own, not our 1. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "exitcode=86:detect_leaks=0"; }
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "halt_on_error=1:exitcode=86:print_stacktrace=1"; }

static void check_round_trip(const Spec *s)
{
    rt_train_config c;
    rt_config_defaults(&c);
    char err[512];
    for (int i = 0; i < s->n_train_lines; i++) {
        char *line = xstrdup(s->train_lines[i]);
        char *eq = strchr(line, '=');
        *eq = 0;
        if (rt_config_set(&c, line, eq + 1, err, sizeof err))
            die("canonical line '%s' does not read back: %s", s->train_lines[i], err);
        free(line);
    }
    int n;
    char **lines = rt_config_dump(&c, &n);
    if (n != s->n_train_lines)
        die("round trip: %d lines, then %d", s->n_train_lines, n);
    for (int i = 0; i < n; i++) {
        if (strcmp(lines[i], s->train_lines[i]))
            die("round trip: '%s' became '%s'", s->train_lines[i], lines[i]);
        free(lines[i]);
    }
    free(lines);
    if (memcmp(&c, &s->train, sizeof c))
        die("round trip: the config bytes differ");
}

static Spec *keep_spec;

/* The inline 8-bit counters of -fsanitize=fuzzer: the module constructor hands them
 * to libFuzzer through this call, which the link wraps (-Wl,--wrap=...) to learn
 * where they are. */
static uint8_t *counters, *counters_end;
static uint8_t *shared;   /* the child's counters, seen by the parent */
void __real___sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop);
void __wrap___sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop);
void __wrap___sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop)
{
    counters = start;
    counters_end = stop;
    __real___sanitizer_cov_8bit_counters_init(start, stop);
}

static size_t n_counters(void) { return (size_t)(counters_end - counters); }

static void child_exit(int status, void *arg)
{
    (void)arg;
    if (shared)
        memcpy(shared, counters, n_counters());
    fflush(NULL);
    _exit(status);
}

static char path[64], errpath[64];

static void remove_temp(void)
{
    unlink(path);
    unlink(errpath);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!shared && n_counters()) {
        shared = mmap(NULL, n_counters(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
        if (shared == MAP_FAILED)
            abort();
    }
    if (shared)
        memset(shared, 0, n_counters());
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/fuzz_spec_%d.json", (int)getpid());
        snprintf(errpath, sizeof errpath, "/tmp/fuzz_spec_%d.err", (int)getpid());
        atexit(remove_temp);     /* children leave through child_exit, before this */
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size || close(fd) != 0)
        abort();
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        int efd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(efd, 2);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        on_exit(child_exit, NULL);
        char *files[] = {path};
        keep_spec = spec_load(1, files);
        check_round_trip(keep_spec);
        spec_set(keep_spec, "batch_size=7");       /* exercise --set on good specs */
        check_round_trip(keep_spec);
        exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid)
        abort();
    for (size_t i = 0; shared && i < n_counters(); i++)
        if (shared[i] > counters[i])
            counters[i] = shared[i];
    if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1))
        return 0;
    /* show what the child said, then let libFuzzer record the input */
    char buf[4096];
    int efd = open(errpath, O_RDONLY);
    ssize_t n;
    while (efd >= 0 && (n = read(efd, buf, sizeof buf)) > 0)
        if (write(2, buf, (size_t)n) < 0)
            break;
    fprintf(stderr, "fuzz_spec: child %s %d\n", WIFEXITED(status) ? "exited" : "killed by signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    abort();
}
