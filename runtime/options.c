/* options.c: the trainer's command line, from one table of options. Each row gives an
 * option's name, whether it takes a value, who sees it in --help and what it says
 * there, and the function that reads it: the parser, --help (rt_trainer_options), the
 * names suggested for a misspelt option and rt_trainer_value_options (trainc's own
 * command line splits --NAME=VALUE with it) all come from these rows. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "chat.h"
#include "run.h"

/* ---- reading the values ------------------------------------------------------------- */

static void set_out(Opts *o, const char *v) { o->out = v; }
static void set_init(Opts *o, const char *v) { o->init = v; }
static void set_resume(Opts *o, const char *v) { o->resume = v; }
static void set_quiet(Opts *o, const char *v) { (void)v, o->quiet = 1; }
static void set_eval(Opts *o, const char *v) { (void)v, o->eval = 1; }
static void set_lr_find(Opts *o, const char *v) { (void)v, o->lr_find = 1; }
static void set_profile(Opts *o, const char *v) { (void)v, o->profile = 1; }
/* developer option: finite-difference check, see tests/ */
static void set_gradcheck(Opts *o, const char *v) { (void)v, o->gradcheck = 1; }

static void set_set(Opts *o, const char *v)
{
    if (o->n_sets == 256)
        rt_input_error("too many --set options");
    o->sets[o->n_sets++] = v;
}

static void set_device(Opts *o, const char *d)
{
    if (!strcmp(d, "cpu"))
        o->device = RT_DEVICE_CPU;
    else if (!strcmp(d, "auto"))
        o->device = RT_DEVICE_AUTO;
    else if (!strcmp(d, "cuda"))
        o->device = RT_DEVICE_CUDA;
    else
        rt_input_error("--device: expected cpu, cuda or auto, got '%s'", d);
}

static void set_threads(Opts *o, const char *t)
{
    char *end;
    long v = strtol(t, &end, 10);
    if (*end || v < 1 || v > 1024)
        rt_input_error("--threads: expected an integer from 1 to 1024, got '%s'", t);
    o->threads = (int)v;
}

/* an integer from 0 to most for option `name` */
static long long count_of(const char *name, const char *t, long long most)
{
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    if (*end || !*t || errno == ERANGE || v < 0 || v > most)
        rt_input_error("%s: expected an integer from 0 to %lld, got '%s'", name, most, t);
    return v;
}

static void set_sample(Opts *o, const char *t)
{
    o->sample = count_of("--sample", t, 100000000);
    o->sampling = 1;
}

static void set_fast_dev_run(Opts *o, const char *t)
{
    o->fast_dev_run = count_of("--fast-dev-run", t, 1000000);
    if (o->fast_dev_run < 1)
        rt_input_error("--fast-dev-run: expected an integer from 1, got '%s'", t);
}

static void set_num_samples(Opts *o, const char *t)
{
    o->num_samples = count_of("--num-samples", t, 1 << 20);
    if (o->num_samples < 1)
        rt_input_error("--num-samples: expected an integer from 1, got '%s'", t);
    o->sampling_opt = "--num-samples";
}

static void set_sample_seed(Opts *o, const char *t)
{
    o->sample_seed = count_of("--sample-seed", t, LLONG_MAX);
    o->sampling_opt = "--sample-seed";
}

/* a number for option `name` in [lo, hi] (lo excluded with lo_open), else exit 1
 * saying it expected `what` */
static double number_of(const char *name, const char *t, double lo, int lo_open, double hi,
                        const char *what)
{
    char *end;
    double v = strtod(t, &end);
    if (*end || !*t || !(lo_open ? v > lo : v >= lo) || !(v <= hi))
        rt_input_error("%s: expected %s, got '%s'", name, what, t);
    return v;
}

static void set_temperature(Opts *o, const char *t)
{
    o->temperature = number_of("--temperature", t, 0, 1, DBL_MAX, "a number > 0");
    o->sampling_opt = "--temperature";
}

static void set_top_k(Opts *o, const char *t)
{
    o->top_k = count_of("--top-k", t, INT32_MAX);
    o->sampling_opt = "--top-k";
}

static void set_top_p(Opts *o, const char *t)
{
    o->top_p = number_of("--top-p", t, 0, 1, 1, "a number in (0, 1]");
    o->sampling_opt = "--top-p";
}

static void set_min_p(Opts *o, const char *t)
{
    o->min_p = number_of("--min-p", t, 0, 0, 1, "a number in [0, 1]");
    o->sampling_opt = "--min-p";
}

