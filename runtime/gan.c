/* gan.c: a GAN's kernels on the CPU (its loss terms, with a CUDA twin in
 * templates/cuda/loss.cuh) and the latent vectors the runtime draws for it. */
#include <math.h>
#include "run.h"

void rt_gan_loss(rt_exec *e, const float *z, float *dz, int64_t rows, int term)
{
    if (e->dev) {
        RT_GPU(e)->gan_loss(e, z, dz, rows, term);
        return;
    }
    double s = 0.0;
    float gs = e->grad_scale;
    for (int64_t i = 0; i < rows; i++) {
        float v = z[i], d;
        double x = (double)v;
        switch (term) {
        case RT_GAN_BCE_REAL:
        case RT_GAN_BCE_FAKE: {
            float y = term == RT_GAN_BCE_REAL ? 1.0f : 0.0f;
            s += (x > 0 ? x : 0.0) - (double)y * x + log1p(exp(-fabs(x)));
            d = 1.0f / (1.0f + expf(-v)) - y;
            break;
        }
        case RT_GAN_HINGE_REAL:
            s += v < 1.0f ? 1.0 - x : 0.0;
            d = v < 1.0f ? -1.0f : 0.0f;
            break;
        case RT_GAN_HINGE_FAKE:
            s += v > -1.0f ? 1.0 + x : 0.0;
            d = v > -1.0f ? 1.0f : 0.0f;
            break;
        default:
            s -= x;
            d = -1.0f;
        }
        if (dz)
            dz[i] = d * gs;
    }
    e->loss_sum += s;
}
