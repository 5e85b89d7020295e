"""ELECTRA: trainc import hf and export hf of ElectraForSequenceClassification,
ElectraForTokenClassification, ElectraForQuestionAnswering and ElectraForMaskedLM (the
generator) against transformers, and ElectraForPreTraining (the discriminator, as
google/electra-small-discriminator ships) with a new classifier.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained, tiny, fp32, CPU,
one thread, every tensor moved off transformers' init; embeddings 16 wide under blocks 32
wide (ELECTRA-small's kind: embeddings_project between), and one model whose embeddings
are as wide as its blocks (ELECTRA-base's kind: no projection). The rows are random ids
in the tokenizer's layout ([CLS] text [SEP], then padding; a quarter of them full):

- import writes the embeddings at embedding_size, the linear embed_project to the blocks'
  width, the classifier head's gelu (ELECTRA's, where BERT has tanh), the generator's
  transform at embedding_size (its gelu exact whatever the blocks' hidden_act);
- trainc's `--eval` validation loss equals transformers' loss on the same rows within 1e-5
  (the question answerer's with the padding's logits at -1e30, as tests/qa_hf.py);
- import then export gives back every tensor bit for bit (the model without a projection
  told from BERT by its head's gelu);
- the sequence classifier: 8 AdamW steps (warm-up, linear decay, clipping) within 1e-4 of
  torch's AdamW on transformers' model; trained 5 steps and exported,
  ElectraForSequenceClassification's from_pretrained computes trainc's --eval loss;
- ElectraForPreTraining with `--labels 3`: its discriminator head left out, a new classifier
  (dense and out_proj, std initializer_range, zero biases), the loss of transformers'
  sequence classifier with those weights.
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
    from transformers import (ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining,
                              ElectraForQuestionAnswering, ElectraForSequenceClassification,
                              ElectraForTokenClassification)
    from safetensors.torch import load_file
except ImportError:
    print("skip electra_hf: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, rel, saved, trainc  # noqa: E402
from text_hf import exported_back, parity_steps, specs, trained_export  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "electra_hf")
T, N, V, K = 24, 64, 60, 4
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def rows(rng, n):
    """n rows: ids, attention mask, token types (1 over a second text), a class, a tag for
    each token (-100 at the specials and the padding), the masked LM's targets (15% of the
    text, -100 elsewhere), the answer's first and last token"""
    ids = np.zeros((n, T), np.int64)
    mask, types, tags, mlm = (np.zeros_like(ids) for _ in range(4))
    tags[:], mlm[:] = -100, -100
    span = np.zeros((n, 2), np.int64)
    for r in range(n):
        k = T if r % 4 == 0 else int(rng.integers(6, T))
        ids[r, :k] = rng.integers(5, V, size=k)
        ids[r, 0], ids[r, k - 1] = 2, 3
        mask[r, :k] = 1
        types[r, k // 2:k] = 1
        tags[r, 1:k - 1] = rng.integers(0, K, size=k - 2)
        pick = np.nonzero(rng.random(k - 2) < 0.15)[0] + 1
        mlm[r, pick] = ids[r, pick]
        span[r] = sorted(rng.integers(1, k - 1, size=2))
    return ids, mask, types, rng.integers(0, K, size=n), tags, mlm, span


def logits_of(m, rs):
    ids, mask, types = (torch.from_numpy(a).long() for a in rs[:3])
    out = m(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if hasattr(out, "start_logits"):
        return torch.stack([out.start_logits, out.end_logits], 1).masked_fill(
            (mask == 0)[:, None, :], -1e30)
    return out.logits


def loss_of(task):
    """transformers' loss of TASK's model on a batch of rows (a tuple as rows() gives)"""
    def seq(m, b):
        return F.cross_entropy(logits_of(m, b), torch.from_numpy(b[3]).long())

    def token(m, b, y=4):
        return F.cross_entropy(logits_of(m, b).flatten(0, 1), torch.from_numpy(b[y]).long().flatten(),
                               ignore_index=-100)

    def qa(m, b):
        return F.cross_entropy(logits_of(m, b).flatten(0, 1), torch.from_numpy(b[6]).long().flatten())
    return {"seq": seq, "token": token, "mlm": lambda m, b: token(m, b, 5), "qa": qa}[task]


def hf_loss(m, rs, task):
    m.eval()
    with torch.no_grad():
        return float(loss_of(task)(m, rs).double())


def save_rows(imp, tr, va, task):
    keys = list(json.load(open(imp + "/model.json"))["model"]["inputs"])
    y = {"seq": 3, "token": 4, "mlm": 5, "qa": 6}[task]
    os.makedirs(imp + "/data", exist_ok=True)
    for part, rs in (("train", tr), ("val", va)):
        lens = rs[1].sum(1)
        arrays = {"x": rs[0], "types": rs[2], "y": rs[y],
                  "pos": np.array([list(range(k)) + list(range(T - k)) for k in lens])}
        for key in keys:
            np.save("%s/data/%s_%s.npy" % (imp, part, key), arrays[key].astype(np.int32))
    specs(imp, keys)


def case(name, cls, cfg, task, rng, steps=False, want_layers=()):
    d = os.path.join(OUT, name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    ls = json.load(open(imp + "/model.json"))["model"]["layers"]
    ops = [l["op"] + ("." + l["name"] if "name" in l else "") for l in ls]
    check(all(w in ops for w in want_layers), "%s: import writes %s" % (name, ", ".join(want_layers)))
    tr, va = rows(rng, N), rows(rng, 32)
    save_rows(imp, tr, va, task)
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = hf_loss(m, va, task)
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers %.7f (%.1e)"
          % (name, ours, theirs, rel(ours, theirs)))
    a, b = exported_back(imp, d)
    arch = json.load(open(d + "/back/config.json"))["architectures"]
    check(set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a) and arch == [cls.__name__],
          "%s: import then export gives back the folder's %d tensors bit for bit, as %s" %
          (name, len(a), arch[0]))
    if not steps:
        return
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"),
                 [[a[b:b + 16] for a in tr] for b in range(0, N, 16)], loss_of(task))
    ours = trained_export(imp, d)
    theirs = hf_loss(cls.from_pretrained(d + "/hf"), va, task)
    check(rel(ours, theirs) <= 1e-5, "%s: trained, exported, from_pretrained's loss %.7f, trainc "
          "--eval %.7f (%.1e)" % (name, theirs, ours, rel(ours, theirs)))


