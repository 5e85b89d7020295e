/* recompute_auto.c: recompute auto's search, and the memory a run allocates.
 *
 * recompute auto compiles the training program under the least recomputation whose
 * total fits memory_budget_mb (recompute_auto), else exits 1 naming the smallest budget
 * that would fit and the largest batch size the given one fits (auto_does_not_fit). The
 * total counts what the trainer allocates (total_bytes: the arena, parameters, their
 * gradients, optimizer state, the GPU's workspace); plan_totals records it, and its
 * parts, on the program that is kept (plan, plan.json, host.c). */
#include <math.h>
#include <stdlib.h>
#include "ir.h"

/* The GPU's fixed allocations at batch B (rt_gpu_fixed_bytes: input slots, loss
 * statistics, scratch, cuBLASLt's workspace; the optimizer's chunk table and muon's
 * workspace), from what the trainer's rt_model says; none for a spec whose device is
 * cpu. */
static int64_t workspace_bytes(const Compiled *c, int64_t B)
{
    const Spec *s = c->spec;
    const Graph *g = c->graph;
    if (s->train.device == RT_DEVICE_CPU)
        return 0;
    int64_t rows[RT_MAX_INPUTS];
    for (int i = 0; i < s->n_inputs; i++) {
        const InputSpec *in = &s->inputs[i];
        int64_t n = 1;
        for (int k = 0; k < in->rank; k++)
            n *= in->shape[k];
        int widen = g->inputs[i]->dtype != in->dtype;   /* u8/u16 ids read as i32 */
        rows[i] = n * (widen ? 4 : in->dtype == RT_U8 ? 1 : in->dtype == RT_U16 ? 2 : 4);
    }
    int64_t terms = g->gan || s->loss == LOSS_DPO ? 1 : g->pred->numel;   /* (a GAN's, dpo's:
                                                                              one a sample) */
    if (s->loss == LOSS_CROSS_ENTROPY)
        terms /= g->pred->shape[g->pred->rank - 1];
    int64_t *numel = xcalloc((size_t)(g->n_params ? g->n_params : 1), sizeof *numel);
    size_t muon = 0;
    for (int i = 0; i < g->n_trainable; i++)   /* (the optimizer's: the trained ones) */
        numel[i] = g->params[i]->numel;
    size_t table = rt_opt_table_bytes(g->n_trainable, numel);
    for (int i = 0; i < g->n_trainable && s->train.opt == RT_OPT_MUON; i++) {
        const Param *p = g->params[i];   /* (muon's workspace: its largest matrix's) */
        size_t w = p->frozen ? 0 : rt_muon_work_bytes(p->numel, p->shape[1], p->muon);
        muon = w > muon ? w : muon;
    }
    int64_t fp8 = rt_fp8_scratch_fixed(cuda_fp8_weight_bytes(c->prog));
    free(numel);
    /* (a GAN's step: two passes a micro-batch, gan_step.c) */
    int passes = (int)s->train.accumulate * (g->gan ? 2 : 1);
    return (int64_t)(rt_gpu_fixed_bytes(B, s->n_inputs, rows, passes, terms,
                                        g->param_floats, cuda_scratch_row_bytes(c->prog), fp8) +
                      table + muon);
}

/* The arena a row as allocated: training's plan and validation's share it. */
static int64_t alloc_row_bytes(const Compiled *c)
{
    int64_t t = c->prog->arena_row_bytes, e = c->eval->arena_row_bytes;
    return t > e ? t : e;
}

/* The ranks a rank's memory is planned for: distributed.ranks, else a world of one. */
static int64_t plan_ranks(const Spec *s)
{
    return s->train.ranks > 0 ? s->train.ranks : 1;
}

/* What a run allocates on one rank: the arena, parameters, gradients, optimizer state
 * (under ZeRO with distributed.ranks, the rank's shard of it, as trainc plan --ranks
 * counts it; zero2's gradients are counted whole: what is resident beyond its shard
 * depends on the buckets in flight, and with accumulate > 1 it is all of them), with
 * bf16-mixed the parameters' bf16 copy (the plan is then the GPU's) and the GPU's
 * workspace: what memory_budget_mb counts (loop.c's check at start-up too). */
static int64_t total_bytes(const Compiled *c, int64_t B)
{
    const Graph *g = c->graph;
    int64_t pf = g->param_floats, tf = g->trainable_floats;   /* (gradients: the trained) */
    int64_t f32 = g->act16 ? g->gpu_fp32_floats : pf;   /* (frozen GEMM weights: 16 bits) */
    int64_t opt = (int64_t)rt_opt_state_bytes(&c->spec->train, tf, plan_ranks(c->spec));
    return B * alloc_row_bytes(c) + 4 * (f32 + tf) + opt + (g->act16 ? 2 * pf : 0) +
           4 * g->state_floats + workspace_bytes(c, B);
}

