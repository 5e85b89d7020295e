/* lora.c: train.lora, low-rank adapters (LoRA, as PEFT's LoraConfig computes them). Each
 * targeted weight W [out, in] of a linear layer or an attention projection gets A [rank,
 * in] (uniform in +-1/sqrt(in), PEFT's kaiming_uniform(a = sqrt(5))) and B [out, rank]
 * (zeros), named after W ("h.0.attn.qkv.lora_A.weight"), and its output y = x W^T (+ b)
 * becomes y + (x A^T) B^T * (alpha / rank, or with rslora alpha / sqrt(rank)); then
 * every parameter but the adapters (and lora.train's) is frozen (train.freeze's
 * machinery: no gradient, no optimizer state).
 * The adapters are ordinary linear, scale and add nodes, so every pass and both backends
 * take them as they are. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "op.h"

const Layer *spec_head(const Spec *s)
{
    for (int i = s->n_layers - 1; i >= 0; i--)
        if (s->layers[i]->op == OP_LINEAR)
            return s->layers[i];
    return NULL;
}

/* Whether lora adapts W, the weight of the layer being built (its own, not a tie's) */
static int targeted(GraphCtx *c, const LayerArgs *a, Param *w)
{
    const rt_train_config *t = &c->s->train;
    if (!t->has_lora || w->rank != 2 || c->g->share_params)
        return 0;
    if (a->l != spec_head(c->s))
        w->lora = 3;           /* (one lora could adapt: lora_freeze's suggestions) */
    if (!t->lora_targets[0])   /* every linear and projection but the head */
        return a->l != spec_head(c->s);
    int hit = matches_any(t->lora_targets, w->name);
    if (hit && a->l == spec_head(c->s))
        error_at(c->s->train_file, "$.train.lora.targets", "'%s' is the model's head (its "
                 "last linear layer): lora does not adapt it; train it whole with lora.train",
                 w->name);
    return hit;
}

/* lora.dropout: x through a dropout node of its own (its mask keyed by W's name, which
 * tells a repeat's iterations apart), the input A sees; x itself without it */
static Tensor *lora_dropout(GraphCtx *c, const LayerArgs *a, Tensor *x, const Param *w)
{
    double p = c->s->train.lora_dropout;
    if (p <= 0)
        return x;
    Tensor *xd = act_tensor(c, a->l->path, layer_ident("lora_dropout", w->name), x->rank,
                            x->shape);
    xd->origin = a->at;
    xd->what = "LoRA: dropout of the adapted layer's input";
    Node *nd = layer_node(c, a, N_DROPOUT, x, xd);
    nd->p = p;
    char *key = xasprintf("lora %s", w->name);
    nd->key = rt_fnv1a(key, strlen(key));
    free(key);
    c->g->has_dropout = 1;
    return xd;
}

/* base, a linear node of the layer being built (x -> y, weight W): y itself, or with W
 * adapted the sum y + B(A(x)) * alpha / rank, for the layer to go on with */
Tensor *lora_adapt(GraphCtx *c, const LayerArgs *a, Node *base)
{
    Graph *g = c->g;
    Param *w = base->w;
    Tensor *x = base->in[0], *y = base->out;
    if (!w || a->l->tie || !targeted(c, a, w))   /* (a tied head: the embedding's) */
        return y;
    const rt_train_config *t = &c->s->train;
    const char *path = a->l->path;
    int64_t r = t->lora_rank, in = w->shape[1], out = w->shape[0];
    char *pfx = xstrdup(w->name);
    pfx[strlen(pfx) - strlen(".weight")] = 0;
    gemm_dim(g, "$.train.lora.rank", "lora", "rank", r);
    int64_t shp[RT_MAX_RANK];
    memcpy(shp, y->shape, sizeof shp);
    shp[y->rank - 1] = r;
    Tensor *ta = act_tensor(c, path, layer_ident("lora_a", pfx), y->rank, shp);
    Tensor *tb = act_tensor(c, path, layer_ident("lora_b", pfx), y->rank, y->shape);
    Tensor *ts = act_tensor(c, path, layer_ident("lora_scaled", pfx), y->rank, y->shape);
    Tensor *ty = act_tensor(c, path, layer_ident("lora_out", pfx), y->rank, y->shape);
    ta->origin = tb->origin = ts->origin = ty->origin = a->at;
    ta->what = "LoRA: x A^T";
    tb->what = "LoRA: x A^T B^T";
    ts->what = "LoRA: x A^T B^T alpha / rank";
    ty->what = "the adapted layer's output: x W^T (+ b) + LoRA's";
    Node *na = layer_node(c, a, N_LINEAR, lora_dropout(c, a, x, w), ta);
    na->w = add_param(g, xasprintf("%s.lora_A", pfx), "weight", 2, (int64_t[]){r, in},
                      RT_INIT_UNIFORM, 1.0 / sqrt((double)in), path);
    Node *nb = layer_node(c, a, N_LINEAR, ta, tb);
    nb->w = add_param(g, xasprintf("%s.lora_B", pfx), "weight", 2, (int64_t[]){out, r},
                      RT_INIT_CONST, 0.0, path);
    na->w->lora = nb->w->lora = 1;
    w->lora = 2;
    Node *ns = layer_node(c, a, N_ACT, tb, ts);
    ns->act = ACT_SCALE;
    ns->p = rt_lora_scale(t);   /* (PEFT's scaling, a float factor) */
    Node *nd = layer_node(c, a, N_ADD, y, ty);
    nd->in[nd->n_in++] = ts;
    double rows = (double)(x->numel / in);
    add_flops(c, na, path, 2 * rows * in * r, 2 * rows * in * r, 2 * rows * in * r);
    add_flops(c, nb, path, 2 * rows * r * out, 2 * rows * r * out, 2 * rows * r * out);
    add_flops(c, ns, path, (double)y->numel, (double)y->numel, 0);
    add_flops(c, nd, path, (double)y->numel, 0, 0);
    free(pfx);
    return ty;
}

static int adaptable(const Param *p) { return p->lora >= 2; }
static int own(const Param *p) { return p->lora != 1; }

/* After the graph: lora's patterns checked, and every parameter frozen but the adapters
 * and lora.train's */
void lora_freeze(Graph *g)
{
    const rt_train_config *t = &g->spec->train;
    if (!t->has_lora)
        return;
    if (t->lora_targets[0])
        check_patterns(g, "$.train.lora.targets", t->lora_targets, adaptable,
                       "weight lora adapts (a linear layer's or an attention projection's, "
                       "not the head's)");
    int adapted = 0;
    for (int k = 0; k < g->n_params; k++)
        adapted += g->params[k]->lora == 2;
    if (!adapted)
        error_at(g->spec->train_file, "$.train.lora", "lora adapts the weights of linear "
                 "layers and attention projections but the head's; this model has none");
    if (t->lora_train[0])
        check_patterns(g, "$.train.lora.train", t->lora_train, own, "parameter");
    for (int k = 0; k < g->n_params; k++) {
        Param *p = g->params[k];
        p->frozen = p->lora != 1 && !matches_any(t->lora_train, p->name);
    }
}
