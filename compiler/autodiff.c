/* autodiff.c: appends the backward pass to the graph.
 *
 * Reverse mode over the forward nodes. A tensor gets a gradient only when it depends
 * on a parameter (requires_grad), so the first layer never computes d(input).
 * Each consumer of a tensor contributes a gradient; when the walk reaches the
 * tensor's producer (after all its consumers, since nodes are in forward order),
 * the contributions are summed by N_ADD nodes (a residual's input has two).
 * Each forward node kind's rule is its op file's NodeDef.grad (ops/op.h): a backward
 * node of kind NodeDef.bwd, or a pass-through (flatten's view, a residual add's
 * inputs, pos_embedding's input) that contributes the incoming gradient itself,
 * without a copy. Parameter gradients are accumulated (+=)
 * by the backward kernels, which is what `accumulate` and tied weights need;
 * activation gradients are written (=). */
#include <stdlib.h>
#include <string.h>
#include "ops/op.h"

typedef struct Contribs {
    Tensor **t;
    int n;
} Contribs;

static void contribute(Contribs *c, Tensor *g)
{
    c->t = realloc(c->t, (size_t)(c->n + 1) * sizeof *c->t);
    if (!c->t)
        die("out of memory");
    c->t[c->n++] = g;
}

static Tensor *grad_like(Graph *g, Tensor *x, const char *what)
{
    Tensor *d = graph_tensor(g, T_ACT, xasprintf("d_%s", x->name), x->rank, x->shape);
    d->origin = x->origin;
    d->what = what;
    return d;
}

/* The gradient of x: its single contribution, or the sum of them. */
static Tensor *total(Graph *g, Tensor *x, Contribs *c)
{
    if (c->n == 0)
        return NULL;
    /* a consumer's own contribution, named d_x so far, is only a part of d_x: the sum
     * takes the name (the part is often folded into its sum by fusion, and gone) */
    char *dname = xasprintf("d_%s", x->name);
    for (int i = 0; i < c->n && c->n > 1; i++)
        if (!strcmp(c->t[i]->want, dname) && !c->t[i]->alias) {
            char *part = xasprintf("%s_part", dname);
            graph_rename(g, c->t[i], part);
            c->t[i]->what = "gradient, one consumer's part of the sum";
            free(part);
        }
    free(dname);
    Tensor *sum = c->t[0];
    for (int i = 1; i < c->n; i++) {
        Tensor *t = grad_like(g, x, "gradient (sum of its consumers' contributions)");
        Node *n = graph_node(g, N_ADD, x->origin);
        n->backward = 1;
        n->in[n->n_in++] = sum;
        n->in[n->n_in++] = c->t[i];
        n->out = t;
        sum = t;
    }
    c->n = 0;
    return sum;
}

/* A view of dy with x's shape (flatten): same storage. */
static Tensor *view(Graph *g, Tensor *x, Tensor *dy)
{
    Tensor *d = graph_tensor(g, T_ACT, xasprintf("d_%s", x->name), x->rank, x->shape);
    d->origin = x->origin;
    d->what = "gradient (a view)";
    d->alias = dy->alias ? dy->alias : dy;
    return d;
}

/* Does a node's parameter get a gradient in this walk (net: the discriminator's, 1, or
 * the others, 0; -1: every parameter)? Not where train.freeze froze all it has. */
static int differentiated(const Node *n, int net)
{
    return n->w && (net < 0 || n->w->disc == net) &&
           (!n->w->frozen || (n->b && !n->b->frozen));
}

void autodiff_from(Graph *g, Tensor **pred, Tensor **dpred, int n_seed, int net, int phase)
{
    int nt = g->n_tensors;
    char *req = xcalloc((size_t)nt, 1);      /* requires_grad, by tensor id */
    Contribs *con = xcalloc((size_t)nt, sizeof *con);
    int nf = g->n_forward;
    g->phase = phase;

    for (int i = 0; i < nf; i++) {
        Node *n = g->nodes[i];
        if (!n->out)
            continue;
        int r = differentiated(n, net);
        for (int k = 0; k < n->n_in; k++)
            r |= req[n->in[k]->id];
        req[n->out->id] = (char)r;
    }
    for (int k = 0; k < n_seed; k++)
        contribute(&con[pred[k]->id], dpred[k]);

    for (int i = nf - 1; i >= 0; i--) {
        Node *f = g->nodes[i];
        const NodeDef *d = node_defs[f->kind];
        if (d->grad == GRAD_NONE)
            continue;
        Tensor *dy = total(g, f->out, &con[f->out->id]);
        if (!dy)
            continue;               /* a dead branch: nothing downstream reads it */
        Tensor *x = f->in[0];
        int want_dx = req[x->id];
        int want_dw = differentiated(f, net);
        switch (d->grad) {
        case GRAD_VIEW:
            if (want_dx)
                contribute(&con[x->id], view(g, x, dy));
            continue;
        case GRAD_PASS:
            for (int k = 0; k < f->n_in; k++)
                if (req[f->in[k]->id])
                    contribute(&con[f->in[k]->id], dy);
            continue;
        case GRAD_PARAMS:
            want_dx = 0;
            break;
        case GRAD_PASS_PARAMS:
            if (want_dx)
                contribute(&con[x->id], dy);
            want_dx = 0;
            break;
        }
        Tensor *dx = NULL;
        if (want_dx) {
            dx = grad_like(g, x, "gradient");
            contribute(&con[x->id], dx);
        }
        if (!dx && !want_dw)
            continue;               /* no parameter and no input gradient wanted */
        Node *b = graph_node(g, d->bwd, f->origin);
        b->backward = 1;
        b->frozen = f->w && !want_dw && net >= 0;   /* (a GAN's; train.freeze's: lower.c) */
        b->fwd = f;
        b->layer = f->layer;
        b->act = f->act;
        b->p = f->p;
        b->key = f->key;
        memcpy(b->conv, f->conv, sizeof b->conv);
        b->w = f->w;
        b->b = f->b;
        b->in[b->n_in++] = dy;
        b->in[b->n_in++] = x;
        b->in[b->n_in++] = f->out;
        b->out = dx;                /* may be NULL: only parameter gradients */
        b->tmp[0] = f->tmp[0];
        b->tmp[1] = f->tmp[1];
    }
    for (int i = 0; i < nt; i++)
        free(con[i].t);
    free(con);
    free(req);
}

/* The backward pass's FLOPs a sample as autodiff made it (add_flops' parts): a node's
 * input gradient where its backward writes one (or where that is all its backward is: a
 * norm's one kernel), its weight's where the weight is trained (a moe layer's router and
 * experts count as one). No backward runs below the first layer that needs one, none
 * for an input, and none for train.freeze's weights (lower.c drops their GEMMs). */
static int64_t backward_flops(const Graph *g)
{
    double sum = 0;
    for (int i = g->n_forward; i < g->n_nodes; i++) {
        const Node *b = g->nodes[i], *f = b->fwd;
        if (!f)
            continue;
        if (b->out || f->flops_dw == 0)
            sum += f->flops_dx;
        if ((f->w && !f->w->frozen) || (f->kind == N_MOE_DISPATCH && f->b && !f->b->frozen))
            sum += f->flops_dw;
    }
    return (int64_t)sum;
}

void autodiff(Graph *g)
{
    if (g->gan) {   /* (a GAN's backward FLOPs: every layer's whole, as add_flops counts) */
        gan_autodiff(g);
        return;
    }
    autodiff_from(g, &g->pred, &g->dpred, 1, -1, 1);
    g->flops_bwd = backward_flops(g);
}
