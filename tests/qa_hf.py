"""Extractive question answerers: trainc import hf and export hf of
BertForQuestionAnswering, RobertaForQuestionAnswering and DistilBertForQuestionAnswering
against transformers; `data qa` rows (their offsets too) against run_qa.py's with BERT's
WordPiece, RoBERTa's byte-level BPE and XLM-R's Unigram (its Precompiled normalizer, Strip,
space runs and Metaspace: full-width letters, ligatures, combining accents, ideographic
spaces, circled numbers, soft hyphens in the contexts), and XLMRobertaForQuestionAnswering's
--eval over them.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained, tiny, fp32, CPU,
one thread, every tensor moved off transformers' init. The rows are random ids in the
tokenizer's layout ([CLS] question [SEP] context [SEP], then padding; a quarter of them
full), the token types 1 over the context, y the answer's first and last token inside the
context:

- import writes y [2] with classes T (the row's places), the head `qa_outputs` as a linear
  of 2 and the `span` layer after it;
- trainc's `--eval` validation loss equals transformers' (start loss + end loss) / 2 from
  its logits with the padding's set to -1e30 (trainc's span keeps the padding out of the
  softmax) within 1e-5; on full rows (no padding) it equals the loss transformers' model
  itself returns for start_positions and end_positions; `--predict` gives the start and
  end logits [2, T] within 1e-5 on every token of the text;
- import then export gives back every tensor bit for bit;
- 8 AdamW steps (warm-up, linear decay, clipping) give every step's loss within 1e-4 of
  torch's AdamW on transformers' model (the same masked loss); BERT's on the fake GPU
  (tests/fake_gpu/: span's CUDA kernels) within 1e-5 of the CPU's;
- trained 5 steps and exported, transformers' from_pretrained computes trainc's --eval
  loss (within 1e-5);
- `--task qa` over a bare BertModel: the new head drawn with std initializer_range, zero
  bias, no pooler, the loss equal to transformers' question answerer with that head;
- refused with exit 1: --labels with --task qa, a checkpoint whose id2label has 3 labels.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

try:
    import transformers
    from transformers import (BertConfig, BertForQuestionAnswering, DistilBertConfig,
                              DistilBertForQuestionAnswering, RobertaConfig,
                              RobertaForQuestionAnswering, XLMRobertaConfig,
                              XLMRobertaForQuestionAnswering)
    from safetensors.torch import load_file
except ImportError:
    print("skip qa_hf: transformers is not importable from %s (make deps makes a venv with it)"
          % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
from text_hf import (byte_level, exported_back, fake_gpu_vs_cpu, license_lines,  # noqa: E402
                     parity_steps, predictions, sentencepiece_unigram, specs, trained_export,
                     wordpiece)

OUT = os.path.join(ROOT, "build", "tests", "qa_hf")
T, N, V = 24, 128, 60
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def rows(rng, n, full_every=4, typed=True):
    """n rows: ids, attention mask, token types (1 over the context where TYPED, else 0), y
    [2] (the answer's first and last token)"""
    ids = np.zeros((n, T), np.int64)
    mask, types, y = np.zeros_like(ids), np.zeros_like(ids), np.zeros((n, 2), np.int64)
    for r in range(n):
        k = T if r % full_every == 0 else int(rng.integers(8, T))
        q = int(rng.integers(2, k - 5))   # [CLS] q tokens [SEP], the context, [SEP]
        ids[r, :k] = rng.integers(5, V, size=k)
        ids[r, 0], ids[r, q + 1], ids[r, k - 1] = 2, 3, 3
        ids[r, k:] = 0
        mask[r, :k] = 1
        types[r, q + 2:k] = typed
        a = sorted(rng.integers(q + 2, k - 1, size=2))
        y[r] = a
    return ids, mask, types, y


def save_rows(imp, keys, tr, va):
    os.makedirs(imp + "/data", exist_ok=True)
    for part, rs in (("train", tr), ("val", va)):
        ids, mask, types, y = rs
        lens = mask.sum(1)
        arrays = {"x": ids, "types": types, "y": y,
                  "pos": np.array([list(range(k)) + list(range(T - k)) for k in lens])}
        for key in keys:
            np.save("%s/data/%s_%s.npy" % (imp, part, key), arrays[key].astype(np.int32))


def logits_of(m, rs):
    ids, mask, types = (torch.from_numpy(a).long() for a in rs[:3])
    # (XLM-R's tokenizer writes type ids its model, of one type, is not given: run_qa.py
    # passes what the tokenizer's model_input_names name)
    extra = {} if m.config.model_type in ("distilbert", "xlm-roberta") else {"token_type_ids": types}
    out = m(input_ids=ids, attention_mask=mask, **extra)
    return torch.stack([out.start_logits, out.end_logits], 1), mask   # [B, 2, T]


def span_loss(m, rs):
    """(start loss + end loss) / 2 over transformers' logits, the padding's at -1e30"""
    lg, mask = logits_of(m, rs)
    lg = lg.masked_fill((mask == 0)[:, None, :], -1e30)
    return F.cross_entropy(lg.flatten(0, 1), torch.from_numpy(rs[3]).long().flatten())


def hf_loss(m, rs):
    m.eval()
    with torch.no_grad():
        return float(span_loss(m, rs).double())


def batches(rs, B=16):
    return [[a[b:b + B] for a in rs] for b in range(0, len(rs[0]) - B + 1, B)]


def inputs_of(d):
    return list(json.load(open(d + "/model.json"))["model"]["inputs"])


def imported(name, d):
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    spec = json.load(open(imp + "/model.json"))["model"]
    ls = spec["layers"]
    tr = json.load(open(imp + "/train.json"))["train"]
    check(spec["inputs"]["y"] == {"shape": [2], "dtype": "i32", "classes": T} and
          ls[-1] == {"op": "span"} and ls[-2]["op"] == "linear" and ls[-2]["out"] == 2 and
          (tr["batch_size"], tr["epochs"], tr["optimizer"]["lr"]) == (12, 2, 3e-5),
          "%s: import writes y [2] of %d classes (the row's places), a linear of 2 and span; "
          "train.json run_qa.py's batches of 12, 2 epochs, 3e-5" % (name, T))
    return imp


def full_rows_loss(name, m, imp, d, rng, typed):
    """rows without padding: --eval equals the loss transformers' model returns itself"""
    rs = rows(rng, 32, full_every=1, typed=typed)
    save_rows(imp, inputs_of(imp), rs, rs)
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval_full")
    ids, mask, types, y = (torch.from_numpy(a).long() for a in rs)
    # (XLM-R's tokenizer writes type ids its model, of one type, is not given: run_qa.py
    # passes what the tokenizer's model_input_names name)
    extra = {} if m.config.model_type in ("distilbert", "xlm-roberta") else {"token_type_ids": types}
    with torch.no_grad():
        theirs = float(m.eval()(input_ids=ids, attention_mask=mask, start_positions=y[:, 0],
                                end_positions=y[:, 1], **extra).loss)
    check(rel(ours, theirs) <= 1e-5, "%s: full rows, trainc --eval %.7f, transformers' own "
          "loss %.7f (%.1e)" % (name, ours, theirs, rel(ours, theirs)))


def predicted(name, m, imp, va):
    ours = predictions(imp, imp + "/predict")
    with torch.no_grad():
        theirs = logits_of(m.eval(), va)[0].numpy()
    text = np.repeat(va[1].astype(bool)[:, None, :], 2, 1)
    worst = float(np.abs(ours[text] - theirs[text]).max() / np.abs(theirs[text]).max())
    pad = ours[~text]
    check(ours.shape == theirs.shape and worst <= 1e-5 and (pad.size == 0 or pad.max() <= -1e29),
          "%s: --predict's start and end logits [%s] within %.1e of transformers' on the text, "
          "-1e30 on the padding" % (name, ", ".join(map(str, ours.shape)), worst))


def case(name, cls, cfg, rng):
    d = os.path.join(OUT, name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = imported(name, d)
    keys = inputs_of(imp)
    specs(imp, keys)
    typed = name == "bert"   # (RoBERTa's one token type)
    full_rows_loss(name, m, imp, d, rng, typed)
    tr, va = rows(rng, N - N // 4, typed=typed), rows(rng, N // 4, typed=typed)
    save_rows(imp, keys, tr, va)
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = hf_loss(m, va)
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers' logits "
          "(the padding's at -1e30) %.7f (%.1e)" % (name, ours, theirs, rel(ours, theirs)))
    predicted(name, m, imp, va)
    a, b = exported_back(imp, d)
    rows0 = "roberta.embeddings.position_embeddings.weight"
    if name == "roberta":   # (RoBERTa's rows before position 0's)
        a[rows0], b[rows0] = a[rows0][2:], b[rows0][2:]
    check(set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
          "%s: import then export gives back the folder's %d tensors bit for bit" % (name, len(a)))
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"), batches(tr), span_loss)
    if name == "bert":   # (span's CUDA kernels, forward and backward, over padded rows)
        fake_gpu_vs_cpu(name, imp, d, bf16=False)
    ours = trained_export(imp, d)
    back = cls.from_pretrained(d + "/hf")
    theirs = hf_loss(back, va)
    check(rel(ours, theirs) <= 1e-5 and back.config.architectures == [cls.__name__],
          "%s: trained, exported as %s, from_pretrained's loss %.7f, trainc --eval %.7f (%.1e)"
          % (name, back.config.architectures, theirs, ours, rel(ours, theirs)))


def new_head(rng, cfg):
    """a bare BertModel imported with --task qa: transformers' question answerer from that
    folder, its head replaced by trainc's draw, computes trainc's --eval loss"""
    d = os.path.join(OUT, "bert_bare")
    saved(transformers.BertModel, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "qa")
    keys = inputs_of(imp)
    rs = rows(rng, 32)
    save_rows(imp, keys, rs, rs)
    specs(imp, keys)
    ours = load_file(imp + "/init.safetensors")
    hf = BertForQuestionAnswering.from_pretrained(d + "/src")
    with torch.no_grad():
        hf.qa_outputs.weight.copy_(ours["head.weight"])
        hf.qa_outputs.bias.copy_(ours["head.bias"])
    std = float(ours["head.weight"].std())
    loss = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = hf_loss(hf, rs)
    check(rel(loss, theirs) <= 1e-5 and abs(std / cfg.initializer_range - 1) < 0.35 and
          not ours["head.bias"].any() and "pooler.weight" not in ours,
          "bert_bare: BertModel with --task qa: a new head [2, %d] (std %.4f), no pooler; trainc "
          "--eval %.7f, transformers %.7f (%.1e)" % (cfg.hidden_size, std, loss, theirs,
                                                     rel(loss, theirs)))


def squad(lines, rng, n, extra):
    """n examples in SQuAD's form: a question of a few words, a context of one or two
    lines (EXTRA's hard words among them), the answer a span of it: whole words, or from
    inside a word to inside another, or its last character; every tenth none"""
    out = []
    for i in range(n):
        words = sum((lines[int(rng.integers(len(lines)))] for _ in range(int(rng.integers(1, 3)))), [])
        if i % 3 == 0:
            words[int(rng.integers(len(words) + 1)):0] = extra
        context = " ".join(words)
        q = " ".join(lines[int(rng.integers(len(lines)))][:int(rng.integers(1, 4))])
        a = int(rng.integers(len(context)))
        b = min(len(context), a + int(rng.integers(1, 30)))
        if i % 2:   # (whole words)
            a = context.rfind(" ", 0, a) + 1
            b = context.find(" ", b) if context.find(" ", b) >= 0 else len(context)
        if i % 7 == 3:   # (the context's last character: its window's last token)
            a, b = len(context) - 1, len(context)
        ans = {"text": [], "answer_start": []} if i % 10 == 9 else \
            {"text": [context[a:b]], "answer_start": [a]}
        out.append({"id": str(i), "question": ("  " if i % 4 == 0 else "") + q, "context": context,
                    "answers": ans})
    return out


def sanitized(name, args, want, got):
    """ARGS again by the address- and UB-sanitized trainc (ASAN_TRAINC, make test's
    build/asan/trainc; none: skipped), its arrays those in WANT byte for byte"""
    asan = os.environ.get("ASAN_TRAINC")
    if not asan:
        print("skip %s: data qa under the sanitizers (no ASAN_TRAINC)" % name)
        return
    r = subprocess.run([os.path.join(ROOT, asan)] + [str(a) for a in args], capture_output=True,
                       text=True, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    same = r.returncode == 0 and all(
        open(os.path.join(want, f), "rb").read() == open(os.path.join(got, f), "rb").read()
        for f in os.listdir(got))
    check(same, "%s: data qa by the sanitized trainc: no report, the same %d arrays%s" %
          (name, len(os.listdir(got)) if os.path.isdir(got) else 0,
           "" if same else ": exit %d %s" % (r.returncode, r.stderr[-300:])))


def run_qa_rows(hf, exs, TD, stride, labeled=True):
    """transformers' run_qa.py prepare_train_features of the examples (its loops kept to
    the context): x, mask, types, y, example, offsets"""
    enc = hf([e["question"].lstrip() for e in exs], [e["context"] for e in exs],
             truncation="only_second", max_length=TD, stride=stride, return_overflowing_tokens=True,
             return_offsets_mapping=True, padding="max_length", return_token_type_ids=True)
    ys, offs = [], []
    for i, off in enumerate(enc["offset_mapping"]):
        seq = enc.sequence_ids(i)
        ctx = [k for k, s in enumerate(seq) if s == 1]
        offs.append([list(o) if seq[k] == 1 else [-1, -1] for k, o in enumerate(off)])
        ans = exs[enc["overflow_to_sample_mapping"][i]]["answers"]
        y = [0, 0]
        if labeled and ans["answer_start"]:
            sc = ans["answer_start"][0]
            ec = sc + len(ans["text"][0])
            s, t = ctx[0], ctx[-1]
            if off[s][0] <= sc and off[t][1] >= ec:
                while s <= ctx[-1] and off[s][0] <= sc:
                    s += 1
                while t >= ctx[0] and off[t][1] >= ec:
                    t -= 1
                y = [s - 1, t + 1]
        ys.append(y)
    return (np.array(enc["input_ids"]), np.array(enc["attention_mask"]),
            np.array(enc["token_type_ids"]), np.array(ys), np.array(enc["overflow_to_sample_mapping"]),
            np.array(offs))


def data_case(name, cls, cfg, tok, hf, exs, TD, stride, typed):
    """data qa over the examples (the last quarter for validation): every row
    transformers' run_qa.py's; then --eval of the import over them equals transformers'"""
    d = os.path.join(OUT, "data_" + name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", TD)
    with open(d + "/squad.jsonl", "w") as f:
        for e in exs:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    args = [d + "/squad.jsonl", "--tokenizer", tok, "--model", imp + "/model.json", "--val-frac",
            0.25, "--stride", stride]
    r = trainc("data", "qa", args[0], imp + "/data", *args[1:])
    print("  " + r.stdout.strip())
    sanitized(name, ["data", "qa", args[0], d + "/asan", *args[1:]], imp + "/data", d + "/asan")
    n_tr = len(exs) - len(exs) // 4
    for part, sub, first in (("train", exs[:n_tr], 0), ("val", exs[n_tr:], n_tr)):
        ids, mask, types, y, ex, offs = run_qa_rows(hf, sub, TD, stride)
        ex = ex + first   # (an example's index in the file)
        got = {k: np.load("%s/data/%s_%s.npy" % (imp, part, k))
               for k in ("x", "pos", "y", "example", "offsets")}
        lens = mask.sum(1)
        want_pos = np.array([list(range(k)) + list(range(TD - k)) for k in lens])
        ok = all(np.array_equal(got[k], v) for k, v in (("x", ids), ("pos", want_pos), ("y", y),
                                                         ("example", ex),
                                                         ("offsets", offs.reshape(len(ids), -1))))
        if typed:
            ok &= np.array_equal(np.load("%s/data/%s_types.npy" % (imp, part)), types)
        check(ok, "%s: data qa's %s rows (%d examples, %d rows, %d past a first window, %d "
              "answered) are run_qa.py's input_ids, positions, %sstart and end positions, "
              "examples and offsets" % (name, part, len(sub), len(ids), int((np.diff(ex) == 0).sum()),
                                        int((y[:, 0] > 0).sum()), "token_type_ids, " if typed else ""))
    specs(imp, inputs_of(imp))
    va = run_qa_rows(hf, exs[n_tr:], TD, stride)
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors", d + "/eval0")
    theirs = hf_loss(m, va[:4])
    check(rel(ours, theirs) <= 1e-5, "%s: over data qa's rows, trainc --eval %.7f, transformers "
          "%.7f (%.1e)" % (name, ours, theirs, rel(ours, theirs)))
    read_back(name, imp, d, exs, va)


def postprocess(exs, ex, offs, pred, n_best=20, max_len=30, v2=False, threshold=0.0):
    """run_qa.py's postprocess_qa_predictions over the rows (with V2, version_2_with_negative
    and null_score_diff_threshold): each example's text and score"""
    out = {}
    for k, e in enumerate(exs):
        prelim, null = [], None
        for r in np.nonzero(ex == k)[0]:
            st, en = pred[r, 0], pred[r, 1]
            om = [None if o[0] < 0 else tuple(o) for o in offs[r]]
            if null is None or null["score"] > st[0] + en[0]:
                null = {"offsets": (0, 0), "score": st[0] + en[0], "start_logit": st[0],
                        "end_logit": en[0]}
            for a in np.argsort(st)[-1:-n_best - 1:-1]:
                for b in np.argsort(en)[-1:-n_best - 1:-1]:
                    if om[a] is None or om[b] is None or b < a or b - a + 1 > max_len:
                        continue
                    prelim.append({"offsets": (om[a][0], om[b][1]), "score": st[a] + en[b],
                                   "start_logit": st[a], "end_logit": en[b]})
        if null is None:
            continue
        if v2:
            prelim.append(null)
        preds = sorted(prelim, key=lambda x: x["score"], reverse=True)[:n_best]
        if v2 and not any(p["offsets"] == (0, 0) for p in preds):
            preds.append(null)
        for p in preds:
            p["text"] = e["context"][p["offsets"][0]:p["offsets"][1]]
        if len(preds) == 0 or (len(preds) == 1 and preds[0]["text"] == ""):
            preds.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        if not v2:
            out[k] = (preds[0]["text"], float(preds[0]["score"]))
            continue
        i = 0
        while preds[i]["text"] == "":
            i += 1
        best = preds[i]
        diff = null["score"] - best["start_logit"] - best["end_logit"]
        out[k] = ("" if diff > threshold else best["text"], float(best["score"]))
    return out


def squad_scores(pairs, v2=False):
    """SQuAD v1.1's evaluate script (with V2, v2.0's: no answers is the answer "", and an
    empty side's F1 is whether both are): exact match and F1, the best over each example's
    answers, as percentages"""
    import collections, re, string
    def norm(s):
        s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
        return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())
    def f1(p, g):
        p, g = norm(p).split(), norm(g).split()
        if v2 and (not p or not g):
            return float(p == g)
        common = sum((collections.Counter(p) & collections.Counter(g)).values())
        return 0.0 if common == 0 else 2 * common / len(p) * common / len(g) / (common / len(p) + common / len(g))
    pairs = [(p, gs or [""]) for p, gs in pairs]
    em = [max(float(norm(p) == norm(g)) for g in gs) for p, gs in pairs]
    fs = [max(f1(p, g) for g in gs) for p, gs in pairs]
    return 100 * sum(em) / len(em), 100 * sum(fs) / len(fs)


def read_back(name, imp, d, exs, va):
    """--predict over the val rows, then data qa --answers: run_qa.py's answers and SQuAD's
    scores of them; and of the same logits with each answered row's labels at 50 (most
    answers found, whole or in part)"""
    pred = predictions(imp, d + "/predict")
    answers_of(name + " (--predict's logits)", imp, d, exs, pred, d + "/predict/predictions.npy")
    y = np.load(imp + "/data/val_y.npy")
    for r in np.nonzero(y[:, 0] > 0)[0]:
        pred[r, 0, y[r, 0]] = pred[r, 1, y[r, 1]] = 50.0
    np.save(d + "/oracle.npy", pred)
    answers_of(name + " (the labels' logits at 50)", imp, d, exs, pred, d + "/oracle.npy")
    for r in np.nonzero(y[:, 0] == 0)[0]:   # (the unanswered rows: the null answer's)
        pred[r, 0, 0] = pred[r, 1, 0] = 50.0
    np.save(d + "/oracle_v2.npy", pred)
    answers_of(name + " (the labels' logits at 50, SQuAD v2)", imp, d, exs, pred,
               d + "/oracle_v2.npy", v2=True)
    answers_of(name + " (--predict's logits, SQuAD v2, threshold -3)", imp, d, exs,
               np.load(d + "/predict/predictions.npy"), d + "/predict/predictions.npy", v2=True,
               threshold=-3.0)


def answers_of(name, imp, d, exs, pred, path, v2=False, threshold=0.0):
    ex = np.load(imp + "/data/val_example.npy")
    offs = np.load(imp + "/data/val_offsets.npy").reshape(len(ex), -1, 2)
    extra = ["--version-2", "--null-threshold", threshold] if v2 else []
    r = trainc("data", "qa", d + "/squad.jsonl", imp + "/data", "--answers", path, "--part", "val",
               *extra)
    print("  " + r.stdout.strip())
    got = [json.loads(l) for l in open(imp + "/data/val_answers.jsonl")]
    want = postprocess(exs, ex, offs, pred, v2=v2, threshold=threshold)
    n_tr = len(exs) - len(exs) // 4
    ours = {int(g["id"]): (g["answer"], g["score"]) for g in got}
    same = sorted(ours) == list(range(n_tr, len(exs))) and all(
        ours[k][0] == want[k][0] and abs(ours[k][1] - want[k][1]) <= 1e-6 * max(1, abs(want[k][1]))
        for k in ours)
    pairs = [(ours[k][0], exs[k]["answers"]["text"]) for k in ours
             if v2 or exs[k]["answers"]["text"]]
    em, f1 = squad_scores(pairs, v2)
    check(same and ("exact match %.2f, F1 %.2f" % (em, f1)) in r.stdout,
          "%s: data qa --answers: %d examples' answers and scores run_qa.py's post-processing "
          "(%d 'empty', %d no answer), SQuAD%s's exact match %.2f and F1 %.2f" %
          (name, len(ours), sum(v[0] == "empty" for v in ours.values()),
           sum(v[0] == "" for v in ours.values()), " v2" if v2 else "", em, f1))


def unlabeled(hf, exs, TD, stride):
    """data qa --unlabeled: test rows without y, each row's example and offsets"""
    imp = os.path.join(OUT, "data_bert", "import")
    d = os.path.join(OUT, "unlabeled")
    with open(d + ".jsonl", "w") as f:
        for e in exs:
            f.write(json.dumps({k: e[k] for k in ("question", "context")}, ensure_ascii=False) + "\n")
    trainc("data", "qa", d + ".jsonl", d, "--tokenizer", os.path.join(OUT, "wordpiece.json"),
           "--model", imp + "/model.json", "--unlabeled", "--stride", stride)
    ids, mask, types, y, ex, offs = run_qa_rows(hf, exs, TD, stride, labeled=False)
    ok = (not os.path.exists(d + "/test_y.npy") and np.array_equal(np.load(d + "/test_x.npy"), ids)
          and np.array_equal(np.load(d + "/test_example.npy"), ex) and
          np.array_equal(np.load(d + "/test_offsets.npy"), offs.reshape(len(ids), -1)))
    check(ok, "bert: data qa --unlabeled: %d test rows of %d examples, no y, x, example and offsets "
          "run_qa.py's" % (len(ids), len(exs)))


def data_refusals(tok, exs):
    """data qa's refusals, each naming the line or the option, nothing written"""
    d = os.path.join(OUT, "bad_data")
    imp = os.path.join(OUT, "data_bert", "import")
    os.makedirs(d)
    good = exs[0]
    long_q = dict(good, question=" ".join(["license"] * 60))
    past = dict(good, answers={"text": ["x"], "answer_start": [len(good["context"]) + 5]})
    for what, line, args, text in (
            ("a question too long for the rows", long_q, [], "squad.jsonl:2: error: the question's"),
            ("an answer past the context", past, [], "squad.jsonl:2: error: the answer's characters"),
            ("--stride not below a row's context", good, ["--stride", 40],
             "is not below the"),
            ("answers without answer_start", dict(good, answers={"text": ["a"]}), [],
             "squad.jsonl:2: error: 'answers' must be")):
        with open(d + "/squad.jsonl", "w") as f:
            for e in (exs[1], line, exs[2]):
                f.write(json.dumps(e, ensure_ascii=False) + "\n")
        refused(what, ["data", "qa", d + "/squad.jsonl", d + "/o1", "--tokenizer", tok, "--model",
                       imp + "/model.json", "--val-frac", 0] + args, text, d + "/o1/train_x.npy")
    with open(d + "/empty.jsonl", "w") as f:   # (transformers' run_qa.py raises on it)
        for e in (dict(good, context="", answers={"text": [""], "answer_start": [0]}), good):
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    args = ["--tokenizer", tok, "--model", imp + "/model.json", "--val-frac", 0, "--stride", 8]
    trainc("data", "qa", d + "/empty.jsonl", d + "/empty", *args)
    sanitized("an empty context", ["data", "qa", d + "/empty.jsonl", d + "/empty_asan", *args],
              d + "/empty", d + "/empty_asan")
    y = np.load(d + "/empty/train_y.npy")
    check(y[0].tolist() == [0, 0], "data qa: an empty context is a row of the question alone, "
          "y 0 0 (%d rows)" % len(y))
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    sp = Tokenizer(models.BPE(unk_token="<unk>"))   # (Llama 2's kind)
    sp.pre_tokenizer = pre_tokenizers.Metaspace()
    sp.train_from_iterator([e["context"] for e in exs], trainers.BpeTrainer(
        vocab_size=100, special_tokens=["<s>", "</s>", "<pad>", "<unk>"], show_progress=False))
    sp.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B </s>",
                                                      special_tokens=[("<s>", 0), ("</s>", 1)])
    sp.save(d + "/sp_bpe.json")
    refused("a SentencePiece-style BPE tokenizer", ["data", "qa", d + "/squad.jsonl", d + "/o2",
                                                    "--tokenizer", d + "/sp_bpe.json", "--model",
                                                    imp + "/model.json"],
            "a SentencePiece-style BPE tokenizer (Llama 2's, Mistral's), whose offsets trainc "
            "does not compute", d + "/o2")
    with open(d + "/tags.jsonl", "w") as f:
        f.write(json.dumps({"tokens": ["a"], "ner_tags": [0]}) + "\n")
    refused("data tags for a question answerer", ["data", "tags", d + "/tags.jsonl", d + "/o3",
                                                  "--tokenizer", tok, "--model", imp + "/model.json"],
            "an answer's span: its rows are `trainc data qa`'s", d + "/o3")
    trainc("import", "hf", os.path.join(OUT, "data_bert", "src"), "-o", d + "/tok", "--task",
           "token", "--labels", 3)
    refused("data qa for a token classifier", ["data", "qa", d + "/squad.jsonl", d + "/o4",
                                               "--tokenizer", tok, "--model", d + "/tok/model.json"],
            "a class for each token: its rows are `trainc data tags`'s", d + "/o4")


def bad_cases():
    d = os.path.join(OUT, "bad")
    src = os.path.join(OUT, "bert", "src")
    refused("--labels with --task qa", ["import", "hf", src, "-o", d + "/o1", "--task", "qa",
                                        "--labels", "3"],
            "--labels with --task qa: a question answerer's classes are the row's places", d + "/o1")
    three = os.path.join(OUT, "three_src")
    saved(BertForQuestionAnswering, BertConfig(vocab_size=V, max_position_embeddings=40,
                                               num_labels=3, **small), three, 0.1)
    refused("a question answerer of 3 labels", ["import", "hf", three, "-o", d + "/o2"],
            "3 labels: a question answerer's qa_outputs has 2 outputs", d + "/o2")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(7)
small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.05)
bert_cfg = BertConfig(vocab_size=V, max_position_embeddings=40, **small)
case("bert", BertForQuestionAnswering, bert_cfg, rng)
case("roberta", RobertaForQuestionAnswering,
     RobertaConfig(vocab_size=V, max_position_embeddings=T + 2, type_vocab_size=1, pad_token_id=1,
                   layer_norm_eps=1e-5, hidden_act="gelu_pytorch_tanh", **small), rng)
case("distilbert", DistilBertForQuestionAnswering,
     DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                      max_position_embeddings=40, dropout=0.0, attention_dropout=0.0,
                      qa_dropout=0.0), rng)
