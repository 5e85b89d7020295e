#define _GNU_SOURCE
/* fake_nvrtc.c: libnvrtc.so.13 for tests/fake_gpu.sh. nvrtcCompileProgram for
 * --gpu-architecture=sm_XX compiles the program for the CPU: the source (a generated
 * kernels_cuda.cu: templates, instance macro lines, elementwise kernels) goes inside
 * tests/gpu/emu/emu_kernels.cc's namespace with `extern "C"` dropped (as
 * tests/gpu_emu.sh does), with a table of its kernels appended; g++ builds a shared
 * object and the "cubin" is FAKE_CUBIN_MAGIC + its size + it (fake_cuda.c loads it).
 *
 * The kernels are the `extern "C" __global__ void NAME(` of the preprocessed source
 * (so the instance macros are expanded); every `__global__` must be one of them. Their
 * parameter types are not parsed: C++ deduces them from each kernel's type, which is
 * how the table copies cuLaunchKernel's arguments and checks the pointers among them.
 *
 * Headers: tests/gpu/emu comes first on the include path, so `#include <cuda_fp8.h>`
 * gets the emulator's (tests/gpu/emu/cuda_fp8.h); --include-path=DIR (-I DIR, -IDIR)
 * adds DIR after it, as real NVRTC, which has no built-in cuda_fp8.h, needs the
 * toolkit's include folder for that header.
 *
 * The module records its architecture (trainc_fake_arch(): "sm_89", "sm_90a"), so that
 * the fake driver loads it only where a real cubin of it would run; for sm_90a the
 * source sees __CUDA_ARCH_FEAT_SM90_ALL, as with NVRTC (templates/cuda/sm90.cuh).
 *
 * compute_XX (PTX) gives a stub that the fake driver refuses (it has no PTX JIT): what
 * trainc build needs to run on the fake NVRTC, embedding the "cubins" beside its PTX, so
 * that a test's trainer starts with its kernels compiled; the same source's sm_XX
 * compile is what checks it. An option the fake does not know fails with
 * NVRTC_ERROR_INVALID_OPTION (it could change the arithmetic). The version is 13.0.
 * The compiler is $TRAINC_FAKE_NVRTC_CXX, else g++; FAKE_EMU_DIR (set when this is built) is
 * tests/gpu/emu, FAKE_EMU_OBJ its emu_fibers.cc compiled (tests/fake_gpu/build.sh), linked
 * into every module; TRAINC_FAKE_NVRTC_KEEP=1 keeps the work folder (its path in the log).
 *
 * TRAINC_FAKE_NVRTC_CACHE=DIR keeps each module built, named by a hash of everything that
 * makes it (the preprocessed source, the source given to g++, its command, every file of
 * the emulator's folder and emu_fibers.o), and takes it from there when the same program
 * comes again: tests/run_all.sh shares one folder among its checks, whose trainers
 * compile many of the same kernels. */
#include <dirent.h>
#include <nvrtc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fake_gpu.h"

#if !defined(FAKE_EMU_DIR) || !defined(FAKE_EMU_OBJ)
#error "build with -DFAKE_EMU_DIR=\"/path/to/tests/gpu/emu\" -DFAKE_EMU_OBJ=\"/path/to/emu_fibers.o\""
#endif

struct _nvrtcProgram {
    char *src, *name;
    char *log;
    unsigned char *cubin;
    size_t cubin_size;
    char *ptx;
};

nvrtcResult nvrtcVersion(int *major, int *minor)
{
    if (!major || !minor)
        return NVRTC_ERROR_INVALID_INPUT;
    *major = 13;
    *minor = 0;
    return NVRTC_SUCCESS;
}

/* NVRTC 13.0's list */
static const int archs[] = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};

nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
    if (!n)
        return NVRTC_ERROR_INVALID_INPUT;
    *n = (int)(sizeof archs / sizeof archs[0]);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int *a)
{
    if (!a)
        return NVRTC_ERROR_INVALID_INPUT;
    memcpy(a, archs, sizeof archs);
    return NVRTC_SUCCESS;
}

