/* trainc_rt.h: the runtime API that generated trainers include, and nothing else.
 *
 * Plain C11 with no vendor headers, so that libtcc (JIT mode) and the system C
 * compiler (ahead of time) read the same generated source. The runtime knows no
 * model: a generated trainer describes itself with one rt_model and hands it to
 * rt_main(). The generated code knows no files, clocks or sockets.
 */
#ifndef TRAINC_RT_H
#define TRAINC_RT_H

#include <stddef.h>
#include <stdint.h>
#include <math.h>

#define RT_ABI_VERSION 26
#define RT_MAX_INPUTS 8
#define RT_MAX_RANK 4

enum { RT_U8, RT_U16, RT_I32, RT_F32, RT_I64 };          /* input dtypes; RT_I64: state */
/* precision; RT_PREC_FP8 (fp8-mixed): bf16-mixed with the linear layers' GEMMs in FP8 on a
 * GPU that has FP8 tensor cores (rt_gemm_fp8 and its variants) */
enum { RT_PREC_FP32, RT_PREC_BF16, RT_PREC_FP16, RT_PREC_FP8 };
enum { RT_INIT_UNIFORM, RT_INIT_NORMAL, RT_INIT_CONST };  /* parameter init */
#define RT_MUON_BLOCKS 4   /* rt_param.muon's blocks: attention's q, k, v at most */
enum { RT_LOSS_CROSS_ENTROPY, RT_LOSS_MSE, RT_LOSS_GAN_BCE, RT_LOSS_GAN_HINGE, RT_LOSS_DPO };
/* A GAN's loss terms on the discriminator's logits z (rt_gan_loss): BCEWithLogitsLoss
 * against 1 and 0, hinge's relu(1 - z), relu(1 + z), and the generator's -z */
enum { RT_GAN_BCE_REAL, RT_GAN_BCE_FAKE, RT_GAN_HINGE_REAL, RT_GAN_HINGE_FAKE, RT_GAN_HINGE_GEN };

/* One trainable tensor in the parameter region (fp32, PyTorch layout). */
typedef struct rt_param {
    const char *name;          /* safetensors name, e.g. "1.weight" */
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;
    int64_t offset;            /* in floats from the start of the region */
    int init;                  /* RT_INIT_* */
    float init_a;              /* uniform bound, normal std, or the constant */
    int dtype;                 /* state only (rt_model.state): RT_F32, or RT_I64 (a count
                                  held as an int64 in two floats); parameters: 0 */
    int frozen;                /* train.freeze matched it: never updated, its gradient
                                  not computed (or not read) */
    int lora;                  /* a train.lora adapter: --init may leave it out (it keeps
                                  its initial value) */
    int64_t muon[RT_MUON_BLOCKS]; /* a hidden layer's weight [rows, cols], which optimizer
                                  type muon updates (runtime/muon.c): the rows of each block
                                  it orthogonalizes alone, in order, 0 after the last; all 0:
                                  the optimizer's adamw group updates it */
} rt_param;

/* One model input as stored in the data files: per-sample shape and dtype. */
typedef struct rt_input {
    const char *name;
    int dtype;                 /* RT_U8 ... RT_F32 */
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;             /* per sample */
    int64_t classes;           /* > 0: integer class target, checked against data */
    int64_t vocab;             /* > 0: ids of an embedding with this many rows (the
                                  smallest, when several read it), checked against data */
    int widen;                 /* 1: u8/u16 ids or class labels that the generated code
                                  reads as i32 (the loader widens them); its batches are
                                  then i32, while the data files hold `dtype` */
    int has_ignore;            /* 1: a cross_entropy target whose labels may also be */
    int64_t ignore;            /* the loss's ignore_index (checked as a label otherwise) */
    int positions;             /* 1: the model's positions (packed rows, [T]): each value
                                  within [0, its place], checked against data */
} rt_input;

/* The state one forward/backward pass works on. The generated code reads its
 * buffers at fixed offsets of `arena` scaled by `Bmax` (the plan is per batch
 * row, so any batch size fits without recompiling). */
typedef struct rt_exec {
    int64_t B;                 /* rows in this batch (<= Bmax) */
    int64_t Bmax;              /* rows the arena was laid out for */
    char *arena;               /* activations and their gradients */
    float *params;             /* parameter region, fp32 */
    float *grads;              /* parameter gradients, same layout */
    const void *in[RT_MAX_INPUTS]; /* this batch's raw inputs, B rows each */
    int train;                 /* training pass: dropout active, loss gradient wanted */
    float grad_scale;          /* d(loss)/d(per-term loss): 1/(terms * accumulate) */
    uint64_t rng_key;          /* dropout: hash of seed and micro-step */
    double loss_sum;           /* out: sum of the per-term losses */
    int64_t correct;           /* out: correct argmax predictions (cross entropy) */
    int64_t terms;             /* out: number of loss terms */
    double margin_sum;         /* out: dpo's pairs' margins (the u each counts ranked right
                                  when > 0, rt_dpo), summed: validation's val_margin */
    void *rt;                  /* the runtime's own state (thread pool, ...) */
    void *dev;                 /* on a GPU: the device layer's state (NULL on the CPU);
                                  arena, params, grads and in[] then hold device addresses */
    int64_t arena_scale;       /* mixed-precision plans: 2 on the CPU (fp32 at twice the
                                  offsets), 1 on a GPU; unused otherwise */
    int grads_zero;            /* 1: every parameter gradient is zero as this backward pass
                                  starts (the first micro-batch of a step), so a call that
                                  is a gradient's first writer may store instead of add */
    void *prof;                /* --profile: this pass's timer (RT_AT), else NULL */
    uint64_t rng_part;         /* dropout with N ranks: (N << 32) | rank, else 0 (rt_drop_index) */
    float *state;              /* the layers' state (rt_model.state: batchnorm's running
                                  statistics), fp32 (int64 counts in two floats) */
    float *sink;               /* rt_model.sink_floats: frozen gradients written, never read */
    /* cross_entropy's ignore_index (rt_model.ce_has_ignore): a target equal to
     * ce_ignore adds no loss term and no gradient, and a loss call's mean is over the
     * targets it counts (e->terms adds them) */
    int ce_has_ignore;
    int32_t ce_ignore;
    int64_t ce_rows;           /* > 0: the rows a mean is over, counted ahead of the loss
                                  calls that take them (rt_head_cross_entropy's chunks) */
    int64_t ce_valid;          /* with ce_rows: their targets not ignored (the CPU's) */
    int64_t loss_rows;         /* under ignore_index, the last loss call's rows, counted or
                                  not (all of a chunked head's): the weight of the
                                  load-balancing loss (e->terms otherwise) */
    /* rt_model.decode's: the key/value caches (rt_model.kv_floats a sequence, kv_seq
     * floats apart) and each row's place in them, slot * kv_T + position: row b is the
     * token at that position of the slot's sequence, whose cache holds the positions
     * before it (or gets them in the same pass, from rows before b). place: the places
     * in the host's memory; dplace: on a GPU, the same in the device's memory, where the
     * decode kernels read them (a CUDA graph of the pass replays with each call's) */
    float *kv;
    int64_t kv_seq, kv_T;
    const int32_t *place;
    const int32_t *dplace;
    /* on several ranks: replaces x[0, n) by its mean over them (the runtime's
     * rt_rank_mean_f64: a collective, every rank calls it alike); NULL on one. A training
     * pass's kto loss averages its KL estimate so (runtime/losses.c) */
    void (*rank_mean_f64)(double *x, int64_t n);
    /* > 0: every batchnorm's momentum in a training pass, in place of its own (swa's pass
     * that recomputes the running statistics: 1 / (batches so far + 1), torch's momentum
     * None); 0: each layer's own */
    float bn_momentum;
} rt_exec;

