/* test_dist.c: unit tests of runtime/dist.c (collectives, buckets, shards) and of the
 * loader's DistributedSampler mode (runtime/data.c). Runs alone (a world of one),
 * or under `mpirun -np N`; every rank runs every test, results are combined over
 * the ranks and rank 0 prints "ok NAME" / "FAIL NAME"; exits 1 on a failure.
 *
 *   test_dist          the tests
 *   test_dist kill     rank 1 dies (SIGKILL) before a collective; rank 0 waits
 *   test_dist hang     rank 1 sleeps instead of joining a collective
 *   test_dist mismatch the ranks broadcast different sizes (an MPI error on rank 1)
 * These never return normally: tests/dist.sh checks that the watchdog ends rank 0
 * with exit 2 and a message within TRAINC_DIST_TIMEOUT, or that the MPI error
 * ends rank 1 with exit 2 and a message naming the call.
 *
 *   mpicc -std=gnu11 -Iruntime tests/unit/test_dist.c runtime/dist.c runtime/data.c \
 *      runtime/util.c -lpthread -lm -o build/tests/test_dist   (see tests/dist.sh) */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rt.h"
#include "rt_dist.h"

static int failures;
static int rank, world;
static char tmpdir[256];

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  rank %d: %s:%d: check failed: %s\n", rank, __FILE__,   \
                    __LINE__, #cond);                                                 \
            return 0;                                                                 \
        }                                                                             \
    } while (0)

/* A test passes when it passed on every rank (the sum is itself a collective, so the
 * ranks must run the tests in the same order, as they do). */
static void report(const char *name, int ok)
{
    double bad = !ok;
    rt_allreduce_sum_f64(&bad, 1);
    if (rank == 0) {
        printf("%s %s\n", bad == 0 ? "ok" : "FAIL", name);
        fflush(stdout);
    }
    if (bad != 0)
        failures++;
}

/* ---- shards ----------------------------------------------------------------------- */

static int test_shard(void)
{
    for (int64_t n = 0; n < 40; n++)
        for (int w = 1; w <= 7; w++) {
            int64_t counts[7], prev_hi = 0;
            rt_dist_shard_counts(n, w, counts);
            for (int r = 0; r < w; r++) {
                int64_t lo, hi;
                rt_dist_shard(n, r, w, &lo, &hi);
                CHECK(lo == prev_hi && hi >= lo && hi - lo == counts[r]);
                /* near-equal: sizes floor or ceil of n / w, the larger ones first */
                CHECK(counts[r] == n / w + (r < n % w));
                prev_hi = hi;
            }
            CHECK(prev_hi == n);
        }
    int64_t lo, hi;
    rt_dist_shard((int64_t)1 << 40, 2, 3, &lo, &hi);
    CHECK(hi == (int64_t)1 << 40 && hi - lo == ((int64_t)1 << 40) / 3);
    return 1;
}

/* ---- blocking collectives ---------------------------------------------------------- */

static int test_allreduce(void)
{
    static const int64_t sizes[] = {0, 1, 7, 1000, 300001};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *x = rt_xmalloc(sizeof(float) * (size_t)(n + 1));
        /* small multiples of 1/4: every partial sum is exact, whatever the order */
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)((rank + 1) * (i % 1000)) + 0.25f * (float)rank;
        x[n] = 12345;   /* past the end: untouched */
        rt_allreduce_sum_f32(x, n);
        double ranks_sum = world * (world + 1) / 2.0, rank_sum = world * (world - 1) / 2.0;
        for (int64_t i = 0; i < n; i++)
            CHECK(x[i] == (float)(ranks_sum * (double)(i % 1000) + 0.25 * rank_sum));
        CHECK(x[n] == 12345);
        rt_xfree(x);
    }
    /* doubles keep what floats would lose */
    double d[3] = {1e15 + rank, -0.5 * rank, 3};
    rt_allreduce_sum_f64(d, 3);
    CHECK(d[0] == 1e15 * world + world * (world - 1) / 2.0);
    CHECK(d[1] == -0.5 * world * (world - 1) / 2.0);
    CHECK(d[2] == 3.0 * world);
    return 1;
}

