/* fusion.c: elementwise chains -> one loop each.
 *
 * Two elementwise instructions next to each other in the program, over the same
 * index space, where the second reads what the first computes at the same index,
 * become one loop: the value passes in a register. This is also how a bias and an
 * activation land in a GEMM's epilogue: ops/linear.c emits the bias as an in-place
 * elementwise op right after the GEMM, and the activation that follows fuses into
 * it. A fused value is written to memory only when an instruction outside its
 * loop reads it later (materialization), so most of them never take arena space.
 *
 * Then the loops that library calls can take over: a GEMM's bias (+ activation, or +
 * residual) loop becomes its cuBLASLt epilogue (rt_gemm_bias), the sum of gradient
 * contributions after a layernorm (or rmsnorm) backward becomes that call's addend, and
 * in the backward pass a GELU's backward loop and a bias gradient's column sums join the
 * GEMMs next to them (rt_gemm_dgelu, rt_gemm_dbias). Each matches one exact pattern and
 * otherwise leaves the code alone. */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* The op of A (latest first) whose output is t, or -1. */
static int producer(const Instr *a, const Tensor *t)
{
    for (int k = a->n_ops - 1; k >= 0; k--)
        if (a->ops[k].out == t)
            return k;
    return -1;
}

static int can_fuse(const Instr *a, const Instr *b)
{
    if (a->kind != I_EW || b->kind != I_EW || a->backward != b->backward || a->n != b->n)
        return 0;
    int linked = 0;
    for (int k = 0; k < b->n_ops; k++)
        for (int j = 0; j < b->ops[k].n_arg; j++) {
            const Operand *o = &b->ops[k].arg[j];
            if (!o->t || producer(a, o->t) < 0)
                continue;
            if (ix_moved(o->ix))
                return 0;   /* reads a neighbour's element: needs the whole loop done */
            linked = 1;
        }
    /* b must not overwrite what a reads at another index */
    for (int k = 0; k < a->n_ops; k++)
        for (int j = 0; j < a->ops[k].n_arg; j++) {
            const Operand *o = &a->ops[k].arg[j];
            if (o->t && ix_moved(o->ix) && producer(b, o->t) >= 0)
                return 0;
        }
    return linked;
}

static void merge(Instr *a, Instr *b)
{
    int base = a->n_ops;
    a->ops = realloc(a->ops, (size_t)(a->n_ops + b->n_ops) * sizeof *a->ops);
    if (!a->ops)
        die("out of memory");
    for (int k = 0; k < b->n_ops; k++) {
        EwOp op = b->ops[k];
        for (int j = 0; j < op.n_arg; j++) {
            Operand *o = &op.arg[j];
            if (!o->t)
                o->val += base;          /* already a value of b's loop */
            else {
                int pk = producer(a, o->t);
                if (pk >= 0) {
                    o->t = NULL;
                    o->val = pk;
                }
            }
        }
        a->ops[a->n_ops++] = op;
    }
    char *w = xasprintf("%s + %s", a->what, b->what);
    a->what = w;
    if (strcmp(a->origin, b->origin))
        a->origin = xasprintf("%s + %s", a->origin, b->origin);
    b->dead = 1;
}

/* Where an operand read at `outer` reads once its loop runs inside one that reads its
 * values at `inner`: outer after inner. Fusion composes only where one of them is i
 * itself (remap_index's rule); any other pair is a compiler bug. */
static Index index_compose(Index outer, Index inner)
{
    if (!ix_moved(outer))
        return inner;
    if (!ix_moved(inner))
        return outer;
    die("internal: two moved indices (kinds %d and %d) composed", outer.kind, inner.kind);
}

/* A loop a whose values only the next loop b reads, b reading them all at one index
 * E (a layout change: conv2d's [B, out, HW] -> [out, B, HW]): a's ops can run
 * inside b, each of a's operands read at E instead of i, so a's values are never
 * stored. a must read every operand at its own index, write no parameter gradient,
 * and read nothing b writes; b gives the index E, as the operand of b that reads a's
 * values there (NULL: not this pattern). a's values must not depend on i itself
 * (dropout's draw): inside b, i counts b's elements, and the mask would no longer be
 * the one the backward pass draws again. */
