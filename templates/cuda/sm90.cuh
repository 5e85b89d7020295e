/* sm90.cuh: the Hopper (sm_90a) primitives that sm90_attention.cuh is built from, each a
 * small wrapper around one PTX instruction, and each with a twin in the CPU emulator
 * (tests/gpu/emu/emu_sm90.h) under RT_EMU:
 *
 *   shared addresses    sm90_smem: the 32-bit shared-window address of a pointer (the
 *                       emulator: the offset in its dynamic shared memory window)
 *   dynamic smem        sm90_dyn_smem: the block's dynamic shared memory, 1024-aligned
 *   matrix descriptors  sm90_desc: start address, leading and stride byte offsets, the
 *                       128-byte swizzle (PTX ISA "Matrix Descriptor Format")
 *   wgmma               sm90_wgmma_fence / _commit / _wait<N>; sm90_wgmma_ss{64,128}
 *                       (A and B in shared memory) and sm90_wgmma_rs{64,128} (A in
 *                       registers): m64nNk16, bf16 or f16 in, fp32 accumulate
 *   mbarrier            sm90_mbar_init / _arrive / _arrive_expect_tx / _wait (try_wait.parity
 *                       in a loop), sm90_fence_barrier_init
 *   TMA                 sm90_tma_load_3d: cp.async.bulk.tensor.3d, a box of a CUtensorMap
 *                       (rt_tmap, made on the host by cuTensorMapEncodeTiled and passed as a
 *                       __grid_constant__ kernel parameter) into shared memory, its bytes
 *                       counted on an mbarrier
 *   named barriers      sm90_bar_sync(id, threads)
 *   registers           sm90_setmaxnreg_inc / _dec<N> (no-op on the emulator)
 *   proxy fence         sm90_fence_proxy_async (generic-proxy writes to shared memory
 *                       before an async-proxy read of them)
 *
 * Everything here needs sm_90a (wgmma, setmaxnreg): it exists only where NVRTC compiles
 * for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL; the fake NVRTC and tests/gpu_emu.sh define it
 * too), so sm_80 and sm_89 compiles see none of it and define RT_SM90A 0.
 *
 * The shared-memory layout the descriptors describe (both sides agree with the TMA's
 * CU_TENSOR_MAP_SWIZZLE_128B): a tile of rows 128 bytes wide (64 16-bit values) whose
 * 8-row groups (1024 bytes) start 1024-aligned; within a group, the 16-byte chunk c of
 * row r sits at chunk c ^ r. The hardware XORs address bits 4-6 with bits 7-9, which is
 * why the groups must be 1024-aligned (the emulator stops a run where one is not).
 *   K-major operand (rows of the M or N index, k contiguous: Q and K in Q K^T): the
 *     m64 x k16 (or n x k16) slice at k0 of such a tile is start = tile + 2 k0 (k0 < 64;
 *     the next 64 columns are the next tile), SBO = 1024 (the next 8 rows), LBO unused.
 *   MN-major operand (rows of the k index, n contiguous: V in P V): the k16 x n slice at
 *     key k0 is start = tile + 128 k0, SBO = 1024 (the next 8 keys), LBO = the byte
 *     distance between 64-column tiles (n 64..127). */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RT_SM90A 1
#else
#define RT_SM90A 0
#endif

/* a CUtensorMap (cuda.h's CUtensorMap_st: 128 opaque bytes; NVRTC has no cuda.h) */
struct __align__(64) rt_tmap {
    unsigned long long opaque[16];
};

#if RT_SM90A

/* The shared-window address of p (what the instructions below take) */
__device__ __forceinline__ unsigned sm90_smem(const void *p)
{
#if defined(RT_EMU)
    return emu_smem_addr(p);
#else
    return (unsigned)__cvta_generic_to_shared(p);
#endif
}

