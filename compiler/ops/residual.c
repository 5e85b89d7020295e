/* residual.c: residual, x + body(x) or shortcut(x) + body(x) (a ResNet's projection;
 * with drop_path p the body's output dropped a sample at a time in training, dropout.c;
 * [first, last]: the rate rising over a repeat's iterations, ConvNeXt's),
 * and the add node it makes, which autodiff.c also uses to sum a tensor's gradient
 * contributions: graph, backward rule (each input's gradient is dy itself) and lowering
 * (one elementwise add, fused later). */
#include <stdlib.h>
#include <string.h>
#include "op.h"

/* The shortcut's output: its layers applied to x (names under "shortcut.", as
 * spec.c's collect_names gives them), checked against the body's output b. */
static Tensor *build_shortcut(GraphCtx *c, const Layer *l, Tensor *x, const char *inner,
                              const Tensor *b)
{
    char *sc = xasprintf("%sshortcut.", inner);
    c->cur = x;
    build_layers(c, l->shortcut, l->n_shortcut, sc, 0);
    free(sc);
    Tensor *s = c->cur;
    if (s->rank != b->rank || memcmp(s->shape, b->shape, sizeof(int64_t) * (size_t)b->rank))
        layer_error(c, l, "the shortcut's output %s does not match the body's output %s; a "
                    "residual adds them (give the shortcut the body's channels and stride)",
                    shape_str(s->rank, s->shape), shape_str(b->rank, b->shape));
    return s;
}

/* x -> x + body(x), the body keeping x's shape; with a shortcut, shortcut(x) + body(x)
 * (the body first: its parameters come first, as a torchvision block registers its
 * convolutions before its downsample) */
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
        c->init = l->init;     /* a container's init applies to its body and shortcut */
    char *inner = l->name ? xasprintf("%s.", pfx) : xstrdup(prefix);
    build_layers(c, l->body, l->n_body, inner, 1);
    Tensor *b = c->cur;
    double dp = l->drop_path;
    if (l->drop_path_ramp && !c->iter)
        layer_error(c, l, "drop_path [first, last] rises over the iterations of the repeat the "
                    "residual is in: this one is in none (give it one rate)");
    if (l->drop_path_ramp && c->inner_count > 1)   /* (a repeat of one: first) */
        dp += (l->drop_path_end - l->drop_path) * (double)c->inner_iter / (double)(c->inner_count - 1);
    if (dp > 0)
        b = build_drop_path(c, a, b, dp);
    if (l->shortcut)
        in = build_shortcut(c, l, x, inner, b);
    c->init = saved_init;
    if (!l->shortcut && (b->numel != in->numel || b->rank != in->rank ||
                         memcmp(b->shape, in->shape, sizeof(int64_t) * (size_t)in->rank)))
        layer_error(c, l, "the body's output %s does not match its input %s; a residual adds "
                    "them (or give it a \"shortcut\" that maps the input to the body's shape)",
                    shape_str(b->rank, b->shape), shape_str(in->rank, in->shape));
    Tensor *y = act_tensor(c, l->path, layer_ident("residual", l->name ? pfx : b->name), b->rank,
                           b->shape);
    y->origin = at;
    y->what = l->shortcut ? "shortcut(x) + body(x)" : "x + body(x)";
    Node *nd = layer_node(c, a, N_ADD, in, y);
    nd->in[nd->n_in++] = b;
    add_flops(c, nd, l->path, (double)b->numel, 0, 0);
    c->cur = y;
}

static void lower_add(Program *p, Node *nd)
{
    INSTR_EW(p, nd, nd->backward ? "sum of gradient contributions" : "residual: x + body(x)",
             nd->out, EW_ADD, x_add(x_arg(0), x_arg(1)), opd(nd->in[0]), opd(nd->in[1]));
}

const OpDef op_residual = {.build = build_residual};
const NodeDef node_add = {"add", GRAD_PASS, 0, lower_add};
