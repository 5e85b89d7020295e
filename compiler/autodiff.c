/* autodiff.c: appends the backward pass to the graph.
 *
 * Reverse mode over the forward nodes. A tensor gets a gradient only when it depends
 * on a parameter (requires_grad), so the first layer never computes d(input).
 * Parameter gradients are accumulated (+=) by the backward kernels, which is what
 * `accumulate` needs; activation gradients are written (=). */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

static Tensor *grad_like(Graph *g, Tensor *x)
{
    Tensor *d = graph_tensor(g, T_ACT, xasprintf("d_%s", x->name), x->rank, x->shape);
    d->origin = x->origin;
    d->what = "gradient";
    return d;
}

void autodiff(Graph *g)
{
    int nt = g->n_tensors;
    char *req = xcalloc((size_t)nt, 1);      /* requires_grad, by tensor id */
    Tensor **grad = xcalloc((size_t)nt, sizeof *grad);

    for (int i = 0; i < g->n_forward; i++) {
        Node *n = g->nodes[i];
        if (!n->out)
            continue;
        int r = n->w != NULL;
        for (int k = 0; k < n->n_in; k++)
            r |= req[n->in[k]->id];
        req[n->out->id] = (char)r;
    }
    grad[g->pred->id] = g->dpred;

    for (int i = g->n_forward - 1; i >= 0; i--) {
        Node *f = g->nodes[i];
        if (f->kind == N_LOSS || f->kind == N_CONVERT)
            continue;
        Tensor *dy = grad[f->out->id];
        if (!dy)
            continue;               /* a dead branch: nothing downstream reads it */
        Tensor *x = f->in[0];
        Tensor *dx = NULL;
        if (req[x->id]) {
            if (grad[x->id])
                die("tensor %s has two consumers; gradient accumulation arrives with residual",
                    x->name);
            if (f->kind == N_FLATTEN) {
                dx = graph_tensor(g, T_ACT, xasprintf("d_%s", x->name), x->rank, x->shape);
                dx->origin = x->origin;
                dx->what = "gradient (a view)";
                dx->alias = dy->alias ? dy->alias : dy;
                grad[x->id] = dx;
                continue;
            }
            dx = grad_like(g, x);
            grad[x->id] = dx;
        } else if (f->kind == N_FLATTEN) {
            continue;
        }
        int kind;
        switch (f->kind) {
        case N_LINEAR: kind = N_LINEAR_BWD; break;
        case N_CONV2D: kind = N_CONV2D_BWD; break;
        case N_MAXPOOL: kind = N_MAXPOOL_BWD; break;
        case N_AVGPOOL: kind = N_AVGPOOL_BWD; break;
        case N_ACT: kind = N_ACT_BWD; break;
        case N_DROPOUT: kind = N_DROPOUT_BWD; break;
        case N_LAYERNORM: kind = N_LAYERNORM_BWD; break;
        default: unreachable();
        }
        if (!dx && !f->w)
            continue;               /* no parameter and no input gradient wanted */
        Node *b = graph_node(g, kind, f->origin);
        b->backward = 1;
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
    free(req);
    free(grad);
}
