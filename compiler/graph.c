/* graph.c: Spec -> Graph. Walks the layers in order, each built by its op file under
 * ops/ (op_defs: its nodes, its shape rule with errors at the layer's JSON path); here
 * are the helpers they build with (tensors, parameters named as docs/spec.md
 * says, the size limits, FLOP counts), the walk and the model inputs. */
#include <math.h>
#include <fnmatch.h>
#include <string.h>
#include "ops/op.h"

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

char *shape_str(int rank, const int64_t *shape)
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

void gemm_dim(const Graph *g, const char *path, const char *op, const char *what,
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
    n->phase = g->phase;
    GROW(g->nodes, g->n_nodes, g->cap_nodes);
    g->nodes[g->n_nodes++] = n;
    return n;
}

/* A C identifier from a parameter prefix: "h.0.attn" -> "h_0_attn". */
char *layer_ident(const char *op, const char *prefix)
      {
          char *s = xasprintf("%s_%s", op, prefix);
    for (char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            *p = '_';
    return s;
}

/* The floats a parameter takes in the region: its own, the zero rows after them
 * (pad_rows), and up to a multiple of 16 (64-byte aligned). */
int64_t param_span(const Param *p)
{
    return (param_extent(p) + 15) / 16 * 16;
}

/* A GAN discriminator's later passes (share_params): its parameter or state of that
 * name, made by the first pass. */
static Param *shared(Param **ps, int n, const char *prefix, const char *what)
{
    char *name = xasprintf("%s.%s", prefix, what);
    for (int i = 0; i < n; i++)
        if (!strcmp(ps[i]->name, name)) {
            free(name);
            return ps[i];
        }
    die("no parameter %s to share", name);
}

Param *add_param(Graph *g, const char *prefix, const char *what, int rank,
                 const int64_t *shape, int init, double a, const char *origin)
{
    if (g->share_params)
        return shared(g->params, g->n_params, prefix, what);
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
    p->model_index = g->n_params;
    /* keep every parameter 64-byte aligned inside the region */
    g->param_floats += param_span(p);
    p->init = init;
    p->init_a = a;
    p->origin = origin;
    p->disc = g->disc_params;
    char *tn = layer_ident("P", p->name);
    p->t = graph_tensor(g, T_PARAM, tn, rank, shape);
    p->t->param = p;
    p->g = graph_tensor(g, T_PGRAD, layer_ident("G", p->name), rank, shape);
    p->g->param = p;
    p->t->origin = p->g->origin = origin;
    GROW(g->params, g->n_params, g->cap_params);
    g->params[g->n_params++] = p;
    return p;
}


/* A layer's state tensor (batchnorm's running statistics): named as a parameter, in its
 * own region (e->state, state_floats), 64-byte aligned; i64 a count kept as an int64 in
 * two floats. No gradient tensor: the optimizer never sees it. */
Param *add_state(Graph *g, const char *prefix, const char *what, int rank,
                 const int64_t *shape, double a, int i64, const char *origin)
{
    if (g->share_params)
        return shared(g->state, g->n_state, prefix, what);
    int64_t numel = checked_numel(rank, shape);
    if (numel < 0 || g->state_floats + 2 * numel + 15 > MAX_BYTES / 4)
        too_big(g, origin, "state %s.%s %s is past 2^47 bytes (128 TiB)", prefix, what,
                shape_str(rank, shape));
    Param *p = xcalloc(1, sizeof *p);
    p->name = xasprintf("%s.%s", prefix, what);
    p->rank = rank;
    for (int i = 0; i < rank; i++)
        p->shape[i] = shape[i];
    p->numel = numel;
    p->i64 = i64;
    p->offset = g->state_floats;
    g->state_floats += ((i64 ? 2 : 1) * numel + 15) / 16 * 16;
    p->init = RT_INIT_CONST;
    p->init_a = a;
    p->origin = origin;
    p->t = graph_tensor(g, T_STATE, layer_ident("S", p->name), rank, shape);
    p->t->param = p;
    p->t->origin = origin;
    GROW(g->state, g->n_state, g->cap_state);
    g->state[g->n_state++] = p;
    return p;
}

/* Counts a buffer of the layer at `path` against MAX_BYTES. */
void count_act(GraphCtx *c, const char *path, int rank, const int64_t *shape)
{
    int64_t n = checked_numel(rank, shape);
    if (n < 0 || c->act_bytes + 4 * n > MAX_BYTES)
        too_big(c->g, path, "a tensor of shape %s here makes one sample's activations "
                "more than 2^47 bytes (128 TiB); a 64-bit process cannot address that",
                shape_str(rank, shape));
    c->act_bytes += 4 * n;
}

/* An activation of the layer at `path`, counted. */
Tensor *act_tensor(GraphCtx *c, const char *path, const char *name, int rank,
                   const int64_t *shape)
{
    count_act(c, path, rank, shape);
    return graph_tensor(c->g, T_ACT, name, rank, shape);
}

/* FLOPs a sample of node nd, counted against MAX_FLOPS: fwd its forward's; dx its
 * backward's for the input's gradient, dw for its weight's (a backward that is one kernel,
 * a norm's, gives all of it as dx); nd NULL where there is no backward. The graph's
 * backward total counts them all until autodiff counts what it makes (autodiff.c). */
void add_flops(GraphCtx *c, Node *nd, const char *path, double fwd, double dx, double dw)
{
    Graph *g = c->g;
    if ((double)g->flops_fwd + (double)g->flops_bwd + fwd + dx + dw >= MAX_FLOPS)
        too_big(g, path, "the model needs more than 2^62 FLOPs a sample here; this is "
                "surely a mistake");
    g->flops_fwd += (int64_t)fwd;
    g->flops_bwd += (int64_t)(dx + dw);
    if (nd) {
        nd->flops_dx += dx;
        nd->flops_dw += dw;
    }
}

void layer_error(GraphCtx *c, const Layer *l, const char *fmt, ...)
       {
           va_list ap;
    va_start(ap, fmt);
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_at(c->s->model_file, l->path, "%s", msg);
}

/* Ids and class labels are read as i32 by the kernels: a u8 or u16 model input used so
 * is widened by the loader (rt_input.widen), and every reader of it, a float conversion
 * too, sees i32. */
void read_as_i32(Tensor *raw)
{
    if (raw->dtype == RT_U8 || raw->dtype == RT_U16)
        raw->dtype = RT_I32;
}

int find_model_input(const Spec *s, const char *name)
{
    for (int i = 0; i < s->n_inputs; i++)
        if (!strcmp(s->inputs[i].name, name))
            return i;
    return -1;
}

static Init layer_init(GraphCtx *c, const Layer *l)
{
    if (l->has_init)
        return l->init;
    return c->init;
}

/* The std of a normal init: "gpt2" is 0.02, and 0.02 / sqrt(2 * number of blocks)
 * for a residual branch's output projection (docs/spec.md; nanoGPT's 1/sqrt(2 n_layer)). */
double init_std(const GraphCtx *c, Init init, int resid_out)
{
    if (init.kind == INIT_NORMAL)
        return init.std;
    if (init.kind == INIT_GPT2)
        return resid_out && c->n_blocks > 0 ? 0.02 / sqrt(2.0 * (double)c->n_blocks) : 0.02;
    return 0.02;
}

Node *layer_node(GraphCtx *c, const LayerArgs *a, int kind, Tensor *x, Tensor *y)
{
    Node *nd = graph_node(c->g, kind, a->at);
    nd->layer = a->l;
    nd->in[nd->n_in++] = x;
    nd->out = y;
    return nd;
}

/* One layer: its input (a named model input, else the previous layer's output), then
 * its op file's build. */
static void build_layer(GraphCtx *c, const Layer *l, const char *prefix, const char *pfx)
{
    if (l->input) {
        int k = find_model_input(c->s, l->input);
        if (k < 0)
            layer_error(c, l, "unknown input '%s'", l->input);
        c->cur = op_defs[l->op]->reads_ids ? c->g->inputs[k] : input_f32(c, k);
    }
    /* what the layer's nodes and tensors say they came from: its spec path, and inside a
     * repeat the iteration (" #3"; nested " #3.1"), since the iterations share the path */
    LayerArgs a = {
        .l = l,
        .at = c->iter ? xasprintf("%s #%s", l->path, c->iter) : l->path,
        .pfx = pfx,
        .prefix = prefix,
        .x = c->cur,
        .init = layer_init(c, l),
    };
    op_defs[l->op]->build(c, &a);
}

/* Whether a layer owns parameters (a container: whether its body does). */
static int has_params(const Layer *l)
{
    if (op_info[l->op].cls == OPC_CONTAINER) {
        for (int i = 0; i < l->n_body; i++)
            if (has_params(l->body[i]))
                return 1;
        for (int i = 0; i < l->n_shortcut; i++)
            if (has_params(l->shortcut[i]))
                return 1;
        return 0;
    }
    const char *names[8];
    return op_defs[l->op]->params && op_defs[l->op]->params(l, names) > 0;
}

/* prefix: "" at the top, else the enclosing names and repeat indices with a trailing
 * dot ("h.3."); a layer's own name is its "name", else its index in its list. */
void build_layers(GraphCtx *c, Layer **layers, int n, const char *prefix, int residual_body)
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
        if (top_level(c, prefix) && l->op != OP_REPEAT)
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

/* scale and shift convert an input to float: on an input read only as integers (a
 * cross_entropy target's labels, an embedding's ids) or not at all they would do
 * nothing, so they are an error. So is classes on an input only read as float. */
static void check_conversions(GraphCtx *c)
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

/* Whether any of the ','-joined shell patterns (fnmatch's, '*' matching dots too)
 * matches name */
int matches_any(const char *patterns, const char *name)
{
    int hit = 0;
    char *list = xstrdup(patterns);
    for (char *save = NULL, *pat = strtok_r(list, ",", &save); pat && !hit;
         pat = strtok_r(NULL, ",", &save))
        hit = !fnmatch(pat, name, 0);
    free(list);
    return hit;
}

/* Each of the ','-joined patterns at `at` of the training spec must match a parameter
 * `want` accepts (all of them: NULL), or it is an error naming the nearest name, or the
 * first ones; `what` names them ("parameter") */
void check_patterns(const Graph *g, const char *at, const char *patterns,
                    int (*want)(const Param *), const char *what)
{
    const Spec *s = g->spec;
    const char **names = xcalloc((size_t)g->n_params + 1, sizeof *names);
    int n = 0;
    for (int k = 0; k < g->n_params; k++)
        if (!want || want(g->params[k]))
            names[n++] = g->params[k]->name;
    char *list = xstrdup(patterns);
    for (char *save = NULL, *pat = strtok_r(list, ",", &save); pat;
         pat = strtok_r(NULL, ",", &save)) {
        int hits = 0;
        for (int k = 0; k < n && !hits; k++)
            hits = !fnmatch(pat, names[k], 0);
        if (hits)
            continue;
        const char *near = rt_closest(pat, names);
        if (near)
            error_at(s->train_file, at, "'%s' matches no %s; did you mean '%s'?", pat, what,
                     near);
        error_at(s->train_file, at, "'%s' matches no %s; the first are %s%s%s%s (%d in all)",
                 pat, what, n ? names[0] : "none", n > 1 ? ", " : "", n > 1 ? names[1] : "",
                 n > 2 ? ", ..." : "", n);
    }
    free(list);
    free(names);
}

/* train.freeze: the parameters its patterns match are frozen; a pattern matching none,
 * or all of them frozen, is an error */
static void apply_freeze(Graph *g)
{
    const char *at = "$.train.freeze", *freeze = g->spec->train.freeze;
    if (!freeze[0])
        return;
    check_patterns(g, at, freeze, NULL, "parameter");
    int n = 0;
    for (int k = 0; k < g->n_params; k++) {
        g->params[k]->frozen |= matches_any(freeze, g->params[k]->name);
        n += !g->params[k]->frozen;
    }
    if (g->n_params && !n)
        error_at(g->spec->train_file, at, "every parameter is frozen: nothing is left to train");
}

/* Param.copy16_only: the frozen weights that only linear nodes' GEMMs read (through the
 * GPU's 16-bit copy in mixed precision), never a runtime call (a chunked head's), an
 * embedding's lookup, a norm or any other node */
static void mark_copy16_only(Graph *g)
{
    for (int k = 0; k < g->n_params; k++)
        g->params[k]->copy16_only = g->params[k]->frozen;
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *nd = g->nodes[i];
        int gemm = nd->kind == N_LINEAR && nd != g->head && !(nd->layer && nd->layer->tie);
        if (nd->w && !gemm)
            nd->w->copy16_only = 0;
        if (nd->b)
            nd->b->copy16_only = 0;
        const Tensor *ts[] = {nd->in[0], nd->in[1], nd->in[2], nd->in[3], nd->out, nd->out2,
                              nd->tmp[0], nd->tmp[1], nd->tmp2};
        for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++)
            if (ts[t] && ts[t]->param)   /* (a parameter as a tensor operand) */
                ts[t]->param->copy16_only = 0;
    }
}

