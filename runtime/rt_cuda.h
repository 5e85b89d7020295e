/* rt_cuda.h: the CUDA device layer, internal to the runtime.
 *
 *   device_cuda.c  the driver (loaded with dlopen: a machine without one gets exit 2
 *                  and a message, not a loader error), the context, the module of
 *                  generated kernels (embedded cubin, NVRTC + disk cache, or PTX),
 *                  memory, launches, the trainer's device backend
 *   cuda_blas.c    rt_cu_gemm through cuBLASLt
 *   cuda_ops.c     the rt_cu_* twins of the CPU runtime calls (layernorm, cross
 *                  entropy, attention, ...): each computes a launch configuration and
 *                  launches a kernel of templates/cuda/ by name
 *
 * The device layer knows no op: the ops files register their twins of the CPU calls
 * with it (rt_cu_ops_register, rt_cu_blas_register, before the device opens), and it hands them to the CPU calls
 * through rt.h's rt_gpu_calls.
 *
 * Device pointers travel in the same places host pointers do on the CPU (rt_exec's
 * arena, params, grads, in[]): the generated host code does the same pointer
 * arithmetic on both and never dereferences them, so one host.c serves both.
 */
#ifndef RT_CUDA_H
#define RT_CUDA_H

#include <cuda.h>
#include "rt_loop.h"

typedef CUdeviceptr rt_dptr;

/* Numbers a loss kernel adds up on the device; the loop reads them after a pass. */
typedef struct rt_cu_stat {
    double loss_sum;           /* sum of the per-term losses */
    unsigned long long correct;/* correct argmax predictions */
    unsigned long long terms;  /* cross_entropy's ignore_index: the targets counted, not
                                  ignored (the host counts the terms otherwise) */
    float ce_scale;            /* the last count's loss gradient scale, rows / terms (0:
                                  none counted), read by the loss kernels */
    unsigned pad;
    double margin_sum;         /* dpo's pairs' margins (rt_exec.margin_sum) */
} rt_cu_stat;

/* ---- the device layer (device_cuda.c) -------------------------------------------- */

/* An ops file's twins of the CPU calls into the device's table (the entries `part`
 * sets; the others stay as they are). The device dies at its opening when an entry
 * is still missing. */
void rt_cu_register(const rt_gpu_calls *part);
/* Each ops file registers its part (a trainer before rt_cu_init, setup.c; a test
 * before rt_cu_test_open). */
void rt_cu_ops_register(void);    /* cuda_ops.c */
void rt_cu_blas_register(void);   /* cuda_blas.c */

/* Launch kernel `name` of the loaded module on the compute stream. `args` as for
 * cuLaunchKernel: one pointer to each argument's value. Dies naming the kernel when
 * it does not exist or the launch fails. */
void rt_cu_launch(rt_exec *e, const char *name, unsigned gx, unsigned gy, unsigned gz,
                  unsigned bx, unsigned by, unsigned smem, void **args);
/* Scratch device memory, allocated once at set-up; valid until the next call.
 * Exits 2 when `bytes` exceeds what was reserved (a sizing bug, reported). */
rt_dptr rt_cu_scratch(rt_exec *e, size_t bytes);
/* The device rt_cu_stat that loss kernels add into (reset by the loop per pass). */
rt_dptr rt_cu_stats(rt_exec *e);
/* Multiprocessors of the device (grid sizes of grid-stride loops). */
int rt_cu_sm_count(rt_exec *e);
/* Blocks of a grid-stride loop over n items, 256 threads each (cuda_ops.c): enough to
 * fill every SM many times over, never more than the items (and at least one). */
unsigned rt_cu_grid_for(rt_exec *e, int64_t n);
/* The ops files' launch arithmetic: a / b rounded up; a grid dimension, checked against
 * the hardware's limit (GX, 2^31 - 1, for x; GYZ for y and z): a shape beyond it is a
 * bug in trainc's checks, not a user error. */
static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline unsigned gdim(int64_t n, int64_t max, const char *what)
{
    if (n < 1 || n > max)
        rt_die("CUDA: %s needs a grid dimension of %lld (limit %lld)", what, (long long)n,
               (long long)max);
    return (unsigned)n;
}
#define GX 2147483647
#define GYZ 65535
/* Wait for the compute stream. */
void rt_cu_sync(rt_exec *e);

/* Elementwise kernels of the generated module: args point to the tensors' device
 * pointers; B, n, rng_key, train and rng_part are appended (emit_cuda.c's signature;
 * rng_part only where dropout draws, and the launch passes it to all). */
void rt_cu_launch_ew(rt_exec *e, const char *name, int64_t n, int nargs, void **args);
/* The stream kernels run on (a CUstream) and cuBLASLt's workspace. */
void *rt_cu_stream(rt_exec *e);
rt_dptr rt_cu_workspace(rt_exec *e, size_t *bytes);

/* rt_gemm_bias on the GPU (cuda_blas.c). */
void rt_cu_gemm_bias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float *C, int64_t ldc, const float *bias, const float *R, int act,
                     float *Y);
/* rt_gemm_dbias and rt_gemm_dgelu on the GPU (cuda_blas.c). */
void rt_cu_gemm_dbias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc, float *db, int fresh);
void rt_cu_gemm_dgelu(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *D, int64_t ldd, const float *pre);

/* Is there a driver and a GPU? 0, or -1 with the reason in `why`. */
int rt_cu_probe(char *why, size_t n, int *count);
/* "no CUDA device found" with the reason and a hint; exits 2. */
_Noreturn void rt_cu_no_device(const char *why);

