/* emu_sm90.h: the Hopper instructions of templates/cuda/sm90.cuh as the emulator runs
 * them (emu_sm90.inc holds the code; included by emu.h). Each is modelled on the PTX
 * ISA's definition, and where the hardware leaves a result undefined until a wait, the
 * emulator makes it NaN until that wait, so a kernel that skips one fails its checks:
 *
 *   shared memory  the instructions take 32-bit shared addresses; the emulator's are
 *                  offsets into the block's dynamic shared memory (the launch's smem
 *                  bytes, 1024-aligned, filled with 0xff bytes at each block's start), so
 *                  every tile, barrier and descriptor of an sm90 kernel lives there
 *   wgmma          emu_wgmma at issue saves the accumulators' values (and exchanges an RS
 *                  A fragment among the warp, as emu_mma_16816 does) and fills them with
 *                  NaN; the product is made at the wgmma.wait_group that covers its group,
 *                  reading the shared operands then, through the descriptor (start, LBO,
 *                  SBO, the 128-byte swizzle as address bits 4-6 ^= 7-9), in k order in
 *                  fp32. A wgmma without a wgmma.fence since the last wait, a swizzled
 *                  operand whose 8-row groups are not 1024-aligned, a swizzle mode other
 *                  than 128B, or a group never waited for stop the run.
 *   mbarrier       phases of `count` arrivals plus the expected transaction bytes;
 *                  try_wait.parity yields to the other fibers until the phase is done
 *   TMA            emu_tma_load fills the box's shared destination with NaN at issue;
 *                  the copy lands (swizzled, out-of-bounds elements as zeros, its bytes
 *                  counted down on the mbarrier) only when a thread waits on that
 *                  barrier's incomplete phase: a tile read before its phase completed, or
 *                  copied into while another warpgroup still reads it, reads NaN. A
 *                  swizzled destination not 1024-aligned, a copy never waited for, a map
 *                  not made by emu_tmap_encode stop the run.
 *   bar.sync       named barriers 1..15 of `count` threads
 * Not modelled: timing, bank conflicts, register limits (setmaxnreg is a no-op), the
 * async proxy's ordering (fence.proxy.async is a no-op), clusters and multicast. */
unsigned emu_smem_addr(const void *p);
void *emu_dyn_smem();
void emu_wgmma_fence();
void emu_wgmma_commit();
void emu_wgmma_wait(int n);
/* d (n / 2 floats) = A B + (scale_d ? d : 0), m64 x n x k16: A from descriptor da (a NULL)
 * or from the RS fragment a; B from descriptor db, MN-major when tb; f16: f16 operands,
 * else bf16 */
void emu_wgmma(float *d, int n, unsigned long long da, const unsigned *a, unsigned long long db,
               int tb, bool f16, int scale_d);
void emu_mbar_init(unsigned bar, unsigned count);
void emu_mbar_arrive(unsigned bar, unsigned tx_bytes);
bool emu_mbar_try_wait(unsigned bar, unsigned parity);
void emu_spin();   /* a spin-wait's turn: yield, marked as waiting (not progress) */
void emu_tma_load(unsigned dst, const void *map, unsigned bar, int c0, int c1, int c2);
void emu_bar_sync(int id, int count);
