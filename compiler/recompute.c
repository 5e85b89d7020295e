/* recompute.c: activation checkpointing by recomputation.
 *
 * Runs on the fused program, before memplan. A "saved" tensor is one the forward
 * pass writes and the backward pass reads. The policy picks saved tensors to drop
 * (R); for each, the forward instruction that produced its value is replayed in the
 * backward pass, just before the first backward instruction that reads it, into a
 * fresh tensor, and the backward reads are redirected there. The memory planner then
 * sees the original die at its last forward use and the copy live only during its
 * layer's backward.
 *
 *   selective  drop what is cheap to recompute and expensive to keep: outputs of
 *              fused elementwise loops (activations, dropout), layernorm and the
 *              attention core (its softmax), when everything they read is kept
 *              anyway; GEMM outputs are kept
 *   full       keep only what crosses a block boundary (a top-level layer, or an
 *              iteration of a top-level repeat); replay each block's forward during
 *              its backward, chains included
 *   selective with full_blocks = k (auto only): the first k blocks as full, the
 *              others as selective: steps of one block's memory between the two
 *   selective with sel_blocks = k (auto only): the first k blocks as selective, the
 *              others keep everything: the steps between none and selective, so
 *              that a batch just past none's replays a few blocks' norms, not all
 *   jit_cheap  (blocks in full) a cheap replay serves one backward instruction; the
 *              next reader replays it again: main.c keeps it where the arena shrinks
 *
 * A replay reads exactly the values the original read (an input overwritten in
 * place since, like a GEMM output its bias epilogue updated, is replayed too), and
 * the kernels are deterministic, so recomputation never changes the numbers. The
 * loss and the input conversion (block -1) are never replayed.
 *
 * A GAN's step (gan.c) is two forward phases, each followed by its backward: D's
 * passes and G's forward, D's backward (then D's update), D's pass on G(z) again, G's
 * backward. A replay lands in the backward phase of its reader, never in a forward
 * phase; one in G's backward of an instruction of the first forward phase is G's (its
 * parameters unchanged until the step's end), never D's (updated in between). */
#include <stdlib.h>
#include <string.h>
#include "ir.h"


typedef struct Memo {
    Tensor *orig;            /* a base tensor */
    int producer;            /* the instruction whose written value it is */
    Tensor *copy;
    int gen;                 /* the backward instruction it was replayed for */
    int phase;               /* and that instruction's phase */
} Memo;

typedef struct Ctx {
    Program *p;
    int n, nf;
    Instr **out;             /* the new backward prefix being built */
    int n_out, cap_out;
    char *saved;             /* by tensor id: read by the backward pass */
    char *drop;              /* by tensor id: in R */
    int *last_writer;        /* by tensor id: last forward writer, or -1 */
    Memo *memo;
    int n_memo, cap_memo;
    int gen;                 /* the backward instruction whose reads are being replayed */
    int phase;               /* and its phase */
    int jit_cheap;           /* memo_usable's rule on */
} Ctx;

/* Whether instruction i is the forward pass's: before the backward's first, or in a
 * GAN's forward phases */
static int forward_at(const Ctx *c, int i)
{
    if (!c->p->g->gan)
        return i < c->nf;
    return c->p->ins[i]->phase == PH_D_FWD || c->p->ins[i]->phase == PH_G_FWD;
}

/* The forward instruction before `at` that last wrote base tensor t, or -1. */
static int writer_before(Ctx *c, Tensor *t, int at)
{
    for (int i = at - 1; i >= 0; i--) {
        Instr *in = c->p->ins[i];
        if (in->dead || !forward_at(c, i))
            continue;
        for (int k = 0; k < in->n_writes; k++)
            if (tensor_base(in->writes[k]) == t)
                return i;
    }
    return -1;
}

static Tensor *fresh(Graph *g, Tensor *t)
{
    Tensor *n = graph_tensor(g, t->kind == T_TEMP ? T_TEMP : T_ACT, xasprintf("%s_re", t->name),
                             t->rank, t->shape);
    n->origin = t->origin;
    n->what = xasprintf("%s, recomputed", t->what ? t->what : t->name);
    n->layout = t->layout;
    n->materialized = 1;
    n->block = -1;
    n->dtype = t->dtype;
    n->keep32 = t->keep32;   /* a replayed statistic is as wide as the one it replaces */
    n->ld = t->ld;
    return n;
}

