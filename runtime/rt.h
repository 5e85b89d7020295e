/* rt.h: the runtime's internal API, shared by the runtime's modules and by the
 * compiler (which links the runtime for `trainc run` and reuses its config table).
 * Generated code never includes this file; it includes trainc_rt.h only. */
#ifndef RT_H
#define RT_H

#include <stdarg.h>
#include <stdio.h>
#include "trainc_rt.h"
#include "rt_half.h"

/* trainc and the runtime it links into trainers are one release */
#define TRAINC_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------ */

/* Exit codes of docs/runs.md. */
enum { RT_EXIT_OK = 0, RT_EXIT_INPUT = 1, RT_EXIT_RUNTIME = 2, RT_EXIT_DIVERGED = 3,
       RT_EXIT_INTERRUPTED = 130 };

/* Bad input: prints the message and exits 1. The message starts with its place (a
 * file's path, or a $.path of the training spec), which comes first then, as in
 * "PATH: error: MESSAGE" (util.c's print_error); else "trainc: error: MESSAGE". */
extern const char *rt_spec_file;   /* the training spec's file, for "$." places */
_Noreturn void rt_input_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Failure at run time: prints the message and exits 2. */
_Noreturn void rt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A broken internal rule. */
_Noreturn void rt_die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define rt_die(...) rt_die_at(__FILE__, __LINE__, __VA_ARGS__)

void *rt_xmalloc(size_t n);   /* zeroed, 64-byte aligned; exits 2 on failure */
/* Do the n bytes at a and the n bytes at b share one? (host or device addresses) */
static inline int rt_overlap(const void *a, const void *b, size_t n)
{
    return (uintptr_t)a < (uintptr_t)b + n && (uintptr_t)b < (uintptr_t)a + n;
}
void rt_xfree(void *p);
/* A file written whole or not at all: rt_tmp_open opens PATH.tmp for writing (NULL,
 * errno set); rt_tmp_commit closes it and renames it to PATH, or removes it when a
 * write, the close or the rename failed: 0, or -1 with errno set. */
FILE *rt_tmp_open(const char *path);
int rt_tmp_commit(FILE *f, const char *path);
/* The PATH.tmp of the last rt_tmp_open not yet committed (NULL: none), which a signal
 * that ends --eval or --predict at once removes (signals.c). */
extern const char *volatile rt_tmp_live;
/* PATH becomes a second name of file SRC (a hard link, put in place by rename), or,
 * where the file system has no hard links, a copy written whole or not at all: 0, or
 * -1 with errno set. */
int rt_link_or_copy(const char *src, const char *path);
/* " (is the disk full?)" after a write that failed with err ENOSPC, EDQUOT or EFBIG (a
 * file size limit), else "". */
const char *rt_full_hint(int err);
/* XXH64 (seed 0), the hash `xxhsum -H1` prints, over a file's bytes, so a checkpoint's
 * files can be checked by hand: 0 with *hash and *bytes set, or -1 with errno set. */
int rt_file_xxh64(const char *path, uint64_t *hash, int64_t *bytes);
/* Opens a regular file to read (a descriptor, or -1 with errno; EINVAL: not a regular
 * file, such as a FIFO, which is not waited on, or a device) and its size in *size. */
int rt_open_regular(const char *path, int64_t *size);
/* XXH64 of n bytes with a seed (the same function, in memory; `xxhsum -H1` uses seed
 * 0); a hash as the next call's seed chains several pieces. */
uint64_t rt_xxh64(const void *p, size_t n, uint64_t seed);

/* ---- the GPU's versions of the runtime calls -------------------------------- */

/* On a GPU, e->dev points at the device layer's state, whose first member points at
 * this table (the ops files register their functions in it, rt_cu_register):
 * the CPU calls hand over through it, so CPU-only code links without the device layer. */