static const Operand *remap_index(const Program *p, const Instr *a, const Instr *b)
{
    if (a->kind != I_EW || b->kind != I_EW || a->backward != b->backward || a->n != b->n)
        return NULL;
    for (int k = 0; k < a->n_ops; k++) {
        if (!a->ops[k].out || a->ops[k].out->kind == T_PGRAD || expr_reads_i(a->ops[k].expr))
            return NULL;
        for (int j = 0; j < a->ops[k].n_arg; j++) {
            const Operand *o = &a->ops[k].arg[j];
            if (o->t && (ix_moved(o->ix) || producer(b, o->t) >= 0))
                return NULL;
        }
    }
    const Operand *E = NULL;
    for (int k = 0; k < b->n_ops; k++)
        for (int j = 0; j < b->ops[k].n_arg; j++) {
            const Operand *o = &b->ops[k].arg[j];
            if (!o->t || producer(a, o->t) < 0)
                continue;
            if (!ix_moved(o->ix) || (E && !index_same(E->ix, o->ix)))
                return NULL;
            E = o;
        }
    if (!E)
        return NULL;
    /* no instruction but b reads a's values */
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead || in == a || in == b)
            continue;
        for (int k = 0; k < a->n_ops; k++) {
            const Tensor *t = tensor_base(a->ops[k].out);
            if (in->kind == I_EW) {
                for (int q = 0; q < in->n_ops; q++)
                    for (int j = 0; j < in->ops[q].n_arg; j++)
                        if (in->ops[q].arg[j].t && tensor_base(in->ops[q].arg[j].t) == t)
                            return NULL;
            } else {
                for (int r = 0; r < in->n_reads; r++)
                    if (tensor_base(in->reads[r]) == t)
                        return NULL;
            }
        }
    }
    return E;
}

/* a's ops, their operands read at E's index, then b's, into b; a dies */
static void remap_merge(Instr *a, Instr *b, const Operand *E)
{
    int na = a->n_ops;
    EwOp *ops = xcalloc((size_t)(na + b->n_ops), sizeof *ops);
    for (int k = 0; k < na; k++) {
        ops[k] = a->ops[k];
        for (int j = 0; j < ops[k].n_arg; j++)
            if (ops[k].arg[j].t)
                ops[k].arg[j].ix = index_compose(ops[k].arg[j].ix, E->ix);
    }
    for (int k = 0; k < b->n_ops; k++) {
        EwOp op = b->ops[k];
        for (int j = 0; j < op.n_arg; j++) {
            Operand *o = &op.arg[j];
            int pk = o->t ? producer(a, o->t) : -1;
            if (!o->t)
                o->val += na;
            else if (pk >= 0) {
                o->t = NULL;
                o->ix = ix_self();
                o->val = pk;
            }
        }
        /* a layout change alone is now a copy: the order is in the operands' index */
        if (op.tag == EW_COPY && op.n_arg == 1 && !op.arg[0].t && op.what)
            op.what = xasprintf("%s (done by the reads above, in that order)", op.what);
        ops[na + k] = op;
    }
    b->ops = ops;
    b->n_ops += na;
    b->what = xasprintf("%s, then %s (one pass: the first reads its operands in the new order)",
                        a->what, b->what);
    if (strcmp(a->origin, b->origin))
        b->origin = xasprintf("%s + %s", a->origin, b->origin);
    a->dead = 1;
}

/* ---- saved values out of their loops ----------------------------------------------- */

static void number_kernels(Program *p);

/* Does a backward instruction read base tensor t? */
static int read_in_backward(const Program *p, const Tensor *t)
{
    for (int i = p->n_forward; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead)
            continue;
        for (int k = 0; k < in->n_reads; k++)
            if (tensor_base(in->reads[k]) == t)
                return 1;
    }
    return 0;
}

/* Can forward loop a be cut after op k: every value of ops 0..k that ops k+1.. use is
 * stored, by its own op (no later op of the loop writes that storage)? */
static int can_split(const Instr *a, int k)
{
    for (int q = k + 1; q < a->n_ops; q++)
        for (int j = 0; j < a->ops[q].n_arg; j++) {
            const Operand *o = &a->ops[q].arg[j];
            if (o->t || o->val > k)
                continue;
            const Tensor *t = a->ops[o->val].out;
            int stored = 0;
            for (int w = 0; w < a->n_writes; w++)
                stored |= a->writes[w] == t;
            if (!t || !stored)
                return 0;
            for (int r = o->val + 1; r < a->n_ops; r++)
                if (a->ops[r].out && tensor_base(a->ops[r].out) == tensor_base((Tensor *)t))
                    return 0;
        }
    return 1;
}

