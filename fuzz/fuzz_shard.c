/* fuzz_shard.c: runtime/data.c's token shard reader (rt_shard_open), on any bytes. */
#include "fuzz.h"
#include <sys/mman.h>
#include "rt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* no cache entries for the inputs (each a new file identity): a cache folder that
     * cannot be made, so every input is read through */
    setenv("TRAINC_CACHE_DIR", "/dev/null", 1);
    const char *path = fuzz_file(data, size, ".bin");
    static rt_shard s;
    static volatile unsigned sink;
    FUZZ_RUN({
        rt_shard_open(&s, path, 50257, "fuzz");
        if (s.ntok > 0)   /* touch the first and the last token */
            sink = rt_shard_token(&s, 0) + rt_shard_token(&s, s.ntok - 1);
        rt_shard_close(&s);
    });
    if (fuzz_jumped && s.map)
        munmap(s.map, s.map_len);
    return 0;
}
