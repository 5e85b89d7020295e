/* test_spec.c: unit tests of the training-config table (runtime/config.c).
 *
 * cc -std=gnu11 -O1 -g -fsanitize=address,undefined -Iruntime tests/unit/test_spec.c \
 *    runtime/config.c runtime/util.c -lm -o build/test_spec && build/test_spec
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"

int rt_config_set_typed(rt_train_config *c, const char *key, int jtype, const char *value,
                        char *err, size_t errlen);

static int failures, checks;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        checks++;                                                         \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                   \
            printf(__VA_ARGS__);                                          \
            printf("\n");                                                 \
        }                                                                 \
    } while (0)

static void free_lines(char **lines, int n)
{
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

/* Applies dumped lines to a fresh default config. */
static int reload(char **lines, int n, rt_train_config *out)
{
    rt_config_defaults(out);
    char err[256];
    for (int i = 0; i < n; i++) {
        char *eq = strchr(lines[i], '=');
        if (!eq)
            return -1;
        *eq = 0;
        int r = rt_config_set(out, lines[i], eq + 1, err, sizeof err);
        *eq = '=';
        if (r) {
            printf("  reload %s: %s\n", lines[i], err);
            return -1;
        }
    }
    return 0;
}

/* dump -> set -> dump gives the same lines and the same bytes. */
static void check_round_trip(const rt_train_config *c, const char *what)
{
    int n, m;
    char **a = rt_config_dump(c, &n);
    rt_train_config d;
    int r = reload(a, n, &d);
    CHECK(r == 0, "%s: reload failed", what);
    char **b = rt_config_dump(&d, &m);
    int same = n == m;
    for (int i = 0; same && i < n; i++)
        same = !strcmp(a[i], b[i]);
    CHECK(same, "%s: dump differs after reload", what);
    CHECK(memcmp(c, &d, sizeof d) == 0, "%s: config bytes differ after reload", what);
    free_lines(a, n);
    free_lines(b, m);
}

static int has_line(const rt_train_config *c, const char *line)
{
    int n, found = 0;
    char **l = rt_config_dump(c, &n);
    for (int i = 0; i < n; i++)
        found |= !strcmp(l[i], line);
    free_lines(l, n);
    return found;
}

/* Sets key=value and expects err to contain `want`. */
static void check_error(const char *key, const char *value, const char *want)
{
    rt_train_config c;
    rt_config_defaults(&c);
    char err[512] = "";
    int r = rt_config_set(&c, key, value, err, sizeof err);
    CHECK(r == -1 && strstr(err, want), "%s=%s: want \"%s\", got %d \"%s\"", key, value, want,
          r, err);
}

static void check_typed_error(const char *key, int jtype, const char *value, const char *want)
{
    rt_train_config c;
    rt_config_defaults(&c);
    char err[512] = "";
    int r = rt_config_set_typed(&c, key, jtype, value, err, sizeof err);
    CHECK(r == -1 && strstr(err, want), "%s=%s (%c): want \"%s\", got %d \"%s\"", key, value,
          jtype, want, r, err);
}

static void check_ok(rt_train_config *c, const char *key, const char *value)
{
    char err[512] = "";
    int r = rt_config_set(c, key, value, err, sizeof err);
    CHECK(r == 0, "%s=%s: unexpected error: %s", key, value, err);
}

static void check_validate(const rt_train_config *c, const char *want)
{
    char err[512] = "";
    int r = rt_config_validate(c, err, sizeof err);
    if (!want)
        CHECK(r == 0, "validate: unexpected error: %s", err);
    else
        CHECK(r == -1 && strstr(err, want), "validate: want \"%s\", got %d \"%s\"", want, r,
              err);
}

/* The key rt_config_check blames for the broken rule ("" when none). */
static void check_blame(const rt_train_config *c, const char *want)
{
    char err[512] = "", key[128] = "?";
    int r = rt_config_check(c, err, sizeof err, key, sizeof key);
    CHECK(r == -1 && !strcmp(key, want), "check: want the key \"%s\", got %d \"%s\" (%s)",
          want, r, key, err);
}

