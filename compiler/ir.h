/* ir.h: the graph, the training graph, the program, the pipeline and the emitters'
 * interfaces. The compiler's files, in the order a spec goes through them:
 *
 *   main.c       trainc's entry: the arguments normalized, the command dispatched
 *   cmd_*.c      one command each (check, emit and build, run, plan, help; cmd_common.c
 *                what they share; data_cmd.c trainc data), declared in cmd.h
 *   spec.c       spec files -> Spec, validated (trainc.h)
 *   driver.c     Spec -> Compiled: both programs, the memory totals, the sources
 *   pipeline.c   the passes, one table (PASS_LIST below), each followed by verify.c
 *   graph.c      Spec -> Graph: forward nodes over tensors, shapes inferred, params named
 *   autodiff.c   Graph -> backward nodes appended (the training graph)
 *   lower.c      nodes -> Program: instructions (elementwise ops, GEMMs, runtime calls)
 *   ops/NAME.c   one op each: its graph and shape rule, backward rule and lowering,
 *                which the three above reach through ops/op.h's tables (ops/registry.c)
 *   call.c       the runtime calls: kinds, typed arguments, the table that prints them
 *   expr.c       the elementwise ops' values (Expr): the builders the op files call
 *   fusion.c     elementwise chains -> one loop each; bias/activation/residual into GEMM
 *                epilogues; layernorm backward's gradient sum into its call
 *   recompute.c  saved activations dropped and replayed in the backward pass
 *   memplan.c    liveness -> per-row offsets in one arena (best fit, biggest first)
 *   verify.c     the verifier after every pass, and --dump-after
 *   recompute_auto.c  recompute auto's search; the memory a run allocates
 *   emit.c       the names and twin kernels both emitters read; the files written
 *   emit_c.c     Program -> model.h, host.c, kernels_cpu.c, plan.json
 *   emit_cuda.c  Program -> kernels_cuda.cu (the fused loops as CUDA, the templates)
 *   kernel.c     a fused kernel as both emitters see it (tensor order, heading comment,
 *                its expressions and indices as C or CUDA text)
 *   buf.c        the text buffer everything prints into (buf.h)
 *   build.c      trainc build's temporary files, CUDA image and bundle
 *   jit.c        trainc run: host code compiled in memory by libtcc
 *   zero2.c      zero2's gradient memory at its worst (trainc plan --ranks)
 *   util.c       the error tiers and allocation helpers (trainc.h)
 */
#ifndef IR_H
#define IR_H

#include "trainc.h"
#include "buf.h"

/* ---- tensors ------------------------------------------------------------- */

enum {
    T_INPUT,   /* a model input, raw dtype, in e->in[k] (B rows) */
    T_ACT,     /* an activation or activation gradient in the arena (B rows) */
    T_TEMP,    /* scratch in the arena, live within one node's instructions */
    T_PARAM,   /* a parameter (fp32 region) */
    T_PGRAD,   /* a parameter's gradient (same layout as params) */
    T_STATE    /* a layer's state (batchnorm's running statistics): e->state, saved with
                  the weights; no gradient, no optimizer */
};

typedef struct Param Param;

typedef struct Tensor {
    int id;
    char *name;              /* C identifier in the generated code */
    char *want;              /* the name asked for: `name` has a suffix where it repeated
                                one (emit.c's tidy_names drops what the output need not) */
    int kind;                /* T_* */
    int dtype;               /* RT_F32 except raw inputs */
    int rank;                /* per row (T_INPUT, T_ACT, T_TEMP) or whole (params) */
    int64_t shape[RT_MAX_RANK];
    int64_t numel;           /* per row, or whole for params */
    int input_index;         /* T_INPUT */
    Param *param;            /* T_PARAM, T_PGRAD, T_STATE */
    struct Tensor *alias;    /* a view (flatten) shares this tensor's storage */
    const char *origin;      /* spec path of the layer that made it */
    const char *what;        /* short description for comments */
    const char *layout;      /* where the batch is not the outer dimension (conv2d's GEMM
                                operands, [rows, B*cols]): the storage as it is, for the
                                shape comments; NULL: [B, shape] */
    /* filled by fusion and memplan */
    int materialized;        /* written to memory (not only a register in a fused loop) */
    int first, last;         /* live range in instruction indices */
    int64_t row_bytes;       /* storage per batch row */
    int64_t offset;          /* per-row offset: byte offset = Bmax * offset */
    int has_offset;
    int block;               /* the block of the node that made it; -1: inputs, params */
    int keep32;              /* stays fp32 in a bf16-mixed arena (saved statistics, targets) */
    int64_t ld;              /* rows of the last axis this many elements apart, or 0: the
                                last axis's size (contiguous). Only a large vocabulary's
                                logits and their gradient (ops/loss.c) */
} Tensor;

struct Param {
    char *name;              /* safetensors name */
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;
    int64_t offset;          /* floats */
    int64_t pad_rows;        /* rows after the tensor's, kept zero: a language model head's
                                weight whose GEMMs run over a padded vocabulary (ops/loss.c) */
    int init;                /* RT_INIT_* */
    double init_a;
    Tensor *t, *g;           /* g: NULL for state */
    const char *origin;
    int i64;                 /* state: an int64 count (num_batches_tracked) in two floats */
    int disc;                /* a GAN discriminator's (gan.c): its own optimizer */
    int frozen;              /* matched by train.freeze: no gradient wanted, no update */
    int copy16_only;         /* frozen, and read by linear GEMMs alone (not a head's call,
                                an embedding, a norm): a GPU in mixed precision keeps its
                                16-bit copy and no fp32 (graph.c) */
    int lora;                /* train.lora: 1 an adapter (A or B), 2 a weight adapted, 3 one
                                it could adapt and does not */
    int model_index;         /* its place in the model's order (the initial values' draws
                                follow it; frozen ones are laid out last: graph.c) */
    int64_t sink_offset;     /* frozen, yet an instruction writes its gradient (layernorm's
                                dx with its dgamma): where, in e->sink (lower.c); else -1 */
    int64_t muon[RT_MUON_BLOCKS]; /* a hidden layer's weight matrix, which optimizer.type muon
                                updates: the rows of each block it orthogonalizes alone
                                (attention's q, k and v; a gated MLP's two halves), 0 after
                                the last; all 0: AdamW's (ops/linear.c, attention.c, glu.c) */
};

/* ---- nodes (forward and backward) ----------------------------------------- */

