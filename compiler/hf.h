/* hf.h: what `trainc import hf` (cmd_import.c) and `trainc export hf` (cmd_export.c)
 * share (hf_io.c): the tensors of a Hugging Face folder's safetensors files (one file
 * or a sharded index), a weights file written from named fp32 tensors, a config's keys
 * read and checked off, and JSON printed as the example specs are laid out. */
#ifndef HF_H
#define HF_H

#include "trainc.h"

/* One tensor of a safetensors file: where its bytes are and what they hold. */
typedef struct HfTensor {
    char *name;
    int file;                  /* index into HfWeights.paths */
    char dtype[8];             /* "F32", "F16", "BF16", "F64" */
    int rank;
    int64_t shape[4];
    int64_t numel;
    uint64_t at, bytes;        /* absolute offset in its file, length */
    int used;                  /* taken by a mapping (what is left over is an error) */
} HfTensor;

typedef struct HfWeights {
    char **paths;
    int *fds;                  /* per path: the file, open until the command exits */
    int n_paths;
    HfTensor *t;
    int n;
} HfWeights;

/* The tensors of one safetensors file, or of DIR/model.safetensors or the files that
 * DIR/model.safetensors.index.json maps (exits 1 naming what is missing or broken). */
void hf_weights_file(HfWeights *w, const char *path);
void hf_weights_dir(HfWeights *w, const char *dir);
HfTensor *hf_find(HfWeights *w, const char *name);
/* A file's bytes, NUL-terminated (len: their count, or NULL); exits 1 when unreadable. */
char *hf_slurp(const char *path, size_t *len);
/* The tensor's elements as fp32 (malloc'd; exits 1 on a short file or another dtype). */
float *hf_read(const HfWeights *w, const HfTensor *t);
/* train.lora's adapters in a weights file: whether NAME is one ("X.lora_A.weight",
 * "X.lora_B.weight": the part, else NULL); weight t's adapter PART ("lora_A", "lora_B")
 * checked against RANK, or NULL where the file has none (a bias, a norm, the weights of
 * a model before lora trained it); and t's elements x ([out, in]) with its adapter merged,
 * x + B A * SCALE (PEFT's merge_and_unload, each element's sum in double; nothing where
 * RANK is 0 or t has no adapter) */
const char *hf_lora_part(const char *name);
HfTensor *hf_lora_adapter(HfWeights *w, const HfTensor *t, const char *part, int64_t rank);
void hf_lora_merge(HfWeights *w, const HfTensor *t, float *x, int64_t rank, double scale);
void hf_transpose(float *dst, const float *src, int64_t d0, int64_t d1);

/* A weights file being planned: each tensor's name and shape first, its data after. */
typedef struct HfOut {
    rt_param *p;
    int n, cap;
} HfOut;
void hf_out_add(HfOut *o, const char *name, int rank, const int64_t *shape);
/* Writes the header at PATH.tmp; put the tensors' data in order, then close. */
rt_st_out *hf_out_open(const HfOut *o, const char *path);

/* ---- the families' tensor tables (hf_arch.c) ---- */

/* The layers of a family's model that own parameters; a block's are under its index
 * (HF_POST1, HF_POST2: the norms after the attention and the MLP, Gemma 2's and 3's). */
enum { HF_EMBED, HF_POS, HF_NORM1, HF_ATTN, HF_NORM2, HF_UP, HF_DOWN, HF_FINAL, HF_HEAD,
       HF_POST1, HF_POST2, HF_N_SLOTS };
/* The sizes shapes are made of; HF_QD = heads * hd, HF_KD = kv_heads * hd, HF_QKV =
 * (heads + 2 kv_heads) hd, HF_2FF = 2 FF (a fused gate and up projection). */
enum { HF_NONE, HF_D, HF_QD, HF_KD, HF_QKV, HF_FF, HF_2FF, HF_V, HF_HD, HF_POSN, HF_3D,
       HF_E /* the experts */, HF_SFF /* the shared expert's width */, HF_ONE };
/* When a parameter exists: HF_IF_BIAS q, k and v's biases, HF_IF_O_BIAS o's,
 * HF_IF_MLP_BIAS the MLP's (StarCoder2's, Nemotron's). */
enum { HF_QK_NORM_ALL_HEADS = 2 };   /* HfDims.qk_norm: OLMo 2's, over all heads */
enum { HF_ALWAYS, HF_IF_BIAS, HF_IF_O_BIAS, HF_IF_MLP_BIAS, HF_IF_QK_NORM, HF_IF_UNTIED };
/* HfDims.bias: none, on q, k, v and o (Llama's attention_bias), on q, k and v (Qwen2),
 * on o alone (GPT-Neo) */
enum { HF_BIAS_NONE, HF_BIAS_ALL, HF_BIAS_QKV, HF_BIAS_PROJ };

