/* data.cuh: a batch assembled on the GPU from a dataset kept in GPU memory
 * (loader.on_gpu): the loader sends only the batch's sample indices, and each input's
 * rows are gathered here, bytes as they are (the dataset is stored in the model's
 * input dtypes). The twin of rt_npy_gather (runtime/data.c); with loader.augment the
 * training images are cropped and flipped on the way (rt_gather_augment), or
 * resized-cropped (rt_gather_resized_crop), with loader.mask a masked LM's gathered rows
 * are masked (rt_mask_tokens). */

/* Launch: grid-stride, 256 threads.
 *   dst[r, :] = src[idx[r], :]   for r in [0, rows), row_bytes bytes a row
 * 16-byte moves when the row length and both bases allow, else 4-byte, else bytes. */
extern "C" __global__ void __launch_bounds__(256)
rt_gather_rows(const unsigned char *src, const int *idx, unsigned char *dst, int64_t rows,
               int64_t row_bytes)
{
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (row_bytes % 16 == 0 && rt_aligned16(src) && rt_aligned16(dst)) {
        const int64_t words = row_bytes / 16;
        for (int64_t i = first; i < rows * words; i += stride) {
            const int64_t r = i / words, w = i % words;
            ((float4 *)dst)[i] = ((const float4 *)(src + (int64_t)idx[r] * row_bytes))[w];
        }
    } else if (row_bytes % 4 == 0 && ((unsigned long long)src & 3) == 0 &&
               ((unsigned long long)dst & 3) == 0) {
        const int64_t words = row_bytes / 4;
        for (int64_t i = first; i < rows * words; i += stride) {
            const int64_t r = i / words, w = i % words;
            ((unsigned *)dst)[i] = ((const unsigned *)(src + (int64_t)idx[r] * row_bytes))[w];
        }
    } else {
        for (int64_t i = first; i < rows * row_bytes; i += stride) {
            const int64_t r = i / row_bytes, w = i % row_bytes;
            dst[i] = src[(int64_t)idx[r] * row_bytes + w];
        }
    }
}

/* loader.augment: the twins of rt_aug_bits and rt_aug_draw (runtime/rt.h) and of
 * data.c's rt_gather_augment. Sample `index` of epoch `epoch` draws 64 bits from
 * (seed, epoch, index): the crop's top and left offsets into the image padded by `pad`
 * zeros, each in [0, 2 pad], and the flip (with hflip). */
__device__ __forceinline__ uint64_t rt_mix64(uint64_t z)   /* splitmix64's finalizer */
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ uint64_t rt_aug_bits(uint64_t seed, int64_t epoch, int64_t index)
{
    uint64_t z = seed ^ 0x5851F42D4C957F2Dull;
    for (int r = 0; r < 2; r++)
        z = rt_mix64(z ^ (r ? (uint64_t)index : (uint64_t)epoch) * 0x9E3779B97F4A7C15ull);
    return z;
}

/* Launch: grid-stride over rows*C*H*W values, 256 threads.
 *   dst[r, c, y, x] = data[idx[r], c, y + top - pad, sx + left - pad], sx = W - 1 - x when
 *   flipped, else x; 0 outside the image (torchvision's RandomCrop(padding=pad) at (top,
 *   left), then RandomHorizontalFlip); values of `elem` bytes (1, 2 or 4) moved as they are */
extern "C" __global__ void __launch_bounds__(256)
rt_gather_augment(const unsigned char *data, const int *idx, unsigned char *dst, int64_t rows,
                  int64_t C, int64_t H, int64_t W, int64_t elem, int64_t pad, int hflip,
                  uint64_t seed, int64_t epoch)
{
    const int64_t img = C * H * W, n = rows * img;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / img, q = i - r * img, x = q % W, y = q / W % H, c = q / (H * W);
        const uint64_t bits = rt_aug_bits(seed, epoch, idx[r]);
        const int64_t top = (int64_t)((unsigned)bits % (uint64_t)(2 * pad + 1));
        const int64_t left = (int64_t)((unsigned)(bits >> 32) % (uint64_t)(2 * pad + 1));
        const bool flip = hflip && (bits >> 63);
        const int64_t sy = y + top - pad, sx = (flip ? W - 1 - x : x) + left - pad;
        const bool in = sy >= 0 && sy < H && sx >= 0 && sx < W;
        const int64_t at = (int64_t)idx[r] * img + (c * H + sy) * W + sx;
        if (elem == 1)
            dst[i] = in ? data[at] : 0;
        else if (elem == 2)
            ((unsigned short *)dst)[i] = in ? ((const unsigned short *)data)[at] : 0;
        else
            ((unsigned *)dst)[i] = in ? ((const unsigned *)data)[at] : 0u;
    }
}