typedef void (*rt_kernel_fn)(rt_exec *e, int64_t lo, int64_t hi);
/* A generated CPU kernel's definition starts with RT_KERNEL. Built by gcc on x86-64
 * (trainc build) it is three functions, for AVX-512 (x86-64-v4), AVX2 (v3) and the
 * baseline, and the loader picks the one the CPU runs; the loops are elementwise, built
 * without contraction into fused multiply-adds, so all three give the same bits.
 * libtcc (trainc run) and other compilers build the one plain function. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__TINYC__) && defined(__x86_64__)
#define RT_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RT_KERNEL
#endif

/* The CUDA kernels of a trainer (trainc build --device cuda|both, trainc run). */
typedef struct rt_cubin {
    const char *arch;          /* "sm_90" */
    const unsigned char *image;
    size_t size;
} rt_cubin;
typedef struct rt_cuda_image {
    const char *source;        /* kernels_cuda.cu: NVRTC compiles it when no cubin fits */
    int n_cubins;
    const rt_cubin *cubins;    /* one per --arch */
    const char *ptx;           /* for newer GPUs: the driver compiles it (may be NULL) */
    const char *unsupported;   /* why this model cannot run on a GPU (NULL: it can). Set
                                  by trainc run, whose trainers always have both devices;
                                  trainc build refuses such a model for the GPU */
} rt_cuda_image;
/* Defined by the file trainc build writes next to the generated sources. */
extern const rt_cuda_image trainc_cuda_image;

enum { RT_HAS_CPU = 1, RT_HAS_CUDA = 2 };   /* rt_model.devices */

typedef struct rt_model {
    int abi;                   /* RT_ABI_VERSION */
    const char *name;
    const char *spec_hash;     /* identifies model + training spec */
    const char *model_hash;    /* identifies the model alone (checkpoints) */
    const char *data_dir;      /* data paths in the training spec are relative to it */
    int n_params;
    const rt_param *params;
    int64_t param_floats;
    /* train.freeze: params[0 .. n_trainable) are trained and lie in [0, trainable_floats);
     * the frozen ones come after them, so gradients and optimizer state (and DDP's sums,
     * ZeRO's shards) cover [0, trainable_floats) alone. Without it: n_params and
     * param_floats. init_order (NULL: the table's order) lists the parameters in the
     * model's order, which the initial values' draws follow. */
    int n_trainable;
    int64_t trainable_floats;
    const int *init_order;
    int64_t sink_floats;       /* the frozen gradients an instruction still writes (a norm
                                  layer's dgamma beside its dx): rt_exec.sink, never read */
    int64_t gpu_fp32_floats;   /* mixed precision on a GPU: parameters [0, this) kept in fp32
                                  too; after them the frozen weights that GEMMs alone read,
                                  kept in the 16-bit copy alone. 0: all in fp32 too */
    int n_inputs;
    const rt_input *inputs;
    int64_t arena_row_bytes;   /* arena bytes = Bmax * arena_row_bytes */
    int64_t noreuse_row_bytes; /* what the arena would take without reuse */
    int64_t eval_arena_row_bytes; /* validation's own (forward-only) plan, in the same arena */
    int64_t flops_per_sample;  /* forward + backward */
    int n_instructions;        /* plan.json's list: RT_AT's indices are below it */
    int loss;                  /* RT_LOSS_* */
    int64_t loss_terms;        /* loss terms per sample */
    int has_dropout;
    int64_t pred_offset;       /* the prediction (logits) in the arena: per-row offset */
    int64_t pred_numel;        /* its elements per sample */
    int64_t pred_ld;           /* its last axis's rows this many elements apart */
    int pred_eval;             /* 1: the prediction is validation's program's (a GAN's
                                  samples; a chunked head's logits): --sample runs evaluate */
    /* --predict (not a GAN, not a chunked head: pred_rank > 0): the prediction of
     * validation's program, per sample pred_shape, rows of its last axis eval_pred_ld
     * apart, 16-bit on a GPU where eval_pred16; the loss's target, an input --predict
     * does not read (-1: none) */
    int64_t eval_pred_offset, eval_pred_ld;
    int eval_pred16;
    int pred_rank;
    int64_t pred_shape[RT_MAX_RANK];
    int target_input;
    /* A language model whose head and loss run a chunk of rows at a time (head_d > 0):
     * no program holds the logits whole; --sample computes the row it draws from, x's
     * row (head_x_offset, in validation's plan) times W^T (W: head_wrows rows of head_d
     * at params + head_w_offset), into pred_offset's row 0 (pred_ld apart). */
    int64_t head_x_offset, head_w_offset, head_d, head_wrows;
    int64_t gpu_scratch_row_bytes; /* scratch the GPU's calls need per batch row */
    const char *const *train_defaults; /* "key=value" lines of the training spec */
    int n_train_defaults;
    void (*forward)(rt_exec *e, int train); /* computes the loss; with train, also d(loss)/d(output) */
    void (*backward)(rt_exec *e);           /* parameter gradients are accumulated (+=) */
    void (*evaluate)(rt_exec *e);           /* forward only, validation's plan: loss, accuracy */
    /* A language model's decode program (NULL: none): the tokens
     * e->in[0] (one i32 a row), each at its place (rt_exec.place: a sequence and a
     * position), through the layers, attention against the sequences' key/value caches
     * e->kv (which it extends by them), the logits left at decode_pred_offset (rows decode_pred_ld apart); the
     * cache is kv_floats, on the device where the program runs on a GPU (its kernels, kd*,
     * are in the CUDA image beside validation's) */
    void (*decode)(rt_exec *e);
    int64_t decode_pred_offset, decode_pred_ld, kv_floats;
    int devices;               /* RT_HAS_*: what the trainer was built for */
    const rt_cuda_image *cuda; /* with RT_HAS_CUDA */
    int act16;                 /* RT_PREC_BF16 or _FP16 (mixed precision): the plan
                                  (arena_row_bytes, the offsets) is the GPU's, with 16-bit
                                  activations and a 16-bit copy of the parameters; the CPU
                                  runs it with arena_scale 2. RT_PREC_FP32: all fp32 */
    const char *spec_file;     /* the training spec's file as trainc was given it: errors
                                  about its values name it (NULL: "trainc") */
    int n_state;               /* the layers' state: not trained (no gradient, no optimizer),
                                  saved beside the parameters under its own names */
    const rt_param *state;     /* offsets into rt_exec.state */
    int64_t state_floats;
    /* A GAN (docs/spec.md, "GANs"): forward and backward are the discriminator's turn
     * (G(z) computed first and kept, D's two loss terms), forward_g and backward_g the
     * generator's, through D as updated; parameters [0, gan_gen_floats) are G's, the
     * rest D's; evaluate is G alone (pred_*: its samples). z is input gan_latent_input,
     * or (-1) drawn by the runtime into in[n_inputs], gan_latent_numel floats a row. */
    int gan;
    int64_t gan_gen_floats;
    int gan_latent_input;
    int64_t gan_latent_numel;
    void (*gan_forward_g)(rt_exec *e);
    void (*gan_backward_g)(rt_exec *e);
    int fp8;                   /* fp8-mixed (act16 is then RT_PREC_BF16): the calls
                                  rt_gemm_fp8 ... mark the linear layers' GEMMs, which a GPU
                                  of compute capability 8.9 or later runs in FP8 */
    int64_t fp8_weight_bytes;  /* fp8-mixed: the largest weight those GEMMs cast (its FP8
                                  copy's bytes), scratch beyond gpu_scratch_row_bytes */
    int fp8_amax_slots;        /* fp8-mixed: the amax slots its passes fold into
                                  (rt_fp8_amax_reset ...) */
    int ce_has_ignore;         /* cross_entropy's ignore_index given (rt_exec.ce_ignore) */
    int32_t ce_ignore_index;
    /* dpo (loss RT_LOSS_DPO): the reference input (the reference model's log-
     * probabilities), and where validation's program leaves each pair's own [2] (a row's
     * offset in the arena, fp32), which --reference reads */
    int reference_input;
    int64_t eval_logps_offset;
} rt_model;

