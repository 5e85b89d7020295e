"""Decoders as sequence classifiers (reward models, text classifiers on a Llama or a
Qwen): trainc import hf and export hf of LlamaForSequenceClassification,
Qwen2ForSequenceClassification and GPT2ForSequenceClassification against transformers,
and `trainc data classify` padding their rows on the left.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init. transformers reads a
right-padded row's class at its last token before the first padding id; trainc's rows are
padded on the left and `last_token` reads the row's last, the padding a sequence of its
own (the model's positions): the text computes as it does in transformers, at positions
0 .. L-1 (GPT-2's learned ones too).

- imported, the layers end in the final norm, `last_token` and `score`; trainc's `--eval`
  loss equals transformers' on the same texts within 1e-5 (Llama with grouped-query
  attention and an untied head, Qwen2 with q, k and v biases and a tied embedding,
  GPT-2 with learned positions, Phi and GPT-J with their branches in parallel off one
  norm and a partial rope, which a classifier's export tells from Falcon's without their
  language model's biased head); `--predict` gives its logits within 1e-5;
- import then export gives back every tensor bit for bit;
- 8 AdamW steps (warm-up, linear decay, weight decay, clipping) give every step's loss
  within 1e-4 of torch's AdamW on transformers' model;
- trained 5 steps and exported (with --tokenizer: its padding id as pad_token_id),
  transformers' from_pretrained computes trainc's --eval loss within 1e-5, with the
  classes' names;
- `--labels` over a LlamaForCausalLM: a new score drawn with std initializer_range, the
  LM head left out; transformers' classifier with that score computes trainc's loss;
- `data classify` for such a model pads on the left: every row is transformers'
  tokenizer with padding_side="left";
- refused with exit 1: --labels with a family transformers has no classifier of (Cohere),
  export of a score with a bias.

seq_cls_hf.py --fake-gpu: instead, the Llama classifier's import (its weights moved by
0.02: at 0.3's, bf16's first loss is 7.6e-3 off, its rounding of large activations) built
for both devices trains 8 steps on the fake GPU (tests/fake_gpu/: the CUDA kernels on an emulator), its
fp32 losses and gradient norms within 1e-5 of the CPU's, bf16-mixed's first loss within
1e-3 and its last within 2e-2 of the CPU's fp32 (tests/fake_gpu.sh's rules).
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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (GPT2Config, GPT2ForSequenceClassification, GPTJConfig,
                              GPTJForSequenceClassification, LlamaConfig,
                              LlamaForSequenceClassification, PhiConfig,
                              PhiForSequenceClassification, PreTrainedTokenizerFast,
                              Qwen2Config, Qwen2ForSequenceClassification)
    from safetensors.torch import load_file
except ImportError:
    print("skip seq_cls_hf: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
from text_hf import (exported_back, fake_gpu_vs_cpu, license_lines,  # noqa: E402
                     parity_steps, predictions, specs, trained_export)

OUT = os.path.join(ROOT, "build", "tests", "seq_cls_hf")
# (its own folder with --fake-gpu: make test runs the two at once, and neither may remove
# the other's)
OUT += "_fake_gpu" if "--fake-gpu" in sys.argv[1:] else ""
T, N, PAD = 16, 96, 0
NAMES = ["bad", "fine", "good"]
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def texts(rng, vocab, n):
    """n texts of 1 to T ids (none the padding's); one fills its row"""
    lens = rng.integers(1, T + 1, size=n)
    lens[0] = T
    return [rng.integers(1, vocab, size=k) for k in lens]


def left_rows(ts):
    """trainc's rows: the padding first, then the text; positions restarting at the text"""
    x, pos = np.full((len(ts), T), PAD, np.int32), np.zeros((len(ts), T), np.int32)
    for r, t in enumerate(ts):
        P = T - len(t)
        x[r, P:] = t
        pos[r] = np.r_[np.arange(P), np.arange(len(t))]
    return x, pos


def right_rows(ts):
    """transformers' rows: the text, then the padding; the attention mask"""
    x, mask = np.full((len(ts), T), PAD, np.int64), np.zeros((len(ts), T), np.int64)
    for r, t in enumerate(ts):
        x[r, :len(t)] = t
        mask[r, :len(t)] = 1
    return x, mask


def hf_loss_of(m, rows):
    x, mask, y = rows
    logits = m(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(mask)).logits
    return F.cross_entropy(logits, torch.from_numpy(y).long())


def hf_eval(m, rows):
    m.eval()
    with torch.no_grad():
        return float(hf_loss_of(m, rows))


def save_data(imp, ts, y):
    os.makedirs(imp + "/data", exist_ok=True)
    x, pos = left_rows(ts)
    for part, sl in (("train", slice(0, N // 2)), ("val", slice(N // 2, None))):
        np.save("%s/data/%s_x.npy" % (imp, part), x[sl])
        np.save("%s/data/%s_pos.npy" % (imp, part), pos[sl])
        np.save("%s/data/%s_y.npy" % (imp, part), y[sl].astype(np.int32))
    specs(imp, ["x", "pos", "y"])


def case(name, cls, cfg, rng):
    d = os.path.join(OUT, name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    spec = json.load(open(imp + "/model.json"))["model"]
    ops = [l["op"] for l in spec["layers"]][-3:]
    check(ops[1:] == ["last_token", "linear"] and spec["layers"][-1]["name"] == "score" and
          spec["inputs"]["y"].get("labels") == NAMES and spec.get("positions") == "pos",
          "%s: %s imports as %s, y the class (%s)" % (name, cls.__name__, " ".join(ops),
                                                    ", ".join(NAMES)))
    ts = texts(rng, cfg.vocab_size, N)
    y = rng.integers(0, len(NAMES), size=N)
    save_data(imp, ts, y)
    hx, hmask = right_rows(ts)
    va = (hx[N // 2:], hmask[N // 2:], y[N // 2:])
    ours, theirs = (eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                              d + "/eval0"), hf_eval(m, va))
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f on left-padded rows, "
          "transformers %.7f on right-padded ones (%.1e)" % (name, ours, theirs, rel(ours, theirs)))
    predicted(name, m, imp, va)
    a, b = exported_back(imp, d)
    check(set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
          "%s: import then export gives back the folder's %d tensors bit for bit" % (name, len(a)))
    batches = [(hx[b:b + 16], hmask[b:b + 16], y[b:b + 16]) for b in range(0, N // 2, 16)]
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"), batches, hf_loss_of)
    ours = trained_export(imp, d, "--tokenizer", TOK)
    back = cls.from_pretrained(d + "/hf")
    theirs = hf_eval(back, va)
    check(rel(ours, theirs) <= 1e-5 and back.config.architectures == [cls.__name__] and
          back.config.pad_token_id == PAD and back.config.id2label == m.config.id2label,
          "%s: trained, exported as %s (pad_token_id %s), from_pretrained's loss %.7f, trainc "
          "--eval %.7f (%.1e)" % (name, back.config.architectures, back.config.pad_token_id,
                                  theirs, ours, rel(ours, theirs)))


def predicted(name, m, imp, va):
    ours = predictions(imp, imp + "/predict")
    with torch.no_grad():
        theirs = m.eval()(input_ids=torch.from_numpy(va[0]),
                          attention_mask=torch.from_numpy(va[1])).logits.numpy()
    worst = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    check(ours.shape == theirs.shape and worst <= 1e-5, "%s: --predict's logits [%s] within "
          "%.1e of transformers'" % (name, ", ".join(map(str, ours.shape)), worst))


def new_score(rng, cfg):
    """--labels over a LlamaForCausalLM: a new score; the LM head left out"""
    d = os.path.join(OUT, "llama_lm")
    saved(transformers.LlamaForCausalLM, cfg, d + "/src", 0.3)
    imp = d + "/import"
    r = trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--labels", "no,yes")
    ts = texts(rng, cfg.vocab_size, N)
    y = rng.integers(0, 2, size=N)
    save_data(imp, ts, y)
    ours = load_file(imp + "/init.safetensors")
    hf = LlamaForSequenceClassification.from_pretrained(d + "/src", num_labels=2,
                                                        pad_token_id=PAD)
    with torch.no_grad():
        hf.score.weight.copy_(ours["score.weight"])
    std = float(ours["score.weight"].std())
    hx, hmask = right_rows(ts)
    loss = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = hf_eval(hf, (hx[N // 2:], hmask[N // 2:], y[N // 2:]))
    check(rel(loss, theirs) <= 1e-5 and abs(std / cfg.initializer_range - 1) < 0.25 and
          "lm_head.weight" not in ours and "score drawn anew" in r.stdout,
          "llama: LlamaForCausalLM with --labels no,yes: a new score [2, %d] (std %.4f), the LM "
          "head left out; trainc --eval %.7f, transformers %.7f (%.1e)" %
          (cfg.hidden_size, std, loss, theirs, rel(loss, theirs)))


def tokenizer():
    """a byte-level BPE with <pad> id 0 (GPT-2's kind), over Debian's license texts"""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    lines = [" ".join(w) for w in license_lines()]
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = os.path.join(OUT, "tokenizer.json")
    tok.save(path)
    return path, lines


def classify_left(lines):
    """data classify for the Llama classifier's import: rows padded on the left"""
    imp = os.path.join(OUT, "llama", "import")
    with open(OUT + "/texts.jsonl", "w") as f:
        for i, l in enumerate(lines[:40]):
            f.write(json.dumps({"text": l[:int(5 + 7 * (i % 9))], "label": NAMES[i % 3]}) + "\n")
    trainc("data", "classify", OUT + "/texts.jsonl", OUT + "/rows", "--tokenizer", TOK,
           "--model", imp + "/model.json", "--val-frac", 0)
    hf = PreTrainedTokenizerFast(tokenizer_file=TOK, pad_token="<pad>")
    hf.padding_side = "left"
    enc = hf([json.loads(l)["text"] for l in open(OUT + "/texts.jsonl")], truncation=True,
             max_length=T, padding="max_length")
    ids, mask = np.array(enc["input_ids"]), np.array(enc["attention_mask"])
    x, pos = np.load(OUT + "/rows/train_x.npy"), np.load(OUT + "/rows/train_pos.npy")
    P = T - mask.sum(1)
    want = np.array([np.r_[np.arange(p), np.arange(T - p)] for p in P])
    check(np.array_equal(x, ids) and np.array_equal(pos, want) and (P > 0).any(),
          "data classify for a decoder's classifier: every row is transformers' tokenizer with "
          "padding_side left (%d of %d padded), the text's positions from 0" %
          (int((P > 0).sum()), len(P)))


def bad_cases():
    d = os.path.join(OUT, "bad")
    saved(transformers.CohereForCausalLM, transformers.CohereConfig(
        vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=T), d + "/cohere", 0.1)
    refused("--labels with Cohere", ["import", "hf", d + "/cohere", "-o", d + "/o1", "--labels",
                                     "2"], "--labels: transformers has no sequence classifier "
            "for cohere", d + "/o1")
    imp = os.path.join(OUT, "llama", "import")
    s = json.load(open(imp + "/model.json"))
    s["model"]["layers"][-1]["bias"] = True
    json.dump(s, open(d + "/biased.json", "w"))
    refused("export of a score with a bias",
            ["export", "hf", d + "/biased.json", imp + "/eval.json", "--weights",
             imp + "/init.safetensors", "-o", d + "/o2"],
            "a sequence classifier's score, a linear without bias", d + "/o2")


def fake_gpu(cfg, rng):
    """the Llama classifier on the fake GPU against the CPU (above); exits"""
    d = os.path.join(OUT, "fake_gpu")
    saved(LlamaForSequenceClassification, cfg, d + "/src", 0.02)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    save_data(imp, texts(rng, cfg.vocab_size, N), rng.integers(0, len(NAMES), size=N))
    fake_gpu_vs_cpu("a Llama sequence classifier (last_token)", imp, d)
    sys.exit(1 if failed else 0)


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
if "--fake-gpu" in sys.argv[1:]:
    fake_gpu(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, num_labels=3, pad_token_id=PAD),
             np.random.default_rng(5))
TOK, LINES = tokenizer()
rng = np.random.default_rng(11)
labels = dict(id2label=dict(enumerate(NAMES)), label2id={n: k for k, n in enumerate(NAMES)},
              pad_token_id=PAD)
llama = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                    tie_word_embeddings=False, initializer_range=0.05, **labels)
case("llama", LlamaForSequenceClassification, llama, rng)
case("qwen2", Qwen2ForSequenceClassification,
     Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                 tie_word_embeddings=True, **labels), rng)
case("gpt2", GPT2ForSequenceClassification,
     GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=T, resid_pdrop=0.0,
                embd_pdrop=0.0, attn_pdrop=0.0, **labels), rng)
case("phi", PhiForSequenceClassification,
     PhiConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
               num_attention_heads=4, max_position_embeddings=64, resid_pdrop=0.0,
               embd_pdrop=0.0, attention_dropout=0.0, **labels), rng)
case("gptj", GPTJForSequenceClassification,
     GPTJConfig(vocab_size=300, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **labels), rng)
new_score(rng, LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=64, tie_word_embeddings=False,
                           initializer_range=0.05))
classify_left(LINES)
bad_cases()
print("seq_cls_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
