/* fuzz_safetensors.c: runtime/safetensors.c's reader (rt_safetensors_read) against a
 * small model of three parameters, on any bytes. */
#include "fuzz.h"
#include "rt.h"

static const rt_param params[] = {
    {.name = "0.weight", .rank = 2, .shape = {4, 3}, .numel = 12, .offset = 0},
    {.name = "0.bias", .rank = 1, .shape = {4}, .numel = 4, .offset = 12},
    {.name = "h.0.attn.qkv.weight", .rank = 3, .shape = {2, 2, 2}, .numel = 8, .offset = 16},
};
static const rt_model model = {.abi = RT_ABI_VERSION, .name = "fuzz", .n_params = 3,
                               .params = params, .param_floats = 24, .n_trainable = 3,
                               .trainable_floats = 24};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".safetensors");
    static float w[24];
    FUZZ_RUN(rt_safetensors_read(path, &model, w, NULL));
    return 0;
}
