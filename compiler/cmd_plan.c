/* cmd_plan.c: trainc plan: the static memory plan and the recomputation plan as a
 * table (or plan.json's data with --json), and with --ranks N each rank's bytes and
 * traffic under ddp, zero1 and zero2 (zero2.c: its gradient peaks). */
#include <stdlib.h>
#include <string.h>
#include "cmd.h"

/* Per-rank memory of parameters, gradients and optimizer state under each strategy,
 * and what each rank sends per step (ring all-reduce / reduce-scatter + all-gather:
 * 2 (N-1)/N of the gradient bytes). As the trainer keeps them in any precision: fp32
 * parameters (the master weights), gradients (reduced in fp32) and optimizer state;
 * mixed precision adds the parameters' 16-bit copy on the GPU, said below the table
 * (ZeRO's paper counts 2-byte parameters and gradients instead: not what runs here).
 * np counts the parameter region's floats (param_floats, with the alignment gaps, as
 * the trainer allocates it) and a shard is rank 0's, the largest (rt_dist_shard), so
 * the figures are the bytes a trainer's start record reports. Gradients, optimizer
 * state, the sums and ZeRO's shards cover the trained parameters' floats alone (nt:
 * train.freeze's frozen ones are laid out after them, and have none). */
typedef struct RankPlan {
    int N, mixed, adam;
    int64_t np, nt;                              /* the parameter region's floats; the
                                                    trained ones' */
    double param[3], grad[3], opt[3], sent[3];   /* ddp, zero1, zero2: bytes a rank */
    int sim;                                     /* ranks replayed for zero2's peaks */
    int64_t unit[2];                             /* CPU pages, GPU chunks */
    int64_t *peak[2];                            /* [sim] zero2's gradient bytes backed */
    int64_t whole[2];                            /* the whole region, in units */
} RankPlan;

static const char *const rank_strategies[] = {"ddp", "zero1", "zero2"};

static RankPlan rank_plan(const Spec *s, const Compiled *c, int N, int64_t chunk)
{
    const Program *prog = c->prog;
    int64_t np = c->graph->param_floats, nt = c->graph->trainable_floats;
    RankPlan r = {.N = N, .np = np, .nt = nt, .mixed = s->train.precision != RT_PREC_FP32,
                  .adam = s->train.opt != RT_OPT_SGD};
    double shard = (double)((nt + N - 1) / N);
    double pb = 4, gb = 4, ob = r.adam ? 8 : s->train.momentum > 0 ? 4 : 0;
    for (int k = 0; k < 3; k++) {
        /* ddp: an all-reduce of the gradients; zero: their reduce-scatter and the
         * trained parameters' all-gather */
        r.sent[k] = (N - 1.0) / N * gb * (double)nt * (k == 0 ? 2 : 1) +
                    (k == 0 ? 0 : (N - 1.0) / N * pb * (double)nt);
        r.param[k] = pb * (double)np;
        r.grad[k] = gb * (k == 2 ? shard : (double)nt);
        r.opt[k] = ob * (k >= 1 ? shard : (double)nt);
    }
    if (N < 2)
        return r;
    int64_t bucket = (int64_t)(s->train.bucket_mb * 1048576.0);
    r.sim = N <= 256 ? N : 256;   /* each rank replays the backward pass's hooks */
    r.unit[0] = 4096;
    r.unit[1] = chunk;
    for (int u = 0; u < 2; u++) {
        r.peak[u] = xcalloc((size_t)r.sim, sizeof(int64_t));
        for (int k = 0; k < r.sim; k++)
            r.peak[u][k] = zero2_peak_bytes(prog, bucket, k, N, r.unit[u]);
        r.whole[u] = (nt * 4 + r.unit[u] - 1) / r.unit[u] * r.unit[u];
    }
    return r;
}