/* loader.augment.random_resized_crop: the twins of augment.c's rt_rrc_box, its taps and
 * rt_resized_crop, every product and sum rounded as the host's (__dmul_rn, __dadd_rn: no
 * contraction into FMAs), so a box and its weights come out bit for bit alike. */
__device__ __forceinline__ double rt_exp_plain(double x)   /* e^x: +, x and / alone */
{
    double y = x / 1024.0, term = 1.0, sum = 1.0;
    for (int n = 1; n <= 12; n++) {
        term = __dmul_rn(term, y) / (double)n;
        sum = __dadd_rn(sum, term);
    }
    for (int i = 0; i < 10; i++)
        sum = __dmul_rn(sum, sum);
    return sum;
}

__device__ __forceinline__ double rt_unit53(uint64_t b) { return (double)(b >> 11) * 0x1p-53; }

/* box: top, left, h, w of sample `bits`' crop of an H x W image */
__device__ void rt_rrc_box(uint64_t bits, int64_t H, int64_t W, double smin, double smax,
                           double r0, double r1, double lr0, double lr1, int64_t box[4])
{
    const double area = __dmul_rn((double)H, (double)W);
    for (uint64_t t = 0; t < 10; t++) {
        const uint64_t b1 = rt_mix64(bits ^ (2 * t + 1) * 0x9E3779B97F4A7C15ull);
        const uint64_t b2 = rt_mix64(bits ^ (2 * t + 2) * 0x9E3779B97F4A7C15ull);
        const double target = __dmul_rn(area, __dadd_rn(smin, __dmul_rn(rt_unit53(b1), smax - smin)));
        const double ratio = rt_exp_plain(__dadd_rn(lr0, __dmul_rn(rt_unit53(b2), lr1 - lr0)));
        const double w = rint(__dsqrt_rn(__dmul_rn(target, ratio))), h = rint(__dsqrt_rn(target / ratio));
        if (w > 0 && w <= (double)W && h > 0 && h <= (double)H) {
            box[2] = (int64_t)h, box[3] = (int64_t)w;
            box[0] = (int64_t)((unsigned)rt_mix64(b1) % (uint64_t)(H - box[2] + 1));
            box[1] = (int64_t)((unsigned)rt_mix64(b2) % (uint64_t)(W - box[3] + 1));
            return;
        }
    }
    const double in = (double)W / (double)H;
    box[2] = H, box[3] = W;
    if (in < r0)
        box[2] = (int64_t)rint((double)W / r0);
    else if (in > r1)
        box[3] = (int64_t)rint(__dmul_rn((double)H, r1));
    box[0] = (H - box[2]) / 2, box[1] = (W - box[3]) / 2;
}

/* Pillow's bilinear taps of output place o of `out` from `in` <= out: the first input
 * (*lo), the count (returned) and the 22-bit fixed-point weights */
__device__ __forceinline__ int rt_rrc_taps(int64_t o, int64_t in, int64_t out, int64_t *lo, int k[3])
{
    const double scale = (double)in / (double)out, center = __dmul_rn((double)o + 0.5, scale);
    const int64_t hi = (int64_t)(center + 1.0 + 0.5);
    int64_t l = (int64_t)(center - 1.0 + 0.5);
    l = l < 0 ? 0 : l;
    const int n = (int)((hi > in ? in : hi) - l);
    double w[3], ww = 0;
    for (int j = 0; j < n; j++) {
        const double x = fabs((double)(j + l) - center + 0.5);
        w[j] = x < 1.0 ? 1.0 - x : 0.0;
        ww += w[j];
    }
    for (int j = 0; j < 3; j++)
        k[j] = j < n && ww != 0.0 ? (int)__dadd_rn(0.5, __dmul_rn(w[j] / ww, 4194304.0)) : 0;
    *lo = l;
    return n;
}

__device__ __forceinline__ int rt_clip22(int v)
{
    const int s = v >> 22;
    return s < 0 ? 0 : s > 255 ? 255 : s;
}

/* Launch: a block of 256 threads an image, rows blocks (the box drawn once an image).
 *   dst[r, c, y, x] = the box of data[idx[r]] (rt_rrc_box's, from the sample's bits)
 *   resized to H x W as Pillow's bilinear (the horizontal pass first, each rounded to 8
 *   bits), x mirrored when flipped (hflip and the bits' top bit) */
