/* reduce.cuh: bias gradients, column and row sums added into a float vector (twins of
 * rt_colsum_add in runtime/kernels.c and rt_rowsum_add in runtime/optim.c). Each is
 * two launches: partial sums in double over fixed blocks of the matrix into scratch,
 * then one pass adding the partials in block order, so the bits depend on the shape
 * only. */

/* Launch: grid (ceil(cols / 32), nrb), block (32, 8); rows [by * rb, (by + 1) * rb).
 *   part[by, j] = sum over the block's rows of dy[r, j]     (double; part: [nrb, cols])
 * Thread (tx, ty) owns column bx * 32 + tx and every 8th row from ty; the 8 sums are
 * added in ty order. */
extern "C" __global__ void __launch_bounds__(256)
rt_colsum_part(const act_t *dy, double *part, int64_t rows, int64_t cols, int64_t rb)
{
    __shared__ double sh[8][32];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t j = (int64_t)blockIdx.x * 32 + tx;
    int64_t r0 = (int64_t)blockIdx.y * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
    double s = 0.0;
    if (j < cols)
        for (int64_t r = r0 + ty; r < r1; r += 8)
            s += (double)rt_ld(dy + r * cols + j);
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < cols) {
        for (int k = 1; k < 8; k++)
            s += sh[k][tx];
        part[blockIdx.y * cols + j] = s;
    }
}

/* Launch: grid (ceil(cols / 32)), block (32, 8).
 *   out[j] += (float) sum_b part[b, j]     (part: [nrb, cols])
 * Thread (tx, ty) adds the partials b = ty, ty + 8, ... of column bx * 32 + tx in
 * order (a warp reads 32 consecutive doubles), then the 8 sums are added in ty order:
 * a fixed order, so the bits depend on the shape only. (One thread a column adding
 * all nrb partials in a chain took 17.6 us for GPT-2's 768 columns on an H200.) */
extern "C" __global__ void __launch_bounds__(256)
rt_colsum_finish(const double *part, float *out, int64_t nrb, int64_t cols)
{
    __shared__ double sh[8][32];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t j = (int64_t)blockIdx.x * 32 + tx;
    double s = 0.0;
    if (j < cols)
        for (int64_t b = ty; b < nrb; b += 8)
            s += part[b * cols + j];
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < cols) {
        for (int k = 1; k < 8; k++)
            s += sh[k][tx];
        out[j] += (float)s;
    }
}

/* Launch: grid (rows, ncb), block of 256 threads; column chunk [by * cb, (by + 1) * cb).
 *   part[r, c] = sum of x[r, c * cb .. ]    (double, rt_block_sum; part: [rows, ncb]) */
extern "C" __global__ void __launch_bounds__(256)
rt_rowsum_part(const act_t *x, double *part, int64_t cols, int64_t cb)
{
    int64_t r = blockIdx.x, c0 = (int64_t)blockIdx.y * cb;
    int len = (int)(cols - c0 < cb ? cols - c0 : cb);
    double s = 0.0;
    rt_row_each(x + r * cols + c0, len, [&](int j, float v) { s += v; });
    s = rt_block_sum(s);
    if (threadIdx.x == 0)
        part[r * gridDim.y + blockIdx.y] = s;
}

/* Launch: grid-stride over rows, blocks of 256.
 *   db[r] += (float) sum_c part[r, c]      (c = 0 .. ncb-1 in order) */
extern "C" __global__ void __launch_bounds__(256)
rt_rowsum_finish(const double *part, float *db, int64_t rows, int64_t ncb)
{
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t c = 0; c < ncb; c++)
            s += part[r * ncb + c];
        db[r] += (float)s;
    }
}