const char *nvrtcGetErrorString(nvrtcResult r)
{
    static const char *const names[] = {
        "NVRTC_SUCCESS", "NVRTC_ERROR_OUT_OF_MEMORY", "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
        "NVRTC_ERROR_INVALID_INPUT", "NVRTC_ERROR_INVALID_PROGRAM", "NVRTC_ERROR_INVALID_OPTION",
        "NVRTC_ERROR_COMPILATION", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE"};
    if ((int)r >= 0 && (size_t)r < sizeof names / sizeof names[0])
        return names[r];
    return "NVRTC_ERROR unknown";
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int num_headers, const char *const *headers,
                               const char *const *include_names)
{
    (void)headers, (void)include_names;
    if (!prog || !src)
        return NVRTC_ERROR_INVALID_INPUT;
    if (num_headers != 0)
        return NVRTC_ERROR_INVALID_INPUT;   /* the runtime passes none; not emulated */
    struct _nvrtcProgram *p = calloc(1, sizeof *p);
    if (!p || !(p->src = strdup(src)) || !(p->name = strdup(name ? name : "default_program")))
        return NVRTC_ERROR_OUT_OF_MEMORY;
    p->log = strdup("");
    *prog = p;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    if (!prog || !*prog)
        return NVRTC_ERROR_INVALID_PROGRAM;
    free((*prog)->src);
    free((*prog)->name);
    free((*prog)->log);
    free((*prog)->cubin);
    free((*prog)->ptx);
    free(*prog);
    *prog = NULL;
    return NVRTC_SUCCESS;
}

static void logf_(nvrtcProgram p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *add = NULL;
    if (vasprintf(&add, fmt, ap) < 0)
        add = NULL;
    va_end(ap);
    char *all = NULL;
    if (add && asprintf(&all, "%s%s", p->log, add) >= 0) {
        free(p->log);
        p->log = all;
    }
    free(add);
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        size_t k = fread(buf + len, 1, 65536, f);
        len += k;
        if (k == 0)
            break;
    }
    fclose(f);
    buf[len] = 0;
    *n = len;
    return buf;
}

static int write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* ---- the kernels of the preprocessed source ----------------------------------------- */