static Tensor *replay(Ctx *c, int pi, Tensor *want);

/* A tensor holding the value of t as instruction `at` read it. */
static Tensor *value_at(Ctx *c, Tensor *t, int at)
{
    if (t->kind == T_PARAM || t->kind == T_PGRAD || t->kind == T_STATE || t->kind == T_INPUT)
        return t;
    Tensor *b = tensor_base(t);
    int w = writer_before(c, b, at);
    if (w < 0)
        die("recompute: no producer for %s", t->name);
    int intact = c->saved[b->id] && !c->drop[b->id] && c->last_writer[b->id] == w;
    Tensor *v = intact ? b : replay(c, w, b);
    if (t == b)
        return v;
    if (v == b)
        return t;
    /* a view of the replayed storage */
    Tensor *view = graph_tensor(c->p->g, T_ACT, xasprintf("%s_re", t->name), t->rank, t->shape);
    view->alias = v;
    view->origin = t->origin;
    view->what = "view, recomputed";
    view->block = -1;
    view->dtype = t->dtype;
    view->keep32 = t->keep32;
    return view;
}

static void emit(Ctx *c, Instr *in)
{
    if (c->n_out == c->cap_out) {
        c->cap_out = c->cap_out ? 2 * c->cap_out : 32;
        c->out = realloc(c->out, (size_t)c->cap_out * sizeof *c->out);
        if (!c->out)
            die("out of memory");
    }
    c->out[c->n_out++] = in;
}

static void memo_add(Ctx *c, Tensor *orig, int producer, Tensor *copy)
{
    if (c->n_memo == c->cap_memo) {
        c->cap_memo = c->cap_memo ? 2 * c->cap_memo : 32;
        c->memo = realloc(c->memo, (size_t)c->cap_memo * sizeof *c->memo);
        if (!c->memo)
            die("out of memory");
    }
    c->memo[c->n_memo++] = (Memo){orig, producer, copy, c->gen, c->phase};
}

static int cheap(const Instr *in);

/* Is forward instruction pi the loop right after a GEMM that reads the GEMM's
 * product (a bias loop, with an activation maybe)? gemm_epilogues fuses such a loop
 * into its GEMM, the replay's into the replayed GEMM; replayed apart from that GEMM it
 * would add the bias to the stored product, which in 16 bits rounds otherwise than in
 * the GEMM's fp32 accumulator. */
static int after_gemm(const Ctx *c, int pi)
{
    const Instr *o = c->p->ins[pi];
    int g = pi - 1;
    while (g >= 0 && c->p->ins[g]->dead)
        g--;
    if (o->kind != I_EW || g < 0 || c->p->ins[g]->kind != I_GEMM)
        return 0;
    const Instr *gi = c->p->ins[g];
    for (int k = 0; k < o->n_reads; k++)
        for (int w = 0; w < gi->n_writes; w++)
            if (tensor_base(o->reads[k]) == tensor_base(gi->writes[w]))
                return 1;
    return 0;
}

/* A replay that later backward instructions may share: any, or with jit_cheap all
 * but a cheap one in a block recomputed in full (a layernorm, an elementwise loop not
 * fused into a GEMM: after_gemm), which each backward reader then replays again just
 * before it (as selective does), so that a block's layernorm and activation outputs
 * do not stay live through its whole backward while the GEMM outputs replayed with
 * them do: a smaller arena where a block's backward is the peak (gpt_char), more
 * replays for nothing where it is not (GPT-2: the logits). */
static int memo_usable(const Ctx *c, const Memo *m)
{
    const Instr *o = c->p->ins[m->producer];
    if (m->phase != c->phase)   /* (a GAN's: each backward phase replays its own) */
        return 0;
    return !c->jit_cheap || m->gen == c->gen || !cheap(o) || o->block >= c->p->full_blocks ||
           after_gemm(c, m->producer);
}