enum {
    /* forward */
    N_CONVERT,     /* raw input -> f32: x * scale + shift */
    N_LINEAR,      /* y = x W^T (+ b) over the last axis */
    N_CONV2D,      /* im2col + GEMM + bias */
    N_MAXPOOL,
    N_AVGPOOL,
    N_FLATTEN,     /* a view */
    N_ACT,         /* relu, gelu, silu, tanh, sigmoid, squared_relu, leaky_relu, scale (act) */
    N_DROPOUT,
    N_LAYERNORM,
    N_RMSNORM,
    N_GLU,         /* act(x[..., :h]) * x[..., h:] (act field: RT_GLU_*) */
    N_LOSS,        /* cross entropy or mse; in training also writes d(loss)/d(prediction) */
    N_EMBEDDING,   /* rows of a weight picked by i32 ids */
    N_POS_EMBEDDING, /* x + position rows */
    N_ATTENTION,   /* the attention core: qkv [T, 3d] -> y [T, d] (softmax saved) */
    N_ADD,         /* residual: x + body(x); in backward, a sum of gradient contributions */
    N_BATCHNORM,   /* per-channel normalization over (batch, spatial); running statistics */
    N_CONV_T2D,    /* transposed conv: GEMM W^T x + col2im + bias (conv2d's data gradient) */
    N_QK_NORM,     /* attention's qk_norm "all_heads": qkv -> q, k normalized, v copied */
    N_MOE_DISPATCH, /* moe: x -> each token routed to its top_k experts, their rows
                       gathered by expert, times each expert's up weight (ops/moe.c) */
    N_MOE_COMBINE, /* moe: the glu's rows times each expert's down weight, summed back
                      into the tokens by their gate weights */
    N_MOE_AUX,     /* after the loss: the moe layers' load-balancing loss (MoeAux) */
    N_TOKENS,      /* [C, H, W] -> [H W, C]: each position a token of its channels */
    N_TOKEN_MEAN,  /* [T, d] -> [d]: the mean over the tokens */
    N_CLS_TOKEN,   /* [T, d] -> [T + 1, d]: a learned row before the tokens */
    N_FIRST_TOKEN, /* [T, d] -> [d]: the first token's row */
    N_LAST_TOKEN,  /* [T, d] -> [d]: the last token's row */
    N_SPAN,        /* [T, 2] -> [2, T]: the start and end logits, the padding at -1e30 */
    N_PAD,         /* [C, H, W] -> [C, H + 2p, W + 2p] (p in Node.conv[5]), the border -inf
                      (a max pool's padding) */
    N_UNTOKENS,    /* [H W, C] -> [C, H, W]: tokens' inverse */
    N_LAYER_SCALE, /* x [..., d] times a learned weight [d] */
    N_CLS_MEAN,    /* [T, d] -> [2 d]: the first token, then the mean over the others */
    N_GRN,         /* [T, C] -> [T, C]: global response normalization (ConvNeXt V2) */
    N_REGISTER_TOKENS, /* [T, d] -> [T + R, d]: R learned rows after the first token */
    /* backward */
    N_LINEAR_BWD,
    N_CONV2D_BWD,
    N_MAXPOOL_BWD,
    N_AVGPOOL_BWD,
    N_ACT_BWD,
    N_DROPOUT_BWD,
    N_LAYERNORM_BWD,
    N_RMSNORM_BWD,
    N_GLU_BWD,
    N_EMBEDDING_BWD,
    N_POS_EMBEDDING_BWD,
    N_ATTENTION_BWD,
    N_BATCHNORM_BWD,
    N_CONV_T2D_BWD,
    N_QK_NORM_BWD,
    N_MOE_DISPATCH_BWD,
    N_MOE_COMBINE_BWD,
    N_TOKENS_BWD,
    N_TOKEN_MEAN_BWD,
    N_CLS_TOKEN_BWD,
    N_FIRST_TOKEN_BWD,
    N_LAST_TOKEN_BWD,
    N_SPAN_BWD,
    N_PAD_BWD,
    N_UNTOKENS_BWD,
    N_LAYER_SCALE_BWD,
    N_CLS_MEAN_BWD,
    N_GRN_BWD,
    N_REGISTER_TOKENS_BWD,
    N__COUNT
};

enum { ACT_RELU, ACT_GELU, ACT_GELU_TANH, ACT_SILU, ACT_TANH, ACT_SIGMOID, ACT_SQUARED_RELU,
       ACT_LEAKY_RELU /* slope in Node.p */, ACT_SCALE /* the factor in Node.p */,
       ACT_QUICK_GELU /* x sigmoid(1.702 x): CLIP's */ };

/* A moe layer's routing, which its two nodes share (ops/moe.c): per sample, probs [T, E]
 * (the router's softmax), gate [T, k] (the chosen experts' weights), idx [T, 2k] (their
 * experts, then the rows of the gathered buffer their copies took: integers in
 * floats), offs [E + 1] (the first row of each expert's group, over the whole batch:
 * the first sample's row holds them) and dgate [T, k] (the gate weights' gradient, the
 * combine's backward writes it, the dispatch's reads it) */
typedef struct MoeRoute {
    Tensor *probs, *gate, *idx, *offs, *dgate;
    int64_t experts, top_k, hidden;
    int norm_topk;
    int aux_layer;           /* its row of MoeAux.stats, or -1: no load-balancing loss */
} MoeRoute;

/* The load-balancing loss of the moe layers that have one (transformers' Mixtral's,
 * over all of them at once: ops/moe.c): each writes its experts' counts and summed
 * probabilities into its row of stats ([layers, 2E], the first sample's rows), and
 * after the loss the N_MOE_AUX node adds coef times the loss to the pass's loss and
 * writes agrad ([E]: d(loss)/d(each token's probability of expert e)), which every
 * dispatch's backward adds to its router's gradient. */
typedef struct MoeAux {
    double coef;
    int64_t experts, top_k, layers, tokens;   /* tokens: a sample's, each layer's */
    Tensor *stats, *agrad;
} MoeAux;

typedef struct Node {
    int kind;                /* N_* */
    const Layer *layer;      /* where it came from (NULL for input conversion) */
    const char *origin;      /* spec path */
    Tensor *in[4];
    int n_in;
    Tensor *out;             /* forward output, or the gradient a backward node writes */
    Tensor *out2;            /* a second output (layernorm: dW/db live in params; loss: dpred) */
    Tensor *tmp[2];          /* scratch */
    Tensor *tmp2;            /* batchnorm: the shift (out2 the scale) */
    Param *w, *b;
    Param *state[3];         /* batchnorm: running mean, running var, batches tracked */
    int act;                 /* N_ACT, N_ACT_BWD: ACT_*; N_GLU, N_GLU_BWD: RT_GLU_* */
    int gated;               /* N_GLU: the input's last column gates each row (its sigmoid
                                times the row's h outputs: a moe layer's shared expert) */
    double p;                /* dropout probability, layernorm, rmsnorm and batchnorm eps,
                                leaky_relu's negative slope */
    double scale, shift;     /* N_CONVERT */
    const double *ch_scale, *ch_shift;   /* N_CONVERT per channel (the input's first axis,
                                            ch_n of them, each ch_run elements), or NULL */
    int64_t ch_n, ch_run;
    int64_t conv[8];         /* C, H, W, k, stride, pad, OH, OW (conv_transpose2d: of the
                                conv2d it is the data gradient of); attention: T, d, H, causal,
                                KV, window (0: none), the options call, a global layer
                                (ops/attention.c); token_mean: the first tokens it leaves
                                out */
    int loss;                /* N_LOSS: LOSS_* */
    uint64_t key;            /* dropout: per-layer RNG key */
    const MoeRoute *moe;     /* N_MOE_DISPATCH, N_MOE_COMBINE: the layer's routing */
    struct Node *fwd;        /* backward node: its forward node */
    int block;               /* top-level layer (repeat iterations apart): recompute's unit */
    int backward;            /* part of the backward pass */
    int phase;               /* a GAN's step (gan.c: PH_*); else 0 forward, 1 backward */
    int frozen;              /* backward node: the input's gradient only, no parameter's
                                (a GAN's discriminator seen by the generator's loss) */
    double flops_dx, flops_dw; /* forward node: its backward's FLOPs a sample (add_flops) */
} Node;

