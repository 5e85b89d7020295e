/* earlystop.c: PyTorch Lightning's EarlyStopping decision, exactly.
 *
 * In the order Lightning checks (callbacks/early_stopping.py,
 * _evaluate_stopping_criteria), for each validation check's monitored value v:
 *   1. check_finite and v is NaN or infinite               -> stop (diverged)
 *   2. stopping_threshold given and v is better than it    -> stop
 *   3. divergence_threshold given and v is worse than it   -> stop
 * Only 1 is a divergence (exit 3, a non-finite loss or monitored value: docs/runs.md);
 * a threshold crossed by a finite value stops the run as Lightning does, with the
 * end reason early_stopping and exit 0.
 *   4. v improves on the best by more than min_delta       -> best = v, wait = 0
 *      (mode min: v + min_delta < best; max: v - min_delta > best; equality is
 *      not an improvement; NaN never improves)
 *   5. otherwise wait += 1, and stop once wait >= patience
 * The stop of 5 (RT_ES_PATIENCE) is the one min_epochs and min_steps defer, as
 * Lightning's fit loop keeps trainer.should_stop set and ends the run at the first
 * batch after which both are reached (_can_stop_early); 1 to 3 stop at once, as
 * SPEC.md orders it.
 * "Better" is < in mode min and > in mode max; best starts at +inf (min) or -inf (max).
 * All of it in float32, as Lightning's tensors are. */
#include <math.h>
#include <stdio.h>
#include "rt_loop.h"


void rt_es_init(rt_stopper *s, const rt_train_config *c)
{
    s->best = c->es_mode == RT_MODE_MIN ? INFINITY : -INFINITY;
    s->wait = 0;
}

int rt_es_check(const rt_train_config *c, rt_stopper *s, double v, char *why, size_t n)
{
    /* Lightning compares float32 tensors: the logged value, and min_delta and the
     * thresholds (Python floats) taken as float32, the subtraction in float32; the best
     * kept is the float32 value */
    const float vf = (float)v;
    if (c->es_check_finite && !isfinite(vf)) {
        /* (NaN as "nan" whatever its sign bit, as the training loss's message says it) */
        snprintf(why, n, "the monitored value is %s, not finite (best %g)",
                 isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", s->best);
        return RT_ES_DIVERGED;
    }
    if (!isnan(c->es_stopping_threshold) &&
        rt_better(c->es_mode, vf, (float)c->es_stopping_threshold)) {
        snprintf(why, n, "the monitored value %g reached stopping_threshold %g", v,
                 c->es_stopping_threshold);
        return RT_ES_STOP;
    }
    if (!isnan(c->es_divergence_threshold) &&
        rt_better(c->es_mode, -vf, -(float)c->es_divergence_threshold)) {
        snprintf(why, n, "the monitored value %g is worse than divergence_threshold %g", v,
                 c->es_divergence_threshold);
        return RT_ES_STOP;
    }
    const float delta = c->es_mode == RT_MODE_MIN ? -(float)c->es_min_delta
                                                  : (float)c->es_min_delta;
    const float shifted = vf - delta;
    if (rt_better(c->es_mode, shifted, (float)s->best)) {
        s->best = vf;
        s->wait = 0;
        return RT_ES_GO_ON;
    }
    s->wait++;
    if (s->wait >= c->es_patience) {
        snprintf(why, n, "no improvement in %lld validation checks (best %g)", (long long)s->wait,
                 s->best);
        return RT_ES_PATIENCE;
    }
    return RT_ES_GO_ON;
}

int rt_es_min_reached(const rt_train_config *c, int64_t epochs_done, int64_t steps)
{
    return (c->min_epochs <= 0 || epochs_done >= c->min_epochs) &&
           (c->min_steps <= 0 || steps >= c->min_steps);
}