extern "C" __global__ void __launch_bounds__(256)
rt_gather_resized_crop(const unsigned char *data, const int *idx, unsigned char *dst,
                       int64_t C, int64_t H, int64_t W, double smin, double smax, double r0,
                       double r1, double lr0, double lr1, int hflip, uint64_t seed,
                       int64_t epoch)
{
    __shared__ int64_t box[4];
    const int64_t img = C * H * W, r = blockIdx.x;
    const uint64_t bits = rt_aug_bits(seed, epoch, idx[r]);
    if (threadIdx.x == 0)
        rt_rrc_box(bits, H, W, smin, smax, r0, r1, lr0, lr1, box);
    __syncthreads();
    const bool flip = hflip && (bits >> 63);
    const unsigned char *image = data + (int64_t)idx[r] * img;
    for (int64_t q = threadIdx.x; q < img; q += blockDim.x) {
        const int64_t x = q % W, y = q / W % H, c = q / (H * W);
        int64_t ylo, xlo;
        int ky[3], kx[3];
        const int ny = rt_rrc_taps(y, box[2], H, &ylo, ky);
        const int nx = rt_rrc_taps(flip ? W - 1 - x : x, box[3], W, &xlo, kx);
        const unsigned char *src = image + c * H * W;
        int v = 1 << 21;
        for (int a = 0; a < ny; a++) {   /* each row through the horizontal pass */
            const unsigned char *row = src + (box[0] + ylo + a) * W + box[1] + xlo;
            int h = 1 << 21;
            for (int b = 0; b < nx; b++)
                h += row[b] * kx[b];
            v += rt_clip22(h) * ky[a];
        }
        dst[r * img + q] = (unsigned char)rt_clip22(v);
    }
}

/* loader.augment.color_jitter: the twin of augment.c's rt_jitter_draw_of and
 * rt_color_jitter (Pillow's ImageEnhance: D + f (x - D) in float, each product and sum
 * rounded alone, truncated and clipped). */
__device__ __forceinline__ unsigned char rt_blend(int dg, int x, float f)
{
    const float t = __fadd_rn((float)dg, __fmul_rn(f, (float)(x - dg)));
    return t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
}

__device__ __forceinline__ int rt_luma(const unsigned char *img, int64_t C, int64_t n, int64_t p)
{
    if (C == 1)
        return img[p];
    return (img[p] * 19595 + img[n + p] * 38470 + img[2 * n + p] * 7471 + 0x8000) >> 16;
}

__device__ __forceinline__ int rt_clip8(int v) { return v < 0 ? 0 : v > 255 ? 255 : v; }

/* Pillow's rgb2hsv_row and hsv2rgb, their float and double steps as they are (products
 * rounded alone) */
__device__ void rt_rgb_to_hsv(const int rgb[3], int hsv[3])
{
    const int r = rgb[0], g = rgb[1], b = rgb[2];
    const int maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
    const int minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
    hsv[2] = maxc;
    if (minc == maxc) {
        hsv[0] = hsv[1] = 0;
        return;
    }
    const float cr = (float)(maxc - minc), s = cr / (float)maxc;
    const float rc = (float)(maxc - r) / cr, gc = (float)(maxc - g) / cr, bc = (float)(maxc - b) / cr;
    float h = r == maxc ? bc - gc : g == maxc ? (float)(2.0 + rc - bc) : (float)(4.0 + gc - rc);
    h = (float)fmod(h / 6.0 + 1.0, 1.0);
    hsv[0] = rt_clip8((int)__dmul_rn(h, 255.0));
    hsv[1] = rt_clip8((int)__dmul_rn(s, 255.0));
}

__device__ void rt_hsv_to_rgb(const int hsv[3], int rgb[3])
{
    const int h = hsv[0], s = hsv[1], v = hsv[2];
    if (s == 0) {
        rgb[0] = rgb[1] = rgb[2] = v;
        return;
    }
    const int i = (int)floor(__dmul_rn((float)h, 6.0) / 255.0);
    const float f = (float)(__dmul_rn((float)h, 6.0) / 255.0 - (float)i);
    const float fs = (float)((float)s / 255.0);
    const int p = rt_clip8((int)round(__dmul_rn((float)v, 1.0 - fs)));
    const int q = rt_clip8((int)round(__dmul_rn((float)v, 1.0 - __fmul_rn(fs, f))));
    const int t = rt_clip8((int)round(__dmul_rn((float)v, 1.0 - __dmul_rn(fs, 1.0 - f))));
    const int pick[6][3] = {{3, 2, 0}, {1, 3, 0}, {0, 3, 2}, {0, 1, 3}, {2, 0, 3}, {3, 0, 1}};
    const int val[4] = {p, q, t, v};
    for (int c = 0; c < 3; c++)
        rgb[c] = val[pick[i % 6][c]];
}