/* rank_plan's figures as a table, then zero2's gradient peaks rank by rank. */
static void plan_ranks(const Spec *s, const RankPlan *r, int64_t np)
{
    int N = r->N;
    printf("\n  per rank with %d ranks (%s, %s):\n", N, r->mixed ? "mixed precision" : "fp32",
           r->adam ? "AdamW" : "SGD");
    printf("  %-9s %14s %14s %14s %14s %16s\n", "strategy", "parameters", "gradients", "optimizer",
           "total", "sent/step");
    for (int k = 0; k < 3; k++) {
        double t = r->param[k] + r->grad[k] + r->opt[k];
        printf("  %-9s %14.0f %14.0f %14.0f %14.0f %16.0f   (%.2f bytes/param)\n",
               rank_strategies[k], r->param[k], r->grad[k], r->opt[k], t, r->sent[k],
               t / (double)np);
    }
    if (r->mixed)
        printf("  (mixed precision: the GPU also keeps the parameters' 16-bit copy, %.0f bytes a "
               "rank,\n   in the start record's device_pool_bytes; gradients are fp32 and sent "
               "so)\n", 2.0 * (double)np);
    printf("  (all three run on CPUs over MPI and on GPUs over NCCL: mpirun -np %d TRAINER --set "
           "distributed.strategy=zero2)\n", N);
    /* zero2's gradients beyond the shard: the buckets being written or reduced */
    if (N < 2)
        return;
    int each = N <= 8;              /* a column a rank, else the most and its rank */
    printf("\n  zero2's gradients backed at most during backward (fp32, as the trainer keeps them:\n"
           "  the shard, plus the buckets being written or reduced when no reduction ends before\n"
           "  the host must wait for it, at most 2 outstanding; distributed.bucket_mb %g%s):\n  %-20s",
           s->train.bucket_mb, r->sim < N ? "; of the first 256 ranks" : "", "");
    for (int k = 0; each && k < N; k++)
        printf(" %11s%-2d", "rank ", k);
    printf(each ? " %14s\n" : " %14s %6s %14s\n", each ? "whole region" : "most", "rank", "whole region");
    for (int u = 0; u < 2; u++) {
        char label[48];
        snprintf(label, sizeof label, u ? "GPU, %lld KB chunks" : "CPU, 4 KB pages",
                 (long long)(r->unit[1] >> 10));
        printf("  %-20s", label);
        int64_t best = 0;
        int at = 0;
        for (int k = 0; k < r->sim; k++) {
            if (each)
                printf(" %13lld", (long long)r->peak[u][k]);
            if (r->peak[u][k] > best) {
                best = r->peak[u][k];
                at = k;
            }
        }
        if (each)
            printf(" %14lld\n", (long long)r->whole[u]);
        else
            printf(" %14lld %6d %14lld\n", (long long)best, at, (long long)r->whole[u]);
    }
    if (s->train.accumulate > 1)
        printf("    (accumulate %lld: nothing is sent before a step's last micro-batch, so the\n"
               "     earlier ones keep the whole region backed)\n", (long long)s->train.accumulate);
}

/* The same as data: plan --json --ranks N adds "ranks" to plan.json's object. */
static void plan_ranks_json(const Spec *s, const RankPlan *r, const char *plan)
{
    const char *end = strrchr(plan, '}');
    if (!end)
        die("plan.json does not end an object");
    while (end > plan && (end[-1] == '\n' || end[-1] == ' '))
        end--;
    printf("%.*s,\n  \"ranks\": {\n    \"n\": %d,\n    \"precision\": \"%s\",\n"
           "    \"optimizer\": \"%s\",\n    \"param_copy16_bytes\": %.0f,\n", (int)(end - plan),
           plan, r->N, r->mixed ? "mixed" : "fp32", r->adam ? "adamw" : "sgd",
           r->mixed ? 2.0 * (double)r->np : 0.0);
    for (int k = 0; k < 3; k++)
        printf("    \"%s\": {\"param_bytes\": %.0f, \"grad_bytes\": %.0f, \"optimizer_bytes\": %.0f, "
               "\"total_bytes\": %.0f, \"sent_bytes_per_step\": %.0f},\n", rank_strategies[k],
               r->param[k], r->grad[k], r->opt[k], r->param[k] + r->grad[k] + r->opt[k], r->sent[k]);
    printf("    \"zero2_grad_peak\": ");
    if (r->N < 2) {
        printf("null\n  }\n}\n");
        return;
    }
    printf("{\"bucket_mb\": %g, \"ranks_replayed\": %d", s->train.bucket_mb, r->sim);
    static const char *const kind[] = {"cpu", "gpu"};
    for (int u = 0; u < 2; u++) {
        printf(",\n      \"%s\": {\"unit_bytes\": %lld, \"whole_region_bytes\": %lld, \"per_rank_bytes\": [",
               kind[u], (long long)r->unit[u], (long long)r->whole[u]);
        for (int k = 0; k < r->sim; k++)
            printf("%s%lld", k ? ", " : "", (long long)r->peak[u][k]);
        printf("]}");
    }
    printf("}\n  }\n}\n");
}

