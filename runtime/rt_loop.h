/* rt_loop.h: the training loop's pieces (optim.c, loop.c). */
#ifndef RT_LOOP_H
#define RT_LOOP_H

#include "rt.h"

/* The learning rate of optimizer step `step` (from 0) of `total`. */
double rt_lr_at(const rt_train_config *c, int64_t step, int64_t total);
/* The global L2 norm of all parameter gradients (independent of the thread count). */
double rt_grad_norm(rt_pool *pool, const rt_model *m, const float *grads);
/* Floats of optimizer state (AdamW: m and v; SGD with momentum: the buffer). */
int64_t rt_optim_state_floats(const rt_train_config *c, const rt_model *m);
/* One update; t counts steps from 1. With clip set, the gradients are read as
 * g * gscale, which is what clip_grad_norm_ leaves in them (a fused pass). */
void rt_optim_step(rt_pool *pool, const rt_train_config *c, const rt_model *m, float *params,
                   const float *grads, float *state, int64_t t, double lr, float gscale, int clip);

#endif
