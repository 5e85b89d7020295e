/* config.c: the training configuration of docs/spec.md, The training, driven by one table.
 *
 * Every field of rt_train_config has one row below: its dotted key, how its text is
 * parsed and checked, where it lives, and its default as text. rt_config_set,
 * rt_config_dump, rt_config_defaults and the key list all read that one table, so a
 * new field is one line. The compiler (spec.c) renders JSON values to text and sets
 * them here; trainers apply `--set KEY=VALUE` and the embedded canonical lines here;
 * both therefore accept exactly the same values with the same messages.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rt.h"

enum {
    F_DATA,      /* data.train / data.val: the entry arrays, keyed data.train.<input> */
    F_INT,       /* int64_t in [min, max]; null (nullable) is -1 */
    F_U64,       /* uint64_t */
    F_REAL,      /* finite double within `range`; null (nullable) is NAN */
    F_BOOL,      /* int 0/1 */
    F_ENUM,      /* int: index into `names` */
    F_DURATION,  /* double seconds from "DD:HH:MM:SS" or a number; null is NAN */
    F_PAIR,      /* two doubles "A,B" (betas), each within `range` */
    F_PATH,      /* char[RT_PATH_MAX]; null is "" */
    F_SECTION,   /* int has_*: an object that may be null; setting a subkey enables it */
    F_GLOBS,     /* char[RT_PATH_MAX]: patterns joined by ','; [] and null are "" */
};

enum { R_ANY, R_POS, R_NONNEG, R_UNIT_OPEN, R_UNIT, R_FRAC };   /* ranges of reals */

typedef struct Field {
    const char *key;
    const char *def;       /* default, as the text rt_config_set takes; NULL: none */
    int type;
    size_t off, off2;      /* off2: F_PAIR's second double, F_DATA's count */
    int nullable;
    int quiet;             /* F_SECTION, F_INT, F_REAL, F_GLOBS: left out of the dump
                              while null, F_ENUM while its first value (a key added after
                              specs were hashed: theirs keep their hash) */
    int64_t min, max;      /* F_INT */
    int range;             /* F_REAL, F_PAIR */
    const char *names;     /* F_ENUM: values in the order of the RT_ enum, space-separated */
} Field;

#define OFF(f) offsetof(rt_train_config, f)
#define BIG ((int64_t)1 << 53)   /* JSON numbers are doubles: exact up to here */
#define DATA(f, n) .type = F_DATA, .off = OFF(f), .off2 = OFF(n), .nullable = 1
#define INT(f, lo, hi) .type = F_INT, .off = OFF(f), .min = lo, .max = hi
#define INT_OR_NULL(f, lo) .type = F_INT, .off = OFF(f), .min = lo, .max = BIG, .nullable = 1
#define U64(f) .type = F_U64, .off = OFF(f)
#define REAL(f, r) .type = F_REAL, .off = OFF(f), .range = r
#define REAL_OR_NULL(f, r) .type = F_REAL, .off = OFF(f), .range = r, .nullable = 1
#define INT_OR_NULL_QUIET(f, lo) INT_OR_NULL(f, lo), .quiet = 1
#define REAL_OR_NULL_QUIET(f, r) REAL_OR_NULL(f, r), .quiet = 1
#define BOOL(f) .type = F_BOOL, .off = OFF(f)
#define ENUM(f, n) .type = F_ENUM, .off = OFF(f), .names = n
#define ENUM_QUIET(f, n) ENUM(f, n), .quiet = 1   /* its default the first name */
#define DURATION(f) .type = F_DURATION, .off = OFF(f), .nullable = 1
#define PAIR(a, b, r) .type = F_PAIR, .off = OFF(a), .off2 = OFF(b), .range = r
#define PATH(f) .type = F_PATH, .off = OFF(f), .nullable = 1
#define SECTION(f) .type = F_SECTION, .off = OFF(f), .nullable = 1
#define SECTION_QUIET(f) .type = F_SECTION, .off = OFF(f), .nullable = 1, .quiet = 1
#define GLOBS_QUIET(f) .type = F_GLOBS, .off = OFF(f), .nullable = 1, .quiet = 1

/* The table: X(key, default, kind). Order is the canonical dump order; a section's
 * subkeys follow it directly. Defaults worth a word:
 *   optimizer: adamw, lr 1e-3, betas 0.9,0.999, eps 1e-8, weight_decay 0.01. Setting
 *     optimizer.type to a different type resets the type-specific fields to that
 *     type's defaults (sgd: weight_decay 0, momentum 0, nesterov false; muon:
 *     torch.optim.Muon's weight_decay 0.1, momentum 0.95, nesterov true, eps 1e-7),
 *     keeping lr. muon's ns_steps null is 5; its adamw section (the parameters Muon does
 *     not take) torch.optim.AdamW's defaults.
 *   optimizer_d (a GAN's discriminator): null = optimizer; once given, a whole optimizer
 *     of its own with optimizer's defaults (its keys are not taken from optimizer).
 *   schedule: constant, warmup_steps 0, final_lr_frac 0 (cosine/linear/wsd end at
 *     lr * final_lr_frac; wsd's decay_frac null is 0.2, decay_shape linear), every_steps
 *     1000 and gamma 0.1 (step: lr *= gamma every
 *     every_steps optimizer steps).
 *   Counts that may be null store -1, reals NAN, out_dir "" (rt.h).
 *   epochs and validate.every_epochs: left out, RT_UNSET (rt_epochs and
 *     rt_val_every_epochs say what they are then: 1, or no limit once max_steps or
 *     max_time (every_epochs: every_steps) is set, as Lightning's).
 *   validate.every_steps null, batches null (= the whole val set).
 *   early_stopping null; once enabled (any subkey, or {}): val_loss, min, patience 3,
 *     min_delta 0, no thresholds, check_finite true.
 *   lora null; once given: rank 8, alpha 8, dropout 0, rslora false (PEFT's LoraConfig's),
 *     targets null (every linear layer's and attention projection's weight but the
 *     head's), train null (no tensor of the model's own trained).
 *   checkpoint on: every_steps 1000, keep 2 (and at the end of a run), every_epochs null,
 *     keep_best null; null turns it off.
 *   distributed.ranks null: recompute auto counts a world of one (no shard of ZeRO's
 *     optimizer state); the trainer's own check counts the ranks it runs on.
 *   loader.workers 2 (0..256; 0: on the training thread), prefetch 4 (1..1024), shuffle and drop_last true;
 *   on_gpu auto (the data arrays kept in GPU memory when training on a GPU and they
 *   fit; always: or an error; never). */