/* One of trainc's parameters: slot's layer, suffix `ours`; made of the transformers
 * tensors `theirs` ([rows[k], cols], cols HF_NONE for a vector) as `form` says: their
 * rows one after the other (HF_ROWS); the one tensor transposed (HF_TRANSPOSED, GPT-2's
 * Conv1D); or, HF_PER_EXPERT, `theirs` formats of an expert's index and the parameter
 * [E, rows, cols], expert 0's tensors' rows, then expert 1's, ... (a mixture of
 * experts' weights); or, HF_STACKED, the one tensor [E, rows, cols] as it is (Granite-MoE's
 * experts, already stacked). */
enum { HF_ROWS, HF_TRANSPOSED, HF_PER_EXPERT, HF_STACKED };
typedef struct HfMap {
    int block;                 /* 1: in each block, named under the block's prefix */
    int slot;
    const char *ours;
    int cond, form;
    const char *theirs[3];
    int rows[3], cols;
} HfMap;

typedef struct HfFamily {
    const char *prefix;        /* the model's tensors' prefix: "transformer.", "model." */
    const char *block;         /* a block's prefix, a printf format of its index */
    const HfMap *map;          /* ended by an entry without `ours` */
    float norm_offset;         /* Gemma's 1: its norms scale by 1 + weight, trainc's by weight */
    int qkv_by_head;           /* GPT-NeoX, Falcon: its fused qkv holds each key/value head's
                                  rows after its query heads' (trainc's: every q row, then
                                  k, then v) */
    int pos_pad;               /* OPT's 2: the rows its learned positions hold before
                                  position 0's (trainc's drop them; export writes zeros) */
} HfFamily;
extern const HfFamily hf_mixtral, hf_olmoe, hf_qwen3_moe, hf_qwen2_moe, hf_granitemoe;
extern const HfFamily hf_gpt2, hf_bigcode, hf_llama, hf_phi3, hf_starcoder2, hf_stablelm,
    hf_nemotron, hf_neox, hf_phi, hf_falcon, hf_falcon_seq, hf_falcon_new, hf_olmo, hf_olmo2, hf_glm,
    hf_cohere, hf_gptj, hf_gemma, hf_gemma3, hf_opt, hf_neo;
/* What trainc's weight of M's parameter adds to the family's tensor: the norm offset
 * for a norm's weight (q_norm's and k_norm's too), else 0. */
float hf_offset(const HfFamily *f, const HfMap *m);

/* A block's form: the attention's residual, then the MLP's; the two in parallel, a norm
 * each (GPT-NeoX's, Falcon 40B's: a residual of the MLP branch whose shortcut is the
 * attention's residual); in parallel off one norm (Phi's, Falcon 7B's: a residual of the
 * norm and of an MLP residual whose shortcut is the attention) */
enum { BLOCK_SEQUENTIAL, BLOCK_PARALLEL, BLOCK_SHARED_NORM };
/* A layernorm's parameters: weight and bias, the weight alone (Cohere's), none (OLMo's) */
enum { LN_FULL, LN_WEIGHT, LN_BARE };

/* What a model's shapes, optional tensors and row order depend on. */
typedef struct HfDims {
    int64_t V, D, L, H, KV, FF, max_pos;
    int64_t HD;                /* a head's width when not D / H (config's head_dim), else 0 */
    int bias, qk_norm, tie;    /* bias: HF_BIAS_*; qk_norm: 1 (per head), HF_QK_NORM_ALL_HEADS */
    int mlp_bias;              /* the MLP's linears have biases (HF_IF_MLP_BIAS) */
    int64_t rope_dims;         /* a partial rope's rotated dimensions per head, else 0 */
    int rope_pairs_adjacent;   /* Cohere, GPT-J: transformers' rope turns pairs (2i, 2i + 1) */
    int64_t E;                 /* a mixture of experts' experts, else 0 */
    int64_t SFF;               /* and its shared expert's width (Qwen2-MoE's), else 0 */
    int64_t score;             /* a classifier's classes: a sequence classifier's head
                                  transformers' score.weight [score, D] (no bias, never
                                  tied), a token classifier's (score_bias) its classifier or
                                  score (score_name) with a bias [score]; else 0 */
    int score_bias;
    const char *score_name;    /* the head's transformers name ("score" where NULL) */
} HfDims;
int64_t hf_head_dim(const HfDims *d);
/* The sequence classifier of model_type TYPE whose language model is LM_ARCH
 * (LlamaForCausalLM: LlamaForSequenceClassification), or NULL where transformers has none */
const char *hf_seq_arch(const char *type, const char *lm_arch);
/* Its token classifier (LlamaForTokenClassification), or NULL where transformers has none;
 * and that classifier's head: "classifier" (GPT-2's, GPT-NeoX's, ...) or "score" */
const char *hf_token_arch(const char *type, const char *lm_arch);
const char *hf_token_head(const char *type);

