/* cmd_common.c: what the commands share: their spec arguments (SPEC... and --set),
 * option values, the answer to an option a command does not take, an output that
 * cannot be written, and where the runtime lives (for build and run). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cmd.h"

/* ---- arguments ------------------------------------------------------------------ */

/* SPEC... at argv[i..]: one or two files, the arguments before the first option
 * (any name: a spec need not end in .json). Returns how many. */
int spec_args(int argc, char **argv, int i, const char *cmd)
{
    int n = 0;
    while (i + n < argc && n < 2 && argv[i + n][0] != '-' && argv[i + n][0])
        n++;
    if (n == 0)
        error_input("%s: expected a spec file%s%s", cmd, i < argc ? ", got " : "",
                    i < argc ? argv[i] : "");
    return n;
}

Spec *load_with_sets(int argc, char **argv, int at, int n, int allow_sets)
{
    Spec *s = spec_load(n, argv + at);
    int sets = 0;
    /* the type keys first (they reset their group's other keys): any order works */
    for (int pass = 0; pass < 2 && allow_sets; pass++)
        for (int i = at + n; i + 1 < argc; i++)
            if (!strcmp(argv[i], "--set") && rt_config_set_pass(argv[i + 1]) == pass) {
                spec_set(s, argv[++i]);
                sets++;
            }
    if (sets)
        spec_sets_done(s);
    return s;
}

/* An option's value: the next argument, which must not be an option itself (-o --device
 * cpu, --set -o x: a value was left out), as a trainer's options take theirs. */
const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    if (*i + 1 >= argc)
        error_input("%s needs a value", name);
    const char *v = argv[*i + 1];
    if (!strncmp(v, "--", 2) || !strcmp(v, "-o") || !strcmp(v, "-h"))
        error_input("%s needs a value, got the option %s", name, v);
    if (!v[0])                  /* --bundle= */
        error_input("%s needs a value, got an empty one", name);
    return argv[++*i];
}

/* Each compiling command's options (--dump-after and --help: main takes them first). */
static const struct {
    const char *cmd;
    const char *const opts[10];
} command_opts[] = {
    {"check", {"--set", "--dump-after", "--help", NULL}},
    {"emit", {"-o", "--out", "--set", "--dump-after", "--help", NULL}},
    {"build", {"-o", "--out", "--device", "--arch", "--bundle", "--set", "--dump-after", "--help",
               NULL}},
    {"plan", {"--json", "--ranks", "--chunk-kb", "--set", "--dump-after", "--help", NULL}},
};

/* An argument cmd does not take: an option with the closest of its own ("did you mean"),
 * or the command that has it; an argument that is no option (a third spec file). */
_Noreturn void unknown_arg(const char *cmd, const char *arg)
{
    if (arg[0] != '-' || !arg[1])
        error_input("%s: unexpected argument '%s' (SPEC... is one or two files, before the "
                    "options)", cmd, arg);
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);   /* --devic=cpu */
    const char *near = NULL, *other = NULL;
    for (size_t k = 0; k < sizeof command_opts / sizeof *command_opts; k++)
        if (!strcmp(command_opts[k].cmd, cmd))
            near = rt_closest(name, command_opts[k].opts);
    /* else another command's: the same word, or one close to it (emit --jsn: plan's --json) */
    const char *theirs = NULL;
    for (int exact = 1; exact >= 0 && !near && !other; exact--)
        for (size_t k = 0; k < sizeof command_opts / sizeof *command_opts && !other; k++) {
            theirs = exact ? NULL : rt_closest(name, command_opts[k].opts);
            for (int j = 0; exact && command_opts[k].opts[j]; j++)
                if (!strcmp(command_opts[k].opts[j], name))
                    theirs = command_opts[k].opts[j];
            if (theirs && strcmp(command_opts[k].cmd, cmd))
                other = command_opts[k].cmd;
        }
    if (near)
        error_input("%s: unknown option '%s'; did you mean '%s'?", cmd, arg, near);
    if (other)
        error_input("%s: unknown option '%s' ('%s' is an option of trainc %s)", cmd, arg, theirs,
                    other);
    error_input("%s: unknown option '%s' (trainc help %s lists its options)", cmd, arg, cmd);
}

/* An output path the user named that cannot be written there is bad input (exit 1:
 * no such folder, a file where a folder belongs, no permission); any other failure
 * to write is a run-time one (exit 2: a full disk). */
_Noreturn void cannot_write(const char *cmd, const char *path)
{
    int e = errno;
    if (e == ENOTDIR || e == EISDIR || e == ENOENT || e == EACCES || e == EPERM ||
        e == EROFS || e == EEXIST || e == ENAMETOOLONG)
        error_input("%s: cannot write %s: %s", cmd, path, strerror(e));
    rt_fail("%s: cannot write %s: %s", cmd, path, strerror(e));
}

/* ---- where the runtime lives ------------------------------------------------ */

static char home_inc[PATH_MAX + 64], home_lib[PATH_MAX + 64];

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Installed: PREFIX/bin/trainc with PREFIX/lib/trainc/{librt.a,include/}.
 * Build tree: build/trainc with build/librt.a and runtime/trainc_rt.h (or
 * build/VARIANT/trainc with build/VARIANT/librt.a). */
static void find_home(void)
{
    if (home_inc[0])
        return;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        die("cannot read /proc/self/exe");
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    *slash = 0;
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/../lib/trainc/include/trainc_rt.h", exe);
    if (exists(p)) {
        snprintf(home_inc, sizeof home_inc, "%s/../lib/trainc/include", exe);
        snprintf(home_lib, sizeof home_lib, "%s/../lib/trainc", exe);
        return;
    }
    /* build/trainc, or a variant's build/VARIANT/trainc (make B=build/asan) */
    static const char *const ups[] = {"/..", "/../.."};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s%s/runtime/trainc_rt.h", exe, ups[i]);
        if (exists(p)) {
            snprintf(home_inc, sizeof home_inc, "%s%s/runtime", exe, ups[i]);
            snprintf(home_lib, sizeof home_lib, "%s", exe);
            return;
        }
    }
    error_input("cannot find trainc's runtime next to %s (expected ../lib/trainc/); reinstall with make install",
                exe);
}

const char *trainc_home_include(void)
{
    find_home();
    return home_inc;
}

const char *trainc_home_lib(void)
{
    find_home();
    return home_lib;
}
