/* fuzz_npy.c: runtime/data.c's .npy reader (rt_npy_open) and row gather, on any bytes. */
#include "fuzz.h"
#include <sys/mman.h>
#include "rt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".npy");
    static rt_npy a;
    FUZZ_RUN({
        rt_npy_open(&a, path);
        /* the first and the last row, converted as a loader would */
        if (a.rows > 0 && a.row_bytes <= (1 << 20)) {
            int64_t idx[2] = {0, a.rows - 1};
            int to = a.dtype == RT_I64 ? RT_I32 : a.dtype;
            void *dst = malloc((size_t)(2 * (a.row_bytes / a.elem_bytes) * 4 + 16));
            rt_npy_gather(&a, idx, 2, dst, to);
            free(dst);
        }
        rt_npy_close(&a);
    });
    if (fuzz_jumped && a.map)
        munmap(a.map, a.map_len);
    return 0;
}