/* Rows that trainc orders apart from transformers: GPT-NeoX's fused qkv (qkv_by_head),
 * and q and k heads under a partial rope, which transformers rotates as pairs (i, i +
 * rd/2) of a head's first rd dimensions, keeping the rest, or under Cohere's, which it
 * rotates as pairs (2i, 2i + 1), where trainc rotates pairs (j, j + hd/2) for j < rd/2
 * (SPEC). hf_reordered: whether M's parameter has such rows;
 * hf_reorder turns X (the whole parameter, [rows, cols]) from transformers' order into
 * trainc's (to_hf 0) or back (to_hf 1). */
int hf_reordered(const HfFamily *f, const HfDims *d, const HfMap *m);
void hf_reorder(const HfFamily *f, const HfDims *d, const HfMap *m, float *x, int64_t cols,
                int to_hf);

typedef struct HfPart {
    char *name;                /* in full: prefix, block prefix, name */
    int rank;
    int64_t shape[3];          /* rank 3: HF_STACKED's [E, rows, cols] */
} HfPart;
/* Called for each parameter the dims call for, in trainc's order (block -1: outside
 * the blocks); parts are HF's tensors, named under `prefix` (the family's, or "" for
 * checkpoints without it): n of them, E times the map's `theirs` with experts. */
typedef void (*hf_visit)(void *ctx, const HfMap *m, int64_t block, int n, const HfPart *parts);
void hf_walk(const HfFamily *f, const char *prefix, const HfDims *d, hf_visit fn, void *ctx);

/* config.json's keys: each read marks it; hf_cfg_rest names the first key left that
 * is not in `ignored` (NULL-terminated), for the caller's error. */
typedef struct HfCfg {
    const char *file;
    const char *at;            /* the keys' JSON path: "" or a sub-config's ("text_config.") */
    cJSON *root;
    const char **seen;
    int n_seen;
} HfCfg;
void hf_cfg_load(HfCfg *c, const char *path);
/* The object at KEY of C (marked read) as a config of its own (exits 1 if not one). */
void hf_cfg_sub(HfCfg *sub, HfCfg *c, const char *key);
/* KEY as V where the config leaves it out: a config class's default that code reading
 * the key would not know (transformers fills it in the same way) */