static void set_repetition_penalty(Opts *o, const char *t)
{
    /* (applied in float, as transformers does: a value float rounds to 0 or inf refused) */
    double v = number_of("--repetition-penalty", t, 0, 1, DBL_MAX, "a number > 0");
    if ((float)v == 0 || isinf((float)v))
        rt_input_error("--repetition-penalty: expected a number > 0, got '%s'", t);
    o->repetition_penalty = v;
    o->sampling_opt = "--repetition-penalty";
}

static void set_predict(Opts *o, const char *v)
{
    o->predict = v;
    o->eval = 1;
}

static void set_reference(Opts *o, const char *v)
{
    (void)v;
    o->reference = 1;
    o->eval = 1;
}

static void set_tokenizer(Opts *o, const char *v) { o->tokenizer = v; }

static void set_prompt(Opts *o, const char *v)
{
    o->prompt = v;
    o->sampling_opt = "--prompt";
}

static void set_prompt_file(Opts *o, const char *v)
{
    o->prompt_file = v;
    o->sampling_opt = "--prompt-file";
}

static void set_stop(Opts *o, const char *v)
{
    if (o->n_stop == RT_MAX_STOPS)
        rt_input_error("--stop: at most %d tokens", RT_MAX_STOPS);
    o->stop[o->n_stop++] = v;
    o->sampling_opt = "--stop";
}

static void set_chat(Opts *o, const char *v)
{
    if (!rt_chat_find(v))
        rt_input_error("--chat: unknown format '%s' (known: %s)", v, rt_chat_names());
    o->chat = v;
    o->sampling_opt = "--chat";
}

static void set_system(Opts *o, const char *v)
{
    o->system = v;
    o->sampling_opt = "--system";
}

static void set_lr_find_steps(Opts *o, const char *t)
{
    char *end;
    long long v = strtoll(t, &end, 10);
    if (*end || v < 2 || v > 100000)
        rt_input_error("--lr-find-steps: expected an integer from 2 to 100000, got '%s'", t);
    o->lr_find_steps = v;
}

static void set_lr_find_range(Opts *o, const char *t)
{
    char *end, *end2;
    double lo = strtod(t, &end), hi = *end == ',' ? strtod(end + 1, &end2) : NAN;
    if (*end != ',' || *end2 || !(lo > 0) || !(hi > lo) || !isfinite(hi))
        rt_input_error("--lr-find-range: expected LO,HI with 0 < LO < HI, got '%s'", t);
    o->lr_find_lo = lo;
    o->lr_find_hi = hi;
}

/* ---- the table ------------------------------------------------------------------------ */

/* Who sees an option in --help: every trainer; token models (and `trainc help run`,
 * which has no model); nobody (--help itself, developer options, aliases). */
enum { SHOWN, TOKENS, HIDDEN };
/* What an option does besides setting a field. */
enum { READ, HELP, VERSION };

/* X(name, V: takes a value or F: a flag, metavar, who sees it, suggested for a
 *   misspelt name, what it does, the function that reads it, its help)
 * In --help the order of the rows, "name metavar" in 22 columns, the help's lines
 * ("\n") under each other; {name}, {devices}, {whom} and {where} stand for the
 * model's name and the devices it was built for. */
