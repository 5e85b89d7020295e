/* mode_lrfind.c: --lr-find, the learning-rate range test run as training steps (the
 * curve itself is lrfind.c's): its rates and length at the start, the curve written
 * and the suggestion said at the end. */
#include <errno.h>
#include <string.h>
#include "run.h"

/* --lr-find: its own rates and length; no validation, checkpoint, early stopping or
 * weights written, and metrics go to lr_find.jsonl only */
void rt_lrfind_start(Run *r)
{
    static rt_lrfind lf_store;
    rt_lrfind *lf = r->lf = &lf_store;
    rt_lrfind_init(lf, r->o.lr_find_lo > 0 ? r->o.lr_find_lo : 1e-8,
                   r->o.lr_find_lo > 0 ? r->o.lr_find_hi : 1.0,
                   r->o.lr_find_steps ? r->o.lr_find_steps : 100);
    r->total_steps = lf->steps;
}

/* --lr-find's end: the curve written, the suggestion printed; exits as a run would
 * (130 when interrupted; nothing else to save) */
int rt_lrfind_end(Run *r, int interrupted)
{
    rt_lrfind *lf = r->lf;
    double lr = rt_lrfind_suggest(lf);
    int code = interrupted ? RT_EXIT_INTERRUPTED : RT_EXIT_OK;
    rt_run_close_gpu(r);
    if (r->rank == 0) {
        if (rt_lrfind_write(lf, r->out, lr, interrupted) != 0)
            rt_fail("%s/lr_find.jsonl: cannot write: %s%s", r->out, strerror(errno),
                    rt_full_hint(errno));
        fprintf(stderr, "trainc: lr-find: %lld steps, rates %.3g to %.3g%s\n", (long long)lf->n,
                lf->lo, lf->n ? lf->lr[lf->n - 1] : lf->lo,
                interrupted ? " (interrupted)" : lf->diverged ? ", stopped where the loss blew up" : "");
        if (isfinite(lr))
            fprintf(stderr, "  suggested learning rate %.3g (where the smoothed loss falls fastest): "
                            "--set optimizer.lr=%.3g\n", lr, lr);
        else
            fprintf(stderr, "  no suggestion (%lld steps): %s\n", (long long)lf->n,
                    rt_lrfind_no_suggestion(lf));
        fprintf(stderr, "  the curve: %s/lr_find.jsonl, %s/lr_find.svg\n", r->out, r->out);
    }
    rt_lrfind_free(lf);
    rt_dist_finalize();
    return code;
}
