/* run_config.c: a run's training config. The spec's own values (embedded in the
 * trainer), a resumed run's (--resume), then --set; checked as the compiler checks a
 * spec and against what the trainer was built for (its devices, its recomputation plan
 * and memory budget, its precision). Everything here is bad input or none: a bad
 * config exits 1 before the output folder is touched. */
#include <stdlib.h>
#include <string.h>
#include "run.h"

/* Sets each field from "key=value" lines (the trainer's embedded spec, a
 * checkpoint's config); `from` names a checkpoint whose lines fail, NULL for ours. */
void rt_set_lines(rt_train_config *c, const char *const *lines, int n, const char *from)
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
int64_t rt_arena_row(const rt_model *m)
{
    return m->arena_row_bytes > m->eval_arena_row_bytes ? m->arena_row_bytes
                                                        : m->eval_arena_row_bytes;
}

/* The config of the spec alone, before --set, as lines (a checkpoint keeps them). */
char **rt_spec_lines(const rt_model *m, int *n)
{
    rt_train_config c;
    rt_config_defaults(&c);
    rt_set_lines(&c, m->train_defaults, m->n_train_defaults, NULL);
    return rt_config_dump(&c, n);
}

void rt_free_lines(char **lines, int n)
{
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

/* recompute auto chose the compiled plan for the spec's batch size and optimizer to
 * fit memory_budget_mb (main.c's compile_spec, by the same count): a larger batch or
 * an optimizer with more state may no longer fit it */
static void check_budget(const rt_model *m, const rt_train_config *c)
{
    if (c->recompute != RT_RECOMPUTE_AUTO)
        return;
    double pf = (double)m->param_floats, tf = (double)m->trainable_floats;
    /* a GPU in mixed precision holds the frozen weights only GEMMs read in 16 bits alone */
    double f32 = m->act16 && m->gpu_fp32_floats ? (double)m->gpu_fp32_floats : pf;
    /* the shard of ZeRO's optimizer state for the ranks this run has (the compiler
     * counted distributed.ranks: fewer ranks than that may not fit) */
    double opt = rt_opt_state_bytes(c, m->trainable_floats, rt_dist_world()) / 4;
    double ws = c->device == RT_DEVICE_CPU   /* the GPU's workspace, as the plan counts it */
                    ? 0 : (double)rt_gpu_fixed_of(m, c, c->batch_size, (int)c->accumulate);
    double need = (double)c->batch_size * (double)rt_arena_row(m) + 4 * (f32 + tf + opt) +
                  (m->act16 ? 2 * pf : 0) + 4 * (double)m->state_floats + ws;
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

/* --fast-dev-run N: N optimizer steps, then N validation batches (where there is
 * data.val), whatever the spec says of time, epochs, early stopping and checkpoints */
static void fast_dev_config(rt_train_config *c, int64_t n)
{
    c->max_steps = n;
    c->max_time = NAN;
    c->min_steps = c->min_epochs = -1;
    c->limit_train_batches = c->limit_val_batches = NAN;
    c->val_every_epochs = -1;
    c->val_every_fraction = NAN;
    c->val_every_steps = c->val_batches = c->n_val ? n : -1;
    c->has_early_stopping = 0;
    c->ckpt_every_steps = (int64_t)1 << 53;   /* (the largest the key takes: none) */
}

static void configure(const rt_model *m, const Opts *o, rt_train_config *c)
{
    char err[512];
    rt_config_defaults(c);
    rt_set_lines(c, m->train_defaults, m->n_train_defaults, NULL);
    if (o->resume)
        rt_resume_config(m, o->resume, c);
    /* the recomputation policy shapes the compiled program: it cannot change here. The
     * budget may: recompute auto's plan is checked against it below, and the other
     * policies do not read it (as when trainc run compiles) */
    rt_train_config compiled = *c;   /* (and so do the frozen parameters, lora's adapters) */
    for (int pass = 0; pass < 2; pass++)   /* the type keys first: they reset their group */
        for (int i = 0; i < o->n_sets; i++)
            if (rt_config_set_pass(o->sets[i]) == pass &&
                rt_config_set_arg(c, o->sets[i], err, sizeof err) != 0)
                rt_input_error("%s", err);
    if (c->recompute != compiled.recompute) {
        static const char *const pol[] = {"none", "selective", "full", "auto"};
        rt_input_error("--set recompute=%s: this trainer's recomputation plan (%s) is compiled into "
                       "it; rebuild it with trainc build ... --set recompute=%s (trainc run applies "
                       "it when compiling)", pol[c->recompute], pol[compiled.recompute],
                       pol[c->recompute]);
    }
    if (strcmp(c->freeze, compiled.freeze))
        rt_input_error("--set freeze=%s: which parameters this trainer freezes (%s) is compiled "
                       "into it; rebuild it with trainc build ... --set freeze=... (trainc run "
                       "applies it when compiling)", c->freeze[0] ? c->freeze : "null",
                       compiled.freeze[0] ? compiled.freeze : "none");
    if (c->has_lora != compiled.has_lora || c->lora_rank != compiled.lora_rank ||
        c->lora_alpha != compiled.lora_alpha || c->lora_dropout != compiled.lora_dropout ||
        c->lora_rslora != compiled.lora_rslora ||
        strcmp(c->lora_targets, compiled.lora_targets) ||
        strcmp(c->lora_train, compiled.lora_train))
        rt_input_error("--set lora...: this trainer's LoRA adapters (%s) are compiled into it; "
                       "rebuild it with trainc build ... --set lora.rank=... (trainc run applies "
                       "them when compiling)", compiled.has_lora ? "their rank, alpha, dropout, "
                       "targets and lora.train" : "none");
    if (o->fast_dev_run)
        fast_dev_config(c, o->fast_dev_run);
    char key[256] = "";
    if (rt_config_check(c, err, sizeof err, key, sizeof key) != 0)   /* the key it blames */
        rt_input_error("$.train%s%s: %s", key[0] ? "." : "", key, err);
    /* the rules between the model and the training spec that the compiler applies to
     * the spec file (spec.c's check_train_vs_model), again after --set; the data files'
     * keys are checked against the inputs when they are opened (rt_dataset_open) */
    if (c->has_early_stopping && c->es_monitor == RT_MON_VAL_ACC &&
        !rt_has_acc(m))
        rt_input_error("$.train.early_stopping.monitor: early_stopping.monitor val_acc needs a cross_entropy "
                       "or dpo loss (this model's is mse); monitor val_loss or loss");
    if (m->gan && c->opt == RT_OPT_MUON)
        rt_input_error("$.train.optimizer.type: a GAN's optimizers are adamw or sgd (muon does "
                       "not train two networks yet)");
    if (o->device >= 0)
        c->device = o->device;
    check_budget(m, c);
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
    if (o->fast_dev_run && rt_dist_world() > 1)
        rt_input_error("--fast-dev-run runs in one process (this run has %d ranks)",
                       rt_dist_world());
    (void)m;
}

void rt_run_configure(Run *r)
{
    configure(r->m, &r->o, &r->c);
    refuse_unsupported(r->m, &r->o, &r->c);
}

const char *rt_precision_name(int precision)
{
    static const char *const precs[] = {"fp32", "bf16-mixed", "fp16-mixed", "fp8-mixed"};
    return precision >= 0 && precision <= RT_PREC_FP8 ? precs[precision] : "?";
}

int rt_model_precision(const rt_model *m)
{
    return m->fp8 ? RT_PREC_FP8 : m->act16;
}

/* mixed precision is compiled into the trainer (the plan, the kernels): the GPU runs
 * it; the CPU computes in fp32. fp8-mixed is bf16-mixed's plan and kernels with the
 * linear layers' GEMMs marked (rt_gemm_fp8): a GPU without FP8 tensor cores refuses it
 * when it is opened (rt_cu_init), where its compute capability is known. */
void rt_run_precision(Run *r)
{
    const rt_model *m = r->m;
    const rt_train_config *c = &r->c;
    int built = rt_model_precision(m);
    if (r->gpu && m->act16 && c->precision != built)
        rt_input_error("precision: this trainer was built for %s, which its GPU kernels and "
                       "memory plan follow; build it again with --set precision=%s (or run it "
                       "with --device cpu, which computes in fp32)", rt_precision_name(built),
                       rt_precision_name(c->precision));
    r->e.arena_scale = m->act16 && !r->gpu ? 2 : 1;
    if (c->precision != RT_PREC_FP32 && r->rank == 0 && !(r->gpu && m->act16))
        fprintf(stderr, "trainc: note: %s stores and computes in fp32 (the spec asks for %s)%s\n",
                !r->gpu ? "the CPU" : "this trainer (built for fp32)",
                rt_precision_name(c->precision),
                c->precision == RT_PREC_FP16 ? "; fp16's dynamic loss scaling is on" : "");
    if (r->e.arena_scale == 2 && c->recompute == RT_RECOMPUTE_AUTO && !isnan(c->memory_budget_mb) &&
        r->rank == 0) {
        /* auto chose the plan whose GPU total (16-bit activations) fits the budget */
        double all = (double)c->batch_size * (double)m->arena_row_bytes * 2 +
                     (double)m->param_floats * 4 + (double)m->trainable_floats * 4 *
                     (1 + rt_optim_state_parts(c));
        fprintf(stderr, "trainc: note: recompute auto fit memory_budget_mb (%g MiB) with the GPU's "
                "16-bit activations; in fp32 here the arena is twice as large: %.1f MiB in all\n",
                c->memory_budget_mb, all / 1048576.0);
    }
}