typedef struct Graph {
    const Spec *spec;
    Tensor **tensors;
    int n_tensors, cap_tensors;
    Param **params;
    int n_params, cap_params;
    int64_t param_floats;
    int n_trainable;         /* params[0 .. n_trainable) are trained, the rest frozen ... */
    int64_t trainable_floats; /* ... and lie in [trainable_floats, param_floats), so that
                                gradients and optimizer state cover [0, trainable_floats) */
    int64_t sink_floats;     /* the frozen gradients still written (Param.sink_offset) */
    int64_t gpu_fp32_floats; /* mixed precision on a GPU: [0, this) held in fp32 too; the
                                frozen weights only GEMMs read, laid out after, in the 16-bit
                                copy alone (Param.copy16_only); = param_floats: none */
    Param **state;           /* layers' state (T_STATE): its own region, e->state */
    int n_state, cap_state;
    int64_t state_floats;
    Node **nodes;            /* forward nodes, then (after autodiff) backward nodes */
    int n_nodes, cap_nodes;
    int n_forward;           /* nodes[0 .. n_forward) are the forward pass */
    Tensor *inputs[RT_MAX_INPUTS];
    int64_t input_vocab[RT_MAX_INPUTS]; /* > 0: the smallest vocab of the embeddings that
                                           read input k (the runtime checks the data) */
    int64_t input_classes[RT_MAX_INPUTS]; /* > 0: the classes a cross_entropy target has
                                             (the logits' width, given or not) */
    Tensor *pred;            /* what the loss reads */
    Tensor *dpred;           /* its gradient, written by the loss node */
    Tensor *logps;           /* dpo's: each pair's summed log-probabilities [2] (written by
                                the loss; --reference reads validation's) */
    double simpo_gamma;      /* simpo's gamma (the dpo loss without a reference) */
    double dpo_smoothing;    /* dpo's label_smoothing (conservative DPO), or 0 */
    int dpo_type;            /* dpo's loss_type (DPO_*) */
    int pref;                /* LOSS_DPO's kind (PREF_*: dpo, simpo, ipo, orpo, kto) */
    Tensor *pref_ref, *pref_sft, *pref_label;   /* LOSS_DPO's other inputs, or NULL: the
                                reference's log-probabilities, orpo's sft target, kto's label */
    double kto_weights[2];   /* kto's desirable and undesirable weights */
    double sft_weight;       /* the chosen answers' cross entropy's weight in the loss:
                                orpo's 1, dpo's rpo_alpha, else 0 */
    Node *head;              /* the linear layer whose logits the loss reads, when the two
                                run as one call a chunk of rows at a time (ops/loss.c);
                                else NULL */
    int64_t head_chunk;      /* its chunk: rows of each sample a call's pass covers */
    int64_t decode_T;        /* > 0: the decode program's graph (one position a row; the
                                spec's window of decode_T positions in its key/value cache) */
    int64_t kv_floats;       /* the decode program's key/value cache, as lowered */
    Tensor *head_z;          /* the call's logits scratch ([head_chunk, C] a row), once lowered */
    int64_t flops_fwd, flops_bwd; /* per sample */
    int n_layers_total;
    int has_dropout;
    int cur_block;           /* while building: the block new nodes belong to */
    int fp8;                 /* fp8-mixed: bf16-mixed (act16 RT_PREC_BF16) with the linear
                                layers' GEMMs marked for FP8 (Instr.fp8) */
    int act16;               /* RT_PREC_BF16 or RT_PREC_FP16: the GPU stores activations in
                                16 bits (act_t); RT_PREC_FP32 (0): in fp32 */
    /* a GAN (gan.c) */
    int gan;
    int phase;               /* while building: the phase of new nodes (PH_*) */
    int share_params;        /* while building: add_param and add_state return the
                                parameter of that name made before (the discriminator's
                                later passes) */
    int disc_params;         /* while building: new parameters are the discriminator's */
    int64_t gen_floats;      /* the generator's trained parameters are [0, gen_floats),
                                the discriminator's [gen_floats, trainable_floats) */
    Tensor *gan_pred[3], *gan_dpred[3]; /* D's logits on x, on G(z) detached, on G(z) */
    Tensor *latent;          /* z as the generator reads it */
    int latent_drawn;        /* z drawn by the runtime into e->in[n_inputs] */
    MoeAux *moe_aux;         /* the moe layers' load-balancing loss, or NULL */
} Graph;

/* A GAN's step, in order (gan.c): the discriminator's forward passes (G(z) first), its
 * backward; the generator's loss through the updated discriminator, its backward. */
enum { PH_D_FWD, PH_D_BWD, PH_G_FWD, PH_G_BWD, PH__COUNT };

/* The storage a tensor lives in: a view (flatten, an in-place output) shares its base's. */
static inline Tensor *tensor_base(Tensor *t) { return t->alias ? t->alias : t; }
/* A character of a C identifier (for whole-name matches in generated text). */
static inline int ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
/* the distance between rows of the last axis, and the elements a batch row stores */
static inline int64_t tensor_ld(const Tensor *t) { return t->ld ? t->ld : t->shape[t->rank - 1]; }
/* The rows a linear layer's GEMMs run over for weight w and output y of out rows: with
 * the weight's zero rows too (a padded vocabulary: Param.pad_rows, ops/loss.c) where
 * y's rows (the logits, or their gradient) have room for them, else out. Another linear
 * tied to the same weight, whose output is not the padded logits, runs over the true
 * rows. */
static inline int64_t gemm_rows(const Param *w, int64_t out, const Tensor *y)
{
    return w->pad_rows && tensor_ld(y) >= out + w->pad_rows ? out + w->pad_rows : out;
}
/* The floats of a parameter (and of its gradient) its instructions may write: its own
 * and a padded vocabulary's zero rows after them (Param.pad_rows) */
static inline int64_t param_extent(const Param *p)
{
    return p->numel + (p->pad_rows ? p->pad_rows * (p->numel / p->shape[0]) : 0);
}
static inline int64_t tensor_stored(const Tensor *t)
{
    return t->ld ? t->numel / t->shape[t->rank - 1] * t->ld : t->numel;
}

/* Is t's storage 16 bits on a GPU (an activation or its gradient in a bf16-mixed or
 * fp16-mixed arena)? The CPU computes in fp32 whatever the precision, over a plan
 * twice as wide. */
static inline int tensor_half(const Graph *g, Tensor *t)
{
    t = tensor_base(t);
    return g->act16 && (t->kind == T_ACT || t->kind == T_TEMP) && !t->keep32;
}

/* "bf16" or "fp16": the 16-bit storage of a mixed-precision graph. */
static inline const char *half_name(const Graph *g) { return g->act16 == RT_PREC_FP16 ? "fp16" : "bf16"; }

/* The C type of an input dtype, for the emitters. */
static inline const char *c_type(int dt)
{
    return dt == RT_U8 ? "uint8_t" : dt == RT_U16 ? "uint16_t" : dt == RT_I32 ? "int32_t" : "float";
}

/* eval: validation's graph (a GAN's: the generator alone, for --sample) */
Graph *graph_build(const Spec *s, int eval);
Tensor *graph_tensor(Graph *g, int kind, const char *name, int rank, const int64_t *shape);
void graph_rename(Graph *g, Tensor *t, const char *name);
Node *graph_node(Graph *g, int kind, const char *origin);
void autodiff(Graph *g);
/* The backward nodes of phase `phase`: reverse mode from seeds pred[k] (gradient
 * dpred[k]) over the forward nodes, differentiating the parameters with disc == net
 * (the others frozen: their backward nodes marked, their gradients never written). */
void autodiff_from(Graph *g, Tensor **pred, Tensor **dpred, int n, int net, int phase);
/* gan.c: a GAN's backward nodes (autodiff's, for a graph that is a GAN) */
void gan_autodiff(Graph *g);
/* validation's graph (the generator) takes training's places of its parameters */
void gan_share_layout(Graph *ev, const Graph *train);

/* ---- the program ---------------------------------------------------------- */

/* Where an operand of an elementwise op reads its tensor, as a function of the loop's
 * element i (i < e->B * n): integers, compared field by field (index_same) and printed
 * by the emitters alone (kernel.c: index_print). A zeroed Index reads at i itself. */