/* Replays forward instruction pi (once) and returns the copy of `want`. */
static Tensor *replay(Ctx *c, int pi, Tensor *want)
{
    for (int i = 0; i < c->n_memo; i++)
        if (c->memo[i].producer == pi && c->memo[i].orig == want && memo_usable(c, &c->memo[i]))
            return c->memo[i].copy;
    Instr *o = c->p->ins[pi];
    if (o->block < 0)
        die("recompute: %s (block %d) cannot be replayed", o->what, o->block);
    if (c->phase == PH_G_BWD && o->phase == PH_D_FWD && c->p->g->gan)
        for (int k = 0; k < o->n_reads; k++)
            if (o->reads[k]->kind == T_PARAM && o->reads[k]->param->disc)
                die("recompute: %s reads the discriminator's parameters as they were "
                    "before its update", o->what);
    Instr *n = xcalloc(1, sizeof *n);
    *n = *o;
    n->backward = 1;
    n->recompute = 1;
    n->phase = c->phase;
    if (o->what_t)
        n->what_rest = xasprintf("%s (recomputed)", o->what_rest ? o->what_rest : "");
    else
        n->what = xasprintf("%s (recomputed)", o->what);
    n->reads = NULL;
    n->writes = NULL;
    n->n_reads = n->n_writes = 0;
    if (o->kind == I_EW) {
        n->ops = xcalloc((size_t)o->n_ops, sizeof *n->ops);
        memcpy(n->ops, o->ops, (size_t)o->n_ops * sizeof *n->ops);
        for (int k = 0; k < o->n_ops; k++)
            for (int j = 0; j < n->ops[k].n_arg; j++) {
                Operand *a = &n->ops[k].arg[j];
                if (!a->t)
                    continue;
                Tensor *was = a->t;
                a->t = value_at(c, a->t, pi);
                if (n->what_t == was)   /* the description names what the replay reads */
                    n->what_t = a->t;
                n->reads = realloc(n->reads, (size_t)(n->n_reads + 1) * sizeof *n->reads);
                n->reads[n->n_reads++] = a->t;
            }
        for (int k = 0; k < o->n_writes; k++) {
            Tensor *w = o->writes[k], *f = fresh(c->p->g, w);
            for (int q = 0; q < n->n_ops; q++)
                if (n->ops[q].out == w)
                    n->ops[q].out = f;
            if (n->what_t == w)
                n->what_t = f;
            n->writes = realloc(n->writes, (size_t)(n->n_writes + 1) * sizeof *n->writes);
            n->writes[n->n_writes++] = f;
            memo_add(c, tensor_base(w), pi, f);
        }
        n->id = c->p->n_kernels++;
    } else {
        /* the call's arguments (copied with *n) follow: each read the value replayed,
         * each write a fresh tensor, but a write it also reads (a sum it adds to:
         * token_mean's row sums) goes on in the read's replayed value */
        Tensor **vals = xcalloc((size_t)o->n_reads + 1, sizeof *vals);
        for (int k = 0; k < o->n_reads; k++) {
            Tensor *r = o->reads[k], *v = value_at(c, r, pi);
            if (v != r) {
                call_rename(n, r, v);
                if (n->what_t == r)
                    n->what_t = v;
            }
            n->reads = realloc(n->reads, (size_t)(n->n_reads + 1) * sizeof *n->reads);
            n->reads[n->n_reads++] = v;
            vals[k] = v;
        }
        for (int k = 0; k < o->n_writes; k++) {
            int rk = -1;
            for (int q = 0; q < o->n_reads && rk < 0; q++)
                if (o->reads[q] == o->writes[k])
                    rk = q;
            if (rk >= 0) {
                n->writes = realloc(n->writes, (size_t)(n->n_writes + 1) * sizeof *n->writes);
                n->writes[n->n_writes++] = vals[rk];
                memo_add(c, tensor_base(o->writes[k]), pi, vals[rk]);
                continue;
            }
            if (o->writes[k]->kind == T_STATE) {
                /* a replayed batchnorm normalizes again but must not update its
                 * running statistics a second time: it gets NULL for them */
                call_drop(n, o->writes[k]);
                continue;
            }
            Tensor *w = o->writes[k], *f = fresh(c->p->g, w);
            call_rename(n, w, f);
            if (n->what_t == w)
                n->what_t = f;
            n->writes = realloc(n->writes, (size_t)(n->n_writes + 1) * sizeof *n->writes);
            n->writes[n->n_writes++] = f;
            memo_add(c, tensor_base(w), pi, f);
        }
        free(vals);
    }
    emit(c, n);
    for (int i = c->n_memo - 1; i >= 0; i--)   /* (the newest: this replay's) */
        if (c->memo[i].producer == pi && c->memo[i].orig == want)
            return c->memo[i].copy;
    die("recompute: %s does not write %s", o->what, want->name);
}