/* Does m's loss count a validation accuracy (cross entropy's argmax hits, dpo's pairs
 * ranked right)? */
static inline int rt_has_acc(const rt_model *m)
{
    return m->loss == RT_LOSS_CROSS_ENTROPY || m->loss == RT_LOSS_DPO;
}

/* Entry point of every trainer: parses the trainer options, trains, returns the exit code. */
int rt_main(const rt_model *m, int argc, char **argv);

/* The gradient of params[off, off + n) is written from here on in this backward pass
 * (zero2 on GPUs backs it with memory now; else nothing to do). */
void rt_grad_begin(rt_exec *e, int64_t off, int64_t n);
/* The gradient of params[off, off + n) is final for this step (data parallelism:
 * the runtime may start reducing it across ranks while backward goes on). */
void rt_grad_ready(rt_exec *e, int64_t off, int64_t n);

/* --profile: forward() and backward() start each instruction with RT_AT(its index in
 * plan.json's list, "where: what"); the runtime times from one to the next (on a GPU
 * by events on the stream). Off, a branch. */
void rt_prof_at(rt_exec *e, int index, const char *label);
#define RT_AT(index, label)                 \
    do {                                    \
        if (e->prof)                        \
            rt_prof_at(e, (index), (label)); \
    } while (0)

/* Kernel launch: split [0, n) over the thread pool; fn gets half-open ranges. */
void rt_parallel_for(rt_exec *e, int64_t n, rt_kernel_fn fn);
/* A generated elementwise kernel over [0, n): on the CPU fn over the thread pool; on a
 * GPU the module's kernel `name`, given the tensors (args: a pointer to each tensor's
 * pointer, in the kernel's parameter order), then B, n, rng_key, train and rng_part. */
void rt_launch(rt_exec *e, const char *name, rt_kernel_fn fn, int64_t n, int nargs, void **args);
/* y[j] = rt_gelu_tanh(x[j]) for j < n (y may be x): a generated CPU loop that is only
 * this calls the runtime's vectorized rows (baseline x86-64 or AVX2: the same bits). */
void rt_gelu_tanh_rows(float *y, const float *x, int64_t n);

/* Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C. */
void rt_gemm(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
             float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
             float beta, float *C, int64_t ldc);

/* A linear layer's GEMM with its epilogue: P = op(A) op(B) (+ R) + bias, in that order
 * (cuBLASLt's: the product, then beta * C with beta 1 and R as C, then the bias;
 * bias[j] on column j; R, when not NULL, a residual of P's shape, rows ldc apart, not
 * overlapping C or Y), then Y = act(P) (RT_EPI_RELU: max(P, 0) as "P > 0 ? P : 0";
 * RT_EPI_GELU_TANH: rt_gelu_tanh), P stored in C when C is not NULL, Y in Y when act is
 * not RT_EPI_NONE; rows of C and Y are ldc apart. The arithmetic of a GEMM followed by
 * the fused elementwise kernel "+ bias (+ act)" or "+ bias + residual", which it
 * replaces (the residual added before the bias: the rounding of an epilogue, not of
 * the loop): on a GPU it is one cuBLASLt call with a bias (and ReLU or GELU) epilogue,
 * R its C matrix. */
enum { RT_EPI_NONE, RT_EPI_RELU, RT_EPI_GELU_TANH };
void rt_gemm_bias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float *C, int64_t ldc, const float *bias, const float *R, int act, float *Y);

/* db[j] += sum_i dy[i, j] over rows i < rows. */
void rt_colsum_add(rt_exec *e, const float *dy, float *db, int64_t rows, int64_t cols);

