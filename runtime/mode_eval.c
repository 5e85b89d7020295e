/* mode_eval.c: --eval, the weights validated (and sampled) without training; the
 * result one JSON line on stdout, nothing written. --predict takes this path too, in
 * validation's place (mode_predict.c). */
#include <string.h>
#include "run.h"

char *rt_arena_at(const Run *r, int64_t offset)
{
    return r->e.arena + r->e.Bmax * offset * (r->gpu ? 1 : r->e.arena_scale);
}

void rt_arena_read(Run *r, int64_t offset, int64_t at, int64_t n, int half, float *y)
{
    const char *p = rt_arena_at(r, offset);
    if (!r->gpu) {
        memcpy(y, (const float *)p + at, (size_t)n * sizeof *y);
        return;
    }
    if (!half) {
        rt_cu_download(y, (rt_dptr)(uintptr_t)((const float *)p + at), (size_t)n * sizeof *y);
        return;
    }
    uint16_t *h = (uint16_t *)y;   /* (n halves fit in n floats' room) */
    rt_cu_download(h, (rt_dptr)(uintptr_t)((const uint16_t *)p + at), (size_t)n * sizeof *h);
    for (int64_t i = n - 1; i >= 0; i--)   /* widened in place, from the end */
        y[i] = r->m->act16 == RT_PREC_BF16 ? rt_bf16_to_float(h[i]) : rt_f16_to_float(h[i]);
}

/* --eval: the weights as loaded (--init, --resume's checkpoint, or initialized) are
 * validated once on data.val (validate.batches counts), or with --predict run on its
 * file, and, with --sample, sampled; nothing is trained and nothing but --predict's
 * file written: the result is one JSON line on stdout. */
int rt_eval_mode(Run *r)
{
    const rt_model *m = r->m;
    if (!r->has_val && r->o.sample <= 0 && !r->o.predict && !r->o.reference)
        rt_input_error("--eval needs validation data (data.val), or --sample to generate from "
                       "the weights");
    if (r->gpu)
        rt_cu_put_params(&r->e, m, r->params, r->layer_state, r->state, r->state_floats);
    if (r->o.reference)
        rt_reference(r);
    else if (r->o.predict)
        rt_predict(r);
    else if (r->has_val) {
        double t0 = rt_now();
        Eval ev = rt_validate(r);
        if (r->rank == 0) {
            char a[40], b[40];
            printf("{\"event\":\"eval\",\"val_loss\":%s", rt_json_num(a, ev.loss));
            if (rt_has_acc(m))
                printf(",\"val_acc\":%s", rt_json_num(b, ev.acc));
            if (m->loss == RT_LOSS_DPO)
                printf(",\"val_margin\":%s", rt_json_num(b, ev.margin));
            printf(",\"terms\":%lld,\"time_s\":%.3f}\n", (long long)ev.terms, rt_now() - t0);
            fflush(stdout);
            fprintf(stderr, "trainc: eval: val_loss %.4f", rt_nan_plain(ev.loss));
            if (rt_has_acc(m))
                fprintf(stderr, ", val_acc %.2f%%", 100.0 * ev.acc);
            fprintf(stderr, " over %lld %s\n", (long long)ev.terms,
                    m->loss == RT_LOSS_DPO ? "pairs" : rt_has_acc(m) ? "targets" : "values");
        }
    }
    rt_run_close_gpu(r);
    if (r->rank == 0 && r->o.sample > 0)
        rt_sample(r);
    rt_dist_finalize();
    return RT_EXIT_OK;
}