/* A value different from the default for every key. */
static const char *other_value(const char *key)
{
    static const char *const table[][2] = {
        {"data.train", "null"},
        {"data.val", "null"},
        {"batch_size", "128"},
        {"accumulate", "4"},
        {"epochs", "null"},
        {"max_steps", "5000"},
        {"max_time", "01:02:03:04"},
        {"min_epochs", "3"},
        {"min_steps", "500"},
        {"optimizer.type", "sgd"},
        {"optimizer.lr", "0.1"},
        {"optimizer.betas", "0.8,0.95"},
        {"optimizer.eps", "1e-6"},
        {"optimizer.weight_decay", "0.1"},
        {"optimizer.momentum", "0.9"},
        {"optimizer.nesterov", "true"},
        {"optimizer.ns_steps", "3"},
        {"optimizer.adjust_lr", "match_rms_adamw"},
        {"optimizer.adamw", "true"},
        {"optimizer.adamw.lr", "0.01"},
        {"optimizer.adamw.betas", "0.8,0.95"},
        {"optimizer.adamw.eps", "1e-6"},
        {"optimizer.adamw.weight_decay", "0.2"},
        {"optimizer_d", "true"},
        {"optimizer_d.type", "sgd"},
        {"optimizer_d.lr", "0.1"},
        {"optimizer_d.betas", "0.8,0.95"},
        {"optimizer_d.eps", "1e-6"},
        {"optimizer_d.weight_decay", "0.1"},
        {"optimizer_d.momentum", "0.9"},
        {"optimizer_d.nesterov", "true"},
        {"schedule.type", "cosine"},
        {"schedule.warmup_steps", "100"},
        {"schedule.final_lr_frac", "0.1"},
        {"schedule.every_steps", "250"},
        {"schedule.gamma", "0.3333333333333333"},
        {"schedule.decay_frac", "0.25"},
        {"schedule.decay_shape", "1-sqrt"},
        {"grad_clip", "1.0"},
        {"grad_clip_algorithm", "value"},
        {"freeze", "wte.weight,h.[0-3].*"},
        {"lora", "true"},
        {"lora.rank", "16"},
        {"lora.alpha", "32"},
        {"lora.dropout", "0.05"},
        {"lora.rslora", "true"},
        {"lora.targets", "*.qkv.weight,*.proj.weight"},
        {"lora.train", "norm.weight"},
        {"loss_scale.init", "1024"},
        {"loss_scale.growth_interval", "7"},
        {"precision", "bf16-mixed"},
        {"validate.every_steps", "200"},
        {"validate.every_epochs", "null"},
        {"validate.every_fraction", "0.25"},
        {"validate.batches", "20"},
        {"early_stopping", "true"},
        {"early_stopping.monitor", "val_acc"},
        {"early_stopping.mode", "max"},
        {"early_stopping.patience", "0"},
        {"early_stopping.min_delta", "0.001"},
        {"early_stopping.stopping_threshold", "0.95"},
        {"early_stopping.divergence_threshold", "-1e300"},
        {"early_stopping.check_finite", "false"},
        {"checkpoint", "true"},
        {"checkpoint.every_steps", "77"},
        {"checkpoint.every_epochs", "2"},
        {"checkpoint.keep", "5"},
        {"checkpoint.keep_best", "3"},
        {"recompute", "auto"},
        {"memory_budget_mb", "1536.5"},
        {"distributed.strategy", "zero2"},
        {"distributed.bucket_mb", "0.5"},
        {"distributed.ranks", "8"},
        {"loader.workers", "8"},
        {"loader.prefetch", "16"},
        {"loader.shuffle", "false"},
        {"loader.drop_last", "false"},
        {"loader.on_gpu", "always"},
        {"loader.documents", "50256"},
        {"loader.augment", "true"},
        {"loader.augment.random_crop", "true"},
        {"loader.augment.random_crop.padding", "4"},
        {"loader.augment.random_crop.fill", "raw"},
        {"loader.augment.random_resized_crop", "true"},
        {"loader.augment.random_resized_crop.scale", "0.25,0.75"},
        {"loader.augment.random_resized_crop.ratio", "0.5,2"},
        {"loader.augment.color_jitter", "true"},
        {"loader.augment.color_jitter.brightness", "0.4"},
        {"loader.augment.color_jitter.contrast", "0.3"},
        {"loader.augment.color_jitter.saturation", "0.2"},
        {"loader.augment.color_jitter.hue", "0.1"},
        {"loader.augment.hflip", "true"},
        {"loader.mask", "true"},
        {"loader.mask.token", "103"},
        {"loader.mask.prob", "0.2"},
        {"loader.mask.mask_replace_prob", "0.7"},
        {"loader.mask.random_replace_prob", "0.2"},
        {"loader.mask.vocab", "30000"},
        {"loader.mask.input", "ids"},
        {"loader.mask.target", "labels"},
        {"limit_train_batches", "0.25"},
        {"limit_val_batches", "3"},
        {"ema", "true"},
        {"ema.decay", "0.99"},
        {"ema.every", "4"},
        {"ema.start_step", "100"},
        {"ema.validate", "false"},
        {"swa", "true"},
        {"swa.lr", "0.05"},
        {"swa.epoch_start", "3"},
        {"swa.annealing_epochs", "2"},
        {"swa.annealing_strategy", "linear"},
        {"seed", "18446744073709551615"},
        {"log_every", "1"},
        {"device", "cuda"},
        {"out_dir", "runs/a b=c"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i][0], key))
            return table[i][1];
    return NULL;
}