/* recompute auto found no plan that fits: exit 1 with the smallest budget that would
 * (the smallest plan's total at this batch size, rounded up to 0.1 MiB so that the
 * budget named does fit) and the largest batch size the given budget fits. */
static _Noreturn void auto_does_not_fit(Compiled *c, double budget, int small_policy,
                                        int small_full, int small_sel)
{
    Spec *s = c->spec;
    compile_train(c, small_policy, small_full, small_sel);
#define MIB_UP(bytes) (ceil((double)(bytes) / 1048576.0 * 10) / 10)
    int64_t B = s->train.batch_size, lo = 0, hi = B;   /* fits at lo (0: none), not at hi */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if ((double)total_bytes(c, mid) <= budget)
            lo = mid;
        else
            hi = mid;
    }
    int64_t fixed = total_bytes(c, 0);
    char tail[200];
    if (lo > 0)
        snprintf(tail, sizeof tail, "; the budget fits batch_size %lld", (long long)lo);
    else if (budget < (double)fixed)
        snprintf(tail, sizeof tail, "; the parameters, their gradients, the optimizer state and "
                 "the workspace alone need %.1f MiB", MIB_UP(fixed));
    else
        snprintf(tail, sizeof tail, "; not even batch_size 1 fits (it needs %.1f MiB)",
                 MIB_UP(total_bytes(c, 1)));
    error_at(s->train_file, "$.train.memory_budget_mb",
             "%g MiB does not fit with any recomputation: batch_size %lld needs %.1f MiB at the "
             "least (%s)%s", s->train.memory_budget_mb, (long long)B,
             MIB_UP(total_bytes(c, B)),
             small_policy == RT_RECOMPUTE_FULL ? "recompute full"
             : "selective, the first blocks in full", tail);
#undef MIB_UP
}

/* One recomputation plan (compile_train's arguments). */
typedef struct Plan {
    int policy, full_blocks, sel_blocks;
} Plan;

/* The search so far: the budget, the last plan tried (the one kept when it fits) and the
 * smallest (for the message when none does). */
typedef struct Search {
    Compiled *c;
    double budget;
    int64_t B, small;
    Plan last, smallest;
} Search;

/* Compiles plan (policy, full_blocks, sel_blocks): does its total fit the budget? */
static int try_plan(Search *a, int policy, int full_blocks, int sel_blocks)
{
    compile_train(a->c, policy, full_blocks, sel_blocks);
    a->last = (Plan){policy, full_blocks, sel_blocks};
    int64_t t = total_bytes(a->c, a->B);
    if (t < a->small) {
        a->small = t;
        a->smallest = a->last;
    }
    return (double)t <= a->budget;
}

/* The least recomputation whose plan fits the budget: none; selective in the first 1,
 * 2, ... blocks (the others keep everything); selective everywhere; then selective with
 * the first 1, 2, ... blocks in full; then full. The smallest of them is remembered for
 * the message when none fits (full replays a whole block at once, so a partly full plan
 * can be smaller than it). */
void recompute_auto(Compiled *c)
{
    const Spec *s = c->spec;
    Search a = {.c = c, .budget = s->train.memory_budget_mb * 1048576.0,
                .B = s->train.batch_size, .small = INT64_MAX};
    int paused = dump_pause(1);   /* candidates: only the one kept is dumped */
    int fit = try_plan(&a, RT_RECOMPUTE_NONE, 0, 0);
    int nb = c->prog->n_blocks;
    for (int k = 1; k <= nb && !fit; k++)
        fit = try_plan(&a, RT_RECOMPUTE_SELECTIVE, 0, k);
    for (int k = 1; k < nb && !fit; k++)
        fit = try_plan(&a, RT_RECOMPUTE_SELECTIVE, k, 0);
    if (!fit)
        fit = try_plan(&a, RT_RECOMPUTE_FULL, 0, 0);
    dump_pause(paused);
    if (!fit)
        auto_does_not_fit(c, a.budget, a.smallest.policy, a.smallest.full_blocks,
                          a.smallest.sel_blocks);
    if (dump_wanted())   /* the plan kept (the last tried), once more for the dump */
        compile_train(c, a.last.policy, a.last.full_blocks, a.last.sel_blocks);
}

void plan_totals(Compiled *c)
{
    int64_t B = c->spec->train.batch_size;
    c->prog->eval_row_bytes = c->eval->arena_row_bytes;
    c->prog->workspace_bytes = workspace_bytes(c, B);
    c->prog->alloc_row_bytes = alloc_row_bytes(c);
    c->prog->total_bytes = total_bytes(c, B);
    c->prog->gpu_scratch_row_bytes = cuda_scratch_row_bytes(c->prog);
}
