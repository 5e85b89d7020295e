/* op.h: what an op file under compiler/ops/ defines, and the helpers it builds with.
 *
 * Two tables, both filled in ops/registry.c:
 *   op_defs[OP_*]   a spec op (ops.h's OP_LIST): how its layer becomes graph nodes, its
 *                   shapes checked (build);
 *   node_defs[N_*]  a graph node kind (ir.h): its name in --dump-after, its backward rule
 *                   (read by autodiff.c) and its lowering to instructions (lower.c).
 * An op file holds its spec op's OpDef and the NodeDefs of the node kinds it makes, so
 * an op is read, and added, in one place. Its spec keys (those it takes, those it
 * needs) are its row in ops.h's OP_LIST, which spec.c's table-driven key checks read;
 * spec.c reads the names of its parameters through OpDef.params. */
#ifndef OPS_OP_H
#define OPS_OP_H

#include "../ir.h"

/* ---- building the graph (graph.c) ------------------------------------------- */

/* The state of graph_build's walk over the layers. */
typedef struct GraphCtx {
    Graph *g;
    const Spec *s;
    Tensor *cur;           /* output of the previous layer */
    Tensor *converted[RT_MAX_INPUTS];
    Init init;             /* the init in effect (model, then layer) */
    int has_init;
    int64_t n_blocks;      /* blocks holding a residual branch (gpt2_blocks) */
    int resid_out;         /* the layer being built is the last of a residual body */
    const char *emb_name[64];  /* named embeddings, for "tie" */
    Param *emb_param[64];
    int n_emb;
    const char *iter;      /* inside a repeat: the iteration ("3"; nested "3.1"), else NULL */
    int64_t inner_iter;    /* inside a repeat: the innermost one's iteration (1 in "3.1") */
    int64_t inner_count;   /* and its count */
    int as_float[RT_MAX_INPUTS];  /* input k is read as floats (x * scale + shift) */
    int as_ids[RT_MAX_INPUTS];    /* input k is read by an embedding */
    int64_t act_bytes;     /* one sample's activations so far, without reuse */
    const char *top;       /* the names' prefix of the top-level layers, each a block for
                              recomputation: NULL for "" (a GAN's: "generator." and
                              "discriminator.", gan.c) */
    Tensor *positions;     /* the input of packed rows' positions (i32 [T]), or NULL */
    int positions_read;    /* attention layers that read it */
} GraphCtx;

/* Whether layers listed under prefix are top-level (blocks of their own) */
static inline int top_level(const GraphCtx *c, const char *prefix)
{
    return !strcmp(prefix, c->top ? c->top : "");
}

/* One layer being built: the layer, where its nodes say they came from (its spec path,
 * and inside a repeat the iteration: "$.model.layers[2] #3"), its names' prefix ("h.3.attn"),
 * the prefix of the list it is in ("h.3."), its input and the init in effect. */
typedef struct LayerArgs {
    const Layer *l;
    const char *at;
    const char *pfx;
    const char *prefix;
    Tensor *x;
    Init init;
} LayerArgs;

typedef struct OpDef {
    /* appends the layer's nodes, checks its shapes, sets c->cur to its output */
    void (*build)(GraphCtx *c, const LayerArgs *a);
    /* the names of the parameter tensors the layer owns, as suffixes of its name
     * ("weight", "qkv.bias"), into out[8]; their number. NULL: none (spec.c checks
     * the names a spec makes before the graph is built) */
    int (*params)(const Layer *l, const char **out);
    /* the layer reads a model input's raw integers (token ids), never its conversion
     * to floats */
    int reads_ids;
} OpDef;

extern const OpDef *const op_defs[OP__COUNT];