/* Cheap to recompute: elementwise loops and the calls call.c's table marks cheap
 * (layernorm). Attention is not (its output costs as much as a GEMM's, and it keeps
 * only a log-sum-exp a row anyway). */
static int cheap(const Instr *in)
{
    if (in->kind == I_EW)
        return 1;
    return in->kind == I_CALL && call_cheap(in->call);
}

/* p's block counts under the policy: n_blocks, and the blocks full and selective take. */
static void set_blocks(Program *p, int policy, int full_blocks, int sel_blocks)
{
    p->policy = policy;
    p->n_blocks = 0;
    for (int i = 0; i < p->n_ins; i++)
        if (p->ins[i]->block + 1 > p->n_blocks)
            p->n_blocks = p->ins[i]->block + 1;
    p->full_blocks = policy == RT_RECOMPUTE_FULL       ? p->n_blocks
                     : policy == RT_RECOMPUTE_SELECTIVE ? (full_blocks < p->n_blocks ? full_blocks : p->n_blocks)
                                                        : 0;
    /* blocks from sel_blocks on keep everything (selective only; full takes them all) */
    p->sel_blocks = policy == RT_RECOMPUTE_NONE ? 0 : p->n_blocks;
    if (policy == RT_RECOMPUTE_SELECTIVE && sel_blocks > 0 && sel_blocks < p->n_blocks)
        p->sel_blocks = sel_blocks > p->full_blocks ? sel_blocks : p->full_blocks;
}

/* c->last_writer (each tensor's last forward writer) and c->saved (what the backward
 * pass reads of the forward's activations and temporaries, and what an instruction
 * outside every block, which is never replayed, writes for one inside a block, which
 * may be: the input's conversion to f32 that an affine-free layernorm reads, whose
 * backward reads its output and statistics but not its input). */
static void find_saved(Ctx *c, int nt)
{
    Program *p = c->p;
    for (int i = 0; i < nt; i++)
        c->last_writer[i] = -1;
    for (int i = 0; i < c->n; i++) {
        Instr *in = p->ins[i];
        if (in->dead || !forward_at(c, i))
            continue;
        for (int k = 0; k < in->n_writes; k++)
            c->last_writer[tensor_base(in->writes[k])->id] = i;
    }
    for (int i = 0; i < c->n; i++) {
        Instr *in = p->ins[i];
        if (in->dead || in->block < 0 || !forward_at(c, i))
            continue;
        for (int k = 0; k < in->n_reads; k++) {
            Tensor *b = tensor_base(in->reads[k]);
            if ((b->kind == T_ACT || b->kind == T_TEMP) && b->id < nt && c->last_writer[b->id] >= 0 &&
                p->ins[c->last_writer[b->id]]->block < 0)
                c->saved[b->id] = 1;
        }
    }
    for (int i = 0; i < c->n; i++) {
        Instr *in = p->ins[i];
        if (in->dead || forward_at(c, i))
            continue;
        for (int k = 0; k < in->n_reads; k++) {
            Tensor *b = tensor_base(in->reads[k]);
            if ((b->kind == T_ACT || b->kind == T_TEMP) && b->id < nt && c->last_writer[b->id] >= 0)
                c->saved[b->id] = 1;
        }
    }
}

/* Whether a forward instruction after saved tensor id's last writer, in another
 * block, reads it (full keeps what crosses a block boundary). */
static int crosses_block(const Ctx *c, int id)
{
    Instr *w = c->p->ins[c->last_writer[id]];
    for (int i = c->last_writer[id] + 1; i < c->n; i++) {
        Instr *in = c->p->ins[i];
        if (in->dead || in->block == w->block || !forward_at(c, i))
            continue;
        for (int k = 0; k < in->n_reads; k++)
            if (tensor_base(in->reads[k])->id == id)
                return 1;
    }
    return 0;
}

/* Whether selective may drop saved tensor id: a cheap producer whose inputs are all
 * kept as they were when it ran. */
static int cheap_replay(Ctx *c, int id)
{
    Instr *w = c->p->ins[c->last_writer[id]];
    if (w->block >= c->p->sel_blocks || !cheap(w))
        return 0;
    for (int k = 0; k < w->n_reads; k++) {
        Tensor *r = w->reads[k];
        if (r->kind == T_PARAM || r->kind == T_INPUT)
            continue;
        Tensor *b = tensor_base(r);
        int wb = writer_before(c, b, c->last_writer[id]);
        if (!(c->saved[b->id] && c->last_writer[b->id] == wb && b->id != id))
            return 0;
    }
    return 1;
}