static void test_every_key(void)
{
    int n = 0;
    for (; rt_config_keys[n]; n++) {
        const char *key = rt_config_keys[n];
        const char *v = other_value(key);
        CHECK(v != NULL, "no test value for key %s (add one to other_value)", key);
        if (!v)
            continue;
        rt_train_config c;
        rt_config_defaults(&c);
        check_ok(&c, "data.train.x", "train_x.npy");
        check_ok(&c, key, v);
        check_round_trip(&c, key);
    }
    CHECK(n >= 40, "only %d keys", n);

    /* all of them at once, in table order */
    rt_train_config c;
    rt_config_defaults(&c);
    for (int i = 0; rt_config_keys[i]; i++)
        if (other_value(rt_config_keys[i]) && strncmp(rt_config_keys[i], "data.", 5))
            check_ok(&c, rt_config_keys[i], other_value(rt_config_keys[i]));
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "data.train.y", "b.npy");
    check_ok(&c, "data.val.x", "c.npy");
    check_ok(&c, "data.val.y", "d.npy");
    check_round_trip(&c, "all keys");
    CHECK(c.seed == UINT64_MAX, "seed %llu", (unsigned long long)c.seed);
    CHECK(c.max_time == 93784, "max_time %g", c.max_time);
    CHECK(has_line(&c, "max_time=01:02:03:04"), "max_time dump");
    CHECK(has_line(&c, "schedule.gamma=0.3333333333333333"), "shortest real");
    CHECK(has_line(&c, "optimizer.betas=0.8,0.95"), "betas dump");
    CHECK(has_line(&c, "out_dir=runs/a b=c"), "path dump");
    CHECK(has_line(&c, "data.val.y=d.npy"), "data dump");
    CHECK(has_line(&c, "min_steps=500") && has_line(&c, "validate.every_fraction=0.25"),
          "min_steps, every_fraction dump");
    /* keys added after specs were hashed are left out of the dump while null */
    rt_config_defaults(&c);
    CHECK(!has_line(&c, "min_epochs=null") && !has_line(&c, "min_steps=null") &&
          !has_line(&c, "validate.every_fraction=null"), "null min_*, every_fraction dumped");
}

static void test_defaults(void)
{
    rt_train_config c;
    rt_config_defaults(&c);
    CHECK(c.batch_size == 32 && c.accumulate == 1 && c.epochs == RT_UNSET && rt_epochs(&c) == 1 &&
          c.max_steps == -1, "counts");
    CHECK(isnan(c.max_time) && isnan(c.grad_clip) && isnan(c.memory_budget_mb), "nulls");
    CHECK(c.opt == RT_OPT_ADAMW && c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 &&
          c.eps == 1e-8 && c.weight_decay == 0.01 && c.momentum == 0 && !c.nesterov,
          "adamw defaults");
    CHECK(c.sched == RT_SCHED_CONSTANT && c.warmup_steps == 0 && c.final_lr_frac == 0 &&
          c.sched_every_steps == 1000 && c.gamma == 0.1, "schedule defaults");
    CHECK(c.precision == RT_PREC_FP32 && rt_val_every_epochs(&c) == 1 && c.val_every_steps == -1 &&
          c.val_batches == -1, "precision/validate");
    CHECK(!c.has_early_stopping && c.es_monitor == RT_MON_VAL_LOSS && c.es_mode == RT_MODE_MIN &&
          c.es_patience == 3 && c.es_min_delta == 0 && isnan(c.es_stopping_threshold) &&
          isnan(c.es_divergence_threshold) && c.es_check_finite, "early stopping");
    CHECK(c.has_checkpoint && c.ckpt_every_steps == 1000 && c.ckpt_keep == 2, "checkpoint (on)");
    CHECK(c.recompute == RT_RECOMPUTE_NONE && c.dist == RT_DIST_DDP && c.workers == 2 &&
          c.prefetch == 4 && c.shuffle && c.drop_last && c.seed == 1337 && c.log_every == 10 &&
          c.device == RT_DEVICE_AUTO && c.out_dir[0] == 0 && c.n_train == 0 && c.n_val == 0 &&
          c.on_gpu == RT_ON_GPU_AUTO,
          "the rest");
    CHECK(has_line(&c, "early_stopping=null") && !has_line(&c, "early_stopping.mode=min"),
          "disabled section dumps as one line");
    check_round_trip(&c, "defaults");
    /* defaults that follow other fields: left out, they dump as no line at all, so a
     * later max_steps or every_steps still decides them */
    CHECK(!has_line(&c, "epochs=1") && !has_line(&c, "epochs=null") &&
          !has_line(&c, "validate.every_epochs=1"), "left-out epochs dump no line");
    char err[256];
    rt_train_config d = c;
    CHECK(rt_config_set(&d, "max_steps", "100", err, sizeof err) == 0 && rt_epochs(&d) == -1,
          "epochs left out: no limit with max_steps");
    d = c;
    CHECK(rt_config_set(&d, "max_time", "00:01:00:00", err, sizeof err) == 0 && rt_epochs(&d) == -1,
          "epochs left out: no limit with max_time");
    CHECK(rt_config_set(&d, "epochs", "3", err, sizeof err) == 0 && rt_epochs(&d) == 3 &&
          has_line(&d, "epochs=3"), "epochs given: kept");
    CHECK(rt_config_set(&d, "epochs", "null", err, sizeof err) == 0 && rt_epochs(&d) == -1 &&
          has_line(&d, "epochs=null"), "epochs null: no limit, dumped");
    d = c;
    CHECK(rt_config_set(&d, "validate.every_steps", "50", err, sizeof err) == 0 &&
          rt_val_every_epochs(&d) == -1, "every_epochs left out: off with every_steps");
    CHECK(rt_config_set(&d, "validate.every_epochs", "1", err, sizeof err) == 0 &&
          rt_val_every_epochs(&d) == 1, "every_epochs given: kept");
    check_round_trip(&d, "every_epochs given");
}

