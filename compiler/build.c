#define _GNU_SOURCE
/* build.c: what `trainc build` adds for a GPU and for shipping.
 *
 *   build_cuda_image  kernels_cuda.cu -> one cubin per --arch and PTX for the lowest
 *                     (NVRTC, in parallel), embedded in the executable by cuda_image.c
 *                     (.incbin) with the source itself, which a trainer hands to NVRTC
 *                     when it meets a GPU none of the cubins fits
 *   build_bundle      the executable's shared libraries (ldd) and the ones the device
 *                     layer loads with dlopen (cuBLASLt, NVRTC and its builtins), copied
 *                     into DIR/lib, which the executable's run path ($ORIGIN/lib) names
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ir.h"
#include "../runtime/rt_cuda.h"

/* ---- the CUDA image -------------------------------------------------------------------- */

typedef struct Job {
    const char *src, *arch;
    void *image;
    size_t size;
    char *log;
    int rc;
} Job;

static void *compile_job(void *p)
{
    Job *j = p;
    j->rc = rt_nvrtc_compile(j->src, "kernels_cuda.cu", j->arch, &j->image, &j->size, &j->log);
    return NULL;
}

static int valid_arch(const char *a)
{
    if (strncmp(a, "sm_", 3) || !a[3])
        return 0;
    for (const char *s = a + 3; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s == 'a' && !s[1])))
            return 0;
    return 1;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
        rt_fail("build: cannot write %s: %s", path, strerror(errno));
}

char *build_cuda_image(const char *src, const char *archs, const char *dir)
{
    char why[512];
    if (rt_nvrtc_load(why, sizeof why) != 0)
        rt_fail("build: --device cuda needs NVRTC: %s\n  hint: install the CUDA toolkit (its "
                "NVRTC), or build with --device cpu", why);
    Job jobs[17];
    int n = 0, lowest = 1 << 30;
    char *list = xstrdup(archs);
    for (char *a = strtok(list, ","); a; a = strtok(NULL, ",")) {
        if (!valid_arch(a))
            error_input("build: --arch: '%s' is not an architecture like sm_90", a);
        char have[512];
        int nv_major = 0, nv_minor = 0;
        if (atoi(a + 3) < RT_CU_MIN_SM)
            error_input("build: --arch: %s: trainc's kernels need sm_%d or newer (16-bit tensor "
                        "cores, asynchronous copies)", a, RT_CU_MIN_SM);
        if (!rt_nvrtc_supports(atoi(a + 3), have, sizeof have)) {
            rt_nvrtc_version(&nv_major, &nv_minor);
            error_input("build: --arch: NVRTC %d.%d cannot compile for %s; it can for %s", nv_major,
                        nv_minor, a, have);
        }
        if (n == 16)
            error_input("build: --arch: at most 16 architectures");
        jobs[n++] = (Job){.src = src, .arch = a};
        int v = atoi(a + 3);
        if (v < lowest)
            lowest = v;
    }
    if (n == 0)
        error_input("build: --arch is empty");
    /* PTX of the lowest: the driver compiles it for GPUs newer than every cubin */
    jobs[n++] = (Job){.src = src, .arch = xasprintf("compute_%d", lowest)};
    pthread_t th[17];
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, compile_job, &jobs[i]) != 0)
            compile_job(&jobs[i]), th[i] = 0;
    for (int i = 0; i < n; i++)
        if (th[i])
            pthread_join(th[i], NULL);
    Buf c = {0};
    buf_puts(&c, "/* cuda_image.c: written by trainc build; the kernels of kernels_cuda.cu as "
                 "cubins, PTX and source. */\n#include \"trainc_rt.h\"\n\n__asm__(\".section .rodata\\n\"\n");
    for (int i = 0; i < n; i++) {
        Job *j = &jobs[i];
        if (j->rc != 0)
            rt_fail("build: NVRTC could not compile the kernels for %s (a trainc bug; please "
                    "report it with the spec):\n%.4000s", j->arch, j->log ? j->log : "");
        char *path = xasprintf("%s/kernels.%s.bin", dir, j->arch);
        write_file(path, j->image, j->size);
        buf_printf(&c, "        \".balign 16\\ntrainc_kimage_%d:\\n.incbin \\\"%s\\\"\\n.byte 0\\n\"\n", i, path);
    }
    /* the source the trainer compiles where no cubin fits: kernels_cuda.cu with the
     * templates inlined (the file emit writes #includes them) */
    char *srcpath = xasprintf("%s/kernels_nvrtc.cu", dir);
    write_file(srcpath, src, strlen(src));
    buf_printf(&c, "        \"trainc_ksource:\\n.incbin \\\"%s\\\"\\n.byte 0\\n\"\n"
                   "        \".previous\\n\");\n\n", srcpath);
    for (int i = 0; i < n; i++)
        buf_printf(&c, "extern const unsigned char trainc_kimage_%d[];\n", i);
    buf_puts(&c, "extern const char trainc_ksource[];\n\nstatic const rt_cubin cubins[] = {\n");
    for (int i = 0; i < n - 1; i++)
        buf_printf(&c, "    {\"%s\", trainc_kimage_%d, %zu},\n", jobs[i].arch, i, jobs[i].size);
    buf_printf(&c, "};\n\nconst rt_cuda_image trainc_cuda_image = {\n    .source = trainc_ksource,\n"
                   "    .n_cubins = %d,\n    .cubins = cubins,\n    .ptx = (const char *)trainc_kimage_%d,\n};\n",
               n - 1, n - 1);
    char *out = xasprintf("%s/cuda_image.c", dir);
    write_file(out, c.s, c.len);
    for (int i = 0; i < n; i++) {
        free(jobs[i].image);
        free(jobs[i].log);
    }
    free(c.s);
    return out;
}

