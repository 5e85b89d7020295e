"""Masked language models: trainc import hf and export hf of BertForMaskedLM,
RobertaForMaskedLM and DistilBertForMaskedLM against transformers, and `trainc data mlm`.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Tokenizers trained here over Debian's license texts (no hub): BERT's
WordPiece and RoBERTa's byte-level BPE. Random-weight models made here with
save_pretrained, tiny, fp32, CPU, one thread, every tensor moved off transformers' init.
The text is 160 license lines (some longer than the rows of 24):

- `data mlm --dynamic` and the trainer's `loader.mask`: the training rows unmasked (y each
  text token's id); masks drawn every epoch by the rule docs/spec.md gives (the shares
  over 12 epochs by this file's copy of it); 16 steps (2 epochs) within 1e-4 of torch's
  AdamW on transformers' BERT fed the rows this file masks; stopped mid-epoch and
  resumed, other loader workers: the same losses; on the fake GPU, masked on the device,
  within 1e-5 of the CPU; refused: rows masked already, no token, a token past the
  vocabulary, a target not the loss's, --dynamic with --copies; --group --dynamic: the
  grouped rows unmasked;
- `data mlm`: where a row's y is -100 its x is transformers' `tokenizer(lines,
  truncation=True, max_length=24, padding="max_length")` input_ids, where y is an id it is
  that input id; no special token and no padding is chosen; of the text's tokens 15% are
  chosen (within 3 points), of those 80% masked and 10% kept (within 8 and 6 points);
  the positions restart at the padding; the same seed gives the same files, another seed
  other masks; --copies 3 draws three masks of each training line; with --group over 2,500
  lines the rows unmasked are run_mlm.py's group_texts of transformers' ids, each 1000
  lines concatenated and cut into rows of 24, the rest dropped;
- imported (no --task: a ForMaskedLM folder is a masked LM), the head is the word
  embedding's weight (`tie`) with a bias of its own, and trainc's `--eval` validation
  loss equals transformers' MLM loss on the same rows within 1e-5;
- import then export gives back every tensor bit for bit;
- 8 AdamW steps (warm-up, linear decay, weight decay, clipping) give every step's loss
  within 1e-4 of torch's AdamW on transformers' model;
- trained 5 steps and exported, transformers' ForMaskedLM from_pretrained computes
  trainc's --eval loss within 1e-5; the export then imports with --labels as a sequence
  classifier over the trained encoder (domain-adaptive pretraining, then fine-tuning);
- BertForPreTraining imports as the masked LM (its pooler and next-sentence head left
  out), its loss transformers' BertForMaskedLM's from that folder;
- refused with exit 1, naming the key or the option: --task mlm with --labels, a
  BertModel (no head to read), tie_word_embeddings false, data mlm for a token classifier
  and data tags for a masked LM, a tokenizer without a mask token, --mask-prob 2, --copies 1.5.
"""
import filecmp
import json
import os
import shutil
import sys

import numpy as np
import torch

try:
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (BertConfig, BertForMaskedLM, DistilBertConfig,
                              DistilBertForMaskedLM, RobertaConfig, RobertaForMaskedLM)
    from safetensors.torch import load_file
