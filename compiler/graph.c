/* graph.c: Spec -> Graph. Walks the layers in order, infers every shape (errors at
 * the layer's JSON path), names the parameters as SPEC.md section 2 says, and
 * counts FLOPs. */
#include <math.h>
#include <string.h>
#include "ir.h"

#define GROW(arr, n, cap)                                                   \
    do {                                                                    \
        if ((n) == (cap)) {                                                 \
            (cap) = (cap) ? 2 * (cap) : 16;                                 \
            (arr) = realloc((arr), (size_t)(cap) * sizeof *(arr));          \
            if (!(arr))                                                     \
                die("out of memory");                                       \
        }                                                                   \
    } while (0)

#include <stdlib.h>

static int64_t prod(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    return n;
}

static char *shape_str(int rank, const int64_t *shape)
{
    Buf b = {0};
    buf_puts(&b, "[");
    for (int i = 0; i < rank; i++)
        buf_printf(&b, "%s%lld", i ? ", " : "", (long long)shape[i]);
    buf_puts(&b, "]");
    return b.s;
}

/* ---- sizes ---------------------------------------------------------------------
 * Every size is checked as the layer that makes it is built, before anything
 * multiplies it, so that a spec of absurd but integer sizes is an error at its place
 * and no int64 product here or in a later pass overflows:
 *   - a GEMM dimension (a linear's features in and out and its rows a sample, a
 *     conv2d's channels out, C*k*k and OH*OW) is at most 2^31 - 1: the CPU's BLAS
 *     takes int;
 *   - one sample's activations (fp32, each layer's outputs and temporaries without
 *     reuse), and apart the parameters with their gradients and AdamW's two moments,
 *     take at most 2^47 bytes (128 TiB), what a 64-bit process can address (x86-64's
 *     and AArch64's user space);
 *   - the FLOPs a sample, forward and backward, are below 2^62 (the counters). */
#define MAX_GEMM_DIM 2147483647
#define MAX_BYTES ((int64_t)1 << 47)
#define MAX_FLOPS ((double)((int64_t)1 << 62))

static _Noreturn void too_big(const Graph *g, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void too_big(const Graph *g, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_at(g->spec->model_file, path, "%s", msg);
}

/* The elements of a shape, or -1 past 2^47 / 4 (products checked: no overflow). */
static int64_t checked_numel(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        if (__builtin_mul_overflow(n, shape[i], &n) || n > MAX_BYTES / 4)
            return -1;
    return n;
}

static void gemm_dim(const Graph *g, const char *path, const char *op, const char *what,
                     int64_t v)
{
    char n[32];
    snprintf(n, sizeof n, v == INT64_MAX ? "past 2^63" : "%lld", (long long)v);
    if (v > MAX_GEMM_DIM)
        too_big(g, path, "%s's %s is %s; a GEMM dimension can be at most %d (the CPU's "
                "BLAS takes int)", op, what, n, MAX_GEMM_DIM);
}

/* Names tensor t `name`. C identifiers must be unique: the id is suffixed when the
 * name repeats (emit_c.c's tidy_names drops the suffixes the output does not need). */
void graph_rename(Graph *g, Tensor *t, const char *name)
{
    t->name = NULL;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i] != t && !strcmp(g->tensors[i]->name, name)) {
            t->name = xasprintf("%s_%d", name, t->id);
            break;
        }
    if (!t->name)
        t->name = xstrdup(name);
    t->want = xstrdup(name);
}

Tensor *graph_tensor(Graph *g, int kind, const char *name, int rank, const int64_t *shape)
{
    Tensor *t = xcalloc(1, sizeof *t);
    t->id = g->n_tensors;
    t->kind = kind;
    t->dtype = RT_F32;
    t->rank = rank;
    for (int i = 0; i < rank; i++)
        t->shape[i] = shape[i];
    t->numel = prod(rank, shape);
    graph_rename(g, t, name);
    t->input_index = -1;
    t->block = kind == T_ACT || kind == T_TEMP ? g->cur_block : -1;
    GROW(g->tensors, g->n_tensors, g->cap_tensors);
    g->tensors[g->n_tensors++] = t;
    return t;
}

Node *graph_node(Graph *g, int kind, const char *origin)
{
    Node *n = xcalloc(1, sizeof *n);
    n->kind = kind;
    n->origin = origin;
    n->block = g->cur_block;
    GROW(g->nodes, g->n_nodes, g->cap_nodes);
    g->nodes[g->n_nodes++] = n;
    return n;
}

