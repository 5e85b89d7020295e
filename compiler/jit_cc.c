/* jit_cc.c: `trainc run`'s CPU kernels rebuilt by the system's C compiler. libtcc
 * starts a run at once but does not vectorize: a ResNet's elementwise loops ran 7-19x
 * slower than `trainc build`'s. So a run that is still launching CPU kernels after
 * JIT_CC_DELAY_S seconds compiles kernels_cpu.c as `trainc build` does ($CC, -O3, no
 * contraction, $TRAINC_CFLAGS) into a shared library in the cache folder
 * (cpu/HASH.so), in a thread of its own, and hands the runtime the table from each
 * libtcc kernel to its twin (rt_kernel_swap_set): the next launch runs the twin. A run
 * that finds the library in the cache loads it before its first step. Both builds are
 * the same C without contraction, so the numbers are the same bits
 * (tests/jit_cc.sh).
 *
 * TRAINC_JIT_CC=0 keeps libtcc's kernels; =1 compiles without the delay and says on
 * stderr when the twins take over. A compiler that is missing or fails, or a library
 * that does not load, leaves libtcc's, silently. The compile is killed when the run
 * ends first; with several ranks only rank 0 compiles (the others take the library
 * from the cache in their next run). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libtcc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "ir.h"
#include "../runtime/rt_dist.h"

#define JIT_CC_DELAY_S 5.0

extern char **environ;

static struct {
    pthread_t thread;
    int started, loud;
    atomic_int stop;
    atomic_int child;          /* the compiler's pid while it runs, else 0 */
    double delay;
    int n;                     /* kernels: their names and libtcc's functions */
    char **name;
    rt_kernel_fn *tcc_fn;
    const char *src;
    char *so, *tmp_c, *tmp_so;
    char **argv;
} J;

/* the compiler's command line: $CC (default cc), trainc build's flags, $TRAINC_CFLAGS,
 * then -shared -fPIC, the include folder, src and -o out */
static char **cc_argv(const char *incdir, const char *src, const char *out)
{
    char **a = xcalloc(128, sizeof *a);
    int n = 0;
    add_words(a, &n, 16, getenv("CC"));
    if (n == 0)
        a[n++] = "cc";
    const char *fixed[] = {TRAINC_CC_FLAGS, "-shared", "-fPIC"};
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
        a[n++] = (char *)fixed[k];
    add_words(a, &n, 100, getenv("TRAINC_CFLAGS"));
    a[n++] = xasprintf("-I%s", incdir);
    a[n++] = (char *)src;
    a[n++] = "-o";
    a[n++] = (char *)out;
    return a;
}

/* The cache's file for this source, this trainc executable (its size, time and inode:
 * the kernels read the runtime's structures, whose layout a new trainc may change) and
 * the compiler's command line (its file names as placeholders); NULL without a cache
 * folder */