/* A linear layer's weight-gradient GEMM with its bias gradient: rt_gemm (trans_a 1: op(A)
 * = A^T, A being dy [K, M], rows lda = M apart), then db[i] += sum_k dy[k, i] for i < M,
 * as rt_colsum_add(e, A, db, K, M). `fresh`: no earlier call of this backward pass adds
 * to db, so with e->grads_zero the sum may be stored. On a GPU one cuBLASLt call with
 * the BGRADB epilogue (the bias gradient from the GEMM's operand dy, which it reads
 * anyway), instead of a second pass over dy. */
void rt_gemm_dbias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                   float beta, float *C, int64_t ldc, float *db, int fresh);

/* The data-gradient GEMM of a linear layer followed by GELU (tanh): D = op(A) op(B)
 * (beta 0), then D[i, j] = rt_gelu_tanh_bwd(pre[i, j], D[i, j]); pre (the GELU's input)
 * and D rows ldd apart. The arithmetic of the GEMM followed by the fused loop "gelu
 * (tanh) backward", which it replaces; on a GPU one cuBLASLt call with the DGELU
 * epilogue (pre its auxiliary input, as GELU_AUX_BIAS stored it in the forward pass). */
void rt_gemm_dgelu(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                   float *D, int64_t ldd, const float *pre);

/* fp8-mixed: a linear layer's GEMMs other than the classifier's (the compiler marks
 * them). The contracts of rt_gemm, rt_gemm_bias, rt_gemm_dbias and rt_gemm_dgelu; on a
 * GPU with FP8 tensor cores the 16-bit operands are cast to FP8 first (E4M3 for weights
 * and activations, E5M2 for the gradient dy, each scaled from its absolute maximum: the
 * linear layer's backward GEMMs have A = dy and op(B) not transposed; its forward
 * transposes B), elsewhere (the CPU, a shape FP8 does not take) they are those calls. */
void rt_gemm_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float beta, float *C, int64_t ldc);
void rt_gemm_bias_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc, const float *bias, const float *R, int act, float *Y);
void rt_gemm_dbias_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc, float *db, int fresh);
void rt_gemm_dgelu_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *D, int64_t ldd, const float *pre);
/* fp8-mixed: the next two calls above are a linear layer's backward GEMMs on dy (dx =
 * dy W and dW = dy^T x, in either order, only gradient hooks between them; the compiler
 * marks such pairs): on a GPU the first casts dy to FP8 in both layouts and the second
 * reuses that cast and its scale (the same bytes, one pass fewer). Nothing on the CPU. */
void rt_fp8_dy_pair(rt_exec *e, const float *dy);
/* fp8-mixed's amax slots (rt_model.fp8_amax_slots words on a GPU): a kernel that
 * produces a linear GEMM's activation or gradient operand folds its absolute maximum
 * into one as it writes it, which the GEMM's cast reads instead of taking a pass of
 * its own (templates/cuda/fp8.cuh). rt_fp8_amax_reset: slots [first, first + n) to 0,
 * as the pass that folds into them starts; rt_fp8_amax_slot: slot k's device address,
 * a fused elementwise kernel's argument (NULL on the CPU); rt_fp8_amax_use: the next
 * rt_gemm*_fp8 call reads its A's maximum from slot a and its B's from slot b (-1: a
 * pass of its own, or a weight's partials from the optimizer), and folds its output's
 * into slot out (-1: none) where a kernel of ours writes the output (else it takes
 * the pass then). Nothing on the CPU. */
void rt_fp8_amax_reset(rt_exec *e, int first, int n);
unsigned *rt_fp8_amax_slot(rt_exec *e, int k);
void rt_fp8_amax_use(rt_exec *e, int a, int b, int out);

/* conv2d as im2col + GEMM. col is [C*k*k, B*OH*OW]. */
void rt_im2col(rt_exec *e, const float *x, float *col, int64_t B, int64_t C, int64_t H,
               int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);
/* conv2d with groups G > 1 (grouped, depthwise at G = C), direct (conv_grouped.c):
 * x [B, C, H, W], w [Cout, C / G, k, k], bias [Cout] or NULL, y [B, Cout, OH, OW].
 * The forward pass and the input gradient overwrite y and dx; the weight (and, with
 * db != NULL, bias) gradients add into dw and db. */
void rt_gconv_fwd(rt_exec *e, const float *x, const float *w, const float *bias, float *y,
                  int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                  int64_t OH, int64_t OW, int64_t Cout, int64_t G);
void rt_gconv_bwd_data(rt_exec *e, const float *dy, const float *w, float *dx, int64_t B,
                       int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad,
                       int64_t OH, int64_t OW, int64_t Cout, int64_t G);
void rt_gconv_bwd_weight(rt_exec *e, const float *x, const float *dy, float *dw, float *db,
                         int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                         int64_t pad, int64_t OH, int64_t OW, int64_t Cout, int64_t G);
/* conv2d with groups 1 (runtime/conv.c), the GEMM layouts: x and dx [B, C, H, W], w and
 * dw [Cout, C*k*k], yt and dyt [Cout, B*OH*OW], col and dcol [C*k*k, B*OH*OW] (scratch).
 * rt_conv_fwd: yt = w im2col(x); rt_conv_bwd_weight: dw += dyt im2col(x)^T;
 * rt_conv_bwd_data: dx = col2im(w^T dyt) (overwrites dx). On the CPU im2col (col2im)
 * and a GEMM, or with AVX-512, for the shapes runtime/conv_direct.c takes, a direct
 * convolution; on a GPU, for the shapes runtime/cuda_ops.c's rules pick, a direct or
 * implicit-GEMM kernel. The direct kernels leave col and dcol alone. */
void rt_conv_fwd(rt_exec *e, const float *x, const float *w, float *col, float *yt, int64_t B,
                 int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                 int64_t OW, int64_t Cout);
void rt_conv_bwd_weight(rt_exec *e, const float *x, const float *dyt, float *col, float *dw,
                        int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                        int64_t pad, int64_t OH, int64_t OW, int64_t Cout);
void rt_conv_bwd_data(rt_exec *e, const float *w, const float *dyt, float *dcol, float *dx,
                      int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                      int64_t pad, int64_t OH, int64_t OW, int64_t Cout);
/* dx[B,C,H,W] = col2im(dcol) (overwrites dx). */
void rt_col2im(rt_exec *e, const float *dcol, float *dx, int64_t B, int64_t C, int64_t H,
               int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t OH, int64_t OW);

