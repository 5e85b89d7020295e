/* convert.c: a model input converted to f32 (x * scale + shift) once for the layers
 * that read floats (and, in 16-bit training, for an mse target): the node, not
 * differentiated, and its lowering (one elementwise op, fused later). */
#include "op.h"

/* A new tensor `name`: model input k converted to f32 (x * scale + shift), and its node. */
Tensor *convert_input(GraphCtx *c, int k, const char *name, const char *what)
{
    const InputSpec *in = &c->s->inputs[k];
    Tensor *raw = c->g->inputs[k];
    Tensor *t = act_tensor(c, in->path, name, raw->rank, raw->shape);
    t->origin = in->path;
    t->what = what;
    Node *n = graph_node(c->g, N_CONVERT, in->path);
    n->in[n->n_in++] = raw;
    n->out = t;
    n->scale = in->has_scale ? in->scale : 1.0;
    n->shift = in->has_shift ? in->shift : 0.0;
    if (in->ch_scale) {   /* per channel: the first axis */
        n->ch_scale = in->ch_scale;
        n->ch_shift = in->ch_shift;
        n->ch_n = in->shape[0];
        n->ch_run = raw->numel / in->shape[0];
    }
    return t;
}

/* The f32 view of model input k for the layers, converting raw integers (x * scale +
 * shift) once. With mixed precision an fp32 input is converted too: the layers read
 * act_t. */
Tensor *input_f32(GraphCtx *c, int k)
{
    c->as_float[k] = 1;
    if (c->converted[k])
        return c->converted[k];
    const InputSpec *in = &c->s->inputs[k];
    if (in->dtype == RT_F32 && !in->has_scale && !in->has_shift && !c->g->act16)
        return c->converted[k] = c->g->inputs[k];
    return c->converted[k] = convert_input(c, k, xasprintf("%s_f32", in->name), "input as f32");
}

/* x * scale[c] + shift[c] for each element's channel c, each step where some channel
 * needs it */
static const Expr *per_channel(const Node *nd)
{
    int scaled = 0, shifted = 0;
    for (int64_t k = 0; k < nd->ch_n; k++) {
        scaled |= nd->ch_scale[k] != 1.0;
        shifted |= nd->ch_shift[k] != 0.0;
    }
    const Expr *e = x_cast(x_arg(0));
    if (scaled || shifted)
        e = x_mul(e, x_pick(nd->ch_scale, nd->ch_run, nd->ch_n));
    if (shifted)
        e = x_add(e, x_pick(nd->ch_shift, nd->ch_run, nd->ch_n));
    return e;
}

static void lower_convert(Program *p, Node *nd)
{
    if (nd->ch_scale) {
        INSTR_EW(p, nd, "input to f32, scaled and shifted by channel", nd->out, EW_OTHER,
                 per_channel(nd), opd(nd->in[0]));
        return;
    }
    /* x * scale + shift, each step where it changes x (but a scale of 1 is kept before a
     * shift: the loops generated so far read that way) */
    const Expr *e = x_cast(x_arg(0));
    if (nd->shift != 0.0 || nd->scale != 1.0)
        e = x_mul(e, x_const(nd->scale));
    if (nd->shift != 0.0)
        e = x_add(e, x_const(nd->shift));
    INSTR_EW(p, nd, "input to f32", nd->out, EW_OTHER, e, opd(nd->in[0]));
}

const NodeDef node_convert = {"convert", GRAD_NONE, 0, lower_convert};
