/* run.h: what the parts of a trainer's run share (rt_main.c tells the story; one file
 * a part): the options, the Run that carries a run's resources, the loop's and the
 * step's state, and each part's entry points. Internal to the runtime: generated code
 * sees trainc_rt.h only. */
#ifndef RT_RUN_H
#define RT_RUN_H

#include <math.h>
#include <signal.h>
#include "rt_cuda.h"
#include "rt_dist.h"
#include "rt_loop.h"

/* ---- the command line (options.c) ------------------------------------------------- */

#define RT_MAX_STOPS 8   /* --stop's tokens */

typedef struct Opts {
    const char *out, *init, *resume, *prompt;
    const char *prompt_file;   /* --prompt-file: prompts a line each (mode_sample.c) */
    const char *tokenizer;     /* --tokenizer: --prompt and --sample's output are text */
    const char *stop[RT_MAX_STOPS]; /* --stop (repeated): the tokens that end a sample */
    int n_stop;
    const char *chat;          /* --chat FORMAT: --prompt as a user's turn (runtime/chat.c) */
    const char *system;        /* --system TEXT: --chat's system message */
    const char *predict;       /* --predict FILE.npy (sets eval: nothing trained) */
    int reference;             /* --reference: a dpo model's reference log-probabilities
                                  (sets eval: nothing trained; mode_reference.c) */
    int64_t sample;            /* characters to generate after training */
    int64_t num_samples;       /* --num-samples: sequences drawn together (0: 1) */
    double temperature;
    int64_t top_k;             /* --top-k: 0, every id */
    double top_p;              /* --top-p: 1, every id */
    double min_p;              /* --min-p: 0, every id */
    double repetition_penalty; /* --repetition-penalty: 1, none */
    int64_t sample_seed;
    const char *sets[256];
    int n_sets;
    int device;                /* -1: not given */
    int threads;
    int quiet;
    int gradcheck;
    int eval;                  /* --eval: validate (and sample) the weights, no training */
    int lr_find;               /* --lr-find: the learning-rate range test, no training */
    int64_t lr_find_steps;     /* 0: not given (100) */
    double lr_find_lo, lr_find_hi;   /* 0: not given (1e-8, 1) */
    int profile;               /* --profile: time each instruction from step 3 on */
    int64_t fast_dev_run;      /* --fast-dev-run N: N steps and N validation batches into a
                                  folder removed at exit (0: not given) */
    int sampling;              /* --sample given (its own options need it) */
    const char *sampling_opt;  /* one of --sample's options given, or NULL */
} Opts;

/* The trainer's options into o; --help and --version print and exit 0, bad options
 * exit 1. */
void rt_opts_parse(const rt_model *m, int argc, char **argv, Opts *o);

/* ---- signals (signals.c) ------------------------------------------------------------ */

extern volatile sig_atomic_t rt_signal_seen;   /* a first SIGINT/SIGTERM/SIGHUP: stop */
extern volatile sig_atomic_t rt_have_ckpt;     /* a complete checkpoint of this run exists */
extern volatile sig_atomic_t rt_sampling;      /* training is over, its outputs written */
/* --eval writes nothing: a signal ends it at once (exit 130) */
void rt_catch_signals_eval(void);

/* ---- a run --------------------------------------------------------------------------- */