/* The block's dynamic shared memory, rounded up to 1024 bytes (launch with 1 KiB more
 * than the layout needs): the 128-byte swizzle's groups are 1024-aligned. Declared
 * 16-aligned, which is all CUDA promises for it, so that the compiler keeps the round-up
 * (declared 1024-aligned, it folded the round-up away and the tiles' alignment rested on
 * where ptxas put the array: TMA and wgmma would disagree, silently, were it moved). */
__device__ __forceinline__ unsigned char *sm90_dyn_smem()
{
#if defined(RT_EMU)
    unsigned char *p = (unsigned char *)emu_dyn_smem();
#else
    extern __shared__ __align__(16) unsigned char rt_sm90_dyn[];
    unsigned char *p = rt_sm90_dyn;
#endif
    return p + ((1024u - (sm90_smem(p) & 1023u)) & 1023u);
}

/* A wgmma matrix descriptor with the 128-byte swizzle: bits 0-13 start address >> 4,
 * 16-29 leading dimension byte offset >> 4, 32-45 stride dimension byte offset >> 4,
 * 49-51 base offset (0: the groups are 1024-aligned), 62-63 swizzle mode (1: 128B). */
__device__ __forceinline__ unsigned long long sm90_desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) |
           (unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16 |
           (unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32 | 1ull << 62;
}

/* wgmma.fence: before the first wgmma of a batch, once the registers it reads (the
 * accumulators, an RS A fragment) were last written by ordinary instructions */
__device__ __forceinline__ void sm90_wgmma_fence()
{
#if defined(RT_EMU)
    emu_wgmma_fence();
#else
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/* N accumulators (or N RS A fragments of 4 registers), pinned where they stand: an empty
 * asm that reads and writes each, so that the compiler moves no ordinary instruction on
 * them across a wgmma.fence or wait_group beside it (the fence asks that the registers
 * a wgmma reads were written before it; a value read after the wait must come from the
 * wgmma). CUTLASS's warpgroup_fence_operand; the emulator's calls move nothing. */
template <int N> __device__ __forceinline__ void sm90_pin(float *r)
{
#if !defined(RT_EMU)
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
#endif
}
template <int N> __device__ __forceinline__ void sm90_pin(unsigned (*a)[4])
{
#if !defined(RT_EMU)
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            asm volatile("" : "+r"(a[i][r])::"memory");
#endif
}
/* wgmma.commit_group: the wgmmas issued since the last commit become one group */
__device__ __forceinline__ void sm90_wgmma_commit()
{
#if defined(RT_EMU)
    emu_wgmma_commit();
#else
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* wgmma.wait_group N: at most N groups still in flight; the accumulators (and RS A
 * fragments, and shared operands) of the others may be touched again */
template <int N> __device__ __forceinline__ void sm90_wgmma_wait()
{
#if defined(RT_EMU)
    emu_wgmma_wait(N);
#else
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/* The accumulator fragment of m64nNk16 (PTX ISA, "Matrix fragments for wgmma .m64nNk16"):
 * thread t of the warpgroup (warp w = t / 32, g = t % 32 / 4, q = t % 4) holds N / 2
 * values, d[4 j + r] = D[16 w + g + 8 (r / 2)][8 j + 2 q + r % 2]: m16n8 C fragments side
 * by side. An RS A fragment is m16n8k16's A fragment of the warp's rows 16 w .. 16 w + 15:
 * a[0] = A[g][2q, 2q+1], a[1] = A[g+8][2q, 2q+1], a[2] = A[g][2q+8, 2q+9], a[3] =
 * A[g+8][2q+8, 2q+9] (the lower column in the low half). TB = 1: B is MN-major. */
#if defined(RT_EMU)
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_ss64(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    emu_wgmma(d, 64, da, nullptr, db, TB, F16, scale_d);
}
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_ss128(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    emu_wgmma(d, 128, da, nullptr, db, TB, F16, scale_d);
}
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_rs64(float *d, const unsigned a[4], unsigned long long db, int scale_d)
{
    emu_wgmma(d, 64, 0, a, db, TB, F16, scale_d);
}
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_rs128(float *d, const unsigned a[4], unsigned long long db, int scale_d)
{
    emu_wgmma(d, 128, 0, a, db, TB, F16, scale_d);
}
#else
/* The asm operands: the accumulators of m64n64 (32 registers) and m64n128 (64), and
 * their register lists in the instruction */
#define SM90_D8(i)                                                                                 \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define SM90_D32 SM90_D8(0), SM90_D8(8), SM90_D8(16), SM90_D8(24)
#define SM90_D64 SM90_D32, SM90_D8(32), SM90_D8(40), SM90_D8(48), SM90_D8(56)
#define SM90_R32                                                                                   \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define SM90_R64                                                                                   \
    SM90_R32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
             "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
/* wgmma.mma_async m64nNk16, fp32 += TY x TY: D the accumulators (DL their list), A and B
 * descriptors (SS) or A four registers and B a descriptor (RS); the numbers of the
 * operands after the accumulators as strings (scale_d a predicate: 0 = D ignored) */
#define SM90_WGMMA_SS(N, TY, DL, DOPS, DA, DB, PS, PT)                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" PS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" DL "}, %" DA       \
                 ", %" DB ", p, 1, 1, 0, %" PT ";\n}\n"                                              \
                 : DOPS                                                                            \
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TB))
#define SM90_WGMMA_RS(N, TY, DL, DOPS, A0, DB, PS, PT)                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" PS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" DL "}, {%" A0     \
                 "}, %" DB ", p, 1, 1, %" PT ";\n}\n"                                                \
                 : DOPS                                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB))