/* The table's buffers: each one's shape, bytes, offset and live range, at batch B;
 * then those stored with padded rows. */
static void table_buffers(const Graph *g, int64_t B)
{
    printf("  %-28s %-18s %12s %12s  %s\n", "buffer", "shape", "bytes", "offset", "live");
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if (!t->has_offset)
            continue;
        char sh[64] = "[B";
        for (int k = 0; k < t->rank; k++)
            snprintf(sh + strlen(sh), sizeof sh - strlen(sh), ", %lld", (long long)t->shape[k]);
        strcat(sh, "]");
        printf("  %-28s %-18s %12lld %12lld  %d..%d\n", t->name, sh, (long long)(B * t->row_bytes),
               (long long)(B * t->offset), t->first, t->last);
    }
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->has_offset && g->tensors[i]->ld)
            printf("  (%s: rows of %lld, stored %lld apart so that they are 16-byte aligned for "
                   "the GEMMs)\n", g->tensors[i]->name,
                   (long long)g->tensors[i]->shape[g->tensors[i]->rank - 1],
                   (long long)g->tensors[i]->ld);
}

/* The arena at batch B against the no-reuse sum and the lower bound. */
static void table_arena(const Program *p, int64_t B)
{
    printf("\n  arena                 %14lld bytes\n", (long long)(B * p->alloc_row_bytes));
    if (p->alloc_row_bytes > p->arena_row_bytes)
        printf("                          (validation's plan, %lld bytes at this batch, is the larger:\n"
               "                          the arena holds it; training's takes %lld)\n",
               (long long)(B * p->eval_row_bytes), (long long)(B * p->arena_row_bytes));
    printf("  no reuse              %14lld bytes (arena is %.1f%% of it)\n",
           (long long)(B * p->noreuse_row_bytes),
           p->noreuse_row_bytes ? 100.0 * (double)p->arena_row_bytes / (double)p->noreuse_row_bytes : 0.0);
    printf("  lower bound (peak live) %12lld bytes\n", (long long)(B * p->lower_bound_row_bytes));
}

/* The fixed allocations: parameters, gradients, layer state, optimizer state, the
 * 16-bit copy, the GPU's workspace, and the total. */
static void table_fixed(const Spec *s, const Program *p, const Graph *g)
{
    int64_t np = 0;
    for (int i = 0; i < g->n_params; i++)
        np += g->params[i]->numel;
    int64_t pb = g->param_floats * 4;   /* as allocated: each tensor padded to 16 floats */
    int64_t ranks = s->train.ranks > 0 ? s->train.ranks : 1;
    int64_t opt = (int64_t)rt_opt_state_bytes(&s->train, g->trainable_floats, ranks);
    int64_t gb = g->trainable_floats * 4;   /* train.freeze's: none */
    printf("  parameters            %14lld bytes (%lld floats, each tensor padded to 16)\n",
           (long long)pb, (long long)np);
    if (g->act16 && g->gpu_fp32_floats < g->param_floats)
        printf("                          (a GPU holds %lld of them in fp32: the frozen weights\n"
               "                          only GEMMs read are in the %s copy alone)\n",
               (long long)(g->gpu_fp32_floats * 4), half_name(g));
    printf("  gradients             %14lld bytes", (long long)gb);
    if (gb < pb)
        printf(" (the trained parameters'; the frozen have none)");
    printf("\n");
    if (g->n_state)
        printf("  layer state           %14lld bytes (%d tensors: running statistics, saved, not\n"
               "                          trained)\n", (long long)(g->state_floats * 4), g->n_state);
    printf("  optimizer state       %14lld bytes", (long long)opt);
    if (opt && ranks > 1 && s->train.dist != RT_DIST_DDP)
        printf(" (rank 0's shard: %s over distributed.ranks %lld)", s->train.dist ==
               RT_DIST_ZERO1 ? "zero1" : "zero2", (long long)ranks);
    printf("\n");
    if (g->act16)
        printf("  %s parameter copy   %14lld bytes (%s-mixed: the arena above is the GPU's,\n"
               "                          %s activations; the CPU computes in fp32 and takes twice it)\n",
               half_name(g), (long long)(pb / 2), half_name(g), half_name(g));
    if (g->fp8)
        printf("                          (fp8-mixed: bf16-mixed's plan; the FP8 copies of the\n"
               "                          linear layers' operands are in the GPU's scratch below)\n");
    printf("  workspace (GPU)       %14lld bytes (input slots, loss statistics, scratch, the\n"
           "                          optimizer's chunk table, cuBLASLt's 32 MiB; none for\n"
           "                          device cpu)\n", (long long)p->workspace_bytes);
    printf("  total                 %14lld bytes (%.1f MiB: what memory_budget_mb counts)\n",
           (long long)p->total_bytes, (double)p->total_bytes / 1048576.0);
}

