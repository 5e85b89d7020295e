#define _GNU_SOURCE
/* build.c: what `trainc build` adds for a GPU and for shipping, and how it runs programs.
 *
 *   build_run         a program (the C compiler, ldd, patchelf) with an argv, no shell, in
 *                     a process group of its own; its exit status, its output read back
 *   build_temp_*      what build writes before it is done (the temporary folder, the
 *                     executable being linked, a library being copied), removed on every
 *                     way out: exit, or SIGINT, SIGTERM, SIGHUP (then raised again)
 *   build_check_archs --arch checked before anything is written: the form, sm_80 or newer,
 *                     what this NVRTC compiles for; repeats dropped
 *   build_cuda_image  kernels_cuda.cu -> one cubin per --arch and PTX for the lowest
 *                     (NVRTC, in parallel), embedded in the executable by cuda_image.c
 *                     (.incbin) with the source itself, which a trainer hands to NVRTC
 *                     when it meets a GPU none of the cubins fits
 *   build_bundle      the executable's shared libraries (ldd) and the ones the device
 *                     layer loads with dlopen (cuBLASLt, NVRTC and its builtins, NCCL),
 *                     with everything those link but the C library's own parts, copied
 *                     into DIR/lib, which the executable's run path ($ORIGIN/lib) names
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "ir.h"
#include "../runtime/rt_cuda.h"

extern char **environ;

/* ---- programs and temporary files ------------------------------------------------------ */

/* Fixed arrays and async-signal-safe calls only: the signal handler reads them. A path
 * is written before it is counted and forgotten by its first byte. */
enum { MAX_TEMP_FILES = 4 };
static char temp_dir[PATH_MAX];
static char temp_files[MAX_TEMP_FILES][PATH_MAX];
static volatile pid_t running;   /* the process group of the program running, or 0 */

/* Removes a flat folder (build writes no subfolders). */
static void remove_flat_dir(const char *dir)
{
    /* getdents64, not readdir (which allocates); again while entries remain, as
     * removing during a listing may skip some */
    for (int pass = 0; pass < 8 && rmdir(dir) != 0 && errno == ENOTEMPTY; pass++) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            break;
        static char ents[16384] __attribute__((aligned(8)));
        long n;
        while ((n = syscall(SYS_getdents64, fd, ents, sizeof ents)) > 0)
            for (long o = 0; o < n;) {
                /* struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
                unsigned short reclen;
                memcpy(&reclen, ents + o + 16, sizeof reclen);
                const char *name = ents + o + 19;
                if (strcmp(name, ".") && strcmp(name, ".."))
                    unlinkat(fd, name, 0);
                o += reclen;
            }
        close(fd);
    }
}

/* The temporary folder; its descriptor holds a lock on it while this build lives. */
static int temp_dir_fd = -1;

static void remove_temp_dir(void)
{
    if (!temp_dir[0])
        return;
    remove_flat_dir(temp_dir);
    temp_dir[0] = 0;
    if (temp_dir_fd >= 0)
        close(temp_dir_fd);
    temp_dir_fd = -1;
}

static void remove_temps(void)
{
    for (int i = 0; i < MAX_TEMP_FILES; i++)
        if (temp_files[i][0])
            unlink(temp_files[i]);
    remove_temp_dir();
}

/* SIGINT, SIGTERM, SIGHUP during a build: the program running (its whole process
 * group) is stopped and waited for, with whatever it started (trainc is their
 * subreaper: a linker orphaned by its driver would write on), for at most 5 s; then
 * the temporary files go and the signal is raised again, to end trainc as it would
 * have. */
static void on_signal(int sig)
{
    pid_t g = running;
    if (g > 0) {
        kill(-g, SIGTERM);
        struct timespec tick = {0, 10 * 1000 * 1000};
        for (int t = 0; t < 500; t++) {
            pid_t r = waitpid(-1, NULL, WNOHANG);
            if (r < 0 && errno == ECHILD)
                break;
            if (r <= 0)
                nanosleep(&tick, NULL);
        }
    }
    remove_temps();
    signal(sig, SIG_DFL);
    raise(sig);   /* delivered when the handler returns */
}

void build_temp_setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    atexit(remove_temps);   /* error_input and rt_fail exit */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGHUP);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* A build killed outright (SIGKILL, the OOM killer, a lost machine) leaves its folder
 * in TMPDIR, handlers or not: each build's folder holds a lock (flock, which the kernel
 * drops however the process ends) and, once it does, this mark. A folder of ours with
 * the mark whose lock can be taken is a dead build's, and the next build removes it. */