static int test_broadcast(void)
{
    static const int64_t sizes[] = {1, 13, 1000003};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int root = 0; root < world; root++) {
            int64_t n = sizes[s];
            unsigned char *b = rt_xmalloc((size_t)n + 1);
            for (int64_t i = 0; i < n; i++)
                b[i] = (unsigned char)(i * 7 + rank * 31);
            b[n] = 0xAB;
            rt_broadcast(b, n, root);
            for (int64_t i = 0; i < n; i++)
                CHECK(b[i] == (unsigned char)(i * 7 + root * 31));
            CHECK(b[n] == 0xAB);
            rt_xfree(b);
        }
    rt_barrier();
    return 1;
}

/* Uneven parts, some empty; the vector element i of rank r is r + i / 4, so the sum
 * over ranks of element i is W(W-1)/2 + W i / 4 (exact). */
static void uneven_counts(int64_t *counts, int variant)
{
    for (int r = 0; r < world; r++)
        counts[r] = variant == 0 ? (r * 37 + 11) % 50 : variant == 1 ? (r == 0 ? 0 : 1000 + r)
                                                                     : 0;
    if (variant == 3)
        rt_dist_shard_counts(100003, world, counts);
}

static int64_t part_start(const int64_t *counts, int r)
{
    int64_t s = 0;
    for (int q = 0; q < r; q++)
        s += counts[q];
    return s;
}

static int test_reduce_scatter(void)
{
    int64_t *counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    for (int variant = 0; variant < 4; variant++)
        for (int inplace = 0; inplace <= 1; inplace++) {
            uneven_counts(counts, variant);
            int64_t total = part_start(counts, world), mine = counts[rank];
            int64_t start = part_start(counts, rank);
            float *in = rt_xmalloc(sizeof(float) * (size_t)(total + 1));
            float *out = inplace ? in : rt_xmalloc(sizeof(float) * (size_t)(mine + 1));
            for (int64_t i = 0; i < total; i++)
                in[i] = (float)rank + 0.25f * (float)i;
            if (!inplace)
                out[mine] = -7;
            rt_reduce_scatter_sum_f32(in, out, counts);
            for (int64_t j = 0; j < mine; j++)
                CHECK(out[j] == (float)(world * (world - 1) / 2.0 +
                                        0.25 * world * (double)(start + j)));
            if (!inplace) {
                CHECK(out[mine] == -7);
                for (int64_t i = 0; i < total; i++)   /* the input is left alone */
                    CHECK(in[i] == (float)rank + 0.25f * (float)i);
                rt_xfree(out);
            }
            rt_xfree(in);
        }
    rt_xfree(counts);
    return 1;
}

static int test_allgather(void)
{
    int64_t *counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    for (int variant = 0; variant < 4; variant++)
        for (int inplace = 0; inplace <= 1; inplace++) {
            uneven_counts(counts, variant);
            int64_t total = part_start(counts, world), mine = counts[rank];
            int64_t start = part_start(counts, rank);
            float *out = rt_xmalloc(sizeof(float) * (size_t)(total + 1));
            float *in = inplace ? out + start : rt_xmalloc(sizeof(float) * (size_t)(mine + 1));
            for (int64_t i = 0; i < total; i++)
                out[i] = -1;
            out[total] = -9;
            for (int64_t j = 0; j < mine; j++)
                in[j] = (float)(1000 * rank) + (float)j;
            rt_allgather_f32(in, out, counts);
            for (int r = 0, i = 0; r < world; r++)
                for (int64_t j = 0; j < counts[r]; j++, i++)
                    CHECK(out[i] == (float)(1000 * r) + (float)j);
            CHECK(out[total] == -9);
            if (!inplace)
                rt_xfree(in);
            rt_xfree(out);
        }
    rt_xfree(counts);
    return 1;
}