/* The trainer's device (setup.c): opens GPU local_rank % count, loads the kernels and
 * allocates everything (parameters + gradients + optimizer state in one block, the
 * arena of Bmax * arena_row_bytes in another, inputs/stats/scratch/workspace in a
 * third; the loss statistics of up to `passes` passes a step); sets e->dev, e->arena,
 * e->params, e->grads to device addresses. The rank keeps gradient floats [glo, ghi):
 * all of them ([0, trainable_floats)), or zero2's shard, and then the gradient region is
 * outside the block, backed on demand (rt_cu_grads_*). */
void rt_cu_init(rt_exec *e, const rt_model *m, const rt_cuda_image *img, int64_t Bmax,
                int64_t arena_row_bytes, int64_t state_floats, int passes, int local_rank,
                int64_t glo, int64_t ghi);
/* zero2's gradient region (device_cuda.c; each returns at once for a whole region but
 * clear, which zeroes it): grads_begin backs floats [off, off + n) with zeroed memory
 * where they have none (rt_grad_begin); grads_sent: the bucket from float a up has had
 * its reduction queued on the communication stream (its memory outside the shard goes
 * back once it has passed; the host waits while more than two are outstanding);
 * grads_clear: a step's start (the shard zeroed, nothing else backed); grads_mapped:
 * the bytes backed now (0: not in use), the most at once so far and the chunk size. */
void rt_cu_grads_begin(rt_exec *e, int64_t off, int64_t n);
void rt_cu_grads_sent(rt_exec *e, int64_t a);
void rt_cu_grads_clear(rt_exec *e, int64_t floats);
size_t rt_cu_grads_mapped(rt_exec *e, size_t *peak, size_t *chunk);
rt_dptr rt_cu_state(rt_exec *e);
/* Mixed precision (rt_model.act16): the parameters' 16-bit copy, the GEMMs' operand,
 * rewritten by the optimizer (over the whole region; under zero1 by
 * rt_cu_copy_params16 after the gather) and by rt_cu_put_params; 0 in fp32. */
rt_dptr rt_cu_param_copy(rt_exec *e);
/* The module's activation storage: RT_PREC_BF16 or RT_PREC_FP16 (16 bits), 0 (fp32). */
int rt_cu_act16(rt_exec *e);
/* An arena pointer p advanced by n activation elements: 16-bit ones in a mixed-precision
 * arena on a GPU, fp32 everywhere else (the CPU runs such a plan in fp32 at twice the
 * offsets); e->dev NULL: the CPU. */
void *rt_act_adv(rt_exec *e, const void *p, int64_t n);
/* Storage of a device pointer the generated code passes as a GEMM operand: RT_CU_F32
 * (parameter gradients, fp32 inputs, fp32 arenas) or RT_CU_BF16 / RT_CU_F16 (a
 * mixed-precision arena, and parameters, whose 16-bit copy *p is made to point at). */
enum { RT_CU_F32, RT_CU_BF16, RT_CU_F16 };
int rt_cu_operand(rt_exec *e, const void **p);
/* Bytes allocated on the device by rt_cu_init, in all and by block (the pool's count
 * includes zero2's gradient chunks created so far). */
size_t rt_cu_allocated(rt_exec *e, size_t *pool, size_t *arena, size_t *fixed);
const char *rt_cu_name(rt_exec *e);
const char *rt_cu_arch(rt_exec *e);
/* Whether the loaded kernels were compiled for sm_90a (templates/cuda/sm90.cuh's
 * kernels exist only there). */
int rt_cu_sm90a(rt_exec *e);
/* A CUtensorMap (128 bytes at map, 64-byte aligned) of a 3D tensor of 16-bit values (f16,
 * else bf16) at base: dim[3] elements innermost first, stride[2] bytes between indices of
 * dims 1 and 2, a box of box[3] elements, the 128-byte swizzle, zeros outside the tensor.
 * 0, or -1 when the driver refuses. */
int rt_cu_tmap16(void *map, const void *base, int f16, const uint64_t dim[3],
                 const uint64_t stride[2], const uint32_t box[3]);
const char *rt_cu_kernels_from(rt_exec *e);   /* "cubin", "cache", "nvrtc" or "ptx" */
void rt_cu_mem_info(size_t *free_b, size_t *total);
/* The device's used memory (cuMemGetInfo) when the device layer had its context, streams
 * and kernel module and had allocated nothing else: the CUDA context's share of what a
 * later measurement sees (with whatever else runs on the device). */
size_t rt_cu_context_bytes(rt_exec *e);
/* The parameters and the layers' state (m->state_floats; NULL when the model has none)
 * to and from the device; with state, the optimizer state's state_floats too. */
void rt_cu_put_params(rt_exec *e, const rt_model *m, const float *params,
                      const float *layer_state, const float *state, int64_t state_floats);
void rt_cu_get_params(rt_exec *e, const rt_model *m, float *params, float *layer_state,
                      float *state, int64_t state_floats);
/* The layers' state alone, from the device into host (upload 0, after the compute
 * stream's work) or back (upload 1). */
void rt_cu_layer_state(rt_exec *e, float *host, int upload);
/* Mixed precision: rewrites the parameters' 16-bit copy from the fp32 parameters (after
 * an upload, or zero1's gather); nothing in fp32. */
