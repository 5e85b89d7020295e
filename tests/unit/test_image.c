/* The sample writers (runtime/image.c): `test_image DIR` writes the cases below into
 * DIR, each batch as NAME.npy and its grid as NAME.png, and DIR/cases.txt naming them
 * ("png NAME n C H W nrow", "npy NAME n rank shape...: values i*0.5 - 3"), for
 * tests/image_check.py to read back and judge against NumPy's make_grid and np.save.
 * Here: the refusals (bad arguments, a missing folder), each leaving no file and no
 * PATH.tmp behind. Exit 0, or 1 naming what failed. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rt.h"

static int failures;
static char dir[900];
static FILE *cases;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                           \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

static void path_of(char *p, size_t n, const char *name, const char *ext)
{
    snprintf(p, n, "%s/%s%s", dir, name, ext);
}

/* a fixed LCG's uniform values in [lo, lo + span): the same batches on every machine */
static uint64_t lcg = 12345;
static float uniform(float lo, float span)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return lo + span * (float)((lcg >> 40) * (1.0 / 16777216.0));
}

static void png_case(const char *name, const float *x, int64_t n, int C, int H, int W, int nrow)
{
    char p[1024];
    int64_t shape[3] = {C, H, W};
    path_of(p, sizeof p, name, ".npy");
    CHECK(rt_npy_write_f32(p, x, n, 3, shape) == 0, "%s: %s", p, strerror(errno));
    path_of(p, sizeof p, name, ".png");
    CHECK(rt_png_grid_write(p, x, n, C, H, W, nrow) == 0, "%s: %s", p, strerror(errno));
    fprintf(cases, "png %s %lld %d %d %d %d\n", name, (long long)n, C, H, W, nrow);
}

/* a batch of uniform values in [lo, lo + span), or of `fill` when span is 0 */
static void random_case(const char *name, int64_t n, int C, int H, int W, int nrow, float lo,
                        float span)
{
    int64_t count = n * C * H * W;
    float *x = malloc(sizeof *x * count);
    for (int64_t i = 0; i < count; i++)
        x[i] = span > 0 ? uniform(lo, span) : lo;
    png_case(name, x, n, C, H, W, nrow);
    free(x);
}

static void white_case(void)
{
    enum { H = 4, W = 3000, C = 3 };
    float *x = malloc(sizeof *x * C * H * W);
    for (int i = 0; i < C * H * W; i++)
        x[i] = i == 0 ? 0.0f : 2.0f;
    png_case("white", x, 1, C, H, W, 8);
    free(x);
}

static void npy_case(const char *name, int64_t n, int rank, const int64_t *shape)
{
    int64_t count = n;
    for (int i = 0; i < rank; i++)
        count *= shape[i];
    float *x = malloc(sizeof *x * (count > 0 ? count : 1));
    for (int64_t i = 0; i < count; i++)
        x[i] = (float)i * 0.5f - 3;
    char p[1024];
    path_of(p, sizeof p, name, ".npy");
    CHECK(rt_npy_write_f32(p, x, n, rank, shape) == 0, "%s: %s", p, strerror(errno));
    fprintf(cases, "npy %s %lld %d", name, (long long)n, rank);
    for (int i = 0; i < rank; i++)
        fprintf(cases, " %lld", (long long)shape[i]);
    fputc('\n', cases);
    free(x);
}

static int exists(const char *p) { return access(p, F_OK) == 0; }

/* a refused call: -1 with errno `want`, neither PATH nor PATH.tmp left */
static void refused(int rc, int want, const char *p, const char *what)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CHECK(rc == -1 && errno == want, "%s: rc %d, errno %s, want %s", what, rc, strerror(errno),
          strerror(want));
    CHECK(!exists(p) && !exists(tmp), "%s: left %s or its .tmp", what, p);
}

