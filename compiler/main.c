/* main.c: trainc's entry: the arguments normalized (--dump-after taken out, --NAME=VALUE
 * split), then the command dispatched (cmd.h: one file each; the compile itself is
 * driver.c's compile_spec). */
#include <stdlib.h>
#include <string.h>
#include "cmd.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
} commands[] = {{"check", cmd_check}, {"emit", cmd_emit}, {"build", cmd_build}, {"run", cmd_run},
                {"plan", cmd_plan},   {"data", cmd_data}, {"import", cmd_import},
                {"export", cmd_export}};
#define N_COMMANDS (sizeof commands / sizeof *commands)

/* argv without --dump-after=PASS (or --dump-after PASS), which any command that compiles
 * takes and which is applied here, so that the commands and a trainer's options never
 * see it; and with --NAME=VALUE as --NAME VALUE for the options that take a value (the
 * trainer's own parse_opts does the same for a built trainer). */
static char **normal_args(int *argc, char **argv)
{
    static const char *const value_opts[] = {"--device", "--arch", "--bundle", "--ranks",
                                             "--chunk-kb", "--from", "--val-frac",
                                             "--shard-tokens", "--seq-len", "--weights", "--tokenizer", NULL};
    char **args = xcalloc((size_t)2 * *argc + 1, sizeof *args);
    int n = 0;
    args[n++] = argv[0];
    for (int i = 1; i < *argc; i++) {
        const char *eq = strchr(argv[i], '=');
        size_t len = eq ? (size_t)(eq - argv[i]) : 0;
        int split = 0;
        for (int k = 0; eq && !strncmp(argv[i], "--", 2) && value_opts[k]; k++)
            split |= strlen(value_opts[k]) == len && !strncmp(argv[i], value_opts[k], len);
        for (int k = 0; eq && !strncmp(argv[i], "--", 2) && rt_trainer_value_options[k]; k++)
            split |= strlen(rt_trainer_value_options[k]) == len &&
                     !strncmp(argv[i], rt_trainer_value_options[k], len);
        if (!strncmp(argv[i], "--dump-after=", 13))
            set_dump_after(argv[i] + 13);
        else if (!strcmp(argv[i], "--dump-after")) {
            if (i + 1 >= *argc)
                error_input("--dump-after needs a pass name");
            set_dump_after(argv[++i]);
        } else if (split) {
            args[n++] = xasprintf("%.*s", (int)len, argv[i]);
            args[n++] = (char *)eq + 1;
        } else
            args[n++] = argv[i];
    }
    *argc = n;
    return args;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("trainc %s\n", TRAINC_VERSION);
        rt_blas_setup();
        printf("CPU GEMMs: OpenBLAS %s\n", rt_blas_core());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
        return cmd_help(argc - 1, argv + 1);
    argv = normal_args(&argc, argv);
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cmd, commands[i].name)) {
            /* trainc COMMAND --help: as trainc help COMMAND (data has its own) */
            if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) &&
                strcmp(cmd, "data"))
                return cmd_help(2, (char *[]){"help", (char *)cmd, NULL});
            return commands[i].fn(argc - 1, argv + 1);
        }
    const char *names[N_COMMANDS + 2] = {0};
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    names[N_COMMANDS] = "help";
    const char *near = rt_closest(cmd, names);
    error_input("unknown command '%s'%s%s%s", cmd, near ? "; did you mean '" : "", near ? near : "",
                near ? "'?" : "");
}
