/* rt_loop.h: the training loop's pieces: the optimizer (optim.c), early stopping
 * (earlystop.c), the lr range test's curve (lrfind.c), --profile (prof.c), data
 * parallelism (ddp.c, zero.c), checkpoints (ckpt.c). run.h has the run's parts. */
#ifndef RT_LOOP_H
#define RT_LOOP_H

#include "rt.h"

/* The learning rate of optimizer step `step` (from 0) of `total`. */
double rt_lr_at(const rt_train_config *c, int64_t step, int64_t total);
/* The global L2 norm of all parameter gradients (independent of the thread count). */
double rt_grad_norm(rt_pool *pool, const rt_model *m, const float *grads);
/* The sum of squares of the parameter gradients inside [lo, hi) of the flat region,
 * g[k - lo] holding element k (gaps between tensors are skipped); summed in the same
 * blocks as rt_grad_norm, which is sqrt of it over [0, trainable_floats). */
double rt_grad_sumsq(rt_pool *pool, const rt_model *m, int64_t lo, int64_t hi, const float *g);
/* clip_grad_value_ after the unscaling: g[k] = clamp(g[k] * gs, -value, value), NaN kept
 * (grad_clip_algorithm value; the optimizer then reads the gradients unscaled). */
void rt_clip_values(rt_pool *pool, float *g, int64_t n, float gs, double value);
/* The CPU's update with grad_clip_algorithm value: g[0, n) clipped as above, *gs then 1
 * (the update reads them as they are); returns whether it clipped (0: by norm or none,
 * nothing done) */
int rt_clip_by_value(rt_pool *pool, const rt_train_config *c, float *g, int64_t n, float *gs);
/* Optimizer state: parts (AdamW: m and v, 2; SGD with momentum: the buffer, 1; Muon: its
 * AdamW's 2, a Muon matrix's momentum buffer in the first; else 0),
 * each laid out like the parameter region; floats of it for the whole region. */
int rt_optim_state_parts(const rt_train_config *c);
int64_t rt_optim_state_floats(const rt_train_config *c, const rt_model *m);
/* train.ema (docs/spec.md): its average of the trained weights is the state's last part
 * (rt_ema_part). Step n (from 1) takes the weights into it when n > start_step and
 * n - start_step is a multiple of every; the first take copies them (*first), the others
 * are ema + (1 - decay) (p - ema) in one rounding, torch's lerp as AveragedModel's EMA
 * takes it. rt_ema_ready: whether the average has had a take after n steps. */
int rt_ema_part(const rt_train_config *c);
int rt_ema_takes(const rt_train_config *c, int64_t n, int *first);
int rt_ema_ready(const rt_train_config *c, int64_t n);
void rt_ema_take(rt_pool *pool, const float *p, float *ema, int64_t n, double decay, int first);
/* train.swa (swa.c): the weights p into the equal average of the `taken` takes before:
 * a copy for the first, then avg + (p - avg) / (taken + 1) in fp32, each operation
 * rounded (torch's AveragedModel without avg_fn, as Lightning's callback takes it) */
void rt_swa_take(rt_pool *pool, const float *p, float *avg, int64_t n, int64_t taken);
/* a[i] and b[i] exchanged (validation on the average, and back) */
void rt_swap_floats(rt_pool *pool, float *a, float *b, int64_t n);
/* One update; t counts steps from 1. With clip set, the gradients are read as
 * g * gscale, which is what clip_grad_norm_ leaves in them (a fused pass). */
void rt_optim_step(rt_pool *pool, const rt_train_config *c, const rt_model *m, float *params,
                   const float *grads, float *state, int64_t t, double lr, float gscale, int clip);
/* The same update of the elements [lo, hi) of the flat region only (a ZeRO shard; it
 * may cut tensors: each element gets its tensor's rules, e.g. weight decay for rank
 * >= 2). params is the whole region; grads[k - lo] and the state parts
 * state[p * (hi - lo) + k - lo] belong to element k. Bit-identical to rt_optim_step
 * on those elements. */
void rt_optim_step_range(rt_pool *pool, const rt_train_config *c, const rt_model *m, int64_t lo,
                         int64_t hi, float *params, const float *grads, float *state, int64_t t,
                         double lr, float gscale, int clip);
/* rt_optim_step_range with the state parts `stride` floats apart: element k's part p at
 * state[p * stride + k - lo] (a GAN network's range of parts over the whole region). */
void rt_optim_step_strided(rt_pool *pool, const rt_train_config *c, const rt_model *m, int64_t lo,
                           int64_t hi, float *params, const float *grads, float *state,
                           int64_t stride, int64_t t, double lr, float gscale, int clip);