/* " + "-joined whats (or origins) of ops [from, to), distinct neighbours once */
static char *join_ops(const EwOp *ops, int from, int to, int origin)
{
    Buf b = {0};
    const char *last = NULL;
    for (int q = from; q < to; q++) {
        const char *s = origin ? ops[q].origin : ops[q].what;
        if (!s || (last && !strcmp(s, last)))
            continue;
        if (last)
            buf_puts(&b, " + ");
        buf_puts(&b, s);
        last = s;
    }
    return b.s ? b.s : xstrdup("");
}

/* Cut forward loop p->ins[i] after op k: ops k+1.. become the next loop, reading the
 * values they used from memory. */
static void split_loop(Program *p, int i, int k)
{
    Instr *a = p->ins[i], *b = xcalloc(1, sizeof *b);
    *b = *a;
    b->n_ops = a->n_ops - k - 1;
    b->ops = xcalloc((size_t)b->n_ops, sizeof *b->ops);
    for (int q = 0; q < b->n_ops; q++) {
        EwOp op = a->ops[k + 1 + q];
        for (int j = 0; j < op.n_arg; j++) {
            Operand *o = &op.arg[j];
            if (o->t)
                continue;
            if (o->val <= k) {
                o->t = a->ops[o->val].out;
                o->val = 0;
                o->ix = ix_self();
            } else {
                o->val -= k + 1;
            }
        }
        b->ops[q] = op;
    }
    int have_names = 1;
    for (int q = 0; q < a->n_ops; q++)
        have_names &= a->ops[q].what && a->ops[q].origin;
    if (have_names) {
        char *rest = join_ops(a->ops, k + 1, a->n_ops, 0);
        /* no parentheses at the end: a replay's "(recomputed)" follows */
        b->what = xasprintf("%s, from ", rest);
        b->what_t = a->ops[k].out;   /* a replay names the copy it reads (recompute.c) */
        b->what_rest = " as stored for the backward pass";
        free(rest);
        b->origin = join_ops(a->ops, k + 1, a->n_ops, 1);
        a->what = join_ops(a->ops, 0, k + 1, 0);
        a->what_t = NULL;   /* a rest split once already: its ops say it all now */
        a->what_rest = NULL;
        a->origin = join_ops(a->ops, 0, k + 1, 1);
    }
    a->n_ops = k + 1;
    /* reads: each loop's tensor operands; writes: the stored values each one computes */
    Tensor **aw = a->writes;
    int naw = a->n_writes;
    a->reads = b->reads = NULL;
    a->n_reads = b->n_reads = 0;
    a->writes = b->writes = NULL;
    a->n_writes = b->n_writes = 0;
    for (int side = 0; side < 2; side++) {
        Instr *x = side ? b : a;
        for (int q = 0; q < x->n_ops; q++)
            for (int j = 0; j < x->ops[q].n_arg; j++)
                if (x->ops[q].arg[j].t) {
                    x->reads = realloc(x->reads, (size_t)(x->n_reads + 1) * sizeof *x->reads);
                    if (!x->reads)
                        die("out of memory");
                    x->reads[x->n_reads++] = x->ops[q].arg[j].t;
                }
        for (int w = 0; w < naw; w++)
            if (producer(x, aw[w]) >= 0) {
                x->writes = realloc(x->writes, (size_t)(x->n_writes + 1) * sizeof *x->writes);
                if (!x->writes)
                    die("out of memory");
                x->writes[x->n_writes++] = aw[w];
            }
    }
    free(aw);
    if (p->n_ins == p->cap_ins) {
        p->cap_ins = 2 * p->cap_ins + 1;
        p->ins = realloc(p->ins, (size_t)p->cap_ins * sizeof *p->ins);
        if (!p->ins)
            die("out of memory");
    }
    memmove(p->ins + i + 2, p->ins + i + 1, (size_t)(p->n_ins - i - 1) * sizeof *p->ins);
    p->ins[i + 1] = b;
    p->n_ins++;
    p->n_forward++;
}

/* A forward loop that stores a value the backward pass reads (a GELU's input, the
 * biased GEMM output) and then goes on computing from it is cut there: the rest reads
 * the value as stored. The numbers are then those a replay from the stored value gives
 * (in 16 bits too, where the register held it unrounded), so recompute can drop the
 * rest's outputs (the GELU's) and replay them alone. One more read of the value. */