static void refusals(void)
{
    float x[2 * 3 * 2 * 2] = {0};
    int64_t shape[2] = {3, 4}, neg[2] = {3, -1};
    char p[1024], missing[1024];
    path_of(p, sizeof p, "refused", ".png");
    refused(rt_png_grid_write(p, x, 2, 2, 2, 2, 8), EINVAL, p, "C 2");
    refused(rt_png_grid_write(p, x, 0, 1, 2, 2, 8), EINVAL, p, "n 0");
    refused(rt_png_grid_write(p, x, 2, 1, 0, 2, 8), EINVAL, p, "H 0");
    refused(rt_png_grid_write(p, x, 2, 1, 2, 2, 0), EINVAL, p, "nrow 0");
    refused(rt_png_grid_write(p, NULL, 2, 1, 2, 2, 8), EINVAL, p, "no values");
    refused(rt_png_grid_write(p, x, 3, 1, 1 << 30, 1 << 30, 1), EFBIG, p, "2^30 x 2^30 images");
    path_of(p, sizeof p, "refused", ".npy");
    refused(rt_npy_write_f32(p, x, 2, 8, shape), EINVAL, p, "rank 8");
    refused(rt_npy_write_f32(p, x, 2, 2, neg), EINVAL, p, "a negative dimension");
    refused(rt_npy_write_f32(p, x, -1, 2, shape), EINVAL, p, "n -1");
    path_of(missing, sizeof missing, "no/such/folder", ".npy");
    refused(rt_npy_write_f32(missing, x, 2, 2, shape), ENOENT, missing, "a missing folder (npy)");
    path_of(missing, sizeof missing, "no/such/folder", ".png");
    refused(rt_png_grid_write(missing, x, 2, 3, 2, 2, 8), ENOENT, missing,
            "a missing folder (png)");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_image DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    char p[1024];
    path_of(p, sizeof p, "cases", ".txt");
    cases = fopen(p, "w");
    if (!cases) {
        perror(p);
        return 1;
    }
    /* n not a multiple of nrow (the last row part padding), gray and RGB */
    random_case("gray", 7, 1, 5, 4, 3, -1.5f, 4.0f);
    random_case("rgb", 5, 3, 3, 6, 2, 0.25f, 0.5f);
    /* one column; nrow above n (ncol = n); wide values */
    random_case("column", 3, 1, 2, 3, 1, -1e30f, 3e30f);
    random_case("one_row", 4, 3, 4, 2, 8, -7.0f, 1e-3f);
    /* constant batches: hi - lo below 1e-5, every value 0 */
    random_case("const", 4, 1, 3, 3, 8, 0.7f, 0);
    random_case("const_rgb", 3, 3, 2, 2, 2, -2.0f, 0);
    /* a batch of one: the image without padding; with H*(1+W) = 65535 and 131070 the
     * scanlines fill one and two stored blocks exactly */
    random_case("one", 1, 3, 4, 5, 8, 0, 1);
    random_case("block1", 1, 1, 255, 256, 8, 0, 1);
    random_case("block2", 1, 1, 510, 256, 8, 0, 1);
    /* 65536 bytes: a full block, then one of a single byte (the last) */
    random_case("block_plus1", 1, 1, 256, 255, 8, 0, 1);
    /* 130 rows of 583 bytes: a full block and part of a second */
    random_case("big", 20, 3, 30, 30, 6, -1, 2);
    /* bytes all 255 but the first: the Adler-32's sums as large as they get between
     * two reductions */
    white_case();
    /* a NaN makes torch's min and max NaN: every pixel 0 */
    float nan4[8] = {0.5f, 1, NAN, 2, -1, 3, 4, 5};
    png_case("nan", nan4, 2, 1, 2, 2, 2);
    /* .npy headers: rank 0 samples ((n,)), rank 1, rank 7, none */
    npy_case("npy_scalar", 4, 0, NULL);
    npy_case("npy_vec", 3, 1, (const int64_t[]){5});
    npy_case("npy_rank7", 2, 7, (const int64_t[]){1, 2, 1, 3, 1, 2, 1});
    npy_case("npy_empty", 0, 2, (const int64_t[]){3, 4});
    CHECK(fclose(cases) == 0, "%s: %s", p, strerror(errno));
    refusals();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("test_image: the cases written to %s; refusals ok\n", dir);
    return 0;
}
