/* augment.c: the loader's transforms of training rows. loader.augment's: an image
 * cropped from its zero-padded self and mirrored (rt_augment_image), and a batch of them
 * gathered from a dataset held whole, each with its own draw (rt_gather_augment, the
 * twin of templates/cuda/data.cuh's kernel). loader.mask's: a masked LM's rows masked
 * (rt_mask_rows, the twin of data.cuh's rt_mask_tokens). The draws themselves are
 * rt.h's rt_aug_bits, rt_aug_draw and rt_mask_draw; the CPU loader (data.c) applies
 * them to the rows it has just gathered. */
#include <math.h>
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

/* A share of 2^24, rounded: 0 .. 2^24 */
static uint32_t share24(double p)
{
    double v = nearbyint(p * 16777216.0);
    return (uint32_t)(v < 0 ? 0 : v > 16777216.0 ? 16777216.0 : v);
}

rt_mask_rule rt_mask_rule_of(const rt_train_config *c, int32_t ignore, int64_t vocab)
{
    return (rt_mask_rule){.token = (int32_t)c->mask_token, .ignore = ignore, .vocab = vocab,
                          .choose = share24(c->mask_prob), .masked = share24(c->mask_replace),
                          .swapped = share24(c->mask_replace + c->mask_random),
                          .seed = c->seed};
}

void rt_mask_rows(int32_t *x, int32_t *y, const int64_t *idx, int64_t rows, int64_t T,
                  const rt_mask_rule *k, int64_t epoch)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < T; i++)
            x[r * T + i] = rt_mask_draw(k, epoch, idx[r], T, i, x[r * T + i], &y[r * T + i]);
}