static void split_saved(Program *p)
{
    for (int i = 0; i < p->n_forward; i++) {
        Instr *a = p->ins[i];
        if (a->dead || a->kind != I_EW || a->backward)
            continue;
        for (int k = 0; k + 1 < a->n_ops; k++) {
            Tensor *t = a->ops[k].out;
            int stored = 0;
            for (int w = 0; t && w < a->n_writes; w++)
                stored |= a->writes[w] == t;
            if (stored && producer(a, t) == k && read_in_backward(p, tensor_base(t)) &&
                can_split(a, k)) {
                split_loop(p, i, k);
                break;   /* the new loop, next in line, is looked at in its turn */
            }
        }
    }
    number_kernels(p);
}

/* A GAN's validation program (the generator alone) and the decode program (decode.c)
 * end with what --sample reads: the samples, the logits are stored though no
 * instruction reads them (memplan keeps them to the end). */
static int gan_samples(const Program *p, Tensor *t)
{
    return p->eval && (p->g->gan || p->decode) && tensor_base(t) == tensor_base(p->g->pred);
}

void fuse(Program *p)
{
    for (int i = 0; i < p->n_ins; i++) {
        Instr *a = p->ins[i];
        if (a->dead || a->kind != I_EW)
            continue;
        for (int j = i + 1; j < p->n_ins; j++) {
            if (j == p->n_forward || p->ins[j]->phase != a->phase)
                break;   /* (a GAN's phases are functions of their own) */
            Instr *b = p->ins[j];
            if (b->dead)
                continue;
            if (!can_fuse(a, b))
                break;
            merge(a, b);
        }
    }
    /* then a loop into the next one when that reads its values at a permuted index */
    for (int i = 0; i < p->n_ins; i++) {
        Instr *a = p->ins[i];
        int j = i + 1;
        while (j < p->n_ins && p->ins[j]->dead)
            j++;
        if (a->dead || j >= p->n_ins || (i < p->n_forward) != (j < p->n_forward) ||
            a->phase != p->ins[j]->phase)
            continue;
        const Operand *E = remap_index(p, a, p->ins[j]);
        if (E)
            remap_merge(a, p->ins[j], E);
    }
    /* reads of a fused loop: its tensor operands only */
    for (int i = 0; i < p->n_ins; i++) {
        Instr *a = p->ins[i];
        if (a->dead || a->kind != I_EW)
            continue;
        a->n_reads = 0;
        a->n_writes = 0;
        for (int k = 0; k < a->n_ops; k++) {
            for (int j = 0; j < a->ops[k].n_arg; j++)
                if (a->ops[k].arg[j].t) {
                    a->reads = realloc(a->reads, (size_t)(a->n_reads + 1) * sizeof *a->reads);
                    a->reads[a->n_reads++] = a->ops[k].arg[j].t;
                }
        }
    }
    /* materialize: a value is stored when a later instruction reads its storage */
    for (int i = 0; i < p->n_ins; i++) {
        Instr *a = p->ins[i];
        if (a->dead)
            continue;
        if (a->kind != I_EW) {
            for (int k = 0; k < a->n_writes; k++)
                a->writes[k]->materialized = tensor_base(a->writes[k])->materialized = 1;
            continue;
        }
        a->id = p->n_kernels++;
        for (int k = 0; k < a->n_ops; k++) {
            Tensor *t = a->ops[k].out;
            if (producer(a, t) != k)
                continue;            /* a later op of this loop overwrites it */
            int needed = t->kind == T_PGRAD || gan_samples(p, t);
            for (int j = i + 1; j < p->n_ins && !needed; j++) {
                Instr *b = p->ins[j];
                if (b->dead)
                    continue;
                for (int r = 0; r < b->n_reads; r++)
                    if (tensor_base(b->reads[r]) == tensor_base(t))
                        needed = 1;
            }
            if (needed) {
                t->materialized = tensor_base(t)->materialized = 1;
                a->writes = realloc(a->writes, (size_t)(a->n_writes + 1) * sizeof *a->writes);
                a->writes[a->n_writes++] = t;
            }
        }
    }
    split_saved(p);
}

/* ---- GEMM epilogues ------------------------------------------------------------------ */