#define CONFIG_FIELDS(X)                                                                \
    X("data.train", NULL, DATA(train, n_train))                                         \
    X("data.val", NULL, DATA(val, n_val))                                               \
    X("batch_size", "32", INT(batch_size, 1, BIG))                                      \
    X("accumulate", "1", INT(accumulate, 1, BIG))                                       \
    X("epochs", NULL, INT_OR_NULL(epochs, 1))                                           \
    X("max_steps", "null", INT_OR_NULL(max_steps, 1))                                   \
    X("max_time", "null", DURATION(max_time))                                           \
    X("min_epochs", "null", INT_OR_NULL_QUIET(min_epochs, 0))                           \
    X("min_steps", "null", INT_OR_NULL_QUIET(min_steps, 0))                             \
    X("limit_train_batches", "null", REAL_OR_NULL_QUIET(limit_train_batches, R_POS))    \
    X("limit_val_batches", "null", REAL_OR_NULL_QUIET(limit_val_batches, R_POS))        \
    X("optimizer.type", "adamw", ENUM(opt, "sgd adamw muon"))                           \
    X("optimizer.lr", "0.001", REAL(lr, R_NONNEG))                                      \
    X("optimizer.betas", "0.9,0.999", PAIR(beta1, beta2, R_UNIT_OPEN))                  \
    X("optimizer.eps", "1e-8", REAL(eps, R_POS))                                        \
    X("optimizer.weight_decay", "0.01", REAL(weight_decay, R_NONNEG))                   \
    X("optimizer.momentum", "0", REAL(momentum, R_NONNEG))                              \
    X("optimizer.nesterov", "false", BOOL(nesterov))                                    \
    X("optimizer.ns_steps", "null", INT_OR_NULL_QUIET(ns_steps, 1))                     \
    X("optimizer.adjust_lr", "original", ENUM_QUIET(muon_adjust, "original match_rms_adamw")) \
    X("optimizer.adamw", "null", SECTION_QUIET(has_adamw))                              \
    X("optimizer.adamw.lr", "0.001", REAL(aw_lr, R_NONNEG))                             \
    X("optimizer.adamw.betas", "0.9,0.999", PAIR(aw_beta1, aw_beta2, R_UNIT_OPEN))      \
    X("optimizer.adamw.eps", "1e-8", REAL(aw_eps, R_POS))                               \
    X("optimizer.adamw.weight_decay", "0.01", REAL(aw_weight_decay, R_NONNEG))          \
    X("optimizer_d", "null", SECTION_QUIET(has_opt_d))                                  \
    X("optimizer_d.type", "adamw", ENUM(d_opt, "sgd adamw"))                            \
    X("optimizer_d.lr", "0.001", REAL(d_lr, R_NONNEG))                                  \
    X("optimizer_d.betas", "0.9,0.999", PAIR(d_beta1, d_beta2, R_UNIT_OPEN))            \
    X("optimizer_d.eps", "1e-8", REAL(d_eps, R_POS))                                    \
    X("optimizer_d.weight_decay", "0.01", REAL(d_weight_decay, R_NONNEG))               \
    X("optimizer_d.momentum", "0", REAL(d_momentum, R_NONNEG))                          \
    X("optimizer_d.nesterov", "false", BOOL(d_nesterov))                                \
    X("schedule.type", "constant", ENUM(sched, "constant step cosine linear wsd"))      \
    X("schedule.warmup_steps", "0", INT(warmup_steps, 0, BIG))                          \
    X("schedule.final_lr_frac", "0", REAL(final_lr_frac, R_UNIT))                       \
    X("schedule.every_steps", "1000", INT(sched_every_steps, 1, BIG))                   \
    X("schedule.gamma", "0.1", REAL(gamma, R_POS))                                      \
    X("schedule.decay_frac", "null", REAL_OR_NULL_QUIET(decay_frac, R_FRAC))            \
    X("schedule.decay_shape", "linear", ENUM_QUIET(decay_shape, "linear cosine 1-sqrt")) \
    X("grad_clip", "null", REAL_OR_NULL(grad_clip, R_POS))                              \
    X("grad_clip_algorithm", "norm", ENUM_QUIET(grad_clip_algo, "norm value"))          \
    X("freeze", "null", GLOBS_QUIET(freeze))                                            \
    X("lora", "null", SECTION_QUIET(has_lora))                                          \
    X("lora.rank", "8", INT(lora_rank, 1, 65536))                                       \
    X("lora.alpha", "8", REAL(lora_alpha, R_POS))                                       \
    X("lora.dropout", "0", REAL(lora_dropout, R_UNIT_OPEN))                             \
    X("lora.rslora", "false", BOOL(lora_rslora))                                        \
    X("lora.targets", "null", GLOBS_QUIET(lora_targets))                                \
    X("lora.train", "null", GLOBS_QUIET(lora_train))                                    \
    X("precision", "fp32", ENUM(precision, "fp32 bf16-mixed fp16-mixed fp8-mixed"))     \
    X("loss_scale.init", "65536", REAL(ls_init, R_POS))                                 \
    X("loss_scale.growth_interval", "2000", INT(ls_growth_interval, 1, BIG))            \
    X("validate.every_steps", "null", INT_OR_NULL(val_every_steps, 1))                  \
    X("validate.every_epochs", NULL, INT_OR_NULL(val_every_epochs, 1))                  \
    X("validate.every_fraction", "null", REAL_OR_NULL_QUIET(val_every_fraction, R_FRAC)) \
    X("validate.batches", "null", INT_OR_NULL(val_batches, 1))                          \
    X("early_stopping", "null", SECTION(has_early_stopping))                            \
    X("early_stopping.monitor", "val_loss", ENUM(es_monitor, "val_loss val_acc loss"))  \
    X("early_stopping.mode", "min", ENUM(es_mode, "min max"))                           \
    X("early_stopping.patience", "3", INT(es_patience, 0, BIG))                         \
    X("early_stopping.min_delta", "0", REAL(es_min_delta, R_NONNEG))                    \
    X("early_stopping.stopping_threshold", "null",                                      \
      REAL_OR_NULL(es_stopping_threshold, R_ANY))                                       \
    X("early_stopping.divergence_threshold", "null",                                    \
      REAL_OR_NULL(es_divergence_threshold, R_ANY))                                     \
    X("early_stopping.check_finite", "true", BOOL(es_check_finite))                     \
    X("checkpoint", "true", SECTION(has_checkpoint))                                    \
    X("checkpoint.every_steps", "1000", INT(ckpt_every_steps, 1, BIG))                  \
    X("checkpoint.every_epochs", "null", INT_OR_NULL_QUIET(ckpt_every_epochs, 1))       \
    X("checkpoint.keep", "2", INT(ckpt_keep, 1, BIG))                                   \
    X("checkpoint.keep_best", "null", INT_OR_NULL_QUIET(ckpt_keep_best, 1))             \
    X("recompute", "none", ENUM(recompute, "none selective full auto"))                 \
    X("memory_budget_mb", "null", REAL_OR_NULL(memory_budget_mb, R_POS))                \
    X("distributed.strategy", "ddp", ENUM(dist, "ddp zero1 zero2"))                     \
    X("distributed.bucket_mb", "25", REAL(bucket_mb, R_POS))                            \
    X("distributed.ranks", "null", INT_OR_NULL(ranks, 1))                               \
    X("loader.workers", "2", INT(workers, 0, 256))                                      \
    X("loader.prefetch", "4", INT(prefetch, 1, 1024))                                   \
    X("loader.shuffle", "true", BOOL(shuffle))                                          \
    X("loader.drop_last", "true", BOOL(drop_last))                                      \
    X("loader.on_gpu", "auto", ENUM(on_gpu, "auto always never"))                       \
    X("loader.documents", "null", INT_OR_NULL_QUIET(documents, 0))                      \
    X("loader.augment", "null", SECTION_QUIET(has_augment))                             \
    X("loader.augment.random_crop", "null", SECTION(has_crop))                          \
    X("loader.augment.random_crop.padding", "0", INT(crop_padding, 0, 4096))            \
    X("loader.augment.random_crop.fill", "zero", ENUM_QUIET(crop_fill, "zero raw"))     \
    X("loader.augment.random_resized_crop", "null", SECTION_QUIET(has_rrc))             \
    X("loader.augment.random_resized_crop.scale", "0.08,1", PAIR(rrc_smin, rrc_smax, R_FRAC)) \
    X("loader.augment.random_resized_crop.ratio", "0.75,1.3333333333333333",            \
      PAIR(rrc_r0, rrc_r1, R_POS))                                                       \
    X("loader.augment.hflip", "false", BOOL(hflip))                                     \
    X("loader.augment.color_jitter", "null", SECTION_QUIET(has_jitter))                 \
    X("loader.augment.color_jitter.brightness", "0", REAL(jitter[0], R_NONNEG))         \
    X("loader.augment.color_jitter.contrast", "0", REAL(jitter[1], R_NONNEG))           \
    X("loader.augment.color_jitter.saturation", "0", REAL(jitter[2], R_NONNEG))         \
    X("loader.augment.color_jitter.hue", "0", REAL(jitter[3], R_NONNEG))                \
    X("loader.mask", "null", SECTION_QUIET(has_mask))                                   \
    X("loader.mask.token", "null", INT_OR_NULL(mask_token, 0))                          \
    X("loader.mask.prob", "0.15", REAL(mask_prob, R_FRAC))                              \
    X("loader.mask.mask_replace_prob", "0.8", REAL(mask_replace, R_UNIT))               \
    X("loader.mask.random_replace_prob", "0.1", REAL(mask_random, R_UNIT))              \
    X("loader.mask.vocab", "null", INT_OR_NULL(mask_vocab, 1))                          \
    X("loader.mask.input", "x", PATH(mask_input))                                       \
    X("loader.mask.target", "y", PATH(mask_target))                                     \
    X("ema", "null", SECTION_QUIET(has_ema))                                            \
    X("ema.decay", "0.999", REAL(ema_decay, R_UNIT_OPEN))                               \
    X("ema.every", "1", INT(ema_every, 1, BIG))                                         \
    X("ema.start_step", "0", INT(ema_start, 0, BIG))                                    \
    X("ema.validate", "true", BOOL(ema_validate))                                       \
    X("swa", "null", SECTION_QUIET(has_swa))                                            \
    X("swa.lr", "null", REAL_OR_NULL(swa_lr, R_POS))                                    \
    X("swa.epoch_start", "0.8", REAL(swa_epoch_start, R_POS))                           \
    X("swa.annealing_epochs", "10", INT(swa_anneal_epochs, 0, BIG))                     \
    X("swa.annealing_strategy", "cos", ENUM(swa_anneal, "cos linear"))                  \
    X("seed", "1337", U64(seed))                                                        \
    X("log_every", "10", INT(log_every, 1, BIG))                                        \
    X("device", "auto", ENUM(device, "auto cpu cuda"))                                  \
    X("out_dir", "null", PATH(out_dir))

#define AS_FIELD(k, d, ...) {.key = k, .def = d, __VA_ARGS__},
#define AS_KEY(k, d, ...) k,
static const Field fields[] = {CONFIG_FIELDS(AS_FIELD)};
const char *const rt_config_keys[] = {CONFIG_FIELDS(AS_KEY) NULL};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))

/* ---- edit distance, suggestions ------------------------------------------ */

int rt_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int small[64];
    int *row = lb + 1 <= 64 ? small : malloc((lb + 1) * sizeof *row);
    if (!row)
        rt_die("out of memory");
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];       /* row[i-1][j-1] */
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[lb];
    if (row != small)
        free(row);
    return d;
}

/* `s` in lower case into buf (of n bytes), or s itself when it does not fit. */
static const char *lower(const char *s, char *buf, size_t n)
{
    size_t i = 0;
    for (; s[i]; i++) {
        if (i + 1 >= n)
            return s;
        buf[i] = (char)tolower((unsigned char)s[i]);
    }
    buf[i] = 0;
    return buf;
}

