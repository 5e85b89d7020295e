"""trainc import hf and export hf of BertForSequenceClassification,
RobertaForSequenceClassification and DistilBertForSequenceClassification against
transformers, on padded rows.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init so that a tensor put in
another's place shows. The rows are padded text: each of 1 to T tokens then the pad
token, its token types (BERT: a second segment of type 1 in half the rows), and the
positions input (the text's places from 0, the padding's from 0 again, a sequence of its
own) against transformers' attention_mask:

- imported, trainc's `--eval` validation loss equals transformers' mean cross entropy over
  the same rows within 1e-5 relative (BERT with 3 named classes; RoBERTa, whose position
  rows start after pad_token_id's, with the tanh gelu and layer_norm_eps 1e-5; DistilBERT,
  its own names and keys, no token types, a relu after pre_classifier); without
  the model's positions (the padding in sight) it differs by more than 1e-3, so the check
  can fail;
- `--predict test_x.npy` (test_types.npy and test_pos.npy beside it) writes transformers'
  logits within 1e-5;
- import then export gives back every tensor bit for bit;
- 8 AdamW steps (warm-up, linear decay, clipping) on batches of 16 give every step's loss
  within 1e-4 of torch's AdamW on transformers' model over the same batches;
- trained 5 steps and exported, transformers' from_pretrained of the folder computes the
  loss trainc's --eval gives for those weights (within 1e-5), with the classes' names;
- `--labels` over the family's other models (BertForMaskedLM: no pooler; a bare BertModel:
  no prefix, a pooler; RobertaForMaskedLM; a RoBERTa classifier of 3 classes given 2;
  DistilBertForMaskedLM):
  the encoder (and the pooler where the checkpoint has one) as transformers' sequence
  classifier loads it from that folder, the new tensors drawn with std initializer_range
  (within 25%) and zero biases; with those in transformers' model, its loss is trainc's
  --eval within 1e-5;
- a config.json written whole (to_dict: pruned_heads, tie_word_embeddings, ...) imports
  to the same model.json;
- refused with exit 1, naming the key or layer, nothing written: a bare BertModel without
  --labels, BertLMHeadModel, relative positions, a decoder, --adapter, --labels of one
  class, not a count nor names, with an empty or a repeated name, and export of a
  causal classifier.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

try:
    import transformers
    from transformers import (BertConfig, BertForSequenceClassification, DistilBertConfig,
                              DistilBertForSequenceClassification, RobertaConfig,
                              RobertaForSequenceClassification)
    from safetensors.torch import load_file
except ImportError:
    print("skip bert_hf: transformers is not importable from %s (make deps makes a venv with "
          "it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
import run_log  # noqa: E402
from text_hf import lora_export, specs as text_specs, train_like_specs  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "bert_hf")
T, N = 24, 128
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()   # (the new heads' "newly initialized" notes)


def rows(rng, vocab, pad, n, pairs):
    """n padded rows: ids, token types, positions, the text's lengths, classes"""
    x = np.full((n, T), pad, np.int32)
    types, pos = np.zeros((n, T), np.int32), np.zeros((n, T), np.int32)
    lens = rng.integers(1, T + 1, size=n)
    lens[0] = T   # a row without padding
    for r, k in enumerate(lens):
        x[r, :k] = rng.integers(pad + 1, vocab, size=k)
        if pairs and r % 2 and k > 2:
            types[r, rng.integers(1, k):k] = 1
        pos[r, :k] = np.arange(k)
        pos[r, k:] = np.arange(T - k)
    return x, types, pos, lens


def keys_of(d):
    """the model's inputs (DistilBERT's: no types)"""
    return list(json.load(open(d + "/model.json"))["model"]["inputs"])