#define STALE_MARK ".trainc-build-lock"

static void remove_stale_dirs(const char *base)
{
    DIR *d = opendir(base);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "trainc-build-", 13))
            continue;
        int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
            faccessat(fd, STALE_MARK, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
            flock(fd, LOCK_EX | LOCK_NB) == 0) {
            char *p = xasprintf("%s/%s", base, de->d_name);
            remove_flat_dir(p);
            free(p);
        }
        close(fd);
    }
    closedir(d);
}

const char *build_temp_dir(void)
{
    build_temp_setup();
    const char *t = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    if (snprintf(tmpl, sizeof tmpl, "%s/trainc-build-XXXXXX", t && *t ? t : "/tmp") >=
        (int)sizeof tmpl)
        error_input("build: TMPDIR is too long a path");
    remove_stale_dirs(t && *t ? t : "/tmp");
    if (!mkdtemp(tmpl))
        rt_fail("build: cannot make a temporary folder in %s: %s (set TMPDIR to a folder you "
                "can write)", t && *t ? t : "/tmp", strerror(errno));
    memcpy(temp_dir, tmpl, strlen(tmpl) + 1);
    /* locked, then marked: a marked folder that is not locked is a dead build's */
    temp_dir_fd = open(temp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (temp_dir_fd >= 0 && flock(temp_dir_fd, LOCK_EX | LOCK_NB) == 0) {
        int m = openat(temp_dir_fd, STALE_MARK, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (m >= 0)
            close(m);
    }
    return temp_dir;
}

void build_temp_dir_remove(void)
{
    remove_temp_dir();
}

int build_temp_file(char *path)
{
    build_temp_setup();
    for (int i = 0; i < MAX_TEMP_FILES; i++)
        if (!temp_files[i][0]) {
            int fd = mkostemp(path, O_CLOEXEC);
            if (fd < 0)
                return -1;
            size_t n = strlen(path);
            memcpy(temp_files[i] + 1, path + 1, n);   /* the first byte last: see above */
            temp_files[i][0] = path[0];
            return fd;
        }
    die("more than %d temporary files at once", MAX_TEMP_FILES);
}

void build_temp_done(const char *path)
{
    for (int i = 0; i < MAX_TEMP_FILES; i++)
        if (temp_files[i][0] && !strcmp(temp_files[i], path))
            temp_files[i][0] = 0;
}

int build_run(char *const *argv, Buf *out, int quiet)
{
    build_temp_setup();
    int fds[2] = {-1, -1};
    if (out && pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out)
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    if (quiet)
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, sigs, old;
    sigemptyset(&none);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &sigs);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    /* no signal between the start and `running` naming the group to stop */
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    if (rc == 0)
        running = pid;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (out)
        close(fds[1]);
    if (rc != 0) {
        if (out)
            close(fds[0]);
        errno = rc;
        return -1;
    }
    if (out) {
        char chunk[4096];
        ssize_t k;
        while ((k = read(fds[0], chunk, sizeof chunk)) > 0 || (k < 0 && errno == EINTR))
            if (k > 0)
                buf_printf(out, "%.*s", (int)k, chunk);
        close(fds[0]);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            rt_fail("build: waitpid: %s", strerror(errno));
    running = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- the CUDA image -------------------------------------------------------------------- */

typedef struct Job {
    const char *src, *arch;
    int threads;               /* NVRTC's split compile: this job's share of the CPUs */
    void *image;
    size_t size;
    char *log;
    int rc;
} Job;

static void *compile_job(void *p)
{
    Job *j = p;
    j->rc = rt_nvrtc_compile(j->src, "kernels_cuda.cu", j->arch, j->threads, &j->image, &j->size,
                             &j->log);
    return NULL;
}

/* sm_ and digits, then at most one letter: sm_90a (architecture-specific), sm_100f
 * (family-specific); whether NVRTC knows it is asked below. */
static int valid_arch(const char *a)
{
    if (strncmp(a, "sm_", 3) || !(a[3] >= '0' && a[3] <= '9'))
        return 0;
    for (const char *s = a + 3; *s; s++)
        if (!((*s >= '0' && *s <= '9') || ((*s == 'a' || *s == 'f') && !s[1])))
            return 0;
    return 1;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
        rt_fail("build: cannot write %s: %s", path, strerror(errno));
}

/* Whether NVRTC compiles an empty kernel for arch (sm_90a: its list counts numbers only). */
static int nvrtc_compiles_for(const char *arch)
{
    void *image = NULL;
    size_t size = 0;
    char *log = NULL;
    int rc = rt_nvrtc_compile("extern \"C\" __global__ void k() {}\n", "probe.cu", arch, 1,
                              &image, &size, &log);
    free(image);
    free(log);
    return rc == 0;
}

/* What NVRTC compiles for that trainc takes (sm_80 and newer), as "sm_80, sm_86, ...", and
 * with letter: the suffixed ones it takes too ("sm_90a, sm_100a, ..."; compiles an empty
 * kernel for each, so only for an error message). */
static char *supported_archs(int with_letters)
{
    char have[512];
    rt_nvrtc_supports(0, have, sizeof have);
    Buf b = {0};
    char *list = xstrdup(have);
    for (char *a = strtok(list, ", "); a; a = strtok(NULL, ", "))
        if (atoi(a + 3) >= RT_CU_MIN_SM)
            buf_printf(&b, "%s%s", b.len ? ", " : "", a);
    free(list);
    for (int k = 0; with_letters && k < 2; k++) {
        list = xstrdup(have);
        for (char *a = strtok(list, ", "); a; a = strtok(NULL, ", ")) {
            char *v = xasprintf("%s%c", a, "af"[k]);
            if (atoi(a + 3) >= RT_CU_MIN_SM && nvrtc_compiles_for(v))
                buf_printf(&b, "%s%s", b.len ? ", " : "", v);
            free(v);
        }
        free(list);
    }
    return b.s ? b.s : xstrdup("none");
}

char *build_check_archs(const char *archs)
{
    char why[512];
    if (rt_nvrtc_load(why, sizeof why) != 0)
        rt_fail("build: --device cuda needs NVRTC: %s\n  hint: install the CUDA toolkit (its "
                "NVRTC), or build with --device cpu", why);
    int nv_major = 0, nv_minor = 0;
    rt_nvrtc_version(&nv_major, &nv_minor);
    Buf out = {0};
    int n = 0;
    const char *p = archs;
    do {
        size_t len = strcspn(p, ",");
        char *a = xasprintf("%.*s", (int)len, p);
        p += len;
        if (!*a)
            error_input("build: --arch: an empty architecture in '%s' (a list like sm_80,sm_90)",
                        archs);
        if (!valid_arch(a))
            error_input("build: --arch: '%s' is not an architecture like sm_90", a);
        if (atoi(a + 3) < RT_CU_MIN_SM)
            error_input("build: --arch: %s: trainc's kernels need sm_%d or newer (16-bit tensor "
                        "cores, asynchronous copies)", a, RT_CU_MIN_SM);
        if (!rt_nvrtc_supports(atoi(a + 3), NULL, 0) ||
            (a[strlen(a) - 1] > '9' && !nvrtc_compiles_for(a)))
            error_input("build: --arch: NVRTC %d.%d cannot compile for %s; it can for %s",
                        nv_major, nv_minor, a, supported_archs(a[strlen(a) - 1] > '9'));
        /* sm_80,sm_80: one cubin (the trainer would load the first of two alike) */
        int seen = 0;
        char *list = xstrdup(out.s ? out.s : "");
        for (char *b = strtok(list, ","); b && !seen; b = strtok(NULL, ","))
            seen = !strcmp(a, b);
        free(list);
        if (!seen) {
            if (++n > 16)
                error_input("build: --arch: at most 16 architectures");
            buf_printf(&out, "%s%s", out.len ? "," : "", a);
        }
        free(a);
    } while (*p++);
    return out.s;
}

/* The path of a file for .incbin, in the assembler's string inside cuda_image.c's C string:
 * escaped for both (TMPDIR may hold " or \). */
static void incbin_path(Buf *c, const char *path)
{
    Buf as = {0};
    for (const char *s = path; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            buf_printf(&as, "\\%c", ch);
        else if (ch < 32 || ch >= 127)
            buf_printf(&as, "\\%03o", ch);
        else
            buf_printf(&as, "%c", ch);
    }
    buf_puts(c, "\\\"\" ");      /* the assembler's opening quote; the C string ends */
    c_string(c, as.s);
    buf_puts(c, " \"\\\"");      /* the next C string: the assembler's closing quote */
    free(as.s);
}

/* archs: build_check_archs's list. */
char *build_cuda_image(const char *src, const char *archs, const char *dir)
{
    Job jobs[17];
    int n = 0, lowest = 1 << 30;
    char *list = xstrdup(archs);
    for (char *a = strtok(list, ","); a; a = strtok(NULL, ",")) {
        jobs[n++] = (Job){.src = src, .arch = a};
        int v = atoi(a + 3);
        if (v < lowest)
            lowest = v;
    }
    if (n == 0)
        die("build_cuda_image without architectures");
    /* PTX of the lowest: the driver compiles it for GPUs newer than every cubin */
    jobs[n++] = (Job){.src = src, .arch = xasprintf("compute_%d", lowest)};
    pthread_t th[17];
    int threads = rt_cpus_usable() / n;   /* each compile's share of the CPUs */
    for (int i = 0; i < n; i++)
        jobs[i].threads = threads;
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, compile_job, &jobs[i]) != 0)
            compile_job(&jobs[i]), th[i] = 0;
    for (int i = 0; i < n; i++)
        if (th[i])
            pthread_join(th[i], NULL);
    Buf c = {0};
    buf_puts(&c, "/* cuda_image.c: written by trainc build; the kernels of kernels_cuda.cu as "
                 "cubins, PTX and source. */\n#include \"trainc_rt.h\"\n\n__asm__(\".section .rodata\\n\"\n");
    for (int i = 0; i < n; i++) {
        Job *j = &jobs[i];
        if (j->rc != 0)
            rt_fail("build: NVRTC could not compile the kernels for %s (a trainc bug; please "
                    "report it with the spec):\n%.4000s", j->arch, j->log ? j->log : "");
        char *path = xasprintf("%s/kernels.%s.bin", dir, j->arch);
        write_file(path, j->image, j->size);
        buf_printf(&c, "        \".balign 16\\ntrainc_kimage_%d:\\n.incbin ", i);
        incbin_path(&c, path);
        buf_puts(&c, "\\n.byte 0\\n\"\n");
    }
    /* the source the trainer compiles where no cubin fits: kernels_cuda.cu with the
     * templates inlined (the file emit writes #includes them) */
    char *srcpath = xasprintf("%s/kernels_nvrtc.cu", dir);
    write_file(srcpath, src, strlen(src));
    buf_puts(&c, "        \"trainc_ksource:\\n.incbin ");
    incbin_path(&c, srcpath);
    buf_puts(&c, "\\n.byte 0\\n\"\n        \".previous\\n\");\n\n");
    for (int i = 0; i < n; i++)
        buf_printf(&c, "extern const unsigned char trainc_kimage_%d[];\n", i);
    buf_puts(&c, "extern const char trainc_ksource[];\n\nstatic const rt_cubin cubins[] = {\n");
    for (int i = 0; i < n - 1; i++)
        buf_printf(&c, "    {\"%s\", trainc_kimage_%d, %zu},\n", jobs[i].arch, i, jobs[i].size);
    buf_printf(&c, "};\n\nconst rt_cuda_image trainc_cuda_image = {\n    .source = trainc_ksource,\n"
                   "    .n_cubins = %d,\n    .cubins = cubins,\n    .ptx = (const char *)trainc_kimage_%d,\n};\n",
               n - 1, n - 1);
    char *out = xasprintf("%s/cuda_image.c", dir);
    write_file(out, c.s, c.len);
    for (int i = 0; i < n; i++) {
        free(jobs[i].image);
        free(jobs[i].log);
    }
    free(c.s);
    return out;
}

/* ---- the bundle -------------------------------------------------------------------------- */

/* The C library's own parts (glibc's): every Linux machine has them, matched to its kernel
 * and to each other, so they come from the target system; and the NVIDIA driver's
 * libcuda, which must match the driver there. Everything else a bundled library links
 * (libstdc++ and libgcc_s for NCCL and NVRTC's builtins) is bundled. */
static int system_lib(const char *name)
{
    static const char *const sys[] = {"linux-vdso", "linux-gate", "ld-linux", "libc.so",
                                      "libm.so", "libmvec.so", "libdl.so", "libpthread.so",
                                      "librt.so", "libresolv.so", "libutil.so", "libanl.so",
                                      "libnss_", "libBrokenLocale.so", "libthread_db.so",
                                      "libc_malloc_debug.so", "libcuda.so"};
    for (size_t i = 0; i < sizeof sys / sizeof sys[0]; i++)
        if (!strncmp(name, sys[i], strlen(sys[i])))
            return 1;
    return 0;
}

/* A path a program cannot take for an option (a bundle named -x). */
static char *plain_path(const char *p)
{
    return p[0] == '/' ? xstrdup(p) : xasprintf("./%s", p);
}

static int write_all_fd(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* from's bytes into out; 0, or -1 with errno */
static int copy_fd(int in, int out)
{
    static char buf[1 << 20];
    ssize_t k;
    while ((k = read(in, buf, sizeof buf)) != 0) {
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 || write_all_fd(out, buf, (size_t)k) != 0)
            return -1;
    }
    return lseek(in, 0, SEEK_SET) < 0 ? -1 : 0;
}

/* A copy of `from` put at `to` with `mode`, whole or not at all. It is written as a file
 * with no name in to's folder (O_TMPFILE), so a build killed outright (SIGKILL, the OOM
 * killer) while writing it leaves nothing there (a named .trainc-XXXXXX as large as the
 * executable stayed for good), then named (a temporary name, renamed over `to` at
 * once). Where the file system has no O_TMPFILE (or there is no /proc to name it by),
 * under the temporary name from the start, removed on every other way out. 0, or -1
 * with errno. */
int build_install(const char *from, const char *to, unsigned mode)
{
    const char *slash = strrchr(to, '/');
    int dl = slash ? (int)(slash - to) + (slash == to) : 1;
    char *dir = slash ? xasprintf("%.*s", dl, to) : xstrdup(".");
    char *tmp = slash ? xasprintf("%.*s/.trainc-XXXXXX", dl, to) : xstrdup(".trainc-XXXXXX");
    int rc = -1, registered = 0, out = -1;
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        goto done;
    out = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (out >= 0) {
        if (copy_fd(in, out) != 0 || fchmod(out, mode) != 0)
            goto done;
        int fd = build_temp_file(tmp);   /* a free name, removed on any way out */
        if (fd < 0)
            goto done;
        registered = 1;
        close(fd);
        unlink(tmp);
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", out);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0) {
            if (errno != ENOENT)
                goto done;
            close(out);               /* no /proc: by the name from the start */
            out = -1;
        }
    }
    if (out < 0) {
        out = registered ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)
                         : build_temp_file(tmp);
        if (out < 0)
            goto done;
        registered = 1;
        if (copy_fd(in, out) != 0 || fchmod(out, mode) != 0)
            goto done;
    }
    int closed = close(out);
    out = -1;
    if (closed != 0 || rename(tmp, to) != 0)
        goto done;
    build_temp_done(tmp);
    registered = 0;
    rc = 0;