static void test_errors(void)
{
    check_error("batch_size", "0", "expected an integer >= 1, got 0");
    check_error("batch_size", "2.5", "expected an integer >= 1, got 2.5");
    check_error("batch_size", "abc", "expected an integer >= 1, got 'abc'");
    check_error("batch_size", "0x10", "expected an integer >= 1, got 0x10");   /* hex: not JSON */
    check_error("optimizer.lr", "0x1p-4", "expected a number >= 0, got 0x1p-4");
    check_error("batch_size", "null", "expected an integer >= 1, got null");
    check_error("batch_size", "", "expected an integer >= 1, got ''");
    check_error("batch_size", " 3", "expected an integer >= 1");
    check_error("epochs", "0", "expected an integer >= 1 or null, got 0");
    check_error("loader.workers", "300", "expected an integer in [0, 256], got 300");
    check_error("optimizer.type", "adam",
                "expected one of sgd, adamw, muon, got 'adam'; did you mean 'adamw'?");
    check_error("optimizer.type", "lbfgs", "expected one of sgd, adamw, muon, got 'lbfgs'");
    check_error("optimizer.lr", "-1", "expected a number >= 0, got -1");
    check_error("optimizer.lr", "-1e-9", "expected a number >= 0, got -1e-9");
    check_error("optimizer.lr", "nan", "expected a number >= 0, got nan");
    check_error("optimizer.lr", "inf", "expected a number >= 0, got inf");
    check_error("optimizer.lr", "1e999", "expected a number >= 0, got 1e999");
    check_error("optimizer.betas", "0.9", "expected 2 numbers in [0, 1), got 0.9");
    check_error("optimizer.betas", "0.9,1", "expected 2 numbers in [0, 1)");
    check_error("optimizer.betas", "0.9,0.99,0.5", "expected 2 numbers in [0, 1)");
    check_error("optimizer.weight_decay", "-0.1", "expected a number >= 0, got -0.1");
    check_error("schedule.final_lr_frac", "1.5", "expected a number in [0, 1], got 1.5");
    check_error("schedule.type", "cosin", "did you mean 'cosine'?");
    check_error("optimizer.nesterov", "yes", "expected true or false, got 'yes'");
    check_error("optimizer.nesterov", "1", "expected true or false, got 1");
    check_error("grad_clip", "0", "expected a number > 0 or null, got 0");
    check_error("precision", "bf16", "expected one of fp32, bf16-mixed, fp16-mixed, fp8-mixed, got 'bf16'");
    check_error("max_time", "1:2:3", "expected a duration \"DD:HH:MM:SS\"");
    check_error("max_time", "00:01:30", "expected a duration");
    check_error("max_time", "00:01:3a:00", "expected a duration");
    check_error("max_time", "00:00:00:00", "expected a duration");
    check_error("max_time", "-5", "expected a duration");
    check_error("seed", "-1", "expected an integer in [0, 2^64), got -1");
    check_error("seed", "18446744073709551616", "expected an integer in [0, 2^64)");
    check_error("out_dir", "", "expected a path or null");
    check_error("early_stopping", "yes", "expected an object or null, got 'yes'");
    check_error("optimiser.lr", "0.1", "unknown key 'optimiser.lr'; did you mean 'optimizer.lr'?");
    check_error("batchsize", "1", "unknown key 'batchsize'; did you mean 'batch_size'?");
    check_error("zzz", "1", "unknown key 'zzz'");
    check_error("data.trian.x", "a.npy", "did you mean 'data.train.x'?");
    check_error("data.train.1x", "a.npy", "bad input name '1x'");
    check_error("data.train.x", "", "expected a file path");
    check_error("data.train", "a.npy", "expected null (files go in data.train.INPUT=PATH)");

    /* JSON types: the compiler says what type the value had */
    check_typed_error("batch_size", 's', "32", "expected an integer >= 1, got \"32\"");
    check_typed_error("batch_size", 'b', "true", "expected an integer >= 1, got true");
    check_typed_error("optimizer.type", 'n', "1", "expected one of sgd, adamw, muon, got 1");
    check_typed_error("loader.shuffle", 's', "true", "expected true or false, got \"true\"");
    check_typed_error("optimizer.betas", 's', "0.9,0.999", "got \"0.9,0.999\"");
    check_typed_error("optimizer.betas", 'a', "0.9", "expected 2 numbers in [0, 1), got [0.9]");
    check_typed_error("out_dir", 'n', "5", "expected a path or null, got 5");
    check_typed_error("checkpoint", 'b', "true", "expected an object or null, got true");
    check_typed_error("optimizer.lr", 'o', "{}", "expected a number >= 0, got an object");
    check_typed_error("data.train.x", 'n', "5", "expected a file path, got 5");

    rt_train_config c;
    rt_config_defaults(&c);
    char err[64];
    CHECK(rt_config_set_typed(&c, "max_time", 'n', "90", err, sizeof err) == 0 &&
          c.max_time == 90, "max_time as a JSON number");
    CHECK(rt_config_set_typed(&c, "max_time", 's', "00:01:30:00", err, sizeof err) == 0 &&
          c.max_time == 5400, "max_time 00:01:30:00 = 5400 s, got %g", c.max_time);
    CHECK(rt_config_set(&c, "batch_size", "1e3", err, sizeof err) == 0 && c.batch_size == 1000,
          "integral real as integer");
    /* a short buffer truncates, never overflows */
    CHECK(rt_config_set(&c, "optimizer.type", "adam", err, 10) == -1 && strlen(err) == 9,
          "truncation");
    CHECK(rt_config_set(&c, "optimizer.type", "adam", NULL, 0) == -1, "NULL err");
}