/* ZeRO's round trip: reduce-scatter the gradients, update the own shard, all-gather
 * the parameters; every rank ends with the same full vector. */
static int test_zero_round_trip(void)
{
    enum { N = 4099 };
    int64_t *counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    rt_dist_shard_counts(N, world, counts);
    int64_t lo, hi;
    rt_dist_shard(N, rank, world, &lo, &hi);
    float *grad = rt_xmalloc(sizeof(float) * N), *param = rt_xmalloc(sizeof(float) * N);
    float *gshard = rt_xmalloc(sizeof(float) * (size_t)(hi - lo + 1));
    for (int i = 0; i < N; i++) {
        grad[i] = (float)(rank + 1) * 0.5f;
        param[i] = (float)i;
    }
    rt_reduce_scatter_sum_f32(grad, gshard, counts);
    for (int64_t i = lo; i < hi; i++)
        param[i] -= gshard[i - lo];
    rt_allgather_f32(param + lo, param, counts);
    for (int i = 0; i < N; i++)
        CHECK(param[i] == (float)i - 0.25f * (float)(world * (world + 1)));
    rt_xfree(grad);
    rt_xfree(param);
    rt_xfree(gshard);
    rt_xfree(counts);
    return 1;
}

/* ---- overlapped buckets ------------------------------------------------------------ */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Many buckets of varied sizes (as a backward pass would start them, last layer
 * first, with work and polls in between) give exactly the blocking all-reduce. */
static int test_buckets(void)
{
    enum { N = 1 << 20 };
    float *a = rt_xmalloc(sizeof(float) * N), *b = rt_xmalloc(sizeof(float) * N);
    for (int round = 0; round < 3; round++) {
        /* multiples of 1/8 below 2^12: sums over ranks are exact in any order */
        for (int i = 0; i < N; i++)
            a[i] = b[i] = (float)(mix((uint64_t)(round * world + rank) << 32 | (uint64_t)i) %
                                  32768) * 0.125f;
        rt_allreduce_sum_f32(b, N);
        int64_t end = N;
        int k = 0;
        uint64_t h = (uint64_t)round;
        volatile double work = 0;
        while (end > 0) {
            h = mix(h + 1);
            int64_t len = 1 + (int64_t)(h % 40000);
            if (k % 17 == 3)
                len = 0;   /* an empty bucket is allowed */
            if (len > end)
                len = end;
            CHECK(rt_bucket_start(a + end - len, len) == k);
            k++;
            end -= len;
            for (int i = 0; i < 2000; i++)
                work += i;
            if (k % 5 == 0)
                rt_bucket_poll();
        }
        rt_bucket_wait_all();
        CHECK(k > 30);
        CHECK(memcmp(a, b, sizeof(float) * N) == 0);
    }
    /* waiting with nothing started is fine, and handles restart from 0 */
    rt_bucket_wait_all();
    float one = 1;
    CHECK(rt_bucket_start(&one, 1) == 0);
    rt_bucket_wait_all();
    CHECK(one == (float)world);
    rt_xfree(a);
    rt_xfree(b);
    return 1;
}

/* ZeRO's buckets: reduce-scatters of pieces of a sharded vector, started from its top
 * down with work between them, in place (the part lands at the piece's start) or into
 * a shard buffer; waited for one at a time (rt_bucket_wait, rt_bucket_done) or all
 * together. Every rank ends with exactly its shard of the blocking all-reduce. */
