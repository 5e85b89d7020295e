/* augment.c: the loader's transforms of training rows. loader.augment's: an image
 * cropped from its zero-padded self and mirrored (rt_augment_image), and a batch of them
 * gathered from a dataset held whole, each with its own draw (rt_gather_augment, the
 * twin of templates/cuda/data.cuh's kernel); random_resized_crop's box (rt_rrc_box) and
 * its resampling as Pillow's (rt_resized_crop, rt_gather_resized_crop). loader.mask's: a masked LM's rows masked
 * (rt_mask_rows, the twin of data.cuh's rt_mask_tokens). The draws themselves are
 * rt.h's rt_aug_bits, rt_aug_draw and rt_mask_draw; the CPU loader (data.c) applies
 * them to the rows it has just gathered. */
#include <math.h>
#include <stdlib.h>
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

rt_rrc rt_rrc_of(const rt_train_config *c)
{
    return (rt_rrc){.smin = c->rrc_smin, .smax = c->rrc_smax, .r0 = c->rrc_r0, .r1 = c->rrc_r1,
                    .lr0 = log(c->rrc_r0), .lr1 = log(c->rrc_r1)};
}

/* e^x by +, * and / alone, so data.cuh's twin rounds each step alike: x / 2^10, its
 * Taylor series to the 12th power, squared 10 times (|x| <= 7: relative error below
 * 1e-13) */
static double exp_plain(double x)
{
    double y = x / 1024.0, term = 1.0, sum = 1.0;
    for (int n = 1; n <= 12; n++) {
        term = term * y / (double)n;
        sum = sum + term;
    }
    for (int i = 0; i < 10; i++)
        sum = sum * sum;
    return sum;
}

static double unit53(uint64_t b) { return (double)(b >> 11) * 0x1p-53; }

void rt_rrc_box(const rt_rrc *k, uint64_t bits, int64_t H, int64_t W, int64_t box[4])
{
    const double area = (double)H * (double)W;
    for (uint64_t t = 0; t < 10; t++) {
        uint64_t b1 = rt_mix64(bits ^ (2 * t + 1) * 0x9E3779B97F4A7C15ull);
        uint64_t b2 = rt_mix64(bits ^ (2 * t + 2) * 0x9E3779B97F4A7C15ull);
        double target = area * (k->smin + unit53(b1) * (k->smax - k->smin));
        double ratio = exp_plain(k->lr0 + unit53(b2) * (k->lr1 - k->lr0));
        double w = nearbyint(sqrt(target * ratio)), h = nearbyint(sqrt(target / ratio));
        if (w > 0 && w <= (double)W && h > 0 && h <= (double)H) {
            box[2] = (int64_t)h, box[3] = (int64_t)w;
            box[0] = (int64_t)((uint32_t)rt_mix64(b1) % (uint64_t)(H - box[2] + 1));
            box[1] = (int64_t)((uint32_t)rt_mix64(b2) % (uint64_t)(W - box[3] + 1));
            return;
        }
    }
    double in = (double)W / (double)H;   /* ten misses: torchvision's central fallback */
    box[2] = H, box[3] = W;
    if (in < k->r0)
        box[2] = (int64_t)nearbyint((double)W / k->r0);
    else if (in > k->r1)
        box[3] = (int64_t)nearbyint((double)H * k->r1);
    box[0] = (H - box[2]) / 2, box[1] = (W - box[3]) / 2;
}

/* Pillow's bilinear coefficients for output place `o` of `out` from `in` <= out inputs
 * (an enlargement: support 1, at most 3 taps): the first input, the count, and the
 * weights in its fixed point (22 bits), as its precompute_coeffs and
 * normalize_coeffs_8bpc compute them */
typedef struct {
    int64_t lo;
    int n;
    int32_t k[3];
} Taps;

static Taps rrc_taps(int64_t o, int64_t in, int64_t out)
{
    Taps t;
    double scale = (double)in / (double)out, center = ((double)o + 0.5) * scale, w[3], ww = 0;
    int64_t hi = (int64_t)(center + 1.0 + 0.5);
    t.lo = (int64_t)(center - 1.0 + 0.5);
    t.lo = t.lo < 0 ? 0 : t.lo;
    t.n = (int)((hi > in ? in : hi) - t.lo);
    for (int j = 0; j < t.n; j++) {
        double x = fabs((double)(j + t.lo) - center + 0.5);
        w[j] = x < 1.0 ? 1.0 - x : 0.0;
        ww += w[j];
    }
    for (int j = 0; j < 3; j++)
        t.k[j] = j < t.n && ww != 0.0 ? (int32_t)(0.5 + w[j] / ww * 4194304.0) : 0;
    return t;
}

