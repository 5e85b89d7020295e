/* fuzz_ckpt.c: a checkpoint's state.json as `--resume` reads it (rt_ckpt_load in
 * runtime/ckpt.c: rt_ckpt_verify's list of files, the JSON, the model hash, the rank count, the training config's
 * lines, the loop state and its ranges), on any bytes. The checkpoint folder around
 * it is real: written once by rt_ckpt_save for a small model (weights and AdamW's
 * state), so an input that gets past state.json goes on to read them. */
#include "fuzz.h"
#include <sys/stat.h>
#include "rt_loop.h"

static const rt_param params[] = {
    {.name = "0.weight", .rank = 2, .shape = {4, 3}, .numel = 12, .offset = 0},
    {.name = "0.bias", .rank = 1, .shape = {4}, .numel = 4, .offset = 12},
};
static const rt_model model = {.abi = RT_ABI_VERSION, .name = "fuzz", .model_hash = "0123456789abcdef",
                               .n_params = 2, .params = params, .param_floats = 16,
                               .n_trainable = 2, .trainable_floats = 16};
static rt_train_config cfg;
static char **lines;
static int nlines;
static char ckpt[256];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    rt_config_defaults(&cfg);
    lines = rt_config_dump(&cfg, &nlines);
    char out[200];
    snprintf(out, sizeof out, "/tmp/trainc-fuzz-ckpt-%d", (int)getpid());
    mkdir(out, 0777);
    rt_loop_state s = {.step = 10, .epoch = 1, .batch = 3, .updates = 10, .last_val_step = -1,
                       .best_step = -1, .loss_scale = 1.0};
    static float w[16], st[32];
    rt_state_part part = {.lo = 0, .hi = 16};
    if (rt_ckpt_save(out, &model, &cfg, &s, w, NULL, st, part, lines, nlines, lines, nlines) != 0) {
        perror(out);
        abort();
    }
    snprintf(ckpt, sizeof ckpt, "%s/checkpoints/step_00000010", out);
    /* FUZZ_CKPT_SEED=FILE: also copy the good state.json there (the corpus's seed) */
    const char *seed = getenv("FUZZ_CKPT_SEED");
    if (seed) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "cp '%s/state.json' '%s'", ckpt, seed);
        if (system(cmd) != 0)
            abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[300];
    snprintf(path, sizeof path, "%s/state.json", ckpt);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) {
        perror(path);
        abort();
    }
    static rt_loop_state s;
    static float w[16], st[32];
    rt_state_part part = {.lo = 0, .hi = 16};
    /* what --resume does first: the files state.json lists, checked by size and hash
     * (only names inside the folder are ever opened) */
    char why[1024];
    int best_bad;
    (void)rt_ckpt_verify(ckpt, why, sizeof why, &best_bad);
    FUZZ_RUN(rt_ckpt_load(ckpt, &model, &cfg, &s, w, NULL, st, part, lines, nlines));
    return 0;
}
