/* lower.c: nodes -> Program. Each node becomes elementwise ops (I_EW, one op each,
 * fused later), GEMMs (I_GEMM) or runtime calls (I_CALL), as its op file under ops/
 * says (NodeDef.lower); here are the helpers they append with, the walk over the
 * nodes, and the gradient hooks. Every instruction lists the tensors it reads and
 * writes: that is all fusion and memplan look at. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ops/op.h"

Instr *instr_add(Program *p, int kind, const char *origin, int backward)
{
    Instr *in = xcalloc(1, sizeof *in);
    in->kind = kind;
    in->origin = origin;
    in->backward = backward;
    in->block = p->cur_block;
    in->phase = p->cur_phase;
    if (p->n_ins == p->cap_ins) {
        p->cap_ins = p->cap_ins ? 2 * p->cap_ins : 64;
        p->ins = realloc(p->ins, (size_t)p->cap_ins * sizeof *p->ins);
        if (!p->ins)
            die("out of memory");
    }
    p->ins[p->n_ins++] = in;
    return in;
}

void instr_reads(Instr *in, Tensor *t)
{
    if (!t)
        return;
    in->reads = realloc(in->reads, (size_t)(in->n_reads + 1) * sizeof *in->reads);
    in->reads[in->n_reads++] = t;
}

void instr_writes(Instr *in, Tensor *t)
{
    if (!t)
        return;
    in->writes = realloc(in->writes, (size_t)(in->n_writes + 1) * sizeof *in->writes);
    in->writes[in->n_writes++] = t;
}

/* One elementwise op over n = e->B * numel elements: out = expr of the operands
 * args[0 .. nargs), an EW_* op (EW_ACT, EW_ACT_BWD: the node's activation). */
Instr *instr_ew(Program *p, Node *nd, const char *what, Tensor *out, int tag, const Expr *expr,
                const Operand *args, int nargs)
{
    Instr *in = instr_add(p, I_EW, nd->origin, nd->backward);
    in->what = xstrdup(what);
    in->n = out->numel;
    EwOp *op = xcalloc(1, sizeof *op);
    op->tag = tag;
    op->act = tag == EW_ACT || tag == EW_ACT_BWD ? nd->act : 0;
    op->expr = expr;
    op->out = out;
    op->origin = nd->origin;
    op->what = in->what;
    if (nargs > 3)
        die("an elementwise op of %d operands (at most 3)", nargs);
    for (int k = 0; k < nargs; k++) {
        op->arg[k] = args[k];
        instr_reads(in, op->arg[k].t);
    }
    op->n_arg = nargs;
    in->ops = op;
    in->n_ops = 1;
    instr_writes(in, out);
    return in;
}

Tensor *lower_temp(Graph *g, const char *name, int64_t per_row, const char *origin,
                   const char *what)
{
    Tensor *t = graph_tensor(g, T_TEMP, name, 1, &per_row);
    t->origin = origin;
    t->what = what;
    return t;
}

/* A GEMM operand: `rows` rows of B * `cols` (per_row = rows * cols), its layout said. */
Tensor *gemm_temp(Graph *g, const char *name, int64_t rows, int64_t cols, const char *origin,
                  const char *what)
{
    Tensor *t = lower_temp(g, name, rows * cols, origin, what);
    t->layout = xasprintf("[%lld, B*%lld]", (long long)rows, (long long)cols);
    return t;
}

/* A norm's input gradient dx, or where the backward call may write one nobody reads
 * (the norm reads a model input: no gradient flows on). */
Tensor *dx_or_unused(Graph *g, const Node *nd, const Tensor *x, Tensor *dx)
{
    return dx ? dx : lower_temp(g, xasprintf("d_%s_unused", x->name), x->numel, nd->origin,
                                "input gradient nobody reads");
}

/* Of the instructions appended from `from`, after a dropper took some: those whose
 * every write is a temporary of the node (T_TEMP) that nothing left reads go too, until
 * none does (the layout change of dy that fed a frozen bias's row sum). */
static void drop_dead_temps(Program *p, int from)
{
    for (int again = 1; again;) {
        again = 0;
        for (int i = p->n_ins - 1; i >= from; i--) {
            Instr *in = p->ins[i];
            int dead = in->n_writes > 0;
            for (int w = 0; w < in->n_writes && dead; w++) {
                const Tensor *t = in->writes[w];
                dead = t->kind == T_TEMP;
                for (int j = from; j < p->n_ins && dead; j++)
                    for (int r = 0; r < p->ins[j]->n_reads && dead; r++)
                        dead = j == i || tensor_base(p->ins[j]->reads[r]) != t;
            }
            if (!dead)
                continue;
            memmove(&p->ins[i], &p->ins[i + 1], (size_t)(p->n_ins - i - 1) * sizeof *p->ins);
            p->n_ins--;
            again = 1;
        }
    }
}