void rt_cu_copy_params16(rt_exec *e, const rt_model *m);
/* Page-locks a loader buffer (signature of rt_loader_each_buffer's callback). */
void rt_cu_pin(void *p, size_t n, void *ctx);
/* Input slots on the device: training alternates 0 and 1 (the copy of the next batch
 * overlaps the pass on this one), validation alternates 2 and 3 (so a training batch
 * copied ahead waits in its slot), sampling uses 2. */
enum { RT_CU_SLOT_TRAIN0, RT_CU_SLOT_TRAIN1, RT_CU_SLOT_EVAL, RT_CU_SLOT_EVAL1, RT_CU_SLOTS };
/* upload_batch: the host rows into `slot`, asynchronously (copy stream). use_slot: the
 * next kernels read `slot` (e->in points there; they wait for its copy). upload_done:
 * the host buffers of the last upload may be reused. */
void rt_cu_upload_batch(rt_exec *e, const rt_model *m, const void *const *in, int64_t rows,
                        int slot);
void rt_cu_use_slot(rt_exec *e, const rt_model *m, int slot, int64_t rows);
/* loader.on_gpu: dataset `set` (0 train, 1 val; arrays, not token shards) copied to the
 * device once, in the batches' dtypes (bytes: rt_cu_data_bytes, an allocation of
 * its own; rt_cu_data_allocated: what all sets took); then a batch is uploaded as its
 * sample indices (the loader's index mode) and rt_cu_use_slot gathers its rows there. */
size_t rt_cu_data_bytes(const rt_model *m, int64_t rows);
void rt_cu_data_put(rt_exec *e, const rt_model *m, const rt_dataset *ds, int set);
size_t rt_cu_data_allocated(rt_exec *e);
void rt_cu_upload_index(rt_exec *e, const int32_t *idx, int64_t rows, int slot, int set);
/* loader.augment with the data on the GPU: the training set's [C, H, W] inputs are
 * cropped and flipped as they are gathered (rt_cu_gather_augment), each sample's draw
 * from (seed, the epoch of the batch in the slot, its index). rt_cu_slot_epoch says
 * that epoch, after rt_cu_upload_index. */
void rt_cu_set_augment(rt_exec *e, int64_t pad, int hflip, uint64_t seed);
/* random_resized_crop in the crop's place (after rt_cu_set_augment) */
void rt_cu_set_rrc(rt_exec *e, const rt_rrc *k);
/* color_jitter after the crops and flips (after rt_cu_set_augment) */
void rt_cu_set_jitter(rt_exec *e, const rt_jitter *k);
/* data.cuh's rt_color_jitter (the twin of augment.c's): u8 images x [rows, C, H, W] (C 1 or
 * 3), row r sample idx[r], jittered in place */
void rt_cu_color_jitter(rt_exec *e, void *x, const int32_t *idx, int64_t rows, int64_t C,
                        int64_t H, int64_t W, const rt_jitter *k, uint64_t seed, int64_t epoch);
void rt_cu_slot_epoch(rt_exec *e, int slot, int64_t epoch);
/* data.cuh's rt_gather_augment (the twin of data.c's rt_gather_augment): dst[r] = the
 * augmented image of data[idx[r]], images [C, H, W] of `elem`-byte values. */
void rt_cu_gather_augment(rt_exec *e, const void *data, const int32_t *idx, void *dst,
                          int64_t rows, int64_t C, int64_t H, int64_t W, int64_t elem,
                          int64_t pad, int hflip, uint64_t seed, int64_t epoch);
/* data.cuh's rt_gather_resized_crop (the twin of augment.c's): u8 images [C, H, W] */
void rt_cu_gather_resized_crop(rt_exec *e, const void *data, const int32_t *idx, void *dst,
                               int64_t rows, int64_t C, int64_t H, int64_t W, const rt_rrc *k,
                               int hflip, uint64_t seed, int64_t epoch);
/* loader.mask with the data on the GPU: the training set's rows of input `in` (ids) and
 * `tgt` (targets), both i32 [T], masked after they are gathered (rt_cu_mask_tokens),
 * each position's draw from (the rule's seed, the slot's epoch, its sample, its place). */
void rt_cu_set_mask(rt_exec *e, const rt_mask_rule *k, int in, int tgt);
/* data.cuh's rt_mask_tokens (the twin of augment.c's rt_mask_rows): rows of T ids x and
 * targets y on the device, row r sample idx[r], masked in place. */
void rt_cu_mask_tokens(rt_exec *e, void *x, void *y, const int32_t *idx, int64_t rows, int64_t T,
                       const rt_mask_rule *k, int64_t epoch);
void rt_cu_upload_done(rt_exec *e);
/* Around a forward(/backward) pass: begin_pass resets the device loss stats of pass
 * `pass` of a step (0, 1, ... with accumulation; each pass has its own, so the host
 * need not read them between passes; validation's passes all add into pass 0's);
 * end_pass waits for the work queued and adds the current pass's stats into
 * e->loss_sum and e->correct. */
void rt_cu_begin_pass(rt_exec *e, int pass);
void rt_cu_end_pass(rt_exec *e);
/* a step's last pass ended without a wait: the statistics of its passes and the n
 * doubles at f64 (0: none; at most RT_CU_F64) copied behind the queued work;
 * rt_cu_step_wait waits for those copies, adds the last pass's statistics into e and
 * returns the first double; rt_cu_pass_stat then gives pass `pass`'s (device_cuda.c) */
