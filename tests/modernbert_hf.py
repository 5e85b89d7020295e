"""ModernBERT: trainc import hf and export hf of ModernBertForMaskedLM,
ModernBertForSequenceClassification and ModernBertForTokenClassification against
transformers (4.48 on: HF_NEW_PYTHON; without ModernBERT it exits 77, a skip).

transformers' ModernBERT asks for torch 2 where Debian's is 1.13 in two places that change
no number: a `torch.compile` decorator (its reference_compile path, off on the CPU) and
`nn.LayerNorm(bias=False)`; this file stands in for both before it imports the model (a
decorator that returns the function; a LayerNorm whose bias is None, which
F.layer_norm takes as no bias).

Random-weight models made here with save_pretrained, tiny (d 32, heads 8 wide), fp32,
CPU, one thread, every tensor moved off transformers' init (a second masked LM without the
decoder's bias, its norms with theirs); rows of 32 tokens padded at
the end, the local layers' windows 2 to 4 positions each way, so that windows, the padding
and the global layers all bite. For each kind:

- imported: layer 0 global and without the norm before its attention, the others in a
  repeat whose attention has the window on both sides (local_attention / 2 + 1) and an
  interleave of the global layers (their rope's theta);
- trainc's `--eval` validation loss equals transformers' on the same rows within 1e-5;
- import then export gives back the folder's tensors bit for bit;
- 8 AdamW steps (warm-up, linear decay, weight decay, clipping) give every step's loss
  within 1e-4 of torch's AdamW on transformers' model;
- trained 5 steps and exported, transformers' from_pretrained computes trainc's --eval
  loss within 1e-5;
- the sequence classifier's LoRA run (adapters where train.lora's defaults put them, the
  head trained whole) exported merged: from_pretrained's loss is trainc's within 1e-5;
- the masked LM and the mean-pooling classifier on the fake GPU (the windowed kernels
  without the causal mask over padded rows; the mean over the text's tokens) against the
  CPU: 8 steps within 1e-5.

The mean-pooling classifier (classifier_pooling "mean": token_mean over the text's tokens,
its first_sequence) is a kind of its own here. `trainc data mlm` with a ModernBERT-style tokenizer (byte-level BPE, [CLS] A [SEP]) makes
transformers' ids, and the masked LM's loss on those rows is transformers'; `trainc data
tags` with it (a PreTrainedTokenizerFast: no space before words) makes transformers' ids
and tags. A sequence
classifier imported with --labels from the masked LM's folder keeps its
encoder and prediction head (head.dense, head.norm) and draws the classifier anew.
A ModernBertModel (an embedding model's kind) with --labels: its encoder read, the
prediction head and classifier drawn as transformers draws them. Refused with exit 1,
naming the key: another pooling, rope_scaling, --task mlm over a ModernBertModel, --task
qa.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def _compile(fn=None, **kw):
    return fn if fn is not None else (lambda f: f)


class _LayerNorm(nn.LayerNorm):
    def __init__(self, n, eps=1e-5, elementwise_affine=True, bias=True, **kw):
        super().__init__(n, eps, elementwise_affine, **kw)
        if not bias:
            self.register_parameter("bias", None)


if not hasattr(torch, "compile"):
    torch.compile = _compile
    nn.LayerNorm = _LayerNorm

try:
    import transformers
    from transformers import (ModernBertConfig, ModernBertForMaskedLM,
                              ModernBertForSequenceClassification,
                              ModernBertForTokenClassification, ModernBertModel)
    from safetensors.torch import load_file
except ImportError:
    print("skip modernbert_hf: transformers with ModernBERT (4.48 on) is not importable from "
          "%s (make deps makes .venv/hf-new)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
from text_hf import (exported_back, fake_gpu_vs_cpu, license_lines, lora_export,  # noqa: E402
                     parity_steps, specs, trained_export)

OUT = os.path.join(ROOT, "build", "tests", "modernbert_hf")
T, N, V, PAD, MASK = 32, 96, 120, 0, 3
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_attention_heads=4,
             max_position_embeddings=64, pad_token_id=PAD, initializer_range=0.05)


def rows(rng, task, K):
    """N padded rows: x, pos (the text from 0, the padding from 0 again), the texts'
    lengths, y (a class; a token classifier's for each token, a masked LM's ids of the
    tokens masked, -100 elsewhere)"""
    x, pos = np.full((N, T), PAD, np.int32), np.zeros((N, T), np.int32)
    lens = rng.integers(4, T + 1, size=N)
    lens[0] = T
    y = np.full((N, T), -100, np.int32)
    for r, k in enumerate(lens):
        x[r, :k] = rng.integers(4, V, size=k)
        pos[r, :k], pos[r, k:] = np.arange(k), np.arange(T - k)
        if task == "mlm":
            chosen = np.flatnonzero(rng.random(k) < 0.3)
            y[r, chosen] = x[r, chosen]
            x[r, chosen[: len(chosen) * 4 // 5]] = MASK
        else:
            y[r, :k] = rng.integers(0, K, size=k)
    if task == "sequence":
        y = rng.integers(0, K, size=N).astype(np.int32)
    return x, pos, lens, y


def save_rows(d, x, pos, y):
    os.makedirs(d + "/data", exist_ok=True)
    for part, sl in (("train", slice(0, N - 32)), ("val", slice(N - 32, None))):
        for key, a in (("x", x), ("pos", pos), ("y", y)):
            np.save("%s/data/%s_%s.npy" % (d, part, key), a[sl])


def batch_loss(m, x, lens, y):
    """transformers' loss of the rows (its own for the masked LM and the token classifier:
    the mean over the tokens asked of)"""
    mask = (torch.arange(T)[None, :] < torch.from_numpy(lens)[:, None]).long()
    out = m(input_ids=torch.from_numpy(x).long(), attention_mask=mask,
            labels=torch.from_numpy(y).long())
    return out.loss


def val_loss(m, x, lens, y):
    m.eval()
    with torch.no_grad():
        return float(batch_loss(m, x[N - 32:], lens[N - 32:], y[N - 32:]))


def imported_layout(name, imp, every, W):
    """layer 0 global without a norm before its attention; the repeat's attention windowed
    both ways with an interleave of the global layers (or all global)"""
    ls = json.load(open(imp + "/model.json"))["model"]["layers"]
    a0 = ls[2]["body"][0]
    rep = ls[4]
    att = rep["body"][0]["body"][1]
    want = ({"every": every, "window": None, "rope": {"theta": 160000}} if W else None)
    check(a0["op"] == "attention" and not a0["causal"] and "window" not in a0 and
          rep["op"] == "repeat" and rep["body"][0]["body"][0]["op"] == "layernorm" and
          att.get("window") == W and att.get("interleave") == want,
          "%s: imported as layer 0 (global, no norm before its attention) and a repeat whose "
          "attention has %s" % (name, "a window of %d on both sides, one layer in %d global"
                                % (W, every) if W else "no window (every layer global)"))


def case(name, cls, cfg, task, K, rng, fake_gpu=False):
    d = os.path.join(OUT, name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    W = cfg.local_attention // 2 + 1 if cfg.global_attn_every_n_layers > 1 else None
    imported_layout(name, imp, cfg.global_attn_every_n_layers, W)
    if cfg.classifier_pooling == "mean":
        pool = json.load(open(imp + "/model.json"))["model"]["layers"][-5]
        check(pool == {"op": "token_mean", "first_sequence": True}, "%s: classifier_pooling "
              "\"mean\" imports as token_mean over the first sequence (the text's tokens)" % name)
    x, pos, lens, y = rows(rng, task, K)
    save_rows(imp, x, pos, y)
    specs(imp, ["x", "pos", "y"])
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = val_loss(m, x, lens, y)
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers' loss %.7f "
          "(%.1e)" % (name, ours, theirs, rel(ours, theirs)))
    a, b = exported_back(imp, d)
    check(set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
          "%s: import then export gives back the folder's %d tensors bit for bit" % (name, len(a)))
    batches = [slice(s, s + 16) for s in range(0, N - 32, 16)]
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"), batches,
                 lambda m, sl: batch_loss(m, x[sl], lens[sl], y[sl]))
    ours = trained_export(imp, d)
    back = cls.from_pretrained(d + "/hf")
    theirs = val_loss(back, x, lens, y)
    check(rel(ours, theirs) <= 1e-5 and back.config.architectures == [cls.__name__],
          "%s: trained, exported as %s, from_pretrained's loss %.7f, trainc --eval %.7f (%.1e)"
          % (name, back.config.architectures, theirs, ours, rel(ours, theirs)))
    if name == "seq":
        lora_export(name, imp, d, ["head_*", "classifier.*"],
                    lambda folder: val_loss(cls.from_pretrained(folder), x, lens, y))
    if fake_gpu:
        os.makedirs(d + "/gpu")
        fake_gpu_vs_cpu("%s (windows both ways over padded rows)" % name, imp, d + "/gpu",
                        bf16=False)


def new_classifier():
    """the masked LM's folder imported with --labels: a sequence classifier over its encoder
    and prediction head, the classifier drawn anew"""
    d = os.path.join(OUT, "labels")
    trainc("import", "hf", os.path.join(OUT, "mlm", "src"), "-o", d, "--seq-len", T,
           "--labels", "neg,pos")
    mine = load_file(d + "/init.safetensors")
    theirs = load_file(os.path.join(OUT, "mlm", "import", "init.safetensors"))
    kept = [k for k in theirs if k != "decoder.bias"]
    spec = json.load(open(d + "/model.json"))["model"]
    check(all(torch.equal(mine[k], theirs[k]) for k in kept) and
          mine["classifier.weight"].shape == (2, 32) and spec["layers"][-5]["op"] == "first_token",
          "--labels over a ModernBertForMaskedLM: a sequence classifier keeping its %d encoder "
          "and prediction-head tensors, the classifier of 2 classes drawn anew" % len(kept))


def hf_name(ours):
    """a bare ModernBertModel's name of trainc's encoder tensor OURS (docs/commands.md's
    layout: layer 0's layers named with a 0, blocks.i transformers' layers.(i+1))"""
    top = {"embed.weight": "embeddings.tok_embeddings.weight", "embed_norm": "embeddings.norm",
           "final_norm": "final_norm"}
    part = {"attn.qkv": "attn.Wqkv", "attn.proj": "attn.Wo", "attn_norm": "attn_norm",
            "mlp_norm": "mlp_norm", "mlp_in": "mlp.Wi", "mlp_out": "mlp.Wo"}
    stem, leaf = ours.rsplit(".", 1)
    if ours in top or stem in top:
        return top[ours] if ours in top else "%s.%s" % (top[stem], leaf)
    if stem.startswith("blocks."):
        _, i, name = stem.split(".", 2)
        return "layers.%d.%s.%s" % (int(i) + 1, part[name], leaf)
    return "layers.0.%s.%s" % (part[stem.replace("0", "")], leaf)


def bare_model():
    """a ModernBertModel (an embedding model's kind) imported with --labels: its encoder as
    it is, the prediction head and the classifier drawn as transformers draws them (the
    dense weight within 2 std of std initializer_range / sqrt(2 layers), the norm's weight
    ones, the classifier's std hidden_size^-1/2, biases zero)"""
    d = os.path.join(OUT, "bare")
    L = 3
    saved(ModernBertModel, ModernBertConfig(num_hidden_layers=L, norm_bias=True, **SMALL),
          d + "/src", 0.1)
    trainc("import", "hf", d + "/src", "-o", d + "/import", "--seq-len", T, "--labels", "3")
    mine, theirs = load_file(d + "/import/init.safetensors"), load_file(d + "/src/model.safetensors")
    enc = {k for k in mine if not k.startswith(("head_", "classifier."))}
    same = len(enc) == len(theirs) and all(torch.equal(mine[k], theirs[hf_name(k)]) for k in enc)
    dense, cls = mine["head_dense.weight"], mine["classifier.weight"]
    sd, sc = 0.05 / (2 * L) ** 0.5, 32 ** -0.5   # (2-std truncation leaves 0.88 of the std)
    check(same and torch.equal(mine["head_norm.weight"], torch.ones(32)) and
          not mine["head_norm.bias"].any() and not mine["classifier.bias"].any() and
          abs(float(dense.std()) / (0.88 * sd) - 1) < 0.1 and float(dense.abs().max()) <= 2 * sd
          and abs(float(cls.std()) / (0.88 * sc) - 1) < 0.2 and float(cls.abs().max()) <= 2 * sc,
          "a ModernBertModel with --labels 3: its %d encoder tensors read, the prediction "
          "head and classifier drawn (dense std %.4f for %.4f, within 2 std; the norm ones; "
          "classifier std %.3f for %.3f)" % (len(enc), float(dense.std()), sd, float(cls.std()), sc))


def modernbert_tokenizer(path):
    """ModernBERT's kind of tokenizer.json, trained here over Debian's license texts:
    byte-level BPE (no prefix space), [CLS] A [SEP], its special tokens; transformers'
    tokenizer of it"""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([" ".join(w) for w in license_lines()], trainers.BpeTrainer(
        vocab_size=400, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["|||IP_ADDRESS|||", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]",
                        "[MASK]"]))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.save(path)
    hf = PreTrainedTokenizerFast(tokenizer_file=path, pad_token="[PAD]", mask_token="[MASK]",
                                 cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]")
    hf.save_pretrained(os.path.dirname(path))   # (tokenizer_config.json: its class)
    return hf


def tokenized():
    """text to loss as a user walks it: `trainc data mlm` over license lines with a
    ModernBERT-style tokenizer; its rows are transformers' ids (where nothing is chosen)
    and the imported masked LM's --eval loss on them is transformers'"""
    d = os.path.join(OUT, "text")
    os.makedirs(d)
    hf = modernbert_tokenizer(d + "/tokenizer.json")
    m = saved(ModernBertForMaskedLM, ModernBertConfig(
        num_hidden_layers=4, local_attention=8, **dict(SMALL, vocab_size=400,
                                                       pad_token_id=hf.pad_token_id)),
        d + "/src", 0.3)
    trainc("import", "hf", d + "/src", "-o", d + "/import", "--seq-len", T)
    lines = [" ".join(w) for w in license_lines()[:200]]
    with open(d + "/text.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    imp = d + "/import"
    trainc("data", "mlm", d + "/text.txt", imp + "/data", "--tokenizer", d + "/tokenizer.json",
           "--model", imp + "/model.json", "--val-frac", 0.2)
    x, y, pos = (np.load("%s/data/val_%s.npy" % (imp, k)) for k in ("x", "y", "pos"))
    enc = hf(lines[160:], truncation=True, max_length=T, padding="max_length")
    ids, mask = np.array(enc["input_ids"]), np.array(enc["attention_mask"])
    chosen = y != -100
    lens = mask.sum(1)
    check(np.array_equal(x[~chosen], ids[~chosen]) and np.array_equal(y[chosen], ids[chosen]) and
          np.array_equal(pos, [list(range(k)) + list(range(T - k)) for k in lens]),
          "data mlm with a ModernBERT-style tokenizer ([CLS] A [SEP], byte-level BPE): the "
          "rows are transformers' ids where nothing is chosen, y the ids chosen")
    specs(imp, ["x", "pos", "y"])
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    m.eval()
    with torch.no_grad():
        theirs = float(m(input_ids=torch.from_numpy(x).long(), attention_mask=torch.from_numpy(mask),
                         labels=torch.from_numpy(y).long()).loss)
    check(rel(ours, theirs) <= 1e-5, "and the imported masked LM's --eval on them %.7f, "
          "transformers' %.7f (%.1e)" % (ours, theirs, rel(ours, theirs)))
    tagged(d, hf, lines)


def tagged(d, hf, lines):
    """`trainc data tags` with that tokenizer: transformers' PreTrainedTokenizerFast (its
    class in tokenizer_config.json) encodes words with no space before them, as its
    tokenizer.json's ByteLevel says; the rows are its ids, each word's tag on its first
    piece"""
    trainc("import", "hf", os.path.join(d, "src"), "-o", d + "/tagger", "--seq-len", T,
           "--task", "token", "--labels", "3")
    words = [l.split()[:12] for l in lines[:40]]
    tags = [[(len(w) + i) % 3 for i, w in enumerate(ws)] for ws in words]
    with open(d + "/tags.jsonl", "w") as f:
        for ws, ts in zip(words, tags):
            f.write(json.dumps({"tokens": ws, "ner_tags": ts}) + "\n")
    trainc("data", "tags", d + "/tags.jsonl", d + "/tags", "--tokenizer", d + "/tokenizer.json",
           "--model", d + "/tagger/model.json", "--val-frac", 0)
    enc = hf(words, is_split_into_words=True, truncation=True, max_length=T, padding="max_length")
    want = np.full((len(words), T), -100)
    for r in range(len(words)):
        ids, prev = enc.word_ids(r), None
        for t, w in enumerate(ids):
            if w is not None and w != prev:
                want[r, t] = tags[r][w]
            prev = w
    x, y = np.load(d + "/tags/train_x.npy"), np.load(d + "/tags/train_y.npy")
    check(np.array_equal(x, enc["input_ids"]) and np.array_equal(y, want),
          "data tags with a PreTrainedTokenizerFast (ModernBERT's class): transformers' ids of "
          "the words (no space before them), each word's tag on its first piece")


def config_forms():
    """the same model from transformers 5's keys (rope_parameters by layer type, layer_types)
    imports as from 4.48's; local_rope_theta left out is ModernBertConfig's 10000, null the
    global theta; layer_types off the pattern is refused"""
    src = os.path.join(OUT, "mlm", "src")
    cfg = json.load(open(src + "/config.json"))
    base = json.load(open(os.path.join(OUT, "mlm", "import", "model.json")))["model"]["layers"]
    d = os.path.join(OUT, "forms")
    new = {k: v for k, v in cfg.items() if k not in ("global_rope_theta", "local_rope_theta")}
    new["rope_parameters"] = {"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    new["layer_types"] = ["full_attention" if i % 3 == 0 else "sliding_attention"
                          for i in range(4)]
    forms = {"v5": new, "no_local": {k: v for k, v in cfg.items() if k != "local_rope_theta"},
             "null_local": dict(cfg, local_rope_theta=None)}
    got = {}
    for name, c in forms.items():
        shutil.copytree(src, d + "/" + name)
        json.dump(c, open(d + "/%s/config.json" % name, "w"))
        trainc("import", "hf", d + "/" + name, "-o", d + "/%s_import" % name, "--seq-len", T)
        got[name] = json.load(open(d + "/%s_import/model.json" % name))["model"]["layers"]
    local = lambda ls: ls[4]["body"][0]["body"][1]["rope"]["theta"]
    check(got["v5"] == base and got["no_local"] == base and local(got["null_local"]) == 160000,
          "transformers 5's rope_parameters and layer_types import as 4.48's keys do; "
          "local_rope_theta left out is 10000, null the global theta")
    shutil.copytree(src, d + "/bad_types")
    json.dump(dict(new, layer_types=["sliding_attention"] + new["layer_types"][1:]),
              open(d + "/bad_types/config.json", "w"))
    refused("layer_types off ModernBERT's pattern", ["import", "hf", d + "/bad_types", "-o",
                                                     d + "/o_bad"],
            "$.layer_types: entry 0: \"full_attention\" expected", d + "/o_bad")


def bad_cases():
    d = os.path.join(OUT, "bad")
    src = os.path.join(OUT, "seq", "src")
    cfg = json.load(open(src + "/config.json"))
    for key, value, text in (("classifier_pooling", "max", "$.classifier_pooling: \"max\""),
                             ("rope_scaling", {"rope_type": "linear", "factor": 2.0},
                              "$.rope_scaling")):
        shutil.copytree(src, d + "/" + key)
        json.dump(dict(cfg, **{key: value}), open(d + "/" + key + "/config.json", "w"))
        refused(key, ["import", "hf", d + "/" + key, "-o", d + "/o_" + key], text, d + "/o_" + key)
    refused("--task mlm over a ModernBertModel",
            ["import", "hf", os.path.join(OUT, "bare", "src"), "-o", d + "/o_bare", "--task",
             "mlm"], "ModernBertModel: no prediction head", d + "/o_bare")
    refused("--task qa", ["import", "hf", src, "-o", d + "/o_qa", "--task", "qa"],
            "--task qa: a ModernBERT is imported as sequence", d + "/o_qa")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(5)
case("mlm", ModernBertForMaskedLM,
     ModernBertConfig(num_hidden_layers=4, local_attention=8, layer_norm_eps=1e-5,
                      position_embedding_type="absolute", **SMALL), "mlm", V, rng,
     fake_gpu=True)
case("mlm_decoder_nobias", ModernBertForMaskedLM,
     ModernBertConfig(num_hidden_layers=2, local_attention=6, decoder_bias=False, norm_bias=True,
                      classifier_activation="gelu_pytorch_tanh", **SMALL), "mlm", V, rng)
case("seq", ModernBertForSequenceClassification,
     ModernBertConfig(num_hidden_layers=3, global_attn_every_n_layers=2, local_attention=6,
                      norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                      hidden_activation="gelu_pytorch_tanh", num_labels=3, **SMALL),
     "sequence", 3, rng)
case("seq_mean", ModernBertForSequenceClassification,
     ModernBertConfig(num_hidden_layers=2, local_attention=4, classifier_pooling="mean",
                      num_labels=2, **SMALL), "sequence", 2, rng, fake_gpu=True)
case("token", ModernBertForTokenClassification,
     ModernBertConfig(num_hidden_layers=2, global_attn_every_n_layers=1,
                      classifier_activation="gelu_pytorch_tanh", num_labels=4, **SMALL),
     "token", 4, rng)
new_classifier()
config_forms()
bare_model()
tokenized()
bad_cases()
print("modernbert_hf: %s (transformers %s)" % ("FAILED" if failed else "ok",
                                               transformers.__version__))
sys.exit(1 if failed else 0)
