/* main.c: the trainc driver. The compile pipeline reads as its list of passes:
 *
 *   spec_load -> graph_build -> autodiff -> lower -> fuse -> memplan -> emit_c
 *
 * then `emit` writes the sources, `build` hands them to the system C compiler,
 * and `run` to libtcc in this process. */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ir.h"

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

/* ---- argument helpers -------------------------------------------------------- */

/* SPEC... at argv[i..]: one or two files, the arguments before the first option
 * (any name: a spec need not end in .json). Returns how many. */
static int spec_args(int argc, char **argv, int i, const char *cmd)
{
    int n = 0;
    while (i + n < argc && n < 2 && argv[i + n][0] != '-' && argv[i + n][0])
        n++;
    if (n == 0)
        error_input("%s: expected a spec file%s%s", cmd, i < argc ? ", got " : "",
                    i < argc ? argv[i] : "");
    return n;
}

static void usage(FILE *f)
{
    fputs("usage: trainc COMMAND [ARGS]\n\n"
          "  check SPEC...                   validate; print layers, parameters, FLOPs, memory\n"
          "  emit SPEC... -o DIR             write the generated sources and plan.json\n"
          "  build SPEC... -o FILE [--device cpu|cuda|both] [--arch LIST] [--bundle DIR] [--set K=V]\n"
          "                                  compile a standalone trainer (with --bundle, -o may\n"
          "                                  be left out: DIR/NAME, NAME the spec's)\n"
          "  run SPEC... [trainer options]   compile in memory (libtcc) and train now\n"
          "  plan SPEC... [--json] [--ranks N [--chunk-kb K]]\n"
          "                                  the static memory plan\n"
          "  data fashion-mnist DIR [--from SRC]\n"
          "                                  convert Debian's Fashion-MNIST to .npy\n"
          "  data text FILE DIR [--val-frac F] [--shard-tokens N]\n"
          "                                  byte-level token shards of any text file\n"
          "  help [COMMAND], --version\n\n"
          "SPEC... is one file with \"model\" and \"train\", or the model file then the train file.\n"
          "`trainc help COMMAND` says more; `trainc help run` lists the trainer options.\n",
          f);
}

/* trainc help COMMAND */
static const struct {
    const char *name, *text;
    int trainer_options;       /* followed by the trainer's options (rt_trainer_options) */
} command_help[] = {
    {"check", "trainc check SPEC... [--set KEY=VALUE]...\n\n"
              "Parses and validates the spec (every error names its file and JSON path), builds the\n"
              "training program and prints the layers, the parameter count, FLOPs per sample, and\n"
              "the activation, arena and parameter bytes. Exit 0, or 1 with the errors.\n", 0},
    {"emit", "trainc emit SPEC... -o DIR [--set KEY=VALUE]...\n\n"
             "Writes the generated sources to DIR: model.h (the memory plan), host.c (the program),\n"
             "kernels_cpu.c, kernels_cuda.cu (its templates #included from templates/cuda/) and\n"
             "plan.json. The same input gives the same bytes. -o DIR is also --out DIR.\n", 0},
    {"build", "trainc build SPEC... -o FILE [--device cpu|cuda|both] [--arch sm_80,sm_90,...]\n"
              "             [--bundle DIR] [--set KEY=VALUE]...\n\n"
              "Compiles a standalone trainer: the host code with $CC (plus $TRAINC_CFLAGS), the CUDA\n"
              "kernels with NVRTC into a cubin per --arch (default sm_80,sm_86,sm_89,sm_90) and PTX.\n"
              "--device: cpu (the default; both when --arch is given), cuda, or both (the trainer\n"
              "picks at start). --bundle DIR puts the trainer and the libraries it needs in DIR\n"
              "(rpath $ORIGIN/lib), to run where only the NVIDIA driver is installed; the trainer is\n"
              "DIR/NAME, NAME the file name of -o or, without -o, the spec's name. The recomputation\n"
              "policy and the precision given by --set are compiled in; other --set values become\n"
              "the trainer's defaults. -o FILE is also --out FILE.\n", 0},
    {"run", "trainc run SPEC... [trainer options]\n\n"
            "Compiles the trainer in memory (libtcc; the CUDA kernels with NVRTC for the GPU it\n"
            "finds, through the kernel cache) and trains at once. Trainer options, the same for a\n"
            "built trainer:\n", 1},
    {"plan", "trainc plan SPEC... [--json] [--ranks N [--chunk-kb K]] [--set KEY=VALUE]...\n\n"
             "The static memory plan and the recomputation plan: every buffer's size, offset and\n"
             "live range, the arena against the no-reuse sum and the lower bound, the FLOPs that\n"
             "recomputation adds, the replayed instructions and the bytes they write, the GPU's\n"
             "workspace and the total memory_budget_mb counts (no workspace with device cpu);\n"
             "--ranks N: per-rank bytes and traffic under ddp, zero1, zero2,\n"
             "and the most gradient memory zero2 backs at once (4 KB pages on CPUs, K KB chunks on\n"
             "GPUs: the driver's granularity, default 2048). --json gives the plan as data\n"
             "(plan.json's, with \"ranks\" added for --ranks N).\n", 0},
    {"data", "trainc data fashion-mnist DIR [--from SRC]\n"
             "trainc data text FILE DIR [--val-frac F] [--shard-tokens N]\n\n"
             "fashion-mnist: Debian's dataset-fashion-mnist (or the IDX files in SRC) as\n"
             "DIR/{train,test}_{x,y}.npy. text: the bytes of FILE as token shards (llm.c's format,\n"
             "vocabulary 256), DIR/train_000000.bin and DIR/val_000000.bin (the last F of the bytes,\n"
             "0 to 0.5, default 0.1); --shard-tokens N: at most N tokens a shard (train_000001.bin,\n"
             "...; default: as many as one shard's header can count).\n", 0},
    {"help", "trainc help [COMMAND]\n\nThe commands, or one command's usage.\n", 0},
};