static int is_id(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

static const char *ws(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return s;
}

/* s at a word: its end if it is `w`, else NULL */
static const char *word(const char *s, const char *w)
{
    size_t n = strlen(w);
    return strncmp(s, w, n) == 0 && !is_id(s[n]) ? s + n : NULL;
}

/* Appends "FAKE_K(name)\n" for each kernel of pre to *list; -1 (and a log line) when a
 * __global__ is not in the form the fake understands. */
static int find_kernels(nvrtcProgram p, const char *pre, char **list, int *count)
{
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    int globals = 0, kernels = 0;
    out[0] = 0;
    for (const char *s = pre; (s = strstr(s, "__global__")); s += 10)
        if ((s == pre || !is_id(s[-1])) && !is_id(s[10]))
            globals++;
    for (const char *s = pre; (s = strstr(s, "extern")); s += 6) {
        if (s != pre && is_id(s[-1]))
            continue;
        const char *t = word(s, "extern");
        if (!t || strncmp(t = ws(t), "\"C\"", 3) != 0)
            continue;
        if (!(t = word(ws(t + 3), "__global__")) || !(t = word(ws(t), "void")))
            continue;
        t = ws(t);
        const char *lb = word(t, "__launch_bounds__");
        if (lb) {
            t = ws(lb);
            if (*t != '(')
                continue;
            int depth = 0;
            do {
                depth += *t == '(' ? 1 : *t == ')' ? -1 : 0;
                t++;
            } while (*t && depth > 0);
            t = ws(t);
        }
        const char *id = t;
        while (is_id(*t))
            t++;
        if (t == id || *ws(t) != '(')
            continue;
        size_t n = (size_t)(t - id);
        if (len + n + 16 > cap) {
            cap = (len + n + 16) * 2;
            out = realloc(out, cap);
        }
        len += (size_t)sprintf(out + len, "FAKE_K(%.*s)\n", (int)n, id);
        kernels++;
    }
    if (kernels != globals) {
        logf_(p, "fake NVRTC: %d __global__ in the source but %d kernels of the form "
                 "extern \"C\" __global__ void [__launch_bounds__(...)] NAME(...)\n", globals, kernels);
        free(out);
        return -1;
    }
    *list = out;
    *count = kernels;
    return 0;
}

/* Appended to the source, inside emu_kernels.cc's namespace emu: the table the fake
 * driver reaches through trainc_fake_* (see fake_gpu.h). */
static const char appendix[] =
    "\n/* ---- appended by the fake NVRTC (tests/fake_gpu/fake_nvrtc.c) ---- */\n"
    "template <typename T> struct fake_ptr {\n"
    "    static const bool is = false;\n"
    "    static const void *get(const void *) { return nullptr; }\n"
    "};\n"
    "template <typename T> struct fake_ptr<T *> {\n"
    "    static const bool is = true;\n"
    "    static const void *get(const void *v) { T *p; memcpy(&p, v, sizeof p); return (const void *)p; }\n"
    "};\n"
    "template <typename... A>\n"
    "int fake_pack(void (*)(A...), void *const *args, char *buf, size_t cap, void **out,\n"
    "              int (*is_dev)(const void *), int *bad)\n"
    "{\n"
    "    const size_t sz[] = {sizeof(A)..., 0}, al[] = {alignof(A)..., 1};\n"
    "    const bool ptr[] = {fake_ptr<A>::is..., false};\n"
    "    const void *(*const get[])(const void *) = {&fake_ptr<A>::get..., nullptr};\n"
    "    size_t off = 0;\n"
    "    for (int i = 0; i < (int)sizeof...(A); i++) {\n"
    "        off = (off + al[i] - 1) / al[i] * al[i];\n"
    "        if (off + sz[i] > cap)\n"
    "            return -1;\n"
    "        if (ptr[i]) {\n"
    "            const void *p = get[i](args[i]);\n"
    "            if (p && !is_dev(p)) {\n"
    "                *bad = i;\n"
    "                return -2;\n"
    "            }\n"
    "        }\n"
    "        memcpy(buf + off, args[i], sz[i]);\n"
    "        out[i] = buf + off;\n"
    "        off += sz[i];\n"
    "    }\n"
    "    return (int)sizeof...(A);\n"
    "}\n"
    "typedef int (*fake_pack_t)(void *const *, char *, size_t, void **, int (*)(const void *), int *);\n"
    "struct fake_kernel { const char *name; fake_pack_t pack; };\n"
    "#define FAKE_K(f) {#f, [](void *const *a, char *b, size_t c, void **o, int (*d)(const void *), int *e) \\\n"
    "                       { return fake_pack(f, a, b, c, o, d, e); }},\n"
    "const fake_kernel fake_kernels[] = {\n"
    "#include \"fake_list.inc\"\n"
    "};\n"
    "extern \"C\" int trainc_fake_kernels(void) { return (int)(sizeof fake_kernels / sizeof fake_kernels[0]); }\n"
    "extern \"C\" const char *trainc_fake_kernel_name(int k) { return fake_kernels[k].name; }\n"
    "extern \"C\" int trainc_fake_pack(int k, void *const *args, char *buf, size_t cap, void **out,\n"
    "                                  int (*is_dev)(const void *), int *bad)\n"
    "{\n"
    "    return fake_kernels[k].pack(args, buf, cap, out, is_dev, bad);\n"
    "}\n";

static int run(nvrtcProgram p, const char *dir, const char *cmd)
{
    char *full = NULL;
    if (asprintf(&full, "cd '%s' && %s >>compile.log 2>&1", dir, cmd) < 0)
        return -1;
    int rc = system(full);
    free(full);
    if (rc != 0) {
        char path[4200];
        size_t n = 0;
        snprintf(path, sizeof path, "%s/compile.log", dir);
        char *log = read_file(path, &n);
        logf_(p, "fake NVRTC: `%s` failed:\n%.20000s\n", cmd, log ? log : "");
        free(log);
        return -1;
    }
    return 0;
}

static void remove_dir(const char *dir)
{
    static const char *const files[] = {"src.cu", "pre.ii", "kernels.inc", "kernels_list.inc",
                                        "fake_list.inc", "module.so", "compile.log"};
    char path[4200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* ---- the modules' cache (TRAINC_FAKE_NVRTC_CACHE) --------------------------------------- */

/* two 64-bit FNV-1a hashes of different offsets over what makes a module (the inputs are
 * a test run's own kernels, not an adversary's: no collision to fear at 128 bits) */
typedef struct {
    uint64_t h[2];
} hash128;

static void hash_bytes(hash128 *k, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < 2; j++)
            k->h[j] = (k->h[j] ^ b[i]) * 0x100000001b3ull;
    for (int j = 0; j < 2; j++)   /* the length too: "ab" + "c" is not "a" + "bc" */
        k->h[j] = (k->h[j] ^ n) * 0x100000001b3ull;
}

/* every regular file of the emulator's folder (each file's name and contents hashed, the
 * files' hashes added up: the folder's order does not count) and emu_fibers.o: once per
 * process */
static int hash_emulator(hash128 *k)
{
    static hash128 emu;
    static int done;
    if (!done) {
        emu = (hash128){{0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull}};
        DIR *dir = opendir(FAKE_EMU_DIR);
        if (!dir)
            return -1;
        struct dirent *e;
        uint64_t sum[2] = {0, 0};   /* order-free: the files' hashes added up */
        while ((e = readdir(dir))) {
            char path[4200];
            size_t n = 0;
            snprintf(path, sizeof path, "%s/%s", FAKE_EMU_DIR, e->d_name);
            struct stat st;
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            char *text = read_file(path, &n);
            if (!text) {
                closedir(dir);
                return -1;
            }
            hash128 f = {{0xcbf29ce484222325ull, 0x84222325cbf29ce4ull}};
            hash_bytes(&f, e->d_name, strlen(e->d_name));
            hash_bytes(&f, text, n);
            free(text);
            sum[0] += f.h[0];
            sum[1] += f.h[1];
        }
        closedir(dir);
        hash_bytes(&emu, sum, sizeof sum);
        size_t n = 0;
        char *obj = read_file(FAKE_EMU_OBJ, &n);
        if (!obj)
            return -1;
        hash_bytes(&emu, obj, n);
        free(obj);
        done = 1;
    }
    hash_bytes(k, emu.h, sizeof emu.h);
    return 0;
}

/* The cache's path for this module in `path` (0), or -1 without a cache. The command is
 * hashed without emu_fibers.o's path (each check builds the fake libraries in its own
 * folder; the object's bytes are hashed), so that checks share their modules. */
static int cache_path(char *path, size_t cap, const char *pre, const char *body, const char *cmd)
{
    const char *dir = getenv("TRAINC_FAKE_NVRTC_CACHE");
    hash128 k = {{0xcbf29ce484222325ull, 0x84222325cbf29ce4ull}};
    if (!dir || !*dir || hash_emulator(&k) != 0)
        return -1;
    hash_bytes(&k, pre, strlen(pre));
    hash_bytes(&k, body, strlen(body));
    const char *obj = strstr(cmd, FAKE_EMU_OBJ);
    size_t head = obj ? (size_t)(obj - cmd) : strlen(cmd);
    hash_bytes(&k, cmd, head);
    if (obj)
        hash_bytes(&k, obj + strlen(FAKE_EMU_OBJ), strlen(obj + strlen(FAKE_EMU_OBJ)));
    snprintf(path, cap, "%s/%016llx%016llx.so", dir, (unsigned long long)k.h[0], (unsigned long long)k.h[1]);
    return 0;
}

/* A module built keeps its place in the cache: written under another name, then renamed
 * (a check running beside this one sees the whole file or none) */
static void cache_put(const char *path, const char *so, size_t n)
{
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    mkdir(getenv("TRAINC_FAKE_NVRTC_CACHE"), 0755);
    if (write_file(tmp, so, n) != 0 || rename(tmp, path) != 0)
        unlink(tmp);
}

/* incs: " -I'DIR'" for each --include-path, after the emulator's folder */
static nvrtcResult compile(nvrtcProgram p, const char *arch, const char *incs)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/trainc-fake-nvrtc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        logf_(p, "fake NVRTC: cannot create %s\n", dir);
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    nvrtcResult r = NVRTC_ERROR_COMPILATION;
    char *pre = NULL, *list = NULL, *body = NULL, *so = NULL;
    size_t n = 0, srclen = strlen(p->src);
    int count = 0;
    const char *cxx = getenv("TRAINC_FAKE_NVRTC_CXX");
    char cmd[8192];
    if (!cxx || !*cxx)
        cxx = "g++";
    /* NVRTC's macro for sm_90a's architecture-specific features (templates/cuda/sm90.cuh) */
    const char *feat = !strcmp(arch, "sm_90a") ? " -D__CUDA_ARCH_FEAT_SM90_ALL=1" : "";
    snprintf(path, sizeof path, "%s/src.cu", dir);
    if (write_file(path, p->src, srclen) != 0)
        goto out;
    snprintf(cmd, sizeof cmd, "%s -E -P -x c++ -std=c++17%s -I'%s'%s src.cu -o pre.ii", cxx, feat,
             FAKE_EMU_DIR, incs);
    if (run(p, dir, cmd) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/pre.ii", dir);
    if (!(pre = read_file(path, &n)) || find_kernels(p, pre, &list, &count) != 0)
        goto out;
    /* the source without `extern "C"` (the kernels go into a namespace), then the table
     * and the architecture */
    body = malloc(srclen + sizeof appendix + strlen(arch) + 128);
    size_t len = 0;
    for (const char *s = p->src; *s;) {
        if (strncmp(s, "extern \"C\"", 10) == 0) {
            s += 10;
            continue;
        }
        body[len++] = *s++;
    }
    memcpy(body + len, appendix, sizeof appendix);
    len += sizeof appendix - 1;
    sprintf(body + len, "extern \"C\" const char *trainc_fake_arch(void) { return \"%s\"; }\n", arch);
    snprintf(path, sizeof path, "%s/kernels.inc", dir);
    if (write_file(path, body, strlen(body)) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/fake_list.inc", dir);
    if (write_file(path, list, strlen(list)) != 0)
        goto out;
    /* emu_kernels.cc's own table: K(name) per kernel */
    for (char *s = list; (s = strstr(s, "FAKE_K(")); s += 2)
        memmove(s, s + 5, strlen(s + 5) + 1);
    snprintf(path, sizeof path, "%s/kernels_list.inc", dir);
    if (write_file(path, list, strlen(list)) != 0)
        goto out;
    /* as the host's runtime is built: no FMA contraction, no errno; and a load or store
     * through a pointer not aligned for its type (a float4 at 8 bytes), which a GPU
     * faults on and x86 forgives, or an index past an array's bound (a shared-memory
     * tile's row) stops the kernel (UBSan's alignment and bounds checks). -O1: the
     * tests' runs are short and this compile is most of a check's time (-O2 compiled
     * check_ops' kernels a third slower and ran them a quarter faster, a wash there; a
     * test's trainers: 15% slower overall, 2026-12-01) */
    snprintf(cmd, sizeof cmd,
             "%s -std=c++17 -O1 -fPIC -shared -ffp-contract=off -fno-math-errno -fno-strict-aliasing "
             "-fsanitize=alignment,bounds -fno-sanitize-recover=alignment,bounds "
             "-w%s -I. -I'%s'%s '%s/emu_kernels.cc' '%s' -o module.so",
             cxx, feat, FAKE_EMU_DIR, incs, FAKE_EMU_DIR, FAKE_EMU_OBJ);
    char cached[4300];
    int cache = cache_path(cached, sizeof cached, pre, body, cmd) == 0;
    if (!cache || !(so = read_file(cached, &n))) {
        if (run(p, dir, cmd) != 0)
            goto out;
        snprintf(path, sizeof path, "%s/module.so", dir);
        if (!(so = read_file(path, &n))) {
            logf_(p, "fake NVRTC: no %s\n", path);
            goto out;
        }
        if (cache)
            cache_put(cached, so, n);
    }
    p->cubin_size = FAKE_CUBIN_MAGIC_LEN + 8 + n;
    p->cubin = malloc(p->cubin_size);
    memcpy(p->cubin, FAKE_CUBIN_MAGIC, FAKE_CUBIN_MAGIC_LEN);
    for (int i = 0; i < 8; i++)
        p->cubin[FAKE_CUBIN_MAGIC_LEN + i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(p->cubin + FAKE_CUBIN_MAGIC_LEN + 8, so, n);
    r = NVRTC_SUCCESS;
out:
    free(pre);
    free(list);
    free(body);
    free(so);
    if (!getenv("TRAINC_FAKE_NVRTC_KEEP"))
        remove_dir(dir);
    else
        logf_(p, "fake NVRTC: kept %s\n", dir);
    return r;
}

/* compute_XX: PTX that the fake driver refuses (".version" and ".target": PTX, and it
 * has no JIT) */
static nvrtcResult stub_ptx(nvrtcProgram p, const char *sm)
{
    if (asprintf(&p->ptx, "// trainc fake NVRTC: a stub for compute_%s; the fake driver "
                          "has no PTX JIT\n.version 9.0\n.target sm_%s\n", sm, sm) < 0) {
        p->ptx = NULL;
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts)
{
    if (!p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (n < 0 || (n > 0 && !opts))
        return NVRTC_ERROR_INVALID_INPUT;
    free(p->cubin);
    free(p->ptx);
    p->cubin = NULL;
    p->cubin_size = 0;
    p->ptx = NULL;
    const char *arch = NULL;
    char incs[4096] = "";
    size_t inc_len = 0;
    for (int i = 0; i < n; i++) {
        const char *o = opts[i], *dir = NULL;
        if (strncmp(o, "--gpu-architecture=", 19) == 0)
            arch = o + 19;
        else if (strncmp(o, "-arch=", 6) == 0)
            arch = o + 6;
        else if (strncmp(o, "--include-path=", 15) == 0)
            dir = o + 15;
        else if (strcmp(o, "-I") == 0 && i + 1 < n)
            dir = opts[++i];
        else if (strncmp(o, "-I", 2) == 0)
            dir = o + 2;
        else if (strcmp(o, "--std=c++17") != 0 && strcmp(o, "-std=c++17") != 0 &&
                 strcmp(o, "-default-device") != 0 && strcmp(o, "--device-as-default-execution-space") != 0 &&
                 strncmp(o, "-split-compile=", 15) != 0) {   /* (threads: same arithmetic) */
            logf_(p, "fake NVRTC: option %s is not emulated\n", o);
            return NVRTC_ERROR_INVALID_OPTION;
        }
        if (dir) {
            int k = snprintf(incs + inc_len, sizeof incs - inc_len, " -I'%s'", dir);
            if (!*dir || strchr(dir, '\'') || k < 0 || (size_t)k >= sizeof incs - inc_len) {
                logf_(p, "fake NVRTC: include path %s: empty, quoted or too long\n", dir);
                return NVRTC_ERROR_INVALID_OPTION;
            }
            inc_len += (size_t)k;
        }
    }
    /* the number after sm_ or compute_ */
    size_t at = arch && !strncmp(arch, "compute_", 8) ? 8 : 3;
    if (!arch || (at == 3 && strncmp(arch, "sm_", 3) != 0) || strspn(arch + at, "0123456789") < 2 ||
        strspn(arch + at, "0123456789af") != strlen(arch + at)) {
        logf_(p, "fake NVRTC: --gpu-architecture=%s: only sm_XX (a \"cubin\" for the CPU) and "
              "compute_XX (a stub PTX)\n", arch ? arch : "(none)");
        return NVRTC_ERROR_INVALID_OPTION;
    }
    if (at == 8)
        return stub_ptx(p, arch + at);
    return compile(p, arch, incs);
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    if (!p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (!n)
        return NVRTC_ERROR_INVALID_INPUT;
    *n = strlen(p->log) + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    if (!p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (!log)
        return NVRTC_ERROR_INVALID_INPUT;
    memcpy(log, p->log, strlen(p->log) + 1);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    if (!p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (!n || !p->cubin)
        return NVRTC_ERROR_INVALID_INPUT;
    *n = p->cubin_size;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *cubin)
{
    if (!p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (!cubin || !p->cubin)
        return NVRTC_ERROR_INVALID_INPUT;
    memcpy(cubin, p->cubin, p->cubin_size);
    return NVRTC_SUCCESS;
}

/* compute_XX's stub (stub_ptx), with its NUL as NVRTC counts it */
nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    if (!p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (!n || !p->ptx)
        return NVRTC_ERROR_INVALID_INPUT;
    *n = strlen(p->ptx) + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTX(nvrtcProgram p, char *ptx)
{
    if (!p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (!ptx || !p->ptx)
        return NVRTC_ERROR_INVALID_INPUT;
    memcpy(ptx, p->ptx, strlen(p->ptx) + 1);
    return NVRTC_SUCCESS;
}
