"""Direct preference optimization (TRL's DPOTrainer, its sigmoid loss): trainc import hf
--task dpo of a LlamaForCausalLM, the `dpo` loss, `--reference` and `data pairs` against
PyTorch on transformers' model.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread. A row holds a pair: the prompt and chosen answer padded on the
left to T, then the prompt and rejected answer; y is each answer token's id at the place
that predicts it (-100 elsewhere), so an answer's log-probability is TRL's: the sum of
log softmax over the answer's tokens. The reference model is another random Llama (the
SFT model DPO starts from, in practice the policy's own start).

- `--task dpo` imports the language model with x, pos and y [2T], ref [2] and the dpo
  loss (beta 0.1); --reference over the rows writes the reference model's log-
  probabilities of each answer within 1e-5 of transformers';
- trainc's `--eval` loss and ranking accuracy of the policy against those equal TRL's
  formula on transformers' logits within 1e-5;
- 8 AdamW steps (warm-up, linear decay, weight decay, clipping) give every step's loss
  within 1e-4 of torch's AdamW on transformers' model with TRL's loss;
- trained 5 steps and exported, transformers' from_pretrained computes trainc's --eval
  loss within 1e-5; so through LoRA adapters (TRL with PEFT), merged by the export;
- `--task simpo` (TRL's CPOTrainer with loss_type "simpo": each answer's mean log-
  probability, no reference, -log sigmoid(beta (mc - mr) - gamma)): `--eval` within 1e-5
  and 8 AdamW steps within 1e-4 of torch's; so dpo with label_smoothing (conservative
  DPO) and the ipo loss (TRL's loss_type "ipo", over the answers' means);
- dpo with `rpo_alpha` 0.5 (TRL's RPO: plus the chosen answers' cross entropy): 8 AdamW
  steps within 1e-4 of torch's; so dpo with each other `loss_type` (TRL's robust with
  label_smoothing 0.2, hinge, nca_pair, sppo_hard, apo_zero with rpo_alpha 0.5, apo_down); so simpo with `cpo_alpha` 0.5 (CPO-SimPO); `--task cpo`
  (TRL's CPOTrainer: the sums without a reference, cpo_alpha 1): `--eval` within 1e-5 and
  8 AdamW steps within 1e-4;
- `--task orpo` (TRL's ORPOTrainer: the chosen texts' cross entropy over prompt and
  answer, t [T] its targets, less beta log sigmoid of the answers' log odds ratio):
  `--eval` within 1e-5 and 8 AdamW steps within 1e-4 of torch's; without sft_target the
  supervised term over the answers alone (the paper's L_SFT), `--eval` within 1e-5;
- `--task kto` (TRL's KTOTrainer: a completion and its KL text a row, a label): `--reference`
  writes both texts' reference log-probabilities; `--eval` (the batch's KL estimate not
  0) within 1e-5 and 8 AdamW steps within 1e-4 of TRL's formula on torch's, with an
  undesirable weight of 1.5, and on 2 ranks of 8 rows (mpirun) 1 rank x 16's losses (the
  KL estimate the ranks' mean); `data pairs` of unpaired lines, the KL texts rotated
  within each `--kl-group`;
- `data pairs` for a dpo model: every half is transformers' tokenizer (prompt + answer)
  padded on the left, y the answer's next ids; for an orpo model t too;
- refused with exit 1: training without the reference's files (naming --reference),
  --task dpo over a sequence classifier, --reference of a model without the dpo loss
  (tests/bad/dpo_*.json: the loss's keys and the reference input's shape).

dpo_hf.py --fake-gpu: instead, the import built for both devices trains 8 steps on the
fake GPU (tests/fake_gpu/: the CUDA kernels on an emulator), fp32 within 1e-5 of the
CPU's, bf16-mixed's first loss within 1e-3 and its last within 2e-2 of the CPU's fp32;
and its --reference there writes the CPU's log-probabilities within 1e-5; in fp32 the same
for the simpo, cpo, orpo and kto imports, dpo with label smoothing (and rpo_alpha) and the ipo loss (their pair
step's branches; the rows' kernels are dpo's; orpo's merged targets and supervised term,
kto's KL estimate, below 0 and taken as 0), and kto on 2 fake GPUs x 8 rows 1 GPU x 16's
losses (the estimate gathered by the fake NCCL).
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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from safetensors.torch import load_file
except ImportError:
    print("skip dpo_hf: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import (ROOT, TRAINC, check, eval_loss, failed, refused, rel, saved,  # noqa: E402
                      trainc)
import run_log  # noqa: E402
from text_hf import fake_gpu_vs_cpu, license_lines, specs, train_like_specs  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "dpo_hf")
# (its own folder with --fake-gpu: make test runs the two at once, and neither may remove
# the other's)
OUT += "_fake_gpu" if "--fake-gpu" in sys.argv[1:] else ""
T, N, PAD, BETA = 12, 64, 0, 0.1
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def pairs(rng, vocab, n):
    """n (prompt, chosen, rejected) of 1-4, 1-7 and 1-7 ids (none the padding's); the
    first fills its rows"""
    out = []
    for i in range(n):
        p = rng.integers(1, vocab, size=rng.integers(1, 5))
        a, b = (rng.integers(1, vocab, size=rng.integers(1, 8)) for _ in range(2))
        if i == 0:
            a = rng.integers(1, vocab, size=T - len(p))
        out.append((p, a, b))
    return out


def left_rows(ps):
    """trainc's rows: each half the padding, then prompt + answer at positions 0 .. L-1; y
    the answer's next ids where they are predicted, -100 elsewhere"""
    n = len(ps)
    x, pos = np.full((n, 2 * T), PAD, np.int32), np.zeros((n, 2 * T), np.int32)
    y = np.full((n, 2 * T), -100, np.int32)
    for r, (p, a, b) in enumerate(ps):
        for h, ans in enumerate((a, b)):
            t = np.r_[p, ans]
            P, L, at = T - len(t), len(t), h * T
            x[r, at + P:at + T] = t
            pos[r, at:at + T] = np.r_[np.arange(P), np.arange(L)]
            for k in range(len(p) - 1, L - 1):   # place k predicts t[k + 1], an answer's
                y[r, at + P + k] = t[k + 1]
    return x, pos, y


def right_rows(ps):
    """transformers' rows: the chosen texts, then the rejected ones, right-padded; the
    attention mask; each text's prompt length"""
    ts = [np.r_[p, a] for p, a, _ in ps] + [np.r_[p, b] for p, _, b in ps]
    plen = [len(p) for p, _, _ in ps] * 2
    x, mask = np.full((len(ts), T), PAD, np.int64), np.zeros((len(ts), T), np.int64)
    for r, t in enumerate(ts):
        x[r, :len(t)] = t
        mask[r, :len(t)] = 1
    return x, mask, np.array(plen)


def answer_lengths(rows):
    """each pair's (chosen, rejected) answer lengths [n, 2]"""
    x, mask, plen = rows
    k = np.arange(1, T)[None, :]
    return torch.from_numpy(((k >= plen[:, None]) & (mask[:, 1:] == 1)).sum(1)).view(2, -1).t()


def logps(m, rows, mean=False):
    """each pair's (chosen, rejected) answer log-probabilities [n, 2], TRL's
    concatenated_forward: log softmax at each place, gathered at the next id, summed over
    the answer's tokens (MEAN: their mean, as its CPO/SimPO and IPO average them)"""
    x, mask, plen = rows
    z = m(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(mask)).logits
    lp = torch.gather(F.log_softmax(z[:, :-1].float(), -1), 2, torch.from_numpy(x[:, 1:, None]))[..., 0]
    k = np.arange(1, T)[None, :]
    answer = torch.from_numpy((k >= plen[:, None]) & (mask[:, 1:] == 1))
    s = (lp * answer).sum(1)
    return (s / answer.sum(1) if mean else s).view(2, -1).t()


def dpo_loss(m, rows, ref, ls=0.0, rpo=0.0):
    """TRL's sigmoid loss over the pairs (with label_smoothing LS: conservative DPO's), the
    mean (with rpo_alpha RPO: plus RPO times the chosen answers' cross entropy, the mean over
    all their tokens); the share ranked right; and the mean margin (TRL's rewards/margins,
    its chosen rewards less its rejected ones)"""
    lp = logps(m, rows)
    u = BETA * ((lp[:, 0] - ref[:, 0]) - (lp[:, 1] - ref[:, 1]))
    loss = (-(1 - ls) * F.logsigmoid(u) - ls * F.logsigmoid(-u)).mean()
    if rpo:
        loss = loss + rpo * chosen_nll(m, rows)
    return loss, float((u > 0).float().mean()), float(u.double().mean())


def ipo_loss(m, rows, ref):
    """TRL's DPOTrainer with loss_type "ipo": the policy's and the reference's means over
    each answer's tokens, (logits - 1 / (2 beta))^2, the mean; and the share ranked right"""
    lp = logps(m, rows, mean=True)
    u = (lp[:, 0] - ref[:, 0]) - (lp[:, 1] - ref[:, 1])
    return ((u - 1 / (2 * BETA)) ** 2).mean(), float((u > 0).float().mean())


def chosen_nll(m, rows):
    """the chosen answers' cross entropy, the mean over all their tokens (TRL's
    policy_nll_loss of RPO and CPO)"""
    x, mask, plen = rows
    n = len(x) // 2
    z = m(input_ids=torch.from_numpy(x[:n]), attention_mask=torch.from_numpy(mask[:n])).logits
    k = np.arange(T)[None, :]
    labels = np.where((mask[:n] == 1) & (k >= plen[:n, None]), x[:n], -100)
    return F.cross_entropy(z[:, :-1].reshape(-1, z.shape[-1]).float(),
                           torch.from_numpy(labels[:, 1:]).reshape(-1))


def simpo_loss(m, rows, beta=2.0, gamma=1.0, alpha=0.0, mean=True):
    """TRL's CPOTrainer with loss_type "simpo": -log sigmoid(beta (mc - mr) - gamma), the
    mean, plus cpo_alpha ALPHA times the chosen answers' cross entropy; with MEAN false
    (and gamma 0) its loss_type "sigmoid", CPO, over the sums; the share ranked right; and
    the mean margin (TRL's rewards/margins less gamma)"""
    lp = logps(m, rows, mean=mean)
    u = beta * (lp[:, 0] - lp[:, 1]) - gamma
    loss = -F.logsigmoid(u).mean()
    return (loss + alpha * chosen_nll(m, rows) if alpha else loss), \
        float((u > 0).float().mean()), float(u.double().mean())


def orpo_loss(m, rows, beta=BETA, prompt=True):
    """TRL's ORPOTrainer: the chosen texts' cross entropy over prompt and answer (PROMPT
    False: the answer alone, the paper's L_SFT) and their padding left out, the mean over
    all those tokens of the batch; less beta times the mean of log sigmoid of the log odds
    ratio of the answers' mean log-probabilities; the share ranked right; and the mean log
    odds ratio (TRL's log_odds_ratio)"""
    x, mask, plen = rows
    n = len(x) // 2
    z = m(input_ids=torch.from_numpy(x[:n]), attention_mask=torch.from_numpy(mask[:n])).logits
    labels = torch.from_numpy(np.where(mask[:n] == 1, x[:n], -100))
    if not prompt:
        k = np.arange(T)[None, :]
        labels[torch.from_numpy(k < plen[:n, None])] = -100
    nll = F.cross_entropy(z[:, :-1].reshape(-1, z.shape[-1]).float(), labels[:, 1:].reshape(-1))
    lp = logps(m, rows, mean=True)
    log_odds = (lp[:, 0] - lp[:, 1]) - (torch.log1p(-torch.exp(lp[:, 0])) -
                                        torch.log1p(-torch.exp(lp[:, 1])))
    return nll - beta * F.logsigmoid(log_odds).mean(), float((log_odds > 0).float().mean()), \
        float(log_odds.double().mean())


def kto_loss(m, rows, ref, label, beta=BETA, w=(1.0, 1.0)):
    """TRL's KTOTrainer: each row's completion's log-probability less the reference's; the
    KL estimate the batch's mean of the KL texts', at least 0, without gradient (TRL
    computes the KL texts under no_grad); 1 - sigmoid(beta (lr - KL)) for a desirable
    completion (weight w[0]), 1 - sigmoid(beta (KL - lr)) for another (w[1]), the mean;
    and the share on the right side of KL"""
    lp = logps(m, rows)
    kl = (lp[:, 1] - ref[:, 1]).mean().clamp(min=0).detach()
    lr = lp[:, 0] - ref[:, 0]
    good = torch.from_numpy(np.asarray(label) == 1)
    u = torch.where(good, BETA * (lr - kl), BETA * (kl - lr)) if beta == BETA else None
    wt = torch.where(good, torch.tensor(w[0]), torch.tensor(w[1])).double()
    loss = (wt * (1 - torch.sigmoid(u.double()))).mean()
    return loss, float((u > 0).float().mean()), float(kl)


def kto_examples(ps, rng, group=8):
    """kto's rows from the triples' prompts and first answers as completions: each row's
    second text its prompt with the completion of the line before in its group of GROUP
    (the first line's: the group's last; cut to fit T), TRL's KL text; the labels random"""
    out = []
    for g in range(0, len(ps), group):
        grp = ps[g:g + group]
        for i, (p, a, _) in enumerate(grp):
            out.append((p, a, grp[i - 1][1][:T - len(p)]))   # (cut to fit)
    return out, rng.integers(0, 2, size=len(ps)).astype(np.int32)


def sft_rows(ps):
    """orpo's t [n, T]: each chosen text's next ids, prompt and answer, where it is placed
    (left-padded), -100 on the padding"""
    t = np.full((len(ps), T), -100, np.int32)
    for r, (p, a, _) in enumerate(ps):
        w = np.r_[p, a]
        P = T - len(w)
        t[r, P:T - 1] = w[1:]
    return t


def hf_eval(m, rows, ref):
    m.eval()
    with torch.no_grad():
        loss, acc, margin = dpo_loss(m, rows, ref)
    return float(loss), acc, margin


def save_data(imp, ps, ref=None, sft=False, label=None):
    """the rows (and, given, the reference's log-probabilities; with SFT orpo's t; kto's
    labels) as imp/data's arrays"""
    os.makedirs(imp + "/data", exist_ok=True)
    x, pos, y = left_rows(ps)
    extra = ((("ref", ref),) if ref is not None else ()) + \
        ((("t", sft_rows(ps)),) if sft else ()) + ((("label", label),) if label is not None else ())
    for part, sl in (("train", slice(0, N // 2)), ("val", slice(N // 2, None))):
        for k, a in (("x", x), ("pos", pos), ("y", y)) + extra:
            np.save("%s/data/%s_%s.npy" % (imp, part, k), a[sl])
    specs(imp, ["x", "pos", "y", "t" if sft else "ref"] + (["label"] if label is not None else []))


def no_reference(imp):
    """imp's training specs (text_hf.specs') without the reference's files: simpo's"""
    for f in ("eval", "train5", "train8"):
        sp = json.load(open("%s/%s.json" % (imp, f)))
        for part in sp["train"]["data"].values():
            part.pop("ref")
        json.dump(sp, open("%s/%s.json" % (imp, f), "w"))


def eight_steps(spec, imp, d, out, ps, loss_of, ref=None, batched=False):
    """train8.json's 8 AdamW steps of SPEC by trainc (into d/OUT) and by torch on the source
    folder's transformers model, LOSS_OF(model, rows, ref rows or None) over the same
    batches of 16 pairs (BATCHED: REF is already a list, a batch's item each); trainc's
    losses and the worst relative difference"""
    trainc("run", spec, imp + "/train8.json", "--init", imp + "/init.safetensors",
           "--threads", 1, "--quiet", "--out", d + "/" + out)
    ours = run_log.losses(d + "/" + out)
    batches = [(right_rows(ps[b:b + 16]), ref[b // 16] if batched else
                None if ref is None else ref[b:b + 16]) for b in range(0, N // 2, 16)]
    theirs = train_like_specs(LlamaForCausalLM.from_pretrained(d + "/src"), batches,
                              lambda mm, b: loss_of(mm, b[0], b[1]))
    return ours, max(rel(p, q) for p, q in zip(ours, theirs))


def evaluated(imp, weights, out):
    """trainc --eval's validation loss, accuracy and margin"""
    r = trainc("run", imp + "/model.json", imp + "/eval.json", "--init", weights, "--eval",
               "--threads", 1, "--out", out)
    ev = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    return ev["val_loss"], ev["val_acc"], ev["val_margin"]


def reference(d, imp, ref_model, ps):
    """--reference with the reference model's weights writes data/{train,val}_ref.npy:
    transformers' log-probabilities of each answer; training without them is refused"""
    refused("training before --reference wrote the reference's files",
            ["run", imp + "/model.json", imp + "/train5.json", "--init", imp + "/init.safetensors",
             "--out", d + "/early"], "--reference", d + "/early")
    trainc("import", "hf", d + "/ref", "-o", d + "/ref_import", "--seq-len", T, "--task", "dpo")
    r = trainc("run", imp + "/model.json", imp + "/eval.json", "--init",
               d + "/ref_import/init.safetensors", "--reference", "--threads", 1)
    ours = np.concatenate([np.load(imp + "/data/%s_ref.npy" % p) for p in ("train", "val")])
    with torch.no_grad():
        theirs = logps(ref_model.eval(), right_rows(ps)).numpy()
    worst = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    check(ours.shape == (N, 2) and worst <= 1e-5 and r.stdout.count('"event":"reference"') == 2,
          "llama: --reference writes the reference model's log-probabilities of the %d pairs' "
          "answers (train and val), within %.1e of transformers' (%.2f .. %.2f)" %
          (N, worst, float(theirs.min()), float(theirs.max())))
    return ours


def case(cfg, rng):
    d = os.path.join(OUT, "llama")
    ref_model = saved(LlamaForCausalLM, cfg, d + "/ref", 0.3, seed=1)
    m = saved(LlamaForCausalLM, cfg, d + "/src", 0.3, seed=2)
    imp = d + "/import"
    r = trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "dpo")
    spec = json.load(open(imp + "/model.json"))["model"]
    check(spec["loss"] == {"op": "dpo", "target": "y", "reference": "ref", "beta": BETA} and
          spec["inputs"]["x"]["shape"] == [2 * T] and spec["inputs"]["ref"]["shape"] == [2] and
          spec.get("positions") == "pos" and "for dpo" in r.stdout,
          "llama: --task dpo imports the language model with x, pos, y [%d], ref [2] and the dpo "
          "loss (beta %g)" % (2 * T, BETA))
    ps = pairs(rng, cfg.vocab_size, N)
    save_data(imp, ps)
    ref = reference(d, imp, ref_model, ps)
    va = right_rows(ps[N // 2:])
    theirs = hf_eval(m, va, torch.from_numpy(ref[N // 2:]))
    ours = evaluated(imp, imp + "/init.safetensors", d + "/eval0")
    check(rel(ours[0], theirs[0]) <= 1e-5 and abs(ours[1] - theirs[1]) < 1e-9 and
          abs(ours[2] - theirs[2]) <= 1e-5 * max(abs(theirs[2]), 1e-3),
          "llama: trainc --eval %.7f (%.4f of the pairs ranked right, val_margin %.6f), TRL's "
          "loss on transformers' logits %.7f (%.4f, rewards/margins %.6f) (%.1e)"
          % (ours[0], ours[1], ours[2], theirs[0], theirs[1], theirs[2], rel(ours[0], theirs[0])))
    ours8, worst = eight_steps(imp + "/model.json", imp, d, "run8", ps,
                               lambda mm, rows, r: dpo_loss(mm, rows, r)[0], torch.from_numpy(ref))
    check(len(ours8) == 8 and worst <= 1e-4, "llama: 8 AdamW steps, every loss within %.1e of "
          "torch's with TRL's loss on transformers' model (first %.6f, last %.6f)" %
          (worst, ours8[0], ours8[-1]))
    trainc("run", imp + "/model.json", imp + "/train5.json", "--init", imp + "/init.safetensors",
           "--threads", 1, "--quiet", "--out", d + "/run5")
    trainc("export", "hf", imp + "/model.json", imp + "/eval.json", "--weights",
           d + "/run5/model.safetensors", "-o", d + "/hf")
    back = LlamaForCausalLM.from_pretrained(d + "/hf")
    ours = evaluated(imp, d + "/run5/model.safetensors", d + "/eval5")
    theirs = hf_eval(back, va, torch.from_numpy(ref[N // 2:]))
    check(rel(ours[0], theirs[0]) <= 1e-5, "llama: trained 5 steps, exported as %s, "
          "from_pretrained's loss %.7f, trainc --eval %.7f (%.1e)" %
          (back.config.architectures, theirs[0], ours[0], rel(ours[0], theirs[0])))
    lora(d, imp, va, ref)
    conservative(d, imp, ps, ref)
    rpo(d, imp, ps, ref)
    ipo(d, imp, ps, ref)
    loss_types(d, imp, ps, ref)
    return d, imp, ps, ref


def ipo(d, imp, ps, ref):
    """the ipo loss over the same rows and reference (TRL's loss_type "ipo"): --eval within
    1e-5 and 8 AdamW steps within 1e-4 of torch's"""
    spec = json.load(open(imp + "/model.json"))
    spec["model"]["loss"]["op"] = "ipo"
    json.dump(spec, open(imp + "/ipo.json", "w"))
    rows = right_rows(ps)
    mean_ref = torch.from_numpy(ref) / answer_lengths(rows)   # (the reference's means)
    m = LlamaForCausalLM.from_pretrained(d + "/src").eval()
    with torch.no_grad():
        theirs = [float(v) for v in ipo_loss(m, right_rows(ps[N // 2:]), mean_ref[N // 2:])]
    r = trainc("run", imp + "/ipo.json", imp + "/eval.json", "--init", imp + "/init.safetensors",
               "--eval", "--threads", 1, "--out", d + "/ipo_eval")
    ev = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    ours8, worst = eight_steps(imp + "/ipo.json", imp, d, "ipo8", ps,
                               lambda mm, rows, r: ipo_loss(mm, rows, r)[0], mean_ref)
    check(rel(ev["val_loss"], theirs[0]) <= 1e-5 and abs(ev["val_acc"] - theirs[1]) < 1e-9 and
          len(ours8) == 8 and worst <= 1e-4,
          "llama: ipo's --eval %.7f, TRL's IPO loss on transformers' logits %.7f (%.1e); 8 AdamW "
          "steps within %.1e (first %.6f, last %.6f)" % (ev["val_loss"], theirs[0],
                                                        rel(ev["val_loss"], theirs[0]), worst,
                                                        ours8[0], ours8[-1]))


def rpo(d, imp, ps, ref):
    """dpo's rpo_alpha 0.5 (TRL's RPO: the chosen answers' cross entropy added): 8 AdamW
    steps within 1e-4 of torch's"""
    spec = json.load(open(imp + "/model.json"))
    spec["model"]["loss"]["rpo_alpha"] = 0.5
    json.dump(spec, open(d + "/rpo.json", "w"))
    ours, worst = eight_steps(d + "/rpo.json", imp, d, "rpo8", ps,
                              lambda mm, rows, r: dpo_loss(mm, rows, r, rpo=0.5)[0],
                              torch.from_numpy(ref))
    check(len(ours) == 8 and worst <= 1e-4, "llama: dpo with rpo_alpha 0.5 (RPO), 8 AdamW steps "
          "within %.1e of torch's (first %.6f, last %.6f)" % (worst, ours[0], ours[-1]))


def trl_type_loss(m, rows, ref, loss_type, ls=0.0, rpo=0.0):
    """TRL's DPOTrainer.dpo_loss for LOSS_TYPE (as its source writes each), the mean over the
    pairs (with rpo_alpha RPO: plus RPO times the chosen answers' cross entropy)"""
    lp = logps(m, rows)
    a, b = lp[:, 0] - ref[:, 0], lp[:, 1] - ref[:, 1]
    logits = a - b
    if loss_type == "robust":
        losses = (-F.logsigmoid(BETA * logits) * (1 - ls) + F.logsigmoid(-BETA * logits) * ls) / (1 - 2 * ls)
    elif loss_type == "hinge":
        losses = torch.relu(1 - BETA * logits)
    elif loss_type == "nca_pair":
        losses = -F.logsigmoid(a * BETA) - 0.5 * F.logsigmoid(-a * BETA) - 0.5 * F.logsigmoid(-b * BETA)
    elif loss_type == "sppo_hard":
        losses = (a - 0.5 / BETA) ** 2 + (b + 0.5 / BETA) ** 2
    elif loss_type == "apo_zero":
        losses = 1 - torch.sigmoid(BETA * a) + torch.sigmoid(BETA * b)
    else:   # apo_down
        losses = torch.sigmoid(BETA * a) + 1 - torch.sigmoid(BETA * (a - b))
    loss = losses.mean()
    return loss + rpo * chosen_nll(m, rows) if rpo else loss


def loss_types(d, imp, ps, ref):
    """dpo's loss_type (TRL's DPOConfig.loss_type): robust (label_smoothing 0.2), hinge,
    nca_pair, sppo_hard, apo_zero (with rpo_alpha 0.5) and apo_down, each 8 AdamW steps
    within 1e-4 of torch's with TRL's loss"""
    for t, more in (("robust", {"label_smoothing": 0.2}), ("hinge", {}), ("nca_pair", {}),
                    ("sppo_hard", {}), ("apo_zero", {"rpo_alpha": 0.5}), ("apo_down", {})):
        spec = json.load(open(imp + "/model.json"))
        spec["model"]["loss"].update(loss_type=t, **more)
        json.dump(spec, open("%s/%s.json" % (d, t), "w"))
        ours, worst = eight_steps("%s/%s.json" % (d, t), imp, d, t + "8", ps,
                                  lambda mm, rows, r: trl_type_loss(mm, rows, r, t,
                                                                    more.get("label_smoothing", 0.0),
                                                                    more.get("rpo_alpha", 0.0)),
                                  torch.from_numpy(ref))
        check(len(ours) == 8 and worst <= 1e-4, "llama: dpo with loss_type %s%s, 8 AdamW steps "
              "within %.1e of torch's with TRL's loss (first %.6f, last %.6f)" %
              (t, "".join(" and %s %g" % kv for kv in more.items()), worst, ours[0], ours[-1]))


def conservative(d, imp, ps, ref):
    """dpo's label_smoothing 0.2 (TRL's conservative DPO): 8 AdamW steps within 1e-4 of
    torch's"""
    spec = json.load(open(imp + "/model.json"))
    spec["model"]["loss"]["label_smoothing"] = 0.2
    json.dump(spec, open(d + "/cdpo.json", "w"))
    ours, worst = eight_steps(d + "/cdpo.json", imp, d, "cdpo8", ps,
                              lambda mm, rows, r: dpo_loss(mm, rows, r, 0.2)[0],
                              torch.from_numpy(ref))
    check(len(ours) == 8 and worst <= 1e-4, "llama: dpo with label_smoothing 0.2, 8 AdamW steps "
          "within %.1e of torch's (first %.6f, last %.6f)" % (worst, ours[0], ours[-1]))


def lora(d, imp, va, ref):
    """dpo through LoRA adapters (TRL with PEFT): 5 steps, the export merges them, and
    transformers computes trainc's --eval loss"""
    lo = ["--set", "lora.rank=4", "--set", "lora.alpha=8"]
    trainc("run", imp + "/model.json", imp + "/train5.json", "--init", imp + "/init.safetensors",
           "--threads", 1, "--quiet", "--out", d + "/lora5", *lo)
    trainc("export", "hf", imp + "/model.json", imp + "/eval.json", "--weights",
           d + "/lora5/model.safetensors", "-o", d + "/hf_lora", *lo)
    back = LlamaForCausalLM.from_pretrained(d + "/hf_lora")
    r = trainc("run", imp + "/model.json", imp + "/eval.json", "--init", d + "/lora5/model.safetensors",
               "--eval", "--threads", 1, "--out", d + "/eval_lora", *lo)
    ours = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["val_loss"]
    theirs = hf_eval(back, va, torch.from_numpy(ref[N // 2:]))[0]
    base = evaluated(imp, imp + "/init.safetensors", d + "/eval_base")[0]
    check(rel(ours, theirs) <= 1e-5 and rel(ours, base) > 1e-4,
          "llama: 5 dpo steps through LoRA adapters (rank 4), exported merged: from_pretrained's "
          "loss %.7f, trainc --eval %.7f (%.1e; %.7f before)" % (theirs, ours, rel(ours, theirs),
                                                                base))


def simpo(cfg, rng):
    """--task simpo: the same rows without a reference; --eval and 8 AdamW steps against
    TRL's SimPO loss on transformers' model"""
    d = os.path.join(OUT, "simpo")
    m = saved(LlamaForCausalLM, cfg, d + "/src", 0.3, seed=3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "simpo")
    spec = json.load(open(imp + "/model.json"))["model"]
    check(spec["loss"] == {"op": "simpo", "target": "y", "beta": 2.0, "gamma": 1.0} and
          "ref" not in spec["inputs"], "llama: --task simpo imports the language model with the "
          "simpo loss (beta 2, gamma 1) and no reference input")
    ps = pairs(rng, cfg.vocab_size, N)
    save_data(imp, ps)
    no_reference(imp)
    m.eval()
    with torch.no_grad():
        theirs = [float(v) for v in simpo_loss(m, right_rows(ps[N // 2:]))]
    ours = evaluated(imp, imp + "/init.safetensors", d + "/eval0")
    check(rel(ours[0], theirs[0]) <= 1e-5 and abs(ours[1] - theirs[1]) < 1e-9 and
          abs(ours[2] - theirs[2]) <= 1e-5 * max(abs(theirs[2]), 1e-3),
          "llama: simpo's --eval %.7f (%.4f ranked right, val_margin %.6f), TRL's SimPO loss on "
          "transformers' logits %.7f (%.4f, margin %.6f) (%.1e)"
          % (ours[0], ours[1], ours[2], theirs[0], theirs[1], theirs[2], rel(ours[0], theirs[0])))
    ours8, worst = eight_steps(imp + "/model.json", imp, d, "run8", ps,
                               lambda mm, rows, r: simpo_loss(mm, rows)[0])
    check(len(ours8) == 8 and worst <= 1e-4, "llama: 8 simpo AdamW steps, every loss within "
          "%.1e of torch's (first %.6f, last %.6f)" % (worst, ours8[0], ours8[-1]))
    spec = json.load(open(imp + "/model.json"))
    spec["model"]["loss"]["cpo_alpha"] = 0.5
    json.dump(spec, open(d + "/cpo_simpo.json", "w"))
    ours8, worst = eight_steps(d + "/cpo_simpo.json", imp, d, "cs8", ps,
                               lambda mm, rows, r: simpo_loss(mm, rows, alpha=0.5)[0])
    check(len(ours8) == 8 and worst <= 1e-4, "llama: simpo with cpo_alpha 0.5 (CPO-SimPO), 8 "
          "AdamW steps within %.1e of torch's (first %.6f, last %.6f)" %
          (worst, ours8[0], ours8[-1]))
    cpo(d, ps)
    refused("--reference of a simpo model", ["run", imp + "/model.json", imp + "/eval.json",
                                             "--reference"], "simpo, orpo or cpo, which have no reference")
    refused("--sample of a simpo model, naming the plain import",
            ["run", imp + "/model.json", imp + "/eval.json", "--sample", 5],
            "imported without --task")
    return imp


def orpo(cfg, rng):
    """--task orpo (TRL's ORPOTrainer): the same rows and t, the chosen texts' next ids;
    --eval and 8 AdamW steps against TRL's ORPO loss on transformers' model; without
    sft_target the supervised term over the answers alone"""
    d = os.path.join(OUT, "orpo")
    m = saved(LlamaForCausalLM, cfg, d + "/src", 0.3, seed=4)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "orpo")
    spec = json.load(open(imp + "/model.json"))["model"]
    check(spec["loss"] == {"op": "orpo", "target": "y", "beta": BETA, "sft_target": "t"} and
          spec["inputs"]["t"]["shape"] == [T] and "ref" not in spec["inputs"],
          "llama: --task orpo imports the language model with the orpo loss (beta %g), t [%d] "
          "its sft target and no reference input" % (BETA, T))
    ps = pairs(rng, cfg.vocab_size, N)
    save_data(imp, ps, sft=True)
    m.eval()
    va = right_rows(ps[N // 2:])
    with torch.no_grad():
        theirs = [float(v) for v in orpo_loss(m, va)]
        answers = float(orpo_loss(m, va, prompt=False)[0])
    ours = evaluated(imp, imp + "/init.safetensors", d + "/eval0")
    check(rel(ours[0], theirs[0]) <= 1e-5 and abs(ours[1] - theirs[1]) < 1e-9 and
          abs(ours[2] - theirs[2]) <= 1e-5 * max(abs(theirs[2]), 1e-3),
          "llama: orpo's --eval %.7f (%.4f ranked right, val_margin %.6f), TRL's ORPO loss on "
          "transformers' logits %.7f (%.4f, log_odds_ratio %.6f) (%.1e)"
          % (ours[0], ours[1], ours[2], theirs[0], theirs[1], theirs[2], rel(ours[0], theirs[0])))
    spec = json.load(open(imp + "/model.json"))
    del spec["model"]["loss"]["sft_target"], spec["model"]["inputs"]["t"]
    json.dump(spec, open(imp + "/answers.json", "w"))
    ev = json.load(open(imp + "/eval.json"))
    for part in ev["train"]["data"].values():
        part.pop("t")
    json.dump(ev, open(imp + "/answers_eval.json", "w"))
    r = trainc("run", imp + "/answers.json", imp + "/answers_eval.json", "--init",
               imp + "/init.safetensors", "--eval", "--threads", 1, "--out", d + "/answers_eval")
    ev = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    check(rel(ev["val_loss"], answers) <= 1e-5 and rel(answers, theirs[0]) > 1e-3,
          "llama: orpo without sft_target, the supervised term over the answers alone: --eval "
          "%.7f, the formula's %.7f (%.1e)" % (ev["val_loss"], answers,
                                               rel(ev["val_loss"], answers)))
    ours8, worst = eight_steps(imp + "/model.json", imp, d, "run8", ps,
                               lambda mm, rows, r: orpo_loss(mm, rows)[0])
    check(len(ours8) == 8 and worst <= 1e-4, "llama: 8 orpo AdamW steps, every loss within "
          "%.1e of torch's (first %.6f, last %.6f)" % (worst, ours8[0], ours8[-1]))
    return imp


def kto(cfg, rng):
    """--task kto (TRL's KTOTrainer): rows of a completion and its KL text, a label each;
    --reference writes both texts' reference log-probabilities; --eval and 8 AdamW steps
    against TRL's KTO loss on transformers' model (the weights 1 and 1.5)"""
    d = os.path.join(OUT, "kto")
    ref_model = saved(LlamaForCausalLM, cfg, d + "/ref", 0.6, seed=5)   # (surer of other
    m = saved(LlamaForCausalLM, cfg, d + "/src", 0.3, seed=6)          # ids: KL > 0)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "kto")
    spec = json.load(open(imp + "/model.json"))
    check(spec["model"]["loss"] == {"op": "kto", "target": "y", "reference": "ref",
                                    "label": "label", "beta": BETA} and
          spec["model"]["inputs"]["label"] == {"shape": [], "dtype": "i32", "classes": 2},
          "llama: --task kto imports the language model with the kto loss (beta %g), ref [2] "
          "and label []" % BETA)
    spec["model"]["loss"]["undesirable_weight"] = 1.5
    json.dump(spec, open(imp + "/model.json", "w"))
    ps, label = kto_examples(pairs(rng, cfg.vocab_size, N), rng)
    save_data(imp, ps, label=label)
    ref = reference(d, imp, ref_model, ps)
    w = (1.0, 1.5)
    m.eval()
    with torch.no_grad():
        theirs = [float(v) for v in kto_loss(m, right_rows(ps[N // 2:]),
                                             torch.from_numpy(ref[N // 2:]), label[N // 2:],
                                             w=w)]
    ours = evaluated(imp, imp + "/init.safetensors", d + "/eval0")
    check(rel(ours[0], theirs[0]) <= 1e-5 and abs(ours[1] - theirs[1]) < 1e-9 and theirs[2] > 0,
          "llama: kto's --eval %.7f (%.4f on the right side of KL), TRL's KTO loss on "
          "transformers' logits %.7f (%.4f; its KL estimate %.3f, not 0) (%.1e)" %
          (ours[0], ours[1], theirs[0], theirs[1], theirs[2], rel(ours[0], theirs[0])))
    ours8, worst = eight_steps(imp + "/model.json", imp, d, "run8", ps,
                               lambda mm, rows, r: kto_loss(mm, rows, r[0], r[1], w=w)[0],
                               [(torch.from_numpy(ref[b:b + 16]), label[b:b + 16])
                                for b in range(0, N // 2, 16)], batched=True)
    check(len(ours8) == 8 and worst <= 1e-4, "llama: 8 kto AdamW steps, every loss within "
          "%.1e of torch's (first %.6f, last %.6f)" % (worst, ours8[0], ours8[-1]))
    two_ranks(imp, d, ours8)
    return imp


def two_ranks(imp, d, ours8):
    """kto's 8 steps on 2 ranks of 8 rows each (mpirun) give the 1 rank x 16 losses: the KL
    estimate is the mean of the ranks' (TRL gathers it over its processes)"""
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    subprocess.run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", TRAINC, "run",
                    imp + "/model.json", imp + "/train8.json", "--init", imp + "/init.safetensors",
                    "--set", "batch_size=8", "--threads", "1", "--quiet", "--out", d + "/run8_2"],
                   check=True, env=env, capture_output=True)
    ours2 = run_log.losses(d + "/run8_2")
    worst = max(rel(p, q) for p, q in zip(ours2, ours8))
    check(len(ours2) == 8 and worst <= 1e-5, "llama: kto on 2 ranks x 8 rows, every loss within "
          "%.1e of 1 rank x 16's (the KL estimate the ranks' mean)" % worst)


def cpo(d, ps):
    """--task cpo over the simpo case's model and rows (TRL's CPOTrainer, loss_type
    "sigmoid"): beta 0.1 and cpo_alpha 1.0 imported; --eval within 1e-5 and 8 AdamW steps
    within 1e-4 of torch's"""
    imp = d + "/cpo"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "cpo")
    spec = json.load(open(imp + "/model.json"))["model"]
    check(spec["loss"] == {"op": "cpo", "target": "y", "beta": BETA, "cpo_alpha": 1.0} and
          "ref" not in spec["inputs"], "llama: --task cpo imports the language model with the "
          "cpo loss (beta %g, cpo_alpha 1) and no reference input" % BETA)
    save_data(imp, ps)
    no_reference(imp)
    m = LlamaForCausalLM.from_pretrained(d + "/src").eval()
    with torch.no_grad():
        theirs = [float(v) for v in simpo_loss(m, right_rows(ps[N // 2:]), BETA, 0.0, 1.0, False)]
    ours = evaluated(imp, imp + "/init.safetensors", d + "/cpo_eval")
    ours8, worst = eight_steps(imp + "/model.json", imp, d, "cpo8", ps,
                               lambda mm, rows, r: simpo_loss(mm, rows, BETA, 0.0, 1.0, False)[0])
    check(rel(ours[0], theirs[0]) <= 1e-5 and abs(ours[1] - theirs[1]) < 1e-9 and
          len(ours8) == 8 and worst <= 1e-4,
          "llama: cpo's --eval %.7f (%.4f ranked right), TRL's CPO loss on transformers' logits "
          "%.7f (%.1e); 8 AdamW steps within %.1e (first %.6f, last %.6f)" %
          (ours[0], ours[1], theirs[0], rel(ours[0], theirs[0]), worst, ours8[0], ours8[-1]))


def tokenizer():
    """a byte-level BPE with <pad> id 0, <s> before each text and </s> (a Llama's)"""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([" ".join(w) for w in license_lines()], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    path = os.path.join(OUT, "tokenizer.json")
    tok.save(path)
    return path


def data_pairs(imp, orpo_imp):
    """data pairs for the dpo import: each half transformers' tokenizer(prompt + answer)
    and </s> padded on the left, y the next ids past the prompt's first len(tokenizer(prompt));
    for the orpo import also t, the chosen half's next ids"""
    tok = tokenizer()
    lines = [" ".join(w) for w in license_lines()]
    ex = [{"prompt": "Q%d:" % i, "chosen": l[:2 + i % 6], "rejected": l[5:7 + i % 5]}
          for i, l in enumerate(lines[:30])]
    ex.append({"prompt": "long", "chosen": lines[0] * 4, "rejected": "x"})   # past T: left out
    with open(OUT + "/prefs.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in ex)
    r = trainc("data", "pairs", OUT + "/prefs.jsonl", OUT + "/rows", "--tokenizer", tok,
               "--model", imp + "/model.json", "--val-frac", 0, "--eos", "</s>")
    hf = PreTrainedTokenizerFast(tokenizer_file=tok)
    want_x, want_y, want_t = [], [], []
    for e in ex:
        halves = [hf(e["prompt"] + e[k])["input_ids"] + [2] for k in ("chosen", "rejected")]
        if max(map(len, halves)) > T:
            continue
        np_ = len(hf(e["prompt"])["input_ids"])
        xs, ys = [], []
        for h in halves:
            P = T - len(h)
            xs += [PAD] * P + h
            ys += [-100] * P + [h[k + 1] if np_ - 1 <= k < len(h) - 1 else -100 for k in range(len(h))]
        want_x.append(xs)
        want_y.append(ys)
        h = halves[0]
        want_t.append([-100] * (T - len(h)) + h[1:] + [-100])
    x, y = np.load(OUT + "/rows/train_x.npy"), np.load(OUT + "/rows/train_y.npy")
    left = len(ex) - len(want_x)
    check(np.array_equal(x, np.array(want_x)) and np.array_equal(y, np.array(want_y)) and
          ("%d left out" % left) in r.stdout and left >= 1 and (y >= 0).sum() > 0,
          "data pairs for a dpo model: every half is transformers' tokenizer(prompt + answer) "
          "and --eos padded on the left, y the answer's next ids (%d of them), -100 elsewhere; "
          "%d pairs, %d left out" % (int((y >= 0).sum()), len(want_x), left))
    trainc("data", "pairs", OUT + "/prefs.jsonl", OUT + "/rows_orpo", "--tokenizer", tok,
           "--model", orpo_imp + "/model.json", "--val-frac", 0, "--eos", "</s>")
    t = np.load(OUT + "/rows_orpo/train_t.npy")
    check(np.array_equal(t, np.array(want_t)) and
          np.array_equal(np.load(OUT + "/rows_orpo/train_y.npy"), y),
          "data pairs for an orpo model: y as dpo's, t the chosen half's next ids, prompt and "
          "answer (%d of them), -100 on the padding" % int((t >= 0).sum()))


def data_kto(imp):
    """data pairs for the kto import: TRL's unpaired lines, each row the line's prompt and
    completion, then its prompt with the completion of the line before in its group of
    --kl-group (the first's: the group's last), y the completions' next ids, label"""
    tok = tokenizer()
    lines = [" ".join(w) for w in license_lines()]
    ex = [{"prompt": "Q%d:" % i, "completion": l[:2 + i % 7], "label": i % 3 != 0}
          for i, l in enumerate(lines[:22])]
    ex[5]["completion"] = lines[0] * 4   # past T: its row left out, its completion the next KL text
    with open(OUT + "/kto.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in ex)
    r = trainc("data", "pairs", OUT + "/kto.jsonl", OUT + "/rows_kto", "--tokenizer", tok,
               "--model", imp + "/model.json", "--val-frac", 0, "--eos", "</s>", "--kl-group", 4)
    hf = PreTrainedTokenizerFast(tokenizer_file=tok)
    want_x, want_y, want_l = [], [], []
    for g in range(0, len(ex), 4):
        grp = ex[g:g + 4]
        for i, e in enumerate(grp):
            halves = [hf(e["prompt"] + c)["input_ids"] + [2]
                      for c in (e["completion"], grp[i - 1]["completion"])]
            if max(map(len, halves)) > T:
                continue
            np_ = len(hf(e["prompt"])["input_ids"])
            xs, ys = [], []
            for h in halves:
                xs += [PAD] * (T - len(h)) + h
                ys += [-100] * (T - len(h)) + [h[k + 1] if np_ - 1 <= k < len(h) - 1 else -100
                                                for k in range(len(h))]
            want_x.append(xs), want_y.append(ys), want_l.append(int(e["label"]))
    x, y = np.load(OUT + "/rows_kto/train_x.npy"), np.load(OUT + "/rows_kto/train_y.npy")
    lab = np.load(OUT + "/rows_kto/train_label.npy")
    check(np.array_equal(x, np.array(want_x)) and np.array_equal(y, np.array(want_y)) and
          np.array_equal(lab, np.array(want_l)) and ("%d left out" % (len(ex) - len(want_x)))
          in r.stdout and len(ex) - len(want_x) >= 2,
          "data pairs for a kto model: each row the line's prompt and completion, then the KL "
          "text (the completion before it in its group of 4), y the completions' next ids, "
          "the labels; %d rows, %d left out" % (len(want_x), len(ex) - len(want_x)))
    with open(OUT + "/kto_bad.jsonl", "w") as f:
        f.write(json.dumps({"prompt": "Q:", "completion": "a", "label": True}) + "\n")
        f.write(json.dumps({"prompt": "Q:", "completion": "b", "label": "yes"}) + "\n")
    refused("data pairs: a kto line whose label is no boolean",
            ["data", "pairs", OUT + "/kto_bad.jsonl", OUT + "/rows_kto_bad", "--tokenizer", tok,
             "--model", imp + "/model.json", "--val-frac", 0],
            "kto_bad.jsonl:2: error: \"label\": true (a desirable completion) or false expected",
            OUT + "/rows_kto_bad/train_x.npy")
    refused("data pairs: --kl-group 2.5", ["data", "pairs", OUT + "/kto.jsonl", OUT + "/rows_kto_g",
                                           "--tokenizer", tok, "--model", imp + "/model.json",
                                           "--kl-group", 2.5],
            "--kl-group must be a whole number in [1, 1000000], got '2.5'",
            OUT + "/rows_kto_g/train_x.npy")


def bad_cases(imp):
    d = os.path.join(OUT, "bad")
    saved(transformers.LlamaForSequenceClassification, LlamaConfig(
        vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=T, num_labels=2), d + "/cls", 0.1)
    refused("--task dpo over a sequence classifier",
            ["import", "hf", d + "/cls", "-o", d + "/o1", "--task", "dpo"],
            "--task dpo trains a language model", d + "/o1")
    trainc("import", "hf", d + "/cls", "-o", d + "/cls_import", "--seq-len", T)
    refused("--reference of a classifier", ["run", d + "/cls_import/model.json",
                                            d + "/cls_import/train.json", "--reference"],
            "has no dpo loss")


def fake_gpu(cfg, rng):
    """the dpo import on the fake GPU against the CPU; exits"""
    d = os.path.join(OUT, "fake_gpu")
    ref_model = saved(LlamaForCausalLM, cfg, d + "/ref", 0.02, seed=1)
    saved(LlamaForCausalLM, cfg, d + "/src", 0.02, seed=2)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "dpo")
    ps = pairs(rng, cfg.vocab_size, N)
    with torch.no_grad():
        ref = logps(ref_model.eval(), right_rows(ps)).numpy().astype(np.float32)
    save_data(imp, ps, ref)
    fake_gpu_vs_cpu("a Llama trained by dpo", imp, d)
    eval_on_gpu(d, imp)
    reference_on_gpu(d, imp, cfg)
    trainc("import", "hf", d + "/src", "-o", d + "/simpo", "--seq-len", T, "--task", "simpo")
    save_data(d + "/simpo", ps)
    no_reference(d + "/simpo")
    os.makedirs(d + "/simpo_gpu", exist_ok=True)
    fake_gpu_vs_cpu("and by simpo", d + "/simpo", d + "/simpo_gpu", bf16=False)
    shutil.copytree(d + "/simpo", d + "/cpo")
    spec = json.load(open(d + "/cpo/model.json"))
    spec["model"]["loss"] = {"op": "cpo", "target": "y", "beta": 0.5, "cpo_alpha": 1.0}
    json.dump(spec, open(d + "/cpo/model.json", "w"))
    os.makedirs(d + "/cpo_gpu", exist_ok=True)
    fake_gpu_vs_cpu("and by cpo (the sums without a reference, its cross entropy)", d + "/cpo",
                    d + "/cpo_gpu", bf16=False)
    trainc("import", "hf", d + "/src", "-o", d + "/orpo", "--seq-len", T, "--task", "orpo")
    save_data(d + "/orpo", ps, sft=True)
    os.makedirs(d + "/orpo_gpu", exist_ok=True)
    fake_gpu_vs_cpu("and by orpo (its sft target)", d + "/orpo", d + "/orpo_gpu", bf16=False)
    trainc("import", "hf", d + "/src", "-o", d + "/kto", "--seq-len", T, "--task", "kto")
    # (the second texts as the KL ones, about 3 over the reference in the even rows, 5
    # under in the odd ones: a batch's estimate -1, taken as 0, each rank's +3 or -5)
    shift = np.where(np.arange(N) % 2 == 0, -3, 5).astype(np.float32)[:, None]
    save_data(d + "/kto", ps, ref + shift,
              label=rng.integers(0, 2, size=N).astype(np.int32))
    os.makedirs(d + "/kto_gpu", exist_ok=True)
    fake_gpu_vs_cpu("and by kto", d + "/kto", d + "/kto_gpu", bf16=False)
    kto_two_gpus(d + "/kto", d + "/kto_gpu")
    for name, what, change in (("cdpo", "dpo with label_smoothing 0.2 and rpo_alpha 0.5",
                                {"label_smoothing": 0.2, "rpo_alpha": 0.5}),
                               ("ipo", "ipo", {"op": "ipo"})):
        shutil.copytree(imp, d + "/" + name)
        spec = json.load(open("%s/%s/model.json" % (d, name)))
        spec["model"]["loss"].update(change)
        json.dump(spec, open("%s/%s/model.json" % (d, name), "w"))
        os.makedirs("%s/%s_gpu" % (d, name), exist_ok=True)
        fake_gpu_vs_cpu("and by " + what, d + "/" + name, "%s/%s_gpu" % (d, name), bf16=False)
    sys.exit(1 if failed else 0)


def kto_two_gpus(imp, d):
    """the kto trainer fake_gpu_vs_cpu built in D on 2 fake GPUs x 8 rows (mpirun; the KL
    estimate gathered by the fake NCCL) gives its 1 GPU x 16 losses"""
    import random_runs
    env = dict(random_runs.fake_env(os.environ.get("FAKE_GPU_LIB") or os.path.join(d, "lib"),
                                    os.path.join(d, "cache")),
               TRAINC_FAKE_GPU_COUNT="2", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    keep = [a for k in ("LD_LIBRARY_PATH", "TRAINC_CACHE_DIR", "TRAINC_FAKE_GPU_COUNT",
                        "OMPI_MCA_btl_vader_single_copy_mechanism") for a in ("-x", k)]
    subprocess.run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"] + keep +
                   [d + "/model_fp32", "--device", "cuda", "--threads", "1", "--quiet", "--init",
                    imp + "/init.safetensors", "--set", "batch_size=8", "--out", d + "/two"],
                   check=True, env=env, capture_output=True, cwd=imp)
    one, two = run_log.losses(d + "/fp32_cuda"), run_log.losses(d + "/two")
    worst = max(rel(p, q) for p, q in zip(two, one))
    check(len(two) == len(one) == 8 and worst <= 1e-5, "and kto on 2 fake GPUs x 8 rows: every "
          "loss within %.1e of 1 GPU x 16's (the KL estimate the GPUs' mean)" % worst)


def eval_on_gpu(d, imp):
    """--eval on the fake GPU (the fp32 trainer fake_gpu_vs_cpu built): the CPU's val_loss
    and val_margin within 1e-5, its val_acc"""
    import subprocess
    import random_runs
    env = random_runs.fake_env(os.environ.get("FAKE_GPU_LIB") or os.path.join(d, "lib"),
                               os.path.join(d, "cache"))
    ev = {}
    for dev in ("cpu", "cuda"):
        r = subprocess.run([os.path.join(d, "model_fp32"), "--device", dev, "--threads", "1",
                            "--init", imp + "/init.safetensors", "--eval"], check=True, env=env,
                           capture_output=True, text=True, cwd=imp)
        ev[dev] = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    c, g = ev["cpu"], ev["cuda"]
    worst = max(rel(g[k], c[k]) for k in ("val_loss", "val_margin"))
    check(worst <= 1e-5 and g["val_acc"] == c["val_acc"], "--eval on the fake GPU: val_loss and "
          "val_margin (%.6f) within %.1e of the CPU's, val_acc %.4f the same"
          % (g["val_margin"], worst, g["val_acc"]))


def reference_on_gpu(d, imp, cfg):
    """--reference on the fake GPU (the fp32 trainer fake_gpu_vs_cpu built) writes the CPU's
    log-probabilities within 1e-5"""
    import subprocess
    import random_runs
    env = random_runs.fake_env(os.environ.get("FAKE_GPU_LIB") or os.path.join(d, "lib"),
                               os.path.join(d, "cache"))
    trainc("import", "hf", d + "/ref", "-o", d + "/ref_import", "--seq-len", T, "--task", "dpo")
    got = {}
    for dev in ("cpu", "cuda"):
        subprocess.run([os.path.join(d, "model_fp32"), "--device", dev, "--threads", "1",
                        "--init", d + "/ref_import/init.safetensors", "--reference"], check=True,
                       env=env, capture_output=True, cwd=imp)
        got[dev] = np.load(imp + "/data/train_ref.npy")
    worst = float(np.abs(got["cuda"] - got["cpu"]).max() / np.abs(got["cpu"]).max())
    check(got["cpu"].shape == (N // 2, 2) and worst <= 1e-5, "--reference on the fake GPU: the "
          "%d training pairs' log-probabilities within %.1e of the CPU's" % (N // 2, worst))


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(17)
llama = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                    tie_word_embeddings=False)
if "--fake-gpu" in sys.argv[1:]:
    fake_gpu(llama, rng)
d, imp, _, _ = case(llama, rng)
simpo(llama, rng)
orpo_imp = orpo(llama, rng)
kto_imp = kto(llama, rng)
data_pairs(imp, orpo_imp)
data_kto(kto_imp)
bad_cases(imp)
print("dpo_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