/* Are two call arguments the same (the same tensor, count, float or none)? */
static int arg_eq(const Arg *a, const Arg *b)
{
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case ARG_TENSOR:
    case ARG_TRAIN: return a->t == b->t;
    case ARG_FLOAT: return a->f == b->f;
    case ARG_FLOATS:
        return a->i == b->i && !memcmp(a->fs, b->fs, (size_t)a->i * sizeof *a->fs);
    case ARG_NULL: return 1;
    default: return a->i == b->i;
    }
}

static int arg_is_float(const Arg *a, double f) { return a->kind == ARG_FLOAT && a->f == f; }

/* Does an instruction other than a and b read t's storage? */
static int read_elsewhere(const Program *p, const Instr *a, const Instr *b, const Tensor *t)
{
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead || in == a || in == b)
            continue;
        for (int k = 0; k < in->n_reads; k++)
            if (tensor_base(in->reads[k]) == tensor_base((Tensor *)t))
                return 1;
    }
    return 0;
}

/* Fused loops numbered in program order (after a pass removed some). */
static void number_kernels(Program *p)
{
    p->n_kernels = 0;
    for (int i = 0; i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_EW)
            p->ins[i]->id = p->n_kernels++;
}

/* A forward linear layer's GEMM at p->ins[i] (rt_gemm(e, 0, 1, M, N, K, 1.0f, x, K, W,
 * K, 0.0f, C, N) as ops/linear.c makes it) and the fused loop right after it whose op 0
 * adds bias[i % N] to C in place, with at most one more op: that loop; NULL when the
 * pattern is not there. */
static Instr *bias_loop(Program *p, int i)
{
    Instr *g = p->ins[i];
    const Arg *a = g->args;
    /* forward, or the forward replayed in backward (recompute full): the replay must
     * take the same path as the original, or its rounding differs in 16 bits */
    if (g->dead || g->kind != I_GEMM || g->call != CALL_GEMM || (g->backward && !g->recompute) ||
        g->n_writes != 1 || !arg_is_float(&a[10], 0) || !arg_eq(&a[3], &a[12]) ||
        a[3].kind != ARG_INT)
        return NULL;
    int j = i + 1;
    while (j < p->n_ins && p->ins[j]->dead)
        j++;
    if (j >= p->n_ins)
        return NULL;
    Instr *b = p->ins[j];
    Tensor *C = g->writes[0];
    if (b->kind != I_EW || b->backward != g->backward || b->n_ops < 1 || b->n_ops > 2)
        return NULL;
    const EwOp *o0 = &b->ops[0];
    /* in place over C, as ops/linear.c writes it; a replayed loop writes a fresh tensor
     * (recompute.c), which must then be C's only reader */
    if (o0->tag != EW_ADD || o0->n_arg != 2 || o0->arg[0].t != C || ix_moved(o0->arg[0].ix) ||
        !o0->arg[1].t || o0->arg[1].t->kind != T_PARAM || ix_period(o0->arg[1].ix) != a[3].i ||
        !o0->out ||
        (o0->out != C && (!g->recompute || o0->out->numel != C->numel || read_elsewhere(p, g, b, C))))
        return NULL;
    return b;
}

/* GEMM g and its bias loop b become one rt_gemm_bias call: the product C plus the
 * residual R (or NULL), plus the bias, into `keep` (or NULL), then act into Y (or
 * NULL). The loop dies; C is no longer stored unless it is `keep`. */
static void to_gemm_bias(Instr *g, Instr *b, Tensor *keep, Tensor *R, int act, Tensor *Y,
                         const char *what)
{
    Tensor *C = g->writes[0], *bias = b->ops[0].arg[1].t;
    const Arg *a = g->args;
    SET_CALL(g, CALL_GEMM_BIAS, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
             arg_opt(keep), a[12], arg_t(bias), arg_opt(R), arg_epi(act), arg_opt(Y));
    g->what = g->recompute ? xasprintf("%s (recomputed)", what) : xstrdup(what);
    g->origin = b->origin;   /* the linear layer's, and the activation's or the residual's */
    g->reads = realloc(g->reads, (size_t)(g->n_reads + 2) * sizeof *g->reads);
    g->writes = realloc(g->writes, 2 * sizeof *g->writes);
    if (!g->reads || !g->writes)
        die("out of memory");
    g->reads[g->n_reads++] = bias;
    if (R)
        g->reads[g->n_reads++] = R;
    g->n_writes = 0;
    if (keep)
        g->writes[g->n_writes++] = keep;
    if (keep != C)
        C->materialized = 0;
    if (Y)
        g->writes[g->n_writes++] = Y;
    b->dead = 1;
}