void hf_cfg_default(HfCfg *c, const char *key, double v);
const cJSON *hf_cfg_get(HfCfg *c, const char *key);            /* NULL when absent or null */
int64_t hf_cfg_int(HfCfg *c, const char *key, int64_t dflt);   /* dflt < 0: required */
double hf_cfg_num(HfCfg *c, const char *key, double dflt);
int hf_cfg_bool(HfCfg *c, const char *key, int dflt);
const char *hf_cfg_str(HfCfg *c, const char *key, const char *dflt);
const char *hf_cfg_rest(const HfCfg *c, const char *const *ignored);
_Noreturn void hf_cfg_error(const HfCfg *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* config keys that change nothing trainc computes (PretrainedConfig's, NULL-terminated:
 * cmd_import.c) */
extern const char *const hf_pretrained_keys[];
/* PretrainedConfig's keys that would change the model when not at their defaults (a
 * config written whole holds them): is_encoder_decoder, add_cross_attention true or a
 * non-empty pruned_heads exit 1 */
void hf_cfg_pretrained(HfCfg *c);
/* A gelu's activation at config KEY (default DFLT) as the gelu layer's approximate:
 * "none" (gelu) or "tanh" (gelu_new, gelu_pytorch_tanh); exits 1 on another */
const char *hf_gelu_approximate(HfCfg *c, const char *key, const char *dflt);

/* ---- tensors joined one for one or stacked (hf_join.c: hf_vit.c, hf_bert.c) ---- */

/* One of trainc's tensors and the n (1 to 3) transformers tensors it is made of: their
 * elements one after the other (q, k and v's rows make qkv's; a [1, 1, D] class token
 * is trainc's [D]); skip: the rows each of theirs holds before trainc's (RoBERTa's
 * positions' 2: import leaves them out, export writes zeros). */
typedef struct HfJoin {
    char *ours;
    int rank;
    int64_t shape[4];
    int n;
    char *theirs[3];
    int their_rank;
    int64_t their_shape[4];    /* each of theirs */
    int64_t skip;
    int fresh;                 /* import: none of theirs, drawn anew (HF_FRESH_*: a new head) */
    double scale;              /* its std (normal; 0: zeros) or bound (uniform) */
    /* import: theirs (one, of their_shape) made into ours of another shape (NULL: copied) */
    void (*resample)(const float *theirs, const int64_t *their_shape, float *ours,
                     const int64_t *shape);
} HfJoin;
/* (HF_FRESH_TRUNC: normal redrawn beyond 2 std, transformers' trunc_normal_ with ModernBERT's
 * cutoff; HF_FRESH_ONES: every element 1, a new layernorm's weight) */
enum { HF_FRESH_NONE, HF_FRESH_NORMAL, HF_FRESH_UNIFORM, HF_FRESH_TRUNC, HF_FRESH_ONES };
#define HF_FRESH_SEED 1337     /* the fixed seed the new tensors are drawn with */
typedef void (*hf_join_fn)(void *ctx, const HfJoin *j);
/* Calls FN with the join (OURS is freed after) */
void hf_join(hf_join_fn fn, void *ctx, char *ours, int rank, const int64_t *shape, int n,
             const char *const *theirs, int their_rank, const int64_t *their_shape);
/* one of theirs with trainc's shape; a linear's weight [out, in] and bias [out]; a
 * layernorm's weight and bias [D] */
void hf_join_same(hf_join_fn fn, void *ctx, char *ours, const char *theirs, int rank,
                  const int64_t *shape);
/* import: ours drawn anew, none of theirs: FRESH (HF_FRESH_NORMAL, HF_FRESH_UNIFORM) at
 * SCALE, as transformers makes a layer the checkpoint lacks (a new classifier) */
void hf_join_fresh(hf_join_fn fn, void *ctx, char *ours, int rank, const int64_t *shape,
                   int fresh, double scale);
/* a new linear OUT x IN: its weight normal(0, STD) and bias zero (transformers' BERT and
 * ViT), or with STD < 0 both uniform within 1/sqrt(IN) (torch's nn.Linear) */
void hf_join_fresh_linear(hf_join_fn fn, void *ctx, const char *ours, int64_t out, int64_t in,
                          double std);
/* import: ours (RANK, SHAPE) made by RESAMPLE from theirs (THEIR_RANK, THEIR_SHAPE), as
 * DINOv2's position table interpolated to another image size */
void hf_join_resampled(hf_join_fn fn, void *ctx, char *ours, int rank, const int64_t *shape,
                       const char *theirs, int their_rank, const int64_t *their_shape,
                       void (*resample)(const float *, const int64_t *, float *, const int64_t *));
/* a [rows, cols] of ours that is theirs [skip + rows, cols] past its first skip rows */
void hf_join_rows(hf_join_fn fn, void *ctx, char *ours, const char *theirs, int64_t rows,
                  int64_t cols, int64_t skip);
void hf_join_linear(hf_join_fn fn, void *ctx, const char *ours, const char *theirs, int64_t out,
                    int64_t in);
void hf_join_layernorm(hf_join_fn fn, void *ctx, const char *ours, const char *theirs, int64_t D);
/* the same with the bias only where BIAS (ModernBERT's switches: mlp_bias, norm_bias) */
void hf_join_linear_bias(hf_join_fn fn, void *ctx, const char *ours, const char *theirs,
                         int64_t out, int64_t in, int bias);
void hf_join_layernorm_bias(hf_join_fn fn, void *ctx, const char *ours, const char *theirs,
                            int64_t D, int bias);
/* import: a join planned against DIR's tensors (exit 1 naming one missing or of another
 * shape), then trainc's written in the order planned */
typedef struct HfJoinImport {
    const char *dir;
    HfWeights w;
    HfOut out;
    const HfTensor **src;      /* per output tensor, its parts (3 each, NULL after the last) */
    int64_t *skip;             /* and the elements each part begins with that are not ours */
    int *fresh;                /* per output tensor, HF_FRESH_*: drawn anew (NONE: read) */
    double *scale;             /* and at what scale */
    void (**resample)(const float *, const int64_t *, float *, const int64_t *);   /* or NULL */
    int n_fresh;               /* the tensors drawn anew */
} HfJoinImport;
void hf_join_plan_import(void *ctx, const HfJoin *j);
void hf_join_write_import(const HfJoinImport *im, const char *path);
/* P's elements drawn as a new tensor (HF_FRESH_NORMAL: normal(0, SCALE); UNIFORM: within
 * SCALE; a SCALE of 0: zeros) from RNG, written to O */
void hf_fresh_put(rt_st_out *o, const rt_param *p, int kind, double scale, rt_rng *rng);
/* exit 1 naming a tensor of W no join took (DIR's checkpoint of ARCH) */
void hf_join_all_used(const HfWeights *w, const char *dir, const char *arch);
/* the tensors of W no join took whose names begin with PREFIX (OUTSIDE: do not), marked
 * taken: another head's, which the import leaves out; returns their count */
int hf_join_leave_out(HfWeights *w, const char *prefix, int outside);
/* export: a join planned against trainc's weights, then transformers' tensors written */
typedef struct HfJoinExport {
    HfWeights w;
    HfOut out;
    const HfTensor **src;      /* per output tensor: the trainc tensor it is part of (NULL:
                                  fill's value, hf_join_export_filled) */
    float *fill;               /* per output tensor up to the last filled one */
    int64_t *at;               /* its first element there */
    int64_t *skip;             /* the zeros written before it */
    int64_t lora_rank;         /* train.lora's rank (0: none): its adapters merged */
    double lora_scale;         /* and its factor (rt_lora_scale) */
} HfJoinExport;
/* E's weights file and the spec's train.lora (hf_lora_merge's rank and scale) */
void hf_join_export_open(HfJoinExport *e, const Spec *s, const char *weights);
void hf_join_plan_export(void *ctx, const HfJoin *j);
/* After the plan: every adapter in the file merged into a weight the plan reads (a pair
 * of lora_A and lora_B), or exit 1 naming it (one without train.lora, a half pair, one
 * of no weight exported): none left behind */
void hf_join_export_adapters(HfJoinExport *e);
void hf_join_write_export(const HfJoinExport *e, const char *path);
/* A text model's export folder OUT: E's tensors as model.safetensors, CONFIG (model_type
 * TYPE) as config.json, TOK (or NULL) copied as tokenizer.json; the line that says so
 * (WEIGHTS: what was read) */
void hf_join_text_export(const HfJoinExport *e, cJSON *config, const char *type,
                         const char *weights, const char *tok, const char *out);
/* export: transformers' tensor THEIRS (RANK, SHAPE) written as VALUE everywhere, one
 * trainc has no place for (DINOv2's mask_token, zeros; CLIP's post_layernorm, which its
 * classifier does not read: ones and zeros) */
void hf_join_export_filled(HfJoinExport *e, const char *theirs, int rank, const int64_t *shape,
                           float value);
/* export: the spec's layers matched to the architecture ARCH's, whose layers LAYERS
 * lists for the errors (each exits 1 naming the layer) */
typedef struct HfLayout {
    const char *arch, *layers;
} HfLayout;
/* L, which must be op OP (AT: where the layer is missing) */
const Layer *hf_want(const Spec *s, const HfLayout *h, const Layer *l, const char *at, int op);
_Noreturn void hf_refuse(const Spec *s, const HfLayout *h, const Layer *l, const char *what);
/* a layernorm with weight and bias, its eps the one *EPS holds (0: any; set) */
void hf_match_norm(const Spec *s, const HfLayout *h, const Layer *l, const char *at, double *eps);
/* a linear with its bias, OUT wide (0: any, which it returns) */
int64_t hf_match_linear(const Spec *s, const HfLayout *h, const Layer *l, const char *at,
                        int64_t out);
/* an attention over the whole sequence without the Llama family's options */
void hf_match_attention(const Spec *s, const HfLayout *h, const Layer *l, const char *at);
/* a residual of N layers, no shortcut: the prefix its name gives its body's ("" unnamed) */
char *hf_match_residual(const Spec *s, const HfLayout *h, const Layer *l, const char *at, int n);

/* ---- image classifiers (hf_image.c; hf_vit.c) ---- */

/* An image classifier's input and target: the images [C, S, S], their pixels as the
 * input converts them (x * scale + shift, by channel in ch_scale and ch_shift where
 * they differ, else NULL), the K classes and their names (NULL: transformers' LABEL_k) */
typedef struct HfImage {
    int64_t C, S, K;
    int u8;
    double scale, shift;
    double *ch_scale, *ch_shift;
    char **labels;
} HfImage;
/* An image processor's geometry (hf_image_proc.c): its class (kind HF_PROC_*), do_resize,
 * size (h x w, or the shortest edge), ConvNeXt's crop_pct, do_center_crop and crop_size,
 * Pillow's filter (IMAGE_*) */
struct ImageU8;
enum { HF_PROC_VIT, HF_PROC_DEIT, HF_PROC_CONVNEXT, HF_PROC_CLIP };
typedef struct HfImageProc {
    const char *type;
    int kind, resize, crop, resample;
    int64_t h, w, edge, crop_h, crop_w;
    double crop_pct;
} HfImageProc;
/* ROOT (a preprocessor_config.json's object) or PATH's geometry: NULL, or why not ("$.key:
 * ...") */
const char *hf_image_proc_parse(const cJSON *root, HfImageProc *p);
const char *hf_image_proc_read(const char *path, HfImageProc *p);
/* the images' size (*h x *w) it makes, 1; 0 where that depends on the image */
int hf_image_proc_side(const HfImageProc *p, int64_t *h, int64_t *w);
/* what it does to an image's pixels: NULL, or why it cannot (a side past 65536) */
const char *hf_image_proc_apply(const HfImageProc *p, struct ImageU8 *im);
/* refitted to make S x S images (import's --image-size: the crop S, the resize scaled as
 * the crop); 0 where it makes no square of a fixed size */
int hf_image_proc_fit(HfImageProc *p, int64_t S);
/* FILE's geometry, or where FILE is NULL that of the preprocessor_config.json beside MODEL
 * (a model.json) if there is one; the file read, or NULL. Exit 1 naming the file where
 * it cannot be read or makes other images than S x S */
const char *hf_image_proc_load(const char *file, const char *model, int64_t S, HfImageProc *p);
/* its keys, added to C (a preprocessor_config.json) */
void hf_image_proc_json(const HfImageProc *p, cJSON *c);
/* what it does, in words: "the shorter side to 256 (bicubic), cropped to 224x224" */
const char *hf_image_proc_says(const HfImageProc *p);
/* config KEY's list of positive integers (*N of them; *N 0: any, set) */
int64_t *hf_cfg_int_list(HfCfg *c, const char *key, int *n);
/* DIR/preprocessor_config.json's rescale, image_mean and image_std (C set) as the pixels'
 * scale and shift, or ViTImageProcessor's defaults (1/255, 0.5, 0.5) where the folder
 * has none: then 0 */
int hf_image_pixels(const char *dir, HfImage *im);
/* config.json's architectures: CLS, or BASE (the bare network, whose classifier is new:
 * then LABELS, import's --labels, must be given; returns 1); exit 1 naming another (a
 * FAMILY's import takes those two) */
int hf_image_arch(HfCfg *c, const char *labels, const char *cls, const char *base,
                  const char *family);
/* import: IM's tensors to OUT/init.safetensors, SPEC's text to OUT/model.json and TRAIN's
 * to OUT/train.json (OUT made where it is not) */
void hf_image_write_import(const HfJoinImport *im, const char *spec, const char *train,
                           const char *out);
/* import: DIR/preprocessor_config.json's geometry fitted to IM's S x S images, with IM's
 * pixels' scale and shift, to OUT/preprocessor_config.json (for data images and export
 * hf), said in a line; nothing where DIR has none, or one whose resize and crop trainc
 * does not repeat (said) */
void hf_image_keep_processor(const char *dir, const HfImage *im, const char *out);
/* export: the preprocessor_config.json of IM's pixels: the geometry of the one beside
 * MODEL_FILE (import's), else a ViTImageProcessor's resize to S x S */
cJSON *hf_image_export_processor(const HfImage *im, const char *model_file);
/* export: E's tensors to OUT/model.safetensors, CONFIG (model_type TYPE) to
 * OUT/config.json and hf_image_export_processor's preprocessor_config.json; the line that
 * says so (WEIGHTS: what was read) */
void hf_image_write_export(const HfJoinExport *e, const HfImage *im, cJSON *config,
                           const char *type, const char *weights, const char *model_file,
                           const char *out);
/* config.json's id2label (K and the names), problem_type single-label; label2id and
 * num_labels read */
void hf_image_labels(HfCfg *c, HfImage *im);
/* the classes' keys (id2label, label2id, num_labels, problem_type) read, and nothing to do:
 * a model without a classifier (a masked LM) */
void hf_labels_unread(HfCfg *c);
/* a classifier's config: hf_cfg_pretrained's checks, tie_word_embeddings read (a
 * classifier has no language model head to tie) */
void hf_cfg_classifier(HfCfg *c);
/* import's --labels ARG: a count of classes (2 or more) or their names, comma-separated,
 * into K and the names (NULL for a count); config.json's id2label read and let be */
void hf_labels_arg(HfCfg *c, const char *arg, HfImage *im);
/* the model spec's inputs x (u8 images, their scale and shift) and y (classes, labels) */
void hf_image_inputs(cJSON *model, const HfImage *im);
/* the model spec's loss: cross entropy on y */
void hf_image_loss(cJSON *model);
/* train.json of a text classifier over padded rows (`trainc data classify`'s
 * DIR/{train,val}_{x,[types,]pos,y}.npy under OUT/data; TYPES: with the token types';
 * EXTRA, or NULL: more inputs', their names apart by spaces, DIR/{train,val}_NAME.npy,
 * dpo's reference): AdamW at
 * LR with weight decay WD, linear decay to 0, clipping at 1.0, EPOCHS epochs of BATCH
 * rows, bf16-mixed */
char *hf_text_train(int types, const char *extra, int batch, int epochs, double lr, double wd);
/* the input y [] of IM's classes (and their names) in the inputs object IN */
void hf_image_inputs_y(cJSON *in, const HfImage *im);
/* train.json for fine-tuning (data in OUT/data/{train,val}_{x,y}.npy, 3 epochs, cosine,
 * bf16-mixed): the optimizer's JSON object, a clip at 1.0 or not */
char *hf_image_train(const char *optimizer, int clip);
/* export: the image input the first layer reads (C, S, its pixels; exit 1 for another
 * than square u8 or f32 images), and the target's names for K classes */
void hf_image_from_spec(const Spec *s, const Layer *first, const char *arch, HfImage *im);
void hf_image_labels_from_spec(const Spec *s, HfImage *im);
/* config.json's id2label and label2id */
void hf_image_config_labels(cJSON *c, const HfImage *im);
/* import: a pre-norm branch, residual [layernorm NORM (EPS)], added to BODY; its body, to
 * go on */
cJSON *hf_prenorm_branch(cJSON *body, const char *norm, double eps);
/* import: a vision transformer's spec up to its blocks, {"trainc": 1, "model": NAME, IM's
 * inputs, layers: conv2d PATCH (D wide, kernel = stride = P), tokens, a cls_token named
 * each of TOKENS (N, in order), pos_embedding POS (a position a token and a learned
 * token)}; *LAYERS the layers' array, to go on */
cJSON *hf_vit_spec_stem(const HfImage *im, const char *name, const char *patch, int64_t D,
                        int64_t P, const char *const *tokens, int n, const char *pos,
                        cJSON **layers);
/* import's words for a new classifier of IM's classes: N_FRESH tensors drawn with STD,
 * LEFT of the checkpoint's left out */
const char *hf_image_new_head_said(const HfImage *im, int n_fresh, double std, int left);
/* export: a vision transformer's first layers, or exit 1 naming the first that is not:
 * patches (a conv2d of stride = kernel, no padding, groups 1, a bias or with BIAS 0 none:
 * the width *D, the patch *P, IMG's images), tokens, N_TOKENS cls_token layers (a ViT's
 * 1, DeiT's 2) and a pos_embedding of a position a token and a learned token */
void hf_match_vit_stem(const Spec *s, const HfLayout *h, int n_tokens, int bias, HfImage *img,
                       int64_t *D, int64_t *P);
/* A vision transformer's blocks, a repeat of [residual [layernorm norm1, attention attn],
 * residual [layernorm norm2, linear fc1, ACT, linear fc2]] (ViT's, CLIP's, SigLIP's):
 * their count, heads, MLP width, eps, q, k and v's biases, the activation (OP_GELU with
 * gelu_tanh, or OP_QUICK_GELU), the names (block: "NAME.%lld.", then the layers') */
typedef struct HfVitBlocks {
    int64_t L, H, FF;
    double eps;
    int qkv_bias, act, gelu_tanh;
    char *block, *norm1, *attn, *norm2, *fc1, *fc2;
} HfVitBlocks;
/* import: B's repeat "blocks", added to LS (D wide) */
void hf_vit_blocks_spec(cJSON *ls, const HfVitBlocks *b, int64_t D);
/* export: REP as such blocks of width D whose activation is one of ACTS (ops, ending in
 * 0), or exit 1 naming the first layer that is not */
void hf_match_vit_blocks(const Spec *s, const HfLayout *h, const Layer *rep, int64_t D,
                         const int *acts, HfVitBlocks *b);
/* export: an attention over all the tokens with its proj bias (and q, k, v's: *qkv_bias) */
void hf_match_vit_attention(const Spec *s, const HfLayout *h, const Layer *l, const char *at,
                            int64_t *heads, int *qkv_bias);
/* a preprocessor_config.json making IM's pixels: GEO's geometry (NULL: a
 * ViTImageProcessor's resize to S x S, bilinear), IM's rescale and normalization */
cJSON *hf_image_processor(const HfImage *im, const HfImageProc *geo);

/* import hf of a folder whose config.json says model_type "resnet" (cfg loaded), for
 * images of side S (0: 224); LABELS (import's --labels, or NULL) for a new classifier */
int hf_resnet_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t S,
                     const char *labels);