enum {
    IX_SELF,       /* i */
    IX_MOD,        /* i % a: a row of a elements repeated over the rows (a linear layer's
                      bias, position rows) */
    IX_DIV_MOD,    /* i / a % b: one value a run of a (conv2d's bias over [B, out, HW]:
                      a = HW, b = out) */
    IX_DIV,        /* i / a: one value a run of a, the sample's own (a token's weight over
                      its d channels: [B, T, d] from [B, T], a = d) */
    IX_FROM_GEMM,  /* element i of [B, b, a] read from storage [b, B, a] (conv2d's GEMM
                      output [out, B*HW] into [B, out, HW]: a = HW, b = out) */
    IX_TO_GEMM,    /* element i of [b, B, a] read from storage [B, b, a] (the way back,
                      conv2d's backward) */
    IX_TRANSPOSE,  /* element i of [B, a, b] read from storage [B, b, a] (tokens: [C, HW]
                      into [HW, C], a = HW, b = C; its backward a = C, b = HW) */
    IX_SPREAD,     /* element i of [B, b, a] read from storage [B, a]: a sample's row of a
                      repeated over its b rows (token_mean's backward: a = d, b = T) */
    IX_UNPAD,      /* element i of [B, P, b, a] (planes padded by c on each side) read from
                      storage [B, P, b - 2c, a - 2c] at (row - c, column - c): under a
                      select that reads it inside alone (N_PAD) */
    IX_PAD_IN,     /* element i of [B, P, b, a] read from storage [B, P, b + 2c, a + 2c] at
                      (row + c, column + c): the inside of padded planes (N_PAD's backward) */
    IX_SLICE       /* element i of [B, a] read from storage [B, b] at c + i % a of its
                      sample's b (first_token: a = d, c = 0; cls_token's backward: the
                      last a = T d of b = (T + 1) d, c = d). c may be negative only
                      under a select that never reads the elements it would miss
                      (cls_token's forward: the row before, c = -d); b 0: storage
                      without a sample stride (register_tokens' forward: a parameter's
                      rows, c = -d) */
};
typedef struct Index {
    int kind;                /* IX_* */
    int64_t a, b, c;
} Index;

static inline Index ix_self(void) { return (Index){IX_SELF, 0, 0, 0}; }
static inline Index ix_mod(int64_t a) { return (Index){IX_MOD, a, 0, 0}; }
static inline Index ix_div_mod(int64_t a, int64_t b) { return (Index){IX_DIV_MOD, a, b, 0}; }
static inline Index ix_div(int64_t a) { return (Index){IX_DIV, a, 0, 0}; }
static inline Index ix_from_gemm(int64_t a, int64_t b) { return (Index){IX_FROM_GEMM, a, b, 0}; }
static inline Index ix_to_gemm(int64_t a, int64_t b) { return (Index){IX_TO_GEMM, a, b, 0}; }
static inline Index ix_transpose(int64_t a, int64_t b) { return (Index){IX_TRANSPOSE, a, b, 0}; }
static inline Index ix_spread(int64_t a, int64_t b) { return (Index){IX_SPREAD, a, b, 0}; }
static inline Index ix_slice(int64_t a, int64_t b, int64_t c) { return (Index){IX_SLICE, a, b, c}; }
static inline Index ix_unpad(int64_t a, int64_t b, int64_t c) { return (Index){IX_UNPAD, a, b, c}; }
static inline Index ix_pad_in(int64_t a, int64_t b, int64_t c) { return (Index){IX_PAD_IN, a, b, c}; }
/* read elsewhere than at i (a neighbour's element, or a row shared by many) */
static inline int ix_moved(Index x) { return x.kind != IX_SELF; }
/* the same index: every field equal (fusion's test) */
static inline int index_same(Index x, Index y)
{
    return x.kind == y.kind && x.a == y.a && x.b == y.b && x.c == y.c;
}
/* > 0: the operand repeats over rows of this many elements (IX_MOD) */
static inline int64_t ix_period(Index x) { return x.kind == IX_MOD ? x.a : 0; }
/* How the index behaves over aligned runs of i, [q run, (q + 1) run): *run_const 0: it
 * goes up by one with i (index(i) = index(q run) + i % run), a layout change that keeps
 * rows of `run` elements whole; 1: it stays the same (a per-row value such as conv2d's
 * bias). The C emitter then loops over each run with the operand at a pointer
 * (contiguous reads, vectorized). 0: no run (IX_MOD's loop over i vectorizes as it is). */
static inline int64_t ix_run(Index x, int *run_const)
{
    *run_const = x.kind == IX_DIV_MOD || x.kind == IX_DIV;
    return x.kind == IX_DIV_MOD || x.kind == IX_DIV || x.kind == IX_FROM_GEMM ||
                   x.kind == IX_TO_GEMM || x.kind == IX_SPREAD || x.kind == IX_PAD_IN || (x.kind == IX_SLICE && x.c >= 0)
               ? x.a
               : 0;
}

/* An operand of an elementwise op: a tensor read at an index, or the value computed by
 * an earlier op of the same fused loop. */
typedef struct Operand {
    Tensor *t;               /* NULL: value of op `val` in the same loop */
    int val;
    Index ix;                /* where t is read (IX_SELF for a value) */
} Operand;
static inline Operand opd(Tensor *t) { return (Operand){.t = t}; }
static inline Operand opd_at(Tensor *t, Index ix) { return (Operand){.t = t, .ix = ix}; }

/* An elementwise op's value: a small tree of typed nodes over its operands, built by
 * expr.c's helpers in the op files (x_add(x_arg(0), x_arg(1))) and printed by the
 * emitters alone (kernel.c: expr_print). Nodes may be shared; none changes once built.
 * Arithmetic is in float, as C evaluates it: the tree is the order of the operations. */
enum {
    X_ARG,                   /* operand `arg` of the op */
    X_CONST,                 /* the float f rounds to */
    X_CAST,                  /* a[0] as a float (a raw input's integer) */
    X_ADD, X_SUB, X_MUL, X_DIV,   /* a[0] op a[1] */
    X_LT, X_LE,              /* a[0] < a[1], a[0] <= a[1] */
    X_SELECT,                /* a[0] ? a[1] : a[2] */
    X_FN,                    /* the runtime's scalar function fn of a[0] (and a[1]) */
    X_TRAIN,                 /* 1 in training, 0 in evaluation (the run's, at launch) */
    X_UNIFORM,               /* dropout's draw for element i, uniform in [0, 1): the run's
                                rng_key mixed with `key`, i's place in rows of n, and the
                                rank's rng_part */
    X_HEAD,                  /* whether i's place in rows of n is below m (a sample's first
                                row of [T, d]: n = T d, m = d), for a select */
    X_PICK,                  /* the constant list[i / n % m]: one of m, each for a run of n
                                (an image input's scale per channel) */
    X_INSIDE,                /* whether element i of planes [n rows, m columns] padded by
                                `pad` lies inside (N_PAD), for a select */
    X_PLACE                  /* i's place in rows of n, i % n, as a float (span's padding:
                                a position below its place) */
};
/* X_FN's functions (trainc_rt.h and the CUDA prelude have each): of x, or (_BWD) of x
 * and dy, the gradient through the activation at x */
enum {
    FN_GELU, FN_GELU_TANH, FN_SILU, FN_TANH, FN_SIGMOID,
    FN_GELU_BWD, FN_GELU_TANH_BWD, FN_SILU_BWD
};

typedef struct Expr {
    int kind;                /* X_* */
    int arg;                 /* X_ARG */
    int fn;                  /* X_FN: FN_* */
    double f;                /* X_CONST */
    uint64_t key;            /* X_UNIFORM: the layer's mask key */
    int64_t n;               /* X_UNIFORM, X_HEAD, X_PLACE: the elements of a batch row */
    int64_t m;               /* X_HEAD: the elements of its head; X_PICK: the constants;
                                X_UNIFORM: 1, one draw a batch row (x_uniform_row) */
    const double *list;      /* X_PICK: m constants, each rounded to float */
    int64_t pad;             /* X_INSIDE: the border's width */
    const struct Expr *a[3];
} Expr;