void residual_epilogues(Program *p)
{
    Graph *gr = p->g;
    for (int i = 0; i < p->n_ins; i++) {
        Instr *g = p->ins[i], *b = bias_loop(p, i);
        if (!b || b->n_ops != 2)
            continue;
        /* op 1: R + op 0's value, in either order (one float add, commutative) */
        const EwOp *o1 = &b->ops[1];
        int v = o1->n_arg == 2 && !o1->arg[1].t;   /* which operand is op 0's value */
        const Operand *val = &o1->arg[v], *res = &o1->arg[1 - v];
        Tensor *C = g->writes[0], *R = res->t, *Y = o1->out;
        if (o1->tag != EW_ADD || o1->n_arg != 2 || val->t || val->val != 0 || !R ||
            ix_moved(res->ix) || tensor_base(R)->kind != T_ACT || R->numel != C->numel ||
            tensor_half(gr, R) != tensor_half(gr, Y) || tensor_base(R) == tensor_base(C) ||
            tensor_base(R) == tensor_base(Y) || b->n_writes != 1 || b->writes[0] != Y ||
            Y == C || g->block != b->block || read_elsewhere(p, g, b, C))
            continue;   /* not exactly "+ bias + residual", or the product is read too */
        to_gemm_bias(g, b, Y, R, RT_EPI_NONE, NULL,
                     "linear: y = x W^T + b + residual, in the GEMM's epilogue");
    }
    number_kernels(p);
}

void gemm_epilogues(Program *p)
{
    for (int i = 0; i < p->n_ins; i++) {
        Instr *g = p->ins[i], *b = bias_loop(p, i);
        if (!b)
            continue;
        Tensor *C = b->ops[0].out;   /* the biased value: g's product, or a replay's copy */
        /* op 1 (optional): ReLU or GELU tanh of op 0's value */
        int act = RT_EPI_NONE;
        Tensor *Y = NULL;
        if (b->n_ops == 2) {
            const EwOp *o1 = &b->ops[1];
            act = o1->tag != EW_ACT                 ? -1
                  : o1->act == ACT_RELU      ? RT_EPI_RELU
                  : o1->act == ACT_GELU_TANH ? RT_EPI_GELU_TANH
                                             : -1;
            if (act < 0 || o1->n_arg != 1 || o1->arg[0].t || o1->arg[0].val != 0)
                continue;
            Y = o1->out;
        }
        int c_needed = read_elsewhere(p, g, b, C);
        int y_written = 0;
        for (int k = 0; k < b->n_writes; k++)
            y_written |= Y && b->writes[k] == Y;
        if ((Y && !y_written) || (!Y && !c_needed) || (act == RT_EPI_RELU && c_needed))
            continue;   /* cuBLASLt keeps no ReLU pre-activation: the loop stays */
        if (!c_needed)
            C->materialized = 0;
        to_gemm_bias(g, b, c_needed ? C : NULL, NULL, act, Y,
                     act == RT_EPI_RELU         ? "linear: y = relu(x W^T + b), in the GEMM's epilogue"
                     : act == RT_EPI_GELU_TANH ? "linear: y = gelu_tanh(x W^T + b), in the GEMM's epilogue"
                                               : "linear: y = x W^T + b, in the GEMM's epilogue");
    }
    number_kernels(p);
}

/* ---- backward GEMM epilogues ------------------------------------------------------------ */

/* Does a live instruction strictly between i and j write t's storage? (Readers of a
 * GEMM's product in between are ruled out by read_elsewhere: it must be read nowhere
 * but in the loop it joins.) */
static int touched_between(const Program *p, int i, int j, Tensor *t)
{
    Tensor *base = tensor_base(t);
    for (int k = i + 1; k < j; k++) {
        const Instr *in = p->ins[k];
        if (in->dead)
            continue;
        for (int w = 0; w < in->n_writes; w++)
            if (tensor_base(in->writes[w]) == base)
                return 1;
    }
    return 0;
}

/* Is g a backward rt_gemm as ops/linear.c makes it (no epilogue yet)? */
static int gemm_call(const Instr *g)
{
    return !g->dead && g->kind == I_GEMM && g->backward && !g->recompute && g->call == CALL_GEMM;
}

