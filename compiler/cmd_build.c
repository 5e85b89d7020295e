/* cmd_build.c: trainc emit (the generated sources written to a folder) and trainc
 * build (those sources compiled by the system C compiler, the CUDA kernels by NVRTC,
 * into a standalone trainer; build.c holds its temporary files, CUDA image and bundle). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cmd.h"

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

/* The C compiler's command line that links the trainer at tmpout: host.c and
 * kernels_cpu.c from tmp (emit_write's), the CUDA image for --device cuda or both
 * (compiled here by NVRTC), the runtime and the libraries it needs. */
static char **link_command(const Compiled *c, const char *tmp, const char *device,
                           const char *arch, int bundle, char *tmpout)
{
    const Spec *s = c->spec;
    int cuda = strcmp(device, "cpu") != 0;
    char *abs = realpath(s->data_dir, NULL);
    Buf ddef_b = {0};   /* a C string literal: the folder's name may hold " or \ */
    buf_puts(&ddef_b, "-DTRAINC_DATA_DIR=");
    c_string(&ddef_b, abs ? abs : s->data_dir);
    char *ddef = ddef_b.s;
    char *inc = xasprintf("-I%s", trainc_home_include());
    char *lib = xasprintf("%s/librt.a", trainc_home_lib());
    char *host = xasprintf("%s/host.c", tmp), *kern = xasprintf("%s/kernels_cpu.c", tmp);
    /* $CC split at spaces and tabs, without quoting: CC="ccache cc", CC="gcc -m64" */
    char **args = xcalloc(128, sizeof *args);
    int na = 0;
    add_words(args, &na, 16, getenv("CC"));
    if (na == 0)
        args[na++] = "cc";
    char *const fixed[] = {TRAINC_CC_FLAGS, inc, ddef, host, kern};
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
    return args;
}

int cmd_emit(int argc, char **argv)
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

int cmd_build(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "build");
    const char *out = NULL, *device = NULL, *arch = "sm_80,sm_86,sm_89,sm_90a", *bundle = NULL;
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
    /* linked in the temporary folder, then put beside OUT whole (build_install: a build
     * killed outright while the linker wrote there left the partial executable) */
    char *tmpout = xasprintf("%s/trainer", tmp);
    char **args = link_command(c, tmp, device, arch, bundle != NULL, tmpout);
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