/* The group a parameter's place is in: trained (a GAN's generator's, then its
 * discriminator's), frozen, frozen and read by GEMMs alone */
static int group(const Graph *g, const Param *p)
{
    if (!p->frozen)
        return g->gan && p->disc;
    return !p->copy16_only ? 2 : 3;
}

/* The trained parameters first, in the model's order (a GAN's generator's, then its
 * discriminator's: each network's range of the region), then the frozen ones
 * (train.freeze) in theirs, each laid out again after the last: gradients and
 * optimizer state then cover [0, trainable_floats) and a frozen parameter has neither.
 * The frozen weights only GEMMs read go last: a GPU in mixed precision holds them in 16
 * bits alone ([gpu_fp32_floats, param_floats)). Param.model_index keeps the model's
 * order for the initial values' draws (runtime/init.c). */
static void lay_out_trainable_first(Graph *g)
{
    Param **order = xcalloc((size_t)g->n_params + 1, sizeof *order);
    int n = 0;
    for (int pass = 0; pass < 4; pass++)
        for (int k = 0; k < g->n_params; k++)
            if (group(g, g->params[k]) == pass)
                order[n++] = g->params[k];
    g->param_floats = 0;
    g->n_trainable = 0;
    g->gpu_fp32_floats = -1;
    g->gen_floats = 0;
    for (int k = 0; k < n; k++) {
        g->params[k] = order[k];
        if (group(g, order[k]) == 3 && g->gpu_fp32_floats < 0)
            g->gpu_fp32_floats = g->param_floats;
        g->params[k]->offset = g->param_floats;
        g->param_floats += param_span(g->params[k]);
        if (group(g, order[k]) == 0)
            g->gen_floats = g->param_floats;   /* (a GAN's generator's range) */
        if (!order[k]->frozen) {
            g->n_trainable = k + 1;
            g->trainable_floats = g->param_floats;
        }
    }
    if (g->gpu_fp32_floats < 0)
        g->gpu_fp32_floats = g->param_floats;
    free(order);
}