#define RT_CU_F64 2
void rt_cu_step_queue(rt_exec *e, rt_dptr f64, int n);
double rt_cu_step_wait(rt_exec *e);
/* The copies go to RT_CU_RING places in turn: rt_cu_step_place is the last one's;
 * after a wait for a later one (rt_cu_step_wait, rt_cu_sync), rt_cu_place_stat and
 * rt_cu_place_f64 give an earlier one's numbers, while fewer than RT_CU_RING queued
 * since (the loop's steps queued without a wait) */
#define RT_CU_RING 64
int rt_cu_step_place(rt_exec *e);
const rt_cu_stat *rt_cu_place_stat(rt_exec *e, int at, int pass);
double rt_cu_place_f64(rt_exec *e, int at, int i);
/* --profile (prof.c): n timing events made before the loop; record event k of this
 * pass on the compute stream; after the pass, record event n, wait for it and give
 * ms[k] = time from event k to k + 1 */
void rt_cu_prof_setup(rt_exec *e, int n);
void rt_cu_prof_event(rt_exec *e, int k);
void rt_cu_prof_elapsed(rt_exec *e, int n, float *ms);
const rt_cu_stat *rt_cu_pass_stat(rt_exec *e, int pass);
void rt_cu_zero(rt_exec *e, rt_dptr p, int64_t floats);
void rt_cu_zero16(rt_exec *e, rt_dptr p, int64_t halves);

/* Training and validation passes as CUDA graphs (device_cuda.c, "graphs of training
 * passes"): with graphs enabled (rt_cu_graphs_enable; the loop decides; e->train set
 * for the key), rt_cu_graph_begin before a pass's forward says RT_CU_GRAPH_RAN (its graph was launched: skip the pass's host
 * code), RT_CU_GRAPH_CAPTURE (run the host code, then rt_cu_graph_end) or
 * RT_CU_GRAPH_NONE (run it as usual). rt_cu_graph_end: 1 when the captured graph was
 * launched, 0 when the capture failed (nothing ran: run the pass again; graphs are off
 * from now on). */
enum { RT_CU_GRAPH_NONE, RT_CU_GRAPH_RAN, RT_CU_GRAPH_CAPTURE };
void rt_cu_graphs_enable(rt_exec *e, int on);
int rt_cu_graph_begin(rt_exec *e);
int rt_cu_graph_end(rt_exec *e);
/* cuda_blas.c: is a graph being captured? Then a nonzero status (a failed call) is
 * kept for rt_cu_graph_end instead of taken as cuBLASLt's refusal or an error. */
int rt_cu_capture_failed(rt_exec *e, int status);

/* The communication stream (NCCL): fork_comm makes it wait for what the compute stream
 * has queued; join_comm makes the compute stream wait for it. */
void *rt_cu_comm_stream(rt_exec *e);
void rt_cu_fork_comm(rt_exec *e);
void rt_cu_join_comm(rt_exec *e);
/* From now on the host polls the compute stream instead of blocking on it, calling
 * rt_nccl_watch between polls (a collective whose peer died never completes). */
void rt_cu_watch_comm(rt_exec *e);

/* cuBLASLt's functions cuda_blas.c takes, resolved without using them (no GPU needed):
 * 0, or -1 with the reason in why. */
int rt_cu_blas_symbols(char *why, size_t n);

/* ---- NCCL (nccl.c): gradients across GPUs ---------------------------------------------- */

int rt_nccl_load(char *why, size_t n);
int rt_nccl_version(void);     /* e.g. 22703, or -1 */
/* Joins the communicator of all ranks (MPI broadcasts rank 0's id); exits 2 without NCCL. */
void rt_nccl_open(rt_exec *e);
/* In-place sum over ranks of n floats at device address p, after the compute stream's
 * queued work, on the communication stream. join: compute waits for all of them. */
void rt_nccl_allreduce(rt_exec *e, float *p, int64_t n);
void rt_nccl_join(rt_exec *e);
/* In-place sum over ranks of n doubles at device address p inside a pass (SyncBatchNorm's
 * statistics), after the collectives queued before it; the compute stream waits for it. */
void rt_nccl_allreduce_f64(rt_exec *e, double *p, int64_t n);
/* zero1: the sum over ranks of grads[a, b), the part inside rank r's shard (counts: every
 * rank's shard length, shards in rank order) landing in place on rank r; asynchronous. */
void rt_nccl_reduce_shards(rt_exec *e, float *grads, int64_t a, int64_t b, const int64_t *counts);
/* zero1: every rank's shard of params from its owner to all (then joined). */
void rt_nccl_gather_shards(rt_exec *e, float *params, const int64_t *counts);
/* While a wait polls: exits 2 on NCCL's asynchronous error or past TRAINC_DIST_TIMEOUT. */
void rt_nccl_watch(double waited);
void rt_nccl_close(void);

/* ---- NVRTC and the kernel cache (nvrtc.c) -------------------------------------------- */

/* The oldest GPU trainc's kernels run on: sm_80 (Ampere), for bf16/fp16 mma.sync,
 * ldmatrix and cp.async. */
#define RT_CU_MIN_SM 80
int rt_nvrtc_load(char *why, size_t n);
int rt_nvrtc_supports(int sm, char *list, size_t n);
int rt_nvrtc_version(int *major, int *minor);
/* `src` for `arch`: "sm_90" gives a cubin, "compute_80" PTX; NVRTC splits the work
 * over `threads` threads. 0 and a malloc'd image, or -1; *log (malloc'd, may be NULL)
 * holds NVRTC's messages either way. */
