/* fuzz_idx.c: `trainc data fashion-mnist OUT --from SRC` on any bytes: the IDX reader
 * (compiler/data_cmd.c, gzip'd or plain), the checks between images and labels, and
 * the .npy writer. The input is cut at each "IDX|" into up to four files, SRC's
 * train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
 * t10k-labels-idx1-ubyte in that order (".gz" added to a part that starts with gzip's
 * magic 1f 8b; a part left out is a missing file). compiler/main.c is linked in with
 * its main renamed, as for fuzz_spec. */
#include "fuzz.h"
#include <sys/stat.h>

int trainc_main(int argc, char **argv);
void data_abandon(void);

static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                     "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

static void path_of(char *p, size_t n, const char *dir, const char *name, const char *ext)
{
    snprintf(p, n, "%s/%s%s", dir, name, ext);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char src[128], out[128];
    char p[256];
    snprintf(src, sizeof src, "/tmp/trainc-fuzz-idx-%d", (int)getpid());
    snprintf(out, sizeof out, "%s.out", src);
    mkdir(src, 0755);
    /* the last input's files gone, source and output */
    for (int k = 0; k < 4; k++) {
        path_of(p, sizeof p, src, names[k], "");
        unlink(p);
        path_of(p, sizeof p, src, names[k], ".gz");
        unlink(p);
    }
    static const char *const outs[] = {"train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy"};
    for (int k = 0; k < 4; k++) {
        path_of(p, sizeof p, out, outs[k], "");
        unlink(p);
        path_of(p, sizeof p, out, outs[k], ".tmp");
        unlink(p);
    }
    const uint8_t *at = data, *end = data + size;
    for (int k = 0; k < 4 && at <= end; k++) {
        const uint8_t *cut = fuzz_cut(at, end, "IDX|");
        size_t n = (size_t)(cut - at);
        int gz = n >= 2 && at[0] == 0x1f && at[1] == 0x8b;
        path_of(p, sizeof p, src, names[k], gz ? ".gz" : "");
        FILE *f = fopen(p, "wb");
        if (!f || (n && fwrite(at, 1, n, f) != n) || fclose(f)) {
            perror(p);
            abort();
        }
        at = cut + 4;
    }
    char *argv[] = {"trainc", "data", "fashion-mnist", out, "--from", src, NULL};
    FILE *keep = stdout;
    stdout = fopen("/dev/null", "w");   /* the "wrote ..." lines */
    FUZZ_RUN(trainc_main(6, argv));
    if (fuzz_jumped)
        data_abandon();   /* the .part files an exit would have removed */
    fclose(stdout);
    stdout = keep;
    return 0;
}
