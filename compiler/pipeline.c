/* pipeline.c: the passes, in one table (ir.h: PASS_LIST), that the training program
 * and the validation program both run through, each pass followed by the verifier and
 * --dump-after (verify.c: passed, passed_graph); and the training program's compile for
 * one recomputation plan (compile_train: full's two ways, the smaller kept).
 *
 *   spec -> graph -> autodiff -> lower -> fusion -> residual -> recompute ->
 *   gemm-epilogues -> layernorm-sums -> grad-epilogues -> grad-hooks -> memplan
 *
 * Validation runs the rows marked PASS_EVAL: the forward graph lowered alone, fused,
 * its GEMM epilogues, its own arena. */
#include <stdlib.h>
#include "ir.h"

/* What the passes work on: the graph, then (from lower on) the program. */
typedef struct Pipeline {
    const Spec *spec;
    Graph *g;
    Program *p;              /* NULL until lower */
    int eval;                /* the validation program: forward only */
    const Graph *layout;     /* the decode program's: validation's graph, whose parameter
                                layout it takes (decode.c) */
    const Graph *gan_layout; /* a GAN's validation program's: training's graph (gan.c) */
    int policy, full_blocks, sel_blocks, jit_cheap;   /* training's recomputation */
} Pipeline;

/* Each pass behind one signature, for the table. */
static void pass_graph(Pipeline *x)
{
    x->g = graph_build(x->spec, x->eval);
    if (x->layout)
        decode_share_layout(x->g, x->layout);
    if (x->gan_layout)
        gan_share_layout(x->g, x->gan_layout);
}
static void pass_autodiff(Pipeline *x) { autodiff(x->g); }
static void pass_lower(Pipeline *x) { x->p = x->eval ? lower_eval(x->g) : lower(x->g); }
static void pass_fusion(Pipeline *x) { fuse(x->p); }
static void pass_residual(Pipeline *x) { residual_epilogues(x->p); }
static void pass_recompute(Pipeline *x)
{
    recompute(x->p, x->policy, x->full_blocks, x->sel_blocks, x->jit_cheap);
}
static void pass_gemm_epilogues(Pipeline *x) { gemm_epilogues(x->p); }
static void pass_layernorm_sums(Pipeline *x) { layernorm_bwd_sums(x->p); }
static void pass_grad_epilogues(Pipeline *x) { grad_epilogues(x->p); }
static void pass_grad_hooks(Pipeline *x)
{
    place_frozen_grads(x->p);
    add_grad_hooks(x->p);
}
static void pass_memplan(Pipeline *x) { memplan(x->p); }

static const struct {
    const char *name;
    void (*run)(Pipeline *);
    int programs;            /* PASS_TRAIN, PASS_EVAL */
} passes[] = {
#define X(name, fn, programs) {name, fn, programs},
    PASS_LIST(X)
#undef X
};

/* The table's rows for x's program, in order, each followed by the verifier and
 * --dump-after. */
static void run_passes(Pipeline *x)
{
    int mine = x->eval ? PASS_EVAL : PASS_TRAIN;
    for (size_t i = 0; i < sizeof passes / sizeof *passes; i++) {
        if (!(passes[i].programs & mine))
            continue;
        passes[i].run(x);
        if (x->p)
            passed(x->p, passes[i].name);
        else if (!x->eval)   /* validation's graph is training's forward nodes again */
            passed_graph(x->g, passes[i].name);
    }
}

/* The replays as they run (the epilogue passes fuse some into others), and the buffers
 * they write, each once (sized by memplan). */
static void count_replays(Program *p)
{
    char *seen = xcalloc((size_t)p->g->n_tensors + 1, 1);
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (!in->recompute || in->dead)
            continue;
        p->n_replayed++;
        p->n_replayed_light += in->flops == 0;
        for (int k = 0; k < in->n_writes; k++) {
            Tensor *t = tensor_base(in->writes[k]);
            if (t->id < p->g->n_tensors && !seen[t->id]++)
                p->replay_row_bytes += t->row_bytes;
        }
    }
    free(seen);
}

/* The training program for one policy (with selective, the first full_blocks blocks
 * recomputed in full, and sel_blocks > 0: blocks from sel_blocks on not at all). */
static void compile_pass(Compiled *c, int policy, int full_blocks, int sel_blocks, int jit)
{
    Pipeline x = {.spec = c->spec, .policy = policy, .full_blocks = full_blocks,
                  .sel_blocks = sel_blocks, .jit_cheap = jit};
    run_passes(&x);
    c->graph = x.g;
    c->prog = x.p;
    count_replays(c->prog);
}

void compile_eval(Compiled *c)
{
    Pipeline x = {.spec = c->spec, .eval = 1, .gan_layout = c->spec->gan ? c->graph : NULL};
    run_passes(&x);
    c->eval_graph = x.g;
    c->eval = x.p;
}

void compile_decode(Compiled *c)
{
    Spec *s = decode_spec(c->spec);
    if (!s)
        return;
    Pipeline x = {.spec = s, .eval = 1, .layout = c->eval_graph};
    run_passes(&x);
    c->decode_graph = x.g;
    c->decode = x.p;
    if (x.p->arena_row_bytes > c->eval->arena_row_bytes)
        die("internal: the decode program's arena (%lld bytes a row) is larger than "
            "validation's (%lld)", (long long)x.p->arena_row_bytes,
            (long long)c->eval->arena_row_bytes);
}

/* compile_pass, where blocks are recomputed in full twice: their cheap replays shared
 * through a block's backward, or made again for each reader (recompute.c, jit_cheap);
 * the second where its arena is smaller, else the first (fewer replays). Both compile
 * without --dump-after's dumps; the one kept is compiled again for them. */
void compile_train(Compiled *c, int policy, int full_blocks, int sel_blocks)
{
    int paused = dump_pause(1);
    compile_pass(c, policy, full_blocks, sel_blocks, 0);
    int jit = 0;
    if (policy == RT_RECOMPUTE_FULL || (policy == RT_RECOMPUTE_SELECTIVE && full_blocks > 0)) {
        Graph *g = c->graph;
        Program *p = c->prog;
        compile_pass(c, policy, full_blocks, sel_blocks, 1);
        jit = 1;
        if (c->prog->arena_row_bytes >= p->arena_row_bytes) {
            c->graph = g;   /* (the other's memory is not freed: the compiler frees nothing) */
            c->prog = p;
            jit = 0;
        }
    }
    dump_pause(paused);
    if (dump_wanted())
        compile_pass(c, policy, full_blocks, sel_blocks, jit);
}
