/* repeat.c: repeat, its body built count times (each iteration of a top-level repeat a
 * block of its own, for recomputation; names and dropout keys carry the iteration). It
 * makes no node of its own. */
#include "op.h"

/* the body built count times */
static void build_repeat(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    const char *pfx = a->pfx;
    const char *prefix = a->prefix;
    Init saved_init = c->init;
    if (l->has_init)
        c->init = l->init;
    const char *outer = c->iter;
    int64_t outer_it = c->inner_iter, outer_n = c->inner_count;
    for (int64_t it = 0; it < l->count; it++) {
        if (top_level(c, prefix))
            g->cur_block++;     /* each iteration of a top-level repeat is a block */
        char *inner = l->name ? xasprintf("%s.%lld.", pfx, (long long)it)
                              : xasprintf("%s%lld.", prefix, (long long)it);
        c->iter = outer ? xasprintf("%s.%lld", outer, (long long)it) : xasprintf("%lld", (long long)it);
        c->inner_iter = it, c->inner_count = l->count;
        build_layers(c, l->body, l->n_body, inner, 0);
    }
    c->iter = outer;
    c->inner_iter = outer_it, c->inner_count = outer_n;
    c->init = saved_init;
}

const OpDef op_repeat = {.build = build_repeat};