new_head(rng, bert_cfg)
lines = license_lines()
corpus = [" ".join(l) for l in lines]
wp_hf, wp_vocab = wordpiece(os.path.join(OUT, "wordpiece.json"), corpus)
bl_hf, bl_vocab = byte_level(os.path.join(OUT, "bytelevel.json"), corpus, False)
TD = 40
hard = ["U.S.", "naïve", "Café", "日本語", "$100", "(c)", "ÉCOLE", "x-y", "🙂ok"]
data_case("bert", BertForQuestionAnswering,
          BertConfig(**dict(small, vocab_size=wp_vocab, max_position_embeddings=TD)),
          os.path.join(OUT, "wordpiece.json"), wp_hf, squad(lines, rng, 48, hard), TD, 8, True)
data_case("roberta", RobertaForQuestionAnswering,
          RobertaConfig(**dict(small, vocab_size=bl_vocab, max_position_embeddings=TD + 2,
                               type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5)),
          os.path.join(OUT, "bytelevel.json"), bl_hf, squad(lines, rng, 48, hard), TD, 8, False)
unlabeled(wp_hf, squad(lines, rng, 12, hard), TD, 8)
data_refusals(os.path.join(OUT, "wordpiece.json"), squad(lines, rng, 4, hard))
# XLM-R's Unigram: offsets through its Precompiled normalizer (full-width letters, ligatures,
# combining accents, ideographic spaces), Strip, runs of spaces and Metaspace's U+2581
sp_hard = ["ｆｕｌｌ", "ﬁne", "e\u0301t\u00e9", "①", "㍿", "日本語", "ｶﾞｷﾞ", "a\u3000b", "x  y",
           "naïve", "½", "\u00adsoft"]
sp_path, sp_hf = sentencepiece_unigram(os.path.join(OUT, "unigram"),
                                       corpus + [" ".join(sp_hard)] * 20, vocab_size=400)
data_case("xlmr", XLMRobertaForQuestionAnswering,
          XLMRobertaConfig(**dict(small, vocab_size=len(sp_hf), max_position_embeddings=TD + 2,
                                  type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5)),
          sp_path, sp_hf, squad(lines, np.random.default_rng(7), 48, sp_hard), TD, 8, False)
bad_cases()
print("qa_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
