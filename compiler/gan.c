/* gan.c: a GAN ($.model.gan, docs/spec.md "GANs") as one graph and one program.
 *
 * The step, per micro-batch, in the phases the emitters split the program by:
 *
 *   PH_D_FWD  z (drawn, or a data input), G(z) in training mode, D(x) and its loss term
 *             against "real", D(G(z)) and its term against "fake"
 *   PH_D_BWD  D's gradients of both terms (G(z) is detached: no gradient reaches G)
 *             -- on the step's last micro-batch the runtime updates D here --
 *   PH_G_FWD  D(G(z)) again, through D as it is now, and G's loss term
 *   PH_G_BWD  the gradient back through D (frozen: D's parameters get none) into G
 *
 * The three passes of D share its parameters and state (graph.c: share_params) and are
 * nodes of their own, so batchnorm's statistics and running statistics follow
 * PyTorch's three forward calls. G's activations live from PH_D_FWD to PH_G_BWD in the
 * one arena plan. Parameters: G's trained first ([0, gen_floats)), then D's
 * (Param.disc), then train.freeze's frozen ones (graph.c); each network has its own
 * optimizer in the runtime. Validation's graph is G alone, its parameters where
 * training's has them (gan_share_layout): what --sample runs.
 *
 * Blocks (recompute.c): each top-level layer of G, and of each of D's three passes, is
 * one; z's and the real samples' conversions and the loss terms are in none (never
 * replayed). A replay runs in the backward phase that reads its value, where the
 * parameters it reads are as they were when it first ran: D's before D's update in
 * PH_D_BWD, G's anywhere (G's update ends the step), D's third pass after it. */
#include <string.h>
#include "ops/op.h"

/* z as the generator reads it: a model input, or drawn by the runtime (a standard
 * normal per (seed, step, micro-batch, row): e->in[n_inputs], f32). */
static Tensor *latent(GraphCtx *c)
{
    const Spec *s = c->s;
    Graph *g = c->g;
    if (s->latent_input >= 0)
        return input_f32(c, s->latent_input);
    const char *path = "$.model.gan.latent";
    count_act(c, path, s->latent_rank, s->latent_shape);
    Tensor *z = graph_tensor(g, T_INPUT, "in_z", s->latent_rank, s->latent_shape);
    z->input_index = s->n_inputs;
    z->origin = path;
    z->what = "latent vectors, drawn by the runtime";
    g->latent_drawn = 1;
    if (!g->act16)
        return z;
    /* the layers read act_t: a conversion as an input's */
    Tensor *t = act_tensor(c, path, "z_f32", z->rank, z->shape);
    t->origin = path;
    t->what = "latent vectors as the layers read them";
    Node *n = graph_node(g, N_CONVERT, path);
    n->in[n->n_in++] = z;
    n->out = t;
    n->scale = 1.0;
    return t;
}

/* One pass of the discriminator over x: its logits [1]. The first pass makes D's
 * parameters; the later ones use them. */
static Tensor *disc_pass(GraphCtx *c, Tensor *x, int first)
{
    const Spec *s = c->s;
    c->cur = x;
    c->g->share_params = !first;
    c->g->disc_params = 1;
    c->top = "discriminator.";
    build_layers(c, s->disc, s->n_disc, "discriminator.", 0);
    c->top = NULL;
    c->g->share_params = 0;
    c->g->disc_params = 0;
    Tensor *y = c->cur;
    if (y->rank != 1 || y->shape[0] != 1)
        error_at(s->model_file, "$.model.gan.discriminator", "the discriminator ends with "
                 "shape %s; it must give one logit a sample, shape [1] (a linear with "
                 "\"out\": 1)", shape_str(y->rank, y->shape));
    return y;
}

/* The generator on z: G(z), checked against the real samples' shape. */
static Tensor *generator(GraphCtx *c)
{
    const Spec *s = c->s;
    c->cur = latent(c);
    c->top = "generator.";
    build_layers(c, s->layers, s->n_layers, "generator.", 0);
    c->top = NULL;
    Tensor *fake = c->cur;
    const InputSpec *x = &s->inputs[s->real_input];
    if (fake->rank != x->rank || memcmp(fake->shape, x->shape, sizeof(int64_t) * (size_t)x->rank))
        error_at(s->model_file, "$.model.gan.generator", "the generator makes samples of "
                 "shape %s; the real samples ('%s') have shape %s", shape_str(fake->rank,
                 fake->shape), x->name, shape_str(x->rank, x->shape));
    return fake;
}

/* A loss term (build_gan_loss), in no block: never replayed */
static Tensor *loss_term(GraphCtx *c, Tensor *logits, int kind)
{
    int block = c->g->cur_block;
    c->g->cur_block = -1;
    Tensor *d = build_gan_loss(c, logits, kind);
    c->g->cur_block = block;
    return d;
}

void gan_build(GraphCtx *c, int eval)
{
    const Spec *s = c->s;
    Graph *g = c->g;
    g->gan = 1;
    g->phase = PH_D_FWD;
    Tensor *fake = generator(c);
    if (eval) {
        g->pred = fake;          /* what --sample reads */
        g->n_forward = g->n_nodes;
        return;
    }
    int hinge = s->loss == LOSS_GAN_HINGE;
    int block = g->cur_block;    /* (the blocks go on from G's last) */
    g->cur_block = -1;
    Tensor *x = input_f32(c, s->real_input);
    g->cur_block = block;
    g->gan_pred[0] = disc_pass(c, x, 1);
    g->gan_dpred[0] = loss_term(c, g->gan_pred[0], hinge ? RT_GAN_HINGE_REAL : RT_GAN_BCE_REAL);
    g->gan_pred[1] = disc_pass(c, fake, 0);
    g->gan_dpred[1] = loss_term(c, g->gan_pred[1], hinge ? RT_GAN_HINGE_FAKE : RT_GAN_BCE_FAKE);
    g->phase = PH_G_FWD;
    g->gan_pred[2] = disc_pass(c, fake, 0);
    g->gan_dpred[2] = loss_term(c, g->gan_pred[2], hinge ? RT_GAN_HINGE_GEN : RT_GAN_BCE_REAL);
    g->n_forward = g->n_nodes;
}

/* D's gradients from its two terms (G detached: G's parameters are not differentiated,
 * so nothing flows into G(z)); then G's from its term, through D frozen. */
void gan_autodiff(Graph *g)
{
    autodiff_from(g, g->gan_pred, g->gan_dpred, 2, 1, PH_D_BWD);
    autodiff_from(g, &g->gan_pred[2], &g->gan_dpred[2], 1, 0, PH_G_BWD);
}

void gan_share_layout(Graph *ev, const Graph *train)
{
    take_param_places(ev, train, 1, "the generator's");
    /* in the order of their places, the trained first (as graph.c lays them out) */
    for (int k = 1; k < ev->n_params; k++)
        for (int j = k; j > 0 && ev->params[j - 1]->offset > ev->params[j]->offset; j--) {
            Param *t = ev->params[j];
            ev->params[j] = ev->params[j - 1];
            ev->params[j - 1] = t;
        }
    ev->n_trainable = 0;
    for (int k = 0; k < ev->n_params; k++)
        ev->n_trainable += !ev->params[k]->frozen;
    ev->gen_floats = train->gen_floats;
}