/* c->drop: the saved tensors the policy replays instead of keeping. */
static void choose_drops(Ctx *c, int nt)
{
    Program *p = c->p;
    for (int id = 0; id < nt; id++) {
        if (!c->saved[id])
            continue;
        Instr *w = p->ins[c->last_writer[id]];
        if (w->block < 0)
            continue;           /* the loss's gradient, the input conversion */
        if (w->block < p->full_blocks)
            c->drop[id] = !crosses_block(c, id);
        else
            c->drop[id] = cheap_replay(c, id);
    }
    /* selective: a producer's other saved outputs go with it (layernorm's statistics) */
    if (p->policy == RT_RECOMPUTE_SELECTIVE)
        for (int id = 0; id < nt; id++)
            if (c->drop[id] && p->ins[c->last_writer[id]]->block >= p->full_blocks) {
                Instr *w = p->ins[c->last_writer[id]];
                for (int k = 0; k < w->n_writes; k++)
                    if (c->saved[tensor_base(w->writes[k])->id])
                        c->drop[tensor_base(w->writes[k])->id] = 1;
            }
}

/* Appends in to the instruction list ins[*n] of capacity *cap, growing it. */
static Instr **push_instr(Instr **ins, int *n, int *cap, Instr *in)
{
    if (*n + 1 >= *cap) {
        *cap *= 2;
        ins = realloc(ins, (size_t)*cap * sizeof *ins);
        if (!ins)
            die("out of memory");
    }
    ins[(*n)++] = in;
    return ins;
}

/* Backward instruction i reads the replayed copies of the dropped tensors it reads;
 * the replays it needs are left in c->out. */
static void redirect_reads(Ctx *c, int i, int nt)
{
    Instr *in = c->p->ins[i];
    c->n_out = 0;
    c->gen = i;
    c->phase = in->phase;
    for (int k = 0; k < in->n_reads; k++) {
        Tensor *r = in->reads[k], *b = tensor_base(r);
        if (b->id >= nt || !c->drop[b->id])
            continue;
        Tensor *v = value_at(c, r, i);   /* (its value as the forward pass left it) */
        if (in->kind == I_EW) {
            for (int q = 0; q < in->n_ops; q++)
                for (int j = 0; j < in->ops[q].n_arg; j++)
                    if (in->ops[q].arg[j].t == r)
                        in->ops[q].arg[j].t = v;
        } else {
            call_rename(in, r, v);
        }
        in->reads[k] = v;
    }
}

/* Rebuilds the backward pass with the replays in front of their first readers. */
static void rebuild_backward(Ctx *c, int nt)
{
    Program *p = c->p;
    int n = 0, cap = c->n * 4 + 64;
    Instr **ins = xcalloc((size_t)cap, sizeof *ins);
    for (int i = 0; i < c->n; i++) {
        Instr *in = p->ins[i];
        if (!in->dead && !forward_at(c, i)) {
            redirect_reads(c, i, nt);
            for (int k = 0; k < c->n_out; k++)
                ins = push_instr(ins, &n, &cap, c->out[k]);
        }
        ins = push_instr(ins, &n, &cap, in);
    }
    p->ins = ins;
    p->n_ins = n;
    p->cap_ins = cap;
    for (int i = 0; i < n; i++)
        if (ins[i]->recompute)
            p->recompute_flops += ins[i]->flops;
}

void recompute(Program *p, int policy, int full_blocks, int sel_blocks, int jit_cheap)
{
    set_blocks(p, policy, full_blocks, sel_blocks);
    if (policy == RT_RECOMPUTE_NONE)
        return;
    int nt = p->g->n_tensors;
    Ctx c = {.p = p, .n = p->n_ins, .nf = p->n_forward, .jit_cheap = jit_cheap};
    c.saved = xcalloc((size_t)nt, 1);
    c.drop = xcalloc((size_t)nt, 1);
    c.last_writer = xcalloc((size_t)nt, sizeof *c.last_writer);
    find_saved(&c, nt);
    choose_drops(&c, nt);
    rebuild_backward(&c, nt);
    free(c.saved);
    free(c.drop);
    free(c.last_writer);
    free(c.memo);
    free(c.out);
}