static void human(char *buf, size_t n, double bytes)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (bytes >= 1024 && k < 4) {
        bytes /= 1024;
        k++;
    }
    snprintf(buf, n, k ? "%.1f %s" : "%.0f %s", bytes, u[k]);
}

/* ---- commands ------------------------------------------------------------------ */

static Spec *load_with_sets(int argc, char **argv, int at, int n, int allow_sets)
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

/* The words of s (split at spaces and tabs) appended to args[*na ..], up to args[max - 1]. */
static void add_words(char **args, int *na, int max, const char *s)
{
    char *copy = s ? xstrdup(s) : NULL;
    for (char *w = copy ? strtok(copy, " \t") : NULL; w && *na < max; w = strtok(NULL, " \t"))
        args[(*na)++] = w;
}

/* check's data lines: each file of data.train and data.val, where it resolves (relative
 * to the training spec's folder) and whether it is there. A missing file is a note, not
 * an error: a trainer may be built before its data exists or run where the data lives;
 * its run says what is wrong with a file (section 5's formats). */
static void check_data(const Spec *s, const char *what, const rt_data_entry *e, int n, int *first)
{
    for (int i = 0; i < n; i++) {
        char *p = e[i].path[0] == '/' ? xstrdup(e[i].path) : xasprintf("%s/%s", s->data_dir, e[i].path);
        char key[96], size[32];
        snprintf(key, sizeof key, "%s.%s", what, e[i].key);
        printf("  %-12s %-13s %s: ", *first ? "data" : "", key, e[i].path);
        *first = 0;
        /* a glob for token shards; x/y paths are plain names */
        glob_t g = {0};
        char *one[] = {p, NULL};
        int rc = -1;
        struct stat st;
        if (!strcmp(e[i].key, "tokens")) {
            rc = glob(p, 0, NULL, &g);
            size_t k = 0;   /* regular files only: the run refuses a folder */
            for (size_t j = 0; rc == 0 && j < g.gl_pathc; j++)
                if (stat(g.gl_pathv[j], &st) == 0 && S_ISREG(st.st_mode))
                    g.gl_pathv[k++] = g.gl_pathv[j];
            if (rc == 0)
                g.gl_pathc = k;
        }
        else if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            g.gl_pathc = 1, g.gl_pathv = one;
        if (g.gl_pathc == 0) {
            printf("not found (%s; the run needs it)\n", p);
        } else {
            double bytes = 0;
            for (size_t k = 0; k < g.gl_pathc; k++)
                if (stat(g.gl_pathv[k], &st) == 0)
                    bytes += (double)st.st_size;
            human(size, sizeof size, bytes);
            if (g.gl_pathc == 1)
                printf("%s\n", size);
            else
                printf("%zu files, %s\n", g.gl_pathc, size);
        }
        if (rc == 0)
            globfree(&g);
        free(p);
    }
}