except ImportError:
    print("skip bert_mlm_hf: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
import run_log  # noqa: E402
from text_hf import (byte_level, exported_back, fake_gpu_vs_cpu, license_lines,  # noqa: E402
                     parity_steps, specs, train_like_specs, trained_export, wordpiece)

OUT = os.path.join(ROOT, "build", "tests", "bert_mlm_hf")
T, N = 24, 160
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def inputs_of(d):
    return list(json.load(open(d + "/model.json"))["model"]["inputs"])


def load_rows(d, part, keys):
    return {k: np.load("%s/data/%s_%s.npy" % (d, part, k)) for k in keys}


def specials_of(path):
    return {t["id"] for t in json.load(open(path))["added_tokens"] if t["special"]}


def rows_agree(name, d, part, hf, lines, tok):
    """the rows' x, y and pos against transformers' ids of the lines; the masks' shares"""
    enc = hf(lines, truncation=True, max_length=T, padding="max_length")
    ids, mask = np.array(enc["input_ids"]), np.array(enc["attention_mask"])
    r = load_rows(d, part, ["x", "pos", "y"])
    x, y = r["x"], r["y"]
    chosen = y != -100
    lens = mask.sum(1)
    pos = np.array([list(range(k)) + list(range(T - k)) for k in lens])
    special = np.isin(ids, list(specials_of(tok))) | (mask == 0)
    ok = (np.array_equal(x[~chosen], ids[~chosen]) and np.array_equal(y[chosen], ids[chosen])
          and not (chosen & special).any() and np.array_equal(r["pos"], pos))
    share = chosen.sum() / (~special).sum()
    masked = (x[chosen] == MASK[name]).mean()
    kept = (x[chosen] == y[chosen]).mean()
    check(ok and abs(share - 0.15) < 0.03 and abs(masked - 0.8) < 0.08 and abs(kept - 0.1) < 0.06,
          "%s: data mlm's %s rows: x is transformers' ids where nothing is chosen, y the ids "
          "chosen, never a special token or padding; %.1f%% of %d text tokens chosen, %.1f%% "
          "of those masked, %.1f%% kept" % (name, part, 100 * share, (~special).sum(),
                                             100 * masked, 100 * kept))
    return ids, mask


def hf_loss(m, rows):
    """transformers' masked LM loss (its mean over the chosen tokens) over all the rows"""
    x, mask, types, y = (torch.from_numpy(a).long() for a in rows)
    extra = {} if m.config.model_type == "distilbert" else {"token_type_ids": types}
    return m(input_ids=x, attention_mask=mask, labels=y, **extra).loss


def eval_hf(m, rows):
    m.eval()
    with torch.no_grad():
        return float(hf_loss(m, rows))


def hf_rows(d, part):
    r = load_rows(d, part, ["x", "pos", "y"])
    L = np.array([T if (p[1:] != 0).all() else 1 + int(np.argmax(p[1:] == 0)) for p in r["pos"]])
    mask = (np.arange(T)[None, :] < L[:, None]).astype(np.int64)
    return r["x"], mask, np.zeros_like(r["x"]), r["y"]


def made(name, d, tok, lines, extra=()):
    """data mlm over the lines (the last fifth for validation)"""
    with open(d + "/text.txt", "w") as f:
        f.write("\n".join(lines) + "\n\n")   # (a blank line, skipped)
    r = trainc("data", "mlm", d + "/text.txt", d + "/data", "--tokenizer", tok, "--model",
               d + "/model.json", "--val-frac", 0.2, *extra)
    print("  " + r.stdout.strip())


def case(name, cls, cfg, tok, hf, lines):
    d = os.path.join(OUT, name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    r = trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    spec = json.load(open(imp + "/model.json"))["model"]
    head = spec["layers"][-1]
    check("a masked language model" in r.stdout and head.get("tie") == "embed" and
          spec["inputs"]["y"]["shape"] == [T] and spec["inputs"]["y"]["classes"] == cfg.vocab_size
          and spec["loss"].get("ignore_index") == -100,
          "%s: %s imports as a masked LM: y [%d] over the vocabulary, the head tied to the word "
          "embedding, ignore_index -100" % (name, cls.__name__, T))
    tanh = spec["layers"][-3].get("approximate") == "tanh"
    want = name == "distilbert"   # (RoBERTa's lm_head gelu is exact whatever hidden_act says)
    check(spec["layers"][-3]["op"] == "gelu" and tanh == want,
          "%s: the head's gelu is %s, as transformers' %s computes it" %
          (name, "the tanh form" if want else "exact", cls.__name__))
    made(name, imp, tok, lines)
    n_tr = N - N // 5
    rows_agree(name, imp, "train", hf, lines[:n_tr], tok)
    rows_agree(name, imp, "val", hf, lines[n_tr:], tok)
    specs(imp, inputs_of(imp))
    va = hf_rows(imp, "val")
    ours, theirs = (eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                              d + "/eval0"), eval_hf(m, va))
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers' MLM loss "
          "%.7f over %d chosen tokens (%.1e)" % (name, ours, theirs, int((va[3] != -100).sum()),
                                                 rel(ours, theirs)))
    a, b = exported_back(imp, d)
    rows0 = "roberta.embeddings.position_embeddings.weight"
    if name == "roberta":
        a[rows0], b[rows0] = a[rows0][2:], b[rows0][2:]
    check(set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
          "%s: import then export gives back the folder's %d tensors bit for bit" % (name, len(a)))
    tr = hf_rows(imp, "train")
    batches = [[a[b:b + 16] for a in tr] for b in range(0, len(tr[0]) - 15, 16)]
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"), batches, hf_loss)
    ours = trained_export(imp, d)
    back = cls.from_pretrained(d + "/hf")
    theirs = eval_hf(back, va)
    check(rel(ours, theirs) <= 1e-5 and back.config.architectures == [cls.__name__],
          "%s: trained, exported as %s, from_pretrained's loss %.7f, trainc --eval %.7f (%.1e)"
          % (name, back.config.architectures, theirs, ours, rel(ours, theirs)))
    adapted(name, d)