int rt_nvrtc_compile(const char *src, const char *name, const char *arch, int threads,
                     void **image, size_t *size, char **log);
/* The cache (TRAINC_CACHE_DIR, else ~/.cache/trainc): keyed by source hash, arch and
 * NVRTC version. get: 0 and a malloc'd image, or -1. put: best effort, atomic. */
int rt_kcache_get(const char *src, const char *arch, void **image, size_t *size);
void rt_kcache_put(const char *src, const char *arch, const void *image, size_t size);

/* For tests (tests/gpu/): open device 0, compile `source` with NVRTC for it and load
 * it, reserve `scratch` bytes; returns an rt_exec whose calls run on the GPU. */
rt_exec *rt_cu_test_open(const char *source, size_t scratch);
/* For tests: device memory [base, base + bytes) holds activations stored as `prec`
 * (RT_PREC_BF16 or RT_PREC_FP16), as a mixed-precision model's arena does: the GEMMs
 * take operands there as 16-bit (rt_cu_operand), attention its tensor-core launch. */
void rt_cu_test_arena(rt_exec *e, rt_dptr base, size_t bytes, int prec);
/* For tests, after rt_cu_test_arena: [base, base + bytes) holds fp32 parameters whose
 * 16-bit copies are at copy (half the offset), as a mixed-precision model's pool does:
 * a GEMM's epilogue may take a bias there as its copy (rt_cu_operand). */
void rt_cu_test_params(rt_exec *e, rt_dptr base, size_t bytes, rt_dptr copy);
/* check_ops: e->grads becomes a zero2 gradient region of `chunks` chunks (the driver's
 * allocation granularity, returned) whose shard runs from the middle of chunk 0 to the
 * middle of chunk 1, as rt_cu_init sets one up. */
size_t rt_cu_test_grads(rt_exec *e, int chunks);
/* dl.c: opens the first of `names` (NULL-terminated) that loads and sets *fns[i] to
 * symbol syms[i], i < n. 0, or -1 with why = "WHAT (NAMES[0]) is not installed: ..."
 * or "WHAT lacks SYM (too old?)". */
int rt_dl_load(const char *what, const char *const *names, const char *const *syms,
               void **const *fns, int n, char *why, size_t wn);
#define RT_DL_NAME(fn) #fn,
#define RT_DL_SLOT(fn) (void **)&p_##fn,

rt_dptr rt_cu_alloc(size_t bytes);                 /* set-up only (zeroed) */
/* The same, for a buffer of the trainer's set-up outside its three blocks (the
 * optimizer's table of tensor chunks): counted with the fixed bytes, so that
 * rt_cu_allocated is every byte the trainer allocated. */
rt_dptr rt_cu_alloc_fixed(rt_exec *e, size_t bytes);
/* The same, not zeroed, or 0 where the GPU has no room for it. */
rt_dptr rt_cu_try_alloc(rt_exec *e, size_t bytes);
/* A pass of the caller's own as a CUDA graph (the decode program's one-token pass):
 * rt_cu_capture_begin starts capturing the compute stream's calls (0: the driver
 * refuses); rt_cu_capture_end ends it and launches the graph once: its handle, or NULL
 * where the capture failed (nothing ran: the caller runs the pass again without one);
 * rt_cu_graph_run launches it again, rt_cu_graph_free destroys it. */
int rt_cu_capture_begin(rt_exec *e);
void *rt_cu_capture_end(rt_exec *e);
void rt_cu_graph_run(rt_exec *e, void *graph);
void rt_cu_graph_free(void *graph);
void rt_cu_upload(rt_dptr dst, const void *src, size_t bytes);   /* synchronous */
/* An upload from pinned host buffer k (< RT_CU_ORDERED; a GAN's latent batches) queued
 * on the compute stream, in order with the passes, without a wait; ordered_wait: the
 * host waits until buffer k's last such copy is done, before writing it again. */
#define RT_CU_ORDERED 2
void rt_cu_upload_ordered(rt_exec *e, rt_dptr dst, const void *src, size_t bytes, int k);
void rt_cu_upload_ordered_wait(rt_exec *e, int k);
/* The device's copy of BYTES of constants the generated code holds (a rope's inverse frequencies,
 * which it passes as a literal): each distinct content is uploaded once, at its first
 * use (the first pass of each kind runs outside a CUDA graph), and kept. */
rt_dptr rt_cu_const(rt_exec *e, const void *data, size_t bytes);
void rt_cu_download(void *dst, rt_dptr src, size_t bytes);       /* synchronous */
/* BYTES from device memory src to dst, which do not overlap, queued on the compute stream
 * after the work queued so far (--num-samples' caches copied from their prompt's). */
void rt_cu_copy_dd(rt_exec *e, rt_dptr dst, rt_dptr src, size_t bytes);

/* ---- GEMM (cuda_blas.c) ------------------------------------------------------------ */

/* rt_gemm's contract (row-major C = alpha op(A) op(B) + beta C), on device pointers. */
void rt_cu_gemm(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                float beta, float *C, int64_t ldc);
/* how many GEMMs cuda_blas.c has run cut into slices of K: all, or (bgradb) those whose
 * slices summed a bias gradient too (for tests/gpu/check_ops) */
int64_t rt_cu_ksplit_runs(int bgradb);

/* ---- the ops (cuda_ops.c): each has the contract of its CPU twin in trainc_rt.h ----- */