def save_data(d, arrays, y):
    os.makedirs(d + "/data", exist_ok=True)
    keys = keys_of(d)
    for part, sl in (("train", slice(0, N // 2)), ("val", slice(N // 2, None))):
        for key, a in zip(("x", "types", "pos"), arrays):
            if key in keys:
                np.save("%s/data/%s_%s.npy" % (d, part, key), a[sl])
        np.save("%s/data/%s_y.npy" % (d, part), y[sl].astype(np.int32))


def specs(d):
    """eval.json, train5.json and train8.json (text_hf.py's) over the model's inputs"""
    text_specs(d, keys_of(d))


def hf_batch_loss(m, arrays, lens, y):
    x, types, _ = (torch.from_numpy(a).long() for a in arrays)
    mask = (torch.arange(T)[None, :] < torch.from_numpy(lens)[:, None]).long()
    extra = {} if m.config.model_type == "distilbert" else {"token_type_ids": types}
    logits = m(input_ids=x, attention_mask=mask, **extra).logits
    return F.cross_entropy(logits.double(), torch.from_numpy(y).long())


def hf_loss(m, arrays, lens, y):
    """mean cross entropy over the val rows, in batches of 32 (as --eval's)"""
    m.eval()
    with torch.no_grad():
        return float(np.mean([hf_batch_loss(m, [a[b:b + 32] for a in arrays], lens[b:b + 32],
                                            y[b:b + 32]).item() for b in range(0, len(y), 32)]))


def hf_train(m, arrays, lens, y, B=16):
    """torch's AdamW as train8.json asks, on the training rows (the first N / 2) in order"""
    batches = [slice(b, b + B) for b in range(0, N // 2, B)]
    return train_like_specs(m, batches, lambda m, sl: hf_batch_loss(
        m, [a[sl] for a in arrays], lens[sl], y[sl]).float())


def make(name, cls, cfg):
    m = cls(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    src = os.path.join(OUT, name, "src")
    m.save_pretrained(src, safe_serialization=True)
    return m, src


def case(name, cls, cfg, pad, pairs, rng):
    d = os.path.join(OUT, name)
    m, src = make(name, cls, cfg)
    imp = d + "/import"
    trainc("import", "hf", src, "-o", imp, "--seq-len", T)
    spec = imp + "/model.json"
    x, types, pos, lens = rows(rng, cfg.vocab_size, pad, N, pairs)
    y = rng.integers(0, cfg.num_labels, size=N)
    save_data(imp, (x, types, pos), y)
    specs(imp)
    val = [a[N // 2:] for a in (x, types, pos)]
    ours, theirs = (eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"),
                    hf_loss(m, val, lens[N // 2:], y[N // 2:]))
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers %.7f (%.1e)"
          % (name, ours, theirs, rel(ours, theirs)))
    unmasked(name, d, spec, imp, theirs)
    predicted(name, m, imp, val, lens[N // 2:])
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", imp + "/init.safetensors", "-o",
           d + "/back")
    a, b = load_file(src + "/model.safetensors"), load_file(d + "/back/model.safetensors")
    skip = pad + 1 if name == "roberta" else 0   # (RoBERTa's rows before position 0's)
    rows0 = "roberta.embeddings.position_embeddings.weight"
    if skip:
        check(not b[rows0][:skip].any(), "%s: export writes the %d position rows before "
              "position 0's as zeros" % (name, skip))
        a[rows0], b[rows0] = a[rows0][skip:], b[rows0][skip:]
    same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    check(same, "%s: import then export gives back the folder's %d tensors bit for bit%s"
          % (name, len(a), " (those rows aside)" if skip else ""))
    trainc("run", spec, imp + "/train8.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/run8")
    ours8 = run_log.losses(d + "/run8")
    theirs8 = hf_train(cls.from_pretrained(src), (x, types, pos), lens, y)
    worst = max(rel(a, b) for a, b in zip(ours8, theirs8))
    check(len(ours8) == 8 and worst <= 1e-4, "%s: 8 AdamW steps, every loss within %.1e of "
          "torch's on transformers' model (first %.6f, last %.6f)" % (name, worst, ours8[0], ours8[-1]))
    trainc("run", spec, imp + "/train5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/run5")
    exported(name, cls, spec, imp + "/eval.json", d + "/run5/model.safetensors", d + "/hf",
             (val, lens[N // 2:], y[N // 2:]))
    check(m.config.id2label == cls.from_pretrained(d + "/hf").config.id2label,
          "%s: the classes' names (id2label) through import and export" % name)
    lora(name, cls, spec, imp, d, (val, lens[N // 2:], y[N // 2:]))


def lora(name, cls, spec, imp, d, val):
    """5 steps of LoRA (rank 4, alpha 8, the head and pooler trained whole, as PEFT's
    modules_to_save), exported with the adapters merged: from_pretrained's loss is
    trainc's --eval of the adapted weights; without train.lora the export refuses them"""
    w = lora_export(name, imp, d, ["head.*", "pooler.*"],
                    lambda folder: hf_loss(cls.from_pretrained(folder), *val))
    refused("%s: LoRA weights exported with a spec without train.lora" % name,
            ["export", "hf", spec, imp + "/train5.json", "--weights", w, "-o", d + "/hf_nolora"],
            "is a LoRA adapter and the spec has no train.lora", d + "/hf_nolora")


def predicted(name, m, imp, val, lens):
    """--predict over the val rows' files (test_x.npy and its siblings): transformers' logits"""
    keys = keys_of(imp)
    for key, a in zip(("x", "types", "pos"), val):
        if key in keys:
            np.save("%s/data/test_%s.npy" % (imp, key), a)
    trainc("run", imp + "/model.json", imp + "/eval.json", "--init", imp + "/init.safetensors",
           "--predict", imp + "/data/test_x.npy", "--threads", 1, "--out", imp + "/predict")
    ours = np.load(imp + "/predict/predictions.npy")
    x, types, _ = (torch.from_numpy(a).long() for a in val)
    mask = (torch.arange(T)[None, :] < torch.from_numpy(lens)[:, None]).long()
    extra = {} if m.config.model_type == "distilbert" else {"token_type_ids": types}
    with torch.no_grad():
        theirs = m.eval()(input_ids=x, attention_mask=mask, **extra).logits.numpy()
    worst = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    check(ours.shape == theirs.shape and worst <= 1e-5, "%s: --predict test_x.npy (%s beside it): "
          "transformers' logits within %.1e" % (name, ", ".join("test_%s.npy" % k for k in keys
                                                                if k not in ("x", "y")), worst))


def unmasked(name, d, spec, imp, theirs):
    """the same model without the positions: its text sees the padding, the loss moves"""
    s = json.load(open(spec))
    del s["model"]["positions"], s["model"]["inputs"]["pos"]
    e = json.load(open(imp + "/eval.json"))
    for p in e["train"]["data"].values():
        del p["pos"]
    json.dump(s, open(imp + "/nopos.json", "w"))
    json.dump(e, open(imp + "/nopos_eval.json", "w"))
    loss = eval_loss(imp + "/nopos.json", imp + "/nopos_eval.json", imp + "/init.safetensors",
                     d + "/eval_nopos")
    check(rel(loss, theirs) > 1e-3, "%s: without the positions (the padding in sight) the loss "
          "moves by %.1e (the check can fail)" % (name, rel(loss, theirs)))


def exported(name, cls, spec, eval_spec, weights, folder, val):
    trainc("export", "hf", spec, eval_spec, "--weights", weights, "-o", folder)
    ours = eval_loss(spec, eval_spec, weights, folder + "_eval")
    theirs = hf_loss(cls.from_pretrained(folder), *val)
    check(rel(ours, theirs) <= 1e-5, "%s: trained, exported, from_pretrained's loss %.7f, trainc "
          "--eval %.7f (%.1e)" % (name, theirs, ours, rel(ours, theirs)))


def new_head(name, cls, base, cfg, labels, rng, pooler_fresh):
    """a checkpoint of the family's other models (BASE) imported with --labels: the encoder
    as transformers' sequence classifier loads it from that folder, the new tensors drawn as
    its _init_weights draws them (weights normal(0, initializer_range), biases 0)"""
    d = os.path.join(OUT, name)
    src = d + "/src"
    m = saved(base, cfg, src, 0.3)
    imp = d + "/import"
    r = trainc("import", "hf", src, "-o", imp, "--seq-len", T, "--labels", labels)
    spec = json.load(open(imp + "/model.json"))
    K = spec["model"]["inputs"]["y"]["classes"]
    pad = cfg.pad_token_id if name.startswith("roberta") else 0
    x, types, pos, lens = rows(rng, cfg.vocab_size, pad, N, False)
    y = rng.integers(0, K, size=N)
    save_data(imp, (x, types, pos), y)
    specs(imp)
    ours = load_file(imp + "/init.safetensors")
    hf = cls.from_pretrained(src, num_labels=K, ignore_mismatched_sizes=True)
    fresh = {"head.weight", "head.bias"} | ({"pooler.weight", "pooler.bias"} if pooler_fresh else set())
    names = (("classifier.dense", "pooler"), ("classifier.out_proj", "head")) if "roberta" in name \
        else (("pre_classifier", "pooler"), ("classifier", "head")) if "distil" in name \
        else (("bert.pooler.dense", "pooler"), ("classifier", "head"))
    with torch.no_grad():   # transformers' own draws of the new tensors, replaced by trainc's
        for theirs, mine in names:
            for t in ("weight", "bias"):
                p = dict(hf.named_parameters())["%s.%s" % (theirs, t)]
                if "%s.%s" % (mine, t) in fresh:
                    p.copy_(ours["%s.%s" % (mine, t)])
                else:
                    check(torch.equal(p, ours["%s.%s" % (mine, t)]), "%s: %s.%s from the "
                          "checkpoint's %s.%s" % (name, mine, t, theirs, t))
    w, b = ours["head.weight"], ours["head.bias"]
    std = float(w.std())
    check(abs(std / cfg.initializer_range - 1) < 0.25 and not b.any(), "%s: the new head "
          "[%d, %d] drawn with std %.4f (initializer_range %g), its bias zero" %
          (name, K, cfg.hidden_size, std, cfg.initializer_range))
    val = [a[N // 2:] for a in (x, types, pos)]
    said = r.stdout[r.stdout.index("a new classifier"):r.stdout.index(") ->")]
    ours_loss = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                          d + "/eval0")
    theirs = hf_loss(hf, val, lens[N // 2:], y[N // 2:])
    check(rel(ours_loss, theirs) <= 1e-5, "%s: %s with --labels %s (%s): trainc --eval %.7f, "
          "transformers %.7f (%.1e)" % (name, base.__name__, labels, said, ours_loss, theirs,
                                         rel(ours_loss, theirs)))


def whole_config():
    """config.json written whole (to_dict, as older transformers wrote it: pruned_heads,
    tie_word_embeddings and the rest at their defaults) imports as save_pretrained's does"""
    src, d = os.path.join(OUT, "bert", "src"), os.path.join(OUT, "whole")
    shutil.copytree(src, d + "/src")
    cfg = BertForSequenceClassification.from_pretrained(src).config
    json.dump(cfg.to_dict(), open(d + "/src/config.json", "w"))
    trainc("import", "hf", d + "/src", "-o", d + "/import", "--seq-len", T)
    a, b = (json.load(open(x + "/model.json"))["model"] for x in (os.path.join(OUT, "bert", "import"),
                                                                 d + "/import"))
    a["name"] = b["name"]
    check(a == b, "a config.json written whole (%d keys) imports to the same model.json" %
          len(cfg.to_dict()))


def bad_cases():
    d = os.path.join(OUT, "bad")
    src = os.path.join(OUT, "bert", "src")
    c = json.load(open(src + "/config.json"))
    for key, value, text in (
            ("architectures", ["BertModel"], "$.architectures: BertModel: no sequence classifier; "
             "--labels names the classes"),
            ("architectures", ["BertLMHeadModel"], "$.architectures: BertLMHeadModel: trainc imports "
             "a BERT's encoder"),
            ("position_embedding_type", "relative_key", "$.position_embedding_type: "
             "\"relative_key\""),
            ("is_decoder", True, "$.is_decoder: true: a causal decoder")):
        shutil.copytree(src, d + "/edited", dirs_exist_ok=True)
        json.dump(dict(c, **{key: value}), open(d + "/edited/config.json", "w"))
        refused("config.json's %s %s" % (key, json.dumps(value)),
                ["import", "hf", d + "/edited", "-o", d + "/o1"], text, d + "/o1")
    refused("--adapter with a BERT", ["import", "hf", src, "-o", d + "/o2", "--adapter", src],
            "--adapter with bert", d + "/o2")
    for arg, text in (("1", "--labels 1: 2 classes or more"), ("yes", "--labels yes: a count of "
                      "classes, or 2 names or more"), ("a,,b", "none empty"),
                      ("a,b,a", "'a' named twice")):
        refused("--labels %s" % arg, ["import", "hf", src, "-o", d + "/o4", "--labels", arg], text,
                d + "/o4")
    imp = os.path.join(OUT, "bert", "import")
    s = json.load(open(imp + "/model.json"))
    del s["model"]["layers"][4]["body"][0]["body"][0]["causal"]
    json.dump(s, open(d + "/causal.json", "w"))
    refused("export of a causal classifier", ["export", "hf", d + "/causal.json", imp + "/eval.json",
                                              "--weights", imp + "/init.safetensors", "-o", d + "/o3"],
            "$.model.layers[4].body[0].body[0]: a causal mask: BertForSequenceClassification "
            "has no place for it", d + "/o3")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(5)
NAMES = ["negative", "neutral", "positive"]
case("bert", BertForSequenceClassification,
     BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=40, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, id2label=dict(enumerate(NAMES)),
                label2id={n: k for k, n in enumerate(NAMES)}),
     0, True, rng)
case("roberta", RobertaForSequenceClassification,
     RobertaConfig(vocab_size=60, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                   intermediate_size=40, max_position_embeddings=T + 2, type_vocab_size=1,
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2,
                   hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-5, pad_token_id=1),
     1, False, rng)
small = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=40, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, initializer_range=0.05)
# bert-base-uncased's kind (BertForMaskedLM: no pooler), a bare BertModel (no prefix, a
# pooler), roberta-base's (RobertaForMaskedLM), a RoBERTa classifier given other classes
new_head("bert_mlm", BertForSequenceClassification, transformers.BertForMaskedLM,
         BertConfig(**small), "good,bad,ugly", rng, True)
new_head("bert_bare", BertForSequenceClassification, transformers.BertModel,
         BertConfig(**small), "2", rng, False)
rcfg = dict(small, max_position_embeddings=T + 2, type_vocab_size=1, pad_token_id=1)
new_head("roberta_mlm", RobertaForSequenceClassification, transformers.RobertaForMaskedLM,
         RobertaConfig(**rcfg), "4", rng, True)
new_head("roberta_relabel", RobertaForSequenceClassification, RobertaForSequenceClassification,
         RobertaConfig(**rcfg, num_labels=3), "neg,pos", rng, False)
case("distilbert", DistilBertForSequenceClassification,
     DistilBertConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                      max_position_embeddings=40, dropout=0.0, attention_dropout=0.0,
                      seq_classif_dropout=0.0, num_labels=3),
     0, False, rng)
new_head("distil_mlm", DistilBertForSequenceClassification, transformers.DistilBertForMaskedLM,
         DistilBertConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                          max_position_embeddings=40, dropout=0.0, attention_dropout=0.0,
                          seq_classif_dropout=0.0, initializer_range=0.05), "a,b", rng, True)
whole_config()
bad_cases()
print("bert_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
