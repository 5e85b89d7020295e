/* nvrtc_check [-I DIR] FILE.cu ARCH...: compiles a generated CUDA file with NVRTC to a
 * cubin for each architecture (sm_80, sm_90, ...), as trainc's CUDA path will at build
 * time; -I: where its #include "x.cuh" lines are found (templates/cuda). Fails on a
 * compile error and on any warning; needs no GPU. */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    char inc[4096] = "";
    if (argc > 2 && !strcmp(argv[1], "-I")) {
        snprintf(inc, sizeof inc, "--include-path=%s", argv[2]);
        argv += 2;
        argc -= 2;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: nvrtc_check [-I DIR] FILE.cu ARCH...\n");
        return 2;
    }
    char *src = slurp(argv[1]);
    int bad = 0;
    for (int a = 2; a < argc; a++) {
        nvrtcProgram prog;
        if (nvrtcCreateProgram(&prog, src, argv[1], 0, NULL, NULL) != NVRTC_SUCCESS) {
            fprintf(stderr, "nvrtcCreateProgram failed\n");
            return 1;
        }
        char arch[64];
        snprintf(arch, sizeof arch, "--gpu-architecture=%s", argv[a]);
        const char *opts[] = {arch, "--std=c++17", "-default-device", inc};
        nvrtcResult r = nvrtcCompileProgram(prog, *inc ? 4 : 3, opts);
        size_t logn = 0;
        nvrtcGetProgramLogSize(prog, &logn);
        char *log = calloc(logn + 1, 1);
        nvrtcGetProgramLog(prog, log);
        size_t cubin = 0;
        if (r == NVRTC_SUCCESS)
            nvrtcGetCUBINSize(prog, &cubin);
        int warn = strstr(log, "warning") != NULL;
        if (r != NVRTC_SUCCESS || warn || cubin == 0) {
            fprintf(stderr, "FAIL %s %s: %s\n%s\n", argv[1], argv[a], nvrtcGetErrorString(r), log);
            bad = 1;
        } else {
            printf("ok   %s %s: cubin %zu bytes\n", argv[1], argv[a], cubin);
        }
        free(log);
        nvrtcDestroyProgram(&prog);
    }
    free(src);
    return bad;
}