/* Elements [k0, k1) of parameter pp by c's rules (SGD or AdamW), the range's arrays
 * starting at element lo of the region (rt_optim_step_strided's, for one tensor) */
void rt_optim_param(rt_pool *pool, const rt_train_config *c, const rt_param *pp, int64_t lo,
                    int64_t k0, int64_t k1, float *params, const float *grads, float *state,
                    int64_t stride, int64_t t, double lr, float gscale, int clip);
/* muon.c: optimizer.type muon's step over [lo, hi) (whole matrices: ddp's range), as
 * rt_optim_step_strided's; whether it updates p as a Muon matrix */
void rt_muon_step(rt_pool *pool, const rt_train_config *c, const rt_model *m, int64_t lo,
                  int64_t hi, float *params, const float *grads, float *state, int64_t stride,
                  int64_t t, double lr, float gscale, int clip);
int rt_muon_takes(const rt_train_config *c, const rt_param *p);   /* (c NULL: no) */
/* the config of the AdamW that updates the rest, and its lr at this step (Muon's lr
 * scaled as the schedule scales Muon's) into *aw_lr */
rt_train_config rt_muon_adamw(const rt_train_config *c, double lr, double *aw_lr);
/* the learning rate of a block [rows, cols] of a Muon matrix: torch's adjust_lr_fn */
double rt_muon_block_lr(const rt_train_config *c, double lr, int64_t rows, int64_t cols);
/* torch.optim.Muon's quintic Newton-Schulz coefficients */
#define RT_MUON_NS_A 3.4445f
#define RT_MUON_NS_B (-4.7750f)
#define RT_MUON_NS_C 2.0315f
/* c with the optimizer fields of network d (0: optimizer; 1: a GAN discriminator's,
 * optimizer_d when given): the config a network's update runs with. */
void rt_config_for_net(const rt_train_config *c, int d, rt_train_config *out);

/* a better than b for a monitored value in mode RT_MODE_MIN or RT_MODE_MAX */
static inline int rt_better(int mode, double a, double b) { return mode == RT_MODE_MIN ? a < b : a > b; }

/* Early stopping with PyTorch Lightning's semantics (earlystop.c). */
typedef struct rt_stopper {
    double best;
    int64_t wait;              /* validation checks without improvement */
} rt_stopper;
/* RT_ES_PATIENCE: patience ran out, a stop that min_epochs and min_steps may defer;
 * RT_ES_STOP: a threshold crossed, a stop at once */
enum { RT_ES_GO_ON, RT_ES_STOP, RT_ES_DIVERGED, RT_ES_PATIENCE };
void rt_es_init(rt_stopper *s, const rt_train_config *c);
/* One validation check's monitored value; returns RT_ES_* and says why in `why`. */
int rt_es_check(const rt_train_config *c, rt_stopper *s, double v, char *why, size_t n);
/* May early stopping's patience end the run after `epochs_done` whole epochs and
 * `steps` optimizer steps (min_epochs and min_steps reached, as Lightning's
 * _can_stop_early)? */
int rt_es_min_reached(const rt_train_config *c, int64_t epochs_done, int64_t steps);

/* The learning-rate range test, --lr-find (lrfind.c): `steps` optimizer steps at rates
 * from lo to hi, exponentially; the loss smoothed and watched as Lightning's
 * Tuner.lr_find does. */
typedef struct rt_lrfind {
    double lo, hi;
    int64_t steps, n;          /* steps asked for; points recorded */
    double *lr, *loss, *smooth;
    double avg, best;          /* the running average; the best smoothed loss */
    int diverged;              /* stopped: the smoothed loss passed 4x its best, or not finite */
} rt_lrfind;
void rt_lrfind_init(rt_lrfind *f, double lo, double hi, int64_t steps);
void rt_lrfind_free(rt_lrfind *f);
double rt_lrfind_lr(const rt_lrfind *f, int64_t step);   /* step from 0 */
/* Records a step's rate and loss; returns 1 when the test is over. */
int rt_lrfind_add(rt_lrfind *f, double lr, double loss);
/* The rate where the smoothed loss falls fastest, or NAN (too few points). */
double rt_lrfind_suggest(const rt_lrfind *f);
const char *rt_lrfind_no_suggestion(const rt_lrfind *f);
/* DIR/lr_find.jsonl (a line a point, then the result) and DIR/lr_find.svg; 0 or -1. */
int rt_lrfind_write(const rt_lrfind *f, const char *dir, double suggested, int interrupted);