void rt_cu_colsum_add(rt_exec *e, const float *dy, float *db, int64_t rows, int64_t cols);
/* fp8-mixed (fp8.cuh): x, rows x cols of act_t rows ld apart, cast to FP8 (e5m2: E5M2,
 * else E4M3) with the per-tensor scale s = FP8_MAX / max |x| into y, packed: [rows,
 * cols], or with trans [cols, rows]; scale[0] = the maximum, scale[1] = 1 / s (the
 * GEMM's dequantization factor), on the device. part: with nparts > 0, the nparts
 * partial maxima of x its producers wrote (a slot, a weight's chunks); with 0, 256
 * floats of scratch that rt_fp8_amax fills first (a pass over x). One or two kernels on
 * the compute stream; no host wait. */
#define RT_CU_FP8_PART_BYTES 1024
void rt_cu_fp8_cast(rt_exec *e, rt_dptr x, int64_t rows, int64_t cols, int64_t ld, int e5m2,
                    int trans, rt_dptr y, rt_dptr part, int nparts, rt_dptr scale);
/* Both layouts at once, from one maximum and one cast kernel: y [rows, cols] and yt
 * [cols, rows], the bytes rt_cu_fp8_cast writes with trans 0 and 1 (the scale as there) */
void rt_cu_fp8_cast_both(rt_exec *e, rt_dptr x, int64_t rows, int64_t cols, int64_t ld,
                         int e5m2, rt_dptr y, rt_dptr yt, rt_dptr part, int nparts, rt_dptr scale);
/* The maximum of x folded into the slot at slot (a pass: where no kernel of ours wrote
 * x, as a producer's fold would have) */
void rt_cu_fp8_fold(rt_exec *e, rt_dptr x, int64_t rows, int64_t cols, int64_t ld, rt_dptr slot);
/* fp8-mixed's maxima kept on the device (cuda_ops.c): the slots and the weights'
 * partials, allocated for model m (rt_cu_init); rt_fp8_amax_reset and rt_fp8_amax_slot's
 * twins; the weights' partials from a 16-bit copy made from the host (pcopy); and
 * where the partials of weight w (n elements, the whole tensor: its fp32 address) are:
 * 1 with *part and *nparts, 0 where w is no whole weight. */
void rt_cu_fp8_setup(rt_exec *e, const rt_model *m);
void rt_cu_fp8_amax_reset(rt_exec *e, int first, int n);
unsigned *rt_cu_fp8_amax_slot(rt_exec *e, int k);
void rt_cu_fp8_weights_amax(rt_exec *e, const rt_model *m, rt_dptr pcopy);
int rt_cu_fp8_weight_part(rt_exec *e, const void *w, int64_t n, rt_dptr *part, int *nparts);
/* rt_fp8_amax_use's twin; its slots taken by the next FP8 GEMM (all three), or by a
 * norm's launch (the output's, which its kernels' fp8-mixed instances fold into: the
 * slot's address, 0 for none) */
void rt_cu_fp8_amax_use(rt_exec *e, int a, int b, int out);
void rt_cu_fp8_take_use(int *a, int *b, int *out);
rt_dptr rt_cu_fp8_out_slot(rt_exec *e);
void rt_cu_rowsum_add(rt_exec *e, const float *x, float *db, int64_t rows, int64_t cols);
/* conv.cuh's kernels divide 32-bit indices where every tensor of a call has fewer than
 * 2^31 elements; on (tests only): always the 64-bit path. */
void rt_cu_force_wide_index(int on);
void rt_cu_im2col(rt_exec *e, const float *x, float *col, int64_t B, int64_t C, int64_t H,
                  int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
void rt_cu_col2im(rt_exec *e, const float *dcol, float *dx, int64_t B, int64_t C, int64_t H,
                  int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
void rt_cu_maxpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_maxpool2d_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t planes,
                         int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_avgpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_avgpool2d_bwd(rt_exec *e, const float *dy, float *dx, int64_t planes, int64_t H,
                         int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_cu_batchnorm_fwd(rt_exec *e, const float *x, const float *w, const float *b,
                         float *scale, float *shift, float *mean, float *rstd, float *run_mean,
                         float *run_var, float *count, int64_t B, int64_t C, int64_t HW,
                         float eps, float momentum, int64_t sync);
void rt_cu_batchnorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                         const float *rstd, const float *dy, float *dx, float *dw, float *db,
                         int64_t B, int64_t C, int64_t HW, int64_t sync);
void rt_cu_layernorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                         float *mean, float *rstd, int64_t rows, int64_t d, float eps);
void rt_cu_layernorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                         const float *rstd, const float *dy, const float *add, float *dx,
                         float *dw, float *db, int64_t rows, int64_t d);
void rt_cu_grn_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                   float *g, int64_t B, int64_t T, int64_t C);
void rt_cu_grn_bwd(rt_exec *e, const float *x, const float *w, const float *g, const float *dy,
                   float *dx, float *dw, float *db, int64_t B, int64_t T, int64_t C);
void rt_cu_rmsnorm_fwd(rt_exec *e, const float *x, const float *w, float *y, float *rstd,
                       int64_t rows, int64_t d, float eps);
void rt_cu_rmsnorm_bwd(rt_exec *e, const float *x, const float *w, const float *rstd,
                       const float *dy, const float *add, float *dx, float *dw, int64_t rows,
                       int64_t d);
