/* residual.c: residual, x + body(x), and the add node it makes, which autodiff.c also
 * uses to sum a tensor's gradient contributions: graph, backward rule (each input's
 * gradient is dy itself) and lowering (one elementwise add, fused later). */
#include <string.h>
#include "op.h"

/* x -> x + body(x), the body keeping x's shape */
static void build_residual(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *at = a->at;
    const char *pfx = a->pfx;
    const char *prefix = a->prefix;
    Tensor *in = x;
    Init saved_init = c->init;
    if (l->has_init)
        c->init = l->init;     /* a container's init applies to its body */
    char *inner = l->name ? xasprintf("%s.", pfx) : xstrdup(prefix);
    build_layers(c, l->body, l->n_body, inner, 1);
    c->init = saved_init;
    Tensor *b = c->cur;
    if (b->numel != in->numel || b->rank != in->rank ||
        memcmp(b->shape, in->shape, sizeof(int64_t) * (size_t)in->rank))
        layer_error(c, l, "the body's output %s does not match its input %s; a residual adds them",
                    shape_str(b->rank, b->shape), shape_str(in->rank, in->shape));
    Tensor *y = act_tensor(c, l->path, layer_ident("residual", l->name ? pfx : b->name), in->rank,
                           in->shape);
    y->origin = at;
    y->what = "x + body(x)";
    Node *nd = layer_node(c, a, N_ADD, in, y);
    nd->in[nd->n_in++] = b;
    add_flops(c, l->path, (double)in->numel, 0);
    c->cur = y;
}

static void lower_add(Program *p, Node *nd)
{
    INSTR_EW(p, nd, nd->backward ? "sum of gradient contributions" : "residual: x + body(x)",
             nd->out, EW_ADD, x_add(x_arg(0), x_arg(1)), opd(nd->in[0]), opd(nd->in[1]));
}

const OpDef op_residual = {.build = build_residual};
const NodeDef node_add = {"add", GRAD_PASS, 0, lower_add};
