/* data.cuh: a batch assembled on the GPU from a dataset kept in GPU memory
 * (loader.on_gpu): the loader sends only the batch's sample indices, and each input's
 * rows are gathered here, bytes as they are (the dataset is stored in the model's
 * input dtypes). The twin of rt_npy_gather (runtime/data.c); with loader.augment the
 * training images are cropped and flipped on the way (rt_gather_augment), with
 * loader.mask a masked LM's gathered rows are masked (rt_mask_tokens). */

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