static void test_semantics(void)
{
    rt_train_config c;
    rt_config_defaults(&c);
    /* sgd brings its own defaults but keeps lr */
    check_ok(&c, "optimizer.lr", "0.5");
    check_ok(&c, "optimizer.betas", "0.8,0.9");
    check_ok(&c, "optimizer.type", "sgd");
    CHECK(c.opt == RT_OPT_SGD && c.lr == 0.5 && c.weight_decay == 0 && c.momentum == 0 &&
          !c.nesterov && c.beta1 == 0.9 && c.beta2 == 0.999, "sgd reset");
    check_ok(&c, "optimizer.weight_decay", "0.2");
    check_ok(&c, "optimizer.type", "sgd");
    CHECK(c.weight_decay == 0.2, "same type does not reset");
    check_ok(&c, "optimizer.type", "adamw");
    CHECK(c.weight_decay == 0.01, "back to adamw defaults");
    /* muon: torch.optim.Muon's defaults where they differ, lr kept; its adamw section
     * and ns_steps left out of the dump (a spec without them keeps its hash) */
    check_ok(&c, "optimizer.ns_steps", "3");
    check_ok(&c, "optimizer.type", "muon");
    CHECK(c.opt == RT_OPT_MUON && c.lr == 0.5 && c.weight_decay == 0.1 && c.momentum == 0.95 &&
          c.nesterov && c.eps == 1e-7 && c.ns_steps == -1 && !c.has_adamw &&
          c.aw_lr == 0.001 && c.aw_weight_decay == 0.01, "muon reset");
    CHECK(!has_line(&c, "optimizer.adamw=null") && !has_line(&c, "optimizer.ns_steps=null"),
          "muon's quiet keys");
    check_ok(&c, "optimizer.adamw.lr", "0.003");
    CHECK(c.has_adamw && c.aw_lr == 0.003 && has_line(&c, "optimizer.adamw.lr=0.003"),
          "an adamw subkey enables the section");

    /* sections */
    rt_config_defaults(&c);
    check_ok(&c, "early_stopping.patience", "7");
    CHECK(c.has_early_stopping && c.es_patience == 7, "a subkey enables the section");
    check_ok(&c, "early_stopping", "null");
    CHECK(!c.has_early_stopping && c.es_patience == 3, "null disables and resets");
    check_ok(&c, "checkpoint", "null");
    CHECK(!c.has_checkpoint && has_line(&c, "checkpoint=null"), "null disables the default");
    check_ok(&c, "checkpoint", "{}");
    CHECK(c.has_checkpoint && has_line(&c, "checkpoint=true") &&
          has_line(&c, "checkpoint.keep=2"), "{} enables with defaults");
    check_ok(&c, "checkpoint", "false");
    CHECK(!c.has_checkpoint, "false disables");

    /* data entries */
    rt_config_defaults(&c);
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "data.train.y", "b.npy");
    check_ok(&c, "data.train.x", "c.npy");
    CHECK(c.n_train == 2 && !strcmp(c.train[0].path, "c.npy"), "replace keeps the slot");
    check_ok(&c, "data.val.x", "v.npy");
    check_ok(&c, "data.val.y", "w.npy");
    CHECK(c.n_val == 2, "val entries");
    check_ok(&c, "data.val", "null");
    CHECK(c.n_val == 0, "data.val=null clears val");
    check_ok(&c, "data.train.x", "null");
    CHECK(c.n_train == 1 && !strcmp(c.train[0].key, "y"), "entry=null drops it");
    for (int i = 0; i < RT_MAX_INPUTS - 1; i++) {
        char key[32];
        snprintf(key, sizeof key, "data.train.in%d", i);
        check_ok(&c, key, "f.npy");
    }
    char err[256] = "";
    CHECK(rt_config_set(&c, "data.train.one_more", "f.npy", err, sizeof err) == -1 &&
          strstr(err, "too many files"), "entry limit: %s", err);
}

