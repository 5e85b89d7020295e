/* augment_check.c: loader.augment's draws and transform, written out for
 * tests/augment.py to compare against PyTorch's RandomCrop(padding) and
 * RandomHorizontalFlip at the same offsets.
 *
 * Usage: augment_check IMAGES N C H W ELEM PAD HFLIP SEED EPOCH OUT_IMAGES OUT_DRAWS
 *                      [rrc SMIN SMAX R0 R1] [jitter B C S H]
 * IMAGES holds N raw images [C, H, W] of ELEM-byte values. Every image r is augmented
 * as sample r of epoch EPOCH (rt_gather_augment, the loader's and the GPU's twin) into
 * OUT_IMAGES; OUT_DRAWS gets int64 (top, left, flip) a sample (rt_aug_draw). With rrc
 * (random_resized_crop's scale and ratio ranges; u8 images, PAD 0) the transform is
 * rt_gather_resized_crop's and a draw (top, left, h, w, flip); with jitter (color_jitter's
 * brightness, contrast, saturation and hue; u8 images) each image is then jittered
 * (rt_color_jitter) and its draw gets the order (4 values) and the factors (4 floats'
 * bits) too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int rrc = 0, jit = 0, bad = argc < 13;
    for (int i = 13; i < argc && !bad;) {
        if (!strcmp(argv[i], "rrc") && i + 4 < argc)
            rrc = i, i += 5;
        else if (!strcmp(argv[i], "jitter") && i + 4 < argc)
            jit = i, i += 5;
        else
            bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: augment_check IMAGES N C H W ELEM PAD HFLIP SEED EPOCH "
                        "OUT_IMAGES OUT_DRAWS [rrc SMIN SMAX R0 R1] [jitter B C S H]\n");
        return 2;
    }
    int64_t n = atoll(argv[2]), C = atoll(argv[3]), H = atoll(argv[4]), W = atoll(argv[5]);
    int elem = atoi(argv[6]), hflip = atoi(argv[8]);
    int64_t pad = atoll(argv[7]), epoch = atoll(argv[10]), per = (rrc ? 5 : 3) + (jit ? 8 : 0);
    uint64_t seed = strtoull(argv[9], NULL, 10);
    size_t bytes = (size_t)(n * C * H * W * elem), img = bytes / (size_t)(n ? n : 1);
    unsigned char *src = slurp(argv[1], bytes), *dst = malloc(bytes ? bytes : 1);
    int32_t *idx = malloc((size_t)n * sizeof *idx);
    int64_t *draws = malloc((size_t)(n * per) * sizeof *draws);
    rt_train_config c = {.rrc_r0 = 1, .rrc_r1 = 1};
    if (rrc)
        c.rrc_smin = atof(argv[rrc + 1]), c.rrc_smax = atof(argv[rrc + 2]),
        c.rrc_r0 = atof(argv[rrc + 3]), c.rrc_r1 = atof(argv[rrc + 4]);
    for (int j = 0; jit && j < 4; j++)
        c.jitter[j] = atof(argv[jit + 1 + j]);
    rt_rrc k = rt_rrc_of(&c);
    rt_jitter kj = rt_jitter_of(&c);
    for (int64_t r = 0; r < n; r++) {
        idx[r] = (int32_t)r;
        int flip, base = rrc ? 5 : 3;
        uint64_t bits = rt_aug_bits(seed, epoch, r);
        int64_t *d = draws + per * r;
        rt_aug_draw(bits, pad, hflip, &d[0], &d[1], &flip);
        if (rrc)
            rt_rrc_box(&k, bits, H, W, d);
        d[base - 1] = flip;
        if (jit) {
            rt_jitter_draw jd;
            rt_jitter_draw_of(&kj, bits, &jd);
            for (int j = 0; j < 4; j++) {
                uint32_t fb;
                memcpy(&fb, &jd.f[j], 4);
                d[base + j] = jd.order[j], d[base + 4 + j] = fb;
            }
        }
    }
    if (rrc)
        rt_gather_resized_crop(src, idx, dst, n, C, H, W, &k, hflip, seed, epoch);
    else
        rt_gather_augment(src, idx, dst, n, C, H, W, elem, pad, hflip, seed, epoch);
    for (int64_t r = 0; jit && r < n; r++) {
        rt_jitter_draw jd;
        rt_jitter_draw_of(&kj, rt_aug_bits(seed, epoch, r), &jd);
        rt_color_jitter(dst + (size_t)r * img, C, H, W, &kj, &jd);
    }
    spill(argv[11], dst, bytes);
    spill(argv[12], draws, (size_t)(n * per) * sizeof *draws);
    free(src), free(dst), free(idx), free(draws);
    return 0;
}
