#define _GNU_SOURCE
/* setup.c: a run's resources. The device (--device, train.device, what the trainer
 * was built for), the data and its loaders (each rank its share), the epochs and steps,
 * the host memory (parameters initialized or read with --init, gradients, optimizer
 * state), and the device's buffers, all allocated before the first step; and the GPU
 * communicator closed at the end. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run.h"

/* cpu or cuda, per --device / train.device and what the trainer was built for; with
 * "auto", a GPU when there is one. */
int rt_run_pick_gpu(const Run *r)
{
    const rt_model *m = r->m;
    char why[512];
    int count = 0;
    int can_cuda = (m->devices & RT_HAS_CUDA) && m->cuda;
    if (r->c.device == RT_DEVICE_CPU || !can_cuda)
        return 0;
    if (m->cuda->unsupported) {   /* auto (run_config.c refused cuda): the CPU, said */
        if (r->rank == 0)
            fprintf(stderr, "trainc: note: %s: %s on the CPU\n", m->cuda->unsupported,
                    r->o.eval ? "evaluating" : "training");
        return 0;
    }
    if (rt_cu_probe(why, sizeof why, &count) == 0)
        return 1;
    if (r->c.device == RT_DEVICE_CUDA || !(m->devices & RT_HAS_CPU))
        rt_cu_no_device(why);
    if (r->rank == 0)
        fprintf(stderr, "trainc: no GPU (%s): %s on the CPU\n", why,
                r->o.eval ? "evaluating" : "training");
    return 0;
}

/* The cores this process may use (mpirun binds ranks), shared among the ranks on
 * this node when they are not bound apart. */
static int default_threads(void)
{
    int all = (int)sysconf(_SC_NPROCESSORS_ONLN), n = rt_cpus_usable();
    if (n >= all && rt_dist_local_world() > 1)
        n /= rt_dist_local_world();
    return n < 1 ? 1 : n;
}

/* loader.mask's inputs named in the model: the ids (loader.mask.input: an embedding's
 * [T] ids) and the targets (loader.mask.target: [T], the loss's, with its ignore_index),
 * both i32 in batches; its rule, the random ids from the embedding's rows unless
 * loader.mask.vocab says fewer. Exits 1 naming the key. */
static rt_mask_rule mask_rule(const Run *r, int *in, int *tgt)
{
    const rt_model *m = r->m;
    const rt_train_config *c = &r->c;
    *in = *tgt = -1;
    for (int k = 0; k < m->n_inputs; k++) {
        if (!strcmp(m->inputs[k].name, c->mask_input))
            *in = k;
        if (!strcmp(m->inputs[k].name, c->mask_target))
            *tgt = k;
    }
    if (*in < 0 || *tgt < 0)
        rt_input_error("$.train.loader.mask.%s: the model has no input '%s'",
                       *in < 0 ? "input" : "target", *in < 0 ? c->mask_input : c->mask_target);
    const rt_input *x = &m->inputs[*in], *y = &m->inputs[*tgt];
    if (x->rank != 1 || x->vocab <= 0 || rt_batch_dtype(x) != RT_I32)
        rt_input_error("$.train.loader.mask.input: '%s' is not a row of ids an embedding reads "
                       "([T] integers)", x->name);
    if (y->rank != 1 || y->numel != x->numel || !y->has_ignore || rt_batch_dtype(y) != RT_I32)
        rt_input_error("$.train.loader.mask.target: '%s' is not a cross_entropy target of "
                       "[%lld] with an ignore_index, as '%s' needs", y->name,
                       (long long)x->numel, x->name);
    if (c->mask_token >= x->vocab)
        rt_input_error("$.train.loader.mask.token: %lld is not an id of '%s' (its embedding "
                       "has %lld rows)", (long long)c->mask_token, x->name, (long long)x->vocab);
    if (c->mask_vocab > x->vocab)
        rt_input_error("$.train.loader.mask.vocab: %lld, more than the %lld rows of '%s''s "
                       "embedding", (long long)c->mask_vocab, (long long)x->vocab, x->name);
    return rt_mask_rule_of(c, (int32_t)y->ignore, c->mask_vocab > 0 ? c->mask_vocab : x->vocab);
}