/* --profile (prof.c): where a training step's time goes, by instruction (RT_AT). */
typedef struct rt_prof rt_prof;
/* everything allocated here (n: rt_model.n_instructions); on a GPU the timing events
 * come from rt_cu_prof_setup, before the loop */
rt_prof *rt_prof_new(int gpu, int n);
void rt_prof_pass_begin(rt_exec *e, rt_prof *p, int pass);   /* pass: 0 forward, 1 backward */
void rt_prof_pass_end(rt_exec *e);
/* The gradients' norm and the optimizer's update, timed as one more part of the step
 * (pass 2; not a plan instruction), ended by rt_prof_pass_end; may come twice a step */
void rt_prof_optimizer_begin(rt_exec *e, rt_prof *p);
void rt_prof_step(rt_prof *p, double seconds);   /* a profiled step's wall time */
/* DIR/profile.json (rank0 only) and a table on stderr; 0, or -1 (errno) if the file
 * cannot be written */
int rt_prof_report(rt_prof *p, const char *dir, int rank0);
void rt_prof_free(rt_prof *p);

/* Data parallelism (ddp.c): reduce gradients across ranks during backward. */
void rt_ddp_init(const rt_model *m, float *grads, int64_t bucket_bytes);
/* the gradient bytes a step's sum over ranks carries (the trained parameters';
 * train.freeze's have none); 0 before rt_ddp_init */
int64_t rt_ddp_reduced_bytes(void);
void rt_ddp_begin(int sync);   /* before a backward pass; sync: its gradients are reduced */
/* the same for the gradients [lo, hi) of the region only (a GAN's network: its backward
 * pass writes no other) */
void rt_ddp_begin_range(int sync, int64_t lo, int64_t hi);
void rt_ddp_finish(void);      /* after it: send the rest, wait for all buckets */
/* On GPUs: the buckets of rt_ddp_init's (device) gradients go through NCCL (nccl.c);
 * zero2: the gradient region is backed on demand (rt_grad_begin maps, each sent bucket
 * is handed to rt_cu_grads_sent). */
void rt_ddp_use_gpu(rt_exec *e, int zero2);

/* ZeRO-1/2 (zero.c): with strategy zero1 or zero2 on more than one rank ("on"), rank r
 * owns [lo, hi) = rt_dist_shard(trainable_floats, r, world) of the trained parameters:
 * the optimizer state of that part only (rt_optim_state_parts x (hi - lo) floats), its
 * reduced gradients, and its update; the parameters are all-gathered after the step.
 * Off, [lo, hi) is the whole region and each function does what the unsharded loop
 * does. Call rt_zero_init after rt_dist_init and before the rest. */
void rt_zero_init(const rt_train_config *c, const rt_model *m);
int rt_zero_on(void);
/* The part of the optimizer state a rank holds: [lo, hi) of the flat region, each
 * state part (rt_optim_state_parts) hi - lo floats; sharded: the ranks hold
 * rt_dist_shard's shards (and checkpoints gather them). */
typedef struct rt_state_part {
    int64_t lo, hi;
    int sharded;
} rt_state_part;
rt_state_part rt_zero_part(void);
/* Every rank's shard length, in rank order ([world] floats); NULL when off. */
const int64_t *rt_zero_counts(void);
/* The region the backward pass writes gradients into (trainable_floats floats; zero2: a
 * mapping whose pages are returned as buckets are reduced), and zeroing it before the
 * first micro-batch of a step. */
float *rt_zero_alloc_grads(const rt_model *m);
void rt_zero_clear_grads(float *grads);
/* Bytes of gradients this rank keeps through a step (zero2: its shard only). */
int64_t rt_zero_grad_bytes(void);
/* After the backward pass (rt_ddp_finish): the global gradient norm, and the update
 * (of this rank's shard, then the all-gather). */
double rt_zero_grad_norm(rt_pool *pool, const rt_model *m, const float *grads);
void rt_zero_optim_step(rt_pool *pool, const rt_train_config *c, const rt_model *m, float *params,
                        const float *grads, float *state, int64_t t, double lr, float gscale,
                        int clip);
/* ddp.c's buckets, when on: reduce-scatter grads[a, b); poll (zero2 returns the pages
 * of finished buckets); after waiting for all of them. */
void rt_zero_send(float *grads, int64_t a, int64_t b);
void rt_zero_poll(void);
void rt_zero_finish(float *grads);

/* Everything the loop carries from step to step that is not weights or optimizer
 * state: with it, a resumed run continues bit for bit (ckpt.c). */
