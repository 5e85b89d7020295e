/* fuzz_spec.c: `trainc check FILE` on any bytes: the JSON parser (cJSON), the spec
 * loader and validator, and the compiler passes check runs (graph, autodiff, lowering,
 * fusion, recomputation, memory plan). compiler/main.c is linked in with its main
 * renamed (see the Makefile's fuzz target). */
#include "fuzz.h"

int trainc_main(int argc, char **argv);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".json");
    char *argv[] = {"trainc", "check", (char *)path, NULL};
    FUZZ_RUN(trainc_main(3, argv));
    return 0;
}