typedef struct Run {
    const rt_model *m;
    rt_train_config c;
    Opts o;
    rt_exec e;
    float *params, *grads, *state;   /* host memory (on a GPU: copies for files) */
    float *layer_state;        /* the layers' state (rt_model.state: batchnorm's running
                                  statistics), host memory (on a GPU: a copy for files) */
    int gpu;                   /* the exec runs on the GPU (device_cuda.c) */
    int slot;                  /* GPU: the training input slot of the next pass */
    const rt_batch *ahead;     /* GPU: the next batch, already fetched and being copied */
    int step_passes;           /* the most passes a step has (accumulate) */
    int64_t *pass_terms;       /* GPU: the loss terms of each pass of a step */
    /* GPU, one rank: steps queued without the host waiting for their losses (see
     * "steps without a wait" in step.c), oldest first: each one's place in
     * device_cuda.c's ring of statistics, its step number, its passes and their terms */
    struct pending {
        int at;
        int64_t step, k;
    } pend[RT_CU_RING];
    int64_t *pend_terms;       /* RT_CU_RING x step_passes */
    int pend_n;
    int mem_logged;            /* GPU: the device_memory record is written */
    int swa_done;              /* train.swa's average is in the weights' place (swa.c) */
    int64_t val_limit;         /* the batches a validation reads, -1: all (setup.c) */
    int data_on_gpu;           /* loader.on_gpu: the datasets are in GPU memory */
    int64_t state_floats;
    rt_dataset train, val;
    int has_val;
    rt_loader *tl, *vl;
    rt_mask_rule mask;         /* loader.mask's rule, its inputs (rt_run_data; the GPU's too) */
    int mask_in, mask_tgt;
    int64_t steps_per_epoch, batches_per_epoch, total_steps;
    rt_lrfind *lf;             /* --lr-find: the range test's points; else NULL */
    int threads;               /* CPU threads of the pool */
    int64_t resumed_from;      /* the checkpoint's step, or -1 */
    rt_metrics *mt;
    char out[RT_PATH_MAX];
    char ref_path[2][RT_PATH_MAX]; /* --reference: the train and val files it writes */
    double t0;
    int rank, world;           /* data parallelism: rank 0 writes every file */
    const char *prog;          /* argv[0]: the command a hint gives */
    float *gan_z;              /* a GAN's drawn latent batches (rt_model.gan_latent_input -1),
                                  step_passes of batch_size rows */
    float *gan_z_next;         /* on a GPU: the next step's, drawn while this one runs */
    int64_t gan_z_next_step;   /* the step gan_z_next holds (-1: none) */
    int gan_z_buf;             /* on a GPU: gan_z's rt_cu_upload_ordered buffer (gan_z_next's
                                  the other) */
    rt_dptr gan_dz;            /* on a GPU: their device copy */
    rt_dptr gan_norms;         /* on a GPU: each network's gradients' sum of squares */
} Run;

/* How a training run ends (the end record's reason, END_* in end_names' order). */
enum { END_EPOCHS, END_MAX_STEPS, END_MAX_TIME, END_EARLY, END_DIVERGED, END_INTERRUPTED };

/* NaN printed as "nan" (glibc writes "-nan" for one with its sign bit set) */
static inline double rt_nan_plain(double v) { return isnan(v) ? fabs(v) : v; }

/* ---- the training config (run_config.c) ----------------------------------------------- */

/* The run's config: the spec's, a resumed run's (--resume), --set; checked against the
 * trainer; exits 1 on bad input. */
void rt_run_configure(Run *r);
/* After the device is chosen: the precision the trainer was built for, and notes. */
void rt_run_precision(Run *r);
/* "fp32", "bf16-mixed", ... of an RT_PREC_*; the precision a trainer was built for */
const char *rt_precision_name(int precision);
int rt_model_precision(const rt_model *m);
/* Sets fields from "key=value" lines; `from` names a checkpoint whose lines fail. */
void rt_set_lines(rt_train_config *c, const char *const *lines, int n, const char *from);
/* The config of the spec alone, before --set, as lines (a checkpoint keeps them). */
char **rt_spec_lines(const rt_model *m, int *n);
void rt_free_lines(char **lines, int n);
/* The arena's bytes a batch row (the larger of training's and validation's plan). */
int64_t rt_arena_row(const rt_model *m);

/* ---- data, memory and device (setup.c) ------------------------------------------------ */

int rt_run_pick_gpu(const Run *r);
void rt_run_data(Run *r);      /* datasets, loaders, epochs and steps (--lr-find's too) */
void rt_run_memory(Run *r);    /* parameters (initialized or --init), gradients, state */
void rt_run_device(Run *r);    /* the arena and the device's buffers, DDP */
/* several GPUs: finish the collectives and close NCCL before MPI ends */
void rt_run_close_gpu(Run *r);