const Expr *x_arg(int k);
const Expr *x_const(double f);
const Expr *x_cast(const Expr *a);
const Expr *x_add(const Expr *a, const Expr *b);
const Expr *x_sub(const Expr *a, const Expr *b);
const Expr *x_mul(const Expr *a, const Expr *b);
const Expr *x_div(const Expr *a, const Expr *b);
const Expr *x_lt(const Expr *a, const Expr *b);
const Expr *x_le(const Expr *a, const Expr *b);
const Expr *x_select(const Expr *c, const Expr *t, const Expr *f);
const Expr *x_fn(int fn, const Expr *a, const Expr *b);   /* b NULL: a function of one */
const Expr *x_train(void);
const Expr *x_uniform(uint64_t key, int64_t n);
/* the draw of element i's batch row (of n elements): the same for all of its elements */
const Expr *x_uniform_row(uint64_t key, int64_t n);
const Expr *x_head(int64_t n, int64_t m);
/* list[i / n % m] (a constant alone where the m are the same) */
const Expr *x_pick(const double *list, int64_t n, int64_t m);
/* whether element i of padded planes [rows, cols] lies inside their border of pad */
const Expr *x_inside(int64_t rows, int64_t cols, int64_t pad);
/* (float)(i % n): element i's place in rows of n */
const Expr *x_place(int64_t n);
/* max(v, 0) with NaN kept, as torch.relu: v < 0 ? 0 : v (for relu and what squares it) */
const Expr *x_relu(const Expr *v);
/* Does the value depend on the element's number i itself (dropout's draw), beyond its
 * operands? */
int expr_reads_i(const Expr *x);

/* What an elementwise op is, where a pass must recognise one (fusion's epilogues, the
 * emitters' special cases) without reading its expression. */
enum {
    EW_OTHER,                /* anything else (input conversion, ...) */
    EW_COPY,                 /* operand 0: a layout change, the order in its index */
    EW_ADD,                  /* operand 0 + operand 1 */
    EW_ACT,                  /* the activation `act` of operand 0 */
    EW_ACT_BWD,              /* activation `act`'s backward: operand 0 = dy, 1 = x or y */
    EW_DROPOUT               /* a dropout mask applied (its X_UNIFORM reads the rank's
                                rng_part, which the CUDA kernel then takes) */
};

typedef struct EwOp {
    int tag;                 /* EW_* */
    int act;                 /* EW_ACT, EW_ACT_BWD: ACT_* */
    const Expr *expr;        /* its value, of arg[0 .. n_arg) */
    Operand arg[3];
    int n_arg;
    Tensor *out;             /* the tensor this value belongs to (written if materialized) */
    const char *origin;
    const char *what;
} EwOp;

enum { I_EW, I_CALL, I_GEMM };

/* The runtime calls an I_CALL or I_GEMM makes. call.c's table gives each its runtime
 * function and its arguments' classes (after the rt_exec *e every call takes first). */
enum {
    CALL_GEMM,           /* ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc */
    CALL_GEMM_BIAS,      /* ta .. ldb, C|NULL, ldc, bias, R|NULL, RT_EPI_*, Y|NULL */
    CALL_GEMM_DGELU,     /* ta .. ldb, D, ldc, x (the GELU's input) */
    CALL_GEMM_DBIAS,     /* ta .. ldc, db, fresh (the bias gradient's first writer) */
    CALL_IM2COL,         /* x, col, B, C, H, W, k, stride, pad, OH, OW */
    CALL_COL2IM,         /* dcol, dx, B, C, H, W, k, stride, pad, OH, OW */
    CALL_MAXPOOL_FWD,    /* x, y, B*C, H, W, k, stride, OH, OW */
    CALL_AVGPOOL_FWD,    /* x, y, B*C, H, W, k, stride, OH, OW */
    CALL_MAXPOOL_BWD,    /* x, dy, dx, B*C, H, W, k, stride, OH, OW */
    CALL_AVGPOOL_BWD,    /* dy, dx, B*C, H, W, k, stride, OH, OW */
    CALL_LAYERNORM_FWD,  /* x, w, b, y, mean, rstd, rows, d, eps */
    CALL_LAYERNORM_BWD,  /* x, w, mean, rstd, dy, addend|NULL, dx, dw, db, rows, d */
    CALL_RMSNORM_FWD,    /* x, w, y, rstd, rows, d, eps */
    CALL_RMSNORM_BWD,    /* x, w, rstd, dy, addend|NULL, dx, dw, rows, d */
    CALL_GLU_FWD,        /* x [rows, 2h], y [rows, h], rows, h, RT_GLU_* */
    CALL_GLU_BWD,        /* x, dy, dx, rows, h, RT_GLU_* */
    CALL_GLU_GATED_FWD,  /* x [rows, 2h + 1], y [rows, h], rows, h, RT_GLU_*: glu's y times
                            sigmoid(x[r, 2h]) */
    CALL_GLU_GATED_BWD,  /* x, dy, dx [rows, 2h + 1], rows, h, RT_GLU_* */
    CALL_QK_NORM_FWD,    /* qkv, wq, wk, y, rstd [rows, 2], rows, dq, dk, dv, eps */
    CALL_QK_NORM_BWD,    /* qkv, wq, wk, rstd, dy, dx, dwq, dwk, rows, dq, dk, dv */
    CALL_CROSS_ENTROPY,  /* logits, targets, dlogits (training only)|NULL, rows, C, ld */
    CALL_MSE,            /* pred, targets, dpred (training only)|NULL, n */
    CALL_EMBEDDING_FWD,  /* ids, W, y, n, V, dim */
    CALL_EMBEDDING_BWD,  /* ids, dy, dW, n, V, dim */
    CALL_ATTENTION_FWD,  /* qkv, lse, y, B, T, d, H, causal */
    CALL_ATTENTION_BWD,  /* qkv, lse, y, dy, dqkv, B, T, d, H, causal */
    /* with kv_heads, qk_norm (qn, kn weights or NULL), a window (0: none), rope (theta
     * 0: none; factor 0: no llama3 scaling, else factor, low, high, orig; ext: the
     * inverse frequencies of a partial rope or longrope, or NULL), the scores' factor
     * (scale) and soft-cap (0: none), packed rows' positions (pos, or NULL) */
    CALL_ATTENTION_EXT_FWD, /* qkv, qn, kn, lse, y, B, T, d, H, KV, causal, window, theta,
                               factor, low, high, orig, ext, scale, softcap, pos */
    CALL_ATTENTION_EXT_BWD, /* qkv, qn, kn, lse, y, dy, dqkv, dqn, dkn, B, ... as _FWD */
    CALL_COLSUM_ADD,     /* x, out, rows, cols: out += column sums */
    CALL_ROWSUM_ADD,     /* x, out, rows, cols: out += row sums */
    CALL_GRAD_BEGIN,     /* offset, floats: a parameter gradient's range about to be written */
    CALL_GRAD_READY,     /* offset, floats: that range final */
    CALL_BATCHNORM_FWD,  /* x, w|NULL, b|NULL, scale, shift, mean|NULL, rstd|NULL, running
                            mean, var, count (NULL each in a replay), B, C, HW, eps,
                            momentum, sync */
    CALL_BATCHNORM_BWD,  /* x, w|NULL, mean, rstd, dy, dx, dw|NULL, db|NULL, B, C, HW, sync */
    CALL_CROSS_ENTROPY_LS, /* logits, targets, dlogits|NULL, rows, C, ld, label smoothing */
    CALL_GCONV_FWD,      /* x, w, bias|NULL, y, B, C, H, W, k, stride, pad, OH, OW, out, groups */
    CALL_GCONV_BWD_DATA, /* dy, w, dx, B, C, H, W, k, stride, pad, OH, OW, out, groups */
    CALL_GCONV_BWD_WEIGHT, /* x, dy, dw, db|NULL, B, C, H, W, k, stride, pad, OH, OW, out, groups */
    CALL_GAN_LOSS,       /* logits, dlogits|NULL, rows, RT_GAN_* term */
    CALL_CONV_FWD,       /* x, w, col, yt, B, C, H, W, k, stride, pad, OH, OW, out */
    CALL_CONV_BWD_WEIGHT, /* x, dyt, col, dw, B, C, H, W, k, stride, pad, OH, OW, out */
    CALL_CONV_BWD_DATA,  /* w, dyt, dcol, dx, B, C, H, W, k, stride, pad, OH, OW, out */
    CALL_HEAD_CE,        /* x, W, targets, dx|NULL, dW|NULL (training only), logits, rows,
                            chunk rows, d, W's rows, C, ld, label smoothing: a language
                            model's head and cross entropy a chunk of rows at a time */
    /* moe (MoeRoute's tensors; tokens, d, E, k, the expert's width (2h up, h down)) */
    CALL_MOE_DISPATCH_FWD, /* x, Wr, Wup, probs, gate, idx, offs, xg, h, stats|NULL, tokens, d,
                              E, k, 2h, norm_topk, stats row */
    CALL_MOE_DISPATCH_BWD, /* x, Wr, Wup, probs, gate, idx, offs, dgate, agrad|NULL, dh, xg,
                              dlogits, dx, dWr, dWup, tokens, d, E, k, 2h, norm_topk */
    CALL_MOE_COMBINE_FWD,  /* a, Wdown, gate, idx, offs, o, y, tokens, d, E, k, h */
    CALL_MOE_COMBINE_BWD,  /* a, Wdown, gate, idx, offs, dy, g, da, dgate, dWdown, tokens, d,
                              E, k, h */
    CALL_MOE_AUX,          /* stats, agrad, layers, tokens, E, coef: the load-balancing loss */
    CALL_ATTENTION_DECODE, /* qkv, qn, kn, y, kv offset, B, T, d, H, KV, window, rope..., scale,
                              softcap: each row's position (e->place) against its
                              sequence's key/value cache */
    CALL_POS_ROW_ADD,      /* x, W, y, B, d: y = x + W's row at each row's position */
    CALL_DPO,              /* logits, targets, reference|NULL, dlogits|NULL, logps, samples,
                              rows a sample, C, ld, beta, gamma, label smoothing, kind
                              (RT_PREF_*), sft targets|NULL (orpo's), labels|NULL,
                              desirable and undesirable weights (kto's), the supervised
                              term's weight (orpo's 1, rpo_alpha): direct preference
                              optimization and its kin */
    CALL_GRN_FWD,          /* x, w, b, y, g, B, T, C: ConvNeXt V2's global response
                              normalization over each sample's T rows of C */
    CALL_GRN_BWD,          /* x, w, g, dy, dx, dw, db, B, T, C */
    N_CALLS
};