/* A C identifier from a parameter prefix: "h.0.attn" -> "h_0_attn". */
static char *ident(const char *op, const char *prefix)
{
    char *s = xasprintf("%s_%s", op, prefix);
    for (char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            *p = '_';
    return s;
}

/* The floats a parameter takes in the region: its own, the zero rows after them
 * (pad_rows), and up to a multiple of 16 (64-byte aligned). */
static int64_t param_span(const Param *p)
{
    return (param_extent(p) + 15) / 16 * 16;
}

static Param *add_param(Graph *g, const char *prefix, const char *what, int rank,
                        const int64_t *shape, int init, double a, const char *origin)
{
    /* weights, gradients and AdamW's moments: 16 bytes an element */
    int64_t numel = checked_numel(rank, shape);
    if (numel < 0 || g->param_floats + numel + 15 > MAX_BYTES / 16)
        too_big(g, origin, "parameter %s.%s %s brings the parameters, their gradients and "
                "optimizer state past 2^47 bytes (128 TiB); a 64-bit process cannot address "
                "that", prefix, what, shape_str(rank, shape));
    Param *p = xcalloc(1, sizeof *p);
    p->name = xasprintf("%s.%s", prefix, what);
    p->rank = rank;
    for (int i = 0; i < rank; i++)
        p->shape[i] = shape[i];
    p->numel = numel;
    p->offset = g->param_floats;
    /* keep every parameter 64-byte aligned inside the region */
    g->param_floats += param_span(p);
    p->init = init;
    p->init_a = a;
    p->origin = origin;
    char *tn = ident("P", p->name);
    p->t = graph_tensor(g, T_PARAM, tn, rank, shape);
    p->t->param = p;
    p->g = graph_tensor(g, T_PGRAD, ident("G", p->name), rank, shape);
    p->g->param = p;
    p->t->origin = p->g->origin = origin;
    GROW(g->params, g->n_params, g->cap_params);
    g->params[g->n_params++] = p;
    return p;
}

typedef struct Ctx {
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
    int as_float[RT_MAX_INPUTS];  /* input k is read as floats (x * scale + shift) */
    int as_ids[RT_MAX_INPUTS];    /* input k is read by an embedding */
    int64_t act_bytes;     /* one sample's activations so far, without reuse */
} Ctx;

/* Counts a buffer of the layer at `path` against MAX_BYTES. */
static void count_act(Ctx *c, const char *path, int rank, const int64_t *shape)
{
    int64_t n = checked_numel(rank, shape);
    if (n < 0 || c->act_bytes + 4 * n > MAX_BYTES)
        too_big(c->g, path, "a tensor of shape %s here makes one sample's activations "
                "more than 2^47 bytes (128 TiB); a 64-bit process cannot address that",
                shape_str(rank, shape));
    c->act_bytes += 4 * n;
}

/* An activation of the layer at `path`, counted. */
static Tensor *act_tensor(Ctx *c, const char *path, const char *name, int rank,
                          const int64_t *shape)
{
    count_act(c, path, rank, shape);
    return graph_tensor(c->g, T_ACT, name, rank, shape);
}

/* FLOPs a sample, forward and backward, counted against MAX_FLOPS. */
static void add_flops(Ctx *c, const char *path, double fwd, double bwd)
{
    Graph *g = c->g;
    if ((double)g->flops_fwd + (double)g->flops_bwd + fwd + bwd >= MAX_FLOPS)
        too_big(g, path, "the model needs more than 2^62 FLOPs a sample here; this is "
                "surely a mistake");
    g->flops_fwd += (int64_t)fwd;
    g->flops_bwd += (int64_t)bwd;
}

static _Noreturn void lerr(Ctx *c, const Layer *l, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void lerr(Ctx *c, const Layer *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_at(c->s->model_file, l->path, "%s", msg);
}

/* The f32 view of model input k, converting raw integers (x * scale + shift) once.
 * With mixed precision an fp32 input is converted too: the layers read act_t. */
static Tensor *input_f32(Ctx *c, int k)
{
    c->as_float[k] = 1;
    if (c->converted[k])
        return c->converted[k];
    const InputSpec *in = &c->s->inputs[k];
    Tensor *raw = c->g->inputs[k];
    if (in->dtype == RT_F32 && !in->has_scale && !in->has_shift && !c->g->act16)
        return c->converted[k] = raw;
    Tensor *t = act_tensor(c, in->path, xasprintf("%s_f32", in->name), raw->rank, raw->shape);
    t->origin = in->path;
    t->what = "input as f32";
    Node *n = graph_node(c->g, N_CONVERT, in->path);
    n->in[n->n_in++] = raw;
    n->out = t;
    n->scale = in->has_scale ? in->scale : 1.0;
    n->shift = in->has_shift ? in->shift : 0.0;
    return c->converted[k] = t;
}

/* Ids and class labels are read as i32 by the kernels: a u8 or u16 model input used so
 * is widened by the loader (rt_input.widen), and every reader of it, a float conversion
 * too, sees i32. */
static void read_as_i32(Tensor *raw)
{
    if (raw->dtype == RT_U8 || raw->dtype == RT_U16)
        raw->dtype = RT_I32;
}

static int find_input(const Spec *s, const char *name)
{
    for (int i = 0; i < s->n_inputs; i++)
        if (!strcmp(s->inputs[i].name, name))
            return i;
    return -1;
}

static Init layer_init(Ctx *c, const Layer *l)
{
    if (l->has_init)
        return l->init;
    return c->init;
}

/* The std of a normal init: "gpt2" is 0.02, and 0.02 / sqrt(2 * number of blocks)
 * for a residual branch's output projection (SPEC.md; nanoGPT's 1/sqrt(2 n_layer)). */
static double init_std(const Ctx *c, Init init, int resid_out)
{
    if (init.kind == INIT_NORMAL)
        return init.std;
    if (init.kind == INIT_GPT2)
        return resid_out && c->n_blocks > 0 ? 0.02 / sqrt(2.0 * (double)c->n_blocks) : 0.02;
    return 0.02;
}

static uint64_t fnv_on(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}
static uint64_t fnv(const char *s) { return fnv_on(1469598103934665603ull, s); }

static void build_layers(Ctx *c, Layer **layers, int n, const char *prefix, int residual_body);

static void build_layer(Ctx *c, const Layer *l, const char *prefix, const char *pfx)
{
    Graph *g = c->g;
    if (l->input) {
        int k = find_input(c->s, l->input);
        if (k < 0)
            lerr(c, l, "unknown input '%s'", l->input);
        c->cur = l->op == OP_EMBEDDING ? c->g->inputs[k] : input_f32(c, k);
    }
    Tensor *x = c->cur;
    Init init = layer_init(c, l);
    /* what the layer's nodes and tensors say they came from: its spec path, and inside a
     * repeat the iteration (" #3"; nested " #3.1"), since the iterations share the path */
    const char *at = c->iter ? xasprintf("%s #%s", l->path, c->iter) : l->path;
    switch (l->op) {
    case OP_LINEAR: {
        if (x->rank < 1)
            lerr(c, l, "linear needs an input with at least one axis, got a scalar");
        int64_t in = x->shape[x->rank - 1];
        Param *tied = NULL;
        if (l->tie) {
            for (int i = 0; i < c->n_emb; i++)
                if (!strcmp(c->emb_name[i], l->tie))
                    tied = c->emb_param[i];
            if (!tied)
                lerr(c, l, "tie: the embedding '%s' must come before this layer", l->tie);
            if (tied->shape[1] != in)
                lerr(c, l, "tie: the embedding '%s' has dim %lld but this layer's input has %lld features",
                     l->tie, (long long)tied->shape[1], (long long)in);
        }
        int64_t out = tied ? tied->shape[0] : l->out;
        gemm_dim(g, l->path, "linear", "input width (features in)", in);
        gemm_dim(g, l->path, "linear", "rows a sample (the input's elements / its width)",
                 x->numel / in);
        int64_t shp[RT_MAX_RANK];
        memcpy(shp, x->shape, sizeof shp);
        shp[x->rank - 1] = out;
        Tensor *y = act_tensor(c, l->path, ident("linear", pfx), x->rank, shp);
        y->origin = at;
        y->what = "linear output";
        Node *nd = graph_node(g, N_LINEAR, at);
        nd->layer = l;
        nd->in[nd->n_in++] = x;
        nd->out = y;
        int64_t ws[2] = {out, in};
        double bound = 1.0 / sqrt((double)in);
        double std = init_std(c, init, c->resid_out);
        int wi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_NORMAL;
        double wa = init.kind == INIT_DEFAULT ? bound : std;
        nd->w = tied ? tied : add_param(g, pfx, "weight", 2, ws, wi, wa, l->path);
        if (l->bias)
            nd->b = add_param(g, pfx, "bias", 1, &ws[0],
                              init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_CONST,
                              init.kind == INIT_DEFAULT ? bound : 0.0, l->path);
        int64_t rows = x->numel / in;
        add_flops(c, l->path, 2.0 * rows * in * out, 4.0 * rows * in * out);
        c->cur = y;
        return;
    }
    case OP_CONV2D: {
        if (x->rank != 3)
            lerr(c, l, "conv2d needs a [channels, height, width] input, got %s",
                 shape_str(x->rank, x->shape));
        int64_t C = x->shape[0], H = x->shape[1], W = x->shape[2];
        int64_t k = l->kernel, s = l->stride, p = l->padding;
        if (H + 2 * p < k || W + 2 * p < k)
            lerr(c, l, "kernel %lld is larger than the padded input %lldx%lld",
                 (long long)k, (long long)(H + 2 * p), (long long)(W + 2 * p));
        int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
        /* the GEMM [out, C*k*k] x [C*k*k, B*OH*OW] over im2col's columns (lower.c) */
        int64_t CKK, HW;
        if (__builtin_mul_overflow(C, k * k, &CKK))
            CKK = INT64_MAX;
        if (__builtin_mul_overflow(OH, OW, &HW))
            HW = INT64_MAX;
        gemm_dim(g, l->path, "conv2d", "C*k*k (input channels times kernel area)", CKK);
        gemm_dim(g, l->path, "conv2d", "OH*OW (output positions)", HW);
        count_act(c, l->path, 2, (int64_t[]){CKK, HW});   /* im2col's columns */
        int64_t shp[3] = {l->out, OH, OW};
        Tensor *y = act_tensor(c, l->path, ident("conv", pfx), 3, shp);
        y->origin = at;
        y->what = "conv2d output";
        Node *nd = graph_node(g, N_CONV2D, at);
        nd->layer = l;
        nd->in[nd->n_in++] = x;
        nd->out = y;
        int64_t cv[8] = {C, H, W, k, s, p, OH, OW};
        memcpy(nd->conv, cv, sizeof cv);
        int64_t ws[4] = {l->out, C, k, k};
        double bound = 1.0 / sqrt((double)CKK);
        int wi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_NORMAL;
        double wa = init.kind == INIT_DEFAULT ? bound : init.kind == INIT_GPT2 ? 0.02 : init.std;
        nd->w = add_param(g, pfx, "weight", 4, ws, wi, wa, l->path);
        if (l->bias)
            nd->b = add_param(g, pfx, "bias", 1, &ws[0],
                              init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_CONST,
                              init.kind == INIT_DEFAULT ? bound : 0.0, l->path);
        double macs = (double)l->out * CKK * HW;
        add_flops(c, l->path, 2 * macs, 4 * macs);
        c->cur = y;
        return;
    }
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D: {
        if (x->rank != 3)
            lerr(c, l, "%s needs a [channels, height, width] input, got %s", op_info[l->op].name,
                 shape_str(x->rank, x->shape));
        int64_t C = x->shape[0], H = x->shape[1], W = x->shape[2];
        int64_t k = l->kernel, s = l->stride ? l->stride : l->kernel;
        if (H < k || W < k)
            lerr(c, l, "kernel %lld is larger than the input %lldx%lld", (long long)k,
                 (long long)H, (long long)W);
        int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1;
        int64_t shp[3] = {C, OH, OW};
        int mx = l->op == OP_MAXPOOL2D;
        Tensor *y = act_tensor(c, l->path, ident(mx ? "maxpool" : "avgpool", pfx), 3, shp);
        y->origin = at;
        y->what = mx ? "maxpool2d output" : "avgpool2d output";
        Node *nd = graph_node(g, mx ? N_MAXPOOL : N_AVGPOOL, at);
        nd->layer = l;
        nd->in[nd->n_in++] = x;
        nd->out = y;
        int64_t cv[8] = {C, H, W, k, s, 0, OH, OW};
        memcpy(nd->conv, cv, sizeof cv);
        add_flops(c, l->path, (double)C * OH * OW * k * k, (double)C * OH * OW * k * k);
        c->cur = y;
        return;
    }
    case OP_FLATTEN: {
        int64_t n = x->numel;
        Tensor *y = graph_tensor(g, T_ACT, ident("flatten", pfx), 1, &n);   /* a view */
        y->alias = x->alias ? x->alias : x;
        y->origin = at;
        y->what = "flatten (a view)";
        Node *nd = graph_node(g, N_FLATTEN, at);
        nd->layer = l;
        nd->in[nd->n_in++] = x;
        nd->out = y;
        c->cur = y;
        return;
    }
    case OP_RELU:
    case OP_GELU:
    case OP_SILU:
    case OP_TANH:
    case OP_SIGMOID: {
        static const char *nm[] = {"relu", "gelu", "gelu", "silu", "tanh", "sigmoid"};
        int act = l->op == OP_RELU ? ACT_RELU
                  : l->op == OP_GELU ? (l->gelu_tanh ? ACT_GELU_TANH : ACT_GELU)
                  : l->op == OP_SILU ? ACT_SILU
                  : l->op == OP_TANH ? ACT_TANH
                                     : ACT_SIGMOID;
        Tensor *y = act_tensor(c, l->path, ident(nm[act], pfx), x->rank, x->shape);
        y->origin = at;
        y->what = nm[act];
        Node *nd = graph_node(g, N_ACT, at);
        nd->layer = l;
        nd->act = act;
        nd->in[nd->n_in++] = x;
        nd->out = y;
        add_flops(c, l->path, (double)x->numel, 2.0 * x->numel);
        c->cur = y;
        return;
    }
    case OP_DROPOUT: {
        Tensor *y = act_tensor(c, l->path, ident("dropout", pfx), x->rank, x->shape);
        y->origin = at;
        y->what = "dropout";
        Node *nd = graph_node(g, N_DROPOUT, at);
        nd->layer = l;
        nd->p = l->p;
        /* the mask's key: the layer's spec path, and in a repeat its iteration too
         * (the iterations share the path; one key would give them the same masks) */
        nd->key = c->iter ? fnv_on(fnv_on(fnv(l->path), "#"), c->iter) : fnv(l->path);
        nd->in[nd->n_in++] = x;
        nd->out = y;
        g->has_dropout = 1;
        c->cur = y;
        return;
    }
    case OP_LAYERNORM: {
        if (x->rank < 1)
            lerr(c, l, "layernorm needs an input with at least one axis, got a scalar");
        int64_t d = x->shape[x->rank - 1];
        Tensor *y = act_tensor(c, l->path, ident("layernorm", pfx), x->rank, x->shape);
        y->origin = at;
        y->what = "layernorm output";
        int64_t rows = x->numel / d;
        Tensor *mean = act_tensor(c, l->path, ident("ln_mean", pfx), 1, &rows);
        Tensor *rstd = act_tensor(c, l->path, ident("ln_rstd", pfx), 1, &rows);
        mean->keep32 = rstd->keep32 = 1;
        mean->origin = rstd->origin = at;
        mean->what = "layernorm mean, saved for backward";
        rstd->what = "layernorm 1/std, saved for backward";
        Node *nd = graph_node(g, N_LAYERNORM, at);
        nd->layer = l;
        nd->p = l->eps;
        nd->in[nd->n_in++] = x;
        nd->out = y;
        nd->tmp[0] = mean;
        nd->tmp[1] = rstd;
        nd->w = add_param(g, pfx, "weight", 1, &d, RT_INIT_CONST, 1.0, l->path);
        nd->b = add_param(g, pfx, "bias", 1, &d, RT_INIT_CONST, 0.0, l->path);
        add_flops(c, l->path, 8.0 * x->numel, 16.0 * x->numel);
        c->cur = y;
        return;
    }
    case OP_EMBEDDING: {
        /* reads the raw integer ids of a model input, never a float conversion */
        Tensor *ids = x;
        if (l->input || (x && x->kind != T_INPUT)) {
            int k = l->input ? find_input(c->s, l->input) : -1;
            if (k < 0)
                lerr(c, l, "embedding needs \"input\": the name of an integer model input");
            ids = g->inputs[k];
        }
        if (!ids || ids->kind != T_INPUT || ids->dtype == RT_F32)
            lerr(c, l, "embedding needs an integer model input of token ids (u8, u16 or i32)");
        if (ids->rank + 1 > RT_MAX_RANK)
            lerr(c, l, "embedding adds an axis to its ids %s: at most %d axes in all, so ids "
                 "of at most %d", shape_str(ids->rank, ids->shape), RT_MAX_RANK,
                 RT_MAX_RANK - 1);
        c->as_ids[ids->input_index] = 1;
        read_as_i32(ids);
        int64_t *v = &g->input_vocab[ids->input_index];
        if (*v == 0 || l->vocab < *v)
            *v = l->vocab;
        int64_t shp[RT_MAX_RANK];
        memcpy(shp, ids->shape, sizeof shp);
        shp[ids->rank] = l->dim;
        Tensor *y = act_tensor(c, l->path, ident("embedding", pfx), ids->rank + 1, shp);
        y->origin = at;
        y->what = "embedding rows";
        Node *nd = graph_node(g, N_EMBEDDING, at);
        nd->layer = l;
        nd->in[nd->n_in++] = ids;
        nd->out = y;
        int64_t ws[2] = {l->vocab, l->dim};
        nd->w = add_param(g, pfx, "weight", 2, ws, RT_INIT_NORMAL,
                          init.kind == INIT_DEFAULT ? 1.0 : init_std(c, init, 0), l->path);
        if (l->name && c->n_emb < 64) {
            c->emb_name[c->n_emb] = l->name;
            c->emb_param[c->n_emb++] = nd->w;
        }
        c->cur = y;
        return;
    }
    case OP_POS_EMBEDDING: {
        if (x->rank != 2)
            lerr(c, l, "pos_embedding needs a [T, dim] input, got %s", shape_str(x->rank, x->shape));
        if (x->shape[0] > l->max_len)
            lerr(c, l, "the sequence has %lld positions but max_len is %lld", (long long)x->shape[0],
                 (long long)l->max_len);
        Tensor *y = act_tensor(c, l->path, ident("pos_embedding", pfx), 2, x->shape);
        y->origin = at;
        y->what = "x + position rows";
        Node *nd = graph_node(g, N_POS_EMBEDDING, at);
        nd->layer = l;
        nd->in[nd->n_in++] = x;
        nd->out = y;
        int64_t ws[2] = {l->max_len, x->shape[1]};
        nd->w = add_param(g, pfx, "weight", 2, ws, RT_INIT_NORMAL,
                          init.kind == INIT_DEFAULT ? 1.0 : init_std(c, init, 0), l->path);
        add_flops(c, l->path, (double)x->numel, 0);
        c->cur = y;
        return;
    }
    case OP_ATTENTION: {
        if (x->rank != 2)
            lerr(c, l, "attention needs a [T, d] input, got %s", shape_str(x->rank, x->shape));
        int64_t T = x->shape[0], d = x->shape[1];
        if (d % l->heads)
            lerr(c, l, "heads %lld does not divide the model width %lld", (long long)l->heads,
                 (long long)d);
        gemm_dim(g, l->path, "attention", "qkv width (3 times the model width)", 3 * d);
        gemm_dim(g, l->path, "attention", "sequence length", T);
        /* qkv projection, the attention core, the output projection */
        int64_t s3[2] = {T, 3 * d}, s1[2] = {T, d};
        char *qp = xasprintf("%s.qkv", pfx), *pp = xasprintf("%s.proj", pfx);
        Tensor *qkv = act_tensor(c, l->path, ident("qkv", pfx), 2, s3);
        qkv->origin = at;
        qkv->what = "q, k, v side by side";
        Node *n1 = graph_node(g, N_LINEAR, at);
        n1->layer = l;
        n1->in[n1->n_in++] = x;
        n1->out = qkv;
        int64_t w1[2] = {3 * d, d}, w2[2] = {d, d};
        double bound = 1.0 / sqrt((double)d);
        int wi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_NORMAL;
        int bi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_CONST;
        double ba = init.kind == INIT_DEFAULT ? bound : 0.0;
        n1->w = add_param(g, qp, "weight", 2, w1, wi, init.kind == INIT_DEFAULT ? bound : init_std(c, init, 0), l->path);
        n1->b = add_param(g, qp, "bias", 1, &w1[0], bi, ba, l->path);
        Tensor *att = act_tensor(c, l->path, ident("lse", pfx), 2, (int64_t[]){l->heads, T});
        att->origin = at;
        att->keep32 = 1;
        att->what = "each query's log-sum-exp, saved for backward";
        Tensor *y = act_tensor(c, l->path, ident("attn_y", pfx), 2, s1);
        y->origin = at;
        y->what = "attention heads' outputs";
        Node *n2 = graph_node(g, N_ATTENTION, at);
        n2->layer = l;
        n2->in[n2->n_in++] = qkv;
        n2->out = y;
        n2->tmp[0] = att;
        n2->conv[0] = T;
        n2->conv[1] = d;
        n2->conv[2] = l->heads;
        n2->conv[3] = l->causal;
        Tensor *o = act_tensor(c, l->path, ident("attn_out", pfx), 2, s1);
        o->origin = at;
        o->what = "attention output projection";
        Node *n3 = graph_node(g, N_LINEAR, at);
        n3->layer = l;
        n3->in[n3->n_in++] = y;
        n3->out = o;
        n3->w = add_param(g, pp, "weight", 2, w2, wi,
                          init.kind == INIT_DEFAULT ? bound : init_std(c, init, c->resid_out), l->path);
        n3->b = add_param(g, pp, "bias", 1, &w2[0], bi, ba, l->path);
        double proj = 2.0 * T * d * 3 * d + 2.0 * T * d * d;
        double core = 4.0 * T * T * d / (l->causal ? 2 : 1);
        add_flops(c, l->path, proj + core, 2 * (proj + core));
        c->cur = o;
        return;
    }
    case OP_RESIDUAL: {
        Tensor *in = x;
        Init saved_init = c->init;
        if (l->has_init)
            c->init = l->init;     /* a container's init applies to its body */
        char *inner = l->name ? xasprintf("%s.", pfx) : xstrdup(prefix);
        build_layers(c, l->body, l->n_body, inner, 1);
        c->init = saved_init;
        Tensor *b = c->cur;
        if (b->numel != in->numel || b->rank != in->rank ||
            memcmp(b->shape, in->shape, sizeof(int64_t) * (size_t)in->rank))
            lerr(c, l, "the body's output %s does not match its input %s; a residual adds them",
                 shape_str(b->rank, b->shape), shape_str(in->rank, in->shape));
        Tensor *y = act_tensor(c, l->path, ident("residual", l->name ? pfx : b->name), in->rank,
                               in->shape);
        y->origin = at;
        y->what = "x + body(x)";
        Node *nd = graph_node(g, N_ADD, at);
        nd->layer = l;
        nd->in[nd->n_in++] = in;
        nd->in[nd->n_in++] = b;
        nd->out = y;
        add_flops(c, l->path, (double)in->numel, 0);
        c->cur = y;
        return;
    }
    case OP_REPEAT: {
        Init saved_init = c->init;
        if (l->has_init)
            c->init = l->init;
        const char *outer = c->iter;
        for (int64_t it = 0; it < l->count; it++) {
            if (!prefix[0])
                g->cur_block++;     /* each iteration of a top-level repeat is a block */
            char *inner = l->name ? xasprintf("%s.%lld.", pfx, (long long)it)
                                  : xasprintf("%s%lld.", prefix, (long long)it);
            c->iter = outer ? xasprintf("%s.%lld", outer, (long long)it) : xasprintf("%lld", (long long)it);
            build_layers(c, l->body, l->n_body, inner, 0);
        }
        c->iter = outer;
        c->init = saved_init;
        return;
    }
    }
    unreachable();
}

/* Whether a layer owns parameters (a container: whether its body does). */
static int has_params(const Layer *l)
{
    switch (op_info[l->op].cls) {
    case OPC_CONTAINER:
        for (int i = 0; i < l->n_body; i++)
            if (has_params(l->body[i]))
                return 1;
        return 0;
    case OPC_PARAM:
        return !(l->op == OP_LINEAR && l->tie && !l->bias);
    case OPC_NORM: case OPC_SEQ:
        return 1;
    }
    return 0;
}

/* prefix: "" at the top, else the enclosing names and repeat indices with a trailing
 * dot ("h.3."); a layer's own name is its "name", else its index in its list. */
static void build_layers(Ctx *c, Layer **layers, int n, const char *prefix, int residual_body)
{
    /* a residual body's output projection, which "gpt2" scales: its last layer with
     * parameters, past parameterless ones after it (nanoGPT's resid_dropout); it counts
     * when it is a linear or an attention (its proj) */
    int out_proj = -1;
    for (int i = n - 1; residual_body && i >= 0 && out_proj < 0; i--)
        if (has_params(layers[i]))
            out_proj = i;
    for (int i = 0; i < n; i++) {
        const Layer *l = layers[i];
        char *pfx = l->name ? xasprintf("%s%s", prefix, l->name) : xasprintf("%s%d", prefix, i);
        if (!prefix[0] && l->op != OP_REPEAT)
            c->g->cur_block++;      /* each top-level layer is a block */
        int saved = c->resid_out;
        c->resid_out = i == out_proj;
        build_layer(c, l, prefix, pfx);
        c->resid_out = saved;
        if (l->op != OP_RESIDUAL && l->op != OP_REPEAT)
            c->g->n_layers_total++;
    }
}

static int has_residual(Layer **layers, int n)
{
    for (int i = 0; i < n; i++)
        if (layers[i]->op == OP_RESIDUAL ||
            (layers[i]->op == OP_REPEAT && has_residual(layers[i]->body, layers[i]->n_body)))
            return 1;
    return 0;
}

/* gpt2 init's "number of blocks": the blocks that hold a residual branch, a block being
 * what recomputation calls one (README): an iteration of a top-level repeat, or another
 * top-level layer. GPT-2: its 12 iterations of attention and MLP branches. */
static int64_t gpt2_blocks(Layer **layers, int n)
{
    int64_t k = 0;
    for (int i = 0; i < n; i++)
        if (has_residual(&layers[i], 1))
            k += layers[i]->op == OP_REPEAT ? layers[i]->count : 1;
    return k;
}

static void build_loss(Ctx *c)
{
    const Spec *s = c->s;
    Graph *g = c->g;
    const char *path = "$.model.loss";
    int k = find_input(s, s->loss_target);
    if (k < 0)
        error_at(s->model_file, path, "target '%s' is not a model input", s->loss_target);
    Tensor *pred = c->cur;
    const InputSpec *tin = &s->inputs[k];
    Tensor *target;
    if (s->loss == LOSS_CROSS_ENTROPY) {
        if (pred->rank < 1)
            error_at(s->model_file, path, "cross_entropy needs logits with a class axis, got a scalar");
        int64_t C = pred->shape[pred->rank - 1];
        if (tin->rank != pred->rank - 1 || memcmp(tin->shape, pred->shape, sizeof(int64_t) * (size_t)tin->rank))
            error_at(s->model_file, path,
                     "target '%s' has shape %s but the logits %s need %s", tin->name,
                     shape_str(tin->rank, tin->shape), shape_str(pred->rank, pred->shape),
                     shape_str(pred->rank - 1, pred->shape));
        if (tin->dtype == RT_F32)
            error_at(s->model_file, path, "cross_entropy needs an integer target, '%s' is %s",
                     tin->name, rt_dtype_name(tin->dtype));
        if (tin->classes && tin->classes != C)
            error_at(s->model_file, path,
                     "the logits have %lld classes but $.model.inputs.%s.classes is %lld",
                     (long long)C, tin->name, (long long)tin->classes);
        target = g->inputs[k];
        read_as_i32(target);
        g->input_classes[k] = C;
        add_flops(c, path, 4.0 * pred->numel, 0);
    } else {
        if (tin->rank != pred->rank || memcmp(tin->shape, pred->shape, sizeof(int64_t) * (size_t)tin->rank))
            error_at(s->model_file, path, "target '%s' has shape %s but the prediction has shape %s",
                     tin->name, shape_str(tin->rank, tin->shape), shape_str(pred->rank, pred->shape));
        c->as_float[k] = 1;
        if (!g->act16)
            target = input_f32(c, k);
        else {
            /* the loss reads an fp32 target: its own conversion (the raw input when
             * it is fp32 already), not the layers' bf16 one */
            if (tin->dtype == RT_F32 && !tin->has_scale && !tin->has_shift) {
                target = g->inputs[k];
            } else {
                Tensor *t = act_tensor(c, tin->path, xasprintf("%s_target", tin->name),
                                       tin->rank, tin->shape);
                t->origin = tin->path;
                t->what = "the target as f32";
                t->keep32 = 1;
                Node *n = graph_node(g, N_CONVERT, tin->path);
                n->in[n->n_in++] = g->inputs[k];
                n->out = t;
                n->scale = tin->has_scale ? tin->scale : 1.0;
                n->shift = tin->has_shift ? tin->shift : 0.0;
                target = t;
            }
        }
        add_flops(c, path, 3.0 * pred->numel, 0);
    }
    Tensor *dpred = act_tensor(c, path, xasprintf("d_%s", pred->name), pred->rank,
                               pred->shape);
    dpred->origin = path;
    dpred->what = "d(loss)/d(prediction), written by the loss";
    /* A vocabulary's logits straight from a linear layer without bias (a language
     * model's head) are stored with rows a multiple of 64 elements apart (GPT-2: 50257
     * logits, rows 50304 apart), and the head's weight is followed by as many zero rows
     * in the parameter region, as llm.c pads its vocabulary: the head's three GEMMs
     * then run over the padded vocabulary (an odd one keeps cuBLASLt on its old
     * align-1 kernels: on an H200, 41% of GPT-2's step). The padded logits come out 0,
     * the loss writes 0 into their gradient's padding, so the zero rows get a zero
     * gradient and stay zero; the parameter keeps its true shape everywhere else
     * (files, counts, the embedding). TRAINC_PAD_LOGITS=0 (for tests and benchmarks)
     * keeps the rows contiguous and the GEMMs over the true vocabulary: the same
     * numbers up to float rounding (tests/vocab_pad.sh). */
    const char *pad = getenv("TRAINC_PAD_LOGITS");
    if (s->loss == LOSS_CROSS_ENTROPY && !pred->alias && g->n_nodes > 0 && !(pad && !strcmp(pad, "0"))) {
        int64_t C = pred->shape[pred->rank - 1];
        const Node *last = g->nodes[g->n_nodes - 1];
        if (C >= 1024 && C % 64 && last->kind == N_LINEAR && last->out == pred && !last->b &&
            last->w->rank == 2 && last->w->shape[0] == C) {
            pred->ld = dpred->ld = (C + 63) / 64 * 64;
            pred->what = xasprintf("%s (rows %lld apart: aligned for the GEMMs)",
                                   pred->what ? pred->what : "logits", (long long)pred->ld);
            last->w->pad_rows = pred->ld - C;
            g->param_floats = 0;   /* the parameters' offsets again, with the zero rows */
            for (int i = 0; i < g->n_params; i++) {
                g->params[i]->offset = g->param_floats;
                g->param_floats += param_span(g->params[i]);
            }
        }
    }
    Node *nd = graph_node(g, N_LOSS, path);
    nd->loss = s->loss;
    nd->in[nd->n_in++] = pred;
    nd->in[nd->n_in++] = target;
    nd->out2 = dpred;
    g->pred = pred;
    g->dpred = dpred;
}

/* scale and shift convert an input to float: on an input read only as integers (a
 * cross_entropy target's labels, an embedding's ids) or not at all they would do
 * nothing, so they are an error. So is classes on an input only read as float. */
static void check_conversions(Ctx *c)
{
    const Spec *s = c->s;
    for (int k = 0; k < s->n_inputs; k++) {
        const InputSpec *in = &s->inputs[k];
        if (c->as_float[k] && in->classes && !c->as_ids[k] && strcmp(in->name, s->loss_target))
            error_at(s->model_file, xasprintf("%s.classes", in->path), "classes is for labels "
                     "and token ids, read as integers; input '%s' is only converted to float "
                     "(read by a layer other than embedding, or an mse target)", in->name);
        if (c->as_float[k] || !(in->has_scale || in->has_shift))
            continue;
        const char *how = !strcmp(in->name, s->loss_target)
                              ? "the cross_entropy target: its labels are read as integers"
                          : c->as_ids[k] ? "read by an embedding as token ids"
                                         : "read by no layer";
        const char *key = in->has_scale ? "scale" : "shift";
        error_at(s->model_file, xasprintf("%s.%s", in->path, key), "%s applies to an input "
                 "converted to float (read by a layer other than embedding, or an mse "
                 "target); input '%s' is %s", key, in->name, how);
    }
}

Graph *graph_build(const Spec *s)
{
    Graph *g = xcalloc(1, sizeof *g);
    g->spec = s;
    g->act16 = s->train.precision;   /* RT_PREC_FP32 (0), RT_PREC_BF16 or RT_PREC_FP16 */
    g->cur_block = -1;              /* input conversion: not a block */
    Ctx c = {.g = g, .s = s};
    if (s->has_init)
        c.init = s->init;
    for (int k = 0; k < s->n_inputs; k++) {
        const InputSpec *in = &s->inputs[k];
        count_act(&c, xasprintf("%s.shape", in->path), in->rank, in->shape);
        Tensor *t = graph_tensor(g, T_INPUT, xasprintf("in_%s", in->name), in->rank, in->shape);
        t->dtype = in->dtype;
        t->input_index = k;
        t->origin = in->path;
        t->what = "model input";
        g->inputs[k] = t;
    }
    /* the first input feeds the first layer unless a layer names its input */
    c.cur = s->layers[0]->input ? NULL
            : s->layers[0]->op == OP_EMBEDDING ? g->inputs[0] : input_f32(&c, 0);
    c.n_blocks = gpt2_blocks(s->layers, s->n_layers);
    build_layers(&c, s->layers, s->n_layers, "", 0);
    g->cur_block = -1;              /* the loss: never recomputed */
    build_loss(&c);
    g->n_forward = g->n_nodes;
    check_conversions(&c);
    return g;
}