def new_head(rng, cfg):
    """ElectraForPreTraining (the discriminator) with --labels 3: transformers' sequence
    classifier with trainc's new head computes trainc's --eval loss"""
    d = os.path.join(OUT, "pretraining")
    saved(ElectraForPreTraining, cfg, d + "/src", 0.3)
    imp = d + "/import"
    r = trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--labels", 3)
    rs = rows(rng, 32)
    rs = rs[:3] + (rs[3] % 3,) + rs[4:]
    save_rows(imp, rs, rs, "seq")
    ours = load_file(imp + "/init.safetensors")
    hf = ElectraForSequenceClassification.from_pretrained(d + "/src", num_labels=3)
    with torch.no_grad():
        for mine, theirs in (("pooler", hf.classifier.dense), ("head", hf.classifier.out_proj)):
            theirs.weight.copy_(ours[mine + ".weight"])
            theirs.bias.copy_(ours[mine + ".bias"])
    std = float(ours["head.weight"].std())
    loss = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = hf_loss(hf, rs, "seq")
    check(rel(loss, theirs) <= 1e-5 and abs(std / cfg.initializer_range - 1) < 0.35 and
          not ours["head.bias"].any() and "4 of the checkpoint's other heads left out" in r.stdout,
          "pretraining: ElectraForPreTraining with --labels 3: a new classifier (std %.4f), the "
          "discriminator's head left out; trainc --eval %.7f, transformers %.7f (%.1e)" %
          (std, loss, theirs, rel(loss, theirs)))


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(7)
small = dict(vocab_size=V, embedding_size=16, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=48, max_position_embeddings=40,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.05)
cfg = ElectraConfig(num_labels=K, **small)
case("seq", ElectraForSequenceClassification, cfg, "seq", rng, steps=True,
     want_layers=("linear.embed_project", "gelu", "linear.pooler"))
case("token", ElectraForTokenClassification, cfg, "token", rng,
     want_layers=("linear.embed_project",))
case("qa", ElectraForQuestionAnswering, ElectraConfig(**small), "qa", rng,
     want_layers=("linear.embed_project", "span"))
case("generator", ElectraForMaskedLM, ElectraConfig(hidden_act="gelu_pytorch_tanh", **small), "mlm", rng,
     want_layers=("linear.embed_project", "linear.mlm_dense"))
case("base_kind", ElectraForSequenceClassification,
     ElectraConfig(num_labels=K, **dict(small, embedding_size=32)), "seq", rng, want_layers=("gelu",))
def gelus(ls):
    """every gelu layer of the list, its containers' bodies walked, in order"""
    for l in ls:
        if l["op"] == "gelu":
            yield l
        yield from gelus(l.get("body", []))


gen = json.load(open(os.path.join(OUT, "generator", "import", "model.json")))["model"]["layers"]
dense = [i for i, l in enumerate(gen) if l.get("name") == "mlm_dense"][0]
check(gen[dense + 1] == {"op": "gelu"} and next(gelus(gen)).get("approximate") == "tanh",
      "generator: the blocks' gelu in tanh form (hidden_act gelu_pytorch_tanh), the generator's "
      "transform's exact (transformers' ElectraGeneratorPredictions: get_activation(\"gelu\"))")
new_head(rng, ElectraConfig(**small))
print("electra_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
