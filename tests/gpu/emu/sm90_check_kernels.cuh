/* sm90_check_kernels.cuh: kernels for tests/emu_sm90.sh (sm90_check.cc), one warpgroup
 * each, that use templates/cuda/sm90.cuh's primitives as sm90_attention.cuh does, so the
 * emulator's twins are checked against plain products on the host.
 *
 * sm90_check_mma: TMA-loads (one mbarrier, expect_tx) A [64 x 64] and Bk [128 x 64]
 * (K-major: Q and K of attention) and V [64 x 128] (MN-major, two 64-column boxes), then
 *   ss = A Bk^T (wgmma SS, n128, four k-steps chained in one group)
 *   rs = A V    (wgmma RS: A's fragments read from global memory; n128 over the two
 *                V tiles, LBO = their distance)
 * and writes both [64 x 128] (fp32) from the accumulator fragments.
 * sm90_check_box: a 3D box (64 x 64 x 1) at (0, row0, b) of a [B, T, 64] tensor, written
 * back unswizzled (rows past T must be 0).
 * sm90_check_bad: mode 1 reads an accumulator before its wait, 2 a TMA tile before its
 * phase, 3 TMA-loads to a destination 128 bytes past 1024 alignment, 4 issues a wgmma
 * whose descriptor starts 512 bytes into a group, 5 a wgmma without wgmma.fence. */
#define SM90C_BAR 40960
#define SM90C_SMEM (SM90C_BAR + 64 + 1024)

template <bool F16>
__device__ void sm90c_mma(const rt_tmap *ma, const rt_tmap *mb, const rt_tmap *mv,
                          const unsigned short *a_g, float *ss, float *rs)
{
    unsigned char *sm = sm90_dyn_smem();
    const unsigned base = sm90_smem(sm), bar = base + SM90C_BAR;
    const unsigned sa = base, sb = base + 8192, sv = base + 24576;
    const int t = threadIdx.x, w = t >> 5, g = (t & 31) >> 2, q = t & 3;
    if (t == 0) {
        sm90_mbar_init(bar, 1);
        sm90_fence_barrier_init();
    }
    __syncthreads();
    if (t == 0) {
        sm90_mbar_arrive_expect_tx(bar, 8192 + 16384 + 16384);
        sm90_tma_load_2d(sa, ma, bar, 0, 0);
        sm90_tma_load_2d(sb, mb, bar, 0, 0);
        sm90_tma_load_2d(sv, mv, bar, 0, 0);
        sm90_tma_load_2d(sv + 8192, mv, bar, 64, 0);
    }
    sm90_mbar_wait(bar, 0);
    float d[64];
    sm90_wgmma_fence();
    for (int ks = 0; ks < 4; ks++)
        sm90_wgmma_ss<128, 0, F16>(d, sm90_desc(sa + 32 * ks, 0, 1024), sm90_desc(sb + 32 * ks, 0, 1024), ks > 0);
    sm90_wgmma_commit();
    sm90_wgmma_wait<0>();
    for (int i = 0; i < 64; i++)
        ss[(16 * w + g + 8 * ((i >> 1) & 1)) * 128 + 8 * (i >> 2) + 2 * q + (i & 1)] = d[i];
    /* A's fragments from global memory: rows 16 w + g (+ 8), columns 16 kk + 2 q (+ 8) */
    sm90_wgmma_fence();
    for (int kk = 0; kk < 4; kk++) {
        unsigned a[4];
        for (int r = 0; r < 4; r++) {
            const int row = 16 * w + g + 8 * (r & 1), col = 16 * kk + 2 * q + 8 * (r >> 1);
            a[r] = (unsigned)a_g[row * 64 + col] | (unsigned)a_g[row * 64 + col + 1] << 16;
        }
        sm90_wgmma_rs<128, 1, F16>(d, a, sm90_desc(sv + 2048 * kk, 8192, 1024), kk > 0);
    }
    sm90_wgmma_commit();
    sm90_wgmma_wait<0>();
    for (int i = 0; i < 64; i++)
        rs[(16 * w + g + 8 * ((i >> 1) & 1)) * 128 + 8 * (i >> 2) + 2 * q + (i & 1)] = d[i];
}

extern "C" __global__ void __launch_bounds__(128)
sm90_check_mma(const __grid_constant__ rt_tmap ma, const __grid_constant__ rt_tmap mb,
               const __grid_constant__ rt_tmap mv, const unsigned short *a_g, float *ss, float *rs, int f16)
{
    if (f16)
        sm90c_mma<true>(&ma, &mb, &mv, a_g, ss, rs);
    else
        sm90c_mma<false>(&ma, &mb, &mv, a_g, ss, rs);
}

extern "C" __global__ void __launch_bounds__(128)
sm90_check_box(const __grid_constant__ rt_tmap m, unsigned short *out, int row0, int b)
{
    unsigned char *sm = sm90_dyn_smem();
    const unsigned base = sm90_smem(sm), bar = base + SM90C_BAR;
    if (threadIdx.x == 0) {
        sm90_mbar_init(bar, 1);
        sm90_fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        sm90_mbar_arrive_expect_tx(bar, 8192);
        sm90_tma_load_3d(base, &m, bar, 0, row0, b);
    }
    sm90_mbar_wait(bar, 0);
    /* element (r, c) at byte 128 r + 16 ((c / 8) ^ (r % 8)) + 2 (c % 8) */
    for (int e = threadIdx.x; e < 64 * 64; e += 128) {
        const int r = e / 64, c = e % 64;
        out[e] = *(const unsigned short *)(sm + 128 * r + 16 * ((c / 8) ^ (r % 8)) + 2 * (c % 8));
    }
}

extern "C" __global__ void __launch_bounds__(128)
sm90_check_bad(const __grid_constant__ rt_tmap ma, const __grid_constant__ rt_tmap mb, float *out, int mode)
{
    unsigned char *sm = sm90_dyn_smem();
    const unsigned base = sm90_smem(sm), bar = base + SM90C_BAR;
    if (threadIdx.x == 0) {
        sm90_mbar_init(bar, 1);
        sm90_fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        sm90_mbar_arrive_expect_tx(bar, 8192 + 16384);
        sm90_tma_load_2d(base + (mode == 3 ? 1024 + 128 : 0), &ma, bar, 0, 0);
        sm90_tma_load_2d(base + 8192, &mb, bar, 0, 0);
    }
    if (mode == 2)   /* the tile before its phase completed (by the thread that issued it:
                        the others may run after its wait landed the copy) */
        out[threadIdx.x] = threadIdx.x ? 0.0f : rt_bf16_float(*(const unsigned short *)sm);
    sm90_mbar_wait(bar, 0);
    float d[64];
    if (mode != 5)
        sm90_wgmma_fence();
    const unsigned a0 = base + (mode == 4 ? 512 : 0);
    for (int ks = 0; ks < 4; ks++)
        sm90_wgmma_ss<128, 0, false>(d, sm90_desc(a0 + 32 * ks, 0, 1024), sm90_desc(base + 8192 + 32 * ks, 0, 1024), ks > 0);
    sm90_wgmma_commit();
    if (mode == 1)   /* the accumulators before the wait */
        out[threadIdx.x] = d[0];
    sm90_wgmma_wait<0>();
    if (mode != 1 && mode != 2)
        out[threadIdx.x] = d[0];
}