/* Pooling over [B*C] planes of H x W, no padding. */
void rt_maxpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_maxpool2d_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t planes,
                      int64_t H, int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_avgpool2d_fwd(rt_exec *e, const float *x, float *y, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);
void rt_avgpool2d_bwd(rt_exec *e, const float *dy, float *dx, int64_t planes, int64_t H,
                      int64_t W, int64_t k, int64_t s, int64_t OH, int64_t OW);

/* LayerNorm over the last axis of [rows, d]; mean and rstd are saved for backward. w
 * NULL: no weight (ones), b NULL: no bias (zeros); dw, db NULL where they are absent. */
void rt_layernorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y,
                      float *mean, float *rstd, int64_t rows, int64_t d, float eps);
/* dx = the input gradient, plus add[i] when add is not NULL (overwritten; add may be
 * dx itself: each element is read before it is written); dw, db accumulated (+=). The
 * addend is a sum of gradient contributions folded in: dx + add rounds as the separate
 * "dx + add" loop did. */
void rt_layernorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                      const float *rstd, const float *dy, const float *add, float *dx,
                      float *dw, float *db, int64_t rows, int64_t d);

/* RMSNorm over the last axis of [rows, d]: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2)
 * + eps) (the sum of squares in double), saved for backward. */
void rt_rmsnorm_fwd(rt_exec *e, const float *x, const float *w, float *y, float *rstd,
                    int64_t rows, int64_t d, float eps);
/* dx = rstd * (dy w - xh mean(dy w xh)), xh = x * rstd, plus add[i] when add is not NULL
 * (add may be dx itself, as rt_layernorm_bwd's); dw accumulated (+= sum over rows of
 * dy xh). */
void rt_rmsnorm_bwd(rt_exec *e, const float *x, const float *w, const float *rstd,
                    const float *dy, const float *add, float *dx, float *dw, int64_t rows,
                    int64_t d);

/* attention's qk_norm "all_heads" (OLMo 2's) on rows of qkv, [q dq | k dk | v dv]: q's
 * columns through rmsnorm with weight wq, k's with wk, v's copied (rstd [rows, 2]: q's,
 * then k's 1/rms). */
void rt_qk_norm_fwd(rt_exec *e, const float *x, const float *wq, const float *wk, float *y,
                    float *rstd, int64_t rows, int64_t dq, int64_t dk, int64_t dv, float eps);
/* Its backward: q's and k's columns as rt_rmsnorm_bwd's (no addend), v's gradient
 * copied; dwq and dwk accumulated (NULL: not wanted). */
void rt_qk_norm_bwd(rt_exec *e, const float *x, const float *wq, const float *wk,
                    const float *rstd, const float *dy, float *dx, float *dwq, float *dwk,
                    int64_t rows, int64_t dq, int64_t dk, int64_t dv);

/* A gated linear unit over rows of 2h: y[r, j] = act(x[r, j]) * x[r, h + j] for j < h
 * (the gate half first, then the up half; SwiGLU with RT_GLU_SILU). */
enum { RT_GLU_SILU, RT_GLU_GELU, RT_GLU_GELU_TANH, RT_GLU_SIGMOID, RT_GLU_RELU };
void rt_glu_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act);
/* dx [rows, 2h] overwritten from x and dy [rows, h]: the gate's d act(a) * u * dy, the
 * up half's act(a) * dy (as torch's mul backward, then the activation's). */
void rt_glu_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                int64_t h, int act);
/* Gated: rows of 2h + 1, y[r, j] = glu's y[r, j] * sigmoid(x[r, 2h]) (a moe layer's
 * shared expert with shared_gate); dx [rows, 2h + 1] overwritten, its last column the
 * gate's gradient. */
void rt_glu_gated_fwd(rt_exec *e, const float *x, float *y, int64_t rows, int64_t h, int act);
void rt_glu_gated_bwd(rt_exec *e, const float *x, const float *dy, float *dx, int64_t rows,
                      int64_t h, int act);

/* ConvNeXt V2's global response normalization of each sample's x [T, C] (channels
 * last): G_c = the L2 norm of channel c over the T rows (summed in double), N_c = G_c /
 * (mean_c G_c + 1e-6), y = w (x N) + b + x; g [B, C + 1] saved: each sample's G, then
 * its mean + 1e-6. */
void rt_grn_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *y, float *g,
                int64_t B, int64_t T, int64_t C);
/* Its backward: dx (overwritten; it may be dy), dw += sum x N dy, db += sum dy (NULL: not
 * wanted). */
void rt_grn_bwd(rt_exec *e, const float *x, const float *w, const float *g, const float *dy,
                float *dx, float *dw, float *db, int64_t B, int64_t T, int64_t C);

/* BatchNorm over x [B, C, HW] per channel c, PyTorch's BatchNorm1d/2d: the scale and
 * shift [C] of its normalization y = x * scale + shift, which the generated code applies
 * (an elementwise loop, fused with what follows). Training (e->train): the batch's mean
 * and biased variance (over B and HW; with sync, over all ranks' batches), scale = rstd
 * w, shift = b - mean scale, mean and rstd [C] saved; when run_mean is not NULL also
 * run_mean, run_var = (1 - momentum) * run + momentum * (mean, unbiased variance) and
 * *(int64_t *)count += 1 (a replay passes NULL: no second update). Evaluation: the
 * running statistics instead of the batch's. w, b NULL: affine false. */
void rt_batchnorm_fwd(rt_exec *e, const float *x, const float *w, const float *b, float *scale,
                      float *shift, float *mean, float *rstd, float *run_mean, float *run_var,
                      float *count, int64_t B, int64_t C, int64_t HW, float eps, float momentum,
                      int64_t sync);
/* dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)) (overwritten; means over B and HW,
 * with sync over all ranks), dw += sum(dy xhat), db += sum(dy) (NULL: affine false). */
void rt_batchnorm_bwd(rt_exec *e, const float *x, const float *w, const float *mean,
                      const float *rstd, const float *dy, float *dx, float *dw, float *db,
                      int64_t B, int64_t C, int64_t HW, int64_t sync);

/* Softmax cross entropy over rows of C logits, ld apart (ld >= C: a vocabulary's rows
 * padded for aligned GEMMs; the padding is neither read nor written), with i32
 * targets. Adds the loss sum and correct count to e; with dlogits != NULL (same
 * layout; it may be logits) also writes dlogits = (softmax - onehot) * e->grad_scale.
 * Probabilities are never stored. With e->ce_has_ignore, a row whose target is
 * e->ce_ignore adds nothing (its gradient 0) and the others' gradients are scaled by
 * rows / (rows not ignored), so that the call's mean is over those (F.cross_entropy's
 * ignore_index; none counted: no gradient at all). */