/* Whether the spec has a residual of convs (a ResNet): export hf's */
int hf_resnet_spec(const Spec *s);
int hf_resnet_export(const Spec *s, const char *weights, const char *out);
/* import hf of a folder whose config.json says model_type "convnext" (V2: "convnextv2";
 * cfg loaded), for images of side S (0: its image_size); LABELS (import's --labels, or
 * NULL) for a new classifier */
int hf_convnext_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t S,
                       const char *labels, int v2);
/* Whether the spec has an untokens layer (a ConvNeXt): export hf's */
int hf_convnext_spec(const Spec *s);
int hf_convnext_export(const Spec *s, const char *weights, const char *out);
/* import hf of a folder whose config.json says model_type "clip" (SIGLIP 0) or "siglip"
 * (cfg loaded): its vision tower and classifier (LABELS: a new one) */
int hf_clip_import(HfCfg *cfg, const char *dir, const char *out, const char *name,
                   const char *labels, int siglip);
/* export hf's: 1 where the spec has a token_mean with skip (CLIP's head), 2 where a
 * token_mean follows a layernorm and no cls_token came before (SigLIP's), else 0 */
int hf_clip_spec(const Spec *s);
int hf_clip_export(const Spec *s, int siglip, const char *weights, const char *out);
/* import hf of a folder whose config.json says model_type "dinov2" or, REGISTERS,
 * "dinov2_with_registers" (cfg loaded; S: --image-size, 0 for image_size: the position
 * table interpolated to it, by OFFSET's scale factor, else to the size); LABELS for a
 * new classifier */