/* ---- the output folder (outdir.c) ------------------------------------------------------ */

void rt_join_path(char *dst, size_t n, const char *dir, const char *file);
int rt_same_folder(const char *a, const char *b);
int64_t rt_file_size(const char *dir, const char *name);
/* r->out: --out, the resumed folder, out_dir or runs/NAME; --fast-dev-run's a new
 * folder under $TMPDIR (or /tmp), removed at exit */
void rt_out_name(Run *r);
/* PATH and all below it removed (ckpt.c) */
void rt_rm_rf(const char *path);
/* --resume DIR: DIR locked before its checkpoints are read; continuing in DIR for the
 * run, --out elsewhere until rt_out_release_resumed (rt_out_setup, once it is read) */
void rt_out_hold_resumed(const char *dir, int in_place);
void rt_out_release_resumed(void);
/* exit 2 when the output folder was moved or removed during the run */
void rt_out_check(const char *out);
/* Rank 0: the folder made, locked and set up (an earlier run moved aside, a resume's
 * records and best weights); metrics opened. The other ranks write nothing. */
void rt_out_setup(Run *r, rt_loop_state *s);

/* ---- resume (resume.c) ----------------------------------------------------------------- */

/* --resume DIR: the run's config goes on (then --set) */
void rt_resume_config(const rt_model *m, const char *dir, rt_train_config *c);
/* The data's fingerprint, every rank's in one value (every rank calls it). */
uint64_t rt_data_fingerprint(const Run *r);
/* Loads the checkpoint --resume names into the run and s, and checks it goes on here. */
void rt_resume_load(Run *r, rt_loop_state *s, uint64_t data_fp);
/* Rank 0, the folder held: the records cut or copied to the checkpoint's, the best
 * weights restored, damaged checkpoints set aside. */
void rt_resume_into_out(Run *r, const rt_loop_state *s);
/* A resumed run at a limit trains nothing: the note says which and how to go on. */
void rt_resumed_at_limit(const rt_train_config *c, const rt_loop_state *s, int end);

/* ---- rank agreement (agree.c) -------------------------------------------------------------- */

void rt_agree_on_resume(const Run *r);
void rt_agree_on_run(Run *r, const rt_loop_state *s);

/* ---- the step (step.c) ---------------------------------------------------------------------- */

/* Everything the training loop carries besides rt_loop_state. */
typedef struct Loop {
    rt_stopper es;
    rt_prof *prof;             /* --profile, else NULL */
    int scaler;                /* fp16-mixed: dynamic loss scaling */
    int queued_update;         /* the update queued before the host reads the loss */
    int lazy;                  /* and the host waits only when a step needs it */
    int best_mode;             /* RT_MODE_MIN or RT_MODE_MAX of the monitored value */
    int val_scheduled;         /* validation every so many steps or epochs */
    int end;                   /* END_*, or -1 while training goes on */
    char why[256];             /* why it ended (diverged, stopped early) */
    int64_t es_asked_step;     /* the step after which patience last ran out (0: none) */
    int es_deferred;           /* the run ended early after min_epochs/min_steps held it */
    double log_t;              /* samples_per_s counts from here */
    int64_t timed_samples;
    int64_t run_steps;         /* steps of this process */
} Loop;

/* One optimizer step's numbers. */
typedef struct Step {
    int64_t k;                 /* its batches (accumulate, or the epoch's rest) */
    double lr;
    double batch_sum;          /* the sum of its batches' mean losses (over ranks) */
    double loss;               /* their mean */
    double norm;               /* the gradients' norm (unscaled), NAN before known */
    double gpu_sumsq;
    int64_t samples;
    int queued;                /* the update is queued (Loop.queued_update) */
    int profiled;
    double t0;
    int sig_stop;              /* every rank stops after this step (a signal) */
    double now_stop;           /* several ranks: max_time passed on one of them */
    double gan_d, gan_g;       /* a GAN: the sums of its batches' d_loss and g_loss */
    double norm_d, norm_g;     /* and each network's gradient norm */
} Step;

