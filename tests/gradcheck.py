"""Finite-difference gradient checks, one small model per op and loss.

Each case is a tiny spec on random f32 data. The trainer's developer option
--gradcheck compares, for every parameter tensor, the analytic directional
derivative <grad, v> along a random unit direction v with the central difference
(L(w + h v) - L(w - h v)) / 2h, h = 1e-2. The kernels run in float32 (the loss is
summed in double), so the difference quotient carries an error of about
eps32 * |L| / h ~ 1e-5, and the truncation error is O(h^2 * |L'''|) ~ 1e-4: a
relative tolerance of 2e-2 (floor 1e-2) leaves a wide margin for those and still
catches any wrong rule (a missing factor or sign gives errors of order 1).
Ops without parameters are checked through the parameters upstream of them.

That check has blind spots: its floor of 1e-2 on the error's denominator passes a
tensor whose directional derivative is below 1e-4 whatever its sign, and one random
direction sees little of a tensor's gradient (9 of gpt_block's 28 tensors passed
with their gradient's sign flipped, 11 with it doubled). So the test also judges by
itself, from outside the trainer, every case but dropout and drop_path (whose
evaluation has no mask): the gradient g is one SGD step's change (lr 1, no decay or momentum, the 16
rows as two accumulated batches of 8; the weights before from a step at lr 0), the
loss at w +- h v is `--eval` of those weights on the same 16 rows, and for each
tensor the central difference along v must agree with <g, v> within 2e-2 of |g|
(floor 1e-3, well above the float32 noise of ~1e-5) along g / |g| itself (a flipped
sign is off by 2 |g|, a doubled gradient by |g|), two random unit directions, and
every coordinate of tensors of at most 16 elements (tests/MUTATIONS.md). Batchnorm's
cases are judged in training mode: the gradient from one batch of 16, the loss the
first step's training loss at lr 0 (the batch's statistics), their running statistics
skipped (no gradient).
"""
import json, os, subprocess, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "gradcheck")
os.makedirs(OUT, exist_ok=True)

rng = np.random.default_rng(7)

def data(name, shape, classes=None, target_shape=None, x_vocab=None, ignore=None):
    if x_vocab:
        x = rng.integers(0, x_vocab, size=(16,) + tuple(shape)).astype(np.int32)
    else:
        x = rng.standard_normal((16,) + tuple(shape)).astype(np.float32)
    np.save(os.path.join(OUT, name + "_x.npy"), x)
    if classes:
        y = rng.integers(0, classes, size=(16,) + tuple(target_shape or ())).astype(np.int32)
        if ignore is not None:
            # the loss's ignore_index on a third of the targets, the same ones in both
            # halves (the two accumulated batches count as many: their two means are
            # then the mean of all 16 rows, which --eval computes)
            drop = rng.random(y[:8].shape) < 0.35
            y[:8][drop] = ignore
            y[8:][drop] = ignore
    else:
        y = rng.standard_normal((16,) + tuple(target_shape)).astype(np.float32)
    np.save(os.path.join(OUT, name + "_y.npy"), y)

def case(name, in_shape, layers, loss="cross_entropy", classes=4, target_shape=(), x_dtype="f32",
         x_vocab=None, init=None, loss_keys=None, train=None):
    data(name, in_shape, classes if loss == "cross_entropy" else None, target_shape, x_vocab,
         (loss_keys or {}).get("ignore_index"))
    y = {"shape": list(target_shape), "dtype": "i32", "classes": classes} if loss == "cross_entropy" \
        else {"shape": list(target_shape), "dtype": "f32"}
    spec = {
        "trainc": 1,
        "model": {"name": "gc_" + name,
                  "inputs": {"x": {"shape": list(in_shape), "dtype": x_dtype}, "y": y},
                  "layers": layers,
                  "loss": {"op": loss, "target": "y"}},
        "train": {"data": {"train": {"x": name + "_x.npy", "y": name + "_y.npy"}},
                  "batch_size": 8, "epochs": 1, "loader": {"shuffle": False, "workers": 0}},
    }
    if init:
        spec["model"]["init"] = init
    if loss_keys:
        spec["model"]["loss"].update(loss_keys)
    if train:
        spec["train"].update(train)
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return name, path