def adapted(name, d):
    """the trained masked LM's export imported with --labels: a sequence classifier over
    the trained encoder"""
    trainc("import", "hf", d + "/hf", "-o", d + "/cls", "--seq-len", T, "--labels", "a,b")
    mine, theirs = load_file(d + "/cls/init.safetensors"), load_file(d + "/run5/model.safetensors")
    enc = [k for k in theirs if not k.startswith(("mlm_", "head."))]
    same = all(k in mine and torch.equal(mine[k], theirs[k]) for k in enc)
    check(same and "pooler.weight" in mine and mine["head.weight"].shape[0] == 2,
          "%s: the trained masked LM's export imports with --labels as a sequence classifier: "
          "its %d encoder tensors as trained, the pooler and head new" % (name, len(enc)))


def determinism(tok, imp, lines):
    """the same seed gives the same files; another seed other masks; --copies 3 three rows
    a training line"""
    d = os.path.join(OUT, "seeds")
    os.makedirs(d)
    shutil.copy(imp + "/model.json", d + "/model.json")
    made("bert", d, tok, lines)
    os.rename(d + "/data", d + "/first")
    made("bert", d, tok, lines)
    same = all(filecmp.cmp("%s/first/%s" % (d, f), "%s/data/%s" % (d, f), shallow=False)
               for f in os.listdir(d + "/first"))
    shutil.rmtree(d + "/data")
    made("bert", d, tok, lines, ("--seed", 2))
    other = not np.array_equal(np.load(d + "/first/train_y.npy"), np.load(d + "/data/train_y.npy"))
    shutil.rmtree(d + "/data")
    made("bert", d, tok, lines, ("--copies", 3))
    x1, x3 = np.load(d + "/first/train_x.npy"), np.load(d + "/data/train_x.npy")
    y3 = np.load(d + "/data/train_y.npy")
    ids = np.where(y3 == -100, x3, y3)   # (the rows unmasked)
    copies = (len(x3) == 3 * len(x1) and np.array_equal(ids[0::3], ids[1::3]) and
              not np.array_equal(y3[0::3], y3[1::3]) and
              len(np.load(d + "/data/val_x.npy")) == N // 5)
    check(same and other and copies, "data mlm: the same seed gives the same files, --seed 2 "
          "other masks, --copies 3 three masks of each training line (one of each val line)")


def grouped(tok, hf, imp, words):
    """data mlm --group (run_mlm.py's group_texts): 2,500 lines, the last fifth validation;
    each split's lines in batches of 1000, each line transformers' ids with its special
    tokens, concatenated and cut into rows of T, each batch's rest dropped: the rows
    unmasked are those, pos 0 .. T-1, no special token chosen"""
    d = os.path.join(OUT, "grouped")
    os.makedirs(d)
    shutil.copy(imp + "/model.json", d + "/model.json")
    lines = [" ".join(words[i % len(words)]) for i in range(2500)]
    with open(d + "/text.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    r = trainc("data", "mlm", d + "/text.txt", d + "/data", "--tokenizer", tok, "--model",
               d + "/model.json", "--val-frac", 0.2, "--group")
    print("  " + r.stdout.strip())
    ok, what = True, []
    for part, part_lines in (("train", lines[:2000]), ("val", lines[2000:])):
        want = []
        for b in range(0, len(part_lines), 1000):
            ids = [i for e in hf(part_lines[b:b + 1000])["input_ids"] for i in e]
            want += [ids[i:i + T] for i in range(0, len(ids) // T * T, T)]
        x, y, pos = (np.load("%s/data/%s_%s.npy" % (d, part, k)) for k in ("x", "y", "pos"))
        chosen = y != -100
        special = np.isin(np.array(want), list(specials_of(tok)))
        ok &= (np.array_equal(np.where(chosen, y, x), np.array(want)) and
               (pos == np.arange(T)[None, :]).all() and not (chosen & special).any())
        what.append("%d %s rows" % (len(want), part))
    check(ok and "dropped" in r.stdout, "data mlm --group: %s, each transformers' ids of 1000 "
          "lines concatenated and cut (run_mlm.py's group_texts), unmasked where nothing is "
          "chosen, no special token chosen" % " and ".join(what))
    trainc("data", "mlm", d + "/text.txt", d + "/dyn", "--tokenizer", tok, "--model",
           d + "/model.json", "--val-frac", 0.2, "--group", "--dynamic")
    x, y = (np.load("%s/dyn/train_%s.npy" % (d, k)) for k in ("x", "y"))
    rows = np.load("%s/train_x.npy" % (d + "/data"))
    ys = np.load("%s/train_y.npy" % (d + "/data"))
    ids = np.where(ys != -100, ys, rows)   # (the grouped rows unmasked)
    special = np.isin(ids, list(specials_of(tok)))
    check(np.array_equal(x, ids) and np.array_equal(y, np.where(special, -100, ids)),
          "data mlm --group --dynamic: the same %d grouped rows unmasked, y every token's id "
          "but the special ones'" % len(x))


M64 = (1 << 64) - 1


def mix(z):
    """splitmix64's finalizer"""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mask_draws(x, y, rows, epoch, seed, token, vocab, prob=0.15):
    """loader.mask's draws as docs/spec.md defines them, written here from the text: row r
    of X and Y is sample ROWS[r] of EPOCH; position p draws rt_aug_bits(seed ^ salt, epoch,
    index T + p); bits 0..23 choose (below prob 2^24), bits 24..47 mask (below 0.8 2^24),
    swap in a random id (below 0.9 2^24: ((mix(bits) >> 32) vocab) >> 32) or keep"""
    x, y = x.copy(), y.copy()
    choose, masked, swapped = (round(p * 2 ** 24) for p in (prob, 0.8, 0.9))
    for r, index in enumerate(rows):
        for p in range(T):
            if y[r, p] == -100:
                continue
            z = seed ^ 0x2545F4914F6CDD1D ^ 0x5851F42D4C957F2D
            for v in (epoch, int(index) * T + p):
                z = mix(z ^ ((v * 0x9E3779B97F4A7C15) & M64))
            if z & 0xFFFFFF >= choose:
                y[r, p] = -100
            elif (z >> 24) & 0xFFFFFF < masked:
                x[r, p] = token
            elif (z >> 24) & 0xFFFFFF < swapped:
                x[r, p] = ((mix(z) >> 32) * vocab) >> 32
    return x, y


def dynamic(tok, hf, imp, lines, cls, vocab):
    """data mlm --dynamic (training rows unmasked, y every text token) and loader.mask's
    masks drawn each epoch: the rule's shares; trainc's 16 steps (2 epochs) against
    torch's on the rows masked by this file's mask_draws; a run stopped mid-epoch and
    resumed, other loader workers: the same losses; the masks on the fake GPU (the data
    kept there) the CPU's"""
    d = os.path.join(OUT, "dynamic")
    os.makedirs(d)
    for f in ("model.json", "init.safetensors"):
        shutil.copy(imp + "/" + f, d + "/" + f)
    with open(d + "/text.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    r = trainc("data", "mlm", d + "/text.txt", d + "/data", "--tokenizer", tok, "--model",
               d + "/model.json", "--val-frac", 0.2, "--dynamic")
    print("  " + r.stdout.strip().replace("\n", "\n  "))
    n_tr = N - N // 5
    enc = hf(lines[:n_tr], truncation=True, max_length=T, padding="max_length")
    ids, att = np.array(enc["input_ids"]), np.array(enc["attention_mask"])
    text = ~np.isin(ids, list(specials_of(tok))) & (att == 1)
    x, y = np.load(d + "/data/train_x.npy"), np.load(d + "/data/train_y.npy")
    check(np.array_equal(x, ids) and np.array_equal(y, np.where(text, ids, -100)) and
          '"loader": {"mask": {"token": %d}}' % MASK["bert"] in r.stdout,
          "data mlm --dynamic: the training rows are transformers' ids unmasked, y each text "
          "token's id (-100 at special tokens and padding); it prints the loader.mask to train with")
    rows_agree("bert", d, "val", hf, lines[n_tr:], tok)
    draws = [mask_draws(x, y, range(n_tr), e, 1, MASK["bert"], vocab) for e in range(12)]
    mx, my = np.concatenate([a for a, _ in draws]), np.concatenate([b for _, b in draws])
    chosen, texts = my != -100, np.tile(text, (12, 1))
    share, masked = chosen.sum() / texts.sum(), (mx[chosen] == MASK["bert"]).mean()
    kept = (mx[chosen] == my[chosen]).mean()
    check(abs(share - 0.15) < 0.01 and abs(masked - 0.8) < 0.02 and abs(kept - 0.1) < 0.015 and
          not (chosen & ~texts).any() and not np.array_equal(draws[0][1], draws[1][1]),
          "loader.mask's rule over 12 epochs: %.1f%% of %d text tokens chosen, %.1f%% of those "
          "masked, %.1f%% kept; each epoch its own masks" % (100 * share, texts.sum(),
                                                             100 * masked, 100 * kept))
    t8 = json.load(open(imp + "/train8.json"))
    t8["train"]["loader"]["mask"] = {"token": MASK["bert"]}
    json.dump(dict(t8, train=dict(t8["train"], max_steps=16)), open(d + "/train16.json", "w"))
    common = ("--init", d + "/init.safetensors", "--threads", 1, "--quiet")
    trainc("run", d + "/model.json", d + "/train16.json", *common, "--out", d + "/run")
    ours = run_log.losses(d + "/run")
    batches, rows = [], hf_rows(d, "train")
    for e in range(2):
        mx, my = mask_draws(x, y, range(n_tr), e, 1, MASK["bert"], vocab)
        batches += [[a[b:b + 16] for a in (mx, rows[1], rows[2], my)] for b in range(0, n_tr, 16)]
    theirs = train_like_specs(cls.from_pretrained(os.path.join(OUT, "bert", "src")), batches,
                              hf_loss, steps=16)
    worst = max(rel(a, b) for a, b in zip(ours, theirs))
    check(len(ours) == 16 and worst <= 1e-4, "loader.mask: 16 AdamW steps (2 epochs of 8 "
          "batches), every loss within %.1e of torch's on transformers' model fed the rows "
          "masked by the documented draws (first %.6f, last %.6f)" % (worst, ours[0], ours[-1]))
    flat = ("--set", "schedule.type=constant")   # (a decay would follow max_steps)
    trainc("run", d + "/model.json", d + "/train16.json", *common, *flat, "--out", d + "/flat")
    trainc("run", d + "/model.json", d + "/train16.json", *common, *flat, "--out", d + "/cut",
           "--set", "max_steps=12", "--set", "checkpoint.every_steps=4", "--set", "loader.workers=0")
    trainc("run", d + "/model.json", d + "/train16.json", "--threads", 1, "--quiet", "--resume",
           d + "/cut", *flat, "--set", "max_steps=16", "--set", "loader.workers=3")
    a, b = run_log.losses(d + "/flat"), run_log.losses(d + "/cut")
    check(len(a) == 16 and a == b, "loader.mask: stopped at step 12 (batch 4 of epoch 1) and "
          "resumed, with 0 and then 3 loader workers: the 16 losses of the run straight "
          "through, bit for bit")
    masked_already = dict(t8, train=dict(t8["train"], data={
        p: {k: "%s/data/%s_%s.npy" % (imp, p, k) for k in inputs_of(imp)} for p in ("train", "val")}))
    json.dump(masked_already, open(d + "/static.json", "w"))
    spec = (d + "/model.json", d + "/train16.json")
    refused("loader.mask over rows masked already", ["run", d + "/model.json", d + "/static.json",
                                                     "--out", d + "/o1"],
            "rows masked already (`trainc data mlm` without --dynamic)", d + "/o1")
    refused("loader.mask without its token", ["check", *spec, "--set", "loader.mask.token=null"],
            "loader.mask needs token: the mask token's id")
    refused("a mask token past the vocabulary", ["run", *spec, "--set", "loader.mask.token=%d" % vocab,
                                                 "--out", d + "/o2"],
            "$.train.loader.mask.token: %d is not an id of 'x'" % vocab, d + "/o2")
    refused("loader.mask's target not the loss's", ["check", *spec, "--set", "loader.mask.target=pos"],
            "$.train.loader.mask.target: 'pos' is not the cross_entropy target")
    refused("data mlm --dynamic --copies 2",
            ["data", "mlm", d + "/text.txt", d + "/o3", "--tokenizer", tok, "--model",
             d + "/model.json", "--dynamic", "--copies", 2], "one or the other", d + "/o3")
    os.makedirs(d + "/gpu")
    json.dump(dict(t8, train=dict(t8["train"], loader=dict(t8["train"]["loader"],
                                                           on_gpu="always"))),
              open(d + "/train8.json", "w"))
    fake_gpu_vs_cpu("a masked LM with loader.mask (masked on the device)", d, d + "/gpu",
                    bf16=False)


def pretraining(tok, hf, lines, wp_vocab, small):
    """BertForPreTraining (bert-base-uncased's published kind) as the masked LM"""
    d = os.path.join(OUT, "pretraining")
    saved(transformers.BertForPreTraining, BertConfig(vocab_size=wp_vocab,
                                                      max_position_embeddings=40, **small),
          d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    made("bert", imp, tok, lines)
    specs(imp, inputs_of(imp))
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = eval_hf(BertForMaskedLM.from_pretrained(d + "/src"), hf_rows(imp, "val"))
    check(rel(ours, theirs) <= 1e-5 and "pooler.weight" not in load_file(imp + "/init.safetensors"),
          "BertForPreTraining imports as the masked LM (pooler and next-sentence head left "
          "out): --eval %.7f, transformers' BertForMaskedLM of that folder %.7f (%.1e)"
          % (ours, theirs, rel(ours, theirs)))


def bad_cases(tok, bert_imp, lines, small, wp_vocab):
    d = os.path.join(OUT, "bad")
    os.makedirs(d)
    src = os.path.join(OUT, "bert", "src")
    refused("--task mlm with --labels", ["import", "hf", src, "-o", d + "/o1", "--task", "mlm",
                                         "--labels", "2"],
            "--labels with --task mlm", d + "/o1")
    bare = d + "/bare"
    saved(transformers.BertModel, BertConfig(vocab_size=wp_vocab, max_position_embeddings=40,
                                             **small), bare, 0.1)
    refused("--task mlm with a BertModel", ["import", "hf", bare, "-o", d + "/o2", "--task",
                                            "mlm"],
            "$.architectures: no masked language model's head to read", d + "/o2")
    shutil.copytree(src, d + "/untied")
    c = json.load(open(src + "/config.json"))
    json.dump(dict(c, tie_word_embeddings=False), open(d + "/untied/config.json", "w"))
    refused("tie_word_embeddings false", ["import", "hf", d + "/untied", "-o", d + "/o3"],
            "$.tie_word_embeddings: false: trainc's masked LM head is the word embedding's",
            d + "/o3")
    tok_imp = os.path.join(OUT, "tok")
    trainc("import", "hf", src, "-o", tok_imp, "--task", "token", "--labels", "3", "--seq-len", T)
    with open(d + "/text.txt", "w") as f:
        f.write("\n".join(lines[:10]) + "\n")
    refused("data mlm for a token classifier",
            ["data", "mlm", d + "/text.txt", d + "/o4", "--tokenizer", tok, "--model",
             tok_imp + "/model.json"], "a class for each token: its rows are `trainc data tags`'s",
            d + "/o4/train_x.npy")
    with open(d + "/tags.jsonl", "w") as f:
        f.write(json.dumps({"tokens": ["a"], "ner_tags": [0]}) + "\n")
    refused("data tags for a masked LM",
            ["data", "tags", d + "/tags.jsonl", d + "/o5", "--tokenizer", tok, "--model",
             bert_imp + "/model.json"], "a masked language model: its rows are `trainc data mlm`'s",
            d + "/o5/train_x.npy")
    nomask = Tokenizer(models.BPE())
    nomask.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    nomask.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=280, show_progress=False,
                                                          special_tokens=["<pad>"]))
    nomask.save(d + "/nomask.json")
    refused("a tokenizer without a mask token",
            ["data", "mlm", d + "/text.txt", d + "/o6", "--tokenizer", d + "/nomask.json",
             "--model", bert_imp + "/model.json"], "has no mask token ([MASK] or <mask>)",
            d + "/o6/train_x.npy")
    refused("--mask-prob 2", ["data", "mlm", d + "/text.txt", d + "/o7", "--tokenizer", tok,
                              "--model", bert_imp + "/model.json", "--mask-prob", 2],
            "--mask-prob must be a number in [0.001, 1], got '2'", d + "/o7/train_x.npy")
    refused("--copies 1.5", ["data", "mlm", d + "/text.txt", d + "/o8", "--tokenizer", tok,
                             "--model", bert_imp + "/model.json", "--copies", 1.5],
            "--copies must be a whole number in [1, 100], got '1.5'", d + "/o8/train_x.npy")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(3)
words = license_lines()
lines = [" ".join(words[int(i)]) for i in rng.integers(0, len(words), size=N)]
lines[::7] = [l + " naïve café 日本語" for l in lines[::7]]
lines[3] = lines[3] + " " + " ".join(lines[4:9])   # (past the rows' length)
corpus = [" ".join(w) for w in words]
wp_path, bl_path = os.path.join(OUT, "wordpiece.json"), os.path.join(OUT, "bytelevel.json")
wp_hf, wp_vocab = wordpiece(wp_path, corpus)
bl_hf, bl_vocab = byte_level(bl_path, corpus, False)
MASK = {"bert": wp_hf.convert_tokens_to_ids("[MASK]"),
        "distilbert": wp_hf.convert_tokens_to_ids("[MASK]"),
        "roberta": bl_hf.convert_tokens_to_ids("<mask>")}
small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.05)
case("bert", BertForMaskedLM, BertConfig(vocab_size=wp_vocab, max_position_embeddings=40, **small),
     wp_path, wp_hf, lines)
case("roberta", RobertaForMaskedLM,
     RobertaConfig(vocab_size=bl_vocab, max_position_embeddings=T + 2, type_vocab_size=1,
                   pad_token_id=1, layer_norm_eps=1e-5, hidden_act="gelu_pytorch_tanh", **small),
     bl_path, bl_hf, lines)
case("distilbert", DistilBertForMaskedLM,
     DistilBertConfig(vocab_size=wp_vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                      max_position_embeddings=40, dropout=0.0, attention_dropout=0.0,
                      activation="gelu_pytorch_tanh"), wp_path, wp_hf, lines)
bert_imp = os.path.join(OUT, "bert", "import")
determinism(wp_path, bert_imp, lines)
grouped(wp_path, wp_hf, bert_imp, words)
dynamic(wp_path, wp_hf, bert_imp, lines, BertForMaskedLM, wp_vocab)
pretraining(wp_path, wp_hf, lines, wp_vocab, small)
bad_cases(wp_path, bert_imp, lines, small, wp_vocab)
print("bert_mlm_hf: %s (transformers %s)" % ("FAILED" if failed else "ok",
                                             transformers.__version__))
sys.exit(1 if failed else 0)
