"""Reward models (the second step of RLHF, TRL's RewardTrainer): trainc import hf and
export hf of a decoder's ...ForSequenceClassification with one output against
transformers, the Bradley-Terry loss over pairs of texts, and `trainc data pairs`.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init. A row holds a pair: the
chosen text padded on the left to T, then the rejected one; `last_token` with segments 2
reads each half's last token, the score gives each its reward, and the two rewards are
the logits of "which is chosen" (y = 0), so cross entropy is TRL's
-log sigmoid(r_chosen - r_rejected). transformers scores each text apart, right-padded.

- a LlamaForSequenceClassification with num_labels 1 (GQA, untied) and a
  GPT2ForSequenceClassification (learned positions) import as reward models: x and pos
  [2T], the layers ending in last_token (segments 2), score (one output) and flatten;
  trainc's `--eval` loss equals -logsigmoid(r_c - r_r).mean() of transformers' rewards
  within 1e-5, and `--predict` gives the two rewards of each pair within 1e-5;
- import then export gives back every tensor bit for bit, num_labels 1;
- 8 AdamW steps (warm-up, linear decay, weight decay, clipping) give every step's loss
  within 1e-4 of torch's AdamW on transformers' model with TRL's loss;
- trained 5 steps and exported (--tokenizer: its padding id), from_pretrained's loss on the
  pairs equals trainc's --eval within 1e-5;
- `--task reward` over a LlamaForCausalLM: a score of one output drawn with std
  initializer_range, the LM head left out; transformers' classifier with that score agrees;
- `data pairs`: every half is transformers' tokenizer (prompt + answer, its special
  tokens) padded on the left, TRL's explicit-prompt and implicit-prompt lines both; a pair
  with a text past T is left out and counted;
- refused with exit 1: --task reward over a classifier of 3 labels, data classify of a
  reward model (naming data pairs), data pairs of a classifier, export of last_token with
  segments 3.

reward_hf.py --fake-gpu: instead, the Llama reward model's import (its weights moved by
0.02) built for both devices trains 8 steps on the fake GPU (tests/fake_gpu/: the CUDA
kernels on an emulator), fp32 within 1e-5 of the CPU's, bf16-mixed's first loss within
1e-3 and its last within 2e-2 of the CPU's fp32.
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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (GPT2Config, GPT2ForSequenceClassification, LlamaConfig,
                              LlamaForSequenceClassification, PreTrainedTokenizerFast)
    from safetensors.torch import load_file
except ImportError:
    print("skip reward_hf: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
from text_hf import (exported_back, fake_gpu_vs_cpu, license_lines,  # noqa: E402
                     parity_steps, predictions, specs, trained_export)

OUT = os.path.join(ROOT, "build", "tests", "reward_hf")
# (its own folder with --fake-gpu: make test runs the two at once, and neither may remove
# the other's)
OUT += "_fake_gpu" if "--fake-gpu" in sys.argv[1:] else ""
T, N, PAD = 12, 96, 0
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def pairs(rng, vocab, n):
    """n pairs of texts of 1 to T ids (none the padding's); the first pair fills its rows"""
    lens = rng.integers(1, T + 1, size=(n, 2))
    lens[0] = T
    return [[rng.integers(1, vocab, size=k) for k in ab] for ab in lens]


def left_rows(ps):
    """trainc's rows: each half the padding, then the text; positions restarting"""
    x, pos = np.full((len(ps), 2 * T), PAD, np.int32), np.zeros((len(ps), 2 * T), np.int32)
    for r, ab in enumerate(ps):
        for h, t in enumerate(ab):
            P = T - len(t)
            x[r, h * T + P:(h + 1) * T] = t
            pos[r, h * T:(h + 1) * T] = np.r_[np.arange(P), np.arange(len(t))]
    return x, pos


def right_rows(ps):
    """transformers' rows: each text apart, the chosen ones then the rejected ones, right-
    padded, with the attention mask"""
    ts = [ab[0] for ab in ps] + [ab[1] for ab in ps]
    x, mask = np.full((len(ts), T), PAD, np.int64), np.zeros((len(ts), T), np.int64)
    for r, t in enumerate(ts):
        x[r, :len(t)] = t
        mask[r, :len(t)] = 1
    return x, mask


def rewards(m, rows):
    """each pair's (chosen, rejected) rewards [n, 2]"""
    x, mask = rows
    r = m(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(mask)).logits[:, 0]
    return r.view(2, -1).t()


def trl_loss(m, rows):
    """TRL RewardTrainer's loss: -log sigmoid(r_chosen - r_rejected), the mean"""
    r = rewards(m, rows)
    return -F.logsigmoid(r[:, 0] - r[:, 1]).mean()


def hf_eval(m, rows):
    m.eval()
    with torch.no_grad():
        return float(trl_loss(m, rows))


def save_data(imp, ps):
    os.makedirs(imp + "/data", exist_ok=True)
    x, pos = left_rows(ps)
    for part, sl in (("train", slice(0, N // 2)), ("val", slice(N // 2, None))):
        np.save("%s/data/%s_x.npy" % (imp, part), x[sl])
        np.save("%s/data/%s_pos.npy" % (imp, part), pos[sl])
        np.save("%s/data/%s_y.npy" % (imp, part), np.zeros(len(x[sl]), np.int32))
    specs(imp, ["x", "pos", "y"])


def imported(name, cls, cfg, d, *task):
    """the folder made and imported; its spec checked as a reward model's"""
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    r = trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, *task)
    spec = json.load(open(imp + "/model.json"))["model"]
    ls = spec["layers"]
    check([l["op"] for l in ls[-3:]] == ["last_token", "linear", "flatten"] and
          ls[-3].get("segments") == 2 and ls[-2]["out"] == 1 and ls[-2]["name"] == "score" and
          spec["inputs"]["x"]["shape"] == [2 * T] and spec["inputs"]["y"]["classes"] == 2 and
          "a reward model" in r.stdout,
          "%s: %s imports as a reward model: x [%d], last_token segments 2, score [1, d], flatten"
          % (name, cls.__name__ if not task else cls.__name__ + " --task reward", 2 * T))
    return m, imp


def case(name, cls, cfg, rng):
    d = os.path.join(OUT, name)
    m, imp = imported(name, cls, cfg, d)
    ps = pairs(rng, cfg.vocab_size, N)
    save_data(imp, ps)
    va = right_rows(ps[N // 2:])
    ours, theirs = (eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                              d + "/eval0"), hf_eval(m, va))
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f over pairs in a row, "
          "TRL's loss on transformers' rewards %.7f (%.1e)" % (name, ours, theirs, rel(ours, theirs)))
    predicted(name, m, imp, va)
    a, b = exported_back(imp, d)
    back = json.load(open(d + "/back/config.json"))
    check(set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a) and
          len(back["id2label"]) == 1, "%s: import then export gives back the folder's %d tensors "
          "bit for bit, one label" % (name, len(a)))
    batches = [right_rows(ps[b:b + 16]) for b in range(0, N // 2, 16)]
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"), batches, trl_loss,
                 "torch's with TRL's loss")
    ours = trained_export(imp, d, "--tokenizer", TOK)
    back = cls.from_pretrained(d + "/hf")
    theirs = hf_eval(back, va)
    check(rel(ours, theirs) <= 1e-5 and back.config.architectures == [cls.__name__] and
          back.config.num_labels == 1 and back.config.pad_token_id == PAD,
          "%s: trained, exported as %s (num_labels 1, pad_token_id %s), from_pretrained's loss "
          "%.7f, trainc --eval %.7f (%.1e)" % (name, back.config.architectures,
                                               back.config.pad_token_id, theirs, ours,
                                               rel(ours, theirs)))


def predicted(name, m, imp, va):
    ours = predictions(imp, imp + "/predict")
    with torch.no_grad():
        theirs = rewards(m.eval(), va).numpy()
    worst = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    check(ours.shape == theirs.shape and worst <= 1e-5, "%s: --predict gives each pair's two "
          "rewards [%s] within %.1e of transformers'" % (name, ", ".join(map(str, ours.shape)),
                                                          worst))


def new_score(rng, cfg):
    """--task reward over a LlamaForCausalLM: a new score of one output; the LM head out"""
    d = os.path.join(OUT, "llama_lm")
    _, imp = imported("llama_lm", transformers.LlamaForCausalLM, cfg, d, "--task", "reward")
    ps = pairs(rng, cfg.vocab_size, N)
    save_data(imp, ps)
    ours = load_file(imp + "/init.safetensors")
    hf = LlamaForSequenceClassification.from_pretrained(d + "/src", num_labels=1,
                                                        pad_token_id=PAD)
    with torch.no_grad():
        hf.score.weight.copy_(ours["score.weight"])
    std = float(ours["score.weight"].std())
    loss = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = hf_eval(hf, right_rows(ps[N // 2:]))
    check(rel(loss, theirs) <= 1e-5 and abs(std / cfg.initializer_range - 1) < 0.35 and
          "lm_head.weight" not in ours and list(ours["score.weight"].shape) == [1, cfg.hidden_size],
          "llama: LlamaForCausalLM with --task reward: a new score [1, %d] (std %.4f), the LM "
          "head left out; trainc --eval %.7f, transformers %.7f (%.1e)" %
          (cfg.hidden_size, std, loss, theirs, rel(loss, theirs)))


def tokenizer():
    """a byte-level BPE with <pad> id 0 and a <s> before each text (a Llama's BOS)"""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    lines = [" ".join(w) for w in license_lines()]
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    path = os.path.join(OUT, "tokenizer.json")
    tok.save(path)
    return path, lines


def data_pairs(lines):
    """data pairs for the Llama reward model's import: each half left-padded"""
    imp = os.path.join(OUT, "llama", "import")
    ex = []
    for i, l in enumerate(lines[:41]):
        a, b = l[:int(2 + 2 * (i % 7))], l[int(5 + 3 * (i % 5)):int(8 + 3 * (i % 4))]
        ex.append({"prompt": "Q: %d " % i, "chosen": a, "rejected": b} if i % 2 else
                  {"chosen": a, "rejected": b})
    ex.append({"chosen": lines[0] * 3, "rejected": "x"})   # past T: left out
    with open(OUT + "/prefs.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in ex)
    r = trainc("data", "pairs", OUT + "/prefs.jsonl", OUT + "/rows", "--tokenizer", TOK,
               "--model", imp + "/model.json", "--val-frac", 0)
    hf = PreTrainedTokenizerFast(tokenizer_file=TOK, pad_token="<pad>")
    hf.padding_side = "left"
    want_x, want_pos, n_in = [], [], 0
    for e in ex[:-1]:
        halves = [hf(e.get("prompt", "") + e[k])["input_ids"] for k in ("chosen", "rejected")]
        if max(map(len, halves)) > T:
            continue
        n_in += 1
        want_x.append(sum(([PAD] * (T - len(h)) + h for h in halves), []))
        want_pos.append(sum((list(range(T - len(h))) + list(range(len(h))) for h in halves), []))
    x, pos, y = (np.load(OUT + "/rows/train_%s.npy" % k) for k in ("x", "pos", "y"))
    left = len(ex) - n_in
    check(np.array_equal(x, np.array(want_x)) and np.array_equal(pos, np.array(want_pos)) and
          not y.any() and x.shape == (n_in, 2 * T) and
          ("%d left out" % left) in r.stdout and left >= 2,
          "data pairs: every half is transformers' tokenizer (prompt + answer, <s> first) padded "
          "on the left, %d pairs with and without a prompt; %d with a text past %d tokens left "
          "out and counted" % (n_in, left, T))


def bad_cases(rng):
    d = os.path.join(OUT, "bad")
    saved(LlamaForSequenceClassification, LlamaConfig(
        vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=T, num_labels=3), d + "/three", 0.1)
    refused("--task reward over a classifier of 3 labels",
            ["import", "hf", d + "/three", "-o", d + "/o1", "--task", "reward"],
            "has 3 outputs; a reward model's score has one", d + "/o1")
    imp = os.path.join(OUT, "llama", "import")
    with open(d + "/texts.jsonl", "w") as f:
        f.write(json.dumps({"text": "a b", "label": 0}) + "\n")
    refused("data classify of a reward model", ["data", "classify", d + "/texts.jsonl", d + "/o2",
                                                "--tokenizer", TOK, "--model", imp + "/model.json"],
            "a reward model: its rows are `trainc data pairs`'s", d + "/o2")
    trainc("import", "hf", d + "/three", "-o", d + "/cls", "--seq-len", T)
    with open(d + "/prefs.jsonl", "w") as f:
        f.write(json.dumps({"chosen": "a", "rejected": "b"}) + "\n")
    refused("data pairs of a classifier", ["data", "pairs", d + "/prefs.jsonl", d + "/o3",
                                           "--tokenizer", TOK, "--model", d + "/cls/model.json"],
            "a class for each text: its rows are `trainc data classify`'s", d + "/o3")
    with open(d + "/long.jsonl", "w") as f:
        f.write(json.dumps({"chosen": " ".join(LINES[:3]), "rejected": "b"}) + "\n")
    r = trainc("data", "pairs", d + "/long.jsonl", d + "/o5", "--tokenizer", TOK, "--model",
               imp + "/model.json", "--val-frac", 0, expect=1)
    check("no pair fits" in r.stderr and not [f for f in os.listdir(d + "/o5") if f.endswith(".npy")],
          "refused: data pairs where no pair fits, no array written (%s)" % r.stderr.strip())
    s = json.load(open(imp + "/model.json"))
    s["model"]["layers"][-3]["segments"] = 3
    s["model"]["inputs"]["x"]["shape"] = s["model"]["inputs"]["pos"]["shape"] = [3 * T]
    json.dump(s, open(d + "/three_seg.json", "w"))
    refused("export of last_token with segments 3",
            ["export", "hf", d + "/three_seg.json", imp + "/eval.json", "--weights",
             imp + "/init.safetensors", "-o", d + "/o4"],
            "last_token with segments 1 (a sequence classifier) or 2", d + "/o4")


def fake_gpu(cfg, rng):
    """the Llama reward model on the fake GPU against the CPU; exits"""
    d = os.path.join(OUT, "fake_gpu")
    saved(LlamaForSequenceClassification, cfg, d + "/src", 0.02)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    save_data(imp, pairs(rng, cfg.vocab_size, N))
    fake_gpu_vs_cpu("a Llama reward model (last_token with segments 2)", imp, d)
    sys.exit(1 if failed else 0)


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(13)
llama = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                    tie_word_embeddings=False, initializer_range=0.05, num_labels=1,
                    pad_token_id=PAD)
if "--fake-gpu" in sys.argv[1:]:
    fake_gpu(llama, rng)
TOK, LINES = tokenizer()
case("llama", LlamaForSequenceClassification, llama, rng)
case("gpt2", GPT2ForSequenceClassification,
     GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=2 * T,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, num_labels=1, pad_token_id=PAD),
     rng)
new_score(rng, LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=64, tie_word_embeddings=False,
                           initializer_range=0.05))
data_pairs(LINES)
bad_cases(rng)
print("reward_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