/* graph.c's helpers for building */
char *shape_str(int rank, const int64_t *shape);
_Noreturn void layer_error(GraphCtx *c, const Layer *l, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gemm_dim(const Graph *g, const char *path, const char *op, const char *what, int64_t n);
void count_act(GraphCtx *c, const char *path, int rank, const int64_t *shape);
Tensor *act_tensor(GraphCtx *c, const char *path, const char *name, int rank,
                   const int64_t *shape);
void add_flops(GraphCtx *c, Node *nd, const char *path, double fwd, double dx, double dw);
char *layer_ident(const char *op, const char *prefix);
Param *add_param(Graph *g, const char *prefix, const char *what, int rank,
                 const int64_t *shape, int init, double a, const char *origin);
Param *add_state(Graph *g, const char *prefix, const char *what, int rank,
                 const int64_t *shape, double a, int i64, const char *origin);
double init_std(const GraphCtx *c, Init init, int resid_out);
int find_model_input(const Spec *s, const char *name);
void read_as_i32(Tensor *raw);
Tensor *input_f32(GraphCtx *c, int k);   /* ops/convert.c: the layers' view of input k */
Tensor *convert_input(GraphCtx *c, int k, const char *name, const char *what);
int64_t param_span(const Param *p);     /* the floats a parameter takes in the region */
/* A node of the layer being built: kind, from where the layer says, reading x (its
 * in[0]) and writing y. */
Node *layer_node(GraphCtx *c, const LayerArgs *a, int kind, Tensor *x, Tensor *y);
void build_layers(GraphCtx *c, Layer **layers, int n, const char *prefix, int residual_body);
/* token_mean.c: the sum over X's tokens after the first S, each channel's in double (the
 * tokens read copied out where S > 0, transposed to [d, T - S], the runtime's row sums):
 * a [B, d] tensor of floats, its temporaries named after NAME, OP in the instructions'
 * words (token_mean's, cls_mean's) */
Tensor *lower_token_sum(Program *p, Node *nd, Tensor *x, int64_t S, const char *name,
                        const char *op);
/* dropout.c: a residual body's output B dropped a sample at a time with probability P in
 * training (drop_path); the tensor to add */
Tensor *build_drop_path(GraphCtx *c, const LayerArgs *a, Tensor *b, double p);
void build_loss(GraphCtx *c);           /* ops/loss.c: the loss node after the layers */
/* ops/qk_norm.c: attention's qk_norm "all_heads" on qkv (q dq wide, then k dk wide):
 * its node, from the layer being built; returns the normalized qkv */
Tensor *build_qk_norm_all(GraphCtx *c, const LayerArgs *a, Tensor *qkv, int64_t dq, int64_t dk);
/* ops/glu.c: glu's node over x [..., 2h + 1], its outputs times the sigmoid of the last
 * column (a moe layer's gated shared expert); returns y [..., h] */
Tensor *build_gated_glu(GraphCtx *c, const LayerArgs *a, Tensor *x);
/* graph.c: whether any of the ','-joined shell patterns matches name; and each of them
 * matching a parameter `want` accepts (NULL: any), else an error at `at` naming the
 * nearest name ("'x' matches no WHAT; did you mean ...") */
int matches_any(const char *patterns, const char *name);
/* ops/lora.c: the model's head, its last linear layer outside any container (a soft-cap's
 * scale and tanh may follow it): lora leaves it to lora.train, Muon to AdamW */
const Layer *spec_head(const Spec *s);
void check_patterns(const Graph *g, const char *at, const char *patterns,
                    int (*want)(const Param *), const char *what);
/* ops/lora.c: train.lora's adapter on a linear node of the layer being built (its
 * output, or the adapted sum, for the layer to go on with); after the graph, the
 * freezing of all but the adapters and lora.train's */
Tensor *lora_adapt(GraphCtx *c, const LayerArgs *a, Node *base);
void lora_freeze(Graph *g);
/* ops/moe.c: the moe layers' load-balancing loss (Graph.moe_aux), after the loss */
void build_moe_aux(GraphCtx *c);
/* ops/loss.c: a GAN's loss term (RT_GAN_*) on the discriminator's logits: its node and
 * d(term)/d(logits), which it returns */
Tensor *build_gan_loss(GraphCtx *c, Tensor *logits, int term);
/* gan.c: a GAN's forward graph: training's (every phase), or validation's (eval: the
 * generator alone, in eval mode, for --sample) */
void gan_build(GraphCtx *c, int eval);

/* ---- autodiff and lowering ---------------------------------------------------- */

/* How a forward node's inputs get their gradients (autodiff.c). */
enum {
    GRAD_NONE,        /* not differentiated (input conversion, the loss) */
    GRAD_NODE,        /* a backward node (NodeDef.bwd) writes d(in[0]) and the parameters'
                         gradients */
    GRAD_PARAMS,      /* a backward node writes the parameters' gradients only (the input
                         is integer ids) */
    GRAD_PASS_PARAMS, /* d(in[0]) is dy itself; a backward node writes the parameters' */
    GRAD_VIEW,        /* d(in[0]) is dy seen with in[0]'s shape (same storage) */
    GRAD_PASS,        /* every input's gradient is dy itself (a sum) */
};

typedef struct NodeDef {
    const char *name;      /* in --dump-after */
    int grad;              /* GRAD_*: forward nodes */
    int bwd;               /* GRAD_NODE, GRAD_PARAMS, GRAD_PASS_PARAMS: the backward node's kind */
    /* the node's instructions, appended to the program; NULL: none (a view) */
    void (*lower)(Program *p, Node *nd);
} NodeDef;

extern const NodeDef *const node_defs[N__COUNT];
void ops_check(void);   /* dies on a hole in either table */

/* lower.c's helpers: an instruction appended, what it reads and writes, one elementwise
 * op over n = e->B * out->numel elements (out = expr of its operands, EW_* tag;
 * INSTR_EW counts the operands, opd(t) or opd_at(t, index)), scratch tensors */
Instr *instr_add(Program *p, int kind, const char *origin, int backward);
void instr_reads(Instr *in, Tensor *t);
void instr_writes(Instr *in, Tensor *t);
Instr *instr_ew(Program *p, Node *nd, const char *what, Tensor *out, int tag, const Expr *expr,
                const Operand *args, int nargs);
#define INSTR_EW(p, nd, what, out, tag, expr, ...)                                          \
    instr_ew((p), (nd), (what), (out), (tag), (expr), (Operand[]){__VA_ARGS__},              \
             (int)(sizeof((Operand[]){__VA_ARGS__}) / sizeof(Operand)))
Tensor *lower_temp(Graph *g, const char *name, int64_t per_row, const char *origin,
                   const char *what);
Tensor *dx_or_unused(Graph *g, const Node *nd, const Tensor *x, Tensor *dx);
Tensor *gemm_temp(Graph *g, const char *name, int64_t rows, int64_t cols, const char *origin,
                  const char *what);
/* ops/conv2d.c, shared with conv_transpose2d.c: the parameter names (weight, and bias
 * unless "bias": false), and one CALL_IM2COL or CALL_COL2IM with the node's eight
 * geometry integers (nd->conv) in their order */
int conv_params(const Layer *l, const char **out);
void conv_call(Program *p, Node *nd, int kind, Tensor *src, Tensor *dst, int backward,
               const char *what);

#endif