/* Graph d's parameters at the places graph `from`, built from the same spec, gave them
 * (offsets and padding, the region's sizes; with flags, whether each is frozen and held
 * in 16 bits alone), each matched by its place in the model; whose is d's, for the
 * message of a parameter `from` lacks */
void take_param_places(Graph *d, const Graph *from, int flags, const char *whose)
{
    for (int k = 0; k < d->n_params; k++) {
        Param *p = d->params[k];
        const Param *q = NULL;
        for (int j = 0; j < from->n_params && !q; j++)
            if (from->params[j]->model_index == p->model_index)
                q = from->params[j];
        if (!q || strcmp(p->name, q->name) || p->numel != q->numel)
            die("internal: %s parameter %s is not the other graph's", whose, p->name);
        p->offset = q->offset;
        p->pad_rows = q->pad_rows;
        if (flags) {
            p->frozen = q->frozen;
            p->copy16_only = q->copy16_only;
        }
    }
    d->param_floats = from->param_floats;
    d->trainable_floats = from->trainable_floats;
    d->gpu_fp32_floats = from->gpu_fp32_floats;
}

Graph *graph_build(const Spec *s, int eval)
{
    ops_check();
    Graph *g = xcalloc(1, sizeof *g);
    g->spec = s;
    g->decode_T = s->decode_T;
    /* RT_PREC_FP32 (0), RT_PREC_BF16 or RT_PREC_FP16; fp8-mixed is bf16-mixed's plan */
    g->fp8 = s->train.precision == RT_PREC_FP8;
    g->act16 = g->fp8 ? RT_PREC_BF16 : s->train.precision;
    g->cur_block = -1;              /* input conversion: not a block */
    GraphCtx c = {.g = g, .s = s};
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
    if (s->gan) {
        gan_build(&c, eval);
        if (eval)   /* (validation's reads z alone: the generator, for --sample; its
                       parameters' places are training's: gan_share_layout) */
            return g;
        check_conversions(&c);
        apply_freeze(g);
        mark_copy16_only(g);
        lay_out_trainable_first(g);
        return g;
    }
    if (s->positions && !s->decode_T) {   /* (the decode program's rows are one sequence each) */
        c.positions = g->inputs[find_model_input(s, s->positions)];
        read_as_i32(c.positions);
    }
    /* the first input feeds the first layer unless a layer names its input */
    c.cur = s->layers[0]->input ? NULL
            : op_defs[s->layers[0]->op]->reads_ids ? g->inputs[0] : input_f32(&c, 0);
    c.n_blocks = gpt2_blocks(s->layers, s->n_layers);
    build_layers(&c, s->layers, s->n_layers, "", 0);
    g->cur_block = -1;              /* the loss: never recomputed */
    build_loss(&c);
    g->n_forward = g->n_nodes;
    check_conversions(&c);
    if (c.positions && !c.positions_read)
        error_at(s->model_file, "$.model.positions", "no attention or pos_embedding layer reads "
                 "the positions input '%s': they cut attention at the sequences' seams",
                 s->positions);
    lora_freeze(g);
    apply_freeze(g);
    mark_copy16_only(g);
    lay_out_trainable_first(g);
    return g;
}