static int test_rs_buckets(void)
{
    enum { N = 300007 };
    float *a = rt_xmalloc(sizeof(float) * N), *sum = rt_xmalloc(sizeof(float) * N);
    int64_t *shard = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    int64_t *counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    int64_t lo, hi;
    rt_dist_shard_counts(N, world, shard);
    rt_dist_shard(N, rank, world, &lo, &hi);
    float *out = rt_xmalloc(sizeof(float) * (size_t)(hi - lo + 1));
    int64_t starts[256];
    int hs[256];
    for (int round = 0; round < 4; round++) {
        int inplace = round & 1, one_by_one = round >> 1;
        for (int i = 0; i < N; i++)
            a[i] = sum[i] = (float)(mix((uint64_t)(round * world + rank) << 32 | (uint64_t)i) %
                                    32768) * 0.125f;
        rt_allreduce_sum_f32(sum, N);
        int64_t end = N;
        int k = 0;
        uint64_t h = (uint64_t)round + 7;
        while (end > 0) {
            h = mix(h + 1);
            int64_t len = 1 + (int64_t)(h % 20000);
            if (k % 11 == 5)
                len = 0;   /* an empty bucket is allowed */
            if (len > end || k == 255)
                len = end;
            int64_t b0 = end - len, st = 0;
            for (int r = 0; r < world; r++) {
                int64_t x = b0 > st ? b0 : st, y = end < st + shard[r] ? end : st + shard[r];
                counts[r] = y > x ? y - x : 0;
                st += shard[r];
            }
            int64_t x = b0 > lo ? b0 : lo;
            if (x > hi)
                x = hi;
            starts[k] = b0;
            hs[k] = rt_bucket_reduce_scatter_start(a + b0, inplace ? a + b0 : out + (x - lo), counts);
            CHECK(hs[k] == k);
            k++;
            end = b0;
            if (one_by_one && k >= 2) {   /* zero2's bound on buckets in flight */
                rt_bucket_wait(hs[k - 2]);
                CHECK(rt_bucket_done(hs[k - 2]));
            }
        }
        rt_bucket_wait_all();
        CHECK(k > 10);
        for (int i = 0; i < k; i++) {     /* in place: the part from the bucket's start */
            int64_t b0 = starts[i], b1 = i ? starts[i - 1] : N;
            int64_t x = b0 > lo ? b0 : lo, y = b1 < hi ? b1 : hi;
            if (y > x) {
                const float *got = inplace ? a + b0 : out + (x - lo);
                for (int64_t j = 0; j < y - x; j++)
                    CHECK(got[j] == sum[x + j]);
            }
        }
    }
    rt_xfree(a);
    rt_xfree(sum);
    rt_xfree(out);
    rt_xfree(shard);
    rt_xfree(counts);
    return 1;
}

/* Gathers of uneven parts to a root (ZeRO's checkpoints): only the root's output
 * changes. */
static int test_gather(void)
{
    int64_t *counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    for (int variant = 0; variant < 4; variant++)
        for (int root = 0; root < world; root += world > 1 ? world - 1 : 1) {
            uneven_counts(counts, variant);
            int64_t total = part_start(counts, world), mine = counts[rank];
            float *in = rt_xmalloc(sizeof(float) * (size_t)(mine + 1));
            float *out = rt_xmalloc(sizeof(float) * (size_t)(total + 1));
            for (int64_t j = 0; j < mine; j++)
                in[j] = (float)(1000 * rank) + (float)j;
            for (int64_t i = 0; i <= total; i++)
                out[i] = -1;
            rt_gather_f32(in, out, counts, root);
            for (int r = 0, i = 0; r < world; r++)
                for (int64_t j = 0; j < counts[r]; j++, i++)
                    CHECK(out[i] == (rank == root ? (float)(1000 * r) + (float)j : -1));
            CHECK(out[total] == -1);
            rt_xfree(in);
            rt_xfree(out);
        }
    rt_xfree(counts);
    return 1;
}

/* ---- the DistributedSampler --------------------------------------------------------- */

static const rt_input idx_inputs[1] = {{.name = "i", .dtype = RT_I32, .rank = 0, .numel = 1}};
static const rt_model idx_model = {.abi = RT_ABI_VERSION, .name = "idx", .n_inputs = 1,
                                   .inputs = idx_inputs};

/* An .npy file of N rows holding 0 .. N-1 (i4), opened as a dataset: a batch then
 * shows the sample indices themselves. */