#define TRAINER_OPTIONS(X)                                                                     \
    X("--out", V, "DIR", SHOWN, 1, READ, set_out,                                              \
      "where outputs go (default: out_dir, else runs/{name})")                                 \
    X("--set", V, "KEY=VALUE", SHOWN, 1, READ, set_set,                                        \
      "override a training-spec field, e.g. --set optimizer.lr=3e-4")                          \
    X("--init", V, "FILE", SHOWN, 1, READ, set_init,                                           \
      "start from these weights (safetensors)")                                                \
    X("--device", V, "{devices}", SHOWN, 1, READ, set_device, "where to run ({whom}: {where})") \
    X("--threads", V, "N", SHOWN, 1, READ, set_threads, "CPU threads (default: all cores)")     \
    X("--quiet", F, "", SHOWN, 1, READ, set_quiet, "no progress line")                         \
    X("--resume", V, "DIR", SHOWN, 1, READ, set_resume,                                        \
      "continue DIR's run from its newest checkpoint")                                         \
    X("--eval", F, "", SHOWN, 1, READ, set_eval,                                               \
      "no training: validate the weights (--init FILE, --resume DIR's\n"                       \
      "checkpoint, else the spec's initialization) on data.val, print\n"                       \
      "the result as a JSON line, write nothing")                                              \
    X("--predict", V, "FILE.npy", SHOWN, 1, READ, set_predict,                                  \
      "no training: the model's output (evaluation mode) for each row\n"                       \
      "of FILE (the model's input; its other inputs' PREFIX_NAME.npy\n"                         \
      "beside it) into OUT/predictions.npy")                                                   \
    X("--reference", F, "", SHOWN, 1, READ, set_reference,                                     \
      "no training (a dpo model): the reference log-probabilities of\n"                        \
      "every pair of data.train and data.val, by the weights it starts\n"                      \
      "from, into the files they name for the reference input")                                \
    X("--sample", V, "N", TOKENS, 1, READ, set_sample,                                         \
      "token models: print N generated tokens (bytes) after training")                         \
    X("--num-samples", V, "N", TOKENS, 1, READ, set_num_samples,                               \
      "draw N samples from the prompt together, a batch row each (at\n"                        \
      "most batch_size; default 1), printed when all are drawn")                               \
    X("--temperature", V, "T", TOKENS, 1, READ, set_temperature,                               \
      "sampling temperature (default 1.0)")                                                    \
    X("--top-k", V, "K", TOKENS, 1, READ, set_top_k,                                            \
      "draw from the K most likely ids alone (default 0: all)")                                \
    X("--top-p", V, "P", TOKENS, 1, READ, set_top_p,                                            \
      "draw from the most likely ids that hold P of the probability\n"                         \
      "(nucleus sampling; default 1: all), after --top-k")                                     \
    X("--min-p", V, "P", TOKENS, 1, READ, set_min_p,                                            \
      "draw from the ids at least P times as likely as the most likely\n"                      \
      "(default 0: all), after --top-p")                                                       \
    X("--repetition-penalty", V, "R", TOKENS, 1, READ, set_repetition_penalty,                  \
      "divide the logits of the ids already in the prompt or the sample\n"                     \
      "by R (multiply where negative) before the temperature (default 1)")                     \
    X("--sample-seed", V, "S", TOKENS, 1, READ, set_sample_seed,                               \
      "sampling seed (default: the training seed)")                                            \
    X("--prompt", V, "TEXT", TOKENS, 1, READ, set_prompt,                                      \
      "text the sample continues (default: a newline)")                                        \
    X("--prompt-file", V, "FILE", TOKENS, 1, READ, set_prompt_file,                            \
      "prompts a line each (FILE.jsonl: a JSON string or {\"prompt\": ...}\n"                  \
      "a line), each continued in turn as --prompt would be")                                  \
    X("--tokenizer", V, "FILE", TOKENS, 1, READ, set_tokenizer,                                \
      "a Hugging Face tokenizer.json: --prompt is encoded with it\n"                           \
      "and the sample decoded, so both are text")                                              \
    X("--stop", V, "TOKEN", TOKENS, 1, READ, set_stop,                                         \
      "end the sample at this token (with --tokenizer its text, an\n"                          \
      "added token's as \"<|eot_id|>\"; else its id), not printed;\n"                          \
      "repeated: at any of them")                                                              \
    X("--chat", V, "FORMAT", TOKENS, 1, READ, set_chat,                                        \
      "write --prompt as a user's turn in this chat template (llama3,\n"                       \
      "chatml, gemma, phi3, mistral, llama2, zephyr), the assistant's\n"                       \
      "to follow; the sample ends at its end token unless --stop says\n"                       \
      "otherwise; needs --tokenizer; without --prompt, a conversation:\n"                      \
      "the user's turns from stdin")                                                           \
    X("--system", V, "TEXT", TOKENS, 1, READ, set_system,                                      \
      "with --chat: a system message before the user's first turn\n"                           \
      "(llama3, chatml, phi3, llama2, zephyr; gemma's and mistral's\n"                         \
      "templates have none)")                                                                  \
    X("--lr-find", F, "", SHOWN, 1, READ, set_lr_find,                                         \
      "no training: the learning-rate range test (Lightning's\n"                               \
      "lr_find): steps at rates growing from 1e-8 to 1, stopped when\n"                        \
      "the loss blows up; writes OUT/lr_find.jsonl and lr_find.svg and\n"                      \
      "prints the rate where the loss falls fastest")                                          \
    X("--lr-find-steps", V, "N", SHOWN, 1, READ, set_lr_find_steps, "its steps (default 100)")  \
    X("--lr-find-range", V, "LO,HI", SHOWN, 1, READ, set_lr_find_range,                        \
      "its rates (default 1e-8,1)")                                                            \
    X("--fast-dev-run", V, "N", SHOWN, 1, READ, set_fast_dev_run,                               \
      "a smoke test (Lightning's fast_dev_run): N optimizer steps and\n"                       \
      "N validation batches, the outputs in a temporary folder removed\n"                     \
      "at the end (nothing kept); no checkpoints, no early stopping")                          \
    X("--profile", F, "", SHOWN, 1, READ, set_profile,                                         \
      "time each instruction of the training steps after the\n"                                \
      "first two: OUT/profile.json and a table at the end")                                    \
    X("--version", F, "", SHOWN, 1, VERSION, NULL,                                             \
      "the model, its spec hash and the trainc that built this trainer")                       \
    X("--help", F, "", HIDDEN, 1, HELP, NULL, "")                                              \
    X("-h", F, "", HIDDEN, 0, HELP, NULL, "")                                                  \
    X("--gradcheck", F, "", HIDDEN, 0, READ, set_gradcheck, "")