/* An argument of a call. */
enum {
    ARG_TENSOR,              /* t */
    ARG_INT,                 /* i */
    ARG_ROWS,                /* e->B * i: a count per batch row */
    ARG_FLOAT,               /* f */
    ARG_NULL,                /* no tensor */
    ARG_TRAIN,               /* t while training, NULL in evaluation (e->train ? t : NULL) */
    ARG_EPI,                 /* i: an RT_EPI_* activation */
    ARG_FLOATS               /* fs[0 .. i): constants, as a float array literal */
};

typedef struct Arg {
    int kind;                /* ARG_* */
    Tensor *t;
    int64_t i;
    double f;
    const double *fs;
} Arg;

#define CALL_MAX_ARGS 25   /* attention backward with its options: 25 */

static inline Arg arg_t(Tensor *t) { return (Arg){.kind = ARG_TENSOR, .t = t}; }
static inline Arg arg_int(int64_t i) { return (Arg){.kind = ARG_INT, .i = i}; }
static inline Arg arg_rows(int64_t i) { return (Arg){.kind = ARG_ROWS, .i = i}; }
static inline Arg arg_float(double f) { return (Arg){.kind = ARG_FLOAT, .f = f}; }
static inline Arg arg_null(void) { return (Arg){.kind = ARG_NULL}; }
static inline Arg arg_train(Tensor *t) { return (Arg){.kind = ARG_TRAIN, .t = t}; }
static inline Arg arg_epi(int act) { return (Arg){.kind = ARG_EPI, .i = act}; }
static inline Arg arg_floats(const double *fs, int64_t n)
{
    return (Arg){.kind = ARG_FLOATS, .fs = fs, .i = n};
}
/* a tensor, or NULL for none */
static inline Arg arg_opt(Tensor *t) { return t ? arg_t(t) : arg_null(); }

typedef struct Instr {
    int kind;
    int backward;
    const char *origin;      /* spec path(s) for the comment */
    char *what;              /* one-line description (instr_what prints it) */
    Tensor *what_t;          /* with what_rest: the description goes on naming this tensor,
                                then what_rest (a replay names the copy it reads) */
    char *what_rest;
    /* I_EW: one loop over e->B * n elements */
    EwOp *ops;
    int n_ops;
    int64_t n;
    int id;                  /* kernel number */
    /* I_CALL and I_GEMM: the runtime call (CALL_*) and its arguments */
    int call;
    Arg args[CALL_MAX_ARGS];
    int n_args;
    Tensor **reads, **writes;
    int n_reads, n_writes;
    int dead;                /* merged into another instruction by fusion */
    int fp8;                 /* I_GEMM of fp8-mixed: a linear layer's GEMM other than the
                                classifier's, printed as rt_gemm_fp8 (or _bias_fp8, ...) */
    /* fp8-mixed's amax slots (emit_cuda.c's cuda_fp8_slots), each the slot + 1 (0: none):
       an I_EW folds the maximum of fp8_fold_t (which it writes whole) into fp8_fold; a
       marked GEMM reads its operands' from fp8_a and fp8_b and folds its output's into
       fp8_out (rt_fp8_amax_use) */
    int fp8_fold, fp8_a, fp8_b, fp8_out;
    Tensor *fp8_fold_t;
    Tensor *inplace;         /* I_CALL: a read whose storage its activation output may take
                                when the read dies here (the call reads each element of it
                                before writing that element); memplan decides */
    int block;               /* forward instructions: the block they belong to */
    int recompute;           /* a forward instruction replayed in the backward pass */
    int phase;               /* its node's (Node.phase): a GAN's emitters split by it */
    int64_t flops;           /* per sample (GEMMs and heavy calls; 0 = negligible) */
    /* I_EW: the kernel whose text this one's would repeat, or NULL; the launch names
       that kernel and this one is not printed (emit.c, find_twins). same_cpu (of
       validation's loops): a training kernel, offsets included. same_gpu: an earlier
       kernel of training's, validation's or the decode program's, same_gpu_pass says
       which (TWIN_*: its name is k, ke or kd and its id) */
    struct Instr *same_cpu, *same_gpu;
    int same_gpu_pass;
} Instr;

typedef struct Program {
    Graph *g;
    Instr **ins;
    int n_ins, cap_ins;
    int n_forward;           /* ins[0 .. n_forward) run in the forward pass */
    int n_kernels;
    int eval;                /* forward only, no loss gradient: validation's own plan */
    int decode;              /* (with eval) the decode program: one position, no loss */
    const char *kprefix;     /* kernel names: "k" (training), "ke" (evaluation), "kd" (decode) */
    int cur_block;           /* while lowering: the block of the node being lowered */
    int cur_phase;           /* while lowering: the phase of the node being lowered */
    int policy;              /* RT_RECOMPUTE_* applied */
    int full_blocks;         /* with selective: blocks 0 .. full_blocks-1 recomputed in full */
    int sel_blocks;          /* blocks full_blocks .. sel_blocks-1 selective, the rest kept */
    const char *cuda_unsupported; /* set by emit_cuda: why this model cannot run on a GPU */
    int n_blocks;            /* top-level blocks (the highest Instr.block + 1) */
    int64_t recompute_flops; /* per sample, added by recomputation (estimate) */
    int64_t arena_row_bytes, noreuse_row_bytes, lower_bound_row_bytes;
    int64_t eval_row_bytes;  /* the validation plan's arena (set on the training program) */
    int64_t alloc_row_bytes; /* the arena a row as allocated: the larger of the two */
    int64_t workspace_bytes; /* the GPU's fixed allocations at the spec's batch size
                                (rt_gpu_fixed_bytes): counted in the plan's total */
    int64_t total_bytes;     /* at the spec's batch size: what memory_budget_mb counts */
    int fp8_first, fp8_slots;      /* fp8-mixed: this program's amax slots (cuda_fp8_slots) */
    int fp8_all_slots;             /* the training program's: its and validation's, in all */
    int64_t gpu_scratch_row_bytes; /* what the GPU's calls need a batch row (emit_cuda.c:
                                      cuda_scratch_row_bytes), for host.c's rt_model */
    int n_replayed, n_replayed_light;  /* recompute's replays; elementwise or norm work */
    int64_t replay_row_bytes;          /* the bytes they write, a batch row (after memplan) */
} Program;