typedef struct rt_gpu_calls {
    void (*launch_ew)(rt_exec *e, const char *name, int64_t n, int nargs, void **args);
    void (*gemm)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);
    void (*gemm_bias)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc, const float *bias, const float *R, int act,
                      float *Y);
    void (*gemm_dbias)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc, float *db, int fresh);
    void (*gemm_dgelu)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *D, int64_t ldd, const float *pre);
    /* fp8-mixed's linear GEMMs (rt_gemm_fp8 ...): the four above's signatures */
    void (*gemm_fp8)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float beta, float *C, int64_t ldc);
    void (*gemm_bias_fp8)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float *C, int64_t ldc, const float *bias, const float *R, int act,
                          float *Y);
    void (*gemm_dbias_fp8)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float beta, float *C, int64_t ldc, float *db, int fresh);
    void (*gemm_dgelu_fp8)(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float *D, int64_t ldd, const float *pre);
    /* rt_fp8_dy_pair: the next two FP8 GEMMs are a linear layer's backward pair on dy */
    void (*fp8_dy_pair)(rt_exec *e, const float *dy);
    /* rt_fp8_amax_reset, rt_fp8_amax_slot, rt_fp8_amax_use */
    void (*fp8_amax_reset)(rt_exec *e, int first, int n);
    unsigned *(*fp8_amax_slot)(rt_exec *e, int k);
    void (*fp8_amax_use)(rt_exec *e, int a, int b, int out);
    void (*colsum_add)(rt_exec *e, const float *dy, float *db, int64_t rows, int64_t cols);
    void (*rowsum_add)(rt_exec *e, const float *x, float *db, int64_t rows, int64_t cols);
    void (*im2col)(rt_exec *e, const float *x, float *col, int64_t B, int64_t C, int64_t H,
                   int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
    void (*col2im)(rt_exec *e, const float *dcol, float *dx, int64_t B, int64_t C, int64_t H,
                   int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
    void (*maxpool2d_fwd)(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H, int64_t W,
                          int64_t k, int64_t s, int64_t OH, int64_t OW);
    void (*maxpool2d_bwd)(rt_exec *e, const float *x, const float *dy, float *dx, int64_t planes,
                          int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
    void (*avgpool2d_fwd)(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H, int64_t W,
                          int64_t k, int64_t s, int64_t OH, int64_t OW);
    void (*avgpool2d_bwd)(rt_exec *e, const float *dy, float *dx, int64_t planes, int64_t H,
                          int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
    void (*layernorm_fwd)(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                          float *mean, float *rstd, int64_t rows, int64_t d, float eps);
    void (*layernorm_bwd)(rt_exec *e, const float *x, const float *w, const float *mean,
                          const float *rstd, const float *dy, const float *add, float *dx,
                          float *dw, float *db, int64_t rows, int64_t d);
    void (*rmsnorm_fwd)(rt_exec *e, const float *x, const float *w, float *y, float *rstd,
                        int64_t rows, int64_t d, float eps);
    void (*rmsnorm_bwd)(rt_exec *e, const float *x, const float *w, const float *rstd,
                        const float *dy, const float *add, float *dx, float *dw, int64_t rows,
                        int64_t d);
    void (*grn_fwd)(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                    float *g, int64_t B, int64_t T, int64_t C);
    void (*grn_bwd)(rt_exec *e, const float *x, const float *w, const float *g, const float *dy,
                    float *dx, float *dw, float *db, int64_t B, int64_t T, int64_t C);
    void (*qk_norm_fwd)(rt_exec *e, const float *x, const float *wq, const float *wk, float *y,
                        float *rstd, int64_t rows, int64_t dq, int64_t dk, int64_t dv,
                        float eps);
    void (*qk_norm_bwd)(rt_exec *e, const float *x, const float *wq, const float *wk,
                        const float *rstd, const float *dy, float *dx, float *dwq, float *dwk,
                        int64_t rows, int64_t dq, int64_t dk, int64_t dv);
    void (*moe_dispatch_fwd)(rt_exec *e, const float *x, const float *wr, const float *wup,
                             float *probs, float *gate, float *idx, float *offs, float *xg,
                             float *h, float *stats, int64_t n, int64_t d, int64_t E, int64_t k,
                             int64_t h2, int64_t norm, int64_t row);
    void (*moe_dispatch_bwd)(rt_exec *e, const float *x, const float *wr, const float *wup,
                             const float *probs, const float *gate, const float *idx,
                             const float *offs, const float *dgate, const float *agrad,
                             const float *dh, float *xg, float *dl, float *dx, float *dwr,
                             float *dwup, int64_t n, int64_t d, int64_t E, int64_t k, int64_t h2,
                             int64_t norm);
    void (*moe_aux)(rt_exec *e, const float *stats, float *agrad, int64_t L, int64_t n, int64_t E,
                    float coef);
    void (*moe_combine_fwd)(rt_exec *e, const float *a, const float *wdown, const float *gate,
                            const float *idx, const float *offs, float *o, float *y, int64_t n,
                            int64_t d, int64_t E, int64_t k, int64_t hid);
    void (*moe_combine_bwd)(rt_exec *e, const float *a, const float *wdown, const float *gate,
                            const float *idx, const float *offs, const float *dy, float *g,
                            float *da, float *dgate, float *dwdown, int64_t n, int64_t d,
                            int64_t E, int64_t k, int64_t hid);
    void (*glu_fwd)(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act);
    void (*glu_bwd)(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                    int64_t h, int act);
    void (*glu_gated_fwd)(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h,
                          int act);
    void (*glu_gated_bwd)(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                          int64_t h, int act);
    void (*cross_entropy)(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                          int64_t rows, int64_t C, int64_t ld);
    void (*gconv_fwd)(rt_exec *e, const float *x, const float *w, const float *bias, float *y,
                      int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                      int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G);
    void (*gconv_bwd_data)(rt_exec *e, const float *dy, const float *w, float *dx, int64_t B,
                           int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                           int64_t OH, int64_t OW, int64_t Cout, int64_t G);
    void (*gconv_bwd_weight)(rt_exec *e, const float *x, const float *dy, float *dw, float *db,
                             int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                             int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G);
    /* conv2d with groups 1 without im2col's columns (runtime/conv.c's rt_conv_*): each
     * returns 0, doing nothing, where the shape is not one its kernel takes (the caller
     * then runs the GEMM path), else 1 */
    int (*conv_direct_fwd)(rt_exec *e, const float *x, const float *w, float *yt, int64_t B,
                           int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                           int64_t OH, int64_t OW, int64_t Cout);
    int (*conv_direct_dw)(rt_exec *e, const float *x, const float *dyt, float *dw, int64_t B,
                          int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                          int64_t OH, int64_t OW, int64_t Cout);
    int (*conv_igemm_dx)(rt_exec *e, const float *w, const float *dyt, float *dx, int64_t B,
                         int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                         int64_t OH, int64_t OW, int64_t Cout);
    void (*cross_entropy_ls)(rt_exec *e, const float *logits, const int32_t *target,
                             float *dlogits, int64_t rows, int64_t C, int64_t ld, float ls);
    void (*mse)(rt_exec *e, const float *y, const float *t, float *dy, int64_t n);
    void (*dpo)(rt_exec *e, const float *logits, const int32_t *target, const float *ref,
                float *dlogits, float *logps, int64_t samples, int64_t rows, int64_t C,
                int64_t ld, float beta, float gamma, float ls, int64_t kind,
                const int32_t *sft, const int32_t *label, float wd, float wu,
            float sft_weight);
    /* rt_ce_count's: the targets not ignored counted into the pass's statistics, and the
     * loss calls' gradient scale that follows from them, on the device */
    void (*ce_count)(rt_exec *e, const int32_t *target, int64_t rows);
    void (*gan_loss)(rt_exec *e, const float *z, float *dz, int64_t rows, int term);
    void (*attention_fwd)(rt_exec *e, const float *qkv, float *lse, float *y, int64_t B, int64_t T,
                          int64_t d, int64_t H, int causal);
    void (*attention_bwd)(rt_exec *e, const float *qkv, const float *lse, const float *y,
                          const float *dy, float *dqkv, int64_t B, int64_t T, int64_t d,
                          int64_t H, int causal);
    /* NULL where the device has no such kernel (the CPU twin says so) */
    void (*attention_ext_fwd)(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                              float *lse, float *y, int64_t B, int64_t T, int64_t d, int64_t H,
                              int64_t KV, int causal, int64_t window, float theta, float factor,
                              float low, float high, int64_t orig, const float *ext, float scale,
                              float softcap, const int32_t *pos);
    void (*attention_ext_bwd)(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                              const float *lse, const float *y, const float *dy, float *dqkv,
                              float *dqn, float *dkn, int64_t B, int64_t T, int64_t d, int64_t H,
                              int64_t KV, int causal, int64_t window, float theta, float factor,
                              float low, float high, int64_t orig, const float *ext, float scale,
                              float softcap, const int32_t *pos);
    /* the decode program's (--sample's key/value cache) */
    void (*attention_decode)(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                             float *y, int64_t kv_off, int64_t B, int64_t T, int64_t d,
                             int64_t H, int64_t KV, int64_t window, float theta, float factor,
                             float low, float high, int64_t orig, const float *ext, float scale,
                             float softcap);
    void (*pos_row_add)(rt_exec *e, const float *x, const float *w, float *y, int64_t B,
                        int64_t d);
    void (*embedding_fwd)(rt_exec *e, const int32_t *idx, const float *w, float *out, int64_t rows,
                          int64_t V, int64_t dim);
    void (*embedding_bwd)(rt_exec *e, const int32_t *idx, const float *dout, float *dw,
                          int64_t rows, int64_t V, int64_t dim);
    void (*batchnorm_fwd)(rt_exec *e, const float *x, const float *w, const float *b,
                          float *scale, float *shift, float *mean, float *rstd, float *run_mean,
                          float *run_var, float *count, int64_t B, int64_t C, int64_t HW,
                          float eps, float momentum, int64_t sync);
    void (*batchnorm_bwd)(rt_exec *e, const float *x, const float *w, const float *mean,
                          const float *rstd, const float *dy, float *dx, float *dw, float *db,
                          int64_t B, int64_t C, int64_t HW, int64_t sync);
} rt_gpu_calls;
#define RT_GPU(e) (*(const rt_gpu_calls *const *)(e)->dev)

/* ---- the training configuration (docs/spec.md, The training) ---------------------- */

/* RT_OPT_MUON: Muon (torch.optim.Muon) on the hidden layers' matrices (rt_param.muon),
 * AdamW with optimizer.adamw's keys on the other parameters (runtime/muon.c) */
enum { RT_OPT_SGD, RT_OPT_ADAMW, RT_OPT_MUON };
enum { RT_CLIP_NORM, RT_CLIP_VALUE };   /* grad_clip_algorithm */
enum { RT_SWA_COS, RT_SWA_LINEAR };    /* swa.annealing_strategy */
enum { RT_MUON_ADJUST_ORIGINAL, RT_MUON_ADJUST_MATCH_RMS_ADAMW };
enum { RT_SCHED_CONSTANT, RT_SCHED_STEP, RT_SCHED_COSINE, RT_SCHED_LINEAR, RT_SCHED_WSD };
enum { RT_DECAY_LINEAR, RT_DECAY_COSINE, RT_DECAY_1_SQRT };   /* wsd's decay_shape */
enum { RT_MON_VAL_LOSS, RT_MON_VAL_ACC, RT_MON_LOSS };
enum { RT_MODE_MIN, RT_MODE_MAX };
enum { RT_RECOMPUTE_NONE, RT_RECOMPUTE_SELECTIVE, RT_RECOMPUTE_FULL, RT_RECOMPUTE_AUTO };
enum { RT_DIST_DDP, RT_DIST_ZERO1, RT_DIST_ZERO2 };
enum { RT_DEVICE_AUTO, RT_DEVICE_CPU, RT_DEVICE_CUDA };

#define RT_PATH_MAX 1024

typedef struct rt_data_entry {
    char key[64];              /* a model input name, or "tokens" */
    char path[RT_PATH_MAX];    /* as written; relative to the spec's folder */
} rt_data_entry;

/* Every field of the training spec. "null" is stored as -1 for counts and as NAN
 * for reals, and `has_*` flags say whether an object was given at all. */
typedef struct rt_train_config {
    rt_data_entry train[RT_MAX_INPUTS];
    int n_train;
    rt_data_entry val[RT_MAX_INPUTS];
    int n_val;
    int64_t batch_size, accumulate, epochs, max_steps;
    double max_time;           /* seconds, NAN = none */
    int opt;                   /* RT_OPT_* */
    double lr, beta1, beta2, eps, weight_decay, momentum;
    int nesterov;
    int64_t ns_steps;          /* muon: Newton-Schulz iterations; -1 = null (5) */
    int muon_adjust;           /* muon: RT_MUON_ADJUST_* (its lr a matrix's shape scales) */
    int has_adamw;             /* muon: optimizer.adamw given (else its defaults), */
    double aw_lr, aw_beta1, aw_beta2, aw_eps, aw_weight_decay;   /* AdamW's for the rest */
    int has_opt_d;             /* optimizer_d given (a GAN's discriminator) */
    int d_opt;                 /* its fields, as the ones above (rt_opt_of) */
    double d_lr, d_beta1, d_beta2, d_eps, d_weight_decay, d_momentum;
    int d_nesterov;
    int sched;                 /* RT_SCHED_* */
    int64_t warmup_steps, sched_every_steps;
    double final_lr_frac, gamma;
    double decay_frac;         /* wsd: the steps its decay takes, of all; NAN = null (0.2) */
    int decay_shape;           /* wsd: RT_DECAY_* */
    double grad_clip;          /* NAN = none; the norm's bound, or with grad_clip_algo
                                  RT_CLIP_VALUE each element's (rt_clip_norm, rt_clip_value) */
    int grad_clip_algo;        /* RT_CLIP_NORM, RT_CLIP_VALUE */
    int precision;
    double ls_init;            /* fp16-mixed: GradScaler's init_scale */
    int64_t ls_growth_interval;/* and growth_interval (factor 2 up, 0.5 down) */
    int64_t val_every_steps, val_every_epochs, val_batches;
    double val_every_fraction; /* NAN = none; else in (0, 1] (rt_val_fraction_batches) */
    int64_t min_epochs, min_steps; /* -1 = none: early stopping's patience waits for both */
    double limit_train_batches;/* NAN = none; >= 1: an epoch's first this many batches; in
                                  (0, 1): that fraction of them (rt_limit_batches) */
    double limit_val_batches;  /* NAN = none; a validation's first batches, as above */
    int has_early_stopping;
    int es_monitor, es_mode;
    int64_t es_patience;
    double es_min_delta, es_stopping_threshold, es_divergence_threshold;
    int es_check_finite;
    int has_checkpoint;
    int64_t ckpt_every_steps, ckpt_keep;
    int64_t ckpt_every_epochs; /* -1 = null; else also after every this many epochs */
    int64_t ckpt_keep_best;    /* -1 = null; else the weights at the K best monitored values */
    int recompute;
    double memory_budget_mb;   /* NAN = none */
    int dist;
    double bucket_mb;          /* DDP: gradient bucket size */
    int64_t ranks;             /* the ranks recompute auto plans a rank for; -1 = null */
    int64_t workers, prefetch;
    int shuffle, drop_last;
    int on_gpu;                /* RT_ON_GPU_*: the dataset kept in GPU memory */
    int64_t documents;         /* loader.documents: the token that begins each document of
                                  token data (the model's positions from it); -1 = null */
    int has_augment, has_crop; /* loader.augment and its random_crop given */
    int64_t crop_padding;      /* loader.augment.random_crop.padding */
    int crop_fill;             /* loader.augment.random_crop.fill: 0 "zero" (0 after scale and
                                  shift), 1 "raw" (a raw 0, before them: torchvision's
                                  RandomCrop on images, then Normalize) */
    int hflip;                 /* loader.augment.hflip */
    int has_jitter;            /* loader.augment.color_jitter given: its brightness, */
    double jitter[4];          /* contrast, saturation and hue (0: not that one) */
    int has_rrc;               /* loader.augment.random_resized_crop given: */
    double rrc_smin, rrc_smax; /* its scale (the area's share) */
    double rrc_r0, rrc_r1;     /* and aspect ratio ranges */
    int has_mask;              /* loader.mask given: a masked LM's masks drawn as batches are
                                  made (rt_mask_draw) */
    int64_t mask_token;        /* loader.mask.token: the mask token's id; -1 = null */
    double mask_prob;          /* loader.mask.prob: a target position chosen */
    double mask_replace;       /* loader.mask.mask_replace_prob: a chosen one masked */
    double mask_random;        /* loader.mask.random_replace_prob: a chosen one a random id */
    int64_t mask_vocab;        /* loader.mask.vocab: random ids from [0, vocab); -1 = null:
                                  the input's embedding rows */
    char mask_input[RT_PATH_MAX], mask_target[RT_PATH_MAX];   /* loader.mask.input, .target */
    int has_ema;               /* ema given: an exponential moving average of the weights
                                  (rt_ema_step), an optimizer state part of its own */
    double ema_decay;          /* ema.decay: the average keeps decay of itself a take */
    int64_t ema_every;         /* ema.every: a take after every this many steps */
    int64_t ema_start;         /* ema.start_step: the takes start after this step */
    int ema_validate;          /* ema.validate: validation (and best.safetensors) on the
                                  average once it has a take */
    int has_swa;               /* swa given: stochastic weight averaging (swa.c), the
                                  average an optimizer state part of its own as ema's */
    double swa_lr;             /* swa.lr: the rate its epochs anneal to; NAN = null */
    double swa_epoch_start;    /* swa.epoch_start: below 1 a fraction of the epochs, else
                                  the epoch (from 1) it starts at (rt_swa_first_epoch) */
    int64_t swa_anneal_epochs; /* swa.annealing_epochs */
    int swa_anneal;            /* swa.annealing_strategy: RT_SWA_COS, RT_SWA_LINEAR */
    uint64_t seed;
    int64_t log_every;
    int device;
    char out_dir[RT_PATH_MAX]; /* "" = none */
    char freeze[RT_PATH_MAX];  /* the frozen parameters' patterns, ','-joined; "" = none
                                  (compiled in: rt_param.frozen) */
    int has_lora;              /* lora given: low-rank adapters on the targets' weights, */
    int64_t lora_rank;         /* B [out, rank] A [rank, in], added as (alpha / rank) B A x; */
    double lora_alpha;         /* every other parameter frozen but lora.train's; */
    double lora_dropout;       /* dropout on x before A, in training */
    int lora_rslora;           /* the factor alpha / sqrt(rank) (rt_lora_scale) */
    char lora_targets[RT_PATH_MAX];  /* patterns, ','-joined; "" = every linear but the last */
    char lora_train[RT_PATH_MAX];    /* patterns; "" = none (compiled in: rt_param.lora) */
} rt_train_config;

enum { RT_ON_GPU_AUTO, RT_ON_GPU_ALWAYS, RT_ON_GPU_NEVER };

/* trainc's cache folder (compiled kernels, token shards' scans): $TRAINC_CACHE_DIR,
 * else $XDG_CACHE_HOME/trainc, else ~/.cache/trainc; -1 when none can be named. */
int rt_cache_dir(char *dir, size_t n);
/* trainc run's CPU kernels, rebuilt by the system's C compiler (compiler/jit_cc.c):
 * from[i] (ascending addresses) runs as to[i] in every later rt_launch (kernels.c);
 * the table must outlive the run. rt_cpu_launched: whether a CPU kernel was launched. */
typedef struct rt_kernel_swap {
    int n;
    rt_kernel_fn *from, *to;
} rt_kernel_swap;
void rt_kernel_swap_set(const rt_kernel_swap *t);
int rt_cpu_launched(void);
int rt_cpus_usable(void);   /* the affinity mask's CPUs, at least 1 */
uint64_t rt_fnv1a(const void *p, size_t n);   /* FNV-1a, 64 bits (util.c) */
void rt_config_defaults(rt_train_config *c);
/* One optimizer's fields (optimizer, or a GAN discriminator's optimizer_d). */
typedef struct rt_opt_group {
    int opt;
    double lr, beta1, beta2, eps, weight_decay, momentum;
    int nesterov;
} rt_opt_group;
/* d 0: optimizer's; d 1: optimizer_d's when given, else optimizer's. */
rt_opt_group rt_opt_of(const rt_train_config *c, int d);
const char *rt_schedule_name(int sched);   /* RT_SCHED_*'s name in a spec */
/* What a GPU trainer allocates besides parameters, gradients, optimizer state and the
 * arena (device_cuda.c): each input's batch slots, the index slots, the loss statistics
 * of `passes` passes, scratch and cuBLASLt's 32 MiB workspace. From the model alone, so
 * the compiler counts it too (trainc plan's workspace_bytes, recompute auto's budget);
 * in_row_bytes: a batch row of each input as the kernels read it. */
size_t rt_gpu_fixed_bytes(int64_t Bmax, int n_inputs, const int64_t *in_row_bytes, int passes,
                          int64_t loss_terms, int64_t param_floats, int64_t scratch_row_bytes,
                          int64_t scratch_fixed);
/* fp8-mixed: scratch beyond the per-row part (scratch_row_bytes) for the linear GEMMs'
 * FP8 copies (cuda_blas.c): the largest weight's (weight_bytes, rt_model's
 * fp8_weight_bytes), the scales and the partial maxima; 0 without (weight_bytes 0) */
int64_t rt_fp8_scratch_fixed(int64_t weight_bytes);
/* The optimizer's chunk table on the GPU for these parameter tensors (cuda_ops.c);
 * optimizer muon's workspace for one matrix of numel values, cols wide, its blocks of
 * rows rt_param.muon's (0 where blocks[0] is 0: not muon's), of which the GPU holds the
 * largest matrix's; and rt_gpu_fixed_bytes with them for a model on one GPU under
 * config c: what its start record's device_fixed_bytes says and trainc plan's
 * workspace_bytes counts. */
size_t rt_opt_table_bytes(int n_params, const int64_t *numel);
size_t rt_muon_work_bytes(int64_t numel, int64_t cols, const int64_t *blocks);
size_t rt_gpu_fixed_of(const rt_model *m, const rt_train_config *c, int64_t Bmax, int passes);
/* epochs and validate.every_epochs left out of a spec hold RT_UNSET: their defaults
 * depend on other fields, so these say what they are (-1: none) */
#define RT_UNSET (-2)
int64_t rt_epochs(const rt_train_config *c);
int64_t rt_val_every_epochs(const rt_train_config *c);
/* Sets one field from its dotted path and a textual value ("null" allowed where the
 * spec allows it). Returns 0, or -1 with a message in err (which names the key and,
 * for an unknown key, suggests the closest known one). */
int rt_config_set(rt_train_config *c, const char *key, const char *value, char *err,
                  size_t errlen);
/* rt_config_set knowing the JSON type of the value ('n' number, 's' string, 'b'
 * boolean, 'z' null, 'a' array rendered "A,B", 'o' object; 0 for command-line text),
 * so that "batch_size": "32" in a spec is an error while --set batch_size=32 is not. */
int rt_config_set_typed(rt_train_config *c, const char *key, int jtype, const char *value,
                        char *err, size_t errlen);
/* One --set KEY=VALUE as a user types it: VALUE as rt_config_set takes it, or in the
 * spec's JSON form ("text" for a string, [a, b] for a list). The message in err starts
 * with "--set KEY: ". */
int rt_config_set_arg(rt_train_config *c, const char *arg, char *err, size_t errlen);
/* The pass a --set KEY=VALUE belongs to: 0 for optimizer.type and schedule.type, which
 * reset their group's other keys, 1 for the rest. Callers apply pass 0 first, so the
 * order of --set options does not matter. */
int rt_config_set_pass(const char *arg);
/* The training config of a resumed run, as dump lines (rt_config_dump) to set in
 * order: a group of keys (optimizer.*, batch_size, data.val.*, ...) comes from `run`,
 * the config of the run that wrote the checkpoint, when its spec then and now agree
 * on the group, else from `spec_now`: the run's --set options hold unless the spec
 * itself was edited there. Returns a malloc'd array of malloc'd lines. */
char **rt_config_merge(char *const *spec_then, int n_then, char *const *run, int n_run,
                       char *const *spec_now, int n_now, int *n_out);
/* Checks the cross-field rules; returns 0 or -1 with a message. */
int rt_config_validate(const rt_train_config *c, char *err, size_t errlen);
/* The optimizer state one of `ranks` ranks keeps, in bytes (fp32, over param_floats
 * floats as the trainer allocates them: its trainable_floats; ema's average too): the whole state under ddp or in a world of one, rank 0's
 * shard (the largest, rt_dist_shard) under zero1 and zero2. What recompute auto and
 * the trainer's start-up check count, and trainc plan --ranks's optimizer column. */
double rt_opt_state_bytes(const rt_train_config *c, int64_t param_floats, int64_t ranks);
/* train.lora's factor on the adapters' term: alpha / rank, or alpha / sqrt(rank) with
 * rslora (rank-stabilized LoRA, PEFT's use_rslora) */
double rt_lora_scale(const rt_train_config *c);
/* grad_clip's bound on the gradients' norm (clip_grad_norm_), NAN when none or by value */
static inline double rt_clip_norm(const rt_train_config *c)
{
    return c->grad_clip_algo == RT_CLIP_VALUE ? NAN : c->grad_clip;
}
/* grad_clip's bound on each gradient element (clip_grad_value_), NAN when none or by norm */
static inline double rt_clip_value(const rt_train_config *c)
{
    return c->grad_clip_algo == RT_CLIP_VALUE ? c->grad_clip : NAN;
}
/* rt_config_validate that also names, in key (when not NULL), the dotted key the
 * broken rule blames ("optimizer.nesterov"; "" when none does, as for a missing stop
 * condition), so that the compiler can point at that key in the spec. */
int rt_config_check(const rt_train_config *c, char *err, size_t errlen, char *key,
                    size_t keylen);
/* Writes every field as "key=value" lines, the inverse of rt_config_set, in a fixed
 * order: the canonical form hashed and embedded in generated trainers. Returns a
 * malloc'd array of malloc'd strings. */
char **rt_config_dump(const rt_train_config *c, int *n);
/* The known dotted keys, NULL-terminated (for "did you mean"). */
extern const char *const rt_config_keys[];
/* Levenshtein distance, used for "did you mean" everywhere. */
int rt_edit_distance(const char *a, const char *b);
/* The known word in `words` closest to `w`, or NULL when none is close. */
const char *rt_closest(const char *w, const char *const *words);

/* ---- data (.npy, memory-mapped) ------------------------------------------ */

/* RT_I64 (trainc_rt.h): read from .npy files only, converted to RT_I32 */

typedef struct rt_npy {
    char path[RT_PATH_MAX];
    int dtype;                 /* RT_U8, RT_U16, RT_I32, RT_F32; also RT_I64 read as i32 */
    int rank;
    int64_t shape[8];
    int64_t rows;              /* shape[0] */
    int64_t row_bytes;         /* bytes per row in the file */
    int elem_bytes;
    const unsigned char *data; /* first row */
    void *map;
    size_t map_len;
} rt_npy;

/* Opens and maps an .npy file; on a bad file exits 1 naming the file and the problem.
 * Accepts <u1, <u2, <i4, <f4 and <i8 (converted to i32 when copied; values checked). */
void rt_npy_open(rt_npy *a, const char *path);
void rt_npy_close(rt_npy *a);
/* Copies `n` rows given by `idx` into dst, converted to dtype `to` (same kind of
 * element; the conversions: i64 narrowed to i32, u8 and u16 widened to i32). */
void rt_npy_gather(const rt_npy *a, const int64_t *idx, int64_t n, void *dst, int to);
/* a (opened) as data of model input `in`: its dtype, its per-sample shape, and its
 * values (labels, ids, i64 within i32); exits 1 naming a->path and where otherwise. */
void rt_npy_check_input(const rt_npy *a, const rt_input *in, const char *where);

/* The dtype of an input's batches (rt_batch.in, rt_exec.in): its files' dtype, or i32
 * for u8/u16 ids and labels the generated code reads as i32 (rt_input.widen). */
static inline int rt_batch_dtype(const rt_input *in) { return in->widen ? RT_I32 : in->dtype; }

/* One token shard (docs/spec.md, Data), memory-mapped: a header of 256 little-endian
 * int32 ([0] magic, [1] version, [2] token count), then exactly that many tokens
 * (llm.c's formats): uint16 under RT_SHARD_MAGIC / RT_SHARD_VERSION, uint32 under
 * RT_SHARD32_MAGIC / RT_SHARD32_VERSION (vocabularies over 65536, Llama 3's 128256). */
#define RT_SHARD_MAGIC 20240520
#define RT_SHARD_VERSION 1
#define RT_SHARD32_MAGIC 20240801
#define RT_SHARD32_VERSION 7
#define RT_SHARD_HEADER_BYTES 1024

typedef struct rt_shard {
    char path[RT_PATH_MAX];
    int64_t ntok;
    int width;                 /* bytes a token: 2 (uint16 shard) or 4 (uint32 shard) */
    const void *tok;           /* [ntok] uint16 or uint32 (width), inside the mapping */
    void *map;
    size_t map_len;
} rt_shard;

/* Token i of s (i < s->ntok). */
static inline uint32_t rt_shard_token(const rt_shard *s, int64_t i)
{
    return s->width == 4 ? ((const uint32_t *)s->tok)[i] : ((const uint16_t *)s->tok)[i];
}

/* Opens and maps a shard; on a bad file exits 1 naming the file and the problem. With
 * vocab > 0 every token is scanned and one >= vocab is an error naming its position;
 * `vocab_from` (may be NULL) says where the vocabulary comes from, for that message.
 * A uint32 shard is scanned without one too, against 2^31 (its ids become i32). The
 * scan's maximum is cached by the file's identity (rt_cache_dir). */
void rt_shard_open(rt_shard *s, const char *path, int64_t vocab, const char *vocab_from);
void rt_shard_close(rt_shard *s);
/* Writes n tokens as a shard, atomically (PATH.tmp, fsync, rename). elem_bytes 1:
 * tok holds bytes (each one a token 0..255) and 2: uint16 tokens, both written as a
 * uint16 shard; 4: uint32 tokens, written as a uint32 shard. n must fit the header's
 * int32. Returns 0 or -1 (errno set; nothing left at PATH or PATH.tmp). */
int rt_shard_write(const char *path, const void *tok, int elem_bytes, int64_t n);

/* A dataset: one mapped array per model input, checked against the model. */
typedef struct rt_dataset {
    int n;                     /* = model->n_inputs */
    rt_npy arr[RT_MAX_INPUTS];
    int64_t rows;
    /* Token data (the entries hold "tokens"): arr[] is unused and a sample (a row)
     * is window w: T tokens for input 0 and the same T shifted by one for input 1,
     * from shard s where win_start[s] <= w < win_start[s + 1], at token offset
     * (w - win_start[s]) * T. */
    int tokens;                /* 1 for token data */
    int64_t T;                 /* window length (the inputs' shape [T]) */
    int y_in;                  /* the input of the next tokens (1, or 2 after positions) */
    int pos_in;                /* the model's positions input, filled from the window's
                                  tokens: each token's place in its document (a document
                                  begins at each token `doc`); -1 without */
    int64_t doc;
    int n_shards;
    rt_shard *shards;          /* [n_shards], in sorted path order */
    int64_t *win_start;        /* [n_shards + 1], win_start[n_shards] = rows */
} rt_dataset;

/* Opens the files of `entries` for every input of m; paths are resolved against
 * base_dir unless absolute. `what` is "train" or "val" for messages. Checks dtype,
 * per-sample shape, equal row counts, class labels in [0, classes) and an embedding's
 * ids in [0, vocab), so that no batch can fail in a kernel later.
 * A single entry "tokens" holds a glob of shards instead (matched files in sorted
 * order); the model must then have two i32 inputs of shape [T], and token ids are
 * checked against the inputs' `classes` and `vocab` where given; or three, the third
 * the model's positions, filled from each window with documents (loader.documents: the
 * token that begins a document; -1 none). */
void rt_dataset_open(rt_dataset *d, const rt_model *m, const rt_data_entry *entries, int n,
                     const char *base_dir, const char *what, int64_t documents);
void rt_dataset_close(rt_dataset *d);
/* Is none of the entries' files there (a tokens glob matching none)? */
int rt_dataset_absent(const rt_data_entry *entries, int n, const char *base_dir);
/* What a resume checks the data against (never 0): the rows, each file's length and
 * its first and last 64 KB, XXH64 (other data, not a proof of the same bytes) */
uint64_t rt_dataset_fingerprint(const rt_dataset *d);

/* The batch loader: worker threads assemble batches (in the model's input dtypes,
 * B rows each) into a ring of `prefetch` slots; the compute thread takes them in
 * order. The order of samples is a pure function of (seed, epoch): a Fisher-Yates
 * shuffle driven by rt_rng seeded with seed ^ (0x9E3779B97F4A7C15 * (epoch + 1)),
 * or identity without shuffle (data.c has the exact rule). */
typedef struct rt_batch {
    int64_t rows;              /* <= batch size (last batch when !drop_last) */
    int64_t epoch, index;      /* which batch of which epoch */
    void *in[RT_MAX_INPUTS];   /* rows of each input, model dtypes */
} rt_batch;

typedef struct rt_loader rt_loader;
rt_loader *rt_loader_new(const rt_model *m, const rt_dataset *d, int64_t batch, int shuffle,
                         int drop_last, uint64_t seed, int workers, int prefetch);
/* Makes the loader deliver only rank `rank`'s part of every epoch, as torch's
 * DistributedSampler does (data.c has the exact rule; `drop_last` applies both to
 * the split and to the batches); batch size stays per rank. World 1 is the unsharded
 * order. Call before the first rt_loader_start/next. */
void rt_loader_set_shard(rt_loader *l, int rank, int world);
/* An epoch of each epoch's first `batches` batches at most (limit_train_batches: the
 * order as it is, shuffled or not). Call after rt_loader_set_shard, before the first
 * rt_loader_start/next. */
void rt_loader_set_limit(rt_loader *l, int64_t batches);
/* Like rt_loader_set_shard, but without padding (or dropping): rank r takes samples
 * r, r + W, r + 2W, ... below N, so the ranks together see each sample exactly once
 * (validation: its numbers do not depend on the rank count). Ranks may then differ
 * by one sample and one batch. */
void rt_loader_set_split(rt_loader *l, int rank, int world);
/* Batches per epoch (of this rank, when sharded). */
int64_t rt_loader_batches(const rt_loader *l);
/* The rows of batch b of an epoch (batch_size, or fewer in a short last batch). */
int64_t rt_loader_rows(const rt_loader *l, int64_t b);
/* Starts (or restarts) delivering epoch `epoch` from batch `first`. */
void rt_loader_start(rt_loader *l, int64_t epoch, int64_t first);
/* Blocks until the next batch of the current epoch is ready; NULL at the end of the
 * epoch. The batch stays valid until the next call to rt_loader_next/start. */
const rt_batch *rt_loader_next(rt_loader *l);
/* Index mode (before the first start): batches carry in[0] = the rows' sample indices
 * (int32, `rows` of them) instead of their data, for a dataset kept on the GPU. */
void rt_loader_indices_only(rt_loader *l);
void rt_loader_free(rt_loader *l);
/* loader.augment on the training batches this loader assembles (not in index mode: the
 * GPU then augments, rt_cu_use_slot): every input of rank 3 ([C, H, W]) is cropped and
 * flipped as rt_augment_image says. Call before the first start. */
void rt_loader_set_augment(rt_loader *l, int64_t pad, int hflip);

/* ---- loader.augment: random crop with zero padding, horizontal flip ----------------
 * Sample `index` (its row in the dataset) of epoch `epoch` draws 64 bits, a pure function
 * of (seed, epoch, index) (two rounds of splitmix64's finalizer), so the CPU loader, the
 * GPU (data.cuh's rt_aug_bits, the twin) and a resumed run see the same images. From
 * them: the crop's top and left offsets into the image padded by `pad` zeros on every
 * side, each in [0, 2 pad] (the low and high 32 bits mod 2 pad + 1), and the flip (the
 * top bit; with hflip only). */
/* splitmix64's finalizer */
static inline uint64_t rt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t rt_aug_bits(uint64_t seed, int64_t epoch, int64_t index)
{
    uint64_t z = seed ^ 0x5851F42D4C957F2Dull;
    for (int r = 0; r < 2; r++)
        z = rt_mix64(z ^ (r ? (uint64_t)index : (uint64_t)epoch) * 0x9E3779B97F4A7C15ull);
    return z;
}
static inline void rt_aug_draw(uint64_t bits, int64_t pad, int hflip, int64_t *top, int64_t *left,
                               int *flip)
{
    *top = (int64_t)((uint32_t)bits % (uint64_t)(2 * pad + 1));
    *left = (int64_t)((uint32_t)(bits >> 32) % (uint64_t)(2 * pad + 1));
    *flip = hflip && (bits >> 63);
}
/* One image [C, H, W] of `elem`-byte values: dst[c, y, x] = src[c, y + top - pad, sx +
 * left - pad] with sx = W - 1 - x when flipped, else x, and 0 outside the image: what
 * torchvision's RandomCrop(padding=pad) at (top, left) and then RandomHorizontalFlip
 * give. Raw values are moved, so the zeros are zeros after scale (shift must be 0). */
void rt_augment_image(const void *src, void *dst, int64_t C, int64_t H, int64_t W, int elem,
                      int64_t pad, int64_t top, int64_t left, int flip);
/* The C twin of data.cuh's rt_gather_augment: dst[r] = the augmented image of
 * data[idx[r]] (its draw from (seed, epoch, idx[r])), r < rows. */
void rt_gather_augment(const void *data, const int32_t *idx, void *dst, int64_t rows,
                       int64_t C, int64_t H, int64_t W, int elem, int64_t pad, int hflip,
                       uint64_t seed, int64_t epoch);
/* ---- loader.augment.random_resized_crop: torchvision's RandomResizedCrop ------------
 * A box of the image drawn as its get_params does, from rt_aug_bits(seed, epoch, index)
 * (the same 64 bits; the flip after it their top bit, as above): up to 10 tries, try t
 * mixing the bits into two more words b1, b2 (rt_mix64 of bits ^ (2t + 1) and (2t + 2)
 * times 0x9E3779B97F4A7C15), target = H W (smin + u1 (smax - smin)), ratio =
 * e^(ln r0 + u2 (ln r1 - ln r0)) (u = the word's top 53 bits / 2^53; e^ by +, x and /
 * alone, the same on the GPU), w = round(sqrt(target ratio)), h = round(sqrt(target /
 * ratio)) (half to even, as Python's round); the first that fits takes top =
 * mix64(b1) mod (H - h + 1) and left = mix64(b2) mod (W - w + 1) (their low 32 bits);
 * ten misses: the central crop at the ratio clamped into [r0, r1]. The box is then
 * resized to H x W as Pillow's Image.resize(BILINEAR) does for 8-bit bands (the box is
 * never larger: an enlargement, support 1, its 22-bit fixed point, the horizontal pass
 * first, each pass rounded to 8 bits), and flipped. u8 images alone. */
typedef struct rt_rrc {
    double smin, smax;         /* the area's share: 0 < smin <= smax <= 1 */
    double r0, r1, lr0, lr1;   /* the aspect ratio's range, and their logs */
} rt_rrc;
rt_rrc rt_rrc_of(const rt_train_config *c);
/* box: top, left, h, w */
void rt_rrc_box(const rt_rrc *k, uint64_t bits, int64_t H, int64_t W, int64_t box[4]);
/* dst [C, H, W] = the box of src [C, H, W] resized to H x W, then mirrored where flip */
void rt_resized_crop(const unsigned char *src, unsigned char *dst, int64_t C, int64_t H,
                     int64_t W, const int64_t box[4], int flip);
/* The C twin of data.cuh's rt_gather_resized_crop: dst[r] = data[idx[r]] so transformed
 * (its draw from (seed, epoch, idx[r])), r < rows. */
void rt_gather_resized_crop(const unsigned char *data, const int32_t *idx, unsigned char *dst,
                            int64_t rows, int64_t C, int64_t H, int64_t W, const rt_rrc *k,
                            int hflip, uint64_t seed, int64_t epoch);
/* ---- loader.augment.color_jitter: torchvision's ColorJitter on a PIL image ---------
 * After the crop and the flip, brightness, contrast, saturation and hue in an order drawn
 * with their factors from rt_aug_bits(seed, epoch, index): b = rt_mix64(bits ^
 * 0x6A09E667F3BCC909), the order the permutation of the four that b mod 24 numbers
 * (lexicographically: 0 the order 0 1 2 3), factor i = lo + u (hi - lo) rounded to a
 * float (u the top 53 bits of rt_mix64(b ^ (i + 1) 0x9E3779B97F4A7C15) / 2^53; [lo, hi] =
 * [max(0, 1 - v), 1 + v] for the key's v, [-v, v] for hue's; a v of 0 leaves that one
 * out). The first three are Pillow's ImageEnhance (Image.blend of a degenerate image D
 * and the image: D + f (x - D) in float, truncated, clipped to [0, 255]): Brightness D 0,
 * Contrast D the mean of the image's L values (Pillow's luma in its fixed point, (R 19595
 * + G 38470 + B 7471 + 2^15) >> 16; the value itself for one channel) rounded, int(mean +
 * 0.5), Color (saturation) D each pixel's L (nothing for one channel). Hue is
 * torchvision's adjust_hue on a PIL image: each pixel to HSV by Pillow's rgb2hsv, H plus
 * numpy's uint8 of f x 255 (the product truncated, wrapped to 0..255), modulo 256, back by
 * Pillow's hsv2rgb (nothing for one channel). u8 images of 1 or 3 channels. */
typedef struct rt_jitter {
    double v[4];               /* brightness, contrast, saturation, hue: 0 = off */
} rt_jitter;
typedef struct rt_jitter_draw {
    int order[4];              /* 0 brightness, 1 contrast, 2 saturation, 3 hue */
    float f[4];                /* their factors (1, or hue's 0, where off) */
} rt_jitter_draw;
rt_jitter rt_jitter_of(const rt_train_config *c);
void rt_jitter_draw_of(const rt_jitter *k, uint64_t bits, rt_jitter_draw *d);
/* img [C, H, W] (C 1 or 3) jittered in place */
void rt_color_jitter(unsigned char *img, int64_t C, int64_t H, int64_t W, const rt_jitter *k,
                     const rt_jitter_draw *d);
/* The loader's color_jitter after its crops and flips (rt_loader_set_augment first) */
void rt_loader_set_jitter(rt_loader *l, const rt_jitter *k);
/* The loader's random_resized_crop in the crop's place (rt_resized_crop: u8 images),
 * after rt_loader_set_augment. */
void rt_loader_set_rrc(rt_loader *l, const rt_rrc *k);
/* ---- loader.mask: a masked LM's masks, drawn as the training batches are made -------
 * Rows of `trainc data mlm --dynamic` hold their ids unmasked in the input and, in the
 * target, each position's id where one may be chosen (ignore elsewhere). Position `pos`
 * of sample `index` (its row in the dataset) in epoch `epoch` draws 64 bits,
 * rt_aug_bits(seed ^ RT_MASK_SALT, epoch, index T + pos), a pure function of those, so
 * the CPU loader, the GPU (data.cuh's rt_mask_tokens, the twin) and a resumed run draw
 * the same masks. Bits 0..23 below `choose` (prob 2^24) choose the position: else its
 * target becomes `ignore`. Bits 24..47 below `masked` (mask_replace_prob 2^24) put the
 * mask token in the input, below `swapped` (their sum with random_replace_prob) a random
 * id, ((mix(bits) >> 32) vocab) >> 32 with mix splitmix64's finalizer; else the id stays:
 * transformers' DataCollatorForLanguageModeling, 80/10/10 by default. */
#define RT_MASK_SALT 0x2545F4914F6CDD1Dull
typedef struct rt_mask_rule {
    int32_t token, ignore;     /* the mask token's id; the target's ignore_index */
    int64_t vocab;             /* random ids from [0, vocab) */
    uint32_t choose, masked, swapped;   /* thresholds over 2^24 (above) */
    uint64_t seed;
} rt_mask_rule;
/* The rule of loader.mask's keys (prob and the shares rounded to multiples of 2^-24) */
rt_mask_rule rt_mask_rule_of(const rt_train_config *c, int32_t ignore, int64_t vocab);
/* Position pos of a row of T: the input's id there after the draw, *y the target (the id
 * where chosen, else ignore; an ignored target draws nothing) */
static inline int32_t rt_mask_draw(const rt_mask_rule *k, int64_t epoch, int64_t index,
                                   int64_t T, int64_t pos, int32_t x, int32_t *y)
{
    if (*y == k->ignore)
        return x;
    uint64_t bits = rt_aug_bits(k->seed ^ RT_MASK_SALT, epoch, index * T + pos);
    if ((uint32_t)(bits & 0xFFFFFF) >= k->choose) {
        *y = k->ignore;
        return x;
    }
    uint32_t c = (uint32_t)(bits >> 24) & 0xFFFFFF;
    if (c < k->masked)
        return k->token;
    if (c >= k->swapped)
        return x;
    return (int32_t)(((rt_mix64(bits) >> 32) * (uint64_t)k->vocab) >> 32);
}
/* The C twin of data.cuh's rt_mask_tokens: rows of T ids x and targets y, row r sample
 * idx[r] of epoch `epoch`, masked in place */
void rt_mask_rows(int32_t *x, int32_t *y, const int64_t *idx, int64_t rows, int64_t T,
                  const rt_mask_rule *k, int64_t epoch);
/* loader.mask on the training batches this loader assembles (not in index mode: the GPU
 * then masks, rt_cu_set_mask): input `in`'s ids and target `tgt`'s, both i32 [T]. */
void rt_loader_set_mask(rt_loader *l, const rt_mask_rule *k, int in, int tgt);

/* Calls fn on every batch buffer the loader fills (a GPU trainer page-locks them). */
void rt_loader_each_buffer(rt_loader *l, void (*fn)(void *p, size_t n, void *ctx), void *ctx);

/* ---- random numbers (rng.c: seeded, reproducible, portable) ---------------- */

typedef struct rt_rng { uint64_t s[4]; } rt_rng;   /* xoshiro256** */
void rt_rng_seed(rt_rng *r, uint64_t seed);
uint64_t rt_rng_u64(rt_rng *r);
double rt_rng_uniform(rt_rng *r);                   /* [0, 1) */
double rt_rng_normal(rt_rng *r);                    /* Box-Muller */
/* Uniform in [0, n), n >= 1, without modulo bias (the loader's shuffle). */
uint64_t rt_rng_below(rt_rng *r, uint64_t n);
/* Moves the state n draws on (rt_rng_u64 calls), in 256 steps whatever n is, so that
 * threads can each fill their part of one stream (rng.c says how). */
void rt_rng_jump(rt_rng *r, uint64_t n);
/* The same for 2^k draws, k < 256 (k = 128: the authors' jump(), 192: long_jump()). */
void rt_rng_jump_pow2(rt_rng *r, int k);
/* state = sum c_i T^i state, T one step and c_i bit i % 64 of c[i / 64] (rng.c). */
void rt_rng_apply_poly(rt_rng *r, const uint64_t c[4]);

/* ---- safetensors --------------------------------------------------------- */

/* Writes the parameters (fp32, shapes of rt_param), then the layers' state (m->state:
 * F32, or I64 counts) atomically: to PATH.tmp, fsync, rename. Returns 0 or -1 (errno
 * set). state may be NULL only when m has none. */
int rt_safetensors_write(const char *path, const rt_model *m, const float *params,
                         const float *state);
/* Every step_N.safetensors of the folder FROM as a second name in TO, a folder made
 * where there is one (checkpoint.keep_best's files in a checkpoint, and
 * back at a resume): 0, or -1 with errno set (best_k.c) */
int rt_keep_best_link(const char *from, const char *to);
/* The same with meta (key, value, ..., NULL) in the header's __metadata__. */
int rt_safetensors_write_meta(const char *path, const rt_model *m, const float *params,
                              const float *state, const char *const *meta);
/* The string __metadata__[key] of a safetensors file into out (n bytes): 0, or -1 where
 * the file cannot be read, is not safetensors or has no such string. Never exits. */
int rt_safetensors_meta(const char *path, const char *key, char *out, size_t n);
/* PATH becomes a second name of the file SRC (a hard link made at PATH.tmp and renamed
 * over PATH, the folder fsynced): the same bytes, once on disk. Returns 0, or -1 with
 * errno set (a file system without hard links: the caller writes the file instead). */
int rt_safetensors_link(const char *src, const char *path);
/* Reads the parameters of m from a safetensors file into params, and its layers' state
 * into state. Every parameter must be present with its exact shape as F32 (F64/BF16/F16
 * are converted), every state tensor too (its counts as I64); extra tensors are an
 * error. Exits 1 naming the file and the tensor on any mismatch. */
void rt_safetensors_read(const char *path, const rt_model *m, float *params, float *state);
/* The same for --init: train.lora's adapters may be missing (they keep what params
 * holds for them); returns how many were. */
int rt_safetensors_read_init(const char *path, const rt_model *m, float *params, float *state);
/* The same checks, but only the elements [lo, hi) of the flat parameter region are
 * read: dst[k - lo] receives element k (gaps between tensors are left alone); the
 * state is checked, not read. */
void rt_safetensors_read_range(const char *path, const rt_model *m, int64_t lo, int64_t hi,
                               float *dst);
/* n elements stored as safetensors dtype ("F32", "F64", "F16", "BF16"; little-endian)
 * to fp32; returns the bytes an element takes, or -1 for another dtype. */
int rt_st_to_f32(float *dst, const void *src, int64_t n, const char *dtype);
/* The writer in pieces, for data that arrives in parts (a ZeRO checkpoint gathered
 * chunk by chunk): open writes the header to PATH.tmp; put appends the next n floats
 * of the tensors' data in m->params order; close fsyncs and renames (or, after any
 * error, removes PATH.tmp) and frees w. NULL / -1 with errno set on failure; after a
 * failed put, further puts do nothing and close reports that first error. */
typedef struct rt_st_out rt_st_out;   /* (its header lists m's state too: n_state 0 for
                                          files that are not weights) */
rt_st_out *rt_st_open(const char *path, const rt_model *m);
rt_st_out *rt_st_open_meta(const char *path, const rt_model *m, const char *const *meta);
int rt_st_put(rt_st_out *w, const float *x, int64_t n);
int rt_st_close(rt_st_out *w);

/* ---- samples as files (image.c) ------------------------------------------ */

/* Writes samples [n, ...shape] (fp32, row-major) as a NumPy .npy file, byte for byte
 * what np.save writes: format 1.0, '<f4', C order, the header padded so the data
 * starts at a multiple of 64; rank 0-7 (shape [] gives (n,)). Through PATH.tmp renamed
 * into place. 0, or -1 with errno set (EINVAL: a bad argument). */
int rt_npy_write_f32(const char *path, const float *x, int64_t n, int rank, const int64_t *shape);
/* The same file written a part at a time: its header for n rows of shape into PATH.tmp
 * (NULL, errno set), then the caller's fwrite of the n rows' float32 values in order,
 * then rt_tmp_commit(f, PATH) renames it into place (or removes it). */
FILE *rt_npy_stream_open(const char *path, int64_t n, int rank, const int64_t *shape);
/* Writes n images [C, H, W] (fp32, C 1 or 3) as one PNG, the pixels
 * torchvision's save_image(make_grid(x, nrow, padding=2, normalize=True, pad_value=0))
 * saves (torchvision/utils.py since make_grid's `value_range`; before it, d was
 * max - min + 1e-5):
 * - values: lo, hi the batch's min and max (NaN if any is NaN); each value becomes
 *   (x - lo) / d in fp32, d = max(hi - lo, 1e-5) (a constant batch: all 0), then
 *   x*255 + 0.5 (fp32, two roundings), clamped to [0, 255], truncated to 8 bits (NaN: 0);
 * - layout: ncol = min(nrow, n) images a row, rows = ceil(n / ncol); 2 pixels of
 *   padding (pad_value 0: bytes 0) between the images and around the grid (make_grid
 *   pads the outer border too): (ncol*(W+2) + 2) x (rows*(H+2) + 2) pixels
 *   (width x height), image k's top-left
 *   pixel at row 2 + (k / ncol)*(H+2), column 2 + (k % ncol)*(W+2); the cells after
 *   the last image are padding. A batch of one is the image alone, W x H, no padding
 *   (make_grid returns it as it is);
 * - an 8-bit gray PNG when C is 1 (the pixels of make_grid's 3-channel copy: its three
 *   channels are equal), 8-bit RGB when C is 3.
 * No library: stored (uncompressed) deflate blocks, filter 0 on every row. Through
 * PATH.tmp renamed into place. 0, or -1 with errno set (EINVAL: a bad argument;
 * EFBIG: a side over 2^31 - 1 pixels, or over 2 GiB of pixels). */
int rt_png_grid_write(const char *path, const float *x, int64_t n, int C, int H, int W, int nrow);

/* ---- metrics, progress, plot --------------------------------------------- */

typedef struct rt_metrics rt_metrics;
/* PATH is a regular file or nothing yet, else an input error: metrics.jsonl linked to
 * a device or a FIFO would be read (or written) forever. */
void rt_metrics_file_check(const char *path);
/* Opens DIR/metrics.jsonl (append when `append`). Only rank 0 writes. */
rt_metrics *rt_metrics_open(const char *dir, int append);
/* Appends one line (a complete JSON object, without newline) and flushes. */
void rt_metrics_line(rt_metrics *mt, const char *json);
/* The lines so far on the disk (fsync): a checkpoint records the file's length, which
 * a resume truncates to, so that length must survive a power loss. */
void rt_metrics_sync(rt_metrics *mt);
/* Remembers points for the plot. */
void rt_metrics_train_point(rt_metrics *mt, int64_t step, double loss);
void rt_metrics_val_point(rt_metrics *mt, int64_t step, double val_loss);
/* A GAN's plot: the two series are d_loss and g_loss (train and val points), so named. */
void rt_metrics_gan(rt_metrics *mt);
/* Redraws DIR/loss.svg (atomically) from the points so far. */
void rt_metrics_plot(rt_metrics *mt);
/* DIR/lr_find.svg: the smoothed loss against the learning rate (log scale), the
 * suggested rate marked (NAN: none); a failure is a warning. */
void rt_plot_lr_find(const char *dir, const double *lr, const double *loss, int64_t n,
                     double suggested);
void rt_metrics_close(rt_metrics *mt);

/* TensorBoard's view of metrics.jsonl (tboard.c): a session's events file in DIR
 * (named RT_TB_PREFIX...), beginning at first_step (TensorBoard drops an earlier file's
 * points from there on); a record's numbers as scalars (event records left out). */
#define RT_TB_PREFIX "events.out.tfevents."
typedef struct rt_tb rt_tb;
rt_tb *rt_tb_open(const char *dir, int64_t first_step);
void rt_tb_record(rt_tb *tb, const char *json);
void rt_tb_close(rt_tb *tb);

/* The trainer options, one a line (options.c): a trainer's --help and `trainc help run`
 * (m NULL: any trainer). */
void rt_trainer_options(FILE *f, const rt_model *m);
/* The trainer's options that take a value (--out, --set, ...), NULL-terminated: each
 * may be written --name VALUE or --name=VALUE. */
extern const char *const rt_trainer_value_options[];
/* SIGINT/SIGTERM from now on ask the training loop to stop after its current step
 * (a checkpoint, exit 130); a second one exits at once. */
void rt_catch_signals(void);

/* Formats a double for JSON: finite values with %.9g, else null. */
const char *rt_json_num(char *buf, double v);

/* A one-line progress display on a terminal (carriage return, no scrolling);
 * does nothing when stderr is not a terminal or quiet is set. */
void rt_progress(int quiet, int64_t step, int64_t total_steps, int64_t epoch, double loss,
                 double samples_per_s, double elapsed_s);
void rt_progress_done(int quiet);

/* ---- the thread pool (kernels.c) ----------------------------------------- */

/* rt_exec.rt points to one of these. threads == 1 runs everything on the caller.
 * rt_parallel_for splits [0, n) into at most `threads` contiguous chunks of equal
 * size (the split depends only on n and threads, so results are reproducible). */
typedef struct rt_pool rt_pool;
rt_pool *rt_pool_new(int threads);
int rt_pool_threads(const rt_pool *p);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__TINYC__)
/* Whether this CPU has AVX2 (kernels.c): the loops built twice take their AVX2 twin. */
int rt_have_avx2(void);
#endif
/* Runs fn(ctx, lo, hi) over [0, n) in min(threads, ceil(n / grain)) contiguous chunks. */
void rt_pool_run(rt_pool *p, int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                 void *ctx);
void rt_pool_free(rt_pool *p);
/* The grain for rt_pool_run when each item does work_per_item units: about 32K units a
 * chunk. */
int64_t rt_grain_for(int64_t work_per_item);
/* Scratch of n doubles owned by the pool, for the caller of a launch (reductions'
 * partial sums, batchnorm's per-channel sums): kept between calls, grown when too
 * small, freed with the pool; valid until the next call. */
double *rt_pool_scratch(rt_pool *p, size_t n);
/* A convolution's outputs o in [0, OW) whose input o s - pad + kj lies in [0, W), for
 * kernel offset kj: [*o0, *o1) (im2col.c; the loops over them need no bounds test). */
void rt_conv_span(int64_t kj, int64_t s, int64_t pad, int64_t W, int64_t OW, int64_t *o0,
                  int64_t *o1);
/* conv_direct.c: the CPU's direct convolution (AVX-512 or AVX2; the shapes its
 * direct_fits takes); rt_conv_direct_fwd/dx/dw return 1 when it took the call, 0 when not
 * (then im2col and a GEMM). rt_conv_direct_cpu: the level in use, 0 (off), 1 (AVX2 and
 * FMA) or 2 (AVX-512); rt_conv_direct_limit caps it at a level (tests, benchmarks). */
int rt_conv_direct_cpu(void);
void rt_conv_direct_limit(int level);
int rt_conv_direct_fwd(rt_exec *e, const float *x, const float *w, float *yt, int64_t B, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                       int64_t OW, int64_t Cout);
int rt_conv_direct_dx(rt_exec *e, const float *w, const float *dyt, float *dx, int64_t B,
                      int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                      int64_t OH, int64_t OW, int64_t Cout);
int rt_conv_direct_dw(rt_exec *e, const float *x, const float *dyt, float *dw, int64_t B, int64_t C,
                      int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                      int64_t OW, int64_t Cout);
/* im2col and col2im of B images ([C*k*k, B*OH*OW] columns) on the calling thread
 * (im2col.c; rt_im2col and rt_col2im spread the same work over the pool) */
void rt_im2col_serial(const float *x, float *col, int64_t B, int64_t C, int64_t H, int64_t W,
                      int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
void rt_col2im_serial(const float *dcol, float *dx, int64_t B, int64_t C, int64_t H, int64_t W,
                      int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
/* OpenBLAS before its first call: kernels for this CPU where it fell back to a core
 * without AVX2, and one thread (blas.c). */
void rt_blas_setup(void);
/* the OpenBLAS core that runs, and the one it took by itself when rt_blas_setup chose */
const char *rt_blas_core(void);
/* The parameters' initial values from the model's init rules and the seed, on the
 * pool's threads; the same bits on any number of threads (init.c). */
void rt_init_params(rt_pool *pool, const rt_model *m, float *params, uint64_t seed);
/* train.lora's adapters alone (rt_param.lora), each as rt_init_params draws it */
void rt_init_adapters(rt_pool *pool, const rt_model *m, float *params, uint64_t seed);
/* The layers' state at its constants (running mean 0, variance 1, counts 0). */
void rt_init_state(const rt_model *m, float *state);

/* ---- helpers ------------------------------------------------------------- */

double rt_now(void);                 /* monotonic seconds */
int rt_mkdir_p(const char *path);    /* 0 or -1 */
const char *rt_dtype_name(int dt);

#endif
