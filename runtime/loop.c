#define _GNU_SOURCE
/* loop.c: rt_main, the trainer every generated model runs: options, configuration,
 * data, the training loop (accumulation, clipping, schedules, the optimizer),
 * validation, early stopping, metrics and the final weights.
 *
 * Order of work at start: everything that can be bad input (options, --set, data
 * files, --init weights) is checked before the output folder is touched, so a bad
 * run writes nothing (SPEC.md section 6). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rt_cuda.h"
#include "rt_dist.h"
#include "rt_loop.h"

typedef struct Opts {
    const char *out, *init, *resume, *prompt;
    int64_t sample;            /* characters to generate after training */
    double temperature;
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
} Opts;

static volatile sig_atomic_t g_signal;
static volatile sig_atomic_t g_have_ckpt;   /* a complete checkpoint of this run exists */
static volatile sig_atomic_t g_sampling;    /* training is over, its outputs written */

/* The first SIGINT/SIGTERM/SIGHUP asks the loop to stop at the next step boundary (it writes
 * a checkpoint and exits 130); a second one leaves at once. Checkpoints are written
 * to a temporary folder and renamed, so leaving mid-write cannot damage the last one. */
static void on_signal(int sig)
{
    if (g_signal) {
        static const char kept[] = "\ntrainc: second signal: exiting now (the last complete "
                                   "checkpoint is intact)\n";
        static const char none[] = "\ntrainc: second signal: exiting now (no checkpoint was "
                                   "complete yet: this run cannot be resumed)\n";
        static const char done[] = "\ntrainc: second signal: exiting now (the run's outputs "
                                   "are written)\n";
        ssize_t w = g_sampling    ? write(2, done, sizeof done - 1)
                    : g_have_ckpt ? write(2, kept, sizeof kept - 1)
                                  : write(2, none, sizeof none - 1);
        (void)w;
        _exit(RT_EXIT_INTERRUPTED);
    }
    g_signal = sig;
    static const char msg[] = "\ntrainc: stopping at the end of this step (a second "
                              "signal exits at once)\n";
    static const char smsg[] = "\ntrainc: stopping the sampling (a second signal exits at "
                               "once)\n";
    ssize_t w = g_sampling ? write(2, smsg, sizeof smsg - 1) : write(2, msg, sizeof msg - 1);
    (void)w;
}

/* --eval writes nothing: a signal ends it at once, with SPEC.md's exit 130 */
static void on_signal_eval(int sig)
{
    (void)sig;
    static const char msg[] = "\ntrainc: interrupted (nothing was written)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(RT_EXIT_INTERRUPTED);
}

/* SIGHUP (the terminal or the SSH session gone) stops the run as SIGINT does. SIGPIPE
 * is ignored: with `trainer 2>&1 | tee log`, Ctrl-C ends tee too, and the next message
 * would otherwise kill the trainer before its checkpoint; a write to a closed pipe
 * fails instead (messages are lost, the run's files are not). */
void rt_catch_signals(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, SIG_IGN);
}

static const char *const option_names[] = {"--out", "--set", "--init", "--resume", "--device",
                                           "--threads", "--quiet", "--help", "--sample",
                                           "--temperature", "--sample-seed", "--prompt", "--eval",
                                           "--lr-find", "--lr-find-steps", "--lr-find-range", "--profile",
                                           "--version", NULL};

/* A model --sample can draw from: an i32 [T] input and cross-entropy logits [T, vocab]. */
static int token_model(const rt_model *m)
{
    const rt_input *in = &m->inputs[0];
    int64_t T = in->rank == 1 ? in->shape[0] : 0;
    return m->n_inputs == 2 && rt_batch_dtype(in) == RT_I32 && T > 0 &&
           m->loss == RT_LOSS_CROSS_ENTROPY && m->pred_numel % T == 0;
}

void rt_trainer_options(FILE *f, const rt_model *m)
{
    int cpu = !m || (m->devices & RT_HAS_CPU), cuda = !m || ((m->devices & RT_HAS_CUDA) && m->cuda);
    fprintf(f, "  --out DIR              where outputs go (default: out_dir, else runs/%s)\n"
               "  --set KEY=VALUE        override a training-spec field, e.g. --set optimizer.lr=3e-4\n"
               "  --init FILE            start from these weights (safetensors)\n"
               "  --device %-13s where to run (%s: %s)\n"
               "  --threads N            CPU threads (default: all cores)\n"
               "  --quiet                no progress line\n"
               "  --resume DIR           continue DIR's run from its newest checkpoint\n"
               "  --eval                 no training: validate the weights (--init FILE, --resume DIR's\n"
               "                         checkpoint, else the spec's initialization) on data.val, print\n"
               "                         the result as a JSON line, write nothing\n"
               "%s"
               "  --lr-find              no training: the learning-rate range test (Lightning's\n"
               "                         lr_find): steps at rates growing from 1e-8 to 1, stopped when\n"
               "                         the loss blows up; writes OUT/lr_find.jsonl and lr_find.svg and\n"
               "                         prints the rate where the loss falls fastest\n"
               "  --lr-find-steps N      its steps (default 100)\n"
               "  --lr-find-range LO,HI  its rates (default 1e-8,1)\n"
               "  --profile              time each instruction of the training steps after the\n"
               "                         first two: OUT/profile.json and a table at the end\n"
               "  --version              the model, its spec hash and the trainc that built this trainer\n",
            m ? m->name : "NAME", cpu && cuda ? "cpu|cuda|auto" : cuda ? "cuda|auto" : "cpu|auto",
            m ? "this trainer" : "as built",
            cpu && cuda ? "CPU or GPU; auto takes a GPU if there is one" : cuda ? "GPU" : "CPU",
            /* (trainc help run, without a model, lists them for the token models) */
            !m || token_model(m)
                ? "  --sample N             token models: print N generated tokens (bytes) after training\n"
                  "  --temperature T        sampling temperature (default 1.0)\n"
                  "  --sample-seed S        sampling seed (default: the training seed)\n"
                  "  --prompt TEXT          text the sample continues (default: a newline)\n"
                : "");
}

/* argv0: the trainer's own path as it was started, or "trainc run" (jit.c) */
static void trainer_usage(const rt_model *m, const char *argv0)
{
    if (!strcmp(argv0, "trainc run"))
        printf("usage: trainc run SPEC... [options]   (%s)\n\n", m->name);
    else
        printf("usage: %s [options]   (%s)\n\n", argv0, m->name);
    rt_trainer_options(stdout, m);
}

const char *const rt_trainer_value_options[] = {
    "--out", "--set", "--init", "--resume", "--device", "--threads", "--sample", "--temperature",
    "--sample-seed", "--prompt", "--lr-find-steps", "--lr-find-range", NULL};

/* An option's value: its "=VALUE" part (--out=DIR) when it has one, else the next
 * argument, which must not be an option itself (--resume --quiet). */
static const char *need(int argc, char **argv, int *i, const char *inline_value)
{
    if (inline_value)
        return inline_value;
    if (*i + 1 >= argc)
        rt_input_error("%s needs a value", argv[*i]);
    for (int k = 0; option_names[k]; k++)
        if (!strcmp(argv[*i + 1], option_names[k]))
            rt_input_error("%s needs a value, got the option %s", argv[*i], argv[*i + 1]);
    return argv[++*i];
}

static void parse_opts(const rt_model *m, int argc, char **argv, Opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = -1;
    o->temperature = 1.0;
    o->sample_seed = -1;
    int sampling = 0;                 /* --sample given */
    const char *sampling_opt = NULL;  /* one of its options given */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *inl = NULL, *eq = strchr(a, '=');
        char name[32];
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) {
            /* --out=DIR as --out DIR */
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            for (int k = 0; rt_trainer_value_options[k] && !inl; k++)
                if (!strcmp(name, rt_trainer_value_options[k])) {
                    a = name;
                    inl = eq + 1;
                }
        }
        if (!strcmp(a, "--out"))
            o->out = need(argc, argv, &i, inl);
        else if (!strcmp(a, "--set")) {
            if (o->n_sets == 256)
                rt_input_error("too many --set options");
            o->sets[o->n_sets++] = need(argc, argv, &i, inl);
        } else if (!strcmp(a, "--init"))
            o->init = need(argc, argv, &i, inl);
        else if (!strcmp(a, "--resume"))
            o->resume = need(argc, argv, &i, inl);
        else if (!strcmp(a, "--device")) {
            const char *d = need(argc, argv, &i, inl);
            if (!strcmp(d, "cpu"))
                o->device = RT_DEVICE_CPU;
            else if (!strcmp(d, "auto"))
                o->device = RT_DEVICE_AUTO;
            else if (!strcmp(d, "cuda"))
                o->device = RT_DEVICE_CUDA;
            else
                rt_input_error("--device: expected cpu, cuda or auto, got '%s'", d);
        } else if (!strcmp(a, "--threads")) {
            const char *t = need(argc, argv, &i, inl);
            char *end;
            long v = strtol(t, &end, 10);
            if (*end || v < 1 || v > 1024)
                rt_input_error("--threads: expected an integer from 1 to 1024, got '%s'", t);
            o->threads = (int)v;
        } else if (!strcmp(a, "--quiet"))
            o->quiet = 1;
        else if (!strcmp(a, "--sample") || !strcmp(a, "--sample-seed")) {
            const char *t = need(argc, argv, &i, inl);
            char *end;
            errno = 0;
            long long v = strtoll(t, &end, 10);
            long long most = a[8] == 0 ? 100000000 : LLONG_MAX;
            if (*end || !*t || errno == ERANGE || v < 0 || v > most)
                rt_input_error("%s: expected an integer from 0 to %lld, got '%s'", a, most, t);
            if (a[8] == 0)
                o->sample = v, sampling = 1;
            else
                o->sample_seed = v, sampling_opt = a;
        } else if (!strcmp(a, "--temperature")) {
            const char *t = need(argc, argv, &i, inl);
            char *end;
            double v = strtod(t, &end);
            if (*end || !(v > 0) || !isfinite(v))
                rt_input_error("--temperature: expected a number > 0, got '%s'", t);
            o->temperature = v;
            sampling_opt = "--temperature";
        } else if (!strcmp(a, "--prompt")) {
            o->prompt = need(argc, argv, &i, inl);
            sampling_opt = "--prompt";
        }
        else if (!strcmp(a, "--eval"))
            o->eval = 1;
        else if (!strcmp(a, "--lr-find"))
            o->lr_find = 1;
        else if (!strcmp(a, "--profile"))
            o->profile = 1;
        else if (!strcmp(a, "--lr-find-steps")) {
            const char *t = need(argc, argv, &i, inl);
            char *end;
            long long v = strtoll(t, &end, 10);
            if (*end || v < 2 || v > 100000)
                rt_input_error("--lr-find-steps: expected an integer from 2 to 100000, got '%s'", t);
            o->lr_find_steps = v;
        } else if (!strcmp(a, "--lr-find-range")) {
            const char *t = need(argc, argv, &i, inl);
            char *end, *end2;
            double lo = strtod(t, &end), hi = *end == ',' ? strtod(end + 1, &end2) : NAN;
            if (*end != ',' || *end2 || !(lo > 0) || !(hi > lo) || !isfinite(hi))
                rt_input_error("--lr-find-range: expected LO,HI with 0 < LO < HI, got '%s'", t);
            o->lr_find_lo = lo;
            o->lr_find_hi = hi;
        }
        else if (!strcmp(a, "--gradcheck"))
            o->gradcheck = 1;   /* developer option: finite-difference check, see tests/ */
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            trainer_usage(m, argc > 0 && argv[0] ? argv[0] : "trainer");
            exit(0);
        } else if (!strcmp(a, "--version")) {
            printf("%s trainer (spec hash %s), built by trainc %s\n", m->name, m->spec_hash,
                   TRAINC_VERSION);
            exit(0);
        } else {
            const char *near = rt_closest(a, option_names);
            rt_input_error("unknown option '%s'%s%s%s", a, near ? "; did you mean '" : "",
                           near ? near : "", near ? "'?" : "");
        }
    }
    if (sampling_opt && !sampling)
        rt_input_error("%s is an option of --sample; add --sample N", sampling_opt);
    if ((o->lr_find_steps || o->lr_find_lo > 0) && !o->lr_find)
        rt_input_error("%s is an option of --lr-find; add --lr-find",
                       o->lr_find_steps ? "--lr-find-steps" : "--lr-find-range");
    if (o->profile && (o->lr_find || o->eval || o->gradcheck))
        rt_input_error("--profile times training: not with %s", o->lr_find ? "--lr-find"
                       : o->eval ? "--eval" : "--gradcheck");
    if (o->lr_find && (o->resume || o->eval || o->gradcheck || o->sample))
        rt_input_error("--lr-find runs on its own: not with %s", o->resume ? "--resume"
                       : o->eval ? "--eval" : o->gradcheck ? "--gradcheck" : "--sample");
}

/* Sets each field from "key=value" lines (the trainer's embedded spec, a
 * checkpoint's config); `from` names a checkpoint whose lines fail, NULL for ours. */
static void set_lines(rt_train_config *c, const char *const *lines, int n, const char *from)
{
    char err[512];
    for (int i = 0; i < n; i++) {
        char key[256];
        const char *line = lines[i], *eq = strchr(line, '=');
        if (eq && (size_t)(eq - line) < sizeof key) {
            memcpy(key, line, (size_t)(eq - line));
            key[eq - line] = 0;
            if (rt_config_set(c, key, eq + 1, err, sizeof err) == 0)
                continue;
        } else
            snprintf(err, sizeof err, "not KEY=VALUE");
        if (from)
            rt_input_error("%s/state.json: bad training line '%s': %s (a damaged checkpoint?)",
                           from, line, err);
        rt_die("embedded training line '%s': %s", line, err);
    }
}

/* The arena a batch row: one block serves both plans, training's and validation's
 * (the larger; the plan's arena_bytes is the same). */
static int64_t arena_row(const rt_model *m)
{
    return m->arena_row_bytes > m->eval_arena_row_bytes ? m->arena_row_bytes
                                                        : m->eval_arena_row_bytes;
}

/* The config of the spec alone, before --set, as lines (a checkpoint keeps them). */
static char **spec_lines(const rt_model *m, int *n)
{
    rt_train_config c;
    rt_config_defaults(&c);
    set_lines(&c, m->train_defaults, m->n_train_defaults, NULL);
    return rt_config_dump(&c, n);
}

