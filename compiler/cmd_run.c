/* cmd_run.c: trainc run: the spec compiled in memory (libtcc, jit.c) and trained at
 * once, the trainer's options passed on. */
#include <stdlib.h>
#include <string.h>
#include "cmd.h"

int cmd_run(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "run");
    /* a signal while compiling is kept for the trainer: it stops after its first step
     * with a checkpoint (exit 130), as one sent a moment later would */
    int eval = 0;
    for (int i = 1 + n; i < argc; i++)
        eval |= !strcmp(argv[i], "--eval");
    if (!eval)
        rt_catch_signals();
    Spec *s = spec_load(n, argv + 1);
    /* the recomputation plan, the precision and the frozen parameters are compiled:
     * those --set keys shape the program (auto's choice depends on the batch size too,
     * on the device: a CPU run has no GPU workspace to count, and on the ranks ZeRO
     * shards over) */
    int sets = 0;
    for (int i = 1 + n; i < argc; i++) {   /* --set K=V or --set=K=V; --device D or --device=D */
        const char *kv = !strcmp(argv[i], "--set") && i + 1 < argc ? argv[i + 1]
                         : !strncmp(argv[i], "--set=", 6) ? argv[i] + 6 : NULL;
        const char *dev = !strcmp(argv[i], "--device") && i + 1 < argc ? argv[i + 1]
                          : !strncmp(argv[i], "--device=", 9) ? argv[i] + 9 : NULL;
        if (kv && (!strncmp(kv, "recompute=", 10) || !strncmp(kv, "memory_budget_mb=", 17) ||
                   !strncmp(kv, "batch_size=", 11) || !strncmp(kv, "precision=", 10) ||
                   !strncmp(kv, "device=", 7) || !strncmp(kv, "distributed.strategy=", 21) ||
                   !strncmp(kv, "distributed.ranks=", 18) || !strncmp(kv, "freeze=", 7) ||
                   !strncmp(kv, "lora=", 5) || !strncmp(kv, "lora.", 5))) {
            spec_set(s, kv);
            sets++;
        } else if (dev && (!strcmp(dev, "cpu") || !strcmp(dev, "cuda"))) {
            spec_set(s, xasprintf("device=%s", dev));
            sets++;
        }
    }
    if (sets)
        spec_sets_done(s);
    /* --set is applied by the runtime (as in a built trainer); check it here too so a
     * bad key fails before compiling */
    rt_train_config probe = s->train;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 1 + n; i + 1 < argc; i++)
            if (!strcmp(argv[i], "--set") && rt_config_set_pass(argv[i + 1]) == pass) {
                char err[512];
                if (rt_config_set_arg(&probe, argv[++i], err, sizeof err) != 0)
                    error_input("%s", err);
            }
    Compiled *c = compile_spec(s);
    int targc = argc - n;
    char **targv = xcalloc((size_t)targc + 1, sizeof *targv);
    targv[0] = "trainc run";
    for (int i = 1 + n, k = 1; i < argc; i++, k++)
        targv[k] = argv[i];
    return jit_run(c, trainc_home_include(), targc, targv);
}