/* An option's value: the next argument, which must not be an option itself (-o --device
 * cpu, --set -o x: a value was left out), as a trainer's options take theirs. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
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
static _Noreturn void unknown_arg(const char *cmd, const char *arg)
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

static int cmd_check(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "check");
    for (int i = 1 + n; i < argc; i++) {
        if (!strcmp(argv[i], "--set"))
            opt_value(argc, argv, &i, "--set");
        else
            unknown_arg("check", argv[i]);
    }
    Spec *s = load_with_sets(argc, argv, 1, n, 1);
    Compiled *c = compile_spec(s);
    Graph *g = c->graph;
    int64_t np = 0;
    for (int i = 0; i < g->n_params; i++)
        np += g->params[i]->numel;
    int64_t B = s->train.batch_size;
    char a[32], b[32], pb[32];
    human(a, sizeof a, (double)(B * c->prog->arena_row_bytes));
    human(b, sizeof b, (double)(B * c->prog->noreuse_row_bytes));
    human(pb, sizeof pb, (double)(np * 4));
    printf("%s: ok\n", s->model_file);
    printf("  model        %s\n", s->name);
    printf("  layers       %d\n", g->n_layers_total);
    printf("  parameters   %lld (%s fp32)\n", (long long)np, pb);
    printf("  FLOPs/sample %lld forward, %lld forward+backward\n", (long long)g->flops_fwd,
           (long long)(g->flops_fwd + g->flops_bwd));
    if (s->train.n_train > 0 && !strcmp(s->train.train[0].key, "tokens") && s->inputs[0].rank == 1) {
        int64_t T = s->inputs[0].shape[0];
        printf("  FLOPs/token  %lld forward, %lld forward+backward (T = %lld)\n",
               (long long)(g->flops_fwd / T), (long long)((g->flops_fwd + g->flops_bwd) / T),
               (long long)T);
    }
    printf("  activations  %lld bytes per sample (arena, with reuse)\n",
           (long long)c->prog->arena_row_bytes);
    printf("  arena        %lld bytes at batch %lld (%s; %s without reuse)\n",
           (long long)(B * c->prog->arena_row_bytes), (long long)B, a, b);
    printf("  validation   %lld bytes at batch %lld (forward only, its own plan)\n",
           (long long)(B * c->eval->arena_row_bytes), (long long)B);
    printf("  kernels      %d fused loops, %d instructions\n", c->prog->n_kernels, c->prog->n_ins);
    int first = 1;
    check_data(s, "train", s->train.train, s->train.n_train, &first);
    check_data(s, "val", s->train.val, s->train.n_val, &first);
    return 0;
}

/* An output path the user named that cannot be written there is bad input (exit 1:
 * no such folder, a file where a folder belongs, no permission); any other failure
 * to write is a run-time one (exit 2: a full disk). */
static _Noreturn void cannot_write(const char *cmd, const char *path)
{
    int e = errno;
    if (e == ENOTDIR || e == EISDIR || e == ENOENT || e == EACCES || e == EPERM ||
        e == EROFS || e == EEXIST || e == ENAMETOOLONG)
        error_input("%s: cannot write %s: %s", cmd, path, strerror(e));
    rt_fail("%s: cannot write %s: %s", cmd, path, strerror(e));
}

/* build -o FILE: checked before compiling, so a wrong path fails at once and clearly
 * (the linker's own message would follow minutes of NVRTC otherwise). The folder must
 * take a new file: the executable is linked there under a temporary name (tried here). */
static void check_out_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        cannot_write("build", path);
    }
    /* the executable is renamed into place: never over a device, a FIFO or a socket
     * (-o /dev/null would replace the device node) */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        error_input("build: %s exists and is not a regular file; not replacing it", path);
    const char *slash = strrchr(path, '/');
    char *dir = slash ? xasprintf("%.*s", (int)(slash - path) + (slash == path), path)
                      : xstrdup(".");
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        error_input("build: cannot write %s: no folder %s", path, dir);
    char *probe = xasprintf("%s/.trainc-XXXXXX", dir);
    int fd = build_temp_file(probe);
    if (fd < 0) {
        int e = errno;
        if (e == ENOSPC || e == EDQUOT || e == EIO)
            rt_fail("build: cannot write %s: %s", path, strerror(e));
        error_input("build: cannot write %s: cannot create a file in %s: %s", path, dir,
                    strerror(e));
    }
    close(fd);
    unlink(probe);
    build_temp_done(probe);
    free(probe);
    free(dir);
}

static int cmd_emit(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "emit");
    const char *out = NULL;
    for (int i = 1 + n; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out"))
            out = opt_value(argc, argv, &i, argv[i]);
        else if (!strcmp(argv[i], "--set"))
            opt_value(argc, argv, &i, "--set");
        else
            unknown_arg("emit", argv[i]);
    }
    if (!out)
        error_input("emit: missing -o DIR");
    Spec *s = load_with_sets(argc, argv, 1, n, 1);
    Compiled *c = compile_spec(s);
    if (emit_write(&c->em, out) != 0)
        cannot_write("emit", out);
    return 0;
}