/* Launch: a block of 256 threads an image, rows blocks.
 *   x[r] ([C, H, W] u8, C 1 or 3) through brightness, contrast, saturation and hue
 *   (factor 0: left out) in the order and with the factors sample idx[r]'s bits draw;
 *   contrast's degenerate value the block's sum of L (in a double: exact) over H W,
 *   rounded; hue by Pillow's HSV, H shifted by numpy's uint8 of f x 255 */
extern "C" __global__ void __launch_bounds__(256)
rt_color_jitter(unsigned char *x, const int *idx, int64_t C, int64_t H, int64_t W, double vb,
                double vc, double vs, double vh, uint64_t seed, int64_t epoch)
{
    const int64_t n = H * W, r = blockIdx.x;
    unsigned char *img = x + r * C * n;
    const uint64_t b = rt_mix64(rt_aug_bits(seed, epoch, idx[r]) ^ 0x6A09E667F3BCC909ull);
    const double v[4] = {vb, vc, vs, vh};
    int left[4] = {0, 1, 2, 3}, order[4], code = (int)(b % 24);
    const int fact[4] = {6, 2, 1, 1};
    for (int i = 0; i < 4; i++) {   /* permutation number `code`, lexicographically */
        const int j = code / fact[i];
        code %= fact[i];
        order[i] = left[j];
        for (int m = j; m < 3 - i; m++)
            left[m] = left[m + 1];
    }
    for (int s = 0; s < 4; s++) {
        const int step = order[s];
        if (v[step] <= 0 || (step >= 2 && C == 1))
            continue;
        const double lo = step == 3 ? -v[step] : v[step] < 1.0 ? 1.0 - v[step] : 0.0;
        const double hi = step == 3 ? v[step] : 1.0 + v[step];
        const double u = rt_unit53(rt_mix64(b ^ (uint64_t)(step + 1) * 0x9E3779B97F4A7C15ull));
        const float f = (float)__dadd_rn(lo, __dmul_rn(u, hi - lo));
        if (step == 3) {   /* numpy's uint8 of f x 255: truncated, wrapped */
            const int shift = (int)(unsigned char)(long long)__dmul_rn((double)f, 255.0);
            for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
                int rgb[3] = {img[p], img[n + p], img[2 * n + p]}, hsv[3];
                rt_rgb_to_hsv(rgb, hsv);
                hsv[0] = (hsv[0] + shift) & 255;
                rt_hsv_to_rgb(hsv, rgb);
                for (int c = 0; c < 3; c++)
                    img[c * n + p] = (unsigned char)rgb[c];
            }
            __syncthreads();
            continue;
        }
        int mean = 0;
        if (step == 1) {
            double mine = 0;
            for (int64_t p = threadIdx.x; p < n; p += blockDim.x)
                mine += rt_luma(img, C, n, p);
            mean = (int)(rt_block_sum(mine) / (double)n + 0.5);
        }
        for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
            const int dg = step == 0 ? 0 : step == 1 ? mean : rt_luma(img, C, n, p);
            for (int64_t c = 0; c < C; c++)
                img[c * n + p] = rt_blend(dg, img[c * n + p], f);
        }
        __syncthreads();
    }
}

/* loader.mask: the twins of rt.h's rt_mask_draw and augment.c's rt_mask_rows. Position
 * p of sample idx[r] of epoch `epoch` draws rt_aug_bits(seed ^ salt, epoch, idx[r] T + p):
 * bits 0..23 below `choose` keep its target (else ignore), bits 24..47 below `masked`
 * put the mask token in x, below `swapped` a random id in [0, vocab), else x stays.
 * Launch: grid-stride over rows*T positions, 256 threads; x and y [rows, T] in place. */
extern "C" __global__ void __launch_bounds__(256)
rt_mask_tokens(int *x, int *y, const int *idx, int64_t rows, int64_t T, int token, int ignore,
               int64_t vocab, unsigned choose, unsigned masked, unsigned swapped,
               uint64_t seed, int64_t epoch)
{
    const int64_t n = rows * T;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (y[i] == ignore)
            continue;
        const int64_t r = i / T, p = i - r * T;
        const uint64_t bits = rt_aug_bits(seed ^ 0x2545F4914F6CDD1Dull, epoch, idx[r] * T + p);
        if ((unsigned)(bits & 0xFFFFFF) >= choose) {
            y[i] = ignore;
            continue;
        }
        const unsigned c = (unsigned)(bits >> 24) & 0xFFFFFF;
        if (c < masked) {
            x[i] = token;
        } else if (c < swapped) {
            x[i] = (int)(((rt_mix64(bits) >> 32) * (uint64_t)vocab) >> 32);
        }
    }
}
