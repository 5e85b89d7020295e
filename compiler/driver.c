/* driver.c: the compile driver. A spec becomes a Compiled: validation's program, the
 * decode program where the model has one, then training's under the recomputation plan
 * asked for or found by recompute auto (all through pipeline.c's passes), the memory
 * totals, then the sources. */
#include "ir.h"

Compiled *compile_spec(Spec *s)
{
    Compiled *c = xcalloc(1, sizeof *c);
    c->spec = s;
    /* validation's own plan: the forward pass alone, without what backward keeps; it
     * shares the arena, so it counts in recompute auto's totals */
    if (s->gan) {   /* the generator's validation graph takes the places training's
                       graph gives its parameters (gan.c), whatever the recomputation */
        int autos = s->train.recompute == RT_RECOMPUTE_AUTO;
        compile_train(c, autos ? RT_RECOMPUTE_NONE : s->train.recompute, 0, 0);
        compile_eval(c);
        if (autos)
            recompute_auto(c);
    } else {
        compile_eval(c);
        compile_decode(c);   /* (--sample's key/value cache: decode.c) */
        if (s->train.recompute == RT_RECOMPUTE_AUTO)
            recompute_auto(c);
        else
            compile_train(c, s->train.recompute, 0, 0);
    }
    plan_totals(c);
    emit_prepare(c->prog, c->eval, c->decode);
    emit_c(c->prog, c->eval, c->decode, &c->em);
    emit_cuda(c->prog, c->eval, c->decode, &c->em.kernels_cu, &c->em.kernels_cu_file);
    return c;
}