/* loader.mask reads rows unmasked: where a target is not ignored, the input holds the
 * same id (`trainc data mlm --dynamic`'s rows). Rows masked already (data mlm without
 * --dynamic) would be masked twice: refused, naming the first such place. */
static void mask_data_check(const Run *r, int in, int tgt, int32_t ignore)
{
    const rt_dataset *d = &r->train;
    int64_t T = r->m->inputs[in].numel, idx[256];
    int32_t *x = rt_xmalloc(sizeof *x * 256 * (size_t)T), *y = rt_xmalloc(sizeof *y * 256 * (size_t)T);
    for (int64_t lo = 0; lo < d->rows; lo += 256) {
        int64_t n = d->rows - lo < 256 ? d->rows - lo : 256;
        for (int64_t i = 0; i < n; i++)
            idx[i] = lo + i;
        rt_npy_gather(&d->arr[in], idx, n, x, RT_I32);
        rt_npy_gather(&d->arr[tgt], idx, n, y, RT_I32);
        for (int64_t i = 0; i < n * T; i++)
            if (y[i] != ignore && y[i] != x[i])
                rt_input_error("$.train.loader.mask: %s row %lld, place %lld: '%s' holds %d where "
                               "'%s' asks for %d: rows masked already (`trainc data mlm` "
                               "without --dynamic); loader.mask masks unmasked rows (`trainc "
                               "data mlm --dynamic`'s), or set loader.mask to null",
                               d->arr[in].path, (long long)(lo + i / T), (long long)(i % T),
                               r->m->inputs[in].name, x[i], r->m->inputs[tgt].name, y[i]);
    }
    free(x);
    free(y);
}

/* loader.on_gpu: the training (and validation) arrays copied to the GPU once, when
 * asked (always) or when they fit in half the free memory left after the plan (auto);
 * the loaders then deliver sample indices and the rows are gathered on the device. */
static void data_to_gpu(Run *r)
{
    const rt_train_config *c = &r->c;
    if (c->on_gpu == RT_ON_GPU_NEVER || !r->tl)   /* (nothing trained: no training data) */
        return;
    size_t need = rt_cu_data_bytes(r->m, r->train.rows) +
                  (r->has_val ? rt_cu_data_bytes(r->m, r->val.rows) : 0);
    size_t fr = 0, tot = 0;
    rt_cu_mem_info(&fr, &tot);
    char why[256] = "";
    if (r->train.tokens)
        snprintf(why, sizeof why, "token shards are read on the host in this release");
    else if (r->train.rows > INT32_MAX || (r->has_val && r->val.rows > INT32_MAX))
        snprintf(why, sizeof why, "more than 2^31 rows");
    else if (c->on_gpu == RT_ON_GPU_AUTO && need > fr / 2)
        snprintf(why, sizeof why, "the data take %zu MiB, more than half the GPU's %zu MiB free",
                 need >> 20, fr >> 20);
    if (*why) {
        if (c->on_gpu == RT_ON_GPU_ALWAYS)
            rt_input_error("$.train.loader.on_gpu: always, but %s; use auto or never", why);
        return;
    }
    rt_cu_data_put(&r->e, r->m, &r->train, 0);
    rt_loader_indices_only(r->tl);
    if (c->has_augment)   /* the crops and flips then run on the device */
        rt_cu_set_augment(&r->e, c->has_crop ? c->crop_padding : 0, c->hflip, c->seed);
    if (c->has_augment && c->has_rrc) {
        rt_rrc k = rt_rrc_of(c);
        rt_cu_set_rrc(&r->e, &k);
    }
    if (c->has_augment && c->has_jitter) {
        rt_jitter k = rt_jitter_of(c);
        rt_cu_set_jitter(&r->e, &k);
    }
    if (c->has_mask)      /* and the masks (rt_run_data's rule) */
        rt_cu_set_mask(&r->e, &r->mask, r->mask_in, r->mask_tgt);
    if (r->has_val) {
        rt_cu_data_put(&r->e, r->m, &r->val, 1);
        rt_loader_indices_only(r->vl);
    }
    r->data_on_gpu = 1;
}

