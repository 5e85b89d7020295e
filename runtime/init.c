/* init.c: the parameters' initial values (rt_init_params), from the model's init rules
 * and the seed, on the thread pool.
 *
 * One seeded stream is drawn through the tensors in model order (a uniform value takes
 * one draw, a normal two, a constant none): the table's order, or rt_model.init_order's
 * where train.freeze laid the frozen tensors last, so freezing changes no value. The
 * elements are cut into one contiguous part per thread; each part jumps the stream to
 * each tensor's first draw it fills (rt_rng_jump), so the fill has the one-thread bits
 * on any number of threads (GPT-2's 124M normal values: 3 s on one core). train.lora's
 * adapters can be drawn alone, as a whole model's draws would give them (--init of a
 * model's weights without them). */
#include <stdlib.h>
#include <string.h>
#include "rt.h"

typedef struct InitCtx {
    const rt_model *m;
    float *params;
    rt_rng seed;          /* the stream's start */
    int64_t *first;       /* [n_params + 1]: element index where each tensor starts */
    int64_t *draws;       /* [n_params]: draws before each tensor, in model order */
} InitCtx;

static int init_draws(int init) { return init == RT_INIT_NORMAL ? 2 : init == RT_INIT_UNIFORM; }

static void init_part(void *ctx, int64_t lo, int64_t hi)
{
    const InitCtx *c = ctx;
    int i = 0;
    while (c->first[i + 1] <= lo)
        i++;
    for (int64_t at = lo; at < hi; i++) {
        const rt_param *p = &c->m->params[i];
        float *w = c->params + p->offset;
        int64_t k0 = at - c->first[i], k1 = (hi < c->first[i + 1] ? hi : c->first[i + 1]) - c->first[i];
        rt_rng rng = c->seed;
        rt_rng_jump(&rng, (uint64_t)(c->draws[i] + k0 * init_draws(p->init)));
        for (int64_t k = k0; k < k1; k++) {
            switch (p->init) {
            case RT_INIT_UNIFORM: w[k] = (float)((2.0 * rt_rng_uniform(&rng) - 1.0) * p->init_a); break;
            case RT_INIT_NORMAL: w[k] = (float)(rt_rng_normal(&rng) * p->init_a); break;
            case RT_INIT_CONST: w[k] = p->init_a; break;
            default: rt_die("bad init %d", p->init);
            }
        }
        at = c->first[i] + k1;
    }
}

void rt_init_state(const rt_model *m, float *state)
{
    for (int i = 0; i < m->n_state; i++) {
        const rt_param *p = &m->state[i];
        for (int64_t j = 0; j < p->numel; j++)
            if (p->dtype == RT_I64) {
                int64_t v = (int64_t)p->init_a;
                memcpy(state + p->offset + 2 * j, &v, sizeof v);
            } else
                state[p->offset + j] = p->init_a;
    }
}

/* The tensors rt_param.lora marks (adapters = 1) or all of them (0): each its values of
 * the whole stream (a tensor left out takes no element of the parts, and its draws are
 * jumped over). */
static void init_some(rt_pool *pool, const rt_model *m, float *params, uint64_t seed,
                      int adapters)
{
    InitCtx c = {m, params, {{0}}, rt_xmalloc((size_t)(m->n_params + 1) * sizeof(int64_t)),
                 rt_xmalloc((size_t)(m->n_params + 1) * sizeof(int64_t))};
    rt_rng_seed(&c.seed, seed);
    c.first[0] = 0;
    for (int i = 0; i < m->n_params; i++)
        c.first[i + 1] = c.first[i] + (!adapters || m->params[i].lora ? m->params[i].numel : 0);
    int64_t d = 0;
    for (int j = 0; j < m->n_params; j++) {   /* model order */
        int i = m->init_order ? m->init_order[j] : j;
        c.draws[i] = d;
        d += m->params[i].numel * init_draws(m->params[i].init);
    }
    if (c.first[m->n_params] > 0)
        rt_pool_run(pool, c.first[m->n_params], 1 << 16, init_part, &c);
    free(c.first);
    free(c.draws);
}

void rt_init_params(rt_pool *pool, const rt_model *m, float *params, uint64_t seed)
{
    init_some(pool, m, params, seed, 0);
}

void rt_init_adapters(rt_pool *pool, const rt_model *m, float *params, uint64_t seed)
{
    init_some(pool, m, params, seed, 1);
}