/* dx = dy W (beta 0) into dA, and the later loop that is only "gelu (tanh) backward"
 * of dA at the GELU's input x (dA read nowhere else): one rt_gemm_dgelu in the loop's
 * place; dA is no longer stored. Nothing between may write dy or W. In the loop's
 * place, not the GEMM's: with recompute full, the GELU's input is replayed between the
 * two, and every policy must take the same path (in 16 bits the fallback rounds
 * differently). */
static void dgelu_epilogues(Program *p)
{
    Graph *gr = p->g;
    for (int i = p->n_forward; i < p->n_ins; i++) {
        Instr *g = p->ins[i];
        const Arg *a = g->args;
        if (!g->backward || !gemm_call(g) || g->n_writes != 1 || !arg_is_float(&a[10], 0) ||
            !arg_eq(&a[3], &a[12]))
            continue;
        Tensor *dA = g->writes[0];
        if (dA->alias || dA->kind != T_ACT || a[11].t != dA)
            continue;
        int j = i + 1;   /* dA's first reader */
        for (; j < p->n_ins; j++) {
            const Instr *in = p->ins[j];
            int r = 0;
            for (int k = 0; !in->dead && k < in->n_reads; k++)
                r |= tensor_base(in->reads[k]) == dA;
            if (r)
                break;
        }
        if (j == p->n_ins)
            continue;
        Instr *b = p->ins[j];
        if (b->kind != I_EW || !b->backward || b->n_ops != 1 || b->n_writes != 1)
            continue;
        const EwOp *o = &b->ops[0];
        if (o->tag != EW_ACT_BWD || o->act != ACT_GELU_TANH || o->n_arg != 2 || o->arg[0].t != dA ||
            ix_moved(o->arg[0].ix) || !o->arg[1].t || ix_moved(o->arg[1].ix) || !o->out ||
            b->writes[0] != o->out)
            continue;
        Tensor *x = o->arg[1].t, *D = o->out;
        if (tensor_base(x)->kind != T_ACT || tensor_base(D)->kind != T_ACT ||
            x->numel != dA->numel || D->numel != dA->numel ||
            tensor_half(gr, x) != tensor_half(gr, D) || tensor_half(gr, D) != tensor_half(gr, dA) ||
            tensor_base(x) == tensor_base(D) || read_elsewhere(p, g, b, dA) ||
            touched_between(p, i, j, dA))
            continue;
        int moved = 0;
        for (int k = 0; k < g->n_reads; k++)
            moved |= touched_between(p, i, j, g->reads[k]);
        if (moved)
            continue;
        SET_CALL(g, CALL_GEMM_DGELU, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                 arg_t(D), a[12], arg_t(x));
        g->what = xstrdup("linear backward: dx = dy W, then the GELU (tanh) backward, in the GEMM's epilogue");
        g->origin = xasprintf("%s + %s", g->origin, b->origin);
        g->reads = realloc(g->reads, (size_t)(g->n_reads + 1) * sizeof *g->reads);
        if (!g->reads)
            die("out of memory");
        g->reads[g->n_reads++] = x;
        g->writes[0] = D;
        dA->materialized = 0;
        b->dead = 1;
        p->ins[i] = b;   /* the GEMM moves to the loop's place */
        p->ins[j] = g;
    }
}

/* dW += dy^T x and the bias gradient's column sums of the same dy right after it: one
 * rt_gemm_dbias. Its last argument says whether the call is the bias gradient's first
 * writer in this pass (then, from zeroed gradients, the GPU may store the sum). */