/* A batch's inputs for the next pass, into device slot `slot` (RT_CU_SLOT_*) on a GPU
 * (uploaded: its copy started already; pass: its loss numbers, -1 to go on adding). */
void rt_bind_slot(Run *r, const rt_batch *b, int slot, int uploaded, int set, int pass);
/* A batch's inputs bound for the next pass (set 0 train, 1 val, -1 made on the host). */
void rt_bind_batch(Run *r, const rt_batch *b, int set);
/* After a pass: on a GPU, wait for it and fetch its loss numbers. */
void rt_end_pass(Run *r);
/* The device's parameters (and optimizer state) into the host copies, before files. */
void rt_pull_params(Run *r, int with_state);
void rt_diverged_why(char *why, size_t n, const char *what, double v, int64_t step);
/* A step's forward and backward passes and, where queued, its update: st's numbers;
 * 1 when a step queued without a wait diverged (L->why says so). */
int rt_step_passes(Run *r, rt_loop_state *s, Loop *L, Step *st);
/* A step's micro-batches *k (accumulate, or the epoch's rest) and their rows (the
 * window each micro-batch's loss is scaled by); every gradient zeroed. */
int64_t rt_step_start(Run *r, const rt_loop_state *s, int64_t *k);
/* A GAN's step (gan_step.c): both networks' turns and updates; st as
 * rt_step_passes leaves it, the update already made (st->queued). */
int rt_gan_step_passes(Run *r, rt_loop_state *s, Loop *L, Step *st);
/* The losses and stop requests of every rank made every rank's. */
void rt_step_agree(Run *r, Step *st);
/* Several ranks: rank 0's layer state (batchnorm's running statistics) every rank's,
 * as DDP's broadcast_buffers (on a GPU through the host) */
void rt_share_layer_state(Run *r);
/* The norm and the update, unless the run diverged here (then L->end is set: 1). */
int rt_step_update(Run *r, rt_loop_state *s, Loop *L, Step *st, int lf_over);
/* Steps without a wait (step.c): rt_step_pend queues the step's numbers as pending and
 * waits for them (taking every pending step's) only where a step needs them;
 * rt_take_pending takes them after a wait, also when training stops between them. Both
 * 1 when a pending step diverged; ss: the last one's doubles (rt_cu_step_queue's). */
int rt_step_pend(Run *r, rt_loop_state *s, Loop *L, int64_t k, double ss[RT_CU_F64]);
int rt_take_pending(Run *r, rt_loop_state *s, char *why, size_t n, double ss[RT_CU_F64]);
/* samples mixed into a key */
uint64_t rt_mix(uint64_t a, uint64_t b);

/* ---- the training loop (train.c) ------------------------------------------------------- */

void rt_state_fresh(const Run *r, rt_loop_state *s);   /* a run at step 0 */
/* Trains from s until a limit, a stop or a divergence; the end written and said. */
int rt_train(Run *r, rt_loop_state *s);

/* ---- validation (validate.c) ----------------------------------------------------------- */

typedef struct Eval {
    double loss, acc;
    double margin;             /* dpo: the pairs' mean margin (rt_exec.margin_sum) */
    int64_t terms;
} Eval;
Eval rt_validate(Run *r);
/* Runs validation and records it; updates best.safetensors for a validation monitor. */
void rt_validation(Run *r, rt_loop_state *s, int best_mode);
/* Is a validation due after the step of epoch `epoch` (from 0) that consumed its
 * batches [before, after) and was optimizer step `step` (from 1)? (validate.every_steps,
 * every_epochs, every_fraction: docs/spec.md) */
int rt_val_due(const Run *r, int64_t epoch, int64_t before, int64_t after, int64_t step);

/* ---- what a run saves (saves.c) ---------------------------------------------------------- */

void rt_save_weights(Run *r, const char *file);   /* every rank calls it */
void rt_write_weights_meta(Run *r, const char *path, const char *const *meta);   /* rank 0 */
/* checkpoint.keep_best (best_k.c): the weights at step as one of the K best monitored
 * values, where they are (every rank calls it); at --resume, the files as they were at
 * the checkpoint CK (its second names of them) */
