"""What the text models' tests against transformers share (tests/bert_hf.py,
tests/bert_token_hf.py, tests/bert_mlm_hf.py, tests/modernbert_hf.py, tests/seq_cls_hf.py,
tests/reward_hf.py, tests/decoder_token_hf.py, tests/xlmr_hf.py, tests/qa_hf.py):
Debian's license texts as lines of words, tokenizers trained over them (no hub), the
training specs their parity checks run and the steps of both sides compared, a LoRA run
exported merged, and an import's run on the fake GPU against the CPU."""
import glob
import json
import os

from tokenizers import (BertWordPieceTokenizer, Tokenizer, decoders, models, pre_tokenizers,
                        processors, trainers)
from transformers import PreTrainedTokenizerFast, RobertaTokenizerFast


def license_lines():
    """the first six license files' non-blank lines, each as its words"""
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/**", recursive=True)
                   if os.path.isfile(f) and not os.path.islink(f))
    text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in files[:6])
    return [l.split() for l in text.splitlines() if l.split()]


def wordpiece(path, corpus):
    """BERT's kind: WordPiece, lower case, accents stripped, [CLS] A [SEP]; the file at
    PATH, transformers' tokenizer of it, its vocabulary's size"""
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(corpus, vocab_size=300, show_progress=False)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.save(path)
    hf = PreTrainedTokenizerFast(tokenizer_file=path, pad_token="[PAD]")
    return hf, tok.get_vocab_size()


def byte_level(path, corpus, add_prefix_space):
    """RoBERTa's kind: byte-level BPE, <s> A </s>; the file at PATH, transformers' tokenizer
    of it (with add_prefix_space where words are given apart), its vocabulary's size"""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(path)
    hf = RobertaTokenizerFast(tokenizer_file=path, add_prefix_space=add_prefix_space)
    return hf, tok.get_vocab_size()


def sentencepiece_unigram(d, lines, vocab_size=700):
    """XLM-R's kind: sentencepiece's Unigram over LINES (nmt_nfkc, its default
    normalization), as XLMRobertaTokenizerFast writes it, in folder D (made here): the
    tokenizer.json's path, transformers' tokenizer of it"""
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizerFast
    os.makedirs(d)
    with open(d + "/corpus.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(input=d + "/corpus.txt", model_prefix=d + "/spm",
                                   vocab_size=vocab_size, model_type="unigram",
                                   character_coverage=0.9995, minloglevel=2)
    hf = XLMRobertaTokenizerFast(vocab_file=d + "/spm.model")
    hf.save_pretrained(d + "/hf")
    return d + "/hf/tokenizer.json", hf


def specs(d, keys):
    """D/eval.json (every val row, batches of 32), train5.json (5 AdamW steps) and
    train8.json (8 steps, warm-up, linear decay, weight decay, clipping; batches of 16),
    fp32, the rows in order, over D/data/{train,val}_KEY.npy"""
    base = {"data": {p: {k: "data/%s_%s.npy" % (p, k) for k in keys} for p in ("train", "val")},
            "batch_size": 32, "precision": "fp32", "loader": {"shuffle": False}, "seed": 1}
    opt = {"type": "adamw", "lr": 1e-3, "weight_decay": 0.0}
    json.dump({"trainc": 1, "train": dict(base, epochs=1)}, open(d + "/eval.json", "w"))
    json.dump({"trainc": 1, "train": dict(base, max_steps=5, log_every=1, optimizer=opt)},
              open(d + "/train5.json", "w"))
    json.dump({"trainc": 1, "train": dict(base, batch_size=16, max_steps=8, log_every=1,
                                          optimizer=dict(opt, weight_decay=0.01), grad_clip=0.5,
                                          schedule={"type": "linear", "warmup_steps": 3,
                                                    "final_lr_frac": 0.1})},
              open(d + "/train8.json", "w"))


def train_like_specs(m, batches, loss_of, steps=8):
    """torch's AdamW on transformers' model M as train8.json asks (decay on weights of rank
    2 and more), over BATCHES in turn; each step's loss (LOSS_OF(m, batch))"""
    import torch
    m.train()
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / 3 if s < 3 else 1 - 0.9 * (s - 3) / (steps - 3))
    out = []
    for s in range(steps):
        loss = loss_of(m, batches[s % len(batches)])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        sched.step()
        out.append(loss.item())
    return out


def parity_steps(name, imp, d, model, batches, loss_of, against="torch's"):
    """IMP/train8.json's 8 steps (D/run8) against torch's AdamW on transformers' MODEL
    over BATCHES (train_like_specs, LOSS_OF(m, batch)): every loss within 1e-4"""
    import run_log
    from image_hf import check, rel, trainc
    trainc("run", imp + "/model.json", imp + "/train8.json", "--init", imp + "/init.safetensors",
           "--threads", 1, "--quiet", "--out", d + "/run8")
    ours8 = run_log.losses(d + "/run8")
    theirs8 = train_like_specs(model, batches, loss_of)
    worst = max(rel(a, b) for a, b in zip(ours8, theirs8))
    check(len(ours8) == 8 and worst <= 1e-4, "%s: 8 AdamW steps, every loss within %.1e of "
          "%s on transformers' model (first %.6f, last %.6f)" %
          (name, worst, against, ours8[0], ours8[-1]))


def exported_back(imp, d):
    """IMP's import exported as it is to D/back: the source folder's tensors and the
    export's, each a dict by name"""
    from image_hf import trainc
    from safetensors.torch import load_file
    trainc("export", "hf", imp + "/model.json", imp + "/eval.json", "--weights",
           imp + "/init.safetensors", "-o", d + "/back")
    return load_file(d + "/src/model.safetensors"), load_file(d + "/back/model.safetensors")


def predictions(imp, out):
    """trainc's --predict of IMP's import over its val rows (copied as test_*.npy, the
    target aside) into OUT: predictions.npy"""
    import numpy as np
    import shutil
    from image_hf import trainc
    for key in json.load(open(imp + "/model.json"))["model"]["inputs"]:
        if key != "y":
            shutil.copy("%s/data/val_%s.npy" % (imp, key), "%s/data/test_%s.npy" % (imp, key))
    trainc("run", imp + "/model.json", imp + "/eval.json", "--init", imp + "/init.safetensors",
           "--predict", imp + "/data/test_x.npy", "--threads", 1, "--out", out)
    return np.load(out + "/predictions.npy")


def trained_export(imp, d, *export_args):
    """IMP/train5.json's 5 steps (D/run5) exported to D/hf (EXPORT_ARGS: --tokenizer F);
    trainc's --eval loss of those weights"""
    from image_hf import eval_loss, trainc
    trainc("run", imp + "/model.json", imp + "/train5.json", "--init", imp + "/init.safetensors",
           "--threads", 1, "--quiet", "--out", d + "/run5")
    trainc("export", "hf", imp + "/model.json", imp + "/eval.json", "--weights",
           d + "/run5/model.safetensors", *export_args, "-o", d + "/hf")
    return eval_loss(imp + "/model.json", imp + "/eval.json", d + "/run5/model.safetensors",
                     d + "/eval5")


def lora_export(name, imp, d, whole, theirs_of):
    """5 steps of LoRA from IMP/train5.json (rank 4, alpha 8, the tensors WHOLE names
    trained whole, as PEFT's modules_to_save) in D/lora5, exported with the adapters merged
    to D/hf_lora: transformers' loss of that folder (THEIRS_OF(folder)) is trainc's --eval
    of the adapted weights within 1e-5, and the run moved the loss; the weights' path"""
    from safetensors.torch import load_file
    from image_hf import check, eval_loss, rel, trainc
    spec = imp + "/model.json"
    t = json.load(open(imp + "/train5.json"))
    t["train"]["lora"] = {"rank": 4, "alpha": 8, "train": whole}
    t["train"]["optimizer"]["lr"] = 1e-2
    json.dump(t, open(imp + "/lora5.json", "w"))
    trainc("run", spec, imp + "/lora5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/lora5")
    w = d + "/lora5/model.safetensors"
    n_ad = sum(k.endswith(".lora_A.weight") for k in load_file(w))
    trainc("export", "hf", spec, imp + "/lora5.json", "--weights", w, "-o", d + "/hf_lora")
    ours = eval_loss(spec, imp + "/lora5.json", w, d + "/eval_lora")
    theirs = theirs_of(d + "/hf_lora")
    before = eval_loss(spec, imp + "/lora5.json", imp + "/init.safetensors", d + "/eval_lora0")
    check(n_ad > 0 and rel(ours, theirs) <= 1e-5 and rel(ours, before) > 1e-3,
          "%s: LoRA (%d adapters) trained 5 steps (loss %.5f -> %.5f), exported merged: "
          "from_pretrained's loss %.7f (%.1e)" % (name, n_ad, before, ours, theirs,
                                                  rel(ours, theirs)))
    return w


def fake_gpu_vs_cpu(what, imp, d, bf16=True):
    """IMP's model.json and train8.json (its data in IMP/data) built for both devices, 8
    steps on the fake GPU (tests/fake_gpu/: the CUDA kernels on an emulator) against the
    CPU's: fp32 losses and gradient norms within 1e-5, and (BF16) bf16-mixed's first loss
    within 1e-3 and its last within 2e-2 of the CPU's fp32 (tests/fake_gpu.sh's rules)"""
    import subprocess
    import random_runs
    import run_log
    from image_hf import TRAINC, check, rel
    lib = os.environ.get("FAKE_GPU_LIB") or os.path.join(d, "lib")
    random_runs.fake_lib_ready(lib)
    env = random_runs.fake_env(lib, os.path.join(d, "cache"))
    runs = {}
    for prec in ("fp32", "bf16-mixed") if bf16 else ("fp32",):
        exe = os.path.join(d, "model_" + prec)
        subprocess.run([TRAINC, "build", imp + "/model.json", imp + "/train8.json", "--device",
                        "both", "--arch", "sm_90a", "--set", "precision=" + prec, "-o", exe],
                       check=True, env=env, capture_output=True)
        for dev in ("cuda", "cpu") if prec == "fp32" else ("cuda",):
            out = os.path.join(d, "%s_%s" % (prec, dev))
            subprocess.run([exe, "--device", dev, "--threads", "1", "--quiet", "--init",
                            imp + "/init.safetensors", "--out", out], check=True, env=env,
                           capture_output=True, cwd=imp)
            runs[prec, dev] = [(r["loss"], r["grad_norm"]) for r in run_log.steps(out)]
    cpu = runs["fp32", "cpu"]
    worst = max(max(rel(g[0], c[0]), rel(g[1], c[1])) for g, c in zip(runs["fp32", "cuda"], cpu))
    check(len(runs["fp32", "cuda"]) == len(cpu) == 8 and worst <= 1e-5, "%s fp32 on the fake "
          "GPU vs the CPU: 8 steps' losses and gradient norms, largest relative difference %.2g "
          "(1e-5)" % (what, worst))
    if not bf16:
        return
    b16 = runs["bf16-mixed", "cuda"]
    first, last = rel(b16[0][0], cpu[0][0]), rel(b16[-1][0], cpu[-1][0])
    check(len(b16) == 8 and first <= 1e-3 and last <= 2e-2, "and bf16-mixed on the fake GPU vs "
          "the CPU's fp32: first loss within %.1e (1e-3), last within %.1e (2e-2)" % (first, last))