/* D (m64 x n64, fp32) += A B, A and B in shared memory (descriptors da, db) */
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_ss64(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    if constexpr (!F16)
        SM90_WGMMA_SS(64, "bf16", SM90_R32, SM90_D32, "32", "33", "34", "35");
    else
        SM90_WGMMA_SS(64, "f16", SM90_R32, SM90_D32, "32", "33", "34", "35");
}
/* D (m64 x n64, fp32) += A B, A in registers (a: m16n8k16's A fragment of the
 * warp's 16 rows), B in shared memory (descriptor db) */
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_rs64(float *d, const unsigned a[4], unsigned long long db, int scale_d)
{
    if constexpr (!F16)
        SM90_WGMMA_RS(64, "bf16", SM90_R32, SM90_D32, "32,%33,%34,%35", "36", "37", "38");
    else
        SM90_WGMMA_RS(64, "f16", SM90_R32, SM90_D32, "32,%33,%34,%35", "36", "37", "38");
}
/* D (m64 x n128, fp32) += A B, A and B in shared memory (descriptors da, db) */
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_ss128(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    if constexpr (!F16)
        SM90_WGMMA_SS(128, "bf16", SM90_R64, SM90_D64, "64", "65", "66", "67");
    else
        SM90_WGMMA_SS(128, "f16", SM90_R64, SM90_D64, "64", "65", "66", "67");
}
/* D (m64 x n128, fp32) += A B, A in registers (a: m16n8k16's A fragment of the
 * warp's 16 rows), B in shared memory (descriptor db) */
template <int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_rs128(float *d, const unsigned a[4], unsigned long long db, int scale_d)
{
    if constexpr (!F16)
        SM90_WGMMA_RS(128, "bf16", SM90_R64, SM90_D64, "64,%65,%66,%67", "68", "69", "70");
    else
        SM90_WGMMA_RS(128, "f16", SM90_R64, SM90_D64, "64,%65,%66,%67", "68", "69", "70");
}
#endif

/* the same, N a template parameter (64 or 128) */
template <int N, int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_ss(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    static_assert(N == 64 || N == 128, "wgmma: n64 or n128");
    if constexpr (N == 64)
        sm90_wgmma_ss64<TB, F16>(d, da, db, scale_d);
    else
        sm90_wgmma_ss128<TB, F16>(d, da, db, scale_d);
}
template <int N, int TB, bool F16>
__device__ __forceinline__ void sm90_wgmma_rs(float *d, const unsigned a[4], unsigned long long db, int scale_d)
{
    static_assert(N == 64 || N == 128, "wgmma: n64 or n128");
    if constexpr (N == 64)
        sm90_wgmma_rs64<TB, F16>(d, a, db, scale_d);
    else
        sm90_wgmma_rs128<TB, F16>(d, a, db, scale_d);
}