static char *cache_so(const char *src, const char *incdir)
{
    char dir[4096];
    struct stat st;
    if (rt_cache_dir(dir, sizeof dir) != 0 || stat("/proc/self/exe", &st) != 0)
        return NULL;
    Buf key = {0};
    buf_printf(&key, "trainc %s cpu kernels\n%lld %lld.%09ld %llu\n", TRAINC_VERSION,
               (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
               (unsigned long long)st.st_ino);
    char **argv = cc_argv(incdir, "SRC", "OUT");
    for (int i = 0; argv[i]; i++)
        buf_printf(&key, "%s\n", argv[i]);
    buf_puts(&key, src);
    char *path = xasprintf("%s/cpu/%016llx.so", dir,
                           (unsigned long long)rt_fnv1a(key.s, strlen(key.s)));
    free(key.s);
    return path;
}

/* J.name, J.tcc_fn: the kernels, from the emitter's list and libtcc's symbols; 0 when
 * one is missing */
static int tcc_kernels(const char *names, TCCState *s)
{
    for (const char *p = names; *p; p++)
        J.n += *p == '\n';
    J.name = xcalloc((size_t)J.n + 1, sizeof *J.name);
    J.tcc_fn = xcalloc((size_t)J.n + 1, sizeof *J.tcc_fn);
    char *copy = xstrdup(names), *save = NULL;
    int k = 0;
    for (char *w = strtok_r(copy, "\n", &save); w && k < J.n; w = strtok_r(NULL, "\n", &save)) {
        J.name[k] = w;
        J.tcc_fn[k] = (rt_kernel_fn)tcc_get_symbol(s, w);
        if (!J.tcc_fn[k++])
            return 0;
    }
    return k == J.n;
}

static int cmp_from(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Loads so and builds the table from each of libtcc's kernels to the library's, sorted
 * by libtcc's addresses; NULL when the library or a kernel is missing. */
static rt_kernel_swap *load_twins(const char *so)
{
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return NULL;
    uintptr_t(*pair)[2] = xcalloc((size_t)J.n + 1, sizeof *pair);
    for (int k = 0; k < J.n; k++) {
        pair[k][0] = (uintptr_t)J.tcc_fn[k];
        pair[k][1] = (uintptr_t)dlsym(h, J.name[k]);
        if (!pair[k][1]) {   /* a kernel missing: keep libtcc's */
            free(pair);
            dlclose(h);
            return NULL;
        }
    }
    qsort(pair, (size_t)J.n, sizeof *pair, cmp_from);
    rt_kernel_swap *t = xcalloc(1, sizeof *t);
    t->n = J.n;
    t->from = xcalloc((size_t)J.n + 1, sizeof *t->from);
    t->to = xcalloc((size_t)J.n + 1, sizeof *t->to);
    for (int i = 0; i < J.n; i++) {
        t->from[i] = (rt_kernel_fn)pair[i][0];
        t->to[i] = (rt_kernel_fn)pair[i][1];
    }
    free(pair);
    return t;   /* (and the library) kept until the process ends */
}

/* Waits s seconds and for the first CPU kernel launch (none on a GPU); 0 when the run
 * ended first */
static int wait_start(double s)
{
    for (double t = 0; t < s || !rt_cpu_launched(); t += 0.05) {
        if (atomic_load(&J.stop))
            return 0;
        usleep(50000);
    }
    return !atomic_load(&J.stop);
}

/* Runs the compiler; 0 when it wrote J.tmp_so */
static int run_cc(void)
{
    FILE *f = fopen(J.tmp_c, "w");
    if (!f)
        return -1;
    int ok = fputs(J.src, f) >= 0;
    ok = fclose(f) == 0 && ok;
    if (!ok)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    /* a process group of its own (the driver and its cc1 are killed together), with
     * this thread's blocked signals unblocked */
    posix_spawnattr_t at;
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    pid_t pid;
    int rc = posix_spawnp(&pid, J.argv[0], &fa, &at, J.argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0)
        return -1;
    atomic_store(&J.child, pid);
    if (atomic_load(&J.stop))   /* the run ended while it started */
        kill(-pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    atomic_store(&J.child, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void *compile_main(void *arg)
{
    (void)arg;
    double t0 = rt_now();
    if (!wait_start(J.delay) || rt_dist_rank() != 0)
        return NULL;   /* over, or another rank's work */
    char *dir = xstrdup(J.so);
    *strrchr(dir, '/') = 0;
    int made = rt_mkdir_p(dir) == 0;
    free(dir);
    /* a compile that ended with the run is still kept for the next one */
    int ok = made && run_cc() == 0 && rename(J.tmp_so, J.so) == 0;
    unlink(J.tmp_c);
    unlink(J.tmp_so);
    rt_kernel_swap *t = ok && !atomic_load(&J.stop) ? load_twins(J.so) : NULL;
    if (t && !atomic_load(&J.stop)) {
        rt_kernel_swap_set(t);
        if (J.loud)
            fprintf(stderr, "trainc: the CPU kernels now run as the C compiler built them "
                            "(%.1f s after the start)\n", rt_now() - t0);
    }
    return NULL;
}

void jit_cc_end(void)
{
    if (!J.started)
        return;
    J.started = 0;
    atomic_store(&J.stop, 1);
    pid_t pid = atomic_load(&J.child);
    if (pid > 0)
        kill(-pid, SIGKILL);
    pthread_join(J.thread, NULL);
}

void jit_cc_begin(const Emitted *em, const char *kern_src, const char *incdir, TCCState *s)
{
    const char *mode = getenv("TRAINC_JIT_CC");
    if ((mode && !strcmp(mode, "0")) || !em->cpu_kernel_names.s)
        return;
    J.loud = mode && !strcmp(mode, "1");
    J.delay = J.loud ? 0.0 : JIT_CC_DELAY_S;
    J.src = kern_src;
    J.so = cache_so(kern_src, incdir);
    if (!J.so || !tcc_kernels(em->cpu_kernel_names.s, s))
        return;
    rt_kernel_swap *t = load_twins(J.so);
    if (t) {   /* from the cache: before the first step */
        rt_kernel_swap_set(t);
        if (J.loud)
            fprintf(stderr, "trainc: the CPU kernels run as the C compiler built them (%s)\n",
                    J.so);
        return;
    }
    J.tmp_c = xasprintf("%s.%d.c", J.so, (int)getpid());
    J.tmp_so = xasprintf("%s.%d.tmp", J.so, (int)getpid());
    J.argv = cc_argv(incdir, J.tmp_c, J.tmp_so);
    /* the thread blocks every signal, as the pool's workers do: SIGINT and friends go
     * to the main thread */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&J.thread, NULL, compile_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return;
    J.started = 1;
    atexit(jit_cc_end);
}