/* Several GPUs: every rank's GPU finishes its collectives (zero1's last gather: only
 * rank 0 reads the weights back) before the communicator goes and MPI ends. */
void rt_run_close_gpu(Run *r)
{
    if (r->gpu && r->world > 1) {
        rt_cu_sync(&r->e);
        rt_nccl_close();
    }
}

/* Lightning's limit_*_batches f (key) over `what`'s nb batches: a whole count, or
 * int(f x nb) for a fraction below 1, as Lightning's _parse_num_batches works it out;
 * less than one batch exits 1 */
static int64_t limit_count(const Run *r, const char *key, double f, int64_t nb, const char *what)
{
    if (f >= 1 && f != floor(f))
        rt_input_error("$.train.%s: %g: a count of batches (a whole number) or a fraction "
                       "below 1", key, f);
    int64_t k = f >= 1 ? (int64_t)f : (int64_t)(f * (double)nb);
    if (k < 1)
        rt_input_error("$.train.%s: %g of %s %lld batches%s is less than one batch", key, f,
                       what, (long long)nb, r->world > 1 ? " (per rank)" : "");
    return k;
}

/* How many batches a validation reads (-1: all): validate.batches, or limit_val_batches
 * counted as limit_train_batches counts an epoch */
static int64_t val_limit(const Run *r)
{
    double f = r->c.limit_val_batches;
    return isnan(f) ? r->c.val_batches
                    : limit_count(r, "limit_val_batches", f, rt_loader_batches(r->vl),
                                  "the validation's");
}

/* The validation data's loader (each sample once: with several ranks, each its split). */
static void open_val_loader(Run *r)
{
    const rt_train_config *c = &r->c;
    if (!r->has_val)
        return;
    r->vl = rt_loader_new(r->m, &r->val, c->batch_size, 0, 0, c->seed, (int)c->workers,
                          (int)c->prefetch);
    if (r->world > 1)     /* the numbers of one rank */
        rt_loader_set_split(r->vl, r->rank, r->world);
    r->val_limit = val_limit(r);
}

/* limit_train_batches (Lightning's Trainer argument): each epoch the first N batches of
 * its order (per rank) */
static void limit_batches(Run *r)
{
    double f = r->c.limit_train_batches;
    int64_t nb = rt_loader_batches(r->tl);
    if (isnan(f) || nb == 0)
        return;
    rt_loader_set_limit(r->tl, limit_count(r, "limit_train_batches", f, nb, "the epoch's"));
}

/* Does the run read the training data? Not where it trains nothing (--eval, --predict,
 * --sample alone: a fresh import samples before it has data, and a checkpoint's weights
 * are evaluated where its training data is not), unless it writes --reference's files
 * (from the training rows). */
static int reads_train_data(const Run *r)
{
    return !r->o.eval || r->o.reference;
}

/* The training (and validation) data, checked before the output folder exists; the
 * loaders (each rank its share); epochs and steps; --lr-find's own length. */