void rt_cross_entropy(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                      int64_t rows, int64_t C, int64_t ld);
/* rt_cross_entropy with label smoothing ls in (0, 1] (F.cross_entropy's
 * label_smoothing): the targets (1 - ls) onehot + ls / C, so dlogits = (softmax - that)
 * * e->grad_scale and each row's loss is the cross entropy against them. */
void rt_cross_entropy_ls(rt_exec *e, const float *logits, const int32_t *target, float *dlogits,
                         int64_t rows, int64_t C, int64_t ld, float ls);
/* The targets of the next loss calls' rows (rows of them) counted ahead, so that
 * those calls (a chunk of them each) take the mean over all of them; rt_ce_done ends
 * it. Nothing without e->ce_has_ignore. */
void rt_ce_count(rt_exec *e, const int32_t *target, int64_t rows);
/* Direct preference optimization (TRL's DPOTrainer's sigmoid loss) over `samples` pairs of
 * `rows` logits rows each (C logits, ld apart): the chosen answer's rows first, then the
 * rejected one's, each answer's log-probability the sum of log softmax(z)[target] over
 * its rows whose target is not e->ce_ignore, into logps [samples, 2]; with the reference
 * model's ref [samples, 2], u = beta ((lc - rc) - (lr - rr)): the loss softplus(-u) and
 * u > 0 (ranked right) added to e, one term a sample; with dlogits != NULL (it may be
 * logits) d(loss)/d(z) = +-beta sigmoid(-u) (softmax - onehot) * e->grad_scale (0 on the
 * ignored rows and the padding). Without a reference (ref NULL): SimPO, each answer's
 * mean log-probability over its counted rows (into logps), u = beta (mc - mr) - gamma,
 * d(loss)/d(z) = +-beta sigmoid(-u) / (the answer's rows) (softmax - onehot). With label
 * smoothing ls (dpo's; conservative DPO) the loss is (1 - ls) softplus(-u) + ls softplus(u)
 * and sigmoid(-u) in the gradient (1 - ls) sigmoid(-u) - ls sigmoid(u). With ipo: IPO's
 * (u - 1 / (2 beta))^2, u = (mc - rc / nc) - (mr - rr / nr) over the means (n: each
 * answer's counted rows; the reference's sums taken over them too). With orpo (ref NULL):
 * ORPO's, z = (mc - mr) - (log(1 - e^mc) - log(1 - e^mr)) over the means, the loss
 * beta softplus(-z) plus the chosen texts' cross entropy (the mean over all their
 * counted rows of the call: the answer's, and with sft [samples, T] != NULL each chosen
 * row's sft target where the answer's is ignored, TRL's prompt and answer), z > 0 ranked
 * right. With kto (TRL's KTOTrainer): a row is a completion and a mismatched one (the KL
 * text), label [samples] 1 where the completion is desirable; with the reference's sums,
 * KL = max(0, the call's mean of (lK - rK)) (no gradient), u = beta (lc - rc - KL) for a
 * desirable row, beta (KL - (lc - rc)) for another, the loss wd (1 - sigmoid(u)) or
 * wu (1 - sigmoid(u)), u > 0 right; the KL text's rows take no gradient. With
 * sft_weight > 0 and the sigmoid kind (RPO, TRL's rpo_alpha; CPO-SimPO's cpo_alpha): plus
 * sft_weight times the chosen answers' cross entropy, as orpo's (orpo's weight is 1). With
 * cpo (TRL's CPOTrainer, ref NULL): the sigmoid loss over the sums, u = beta (lc - lr), and
 * its cross entropy term. The kinds after RT_PREF_CPO are dpo's other loss types (TRL's
 * DPOConfig.loss_type), with the reference's sums, a = lc - rc, b = lr - rr, u = beta (a -
 * b) (u > 0 right), sft_weight as the sigmoid's: robust ((1 - ls) softplus(-u) - ls
 * softplus(u)) / (1 - 2 ls); hinge max(0, 1 - u); nca_pair softplus(-beta a) + (softplus(beta
 * a) + softplus(beta b)) / 2; sppo_hard (a - 1 / (2 beta))^2 + (b + 1 / (2 beta))^2;
 * apo_zero 1 - sigmoid(beta a) + sigmoid(beta b); apo_down sigmoid(beta a) + 1 -
 * sigmoid(u). kind: RT_PREF_*. */
enum { RT_PREF_SIGMOID, RT_PREF_IPO, RT_PREF_ORPO, RT_PREF_KTO, RT_PREF_CPO, RT_PREF_ROBUST,
       RT_PREF_HINGE, RT_PREF_NCA_PAIR, RT_PREF_SPPO_HARD, RT_PREF_APO_ZERO, RT_PREF_APO_DOWN };
void rt_dpo(rt_exec *e, const float *logits, const int32_t *target, const float *ref,
            float *dlogits, float *logps, int64_t samples, int64_t rows, int64_t C, int64_t ld,
            float beta, float gamma, float ls, int64_t kind,
            const int32_t *sft, const int32_t *label, float wd, float wu,
            float sft_weight);
void rt_ce_done(rt_exec *e);
/* A language model's head (y = x W^T, W [wrows, d] with wrows >= C: a padded
 * vocabulary's zero rows) and its cross entropy (label-smoothed where ls > 0) over
 * rows of x [rows, d], chunk rows at a time through z [chunk, ld]: the chunk's logits,
 * the loss sum and correct count added to e, and where dx or dw != NULL (training) the
 * logits' gradient in z's place, dx = d(logits) W (when dx != NULL) and
 * dw += d(logits)^T x (when dw != NULL: not a frozen head's). The [rows, C] logits are
 * never stored whole. */
void rt_head_cross_entropy(rt_exec *e, const float *x, const float *w, const int32_t *target,
                           float *dx, float *dw, float *z, int64_t rows, int64_t chunk,
                           int64_t d, int64_t wrows, int64_t C, int64_t ld, float ls);