static void test_validate(void)
{
    rt_train_config c;
    rt_config_defaults(&c);
    check_validate(&c, "data.train is missing");
    check_ok(&c, "data.train.x", "a.npy");
    check_validate(&c, NULL);

    check_ok(&c, "epochs", "null");
    check_validate(&c, "no stop condition");
    check_blame(&c, "");
    check_ok(&c, "max_time", "00:00:10:00");
    check_validate(&c, NULL);
    check_ok(&c, "schedule.type", "cosine");
    check_validate(&c, "schedule.type cosine needs epochs or max_steps");
    check_blame(&c, "schedule.type");
    check_ok(&c, "max_steps", "100");
    check_validate(&c, NULL);
    check_ok(&c, "schedule.gamma", "0.5");
    check_validate(&c, "schedule.every_steps and schedule.gamma apply to schedule.type step");
    check_blame(&c, "schedule.gamma");
    check_ok(&c, "schedule.type", "step");
    check_validate(&c, NULL);
    check_ok(&c, "schedule.final_lr_frac", "0.1");
    check_validate(&c, "schedule.final_lr_frac applies to");
    check_blame(&c, "schedule.final_lr_frac");

    rt_config_defaults(&c);
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "optimizer.nesterov", "true");
    check_validate(&c, "optimizer.momentum and optimizer.nesterov apply to sgd only");
    check_blame(&c, "optimizer.nesterov");
    check_ok(&c, "optimizer.type", "sgd");
    check_ok(&c, "optimizer.nesterov", "true");
    check_validate(&c, "optimizer.nesterov needs optimizer.momentum > 0");
    check_blame(&c, "optimizer.nesterov");
    check_ok(&c, "optimizer.momentum", "0.9");
    check_validate(&c, NULL);
    check_ok(&c, "optimizer.eps", "1e-6");
    check_validate(&c, "optimizer.betas and optimizer.eps apply to adamw only");

    rt_config_defaults(&c);
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "early_stopping.mode", "min");
    check_validate(&c, "early_stopping.monitor val_loss needs data.val");
    check_ok(&c, "data.val.x", "b.npy");
    check_validate(&c, NULL);
    check_ok(&c, "validate.every_epochs", "null");
    check_validate(&c, "needs validation");
    check_ok(&c, "early_stopping.monitor", "loss");
    check_validate(&c, NULL);
    check_ok(&c, "data.val.y", "c.npy");
    check_validate(&c, "data.val.y has no counterpart in data.train");

    rt_config_defaults(&c);
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "validate.batches", "5");
    check_validate(&c, "validate.batches needs data.val (to train without validation, set "
                       "validate.batches to null too)");
    check_ok(&c, "validate.every_steps", "100");
    check_validate(&c, "validate.every_steps and validate.batches need data.val (to train "
                       "without validation, set them to null too)");
    rt_config_defaults(&c);
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "recompute", "auto");
    check_validate(&c, "recompute auto needs memory_budget_mb");
    check_blame(&c, "recompute");
    check_ok(&c, "memory_budget_mb", "512");
    check_validate(&c, NULL);
    check_ok(&c, "data.train.tokens", "t_*.bin");
    check_validate(&c, "data.train.tokens must be the only entry");

    rt_config_defaults(&c);   /* random_resized_crop's ranges, one crop at a time */
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "loader.augment.random_resized_crop.scale", "0.9,0.5");
    check_validate(&c, "random_resized_crop's scale [0.9, 0.5] is not a range");
    check_blame(&c, "loader.augment.random_resized_crop.scale");
    check_ok(&c, "loader.augment.random_resized_crop.scale", "0.5,0.9");
    check_ok(&c, "loader.augment.random_resized_crop.ratio", "0.0001,2");
    check_validate(&c, "within [0.001, 1000]");
    check_ok(&c, "loader.augment.random_resized_crop.ratio", "0.5,2");
    check_validate(&c, NULL);
    CHECK(c.has_augment && c.has_rrc, "random_resized_crop's keys turn it and augment on");
    check_ok(&c, "loader.augment.random_crop.padding", "4");
    check_validate(&c, "random_resized_crop and random_crop together");
    check_error("loader.augment.random_resized_crop.scale", "0,1", "expected 2 numbers in (0, 1]");
    rt_config_defaults(&c);
    check_ok(&c, "data.train.x", "a.npy");
    check_ok(&c, "loader.augment.color_jitter.hue", "0.6");
    check_validate(&c, "color_jitter's hue 0.6 is past 0.5");
    check_blame(&c, "loader.augment.color_jitter.hue");
}