static void free_lines(char **lines, int n)
{
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

/* --resume DIR: the run goes on with the config it had, --set options included, so
 * that `--resume DIR` alone continues the same command; where the spec was edited
 * since, the spec's new values win (rt_config_merge). The checkpoint's check of the
 * fields that change the numbers follows when it is loaded. */
static void resume_config(const rt_model *m, const char *dir, rt_train_config *c)
{
    char ck[RT_PATH_MAX + 64], **then, **run;
    int n_then, n_run, n_now, n;
    if (rt_ckpt_resume_point(dir, ck, sizeof ck) != 0 ||
        rt_ckpt_configs(ck, &then, &n_then, &run, &n_run) != 0)
        return;                /* none (said later), or one that kept no spec config */
    char **now = spec_lines(m, &n_now);
    char **lines = rt_config_merge(then, n_then, run, n_run, now, n_now, &n);
    rt_config_defaults(c);
    set_lines(c, (const char *const *)lines, n, ck);
    free_lines(then, n_then);
    free_lines(run, n_run);
    free_lines(now, n_now);
    free_lines(lines, n);
}

static void configure(const rt_model *m, const Opts *o, rt_train_config *c)
{
    char err[512];
    rt_config_defaults(c);
    set_lines(c, m->train_defaults, m->n_train_defaults, NULL);
    if (o->resume)
        resume_config(m, o->resume, c);
    /* the recomputation policy shapes the compiled program: it cannot change here. The
     * budget may: recompute auto's plan is checked against it below, and the other
     * policies do not read it (as when trainc run compiles) */
    int compiled_policy = c->recompute;
    for (int pass = 0; pass < 2; pass++)   /* the type keys first: they reset their group */
        for (int i = 0; i < o->n_sets; i++)
            if (rt_config_set_pass(o->sets[i]) == pass &&
                rt_config_set_arg(c, o->sets[i], err, sizeof err) != 0)
                rt_input_error("%s", err);
    if (c->recompute != compiled_policy) {
        static const char *const pol[] = {"none", "selective", "full", "auto"};
        rt_input_error("--set recompute=%s: this trainer's recomputation plan (%s) is compiled into "
                       "it; rebuild it with trainc build ... --set recompute=%s (trainc run applies "
                       "it when compiling)", pol[c->recompute], pol[compiled_policy],
                       pol[c->recompute]);
    }
    char key[256] = "";
    if (rt_config_check(c, err, sizeof err, key, sizeof key) != 0)   /* the key it blames */
        rt_input_error("$.train%s%s: %s", key[0] ? "." : "", key, err);
    /* the rules between the model and the training spec that the compiler applies to
     * the spec file (spec.c's check_train_vs_model), again after --set; the data files'
     * keys are checked against the inputs when they are opened (rt_dataset_open) */
    if (c->has_early_stopping && c->es_monitor == RT_MON_VAL_ACC &&
        m->loss != RT_LOSS_CROSS_ENTROPY)
        rt_input_error("$.train.early_stopping.monitor: early_stopping.monitor val_acc needs a cross_entropy "
                       "loss (this model's is mse); monitor val_loss or loss");
    /* recompute auto chose the compiled plan for the spec's batch size and optimizer to
     * fit memory_budget_mb (main.c's compile_spec, by the same count): a larger batch or
     * an optimizer with more state may no longer fit it */
    if (o->device >= 0)
        c->device = o->device;
    if (c->recompute == RT_RECOMPUTE_AUTO) {
        double pf = (double)m->param_floats;
        /* the shard of ZeRO's optimizer state for the ranks this run has (the compiler
         * counted distributed.ranks: fewer ranks than that may not fit) */
        double opt = rt_opt_state_bytes(c, m->param_floats, rt_dist_world()) / 4;
        double ws = c->device == RT_DEVICE_CPU   /* the GPU's workspace, as the plan counts it */
                        ? 0 : (double)rt_gpu_fixed_of(m, c->batch_size, (int)c->accumulate);
        double need = (double)c->batch_size * (double)arena_row(m) + 4 * (2 * pf + opt) +
                      (m->act16 ? 2 * pf : 0) + ws;
        char fewer[200] = "";   /* the plan counted more ranks than this run has */
        if (c->dist != RT_DIST_DDP && c->ranks > rt_dist_world())
            snprintf(fewer, sizeof fewer, "; it was planned for distributed.ranks %lld and "
                     "this run has %d: run on %lld ranks, or rebuild it with --set "
                     "distributed.ranks=%d", (long long)c->ranks, rt_dist_world(),
                     (long long)c->ranks, rt_dist_world());
        if (need > c->memory_budget_mb * 1048576.0)
            rt_input_error("$.train.memory_budget_mb: %g MiB does not fit this trainer's "
                           "plan (recompute auto chose it when compiling) at batch_size %lld: "
                           "it needs %.1f MiB; rebuild it with trainc build ... --set "
                           "batch_size=%lld (trainc run applies batch_size when compiling)%s",
                           c->memory_budget_mb, (long long)c->batch_size,
                           ceil(need / 1048576.0 * 10) / 10,   /* up: a budget it names fits */
                           (long long)c->batch_size, fewer);
    }
}

/* Features of the contract that this release does not have yet are refused
 * clearly instead of being silently ignored. */
static void refuse_unsupported(const rt_model *m, const Opts *o, const rt_train_config *c)
{
    if (c->device == RT_DEVICE_CUDA && !(m->devices & RT_HAS_CUDA))
        rt_input_error("--device cuda: this trainer was built for the CPU only (no CUDA kernels "
                       "in it); rebuild it with trainc build --device cuda (or both)");
    /* (trainc run: a model the GPU kernels do not take, e.g. heads wider than 128; a
     * run time check would stop it at its first launch, after the output folder) */
    if (c->device == RT_DEVICE_CUDA && (m->devices & RT_HAS_CUDA) && m->cuda &&
        m->cuda->unsupported)
        rt_input_error("--device cuda: %s (not supported on the GPU yet); run with --device cpu",
                       m->cuda->unsupported);
    if (c->device == RT_DEVICE_CPU && !(m->devices & RT_HAS_CPU))
        rt_input_error("--device cpu: this trainer was built for CUDA only; rebuild it with "
                       "trainc build --device both (or cpu)");
    if (o->resume && o->init)
        rt_input_error("--init and --resume exclude each other: a resumed run continues from its checkpoint's weights");
    (void)m;
}

/* ---- one pass over a batch ------------------------------------------------ */

typedef struct Run {
    const rt_model *m;
    rt_train_config c;
    Opts o;
    rt_exec e;
    float *params, *grads, *state;   /* host memory (on a GPU: copies for files) */
    int gpu;                   /* the exec runs on the GPU (device_cuda.c) */
    int slot;                  /* GPU: the training input slot of the next pass */
    const rt_batch *ahead;     /* GPU: the next batch, already fetched and being copied */
    int step_passes;           /* the most passes a step has (accumulate) */
    int64_t *pass_terms;       /* GPU: the loss terms of each pass of a step */
    /* GPU, one rank: steps queued without the host waiting for their losses (see
     * "steps without a wait" in the step loop), oldest first: each one's place in
     * device_cuda.c's ring of statistics, its step number, its passes and their terms */
    struct pending {
        int at;
        int64_t step, k;
    } pend[RT_CU_RING];
    int64_t *pend_terms;       /* RT_CU_RING x step_passes */
    int pend_n;
    int mem_logged;            /* GPU: the device_memory record is written */
    int data_on_gpu;           /* loader.on_gpu: the datasets are in GPU memory */
    int64_t state_floats;
    rt_dataset train, val;
    int has_val;
    rt_loader *tl, *vl;
    int64_t steps_per_epoch, batches_per_epoch, total_steps;
    rt_metrics *mt;
    char out[RT_PATH_MAX];
    double t0;
    int rank, world;           /* data parallelism: rank 0 writes every file */
} Run;

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Starts the copy of batch b into device slot `slot`: its inputs, or with the data on
 * the GPU (set 0 train, 1 val; -1: b holds data, as --sample's) its sample indices. */
static void upload(Run *r, const rt_batch *b, int slot, int set)
{
    if (r->data_on_gpu && set >= 0)
        rt_cu_upload_index(&r->e, (const int32_t *)b->in[0], b->rows, slot, set);
    else
        rt_cu_upload_batch(&r->e, r->m, (const void *const *)b->in, b->rows, slot);
}

/* A batch's inputs for the next pass, and the pass's loss numbers reset (on a GPU
 * those of pass `pass` of a step; -1: the device's go on adding up). On a GPU the
 * inputs are copied asynchronously into device slot `slot` (RT_CU_SLOT_*): training
 * and validation each alternate two, so that the next batch's copy runs while this
 * one computes (see the step loop and validate); sampling uses the first validation
 * slot. On the CPU `slot` and `pass` mean nothing. */
static void bind_slot(Run *r, const rt_batch *b, int slot, int uploaded, int set, int pass)
{
    r->e.B = b->rows;
    r->e.loss_sum = 0;
    r->e.terms = 0;
    r->e.correct = 0;
    if (r->gpu) {
        if (!uploaded)
            upload(r, b, slot, set);
        rt_cu_use_slot(&r->e, r->m, slot, b->rows);
        if (pass >= 0)
            rt_cu_begin_pass(&r->e, pass);
        return;
    }
    for (int k = 0; k < r->m->n_inputs; k++)
        r->e.in[k] = b->in[k];
}

/* A validation batch (set 1), a training batch outside the step loop (0), or one made
 * on the host (-1). */
static void bind_batch(Run *r, const rt_batch *b, int set)
{
    bind_slot(r, b, RT_CU_SLOT_EVAL, 0, set, 0);
}

/* After a pass: on a GPU, wait for it and fetch its loss numbers (the batch's host
 * buffers are free again then: the pass waited for their copy). */
static void end_pass(Run *r)
{
    if (r->gpu)
        rt_cu_end_pass(&r->e);
}

/* "the training loss is nan after step N (...)": the message of a run that diverged,
 * `what` being the training loss or the gradient norm (a finite loss whose gradients
 * are not: their update would make the weights NaN, and a checkpoint after it would
 * keep them) */
static void diverged_why(char *why, size_t n, const char *what, double v, int64_t step)
{
    snprintf(why, n, "the %s is %s after step %lld (in the next step, which is not counted)", what,
             isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long)step);
}

/* Steps without a wait: on one GPU with the update queued, a step whose numbers nothing
 * needs at once (no record, validation, checkpoint, epoch's end or stop after it) is
 * queued and the host goes on to the next, its losses left in device_cuda.c's ring of
 * statistics; the next step that needs them waits once for all (take_pending). The GPU
 * then never idles between steps while the host reads a loss. Must the host wait after
 * this step (k passes)? */
static int step_needs_wait(const Run *r, const rt_train_config *c, const rt_loop_state *s,
                           int64_t k)
{
    int64_t step = s->step + 1;
    return r->pend_n >= RT_CU_RING / 2 || !r->mem_logged || step % c->log_every == 0 ||
           s->batch + k >= r->batches_per_epoch ||
           (r->has_val && c->val_every_steps > 0 && step % c->val_every_steps == 0) ||
           (c->has_checkpoint && step % c->ckpt_every_steps == 0) ||
           (c->max_steps > 0 && step >= c->max_steps) ||
           (!isnan(c->max_time) && rt_now() - r->t0 >= c->max_time) || g_signal;
}

/* After a wait for the last queued step: the pending steps' losses, in order, into the
 * running sums of the records (as the step loop adds a step's at once); the first
 * that is not finite ends the run there: 1, with s->step its step (the steps after it
 * ran, but a diverged run saves nothing) and the message in why. *sumsq: the last
 * step's gradients' sum of squares. */
static int take_pending(Run *r, rt_loop_state *s, char *why, size_t n, double *sumsq)
{
    int np = r->pend_n;
    r->pend_n = 0;
    for (int p = 0; p < np; p++) {
        const struct pending *q = &r->pend[p];
        const int64_t *terms = r->pend_terms + (size_t)p * (size_t)r->step_passes;
        double sum = 0;
        for (int64_t i = 0; i < q->k; i++)
            sum += rt_cu_place_stat(&r->e, q->at, (int)i)->loss_sum / (double)terms[i];
        double ss = rt_cu_place_f64(&r->e, q->at);
        if (!isfinite(sum) || !isfinite(ss)) {
            diverged_why(why, n, isfinite(sum) ? "gradient norm" : "training loss",
                         isfinite(sum) ? ss : sum, q->step);
            s->step = q->step;
            return 1;
        }
        s->last_loss = sum / (double)q->k;
        s->log_loss += sum;
        s->log_n += q->k;
        s->since_val_loss += sum;
        s->since_val_n += q->k;
        *sumsq = ss;
    }
    return 0;
}

/* A training pass's forward and backward (prof: timed by instruction, --profile). */
static void train_pass(Run *r, rt_prof *prof)
{
    if (prof)
        rt_prof_pass_begin(&r->e, prof, 0);
    r->m->forward(&r->e, 1);
    if (prof)
        rt_prof_pass_end(&r->e);
    if (prof)
        rt_prof_pass_begin(&r->e, prof, 1);
    r->m->backward(&r->e);
    if (prof)
        rt_prof_pass_end(&r->e);
}

/* The device's parameters (and optimizer state) into the host copies, before files. */
static void pull_params(Run *r, int with_state)
{
    if (r->gpu)
        rt_cu_get_params(&r->e, r->m, r->params, with_state ? r->state : NULL,
                         with_state ? r->state_floats : 0);
}

static rt_dptr dptr(const void *p) { return (rt_dptr)(uintptr_t)p; }

/* The gradient norm on a GPU from this rank's sum of squares (rt_cu_grad_sumsq); under
 * zero1 the shards' sums added over ranks (as rt_zero_grad_norm on the CPU). */
static double gpu_grad_norm(double ss)
{
    if (rt_zero_on())
        rt_allreduce_sum_f64(&ss, 1);
    return sqrt(ss);
}

/* A step's update from the gradients' norm (the true one, unscaled), with fp16-mixed's
 * GradScaler rule: inf/NaN gradients skip the update and halve the loss scale. */
static void update(Run *r, rt_loop_state *s, double norm, double lr, int scaler)
{
    const rt_train_config *c = &r->c;
    const rt_model *m = r->m;
    if (scaler && !isfinite(norm)) {
        s->loss_scale *= 0.5;
        s->scale_growth = 0;
        s->skipped++;
        return;
    }
    /* clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1; the unscaling
     * (a power of two) goes into the same factor, exactly (optim.cuh's rt_clip_scale
     * is the same arithmetic, where the GPU works the factor out itself) */
    float coef = isnan(c->grad_clip) ? 1.0f : (float)(c->grad_clip / (norm + 1e-6));
    int clip = coef < 1.0f;
    float gs = (float)((clip ? (double)coef : 1.0) / s->loss_scale);
    clip |= s->loss_scale != 1.0;
    s->updates++;
    if (r->gpu) {
        rt_cu_optim_step(&r->e, c, m, dptr(r->e.params), dptr(r->e.grads), rt_cu_state(&r->e),
                         s->updates, lr, gs, clip);
        if (rt_zero_on()) {   /* zero1: each rank updated its shard: gather */
            rt_nccl_gather_shards(&r->e, r->e.params, rt_zero_counts());
            rt_cu_copy_params16(&r->e, m);
        }
    } else
        rt_zero_optim_step(r->e.rt, c, m, r->params, r->grads, r->state, s->updates, lr, gs,
                           clip);
    if (scaler && ++s->scale_growth == c->ls_growth_interval) {
        /* GradScaler keeps the scale in fp32 and grows it only to a finite value */
        if (isfinite((float)(s->loss_scale * 2.0)))
            s->loss_scale *= 2.0;
        s->scale_growth = 0;
    }
}

/* cpu or cuda, per --device / train.device and what the trainer was built for; with
 * "auto", a GPU when there is one. */
static int pick_gpu(const Run *r)
{
    const rt_model *m = r->m;
    char why[512];
    int count = 0;
    int can_cuda = (m->devices & RT_HAS_CUDA) && m->cuda;
    if (r->c.device == RT_DEVICE_CPU || !can_cuda)
        return 0;
    if (m->cuda->unsupported) {   /* auto (refuse_unsupported took cuda): the CPU, said */
        if (r->rank == 0)
            fprintf(stderr, "trainc: note: %s: %s on the CPU\n", m->cuda->unsupported,
                    r->o.eval ? "evaluating" : "training");
        return 0;
    }
    if (rt_cu_probe(why, sizeof why, &count) == 0)
        return 1;
    if (r->c.device == RT_DEVICE_CUDA || !(m->devices & RT_HAS_CPU))
        rt_cu_no_device(why);
    if (r->rank == 0)
        fprintf(stderr, "trainc: no GPU (%s): %s on the CPU\n", why,
                r->o.eval ? "evaluating" : "training");
    return 0;
}

/* ---- parameters -------------------------------------------------------------- */

static void join_path(char *dst, size_t n, const char *dir, const char *file)
{
    if (snprintf(dst, n, "%s/%s", dir, file) >= (int)n)
        rt_fail("path too long: %s/%s", dir, file);
}

/* Rank 0 writes OUT/file */
static void write_weights(Run *r, const char *file)
{
    pull_params(r, 0);
    char path[RT_PATH_MAX + 64];
    join_path(path, sizeof path, r->out, file);
    if (rt_safetensors_write(path, r->m, r->params) != 0)
        rt_fail("cannot write %s: %s%s", path, strerror(errno), rt_full_hint(errno));
}

/* Every rank calls it during training (rank 0 writes; the others wait in
 * rt_barrier_solo, not in the next step's collectives, whose watchdog does not know
 * rank 0 is writing). */
static void save_weights(Run *r, const char *file)
{
    if (r->rank == 0)
        write_weights(r, file);
    rt_barrier_solo();
}

static int same_folder(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* One run a folder at a time: rank 0 holds an exclusive lock on its output folder
 * (flock on the folder itself: no file of ours in it, and the kernel drops the lock
 * when the process ends, however it ends). Returns the folder's descriptor, locked,
 * or -1 when another process holds it; a file system without flock locks nothing. */
static int lock_folder(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -2;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(fd);
        return -1;
    }
    return fd;
}

static _Noreturn void folder_in_use(const char *out)
{
    rt_input_error("%s is in use: another run is writing there now\n  hint: --out names "
                   "another folder; wait for that run to end to --resume it", out);
}

/* The output folder, locked for the run (lock_folder), and its identity, which each
 * checkpoint and the end check against: a folder moved or removed during the run took
 * its files with it, and writing on into a new one of that name would split the run. */
static int out_fd = -1;
static struct stat out_id;
static void check_out(const char *out);

static void hold_out(const char *out)
{
    if (out_fd >= 0) {        /* held since hold_resumed: the same folder, or exit 2 */
        check_out(out);
        return;
    }
    out_fd = lock_folder(out);
    if (out_fd == -1)
        folder_in_use(out);
    if (stat(out, &out_id) != 0)
        rt_fail("%s: %s", out, strerror(errno));
}

static void check_out(const char *out)
{
    struct stat now;
    if (stat(out, &now) != 0 || now.st_dev != out_id.st_dev || now.st_ino != out_id.st_ino)
        rt_fail("the output folder %s was moved or removed during the run (what was written "
                "went with it); nothing more is written", out);
}

/* --resume DIR continuing in DIR: the folder is locked before its checkpoints are read,
 * not only once the run starts writing. A run still working there would otherwise be
 * read as it writes and prunes them (its newest taken for damaged, or none found:
 * "no complete checkpoint"), and a new run started into DIR at the same time could move
 * the folder aside under the resume, which then went on from the moved run's
 * checkpoint into a new, empty DIR. A folder that is not there is left to the resume's
 * own error. */
static void hold_resumed(const char *dir)
{
    int fd = lock_folder(dir);
    if (fd == -1)
        folder_in_use(dir);
    if (fd >= 0 && fstat(fd, &out_id) == 0)
        out_fd = fd;
    else if (fd >= 0)
        close(fd);
}

/* A new run into a folder that holds an earlier one (its metrics.jsonl, checkpoints or
 * weights) would write over its records and weights, and mix its checkpoints with this
 * run's (keep would prune the new ones, a later --resume take an old one): the earlier
 * run is moved aside whole, to OUT.1 (or .2, ...), first. */
static void keep_earlier_run(const char *out)
{
    char p[RT_PATH_MAX + 32], dir[RT_PATH_MAX + 32], to[RT_PATH_MAX + 48];
    static const char *const marks[] = {"metrics.jsonl", "checkpoints", "model.safetensors",
                                        "best.safetensors"};
    int held = 0;
    for (size_t i = 0; i < sizeof marks / sizeof *marks && !held; i++) {
        join_path(p, sizeof p, out, marks[i]);
        held = access(p, F_OK) == 0;
    }
    if (!held)
        return;
    snprintf(dir, sizeof dir, "%s", out);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = 0;
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    if (!strcmp(base, ".") || !strcmp(base, ".."))
        rt_input_error("%s holds an earlier run, and the folder a run works in cannot be "
                       "moved aside\n  hint: --resume %s continues it; --out names another "
                       "folder", out, out);
    for (int k = 1;; k++) {
        snprintf(to, sizeof to, "%s.%d", dir, k);
        if (access(to, F_OK) != 0 && errno == ENOENT)
            break;
    }
    int fd = lock_folder(dir);
    if (fd == -1)
        folder_in_use(out);
    int moved = rename(dir, to);
    if (fd >= 0)
        close(fd);
    if (moved != 0)
        rt_input_error("%s holds an earlier run, which cannot be moved aside to %s: %s\n  "
                       "hint: --resume %s continues it; --out names another folder", out, to,
                       strerror(errno), out);
    fprintf(stderr, "trainc: %s held an earlier run: moved it to %s\n", out, to);
}

/* The final weights. Right after a checkpoint, model.safetensors is a second name of
 * the weights file of that checkpoint (of this step: the same bytes, 0.5 GB once, not
 * twice, for GPT-2); written where the file system has no hard links. */
static void save_final(Run *r, int after_ckpt, int64_t step)
{
    if (r->rank != 0)
        return;
    check_out(r->out);
    char src[RT_PATH_MAX + 96], dst[RT_PATH_MAX + 64];
    join_path(dst, sizeof dst, r->out, "model.safetensors");
    if (after_ckpt) {
        snprintf(src, sizeof src, "%s/checkpoints/step_%08lld/model.safetensors", r->out,
                 (long long)step);
        if (rt_safetensors_link(src, dst) == 0)
            return;
    }
    write_weights(r, "model.safetensors");   /* (rank 0 alone: the end's barrier waits) */
}

/* --resume: best.safetensors as it was at the checkpoint (the checkpoint's second
 * name of it); none when no validation had run by then. A checkpoint written before
 * it kept the best weights leaves the file as it is. */
static void restore_best(Run *r, const rt_loop_state *s)
{
    char ck[RT_PATH_MAX + 64], src[RT_PATH_MAX + 96], dst[RT_PATH_MAX + 64];
    if (rt_ckpt_resume_point(r->o.resume, ck, sizeof ck) != 0 || rt_ckpt_best_damaged())
        return;               /* (a damaged copy: OUT's best.safetensors stays as it is) */
    join_path(src, sizeof src, ck, "best.safetensors");
    join_path(dst, sizeof dst, r->out, "best.safetensors");
    if (access(src, F_OK) == 0) {
        if (rt_link_or_copy(src, dst) != 0)
            rt_fail("cannot write %s: %s%s", dst, strerror(errno), rt_full_hint(errno));
    } else if (s->best_step < 0 && unlink(dst) != 0 && errno != ENOENT)
        rt_fail("cannot remove %s: %s", dst, strerror(errno));
}

/* --resume A --out B: B's metrics.jsonl starts with A's records up to the checkpoint
 * (what a resume in A keeps), so B reads as the one run, loss.svg with its history.
 * A's records past that length are not B's; a file of A's shorter than it (records
 * removed by hand) is taken whole, to its last full line. */
static void copy_history(const char *from, const char *to, int64_t bytes)
{
    char src[RT_PATH_MAX + 32], dst[RT_PATH_MAX + 32], tmp[RT_PATH_MAX + 40];
    join_path(src, sizeof src, from, "metrics.jsonl");
    join_path(dst, sizeof dst, to, "metrics.jsonl");
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    int64_t size;
    int in = rt_open_regular(src, &size);
    if (in < 0)
        return;   /* none (or not a file): B starts its own */
    FILE *f = fdopen(in, "rb"), *o = fopen(tmp, "wb");
    if (!f || !o)
        rt_fail("cannot write %s: %s", tmp, strerror(errno));
    int64_t left = bytes < size ? bytes : size, whole = 0, done = 0;
    char buf[1 << 16];
    while (left > 0) {
        size_t n = fread(buf, 1, left < (int64_t)sizeof buf ? (size_t)left : sizeof buf, f);
        if (n == 0)
            break;
        if (fwrite(buf, 1, n, o) != n)
            break;
        for (size_t i = 0; i < n; i++)
            if (buf[i] == '\n')
                whole = done + (int64_t)i + 1;
        done += (int64_t)n;
        left -= (int64_t)n;
    }
    fclose(f);
    if (fflush(o) != 0 || ferror(o) || ftruncate(fileno(o), whole) != 0 || fsync(fileno(o)) != 0 ||
        fclose(o) != 0 || rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        rt_fail("cannot write %s: %s%s", dst, strerror(e), rt_full_hint(e));
    }
}

/* Ranks started with another training config than rank 0's (another --set): rank 0's
 * config lines (lines[n], "" where not compared) go to every rank, and each that differs
 * names its first keys that do, with both values ("another training config" alone sent
 * the user comparing command lines by eye). Every rank calls it. */
static void config_differs(const Run *r, char **lines, int n, int differs)
{
    int64_t len = 0;
    if (r->rank == 0)
        for (int i = 0; i < n; i++)
            len += (int64_t)strlen(lines[i]) + 1;
    rt_broadcast(&len, sizeof len, 0);
    char *text = rt_xmalloc((size_t)len + 1);
    if (r->rank == 0) {
        char *p = text;
        for (int i = 0; i < n; i++)
            p += sprintf(p, "%s\n", lines[i]);
    }
    rt_broadcast(text, len, 0);
    text[len] = 0;
    char said[1024] = "";
    int shown = 0;
    for (int i = 0; differs && i < n; i++) {
        const char *eq = strchr(lines[i], '=');
        if (!eq)
            continue;
        size_t kl = (size_t)(eq - lines[i]) + 1;   /* "KEY=" */
        const char *there = NULL;
        for (const char *l = text; *l; l = strchr(l, '\n') + 1)
            if (!strncmp(l, lines[i], kl)) {
                there = l + kl;
                break;
            }
        size_t tl = there ? strcspn(there, "\n") : 0;
        if (there && tl == strlen(eq + 1) && !strncmp(there, eq + 1, tl))
            continue;
        size_t u = strlen(said);
        if (shown < 3)        /* the first three, then how many more */
            snprintf(said + u, sizeof said - u, "%s%.*s: %s here, %.*s on rank 0", shown ? "; " : "",
                     (int)kl - 1, lines[i], eq + 1, there ? (int)tl : 8, there ? there : "(absent)");
        shown++;
    }
    if (differs)
        fprintf(stderr, "trainc: error: rank %d of %d: another training config than rank 0's: "
                "%s%s%.0d%s\n", r->rank, r->world,
                said[0] ? said : "(a key rank 0 has and this rank not)",
                shown > 3 ? "; and " : "", shown > 3 ? shown - 3 : 0, shown > 3 ? " more" : "");
    rt_xfree(text);
}

/* --resume on some ranks only: said before any rank reads a checkpoint, whose checks
 * (another rank count, other data) only rank 0 reports, as every rank that resumes finds
 * them alike: a rank resumed alone exited 1 without a word. Every rank calls it. */
static void agree_on_resume(const Run *r)
{
    int64_t v[1] = {r->o.resume != NULL};   /* rank 0's */
    rt_broadcast(v, sizeof v, 0);
    double n = r->o.resume != NULL;
    rt_allreduce_sum_f64(&n, 1);
    if (n == 0 || n == r->world)
        return;
    if (r->rank == 0)
        rt_input_error("%g of the %d ranks run from another starting point (--resume: another "
                       "checkpoint, or none) than rank 0; start every rank with the same "
                       "--resume DIR, or none", v[0] ? r->world - n : n, r->world);
    if ((r->o.resume != NULL) != v[0])
        fprintf(stderr, "trainc: error: rank %d of %d: %s%s here, %s on rank 0\n", r->rank,
                r->world, r->o.resume ? "--resume " : "no --resume",
                r->o.resume ? r->o.resume : "", v[0] ? "--resume" : "none");
    exit(RT_EXIT_INPUT);
}

/* Ranks that start elsewhere than rank 0 (one resumed and another not, or another
 * checkpoint: the same --resume DIR whose newest checkpoint is damaged, or missing, on
 * some ranks' disks only, each taking its newest intact one): each such rank says where
 * it starts and where rank 0 does (the warnings of damaged checkpoints are rank 0's
 * alone). Every rank calls it. */
static void start_differs(const Run *r, const rt_loop_state *s, int differs)
{
    int64_t root[2] = {r->o.resume != NULL, s->step};
    rt_broadcast(root, sizeof root, 0);
    if (!differs)
        return;
    char ck[RT_PATH_MAX + 64] = "";
    if (r->o.resume && rt_ckpt_resume_point(r->o.resume, ck, sizeof ck) != 0)
        ck[0] = 0;
    char here[RT_PATH_MAX + 128];
    if (r->o.resume)
        snprintf(here, sizeof here, "its checkpoint %s (step %lld)", ck, (long long)s->step);
    else
        snprintf(here, sizeof here, "step %lld (no --resume)", (long long)s->step);
    fprintf(stderr, "trainc: error: rank %d of %d: starts from %s, rank 0 from %s %lld%s\n",
            r->rank, r->world, here, root[0] ? "a checkpoint at step" : "step", (long long)root[1],
            !root[0] ? " (no --resume)"
            : r->o.resume ? " (is a newer checkpoint damaged or missing where one of them reads "
                            "it?)" : "");
}

/* Several ranks, before rank 0 writes anything: every rank has passed its checks of
 * the options, data and weights (one that found bad input has exited 1, and mpirun
 * ends the job while rank 0 waits here), and they run the same thing: the model, the
 * training config (but for paths and loader threads, which may differ from node to
 * node) and the starting weights. Ranks started with other --set, --init or --resume
 * options would otherwise train apart without a word, or hang in a collective. */
static void agree_on_run(Run *r, const rt_loop_state *s)
{
    enum { N = 7 };
    uint64_t mine[N], root[N];
    mine[0] = rt_xxh64(r->m->model_hash, strlen(r->m->model_hash), 0);
    int n;
    char **lines = rt_config_dump(&r->c, &n);
    mine[1] = 0;              /* each line's hash seeds the next's */
    static const char *const local[] = {"data.", "out_dir=", "loader.workers=",
                                        "loader.prefetch=", NULL};
    for (int i = 0; i < n; i++) {
        int skip = 0;
        for (int k = 0; local[k]; k++)
            skip |= !strncmp(lines[i], local[k], strlen(local[k]));
        if (!skip)
            mine[1] = rt_xxh64(lines[i], strlen(lines[i]) + 1, mine[1]);
        else
            lines[i][0] = 0;  /* (not compared: left out of config_differs too) */
    }
    mine[2] = rt_xxh64(r->params, sizeof(float) * (size_t)r->m->param_floats, 0);
    /* the mode (--eval, --lr-find and its options): every rank takes part in the same
     * collectives, or the ones that differ wait for the others until the watchdog */
    const double mode[] = {(double)r->o.eval, (double)r->o.lr_find, (double)r->o.lr_find_steps,
                           r->o.lr_find_lo, r->o.lr_find_hi};
    mine[3] = rt_xxh64(mode, sizeof mode, 0);
    /* each rank's share of the training data (its files may differ; their sizes may
     * not): as many batches an epoch, each a step's collectives (validation's shares
     * may differ by a batch: one sum at its end) */
    mine[4] = rt_xxh64(&r->batches_per_epoch, sizeof r->batches_per_epoch, 0);
    /* where the run starts: a rank resumed and another not (or from another checkpoint)
     * would train at other steps, schedules and data positions */
    const int64_t at[] = {r->o.resume != NULL, s->step, s->epoch, s->batch, s->updates};
    mine[5] = rt_xxh64(at, sizeof at, 0);
    /* validation or none: the ranks that validate wait in its sum for the others (its
     * files may differ, and their sizes: each rank validates its share) */
    const int val = r->has_val;
    mine[6] = rt_xxh64(&val, sizeof val, 0);
    memcpy(root, mine, sizeof root);
    rt_broadcast(root, sizeof root, 0);
    double differ[N];
    for (int k = 0; k < N; k++)
        differ[k] = root[k] != mine[k];
    rt_allreduce_sum_f64(differ, N);
    if (differ[1] > 0)        /* which keys: every rank takes part, those that differ say */
        config_differs(r, lines, n, mine[1] != root[1]);
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    static const char *const what[N] = {
        "another model", "another training config", "from other weights",
        "in another mode (--eval, --lr-find and its options)",
        "on training data of another size (batches an epoch)",
        "from another starting point (--resume: another checkpoint, or none)",
        "with other validation data (some where it has none, or none where it has some)"};
    if (differ[5] > 0)        /* which step each starts from: every rank takes part */
        start_differs(r, s, mine[5] != root[5]);
    for (int k = 0; k < N; k++) {
        /* (other starting points load other weights: the cause is said, not that) */
        if (differ[k] == 0 || (k == 2 && differ[5] > 0))
            continue;
        if (r->rank == 0)
            rt_input_error("%g of the %d ranks run %s than rank 0; start every rank with the "
                           "same trainer, options (--set, --init, --resume, --eval, --lr-find) "
                           "and data sizes, with validation data on all or none", differ[k],
                           r->world, what[k]);
        exit(RT_EXIT_INPUT);
    }
}

/* ---- validation ----------------------------------------------------------------- */

typedef struct Eval {
    double loss, acc;
    int64_t terms;
} Eval;

static Eval validate(Run *r)
{
    Eval ev = {0};
    double loss = 0;
    int64_t terms = 0, correct = 0, n = 0;
    rt_loader_start(r->vl, 0, 0);
    const rt_batch *b;
    while ((b = rt_loader_next(r->vl))) {
        if (r->c.val_batches > 0 && n == r->c.val_batches)
            break;
        /* on a GPU queued without a wait: the slots alternate (the next batch's copy
         * runs during this pass) and the device adds every pass's loss into one sum,
         * read once at the end: the host's sum, in the same order */
        bind_slot(r, b, n % 2 ? RT_CU_SLOT_EVAL1 : RT_CU_SLOT_EVAL, 0, 1, n == 0 ? 0 : -1);
        r->e.rng_key = 0;
        /* (evaluate sets train too; a CUDA graph's key reads these first: fixed here, not
         * the last training pass's, which validation does not use) */
        r->e.train = 0;
        r->e.grads_zero = 0;
        r->e.grad_scale = 1.0f;
        int graph = r->gpu ? rt_cu_graph_begin(&r->e) : RT_CU_GRAPH_NONE;
        if (graph != RT_CU_GRAPH_RAN)
            r->m->evaluate(&r->e);
        if (graph == RT_CU_GRAPH_CAPTURE && !rt_cu_graph_end(&r->e))
            r->m->evaluate(&r->e);   /* the capture failed and nothing ran */
        terms += r->e.terms;
        n++;
        if (r->gpu) {
            rt_cu_upload_done(&r->e);   /* b's host buffer is the loader's again */
            continue;
        }
        loss += r->e.loss_sum;
        correct += r->e.correct;
    }
    if (r->gpu && n > 0) {
        end_pass(r);
        loss = r->e.loss_sum;
        correct = r->e.correct;
    }
    if (r->world > 1) {           /* every rank sees the same numbers, so they stop together */
        double v[3] = {loss, (double)terms, (double)correct};
        rt_allreduce_sum_f64(v, 3);
        loss = v[0];
        terms = (int64_t)v[1];
        correct = (int64_t)v[2];
    }
    ev.loss = terms ? loss / (double)terms : NAN;
    ev.acc = terms ? (double)correct / (double)terms : NAN;
    ev.terms = terms;
    return ev;
}

/* NaN printed as "nan" (glibc writes "-nan" for one with its sign bit set) */
static double nan_plain(double v) { return isnan(v) ? fabs(v) : v; }

enum { END_EPOCHS, END_MAX_STEPS, END_MAX_TIME, END_EARLY, END_DIVERGED, END_INTERRUPTED };

/* A resumed run whose limits are reached trains nothing: the limit, and the option
 * that takes it further (raising max_steps alone does not pass an epochs the spec or
 * --set gave; a left-out epochs is no limit once max_steps is set). */
static void resumed_at_limit(const rt_train_config *c, const rt_loop_state *s, int end)
{
    if (end == END_EPOCHS)
        fprintf(stderr, "trainc: note: this run has done its epochs (%lld): nothing to train. To "
                "go further: --set epochs=N (more than %lld), or %s --set max_steps=N\n",
                (long long)rt_epochs(c), (long long)rt_epochs(c),
                c->epochs == RT_UNSET ? "(its epochs left out: no limit then)" : "--set epochs=null");
    else if (end == END_EARLY)
        fprintf(stderr, "trainc: note: early stopping ended this run at step %lld: nothing to "
                "train (its best weights are best.safetensors). To go further: --set "
                "early_stopping.patience=N (more than %lld), other thresholds, or --set "
                "early_stopping=null\n", (long long)s->step, (long long)c->es_patience);
    else if (end == END_MAX_STEPS)
        fprintf(stderr, "trainc: note: this run is at max_steps %lld: nothing to train. To go "
                "further: --set max_steps=N (more than %lld)\n", (long long)c->max_steps,
                (long long)c->max_steps);
    else
        fprintf(stderr, "trainc: note: this run has spent its max_time (%g s of %g): nothing to "
                "train. To go further: --set max_time=SECONDS (more), or null\n", s->elapsed,
                c->max_time);
}

static const char *const end_names[] = {"epochs", "max_steps", "max_time", "early_stopping",
                                        "diverged", "interrupted"};

/* loader.on_gpu: the training (and validation) arrays copied to the GPU once, when
 * asked (always) or when they fit in half the free memory left after the plan (auto);
 * the loaders then deliver sample indices and the rows are gathered on the device. */
static void data_to_gpu(Run *r)
{
    const rt_train_config *c = &r->c;
    if (c->on_gpu == RT_ON_GPU_NEVER)
        return;
    size_t need = rt_cu_data_bytes(r->m, r->train.rows) +
                  (r->has_val ? rt_cu_data_bytes(r->m, r->val.rows) : 0);
    size_t fr = 0, tot = 0;
    rt_cu_mem_info(&fr, &tot);
    char why[256] = "";
    if (r->train.tokens)
        snprintf(why, sizeof why, "token shards are read on the host in this release");
    else if (r->train.rows > INT32_MAX || (r->has_val && r->val.rows > INT32_MAX))
        snprintf(why, sizeof why, "more than 2^31 rows");
    else if (c->on_gpu == RT_ON_GPU_AUTO && need > fr / 2)
        snprintf(why, sizeof why, "the data take %zu MiB, more than half the GPU's %zu MiB free",
                 need >> 20, fr >> 20);
    if (*why) {
        if (c->on_gpu == RT_ON_GPU_ALWAYS)
            rt_input_error("$.train.loader.on_gpu: always, but %s; use auto or never", why);
        return;
    }
    rt_cu_data_put(&r->e, r->m, &r->train, 0);
    rt_loader_indices_only(r->tl);
    if (r->has_val) {
        rt_cu_data_put(&r->e, r->m, &r->val, 1);
        rt_loader_indices_only(r->vl);
    }
    r->data_on_gpu = 1;
}

/* ---- gradient check (developer option) ------------------------------------------- */

static double loss_at(Run *r, const rt_batch *b)
{
    bind_batch(r, b, 0);
    r->e.rng_key = 12345;
    r->e.grad_scale = 1.0f / (float)((double)b->rows * (double)r->m->loss_terms);
    r->m->forward(&r->e, 1);
    return r->e.loss_sum / (double)r->e.terms;
}

/* Central differences along a random unit direction of each parameter tensor,
 * against the analytic directional derivative <grad, v>. */
static int gradcheck(Run *r)
{
    const rt_model *m = r->m;
    rt_loader_start(r->tl, 0, 0);
    const rt_batch *b = rt_loader_next(r->tl);
    if (!b)
        rt_input_error("gradcheck: no batch");
    memset(r->grads, 0, (size_t)m->param_floats * sizeof(float));
    loss_at(r, b);
    m->backward(&r->e);
    rt_rng rng;
    rt_rng_seed(&rng, 99);
    int bad = 0;
    const double h0 = 1e-2;
    double h = h0;
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *p = &m->params[i];
        float *w = r->params + p->offset;
        const float *g = r->grads + p->offset;
        double *v = calloc((size_t)p->numel, sizeof *v);
        float *saved = malloc((size_t)p->numel * sizeof *saved);
        double nv = 0, an = 0;
        for (int64_t k = 0; k < p->numel; k++) {
            v[k] = rt_rng_normal(&rng);
            nv += v[k] * v[k];
        }
        nv = sqrt(nv);
        for (int64_t k = 0; k < p->numel; k++) {
            v[k] /= nv;
            an += v[k] * g[k];
            saved[k] = w[k];
        }
        /* A big step can cross a kink of relu or maxpool; a small one drowns in float32
         * rounding. A correct rule agrees at some step; a wrong one at none. */
        double best = INFINITY, fd = 0, best_h = h;
        for (int hi = 0; hi < 3 && best >= 2e-2; hi++, h /= 10) {
            for (int64_t k = 0; k < p->numel; k++)
                w[k] = (float)(saved[k] + h * v[k]);
            double lp = loss_at(r, b);
            for (int64_t k = 0; k < p->numel; k++)
                w[k] = (float)(saved[k] - h * v[k]);
            double lm = loss_at(r, b);
            memcpy(w, saved, (size_t)p->numel * sizeof *saved);
            double f = (lp - lm) / (2 * h);
            double err = fabs(f - an) / fmax(fmax(fabs(f), fabs(an)), 1e-2);
            if (err < best) {
                best = err;
                fd = f;
                best_h = h;
            }
        }
        h = h0;
        int ok = best < 2e-2;
        printf("gradcheck %-24s analytic % .6e  numeric % .6e  (h %.0e)  rel.err %.2e  %s\n", p->name,
               an, fd, best_h, best, ok ? "ok" : "FAIL");
        bad += !ok;
        free(v);
        free(saved);
    }
    printf("gradcheck: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

/* The cores this process may use (mpirun binds ranks), shared among the ranks on
 * this node when they are not bound apart. */
static int default_threads(void)
{
    int all = (int)sysconf(_SC_NPROCESSORS_ONLN), n = all;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n >= all && rt_dist_local_world() > 1)
        n /= rt_dist_local_world();
    return n < 1 ? 1 : n;
}

/* ---- the run ---------------------------------------------------------------------- */

static void metrics_start(Run *r, int threads, int64_t resumed_from)
{
    char buf[2048], res[64] = "", dev[512] = "\"device\":\"cpu\"";
    if (r->gpu) {
        size_t pool, arena, fixed, all = rt_cu_allocated(&r->e, &pool, &arena, &fixed);
        snprintf(dev, sizeof dev,
                 "\"device\":\"cuda\",\"gpu\":\"%s\",\"arch\":\"%s\",\"kernels\":\"%s\","
                 "\"device_bytes\":%zu,\"device_pool_bytes\":%zu,\"device_arena_bytes\":%zu,"
                 "\"device_fixed_bytes\":%zu,\"device_data_bytes\":%zu",
                 rt_cu_name(&r->e), rt_cu_arch(&r->e), rt_cu_kernels_from(&r->e), all, pool, arena, fixed,
                 rt_cu_data_allocated(&r->e));
    }
    const char *prec[] = {"fp32", "bf16-mixed", "fp16-mixed"};
    const char *strategies[] = {"ddp", "zero1", "zero2"};   /* RT_DIST_*; bytes: rank 0's */
    int64_t np = 0;
    for (int i = 0; i < r->m->n_params; i++)
        np += r->m->params[i].numel;
    if (resumed_from >= 0)
        snprintf(res, sizeof res, ",\"resumed_from\":%lld", (long long)resumed_from);
    snprintf(buf, sizeof buf,
             "{\"event\":\"start\",\"model\":\"%s\",\"params\":%lld,%s,\"precision\":\"%s\","
             "\"arena_bytes\":%lld,\"param_bytes\":%lld,\"optimizer_bytes\":%lld,\"ranks\":%d,"
             "\"grad_bytes\":%lld,\"strategy\":\"%s\",\"threads\":%d,\"batch_size\":%lld,"
             "\"spec_hash\":\"%s\"%s}",
             r->m->name, (long long)np, dev, prec[r->gpu ? r->m->act16 : RT_PREC_FP32],
             (long long)(r->e.Bmax * arena_row(r->m) * r->e.arena_scale),
             (long long)(r->m->param_floats * 4),
             (long long)(rt_optim_state_parts(&r->c) * (rt_zero_part().hi - rt_zero_part().lo) * 4),
             r->world, (long long)rt_zero_grad_bytes(), strategies[r->c.dist], threads,
             (long long)r->c.batch_size, r->m->spec_hash, res);
    rt_metrics_line(r->mt, buf);
}

static int64_t file_size(const char *dir, const char *name)
{
    char p[RT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* A resumed checkpoint's place in its epoch must be where its step puts it:
 * steps_per_epoch steps an epoch of `accumulate` batches each, the epoch's last step
 * taking the rest; at an epoch's end either (epoch + 1, batch 0) or (epoch, all its
 * batches). A damaged or hand-edited state.json would otherwise start the loader
 * elsewhere, and the run would silently differ from the one it continues. */
static void check_position(const Run *r, const rt_loop_state *s, const char *ck, int other_data)
{
    int64_t e = s->step / r->steps_per_epoch, k = s->step % r->steps_per_epoch;
    int ok = k ? s->epoch == e && s->batch == k * r->c.accumulate
               : (s->epoch == e && s->batch == 0) ||
                     (s->step > 0 && s->epoch == e - 1 && s->batch == r->batches_per_epoch);
    if (!ok)
        rt_input_error("%s/state.json: epoch %lld, batch %lld is not where step %lld puts a run "
                       "of %lld batches an epoch, %lld a step (%s)", ck,
                       (long long)s->epoch, (long long)s->batch, (long long)s->step,
                       (long long)r->batches_per_epoch, (long long)r->c.accumulate,
                       other_data ? "the data has another size: this run cannot go on over it"
                                  : "a damaged checkpoint?");
}

/* The data's fingerprint (rt_dataset_fingerprint: the training data's, then the
 * validation data's or none); with several ranks, every rank's (each reads its own
 * files) in rank order, in one value. Every rank calls it. */
static uint64_t data_fingerprint(const Run *r)
{
    uint64_t fp = rt_dataset_fingerprint(&r->train);
    uint64_t val = r->has_val ? rt_dataset_fingerprint(&r->val) : 0;
    fp = rt_xxh64(&val, sizeof val, fp);
    fp += !fp;
    if (r->world == 1)
        return fp;
    double *v = calloc((size_t)r->world * 3, sizeof *v);   /* each exact in a double */
    if (!v)
        rt_fail("out of memory");
    v[3 * r->rank] = (double)r->train.rows;
    v[3 * r->rank + 1] = (double)(fp >> 32);
    v[3 * r->rank + 2] = (double)(fp & 0xffffffffu);
    rt_allreduce_sum_f64(v, 3 * (int64_t)r->world);
    uint64_t h = 0;
    for (int i = 0; i < 3 * r->world; i++) {
        uint64_t x = (uint64_t)v[i];
        h = rt_xxh64(&x, sizeof x, h);
    }
    free(v);
    return h ? h : 1;
}

/* The data a resume goes on with is the checkpoint's: the order of samples, the epochs
 * and the position in them follow from the training data (and early stopping and the
 * best weights from the validation data), so other data would not continue the run but
 * start another (from its weights: --init). Its files may have moved (the paths may
 * differ); checkpoints from before the data was recorded (data_fp 0) are not checked.
 * With several ranks every rank's data counts, and every rank finds it so. */
static void check_same_data(const Run *r, const rt_loop_state *s, const char *ck, uint64_t fp)
{
    if (!s->data_fp || (s->data_fp == fp && (r->world > 1 || s->data_rows == r->train.rows)))
        return;
    char what[160];
    if (r->world > 1)
        snprintf(what, sizeof what, "on one rank or more");
    else if (s->data_rows != r->train.rows)
        snprintf(what, sizeof what, "%lld training samples then, %lld now", (long long)s->data_rows,
                 (long long)r->train.rows);
    else
        snprintf(what, sizeof what, "the same %lld training samples, other contents",
                 (long long)s->data_rows);
    const char *other = getenv("TRAINC_RESUME_OTHER_DATA");
    if (other && !strcmp(other, "1")) {   /* asked for: the run goes on, not exactly */
        if (r->rank == 0)
            fprintf(stderr, "trainc: warning: the data (training or validation) is not the data "
                    "of %s (%s): going on from its weights, optimizer state and step as "
                    "TRAINC_RESUME_OTHER_DATA=1 asks; the batches from here are not those the "
                    "run would have had\n", ck, what);
        return;
    }
    if (r->rank == 0)
        rt_input_error("--resume: the data (training or validation) is not the data of %s (%s): a "
                       "resume "
                       "continues that run exactly, and its order of batches follows its "
                       "data\n  hint: to go on training these weights on this data, start a "
                       "new run with --init %s/model.safetensors (the weights alone), or resume "
                       "with TRAINC_RESUME_OTHER_DATA=1 in the environment (the optimizer state "
                       "and the step too, knowingly not exact)", ck, what, ck);
    exit(RT_EXIT_INPUT);
}

/* metrics.jsonl is cut back to the checkpoint's length at resume: that length must end
 * a record (a newline before it), else the cut would leave half a line. A file shorter
 * than it (records removed by hand since) is appended to as it is, and said so. */
static void check_metrics_cut(const char *out, int64_t bytes, const char *ck)
{
    char p[RT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    rt_metrics_file_check(p);   /* before the resume changes anything */
    FILE *f = fopen(p, "rb");
    if (!f)
        return;   /* none: a new one */
    struct stat st;
    int ok = fstat(fileno(f), &st) == 0;
    if (ok && st.st_size < bytes) {
        fprintf(stderr, "trainc: warning: %s has %lld bytes, fewer than the %lld it had at the "
                "checkpoint (records removed since?): appending to it from its last whole record\n", p,
                (long long)st.st_size, (long long)bytes);
    } else if (ok && bytes > 0) {
        ok = fseeko(f, (off_t)(bytes - 1), SEEK_SET) == 0 && fgetc(f) == '\n';
        if (!ok) {
            fclose(f);
            rt_input_error("%s/state.json: metrics_bytes %lld does not end a record of %s (a "
                           "damaged checkpoint?)", ck, (long long)bytes, p);
        }
    }
    fclose(f);
}

static void write_val_record(Run *r, const rt_loop_state *s)
{
    char buf[512], a[32], b[32];
    if (r->m->loss == RT_LOSS_CROSS_ENTROPY)
        snprintf(buf, sizeof buf, "{\"step\":%lld,\"epoch\":%lld,\"val_loss\":%s,\"val_acc\":%s}",
                 (long long)s->step, (long long)s->epoch, rt_json_num(a, s->last_val_loss),
                 rt_json_num(b, s->last_val_acc));
    else
        snprintf(buf, sizeof buf, "{\"step\":%lld,\"epoch\":%lld,\"val_loss\":%s}", (long long)s->step,
                 (long long)s->epoch, rt_json_num(a, s->last_val_loss));
    rt_metrics_line(r->mt, buf);
    rt_metrics_val_point(r->mt, s->step, s->last_val_loss);
}

/* Runs validation and records it; updates best.safetensors for a validation monitor. */
static void validation(Run *r, rt_loop_state *s, int best_mode)
{
    Eval ev = validate(r);
    s->last_val_step = s->step;
    s->last_val_loss = ev.loss;
    s->last_val_acc = ev.acc;
    write_val_record(r, s);
    rt_metrics_plot(r->mt);
    if (ev.loss < s->best_val)
        s->best_val = ev.loss;
    int mon = r->c.has_early_stopping ? r->c.es_monitor : RT_MON_VAL_LOSS;
    if (mon != RT_MON_LOSS) {
        double v = mon == RT_MON_VAL_LOSS ? ev.loss : ev.acc;
        if (isfinite(v) && rt_better(best_mode, v, s->best_mon)) {
            s->best_mon = v;
            s->best_step = s->step;
            save_weights(r, "best.safetensors");
        }
    }
}

/* Every rank calls it, and waits for rank 0's files in rt_barrier_solo. */
static void checkpoint(Run *r, rt_loop_state *s)
{
    if (r->rank != 0 && !rt_zero_on()) {
        rt_barrier_solo();    /* DDP: every rank holds the same state; ZeRO: its shard */
        return;
    }
    if (r->rank == 0)
        check_out(r->out);
    rt_metrics_sync(r->mt);
    s->metrics_bytes = file_size(r->out, "metrics.jsonl");
    pull_params(r, 1);
    int n;
    char **lines = rt_config_dump(&r->c, &n);
    s->elapsed = rt_now() - r->t0;
    int n_spec;
    char **spec = spec_lines(r->m, &n_spec);
    if (rt_ckpt_save(r->out, r->m, &r->c, s, r->params, r->state, rt_zero_part(), lines, n,
                     spec, n_spec) != 0) {
        int err = errno;
        if (r->rank == 0)
            check_out(r->out);    /* a folder moved away says so, not "no such file" */
        rt_fail("cannot write a checkpoint in %s/checkpoints: %s%s", r->out, strerror(err),
                rt_full_hint(err));
    }
    free_lines(lines, n);
    free_lines(spec, n_spec);
    g_have_ckpt = 1;
    rt_barrier_solo();
}

/* --sample's vocabulary: the ids it may draw (the logits' width, or fewer when the
 * input's embedding has fewer rows: the logits past them are not drawn); exits 1 for
 * a model that is not a token model or a prompt byte that is no id. Checked before
 * training too, so a run is never trained and written, then refused. */
static int64_t sample_vocab(const rt_model *m, const char *prompt)
{
    const rt_input *in = &m->inputs[0];
    int64_t T = in->rank == 1 ? in->shape[0] : 0;
    if (!token_model(m))
        rt_input_error("--sample needs a token model (an i32 [T] input and cross-entropy logits [T, vocab])");
    int64_t V = m->pred_numel / T;
    if (in->vocab > 0 && in->vocab < V)
        V = in->vocab;
    for (const char *p = prompt; p && *p; p++)
        if ((unsigned char)*p >= V)
            rt_input_error("--prompt: byte 0x%02x is past the model's %lld ids (the prompt's "
                           "bytes are its ids)", (unsigned char)*p, (long long)V);
    return V;
}

/* Generation from a token model: the context window (at most T ids) goes through the
 * forward pass with B = 1, the logits at its last position are sampled with the
 * temperature, and the id is appended (the window slides once full). Ids are bytes
 * for `trainc data text` shards, so a vocabulary of at most 256 ids is printed as
 * bytes; a larger one as numbers a space apart. */
static void sample(Run *r)
{
    const rt_model *m = r->m;
    const rt_input *in = &m->inputs[0];
    int64_t T = in->shape[0];
    int64_t V = sample_vocab(m, r->o.prompt);
    int64_t ld = m->pred_ld > 0 ? m->pred_ld : m->pred_numel / T;   /* rows ld apart */
    int32_t *ctx = rt_xmalloc((size_t)T * sizeof *ctx), *tgt = rt_xmalloc((size_t)T * sizeof *tgt);
    int64_t n = 0;
    /* no prompt: the one id below, not the newline's 10, which a vocabulary of 10 or
     * fewer does not have (an embedding index past it: an error on the CPU, NaN logits
     * and zero bytes on the GPU) */
    const char *p = r->o.prompt ? r->o.prompt : "";
    for (; *p; p++) {
        if (n == T) {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof *ctx);
            n--;
        }
        ctx[n++] = (unsigned char)*p;
    }
    if (n == 0)
        ctx[n++] = 10 % (int32_t)V;   /* a newline, where the vocabulary has it */
    rt_rng rng;
    rt_rng_seed(&rng, r->o.sample_seed >= 0 ? (uint64_t)r->o.sample_seed : r->c.seed);
    double *prob = rt_xmalloc((size_t)V * sizeof *prob);
    float *row = rt_xmalloc((size_t)V * sizeof *row);
    r->e.rng_key = 0;
    /* (stdout closed, as by `| head`: SIGPIPE is ignored, so the write error ends it) */
    for (int64_t k = 0; k < r->o.sample && !g_signal && !ferror(stdout); k++) {
        for (int64_t t = n; t < T; t++)
            ctx[t] = 0;             /* causal attention: later positions do not matter */
        rt_batch one = {.rows = 1, .in = {ctx, tgt}};
        bind_batch(r, &one, -1);
        m->forward(&r->e, 0);
        end_pass(r);
        const float *logits;
        if (r->gpu && m->act16) {   /* the last position's logits, from the device */
            const uint16_t *at = (const uint16_t *)(r->e.arena + r->e.Bmax * m->pred_offset) + (n - 1) * ld;
            uint16_t *h = (uint16_t *)prob;   /* free until the loop below */
            rt_cu_download(h, dptr(at), (size_t)V * sizeof *h);
            for (int64_t v = 0; v < V; v++)
                row[v] = m->act16 == RT_PREC_BF16 ? rt_bf16_to_float(h[v]) : rt_f16_to_float(h[v]);
            logits = row;
        } else if (r->gpu) {
            logits = (const float *)(r->e.arena + r->e.Bmax * m->pred_offset) + (n - 1) * ld;
            rt_cu_download(row, dptr(logits), (size_t)V * sizeof *row);
            logits = row;
        } else {
            logits = (const float *)(r->e.arena + r->e.Bmax * m->pred_offset * r->e.arena_scale) +
                     (n - 1) * ld;
        }
        double mx = -INFINITY, sum = 0;
        int64_t top = 0;
        for (int64_t v = 0; v < V; v++) {
            mx = fmax(mx, (double)logits[v] / r->o.temperature);
            if (logits[v] > logits[top])
                top = v;   /* the argmax (T > 0), for when logit / T overflows */
        }
        for (int64_t v = 0; v < V; v++)
            sum += prob[v] = exp((double)logits[v] / r->o.temperature - mx);
        double u = rt_rng_uniform(&rng) * sum, acc = 0;
        int64_t pick = V - 1;
        for (int64_t v = 0; v < V; v++) {
            acc += prob[v];
            if (u < acc) {
                pick = v;
                break;
            }
        }
        if (isinf(mx))   /* a temperature so small that logit / T overflows: greedy */
            pick = top;
        if (V <= 256)
            putchar((int)pick);
        else
            printf("%s%lld", k ? " " : "", (long long)pick);
        if (n == T) {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof *ctx);
            n--;
        }
        ctx[n++] = (int32_t)pick;
    }
    putchar('\n');
    fflush(stdout);
    rt_xfree(prob);
    rt_xfree(row);
    rt_xfree(ctx);
    rt_xfree(tgt);
}

/* Several GPUs: every rank's GPU finishes its collectives (zero1's last gather: only
 * rank 0 reads the weights back) before the communicator goes and MPI ends. */
static void close_gpu_comm(Run *r)
{
    if (r->gpu && r->world > 1) {
        rt_cu_sync(&r->e);
        rt_nccl_close();
    }
}

/* --eval: the weights as loaded (--init, --resume's checkpoint, or initialized) are
 * validated once on data.val (validate.batches counts) and, with --sample, sampled;
 * nothing is trained and nothing written: the result is one JSON line on stdout. */
static int eval_only(Run *r, int64_t state_floats)
{
    const rt_model *m = r->m;
    if (!r->has_val && r->o.sample <= 0)
        rt_input_error("--eval needs validation data (data.val), or --sample to generate from "
                       "the weights");
    if (r->gpu)
        rt_cu_put_params(&r->e, m, r->params, r->state, state_floats);
    if (r->has_val) {
        double t0 = rt_now();
        Eval ev = validate(r);
        if (r->rank == 0) {
            char a[40], b[40];
            printf("{\"event\":\"eval\",\"val_loss\":%s", rt_json_num(a, ev.loss));
            if (m->loss == RT_LOSS_CROSS_ENTROPY)
                printf(",\"val_acc\":%s", rt_json_num(b, ev.acc));
            printf(",\"terms\":%lld,\"time_s\":%.3f}\n", (long long)ev.terms, rt_now() - t0);
            fflush(stdout);
            fprintf(stderr, "trainc: eval: val_loss %.4f", nan_plain(ev.loss));
            if (m->loss == RT_LOSS_CROSS_ENTROPY)
                fprintf(stderr, ", val_acc %.2f%%", 100.0 * ev.acc);
            fprintf(stderr, " over %lld %s\n", (long long)ev.terms,
                    m->loss == RT_LOSS_CROSS_ENTROPY ? "targets" : "values");
        }
    }
    close_gpu_comm(r);
    if (r->rank == 0 && r->o.sample > 0)
        sample(r);
    rt_dist_finalize();
    return RT_EXIT_OK;
}

/* --lr-find's end: the curve written, the suggestion printed; exits as a run would
 * (130 when interrupted; nothing else to save) */
static int lr_find_end(Run *r, rt_lrfind *lf, int interrupted)
{
    double lr = rt_lrfind_suggest(lf);
    int code = interrupted ? RT_EXIT_INTERRUPTED : RT_EXIT_OK;
    close_gpu_comm(r);
    if (r->rank == 0) {
        if (rt_lrfind_write(lf, r->out, lr, interrupted) != 0)
            rt_fail("%s/lr_find.jsonl: cannot write: %s%s", r->out, strerror(errno),
                    rt_full_hint(errno));
        fprintf(stderr, "trainc: lr-find: %lld steps, rates %.3g to %.3g%s\n", (long long)lf->n,
                lf->lo, lf->n ? lf->lr[lf->n - 1] : lf->lo,
                interrupted ? " (interrupted)" : lf->diverged ? ", stopped where the loss blew up" : "");
        if (isfinite(lr))
            fprintf(stderr, "  suggested learning rate %.3g (where the smoothed loss falls fastest): "
                            "--set optimizer.lr=%.3g\n", lr, lr);
        else
            fprintf(stderr, "  no suggestion (%lld steps): %s\n", (long long)lf->n,
                    rt_lrfind_no_suggestion(lf));
        fprintf(stderr, "  the curve: %s/lr_find.jsonl, %s/lr_find.svg\n", r->out, r->out);
    }
    rt_lrfind_free(lf);
    rt_dist_finalize();
    return code;
}

int rt_main(const rt_model *m, int argc, char **argv)
{
    if (m->abi != RT_ABI_VERSION)
        rt_fail("this trainer was generated for runtime ABI %d, the runtime is %d; rebuild it", m->abi,
                RT_ABI_VERSION);
    rt_spec_file = m->spec_file;
    rt_dist_init(&argc, &argv);
    /* one run a process, in static storage (about 100 KB: the data paths): a start
     * refused with exit 1 then leaves nothing allocated behind (fuzz/fuzz_opts.c calls
     * rt_main again after each) */
    static Run run;
    memset(&run, 0, sizeof run);
    Run *r = &run;
    r->m = m;
    r->t0 = rt_now();
    r->rank = rt_dist_rank();
    r->world = rt_dist_world();
    /* dropout: rank r draws the masks of rows r, r + N, ... of the batch one rank of N x B
     * rows would have (rt_drop_index), not every rank the same ones */
    r->e.rng_part = r->world > 1 ? (uint64_t)r->world << 32 | (uint64_t)r->rank : 0;
    parse_opts(m, argc, argv, &r->o);
    if (r->o.sample)
        sample_vocab(m, r->o.prompt);
    /* from here a signal stops training after its first step, with a checkpoint and
     * exit 130 (--eval has nothing to keep: a signal ends it at once, exit 130) */
    if (!r->o.eval) {
        rt_catch_signals();
    } else {
        signal(SIGINT, on_signal_eval);
        signal(SIGTERM, on_signal_eval);
        signal(SIGHUP, on_signal_eval);
    }
    if (r->o.resume && !r->o.eval && !r->o.gradcheck && r->rank == 0 &&
        (!r->o.out || same_folder(r->o.out, r->o.resume)))
        hold_resumed(r->o.resume);
    configure(m, &r->o, &r->c);
    refuse_unsupported(m, &r->o, &r->c);
    rt_train_config *c = &r->c;
    r->gpu = pick_gpu(r);
    if (r->gpu && r->o.gradcheck)
        rt_input_error("--gradcheck runs on the CPU: add --device cpu");
    /* mixed precision is compiled into the trainer (the plan, the kernels): the GPU runs
     * it; the CPU computes in fp32 */
    static const char *const precs[] = {"fp32", "bf16-mixed", "fp16-mixed"};   /* RT_PREC_* */
    if (r->gpu && m->act16 && c->precision != m->act16)
        rt_input_error("precision: this trainer was built for %s, which its GPU kernels and "
                       "memory plan follow; build it again with --set precision=%s (or run it "
                       "with --device cpu, which computes in fp32)", precs[m->act16],
                       precs[c->precision]);
    r->e.arena_scale = m->act16 && !r->gpu ? 2 : 1;
    if (c->precision != RT_PREC_FP32 && r->rank == 0 && !(r->gpu && m->act16))
        fprintf(stderr, "trainc: note: %s stores and computes in fp32 (the spec asks for %s)%s\n",
                !r->gpu ? "the CPU" : "this trainer (built for fp32)", precs[c->precision],
                c->precision == RT_PREC_FP16 ? "; fp16's dynamic loss scaling is on" : "");
    if (r->e.arena_scale == 2 && c->recompute == RT_RECOMPUTE_AUTO && !isnan(c->memory_budget_mb) &&
        r->rank == 0) {
        /* auto chose the plan whose GPU total (16-bit activations) fits the budget */
        double all = (double)c->batch_size * (double)m->arena_row_bytes * 2 +
                     (double)m->param_floats * 4 * (2 + rt_optim_state_parts(c));
        fprintf(stderr, "trainc: note: recompute auto fit memory_budget_mb (%g MiB) with the GPU's "
                "16-bit activations; in fp32 here the arena is twice as large: %.1f MiB in all\n",
                c->memory_budget_mb, all / 1048576.0);
    }

    /* data and weights: all bad input is found before the output folder exists */
    rt_dataset_open(&r->train, m, c->train, c->n_train, m->data_dir, "train");
    r->has_val = c->n_val > 0;
    if (r->has_val)
        rt_dataset_open(&r->val, m, c->val, c->n_val, m->data_dir, "val");
    int threads = r->o.threads ? r->o.threads : default_threads();
    if (threads < 1)
        threads = 1;
    r->tl = rt_loader_new(m, &r->train, c->batch_size, c->shuffle, c->drop_last, c->seed,
                          (int)c->workers, (int)c->prefetch);
    if (r->world > 1)
        rt_loader_set_shard(r->tl, r->rank, r->world);   /* DistributedSampler */
    r->batches_per_epoch = rt_loader_batches(r->tl);
    if (r->batches_per_epoch == 0 && r->world > 1)
        rt_input_error("$.train.batch_size: each of the %d ranks reads %lld of the training "
                       "data's %lld rows, fewer than batch_size %lld (per rank; with drop_last)",
                       r->world, (long long)(r->train.rows / r->world), (long long)r->train.rows,
                       (long long)c->batch_size);
    if (r->batches_per_epoch == 0)
        rt_input_error("$.train.batch_size: the training data has %lld rows, fewer than batch_size %lld (with drop_last)",
                       (long long)r->train.rows, (long long)c->batch_size);
    if (r->has_val)
    {
        r->vl = rt_loader_new(m, &r->val, c->batch_size, 0, 0, c->seed, (int)c->workers,
                              (int)c->prefetch);
        if (r->world > 1)     /* each sample once: the numbers of one rank */
            rt_loader_set_split(r->vl, r->rank, r->world);
    }
    r->steps_per_epoch = (r->batches_per_epoch + c->accumulate - 1) / c->accumulate;
    r->total_steps = -1;
    if (rt_epochs(c) > 0)
        r->total_steps = rt_epochs(c) * r->steps_per_epoch;
    if (c->max_steps > 0 && (r->total_steps < 0 || c->max_steps < r->total_steps))
        r->total_steps = c->max_steps;
    /* --lr-find: its own rates and length; no validation, checkpoint, early stopping or
     * weights written, and metrics go to lr_find.jsonl only */
    static rt_lrfind lf_store;
    rt_lrfind *lf = NULL;
    if (r->o.lr_find) {
        lf = &lf_store;
        rt_lrfind_init(lf, r->o.lr_find_lo > 0 ? r->o.lr_find_lo : 1e-8,
                       r->o.lr_find_lo > 0 ? r->o.lr_find_hi : 1.0,
                       r->o.lr_find_steps ? r->o.lr_find_steps : 100);
        r->total_steps = lf->steps;
    }
    if ((c->sched == RT_SCHED_COSINE || c->sched == RT_SCHED_LINEAR) && r->total_steps < 0)
        rt_input_error("$.train.schedule: a %s schedule needs epochs or max_steps to know its length",
                       c->sched == RT_SCHED_COSINE ? "cosine" : "linear");

    rt_zero_init(c, m);        /* zero1/zero2: which shard of the state this rank keeps */
    r->params = rt_xmalloc((size_t)m->param_floats * sizeof(float));
    /* a step has at most this many passes (accumulate, within an epoch) */
    r->step_passes = (int)(c->accumulate < r->batches_per_epoch ? c->accumulate
                                                                : r->batches_per_epoch);
    r->pass_terms = rt_xmalloc((size_t)r->step_passes * sizeof *r->pass_terms);
    r->pend_terms = rt_xmalloc((size_t)RT_CU_RING * (size_t)r->step_passes * sizeof *r->pend_terms);
    r->grads = r->gpu ? NULL : rt_zero_alloc_grads(m);
    int64_t sf = rt_optim_state_parts(c) * (rt_zero_part().hi - rt_zero_part().lo);
    r->state = sf ? rt_xmalloc((size_t)sf * sizeof(float)) : NULL;
    r->state_floats = sf;
    r->e.rt = rt_pool_new(threads);
    rt_blas_threads(threads);
    if (r->o.init) {
        rt_safetensors_read(r->o.init, m, r->params);
        /* weights that are not finite are no start (the first loss would be NaN and the
         * run "diverge" at step 0): bad input, before the output folder is touched */
        for (int i = 0; i < m->n_params; i++) {
            const rt_param *p = &m->params[i];
            for (int64_t j = 0; j < p->numel; j++)
                if (!isfinite(r->params[p->offset + j]))
                    rt_input_error("%s: tensor '%s' holds %g at index %lld: weights to start "
                                   "from must be finite", r->o.init, p->name,
                                   (double)r->params[p->offset + j], (long long)j);
        }
    } else if (!r->o.resume)   /* a resume reads every parameter from its checkpoint */
        rt_init_params(r->e.rt, m, r->params, c->seed);

    r->e.Bmax = c->batch_size;
    int64_t row = arena_row(m);
    if (r->gpu) {
        /* everything on the device, allocated now: nothing is allocated in the loop */
        /* zero2: this rank keeps its shard of the gradients only */
        int zero2 = rt_zero_on() && c->dist == RT_DIST_ZERO2;
        rt_cu_init(&r->e, m, m->cuda, r->e.Bmax, row, sf, r->step_passes, rt_dist_local_rank(),
                   zero2 ? rt_zero_part().lo : 0, zero2 ? rt_zero_part().hi : m->param_floats);
        rt_cu_optim_setup(&r->e, c, m, rt_zero_part().lo, rt_zero_part().hi);
        if (r->world > 1) {    /* DDP across GPUs: NCCL, bootstrapped by MPI */
            rt_nccl_open(&r->e);
            rt_ddp_init(m, r->e.grads, (int64_t)(c->bucket_mb * 1048576.0));
            rt_ddp_use_gpu(&r->e, zero2);
        }
        rt_loader_each_buffer(r->tl, rt_cu_pin, NULL);
        if (r->vl)
            rt_loader_each_buffer(r->vl, rt_cu_pin, NULL);
        data_to_gpu(r);
    } else {
        r->e.arena = rt_xmalloc((size_t)(r->e.Bmax * row * r->e.arena_scale));
        r->e.params = r->params;
        r->e.grads = r->grads;
        rt_ddp_init(m, r->grads, (int64_t)(c->bucket_mb * 1048576.0));
    }

    if (r->o.gradcheck)
        return gradcheck(r);

    /* the output folder; --resume continues in the run's own folder */
    if (r->o.out)
        snprintf(r->out, sizeof r->out, "%s", r->o.out);
    else if (r->o.resume)
        snprintf(r->out, sizeof r->out, "%s", r->o.resume);
    else if (c->out_dir[0])
        snprintf(r->out, sizeof r->out, "%s", c->out_dir);
    else
        snprintf(r->out, sizeof r->out, "runs/%s", m->name);

    rt_loop_state st = {0}, *s = &st;
    int best_mode = c->has_early_stopping ? c->es_mode : RT_MODE_MIN;
    s->es_best = c->es_mode == RT_MODE_MIN ? INFINITY : -INFINITY;
    int scaler = c->precision == RT_PREC_FP16;
    s->loss_scale = scaler ? c->ls_init : 1.0;
    /* On one GPU without loss scaling, a step's update is queued before the host reads
     * its loss: the kernel works out the clip factor from the norm on the device (the
     * same arithmetic as below), so the host waits once a step, for the loss and the
     * norm, while the GPU runs the update. Loss scaling (the step may be skipped) and
     * several ranks (the loss and ZeRO's norm go through MPI) wait before it.
     * TRAINC_QUEUED_UPDATE=0: the old order everywhere (to measure what this is worth;
     * the numbers are the same). */
    const char *qu = getenv("TRAINC_QUEUED_UPDATE");
    int queued_update = r->gpu && !scaler && r->world == 1 && !(qu && strcmp(qu, "0") == 0);
    /* and the host does not wait for a step's loss until a step needs it (step_needs_wait;
     * not for --lr-find, whose every step decides; TRAINC_STEP_WAIT=1: a wait every step) */
    const char *sw = getenv("TRAINC_STEP_WAIT");
    int lazy = queued_update && !lf && !(sw && strcmp(sw, "1") == 0);
    s->best_val = INFINITY;
    s->best_mon = best_mode == RT_MODE_MIN ? INFINITY : -INFINITY;
    s->best_step = -1;
    s->last_val_step = -1;
    s->last_val_loss = s->last_val_acc = s->last_loss = NAN;
    int64_t resumed_from = -1;
    const uint64_t data_fp = data_fingerprint(r);
    if (r->world > 1)
        agree_on_resume(r);
    if (r->o.resume) {
        char ck[RT_PATH_MAX + 64];
        if (rt_ckpt_resume_point(r->o.resume, ck, sizeof ck) != 0)
            rt_input_error("--resume %s: no complete checkpoint in %s/checkpoints\n  hint: a "
                           "run stopped before its first checkpoint starts again without "
                           "--resume", r->o.resume, r->o.resume);
        int n;
        char **lines = rt_config_dump(c, &n);
        rt_ckpt_load(ck, m, c, s, r->params, r->state, rt_zero_part(), lines, n);
        for (int i = 0; i < n; i++)
            free(lines[i]);
        free(lines);
        resumed_from = s->step;
        g_have_ckpt = same_folder(r->out, r->o.resume);   /* the one resumed from */
        if (!r->o.eval)
            check_same_data(r, s, ck, data_fp);
        check_position(r, s, ck, !r->o.eval && s->data_fp && s->data_fp != data_fp);
        if (!r->o.eval && r->rank == 0 && same_folder(r->out, r->o.resume))
            check_metrics_cut(r->out, s->metrics_bytes, ck);
        if (r->rank == 0)     /* (every rank reads it: one says so) */
            fprintf(stderr, "trainc: %s %s from step %lld (epoch %lld)\n",
                    r->o.eval ? "evaluating" : "resuming", ck, (long long)s->step,
                    (long long)s->epoch);
    }
    s->data_rows = r->train.rows;   /* what this run's checkpoints record */
    s->data_fp = data_fp;
    if (r->world > 1)
        agree_on_run(r, s);
    if (r->o.eval)
        return eval_only(r, sf);
    if (r->rank == 0) {
        if (!lf && !(r->o.resume && same_folder(r->out, r->o.resume)))
            keep_earlier_run(r->out);
        if (rt_mkdir_p(r->out) != 0)
            rt_input_error("cannot create the output folder %s: %s\n  hint: --out names a "
                           "folder trainc can create and write", r->out, strerror(errno));
        hold_out(r->out);
        /* a run on a read-only disk (a snapshot, a mount made read-only by errors) went
         * as far as cutting metrics.jsonl and exited 2 naming the cut alone: where the
         * rest of the run can go is the user's to say, before anything changes */
        if (r->o.resume && same_folder(r->out, r->o.resume) && access(r->out, W_OK) != 0 &&
            errno == EROFS)
            rt_input_error("--resume %s: the folder is on a read-only file system, and a resume "
                           "goes on in the run's folder\n  hint: --resume %s --out DIR writes "
                           "the rest of the run into DIR (its metrics.jsonl starts with this "
                           "run's records)", r->o.resume, r->o.resume);
        /* records after the checkpoint (a crash) are dropped: the file reads as one run;
         * only under the folder's lock (a refused second trainer must not cut the
         * records of the run that holds it) */
        char mp[RT_PATH_MAX + 32];
        snprintf(mp, sizeof mp, "%s/metrics.jsonl", r->out);
        if (r->o.resume && same_folder(r->out, r->o.resume) &&
            file_size(r->out, "metrics.jsonl") > s->metrics_bytes &&
            truncate(mp, s->metrics_bytes) != 0)
            rt_fail("cannot truncate %s: %s", mp, strerror(errno));
        if (r->o.resume && !same_folder(r->out, r->o.resume))
            copy_history(r->o.resume, r->out, s->metrics_bytes);
        if (r->o.resume)
            restore_best(r, s);
        if (r->o.resume && same_folder(r->out, r->o.resume))
            rt_ckpt_set_aside_damaged();
        r->mt = lf ? NULL : rt_metrics_open(r->out, r->o.resume != NULL);
    } else {
        r->mt = NULL;         /* only rank 0 writes metrics, plots and files */
        r->o.quiet = 1;
    }
    if (r->gpu)               /* the weights as initialized, loaded or resumed */
        rt_cu_put_params(&r->e, m, r->params, r->state, sf);
    r->t0 = rt_now() - s->elapsed;
    metrics_start(r, threads, resumed_from);
    /* rank 0 has set OUT up alone (an earlier run moved aside, the folder made, fsynced
     * and locked, the records cut or copied, the best weights restored: a copy where OUT
     * is on another file system): the others wait for it here, not in the first step's
     * collectives, whose watchdog would time rank 0's disk and end the job (exit 2) */
    rt_barrier_solo();

    /* past a file size limit (ulimit -f) a write fails with EFBIG and is reported like a
     * full disk, instead of the signal killing the run mid-file */
    signal(SIGXFSZ, SIG_IGN);

    rt_stopper es = {.best = s->es_best, .wait = s->es_wait};
    /* --profile: steps after this process's first two are timed instruction by
     * instruction (prof.c) */
    rt_prof *prof = r->o.profile ? rt_prof_new(r->gpu, m->n_instructions) : NULL;
    if (prof && r->gpu)
        rt_cu_prof_setup(&r->e, m->n_instructions + 1);
    if (r->gpu) {
        /* training passes as CUDA graphs: not where the pass changes every step (dropout's
         * key) or waits on other ranks, nor under --profile; TRAINC_CUDA_GRAPH=0 for none */
        const char *cg = getenv("TRAINC_CUDA_GRAPH");
        rt_cu_graphs_enable(&r->e, !prof && !m->has_dropout && r->world == 1 &&
                                       !(cg && strcmp(cg, "0") == 0));
    }
    int64_t run_steps = 0;
    int end = -1;
    const int val_scheduled = r->has_val && (c->val_every_steps > 0 || rt_val_every_epochs(c) > 0);
    char why[256] = "";
    /* samples_per_s: the samples since log_t, which restarts here (a resumed run's
     * log_samples holds samples trained before it) and leaves out the time spent in
     * validation and checkpoints */
    double log_t = rt_now();
    int64_t timed_samples = 0;
    /* a checkpoint taken at an epoch's end leaves batch == batches: roll over */
    if (s->batch >= r->batches_per_epoch) {
        s->epoch++;
        s->batch = 0;
    }
    if (rt_epochs(c) > 0 && s->epoch >= rt_epochs(c))
        end = END_EPOCHS;
    if (c->max_steps > 0 && s->step >= c->max_steps)
        end = END_MAX_STEPS;
    if (!isnan(c->max_time) && s->elapsed >= c->max_time)
        end = END_MAX_TIME;    /* resumed, its time spent: not one step more */
    if (c->has_early_stopping && s->es_stopped) {   /* as it stopped, so it stays */
        end = END_EARLY;
        snprintf(why, sizeof why, "stopped early at step %lld, before this resume",
                 (long long)s->step);
    }
    if (end >= 0 && r->rank == 0)   /* resumed past a limit: say which, and how to go on */
        resumed_at_limit(c, s, end);

    while (end < 0) {
        r->ahead = NULL;
        rt_loader_start(r->tl, s->epoch, s->batch);
        for (;;) {
            int64_t k = r->batches_per_epoch - s->batch;
            if (k > c->accumulate)
                k = c->accumulate;
            /* the step's samples: each micro-batch's mean loss weighs its rows / window,
             * so the update is that of one batch of them all, also when the epoch's
             * last batch is short (drop_last false) */
            int64_t window = 0;
            for (int64_t j = 0; j < k; j++)
                window += rt_loader_rows(r->tl, s->batch + j);
            if (r->gpu)
                rt_cu_grads_clear(&r->e, m->param_floats);
            else
                rt_zero_clear_grads(r->grads);
            double step_loss = 0, norm = NAN, gpu_sumsq = 0;
            int64_t samples = 0;
            const int profiled = prof && run_steps >= 2;
            const double t_step = rt_now();
            int queued = 0;   /* the update is queued (queued_update) */
            int lazy_diverged = 0;   /* lazy: a pending step's loss is not finite */
            double lr = lf ? rt_lrfind_lr(lf, s->step)
                           : rt_lr_at(c, s->step, r->total_steps > 0 ? r->total_steps : 1);
            for (int64_t j = 0; j < k; j++) {
                /* on a GPU the batch may have been fetched and its copy started during
                 * the previous pass */
                const rt_batch *b = r->ahead ? r->ahead : rt_loader_next(r->tl);
                if (!b)
                    rt_die("loader ended early");
                bind_slot(r, b, r->slot, r->ahead != NULL, 0, (int)j);
                r->ahead = NULL;
                int64_t rows = b->rows;
                if (rows != rt_loader_rows(r->tl, s->batch + j))
                    rt_die("batch %lld of epoch %lld has %lld rows, not %lld", (long long)(s->batch + j),
                           (long long)s->epoch, (long long)rows,
                           (long long)rt_loader_rows(r->tl, s->batch + j));
                r->e.rng_key = mix(mix(c->seed, (uint64_t)s->step), (uint64_t)j);
                /* fp16-mixed: the loss (so every gradient) times the loss scale */
                r->e.grad_scale = (float)(s->loss_scale / ((double)window * (double)m->loss_terms *
                                                           (double)r->world));
                r->e.grads_zero = j == 0;     /* zeroed above: a first writer may store */
                rt_ddp_begin(j == k - 1);     /* with accumulate: only the last micro-batch */
                /* on a GPU the pass may be a CUDA graph (device_cuda.c): launched as one,
                 * or captured from the calls below */
                r->e.train = 1;
                int graph = r->gpu ? rt_cu_graph_begin(&r->e) : RT_CU_GRAPH_NONE;
                if (graph != RT_CU_GRAPH_RAN)
                    train_pass(r, profiled ? prof : NULL);
                if (graph == RT_CU_GRAPH_CAPTURE && !rt_cu_graph_end(&r->e))
                    train_pass(r, NULL);      /* the capture failed and nothing ran */
                rt_ddp_finish();
                if (r->gpu && s->batch + j + 1 < r->batches_per_epoch) {
                    /* the pass is queued on the GPU: fetch the next batch now and start
                     * its copy into the other slot, so it overlaps this pass. Its host
                     * buffer is the loader's to refill once this batch's copy is done. */
                    rt_cu_upload_done(&r->e);
                    r->slot ^= 1;
                    r->ahead = rt_loader_next(r->tl);
                    if (r->ahead)
                        upload(r, r->ahead, r->slot, 0);
                }
                samples += rows;
                if (!r->gpu) {
                    step_loss += r->e.loss_sum / (double)r->e.terms;
                    continue;
                }
                /* on a GPU the host does not wait between the passes of a step (each has
                 * its own loss statistics); after the last: the gradients' sum of
                 * squares, maybe the update, then one wait for the losses and the sum */
                r->pass_terms[j] = r->e.terms;
                if (j < k - 1)
                    continue;
                if (profiled)
                    rt_prof_optimizer_begin(&r->e, prof);
                rt_dptr ss = rt_cu_grad_sumsq_queue(&r->e, m, dptr(r->e.grads));
                rt_cu_step_queue(&r->e, ss);
                if (queued_update) {
                    s->updates++;
                    rt_cu_optim_step_clip(&r->e, c, m, dptr(r->e.params), dptr(r->e.grads),
                                          rt_cu_state(&r->e), s->updates, lr, ss);
                    queued = 1;
                }
                if (profiled)
                    rt_prof_pass_end(&r->e);
                if (lazy) {    /* steps without a wait (take_pending) */
                    struct pending *q = &r->pend[r->pend_n];
                    *q = (struct pending){rt_cu_step_place(&r->e), s->step, k};
                    memcpy(r->pend_terms + (size_t)r->pend_n * (size_t)r->step_passes, r->pass_terms,
                           (size_t)k * sizeof *r->pass_terms);
                    r->pend_n++;
                    if (step_needs_wait(r, c, s, k)) {
                        rt_cu_step_wait(&r->e);
                        lazy_diverged = take_pending(r, s, why, sizeof why, &gpu_sumsq);
                    }
                    continue;
                }
                gpu_sumsq = rt_cu_step_wait(&r->e);
                for (int64_t i = 0; i < k; i++)
                    step_loss += rt_cu_pass_stat(&r->e, (int)i)->loss_sum / (double)r->pass_terms[i];
            }
            if (lazy && lazy_diverged) {   /* a step queued without a wait diverged */
                end = END_DIVERGED;
                break;
            }
            /* step_loss holds the sum of the k batches' mean losses: the train record's
             * loss is the mean over batches, so it adds the sum and counts k */
            double batch_sum = step_loss;
            step_loss /= (double)k;
            if (queued)
                norm = sqrt(gpu_sumsq);
            double now_stop = 0;
            /* a signal counts at this step only if every rank saw it: with several ranks,
             * one that lands after the exchange below waits for the next step's, or this
             * rank would stop while the others go on (and wait on it forever) */
            int sig_stop = g_signal != 0;
            if (r->world > 1) {
                /* the mean loss over ranks, and stop requests any rank has (a signal,
                 * its clock) become every rank's, so all stop at the same step */
                double v[3] = {batch_sum, g_signal ? 1.0 : 0.0,
                               !isnan(c->max_time) && rt_now() - r->t0 >= c->max_time ? 1.0 : 0.0};
                rt_allreduce_sum_f64(v, 3);
                /* every rank has the same k (the sampler gives each the same number of
                 * batches), so these are the same numbers on every rank */
                batch_sum = v[0] / (double)r->world;
                step_loss = batch_sum / (double)k;
                sig_stop = v[1] > 0;
                now_stop = v[2];
                samples *= r->world;
            }
            /* --lr-find: the point; the test is over at its last step, or where the
             * loss blows up (not finite: the rate is past what trains, not a divergence) */
            const int lf_over = lf && rt_lrfind_add(lf, lr, step_loss);
            if (!lf && !lazy && !isfinite(step_loss)) {
                /* (a queued update has run: a diverged run's weights are not saved).
                 * This step is not counted (the end record says s->step): the message
                 * numbers the steps as the end record does. */
                end = END_DIVERGED;
                diverged_why(why, sizeof why, "training loss", step_loss, s->step);
                break;
            }
            /* the gradients hold loss_scale x the true ones (1 but in fp16-mixed) */
            if (!queued && !lf_over) {
                if (profiled)
                    rt_prof_optimizer_begin(&r->e, prof);
                norm = (r->gpu ? gpu_grad_norm(gpu_sumsq) : rt_zero_grad_norm(r->e.rt, m, r->grads)) /
                       s->loss_scale;
                if (profiled)
                    rt_prof_pass_end(&r->e);
            }
            if (!lf && !lazy && !scaler && !isfinite(norm)) {
                /* a finite loss, gradients that are not: not applied here (a queued
                 * update has run, as for a loss that is not finite: nothing is saved);
                 * fp16-mixed skips such a step instead (update) */
                end = END_DIVERGED;
                diverged_why(why, sizeof why, "gradient norm", norm, s->step);
                break;
            }
            if (!queued && !lf_over) {
                if (profiled)
                    rt_prof_optimizer_begin(&r->e, prof);
                update(r, s, norm, lr, scaler);
                if (profiled)
                    rt_prof_pass_end(&r->e);
            }
            s->batch += k;
            s->step++;
            if (profiled)
                rt_prof_step(prof, rt_now() - t_step);
            run_steps++;
            if (lf) {   /* the range test records nothing else */
                rt_progress(r->o.quiet, s->step, r->total_steps, s->epoch, step_loss,
                            (double)samples / fmax(rt_now() - log_t, 1e-9), rt_now() - r->t0);
                log_t = rt_now();
                int epoch_end = s->batch >= r->batches_per_epoch;
                if (epoch_end) {
                    s->epoch++;
                    s->batch = 0;
                }
                if (lf_over || sig_stop)
                    end = lf_over ? END_MAX_STEPS : END_INTERRUPTED;
                if (end >= 0 || epoch_end)
                    break;
                continue;
            }
            if (r->gpu && !r->mem_logged) {
                /* what the device really holds after a whole step (our allocations, the
                 * CUDA context, cuBLASLt's own), next to what we allocated */
                size_t fr = 0, tot = 0, pool, arena, fixed;
                size_t all = rt_cu_allocated(&r->e, &pool, &arena, &fixed);
                rt_cu_sync(&r->e);
                rt_cu_mem_info(&fr, &tot);
                char buf[384], gr[128] = "";
                size_t chunk = 0, gpeak = 0;
                rt_cu_grads_mapped(&r->e, &gpeak, &chunk);
                if (gpeak)   /* zero2: the most gradient memory backed at once */
                    snprintf(gr, sizeof gr, ",\"grad_peak_bytes\":%zu,\"grad_chunk_bytes\":%zu", gpeak,
                             chunk);
                snprintf(buf, sizeof buf, "{\"event\":\"device_memory\",\"step\":%lld,\"used_bytes\":%zu,"
                         "\"allocated_bytes\":%zu,\"context_bytes\":%zu,\"total_bytes\":%zu%s}",
                         (long long)s->step, tot - fr, all, rt_cu_context_bytes(&r->e), tot, gr);
                rt_metrics_line(r->mt, buf);
                r->mem_logged = 1;
            }
            if (!lazy) {   /* (lazy: take_pending adds them) */
                s->last_loss = step_loss;
                s->log_loss += batch_sum;
                s->log_n += k;
                s->since_val_loss += batch_sum;
                s->since_val_n += k;
            }
            s->log_samples += samples;
            timed_samples += samples;
            double now = rt_now();
            if (s->step % c->log_every == 0) {
                char buf[512], a[32], bb[32], cc[32], d[32];
                double sps = (double)timed_samples / fmax(now - log_t, 1e-9);
                double mean = s->log_loss / (double)s->log_n;
                char tps[160] = "";
                if (r->train.tokens) {
                    char t1[32];
                    snprintf(tps, sizeof tps, ",\"tokens_per_s\":%s",
                             rt_json_num(t1, sps * (double)r->train.T));
                }
                if (scaler) {
                    char t1[32];
                    size_t u = strlen(tps);
                    snprintf(tps + u, sizeof tps - u, ",\"loss_scale\":%s,\"skipped_steps\":%lld",
                             rt_json_num(t1, s->loss_scale), (long long)s->skipped);
                }
                snprintf(buf, sizeof buf,
                         "{\"step\":%lld,\"epoch\":%lld,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,\"samples_per_s\":%s%s,\"time_s\":%.3f}",
                         (long long)s->step, (long long)s->epoch, rt_json_num(a, mean),
                         rt_json_num(bb, lr), rt_json_num(cc, norm), rt_json_num(d, sps), tps, now - r->t0);
                rt_metrics_line(r->mt, buf);
                rt_metrics_train_point(r->mt, s->step, mean);
                rt_progress(r->o.quiet, s->step, r->total_steps, s->epoch, mean, sps, now - r->t0);
                s->log_loss = 0;
                s->log_n = 0;
                s->log_samples = 0;
                timed_samples = 0;
                log_t = now;
            }
            int epoch_end = s->batch >= r->batches_per_epoch;
            int val_now = r->has_val && c->val_every_steps > 0 && s->step % c->val_every_steps == 0;
            if (r->has_val && epoch_end && rt_val_every_epochs(c) > 0 &&
                (s->epoch + 1) % rt_val_every_epochs(c) == 0)
                val_now = 1;
            if (val_now) {
                double tv = rt_now();
                validation(r, s, best_mode);
                log_t += rt_now() - tv;
            }
            /* monitor loss: checked at each validation, or at each epoch's end where no
             * validation is scheduled (or there is no validation data) */
            if (val_now || (!val_scheduled && epoch_end && c->has_early_stopping)) {
                int mon = c->has_early_stopping ? c->es_monitor : RT_MON_VAL_LOSS;
                double v = mon == RT_MON_VAL_LOSS ? s->last_val_loss
                           : mon == RT_MON_VAL_ACC ? s->last_val_acc
                                                   : s->since_val_loss / (double)(s->since_val_n ? s->since_val_n : 1);
                s->since_val_loss = 0;
                s->since_val_n = 0;
                if (mon == RT_MON_LOSS && isfinite(v) && rt_better(best_mode, v, s->best_mon)) {
                    s->best_mon = v;
                    s->best_step = s->step;
                    if (val_now)
                        save_weights(r, "best.safetensors");
                }
                if (c->has_early_stopping) {
                    int stop = rt_es_check(c, &es, v, why, sizeof why);
                    s->es_best = es.best;
                    s->es_wait = es.wait;
                    if (stop)
                        end = stop == RT_ES_DIVERGED ? END_DIVERGED : END_EARLY;
                    s->es_stopped = stop == RT_ES_STOP;
                    if (stop == RT_ES_DIVERGED) {   /* checked after step s->step, the end record's */
                        size_t u = strlen(why);
                        snprintf(why + u, sizeof why - u, " at step %lld", (long long)s->step);
                    }
                }
            }
            if (epoch_end) {
                s->epoch++;
                s->batch = 0;
                if (end < 0 && rt_epochs(c) > 0 && s->epoch >= rt_epochs(c))
                    end = END_EPOCHS;
            }
            if (end < 0 && c->max_steps > 0 && s->step >= c->max_steps)
                end = END_MAX_STEPS;
            if (end < 0 && !isnan(c->max_time) &&
                (r->world > 1 ? now_stop > 0 : now - r->t0 >= c->max_time))
                end = END_MAX_TIME;
            if (end < 0 && sig_stop)
                end = END_INTERRUPTED;
            if (end < 0 && c->has_checkpoint && s->step % c->ckpt_every_steps == 0) {
                double tc = rt_now();
                checkpoint(r, s);
                log_t += rt_now() - tc;
            }
            if (end >= 0 || epoch_end)
                break;
        }
    }
    if (r->pend_n) {   /* steps queued without a wait, then a stop on the clock or a signal */
        double ss = 0;
        rt_cu_step_wait(&r->e);
        if (take_pending(r, s, why, sizeof why, &ss))
            end = END_DIVERGED;
    }
    rt_progress_done(r->o.quiet);
    if (lf)
        return lr_find_end(r, lf, end == END_INTERRUPTED);
    if (prof) {
        if (rt_prof_report(prof, r->out, r->rank == 0) != 0)
            fprintf(stderr, "trainc: warning: %s/profile.json: cannot write: %s\n", r->out,
                    strerror(errno));
        rt_prof_free(prof);
    }
    /* a checkpoint to continue from: before the validation below, which a run
     * resumed from it to go further would not have had at this step (its records
     * come after the checkpoint's metrics bytes, and the best weights then are kept
     * in the checkpoint), so that the resumed run reads as one uninterrupted */
    int last_ckpt = end == END_INTERRUPTED || (c->has_checkpoint && end != END_DIVERGED);
    if (last_ckpt)
        checkpoint(r, s);
    /* a run that stopped between validations ends with one, so the last record tells
     * how good the final weights are; its record has the epoch of the last step (one
     * that ended an epoch has moved s->epoch on). A monitored value that is not finite
     * there is a divergence, as at any validation. */
    if (r->has_val && s->last_val_step != s->step &&
        (end == END_MAX_STEPS || end == END_MAX_TIME || end == END_EPOCHS)) {
        int64_t epoch = s->epoch;
        if (s->batch == 0 && s->epoch > 0)
            s->epoch--;
        validation(r, s, best_mode);
        s->epoch = epoch;
        if (c->has_early_stopping && c->es_check_finite && c->es_monitor != RT_MON_LOSS) {
            double v = c->es_monitor == RT_MON_VAL_LOSS ? s->last_val_loss : s->last_val_acc;
            if (!isfinite((float)v)) {
                snprintf(why, sizeof why, "the monitored value is %s, not finite, at the "
                         "validation after the last step %lld",
                         isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long)s->step);
                end = END_DIVERGED;
            }
        }
    }

    /* the final weights, then the end record */
    if (end != END_DIVERGED)
        save_final(r, last_ckpt, s->step);
    rt_metrics_plot(r->mt);   /* without validation too: the training loss alone */
    char buf[512], a[32];
    double t = rt_now() - r->t0;
    snprintf(buf, sizeof buf, "{\"event\":\"end\",\"reason\":\"%s\",\"step\":%lld,\"best_val_loss\":%s,\"time_s\":%.3f}",
             end_names[end], (long long)s->step, rt_json_num(a, r->has_val ? s->best_val : NAN), t);
    rt_metrics_line(r->mt, buf);
    rt_metrics_close(r->mt);

    int code = end == END_DIVERGED ? RT_EXIT_DIVERGED
               : end == END_INTERRUPTED ? RT_EXIT_INTERRUPTED : RT_EXIT_OK;
    close_gpu_comm(r);
    if (r->rank != 0) {
        rt_barrier_solo();    /* rank 0's last files, its message, --sample */
        rt_dist_finalize();
        return code;
    }
    if (end == END_DIVERGED) {
        /* (gradients that overflow: clipping cannot help, 0 x inf is NaN) */
        int grads = strstr(why, "gradient norm") != NULL;
        fprintf(stderr, "trainc: diverged: %s.\n  %s%s\n", why,
                grads ? "Look for extreme values in the data, or try a lower optimizer.lr or "
                        "precision fp32."
                      : "Try a lower optimizer.lr, a grad_clip (e.g. --set grad_clip=1.0), or "
                        "precision fp32.",
                c->has_checkpoint && g_have_ckpt
                    ? "\n  The checkpoints from before it are kept in checkpoints/ (the newest "
                      "may hold weights already on their way there: an earlier one and a lower "
                      "lr may be the better start)."
                    : "");
        rt_barrier_solo();
        rt_dist_finalize();
        return code;
    }
    fprintf(stderr, "trainc: %s after %lld step%s in %.1f s: loss %.4f", end_names[end],
            (long long)s->step, s->step == 1 ? "" : "s", t, nan_plain(s->last_loss));
    if (r->has_val && s->last_val_step >= 0) {
        fprintf(stderr, ", val_loss %.4f", nan_plain(s->last_val_loss));
        if (m->loss == RT_LOSS_CROSS_ENTROPY)
            fprintf(stderr, ", val_acc %.2f%%", 100.0 * s->last_val_acc);
    }
    if (end == END_EARLY)
        fprintf(stderr, " (%s)", why);
    if (r->world > 1)
        fprintf(stderr, " (%d ranks)", r->world);
    fprintf(stderr, "\n  outputs in %s/\n", r->out);
    if (r->o.sample > 0 && end != END_INTERRUPTED) {
        g_sampling = 1;
        sample(r);
        if (g_signal) {   /* a signal while sampling stops it; the outputs are whole */
            fprintf(stderr, "trainc: sampling interrupted; the run's outputs are written\n");
            code = RT_EXIT_INTERRUPTED;
        }
    }
    int steps_left = c->max_steps > 0 && s->step < c->max_steps;
    if (end == END_EPOCHS && (steps_left || !isnan(c->max_time)))
        fprintf(stderr, "  note: epochs %lld came before %s: --set epochs=null trains to %s\n",
                (long long)rt_epochs(c), steps_left ? "max_steps" : "max_time",
                steps_left && !isnan(c->max_time) ? "max_steps or max_time"
                : steps_left ? "max_steps" : "max_time");
    if (end == END_INTERRUPTED)
        fprintf(stderr, "  interrupted: a checkpoint was written; continue with --resume %s\n", r->out);
    rt_barrier_solo();
    rt_dist_finalize();
    return code;
}