/* The one word of `words` for which match(w, word) holds, or NULL (none, or several). */
static const char *unique(const char *w, const char *const *words,
                          int (*match)(const char *w, const char *word))
{
    const char *found = NULL;
    char lc[128];
    for (int i = 0; words[i]; i++)
        if (match(w, lower(words[i], lc, sizeof lc))) {
            if (found && strcmp(found, words[i]))
                return NULL;
            found = words[i];
        }
    return found;
}

/* w, 3 characters or more, starts word: "padd" for "padding", "bf16" for
 * "bf16-mixed", "checkpoint.every_s" for "checkpoint.every_steps" (not for
 * "checkpoint.keep", 4 edits away) */
static int starts(const char *w, const char *word)
{
    size_t lw = strlen(w);
    return lw >= 3 && lw < strlen(word) && !strncmp(w, word, lw);
}

/* w, without a dot, is word's last dotted part: "lr" for "optimizer.lr" */
static int last_part(const char *w, const char *word)
{
    const char *dot = strrchr(word, '.');
    /* (optimizer_d's, muon's adamw's and swa's repeat optimizer's: "lr" means
     * optimizer.lr) */
    return !strchr(w, '.') && dot && !strcmp(dot + 1, w) && strncmp(word, "optimizer_d.", 12) &&
           strncmp(word, "optimizer.adamw.", 16) && strncmp(word, "swa.", 4);
}

/* In order: the same word but for case (BATCH_SIZE: batch_size); the one word that w
 * starts (padd: padding); the one dotted word that w ends (lr: optimizer.lr); else the
 * closest word by edit distance, case aside. Close means within max(2, len/3) edits,
 * fewer edits than the word has characters, and at most about half of the candidate
 * changed: "xx" may mean "x", but "foo" is not a misspelling of "op". Ties go to the
 * earlier word. */
const char *rt_closest(const char *w, const char *const *words)
{
    char lw_buf[128], lc[128];
    const char *lw_s = lower(w, lw_buf, sizeof lw_buf);
    for (int i = 0; words[i]; i++)
        if (!strcmp(lw_s, lower(words[i], lc, sizeof lc)))
            return words[i];
    const char *u = unique(lw_s, words, starts);
    if (!u)
        u = unique(lw_s, words, last_part);
    if (u)
        return u;
    int lw = (int)strlen(w), limit = lw / 3 > 2 ? lw / 3 : 2;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; words[i]; i++) {
        int lc_n = (int)strlen(words[i]);
        if (abs(lc_n - lw) >= best_d)
            continue;        /* the distance is at least the length difference */
        int d = rt_edit_distance(lw_s, lower(words[i], lc, sizeof lc));
        if (d < best_d && d < lw && 2 * d <= lc_n + 1) {
            best = words[i];
            best_d = d;
        }
    }
    return best;
}

/* ---- parsing values ------------------------------------------------------- */