done:;
    int e = errno;
    if (out >= 0)
        close(out);
    if (in >= 0)
        close(in);
    if (registered) {
        unlink(tmp);
        build_temp_done(tmp);
    }
    free(dir);
    free(tmp);
    errno = e;
    return rc;
}

static void copy_file(const char *from, const char *to)
{
    if (build_install(from, to, 0755) != 0)
        rt_fail("build: --bundle: writing %s: %s%s", to, strerror(errno),
                errno == ENOSPC || errno == EDQUOT ? " (is the disk full?)" : "");
}

/* Where the dynamic loader finds `soname` for this process (NULL: nowhere). */
static char *find_lib(const char *soname)
{
    void *h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
    if (!h)
        return NULL;
    struct link_map *lm = NULL;
    char *path = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
        path = realpath(lm->l_name, NULL);
    dlclose(h);
    return path;
}

/* Runs a tool of the bundle's (ldd, patchelf) on file: exit 2 naming it when it cannot
 * start or fails. Its standard output into out, when out. */
static void run_tool(char **argv, const char *file, Buf *out, const char *install)
{
    int rc = build_run(argv, out, 0);
    if (rc < 0)
        rt_fail("build: --bundle needs %s, which cannot be started: %s%s", argv[0],
                strerror(errno), install);
    if (rc != 0)
        rt_fail("build: --bundle: %s failed on %s (exit %d; its messages are above)", argv[0],
                file, rc);
}

