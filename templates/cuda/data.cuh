/* data.cuh: a batch assembled on the GPU from a dataset kept in GPU memory
 * (loader.on_gpu): the loader sends only the batch's sample indices, and each input's
 * rows are gathered here, bytes as they are (the dataset is stored in the model's
 * input dtypes). The twin of rt_npy_gather (runtime/data.c). */

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