int hf_dinov2_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t S,
                     int offset, const char *labels, int registers);
/* Whether the spec has a cls_mean layer (a DINOv2's head): export hf's */
int hf_dinov2_spec(const Spec *s);
int hf_dinov2_export(const Spec *s, const char *weights, const char *out);
/* import hf of a folder whose config.json says model_type "vit" (DEIT 0) or "deit" (cfg
 * loaded); LABELS (import's --labels, or NULL) for a new classifier */
int hf_vit_import(HfCfg *cfg, const char *dir, const char *out, const char *name,
                  const char *labels, int deit);
/* Whether the spec is an image model with tokens (a vision transformer): export hf's */
int hf_vit_spec(const Spec *s);
int hf_vit_export(const Spec *s, const char *weights, const char *out);

/* import hf of a folder whose config.json says model_type "bert", "roberta" or
 * "distilbert" (cfg loaded): rows of T tokens (0: 128); LABELS (import's --labels, or
 * NULL) for a new classifier; TASK (--task: "sequence" or "token", or NULL: the
 * checkpoint's) */
int hf_bert_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t T,
                   const char *labels, const char *task);
/* Whether the spec is a text classifier (an embedding first, then a first_token or an
 * encoder's post-norm blocks): export's */
int hf_bert_spec(const Spec *s);
int hf_bert_export(const Spec *s, const char *weights, const char *out, const char *tok);
/* ModernBERT's masked LM, sequence and token classifiers (hf_modernbert.c): import (as
 * hf_bert_import), whether a spec is one, export */
