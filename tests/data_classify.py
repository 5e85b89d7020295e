"""trainc data classify against transformers' tokenizer call.

HF_PYTHON (transformers 4.40.2 and tokenizers over Debian's torch) runs this; without
them it exits 77 (a skip). Tokenizers trained here over Debian's license texts (no hub):
RoBERTa's kind (byte-level BPE, RobertaProcessing: <s> A </s>, pairs <s> A </s></s> B
</s>) and BERT's post-processor over byte-level BPE (TemplateProcessing: [CLS] A [SEP],
pairs [CLS] A [SEP] B [SEP], B and its [SEP] of type 1). The model specs are imports
(`import hf --labels`) of tiny RobertaForMaskedLM and BertForMaskedLM folders, rows of 24.

- single texts and pairs of texts, short and long, with multi-byte UTF-8: every row of
  x is transformers' `tokenizer(texts[, pairs], truncation=True, max_length=24,
  padding="max_length")["input_ids"]` (longest-first truncation of pairs), types its
  token_type_ids (BERT's; RoBERTa's 0, as transformers gives RoBERTa's model none), pos 0
  .. L-1 over attention_mask's ones then 0 again over the padding, y each label by name
  (a string among the model's labels) or by number;
- `--val` takes a file of its own; `--val-frac` the last tenth; `--unlabeled` writes the
  rows alone (test_*.npy, for --predict);
- the rows train: 2 steps of the import on them;
- refused with exit 1, naming the line or the option, nothing left behind: a label the
  model does not name, a class past its count, a line without its text, --pair with a
  tokenizer that has no pair template, a model without positions.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np

try:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
except ImportError:
    print("skip data_classify: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, failed, refused, trainc  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "data_classify")
T = 24
transformers.logging.set_verbosity_error()


def license_lines():
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/**", recursive=True)
                   if os.path.isfile(f) and not os.path.islink(f))
    text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in files[:6])
    return [l.strip() for l in text.splitlines() if l.strip()]


def tokenizer(kind, corpus):
    """a byte-level BPE of RoBERTa's kind or with BERT's template; its tokenizer.json"""
    specials = ["<s>", "<pad>", "</s>", "<unk>"] if kind == "roberta" else \
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if kind == "roberta":
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    else:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    path = os.path.join(OUT, kind + "_tokenizer.json")
    tok.save(path)
    pad = "<pad>" if kind == "roberta" else "[PAD]"
    return path, PreTrainedTokenizerFast(tokenizer_file=path, pad_token=pad), tok.get_vocab_size()


def model(name, kind, vocab, labels):
    """an import of a tiny masked LM of the kind with --labels: its model.json"""
    small = dict(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32)
    if kind == "roberta":
        m = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            **small, max_position_embeddings=T + 2, type_vocab_size=1, pad_token_id=1))
    else:
        m = transformers.BertForMaskedLM(transformers.BertConfig(**small, max_position_embeddings=T))
    imp = os.path.join(OUT, name.replace(" ", "_"))
    src = imp + "_src"
    m.save_pretrained(src, safe_serialization=True)
    trainc("import", "hf", src, "-o", imp, "--seq-len", T, "--labels", labels)
    return imp


def examples(lines, rng, n, pairs, names):
    out = []
    for i in range(n):
        a = " ".join(lines[int(rng.integers(len(lines)))] for _ in range(int(rng.integers(1, 4))))
        a = a[:int(rng.integers(1, 160))] + (" naïve café ✓ 日本" if i % 5 == 0 else "")
        e = {"text": a, "label": names[i % len(names)] if i % 3 else i % len(names)}
        if pairs:
            e["hypothesis"] = lines[int(rng.integers(len(lines)))][:int(rng.integers(1, 90))]
        out.append(e)
    return out


def write(path, exs):
    with open(path, "w") as f:
        for e in exs:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")


def compare(name, d, part, hf, exs, pairs, names, typed):
    a = [e["text"] for e in exs]
    b = [e["hypothesis"] for e in exs] if pairs else None
    want = hf(a, b, truncation=True, max_length=T, padding="max_length",
              return_token_type_ids=True)
    ids, mask = np.array(want["input_ids"]), np.array(want["attention_mask"])
    x = np.load("%s/%s_x.npy" % (d, part))
    pos = np.load("%s/%s_pos.npy" % (d, part))
    y = np.load("%s/%s_y.npy" % (d, part))
    check(x.shape == ids.shape and np.array_equal(x, ids), "%s %s: x is transformers' input_ids "
          "(%d rows, %d cut to %d)" % (name, part, len(x), int((mask.sum(1) == T).sum()), T))
    L = mask.sum(1)
    want_pos = np.where(mask == 1, np.arange(T), np.arange(T) - L[:, None])
    check(np.array_equal(pos, want_pos), "%s %s: pos counts the text from 0, then the padding "
          "from 0" % (name, part))
    if typed:
        types = np.load("%s/%s_types.npy" % (d, part))
        tt = np.array(want["token_type_ids"]) * mask
        check(np.array_equal(types, tt), "%s %s: types are transformers' token_type_ids (%d of "
              "type 1)" % (name, part, int(tt.sum())))
    else:
        check(not os.path.exists("%s/%s_types.npy" % (d, part)) or
              not np.load("%s/%s_types.npy" % (d, part)).any(),
              "%s %s: RoBERTa's type ids all 0" % (name, part))
    want_y = [names.index(e["label"]) if isinstance(e["label"], str) else e["label"] for e in exs]
    check(np.array_equal(y, want_y), "%s %s: y the labels' classes, by name and by number"
          % (name, part))


def case(name, kind, pairs, names, lines, rng):
    tok_path, hf, vocab = tokenizer(kind, lines)
    imp = model(name, kind, vocab, ",".join(names))
    d = imp + "/data"
    train, val = examples(lines, rng, 60, pairs, names), examples(lines, rng, 20, pairs, names)
    write(imp + "/train.jsonl", train)
    write(imp + "/val.jsonl", val)
    opts = ["--pair", "hypothesis"] if pairs else []
    trainc("data", "classify", imp + "/train.jsonl", d, "--tokenizer", tok_path, "--model",
           imp + "/model.json", "--val", imp + "/val.jsonl", *opts)
    compare(name, d, "train", hf, train, pairs, names, kind == "bert")
    compare(name, d, "val", hf, val, pairs, names, kind == "bert")
    r = trainc("run", imp + "/model.json", imp + "/train.json", "--init", imp + "/init.safetensors",
               "--set", "max_steps=2", "--set", "batch_size=8", "--set", "precision=fp32",
               "--threads", 1, "--quiet", "--out", imp + "/run")
    check(os.path.exists(imp + "/run/model.safetensors"), "%s: the rows train (2 steps of the "
          "import's train.json)" % name)
    return tok_path, imp


def frac_case(tok_path, imp):
    d = imp + "/frac"
    trainc("data", "classify", imp + "/train.jsonl", d, "--tokenizer", tok_path, "--model",
           imp + "/model.json", "--val-frac", "0.25")
    n = [len(np.load("%s/%s_y.npy" % (d, p))) for p in ("train", "val")]
    check(n == [45, 15], "--val-frac 0.25: the last quarter of 60 examples in val (%d + %d)" % tuple(n))


def unlabeled_case(name, tok_path, imp):
    """--unlabeled: the same texts without labels as test_*.npy, the rows of the labeled run
    (no y, no val)"""
    d = imp + "/unlabeled"
    with open(imp + "/nolabel.jsonl", "w") as f:
        for l in open(imp + "/val.jsonl"):
            e = json.loads(l)
            del e["label"]
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    trainc("data", "classify", imp + "/nolabel.jsonl", d, "--tokenizer", tok_path, "--model",
           imp + "/model.json", "--unlabeled")
    same = all(np.array_equal(np.load("%s/test_%s.npy" % (d, k)), np.load("%s/data/val_%s.npy" % (imp, k)))
               for k in ("x", "types", "pos"))
    check(same and sorted(os.listdir(d)) == ["test_pos.npy", "test_types.npy", "test_x.npy"],
          "%s: --unlabeled writes test_x, test_types and test_pos alone, the labeled rows'" % name)


def bad_cases(tok_path, imp, lines):
    d = os.path.join(OUT, "bad")
    os.makedirs(d, exist_ok=True)
    base = ["data", "classify", None, d + "/o", "--tokenizer", tok_path, "--model", imp + "/model.json",
            "--val-frac", "0"]
    for what, line, text in (
            ("a label the model does not name", {"text": "a", "label": "maybe"},
             ":2: error: 'label' is \"maybe\": the model's classes are its labels' names or 0 to 1"),
            ("a class past its count", {"text": "a", "label": 2}, ":2: error: 'label' is no class"),
            ("a line without its text", {"label": 1}, ":2: error: missing key 'text'")):
        write(d + "/in.jsonl", [{"text": "fine", "label": 0}, line])
        args = list(base)
        args[2] = d + "/in.jsonl"
        refused(what, args, text, d + "/o/train_x.npy")
    gpt2 = Tokenizer(models.BPE())
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.train_from_iterator(lines[:50], trainers.BpeTrainer(vocab_size=300, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    gpt2.save(d + "/gpt2.json")
    write(d + "/in.jsonl", [{"text": "fine", "hypothesis": "too", "label": 0}])
    args = list(base)
    args[2], args[5] = d + "/in.jsonl", d + "/gpt2.json"
    refused("--pair with a tokenizer without a pair template", args + ["--pair", "hypothesis"],
            "has no post-processor template for a pair", d + "/o/train_x.npy")
    s = json.load(open(imp + "/model.json"))
    del s["model"]["positions"]
    json.dump(s, open(d + "/nopos.json", "w"))
    args = list(base)
    args[2], args[7] = d + "/in.jsonl", d + "/nopos.json"
    refused("a model without positions", args, "$.model.positions: missing", d + "/o/train_x.npy")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(7)
lines = license_lines()
tok_path, imp = case("roberta", "roberta", False, ["negative", "positive"], lines, rng)
case("roberta pairs", "roberta", True, ["no", "yes"], lines, rng)
case("bert pairs", "bert", True, ["entailment", "neutral", "contradiction"], lines, rng)
frac_case(tok_path, imp)
unlabeled_case("roberta", tok_path, imp)
bad_cases(tok_path, imp, lines)
print("data_classify: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