/* A frozen backward node (a GAN's discriminator under the generator's loss) computes
 * its input's gradient only: of the instructions its lowering appended from `from`,
 * those that write parameter gradients alone go, and a call that writes them besides
 * its input's gradient gets NULL there (such calls take NULL for a gradient not
 * wanted: batchnorm, layernorm). */
static void drop_frozen_grads(Program *p, int from)
{
    int n = from, dropped = 0;
    for (int i = from; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        int other = 0;
        for (int w = 0; w < in->n_writes; w++)
            other |= in->writes[w]->kind != T_PGRAD;
        if (!other) {
            dropped = 1;
            continue;            /* dW, db: not wanted */
        }
        int k = 0;
        for (int w = 0; w < in->n_writes; w++) {
            if (in->writes[w]->kind == T_PGRAD) {
                if (in->kind == I_EW)
                    die("%s: a fused loop writes a frozen parameter's gradient", in->origin);
                call_drop(in, in->writes[w]);
            } else
                in->writes[k++] = in->writes[w];
        }
        in->n_writes = k;
        p->ins[n++] = in;
    }
    p->n_ins = n;
    if (dropped)
        drop_dead_temps(p, from);
}

/* Of the instructions appended from `from`, those that write only gradients of
 * parameters train.freeze froze go (a frozen weight's dW GEMM). One that writes such a
 * gradient besides what is wanted (layernorm's dx with its dgamma) keeps writing it,
 * into e->sink (place_frozen_grads): nothing reads it. */
static void drop_freeze_grads(Program *p, int from)
{
    int n = from;
    for (int i = from; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        int wanted = in->n_writes == 0;
        for (int w = 0; w < in->n_writes; w++)
            wanted |= in->writes[w]->kind != T_PGRAD || !in->writes[w]->param->frozen;
        if (wanted)
            p->ins[n++] = in;
    }
    if (n < p->n_ins) {
        p->n_ins = n;
        drop_dead_temps(p, from);
    }
}

/* One node's instructions, appended to the program: its op file's lowering (a view
 * has none). */
static void lower_node(Program *p, Node *nd)
{
    const NodeDef *d = node_defs[nd->kind];
    int from = p->n_ins;
    if (d->lower)
        d->lower(p, nd);
    if (nd->frozen)
        drop_frozen_grads(p, from);
    else
        drop_freeze_grads(p, from);
}

static Program *lower_prog(Graph *g, int eval)
{
    Program *p = xcalloc(1, sizeof *p);
    p->g = g;
    p->eval = eval;
    p->decode = g->decode_T > 0;
    p->kprefix = p->decode ? "kd" : eval ? "ke" : "k";
    if (g->gan) {   /* phase by phase (gan.c): the nodes were made in another order */
        for (int ph = 0; ph < PH__COUNT; ph++)
            for (int i = 0; i < g->n_nodes; i++)
                if (g->nodes[i]->phase == ph) {
                    p->cur_block = g->nodes[i]->block;
                    p->cur_phase = ph;
                    lower_node(p, g->nodes[i]);
                }
        p->n_forward = 0;
        while (p->n_forward < p->n_ins && p->ins[p->n_forward]->phase == PH_D_FWD)
            p->n_forward++;
        return p;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        if (i == g->n_forward)
            p->n_forward = p->n_ins;
        p->cur_block = g->nodes[i]->block;
        p->cur_phase = g->nodes[i]->phase;
        int loss = g->nodes[i]->kind == N_LOSS || g->nodes[i]->kind == N_MOE_AUX;
        if (!(p->decode && loss))   /* (decode: the logits are its output) */
            lower_node(p, g->nodes[i]);
    }
    if (g->n_forward == g->n_nodes)
        p->n_forward = p->n_ins;
    return p;
}

Program *lower(Graph *g) { return lower_prog(g, 0); }
Program *lower_eval(Graph *g) { return lower_prog(g, 1); }