static unsigned char clip22(int32_t v)
{
    int32_t s = v >> 22;
    return (unsigned char)(s < 0 ? 0 : s > 255 ? 255 : s);
}

void rt_resized_crop(const unsigned char *src, unsigned char *dst, int64_t C, int64_t H,
                     int64_t W, const int64_t box[4], int flip)
{
    /* each output column's and row's taps once; the horizontal pass once a box row, into
     * mid [h, W] (8 bits, as Pillow keeps it), then the vertical pass from it */
    Taps *tx = rt_xmalloc((size_t)(W + H) * sizeof *tx), *ty = tx + W;
    unsigned char *mid = rt_xmalloc((size_t)(box[2] * W));
    for (int64_t x = 0; x < W; x++)
        tx[x] = rrc_taps(flip ? W - 1 - x : x, box[3], W);
    for (int64_t y = 0; y < H; y++)
        ty[y] = rrc_taps(y, box[2], H);
    for (int64_t c = 0; c < C; c++) {
        for (int64_t r = 0; r < box[2]; r++) {
            const unsigned char *row = src + (c * H + box[0] + r) * W + box[1];
            for (int64_t x = 0; x < W; x++) {
                int32_t h = 1 << 21;
                for (int j = 0; j < tx[x].n; j++)
                    h += row[tx[x].lo + j] * tx[x].k[j];
                mid[r * W + x] = clip22(h);
            }
        }
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                int32_t v = 1 << 21;
                for (int i = 0; i < ty[y].n; i++)
                    v += mid[(ty[y].lo + i) * W + x] * ty[y].k[i];
                dst[(c * H + y) * W + x] = clip22(v);
            }
    }
    free(tx);
    free(mid);
}

void rt_gather_resized_crop(const unsigned char *data, const int32_t *idx, unsigned char *dst,
                            int64_t rows, int64_t C, int64_t H, int64_t W, const rt_rrc *k,
                            int hflip, uint64_t seed, int64_t epoch)
{
    size_t rb = (size_t)(C * H * W);
    for (int64_t r = 0; r < rows; r++) {
        uint64_t bits = rt_aug_bits(seed, epoch, idx[r]);
        int64_t box[4];
        rt_rrc_box(k, bits, H, W, box);
        rt_resized_crop(data + (size_t)idx[r] * rb, dst + (size_t)r * rb, C, H, W, box,
                        hflip && (bits >> 63));
    }
}

rt_jitter rt_jitter_of(const rt_train_config *c)
{
    return (rt_jitter){{c->jitter[0], c->jitter[1], c->jitter[2], c->jitter[3]}};
}