L = lambda n, **k: dict({"op": "linear", "out": n}, **k)
cases = [
    case("linear", [8], [L(6), L(4)]),
    case("linear_nobias", [8], [L(6, bias=False), L(4)]),
    # train.lora: adapters (rank 2, alpha 3) on the two hidden linears, a bias of the
    # model's trained too; checked from weights one SGD step on (B is zero at first)
    case("lora", [8], [L(6), {"op": "relu"}, L(5), L(4)],
         train={"lora": {"rank": 2, "alpha": 3, "train": ["2.bias"]}}),
    case("relu", [8], [L(6), {"op": "relu"}, L(4)]),
    case("gelu", [8], [L(6), {"op": "gelu"}, L(4)]),
    case("gelu_tanh", [8], [L(6), {"op": "gelu", "approximate": "tanh"}, L(4)]),
    case("silu", [8], [L(6), {"op": "silu"}, L(4)]),
    case("tanh", [8], [L(6), {"op": "tanh"}, L(4)]),
    case("sigmoid", [8], [L(6), {"op": "sigmoid"}, L(4)]),
    case("dropout", [8], [L(6), {"op": "dropout", "p": 0.3}, L(4)]),
    case("layernorm", [8], [L(6), {"op": "layernorm"}, L(4)]),
    case("layernorm_rank2", [3, 8], [L(6), {"op": "layernorm", "eps": 1e-3}, {"op": "flatten"}, L(4)]),
    case("conv2d", [3, 7, 7], [{"op": "conv2d", "out": 4, "kernel": 3, "stride": 2, "padding": 1},
                               {"op": "conv2d", "out": 2, "kernel": 2}, {"op": "flatten"}, L(4)]),
    case("conv2d_nobias", [2, 5, 5], [{"op": "conv2d", "out": 3, "kernel": 3, "bias": False},
                                      {"op": "tanh"}, {"op": "flatten"}, L(4)]),
    case("maxpool2d", [2, 6, 6], [{"op": "conv2d", "out": 3, "kernel": 3, "padding": 1},
                                  {"op": "maxpool2d", "kernel": 2}, {"op": "flatten"}, L(4)]),
    case("maxpool2d_overlap", [2, 7, 7], [{"op": "conv2d", "out": 3, "kernel": 3},
                                          {"op": "maxpool2d", "kernel": 3, "stride": 2}, {"op": "flatten"}, L(4)]),
    # padding: the border -inf, never the maximum (a ResNet's stem: 3, stride 2, padding 1)
    case("maxpool2d_padding", [2, 7, 7], [{"op": "conv2d", "out": 3, "kernel": 3, "padding": 1},
                                          {"op": "maxpool2d", "kernel": 3, "stride": 2, "padding": 1},
                                          {"op": "flatten"}, L(4)]),
    case("maxpool2d_padding_even", [2, 6, 5], [{"op": "conv2d", "out": 2, "kernel": 1},
                                               {"op": "maxpool2d", "kernel": 2, "padding": 1},
                                               {"op": "flatten"}, L(4)]),
    case("avgpool2d", [2, 6, 6], [{"op": "conv2d", "out": 3, "kernel": 3, "padding": 1},
                                  {"op": "avgpool2d", "kernel": 2}, {"op": "flatten"}, L(4)]),
    case("flatten", [2, 3, 3], [{"op": "conv2d", "out": 2, "kernel": 1}, {"op": "flatten"}, L(4)]),
    case("tokens", [2, 3, 4], [{"op": "conv2d", "out": 3, "kernel": 1}, {"op": "tokens"}, L(5),
                               {"op": "tanh"}, {"op": "flatten"}, L(4)]),
    case("tokens_rank2", [3, 5], [L(6), {"op": "tokens"}, {"op": "tanh"}, {"op": "flatten"}, L(4)]),
    # dropout's backward loop must not run inside tokens' transposing one (its mask is
    # a function of the element's number)
    case("dropout_tokens", [3, 5], [L(6), {"op": "tokens"}, {"op": "dropout", "p": 0.5}, {"op": "tanh"},
                                    {"op": "flatten"}, L(4)]),
    case("untokens", [6, 4], [L(5), {"op": "tanh"}, {"op": "untokens", "height": 2},
                              {"op": "conv2d", "out": 2, "kernel": 2}, {"op": "flatten"}, L(4)]),
    case("layer_scale", [3, 5], [L(6), {"op": "tanh"}, {"op": "layer_scale", "init_value": 0.7},
                                 {"op": "tanh"}, {"op": "flatten"}, L(4)]),
    # ConvNeXt's block in small: a depthwise conv, then channels last (tokens), a
    # layernorm, the MLP, layer_scale, channels first again (untokens), the residual
    case("convnext_block", [4, 3, 4], [{"op": "conv2d", "out": 4, "kernel": 1},
        {"op": "residual", "name": "block", "body": [
            {"op": "conv2d", "out": 4, "kernel": 3, "padding": 1, "groups": 4}, {"op": "tokens"},
            {"op": "layernorm", "eps": 1e-6}, L(8), {"op": "gelu"}, L(4),
            {"op": "layer_scale", "init_value": 0.5}, {"op": "untokens", "height": 3}]},
        {"op": "tokens"}, {"op": "token_mean"}, L(4)]),
    # ConvNeXt V2's global response normalization over tokens [T, C] (STEPPED: its
    # weight and bias from a step of their own)
    case("grn", [5, 6], [L(6), {"op": "tanh"}, {"op": "grn", "name": "grn"}, {"op": "tanh"},
                         {"op": "flatten"}, L(4)]),
    case("convnext_v2_block", [4, 3, 4], [{"op": "conv2d", "out": 4, "kernel": 1},
        {"op": "residual", "name": "block", "body": [
            {"op": "conv2d", "out": 4, "kernel": 3, "padding": 1, "groups": 4}, {"op": "tokens"},
            {"op": "layernorm", "eps": 1e-6}, L(8), {"op": "gelu"}, {"op": "grn"}, L(4),
            {"op": "untokens", "height": 3}]},
        {"op": "tokens"}, {"op": "token_mean"}, L(4)]),
    case("token_mean", [5, 8], [L(6), {"op": "tanh"}, {"op": "token_mean"}, L(4)]),
    # a vision transformer in small: patches, tokens, positions, attention without a
    # causal mask, the mean over the tokens
    case("vit", [2, 6, 4], [{"op": "conv2d", "out": 8, "kernel": 2, "stride": 2}, {"op": "tokens"},
                            {"op": "pos_embedding", "max_len": 6},
                            {"op": "residual", "name": "block", "body": [{"op": "layernorm"},
                                                        {"op": "attention", "heads": 2, "causal": False}]},
                            {"op": "token_mean"}, L(4)]),
    # the class token: a learned row before the tokens, the head reading it alone
    case("cls_token", [3, 5], [L(6), {"op": "cls_token", "name": "cls"}, {"op": "tanh"}, {"op": "flatten"},
                               L(4)]),
    case("first_token", [3, 5], [L(6), {"op": "tanh"}, {"op": "first_token"}, L(4)]),
    # a decoder's sequence classifier: its last token read alone
    case("last_token", [3, 5], [L(6), {"op": "tanh"}, {"op": "last_token"}, L(4)]),
    # a reward model's head: a pair of texts in one row, each half's last row, a score
    # each, the two scores as the logits of which is chosen
    case("last_token_pair", [6, 5], [L(6), {"op": "tanh"}, {"op": "last_token", "segments": 2},
                                     L(1, bias=False), {"op": "flatten"}], classes=2),
    case("decoder_last", [4, 6], [L(8), {"op": "residual", "name": "block", "body": [{"op": "rmsnorm"},
                                  {"op": "attention", "heads": 2, "rope": {"theta": 10000}}]},
                                  {"op": "rmsnorm"}, {"op": "last_token"}, L(4, bias=False)]),
    case("vit_cls", [2, 6, 4], [{"op": "conv2d", "out": 8, "kernel": 2, "stride": 2}, {"op": "tokens"},
                                {"op": "cls_token", "name": "cls"}, {"op": "pos_embedding", "max_len": 7},
                                {"op": "residual", "name": "block", "body": [{"op": "layernorm"},
                                                            {"op": "attention", "heads": 2, "causal": False}]},
                                {"op": "layernorm"}, {"op": "first_token"}, L(4)]),
    case("cross_entropy_seq", [5, 8], [L(6), {"op": "relu"}, L(4)], target_shape=(5,)),
    case("mse", [8], [L(6), {"op": "sigmoid"}, L(3)], loss="mse", target_shape=(3,)),
    case("rmsnorm", [8], [L(6), {"op": "rmsnorm"}, L(4)]),
    case("rmsnorm_rank2", [3, 8], [L(6), {"op": "rmsnorm", "eps": 1e-3}, {"op": "flatten"}, L(4)]),
    case("squared_relu", [8], [L(6), {"op": "squared_relu"}, L(4)]),
    # batchnorm in training mode (the batch's statistics): checked by the test from the
    # training loss of one step at lr 0, not from --eval (which uses the running ones)
    case("batchnorm2d", [2, 5, 5], [{"op": "conv2d", "out": 3, "kernel": 3, "bias": False},
                                    {"op": "batchnorm", "momentum": 0.2, "eps": 1e-3},
                                    {"op": "tanh"}, {"op": "flatten"}, L(4)]),
    case("batchnorm1d", [8], [L(6), {"op": "batchnorm"}, {"op": "tanh"}, L(5),
                              {"op": "batchnorm", "affine": False}, L(4)]),
]
# glu: a linear of 2h = 12 (the gate rows, then the up rows), each activation
cases += [case("glu_" + act, [8], [L(12), {"op": "glu", "act": act}, L(4)])
          for act in ("silu", "gelu", "gelu_tanh", "sigmoid", "relu")]