typedef struct Option {
    const char *name;
    int value;                 /* takes a value */
    const char *meta;
    int shown, named, does;
    void (*read)(Opts *o, const char *value);
    const char *help;
} Option;

enum { F = 0, V = 1 };
#define ROW(name, value, meta, shown, named, does, read, help) \
    {name, value, meta, shown, named, does, read, help},
static const Option options[] = {TRAINER_OPTIONS(ROW)};
#undef ROW
enum { N_OPTIONS = sizeof options / sizeof *options };

/* the names of the options that take a value (V), NULL-terminated */
#define VALUE_NAME_V(name) name,
#define VALUE_NAME_F(name)
#define VALUE_NAME(name, value, ...) VALUE_NAME_##value(name)
const char *const rt_trainer_value_options[] = {TRAINER_OPTIONS(VALUE_NAME) NULL};
#undef VALUE_NAME

/* the names a misspelt option may be taken for, NULL-terminated (rt_closest) */
static const char *const *named_options(void)
{
    static const char *names[N_OPTIONS + 1];
    int n = 0;
    for (int i = 0; i < N_OPTIONS; i++)
        if (options[i].named)
            names[n++] = options[i].name;
    names[n] = NULL;
    return names;
}

/* ---- --help ----------------------------------------------------------------------------- */

/* A model --sample can draw from: an i32 [T] input and cross-entropy logits [T, vocab]. */
int rt_token_model(const rt_model *m)
{
    const rt_input *in = &m->inputs[0];
    int64_t T = in->rank == 1 ? in->shape[0] : 0;
    int positions = m->n_inputs == 3 && m->inputs[2].positions;   /* (packed rows') */
    return (m->n_inputs == 2 || positions) && rt_batch_dtype(in) == RT_I32 && T > 0 &&
           m->loss == RT_LOSS_CROSS_ENTROPY && m->pred_numel % T == 0;
}

/* s with {name}, {devices}, {whom}, {where} filled in, into buf */
static const char *fill(char *buf, size_t n, const char *s, const rt_model *m)
{
    int cpu = !m || (m->devices & RT_HAS_CPU), cuda = !m || ((m->devices & RT_HAS_CUDA) && m->cuda);
    const char *const keys[][2] = {
        {"{name}", m ? m->name : "NAME"},
        {"{devices}", cpu && cuda ? "cpu|cuda|auto" : cuda ? "cuda|auto" : "cpu|auto"},
        {"{whom}", m ? "this trainer" : "as built"},
        {"{where}", cpu && cuda ? "CPU or GPU; auto takes a GPU if there is one" : cuda ? "GPU" : "CPU"},
    };
    size_t u = 0;
    buf[0] = 0;
    while (*s && u + 1 < n) {
        size_t k = 0, nk = sizeof keys / sizeof *keys;
        while (k < nk && strncmp(s, keys[k][0], strlen(keys[k][0])))
            k++;
        if (k < nk) {
            u += (size_t)snprintf(buf + u, n - u, "%s", keys[k][1]);
            s += strlen(keys[k][0]);
        } else
            buf[u++] = *s++, buf[u] = 0;
    }
    return buf;
}

/* The options' lines of --help: "  NAME META" in 22 columns, the help beside it and its
 * further lines under it (m NULL: `trainc help run`, for any trainer). */
void rt_trainer_options(FILE *f, const rt_model *m)
{
    for (int i = 0; i < N_OPTIONS; i++) {
        const Option *op = &options[i];
        if (op->shown == HIDDEN || (op->shown == TOKENS && m && !rt_token_model(m) && !m->gan))
            continue;
        char meta[64], head[96], help[512];
        snprintf(head, sizeof head, "%s%s%s", op->name, op->meta[0] ? " " : "",
                 fill(meta, sizeof meta, op->meta, m));
        fill(help, sizeof help, op->help, m);
        fprintf(f, "  %-22s ", head);
        for (const char *l = help; *l;) {
            size_t len = strcspn(l, "\n");
            fprintf(f, "%s%.*s\n", l == help ? "" : "                         ", (int)len, l);
            l += len + (l[len] == '\n');
        }
    }
}

