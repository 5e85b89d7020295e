/* augment.c: loader.augment's transform: an image cropped from its zero-padded self and
 * mirrored (rt_augment_image), and a batch of them gathered from a dataset held whole,
 * each with its own draw (rt_gather_augment, the twin of templates/cuda/data.cuh's
 * kernel). The draws themselves are rt.h's rt_aug_bits and rt_aug_draw; the CPU
 * loader (data.c) applies them to the rows it has just gathered. */
#include <string.h>
#include "rt.h"

void rt_augment_image(const void *src, void *dst, int64_t C, int64_t H, int64_t W, int elem,
                      int64_t pad, int64_t top, int64_t left, int flip)
{
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < H; y++) {
            int64_t sy = y + top - pad;
            for (int64_t x = 0; x < W; x++) {
                int64_t sx = (flip ? W - 1 - x : x) + left - pad;
                unsigned char *o = d + ((c * H + y) * W + x) * elem;
                if (sy < 0 || sy >= H || sx < 0 || sx >= W)
                    memset(o, 0, (size_t)elem);
                else
                    memcpy(o, s + ((c * H + sy) * W + sx) * elem, (size_t)elem);
            }
        }
}

void rt_gather_augment(const void *data, const int32_t *idx, void *dst, int64_t rows,
                       int64_t C, int64_t H, int64_t W, int elem, int64_t pad, int hflip,
                       uint64_t seed, int64_t epoch)
{
    size_t rb = (size_t)(C * H * W * elem);
    for (int64_t r = 0; r < rows; r++) {
        int64_t top, left;
        int flip;
        rt_aug_draw(rt_aug_bits(seed, epoch, idx[r]), pad, hflip, &top, &left, &flip);
        rt_augment_image((const unsigned char *)data + (size_t)idx[r] * rb,
                         (unsigned char *)dst + (size_t)r * rb, C, H, W, elem, pad, top, left,
                         flip);
    }
}