static void test_suggestions(void)
{
    CHECK(rt_edit_distance("kitten", "sitting") == 3, "kitten/sitting");
    CHECK(rt_edit_distance("", "abc") == 3 && rt_edit_distance("abc", "") == 3, "empty");
    CHECK(rt_edit_distance("same", "same") == 0, "equal");
    CHECK(rt_edit_distance("ab", "ba") == 2, "plain Levenshtein: a swap is 2");
    char longa[200], longb[200];
    memset(longa, 'a', 199);
    longa[199] = 0;
    memcpy(longb, longa, 200);
    longb[100] = 'b';
    CHECK(rt_edit_distance(longa, longb) == 1, "long words");

    static const char *const keys[] = {"out", "kernel", "stride", "padding", "bias", "op",
                                       "name", "input", "init", NULL};
    const char *s = rt_closest("strde", keys);
    CHECK(s && !strcmp(s, "stride"), "strde -> %s", s ? s : "NULL");
    s = rt_closest("kernal", keys);
    CHECK(s && !strcmp(s, "kernel"), "kernal -> %s", s ? s : "NULL");
    CHECK(rt_closest("foo", keys) == NULL, "foo is not close to anything");
    CHECK(rt_closest("completely_unrelated", keys) == NULL, "far words");
    static const char *const ops[] = {"linear", "conv2d", "layernorm", NULL};
    s = rt_closest("lineer", ops);
    CHECK(s && !strcmp(s, "linear"), "lineer -> %s", s ? s : "NULL");
    s = rt_closest("batchsize", rt_config_keys);
    CHECK(s && !strcmp(s, "batch_size"), "batchsize -> %s", s ? s : "NULL");
    s = rt_closest("xx", (const char *const[]){"x", "y", NULL});
    CHECK(s && !strcmp(s, "x"), "xx -> %s", s ? s : "NULL");
    CHECK(rt_closest("z", (const char *const[]){"x", "y", NULL}) == NULL, "z is not x");

    /* a prefix of one word (3 characters or more), case aside, a last dotted part */
    s = rt_closest("padd", keys);
    CHECK(s && !strcmp(s, "padding"), "padd -> %s", s ? s : "NULL");
    CHECK(rt_closest("pa", keys) == NULL, "pa is too short to be a prefix");
    s = rt_closest("checkpoint.every_s", rt_config_keys);
    CHECK(s && !strcmp(s, "checkpoint.every_steps"), "checkpoint.every_s -> %s (not keep)",
          s ? s : "NULL");
    CHECK(rt_closest("validate.every", rt_config_keys) == NULL,
          "validate.every starts two keys: no suggestion");
    s = rt_closest("BATCH_SIZE", rt_config_keys);
    CHECK(s && !strcmp(s, "batch_size"), "BATCH_SIZE -> %s", s ? s : "NULL");
    s = rt_closest("Linear", ops);
    CHECK(s && !strcmp(s, "linear"), "Linear -> %s", s ? s : "NULL");
    s = rt_closest("Kernal", keys);
    CHECK(s && !strcmp(s, "kernel"), "Kernal -> %s", s ? s : "NULL");
    s = rt_closest("lr", rt_config_keys);
    CHECK(s && !strcmp(s, "optimizer.lr"), "lr -> %s", s ? s : "NULL");
    s = rt_closest("keep", rt_config_keys);
    CHECK(s && !strcmp(s, "checkpoint.keep"), "keep -> %s", s ? s : "NULL");
    CHECK(rt_closest("type", rt_config_keys) == NULL, "type ends two keys: no suggestion");
    CHECK(rt_closest("every_steps", rt_config_keys) == NULL, "every_steps ends three keys");
    static const char *const precisions[] = {"fp32", "bf16-mixed", "fp16-mixed", NULL};
    s = rt_closest("bf16", precisions);
    CHECK(s && !strcmp(s, "bf16-mixed"), "bf16 -> %s", s ? s : "NULL");
    CHECK(rt_closest("learning_rate", rt_config_keys) == NULL, "learning_rate is far");
    CHECK(rt_closest("hello", ops) == NULL && rt_closest("FOO", keys) == NULL,
          "unrelated words, any case");
}