typedef struct rt_loop_state {
    int64_t step;              /* optimizer steps done */
    int64_t epoch;             /* the current epoch, from 0 */
    int64_t batch;             /* batches of this epoch already consumed */
    double elapsed;            /* training seconds before this process started */
    double log_loss;           /* sum of batch losses since the last train record (a
                                  GAN's: of the discriminator's, d_loss) */
    double log_g_loss;         /* a GAN's: the generator's (g_loss) */
    int64_t log_n, log_samples; /* batches (not steps: a step of a short epoch end has
                                   fewer with accumulate) and samples since it */
    double since_val_loss;     /* for monitor "loss": batch losses since the last check */
    int64_t since_val_n;
    int64_t last_val_step;
    double last_val_loss, last_val_acc;
    double best_val;           /* best val_loss so far (end record) */
    double best_mon;           /* best monitored value (best.safetensors) */
    int64_t best_step;
    double es_best;            /* early stopping: best value and checks without improvement */
    int64_t es_wait;
    int64_t es_stopped;        /* 1: early stopping ended this run (a resume trains nothing) */
    int64_t es_pending;        /* 1: patience ran out before min_epochs/min_steps: the run
                                  ends once both are reached */
    int64_t data_rows;         /* the training data's rows and rt_dataset_fingerprint (0: */
    uint64_t data_fp;          /* a checkpoint from before they were recorded) */
    double last_loss;
    int64_t metrics_bytes;     /* length of metrics.jsonl when the checkpoint was taken */
    int64_t updates;           /* optimizer updates done (steps minus skipped ones) */
    double loss_scale;         /* fp16-mixed: the dynamic loss scale (1 otherwise) */
    int64_t scale_growth;      /* fp16-mixed: finite steps since the scale last changed */
    int64_t skipped;           /* fp16-mixed: steps skipped for inf/NaN gradients */
    double loss_scale_d;       /* a GAN in fp16-mixed: the discriminator's own (the three */
    int64_t scale_growth_d;    /* above are then the generator's) */
    int64_t skipped_d;
} rt_loop_state;

/* Writes OUT/checkpoints/step_NNNNNNNN atomically and keeps the newest
 * checkpoint.keep; returns 0 or -1 (errno set). `lines` is the run's training
 * config (rt_config_dump), `spec_lines` its spec's before --set (rt_ckpt_configs). Rank 0 writes; with a sharded state
 * every rank must call it (the others send their shards and return 0). */
int rt_ckpt_save(const char *out, const rt_model *m, const rt_train_config *c,
                 const rt_loop_state *s, const float *params, const float *layer_state,
                 const float *state, rt_state_part part, char *const *lines, int nlines,
                 char *const *spec_lines, int n_spec);
/* The two training configs checkpoint CK keeps (malloc'd arrays of malloc'd lines):
 * its spec's own (*spec: the trainer's embedded spec, before --set) and the run's
 * (*run: after --set). Returns 0, or -1 for a checkpoint written before the spec's
 * was kept. */
int rt_ckpt_configs(const char *ck, char ***spec, int *n_spec, char ***run, int *n_run);
/* 0 when checkpoint folder CK is intact: its state.json reads, and each file it lists
 * has the size and XXH64 recorded when it was written; else -1, the damage in why.
 * With best_bad, a damaged best.safetensors only sets *best_bad (the best weights are
 * lost, not the checkpoint); without, it counts as damage. */
int rt_ckpt_verify(const char *ck, char *why, size_t n, int *best_bad);
/* The checkpoint --resume OUT continues from: the newest intact one (rt_ckpt_verify),
 * with a warning for each newer damaged one; -1 when OUT has none; exits 1 when every
 * one is damaged. Chosen once a process (later calls give the same). */
int rt_ckpt_resume_point(const char *out, char *path, size_t n);
/* Renames the damaged checkpoints rt_ckpt_resume_point passed over (in the folder it
 * was given) to checkpoints/damaged_step_N (kept, out of checkpoint.keep's count), so a
 * later resume does not meet them again; exits 2 when it cannot. Rank 0, when the run
 * goes on in that folder. */
void rt_ckpt_set_aside_damaged(void);
/* The checkpoint rt_ckpt_resume_point chose has a damaged best.safetensors (said). */
int rt_ckpt_best_damaged(void);
/* Loads a checkpoint (the whole parameters and layer state, the optimizer state's part
 * `part`); exits
 * 1 when it was made by another model, on another number of ranks, or with a training
 * config that differs in a field that changes the numbers (naming the fields). */
void rt_ckpt_load(const char *ckpt, const rt_model *m, const rt_train_config *c, rt_loop_state *s,
                  float *params, float *layer_state, float *state, rt_state_part part,
                  char *const *lines, int nlines);

#endif