/* The mixture-of-experts layer (moe.c; compiler/ops/moe.c): n tokens of width d, E
 * experts, each token's k copies (top_k, at most RT_MOE_MAX_K) grouped by expert in the
 * gathered buffers ([n k, ...]); probs [n, E], gate [n, k], idx [n, 2k] (experts, then
 * the copies' rows), offs [E + 1] (each group's first row). dispatch_fwd: the router's
 * softmax into probs (x Wr^T), each token's top k and their gate weights (over their sum
 * with norm), the groups, x's copies in xg, h = each group times its expert's slab of
 * wup ([E, h2, d]). combine_fwd: o = the groups of a times wdown's slabs ([E, d, hid]),
 * y[t] = sum_j gate[t, j] o[row(t, j)]. combine_bwd: da, dgate, dwdown += (g scratch);
 * dispatch_bwd: dx, dwr += and dwup += from dh and dgate (xg, dl scratch). The weights'
 * gradients may be NULL (a frozen layer's: not wanted). The load-balancing loss
 * (transformers' Mixtral's, over the L layers that have it): dispatch_fwd writes its
 * experts' counts and summed probabilities into stats' row `row` ([L, 2E]; stats NULL:
 * none); rt_moe_aux, after the loss, adds coef E sum_e F_e P_e (F_e the L n tokens'
 * choices of e over L n, P_e their mean probability of e) to the pass's mean
 * loss and writes agrad[e] = its gradient by each token's probability of e, in the
 * loss's scale (e->grad_scale e->terms); dispatch_bwd adds agrad (NULL: none) to the
 * router's. */
#define RT_MOE_MAX_K 64
void rt_moe_dispatch_fwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                         float *probs, float *gate, float *idx, float *offs, float *xg, float *h,
                         float *stats, int64_t n, int64_t d, int64_t E, int64_t k, int64_t h2,
                         int64_t norm, int64_t row);
void rt_moe_dispatch_bwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                         const float *probs, const float *gate, const float *idx,
                         const float *offs, const float *dgate, const float *agrad,
                         const float *dh, float *xg, float *dl, float *dx, float *dwr,
                         float *dwup, int64_t n, int64_t d, int64_t E, int64_t k, int64_t h2,
                         int64_t norm);
void rt_moe_combine_fwd(rt_exec *e, const float *a, const float *wdown, const float *gate,
                        const float *idx, const float *offs, float *o, float *y, int64_t n,
                        int64_t d, int64_t E, int64_t k, int64_t hid);
void rt_moe_combine_bwd(rt_exec *e, const float *a, const float *wdown, const float *gate,
                        const float *idx, const float *offs, const float *dy, float *g,
                        float *da, float *dgate, float *dwdown, int64_t n, int64_t d, int64_t E,
                        int64_t k, int64_t hid);
void rt_moe_aux(rt_exec *e, const float *stats, float *agrad, int64_t L, int64_t n, int64_t E,
                float coef);
/* db[r] += sum_j x[r, j] over cols j (conv bias gradients). */
void rt_rowsum_add(rt_exec *e, const float *x, float *db, int64_t rows, int64_t cols);

/* A GAN's loss term (RT_GAN_*) on the discriminator's logits z [rows]: adds the sum of
 * the rows' losses to e->loss_sum (not to e->terms: the runtime knows a GAN's terms);
 * dz = d(term)/dz * e->grad_scale when dz != NULL. BCEWithLogitsLoss's loss is
 * max(z, 0) - y z + log1p(exp(-|z|)) in double, its gradient sigmoid(z) - y in float. */
void rt_gan_loss(rt_exec *e, const float *z, float *dz, int64_t rows, int term);
/* Mean squared error terms over n elements; dy = 2 (y - t) * e->grad_scale when dy != NULL. */
void rt_mse(rt_exec *e, const float *y, const float *t, float *dy, int64_t n);

/* Causal (or full) multi-head self-attention over qkv [B, T, 3d] (GPT-2's layout: q, k,
 * v side by side in the last axis, head h at columns h*hd .. h*hd+hd-1 of each, hd =
 * d/H), scores s = q k^T / sqrt(hd) over the visible keys. y [B, T, d] receives the
 * heads' outputs side by side, lse [B, H, T] each query's log-sum-exp of its scores
 * (max + log sum exp(s - max)): all backward needs to recompute the probabilities, so
 * no T x T buffer is kept (flash attention's contract). */
void rt_attention_fwd(rt_exec *e, const float *qkv, float *lse, float *y, int64_t B, int64_t T,
                      int64_t d, int64_t H, int causal);
/* From dy [B, T, d], the forward's lse and y: dqkv [B, T, 3d] (overwritten). */
void rt_attention_bwd(rt_exec *e, const float *qkv, const float *lse, const float *y,
                      const float *dy, float *dqkv, int64_t B, int64_t T, int64_t d, int64_t H,
                      int causal);
/* rt_attention_fwd and _bwd with the Llama-family options (docs/spec.md's attention):
 * qkv [B, T, (H + 2 KV) hd] holds H query heads, then KV key heads, then KV value heads
 * (hd = d / H); query head h reads key/value head h / (H / KV). qn, kn: qk_norm's weights
 * [hd] (RMSNorm eps 1e-6 over each head's q and k), or NULL; theta > 0: rope on q and k
 * after qk_norm (dims j, j + hd/2 rotated by t inv[j], inv[j] = ext[j] where ext [hd] is
 * not NULL (the compiler's: a partial rope's, longrope's; cos and sin times ext[hd/2 +
 * j], longrope's attention factor), else 1 / theta^(2j/hd)),
 * its llama3 scaling when factor > 0 (low and high frequency factors, the original
 * context length orig); window
 * > 0: query t sees keys t - window + 1 .. t (with causal); scale: the scores' factor
 * (softmax(q k^T scale); 1 / sqrt(hd) is the usual one); softcap > 0: each score s
 * becomes softcap tanh(s / softcap) (0: none); pos [B, T] (with causal; NULL: none): each
 * token's position in its sequence of a packed row, 0 <= pos[t] <= t: query t sees keys
 * t - pos[t] .. t alone (within the window) and rope turns q and k by pos[t], not t.
 * dqn, dkn (may be NULL) get the weights' gradients added. */
void rt_attention_ext_fwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                          float *lse, float *y, int64_t B, int64_t T, int64_t d, int64_t H,
                          int64_t KV, int causal, int64_t window, float theta, float factor,
                          float low, float high, int64_t orig, const float *ext, float scale,
                          float softcap, const int32_t *pos);