Program *lower(Graph *g);
Program *lower_eval(Graph *g);   /* a forward-only graph, for validation */
void add_grad_hooks(Program *p); /* rt_grad_begin before each parameter's first gradient write,
                                    rt_grad_ready after its last */
void place_frozen_grads(Program *p); /* Param.sink_offset, Graph.sink_floats */
/* zero2.c: the most gradient bytes rank `rank` of `world` backs at once under zero2 in
 * a backward pass, in units of `unit` bytes (4 KB pages on a CPU, the driver's chunks on
 * a GPU), at worst (no reduction passes before the host must wait for it). */
int64_t zero2_peak_bytes(const Program *p, int64_t bucket_bytes, int rank, int world, int64_t unit);
void fuse(Program *p);
/* verify.c: after each pass pipeline.c calls passed() (a program) or passed_graph(): the
 * verifier's checks (die on a broken rule), and --dump-after's print when PASS is the
 * one asked for (set_dump_after: exit 1 naming the passes for an unknown one). */
void passed(const Program *p, const char *pass);
void passed_graph(const Graph *g, const char *pass);
void set_dump_after(const char *pass);
/* Plans compiled only to be compared (recompute auto's candidates, full's two ways) are
 * verified but not dumped: dump_pause(1) while they compile (returns the previous
 * state); dump_wanted() says whether the plan kept should be compiled once more, dumped. */
int dump_pause(int on);
int dump_wanted(void);
/* A linear layer's GEMM and the fused loop after it that adds the bias and a residual
 * (and nothing else) become one rt_gemm_bias call with the residual as cuBLASLt's C
 * (beta 1), the residual added before the bias. Before recompute, so that a block
 * replayed in the backward pass repeats the same call, with the same rounding. */
void residual_epilogues(Program *p);
/* A linear layer's GEMM and the fused loop after it that only adds the bias (and
 * applies a ReLU or a GELU tanh) become one rt_gemm_bias call (a cuBLASLt epilogue on
 * a GPU); fused loops are then numbered in program order. After recompute. */
void gemm_epilogues(Program *p);
/* A layernorm (or rmsnorm) backward and the loop after it that adds its dx to another
 * gradient (autodiff's sum of gradient contributions) become one rt_layernorm_bwd
 * (rt_rmsnorm_bwd) with that gradient as its addend: the same float add, per element. */
void layernorm_bwd_sums(Program *p);
/* The backward pass's GEMM epilogues: a data-gradient GEMM and the GELU (tanh)
 * backward loop that consumes its product become one rt_gemm_dgelu; a weight-gradient
 * GEMM and the bias gradient's column sums of the same dy become one rt_gemm_dbias
 * (cuBLASLt's DGELU and BGRADB on a GPU). After layernorm_bwd_sums. */
void grad_epilogues(Program *p);
void memplan(Program *p);
/* Drops saved activations per the recompute policy and replays their producers in
 * the backward pass (recompute.c); run after fuse, before memplan. With selective,
 * full_blocks > 0 recomputes the first full_blocks blocks in full (auto's steps
 * between selective and full), and 0 < sel_blocks < the blocks recomputes only the
 * first sel_blocks blocks (auto's steps between none and selective). */
void recompute(Program *p, int policy, int full_blocks, int sel_blocks, int jit_cheap);

/* ---- output --------------------------------------------------------------- */

/* kernel.c: a fused kernel as both emitters see it. kernel_head: its comment up to its
 * origin ("/" "* NAME: WHAT\n *     from ORIGIN"), the caller going on with it. */
void kernel_head(Buf *b, const char *name, const Instr *in);
/* An operand's index as C (cuda 0: "e->B") or CUDA (1: the kernel's argument "B") text,
 * "i / 64 % 16"; the emitters and --dump-after print indices through it alone. */
void index_print(Buf *b, Index ix, int cuda);
/* An expression as C (cuda 0: rt_exec's e->train, e->rng_key, e->rng_part) or CUDA (1:
 * the kernel's arguments train, rng_key, rng_part), parenthesized where C's precedence
 * needs it to keep the tree's order; operand k printed by put(b, k, ctx). */
void expr_print(Buf *b, const Expr *x, int cuda, void (*put)(Buf *b, int k, void *ctx), void *ctx);
/* A fused kernel's tensors in its parameter order (both emitters and the launch). */
int kernel_tensors(const Instr *in, Tensor **t, char *w, int max);
/* The tensors an instruction range touches, each once, in first-use order, w[i] set
 * where one is written (uses_add); kernel_uses adds a fused kernel's. */
typedef struct Uses {
    Tensor **t;
    char *w;
    int n;
} Uses;
void uses_add(Uses *u, Tensor *t, int w);
void kernel_uses(Uses *u, const Instr *in);

/* ---- calls (call.c) ------------------------------------------------------------------ */

/* Makes `in` call `call` with args[0 .. n); dies when the table refuses them (a
 * compiler bug). SET_CALL(in, CALL_X, arg_t(x), arg_int(3), ...) counts them. */
void call_set(Instr *in, int call, const Arg *args, int n);
#define SET_CALL(in, call, ...)                                                            \
    call_set((in), (call), (Arg[]){__VA_ARGS__}, (int)(sizeof((Arg[]){__VA_ARGS__}) / sizeof(Arg)))
/* What is wrong with an I_CALL's or I_GEMM's arguments, by the table, or NULL. */
const char *call_check(const Instr *in);
/* The runtime function of a call kind ("rt_gemm"). */
const char *call_name(int call);
/* Does selective recomputation replay a call of this kind (layernorm)? */
int call_cheap(int call);
/* Is `in` the gradient hook `call` (CALL_GRAD_BEGIN, CALL_GRAD_READY)? Then its floats
 * [*off, *off + *n). */
int grad_hook(const Instr *in, int call, int64_t *off, int64_t *n);
/* Every argument that references `from` references `to`. */
void call_rename(Instr *in, const Tensor *from, Tensor *to);
/* Every argument that references t becomes NULL (a replay's running statistics). */
void call_drop(Instr *in, const Tensor *t);
/* The call as a C statement, "rt_gemm(e, 0, 1, e->B * 64, ...);". Allocated. */
char *call_text(const Instr *in);
/* A float literal that reads back as the same float ("1.0f", "9.99999975e-06f"). */
char *float_literal(double v);
/* An instruction's description, with the tensor it names (what_t). Allocated. */
char *instr_what(const Instr *in);

/* A tensor's shape for comments: parameters and their gradients whole, the rest per
 * batch of B rows ("[B, 128, 384]"), conv2d's GEMM operands as stored. Allocated. */
char *tensor_shape_text(const Tensor *t);
/* A tensor's shape "[B, 128, 384]" (batch: with the rows' B) or "[384, 128]". Allocated. */
char *shape_of(const Tensor *t, int batch);

/* emit.c: the driver calls emit_prepare (the names, loop sizes and twin kernels both
 * emitters read), then emit_c and emit_cuda, siblings; emit_write writes what they
 * printed. */