int hf_modernbert_import(HfCfg *cfg, const char *dir, const char *out, const char *name,
                         int64_t T, const char *labels, const char *task);
int hf_modernbert_spec(const Spec *s);
int hf_modernbert_export(const Spec *s, const char *weights, const char *out, const char *tok);

/* ---- PEFT's LoRA adapters merged at import (hf_adapter.c) ---- */

typedef struct HfAdapterPair {
    const HfTensor *base;      /* the model's weight it adapts */
    const HfTensor *A, *B;     /* lora_A and lora_B (or lora_embedding_A and _B) */
    int embed;                 /* an embedding's */
    int whole;                 /* A is the weight saved whole (B NULL): it replaces BASE */
    int transposed;            /* the delta B A stored transposed (Conv1D, embeddings):
                                  set by hf_adapter_fit */
} HfAdapterPair;
typedef struct HfAdapter {
    const char *dir;
    HfWeights w;               /* adapter_model.safetensors */
    double alpha;              /* lora_alpha */
    int rslora;                /* use_rslora: scale alpha / sqrt(r), else alpha / r */
    HfAdapterPair *pairs;
    int n;
} HfAdapter;
/* DIR's adapter_config.json and adapter_model.safetensors read and the config checked
 * (exits 1 naming what a merge cannot express). */
