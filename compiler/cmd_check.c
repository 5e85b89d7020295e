/* cmd_check.c: trainc check: the spec validated and compiled; its layers, parameters,
 * FLOPs, memory, and where its data files resolve. */
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cmd.h"

static void human(char *buf, size_t n, double bytes)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (bytes >= 1024 && k < 4) {
        bytes /= 1024;
        k++;
    }
    snprintf(buf, n, k ? "%.1f %s" : "%.0f %s", bytes, u[k]);
}

/* check's data lines: each file of data.train and data.val, where it resolves (relative
 * to the training spec's folder) and whether it is there. A missing file is a note, not
 * an error: a trainer may be built before its data exists or run where the data lives;
 * its run says what is wrong with a file (section 5's formats). */
static void check_data(const Spec *s, const char *what, const rt_data_entry *e, int n, int *first)
{
    for (int i = 0; i < n; i++) {
        char *p = e[i].path[0] == '/' ? xstrdup(e[i].path) : xasprintf("%s/%s", s->data_dir, e[i].path);
        char key[96], size[32];
        snprintf(key, sizeof key, "%s.%s", what, e[i].key);
        printf("  %-12s %-13s %s: ", *first ? "data" : "", key, e[i].path);
        *first = 0;
        /* a glob for token shards; x/y paths are plain names */
        glob_t g = {0};
        char *one[] = {p, NULL};
        int rc = -1;
        struct stat st;
        if (!strcmp(e[i].key, "tokens")) {
            rc = glob(p, 0, NULL, &g);
            size_t k = 0;   /* regular files only: the run refuses a folder */
            for (size_t j = 0; rc == 0 && j < g.gl_pathc; j++)
                if (stat(g.gl_pathv[j], &st) == 0 && S_ISREG(st.st_mode))
                    g.gl_pathv[k++] = g.gl_pathv[j];
            if (rc == 0)
                g.gl_pathc = k;
        }
        else if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            g.gl_pathc = 1, g.gl_pathv = one;
        if (g.gl_pathc == 0) {
            printf("not found (%s; the run needs it)\n", p);
        } else {
            double bytes = 0;
            for (size_t k = 0; k < g.gl_pathc; k++)
                if (stat(g.gl_pathv[k], &st) == 0)
                    bytes += (double)st.st_size;
            human(size, sizeof size, bytes);
            if (g.gl_pathc == 1)
                printf("%s\n", size);
            else
                printf("%zu files, %s\n", g.gl_pathc, size);
        }
        if (rc == 0)
            globfree(&g);
        free(p);
    }
}

/* fp8-mixed: how many GEMMs are marked for FP8 (Instr.fp8) and how many stay bf16 */
static void check_fp8(const Program *p)
{
    int n8 = 0, n = 0;
    for (int i = 0; i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_GEMM) {
            n++;
            n8 += p->ins[i]->fp8;
        }
    printf("  fp8-mixed    %d of %d GEMMs in FP8 on a GPU of compute capability 8.9 or later\n"
           "               (the linear layers' but the classifier's; the rest bf16); the CPU: fp32\n",
           n8, n);
}

/* The moe layers' expert weights a token leaves unused: (E - top_k) / E of each */
static int64_t moe_idle_params(const Graph *g)
{
    int64_t idle = 0;
    for (int i = 0; i < g->n_forward; i++) {
        const Node *nd = g->nodes[i];
        const Param *p = nd->kind == N_MOE_DISPATCH ? nd->b : nd->kind == N_MOE_COMBINE ? nd->w : NULL;
        if (p)
            idle += p->numel / nd->moe->experts * (nd->moe->experts - nd->moe->top_k);
    }
    return idle;
}

/* optimizer.type muon: the matrices it updates (rt_param.muon), AdamW the rest */
static void check_muon(const Spec *s, const Graph *g)
{
    if (s->train.opt != RT_OPT_MUON)
        return;
    int64_t n = 0, floats = 0, rest = 0;
    for (int i = 0; i < g->n_params; i++) {
        const Param *p = g->params[i];
        if (p->frozen)
            continue;
        if (p->muon[0]) {
            n++;
            floats += p->numel;
        } else {
            rest += p->numel;
        }
    }
    printf("  optimizer    muon on %lld hidden matrices (%lld parameters), adamw on %lld\n",
           (long long)n, (long long)floats, (long long)rest);
}