void rt_keep_best(Run *r, int64_t step, int mode, double v, const char *monitor);
void rt_keep_best_resume(const Run *r, const char *ck);
void rt_save_final(Run *r, int after_ckpt, int64_t step);
void rt_ema_swap(Run *r);   /* train.ema's average and the weights exchanged (saves.c) */
/* train.swa (swa.c): its first epoch (from 0); the learning rate in an epoch of it (-1
 * before it, or without swa); the take at an epoch's start; the end of a run that
 * trained all its epochs (1: the average is in the weights' place, validated) */
int64_t rt_swa_first_epoch(const rt_train_config *c);
double rt_swa_lr(const Run *r, int64_t epoch);
void rt_swa_epoch_start(Run *r, const rt_loop_state *s);
int rt_swa_finish(Run *r, rt_loop_state *s, int best_mode);
void rt_checkpoint(Run *r, rt_loop_state *s);     /* every rank calls it */

/* ---- records (records.c) ------------------------------------------------------------------ */

void rt_record_start(Run *r);
void rt_record_memory(Run *r, const rt_loop_state *s);
void rt_record_train(Run *r, rt_loop_state *s, Loop *L, const Step *st, double now);
double rt_record_end(Run *r, const rt_loop_state *s, int end);
extern const char *const rt_end_names[];

/* ---- the modes ----------------------------------------------------------------------------- */

int rt_eval_mode(Run *r);                         /* --eval (mode_eval.c) */
/* The arena at a plan's per-row offset (model.h's ACT: a host address on the CPU, a
 * device one on a GPU) */
char *rt_arena_at(const Run *r, int64_t offset);
/* n values of the arena from per-row offset `offset` (elements `at` on) into y as
 * floats: on the CPU copied, on a GPU downloaded, 16-bit ones (half) widened */
void rt_arena_read(Run *r, int64_t offset, int64_t at, int64_t n, int half, float *y);
void rt_predict_check(const rt_model *m, const Opts *o);   /* --predict (mode_predict.c) */
void rt_predict(Run *r);
/* Rows [at, at + rows) of the arrays a[k] (NULL: xb[k] kept as it is) gathered into the
 * batch buffers xb (idx: rows' room) and run through validation's program */
void rt_eval_rows(Run *r, const rt_npy *const *a, int64_t at, int64_t rows, void **xb,
                  int64_t *idx);
void rt_reference_check(const rt_model *m, const Opts *o); /* --reference (mode_reference.c) */
void rt_reference_entries(Run *r);
void rt_reference(Run *r);
int rt_token_model(const rt_model *m);            /* --sample (mode_sample.c) */
int64_t rt_sample_vocab(const rt_model *m, const Opts *o);
void rt_sample_rows_check(const Run *r);
void rt_sample(Run *r);
/* --sample's logits for N sequences (sample_next.c): the window's pass, or the decode
 * program with its key/value cache */
typedef struct rt_next rt_next;
rt_next *rt_next_open(Run *r, int64_t N, int64_t least, int64_t V);
int64_t rt_next_slots(const rt_next *k);          /* the sequences it serves at once */
void rt_next_logits(rt_next *k, int64_t N, int32_t *ctx, int32_t *tgt, const int64_t *n,
                    const unsigned char *done, float *z, unsigned char *cached);
int64_t rt_next_passes(const rt_next *k);         /* the decode program's passes so far */
void rt_next_slid(rt_next *k, int64_t b);         /* sequence b's window slid: no more cache */
void rt_next_restart(rt_next *k, int64_t b);      /* sequence b's context begins anew: its
                                                     cache empty, serving again */
void rt_next_reset(rt_next *k);                   /* a new generation: the cache empty */
void rt_next_close(rt_next *k);
void rt_lrfind_start(Run *r);                     /* --lr-find (mode_lrfind.c) */
int rt_lrfind_end(Run *r, int interrupted);
int rt_gradcheck(Run *r);                         /* --gradcheck (mode_gradcheck.c) */

#endif
