/* rt_main.c: rt_main, the trainer every generated model runs, as the story of a run;
 * each part is a file of its own (run.h lists them).
 *
 * Order of work at start: everything that can be bad input (options, --set, data
 * files, --init weights) is checked before the output folder is touched, so a bad
 * run writes nothing. */
#include <string.h>
#include "run.h"

/* What a GAN cannot do yet (docs/spec.md, "GANs"). */
static void gan_refusals(const Run *r)
{
    if (r->o.lr_find)
        rt_input_error("--lr-find is for models with one loss; a GAN has two");
}

int rt_main(const rt_model *m, int argc, char **argv)
{
    if (m->abi != RT_ABI_VERSION)
        rt_fail("this trainer was generated for runtime ABI %d, the runtime is %d; rebuild it", m->abi,
                RT_ABI_VERSION);
    rt_spec_file = m->spec_file;
    rt_dist_init(&argc, &argv);
    /* one run a process, in static storage (about 100 KB: the data paths): a start
     * refused with exit 1 then leaves nothing allocated behind (fuzz/fuzz_opts.c calls
     * rt_main again after each) */
    static Run run;
    memset(&run, 0, sizeof run);
    Run *r = &run;
    r->m = m;
    r->t0 = rt_now();
    r->rank = rt_dist_rank();
    r->world = rt_dist_world();
    r->resumed_from = -1;
    r->prog = argc > 0 && argv[0] ? argv[0] : "trainer";
    /* dropout: rank r draws the masks of rows r, r + N, ... of the batch one rank of N x B
     * rows would have (rt_drop_index), not every rank the same ones */
    r->e.rng_part = r->world > 1 ? (uint64_t)r->world << 32 | (uint64_t)r->rank : 0;
    r->e.rank_mean_f64 = r->world > 1 ? rt_rank_mean_f64 : NULL;

    rt_opts_parse(m, argc, argv, &r->o);
    if (r->o.sample)
        rt_sample_vocab(m, &r->o);
    rt_predict_check(m, &r->o);
    rt_reference_check(m, &r->o);
    /* from here a signal stops training after its first step, with a checkpoint and
     * exit 130 (--eval has nothing to keep: a signal ends it at once, exit 130) */
    if (!r->o.eval)
        rt_catch_signals();
    else
        rt_catch_signals_eval();
    if (r->o.resume && !r->o.eval && !r->o.gradcheck && r->rank == 0)
        rt_out_hold_resumed(r->o.resume, !r->o.out || rt_same_folder(r->o.out, r->o.resume));
    rt_run_configure(r);
    if (r->o.sample)
        rt_sample_rows_check(r);
    r->gpu = rt_run_pick_gpu(r);
    if (r->gpu && r->o.gradcheck)
        rt_input_error("--gradcheck runs on the CPU: add --device cpu");
    if (m->gan)
        gan_refusals(r);
    rt_run_precision(r);

    /* data and weights: all bad input is found before the output folder exists */
    if (r->o.reference)   /* (the reference input's files, not there yet, read as zeros) */
        rt_reference_entries(r);
    rt_run_data(r);
    rt_run_memory(r);
    rt_run_device(r);
    if (r->o.gradcheck)
        return rt_gradcheck(r);

    rt_out_name(r);
    rt_loop_state st, *s = &st;
    rt_state_fresh(r, s);
    const uint64_t data_fp = rt_data_fingerprint(r);
    if (r->world > 1)
        rt_agree_on_resume(r);
    if (r->o.resume)
        rt_resume_load(r, s, data_fp);
    s->data_rows = r->train.rows;   /* what this run's checkpoints record */
    s->data_fp = data_fp;
    if (r->world > 1)
        rt_agree_on_run(r, s);
    if (r->o.eval)
        return rt_eval_mode(r);

    rt_out_setup(r, s);
    if (r->gpu)               /* the weights as initialized, loaded or resumed */
        rt_cu_put_params(&r->e, m, r->params, r->layer_state, r->state, r->state_floats);
    r->t0 = rt_now() - s->elapsed;
    rt_record_start(r);
    /* rank 0 has set OUT up alone (an earlier run moved aside, the folder made, fsynced
     * and locked, the records cut or copied, the best weights restored: a copy where OUT
     * is on another file system): the others wait for it here, not in the first step's
     * collectives, whose watchdog would time rank 0's disk and end the job (exit 2) */
    rt_barrier_solo();
    /* past a file size limit (ulimit -f) a write fails with EFBIG and is reported like a
     * full disk, instead of the signal killing the run mid-file */
    signal(SIGXFSZ, SIG_IGN);
    return rt_train(r, s);
}