void rt_cu_qk_norm_fwd(rt_exec *e, const float *x, const float *wq, const float *wk, float *y,
                       float *rstd, int64_t rows, int64_t dq, int64_t dk, int64_t dv, float eps);
void rt_cu_qk_norm_bwd(rt_exec *e, const float *x, const float *wq, const float *wk,
                       const float *rstd, const float *dy, float *dx, float *dwq, float *dwk,
                       int64_t rows, int64_t dq, int64_t dk, int64_t dv);
/* the mixture of experts (cuda_moe.c): moe.c's calls' contracts */
void rt_cu_moe_dispatch_fwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                            float *probs, float *gate, float *idx, float *offs, float *xg,
                            float *h, float *stats, int64_t n, int64_t d, int64_t E, int64_t k,
                            int64_t h2, int64_t norm, int64_t row);
void rt_cu_moe_dispatch_bwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                            const float *probs, const float *gate, const float *idx,
                            const float *offs, const float *dgate, const float *agrad,
                            const float *dh, float *xg, float *dl, float *dx, float *dwr,
                            float *dwup, int64_t n, int64_t d, int64_t E, int64_t k, int64_t h2,
                            int64_t norm);
void rt_cu_moe_aux(rt_exec *e, const float *stats, float *agrad, int64_t L, int64_t n, int64_t E,
                   float coef);
void rt_cu_moe_combine_fwd(rt_exec *e, const float *act, const float *wdown, const float *gate,
                           const float *idx, const float *offs, float *o, float *y, int64_t n,
                           int64_t d, int64_t E, int64_t k, int64_t hid);
void rt_cu_moe_combine_bwd(rt_exec *e, const float *act, const float *wdown, const float *gate,
                           const float *idx, const float *offs, const float *dy, float *g,
                           float *da, float *dgate, float *dwdown, int64_t n, int64_t d,
                           int64_t E, int64_t k, int64_t hid);
void rt_cu_glu_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act);
void rt_cu_glu_gated_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h,
                         int act);
void rt_cu_glu_gated_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                         int64_t h, int act);
void rt_cu_glu_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                   int64_t h, int act);
/* Adds to rt_cu_stats(e); e->terms is counted on the host by the caller's twin rules. */
void rt_cu_cross_entropy(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                         int64_t rows, int64_t C, int64_t ld);
/* conv2d with groups 1 without columns (rt.h's conv_*: 0 where the shape is not theirs);
 * rt_cu_conv_kernels sets TRAINC_CONV_KERNELS's mode: 0 off, 1 by shape, 2 wherever a
 * kernel can take the shape, 3 as 2 but for the tensor cores' implicit GEMMs
 * (tests/gpu/check_ops) */
void rt_cu_conv_kernels(int mode);
int rt_cu_conv_igemm_fwd(rt_exec *e, const float *x, const float *w, float *yt, int64_t B,
                         int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                         int64_t OH, int64_t OW, int64_t Cout);
int rt_cu_conv_direct_fwd(rt_exec *e, const float *x, const float *w, float *yt, int64_t B,
                          int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                          int64_t OH, int64_t OW, int64_t Cout);
int rt_cu_conv_direct_dw(rt_exec *e, const float *x, const float *dyt, float *dw, int64_t B,
                         int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                         int64_t OH, int64_t OW, int64_t Cout);
int rt_cu_conv_igemm_dw(rt_exec *e, const float *x, const float *dyt, float *dw, int64_t B,
                        int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                        int64_t OH, int64_t OW, int64_t Cout);
int rt_cu_conv_igemm_dx_tc(rt_exec *e, const float *w, const float *dyt, float *dx, int64_t B,
                           int64_t C, int64_t H, int64_t W, int64_t k, int64_t pad, int64_t OH,
                           int64_t OW, int64_t Cout);
int rt_cu_conv_igemm_dx(rt_exec *e, const float *w, const float *dyt, float *dx, int64_t B,
                        int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                        int64_t OH, int64_t OW, int64_t Cout);
void rt_cu_gconv_fwd(rt_exec *e, const float *x, const float *w, const float *bias, float *y,
                     int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                     int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G);
void rt_cu_gconv_bwd_data(rt_exec *e, const float *dy, const float *w, float *dx, int64_t B,
                          int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                          int64_t OH, int64_t OW, int64_t Cout, int64_t G);
void rt_cu_gconv_bwd_weight(rt_exec *e, const float *x, const float *dy, float *dw, float *db,
                            int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                            int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G);
void rt_cu_cross_entropy_ls(rt_exec *e, const float *logits, const int32_t *target,
                            float *dlogits, int64_t rows, int64_t C, int64_t ld, float ls);
void rt_cu_dpo(rt_exec *e, const float *logits, const int32_t *target, const float *ref,
               float *dlogits, float *logps, int64_t samples, int64_t rows, int64_t C,
               int64_t ld, float beta, float gamma, float ls, int64_t kind,
               const int32_t *sft, const int32_t *label, float wd, float wu,
            float sft_weight);
void rt_cu_mse(rt_exec *e, const float *y, const float *t, float *dy, int64_t n);
/* rt_ce_count's twin: the count and the scale into the pass's statistics */
void rt_cu_ce_count(rt_exec *e, const int32_t *target, int64_t rows);
void rt_cu_gan_loss(rt_exec *e, const float *z, float *dz, int64_t rows, int term);
void rt_cu_attention_fwd(rt_exec *e, const float *qkv, float *lse, float *y, int64_t B,
                         int64_t T, int64_t d, int64_t H, int causal);