/* The recomputation plan: the policy, the blocks it covers, the FLOPs and the other
 * work it replays. */
static void table_recompute(const Spec *s, const Program *p, const Graph *g, int64_t B)
{
    static const char *pol[] = {"none", "selective", "full", "auto"};
    printf("  recompute             %14s (%s)\n", pol[p->policy],
           s->train.recompute == RT_RECOMPUTE_AUTO ? "chosen by auto" : "as asked");
    if (p->policy == RT_RECOMPUTE_SELECTIVE && p->full_blocks > 0)
        printf("                          blocks 0-%d of %d recomputed in full\n",
               p->full_blocks - 1, p->n_blocks);
    if (p->policy == RT_RECOMPUTE_SELECTIVE && p->sel_blocks < p->n_blocks)
        printf("                          blocks 0-%d of %d selective, blocks %d-%d keep everything\n",
               p->sel_blocks - 1, p->n_blocks, p->sel_blocks, p->n_blocks - 1);
    printf("  recompute FLOPs       %14lld per step (%.1f%% more than the step's %lld)\n",
           (long long)(B * p->recompute_flops),
           100.0 * (double)p->recompute_flops / (double)(g->flops_fwd + g->flops_bwd),
           (long long)(B * (g->flops_fwd + g->flops_bwd)));
    /* FLOPs count GEMMs and attention, as FLOPs/sample and MFU do: say what else runs */
    if (p->n_replayed)
        printf("                          %d instructions replayed in backward, %d of them "
               "elementwise or norm work (not in the FLOPs),\n"
               "                          writing %lld bytes a step\n", p->n_replayed,
               p->n_replayed_light, (long long)(B * p->replay_row_bytes));
}

/* The memory plan as a table: every buffer, the arena against the no-reuse sum and the
 * lower bound, the fixed allocations and the total, and the recomputation plan. */
static void plan_table(const Compiled *c)
{
    const Spec *s = c->spec;
    int64_t B = s->train.batch_size;
    printf("memory plan for %s at batch %lld\n\n", s->name, (long long)B);
    table_buffers(c->graph, B);
    table_arena(c->prog, B);
    table_fixed(s, c->prog, c->graph);
    table_recompute(s, c->prog, c->graph, B);
}

int cmd_plan(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "plan");
    int json = 0;
    long ranks = 0, chunk_kb = 2048;
    for (int i = 1 + n; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--chunk-kb")) {
            const char *v = opt_value(argc, argv, &i, "--chunk-kb");
            char *end;
            chunk_kb = strtol(v, &end, 10);
            if (*end || chunk_kb < 4 || chunk_kb > 1048576 || chunk_kb % 4)
                error_input("plan: --chunk-kb expects a multiple of 4 from 4 to 1048576, got '%s'", v);
        }
        else if (!strcmp(argv[i], "--ranks")) {
            const char *v = opt_value(argc, argv, &i, "--ranks");
            char *end;
            ranks = strtol(v, &end, 10);
            if (*end || ranks < 1 || ranks > 65536)
                error_input("plan: --ranks expects an integer from 1 to 65536, got '%s'", v);
        }
        else if (!strcmp(argv[i], "--set"))
            opt_value(argc, argv, &i, "--set");
        else
            unknown_arg("plan", argv[i]);
    }
    if (ranks == 0 && chunk_kb != 2048)
        error_input("plan: --chunk-kb sizes the GPU's chunks of --ranks' table; add --ranks N");
    Spec *s = load_with_sets(argc, argv, 1, n, 1);
    Compiled *c = compile_spec(s);
    RankPlan rp = {0};
    if (ranks > 0)
        rp = rank_plan(s, c, (int)ranks, (int64_t)chunk_kb << 10);
    if (json) {
        if (ranks > 0)
            plan_ranks_json(s, &rp, c->em.plan_json.s);
        else
            fputs(c->em.plan_json.s, stdout);
        return 0;
    }
    plan_table(c);
    if (ranks > 0)
        plan_ranks(s, &rp, c->graph->param_floats);
    return 0;
}
