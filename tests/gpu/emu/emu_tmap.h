/* emu_tmap.h: the CUtensorMap of the CPU emulator (tests/gpu/emu/) and the fake GPU
 * (tests/fake_gpu/): the 128 opaque bytes hold what cuTensorMapEncodeTiled was given,
 * after the checks the driver documents for it (cuda.h, CUDA 13). The fake driver's
 * cuTensorMapEncodeTiled and tests/gpu/emu/emu_device.c's rt_cu_tmap16 write one with
 * emu_tmap_encode; the emulator's TMA copies (emu_sm90.inc) read it. Plain C: the fake
 * driver is C, the emulator C++. Tiled mode only; the data types 1, 2, 4 and 8 bytes
 * wide by their enum values in cuda.h (CUtensorMapDataType). */
#ifndef EMU_TMAP_H
#define EMU_TMAP_H
#include <stdint.h>
#include <string.h>

#define EMU_TMAP_MAGIC 0x70616d54756d45ull   /* "EmuTmap" */

typedef struct {
    uint64_t magic;
    uint64_t addr;         /* the global address */
    uint64_t dim[5];       /* elements, innermost first */
    uint64_t stride[4];    /* bytes between consecutive indices of dims 1..4 */
    uint16_t box[5];       /* the box's elements along each dim */
    uint8_t estride[5];    /* elementStrides (the emulator copies 1 only) */
    uint8_t rank, elem_bytes, swizzle, interleave, oob, dtype;
} emu_tmap;

/* cuda.h's CUtensorMapDataType values and their widths (0: a packed type, refused) */
static inline unsigned emu_tmap_elem_bytes(int dtype)
{
    static const unsigned char w[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
    return dtype >= 0 && dtype < (int)sizeof w ? w[dtype] : 0;
}

/* Fills out (128 bytes) as cuTensorMapEncodeTiled would, or returns why not (a static
 * string: the argument the driver refuses, CUDA_ERROR_INVALID_VALUE). swizzle: 0 none,
 * 1 32B, 2 64B, 3 128B (cuda.h's CUtensorMapSwizzle); interleave 0 (none) only. */
static inline const char *emu_tmap_encode(void *out, int dtype, unsigned rank, const void *addr,
                                          const uint64_t *dim, const uint64_t *stride,
                                          const uint32_t *box, const uint32_t *estride,
                                          int interleave, int swizzle, int oob)
{
    emu_tmap m;
    memset(&m, 0, sizeof m);
    unsigned eb = emu_tmap_elem_bytes(dtype);
    if (!out || !addr || !dim || !box || !estride || (rank > 1 && !stride))
        return "a NULL argument";
    if (!eb)
        return "tensorDataType: not emulated (packed types)";
    if (rank < 1 || rank > 5)
        return "tensorRank: 1 to 5";
    if ((uintptr_t)addr % 16)
        return "globalAddress: not 16-byte aligned";
    if (interleave != 0)
        return "interleave: only CU_TENSOR_MAP_INTERLEAVE_NONE is emulated";
    if (swizzle < 0 || swizzle > 3)
        return "swizzle: NONE, 32B, 64B or 128B";
    if (oob != 0 && oob != 1)
        return "oobFill: NONE or NAN_REQUEST_ZERO_FMA";
    for (unsigned i = 0; i < rank; i++) {
        if (dim[i] < 1 || dim[i] > (1ull << 32))
            return "globalDim: 1 to 2^32";
        if (box[i] < 1 || box[i] > 256)
            return "boxDim: 1 to 256";
        if (estride[i] < 1 || estride[i] > 8)
            return "elementStrides: 1 to 8";
        if (i + 1 < rank && (stride[i] % 16 || stride[i] >= (1ull << 40)))
            return "globalStrides: multiples of 16 below 2^40";
        m.dim[i] = dim[i];
        m.box[i] = (uint16_t)box[i];
        m.estride[i] = (uint8_t)estride[i];
        if (i + 1 < rank)
            m.stride[i] = stride[i];
    }
    if (box[0] * eb % 16)
        return "boxDim[0] x the element size: a multiple of 16 bytes";
    if (swizzle && box[0] * eb > (16u << swizzle))
        return "boxDim[0] x the element size: at most the swizzle's span (32, 64 or 128 bytes)";
    m.magic = EMU_TMAP_MAGIC;
    m.addr = (uint64_t)(uintptr_t)addr;
    m.rank = (uint8_t)rank;
    m.elem_bytes = (uint8_t)eb;
    m.swizzle = (uint8_t)swizzle;
    m.interleave = (uint8_t)interleave;
    m.oob = (uint8_t)oob;
    m.dtype = (uint8_t)dtype;
    memset(out, 0, 128);
    memcpy(out, &m, sizeof m);
    return 0;
}
#endif
