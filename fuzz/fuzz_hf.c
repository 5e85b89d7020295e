/* fuzz_hf.c: `trainc import hf DIR -o OUT` on any bytes: config.json's reading
 * (compiler/cmd_import.c: the families, their keys, rope_scaling), the safetensors
 * headers and the sharded index (compiler/hf_io.c), the plan from the family's tables
 * (compiler/hf_arch.c), and the model.json, train.json and init.safetensors it writes.
 * The input is cut at each "HF|": the first part is config.json; a second part that
 * starts with '{' is model.safetensors.index.json and the parts after it are the shards
 * s1.safetensors, s2.safetensors, ... (the names the seeds' indexes use); any other
 * second part is model.safetensors. compiler/main.c is linked in with its main renamed,
 * as for fuzz_spec. */
#include "fuzz.h"
#include <dirent.h>
#include <sys/stat.h>

int trainc_main(int argc, char **argv);

/* every file in dir removed (the folders hold files only) */
static void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char p[512];
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
}

static void put(const char *dir, const char *name, const uint8_t *at, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(at, 1, n, f) != n) || fclose(f)) {
        perror(p);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char src[128], out[128];
    snprintf(src, sizeof src, "/tmp/trainc-fuzz-hf-%d", (int)getpid());
    snprintf(out, sizeof out, "%s.out", src);
    mkdir(src, 0755);
    empty_dir(src);
    empty_dir(out);
    const uint8_t *at = data, *end = data + size;
    int index = 0;
    for (int k = 0; k < 8 && at <= end; k++) {
        const uint8_t *cut = fuzz_cut(at, end, "HF|");
        size_t n = (size_t)(cut - at);
        char name[64];
        if (k == 0)
            snprintf(name, sizeof name, "config.json");
        else if (k == 1 && n && at[0] == '{')
            index = snprintf(name, sizeof name, "model.safetensors.index.json");
        else if (k == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else if (index)
            snprintf(name, sizeof name, "s%d.safetensors", k - 1);
        else
            break;
        put(src, name, at, n);
        at = cut + 3;
    }
    char *argv[] = {"trainc", "import", "hf", src, "-o", out, NULL};
    FILE *keep = stdout;
    stdout = fopen("/dev/null", "w");   /* the "import: ... ->" line */
    FUZZ_RUN(trainc_main(6, argv));
    if (!fuzz_jumped)
        fuzz_fds_close();   /* a finished import keeps its weight files open too */
    fclose(stdout);
    stdout = keep;
    return 0;
}