static void dbias_epilogues(Program *p)
{
    for (int i = p->n_forward; i < p->n_ins; i++) {
        Instr *g = p->ins[i];
        const Arg *a = g->args;
        if (!g->backward || !gemm_call(g) || a[0].kind != ARG_INT || a[0].i != 1 ||
            !arg_eq(&a[2], &a[7]))
            continue;
        int j = i + 1;
        while (j < p->n_ins && p->ins[j]->dead)
            j++;
        if (j == p->n_ins)
            continue;
        Instr *s = p->ins[j];
        if (s->kind != I_CALL || !s->backward || s->call != CALL_COLSUM_ADD || s->n_writes != 1)
            continue;
        /* rt_colsum_add(e, dy, db, rows, cols): dy is the GEMM's A, rows its K, cols its M */
        const Arg *c = s->args;
        if (!arg_eq(&c[0], &a[6]) || !arg_eq(&c[2], &a[4]) || !arg_eq(&c[3], &a[2]))
            continue;
        Tensor *db = s->writes[0];
        int fresh = 1;
        for (int k = 0; k < i && fresh; k++)   /* (a chunked head writes in the forward) */
            for (int w = 0; !p->ins[k]->dead && w < p->ins[k]->n_writes; w++)
                fresh &= tensor_base(p->ins[k]->writes[w]) != tensor_base(db);
        SET_CALL(g, CALL_GEMM_DBIAS, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                 a[10], a[11], a[12], c[1], arg_int(fresh));
        g->what = xstrdup("linear backward: dW += dy^T x, and db += column sums of dy in the GEMM's epilogue");
        g->writes = realloc(g->writes, (size_t)(g->n_writes + 1) * sizeof *g->writes);
        if (!g->writes)
            die("out of memory");
        g->writes[g->n_writes++] = db;
        s->dead = 1;
    }
}

void grad_epilogues(Program *p)
{
    dgelu_epilogues(p);
    dbias_epilogues(p);
    number_kernels(p);
}

/* ---- layernorm backward's sum ----------------------------------------------------------- */

/* The backward calls that take an addend: where it and dx are in their arguments. */
static int addend_arg(const Instr *l, int *dx_arg)
{
    if (l->kind != I_CALL)
        return -1;
    switch (l->call) {
    case CALL_LAYERNORM_BWD: *dx_arg = 6; return 5;
    case CALL_RMSNORM_BWD: *dx_arg = 5; return 4;
    }
    return -1;
}

void layernorm_bwd_sums(Program *p)
{
    Graph *gr = p->g;
    for (int i = 0; i < p->n_ins; i++) {
        Instr *l = p->ins[i];
        int xa, ad = l->dead ? -1 : addend_arg(l, &xa);
        if (ad < 0 || l->args[ad].kind != ARG_NULL || l->n_writes < 1)
            continue;
        Tensor *dx = l->writes[0];   /* ops/layernorm.c, ops/rmsnorm.c: dx written first */
        if (l->args[xa].t != dx)
            continue;
        int j = i + 1;
        while (j < p->n_ins && p->ins[j]->dead)
            j++;
        if (j >= p->n_ins)
            continue;
        /* the next instruction: exactly "out = G + dx" (or "dx + G") over dx's elements */
        Instr *s = p->ins[j];
        if (s->kind != I_EW || !s->backward || s->n_ops != 1)
            continue;
        const EwOp *o = &s->ops[0];
        if (o->tag != EW_ADD || o->n_arg != 2 || !o->arg[0].t || !o->arg[1].t ||
            ix_moved(o->arg[0].ix) || ix_moved(o->arg[1].ix))
            continue;
        int k = o->arg[1].t == dx;   /* which operand is dx */
        Tensor *G = o->arg[1 - k].t, *out = o->out;
        if (o->arg[k].t != dx || dx->kind != T_ACT || dx->alias || tensor_base(G) == dx ||
            tensor_base(G)->kind != T_ACT || G->numel != dx->numel || out->numel != dx->numel ||
            tensor_half(gr, G) != tensor_half(gr, dx) || tensor_half(gr, out) != tensor_half(gr, dx) ||
            s->n != dx->numel || s->n_writes != 1 || s->writes[0] != out ||
            read_elsewhere(p, l, s, dx))
            continue;
        Arg a[CALL_MAX_ARGS];
        memcpy(a, l->args, (size_t)l->n_args * sizeof *a);
        a[ad] = arg_t(G);
        a[xa] = arg_t(out);
        call_set(l, l->call, a, l->n_args);
        l->what = xasprintf("%s backward, plus the other gradient contributions (their sum "
                            "folded in)", l->call == CALL_RMSNORM_BWD ? "rmsnorm" : "layernorm");
        l->origin = xasprintf("%s + %s", l->origin, s->origin);
        l->reads = realloc(l->reads, (size_t)(l->n_reads + 1) * sizeof *l->reads);
        if (!l->reads)
            die("out of memory");
        l->reads[l->n_reads++] = G;
        l->writes[0] = out;
        l->inplace = G;   /* read element by element before dx is written: memplan may share */
        dx->materialized = 0;
        s->dead = 1;
    }
    number_kernels(p);
}