static void open_index_dataset(rt_dataset *d, int64_t n)
{
    char name[64], path[400], dict[128];
    snprintf(name, sizeof name, "idx_%" PRId64 "_r%d.npy", n, rank);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    int hl = snprintf(dict, sizeof dict,
                      "{'descr': '<i4', 'fortran_order': False, 'shape': (%" PRId64 ",), }", n);
    size_t hlen = (size_t)hl + 1;
    while ((10 + hlen) % 64)
        hlen++;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 255),
                             (unsigned char)(hlen >> 8)};
    FILE *f = fopen(path, "wb");
    if (!f)
        rt_fail("%s: cannot write", path);
    fwrite(pre, 1, 10, f);
    fputs(dict, f);
    for (size_t i = (size_t)hl; i + 1 < hlen; i++)
        fputc(' ', f);
    fputc('\n', f);
    for (int32_t i = 0; i < n; i++)
        fwrite(&i, 4, 1, f);
    if (fclose(f) != 0)
        rt_fail("%s: cannot write", path);
    rt_data_entry e = {.key = "i"};
    snprintf(e.path, sizeof e.path, "%s", name);
    rt_dataset_open(d, &idx_model, &e, 1, tmpdir, "train", -1);
    unlink(path);   /* the mapping keeps it */
}

/* Every sample of rank r's epoch, in order (batch size 1: no batch is ever cut);
 * returns the count. */
static int64_t rank_samples(const rt_dataset *d, int r, int w, int shuffle, int drop,
                            int64_t epoch, int workers, int64_t *out)
{
    rt_loader *l = rt_loader_new(&idx_model, d, 1, shuffle, drop, 1337, workers, 2);
    rt_loader_set_shard(l, r, w);
    rt_loader_start(l, epoch, 0);
    int64_t n = 0;
    for (const rt_batch *b; (b = rt_loader_next(l));)
        out[n++] = ((const int32_t *)b->in[0])[0];
    if (n != rt_loader_batches(l))
        n = -1;
    rt_loader_free(l);
    return n;
}

/* Lists printed by torch 1.13:
 *   [list(DistributedSampler(range(N), num_replicas=W, rank=r, shuffle=False,
 *                            drop_last=D)) for r in range(W)]
 * one row per rank, -1 ends a row. */
static const struct torch_case {
    int n, w, drop;
    int lists[5][8];
} torch_cases[] = {
    {10, 2, 0, {{0, 2, 4, 6, 8, -1}, {1, 3, 5, 7, 9, -1}}},
    {10, 2, 1, {{0, 2, 4, 6, 8, -1}, {1, 3, 5, 7, 9, -1}}},
    {10, 3, 0, {{0, 3, 6, 9, -1}, {1, 4, 7, 0, -1}, {2, 5, 8, 1, -1}}},
    {10, 3, 1, {{0, 3, 6, -1}, {1, 4, 7, -1}, {2, 5, 8, -1}}},
    {10, 4, 0, {{0, 4, 8, -1}, {1, 5, 9, -1}, {2, 6, 0, -1}, {3, 7, 1, -1}}},
    {10, 4, 1, {{0, 4, -1}, {1, 5, -1}, {2, 6, -1}, {3, 7, -1}}},
    {3, 4, 0, {{0, -1}, {1, -1}, {2, -1}, {0, -1}}},
    {3, 4, 1, {{-1}, {-1}, {-1}, {-1}}},
    {1, 3, 0, {{0, -1}, {0, -1}, {0, -1}}},
    {1, 3, 1, {{-1}, {-1}, {-1}}},
    {2, 5, 0, {{0, -1}, {1, -1}, {0, -1}, {1, -1}, {0, -1}}},
    {2, 5, 1, {{-1}, {-1}, {-1}, {-1}, {-1}}},
    {5, 3, 0, {{0, 3, -1}, {1, 4, -1}, {2, 0, -1}}},
    {5, 3, 1, {{0, -1}, {1, -1}, {2, -1}}},
    {13, 4, 0, {{0, 4, 8, 12, -1}, {1, 5, 9, 0, -1}, {2, 6, 10, 1, -1}, {3, 7, 11, 2, -1}}},
    {13, 4, 1, {{0, 4, 8, -1}, {1, 5, 9, -1}, {2, 6, 10, -1}, {3, 7, 11, -1}}},
    {7, 1, 0, {{0, 1, 2, 3, 4, 5, 6, -1}}},
    {7, 1, 1, {{0, 1, 2, 3, 4, 5, 6, -1}}},
};

