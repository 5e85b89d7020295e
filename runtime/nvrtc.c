#define _GNU_SOURCE
/* nvrtc.c: NVRTC, loaded with dlopen, and the on-disk kernel cache.
 *
 * Two users: `trainc build --device cuda` compiles the generated kernels into cubins
 * (one per --arch) and PTX that go into the executable; a trainer whose embedded
 * cubins do not fit the GPU it finds (and `trainc run`) compiles the embedded source
 * for that exact GPU and keeps the result in the cache, keyed by the source's hash,
 * the architecture and NVRTC's version, so the next start skips the compile.
 *
 * dlopen rather than linking: a trainer built for the CPU and GPU runs on a machine
 * without the CUDA toolkit, and a bundle (trainc build --bundle) finds the copy next
 * to the executable through its $ORIGIN run path. */
#include <errno.h>
#include <fcntl.h>
#include <nvrtc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rt_cuda.h"

/* the options tests/nvrtc_check.c compiles every generated file with (besides the
 * architecture and the split below); part of the kernel cache's key */
#define NVRTC_OPT1 "--std=c++17"
#define NVRTC_OPT2 "-default-device"
/* NVRTC's split compile: the optimizer and ptxas work on parts of the program on
 * several threads (llama3_1b's bf16 kernels for sm_90a: 7.5 s unsplit, 4.8 s on two).
 * The code is the same for any count of 2 or more (1 turns the split off, which makes
 * other, equivalent code), so the count is not part of the cache's key, and it is at
 * least 2. An NVRTC that does not know the option compiles without it. */
#define NVRTC_SPLIT "-split-compile="

#define NVRTC_FNS(X)                                                                           \
    X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize)    \
    X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize)             \
    X(nvrtcGetPTX) X(nvrtcDestroyProgram) X(nvrtcGetErrorString) X(nvrtcGetNumSupportedArchs) \
    X(nvrtcGetSupportedArchs)
#define DECLARE(fn) static __typeof__(fn) *p_##fn;
NVRTC_FNS(DECLARE)

static int loaded;             /* 1: loaded, -1: tried and failed */
static char load_why[512];

int rt_nvrtc_load(char *why, size_t n)
{
    if (!loaded) {
        static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
        static const char *const syms[] = {NVRTC_FNS(RT_DL_NAME)};
        void **const fns[] = {NVRTC_FNS(RT_DL_SLOT)};
        loaded = rt_dl_load("NVRTC", names, syms, fns, (int)(sizeof fns / sizeof *fns), load_why,
                            sizeof load_why) == 0 ? 1 : -1;
    }
    if (loaded < 0 && why)
        snprintf(why, n, "%s", load_why);
    return loaded > 0 ? 0 : -1;
}

int rt_nvrtc_version(int *major, int *minor)
{
    if (rt_nvrtc_load(NULL, 0) != 0)
        return -1;
    return p_nvrtcVersion(major, minor) == NVRTC_SUCCESS ? 0 : -1;
}

/* Whether NVRTC compiles for sm_<sm> (sm 90 for sm_90 and sm_90a); its list, as
 * "sm_75, sm_80, ...", into list (n bytes). */
int rt_nvrtc_supports(int sm, char *list, size_t n)
{
    int count = 0, archs[64], ok = 0;
    if (list && n)
        list[0] = 0;
    if (rt_nvrtc_load(NULL, 0) != 0 || p_nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS ||
        count < 1 || count > 64 || p_nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS)
        return 1;   /* not known: the compile will say */
    size_t u = 0;
    for (int i = 0; i < count; i++) {
        ok |= archs[i] == sm;
        if (list && u < n)
            u += (size_t)snprintf(list + u, n - u, "%ssm_%d", i ? ", " : "", archs[i]);
    }
    return ok;
}