/* ---- the bundle -------------------------------------------------------------------------- */

/* The C library's own parts: every Linux machine has them, matched to its kernel. */
static int system_lib(const char *name)
{
    static const char *const sys[] = {"linux-vdso", "ld-linux", "libc.so", "libm.so", "libdl.so",
                                      "libpthread.so", "librt.so", "libresolv.so", "libutil.so",
                                      "libcuda.so"};
    for (size_t i = 0; i < sizeof sys / sizeof sys[0]; i++)
        if (!strncmp(name, sys[i], strlen(sys[i])))
            return 1;
    return 0;
}

static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY);
    if (in < 0)
        rt_fail("build: --bundle: cannot read %s: %s", from, strerror(errno));
    char *tmp = xasprintf("%s.tmp%d", to, (int)getpid());
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (out < 0)
        rt_fail("build: --bundle: cannot write %s: %s", tmp, strerror(errno));
    static char buf[1 << 20];
    ssize_t k;
    while ((k = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)k) != k)
            rt_fail("build: --bundle: writing %s: %s (is the disk full?)", tmp, strerror(errno));
    if (k < 0 || close(out) != 0 || rename(tmp, to) != 0)
        rt_fail("build: --bundle: writing %s: %s", to, strerror(errno));
    close(in);
    free(tmp);
}

/* Where the dynamic loader finds `soname` for this process (NULL: nowhere). */
static char *find_lib(const char *soname)
{
    void *h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
    if (!h)
        return NULL;
    struct link_map *lm = NULL;
    char *path = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
        path = realpath(lm->l_name, NULL);
    dlclose(h);
    return path;
}

/* A library with a run path of its own (Debian's Open MPI has one) would look for its
 * dependencies there and not in the executable's RPATH: point it at its own folder. */
static void own_rpath(const char *lib)
{
    char *cmd = xasprintf("patchelf --print-rpath '%s' 2>/dev/null", lib);
    FILE *p = popen(cmd, "r");
    char line[1024] = "";
    if (!p || !fgets(line, sizeof line, p))
        line[0] = 0;
    int st = p ? pclose(p) : -1;
    free(cmd);
    if (st != 0)
        rt_fail("build: --bundle needs patchelf to rewrite library run paths (Debian: apt-get "
                "install patchelf)");
    if (line[0] == '\n' || !line[0])
        return;
    char *set = xasprintf("patchelf --set-rpath '$ORIGIN' '%s'", lib);
    if (system(set) != 0)
        rt_fail("build: --bundle: patchelf could not rewrite the run path of %s", lib);
    free(set);
}

static int bundle_one(const char *libdir, const char *soname, const char *path)
{
    char *to = xasprintf("%s/%s", libdir, soname);
    copy_file(path, to);
    own_rpath(to);
    struct stat st;
    long long mb = stat(to, &st) == 0 ? (long long)(st.st_size >> 20) : 0;
    fprintf(stderr, "trainc: bundled %s (%lld MiB)\n", soname, mb);
    free(to);
    return 0;
}

void build_bundle(const char *exe, const char *dir, int cuda)
{
    char *libdir = xasprintf("%s/lib", dir);
    if (rt_mkdir_p(libdir) != 0)
        rt_fail("build: --bundle: cannot create %s: %s", libdir, strerror(errno));
    /* what the executable links: ldd lists "soname => path (address)" */
    char *cmd = xasprintf("ldd '%s'", exe);
    FILE *p = popen(cmd, "r");
    if (!p)
        rt_fail("build: --bundle: cannot run ldd: %s", strerror(errno));
    char line[2048];
    int missing = 0;
    while (fgets(line, sizeof line, p)) {
        char name[512], path[1024];
        if (sscanf(line, " %511s => %1023s", name, path) != 2)
            continue;
        if (system_lib(name))
            continue;
        if (!strcmp(path, "not")) {
            fprintf(stderr, "trainc: error: --bundle: %s is not found on this machine\n", name);
            missing = 1;
            continue;
        }
        char *real = realpath(path, NULL);
        bundle_one(libdir, name, real ? real : path);
        free(real);
    }
    pclose(p);
    if (missing)
        rt_fail("build: --bundle: libraries are missing (see above)");
    if (cuda) {
        /* the device layer's dlopen'ed libraries (NVRTC loads its builtins by soname;
         * NCCL serves several ranks on GPUs) */
        static const char *const libs[] = {"libcublasLt.so.13", "libnvrtc.so.13",
                                           "libnvrtc-builtins.so.13.0", "libnccl.so.2"};
        for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
            char *path = find_lib(libs[i]);
            if (!path)
                rt_fail("build: --bundle: %s is not installed here (the CUDA toolkit's); a "
                        "--device cuda bundle needs it", libs[i]);
            bundle_one(libdir, libs[i], path);
            free(path);
        }
    }
    free(libdir);
    free(cmd);
}