void rt_run_data(Run *r)
{
    const rt_model *m = r->m;
    const rt_train_config *c = &r->c;
    r->has_val = c->n_val > 0;
    if (r->has_val && !reads_train_data(r) && r->o.sample > 0 && !r->o.predict &&
        rt_dataset_absent(c->val, c->n_val, m->data_dir)) {
        r->has_val = 0;   /* --eval --sample before there are data: sampling alone */
        if (r->rank == 0)
            fprintf(stderr, "trainc: note: none of data.val's files is there: no validation, "
                            "sampling alone\n");
    }
    if (r->has_val)
        rt_dataset_open(&r->val, m, c->val, c->n_val, m->data_dir, "val", c->documents);
    r->threads = r->o.threads ? r->o.threads : default_threads();
    if (r->threads < 1)
        r->threads = 1;
    if (!reads_train_data(r)) {   /* (a nominal epoch of one batch: one pass a step) */
        r->batches_per_epoch = r->steps_per_epoch = 1;
        r->total_steps = -1;
        open_val_loader(r);
        return;
    }
    rt_dataset_open(&r->train, m, c->train, c->n_train, m->data_dir, "train", c->documents);
    r->tl = rt_loader_new(m, &r->train, c->batch_size, c->shuffle, c->drop_last, c->seed,
                          (int)c->workers, (int)c->prefetch);
    if (r->world > 1)
        rt_loader_set_shard(r->tl, r->rank, r->world);   /* DistributedSampler */
    if (c->has_augment)   /* training batches only */
        rt_loader_set_augment(r->tl, c->has_crop ? c->crop_padding : 0, c->hflip);
    if (c->has_augment && c->has_rrc) {
        rt_rrc k = rt_rrc_of(c);
        rt_loader_set_rrc(r->tl, &k);
    }
    if (c->has_augment && c->has_jitter) {
        rt_jitter k = rt_jitter_of(c);
        rt_loader_set_jitter(r->tl, &k);
    }
    if (c->has_mask) {
        if (r->train.tokens)
            rt_input_error("$.train.loader.mask: masks rows of ids read from .npy files "
                           "(`trainc data mlm --dynamic`'s); data.train holds token shards");
        r->mask = mask_rule(r, &r->mask_in, &r->mask_tgt);
        mask_data_check(r, r->mask_in, r->mask_tgt, r->mask.ignore);
        rt_loader_set_mask(r->tl, &r->mask, r->mask_in, r->mask_tgt);
    }
    limit_batches(r);
    r->batches_per_epoch = rt_loader_batches(r->tl);
    if (r->batches_per_epoch == 0 && r->world > 1)
        rt_input_error("$.train.batch_size: each of the %d ranks reads %lld of the training "
                       "data's %lld rows, fewer than batch_size %lld (per rank; with drop_last)",
                       r->world, (long long)(r->train.rows / r->world), (long long)r->train.rows,
                       (long long)c->batch_size);
    if (r->batches_per_epoch == 0)
        rt_input_error("$.train.batch_size: the training data has %lld rows, fewer than batch_size %lld (with drop_last)",
                       (long long)r->train.rows, (long long)c->batch_size);
    open_val_loader(r);
    r->steps_per_epoch = (r->batches_per_epoch + c->accumulate - 1) / c->accumulate;
    r->total_steps = -1;
    if (rt_epochs(c) > 0)
        r->total_steps = rt_epochs(c) * r->steps_per_epoch;
    if (c->max_steps > 0 && (r->total_steps < 0 || c->max_steps < r->total_steps))
        r->total_steps = c->max_steps;
    if (r->o.lr_find)
        rt_lrfind_start(r);
    if (c->sched >= RT_SCHED_COSINE && r->total_steps < 0)
        rt_input_error("$.train.schedule: a %s schedule needs epochs or max_steps to know its length",
                       rt_schedule_name(c->sched));
}

/* --init's weights: read, and finite (the first loss would be NaN and the run
 * "diverge" at step 0): bad input, before the output folder is touched */
static void read_init(Run *r)
{
    const rt_model *m = r->m;
    int lora = 0;
    for (int i = 0; i < m->n_params; i++)
        lora += m->params[i].lora;
    if (lora)   /* adapters the file leaves out start as a fresh run's (B zero) */
        rt_init_adapters(r->e.rt, m, r->params, r->c.seed);
    int left = rt_safetensors_read_init(r->o.init, m, r->params, r->layer_state);
    if (left && rt_dist_rank() == 0)
        fprintf(stderr, "trainc: %s: %d of the %d LoRA adapter tensors not in it: initialized "
                "(A random, B zero: the model computes what the file's weights do)\n",
                r->o.init, left, lora);
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *p = &m->params[i];
        for (int64_t j = 0; j < p->numel; j++)
            if (!isfinite(r->params[p->offset + j]))
                rt_input_error("%s: tensor '%s' holds %g at index %lld: weights to start "
                               "from must be finite", r->o.init, p->name,
                               (double)r->params[p->offset + j], (long long)j);
    }
}