void rt_cu_attention_bwd(rt_exec *e, const float *qkv, const float *lse, const float *y,
                         const float *dy, float *dqkv, int64_t B, int64_t T, int64_t d, int64_t H,
                         int causal);
void rt_cu_attention_ext_fwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                             float *lse, float *y, int64_t B, int64_t T, int64_t d, int64_t H,
                             int64_t KV, int causal, int64_t window, float theta, float factor,
                             float low, float high, int64_t orig, const float *ext, float scale,
                             float softcap, const int32_t *pos);
void rt_cu_attention_ext_bwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                             const float *lse, const float *y, const float *dy, float *dqkv,
                             float *dqn, float *dkn, int64_t B, int64_t T, int64_t d, int64_t H,
                             int64_t KV, int causal, int64_t window, float theta, float factor,
                             float low, float high, int64_t orig, const float *ext, float scale,
                             float softcap, const int32_t *pos);
void rt_cu_attention_decode(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                            float *y, int64_t kv_off, int64_t B, int64_t T, int64_t d, int64_t H,
                            int64_t KV, int64_t window, float theta, float factor, float low,
                            float high, int64_t orig, const float *ext, float scale,
                            float softcap);
void rt_cu_pos_row_add(rt_exec *e, const float *x, const float *w, float *y, int64_t B, int64_t d);
void rt_cu_embedding_fwd(rt_exec *e, const int32_t *idx, const float *w, float *out,
                         int64_t rows, int64_t V, int64_t dim);
void rt_cu_embedding_bwd(rt_exec *e, const int32_t *idx, const float *dout, float *dw,
                         int64_t rows, int64_t V, int64_t dim);

/* The optimizer over the parameters [lo, hi) of the flat region (cuda_ops.c): all of
 * them (0, trainable_floats), or a ZeRO-1 shard. Set-up uploads the table of chunks
 * (offsets, weight decay or not) once; the step is one launch. Same contract as
 * rt_grad_sumsq / rt_optim_step_range in rt_loop.h, on device pointers: params and
 * grads are the whole region, state holds [lo, hi) only. */
void rt_cu_optim_setup(rt_exec *e, const rt_train_config *c, const rt_model *m, int64_t lo,
                       int64_t hi);
/* optimizer muon's workspace, which set-up allocates: its largest matrix's
 * (rt_muon_work_bytes); 0 under another optimizer or without such a matrix */
size_t rt_cu_muon_work_bytes(const rt_train_config *c, const rt_model *m);
double rt_cu_grad_sumsq(rt_exec *e, const rt_model *m, rt_dptr grads);  /* synchronizes */
double rt_cu_grad_norm(rt_exec *e, const rt_model *m, rt_dptr grads);   /* its square root */
/* the sum of squares queued, not waited for: its device address (a double in scratch,
 * valid until the next call that uses scratch; 0 when there are no parameters) */
rt_dptr rt_cu_grad_sumsq_queue(rt_exec *e, const rt_model *m, rt_dptr grads);
void rt_cu_optim_step(rt_exec *e, const rt_train_config *c, const rt_model *m, rt_dptr params,
                      rt_dptr grads, rt_dptr state, int64_t t, double lr, float gscale, int clip);
/* train.ema's take of n weights into the average (optim.cuh's rt_ema_take; optim.c's
 * rt_ema_take is the twin), and n floats of a and b exchanged (rt_swap) */
void rt_cu_ema_take(rt_exec *e, rt_dptr params, rt_dptr ema, int64_t n, double decay, int first);
void rt_cu_swap(rt_exec *e, rt_dptr a, rt_dptr b, int64_t n);
/* train.swa's take of n weights into the average after `taken` takes (optim.cuh's
 * rt_swa_take; optim.c's rt_swa_take is the twin) */
void rt_cu_swa_take(rt_exec *e, rt_dptr params, rt_dptr avg, int64_t n, int64_t taken);
/* the same step with clip_grad_norm_'s factor (c->grad_clip; loss scale 1) worked out
 * by the kernel from the sum of squares at device address sumsq (rt_cu_grad_sumsq_queue):
 * the step is queued without the host reading the norm */
void rt_cu_optim_step_clip(rt_exec *e, const rt_train_config *c, const rt_model *m,
                           rt_dptr params, rt_dptr grads, rt_dptr state, int64_t t, double lr,
                           rt_dptr sumsq);
/* A GAN's network d (0: the generator, 1: the discriminator; rt_model.gan_gen_floats
 * splits the region): its gradients' sum of squares (synchronizes), and its update with
 * c its optimizer (rt_config_for_net), state's parts over the whole region. */
double rt_cu_gan_grad_sumsq(rt_exec *e, const rt_model *m, int d, rt_dptr grads);
/* network d's update queued without a wait: its sum of squares copied to sumsq_out (a
 * device double), the clip factor worked out by the kernel from it (loss scale 1) */
void rt_cu_gan_update_queued(rt_exec *e, const rt_train_config *c, const rt_model *m, int d,
                             rt_dptr params, rt_dptr grads, rt_dptr state, int64_t t, double lr,
                             rt_dptr sumsq_out);
void rt_cu_gan_optim_step(rt_exec *e, const rt_train_config *c, const rt_model *m, int d,
                          rt_dptr params, rt_dptr grads, rt_dptr state, int64_t t, double lr,
                          float gscale, int clip);

#endif