static int test_sampler_torch(void)
{
    for (size_t c = 0; c < sizeof torch_cases / sizeof torch_cases[0]; c++) {
        const struct torch_case *t = &torch_cases[c];
        rt_dataset d;
        open_index_dataset(&d, t->n);
        for (int r = 0; r < t->w; r++) {
            int64_t got[16];
            int64_t n = rank_samples(&d, r, t->w, 0, t->drop, 0, 0, got);
            int64_t want = 0;
            while (want < 8 && t->lists[r][want] >= 0)
                want++;
            if (n != want)
                fprintf(stderr, "  case N=%d W=%d drop=%d rank %d: %" PRId64 " samples, "
                        "want %" PRId64 "\n", t->n, t->w, t->drop, r, n, want);
            CHECK(n == want);
            for (int64_t k = 0; k < n; k++)
                CHECK(got[k] == t->lists[r][k]);
        }
        rt_dataset_close(&d);
    }
    return 1;
}

/* rt_loader_set_split (validation): every sample exactly once over the ranks, rank r
 * the entries r, r + W, ... below N, batches cut from those */
static int test_sampler_split(void)
{
    static const int ns[] = {1, 2, 3, 5, 10, 13, 301};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++)
        for (int w = 1; w <= 5; w++) {
            rt_dataset d;
            open_index_dataset(&d, ns[c]);
            int64_t seen[301] = {0};
            for (int r = 0; r < w; r++) {
                rt_loader *l = rt_loader_new(&idx_model, &d, 4, 0, 0, 1337, 1, 2);
                rt_loader_set_split(l, r, w);
                rt_loader_start(l, 0, 0);
                int64_t k = 0, nb = 0;
                for (const rt_batch *b; (b = rt_loader_next(l)); nb++)
                    for (int64_t i = 0; i < b->rows; i++, k++) {
                        int32_t v = ((const int32_t *)b->in[0])[i];
                        CHECK(v == r + k * w);
                        if (v >= 0 && v < ns[c])
                            seen[v]++;
                    }
                CHECK(nb == rt_loader_batches(l));
                CHECK(k == (r < ns[c] ? (ns[c] - r + w - 1) / w : 0));
                rt_loader_free(l);
            }
            for (int i = 0; i < ns[c]; i++)
                CHECK(seen[i] == 1);
            rt_dataset_close(&d);
        }
    return 1;
}

/* The loader's documented order rule (data.c), written out again. */
static void ref_order(int64_t *order, int64_t n, int shuffle, uint64_t seed, int64_t epoch)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    rt_rng r;
    rt_rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1)));
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t m = (uint64_t)i + 1, x;
        do
            x = rt_rng_u64(&r);
        while (x < (0 - m) % m);
        int64_t j = (int64_t)(x % m), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* torch's DistributedSampler.__iter__ after its permutation step, on `order`:
 * pad by repeating from the start (or cut), then take [r::W]. */
static int64_t ref_shard(const int64_t *order, int64_t n, int r, int w, int drop, int64_t *out)
{
    int64_t per = drop && n % w ? (n - w + w - 1) / w : (n + w - 1) / w;   /* as torch */
    if (drop && n < w)
        per = 0;
    int64_t total = per * w, k = 0;
    for (int64_t i = r; i < total; i += w)
        out[k++] = order[i % n];
    return k;
}

/* Shuffled epochs: the loader's permutation with torch's split; ranks disjoint
 * (drop_last) or covering (padding); loader workers change nothing. */