int rt_nvrtc_compile(const char *src, const char *name, const char *arch, int threads,
                     void **image, size_t *size, char **log)
{
    char why[512];
    *image = NULL;
    *size = 0;
    if (log)
        *log = NULL;
    if (rt_nvrtc_load(why, sizeof why) != 0) {
        if (log)
            *log = strdup(why);
        return -1;
    }
    nvrtcProgram prog;
    if (p_nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL) != NVRTC_SUCCESS) {
        if (log)
            *log = strdup("nvrtcCreateProgram failed");
        return -1;
    }
    char opt_arch[64], opt_split[32];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
    snprintf(opt_split, sizeof opt_split, NVRTC_SPLIT "%d", threads < 2 ? 2 : threads);
    const char *opts[] = {opt_arch, NVRTC_OPT1, NVRTC_OPT2, opt_split};
    nvrtcResult r = p_nvrtcCompileProgram(prog, 4, opts);
    if (r == NVRTC_ERROR_INVALID_OPTION)
        r = p_nvrtcCompileProgram(prog, 3, opts);
    size_t logn = 0;
    p_nvrtcGetProgramLogSize(prog, &logn);
    char *text = calloc(logn + 64, 1);
    if (text)
        p_nvrtcGetProgramLog(prog, text);
    int ptx = strncmp(arch, "compute_", 8) == 0;
    int rc = -1;
    if (r == NVRTC_SUCCESS) {
        size_t n = 0;
        if ((ptx ? p_nvrtcGetPTXSize(prog, &n) : p_nvrtcGetCUBINSize(prog, &n)) == NVRTC_SUCCESS &&
            n > 0 && (*image = malloc(n))) {
            if ((ptx ? p_nvrtcGetPTX(prog, *image) : p_nvrtcGetCUBIN(prog, *image)) == NVRTC_SUCCESS) {
                *size = n;
                rc = 0;
            } else {
                free(*image);
                *image = NULL;
            }
        }
    } else if (text && !*text) {
        snprintf(text, logn + 64, "%s", p_nvrtcGetErrorString(r));
    }
    p_nvrtcDestroyProgram(&prog);
    if (log)
        *log = text;
    else
        free(text);
    return rc;
}

/* ---- the kernel cache ---------------------------------------------------------------- */

static int cache_file(const char *src, const char *arch, char *path, size_t n)
{
    char dir[RT_PATH_MAX];
    int major = 0, minor = 0;
    if (rt_cache_dir(dir, sizeof dir) != 0 || rt_nvrtc_version(&major, &minor) != 0)
        return -1;
    /* the source and the options it is compiled with (a trainc that changes only the
     * options must not take an older one's cubins) */
    static const char opts[] = NVRTC_OPT1 " " NVRTC_OPT2 " " NVRTC_SPLIT;
    uint64_t h = rt_fnv1a(src, strlen(src)) ^ (rt_fnv1a(opts, strlen(opts)) * 0x100000001b3ull);
    return snprintf(path, n, "%s/%016llx-%s-nvrtc%d.%d.%s", dir, (unsigned long long)h, arch, major,
                    minor, strncmp(arch, "compute_", 8) ? "cubin" : "ptx") < (int)n ? 0 : -1;
}

int rt_kcache_get(const char *src, const char *arch, void **image, size_t *size)
{
    char path[RT_PATH_MAX + 128];
    *image = NULL;
    *size = 0;
    if (cache_file(src, arch, path, sizeof path) != 0)
        return -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || !(*image = malloc((size_t)st.st_size))) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t k = read(fd, (char *)*image + got, (size_t)st.st_size - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    if (got != (size_t)st.st_size) {
        free(*image);
        *image = NULL;
        return -1;
    }
    *size = got;
    return 0;
}

/* Written under a temporary name and renamed: a reader sees a whole file or none.
 * A cache that cannot be written costs the next start a compile, nothing more. */
void rt_kcache_put(const char *src, const char *arch, const void *image, size_t size)
{
    char path[RT_PATH_MAX + 128], tmp[RT_PATH_MAX + 160], dir[RT_PATH_MAX];
    if (cache_file(src, arch, path, sizeof path) != 0 || rt_cache_dir(dir, sizeof dir) != 0 ||
        rt_mkdir_p(dir) != 0)
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    size_t put = 0;
    while (put < size) {
        ssize_t k = write(fd, (const char *)image + put, size - put);
        if (k <= 0)
            break;
        put += (size_t)k;
    }
    if (close(fd) != 0 || put != size || rename(tmp, path) != 0)
        unlink(tmp);
}
