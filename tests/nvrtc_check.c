/* nvrtc_check [-I DIR] [--fast] [--threads N] [--ptxas-log PREFIX] FILE.cu ARCH...: compiles a
 * generated CUDA file with NVRTC to a cubin for each architecture (sm_80, sm_90, ...),
 * as trainc's CUDA path will at build time (its options, NVRTC's split compile on two
 * threads among them: runtime/nvrtc.c); needs no GPU. Fails on a compile error and on
 * any warning.
 *   -I DIR               where its #include "x.cuh" lines are found (templates/cuda)
 *   --fast               NVRTC's fast compile (-Ofc=max): the front end and ptxas whole,
 *                        little optimization; 5-10x quicker. It checks that the code
 *                        compiles, not what it compiles to (registers, spills)
 *   --threads N          NVRTC's split compile on N threads (default 2, as a trainer on
 *                        2 cores; 1: no split, for timing it against)
 *   --ptxas-log PREFIX   ptxas's account of each kernel (-Xptxas -v), written to
 *                        PREFIX_ARCH.log
 * Each compile's wall time is printed. */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(1);
    }
    s[n] = 0;
    fclose(f);
    return s;
}

static void write_log(const char *prefix, const char *arch, const char *log)
{
    char path[4096];
    snprintf(path, sizeof path, "%s_%s.log", prefix, arch);
    FILE *f = fopen(path, "w");
    if (!f || fputs(log, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* one compile: 0 if it gave a cubin without a warning */
static int compile(const char *src, const char *name, const char *arch, const char *const *extra,
                   int n_extra, int fast, const char *ptxas_log)
{
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL) != NVRTC_SUCCESS) {
        fprintf(stderr, "nvrtcCreateProgram failed\n");
        exit(1);
    }
    char opt_arch[64];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
    const char *opts[8] = {opt_arch, "--std=c++17", "-default-device"};
    int n = 3;
    for (int i = 0; i < n_extra; i++)
        opts[n++] = extra[i];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    nvrtcResult r = nvrtcCompileProgram(prog, n, opts);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    size_t logn = 0;
    nvrtcGetProgramLogSize(prog, &logn);
    char *log = calloc(logn + 1, 1);
    nvrtcGetProgramLog(prog, log);
    size_t cubin = 0;
    if (r == NVRTC_SUCCESS)
        nvrtcGetCUBINSize(prog, &cubin);
    int bad = r != NVRTC_SUCCESS || strstr(log, "warning") != NULL || cubin == 0;
    if (bad)
        fprintf(stderr, "FAIL %s %s: %s\n%s\n", name, arch, nvrtcGetErrorString(r), log);
    else
        printf("ok   %s %s%s: cubin %zu bytes, %.2f s\n", name, arch, fast ? " (fast)" : "", cubin,
               secs);
    if (!bad && ptxas_log)
        write_log(ptxas_log, arch, log);
    free(log);
    nvrtcDestroyProgram(&prog);
    return bad;
}

int main(int argc, char **argv)
{
    char inc[4096] = "";
    const char *ptxas_log = NULL;
    int fast = 0, threads = 2;
    for (; argc > 1 && argv[1][0] == '-'; argv++, argc--) {
        if (!strcmp(argv[1], "-I") && argc > 2) {
            snprintf(inc, sizeof inc, "--include-path=%s", argv[2]);
            argv++, argc--;
        } else if (!strcmp(argv[1], "--ptxas-log") && argc > 2) {
            ptxas_log = argv[2];
            argv++, argc--;
        } else if (!strcmp(argv[1], "--threads") && argc > 2 && atoi(argv[2]) >= 1) {
            threads = atoi(argv[2]);
            argv++, argc--;
        } else if (!strcmp(argv[1], "--fast")) {
            fast = 1;
        } else {
            break;
        }
    }
    if (argc < 3) {
        fprintf(stderr, "usage: nvrtc_check [-I DIR] [--fast] [--threads N] [--ptxas-log PREFIX] FILE.cu "
                        "ARCH...\n");
        return 2;
    }
    /* the options after --gpu-architecture, --std and -default-device */
    const char *extra[4];
    int n_extra = 0;
    char split[32];
    snprintf(split, sizeof split, "-split-compile=%d", threads);
    extra[n_extra++] = split;
    if (*inc)
        extra[n_extra++] = inc;
    if (ptxas_log)
        extra[n_extra++] = "--ptxas-options=-v";
    if (fast)
        extra[n_extra++] = "-Ofc=max";
    char *src = slurp(argv[1]);
    int bad = 0;
    for (int a = 2; a < argc; a++)
        bad |= compile(src, argv[1], argv[a], extra, n_extra, fast, ptxas_log);
    free(src);
    return bad;
}