static int cmd_build(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "build");
    const char *out = NULL, *device = NULL, *arch = "sm_80,sm_86,sm_89,sm_90", *bundle = NULL;
    int arch_given = 0;
    for (int i = 1 + n; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out"))
            out = opt_value(argc, argv, &i, argv[i]);
        else if (!strcmp(argv[i], "--device"))
            device = opt_value(argc, argv, &i, "--device");
        else if (!strcmp(argv[i], "--arch")) {
            arch = opt_value(argc, argv, &i, "--arch");
            arch_given = 1;
        } else if (!strcmp(argv[i], "--bundle"))
            bundle = opt_value(argc, argv, &i, "--bundle");
        else if (!strcmp(argv[i], "--set"))
            opt_value(argc, argv, &i, "--set");
        else
            unknown_arg("build", argv[i]);
    }
    /* the options, then the spec, before anything is written */
    if (!out && !bundle)
        error_input("build: missing -o FILE (or --bundle DIR)");
    /* --arch alone asks for GPU code: both, so the trainer also runs where there is none */
    if (!device)
        device = arch_given ? "both" : "cpu";
    if (strcmp(device, "cpu") && strcmp(device, "cuda") && strcmp(device, "both"))
        error_input("build: --device must be cpu, cuda or both, got '%s'", device);
    int cuda = strcmp(device, "cpu") != 0;
    if (arch_given && !cuda)
        error_input("build: --arch picks the GPU architectures of --device cuda or both; this "
                    "build is --device cpu");
    if (cuda)
        arch = build_check_archs(arch);
    if (out && !bundle)
        check_out_file(out);
    Spec *s = load_with_sets(argc, argv, 1, n, 1);
    Compiled *c = compile_spec(s);
    if (cuda && c->prog->cuda_unsupported)
        error_input("build: --device %s: %s (not supported on the GPU yet); build with "
                    "--device cpu", device, c->prog->cuda_unsupported);
    /* --bundle DIR: the executable is DIR/NAME (NAME from -o, else the spec's name) */
    if (bundle) {
        const char *base = out ? strrchr(out, '/') : NULL;
        base = base ? base + 1 : out ? out : s->name;
        if (rt_mkdir_p(bundle) != 0)
            cannot_write("build", bundle);
        size_t bl = strlen(bundle);
        while (bl > 1 && bundle[bl - 1] == '/')
            bl--;
        out = xasprintf("%.*s/%s", (int)bl, bundle, base);
        check_out_file(out);
    }
    /* what is written from here on is removed on every way out (build.c) */
    const char *tmp = build_temp_dir();
    if (emit_write(&c->em, tmp) != 0)
        rt_fail("build: cannot write %s: %s", tmp, strerror(errno));
    char *abs = realpath(s->data_dir, NULL);
    Buf ddef_b = {0};   /* a C string literal: the folder's name may hold " or \ */
    buf_puts(&ddef_b, "-DTRAINC_DATA_DIR=");
    c_string(&ddef_b, abs ? abs : s->data_dir);
    char *ddef = ddef_b.s;
    char *inc = xasprintf("-I%s", trainc_home_include());
    char *lib = xasprintf("%s/librt.a", trainc_home_lib());
    char *host = xasprintf("%s/host.c", tmp), *kern = xasprintf("%s/kernels_cpu.c", tmp);
    /* linked in the temporary folder, then put beside OUT whole (build_install: a build
     * killed outright while the linker wrote there left the partial executable) */
    char *tmpout = xasprintf("%s/trainer", tmp);
    /* $CC split at spaces and tabs, without quoting: CC="ccache cc", CC="gcc -m64" */
    char *args[128] = {0};
    int na = 0;
    add_words(args, &na, 16, getenv("CC"));
    if (na == 0)
        args[na++] = "cc";
    char *const fixed[] = {"-std=gnu11", "-O2", "-ffp-contract=off", "-w", inc, ddef, host, kern};
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
        args[na++] = fixed[k];
    /* TRAINC_CFLAGS: more compiler flags (-march=native, sanitizers) */
    add_words(args, &na, 80, getenv("TRAINC_CFLAGS"));
    if (cuda) {
        double t = rt_now();
        args[na++] = build_cuda_image(c->em.kernels_cu.s, arch, tmp);
        args[na++] = !strcmp(device, "cuda") ? "-DTRAINC_DEVICES=RT_HAS_CUDA"
                                             : "-DTRAINC_DEVICES=(RT_HAS_CPU|RT_HAS_CUDA)";
        args[na++] = "-DTRAINC_CUDA_IMAGE=(&trainc_cuda_image)";
        fprintf(stderr, "trainc: compiled the CUDA kernels for %s (+ PTX) with NVRTC in %.1f s\n",
                arch, rt_now() - t);
    }
    if (bundle) {   /* DT_RPATH, not RUNPATH: it also serves the libraries' own needs */
        args[na++] = "-Wl,-rpath,$ORIGIN/lib";
        args[na++] = "-Wl,--disable-new-dtags";
    }
    args[na++] = lib;
    args[na++] = "-lcjson";
    args[na++] = "-lopenblas";
    args[na++] = "-lm";
    args[na++] = "-lpthread";
    args[na++] = "-ldl";
