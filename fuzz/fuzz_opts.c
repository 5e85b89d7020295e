/* fuzz_opts.c: a trainer's command line (rt_main in runtime/loop.c: the options, every
 * --set through the training config's parser and validator, the device choice, the
 * data paths), on any bytes: one argument a line. The trainer is the real generated
 * MLP (generated/mlp_fashion), with its data folder pointed at a path that does not
 * exist, so an input whose options all pass stops at opening the training data (exit
 * 1) instead of training; an input can only get further by naming real data files
 * with --set, which the fuzzer has no way to know. */
#include "fuzz.h"
#define TRAINC_JIT                                         /* no main() */
#define TRAINC_DATA_DIR "/nonexistent/trainc-fuzz-data"
#include "../generated/mlp_fashion/host.c"
#include "../generated/mlp_fashion/kernels_cpu.c"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[65536 + 1];
    static char *argv[MAX_ARGS + 2];
    if (size > sizeof buf - 1)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 0;
    argv[argc++] = "trainer";
    for (char *p = buf; argc <= MAX_ARGS;) {
        char *nl = strchr(p, '\n');
        argv[argc++] = p;
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    argv[argc] = NULL;
    FUZZ_RUN(rt_main(&trainc_model, argc, argv));
    return 0;
}