/* argv0: the trainer's own path as it was started, or "trainc run" (jit.c) */
static void trainer_usage(const rt_model *m, const char *argv0)
{
    if (!strcmp(argv0, "trainc run"))
        printf("usage: trainc run SPEC... [options]   (%s)\n\n", m->name);
    else
        printf("usage: %s [options]   (%s)\n\n", argv0, m->name);
    rt_trainer_options(stdout, m);
}

/* ---- parsing ------------------------------------------------------------------------------ */

static const Option *find(const char *name)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if (!strcmp(name, options[i].name))
            return &options[i];
    return NULL;
}

/* An option's value: its "=VALUE" part (--out=DIR) when it has one, else the next
 * argument, which must not be an option itself (--resume --quiet). */
static const char *need(int argc, char **argv, int *i, const char *inline_value)
{
    if (inline_value)
        return inline_value;
    if (*i + 1 >= argc)
        rt_input_error("%s needs a value", argv[*i]);
    const Option *op = find(argv[*i + 1]);
    if (op && op->named)
        rt_input_error("%s needs a value, got the option %s", argv[*i], argv[*i + 1]);
    return argv[++*i];
}

/* The option argv[*i] names (--out=DIR as --out DIR: *inl then points at DIR), or exit 1
 * naming the closest one. */
static const Option *option_at(char **argv, int i, const char **inl)
{
    const char *a = argv[i], *eq = strchr(a, '=');
    char name[32];
    *inl = NULL;
    if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) {
        snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
        const Option *op = find(name);
        if (op && op->value) {
            *inl = eq + 1;
            return op;
        }
    }
    const Option *op = find(a);
    if (op)
        return op;
    const char *near = rt_closest(a, named_options());
    rt_input_error("unknown option '%s'%s%s%s", a, near ? "; did you mean '" : "",
                   near ? near : "", near ? "'?" : "");
}

/* The options that belong to another or exclude each other. */
static void check_together(const Opts *o)
{
    if (o->tokenizer && !o->sampling)
        rt_input_error("--tokenizer is an option of --sample; add --sample N");
    if (o->sampling_opt && !o->sampling)
        rt_input_error("%s is an option of --sample; add --sample N", o->sampling_opt);
    if ((o->lr_find_steps || o->lr_find_lo > 0) && !o->lr_find)
        rt_input_error("%s is an option of --lr-find; add --lr-find",
                       o->lr_find_steps ? "--lr-find-steps" : "--lr-find-range");
    if (o->profile && (o->lr_find || o->eval || o->gradcheck))
        rt_input_error("--profile times training: not with %s", o->lr_find ? "--lr-find"
                       : o->eval ? "--eval" : "--gradcheck");
    if (o->fast_dev_run && (o->out || o->resume || o->eval || o->lr_find || o->gradcheck ||
                            o->profile))
        rt_input_error("--fast-dev-run keeps nothing: not with %s", o->out ? "--out" : o->resume
                       ? "--resume" : o->predict ? "--predict" : o->reference ? "--reference"
                       : o->eval ? "--eval" : o->lr_find ? "--lr-find" : o->gradcheck
                       ? "--gradcheck" : "--profile");
    if (o->lr_find && (o->resume || o->eval || o->gradcheck || o->sample))
        rt_input_error("--lr-find runs on its own: not with %s", o->resume ? "--resume"
                       : o->eval ? "--eval" : o->gradcheck ? "--gradcheck" : "--sample");
}

void rt_opts_parse(const rt_model *m, int argc, char **argv, Opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = -1;
    o->temperature = 1.0;
    o->top_p = 1.0;
    o->repetition_penalty = 1.0;
    o->sample_seed = -1;
    for (int i = 1; i < argc; i++) {
        const char *inl;
        const Option *op = option_at(argv, i, &inl);
        if (op->does == HELP) {
            trainer_usage(m, argc > 0 && argv[0] ? argv[0] : "trainer");
            exit(0);
        }
        if (op->does == VERSION) {
            printf("%s trainer (spec hash %s), built by trainc %s\n", m->name, m->spec_hash,
                   TRAINC_VERSION);
            rt_blas_setup();
            printf("CPU GEMMs: OpenBLAS %s\n", rt_blas_core());
            exit(0);
        }
        op->read(o, op->value ? need(argc, argv, &i, inl) : NULL);
    }
    check_together(o);
}