/* ---- mbarrier (shared memory, 8 bytes, 8-aligned) ------------------------------------
 * A phase completes when `count` arrivals have happened and the transaction bytes it
 * expects (arrive_expect_tx) have all landed (TMA copies count theirs down); its waiters
 * then see it through try_wait.parity: parity P is done once the barrier's phase count is
 * past one with that parity. Waiting on parity 1 of a fresh barrier returns at once (how
 * a producer's first pass through a ring of empty stages waits for nothing). */
__device__ __forceinline__ void sm90_mbar_init(unsigned bar, unsigned count)
{
#if defined(RT_EMU)
    emu_mbar_init(bar, count);
#else
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
/* mbarrier.init's writes visible to the other threads and to the async proxy (TMA) */
__device__ __forceinline__ void sm90_fence_barrier_init()
{
#if !defined(RT_EMU)
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void sm90_mbar_arrive(unsigned bar)
{
#if defined(RT_EMU)
    emu_mbar_arrive(bar, 0);
#else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void sm90_mbar_arrive_expect_tx(unsigned bar, unsigned bytes)
{
#if defined(RT_EMU)
    emu_mbar_arrive(bar, bytes);
#else
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
#endif
}
/* Wait until the phase of parity `parity` has completed. */
__device__ __forceinline__ void sm90_mbar_wait(unsigned bar, unsigned parity)
{
#if defined(RT_EMU)
    while (!emu_mbar_try_wait(bar, parity))
        emu_spin();
#else
    asm volatile("{\n.reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
#endif
}

/* ---- TMA ---------------------------------------------------------------------------- */

/* The box of *map at coordinates (c0, c1, c2) (innermost first, in elements) into shared
 * memory at dst, its bytes counted down on mbarrier bar; elements outside the tensor
 * land as zeros. map must be a kernel parameter (__grid_constant__) or in global memory. */
__device__ __forceinline__ void sm90_tma_load_3d(unsigned dst, const rt_tmap *map, unsigned bar, int c0,
                                                 int c1, int c2)
{
#if defined(RT_EMU)
    emu_tma_load(dst, map, bar, c0, c1, c2);
#else
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
#endif
}
/* a 2D box: (c0, c1) */
__device__ __forceinline__ void sm90_tma_load_2d(unsigned dst, const rt_tmap *map, unsigned bar, int c0,
                                                 int c1)
{
#if defined(RT_EMU)
    emu_tma_load(dst, map, bar, c0, c1, 0);
#else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
#endif
}
/* the descriptor into the cache ahead of its first use */
__device__ __forceinline__ void sm90_tma_prefetch(const rt_tmap *map)
{
#if !defined(RT_EMU)
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)map) : "memory");
#endif
}

/* ---- the rest -------------------------------------------------------------------------- */

/* bar.sync id, threads: the named barrier `id` (1..15; 0 is __syncthreads') for a subset
 * of the block's warps, `threads` (a multiple of 32) of them */
__device__ __forceinline__ void sm90_bar_sync(int id, int threads)
{
#if defined(RT_EMU)
    emu_bar_sync(id, threads);
#else
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

/* setmaxnreg: a warpgroup gives back registers (the producer) or takes them (the
 * consumers); N a multiple of 8 in 24..256 */
template <int N> __device__ __forceinline__ void sm90_setmaxnreg_dec()
{
#if !defined(RT_EMU)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void sm90_setmaxnreg_inc()
{
#if !defined(RT_EMU)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/* fence.proxy.async: this thread's ordinary writes to shared memory ordered before
 * later async-proxy (TMA, wgmma) accesses of it */
__device__ __forceinline__ void sm90_fence_proxy_async()
{
#if !defined(RT_EMU)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

#endif /* RT_SM90A */
