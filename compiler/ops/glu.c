/* glu.c: the gated linear unit over the last axis, act(x[..., :h]) * x[..., h:] (the
 * gate half, then the up half: SwiGLU after a linear of 2h outputs): graph, backward
 * rule and lowering to one runtime call each way (one fused loop over the two halves;
 * the backward reads the input, not the output, so recompute may drop the output).
 * A moe layer's gated shared expert takes its variant (build_gated_glu): one more
 * column, whose sigmoid scales the row's outputs. */
#include "op.h"

/* The linear layer whose output x is (its weight one Muon block): its halves are two
 * (HF's gate_proj and up_proj, which Muon orthogonalizes apart) */
static void split_muon(Graph *g, const Tensor *x)
{
    for (int i = 0; i < g->n_nodes; i++) {
        Param *w = g->nodes[i]->w;
        if (g->nodes[i]->kind == N_LINEAR && g->nodes[i]->out == x && w && w->muon[0] &&
            !w->muon[1] && w->muon[0] % 2 == 0) {
            w->muon[0] /= 2;
            w->muon[1] = w->muon[0];
        }
    }
}

/* [..., 2h (+ 1 gated)] -> [..., h] */
static Tensor *glu_node(GraphCtx *c, const LayerArgs *a, Tensor *x, int gated)
{
    const Layer *l = a->l;
    if (x->rank < 1)
        layer_error(c, l, "glu needs an input with at least one axis, got a scalar");
    int64_t w = x->shape[x->rank - 1] - gated;
    if (w % 2)
        layer_error(c, l, "glu splits its input's last axis in two halves (gate, then up), "
                    "got %s with an odd last axis", shape_str(x->rank, x->shape));
    int64_t shape[RT_MAX_RANK];
    for (int k = 0; k < x->rank; k++)
        shape[k] = x->shape[k];
    shape[x->rank - 1] = w / 2;
    const char *op = gated ? "shared_glu" : "glu";
    Tensor *y = act_tensor(c, l->path, layer_ident(op, a->pfx), x->rank, shape);
    y->origin = a->at;
    y->what = gated ? "the shared expert's glu output times its gate" : "glu output";
    Node *nd = layer_node(c, a, N_GLU, x, y);
    nd->act = l->glu_act;
    nd->gated = gated;
    if (!gated)
        split_muon(c->g, x);
    /* per output element: the activation and the product; backward: the activation's
     * derivative and three products (the gate: one more product each way) */
    add_flops(c, nd, l->path, (2.0 + gated) * y->numel, (5.0 + 2 * gated) * y->numel, 0);
    return y;
}

static void build_glu(GraphCtx *c, const LayerArgs *a)
{
    c->cur = glu_node(c, a, a->x, 0);
}

Tensor *build_gated_glu(GraphCtx *c, const LayerArgs *a, Tensor *x)
{
    return glu_node(c, a, x, 1);
}

static void lower_glu(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t h = y->shape[y->rank - 1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xasprintf("glu (%s)%s", glu_act_names[nd->act],
                        nd->gated ? " times the sigmoid of its gate column" : "");
    SET_CALL(a, nd->gated ? CALL_GLU_GATED_FWD : CALL_GLU_FWD, arg_t(x), arg_t(y),
             arg_rows(y->numel / h), arg_int(h), arg_int(nd->act));
    instr_reads(a, x);
    instr_writes(a, y);
}

/* in[0] = dy, in[1] = x */
static void lower_glu_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    int64_t h = dy->shape[dy->rank - 1];
    int gated = nd->fwd->gated;
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xasprintf("glu (%s)%s backward", glu_act_names[nd->act], gated ? " gated" : "");
    SET_CALL(a, gated ? CALL_GLU_GATED_BWD : CALL_GLU_BWD, arg_t(x), arg_t(dy), arg_t(dx),
             arg_rows(dy->numel / h), arg_int(h), arg_int(nd->act));
    instr_reads(a, x);
    instr_reads(a, dy);
    instr_writes(a, dx);
}

const OpDef op_glu = {.build = build_glu};
const NodeDef node_glu = {"glu", GRAD_NODE, N_GLU_BWD, lower_glu};
const NodeDef node_glu_bwd = {"glu_bwd", GRAD_NONE, 0, lower_glu_bwd};