int cmd_check(int argc, char **argv)
{
    int n = spec_args(argc, argv, 1, "check");
    for (int i = 1 + n; i < argc; i++) {
        if (!strcmp(argv[i], "--set"))
            opt_value(argc, argv, &i, "--set");
        else
            unknown_arg("check", argv[i]);
    }
    Spec *s = load_with_sets(argc, argv, 1, n, 1);
    Compiled *c = compile_spec(s);
    Graph *g = c->graph;
    int64_t np = 0;
    for (int i = 0; i < g->n_params; i++)
        np += g->params[i]->numel;
    int64_t B = s->train.batch_size;
    char a[32], b[32], pb[32];
    human(a, sizeof a, (double)(B * c->prog->arena_row_bytes));
    human(b, sizeof b, (double)(B * c->prog->noreuse_row_bytes));
    human(pb, sizeof pb, (double)(np * 4));
    printf("%s: ok\n", s->model_file);
    printf("  model        %s\n", s->name);
    printf("  layers       %d\n", g->n_layers_total);
    printf("  parameters   %lld (%s fp32)\n", (long long)np, pb);
    int64_t frozen = 0;
    for (int i = 0; i < g->n_params; i++)
        frozen += g->params[i]->frozen ? g->params[i]->numel : 0;
    int64_t adapters = 0;
    for (int i = 0; i < g->n_params; i++)
        adapters += g->params[i]->lora == 1 ? g->params[i]->numel : 0;
    if (adapters)
        printf("  trainable    %lld (LoRA adapters of rank %lld: %lld; %lld held fixed)\n",
               (long long)(np - frozen), (long long)s->train.lora_rank, (long long)adapters,
               (long long)frozen);
    else if (frozen)
        printf("  trainable    %lld (train.freeze holds %lld fixed)\n", (long long)(np - frozen),
               (long long)frozen);
    int64_t idle = moe_idle_params(g);
    if (idle)
        printf("  active       %lld a token (each moe layer's top_k of its experts)\n",
               (long long)(np - idle));
    if (g->n_state) {   /* batchnorm's running statistics: saved, never trained */
        char sb[32];
        human(sb, sizeof sb, (double)(g->state_floats * 4));
        printf("  state        %d tensors, %s (running statistics, not trained)\n", g->n_state, sb);
    }
    printf("  FLOPs/sample %lld forward, %lld forward+backward\n", (long long)g->flops_fwd,
           (long long)(g->flops_fwd + g->flops_bwd));
    if (s->train.n_train > 0 && !strcmp(s->train.train[0].key, "tokens") && s->inputs[0].rank == 1) {
        int64_t T = s->inputs[0].shape[0];
        printf("  FLOPs/token  %lld forward, %lld forward+backward (T = %lld)\n",
               (long long)(g->flops_fwd / T), (long long)((g->flops_fwd + g->flops_bwd) / T),
               (long long)T);
    }
    if (s->positions)   /* packed rows: the kernels skip what lies before each sequence */
        printf("  %-12s attention counted as one sequence a row: packed rows (%s) compute less\n",
               "", s->positions);
    printf("  activations  %lld bytes per sample (arena, with reuse)\n",
           (long long)c->prog->arena_row_bytes);
    printf("  arena        %lld bytes at batch %lld (%s; %s without reuse)\n",
           (long long)(B * c->prog->arena_row_bytes), (long long)B, a, b);
    printf("  validation   %lld bytes at batch %lld (forward only, its own plan)\n",
           (long long)(B * c->eval->arena_row_bytes), (long long)B);
    if (g->head) {   /* ops/loss.c: the head and its loss a chunk of rows at a time */
        const Tensor *pred = g->pred;
        printf("  logits       %lld of each sample's %lld rows at a time (the head and loss one call; "
               "TRAINC_HEAD_CHUNKS)\n",
               (long long)g->head_chunk, (long long)(pred->numel / pred->shape[pred->rank - 1]));
    }
    if (c->decode) {   /* decode.c: --sample's key/value cache */
        char kb[32];
        human(kb, sizeof kb, (double)(c->decode->g->kv_floats * 4));
        printf("  sampling     a key/value cache of %s (%lld positions; the decode program)\n", kb,
               (long long)c->decode->g->decode_T);
    }
    printf("  kernels      %d fused loops, %d instructions\n", c->prog->n_kernels, c->prog->n_ins);
    check_muon(s, g);
    if (g->fp8)
        check_fp8(c->prog);
    int first = 1;
    check_data(s, "train", s->train.train, s->train.n_train, &first);
    check_data(s, "val", s->train.val, s->train.n_val, &first);
    if (s->train.documents >= 0)   /* (loader.documents: the model's positions from it) */
        printf("  %-12s %-13s a document begins at each token %lld (%s: its place in it)\n", "",
               "documents", (long long)s->train.documents, s->positions);
    return 0;
}