static int test_sampler_shuffle(void)
{
    static const int ns[] = {1, 2, 10, 97, 1000};
    int64_t order[1000], got[1000], want[1000];
    int seen[1000];
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        int64_t n = ns[c];
        rt_dataset d;
        open_index_dataset(&d, n);
        for (int w = 1; w <= 5; w++)
            for (int drop = 0; drop <= 1; drop++)
                for (int shuffle = 0; shuffle <= 1; shuffle++)
                    for (int64_t epoch = 0; epoch < 2; epoch++) {
                        ref_order(order, n, shuffle, 1337, epoch);
                        memset(seen, 0, sizeof seen);
                        int64_t total = 0, per = -1;
                        for (int r = 0; r < w; r++) {
                            int workers = (r + (int)epoch) % 3;
                            int64_t k = rank_samples(&d, r, w, shuffle, drop, epoch, workers,
                                                     got);
                            CHECK(k == ref_shard(order, n, r, w, drop, want));
                            for (int64_t i = 0; i < k; i++) {
                                CHECK(got[i] == want[i]);
                                seen[got[i]]++;
                            }
                            CHECK(per < 0 || k == per);   /* equal lengths on all ranks */
                            per = k;
                            total += k;
                        }
                        if (drop) {
                            CHECK(total == n / w * w);
                            for (int64_t i = 0; i < n; i++)
                                CHECK(seen[i] <= 1);
                        } else {
                            CHECK(total == (n + w - 1) / w * w);
                            for (int64_t i = 0; i < n; i++)
                                CHECK(seen[i] >= 1 && seen[i] <= (total + n - 1) / n);
                        }
                    }
        rt_dataset_close(&d);
    }
    return 1;
}

/* Batches come from the rank's list with the usual rules, and world 1 is exactly
 * the unsharded loader. */
static int test_sampler_batches(void)
{
    enum { N = 23 };
    rt_dataset d;
    open_index_dataset(&d, N);
    int64_t list[N];
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int drop = 0; drop <= 1; drop++) {
            for (int w = 1; w <= 3; w++)
                for (int r = 0; r < w; r++) {
                    int64_t n = rank_samples(&d, r, w, shuffle, drop, 3, 0, list);
                    const int64_t B = 4;
                    rt_loader *l = rt_loader_new(&idx_model, &d, B, shuffle, drop, 1337, 2, 2);
                    rt_loader_set_shard(l, r, w);
                    CHECK(rt_loader_batches(l) == (drop ? n / B : (n + B - 1) / B));
                    rt_loader_start(l, 3, 1);   /* mid-epoch, as a resume does */
                    int64_t k = 1;
                    for (const rt_batch *b; (b = rt_loader_next(l)); k++) {
                        CHECK(b->index == k && b->epoch == 3);
                        CHECK(b->rows == (n - k * B < B ? n - k * B : B));
                        for (int64_t i = 0; i < b->rows; i++)
                            CHECK(((const int32_t *)b->in[0])[i] == list[k * B + i]);
                    }
                    CHECK(k == rt_loader_batches(l));
                    rt_loader_free(l);
                }
            /* world 1 == no shard, batch for batch */
            rt_loader *a = rt_loader_new(&idx_model, &d, 5, shuffle, drop, 7, 0, 1);
            rt_loader *b = rt_loader_new(&idx_model, &d, 5, shuffle, drop, 7, 0, 1);
            rt_loader_set_shard(b, 0, 1);
            CHECK(rt_loader_batches(a) == rt_loader_batches(b));
            for (int64_t e = 0; e < 2; e++) {
                rt_loader_start(a, e, 0);
                rt_loader_start(b, e, 0);
                for (;;) {
                    const rt_batch *x = rt_loader_next(a), *y = rt_loader_next(b);
                    CHECK((x == NULL) == (y == NULL));
                    if (!x)
                        break;
                    CHECK(x->rows == y->rows && memcmp(x->in[0], y->in[0], 4 * x->rows) == 0);
                }
            }
            rt_loader_free(a);
            rt_loader_free(b);
        }
    rt_dataset_close(&d);
    return 1;
}