typedef struct Emitted {
    Buf model_h, host_c, kernels_c, plan_json;   /* emit_c */
    Buf cpu_kernel_names;  /* kernels_c's functions, one a line (jit_cc.c) */
    Buf kernels_cu;        /* emit_cuda: what NVRTC compiles, the templates inlined */
    Buf kernels_cu_file;   /* kernels_cuda.cu as written: the templates #included */
} Emitted;
void emit_prepare(Program *p, Program *eval, Program *decode);
enum { TWIN_TRAIN, TWIN_EVAL, TWIN_DECODE };   /* Instr.same_gpu_pass */
const char *twin_prefix(int pass);             /* a kernel's name prefix: k, ke, kd */
/* Writes the files of `out` into dir (created), each via a temporary name. */
int emit_write(const Emitted *out, const char *dir);

/* emit_c.c: model.h, host.c, kernels_cpu.c and plan.json. `data_dir` is recorded as
 * given (the build and JIT override it with an absolute path). decode: NULL, or the
 * decode program (the CPU's alone). */
void emit_c(Program *p, Program *eval, Program *decode, Emitted *out);
/* One fused kernel as C, named `name` (kernels_cpu.c's). */
void emit_kernel(Buf *b, Instr *in, const char *name);
void emit_plan_json(Program *p, Buf *b);

/* emit_cuda.c: kernels_cuda.cu, as NVRTC compiles it (b) and as written (file). */
void emit_cuda(Program *p, Program *eval, Program *decode, Buf *b, Buf *file);
/* One fused kernel as CUDA, named `name`. */
void cuda_kernel(Buf *b, const Graph *g, Instr *in, const char *name);
/* Scratch the GPU's calls need per batch row (attention backward's row sums). */
int64_t cuda_scratch_row_bytes(const Program *p);
/* fp8-mixed: the largest weight its marked GEMMs cast to FP8, in bytes (rt_model's
 * fp8_weight_bytes); 0 without such GEMMs */
int64_t cuda_fp8_weight_bytes(const Program *p);
/* fp8-mixed: whether p->ins[i] is the first of a linear layer's two backward GEMMs
 * that share dy's cast (rt_fp8_dy_pair): marked GEMMs of the same A (dy) with op(B)
 * untransposed, only gradient hooks between them, the second before ins[to] */
int cuda_fp8_pair_first(const Program *p, int i, int to);
/* fp8-mixed: the amax slots of the training and validation programs (Instr.fp8_fold ...):
 * where a marked GEMM's activation or gradient operand is written whole by the last
 * writer before it, and that writer is a fused elementwise kernel, a norm (forward or
 * backward), or a marked GEMM whose output our epilogue kernel writes, the writer folds
 * the operand's maximum into a slot the GEMM's cast reads. Slots are numbered in the
 * order of their writers. */
void cuda_fp8_slots(Program *p, Program *ev);
/* the slots the writers of p->ins[from .. to) fold into: [*first, *first + *n) */
void cuda_fp8_slot_range(const Program *p, int from, int to, int *first, int *n);

/* ---- drivers -------------------------------------------------------------- */

typedef struct Compiled {
    Spec *spec;
    Graph *graph;
    Program *prog;
    Graph *eval_graph;
    Program *eval;
    Graph *decode_graph;     /* decode.c's program, or NULL: the model has none */
    Program *decode;
    Emitted em;
} Compiled;
Compiled *compile_spec(Spec *s);

/* ---- the pipeline ---------------------------------------------------------- */

/* The passes in order: the name --dump-after takes, the function pipeline.c calls, and
 * the programs that run it (PASS_TRAIN: training's, PASS_EVAL: validation's, PASS_BOTH).
 * After each, the verifier and --dump-after (verify.c, which takes the names from here). */
enum { PASS_TRAIN = 1, PASS_EVAL = 2, PASS_BOTH = 3 };
#define PASS_LIST(X)                                                                        \
    X("graph", pass_graph, PASS_BOTH)                 /* graph_build: the forward nodes */  \
    X("autodiff", pass_autodiff, PASS_TRAIN)          /* the backward nodes */              \
    X("lower", pass_lower, PASS_BOTH)                 /* nodes -> instructions */           \
    X("fusion", pass_fusion, PASS_BOTH)               /* elementwise chains into loops */   \
    X("residual", pass_residual, PASS_BOTH)           /* residual adds into GEMMs */        \
    X("recompute", pass_recompute, PASS_TRAIN)        /* activations dropped, replayed */   \
    X("gemm-epilogues", pass_gemm_epilogues, PASS_BOTH) /* bias, activation into GEMMs */   \
    X("layernorm-sums", pass_layernorm_sums, PASS_TRAIN) /* layernorm bwd's sums */         \
    X("grad-epilogues", pass_grad_epilogues, PASS_TRAIN) /* DGELU, bias gradients */        \
    X("grad-hooks", pass_grad_hooks, PASS_TRAIN)      /* rt_grad_begin, rt_grad_ready */    \
    X("memplan", pass_memplan, PASS_BOTH)             /* the arena */
/* Validation's program, into c->eval_graph and c->eval. */
void compile_eval(Compiled *c);
/* The decode program (decode.c), into c->decode_graph and c->decode, where the model has
 * one; after compile_eval. */
void compile_decode(Compiled *c);
/* decode.c: the spec's copy for the decode program (NULL: the model has none), and its
 * graph's parameters laid out as validation's are. */
Spec *decode_spec(const Spec *s);
void decode_share_layout(Graph *d, const Graph *ev);
/* graph d's parameters at the places graph `from` gave them (flags: their frozen and
 * 16-bit-only marks too); graph.c */
void take_param_places(Graph *d, const Graph *from, int flags, const char *whose);
/* Training's program for one recomputation plan, into c->graph and c->prog: with
 * selective, the first full_blocks blocks recomputed in full, and sel_blocks > 0:
 * blocks from sel_blocks on kept whole. Where blocks are recomputed in full, the smaller
 * of its two ways (recompute.c: jit_cheap). */
void compile_train(Compiled *c, int policy, int full_blocks, int sel_blocks);
/* recompute_auto.c: recompute auto's choice, compiled into c->graph and c->prog (exit 1
 * when no plan fits memory_budget_mb); plan_totals: the kept program's memory at the
 * spec's batch size (Program.eval_row_bytes, alloc_row_bytes, workspace_bytes,
 * total_bytes: what memory_budget_mb counts). */
void recompute_auto(Compiled *c);
void plan_totals(Compiled *c);
int jit_run(Compiled *c, const char *incdir, int argc, char **argv);
/* jit_cc.c: trainc run's CPU kernels rebuilt by the system's C compiler, from the
 * cache or in the background (begin, after libtcc linked them), until the run ends */
struct TCCState;
void jit_cc_begin(const Emitted *em, const char *kern_src, const char *incdir,
                  struct TCCState *s);
void jit_cc_end(void);

/* build.c: trainc build's programs, temporary files, CUDA image and bundle. */
void build_temp_setup(void);            /* atexit and signal handlers; once */
const char *build_temp_dir(void);       /* mkdtemp in $TMPDIR (else /tmp), removed on any exit */
void build_temp_dir_remove(void);
int build_temp_file(char *tmpl);        /* mkostemp(tmpl), removed on any exit: its fd, or -1 */
void build_temp_done(const char *path); /* renamed into place: no longer removed */
int build_install(const char *from, const char *to, unsigned mode);   /* a copy, whole or none */
/* Runs argv (argv[0] found on PATH) without a shell; out: its stdout read into it; quiet:
 * its stderr to /dev/null. Its exit status (128 + a signal's number), or -1 with errno
 * when it could not start. */
int build_run(char *const *argv, Buf *out, int quiet);
char *build_check_archs(const char *list);  /* checked (exit 1), repeats out: "sm_80,sm_90" */
char *build_cuda_image(const char *src, const char *archs, const char *dir);
void build_bundle(const char *exe, const char *dir, int cuda);

#endif
