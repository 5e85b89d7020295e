/* trainc.h: the compiler's shared declarations. */
#ifndef TRAINC_H
#define TRAINC_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "ops.h"
#include "../runtime/rt.h"


/* ---- errors: two tiers (docs/internals.md) -------------------------- */

/* Bad input at a JSON value: "FILE: error: PATH: MESSAGE", exit 1. */
_Noreturn void error_at(const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Bad input with no JSON place (options, files): "trainc: error: MESSAGE", exit 1. */
_Noreturn void error_input(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A broken internal rule. */
_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() die_at(__FILE__, __LINE__, "unreachable")

void *xcalloc(size_t n, size_t size);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *path_tidy(const char *path); /* "./a//b" -> "a/b", lexically; ".." kept */
char *path_canonical(const char *path); /* realpath, relative to the cwd if under it */
/* The words of s (split at spaces and tabs) appended to args[*na ..], up to args[max - 1]. */
void add_words(char **args, int *na, int max, const char *s);
/* How trainc build (and trainc run's rebuild, jit_cc.c) compile the generated C: no
 * contraction into fused multiply-adds, so every compiler gives libtcc's bits. */
#define TRAINC_CC_FLAGS "-std=gnu11", "-O3", "-ffp-contract=off", "-w"

/* ---- the spec (spec.c) --------------------------------------------------- */

enum { INIT_DEFAULT, INIT_NORMAL, INIT_GPT2 };

typedef struct Init {
    int kind;                 /* INIT_* */
    double std;               /* INIT_NORMAL */
} Init;

typedef struct Layer Layer;
/* rope's longrope scaling (Phi-3's 128k models; spec.c): per-frequency divisors, short_f
 * for a context T up to orig, long_f past it (n = the rotated pairs each); factor the
 * context's length over orig; cos and sin times attn (given, or its default) */
typedef struct LongRope {
    int n;
    double *short_f, *long_f;
    double factor, orig, attn;
    int has_attn;             /* attention_factor given */
} LongRope;

/* longrope's attention factor where none is given: sqrt(1 + ln factor / ln orig), 1 for
 * a factor up to 1 (transformers' _compute_longrope_parameters) */
static inline double longrope_default_attn(double factor, double orig)
{
    return factor <= 1 ? 1.0 : sqrt(1 + log(factor) / log(orig));
}

/* attention's rope: theta 0: none; factor 0: no llama3 scaling, else its factor, low and
 * high frequency factors and original context length (linear: the spec said linear
 * scaling, which runs as llama3's with low 1, high 2, original context 1; spec.c);
 * lr: longrope scaling (factor 0 then), or NULL; dims: the dimensions of a head it
 * rotates (a partial rope: pairs j, j + hd/2 for j < dims/2), 0: all */
/* rope's yarn scaling (transformers' _compute_yarn_parameters; spec.c): each frequency
 * between itself and itself over factor, by a ramp over the pairs that beta_fast and
 * beta_slow rotations in orig positions bound; cos and sin times attn */
typedef struct Yarn {
    double factor, orig, beta_fast, beta_slow, attn;
    int has_attn;             /* attention_factor given */
} Yarn;

typedef struct Rope {
    double theta, factor, low, high, orig;   /* factor: llama3's, linear's, yarn's */
    int linear;
    const LongRope *lr;
    const Yarn *yarn;
    int64_t dims;
} Rope;

/* attention's "interleave": iterations every - 1, 2 every - 1, ... of the innermost
 * repeat take window (when set_window) and rope (when set_rope) in place of the layer's */
typedef struct Interleave {
    int64_t every;            /* 0: none */
    int set_window, set_rope;
    int64_t window;
    Rope rope;
} Interleave;

struct Layer {
    int op;                   /* OP_* */
    char *path;               /* "$.model.layers[3]" or "$.model.layers[2].body[0]" */
    char *name;               /* the "name" key, or NULL */
    char *input;              /* the "input" key (a model input name), or NULL */
    int has_init;
    Init init;
    /* op keys; a key that was not given holds its default (see ops.h and docs/spec.md) */
    int64_t out, kernel, stride, padding, vocab, dim, max_len, heads, count;
    int64_t groups;           /* conv2d; default 1 */
    int64_t segments;         /* last_token: the row's equal runs, each's last row; default 1 */
    int64_t skip;             /* token_mean: the first tokens left out of the mean; default 0 */
    int first_seq;            /* token_mean's "first_sequence": the mean over the row's first
                                 sequence (the model's positions); default 0 */
    int64_t output_padding;   /* conv_transpose2d; default 0, below the stride */
    double negative_slope;    /* leaky_relu; default 0.01 */
    double by;                /* scale: the factor (required) */
    int64_t height;           /* untokens: the image's rows (required) */
    double init_value;        /* layer_scale: every weight's initial value; default 1e-6 */
    int bias;                 /* default 1 */
    int causal;               /* default 1 */
    int gelu_tanh;            /* "approximate": "tanh" */
    int glu_act;              /* glu's and moe's "act": RT_GLU_* (silu default), glu_act_names[] */
    /* moe: experts, each token's top_k of them, an expert's gated MLP width (hidden);
     * norm_topk: the top_k gate weights renormalized to sum 1 (default 1, Mixtral's) */
    int64_t experts, top_k, hidden;
    int norm_topk;
    double aux_loss;          /* moe: the load-balancing loss's coefficient, 0: none */
    int64_t shared;           /* moe: the shared expert's hidden width (every token's), 0: none */
    int shared_gate;          /* moe: the shared expert's output times a sigmoid of one more
                               * row of its up weight (Qwen2-MoE's shared_expert_gate) */
    double p;                 /* dropout; default 0.5 */
    double drop_path;         /* residual: a sample's body dropped with it in training; 0 */
    double drop_path_end;     /* and with "drop_path": [a, b], b: in a repeat, iteration i of
                                 n drops with a + (b - a) i / (n - 1) */
    int drop_path_ramp;       /* "drop_path" was [a, b] */
    double eps;               /* layernorm, batchnorm (default 1e-5), rmsnorm, attention's
                               * qk_norm "all_heads" (default 1e-6) */
    double momentum;          /* batchnorm's running statistics; default 0.1 */
    int affine;               /* batchnorm: weight and bias; default 1 */
    int sync;                 /* batchnorm: statistics over all ranks; default 0 */
    char *tie;                /* linear: the name of an embedding, or NULL */
    /* attention: kv_heads (0: heads), head_dim (0: d / heads), qk_norm, window (0: none),
     * scale (0: 1 / sqrt(head width)), softcap (0: none), rope, interleave */
    int64_t kv_heads, head_dim, window;
    double att_scale, att_softcap;
    int bias_qkv;             /* attention's bias "qkv": qkv.bias alone (Qwen2), no proj.bias */
    int bias_proj;            /* its bias "proj": proj.bias alone (GPT-Neo), no qkv.bias */
    int qk_norm;              /* 0, QK_NORM_HEAD or QK_NORM_ALL_HEADS */
    Rope rope;
    Interleave il;
    Layer **body;             /* residual, repeat */
    int n_body;
    Layer **shortcut;         /* residual: applied to its input in place of the identity */
    int n_shortcut;           /* (a ResNet's projection), or 0 */
};

/* attention's qk_norm: an RMSNorm over each head's width (Qwen3), or one over all of
 * q's heads and one over all of k's (OLMo 2), eps the layer's */
enum { QK_NORM_HEAD = 1, QK_NORM_ALL_HEADS = 2 };

/* glu's "act" words in RT_GLU_*'s order, NULL-terminated (spec.c) */
extern const char *const glu_act_names[];

typedef struct InputSpec {
    char *name;
    char *path;               /* "$.model.inputs.x" */
    int dtype;                /* RT_U8 ... RT_F32 */
    int rank;
    int64_t shape[RT_MAX_RANK];
    int has_scale, has_shift;
    double scale, shift;      /* defaults 1 and 0 */
    double *ch_scale, *ch_shift;  /* an extension: either given as a list, one number a
                                     channel (shape[0] of them) each, the other's number
                                     repeated; else NULL */
    int64_t classes;          /* 0 when not given */
    char **labels;            /* an extension: the classes' names (classes of them), or NULL */
} InputSpec;

typedef struct Spec {
    char *model_file;         /* the file holding "model" */
    char *train_file;         /* the file holding "train" (may equal model_file) */
    char *data_dir;           /* folder of train_file: data paths are relative to it */
    char *name;
    InputSpec inputs[RT_MAX_INPUTS];
    int n_inputs;
    Layer **layers;
    int n_layers;
    int has_init;
    Init init;                /* model-level "init" */
    int loss;                 /* LOSS_*; a GAN's LOSS_GAN_* */
    char *loss_target;        /* an input name ("" for a GAN) */
    char *positions;          /* the input of packed rows' positions ($.model.positions), or
                                 NULL: none (each row one sequence) */
    /* A GAN ($.model.gan, in place of layers and loss): layers are the generator's */
    int gan;
    Layer **disc;             /* the discriminator's layers */
    int n_disc;
    int latent_rank;
    int64_t latent_shape[RT_MAX_RANK];
    int latent_input;         /* the input z is read from, or -1: drawn from (seed, step) */
    int real_input;           /* the input of the real samples */
    double label_smoothing;   /* cross_entropy's; 0 when not given */
    int has_ignore;           /* cross_entropy's ignore_index given: targets equal to */
    int32_t ignore_index;     /* it add no loss term and no gradient */
    double dpo_beta;          /* dpo's beta (0.1; simpo's 2.0; orpo's lambda, 0.1) */
    char *reference;          /* dpo's reference input: the reference model's log-probs */
    int pref;                 /* LOSS_DPO's kind, PREF_*: dpo, simpo (no reference, each
                                 answer's log-probability its mean over its tokens, less
                                 gamma), ipo (IPO's square over the means), orpo (no
                                 reference, the odds ratio of the means and the chosen
                                 answers' cross entropy) */
    double simpo_gamma;       /* simpo's gamma (1.0) */
    char *sft_target;         /* orpo's sft_target input (the chosen text's next ids over
                                 prompt and answer, [T]), or NULL: the answer's alone */
    char *kto_label;          /* kto's label input: 1 where the row's completion is
                                 desirable, 0 where it is not */
    double kto_weights[2];    /* kto's desirable_weight and undesirable_weight (1.0) */
    double rpo_alpha;         /* dpo's rpo_alpha: the chosen answers' cross entropy's weight
                                 in the loss (RPO), or 0 */
    int dpo_type;             /* dpo's loss_type, DPO_* (DPO_SIGMOID by default) */
    double cpo_alpha;         /* cpo's and simpo's: the same weight (cpo 1.0, simpo 0) */
    rt_train_config train;    /* validated, with defaults filled in */
    char **train_lines;       /* rt_config_dump(&train): the canonical form */
    int n_train_lines;
    char hash[17];            /* FNV-1a 64 of the canonical model JSON and train lines, hex */
    char model_hash[17];      /* FNV-1a 64 of the canonical model JSON alone */
    int64_t decode_T;         /* > 0: decode.c's copy for the decode program, its token
                               * input and target [1]; the window it caches is decode_T */
} Spec;

/* Reads one file (both "model" and "train") or two (model, then train); checks JSON
 * syntax (FILE:LINE:COL), keys (unknown ones with "did you mean"), types, ranges,
 * the data keys against the model inputs, and the training config. Shapes are
 * checked later, as the graph is built (graph.c, ops/). Exits 1 on any error. */
Spec *spec_load(int nfiles, char **files);
/* spec_json.c: a spec file's text (exit 1 where it cannot be read or is past 64 MiB),
 * and that text as one strict JSON value (exit 1 with FILE:LINE:COL and the reason). */
char *spec_read_file(const char *path, size_t *len);
cJSON *spec_parse_json(const char *file, const char *text, size_t len);
/* Applies one --set KEY=VALUE to spec->train; exits 1 on a bad key or value. After
 * the last one, spec_sets_done checks the rules between fields (exit 1) and
 * recomputes the lines and hash. */
void spec_set(Spec *s, const char *assignment);
void spec_sets_done(Spec *s);
/* Recomputes train_lines and hash after changes to s->train. */
void spec_finish(Spec *s);

#endif