/* A library with a run path of its own (Debian's Open MPI has one) would look for its
 * dependencies there and not in the executable's RPATH: point it at its own folder. */
static void own_rpath(const char *lib)
{
    static const char install[] = " (Debian: apt-get install patchelf)";
    char *path = plain_path(lib);
    Buf rp = {0};
    run_tool((char *[]){"patchelf", "--print-rpath", path, NULL}, lib, &rp, install);
    if (rp.len && rp.s[0] != '\n')
        run_tool((char *[]){"patchelf", "--set-rpath", "$ORIGIN", path, NULL}, lib, NULL, install);
    free(rp.s);
    free(path);
}

typedef struct Bundle {
    const char *libdir;
    char **names, **from;   /* sonames bundled, and the files they were copied from */
    int n, cap, missing;
} Bundle;

static void bundle_one(Bundle *b, const char *soname, const char *path)
{
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->names[i], soname))
            return;
    char *to = xasprintf("%s/%s", b->libdir, soname);
    copy_file(path, to);
    own_rpath(to);
    struct stat st;
    long long mb = stat(to, &st) == 0 ? (long long)(st.st_size >> 20) : 0;
    fprintf(stderr, "trainc: bundled %s (%lld MiB)\n", soname, mb);
    free(to);
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->names = realloc(b->names, (size_t)b->cap * sizeof *b->names);
        b->from = realloc(b->from, (size_t)b->cap * sizeof *b->from);
        if (!b->names || !b->from)
            die("out of memory");
    }
    b->names[b->n] = xstrdup(soname);
    b->from[b->n++] = xstrdup(path);
}