/* Before the first backward instruction that writes a parameter's gradient, tell the
 * runtime it is about to be written (rt_grad_begin: zero2 on GPUs backs that part of
 * the gradient region with memory only from here on; elsewhere it returns at once;
 * parameters first written by one instruction and adjacent in the region are one
 * call), and after the last one that the gradient is final (rt_grad_ready:
 * data-parallel training starts reducing it while the rest of the backward pass
 * runs; a world of one returns at once). */
static Instr *hook(const Instr *at, char *what, int call, int64_t off, int64_t n)
{
    Instr *h = xcalloc(1, sizeof *h);
    h->kind = I_CALL;
    h->backward = at->backward;
    h->phase = at->phase;
    const char *origin = at->origin;
    h->block = -1;
    h->origin = origin;
    h->what = what;
    SET_CALL(h, call, arg_int(off), arg_int(n));
    return h;
}

/* The gradients of frozen parameters that an instruction still writes (drop_freeze_grads)
 * go to e->sink, each its own place there, since the gradient region ends at
 * trainable_floats (graph.c). The small ones of norm layers, in practice. */
void place_frozen_grads(Program *p)
{
    Graph *g = p->g;
    g->sink_floats = 0;
    for (int k = 0; k < g->n_params; k++)
        g->params[k]->sink_offset = -1;
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        for (int w = 0; !in->dead && w < in->n_writes; w++) {
            Param *pa = in->writes[w]->kind == T_PGRAD ? in->writes[w]->param : NULL;
            if (pa && pa->frozen && pa->sink_offset < 0) {
                pa->sink_offset = g->sink_floats;
                g->sink_floats += (param_extent(pa) + 15) / 16 * 16;
            }
        }
    }
}

void add_grad_hooks(Program *p)
{
    Graph *g = p->g;
    int *first = xcalloc((size_t)g->n_params + 1, sizeof *first);
    int *last = xcalloc((size_t)g->n_params + 1, sizeof *last);
    for (int k = 0; k < g->n_params; k++)
        first[k] = last[k] = -1;
    for (int i = 0; i < p->n_ins; i++) {   /* (a chunked head's loss: in the forward) */
        Instr *in = p->ins[i];
        if (in->dead)
            continue;
        for (int w = 0; w < in->n_writes; w++)
            if (in->writes[w]->kind == T_PGRAD && !in->writes[w]->param->frozen)
                for (int k = 0; k < g->n_params; k++)
                    if (g->params[k] == in->writes[w]->param) {
                        if (first[k] < 0)
                            first[k] = i;
                        last[k] = i;
                    }
    }
    Instr **ins = xcalloc((size_t)(p->n_ins + 2 * g->n_params) + 1, sizeof *ins);
    int n = 0, n_forward = p->n_forward;
    for (int i = 0; i < p->n_ins; i++) {
        if (i == p->n_forward)
            n_forward = n;
        /* the parameters first written here, as runs adjacent in the region (parameters
         * are laid out in order) */
        for (int k = 0; k < g->n_params; k++) {
            if (first[k] != i || (k > 0 && first[k - 1] == i &&
                                  g->params[k - 1]->offset + param_extent(g->params[k - 1]) ==
                                      g->params[k]->offset))
                continue;
            int j = k;
            while (j + 1 < g->n_params && first[j + 1] == i &&
                   g->params[j]->offset + param_extent(g->params[j]) == g->params[j + 1]->offset)
                j++;
            Param *a = g->params[k], *b = g->params[j];
            char *what = j == k ? xasprintf("%s's gradient is written from here on", a->name)
                         : j == k + 1 ? xasprintf("the gradients of %s and %s are written from here on",
                                                  a->name, b->name)
                                      : xasprintf("the gradients of %s to %s are written from here on",
                                                  a->name, b->name);
            ins[n++] = hook(p->ins[i], what, CALL_GRAD_BEGIN, a->offset,
                            b->offset + param_extent(b) - a->offset);
        }
        ins[n++] = p->ins[i];
        for (int k = 0; k < g->n_params; k++) {
            if (last[k] != i)
                continue;
            Param *pa = g->params[k];
            ins[n++] = hook(p->ins[i], xasprintf("%s's gradient is final", pa->name),
                            CALL_GRAD_READY, pa->offset, param_extent(pa));
        }
    }
    if (p->n_forward == p->n_ins)
        n_forward = n;
    free(p->ins);
    p->ins = ins;
    p->n_forward = n_forward;
    p->n_ins = n;
    p->cap_ins = n;
    free(first);
    free(last);
}