/* The decode program's attention: qkv [B, 1, (H + 2 KV) hd], row b at its place
 * e->place[b] (a sequence's slot and a position), as rt_attention_ext_fwd's options take
 * it (causal). The rows' keys (through qk_norm and rope) and values are written into
 * their sequences' caches, the layer's at kv_off in each: K [KV, T, hd], then V [KV, T,
 * hd]; then row b's queries attend to its cache's positions up to its own (within the
 * window), y [B, 1, H hd]. */
void rt_attention_decode(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                         float *y, int64_t kv_off, int64_t B, int64_t T, int64_t d, int64_t H,
                         int64_t KV, int causal, int64_t window, float theta, float factor,
                         float low, float high, int64_t orig, const float *ext, float scale,
                         float softcap);
/* pos_embedding in the decode program: y [B, d] = x + w's row at each row's position (its
 * place's, e->place; in place allowed). */
void rt_pos_row_add(rt_exec *e, const float *x, const float *w, float *y, int64_t B, int64_t d);
void rt_attention_ext_bwd(rt_exec *e, const float *qkv, const float *qn, const float *kn,
                          const float *lse, const float *y, const float *dy, float *dqkv,
                          float *dqn, float *dkn, int64_t B, int64_t T, int64_t d, int64_t H,
                          int64_t KV, int causal, int64_t window, float theta, float factor,
                          float low, float high, int64_t orig, const float *ext, float scale,
                          float softcap, const int32_t *pos);
/* out[r, :] = w[idx[r], :] for r < rows; w is [V, dim]. */
void rt_embedding_fwd(rt_exec *e, const int32_t *idx, const float *w, float *out, int64_t rows,
                      int64_t V, int64_t dim);
/* dw[idx[r], :] += dout[r, :] (deterministic: rows with the same index are added in
 * row order whatever the thread count). */
void rt_embedding_bwd(rt_exec *e, const int32_t *idx, const float *dout, float *dw, int64_t rows,
                      int64_t V, int64_t dim);

/* Counter-based uniform [0,1) for dropout: the same (key, index) always gives the same
 * number, so the backward pass regenerates the mask instead of storing it. */
static inline float rt_uniform(uint64_t key, uint64_t idx)
{
    uint64_t z = key ^ (idx * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* The element a dropout mask draws for element i of a [B, S] tensor. On one rank, i.
 * With N ranks (part = (N << 32) | rank) rank r's row q is row q * N + r of the batch
 * of N x B rows one rank would have (DistributedSampler gives rank r every N-th sample
 * from r), so N ranks draw the masks of that one rank: different on every rank, and
 * N x B trains as 1 x N B with dropout too. */
static inline uint64_t rt_drop_index(uint64_t i, uint64_t S, uint64_t part)
{
    uint64_t n = part >> 32;
    if (n <= 1)
        return i;
    uint64_t row = i / S;
    return (row * n + (part & 0xffffffffu)) * S + (i - row * S);
}

/* Activations and their derivatives, shared by every generated CPU kernel. */

/* tanh in plain float arithmetic (no libm call, so a loop over it vectorizes; within 3.5
 * units in the last place, tests/unit/test_kernels.c): tanh |x| = e / (e + 2) with
 * e = expm1(2 |x|) = 2^n (e^r - 1) + (2^n - 1), n = round(2 |x| / ln 2), r the remainder
 * (|r| <= ln 2 / 2, ln 2 in two parts), e^r - 1 its Taylor series to r^8; |x| clamped
 * at 10, where tanh is 1 in float; NaN stays NaN (through r; n is 0 then). The GPU's
 * kernels use CUDA's tanhf. */
static inline float rt_tanhf(float x)
{
    float a = x < 0.0f ? -x : x;
    a = a > 10.0f ? 10.0f : a;
    float y = a + a;
    float n = ((y > 0.0f ? y : 0.0f) * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = (y - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
    float p = r * (1.0f + r * (0.5f + r * (1.66666667e-1f + r * (4.16666667e-2f + r * (8.33333333e-3f +
              r * (1.38888889e-3f + r * (1.98412698e-4f + r * 2.48015873e-5f)))))));
    union { uint32_t i; float f; } s = {(uint32_t)((int32_t)n + 127) << 23};   /* 2^n */
    float e = s.f * p + (s.f - 1.0f);
    float t = e / (e + 2.0f);
    return x < 0.0f ? -t : t;
}
/* e^x in plain float arithmetic, as rt_tanhf (within 1.5 units in the last place,
 * tests/unit/test_kernels.c): 2^n e^r with n = round(x / ln 2), r the remainder, e^r
 * Cephes' minimax polynomial for expf; x clamped to [-104, 89], past which e^x is 0 or
 * inf in float; 2^n applied in two halves, so results below FLT_MIN round once, as
 * subnormals; NaN stays NaN (n is 0 then). The GPU's kernels use CUDA's expf. */
static inline float rt_expf(float x)
{
    float c = x < -104.0f ? -104.0f : x > 89.0f ? 89.0f : x;
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = (c - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
    float p = r * r * (5.0000001201e-1f + r * (1.6666665459e-1f + r * (4.1665795894e-2f +
              r * (8.3334519073e-3f + r * (1.3981999507e-3f + r * 1.9875691500e-4f))))) + r + 1.0f;
    int32_t k = n == n ? (int32_t)n : 0, k1 = k / 2, k2 = k - k1;
    union { uint32_t i; float f; } s1 = {(uint32_t)(k1 + 127) << 23}, s2 = {(uint32_t)(k2 + 127) << 23};
    return p * s1.f * s2.f;
}
static inline float rt_sigmoidf(float x) { return 1.0f / (1.0f + rt_expf(-x)); }
/* a max pool's padding (N_PAD): its border's value, and whether a padded plane's element
 * at (row, column), each less the border, lies inside the plane [rows, cols] */
static inline float rt_inf(void) { return INFINITY; }
static inline int rt_inside(int64_t r, int64_t c, int64_t rows, int64_t cols)
{
    return r >= 0 && r < rows && c >= 0 && c < cols;
}
static inline float rt_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static inline float rt_gelu_bwd(float x, float dy)
{
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;
    return dy * (cdf + x * pdf);
}
static inline float rt_gelu_tanh(float x)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + rt_tanhf(u));
}
static inline float rt_gelu_tanh_bwd(float x, float dy)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    float t = rt_tanhf(u);
    float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}
static inline float rt_silu(float x) { return x / (1.0f + rt_expf(-x)); }
static inline float rt_silu_bwd(float x, float dy)
{
    float s = rt_sigmoidf(x);
    return dy * s * (1.0f + x * (1.0f - s));
}

#endif