/* Bundles what `file` links, as ldd lists it ("soname => path (address)"): the whole
 * closure, but the system's libraries. */
static void bundle_deps(Bundle *b, const char *file)
{
    char *path = plain_path(file);
    Buf out = {0};
    run_tool((char *[]){"ldd", path, NULL}, file, &out, " (it comes with the C library: libc-bin)");
    for (char *line = out.s ? strtok(out.s, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char name[512], dep[1024];
        if (sscanf(line, " %511s => %1023s", name, dep) != 2 || system_lib(name))
            continue;
        if (!strcmp(dep, "not")) {
            fprintf(stderr, "trainc: error: --bundle: %s (which %s needs) is not found on this "
                    "machine\n", name, file);
            b->missing = 1;
            continue;
        }
        char *real = realpath(dep, NULL);
        bundle_one(b, name, real ? real : dep);
        free(real);
    }
    free(out.s);
    free(path);
}

void build_bundle(const char *exe, const char *dir, int cuda)
{
    char *libdir = xasprintf("%s/lib", dir);
    if (rt_mkdir_p(libdir) != 0)
        rt_fail("build: --bundle: cannot create %s: %s", libdir, strerror(errno));
    Bundle b = {.libdir = libdir};
    bundle_deps(&b, exe);   /* ldd lists the executable's whole closure */
    if (cuda) {
        /* the device layer's dlopen'ed libraries (NVRTC loads its builtins by soname;
         * NCCL serves several ranks on GPUs) */
        static const char *const libs[] = {"libcublasLt.so.13", "libnvrtc.so.13",
                                           "libnvrtc-builtins.so.13.0", "libnccl.so.2"};
        for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
            char *path = find_lib(libs[i]);
            if (!path)
                rt_fail("build: --bundle: %s is not installed here (the CUDA toolkit's); a "
                        "--device cuda bundle needs it", libs[i]);
            bundle_one(&b, libs[i], path);
            free(path);
        }
    }
    /* and what those link (libstdc++ for NCCL and NVRTC's builtins): each library's
     * closure, from the file it was copied from (the copy may have a new run path) */
    for (int i = 0; i < b.n; i++)
        bundle_deps(&b, b.from[i]);
    if (b.missing)
        rt_fail("build: --bundle: libraries are missing (see above)");
    free(libdir);
}
