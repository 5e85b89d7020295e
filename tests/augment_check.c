/* augment_check.c: loader.augment's draws and transform, written out for
 * tests/augment.py to compare against PyTorch's RandomCrop(padding) and
 * RandomHorizontalFlip at the same offsets.
 *
 * Usage: augment_check IMAGES N C H W ELEM PAD HFLIP SEED EPOCH OUT_IMAGES OUT_DRAWS
 *                      [SMIN SMAX R0 R1]
 * IMAGES holds N raw images [C, H, W] of ELEM-byte values. Every image r is augmented
 * as sample r of epoch EPOCH (rt_gather_augment, the loader's and the GPU's twin) into
 * OUT_IMAGES; OUT_DRAWS gets int64 (top, left, flip) a sample (rt_aug_draw). With the
 * last four (random_resized_crop's scale and ratio ranges; u8 images, PAD 0) the
 * transform is rt_gather_resized_crop's and a draw (top, left, h, w, flip). */
#include <stdio.h>
#include <stdlib.h>
#include "rt.h"

static void *slurp(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    void *p = malloc(n ? n : 1);
    if (!f || !p || fread(p, 1, n, f) != n) {
        fprintf(stderr, "augment_check: cannot read %zu bytes of %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return p;
}

static void spill(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "augment_check: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 13 && argc != 17) {
        fprintf(stderr, "usage: augment_check IMAGES N C H W ELEM PAD HFLIP SEED EPOCH "
                        "OUT_IMAGES OUT_DRAWS [SMIN SMAX R0 R1]\n");
        return 2;
    }
    int64_t n = atoll(argv[2]), C = atoll(argv[3]), H = atoll(argv[4]), W = atoll(argv[5]);
    int elem = atoi(argv[6]), hflip = atoi(argv[8]), rrc = argc == 17;
    int64_t pad = atoll(argv[7]), epoch = atoll(argv[10]), per = rrc ? 5 : 3;
    uint64_t seed = strtoull(argv[9], NULL, 10);
    size_t bytes = (size_t)(n * C * H * W * elem);
    void *src = slurp(argv[1], bytes), *dst = malloc(bytes ? bytes : 1);
    int32_t *idx = malloc((size_t)n * sizeof *idx);
    int64_t *draws = malloc((size_t)(n * per) * sizeof *draws);
    rt_train_config c = {.rrc_smin = rrc ? atof(argv[13]) : 0, .rrc_smax = rrc ? atof(argv[14]) : 0,
                         .rrc_r0 = rrc ? atof(argv[15]) : 1, .rrc_r1 = rrc ? atof(argv[16]) : 1};
    rt_rrc k = rt_rrc_of(&c);
    for (int64_t r = 0; r < n; r++) {
        idx[r] = (int32_t)r;
        int flip;
        uint64_t bits = rt_aug_bits(seed, epoch, r);
        rt_aug_draw(bits, pad, hflip, &draws[per * r], &draws[per * r + 1], &flip);
        if (rrc)
            rt_rrc_box(&k, bits, H, W, &draws[per * r]);
        draws[per * r + per - 1] = flip;
    }
    if (rrc)
        rt_gather_resized_crop(src, idx, dst, n, C, H, W, &k, hflip, seed, epoch);
    else
        rt_gather_augment(src, idx, dst, n, C, H, W, elem, pad, hflip, seed, epoch);
    spill(argv[11], dst, bytes);
    spill(argv[12], draws, (size_t)(n * per) * sizeof *draws);
    free(src), free(dst), free(idx), free(draws);
    return 0;
}
