/* embedding.cuh: the embedding lookup and its weight gradient (twins of
 * rt_embedding_fwd and rt_embedding_bwd in runtime/attention.c); DIM, the row width, is
 * a compile-time constant. An index outside [0, V) (the loader checks tokens, so only a
 * bug gets here) gives a NaN row forward, which the loop reports as a diverged run, and
 * is skipped backward. */

/* Launch: grid-stride over rows * DIM (blocks of 256); 16-byte copies when DIM is a
 * multiple of 4 and both tables are 16-byte aligned.
 *   out[r, :] = w[idx[r], :]      idx: [rows], w: [V, DIM], out: [rows, DIM] */
template <int DIM>
__device__ __forceinline__ void embedding_fwd(const int32_t *idx, const float *w, act_t *out,
                                              int64_t rows, int64_t V)
{
    int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    if (DIM % 4 == 0 && rt_aligned16(w) && rt_aligned16(out)) {
        const int64_t n = rows * (DIM / 4);
        for (int64_t i = i0; i < n; i += step) {
            int64_t r = i / (DIM / 4), c = i % (DIM / 4) * 4;
            int64_t t = idx[r];
            float4 v;
            if (t >= 0 && t < V)
                v = *(const float4 *)(w + t * DIM + c);
            else
                v.x = v.y = v.z = v.w = (float)rt_nan_d();
            rt_st4(out + r * DIM + c, v);
        }
        return;
    }
    const int64_t n = rows * DIM;
    for (int64_t i = i0; i < n; i += step) {
        int64_t r = i / DIM, c = i % DIM, t = idx[r];
        rt_st(out + i, t >= 0 && t < V ? w[t * DIM + c] : (float)rt_nan_d());
    }
}

#define RT_EMBEDDING_FWD(DIM)                                                                 \
    extern "C" __global__ void __launch_bounds__(256) rt_embedding_fwd_##DIM(                 \
        const int32_t *idx, const float *w, act_t *out, int64_t rows, int64_t V)              \
    {                                                                                         \
        embedding_fwd<DIM>(idx, w, out, rows, V);                                             \
    }

/* dw[idx[r], :] += dout[r, :], deterministically and without atomics: rows with the same
 * index are added in row order, as on the CPU (so the result is the CPU's bit for bit).
 *
 * Launch: grid (ceil(V / vb)), block of 256 threads (8 warps). Block b owns the
 * vocabulary rows [b * vb, (b + 1) * vb): it scans idx 256 rows at a time, lists the
 * rows whose index it owns in row order (a warp ballot and a prefix count), then adds
 * them one after the other, thread t taking columns t, t + 256, ... (or float4 column
 * groups): each dw element is updated by one thread, in row order. Every block reads
 * all of idx (rows * 4 bytes, from L2): cheap next to the rows it adds. */
template <int DIM>
__device__ __forceinline__ void embedding_bwd(const int32_t *idx, const act_t *dout, float *dw,
                                              int64_t rows, int64_t V, int64_t vb)
{
    __shared__ int64_t list[256];
    __shared__ int warp_n[8];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t v0 = (int64_t)blockIdx.x * vb, v1 = v0 + vb < V ? v0 + vb : V;
    bool vec = DIM % 4 == 0 && rt_aligned16(dout) && rt_aligned16(dw);
    for (int64_t r0 = 0; r0 < rows; r0 += 256) {
        int64_t r = r0 + threadIdx.x;
        int64_t t = r < rows ? idx[r] : -1;
        bool mine = t >= v0 && t < v1;
        unsigned mask = __ballot_sync(0xffffffffu, mine);
        if (lane == 0)
            warp_n[warp] = __popc(mask);
        __syncthreads();
        int at = __popc(mask & ((1u << lane) - 1)), total = 0;
        for (int w = 0; w < 8; w++) {
            at += w < warp ? warp_n[w] : 0;
            total += warp_n[w];
        }
        if (mine)
            list[at] = r;
        __syncthreads();
        for (int q = 0; q < total; q++) {
            int64_t rr = list[q], tt = idx[rr];
            const act_t *g = dout + rr * DIM;
            float *d = dw + tt * DIM;
            if (vec) {
                for (int c = threadIdx.x * 4; c < DIM; c += 256 * 4) {
                    float4 a = *(float4 *)(d + c), b = rt_ld4(g + c);
                    a.x += b.x;
                    a.y += b.y;
                    a.z += b.z;
                    a.w += b.w;
                    *(float4 *)(d + c) = a;
                }
            } else {
                for (int c = threadIdx.x; c < DIM; c += 256)
                    d[c] += rt_ld(g + c);
            }
        }
        __syncthreads();   /* list and warp_n are rewritten by the next chunk */
    }
}

#define RT_EMBEDDING_BWD(DIM)                                                                 \
    extern "C" __global__ void __launch_bounds__(256) rt_embedding_bwd_##DIM(                 \
        const int32_t *idx, const act_t *dout, float *dw, int64_t rows, int64_t V,            \
        int64_t vb)                                                                           \
    {                                                                                         \
        embedding_bwd<DIM>(idx, dout, dw, rows, V, vb);                                       \
    }

/* The decode program's pos_embedding (compiler/decode.c; rt_pos_row_add in
 * runtime/attention.c, its twin): y [B, d] = x + w's row at each row's position, the
 * rows' places (slot * T + position) read from device memory as decode.cuh's kernels
 * read them (y may be x).
 * Launch: grid-stride over n = B d, blocks of 256. */
extern "C" __global__ void __launch_bounds__(256)
rt_pos_row_add(const act_t *x, const float *w, act_t *y, const int *place, int T, int64_t n,
               int64_t d)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        rt_st(y + i, rt_ld(x + i) + w[(int64_t)(place[i / d] % T) * d + i % d]);
}