/* --set as typed on a command line: the spec's JSON forms too */
static void test_set_arg(void)
{
    rt_train_config c;
    rt_config_defaults(&c);
    char err[256];
    CHECK(rt_config_set_arg(&c, "optimizer.betas=[0.8, 0.95]", err, sizeof err) == 0 &&
          c.beta1 == 0.8 && c.beta2 == 0.95, "betas as a JSON list: %s", err);
    CHECK(rt_config_set_arg(&c, "optimizer.betas=0.7,0.9", err, sizeof err) == 0 &&
          c.beta1 == 0.7 && c.beta2 == 0.9, "betas as A,B: %s", err);
    CHECK(rt_config_set_arg(&c, "optimizer.type=\"sgd\"", err, sizeof err) == 0 &&
          c.opt == RT_OPT_SGD, "a JSON string: %s", err);
    CHECK(rt_config_set_arg(&c, "out_dir=\"a \\\"b\\\" c\"", err, sizeof err) == 0 &&
          !strcmp(c.out_dir, "a \"b\" c"), "escapes in a JSON string: %s", c.out_dir);
    CHECK(rt_config_set_arg(&c, "data.train.x=\"null\"", err, sizeof err) == 0 &&
          c.n_train == 1 && c.train[0].path[0] == '/' &&
          !strcmp(c.train[0].path + strlen(c.train[0].path) - 5, "/null"),
          "a quoted null is a path (from the current folder): %s", c.train[0].path);
    CHECK(rt_config_set_arg(&c, "data.val.x=/abs/x.npy", err, sizeof err) == 0 &&
          !strcmp(c.val[0].path, "/abs/x.npy"), "an absolute path as given: %s", c.val[0].path);
    CHECK(rt_config_set_arg(&c, "batch_size=\"32\"", err, sizeof err) == -1 &&
          strstr(err, "--set batch_size: expected an integer >= 1, got \"32\""),
          "a string for an integer: %s", err);
    CHECK(rt_config_set_arg(&c, "batch_size=[32]", err, sizeof err) == -1 &&
          strstr(err, "got [32]"), "a list for an integer: %s", err);
    CHECK(rt_config_set_arg(&c, "optimizer.betas=[0.9]", err, sizeof err) == -1 &&
          strstr(err, "expected 2 numbers"), "one beta: %s", err);
    CHECK(rt_config_set_arg(&c, "schedule=null", err, sizeof err) == -1 &&
          strstr(err, "schedule is a group of keys") && strstr(err, "cannot be turned off"),
          "a group set to null: %s", err);
    CHECK(rt_config_set_arg(&c, "batch_size", err, sizeof err) == -1 &&
          strstr(err, "expected KEY=VALUE"), "no '=': %s", err);
    CHECK(rt_config_set_arg(&c, "batchsize=3", err, sizeof err) == -1 &&
          strstr(err, "--set batchsize: unknown key"), "unknown key: %s", err);
    /* freeze: a JSON list, A,B or one name, each the same ','-joined patterns */
    CHECK(rt_config_set_arg(&c, "freeze=[\"wte.*\", \"h.0.*\"]", err, sizeof err) == 0 &&
          !strcmp(c.freeze, "wte.*,h.0.*"), "freeze as a JSON list: %s %s", err, c.freeze);
    CHECK(rt_config_set_arg(&c, "freeze= a.b , c", err, sizeof err) == 0 &&
          !strcmp(c.freeze, "a.b,c"), "freeze as A,B: %s", c.freeze);
    CHECK(rt_config_set_arg(&c, "freeze=\"h.1.*\"", err, sizeof err) == 0 &&
          !strcmp(c.freeze, "h.1.*"), "freeze as one JSON string: %s", c.freeze);
    CHECK(rt_config_set_arg(&c, "freeze=[]", err, sizeof err) == 0 && !c.freeze[0],
          "freeze []: %s", c.freeze);
    const char *bad[] = {"freeze=a,", "freeze=a,,b", "freeze=[\"a\", \"\"]", "freeze=a\"b",
                         "freeze=,"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(rt_config_set_arg(&c, bad[i], err, sizeof err) == -1 &&
              strstr(err, "expected a list of parameter names or patterns"), "%s: %s", bad[i],
              err);
}

/* A resumed run's config: the run's groups where the spec kept them, the spec's where
 * it was edited since */
static void test_merge(void)
{
    rt_train_config spec, run, now, got, want;
    rt_config_defaults(&spec);
    check_ok(&spec, "optimizer.type", "sgd");
    check_ok(&spec, "optimizer.weight_decay", "0.05");
    check_ok(&spec, "epochs", "3");
    check_ok(&spec, "data.val.x", "v.npy");
    run = spec;                      /* the run's --set options */
    check_ok(&run, "optimizer.type", "adamw");
    check_ok(&run, "optimizer.weight_decay", "0.05");  /* equal to the spec's line */
    check_ok(&run, "max_steps", "600");
    check_ok(&run, "data.val", "null");
    check_ok(&run, "data.train.x", "t.npy");
    check_ok(&run, "early_stopping.patience", "5");
    now = spec;                      /* the spec edited since: epochs */
    check_ok(&now, "epochs", "4");
    int ns, nr, nn, n;
    char **ls = rt_config_dump(&spec, &ns), **lr = rt_config_dump(&run, &nr),
         **ln = rt_config_dump(&now, &nn);
    char **lines = rt_config_merge(ls, ns, lr, nr, ln, nn, &n);
    CHECK(reload(lines, n, &got) == 0, "the merged lines load");
    want = run;
    check_ok(&want, "epochs", "4");
    int na, nb;
    char **a = rt_config_dump(&got, &na), **b = rt_config_dump(&want, &nb);
    int same = na == nb;
    for (int i = 0; same && i < na; i++)
        same = !strcmp(a[i], b[i]);
    CHECK(same, "merged = the run's config with the spec's new epochs");
    CHECK(got.opt == RT_OPT_ADAMW && got.weight_decay == 0.05 && got.max_steps == 600 &&
          got.n_val == 0 && got.epochs == 4 && got.has_early_stopping && got.es_patience == 5,
          "merged values");
    free_lines(a, na);
    free_lines(b, nb);
    free_lines(lines, n);
    free_lines(ls, ns);
    free_lines(lr, nr);
    free_lines(ln, nn);
}

static void run(const char *name, void (*fn)(void))
{
    int before = failures;
    fn();
    if (failures == before)
        printf("ok %s\n", name);
    else
        printf("FAIL %s: %d checks failed\n", name, failures - before);
}

int main(void)
{
    run("config defaults", test_defaults);
    run("config set/dump round trip of every key", test_every_key);
    run("config error messages", test_errors);
    run("config semantics (sgd reset, sections, data)", test_semantics);
    run("config cross-field rules", test_validate);
    run("edit distance and did-you-mean", test_suggestions);
    run("--set as typed, JSON forms", test_set_arg);
    run("resume: the run's config under an edited spec", test_merge);
    if (failures) {
        printf("FAIL test_spec: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("ok test_spec: %d checks\n", checks);
    return 0;
}