void hf_adapter_load(HfAdapter *a, const char *dir);
/* Each adapter matched to the weight of W it adapts (one the import writes: `used`). */
void hf_adapter_plan(HfAdapter *a, HfWeights *w);
/* BASE's adapters checked against its shape (TRANSPOSED: stored [in, out], Conv1D's);
 * returns how many there are. */
int hf_adapter_fit(HfAdapter *a, const HfTensor *base, int transposed);
/* X, BASE's elements as read (or the adapter's whole weight for it), plus scale B A
 * of each adapter on it. */
void hf_adapter_merge(const HfAdapter *a, const HfTensor *base, float *x);

/* JSON as the example specs (specs/) are laid out: objects to depth 2 and "inputs" a member a line,
 * "layers" and "body" lists an element a line, the rest on one line; numbers in the
 * fewest digits that read back the same double. */
void hf_print_json(FILE *f, const cJSON *v);
/* X as a JSON number Python reads as a float (2.0, not 2): a config's float keys. */
cJSON *hf_float(double x);
/* V printed as hf_print_json prints it, into a new string */
char *hf_json_text(const cJSON *v);
/* A layer {"op": OP, "name": NAME (NULL: none)} appended to the spec's list; returned */
cJSON *hf_layer(cJSON *list, const char *op, const char *name);
/* The same with one number KEY */
cJSON *hf_layer_n(cJSON *list, const char *op, const char *name, const char *key, double v);
/* A layer's name as SPEC section 2 makes it: PREFIX then its name or its index IDX */
char *hf_layer_name(const Layer *l, int idx, const char *prefix);
/* Writes text to PATH atomically (PATH.tmp, renamed); exits as cannot_write does. */
void hf_write_text(const char *cmd, const char *path, const char *text);
/* Copies SRC to DST atomically (exit 1 naming SRC when unreadable, as cannot_write does
 * for DST); 0 */
int hf_copy_file(const char *cmd, const char *src, const char *dst);

#endif