static int parse_real(const char *s, double *out)
{
    /* JSON's numbers: strtod's hexadecimal forms (0x10, 0x1p4) are not among them */
    if (!*s || isspace((unsigned char)*s) || strpbrk(s, "xX"))
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* Integers may be written as reals with an integral value ("1e3"), since JSON does
 * not tell them apart; plain digits are read exactly. */
static int parse_int(const char *s, int64_t *out)
{
    if (!*s || isspace((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*end && errno == 0) {
        *out = v;
        return 0;
    }
    double d;
    if (parse_real(s, &d) || d != floor(d) || fabs(d) >= 9.2e18)
        return -1;
    *out = (int64_t)d;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (!*s || isspace((unsigned char)*s) || *s == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*end && errno == 0) {
        *out = v;
        return 0;
    }
    double d;
    if (parse_real(s, &d) || d != floor(d) || d < 0 || d >= 18446744073709551616.0)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int in_range(double v, int range)
{
    switch (range) {
    case R_POS: return v > 0;
    case R_NONNEG: return v >= 0;
    case R_UNIT_OPEN: return v >= 0 && v < 1;
    case R_UNIT: return v >= 0 && v <= 1;
    case R_FRAC: return v > 0 && v <= 1;
    }
    return 1;
}

static const char *range_text(int range)
{
    switch (range) {
    case R_POS: return " > 0";
    case R_NONNEG: return " >= 0";
    case R_UNIT_OPEN: return " in [0, 1)";
    case R_UNIT: return " in [0, 1]";
    case R_FRAC: return " in (0, 1]";
    }
    return "";
}

/* "DD:HH:MM:SS" (each part digits, any size, as Lightning's max_time) or seconds. */
static int parse_duration(const char *s, double *out)
{
    if (!strchr(s, ':'))
        return parse_real(s, out);
    static const double unit[4] = {86400, 3600, 60, 1};
    double total = 0;
    for (int i = 0; i < 4; i++) {
        int digits = 0;
        double v = 0;
        for (; isdigit((unsigned char)*s); s++, digits++)
            v = v * 10 + (*s - '0');
        if (digits == 0 || digits > 9 || *s != (i < 3 ? ':' : '\0'))
            return -1;
        if (i < 3)
            s++;
        total += v * unit[i];
    }
    *out = total;
    return 0;
}

/* Finds word `s` in a space-separated list; returns its index or -1. */
static int enum_index(const char *names, const char *s)
{
    size_t n = strlen(s);
    int i = 0;
    for (const char *p = names; *p; i++) {
        size_t len = strcspn(p, " ");
        if (len == n && strncmp(p, s, n) == 0)
            return i;
        p += len;
        while (*p == ' ')
            p++;
    }
    return -1;
}

/* The index-th word of a space-separated list, into buf. */
static const char *enum_name(const char *names, int index, char *buf, size_t len)
{
    const char *p = names;
    for (int i = 0; i < index && *p; i++) {
        p += strcspn(p, " ");
        while (*p == ' ')
            p++;
    }
    size_t n = strcspn(p, " ");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

static int is_ident(const char *s)
{
    if (!isalpha((unsigned char)*s) && *s != '_')
        return 0;
    for (s++; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

/* ---- messages ------------------------------------------------------------ */

/* What a field accepts, completing "expected ...". */
static void expect_text(const Field *f, char *buf, size_t len)
{
    const char *ornull = f->nullable ? " or null" : "";
    switch (f->type) {
    case F_DATA:
        snprintf(buf, len, "null (files go in %s.INPUT=PATH)", f->key);
        return;
    case F_INT:
        if (f->max < BIG)
            snprintf(buf, len, "an integer in [%" PRId64 ", %" PRId64 "]%s", f->min, f->max,
                     ornull);
        else
            snprintf(buf, len, "an integer >= %" PRId64 "%s", f->min, ornull);
        return;
    case F_U64:
        snprintf(buf, len, "an integer in [0, 2^64)");
        return;
    case F_REAL:
        snprintf(buf, len, "a number%s%s", range_text(f->range), ornull);
        return;
    case F_BOOL:
        snprintf(buf, len, "true or false");
        return;
    case F_ENUM: {
        size_t o = (size_t)snprintf(buf, len, "one of ");
        for (const char *p = f->names; *p && o < len;) {
            size_t n = strcspn(p, " ");
            o += (size_t)snprintf(buf + o, len - o, "%.*s%s", (int)n, p, p[n] ? ", " : "");
            p += n;
            while (*p == ' ')
                p++;
        }
        return;
    }
    case F_DURATION:
        snprintf(buf, len, "a duration \"DD:HH:MM:SS\" or seconds > 0, or null");
        return;
    case F_PAIR:
        snprintf(buf, len, "2 numbers%s", range_text(f->range));
        return;
    case F_PATH:
        snprintf(buf, len, "a path or null");
        return;
    case F_SECTION:
        snprintf(buf, len, "an object or null");
        return;
    case F_GLOBS:
        snprintf(buf, len, "a list of parameter names or patterns (* ? [...]), or null");
        return;
    }
}

static int looks_plain(const char *s)
{
    char *end;
    if (!strcmp(s, "true") || !strcmp(s, "false") || !strcmp(s, "null"))
        return 1;
    if (!*s || isspace((unsigned char)*s))
        return 0;
    strtod(s, &end);       /* "inf" and "1e999" read as numbers, shown bare */
    return !*end;
}

/* User text for a one-line message: control characters escaped, at most 60 bytes. */
static const char *show(const char *s, char *buf)
{
    char *o = buf;
    size_t i = 0;
    for (; s[i] && i < 60; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f)
            o += sprintf(o, "\\x%02x", ch);
        else
            *o++ = (char)ch;
    }
    strcpy(o, s[i] ? "..." : "");
    return buf;
}

/* How the offending value is shown: as its JSON type makes clear (a string where a
 * number belongs is "\"32\""), quoted when it is a word. */
static void got_text(const Field *f, int jtype, const char *value, char *buf, size_t len)
{
    char shown[4 * 60 + 4];
    const char *v = show(value, shown);
    int stringish = f && (f->type == F_ENUM || f->type == F_PATH || f->type == F_DATA ||
                          f->type == F_DURATION || f->type == F_GLOBS);
    switch (jtype) {
    case 'o': snprintf(buf, len, "an object"); return;
    case 'a': snprintf(buf, len, "[%s]", v); return;
    case 's':
        snprintf(buf, len, stringish ? "'%s'" : "\"%s\"", v);
        return;
    case 'n': case 'b': case 'z': snprintf(buf, len, "%s", v); return;
    }
    if (looks_plain(value))
        snprintf(buf, len, "%s", v);
    else
        snprintf(buf, len, "'%s'", v);
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int bad_value(const Field *f, int jtype, const char *v, char *err, size_t errlen)
{
    char want[160], got[300];
    expect_text(f, want, sizeof want);
    got_text(f, jtype, v, got, sizeof got);
    int n = fail(err, errlen, "expected %s, got %s", want, got);
    if (f->type == F_ENUM && jtype != 'n' && jtype != 'b' && jtype != 'z' && jtype != 'o' &&
        jtype != 'a') {
        /* words of the list as an array for rt_closest */
        const char *words[16];
        char store[16][32];
        int k = 0;
        for (const char *p = f->names; *p && k < 15; k++) {
            size_t m = strcspn(p, " ");
            snprintf(store[k], sizeof store[k], "%.*s", (int)m, p);
            words[k] = store[k];
            p += m;
            while (*p == ' ')
                p++;
        }
        words[k] = NULL;
        const char *near = rt_closest(v, words);
        size_t o = err ? strlen(err) : 0;
        if (near && err && o < errlen)
            snprintf(err + o, errlen - o, "; did you mean '%s'?", near);
    }
    return n;
}

/* JSON types a field takes, for rt_config_set_typed: n s b z a o. */
static int type_ok(const Field *f, int jtype)
{
    if (jtype == 0)
        return 1;
    if (jtype == 'z')
        return f->nullable;
    switch (f->type) {
    case F_DATA: return 0;
    case F_INT: case F_U64: case F_REAL: return jtype == 'n';
    case F_BOOL: return jtype == 'b';
    case F_ENUM: case F_PATH: return jtype == 's';
    case F_DURATION: return jtype == 's' || jtype == 'n';
    case F_PAIR: return jtype == 'a';
    case F_SECTION: return jtype == 'o';
    case F_GLOBS: return jtype == 'a' || jtype == 's';
    }
    return 0;
}

/* ---- setting ------------------------------------------------------------- */

#define AT(c, f, T) ((T *)((char *)(c) + (f)->off))

static const Field *find_field(const char *key)
{
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(fields[i].key, key))
            return &fields[i];
    return NULL;
}

static int is_null(const char *v) { return !strcmp(v, "null"); }

static void reset_prefix(rt_train_config *c, const char *prefix, const char *keep1,
                         const char *keep2);

/* null into a nullable field: 0, or -1 where null means nothing for its type. */
static int set_null(rt_train_config *c, const Field *f)
{
    switch (f->type) {
    case F_INT: *AT(c, f, int64_t) = -1; return 0;
    case F_REAL: case F_DURATION: *AT(c, f, double) = NAN; return 0;
    case F_PATH: case F_GLOBS: memset(AT(c, f, char), 0, RT_PATH_MAX); return 0;
    case F_SECTION:
        /* disabled: the subkeys go back to their defaults, so a disabled section
         * dumps as one line and still round-trips exactly */
        *AT(c, f, int) = 0;
        reset_prefix(c, f->key, NULL, NULL);
        return 0;
    }
    return -1;
}

/* "X,Y" (two reals in the field's range) into a pair field: 0, or -1. */
static int set_pair(rt_train_config *c, const Field *f, const char *v)
{
    const char *comma = strchr(v, ',');
    char a[64], b[64];
    if (!comma || strchr(comma + 1, ',') || (size_t)(comma - v) >= sizeof a ||
        strlen(comma + 1) >= sizeof b)
        return -1;
    snprintf(a, sizeof a, "%.*s", (int)(comma - v), v);
    const char *pb = comma + 1;
    while (*pb == ' ')
        pb++;     /* "0.9, 0.999" on a command line */
    snprintf(b, sizeof b, "%s", pb);
    double x, y;
    if (parse_real(a, &x) || parse_real(b, &y) || !in_range(x, f->range) || !in_range(y, f->range))
        return -1;
    *AT(c, f, double) = x;
    *(double *)((char *)c + f->off2) = y;
    return 0;
}

/* "A,B" (a command line's, a dump's) or "\"A\",\"B\"" (a JSON array's items) into a
 * patterns field, joined by ',' without quotes: 0, or -1 when an item is empty or
 * holds a comma, a quote, a backslash or a control character. */
static int set_globs(rt_train_config *c, const Field *f, const char *v)
{
    char out[RT_PATH_MAX];
    size_t o = 0;
    for (const char *p = v; *p;) {
        size_t n = strcspn(p, ",");
        const char *item = p;
        while (n && *item == ' ')
            item++, n--;
        while (n && item[n - 1] == ' ')
            n--;
        if (n >= 2 && item[0] == '"' && item[n - 1] == '"')
            item++, n -= 2;
        if (n == 0 || o + n + 1 >= sizeof out)
            return -1;
        for (size_t i = 0; i < n; i++)
            if (item[i] == '"' || item[i] == '\\' || (unsigned char)item[i] < 0x20)
                return -1;
        if (o)
            out[o++] = ',';
        memcpy(out + o, item, n);
        o += n;
        p += strcspn(p, ",");
        if (*p == ',' && !*++p)
            return -1;   /* a trailing comma */
    }
    memset(AT(c, f, char), 0, RT_PATH_MAX);
    memcpy(AT(c, f, char), out, o);
    return 0;
}

/* torch.optim.Muon's defaults where they are not AdamW's */
static void muon_defaults(rt_train_config *c)
{
    c->weight_decay = 0.1;
    c->momentum = 0.95;
    c->nesterov = 1;
    c->eps = 1e-7;
}

/* Parses v into the field; no side effects on other fields except a section reset. */
static int set_field(rt_train_config *c, const Field *f, int jtype, const char *v, char *err,
                     size_t errlen)
{
    if (!type_ok(f, jtype))
        return bad_value(f, jtype, v, err, errlen);
    if (is_null(v) && f->nullable && f->type != F_DATA && set_null(c, f) == 0)
        return 0;
    switch (f->type) {
    case F_DATA:
        if (!is_null(v))
            return bad_value(f, jtype, v, err, errlen);
        *(int *)((char *)c + f->off2) = 0;
        memset((char *)c + f->off, 0, RT_MAX_INPUTS * sizeof(rt_data_entry));
        return 0;
    case F_INT: {
        int64_t x;
        if (parse_int(v, &x) || x < f->min || x > f->max)
            return bad_value(f, jtype, v, err, errlen);
        *AT(c, f, int64_t) = x;
        return 0;
    }
    case F_U64: {
        uint64_t x;
        if (parse_u64(v, &x))
            return bad_value(f, jtype, v, err, errlen);
        *AT(c, f, uint64_t) = x;
        return 0;
    }
    case F_REAL: {
        double x;
        if (parse_real(v, &x) || !in_range(x, f->range))
            return bad_value(f, jtype, v, err, errlen);
        *AT(c, f, double) = x;
        return 0;
    }
    case F_BOOL:
        if (strcmp(v, "true") && strcmp(v, "false"))
            return bad_value(f, jtype, v, err, errlen);
        *AT(c, f, int) = v[0] == 't';
        return 0;
    case F_ENUM: {
        int i = enum_index(f->names, v);
        if (i < 0)
            return bad_value(f, jtype, v, err, errlen);
        *AT(c, f, int) = i;
        return 0;
    }
    case F_DURATION: {
        double x;
        if (parse_duration(v, &x) || !(x > 0))
            return bad_value(f, jtype, v, err, errlen);
        *AT(c, f, double) = x;
        return 0;
    }
    case F_PAIR:
        return set_pair(c, f, v) == 0 ? 0 : bad_value(f, jtype, v, err, errlen);
    case F_PATH: {
        size_t n = strlen(v);
        if (n == 0 || n >= RT_PATH_MAX || strchr(v, '\n'))
            return bad_value(f, jtype, v, err, errlen);
        memset(AT(c, f, char), 0, RT_PATH_MAX);   /* no stale tail: equal configs, equal bytes */
        memcpy(AT(c, f, char), v, n + 1);
        return 0;
    }
    case F_SECTION:
        if (!strcmp(v, "false")) {
            *AT(c, f, int) = 0;
            reset_prefix(c, f->key, NULL, NULL);
            return 0;
        }
        if (!jtype && v[0] == '{' && strcmp(v, "{}"))
            return fail(err, errlen, "an object is set key by key on a command line (--set "
                        "%s.KEY=VALUE); {} turns %s on with its defaults, null turns it off",
                        f->key, f->key);
        if (strcmp(v, "true") && strcmp(v, "{}"))
            return bad_value(f, jtype, v, err, errlen);
        *AT(c, f, int) = 1;
        return 0;
    case F_GLOBS:
        return set_globs(c, f, v) == 0 ? 0 : bad_value(f, jtype, v, err, errlen);
    }
    rt_die("bad field type %d", f->type);
}

/* Puts every field under "prefix." back to its default, except keep1/keep2. */
static void reset_prefix(rt_train_config *c, const char *prefix, const char *keep1,
                         const char *keep2)
{
    size_t n = strlen(prefix);
    for (int i = 0; i < N_FIELDS; i++) {
        const Field *f = &fields[i];
        if (strncmp(f->key, prefix, n) || f->key[n] != '.' || !f->def)
            continue;
        if ((keep1 && !strcmp(f->key, keep1)) || (keep2 && !strcmp(f->key, keep2)))
            continue;
        char err[256];
        if (set_field(c, f, 0, f->def, err, sizeof err))
            rt_die("default of %s: %s", f->key, err);
    }
}

void rt_config_defaults(rt_train_config *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_FIELDS; i++) {
        char err[256];
        if (fields[i].def && set_field(c, &fields[i], 0, fields[i].def, err, sizeof err))
            rt_die("default of %s: %s", fields[i].key, err);
    }
    c->epochs = RT_UNSET;
    c->val_every_epochs = RT_UNSET;
}

/* Left out of the spec, epochs is 1 where nothing else ends the run, else no limit
 * (Lightning's max_epochs: -1 once max_steps or max_time is set); -1: no limit. */
int64_t rt_epochs(const rt_train_config *c)
{
    if (c->epochs != RT_UNSET)
        return c->epochs;
    return c->max_steps < 0 && isnan(c->max_time) ? 1 : -1;
}

/* Left out, validate.every_epochs is 1 unless validate.every_steps is set (as
 * Lightning's integer val_check_interval, which validates every N batches only). */
int64_t rt_val_every_epochs(const rt_train_config *c)
{
    if (c->val_every_epochs != RT_UNSET)
        return c->val_every_epochs;
    return c->val_every_steps < 0 ? 1 : -1;
}

/* data.train.NAME=PATH (or =null to drop the entry). */
static int set_data_entry(rt_train_config *c, const Field *f, const char *name, int jtype,
                          const char *v, char *err, size_t errlen)
{
    rt_data_entry *e = (rt_data_entry *)((char *)c + f->off);
    int *n = (int *)((char *)c + f->off2);
    char shown[4 * 60 + 4];
    if (!is_ident(name) || strlen(name) >= sizeof e->key)
        return fail(err, errlen, "bad input name '%s': expected a name of letters, digits "
                    "and '_', at most %zu long", show(name, shown), sizeof e->key - 1);
    int i = 0;
    while (i < *n && strcmp(e[i].key, name))
        i++;
    if (is_null(v) && jtype != 's') {
        if (i < *n) {
            memmove(&e[i], &e[i + 1], (size_t)(*n - i - 1) * sizeof *e);
            (*n)--;
            memset(&e[*n], 0, sizeof *e);   /* equal configs stay equal bytes */
        }
        return 0;
    }
    size_t len = strlen(v);
    if ((jtype && jtype != 's') || len == 0 || len >= RT_PATH_MAX || strchr(v, '\n')) {
        char got[300];
        got_text(f, jtype, v, got, sizeof got);
        return fail(err, errlen, "expected a file path, got %s", got);
    }
    if (i == *n) {
        if (*n == RT_MAX_INPUTS)
            return fail(err, errlen, "too many files in %s (at most %d)", f->key,
                        RT_MAX_INPUTS);
        (*n)++;
        snprintf(e[i].key, sizeof e[i].key, "%s", name);
    }
    memset(e[i].path, 0, sizeof e[i].path);
    memcpy(e[i].path, v, len + 1);
    return 0;
}

static int unknown_key(const char *raw_key, char *err, size_t errlen)
{
    const char *near;
    char buf[128], shown[4 * 60 + 4];
    const char *key = show(raw_key, shown);
    if (!strcmp(raw_key, "data"))
        return fail(err, errlen, "'data' is a group, set file by file: data.train.INPUT=PATH, "
                    "data.val.INPUT=PATH (data.val=null: no validation)");
    if (!strncmp(raw_key, "data.", 5)) {
        /* suggest on "data.X" only, keeping the input name: data.trian.x -> data.train.x */
        const char *dot = strchr(raw_key + 5, '.');
        size_t n = dot ? (size_t)(dot - raw_key) : strlen(raw_key);
        snprintf(buf, sizeof buf, "%.*s", (int)(n < 100 ? n : 100), raw_key);
        static const char *const data_keys[] = {"data.train", "data.val", NULL};
        near = rt_closest(buf, data_keys);
        char rest[4 * 60 + 4];
        if (near)
            return fail(err, errlen, "unknown key '%s'; did you mean '%s%s'?", key, near,
                        dot ? show(dot, rest) : "");
        return fail(err, errlen, "unknown key '%s'; data files go in data.train.INPUT "
                    "and data.val.INPUT", key);
    }
    near = rt_closest(raw_key, rt_config_keys);
    if (near)
        return fail(err, errlen, "unknown key '%s'; did you mean '%s'?", key, near);
    return fail(err, errlen, "unknown key '%s'", key);
}

/* rt_config_set with the JSON type of the value the text came from ('n' number,
 * 's' string, 'b' boolean, 'z' null, 'a' array rendered "A,B", 'o' object), or 0
 * for text from a command line. The compiler needs it so that "batch_size": "32"
 * is an error although --set batch_size=32 is fine. */
int rt_config_set_typed(rt_train_config *c, const char *key, int jtype, const char *value,
                        char *err, size_t errlen)
{
    const Field *f = find_field(key);
    if (!f) {
        for (int i = 0; i < N_FIELDS; i++) {
            size_t n = strlen(fields[i].key);
            if (fields[i].type == F_DATA && !strncmp(key, fields[i].key, n) && key[n] == '.')
                return set_data_entry(c, &fields[i], key + n + 1, jtype, value, err, errlen);
        }
        return unknown_key(key, err, errlen);
    }
    if (f->type == F_ENUM && f->off == OFF(opt)) {
        /* a new optimizer type brings its own defaults for the fields that differ
         * (sgd: weight_decay 0); lr is shared and kept */
        int old = c->opt;
        if (set_field(c, f, jtype, value, err, errlen))
            return -1;
        if (c->opt != old) {
            reset_prefix(c, "optimizer", "optimizer.type", "optimizer.lr");
            if (c->opt == RT_OPT_SGD)
                c->weight_decay = 0;
            if (c->opt == RT_OPT_MUON)
                muon_defaults(c);
        }
        return 0;
    }
    if (f->type == F_ENUM && f->off == OFF(d_opt)) {   /* as optimizer.type */
        int old = c->d_opt;
        if (set_field(c, f, jtype, value, err, errlen))
            return -1;
        if (c->d_opt != old) {
            reset_prefix(c, "optimizer_d", "optimizer_d.type", "optimizer_d.lr");
            if (c->d_opt == RT_OPT_SGD)
                c->d_weight_decay = 0;
        }
        c->has_opt_d = 1;   /* (a subkey enables its section, as below) */
        return 0;
    }
    if (f->type == F_ENUM && f->off == OFF(sched)) {
        /* likewise a new schedule type: its own fields back to their defaults (a
         * --set schedule.type=constant must not trip over the spec's final_lr_frac);
         * warmup_steps applies to every type and is kept */
        int old = c->sched;
        if (set_field(c, f, jtype, value, err, errlen))
            return -1;
        if (c->sched != old)
            reset_prefix(c, "schedule", "schedule.type", "schedule.warmup_steps");
        return 0;
    }
    if (set_field(c, f, jtype, value, err, errlen))
        return -1;
    /* a subkey of a section enables the section */
    for (int i = 0; i < N_FIELDS; i++) {
        size_t n = strlen(fields[i].key);
        if (fields[i].type == F_SECTION && !strncmp(key, fields[i].key, n) && key[n] == '.')
            *AT(c, &fields[i], int) = 1;
    }
    return 0;
}

int rt_config_set(rt_train_config *c, const char *key, const char *value, char *err,
                  size_t errlen)
{
    return rt_config_set_typed(c, key, 0, value, err, errlen);
}

/* A JSON string's contents ("a\"b" -> a"b), or -1 when it is not one whole string. */
static int json_unquote(const char *s, char *out, size_t outlen)
{
    size_t n = strlen(s), o = 0;
    if (n < 2 || s[0] != '"' || s[n - 1] != '"')
        return -1;
    for (size_t i = 1; i < n - 1; i++) {
        char ch = s[i];
        if (ch == '"')
            return -1;
        if (ch == '\\') {
            ch = s[++i];
            if (i >= n - 1)
                return -1;
            switch (ch) {
            case '"': case '\\': case '/': break;
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            default: return -1;      /* \uXXXX and the rest: not worth it on a command line */
            }
        }
        if (o + 1 >= outlen)
            return -1;
        out[o++] = ch;
    }
    out[o] = 0;
    return 0;
}

/* "[0.9, 0.95]" -> "0.9,0.95" (the form an array takes in rt_config_set_typed), or -1
 * when s is not bracketed. */
static int json_list(const char *s, char *out, size_t outlen)
{
    size_t n = strlen(s), o = 0;
    if (n < 2 || s[0] != '[' || s[n - 1] != ']')
        return -1;
    for (size_t i = 1; i < n - 1; i++) {
        if (isspace((unsigned char)s[i]))
            continue;
        if (o + 1 >= outlen)
            return -1;
        out[o++] = s[i];
    }
    out[o] = 0;
    return 0;
}

int rt_config_set_pass(const char *arg)
{
    return strncmp(arg, "optimizer.type=", 15) && strncmp(arg, "schedule.type=", 14);
}

int rt_config_set_arg(rt_train_config *c, const char *arg, char *err, size_t errlen)
{
    const char *eq = strchr(arg, '=');
    char key[256], shown[4 * 60 + 4], text[RT_PATH_MAX + 8], msg[512];
    if (!eq || eq == arg)
        return fail(err, errlen, "--set %s: expected KEY=VALUE", show(arg, shown));
    if ((size_t)(eq - arg) >= sizeof key)
        return fail(err, errlen, "--set: key too long");
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = 0;
    const char *value = eq + 1;
    int jtype = 0;
    if (!json_unquote(value, text, sizeof text)) {
        jtype = 's';
        value = text;
    } else if (!json_list(value, text, sizeof text)) {
        jtype = 'a';
        value = text;
    }
    /* a data file named on a command line is where the user is: a relative path is
     * taken from the current folder (a spec's paths are from the spec's folder) */
    char abs[RT_PATH_MAX + 8];
    if ((!strncmp(key, "data.train.", 11) || !strncmp(key, "data.val.", 9)) && value[0] &&
        value[0] != '/' && (jtype == 's' || strcmp(value, "null"))) {
        char cwd[RT_PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return fail(err, errlen, "--set %s: the current folder is unknown (%s), so the "
                        "relative path %s is too; give an absolute one", show(key, shown),
                        strerror(errno), value);
        if ((size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, value) >= RT_PATH_MAX)
            return fail(err, errlen, "--set %s: path too long", show(key, shown));
        value = abs;
        if (!jtype)
            jtype = 's';
    }
    if (!find_field(key)) {
        /* a group of keys (schedule, optimizer, ...) named as if it were one */
        size_t n = strlen(key);
        const char *first = NULL;
        for (int i = 0; i < N_FIELDS && !first; i++)
            if (!strncmp(fields[i].key, key, n) && fields[i].key[n] == '.' &&
                fields[i].type != F_DATA)
                first = fields[i].key;
        if (first)
            return fail(err, errlen, "--set %s: %s is a group of keys, not a value%s; set "
                        "its keys one by one, e.g. --set %s=...", show(key, shown), key,
                        !strcmp(value, "null") ? " (it cannot be turned off)" : "", first);
    }
    if (rt_config_set_typed(c, key, jtype, value, msg, sizeof msg))
        return fail(err, errlen, "--set %s: %s", show(key, shown), msg);
    return 0;
}

/* ---- dumping ------------------------------------------------------------- */

/* The shortest %g text that reads back as exactly v. */
static void fmt_real(char *buf, size_t len, double v)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void fmt_value(const rt_train_config *c, const Field *f, char *buf, size_t len)
{
    switch (f->type) {
    case F_INT: {
        int64_t v = *AT(c, f, const int64_t);
        if (f->nullable && v == -1)
            snprintf(buf, len, "null");
        else
            snprintf(buf, len, "%" PRId64, v);
        return;
    }
    case F_U64:
        snprintf(buf, len, "%" PRIu64, *AT(c, f, const uint64_t));
        return;
    case F_REAL: {
        double v = *AT(c, f, const double);
        if (isnan(v))
            snprintf(buf, len, "null");
        else
            fmt_real(buf, len, v);
        return;
    }
    case F_BOOL:
        snprintf(buf, len, "%s", *AT(c, f, const int) ? "true" : "false");
        return;
    case F_ENUM:
        enum_name(f->names, *AT(c, f, const int), buf, len);
        return;
    case F_DURATION: {
        double v = *AT(c, f, const double);
        if (isnan(v))
            snprintf(buf, len, "null");
        else if (v == floor(v) && v < 1e12) {
            int64_t s = (int64_t)v;
            snprintf(buf, len, "%02" PRId64 ":%02" PRId64 ":%02" PRId64 ":%02" PRId64,
                     s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
        } else
            fmt_real(buf, len, v);
        return;
    }
    case F_PAIR: {
        char a[40], b[40];
        fmt_real(a, sizeof a, *AT(c, f, const double));
        fmt_real(b, sizeof b, *(const double *)((const char *)c + f->off2));
        snprintf(buf, len, "%s,%s", a, b);
        return;
    }
    case F_PATH: case F_GLOBS: {
        const char *p = AT(c, f, const char);
        snprintf(buf, len, "%s", p[0] ? p : "null");
        return;
    }
    case F_SECTION:
        snprintf(buf, len, "%s", *AT(c, f, const int) ? "true" : "null");
        return;
    }
    rt_die("bad field type %d", f->type);
}

static char *line_dup(const char *key, const char *value)
{
    size_t n = strlen(key) + strlen(value) + 2;
    char *s = malloc(n);
    if (!s)
        rt_die("out of memory");
    snprintf(s, n, "%s=%s", key, value);
    return s;
}

char **rt_config_dump(const rt_train_config *c, int *n)
{
    int cap = N_FIELDS + 2 * RT_MAX_INPUTS + 1;
    char **lines = calloc((size_t)cap, sizeof *lines);
    if (!lines)
        rt_die("out of memory");
    int k = 0;
    char buf[RT_PATH_MAX + 64];
    for (int i = 0; i < N_FIELDS; i++) {
        const Field *f = &fields[i];
        if (f->type == F_DATA) {
            const rt_data_entry *e = (const rt_data_entry *)((const char *)c + f->off);
            int count = *(const int *)((const char *)c + f->off2);
            for (int j = 0; j < count; j++) {
                snprintf(buf, sizeof buf, "%s.%s", f->key, e[j].key);
                lines[k++] = line_dup(buf, e[j].path);
            }
            continue;
        }
        if (f->type == F_INT && *AT(c, f, const int64_t) == RT_UNSET)
            continue;   /* left out: its default follows other fields (rt_epochs) */
        if (f->quiet && ((f->type == F_INT && *AT(c, f, const int64_t) == -1) ||
                         (f->type == F_REAL && isnan(*AT(c, f, const double))) ||
                         (f->type == F_GLOBS && !*AT(c, f, const char)) ||
                         (f->type == F_ENUM && *AT(c, f, const int) == 0)))
            continue;   /* left out while null (an enum: at its first value) */
        if (f->type == F_SECTION && f->quiet && !*AT(c, f, const int)) {
            size_t len = strlen(f->key);   /* left out, with its subkeys */
            while (i + 1 < N_FIELDS && !strncmp(fields[i + 1].key, f->key, len) &&
                   fields[i + 1].key[len] == '.')
                i++;
            continue;
        }
        fmt_value(c, f, buf, sizeof buf);
        lines[k++] = line_dup(f->key, buf);
        if (f->type == F_SECTION && !*AT(c, f, const int)) {
            /* a disabled section's subkeys hold defaults: skip them */
            size_t len = strlen(f->key);
            while (i + 1 < N_FIELDS && !strncmp(fields[i + 1].key, f->key, len) &&
                   fields[i + 1].key[len] == '.')
                i++;
        }
    }
    *n = k;
    return lines;
}

/* ---- resuming: the run's config under an edited spec ------------------------ */

/* A dump line's group: the part of its key before the first '.' ("optimizer" for
 * optimizer.lr, "batch_size"), for data entries the set ("data.val"). A group's lines,
 * taken together from one config, set all of it again whatever came before (a type
 * or a section resets its other keys first). */
static size_t group_len(const char *line)
{
    size_t k = strcspn(line, "=.");
    if (line[k] == '.' && k == 4 && !strncmp(line, "data", 4))
        k += 1 + strcspn(line + k + 1, "=.");
    return k;
}

/* The lines of `lines` in group g (g of length gl), joined by '\n' ("" when none). */
static char *group_text(char *const *lines, int n, const char *g, size_t gl)
{
    size_t len = 1;
    for (int i = 0; i < n; i++)
        if (group_len(lines[i]) == gl && !strncmp(lines[i], g, gl))
            len += strlen(lines[i]) + 1;
    char *t = malloc(len);
    if (!t)
        rt_die("out of memory");
    t[0] = 0;
    for (int i = 0; i < n; i++)
        if (group_len(lines[i]) == gl && !strncmp(lines[i], g, gl))
            strcat(strcat(t, lines[i]), "\n");
    return t;
}

static int seen_group(char **out, int k, const char *g, size_t gl)
{
    for (int i = 0; i < k; i++)
        if (group_len(out[i]) == gl && !strncmp(out[i], g, gl))
            return 1;
    return 0;
}

char **rt_config_merge(char *const *spec_then, int n_then, char *const *run, int n_run,
                       char *const *spec_now, int n_now, int *n_out)
{
    char **out = calloc((size_t)(n_run + n_now + 1), sizeof *out);
    if (!out)
        rt_die("out of memory");
    int k = 0;
    /* every group of either config, in the order of the spec's now, then the run's */
    for (int pass = 0; pass < 2; pass++) {
        char *const *src = pass ? run : spec_now;
        int ns = pass ? n_run : n_now;
        for (int i = 0; i < ns; i++) {
            size_t gl = group_len(src[i]);
            if (seen_group(out, k, src[i], gl))
                continue;
            char *then = group_text(spec_then, n_then, src[i], gl);
            char *now = group_text(spec_now, n_now, src[i], gl);
            /* the spec left the group as it was: the run's lines (its --set kept); an
             * edited group is the spec's now */
            int keep_run = !strcmp(then, now);
            free(then);
            free(now);
            char *const *from = keep_run ? run : spec_now;
            int nf = keep_run ? n_run : n_now;
            /* (none, when the chosen side lacks the group: a data set dropped with
             * --set data.val=null; deciding again for its next line changes nothing) */
            for (int j = 0; j < nf; j++)
                if (group_len(from[j]) == gl && !strncmp(from[j], src[i], gl) &&
                    !(out[k++] = strdup(from[j])))
                    rt_die("out of memory");
        }
    }
    *n_out = k;
    return out;
}

/* ---- cross-field rules ----------------------------------------------------- */

static int has_key(const rt_data_entry *e, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].key, key))
            return 1;
    return 0;
}

double rt_opt_state_bytes(const rt_train_config *c, int64_t param_floats, int64_t ranks)
{
    int64_t floats = c->dist != RT_DIST_DDP && ranks > 1
                         ? (param_floats + ranks - 1) / ranks : param_floats;
    double each = c->opt != RT_OPT_SGD ? 8 : c->momentum > 0 ? 4 : 0;   /* bytes a float */
    if (c->has_ema || c->has_swa)   /* (the average, whole on every rank: both refuse ZeRO) */
        each += 4;
    return each * (double)floats;
}

int rt_config_validate(const rt_train_config *c, char *err, size_t errlen)
{
    return rt_config_check(c, err, errlen, NULL, 0);
}

/* The rules between one optimizer group's keys ("optimizer" or "optimizer_d"). */
static int check_opt(const rt_opt_group *g, const char *grp, char *err, size_t errlen, char *key,
                     size_t keylen)
{
    rt_train_config d;
    rt_config_defaults(&d);
    if (g->opt == RT_OPT_ADAMW && (g->momentum != 0 || g->nesterov)) {
        fail(key, keylen, "%s.%s", grp, g->momentum != 0 ? "momentum" : "nesterov");
        return fail(err, errlen, "%s.momentum and %s.nesterov apply to sgd only (%s.type is "
                    "adamw)", grp, grp, grp);
    }
    if (g->nesterov && !(g->momentum > 0)) {
        fail(key, keylen, "%s.nesterov", grp);
        return fail(err, errlen, "%s.nesterov needs %s.momentum > 0", grp, grp);
    }
    if (g->opt == RT_OPT_SGD && (g->beta1 != d.beta1 || g->beta2 != d.beta2 || g->eps != d.eps)) {
        fail(key, keylen, "%s.%s", grp,
             g->eps != d.eps && g->beta1 == d.beta1 && g->beta2 == d.beta2 ? "eps" : "betas");
        return fail(err, errlen, "%s.betas and %s.eps apply to adamw only (%s.type is sgd)",
                    grp, grp, grp);
    }
    return 0;
}

const char *rt_schedule_name(int sched)
{
    static const char *const names[] = {"constant", "step", "cosine", "linear", "wsd"};
    return sched >= 0 && sched <= RT_SCHED_WSD ? names[sched] : "?";
}

/* The rules of muon's keys: they apply to it alone; AdamW's betas go in its adamw
 * section; momentum below 1; whole matrices on each rank (ddp) */
static int check_muon(const rt_train_config *c, const rt_train_config *d, char *err,
                      size_t errlen, char *key, size_t keylen)
{
    if (c->opt != RT_OPT_MUON) {
        const char *k = c->ns_steps != -1 ? "ns_steps" : c->muon_adjust ? "adjust_lr"
                        : c->has_adamw ? "adamw" : NULL;
        if (!k)
            return 0;
        fail(key, keylen, "optimizer.%s", k);
        return fail(err, errlen, "optimizer.%s applies to muon only (optimizer.type is %s)", k,
                    c->opt == RT_OPT_SGD ? "sgd" : "adamw");
    }
    if (c->beta1 != d->beta1 || c->beta2 != d->beta2) {
        fail(key, keylen, "optimizer.betas");
        return fail(err, errlen, "optimizer.betas: muon has none; the AdamW that trains the "
                    "parameters Muon does not take reads optimizer.adamw.betas");
    }
    if (!(c->lr > 0)) {
        fail(key, keylen, "optimizer.lr");
        return fail(err, errlen, "optimizer.lr must be above 0 for muon (the schedule scales "
                    "optimizer.adamw.lr by the same factor)");
    }
    if (!(c->momentum < 1)) {
        fail(key, keylen, "optimizer.momentum");
        return fail(err, errlen, "optimizer.momentum must be below 1 for muon, got %g",
                    c->momentum);
    }
    if (c->ns_steps > 100) {
        fail(key, keylen, "optimizer.ns_steps");
        return fail(err, errlen, "optimizer.ns_steps must be in [1, 100], got %lld",
                    (long long)c->ns_steps);
    }
    if (c->precision == RT_PREC_FP8) {
        fail(key, keylen, "precision");
        return fail(err, errlen, "optimizer.type muon does not take precision fp8-mixed yet (the "
                    "FP8 GEMMs' weight scales are kept by AdamW's and SGD's kernels); use "
                    "bf16-mixed");
    }
    if (c->dist != RT_DIST_DDP) {
        fail(key, keylen, "distributed.strategy");
        return fail(err, errlen, "optimizer.type muon orthogonalizes whole matrices, which "
                    "ZeRO's shards cut: distributed.strategy must be ddp");
    }
    return 0;
}

/* An optimizer group's fields: the model's (d 0: optimizer) or a GAN discriminator's
 * (d 1: optimizer_d when given, else optimizer). */
rt_opt_group rt_opt_of(const rt_train_config *c, int d)
{
    if (d && c->has_opt_d)
        return (rt_opt_group){c->d_opt, c->d_lr, c->d_beta1, c->d_beta2, c->d_eps,
                              c->d_weight_decay, c->d_momentum, c->d_nesterov};
    return (rt_opt_group){c->opt, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay,
                          c->momentum, c->nesterov};
}

/* The rules rt_config_check applies, a group each: 0, or -1 with err and key set. */
static int check_data(const rt_train_config *c, char *err, size_t errlen,
                      char *key, size_t keylen)
{
    if (c->n_train == 0) {
        fail(key, keylen, "data.train");
        return fail(err, errlen, "data.train is missing: give a file for every model input");
    }
    if (has_key(c->train, c->n_train, "tokens") && c->n_train != 1) {
        fail(key, keylen, "data.train.tokens");
        return fail(err, errlen, "data.train.tokens must be the only entry of data.train");
    }
    for (int i = 0; i < c->n_val; i++)
        if (!has_key(c->train, c->n_train, c->val[i].key)) {
            fail(key, keylen, "data.val.%s", c->val[i].key);
            return fail(err, errlen, "data.val.%s has no counterpart in data.train",
                        c->val[i].key);
        }
    if (c->n_val > 0)
        for (int i = 0; i < c->n_train; i++)
            if (!has_key(c->val, c->n_val, c->train[i].key)) {
                fail(key, keylen, "data.val");
                return fail(err, errlen, "data.val has no file for '%s' (data.train has one)",
                            c->train[i].key);
            }
    return 0;
}

static int check_schedule(const rt_train_config *c, const rt_train_config *d, char *err, size_t errlen,
                          char *key, size_t keylen)
{
    if (c->sched != RT_SCHED_STEP &&
        (c->sched_every_steps != d->sched_every_steps || c->gamma != d->gamma)) {
        fail(key, keylen, "%s", c->sched_every_steps != d->sched_every_steps
                                 ? "schedule.every_steps" : "schedule.gamma");
        return fail(err, errlen, "schedule.every_steps and schedule.gamma apply to "
                    "schedule.type step only");
    }
    if ((c->sched == RT_SCHED_CONSTANT || c->sched == RT_SCHED_STEP) &&
        c->final_lr_frac != d->final_lr_frac) {
        fail(key, keylen, "schedule.final_lr_frac");
        return fail(err, errlen, "schedule.final_lr_frac applies to schedule.type cosine, "
                    "linear and wsd only");
    }
    if (c->sched != RT_SCHED_WSD && (!isnan(c->decay_frac) || c->decay_shape)) {
        fail(key, keylen, "%s", !isnan(c->decay_frac) ? "schedule.decay_frac"
                                                      : "schedule.decay_shape");
        return fail(err, errlen, "schedule.decay_frac and schedule.decay_shape apply to "
                    "schedule.type wsd only");
    }
    if (c->sched >= RT_SCHED_COSINE && rt_epochs(c) < 0 && c->max_steps < 0) {
        fail(key, keylen, "schedule.type");
        return fail(err, errlen, "schedule.type %s needs epochs or max_steps to know its "
                    "length", rt_schedule_name(c->sched));
    }
    return 0;
}

/* validate's keys against each other and data.val, and what early stopping watches */
static int check_validation(const rt_train_config *c, char *err, size_t errlen,
                            char *key, size_t keylen)
{
    if (!isnan(c->val_every_fraction) && c->val_every_steps >= 0) {
        fail(key, keylen, "validate.every_fraction");
        return fail(err, errlen, "validate.every_fraction and validate.every_steps both say "
                    "when to validate (Lightning's val_check_interval is one or the other): "
                    "set one of them to null");
    }
    if (!isnan(c->limit_val_batches) && (c->n_val == 0 || c->val_batches >= 0)) {
        fail(key, keylen, "limit_val_batches");
        return fail(err, errlen, c->n_val == 0 ? "limit_val_batches needs data.val"
                    : "limit_val_batches and validate.batches both say how many batches a "
                      "validation reads: set one of them to null");
    }
    if (c->has_checkpoint && c->ckpt_keep_best > 0 && c->n_val == 0) {
        fail(key, keylen, "checkpoint.keep_best");
        return fail(err, errlen, "checkpoint.keep_best needs data.val: it keeps the weights "
                    "at the best validations (set it to null to train without validation)");
    }
    if (c->n_val == 0 && !isnan(c->val_every_fraction)) {
        fail(key, keylen, "validate.every_fraction");
        return fail(err, errlen, "validate.every_fraction needs data.val (to train without "
                    "validation, set validate.every_fraction to null too)");
    }
    if (c->n_val == 0 && (c->val_every_steps >= 0 || c->val_batches >= 0)) {
        int both = c->val_every_steps >= 0 && c->val_batches >= 0;
        const char *k = both ? "validate.every_steps and validate.batches"
                      : c->val_every_steps >= 0 ? "validate.every_steps" : "validate.batches";
        fail(key, keylen, "%s", c->val_every_steps >= 0 ? "validate.every_steps"
                                                   : "validate.batches");
        return fail(err, errlen, "%s need%s data.val (to train without validation, set %s to "
                    "null too)", k, both ? "" : "s", both ? "them" : k);
    }
    if (c->has_early_stopping && c->es_monitor != RT_MON_LOSS) {
        const char *m = c->es_monitor == RT_MON_VAL_LOSS ? "val_loss" : "val_acc";
        fail(key, keylen, "early_stopping.monitor");
        if (c->n_val == 0)
            return fail(err, errlen, "early_stopping.monitor %s needs data.val", m);
        if (c->val_every_steps < 0 && rt_val_every_epochs(c) < 0 && isnan(c->val_every_fraction))
            return fail(err, errlen, "early_stopping.monitor %s needs validation: set "
                        "validate.every_epochs, validate.every_steps or "
                        "validate.every_fraction", m);
        fail(key, keylen, "%s", "");
    }
    return 0;
}

/* loader.mask's own rules (its inputs against the model: the trainer's setup.c and the
 * compiler's spec_train.c) */
static int check_mask(const rt_train_config *c, char *err, size_t errlen, char *key,
                      size_t keylen)
{
    if (!c->has_mask)
        return 0;
    if (c->mask_token < 0) {
        fail(key, keylen, "loader.mask.token");
        return fail(err, errlen, "loader.mask needs token: the mask token's id (`trainc data "
                    "mlm --dynamic` prints it)");
    }
    if (c->mask_replace + c->mask_random > 1) {
        fail(key, keylen, "loader.mask.random_replace_prob");
        return fail(err, errlen, "loader.mask's mask_replace_prob %g and random_replace_prob "
                    "%g add up to more than 1", c->mask_replace, c->mask_random);
    }
    return 0;
}

/* loader.augment's rules: color_jitter's hue within torchvision's 0.5; random_resized_crop's
 * ranges (in order; ratios where e^ by its series holds), one crop at a time */
static int check_augment(const rt_train_config *c, char *err, size_t errlen, char *key,
                     size_t keylen)
{
    if (c->has_augment && c->has_jitter && c->jitter[3] > 0.5) {
        fail(key, keylen, "loader.augment.color_jitter.hue");
        return fail(err, errlen, "color_jitter's hue %g is past 0.5 (torchvision's bound: a "
                    "shift of half the hue circle either way)", c->jitter[3]);
    }
    if (!c->has_augment || !c->has_rrc)
        return 0;
    if (c->has_crop) {
        fail(key, keylen, "loader.augment.random_resized_crop");
        return fail(err, errlen, "random_resized_crop and random_crop together: one crop at a "
                    "time (set one of them to null)");
    }
    if (c->rrc_smin > c->rrc_smax) {
        fail(key, keylen, "loader.augment.random_resized_crop.scale");
        return fail(err, errlen, "random_resized_crop's scale [%g, %g] is not a range (the "
                    "smaller first)", c->rrc_smin, c->rrc_smax);
    }
    if (c->rrc_r0 > c->rrc_r1 || c->rrc_r0 < 1e-3 || c->rrc_r1 > 1e3) {
        fail(key, keylen, "loader.augment.random_resized_crop.ratio");
        return fail(err, errlen, "random_resized_crop's ratio [%g, %g] must be a range (the "
                    "smaller first) within [0.001, 1000]", c->rrc_r0, c->rrc_r1);
    }
    return 0;
}

/* swa's rules: its lr, epochs to start and end at, one average (not ema's too), whole
 * on every rank (as ema's) */
static int check_swa(const rt_train_config *c, char *err, size_t errlen, char *key,
                     size_t keylen)
{
    if (!c->has_swa)
        return 0;
    fail(key, keylen, "swa");
    if (c->has_ema)
        return fail(err, errlen, "swa and ema together: one average of the weights at a time");
    if (c->dist != RT_DIST_DDP)
        return fail(err, errlen, "swa with distributed.strategy %s is not supported (its "
                    "average of the weights is kept whole on every rank: ddp)",
                    c->dist == RT_DIST_ZERO1 ? "zero1" : "zero2");
    if (rt_epochs(c) < 0)
        return fail(err, errlen, "swa needs epochs: it starts at an epoch and ends with the "
                    "last");
    fail(key, keylen, "swa.lr");
    if (isnan(c->swa_lr))
        return fail(err, errlen, "swa needs lr: the learning rate its epochs anneal to "
                    "(Lightning's swa_lrs)");
    double f = c->swa_epoch_start;
    fail(key, keylen, "swa.epoch_start");
    if (f >= 1.0 && f != floor(f))
        return fail(err, errlen, "%g: a fraction of the epochs (below 1) or the epoch to "
                    "start at (a whole number from 1)", f);
    int64_t k = f < 1.0 ? (int64_t)((double)rt_epochs(c) * f) : (int64_t)f;
    if (k > rt_epochs(c))
        return fail(err, errlen, "%g: epoch %lld is past the run's last (epochs %lld)", f,
                    (long long)k, (long long)rt_epochs(c));
    fail(key, keylen, "%s", "");
    return 0;
}

/* grad_clip_algorithm value clips at grad_clip (Lightning's gradient_clip_val) */
static int check_clip(const rt_train_config *c, char *err, size_t errlen, char *key,
                      size_t keylen)
{
    if (c->grad_clip_algo == RT_CLIP_VALUE && isnan(c->grad_clip)) {
        fail(key, keylen, "grad_clip_algorithm");
        return fail(err, errlen, "grad_clip_algorithm value needs grad_clip: the bound "
                    "each gradient element is clipped to");
    }
    return 0;
}

/* ema's rules: the average of whole weights (ZeRO keeps a shard of each rank's state) */
static int check_ema(const rt_train_config *c, char *err, size_t errlen, char *key,
                     size_t keylen)
{
    if (c->has_ema && c->dist != RT_DIST_DDP) {
        fail(key, keylen, "ema");
        return fail(err, errlen, "ema with distributed.strategy %s is not supported (its "
                    "average of the weights is kept whole on every rank: ddp)",
                    c->dist == RT_DIST_ZERO1 ? "zero1" : "zero2");
    }
    return 0;
}

int rt_config_check(const rt_train_config *c, char *err, size_t errlen, char *key,
                    size_t keylen)
{
    rt_train_config d;
    rt_config_defaults(&d);
    fail(key, keylen, "%s", "");   /* key: the one a failed rule blames (fail formats it) */
    if (check_data(c, err, errlen, key, keylen))
        return -1;
    if (c->has_lora && c->freeze[0]) {   /* (which tensors train is lora's to say) */
        fail(key, keylen, "freeze");
        return fail(err, errlen, "lora freezes every parameter but its adapters itself; name "
                    "the model's own tensors to train as well in lora.train, not freeze");
    }
    if (rt_epochs(c) < 0 && c->max_steps < 0 && isnan(c->max_time))
        return fail(err, errlen, "no stop condition: set epochs, max_steps or max_time");
    rt_opt_group g = rt_opt_of(c, 0);
    if (check_opt(&g, "optimizer", err, errlen, key, keylen))
        return -1;
    g = rt_opt_of(c, 1);
    if (c->has_opt_d && check_opt(&g, "optimizer_d", err, errlen, key, keylen))
        return -1;
    if (check_muon(c, &d, err, errlen, key, keylen))
        return -1;
    if (check_schedule(c, &d, err, errlen, key, keylen) ||
        check_validation(c, err, errlen, key, keylen))
        return -1;
    if (check_mask(c, err, errlen, key, keylen) || check_augment(c, err, errlen, key, keylen) ||
        check_ema(c, err, errlen, key, keylen) ||
        check_clip(c, err, errlen, key, keylen) || check_swa(c, err, errlen, key, keylen))
        return -1;
    if (c->recompute == RT_RECOMPUTE_AUTO && isnan(c->memory_budget_mb)) {
        fail(key, keylen, "recompute");
        return fail(err, errlen, "recompute auto needs memory_budget_mb");
    }
    return 0;
}

double rt_lora_scale(const rt_train_config *c)
{
    return c->lora_rslora ? c->lora_alpha / sqrt((double)c->lora_rank)
                          : c->lora_alpha / (double)c->lora_rank;
}