void rt_jitter_draw_of(const rt_jitter *k, uint64_t bits, rt_jitter_draw *d)
{
    uint64_t b = rt_mix64(bits ^ 0x6A09E667F3BCC909ull);
    int left[4] = {0, 1, 2, 3}, code = (int)(b % 24), fact[4] = {6, 2, 1, 1};
    for (int i = 0; i < 4; i++) {   /* permutation number `code`, lexicographically */
        int j = code / fact[i];
        code %= fact[i];
        d->order[i] = left[j];
        for (int m = j; m < 3 - i; m++)
            left[m] = left[m + 1];
    }
    for (int i = 0; i < 4; i++) {
        double v = k->v[i], lo = i == 3 ? -v : v < 1.0 ? 1.0 - v : 0.0, hi = i == 3 ? v : 1.0 + v;
        double u = unit53(rt_mix64(b ^ (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull));
        d->f[i] = v > 0 ? (float)(lo + u * (hi - lo)) : i == 3 ? 0.0f : 1.0f;
    }
}

/* Pillow's Image.blend(D, x, f) of one value: D + f (x - D) in float, truncated, clipped */
static unsigned char blend(int dg, int x, float f)
{
    float t = (float)dg + f * (float)(x - dg);
    return t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
}

/* Pillow's L of pixel p of a [C, H, W] image (C 1 or 3), n = H W */
static int luma(const unsigned char *img, int64_t C, int64_t n, int64_t p)
{
    if (C == 1)
        return img[p];
    return (img[p] * 19595 + img[n + p] * 38470 + img[2 * n + p] * 7471 + 0x8000) >> 16;
}

static int clip8(int v) { return v < 0 ? 0 : v > 255 ? 255 : v; }

/* Pillow's rgb2hsv_row: its float and double steps as they are */
static void rgb_to_hsv(const int rgb[3], int hsv[3])
{
    int r = rgb[0], g = rgb[1], b = rgb[2];
    int maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
    int minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
    hsv[2] = maxc;
    if (minc == maxc) {
        hsv[0] = hsv[1] = 0;
        return;
    }
    float cr = (float)(maxc - minc), s = cr / (float)maxc;
    float rc = (float)(maxc - r) / cr, gc = (float)(maxc - g) / cr, bc = (float)(maxc - b) / cr;
    float h = r == maxc ? bc - gc : g == maxc ? (float)(2.0 + rc - bc) : (float)(4.0 + gc - rc);
    h = (float)fmod(h / 6.0 + 1.0, 1.0);
    hsv[0] = clip8((int)(h * 255.0));
    hsv[1] = clip8((int)(s * 255.0));
}

/* Pillow's hsv2rgb */
static void hsv_to_rgb(const int hsv[3], int rgb[3])
{
    int h = hsv[0], s = hsv[1], v = hsv[2];
    if (s == 0) {
        rgb[0] = rgb[1] = rgb[2] = v;
        return;
    }
    int i = (int)floor((float)h * 6.0 / 255.0);
    float f = (float)((float)h * 6.0 / 255.0 - (float)i), fs = (float)((float)s / 255.0);
    int p = clip8((int)round((float)v * (1.0 - fs)));
    int q = clip8((int)round((float)v * (1.0 - fs * f)));
    int t = clip8((int)round((float)v * (1.0 - fs * (1.0 - f))));
    static const int pick[6][3] = {{3, 2, 0}, {1, 3, 0}, {0, 3, 2}, {0, 1, 3}, {2, 0, 3}, {3, 0, 1}};
    const int val[4] = {p, q, t, v};   /* (the table's 0 p, 1 q, 2 t, 3 v) */
    for (int c = 0; c < 3; c++)
        rgb[c] = val[pick[i % 6][c]];
}

/* torchvision's adjust_hue of pixel p of an RGB [3, H, W] image by `shift` */
static void hue_pixel(unsigned char *img, int64_t n, int64_t p, int shift)
{
    int rgb[3] = {img[p], img[n + p], img[2 * n + p]}, hsv[3];
    rgb_to_hsv(rgb, hsv);
    hsv[0] = (hsv[0] + shift) & 255;
    hsv_to_rgb(hsv, rgb);
    for (int c = 0; c < 3; c++)
        img[c * n + p] = (unsigned char)rgb[c];
}

void rt_color_jitter(unsigned char *img, int64_t C, int64_t H, int64_t W, const rt_jitter *k,
                     const rt_jitter_draw *d)
{
    const int64_t n = H * W;
    for (int s = 0; s < 4; s++) {
        const int step = d->order[s];
        const float f = d->f[step];
        if (k->v[step] <= 0 || (step >= 2 && C == 1))
            continue;   /* (one channel's saturation and hue: nothing) */
        if (step == 3) {   /* numpy's uint8 of f x 255: truncated, wrapped */
            int shift = (int)(uint8_t)(int64_t)((double)f * 255.0);
            for (int64_t p = 0; p < n; p++)
                hue_pixel(img, n, p, shift);
            continue;
        }
        int mean = 0;
        if (step == 1) {   /* ImageStat's mean of the L image, rounded */
            double sum = 0;
            for (int64_t p = 0; p < n; p++)
                sum += luma(img, C, n, p);
            mean = (int)(sum / (double)n + 0.5);
        }
        for (int64_t p = 0; p < n; p++) {
            int dg = step == 0 ? 0 : step == 1 ? mean : luma(img, C, n, p);
            for (int64_t c = 0; c < C; c++)
                img[c * n + p] = blend(dg, img[c * n + p], f);
        }
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