TRAIN_MODE = {"batchnorm2d", "batchnorm1d"}
WHOLE_BATCH = {"moe_aux"}   # (below) the gradient of one batch of 16, not two of 8
# checked from the weights one SGD step on, at this lr: lora's adapters (B is zero at
# first) and grn's weight and bias (zeros at first, as ConvNeXt V2's, which leave the
# norms' part of its input gradient untried; a long step makes them large)
STEPPED = {"lora": 1, "grn": 20, "convnext_v2_block": 40}
# token models: x holds ids in [0, 7), y the next ids
E = lambda **k: dict({"op": "embedding", "name": "wte", "vocab": 7, "dim": 6, "input": "x"}, **k)
tok = lambda name, layers, **k: case(name, [5], layers, classes=7, target_shape=(5,), x_dtype="i32",
                                     x_vocab=7, **k)
cases += [
    tok("embedding", [E(), L(7)]),
    tok("pos_embedding", [E(), {"op": "pos_embedding", "max_len": 8}, L(7)]),
    tok("attention_causal", [E(), {"op": "attention", "heads": 2}, L(7)]),
    tok("attention_full", [E(), {"op": "attention", "heads": 3, "causal": False}, L(7)]),
    # attention's Llama-family options, each alone and all together (hd 4: rope pairs
    # dims (0, 2) and (1, 3); all together heads 6 wide, where the llama3 scaling with a
    # short original context smooths one frequency and divides the other two by the factor)
    tok("attention_gqa", [E(dim=8), {"op": "attention", "heads": 4, "kv_heads": 2}, L(7)]),
    tok("attention_nobias", [E(), {"op": "attention", "heads": 2, "bias": False}, L(7)]),
    tok("attention_bias_qkv", [E(dim=8), {"op": "attention", "heads": 4, "kv_heads": 2, "bias": "qkv",
                                          "rope": {"theta": 10000}}, L(7)]),
    tok("attention_rope", [E(dim=8), {"op": "attention", "heads": 2, "rope": {"theta": 10000}}, L(7)]),
    tok("attention_qk_norm", [E(dim=8), {"op": "attention", "heads": 2, "qk_norm": True}, L(7)]),
    tok("attention_window", [E(), {"op": "attention", "heads": 2, "window": 2}, L(7)]),
    # head_dim apart from d / heads: the core 3 x 6 = 18 wide over d 8, GPT-2's core
    tok("attention_head_dim", [E(dim=8), {"op": "attention", "heads": 3, "head_dim": 6}, L(7)]),
    tok("attention_llama", [E(dim=8), {"op": "attention", "heads": 2, "kv_heads": 1, "bias": False,
                                       "rope": {"theta": 10000, "scaling": {
                                           "rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                           "high_freq_factor": 4, "original_max_position_embeddings": 8}},
                                       "qk_norm": True, "window": 3, "head_dim": 6}, L(7)]),
    # named: unnamed, its tanh would be "2" like the head (an error, SPEC.md section 2)
    tok("residual", [E(), {"op": "residual", "name": "r", "body": [{"op": "layernorm"}, L(6), {"op": "tanh"}]}, L(7)]),
    tok("repeat", [E(), {"op": "repeat", "name": "h", "count": 2,
                         "body": [{"op": "residual", "body": [L(6, name="fc"), {"op": "gelu", "approximate": "tanh"}]}]}, L(7)]),
    tok("tie", [E(), {"op": "layernorm"}, {"op": "linear", "tie": "wte", "bias": False}]),
    # the residual's gradient folded into the rmsnorm backward (fusion.c's layernorm-sums)
    tok("rmsnorm_residual", [E(), {"op": "residual", "name": "r", "body": [{"op": "rmsnorm"}, L(6), {"op": "tanh"}]}, L(7)]),
    tok("llama_block", [E(), {"op": "repeat", "name": "h", "count": 2, "body": [
                            {"op": "residual", "body": [{"op": "rmsnorm", "name": "ln_1"}, {"op": "attention", "name": "attn", "heads": 2}]},
                            {"op": "residual", "body": [{"op": "rmsnorm", "name": "ln_2"}, L(16, name="fc", bias=False),
                                                        {"op": "glu"}, L(6, name="proj", bias=False)]}]},
                        {"op": "rmsnorm", "name": "ln_f"}, L(7, bias=False)]),
    tok("gpt_block", [E(), {"op": "pos_embedding", "name": "wpe", "max_len": 5},
                      {"op": "repeat", "name": "h", "count": 2, "body": [
                          {"op": "residual", "body": [{"op": "layernorm", "name": "ln_1"}, {"op": "attention", "name": "attn", "heads": 2}]},
                          {"op": "residual", "body": [{"op": "layernorm", "name": "ln_2"}, L(12, name="fc"),
                                                      {"op": "gelu", "approximate": "tanh"}, L(6, name="proj")]}]},
                      {"op": "layernorm", "name": "ln_f"}, {"op": "linear", "tie": "wte", "bias": False}], init="gpt2"),
]
# a vocabulary of 1030 (>= 1024, not a multiple of 64): the logits and their gradient
# are stored with rows 1088 apart (compiler/ops/loss.c), which the head's GEMMs and the
# loss honour; in training the head and loss run as one call over chunks of 2, 2 and 1
# of each sample's 5 rows (TRAINC_HEAD_CHUNKS' default 4: ops/loss.c's chunk_head)
cases.append(case("padded_vocab", [5], [
    {"op": "embedding", "name": "wte", "vocab": 1030, "dim": 6, "input": "x"}, {"op": "layernorm"},
    {"op": "linear", "tie": "wte", "bias": False}], classes=1030, target_shape=(5,), x_dtype="i32",
    x_vocab=1030))
# and the padded weight tied a second time, in the middle (its GEMMs over the true rows)
cases.append(case("padded_vocab_tied_twice", [5], [
    {"op": "embedding", "name": "wte", "vocab": 1030, "dim": 6, "input": "x"},
    {"op": "linear", "name": "mid", "tie": "wte", "bias": False}, {"op": "gelu"},
    {"op": "linear", "name": "down", "out": 6}, {"op": "layernorm"},
    {"op": "linear", "tie": "wte", "bias": False}], classes=1030, target_shape=(5,), x_dtype="i32",
    x_vocab=1030))
# the chunked head untied (a Llama's), with label smoothing: rt_head_cross_entropy's
# smoothed loss and its own weight's gradient
cases.append(case("head_chunks_untied_ls", [5], [
    {"op": "embedding", "name": "wte", "vocab": 1030, "dim": 6, "input": "x"}, {"op": "rmsnorm"},
    {"op": "linear", "out": 1030, "bias": False}], classes=1030, target_shape=(5,), x_dtype="i32",
    x_vocab=1030, loss_keys={"label_smoothing": 0.1}))
# cross_entropy's ignore_index: the ignored rows' gradient 0, the others' mean over the
# rows counted; through the chunked head (its count over all the chunks) and smoothed
cases.append(case("ignore_index", [5, 8], [L(6), {"op": "tanh"}, L(4)], target_shape=(5,),
                  loss_keys={"ignore_index": -100}))
cases.append(case("head_chunks_ignore_ls", [5], [
    {"op": "embedding", "name": "wte", "vocab": 1030, "dim": 6, "input": "x"}, {"op": "rmsnorm"},
    {"op": "linear", "out": 1030, "bias": False}], classes=1030, target_shape=(5,), x_dtype="i32",
    x_vocab=1030, loss_keys={"ignore_index": 7, "label_smoothing": 0.1}))
# modern CNNs: label smoothing
cases.append(case("label_smoothing", [8], [L(6), {"op": "tanh"}, L(4)],
                  loss_keys={"label_smoothing": 0.2}))
cases.append(case("label_smoothing_seq", [5, 8], [L(6), {"op": "relu"}, L(4)], target_shape=(5,),
                  loss_keys={"label_smoothing": 1.0}))
# modern CNNs: a residual whose shortcut is a strided 1x1 projection (a ResNet's)
Cv = lambda out, k, **kw: dict({"op": "conv2d", "out": out, "kernel": k}, **kw)
cases.append(case("residual_shortcut", [3, 6, 6], [
    Cv(4, 3, padding=1), {"op": "residual", "name": "b", "body": [
        Cv(5, 3, stride=2, padding=1, bias=False), {"op": "relu"}, Cv(5, 3, padding=1)],
        "shortcut": [Cv(5, 1, stride=2, bias=False)]}, {"op": "flatten"}, L(4)]))
# in a repeat: unnamed residuals whose shortcut layers are named h.N.shortcut.0
cases.append(case("residual_shortcut_repeat", [3, 5, 5], [
    Cv(4, 3, padding=1), {"op": "repeat", "name": "h", "count": 2, "body": [
        {"op": "residual", "body": [Cv(4, 3, padding=1, groups=4), {"op": "tanh"}],
         "shortcut": [Cv(4, 1, bias=False)]}]}, {"op": "flatten"}, L(4)]))
# grouped and depthwise convolution (conv_grouped.c's direct loops)
cases.append(case("conv2d_groups", [4, 6, 6], [Cv(6, 3, groups=2, padding=1), {"op": "tanh"},
                                               Cv(4, 2, stride=2, groups=2, bias=False),
                                               {"op": "flatten"}, L(4)]))
cases.append(case("conv2d_depthwise", [3, 7, 7], [Cv(4, 1), Cv(8, 3, stride=2, padding=1, groups=4),
                                                  {"op": "tanh"}, Cv(8, 3, groups=8, bias=False),
                                                  {"op": "flatten"}, L(4)]))
# transposed convolution (a DCGAN generator's upsampling): stride 1 and 2, padding,
# output_padding, with and without a bias
Ct = lambda out, k, **kw: dict({"op": "conv_transpose2d", "out": out, "kernel": k}, **kw)
cases.append(case("conv_transpose2d", [3, 3, 3], [Ct(4, 3), {"op": "tanh"},
                                                  Ct(2, 3, stride=2, padding=1, output_padding=1),
                                                  {"op": "flatten"}, L(4)]))
cases.append(case("conv_transpose2d_nobias", [2, 4, 4], [Ct(3, 4, stride=2, padding=1, bias=False),
                                                         {"op": "tanh"}, Cv(2, 3, stride=2),
                                                         {"op": "flatten"}, L(4)]))
# leaky_relu: the default slope and a custom one
cases.append(case("leaky_relu", [8], [L(6), {"op": "leaky_relu"}, L(4)]))
cases.append(case("leaky_relu_slope", [8], [L(6), {"op": "leaky_relu", "negative_slope": 0.2}, L(4)]))
# scale by a constant (Gemma's embedding times sqrt(d)), alone and in a Gemma-shaped model:
# the scaled embedding, heads wider than d / heads, GeGLU, the head tied
cases.append(case("scale", [8], [L(6), {"op": "scale", "by": -2.5}, {"op": "tanh"}, L(4)]))
cases.append(tok("gemma_block", [E(), {"op": "scale", "by": 6 ** 0.5}, {"op": "repeat", "name": "h", "count": 2, "body": [
    {"op": "residual", "body": [{"op": "rmsnorm", "name": "ln_1"},
                                {"op": "attention", "name": "attn", "heads": 2, "kv_heads": 1, "head_dim": 4,
                                 "bias": False, "rope": {"theta": 10000}}]},
    {"op": "residual", "body": [{"op": "rmsnorm", "name": "ln_2"}, L(16, name="fc", bias=False),
                                {"op": "glu", "act": "gelu_tanh"}, L(6, name="proj", bias=False)]}]},
    {"op": "rmsnorm", "name": "ln_f"}, {"op": "linear", "tie": "wte", "bias": False}]))

# interleave: in a repeat, the second of each two has no window and its own rope theta
# (Gemma 3's global layers); the third of three no rope (SmolLM3's). (New cases go last:
# each case's data comes from one generator in order, so a case put earlier changes the
# data of those after it.)
cases += [
    tok("attention_interleave", [E(dim=8), {"op": "repeat", "name": "h", "count": 2, "body": [
        {"op": "attention", "name": "attn", "heads": 2, "window": 2, "rope": {"theta": 10000},
         "interleave": {"every": 2, "window": None, "rope": {"theta": 100}}}]}, L(7)]),
    tok("attention_nope", [E(dim=8), {"op": "repeat", "name": "h", "count": 3, "body": [
        {"op": "attention", "name": "attn", "heads": 2, "kv_heads": 1, "rope": {"theta": 10000},
         "interleave": {"every": 3, "rope": None}}]}, L(7)]),
    # rope with linear scaling (every frequency divided by the factor)
    tok("attention_rope_linear", [E(dim=8), {"op": "attention", "heads": 2, "rope": {
        "theta": 100, "scaling": {"rope_type": "linear", "factor": 4}}}, L(7)]),
    # (cases added from here on draw their data after the others': those stay as they were)
    # the scores' factor given (0.9 where 1 / sqrt(4) would be 0.5), nothing else on
    tok("attention_scale", [E(dim=8), {"op": "attention", "heads": 2, "scale": 0.9}, L(7)]),
    # soft-capped scores (cap tanh(s / cap)) at a cap that bends them, with a window
    tok("attention_softcap", [E(dim=8), {"op": "attention", "heads": 2, "kv_heads": 1, "scale": 1.5,
                                         "softcap": 1.0, "window": 3}, L(7)]),
    # longrope (Phi-3's 128k models): the long divisors past the original context of 2,
    # the scores times its attention factor sqrt(1 + ln 2 / ln 2) squared
    tok("attention_longrope", [E(dim=8), {"op": "attention", "heads": 2, "rope": {
        "theta": 100, "scaling": {"rope_type": "longrope", "short_factor": [1.0, 3.0],
                                  "long_factor": [2.0, 5.0], "factor": 2,
                                  "original_max_position_embeddings": 2}}}, L(7)]),
    # a partial rope: heads 8 wide, the pairs (0, 4) and (1, 5) rotated, the others kept;
    # with GQA and qk_norm
    tok("attention_partial_rope", [E(dim=16), {"op": "attention", "heads": 2, "kv_heads": 1,
                                               "qk_norm": True, "rope": {"theta": 100, "dims": 4}},
                                   L(7)]),
    # GPT-Neo's attention: the output projection's bias alone, unscaled scores, learned
    # positions, a window on every second layer
    tok("attention_neo", [E(dim=16), {"op": "pos_embedding", "max_len": 6},
                          {"op": "repeat", "count": 2, "body": [
                              {"op": "attention", "heads": 2, "bias": "proj", "scale": 1.0,
                               "interleave": {"every": 2, "window": 2}}]}, L(7)]),
    # OLMo 2's qk_norm: one RMSNorm over all of q's heads, one over all of k's (GQA), eps
    # not the default, then a rope; and under recomputation
    tok("attention_qk_norm_all", [E(dim=16), {"op": "attention", "heads": 4, "kv_heads": 2,
                                              "qk_norm": "all_heads", "eps": 1e-5,
                                              "rope": {"theta": 100}}, L(7)]),
    # layernorms without a bias (Cohere's) and without weight and bias (OLMo's), the
    # residual's gradient folded into the second's backward
    tok("layernorm_bare", [E(), {"op": "layernorm", "bias": False}, L(6),
                           {"op": "residual", "name": "r", "body": [{"op": "layernorm", "affine": False},
                                                                   L(6)]},
                           L(7)]),
]

# the mixture of experts: every expert taken (the router's softmax alone, renormalized
# and not), then 2 of 4 (a choice the data keep away from ties: these rows' top 2 stay
# the top 2 under every perturbation the checks make)
MOE = lambda **k: dict({"op": "moe", "experts": 4, "top_k": 2, "hidden": 5}, **k)
cases += [
    tok("moe_all", [E(dim=8), MOE(top_k=4), L(7)]),
    tok("moe_all_unnormed", [E(dim=8), MOE(top_k=4, norm_topk=False, act="gelu"), L(7)]),
    tok("moe_top2", [E(dim=8), {"op": "residual", "body": [{"op": "rmsnorm"}, MOE()]}, L(7)]),
    tok("moe_top2_unnormed", [E(dim=8), MOE(norm_topk=False), L(7)]),
    # the load-balancing loss over two layers (its gradient through the probabilities;
    # the counts are constant under every perturbation the checks make). The loss of a
    # batch is not the mean of its halves' (its counts and means are the batch's), so
    # the gradient is one batch of 16's, as --eval's loss is
    tok("moe_aux", [E(dim=8), {"op": "repeat", "count": 2, "body": [
        {"op": "residual", "body": [{"op": "rmsnorm"}, MOE(aux_loss=0.5)]}]}, L(7)]),
    # a shared expert beside the routed ones: plain (DeepSeek's), and gated by the
    # sigmoid of its up weight's last row (Qwen2-MoE's)
    tok("moe_shared", [E(dim=8), MOE(shared=6), L(7)]),
    tok("moe_shared_gate", [E(dim=8), {"op": "residual", "body": [
        {"op": "rmsnorm"}, MOE(shared=6, shared_gate=True, norm_topk=False)]}, L(7)]),
]

def with_positions(name, path, pos):
    """the case's spec with the model's positions (pos [5], saved beside its data)"""
    np.save(os.path.join(OUT, name + "_pos.npy"), pos)
    spec = json.load(open(path))
    spec["model"]["inputs"]["pos"] = {"shape": [5], "dtype": "i32"}
    spec["model"]["positions"] = "pos"
    spec["train"]["data"]["train"]["pos"] = name + "_pos.npy"
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return name, path

def packed(name, layers):
    """A token case whose rows are packed: the model's positions (pos [5], each row cut
    into sequences at random places), the attention cut at their seams."""
    name, path = tok(name, layers)
    pos = np.zeros((16, 5), np.int32)
    for r in range(16):
        for t in range(1, 5):
            pos[r, t] = 0 if rng.random() < 0.35 else pos[r, t - 1] + 1
    return with_positions(name, path, pos)

cases += [
    packed("attention_packed", [E(dim=8), {"op": "attention", "heads": 2, "kv_heads": 1,
                                           "rope": {"theta": 10000}}, L(7)]),
    packed("attention_packed_window", [E(dim=8), {"op": "attention", "heads": 2, "window": 2,
                                                  "qk_norm": True, "bias": False}, L(7)]),
    # without a causal mask: each token sees its own sequence whole (an encoder's padded
    # rows: the padding a sequence of its own), in place and stacked (GQA, rope)
    packed("attention_packed_bidir", [E(dim=8), {"op": "attention", "heads": 2,
                                                 "causal": False}, L(7)]),
    packed("attention_packed_bidir_gqa", [E(dim=8), {"op": "attention", "heads": 2, "kv_heads": 1,
                                                     "causal": False, "rope": {"theta": 10000}},
                                          L(7)]),
    # GPT-2's learned position rows, each token's position's
    packed("pos_embedding_packed", [E(dim=8), {"op": "pos_embedding", "max_len": 6},
                                    {"op": "attention", "heads": 2}, L(7)]),
]

def span_case(name, padded):
    """An extractive question answerer in small: an encoder, the start and end logits
    (span), y [2] the answer's first and last token of 5. Padded: the model's positions,
    each row's text 2 to 5 tokens and the padding after it (a sequence of its own, whose
    logits span holds at -1e30), the answers inside the text."""
    layers = [E(dim=8), {"op": "attention", "heads": 2, "causal": False}, L(2), {"op": "span"}]
    name, path = case(name, [5], layers, classes=5, target_shape=(2,), x_dtype="i32", x_vocab=7)
    if not padded:
        return name, path
    n = rng.integers(2, 6, size=16)
    pos = np.array([list(range(k)) + list(range(5 - k)) for k in n], np.int32)
    y = np.array([sorted(rng.integers(0, k, size=2)) for k in n], np.int32)
    np.save(os.path.join(OUT, name + "_y.npy"), y)
    return with_positions(name, path, pos)

cases += [span_case("span", False), span_case("span_padded", True)]

def fd_check(name, path):
    """The test's own finite differences; a list of failure lines."""
    d = os.path.join(OUT, name + "_fd")
    os.makedirs(d, exist_ok=True)
    exe = os.path.join(d, "trainer")
    subprocess.run([TRAINC, "build", path, "-o", exe], check=True, capture_output=True, timeout=120)
    x, y = (os.path.join(OUT, f"{name}_{k}.npy") for k in "xy")
    common = ["--threads", "1", "--quiet", "--set", "batch_size=16", "--set", f"data.val.x={x}",
              "--set", f"data.val.y={y}", "--set", "optimizer.type=sgd", "--set", "max_steps=1",
              "--set", "checkpoint=null"]
    for k in ("pos", "ref", "t", "label"):   # (packed rows' positions, dpo's reference,
                                             # orpo's sft target, kto's label)
        extra = os.path.join(OUT, f"{name}_{k}.npy")
        if os.path.exists(extra):
            common += ["--set", f"data.val.{k}={extra}"]
    def trainer(*args):
        p = subprocess.run([exe, *common, *args], capture_output=True, text=True, timeout=60)
        if p.returncode:
            raise SystemExit(f"{name}: trainer {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
        return p.stdout
    trainer("--set", "optimizer.lr=%d" % STEPPED.get(name, 0), "--out", os.path.join(d, "w0"))
    w0_path = os.path.join(d, "w0", "model.safetensors")
    # the gradient of the 16 rows as two accumulated batches of 8: the weight
    # gradients' GEMMs must add to what the first batch left (batchnorm: one batch of
    # 16, whose statistics the training loss below normalizes with)
    acc = [] if name in TRAIN_MODE | WHOLE_BATCH else ["--set", "batch_size=8", "--set", "accumulate=2"]
    trainer("--set", "optimizer.lr=1", *acc, "--init", w0_path, "--out", os.path.join(d, "w1"))
    w0 = st_check.load(w0_path)
    w1 = st_check.load(os.path.join(d, "w1", "model.safetensors"))
    pert = os.path.join(d, "pert.safetensors")
    def loss(t, w):
        st_check.save(pert, dict(w0, **{t: w.astype(w0[t].dtype)}))
        if name in TRAIN_MODE:   # the first step's training loss, at lr 0
            run = os.path.join(d, "pert_run")
            trainer("--set", "optimizer.lr=0", "--set", "log_every=1", "--init", pert, "--out", run)
            return next(r["loss"] for r in run_log.records(run) if r.get("step") == 1 and "loss" in r)
        out = trainer("--eval", "--init", pert)
        return json.loads(out.strip().splitlines()[-1])["val_loss"]
    dirs_rng = np.random.default_rng(11)
    bad = []
    for t in w0:
        if w0[t].dtype == np.int64 or "running_" in t:
            continue   # batchnorm's state: no gradient
        if name == "lora" and ".lora_" not in t and t != "2.bias":
            continue   # lora's frozen tensors: no gradient (lora_parity.py: unchanged)
        base = w0[t].astype(np.float64)
        g = base - w1[t].astype(np.float64)
        gn = float(np.linalg.norm(g))
        dirs = [("g/|g|", g / gn)] if gn > 0 else []
        for k in range(2):
            v = dirs_rng.standard_normal(g.shape)
            dirs.append((f"random {k + 1}", v / np.linalg.norm(v)))
        if g.size <= 16:   # every coordinate instead of random directions
            dirs = dirs[:1]
            for k in range(g.size):
                v = np.zeros(g.size); v[k] = 1
                dirs.append((f"element {k}", v.reshape(g.shape)))
        worst = (0, "")
        for what, v in dirs:
            an = float((g * v).sum())
            # a step across a kink of relu or maxpool spoils the larger h; a correct
            # gradient agrees at one of them, a wrong one at none (1e-4 for a kink
            # closer than 1e-3 to the point, which the data drawn may put there; its
            # rounding noise, about 1e-3 of |g|, stays far below FD_TOL)
            best = np.inf
            for h in (1e-2, 1e-3, 1e-4):
                fd = (loss(t, base + h * v) - loss(t, base - h * v)) / (2 * h)
                best = min(best, abs(fd - an) / max(gn, FD_FLOOR))
                if best <= FD_TOL:
                    break
            worst = max(worst, (best, what))
        print(f"     {t:28s} |g| {gn:.2e}  {len(dirs):2d} directions, worst error {worst[0]:.1e} of |g| ({worst[1]})")
        if worst[0] > FD_TOL:
            bad.append(f"{name}: {t}: along {worst[1]} the difference quotient is {worst[0]:.2g} |g| from <g, v>")
    return bad

def dpo_case(name="dpo"):
    """dpo over pairs of two 3-row answers (logits [6, 4], the chosen answer's rows first),
    a third of the targets ignored (-100), the reference's log-probabilities an input"""
    name, path = case(name, [6, 5], [L(6), {"op": "tanh"}, L(4)], target_shape=(6,),
                      loss_keys={"ignore_index": -100})
    spec = json.load(open(path))
    spec["model"]["inputs"]["ref"] = {"shape": [2], "dtype": "f32"}
    spec["model"]["loss"] = {"op": "dpo", "target": "y", "reference": "ref", "beta": 0.5}
    spec["train"]["data"]["train"]["ref"] = name + "_ref.npy"
    np.save(os.path.join(OUT, name + "_ref.npy"), (-3 + rng.standard_normal((16, 2))).astype(np.float32))
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def simpo_case(name="simpo"):
    """simpo over the same pairs: each answer's mean log-probability, no reference"""
    name, path = case(name, [6, 5], [L(6), {"op": "tanh"}, L(4)], target_shape=(6,),
                      loss_keys={"ignore_index": -100})
    spec = json.load(open(path))
    spec["model"]["loss"] = {"op": "simpo", "target": "y", "beta": 2.0, "gamma": 0.3}
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def cdpo_case():
    """dpo with label smoothing (conservative DPO)"""
    name, path = dpo_case("cdpo")
    spec = json.load(open(path))
    spec["model"]["loss"]["label_smoothing"] = 0.2
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def dpo_type_case(loss_type, more=None):
    """dpo with another loss type (TRL's DPOConfig.loss_type; robust with label smoothing,
    apo_zero with rpo_alpha's cross entropy)"""
    name, path = dpo_case("dpo_" + loss_type)
    spec = json.load(open(path))
    spec["model"]["loss"].update(loss_type=loss_type, **(more or {}))
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def ipo_case():
    """ipo over the same pairs: IPO's square over the answers' means"""
    name, path = dpo_case("ipo")
    spec = json.load(open(path))
    spec["model"]["loss"]["op"] = "ipo"
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def orpo_case(name="orpo"):
    """orpo over the same pairs: the odds ratio of the answers' means, and the chosen
    answers' cross entropy over the batch's counted rows"""
    name, path = case(name, [6, 5], [L(6), {"op": "tanh"}, L(4)], target_shape=(6,),
                      loss_keys={"ignore_index": -100})
    spec = json.load(open(path))
    spec["model"]["loss"] = {"op": "orpo", "target": "y", "beta": 0.5}
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def orpo_sft_case():
    """orpo with an sft target: the chosen text's rows the answer's targets leave out
    (the prompt's) count in its supervised term, and in no log-probability"""
    name, path = orpo_case("orpo_sft")
    spec = json.load(open(path))
    spec["model"]["inputs"]["t"] = {"shape": [3], "dtype": "i32", "classes": 4}
    spec["model"]["loss"]["sft_target"] = "t"
    spec["train"]["data"]["train"]["t"] = name + "_t.npy"
    t = rng.integers(0, 4, size=(16, 3)).astype(np.int32)
    drop = rng.random((8, 3)) < 0.3   # the same in both halves, as data() does
    t[:8][drop] = -100
    t[8:][drop] = -100
    np.save(os.path.join(OUT, name + "_t.npy"), t)
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def kto_case():
    """kto over the same rows (a completion, then its KL text), a label each, unequal
    weights; the KL text's reference log-probabilities high, so the batch's KL estimate
    is 0 (TRL takes it without gradient: where it is not 0, the loss's true gradient is
    not the trained one; parity/dpo_hf checks it against TRL's)"""
    name, path = dpo_case("kto")
    spec = json.load(open(path))
    spec["model"]["inputs"]["label"] = {"shape": [], "dtype": "i32", "classes": 2}
    spec["model"]["loss"] = {"op": "kto", "target": "y", "reference": "ref", "label": "label",
                             "beta": 0.5, "desirable_weight": 1.0, "undesirable_weight": 1.5}
    spec["train"]["data"]["train"]["label"] = name + "_label.npy"
    label = rng.integers(0, 2, size=16).astype(np.int32)
    label[8:] = label[:8]   # (the two accumulated batches alike, as data() makes them)
    np.save(os.path.join(OUT, name + "_label.npy"), label)
    ref = np.load(os.path.join(OUT, name + "_ref.npy"))
    ref[:, 1] = 50.0
    np.save(os.path.join(OUT, name + "_ref.npy"), ref)
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def rpo_case():
    """dpo with rpo_alpha (RPO: the chosen answers' cross entropy added) and label smoothing"""
    name, path = dpo_case("rpo")
    spec = json.load(open(path))
    spec["model"]["loss"].update({"rpo_alpha": 0.7, "label_smoothing": 0.1})
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


def cpo_case():
    """cpo over the same pairs: dpo's sigmoid over the sums without a reference, and the
    chosen answers' cross entropy (cpo_alpha)"""
    name, path = simpo_case("cpo")
    spec = json.load(open(path))
    spec["model"]["loss"] = {"op": "cpo", "target": "y", "beta": 0.5, "cpo_alpha": 0.6}
    json.dump(spec, open(path, "w"), indent=1)
    return name, path


cases += [dpo_case(), cdpo_case(), simpo_case(), ipo_case(), orpo_case(), orpo_sft_case(),
          kto_case(), rpo_case(), cpo_case(), dpo_type_case("robust", {"label_smoothing": 0.2}),
          dpo_type_case("hinge"), dpo_type_case("nca_pair"), dpo_type_case("sppo_hard"),
          dpo_type_case("apo_zero", {"rpo_alpha": 0.5}), dpo_type_case("apo_down")]

# (added last: the cases before draw their data as they did)
cases += [
    case("cls_mean", [5, 8], [L(6), {"op": "tanh"}, {"op": "cls_mean"}, L(4)]),
    # DINOv2's block in small: a class token, pre-norm attention and a SwiGLU MLP, each
    # branch scaled by layer_scale, the head over [the class token, the others' mean]
    case("dinov2_block", [4, 6], [L(8), {"op": "cls_token"},
        {"op": "residual", "name": "att", "body": [{"op": "layernorm", "eps": 1e-6},
                                    {"op": "attention", "heads": 2, "causal": False},
                                    {"op": "layer_scale", "init_value": 0.8}]},
        {"op": "residual", "name": "mlp", "body": [{"op": "layernorm", "eps": 1e-6}, L(12),
                                                   {"op": "glu"}, L(8),
                                    {"op": "layer_scale", "init_value": 0.6}]},
        {"op": "layernorm", "eps": 1e-6}, {"op": "cls_mean"}, L(4)]),
    case("quick_gelu", [8], [L(6), {"op": "quick_gelu"}, L(4)]),
    case("token_mean_skip", [5, 8], [L(6), {"op": "tanh"}, {"op": "token_mean", "skip": 1}, L(4)]),
    # a residual's drop_path: samples' bodies dropped (--gradcheck's own steps: the same masks)
    case("drop_path", [3, 6], [L(6), {"op": "residual", "name": "r", "drop_path": 0.5, "body": [
        {"op": "layernorm"}, L(6), {"op": "tanh"}]}, {"op": "flatten"}, L(4)]),
    # DINOv2 with registers: 3 learned rows after the class token, attention over all,
    # the head over [the class token, the others' mean]
    case("register_tokens", [4, 6], [L(6), {"op": "cls_token"}, {"op": "register_tokens", "count": 3},
        {"op": "residual", "name": "att", "body": [{"op": "layernorm"},
                                                   {"op": "attention", "heads": 2, "causal": False}]},
        {"op": "tanh"}, {"op": "cls_mean"}, L(4)]),
]
FD_TOL, FD_FLOOR = 2e-2, 1e-3
# (cases added last draw their data after the others', which stay as they were)
cases += [
    # a window on both sides (not causal: keys less than 2 away either way, ModernBERT's)
    tok("attention_window_full", [E(dim=8), {"op": "attention", "heads": 2, "causal": False,
                                             "window": 2, "rope": {"theta": 10000}}, L(7)]),
    # the mean over each row's first sequence (padded rows: the text, 1 to 5 tokens, then
    # the padding, whose positions start again at 0; ModernBERT's mean pooling)
    with_positions(*case("token_mean_first", [5, 8], [L(6), {"op": "tanh"},
                                                      {"op": "token_mean", "first_sequence": True},
                                                      L(4)]),
                   np.array([list(range(k)) + list(range(5 - k)) for k in
                             np.random.default_rng(13).integers(1, 6, size=16)], np.int32)),
]

only = sys.argv[1:]   # gradcheck.py [CASE...]: those cases alone
cases = [c for c in cases if not only or c[0] in only]
failed = 0
for name, path in cases:
    p = subprocess.run([TRAINC, "run", path, "--gradcheck", "--threads", "1"],
                       capture_output=True, text=True, timeout=120)
    ok = p.returncode == 0 and "gradcheck: ok" in p.stdout
    print(("ok   " if ok else "FAIL ") + name + " (--gradcheck)")
    if not ok:
        failed += 1
        print(p.stdout + p.stderr)
    if name.startswith("drop"):
        continue   # --eval has no mask: dropout_stats.py and drop_path.py check their gradients
    bad = fd_check(name, path)
    print(("ok   " if not bad else "FAIL ") + name + " (finite differences by the test)")
    for line in bad:
        print("  " + line)
    failed += bool(bad)
checks = 2 * len(cases) - sum(c[0].startswith("drop") for c in cases)
print(f"gradcheck: {checks - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