/* The real thing: this process is rank R of W; the lists of all ranks, gathered,
 * are what the rule gives every rank, so they are disjoint and cover the epoch. */
static int test_sampler_ranks(void)
{
    enum { N = 1001 };
    rt_dataset d;
    open_index_dataset(&d, N);
    int64_t mine[N], want[N], order[N];
    int64_t *counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    float *all = rt_xmalloc(sizeof(float) * (N + 64));
    for (int drop = 0; drop <= 1; drop++) {
        int64_t n = rank_samples(&d, rank, world, 1, drop, 2, 2, mine);
        for (int r = 0; r < world; r++)
            counts[r] = n;   /* every rank has the same count */
        float *part = rt_xmalloc(sizeof(float) * (size_t)(n + 1));
        for (int64_t i = 0; i < n; i++)
            part[i] = (float)mine[i];   /* exact below 2^24 */
        rt_allgather_f32(part, all, counts);
        ref_order(order, N, 1, 1337, 2);
        int seen[N] = {0};
        for (int r = 0; r < world; r++) {
            CHECK(ref_shard(order, N, r, world, drop, want) == n);
            for (int64_t i = 0; i < n; i++) {
                CHECK(all[r * n + i] == (float)want[i]);
                seen[want[i]]++;
            }
        }
        for (int i = 0; i < N; i++)
            CHECK(drop ? seen[i] <= 1 : seen[i] >= 1);
        rt_xfree(part);
    }
    rt_xfree(all);
    rt_xfree(counts);
    rt_dataset_close(&d);
    return 1;
}

/* ---- a dead or stuck peer ------------------------------------------------------------ */

static int peer_fault(const char *how)
{
    if (world < 2) {
        fprintf(stderr, "test_dist %s: needs mpirun -np 2 or more\n", how);
        return 1;
    }
    rt_barrier();   /* everyone is up */
    if (strcmp(how, "mismatch") == 0) {
        char b[64] = {0};
        rt_broadcast(b, rank == 0 ? 64 : 8, 0);
        rt_barrier();
        fprintf(stderr, "rank %d: the mismatched broadcast returned\n", rank);
        return 0;
    }
    if (rank == 1) {
        if (strcmp(how, "kill") == 0)
            raise(SIGKILL);
        sleep(600);
    }
    float x = 1;
    rt_allreduce_sum_f32(&x, 1);
    fprintf(stderr, "rank %d: the all-reduce returned without rank 1\n", rank);
    return 0;   /* a wrong success: tests/dist.sh wants exit 2 */
}

int main(int argc, char **argv)
{
    rt_dist_init(&argc, &argv);
    rank = rt_dist_rank();
    world = rt_dist_world();
    if (argc > 1)
        return peer_fault(argv[1]);
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_dist.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    if (rank == 0)
        printf("world %d (local rank %d of %d)\n", world, rt_dist_local_rank(),
               rt_dist_local_world());
    report("shard", test_shard());
    report("allreduce", test_allreduce());
    report("broadcast", test_broadcast());
    report("reduce_scatter", test_reduce_scatter());
    report("allgather", test_allgather());
    report("zero_round_trip", test_zero_round_trip());
    report("buckets", test_buckets());
    report("rs_buckets", test_rs_buckets());
    report("gather", test_gather());
    report("sampler_torch", test_sampler_torch());
    report("sampler_split", test_sampler_split());
    report("sampler_shuffle", test_sampler_shuffle());
    report("sampler_batches", test_sampler_batches());
    report("sampler_ranks", test_sampler_ranks());
    rmdir(tmpdir);
    rt_dist_finalize();
    if (failures)
        fprintf(stderr, "rank %d: %d test(s) failed\n", rank, failures);
    return failures ? 1 : 0;
}