void rt_run_memory(Run *r)
{
    const rt_model *m = r->m;
    const rt_train_config *c = &r->c;
    rt_zero_init(c, m);        /* zero1/zero2: which shard of the state this rank keeps */
    r->params = rt_xmalloc((size_t)m->param_floats * sizeof(float));
    r->layer_state = m->n_state ? rt_xmalloc((size_t)m->state_floats * sizeof(float)) : NULL;
    /* a step has at most this many passes (accumulate, within an epoch) */
    r->step_passes = (int)(c->accumulate < r->batches_per_epoch ? c->accumulate
                                                                : r->batches_per_epoch);
    r->pass_terms = rt_xmalloc((size_t)r->step_passes * sizeof *r->pass_terms);
    r->pend_terms = rt_xmalloc((size_t)RT_CU_RING * (size_t)r->step_passes * sizeof *r->pend_terms);
    r->grads = r->gpu ? NULL : rt_zero_alloc_grads(m);
    int64_t sf = rt_optim_state_parts(c) * (rt_zero_part().hi - rt_zero_part().lo);
    r->state = sf ? rt_xmalloc((size_t)sf * sizeof(float)) : NULL;
    r->state_floats = sf;
    r->e.rt = rt_pool_new(r->threads);
    rt_blas_setup();
    if (r->o.init)
        read_init(r);
    else if (!r->o.resume) {  /* a resume reads every parameter from its checkpoint */
        rt_init_params(r->e.rt, m, r->params, c->seed);
        rt_init_state(m, r->layer_state);
    }
}

void rt_run_device(Run *r)
{
    const rt_model *m = r->m;
    const rt_train_config *c = &r->c;
    r->e.Bmax = c->batch_size;
    r->e.ce_has_ignore = m->ce_has_ignore;
    r->e.ce_ignore = m->ce_ignore_index;
    int64_t row = rt_arena_row(m);
    if (!r->gpu) {
        r->e.arena = rt_xmalloc((size_t)(r->e.Bmax * row * r->e.arena_scale));
        r->e.params = r->params;
        r->e.grads = r->grads;
        r->e.state = r->layer_state;
        if (m->sink_floats) {   /* (frozen gradients written, never read) */
            r->e.sink = rt_xmalloc((size_t)m->sink_floats * sizeof(float));
            memset(r->e.sink, 0, (size_t)m->sink_floats * sizeof(float));
        }
        rt_ddp_init(m, r->grads, (int64_t)(c->bucket_mb * 1048576.0));
        return;
    }
    /* everything on the device, allocated now: nothing is allocated in the loop */
    /* zero2: this rank keeps its shard of the gradients only */
    int zero2 = rt_zero_on() && c->dist == RT_DIST_ZERO2;
    rt_cu_ops_register();      /* the ops hand their calls to the device layer */
    rt_cu_blas_register();
    /* (a GAN's step: two passes a micro-batch, each its own statistics) */
    rt_cu_init(&r->e, m, m->cuda, r->e.Bmax, row, r->state_floats, r->step_passes * (m->gan ? 2 : 1),
               rt_dist_local_rank(), zero2 ? rt_zero_part().lo : 0,
               zero2 ? rt_zero_part().hi : m->trainable_floats);
    rt_cu_optim_setup(&r->e, c, m, rt_zero_part().lo, rt_zero_part().hi);
    if (r->world > 1) {    /* DDP across GPUs: NCCL, bootstrapped by MPI */
        rt_nccl_open(&r->e);
        rt_ddp_init(m, r->e.grads, (int64_t)(c->bucket_mb * 1048576.0));
        rt_ddp_use_gpu(&r->e, zero2);
    }
    if (r->tl)
        rt_loader_each_buffer(r->tl, rt_cu_pin, NULL);
    if (r->vl)
        rt_loader_each_buffer(r->vl, rt_cu_pin, NULL);
    data_to_gpu(r);
}