#ifndef TRAINC_LINK_EXTRA
#define TRAINC_LINK_EXTRA ""
#endif
    /* MPI's link flags, as the Makefile found them (mpicc --showme:link) */
    add_words(args, &na, 120, TRAINC_LINK_EXTRA);
    args[na++] = "-o";
    args[na++] = tmpout;
    args[na] = NULL;
    int rc = build_run(args, NULL, 0);
    if (rc < 0)
        rt_fail("build: cannot start the C compiler %s: %s (is one installed? set CC)", args[0],
                strerror(errno));
    if (rc != 0)
        rt_fail("build: the C compiler failed (exit %d; its messages are above): where it says "
                "a disk is full or a file cannot be written, free space (in %s and beside %s); "
                "else this is a trainc bug, please report it", rc,
                getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", out);
    struct stat st;
    if (stat(tmpout, &st) != 0 || build_install(tmpout, out, st.st_mode & 07777) != 0)
        cannot_write("build", out);
    build_temp_dir_remove();
    if (bundle)
        build_bundle(out, bundle, cuda);
    fprintf(stderr, "trainc: built %s (%s)%s\n", out, device, bundle ? ", with the libraries it needs in its lib/" : "");
    return 0;
}

static int cmd_run(int argc, char **argv)
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
    /* the recomputation plan and the precision are compiled: those --set keys shape
     * the program (auto's choice depends on the batch size too, and on the device: a
     * CPU run has no GPU workspace to count) */
    int sets = 0;
    for (int i = 1 + n; i < argc; i++) {   /* --set K=V or --set=K=V; --device D or --device=D */
        const char *kv = !strcmp(argv[i], "--set") && i + 1 < argc ? argv[i + 1]
                         : !strncmp(argv[i], "--set=", 6) ? argv[i] + 6 : NULL;
        const char *dev = !strcmp(argv[i], "--device") && i + 1 < argc ? argv[i + 1]
                          : !strncmp(argv[i], "--device=", 9) ? argv[i] + 9 : NULL;
        if (kv && (!strncmp(kv, "recompute=", 10) || !strncmp(kv, "memory_budget_mb=", 17) ||
                   !strncmp(kv, "batch_size=", 11) || !strncmp(kv, "precision=", 10) ||
                   !strncmp(kv, "device=", 7))) {
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

/* Per-rank memory of parameters, gradients and optimizer state under each strategy,
 * and what each rank sends per step (ring all-reduce / reduce-scatter + all-gather:
 * 2 (N-1)/N of the gradient bytes). As the trainer keeps them in any precision: fp32
 * parameters (the master weights), gradients (reduced in fp32) and optimizer state;
 * mixed precision adds the parameters' 16-bit copy on the GPU, said below the table
 * (ZeRO's paper counts 2-byte parameters and gradients instead: not what runs here).
 * np counts the parameter region's floats (param_floats, with the alignment gaps, as
 * the trainer allocates it) and a shard is rank 0's, the largest (rt_dist_shard), so
 * the figures are the bytes a trainer's start record reports. */
typedef struct RankPlan {
    int N, mixed, adam;
    int64_t np;                               /* the parameter region's floats */
    double param[3], grad[3], opt[3], sent;   /* ddp, zero1, zero2: bytes a rank */
    int sim;                                  /* ranks replayed for zero2's peaks */
    int64_t unit[2];                          /* CPU pages, GPU chunks */
    int64_t *peak[2];                         /* [sim] zero2's gradient bytes backed */
    int64_t whole[2];                         /* the whole region, in units */
} RankPlan;

static const char *const rank_strategies[] = {"ddp", "zero1", "zero2"};

static RankPlan rank_plan(const Spec *s, const Program *prog, int64_t np, int N, int64_t chunk)
{
    RankPlan r = {.N = N, .np = np, .mixed = s->train.precision != RT_PREC_FP32,
                  .adam = s->train.opt == RT_OPT_ADAMW};
    double shard = (double)((np + N - 1) / N);
    double pb = 4, gb = 4, ob = r.adam ? 8 : s->train.momentum > 0 ? 4 : 0;
    r.sent = 2.0 * (N - 1) / N * gb * (double)np;
    for (int k = 0; k < 3; k++) {
        r.param[k] = pb * (double)np;
        r.grad[k] = gb * (k == 2 ? shard : (double)np);
        r.opt[k] = ob * (k >= 1 ? shard : (double)np);
    }
    if (N < 2)
        return r;
    int64_t bucket = (int64_t)(s->train.bucket_mb * 1048576.0);
    r.sim = N <= 256 ? N : 256;   /* each rank replays the backward pass's hooks */
    r.unit[0] = 4096;
    r.unit[1] = chunk;
    for (int u = 0; u < 2; u++) {
        r.peak[u] = xcalloc((size_t)r.sim, sizeof(int64_t));
        for (int k = 0; k < r.sim; k++)
            r.peak[u][k] = zero2_peak_bytes(prog, bucket, k, N, r.unit[u]);
        r.whole[u] = (np * 4 + r.unit[u] - 1) / r.unit[u] * r.unit[u];
    }
    return r;
}

/* rank_plan's figures as a table, then zero2's gradient peaks rank by rank. */
static void plan_ranks(const Spec *s, const RankPlan *r, int64_t np)
{
    int N = r->N;
    printf("\n  per rank with %d ranks (%s, %s):\n", N, r->mixed ? "mixed precision" : "fp32",
           r->adam ? "AdamW" : "SGD");
    printf("  %-9s %14s %14s %14s %14s %16s\n", "strategy", "parameters", "gradients", "optimizer",
           "total", "sent/step");
    for (int k = 0; k < 3; k++) {
        double t = r->param[k] + r->grad[k] + r->opt[k];
        printf("  %-9s %14.0f %14.0f %14.0f %14.0f %16.0f   (%.2f bytes/param)\n",
               rank_strategies[k], r->param[k], r->grad[k], r->opt[k], t, r->sent,
               t / (double)np);
    }
    if (r->mixed)
        printf("  (mixed precision: the GPU also keeps the parameters' 16-bit copy, %.0f bytes a "
               "rank,\n   in the start record's device_pool_bytes; gradients are fp32 and sent "
               "so)\n", 2.0 * (double)np);
    printf("  (all three run on CPUs over MPI and on GPUs over NCCL: mpirun -np %d TRAINER --set "
           "distributed.strategy=zero2)\n", N);
    /* zero2's gradients beyond the shard: the buckets being written or reduced */
    if (N < 2)
        return;
    int each = N <= 8;              /* a column a rank, else the most and its rank */
    printf("\n  zero2's gradients backed at most during backward (fp32, as the trainer keeps them:\n"
           "  the shard, plus the buckets being written or reduced when no reduction ends before\n"
           "  the host must wait for it, at most 2 outstanding; distributed.bucket_mb %g%s):\n  %-20s",
           s->train.bucket_mb, r->sim < N ? "; of the first 256 ranks" : "", "");
    for (int k = 0; each && k < N; k++)
        printf(" %11s%-2d", "rank ", k);
    printf(each ? " %14s\n" : " %14s %6s %14s\n", each ? "whole region" : "most", "rank", "whole region");
    for (int u = 0; u < 2; u++) {
        char label[48];
        snprintf(label, sizeof label, u ? "GPU, %lld KB chunks" : "CPU, 4 KB pages",
                 (long long)(r->unit[1] >> 10));
        printf("  %-20s", label);
        int64_t best = 0;
        int at = 0;
        for (int k = 0; k < r->sim; k++) {
            if (each)
                printf(" %13lld", (long long)r->peak[u][k]);
            if (r->peak[u][k] > best) {
                best = r->peak[u][k];
                at = k;
            }
        }
        if (each)
            printf(" %14lld\n", (long long)r->whole[u]);
        else
            printf(" %14lld %6d %14lld\n", (long long)best, at, (long long)r->whole[u]);
    }
    if (s->train.accumulate > 1)
        printf("    (accumulate %lld: nothing is sent before a step's last micro-batch, so the\n"
               "     earlier ones keep the whole region backed)\n", (long long)s->train.accumulate);
}

/* The same as data: plan --json --ranks N adds "ranks" to plan.json's object. */
static void plan_ranks_json(const Spec *s, const RankPlan *r, const char *plan)
{
    const char *end = strrchr(plan, '}');
    if (!end)
        die("plan.json does not end an object");
    while (end > plan && (end[-1] == '\n' || end[-1] == ' '))
        end--;
    printf("%.*s,\n  \"ranks\": {\n    \"n\": %d,\n    \"precision\": \"%s\",\n"
           "    \"optimizer\": \"%s\",\n    \"param_copy16_bytes\": %.0f,\n", (int)(end - plan),
           plan, r->N, r->mixed ? "mixed" : "fp32", r->adam ? "adamw" : "sgd",
           r->mixed ? 2.0 * (double)r->np : 0.0);
    for (int k = 0; k < 3; k++)
        printf("    \"%s\": {\"param_bytes\": %.0f, \"grad_bytes\": %.0f, \"optimizer_bytes\": %.0f, "
               "\"total_bytes\": %.0f, \"sent_bytes_per_step\": %.0f},\n", rank_strategies[k],
               r->param[k], r->grad[k], r->opt[k], r->param[k] + r->grad[k] + r->opt[k], r->sent);
    printf("    \"zero2_grad_peak\": ");
    if (r->N < 2) {
        printf("null\n  }\n}\n");
        return;
    }
    printf("{\"bucket_mb\": %g, \"ranks_replayed\": %d", s->train.bucket_mb, r->sim);
    static const char *const kind[] = {"cpu", "gpu"};
    for (int u = 0; u < 2; u++) {
        printf(",\n      \"%s\": {\"unit_bytes\": %lld, \"whole_region_bytes\": %lld, \"per_rank_bytes\": [",
               kind[u], (long long)r->unit[u], (long long)r->whole[u]);
        for (int k = 0; k < r->sim; k++)
            printf("%s%lld", k ? ", " : "", (long long)r->peak[u][k]);
        printf("]}");
    }
    printf("}\n  }\n}\n");
}

static int cmd_plan(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "plan");
    int json = 0;
    long ranks = 0, chunk_kb = 2048;
    for (int i = 1 + n; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--chunk-kb")) {
            const char *v = opt_value(argc, argv, &i, "--chunk-kb");
            char *end;
            chunk_kb = strtol(v, &end, 10);
            if (*end || chunk_kb < 4 || chunk_kb > 1048576 || chunk_kb % 4)
                error_input("plan: --chunk-kb expects a multiple of 4 from 4 to 1048576, got '%s'", v);
        }
        else if (!strcmp(argv[i], "--ranks")) {
            const char *v = opt_value(argc, argv, &i, "--ranks");
            char *end;
            ranks = strtol(v, &end, 10);
            if (*end || ranks < 1 || ranks > 65536)
                error_input("plan: --ranks expects an integer from 1 to 65536, got '%s'", v);
        }
        else if (!strcmp(argv[i], "--set"))
            opt_value(argc, argv, &i, "--set");
        else
            unknown_arg("plan", argv[i]);
    }
    if (ranks == 0 && chunk_kb != 2048)
        error_input("plan: --chunk-kb sizes the GPU's chunks of --ranks' table; add --ranks N");
    Spec *s = load_with_sets(argc, argv, 1, n, 1);
    Compiled *c = compile_spec(s);
    RankPlan rp = {0};
    if (ranks > 0)
        rp = rank_plan(s, c->prog, c->graph->param_floats, (int)ranks, (int64_t)chunk_kb << 10);
    if (json) {
        if (ranks > 0)
            plan_ranks_json(s, &rp, c->em.plan_json.s);
        else
            fputs(c->em.plan_json.s, stdout);
        return 0;
    }
    Program *p = c->prog;
    Graph *g = c->graph;
    int64_t B = s->train.batch_size;
    printf("memory plan for %s at batch %lld\n\n", s->name, (long long)B);
    printf("  %-28s %-18s %12s %12s  %s\n", "buffer", "shape", "bytes", "offset", "live");
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if (!t->has_offset)
            continue;
        char sh[64] = "[B";
        for (int k = 0; k < t->rank; k++)
            snprintf(sh + strlen(sh), sizeof sh - strlen(sh), ", %lld", (long long)t->shape[k]);
        strcat(sh, "]");
        printf("  %-28s %-18s %12lld %12lld  %d..%d\n", t->name, sh, (long long)(B * t->row_bytes),
               (long long)(B * t->offset), t->first, t->last);
    }
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->has_offset && g->tensors[i]->ld)
            printf("  (%s: rows of %lld, stored %lld apart so that they are 16-byte aligned for "
                   "the GEMMs)\n", g->tensors[i]->name,
                   (long long)g->tensors[i]->shape[g->tensors[i]->rank - 1],
                   (long long)g->tensors[i]->ld);
    int64_t np = 0;
    for (int i = 0; i < g->n_params; i++)
        np += g->params[i]->numel;
    int64_t pb = g->param_floats * 4;   /* as allocated: each tensor padded to 16 floats */
    int64_t opt = s->train.opt == RT_OPT_ADAMW ? 2 * pb : (s->train.momentum > 0 ? pb : 0);
    printf("\n  arena                 %14lld bytes\n", (long long)(B * p->alloc_row_bytes));
    if (p->alloc_row_bytes > p->arena_row_bytes)
        printf("                          (validation's plan, %lld bytes at this batch, is the larger:\n"
               "                          the arena holds it; training's takes %lld)\n",
               (long long)(B * p->eval_row_bytes), (long long)(B * p->arena_row_bytes));
    printf("  no reuse              %14lld bytes (arena is %.1f%% of it)\n",
           (long long)(B * p->noreuse_row_bytes),
           p->noreuse_row_bytes ? 100.0 * (double)p->arena_row_bytes / (double)p->noreuse_row_bytes : 0.0);
    printf("  lower bound (peak live) %12lld bytes\n", (long long)(B * p->lower_bound_row_bytes));
    printf("  parameters            %14lld bytes (%lld floats, each tensor padded to 16)\n",
           (long long)pb, (long long)np);
    printf("  gradients             %14lld bytes\n", (long long)pb);
    printf("  optimizer state       %14lld bytes\n", (long long)opt);
    if (g->act16)
        printf("  %s parameter copy   %14lld bytes (%s-mixed: the arena above is the GPU's,\n"
               "                          %s activations; the CPU computes in fp32 and takes twice it)\n",
               half_name(g), (long long)(pb / 2), half_name(g), half_name(g));
    printf("  workspace (GPU)       %14lld bytes (input slots, loss statistics, scratch, the\n"
           "                          optimizer's chunk table, cuBLASLt's 32 MiB; none for\n"
           "                          device cpu)\n", (long long)p->workspace_bytes);
    printf("  total                 %14lld bytes (%.1f MiB: what memory_budget_mb counts)\n",
           (long long)p->total_bytes, (double)p->total_bytes / 1048576.0);
    static const char *pol[] = {"none", "selective", "full", "auto"};
    printf("  recompute             %14s (%s)\n", pol[c->prog->policy],
           s->train.recompute == RT_RECOMPUTE_AUTO ? "chosen by auto" : "as asked");
    if (c->prog->policy == RT_RECOMPUTE_SELECTIVE && c->prog->full_blocks > 0)
        printf("                          blocks 0-%d of %d recomputed in full\n",
               c->prog->full_blocks - 1, c->prog->n_blocks);
    if (c->prog->policy == RT_RECOMPUTE_SELECTIVE && c->prog->sel_blocks < c->prog->n_blocks)
        printf("                          blocks 0-%d of %d selective, blocks %d-%d keep everything\n",
               c->prog->sel_blocks - 1, c->prog->n_blocks, c->prog->sel_blocks, c->prog->n_blocks - 1);
    printf("  recompute FLOPs       %14lld per step (%.1f%% more than the step's %lld)\n",
           (long long)(B * c->prog->recompute_flops),
           100.0 * (double)c->prog->recompute_flops / (double)(g->flops_fwd + g->flops_bwd),
           (long long)(B * (g->flops_fwd + g->flops_bwd)));
    /* FLOPs count GEMMs and attention, as FLOPs/sample and MFU do: say what else runs */
    if (p->n_replayed)
        printf("                          %d instructions replayed in backward, %d of them "
               "elementwise or norm work (not in the FLOPs),\n"
               "                          writing %lld bytes a step\n", p->n_replayed,
               p->n_replayed_light, (long long)(B * p->replay_row_bytes));
    if (ranks > 0)
        plan_ranks(s, &rp, g->param_floats);
    return 0;
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    if (argc > 2)
        error_input("help: one command at a time (got '%s' after '%s')", argv[2], argv[1]);
    const char *names[sizeof command_help / sizeof *command_help + 1] = {0};
    for (size_t i = 0; i < sizeof command_help / sizeof *command_help; i++) {
        if (!strcmp(argv[1], command_help[i].name)) {
            fputs(command_help[i].text, stdout);
            if (command_help[i].trainer_options)
                rt_trainer_options(stdout, NULL);
            return 0;
        }
        names[i] = command_help[i].name;
    }
    const char *near = rt_closest(argv[1], names);
    error_input("help: unknown command '%s'%s%s%s", argv[1], near ? "; did you mean '" : "",
                near ? near : "", near ? "'?" : "");
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
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
        return cmd_help(argc - 1, argv + 1);
    /* --dump-after=PASS (or --dump-after PASS), for any command that compiles: taken
     * out of argv here, so that the commands and a trainer's options never see it */
    /* and --NAME=VALUE as --NAME VALUE for the options that take a value (the
     * trainer's own parse_opts does the same for a built trainer) */
    static const char *const value_opts[] = {"--device", "--arch", "--bundle", "--ranks",
                                             "--chunk-kb", "--from", "--val-frac",
                                             "--shard-tokens", NULL};
    char **args = xcalloc((size_t)2 * argc + 1, sizeof *args);
    int n = 0;
    args[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
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
            if (i + 1 >= argc)
                error_input("--dump-after needs a pass name");
            set_dump_after(argv[++i]);
        } else if (split) {
            args[n++] = xasprintf("%.*s", (int)len, argv[i]);
            args[n++] = (char *)eq + 1;
        } else
            args[n++] = argv[i];
    }
    argc = n;
    argv = args;
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"check", cmd_check}, {"emit", cmd_emit}, {"build", cmd_build}, {"run", cmd_run},
                {"plan", cmd_plan},   {"data", cmd_data}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmd, cmds[i].name)) {
            /* trainc COMMAND --help: as trainc help COMMAND (data has its own) */
            if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) &&
                strcmp(cmd, "data"))
                return cmd_help(2, (char *[]){"help", (char *)cmd, NULL});
            return cmds[i].fn(argc - 1, argv + 1);
        }
    const char *names[] = {"check", "emit", "build", "run", "plan", "data", "help", NULL};
    const char *near = rt_closest(cmd, names);
    error_input("unknown command '%s'%s%s%s", cmd, near ? "; did you mean '" : "", near ? near : "",
                near ? "'?" : "");
}
