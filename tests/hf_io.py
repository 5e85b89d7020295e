"""trainc import hf and trainc export hf against Hugging Face transformers.

HF_PYTHON (the venv `make deps` makes, transformers 4.40.2 over Debian's torch) runs
this; without transformers it exits 77 (a skip). Random-weight models are made here
with save_pretrained (no hub), tiny, fp32, CPU, one thread:

- a GPT2LMHeadModel (tied head; and untied with the exact gelu), a LlamaForCausalLM
  (GQA 4/2, untied; and with linear rope scaling, factor 2, its q and k made large
  enough that positions move the loss), one with attention biases and a tied head, and a
  Qwen2ForCausalLM (biases on q, k and v alone: the spec's bias "qkv"; tied) and a
  GemmaForCausalLM (one kv head, heads wider than hidden_size / heads, GeGLU, the
  embedding scaled by sqrt(d), norms by 1 + weight, tied), two Starcoder2ForCausalLM
  (layernorms, Llama's attention and a gelu MLP with biases, a window, tied; without
  biases or window, the exact gelu, untied), a GPTBigCodeForCausalLM (StarCoder's:
  GPT-2's layers, one key/value head) and two StableLmForCausalLM (layernorms, a
  partial rope: a quarter of each head rotated, q, k and v biased, untied; half of each
  head with linear scaling, tied: its q and k rows reordered to trainc's pairs on import
  and back on export) and two GPTNeoXForCausalLM (Pythia's: a quarter of each head
  rotated, query_key_value's rows per head reordered, every bias, the attention and the
  MLP in parallel: a residual whose shortcut is the attention's; and one after the
  other, without attention biases, half of each head rotated with linear scaling), a
  PhiForCausalLM (Phi-2's: the branches in parallel off one layernorm, every linear and
  the head biased, half of each head rotated) and three FalconForCausalLM (Falcon 7B's:
  off one norm, one key/value head, tied; the new architecture: a norm per branch, two
  key/value head groups; the old one with q, k, v per head, biases and the branches one
  after the other, which export writes as StarCoder2: the same layers), an
  OlmoForCausalLM (layernorms without weight or bias) and a CohereForCausalLM (the
  branches in parallel off a layernorm with a weight alone, rope pairs of adjacent
  dimensions reordered, logit_scale) and a GPTJForCausalLM (off one layernorm, half of
  each head rotated as adjacent pairs, the head biased) are imported;
  trainc's `--eval` validation loss on the imported weights equals transformers' mean
  cross-entropy over the same windows (every non-overlapping T window of a val shard
  made with numpy: what --eval reads) within 1e-5 relative;
- trainc trains each 5 steps from the import, exports its model.safetensors, and
  transformers' from_pretrained of the folder computes the loss trainc's --eval gives
  for those weights, within 1e-5;
- a Llama saved in bf16 and sharded (a model.safetensors.index.json) imports to the
  same loss as transformers' fp32 load of it; a MistralForCausalLM with a sliding
  window shorter than T imports to its loss as transformers 4.42 and later compute it
  (a query sees sliding_window positions, itself included: SPEC's window; 4.40 computes
  that from sliding_window - 1);
- import then export without training gives back every tensor of the source folder,
  bit for bit, under its name (Gemma's norm weights as (1 + w) - 1 in fp32: trainc
  holds 1 + w);
- a Qwen3 folder (transformers 4.40 has no Qwen3: config.json written here, the Llama's
  tensors plus q_norm and k_norm), a Qwen3-MoE folder (qwen3_moe_case), one whose head_dim is not hidden_size / heads (as
  Qwen3-0.6B's: its projections made here), a Mistral whose head_dim is not
  hidden_size / heads either (Mistral Nemo's) and a Llama with Llama 3's rope_scaling
  import to the loss tests/llama_torch.py's SPEC reference computes from the folder's
  tensors mapped here by name (the spec's qk_norm, head_dim and rope scaling as
  config.json says), and export back to the same tensors and head_dim (with --newer,
  transformers' LlamaForCausalLM and MistralForCausalLM compute the Llama's and the
  Mistral's loss too);
- a config.json written whole (to_dict: every output switch and generation setting,
  GPT-2's n_special) imports as the one save_pretrained writes;
- a Phi-3 folder (transformers 4.40 has no Phi-3: the Llama's tensors fused into
  qkv_proj and gate_up_proj, a Phi-3 config.json) imports to the Llama's layers and
  tensors bit for bit; with longrope's rope_scaling (Phi-3's 128k models: the short
  factors and the long ones) to the SPEC reference's loss on its tensors, and exports
  back as Phi-3;
- Gemma's config as published (hidden_act "gelu" alone) imports to transformers'
  gelu_pytorch_tanh and its loss; a Gemma rope_scaling is refused;
- SmolLM3 folders (transformers 4.40 has no SmolLM3: the Llama's tensors) with
  no_rope_layer_interval and with the no_rope_layers list import to interleave every 2
  without rope and the SPEC reference's loss, and export back to their tensors; a Gemma
  3 text folder (config.json as transformers 4.50 writes it, random tensors) imports
  to the loss of a Gemma 3 forward written here from transformers' modeling code, and
  so does one shaped as the 4B (linear rope scaling on the global layers), whose
  multimodal checkpoint (Gemma3ForConditionalGeneration, a sparse text_config, a
  vision tower) imports to the same layers and tensors;
- config.json with rope_scaling type "yarn", with model_type "t5", a Qwen2 with
  use_sliding_window, is_encoder_decoder, pruned heads or a size past 2^40, and a spec
  with a dropout layer for export: exit 1 naming the key or layer,
  nothing written; GPT-2's tensors without the "transformer." prefix (the original
  checkpoints' names) import alike; export's --tokenizer copies the file;
- export --tokenizer with a GPT-2-like and a Llama-3-like tokenizer.json (made here with
  `tokenizers`) writes the bos/eos ids transformers' configs hold (<|endoftext|> both;
  <|begin_of_text|>, <|end_of_text|>): from_pretrained's config and generation config
  hold them, GPT-2's AutoTokenizer agrees; without --tokenizer there are none; a
  tokenizer whose special ids are past the model's vocabulary is refused.

With --newer (HF_NEW_PYTHON: transformers 4.48.3, which runs on Debian's torch
1.13), the same checks run in build/tests/hf_io_newer and transformers'
own classes load what 4.40 lacks: the Gemma 2 and Granite folders and their exports
compute trainc's --eval within 1e-5 (Gemma2ForCausalLM, GraniteForCausalLM; Gemma 2's
default caps and null caps too), and so do the Phi-3 folders with longrope and their
exports and the Phi-3 folder without a window (Phi3ForCausalLM; its eager attention ignores a
window before 4.50); a NemotronForCausalLM (layernorms by 1 + weight, half of each head
rotated, head_dim, relu2, every bias) and a Falcon 2-shaped FalconForCausalLM (the new
architecture off one norm, num_ln_in_parallel_attn 1) round-trip as the 4.40 models do;
an Olmo2ForCausalLM (norms after the branches alone, q and k norms over all heads)
a GlmForCausalLM (a partial rope on adjacent pairs, q, k and v biased) and a
Cohere2ForCausalLM (windows, its global layers without window and rope) round-trip too.

    $HF_PYTHON tests/hf_io.py
    $HF_NEW_PYTHON tests/hf_io.py --newer
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt

try:
    import transformers
    from transformers import (AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel,
                              LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM, GemmaConfig, GemmaForCausalLM,
                              Starcoder2Config, Starcoder2ForCausalLM, GPTBigCodeConfig,
                              GPTBigCodeForCausalLM, StableLmConfig, StableLmForCausalLM,
                              GPTNeoXConfig, GPTNeoXForCausalLM, PhiConfig, PhiForCausalLM,
                              FalconConfig, FalconForCausalLM, OlmoConfig, OlmoForCausalLM,
                              OPTConfig, OPTForCausalLM, GPTNeoConfig, GPTNeoForCausalLM,
                              CohereConfig, CohereForCausalLM, GPTJConfig, GPTJForCausalLM,
                              MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig,
                              Qwen2MoeForCausalLM)
except ImportError:
    print("skip hf_io: transformers is not importable from %s (make deps makes a venv with "
          "it; HF_PYTHON names its python)" % sys.executable)
    sys.exit(77)

NEWER = "--newer" in sys.argv[1:]
if NEWER:
    try:
        from transformers import (Gemma2ForCausalLM, GraniteForCausalLM, Phi3ForCausalLM,
                                  NemotronConfig, NemotronForCausalLM)
    except ImportError:
        raise SystemExit("hf_io --newer: transformers %s has no Gemma 2 or Granite: 4.48 or "
                         "later needed (make deps installs 4.48.3 as HF_NEW_PYTHON)"
                         % transformers.__version__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "hf_io_newer" if NEWER else "hf_io")
V, T, NWIN = 256, 32, 12
torch.set_num_threads(1)
ok = True


def check(cond, what):
    global ok
    ok &= bool(cond)
    print("%s %s" % ("ok  " if cond else "FAIL", what))


def shard(path, tokens):
    """An llm.c uint16 token shard."""
    hdr = np.zeros(256, dtype="<i4")
    hdr[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


# transformers 4.42 on let a Mistral query see sliding_window positions, itself included
# (SPEC's window, what the import reads); 4.40 and 4.41 let it see that many before
# itself, so here they compute 4.42's loss from sliding_window - 1. StarCoder2's alike,
# but 4.42 to 4.49's eager attention ignores its window (4.50 applies it).
VERSION = tuple(int(x) for x in transformers.__version__.split(".")[:2])
SHIFT_WINDOW = VERSION < (4, 42)
WINDOWED = (MistralForCausalLM, MixtralForCausalLM, Starcoder2ForCausalLM)


def windows(tokens):
    """The windows at 0, T, 2T, ... of tokens: inputs x and targets y [n, T] (what
    --eval reads of a shard)."""
    n = (len(tokens) - 1) // T
    x = torch.tensor([tokens[w * T:w * T + T] for w in range(n)], dtype=torch.int64)
    y = torch.tensor([tokens[w * T + 1:w * T + T + 1] for w in range(n)], dtype=torch.int64)
    return x, y


def hf_loss(m, tokens):
    """Mean cross-entropy over every target of the windows at 0, T, 2T, ..., as
    transformers 4.42 and later compute it; a mixture of experts with its load-balancing
    loss (output_router_logits) adds it as its loss does, batch by batch of 4 windows (a
    batch's counts and means, as --eval's batches of 4)."""
    x, y = windows(tokens)
    if getattr(m.config, "output_router_logits", False):
        with torch.no_grad():
            outs = [m(input_ids=x[b:b + 4], use_cache=False) for b in range(0, len(x), 4)]
        return sum(F.cross_entropy(o.logits.double().reshape(-1, o.logits.shape[-1]),
                                   y[b * 4:b * 4 + 4].reshape(-1)).item() +
                   m.config.router_aux_loss_coef * o.aux_loss.item()
                   for b, o in enumerate(outs)) / len(outs)
    W = m.config.sliding_window if isinstance(m, WINDOWED) else None
    if W and SHIFT_WINDOW:
        m.config.sliding_window = W - 1
    with torch.no_grad():   # no cache: Gemma 2's and Cohere 2's need torch 2's dynamo
        logits = m(input_ids=x, use_cache=False).logits.double()
    if W:
        m.config.sliding_window = W
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


def trainc(*args, expect=0):
    r = subprocess.run([TRAINC] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != expect:
        print(r.stdout + r.stderr)
        raise SystemExit("trainc %s: exit %d, expected %d" % (args[0], r.returncode, expect))
    return r


def train_spec(path, steps):
    tr = {"data": {"train": {"tokens": "../train_*.bin"}, "val": {"tokens": "../val_*.bin"}},
          "batch_size": 4, "max_steps": steps, "precision": "fp32",
          "optimizer": {"type": "adamw", "lr": 1e-3}, "loader": {"shuffle": False},
          "log_every": 1, "seed": 1}
    json.dump({"trainc": 1, "train": tr}, open(path, "w"))


def trainc_eval(d, weights):
    r = trainc("run", d + "/model.json", d + "/eval.json", "--init", weights, "--eval",
               "--threads", 1, "--out", d + "/eval_run")
    return json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["val_loss"]


def rel(a, b):
    return abs(a - b) / abs(b)


def transformers_agree(name, folders, ours, val):
    """--newer: each folder, loaded by transformers' own class for it, computes ours."""
    if not NEWER:
        return
    for d in folders:
        m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        m.eval()
        m.config.use_cache = False   # Gemma 2's cache needs torch 2's dynamo
        theirs = hf_loss(m, val)
        check(rel(ours, theirs) <= 1e-5, "%s in transformers %s: %s from %s, loss %.7f, trainc "
              "--eval %.7f (%.1e)" % (name, transformers.__version__, type(m).__name__,
                                      os.path.relpath(d, OUT), theirs, ours, rel(ours, theirs)))


def roundtrip(name, m, src, val, exports_as=None):
    """Import SRC, eval against m; train 5 steps, export, eval against the export (as
    m's class, or EXPORTS_AS's: the same model in another family's names)."""
    if isinstance(m, Starcoder2ForCausalLM) and m.config.sliding_window and \
            (4, 42) <= VERSION < (4, 50):
        print("     %s: left to transformers 4.40 (parity/hf_io): %s's eager StarCoder2 "
              "ignores sliding_window" % (name, transformers.__version__))
        return
    d = os.path.join(OUT, name)
    trainc("import", "hf", src, "-o", d, "--seq-len", T)
    train_spec(d + "/eval.json", 1)
    train_spec(d + "/train5.json", 5)
    ours, theirs = trainc_eval(d, d + "/init.safetensors"), hf_loss(m, val)
    check(rel(ours, theirs) <= 1e-5, "%s imported: trainc --eval %.7f, transformers %.7f (%.1e)"
          % (name, ours, theirs, rel(ours, theirs)))
    trainc("run", d + "/model.json", d + "/train5.json", "--init", d + "/init.safetensors",
           "--threads", 1, "--quiet", "--out", d + "/run")
    trainc("export", "hf", d + "/model.json", d + "/train5.json", "--weights",
           d + "/run/model.safetensors", "-o", d + "/export")
    trainc("export", "hf", d + "/model.json", d + "/eval.json", "--weights",
           d + "/init.safetensors", "-o", d + "/same")
    offset = type(m).__name__ in ("GemmaForCausalLM", "NemotronForCausalLM")   # 1 + weight
    if not exports_as:
        check(same_tensors(src, d + "/same/model.safetensors", offset=offset),
              "%s imported and exported untrained: the source's tensors bit for bit" % name)
    back = AutoModelForCausalLM.from_pretrained(d + "/export", attn_implementation="eager")
    back.eval()
    ours, theirs = trainc_eval(d, d + "/run/model.safetensors"), hf_loss(back, val)
    check(rel(ours, theirs) <= 1e-5 and type(back).__name__ == (exports_as or type(m).__name__),
          "%s trained 5 steps, exported: %s, trainc --eval %.7f, transformers %.7f (%.1e)"
          % (name, type(back).__name__, ours, theirs, rel(ours, theirs)))
    return d


def source_tensors(src):
    """A folder's tensors as fp32, over its shards; a tied GPT-2 head left out."""
    files = [f for f in os.listdir(src) if f.endswith(".safetensors")]
    sd = {}
    for f in files:
        sd.update({n: t.float() for n, t in load_file(os.path.join(src, f)).items()})
    return sd


def same_tensors(src, path, offset=False):
    """offset (Gemma's, Nemotron's norms): a norm's weight w comes back as (1 + w) - 1,
    rounded as fp32 rounds."""
    a, b = source_tensors(src), load_file(path)
    if offset:
        a = {n: (t + 1) - 1 if "norm" in n and n.endswith("weight") else t for n, t in a.items()}
    if set(a) != set(b):
        print("  names differ: %s / %s" % (sorted(set(a) - set(b)), sorted(set(b) - set(a))))
        return False
    bad = [n for n in a if not torch.equal(a[n], b[n])]
    print("  %d tensors%s" % (len(a), ", differ: %s" % bad if bad else ""))
    return not bad


def reference_case(name, src, edit, extra, val, interleave=None):
    """A hand-made folder: src's Llama tensors plus extra, config.json edited; trainc's
    --eval of its import against the SPEC reference on the tensors mapped by name (the
    attention's interleave as given)."""
    d = os.path.join(OUT, "hf_" + name)
    os.makedirs(d)
    sd = source_tensors(src)
    sd.update(extra)
    save_file(sd, d + "/model.safetensors", metadata={"format": "pt"})
    cfg = json.load(open(src + "/config.json"))
    cfg.update(edit)
    json.dump(cfg, open(d + "/config.json", "w"))
    o = os.path.join(OUT, name)
    trainc("import", "hf", d, "-o", o, "--seq-len", T)
    train_spec(o + "/eval.json", 1)
    model = json.load(open(o + "/model.json"))["model"]
    att = model["layers"][1]["body"][0]["body"][1]
    w = {"embed.weight": sd["model.embed_tokens.weight"], "norm.weight": sd["model.norm.weight"],
         "lm_head.weight": sd["lm_head.weight"]}
    for i in range(cfg["num_hidden_layers"]):
        p, q = "model.layers.%d." % i, "layers.%d." % i
        w[q + "attn_norm.weight"] = sd[p + "input_layernorm.weight"]
        w[q + "attn.qkv.weight"] = torch.cat([sd[p + "self_attn.%s_proj.weight" % c] for c in "qkv"])
        w[q + "attn.proj.weight"] = sd[p + "self_attn.o_proj.weight"]
        if att.get("qk_norm"):
            w[q + "attn.q_norm.weight"] = sd[p + "self_attn.q_norm.weight"]
            w[q + "attn.k_norm.weight"] = sd[p + "self_attn.k_norm.weight"]
        w[q + "mlp_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        w[q + "gate_up.weight"] = torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])
        w[q + "down.weight"] = sd[p + "mlp.down_proj.weight"]
    P = lt.Params()
    P.t = w
    x, y = windows(val)
    with torch.no_grad():
        ref = F.cross_entropy(lt.logits(model, P, x).double().reshape(-1, V), y.reshape(-1)).item()
    ours = trainc_eval(o, o + "/init.safetensors")
    want_rope = {"theta": cfg["rope_theta"]}
    if cfg.get("rope_scaling"):
        want_rope["scaling"] = cfg["rope_scaling"]
    hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    spec_ok = att["rope"] == want_rope and bool(att.get("qk_norm")) == (cfg["model_type"] == "qwen3") \
        and att.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]) == hd \
        and att.get("interleave") == interleave
    check(spec_ok and rel(ours, ref) <= 1e-5, "%s imported: attention %s; trainc --eval %.7f, "
          "reference %.7f (%.1e)" % (name, json.dumps(att), ours, ref, rel(ours, ref)))
    trainc("export", "hf", o + "/model.json", o + "/eval.json", "--weights",
           o + "/init.safetensors", "-o", o + "/same")
    back = json.load(open(o + "/same/config.json"))
    # a Mistral without a window is Llama's model, and exported as Llama
    family = "llama" if cfg["model_type"] == "mistral" and not att.get("window") else cfg["model_type"]
    check(same_tensors(d, o + "/same/model.safetensors") and back["model_type"] == family
          and back.get("head_dim", hd) == hd,
          "%s imported and exported: %s, heads %d wide, its tensors bit for bit" % (
              name, back["model_type"], hd))
    if cfg["model_type"] in ("llama", "mistral"):   # transformers 4.45's classes (--newer)
        transformers_agree(name, [d, o + "/same"], ours, val)


def positions_count(m):
    """q and k made large enough that positions (the rope) move the loss."""
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "q_proj" in n or "k_proj" in n:
                p.mul_(30)


def experts_count(m):
    """A mixture of experts' router and experts made large enough that its choices and
    weights move the loss (at their init the MLP barely does), and a shared expert's
    gate too."""
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight",
                           "shared_expert_gate.weight", "router.layer.weight")):
                p.mul_(30)
            elif ".experts." in n or ".shared_expert." in n or "_linear." in n:
                p.mul_(8)


def off_defaults(m):
    """Norm weights and biases moved off 1 and 0, so that each one counts."""
    m.eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n or "ln" in n or n.endswith(".bias"):
                p.add_(0.1 * torch.randn(p.shape))


def stablelm_models(kw):
    """StableLM 2's layout: layernorms, q, k and v biased, a quarter of each head rotated
    (transformers' partial rope), a gated MLP, untied; and without biases, half of each
    head rotated with linear scaling, tied. From a generator of their own: the other
    models' weights stay as they were."""
    sl = {k: v for k, v in kw.items() if k not in ("rms_norm_eps",)}
    with torch.random.fork_rng():
        torch.manual_seed(5)
        quarter = StableLmForCausalLM(StableLmConfig(use_qkv_bias=True, partial_rotary_factor=0.25,
                                                     layer_norm_eps=1e-6, **sl))
        sl.update(tie_word_embeddings=True, rope_scaling={"type": "linear", "factor": 2.0})
        half = StableLmForCausalLM(StableLmConfig(partial_rotary_factor=0.5, **sl))
        for m in (quarter, half):
            positions_count(m)
            off_defaults(m)
    return quarter, half


def newer_case(name, seed, cls, cfg, val, bad, prep=None):
    """--newer: a model of class cls with the small sizes and config cfg (its own
    generator: the other models' weights stay as they were; q and k large, norms and
    biases off their defaults; then prep(m)) round-trips as roundtrip does; the bad
    config edits are refused."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        m = cls(type(cfg)(**dict(cfg.to_dict(), vocab_size=V, hidden_size=64, intermediate_size=96,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=64, attn_implementation="eager")))
        positions_count(m)
        off_defaults(m)
        if prep:
            prep(m)
    m.save_pretrained(OUT + "/hf_" + name, safe_serialization=True)
    roundtrip(name, m, OUT + "/hf_" + name, val)
    if bad:
        bad_configs(OUT + "/hf_" + name, bad)


def olmo2_case(val):
    """--newer: an Olmo2ForCausalLM (transformers 4.47 on: a norm after each branch and
    none before it, q_norm and k_norm over all of q's and k's heads, GQA, rms_norm_eps
    1e-5) round-trips as roundtrip does; a head_dim apart from hidden_size / heads is
    refused."""
    if not NEWER:
        return
    from transformers import Olmo2Config, Olmo2ForCausalLM
    newer_case("olmo2", 7, Olmo2ForCausalLM, Olmo2Config(rope_theta=500000.0, rms_norm_eps=1e-5), val,
               [("olmo2 head_dim", {"head_dim": 8}, ["head_dim", "OLMo 2"])])


def glm_case(val):
    """--newer: a GlmForCausalLM (GLM-4-9B's layout, transformers 4.46 on: q, k and v
    biased, o not, a partial rope of half of each head on adjacent pairs, the MLP's gate
    and up fused, GQA) round-trips as roundtrip does; rope_scaling and a head_dim apart
    from hidden_size / heads are refused."""
    if not NEWER:
        return
    from transformers import GlmConfig, GlmForCausalLM
    newer_case("glm", 8, GlmForCausalLM, GlmConfig(head_dim=16, partial_rotary_factor=0.5,
                                                   rms_norm_eps=1e-5, pad_token_id=None), val,
               [("glm head_dim", {"head_dim": 8}, ["head_dim", "hidden_size"]),
                ("glm rope_scaling", {"rope_scaling": {"type": "linear", "factor": 2.0}},
                 ["rope_scaling", "GLM"])])


def cohere2_case(val):
    """--newer: a Cohere2ForCausalLM (Command R7B's layout, transformers 4.48 on: Cohere's
    layers with windows of 8, every second layer global, without window and rope)
    round-trips as roundtrip does; layer_types that disagree with sliding_window_pattern
    are refused."""
    if not NEWER:
        return
    from transformers import Cohere2Config, Cohere2ForCausalLM
    newer_case("cohere2", 12, Cohere2ForCausalLM,
               Cohere2Config(sliding_window=8, sliding_window_pattern=2, logit_scale=0.25), val,
               [("cohere2 layer_types apart", {"layer_types": ["sliding_attention"] * 2},
                 ["layer_types", "sliding_window_pattern"])])


def qwen3_moe_case(val):
    """A Qwen3-MoE folder (transformers 4.40 and 4.48 have none: config.json written here,
    the Mixtral's tensors under Llama's MLP names, q_norm and k_norm per head, head_dim 24
    over 64 / 4 with the projections made for it, the experts' weights as the router gives
    them) imports to the loss of tests/llama_torch.py's SPEC reference on the import's
    tensors and exports back to the folder's tensors and config; dense layers among the
    mixtures (mlp_only_layers, decoder_sparse_step) are refused."""
    d, hd = os.path.join(OUT, "hf_qwen3_moe"), 24
    os.makedirs(d)
    g = torch.Generator().manual_seed(21)
    sd = {}
    for n, t in source_tensors(OUT + "/hf_mixtral").items():
        n = n.replace("block_sparse_moe.", "mlp.")
        for a, b in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            n = n.replace("." + a + ".", "." + b + ".")
        sd[n] = t
    for i in range(2):
        p = "model.layers.%d.self_attn." % i
        for c, shape in (("q", (4 * hd, 64)), ("k", (2 * hd, 64)), ("v", (2 * hd, 64)), ("o", (64, 4 * hd))):
            sd[p + c + "_proj.weight"] = 0.3 * torch.randn(*shape, generator=g)
        for c in "qk":
            sd[p + c + "_norm.weight"] = 1 + 0.1 * torch.randn(hd, generator=g)
    save_file(sd, d + "/model.safetensors", metadata={"format": "pt"})
    cfg = {k: v for k, v in json.load(open(OUT + "/hf_mixtral/config.json")).items()
           if k not in ("num_local_experts", "sliding_window", "router_jitter_noise")}
    cfg.update({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
                "moe_intermediate_size": 48, "intermediate_size": 96, "norm_topk_prob": False,
                "head_dim": hd, "rms_norm_eps": 1e-6, "use_sliding_window": False,
                "sliding_window": None, "max_window_layers": 2, "decoder_sparse_step": 1,
                "mlp_only_layers": [], "attention_bias": False})
    json.dump(cfg, open(d + "/config.json", "w"))
    o = os.path.join(OUT, "qwen3_moe")
    trainc("import", "hf", d, "-o", o, "--seq-len", T)
    train_spec(o + "/eval.json", 1)
    model = json.load(open(o + "/model.json"))["model"]
    P = lt.Params()
    P.t = {n: t.float() for n, t in load_file(o + "/init.safetensors").items()}
    x, y = windows(val)
    with torch.no_grad():
        ref = F.cross_entropy(lt.logits(model, P, x).double().reshape(-1, V), y.reshape(-1)).item()
    ours = trainc_eval(o, o + "/init.safetensors")
    blk = model["layers"][1]["body"]
    att, moe = blk[0]["body"][1], blk[1]["body"][1]
    spec_ok = att.get("qk_norm") is True and att.get("head_dim") == hd and moe == {
        "op": "moe", "name": "moe", "experts": 4, "top_k": 2, "hidden": 48, "norm_topk": False}
    check(spec_ok and rel(ours, ref) <= 1e-5, "qwen3_moe imported: %s; trainc --eval %.7f, "
          "reference %.7f (%.1e)" % (json.dumps(moe), ours, ref, rel(ours, ref)))
    trainc("export", "hf", o + "/model.json", o + "/eval.json", "--weights",
           o + "/init.safetensors", "-o", o + "/same")
    back = json.load(open(o + "/same/config.json"))
    check(same_tensors(d, o + "/same/model.safetensors") and back["model_type"] == "qwen3_moe" and
          back["head_dim"] == hd and back["moe_intermediate_size"] == 48 and not back["norm_topk_prob"],
          "qwen3_moe imported and exported: its tensors and sizes back")
    bad_configs(d, [("qwen3_moe dense layers", {"mlp_only_layers": [1]}, ["mlp_only_layers"]),
                    ("qwen3_moe sparse step", {"decoder_sparse_step": 2}, ["decoder_sparse_step"])])


def olmoe_case(val):
    """--newer: an OlmoeForCausalLM (transformers 4.45 on: Llama's layers with q and k
    norms over all heads, a mixture of 4 experts, each token's top 2, their weights the
    router's probabilities as they are) round-trips as roundtrip does, and so does one
    whose weights are renormalized (norm_topk_prob) and attention biased; clip_qkv, the
    router jitter are refused. A GraniteMoeForCausalLM (Granite's factors, the experts
    stacked) and a Qwen2MoeForCausalLM (a shared expert) as well."""
    if not NEWER:
        return
    from transformers import OlmoeConfig, OlmoeForCausalLM
    bad = [("olmoe clip_qkv", {"clip_qkv": 8.0}, ["clip_qkv"]),
           ("olmoe router jitter", {"router_jitter_noise": 0.1}, ["router_jitter_noise"])]
    newer_case("olmoe", 16, OlmoeForCausalLM, OlmoeConfig(num_experts=4, num_experts_per_tok=2,
                                                          rms_norm_eps=1e-5), val, bad,
               prep=experts_count)
    newer_case("olmoe_normed_bias", 17, OlmoeForCausalLM,
               OlmoeConfig(num_experts=4, num_experts_per_tok=3, norm_topk_prob=True,
                           attention_bias=True), val, [], prep=experts_count)
    # Granite-MoE: Granite's four factors (here none 1), its experts stacked already
    from transformers import GraniteMoeConfig, GraniteMoeForCausalLM
    newer_case("granitemoe", 20, GraniteMoeForCausalLM,
               GraniteMoeConfig(num_local_experts=4, num_experts_per_tok=2, embedding_multiplier=3.0,
                                attention_multiplier=0.4, residual_multiplier=0.22,
                                logits_scaling=3.0), val,
               [("granitemoe top_k past the experts", {"num_experts_per_tok": 5},
                 ["num_experts_per_tok", "4"])], prep=experts_count)
    # Qwen2-MoE as transformers 4.48 saves it (mlp_only_layers, rope_scaling among its keys)
    newer_case("qwen2_moe_newer", 18, Qwen2MoeForCausalLM,
               Qwen2MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                              shared_expert_intermediate_size=40), val, [], prep=experts_count)


def yarn_cases(val):
    """--newer: a LlamaForCausalLM and a Qwen2ForCausalLM with yarn rope scaling
    (transformers' _compute_yarn_parameters: frequencies ramped between the original
    ones and those over the factor, cos and sin times the attention factor; the Qwen2
    with beta_fast, beta_slow and attention_factor given) round-trip as roundtrip does."""
    if not NEWER:
        return
    newer_case("llama_yarn", 13, LlamaForCausalLM, LlamaConfig(
        tie_word_embeddings=False, rope_scaling={"rope_type": "yarn", "factor": 4.0}), val, [])
    newer_case("qwen2_yarn", 14, Qwen2ForCausalLM, Qwen2Config(rope_scaling={
        "type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64, "beta_fast": 16.0,
        "beta_slow": 2.0, "attention_factor": 1.5}), val, [])


def nemotron_case(val):
    """--newer: a NemotronForCausalLM (Minitron's layout: layernorms by 1 + weight, half of
    each head rotated, heads wider than hidden_size / heads, a relu2 MLP; here with every
    bias) round-trips as roundtrip does."""
    if not NEWER:
        return
    from transformers.models.nemotron import modeling_nemotron as mn

    def ln1p_init(self, shape, eps=1e-5, elementwise_affine=True, bias=True, device=None,
                  dtype=None):   # torch 1.13's LayerNorm has no bias argument (always biased)
        torch.nn.LayerNorm.__init__(self, shape, eps, elementwise_affine, device=device, dtype=dtype)
    mn.NemotronLayerNorm1P.__init__ = ln1p_init
    with torch.random.fork_rng():
        torch.manual_seed(6)
        m = NemotronForCausalLM(NemotronConfig(
            vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=64,
            partial_rotary_factor=0.5, attention_bias=True, mlp_bias=True, norm_eps=1e-5,
            attn_implementation="eager"))
        positions_count(m)
        off_defaults(m)
    m.save_pretrained(OUT + "/hf_nemotron", safe_serialization=True)
    roundtrip("nemotron", m, OUT + "/hf_nemotron", val)
    bad_configs(OUT + "/hf_nemotron", [
        ("nemotron hidden_act gelu", {"hidden_act": "gelu"}, ["hidden_act", "relu2"]),
        ("nemotron rope_scaling", {"rope_scaling": {"type": "linear", "factor": 2.0}},
         ["rope_scaling", "Nemotron"])])


def neox_models():
    """GPT-NeoX's (Pythia's): layernorms, a quarter of each head rotated, one
    query_key_value holding each head's q, k and v rows together, a gelu MLP, every bias,
    untied; the attention and the MLP in parallel (Pythia's), and one after the other
    without attention biases and with linear rope scaling. q and k made large enough
    that positions move the loss; from a generator of their own."""
    kw = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=96, max_position_embeddings=64, rotary_pct=0.25,
              attn_implementation="eager")
    with torch.random.fork_rng():
        torch.manual_seed(7)
        par = GPTNeoXForCausalLM(GPTNeoXConfig(**kw))
        seq = GPTNeoXForCausalLM(GPTNeoXConfig(use_parallel_residual=False, attention_bias=False,
                                               rope_scaling={"type": "linear", "factor": 2.0},
                                               rotary_pct=0.5, **{k: v for k, v in kw.items()
                                                                  if k != "rotary_pct"}))
        for m in (par, seq):
            with torch.no_grad():
                for n, p in m.named_parameters():
                    if "query_key_value" in n:   # [heads, (q, k, v), hd] rows: q and k
                        p.view(4, 3, -1)[:, :2] *= 30
            off_defaults(m)
    return par, seq


def parallel_models():
    """The attention and the MLP in parallel off one layernorm: a PhiForCausalLM (Phi-2's
    layout: half of each head rotated, every linear and the head biased, gelu_new,
    untied) and a FalconForCausalLM (Falcon 7B's: one key/value head, no biases, tied);
    a Falcon of the new architecture (a norm per branch, two key/value head groups) and
    an old-style one (q, k and v rows per head, biases, the branches one after the
    other); a GPTJForCausalLM (off one norm, half of each head rotated as pairs of
    adjacent dimensions, no attention biases, the head biased); with --newer Falcon 2's
    (the new architecture off one norm:
    num_ln_in_parallel_attn 1). q and k made large enough that positions move the loss;
    from a generator of their own."""
    kw = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64, attn_implementation="eager")
    with torch.random.fork_rng():
        torch.manual_seed(8)
        ms = [PhiForCausalLM(PhiConfig(intermediate_size=96, partial_rotary_factor=0.5, **kw))]
        ms += [FalconForCausalLM(FalconConfig(**kw, **f)) for f in (
            {}, {"new_decoder_architecture": True, "num_kv_heads": 2},
            {"multi_query": False, "parallel_attn": False, "bias": True})]
        ms.append(GPTJForCausalLM(GPTJConfig(vocab_size=V, n_embd=64, n_layer=2, n_head=4,
                                             rotary_dim=8, n_positions=64,
                                             attn_implementation="eager")))
        if NEWER:
            ms.append(FalconForCausalLM(FalconConfig(**kw, new_decoder_architecture=True,
                                                     num_kv_heads=2, num_ln_in_parallel_attn=1)))
        for m in ms:
            with torch.no_grad():
                for n, p in m.named_parameters():
                    if "q_proj" in n or "k_proj" in n:
                        p.mul_(30)
                    if "query_key_value.weight" in n:   # every row but v's
                        p.mul_(30)
            off_defaults(m)
    return ms


def bare_norm_models():
    """Layernorms without bias: an OlmoForCausalLM (Llama's layers, its layernorms
    without weight or bias; GQA, attention biases, untied) and a CohereForCausalLM (the
    attention and the gated MLP in parallel off a layernorm with a weight alone, rope
    pairs of adjacent dimensions, the logits times logit_scale, tied). q and k made large
    enough that positions move the loss; from a generator of their own."""
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              attn_implementation="eager")
    with torch.random.fork_rng():
        torch.manual_seed(9)
        ms = [OlmoForCausalLM(OlmoConfig(attention_bias=True, **kw)),
              CohereForCausalLM(CohereConfig(logit_scale=0.25, **kw))]
        for m in ms:
            positions_count(m)
            off_defaults(m)
    return ms


def opt_models():
    """OPTForCausalLMs (GPT-2's layout with a relu MLP, q, k, v and out_proj apart, the
    positions two rows in): biased and tied; without biases (enable_bias false) and
    untied. The two rows before position 0's are zero, as export writes them (no input
    without padding reads them), so that the untrained round trip gives every tensor
    back bit for bit. From a generator of their own."""
    kw = dict(vocab_size=V, hidden_size=64, ffn_dim=96, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64)
    with torch.random.fork_rng():
        torch.manual_seed(10)
        ms = [OPTForCausalLM(OPTConfig(**kw)),
              OPTForCausalLM(OPTConfig(enable_bias=False, tie_word_embeddings=False, **kw))]
        for m in ms:
            off_defaults(m)
            with torch.no_grad():
                m.model.decoder.embed_positions.weight[:2] = 0
    return ms


def neo_models():
    """GPTNeoForCausalLMs (GPT-2's layout, q, k and v without biases, scores not scaled,
    windows of 8 on the local layers): global then local (GPT-Neo's own pattern: an
    interleave sets the window), and local then global (the window, an interleave
    without it), untied. From a generator of their own."""
    kw = dict(vocab_size=V, hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=64,
              window_size=8)
    with torch.random.fork_rng():
        torch.manual_seed(11)
        ms = [GPTNeoForCausalLM(GPTNeoConfig(attention_types=[[["global", "local"], 1]], **kw)),
              GPTNeoForCausalLM(GPTNeoConfig(attention_types=[[["local", "global"], 1]],
                                             tie_word_embeddings=False, **kw))]
        for m in ms:
            off_defaults(m)
    return ms


def mixtral_models():
    """MixtralForCausalLMs (4 experts 48 wide, each token's top 2, their weights
    renormalized): GQA, no window, untied; one of 8 experts, top 3, a window of 7 and a
    gelu gate, tied; one with its load-balancing loss (output_router_logits, coefficient
    0.05). From a generator of their own; the router and experts scaled up
    (experts_count)."""
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              attn_implementation="eager")
    with torch.random.fork_rng():
        torch.manual_seed(15)
        ms = [MixtralForCausalLM(MixtralConfig(num_local_experts=4, tie_word_embeddings=False, **kw)),
              MixtralForCausalLM(MixtralConfig(num_local_experts=8, num_experts_per_tok=3,
                                               sliding_window=7, hidden_act="gelu", **kw)),
              MixtralForCausalLM(MixtralConfig(num_local_experts=4, output_router_logits=True,
                                               router_aux_loss_coef=0.05, **kw))]
        for m in ms:
            positions_count(m)
            off_defaults(m)
            experts_count(m)
    return ms


def qwen2_moe_models():
    """Qwen2MoeForCausalLMs (q, k and v biased; 4 experts 48 wide, each token's top 2,
    their weights as the router gives them, and a shared expert 40 wide gated by a
    sigmoid): untied; and one of 8 experts, top 3, renormalized, with its load-balancing
    loss (coefficient 0.05), tied. From a generator of their own."""
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              moe_intermediate_size=48, shared_expert_intermediate_size=40,
              attn_implementation="eager")
    with torch.random.fork_rng():
        torch.manual_seed(19)
        ms = [Qwen2MoeForCausalLM(Qwen2MoeConfig(num_experts=4, num_experts_per_tok=2,
                                                 tie_word_embeddings=False, **kw)),
              Qwen2MoeForCausalLM(Qwen2MoeConfig(num_experts=8, num_experts_per_tok=3,
                                                 norm_topk_prob=True, output_router_logits=True,
                                                 router_aux_loss_coef=0.05,
                                                 tie_word_embeddings=True, **kw))]
        for m in ms:
            positions_count(m)
            off_defaults(m)
            experts_count(m)
    return ms


def models():
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
              attn_implementation="eager")
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4,
                                      n_positions=64, attn_implementation="eager"))
    gpt2_untied = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4,
                                             n_positions=64, activation_function="gelu",
                                             tie_word_embeddings=False,
                                             attn_implementation="eager"))
    llama = LlamaForCausalLM(LlamaConfig(**kw))
    # linear rope scaling, q and k made large enough that positions move the loss
    llama_linear = LlamaForCausalLM(LlamaConfig(rope_scaling={"type": "linear", "factor": 2.0}, **kw))
    mistral = MistralForCausalLM(MistralConfig(sliding_window=7, **kw))
    # GPTBigCode (StarCoder's): GPT-2's layers with one key/value head, tied
    bigcode = GPTBigCodeForCausalLM(GPTBigCodeConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4,
                                                     n_positions=64, attn_implementation="eager"))
    # StarCoder2: layernorms, Llama's attention with biases and a window, a gelu MLP with
    # biases, tied; and without biases (use_bias false) or window, untied
    sc = {k: v for k, v in kw.items() if k not in ("rms_norm_eps", "tie_word_embeddings")}
    starcoder2 = Starcoder2ForCausalLM(Starcoder2Config(sliding_window=7, **sc))
    starcoder2_plain = Starcoder2ForCausalLM(Starcoder2Config(use_bias=False, norm_epsilon=1e-6,
                                                              hidden_act="gelu",
                                                              tie_word_embeddings=False, **sc))
    positions_count(llama_linear)
    stablelm, stablelm_half = stablelm_models(kw)
    kw["tie_word_embeddings"] = True
    llama_bias = LlamaForCausalLM(LlamaConfig(attention_bias=True, **kw))
    qwen2 = Qwen2ForCausalLM(Qwen2Config(**kw))   # q, k, v biased, o not; tied as Qwen2.5-0.5B
    # Gemma-2B's shape in small: one kv head, heads wider than hidden_size / heads (24 over
    # 48 / 4, as its 256 over 2048 / 8), GeGLU, the embedding times sqrt(48) (a float
    # rounded: 6.92820323), tied
    kw.update(hidden_size=48, num_key_value_heads=1, head_dim=24, rms_norm_eps=1e-6,
              hidden_activation="gelu_pytorch_tanh")
    gemma = GemmaForCausalLM(GemmaConfig(**kw))
    for m in (gpt2, gpt2_untied, llama, llama_linear, mistral, llama_bias, qwen2, gemma,
              starcoder2, starcoder2_plain, bigcode):
        off_defaults(m)
    return (gpt2, gpt2_untied, llama, llama_linear, mistral, llama_bias, qwen2, gemma, starcoder2,
            starcoder2_plain, bigcode, stablelm, stablelm_half)


def refused(name, args, words, out):
    r = trainc(*args, expect=1)
    said = all(w in r.stderr for w in words)
    check(said and not os.path.exists(out), "%s: exit 1, %s" % (name, r.stderr.strip()[:150]))


def same_import(ref, out):
    """Do two imports hold the same model.json layers and init tensors, bit for bit?
    (and how many tensors)"""
    a, b = load_file(ref + "/init.safetensors"), load_file(out + "/init.safetensors")
    la, lb = (json.load(open(x + "/model.json"))["model"]["layers"] for x in (ref, out))
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a) and la == lb, len(a)


def bad_configs(src, cases=None):
    for name, edit, words in cases or [
            ("rope_scaling dynamic", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
             ["rope_scaling", "dynamic"]),
            ("rope_scaling yarn's two contexts",
             {"rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                               "original_max_position_embeddings": 32}},
             ["original_max_position_embeddings", "either"]),
            ("model_type t5", {"model_type": "t5"}, ["model_type", "t5"]),
            ("qwen2 windowed", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                "use_sliding_window": True, "sliding_window": 8},
             ["use_sliding_window", "max_window_layers"]),
            ("unknown key", {"rope_wobble": 1}, ["rope_wobble"]),
            ("encoder-decoder", {"is_encoder_decoder": True}, ["is_encoder_decoder"]),
            ("pruned heads", {"pruned_heads": {"0": [1]}}, ["pruned_heads"]),
            ("a size past 2^40", {"hidden_size": 1e300}, ["hidden_size", "2^40"])]:
        d = os.path.join(OUT, "bad")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        cfg = json.load(open(d + "/config.json"))
        cfg.update(edit)
        json.dump(cfg, open(d + "/config.json", "w"))
        refused("import " + name, ["import", "hf", d, "-o", d + "/out"], words, d + "/out")


def gemma_configs(val):
    """Gemma's config as the published checkpoints write it (hidden_act "gelu", no
    hidden_activation: transformers computes gelu_pytorch_tanh, and so does the import);
    a rope_scaling, which Gemma's modeling code would ignore, refused."""
    src, d = OUT + "/hf_gemma", OUT + "/hf_gemma_legacy"
    shutil.copytree(src, d)
    cfg = json.load(open(d + "/config.json"))
    del cfg["hidden_activation"]
    cfg["hidden_act"] = "gelu"
    json.dump(cfg, open(d + "/config.json", "w"))
    o = OUT + "/gemma_legacy"
    trainc("import", "hf", d, "-o", o, "--seq-len", T)
    train_spec(o + "/eval.json", 1)
    m = GemmaForCausalLM.from_pretrained(d, attn_implementation="eager")
    m.eval()
    mlp = json.load(open(o + "/model.json"))["model"]["layers"][2]["body"][1]["body"]
    ours, theirs = trainc_eval(o, o + "/init.safetensors"), hf_loss(m, val)
    check(mlp[2] == {"op": "glu", "act": "gelu_tanh"} and rel(ours, theirs) <= 1e-5,
          "gemma with hidden_act gelu alone: %s, trainc --eval %.7f, transformers %.7f" %
          (json.dumps(mlp[2]), ours, theirs))
    bad_configs(src, [("gemma rope_scaling", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
                       ["rope_scaling", "Gemma"])])


GEMMA3 = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": V,
          "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 24,
          "query_pre_attn_scalar": 24, "hidden_activation": "gelu_pytorch_tanh",
          "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
          "rope_local_base_freq": 10000.0, "rope_scaling": None, "sliding_window": 5,
          "sliding_window_pattern": 3, "final_logit_softcapping": None,
          "attn_logit_softcapping": None, "attention_bias": False, "attention_dropout": 0.0,
          "tie_word_embeddings": True, "cache_implementation": "hybrid", "use_cache": True,
          "initializer_range": 0.02, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
          "torch_dtype": "float32", "transformers_version": "4.50.0"}


def gemma_tensors(cfg, g):
    """Random Gemma 2 or 3 tensors under transformers' names (norm weights near 0: 1 + w;
    q_norm and k_norm Gemma 3's alone)."""
    D, hd, F_ = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    sd = {"model.embed_tokens.weight": torch.randn(V, D, generator=g) * 0.1,
          "model.norm.weight": 0.1 * torch.randn(D, generator=g)}
    shapes = {"self_attn.q_proj.weight": (H * hd, D), "self_attn.k_proj.weight": (KV * hd, D),
              "self_attn.v_proj.weight": (KV * hd, D), "self_attn.o_proj.weight": (D, H * hd),
              "mlp.gate_proj.weight": (F_, D), "mlp.up_proj.weight": (F_, D),
              "mlp.down_proj.weight": (D, F_)}
    norms = {"input_layernorm.weight": D, "post_attention_layernorm.weight": D,
             "pre_feedforward_layernorm.weight": D, "post_feedforward_layernorm.weight": D}
    if cfg["model_type"] != "gemma2":
        norms.update({"self_attn.q_norm.weight": hd, "self_attn.k_norm.weight": hd})
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        sd.update({p + n: 0.15 * torch.randn(*s, generator=g) for n, s in shapes.items()})
        sd.update({p + n: 0.1 * torch.randn(w, generator=g) for n, w in norms.items()})
    return sd


def gemma_loss(cfg, sd, tokens):
    """Gemma3ForCausalLM's loss, written here from transformers' modeling_gemma3.py (4.50):
    the embedding times sqrt(d) as a float32, RMSNorm by 1 + weight, q_norm and k_norm
    before rope, local layers ((i + 1) % sliding_window_pattern != 0) with
    rope_local_base_freq and a window of sliding_window positions (the query's own
    included), global ones with rope_theta (its frequencies divided by rope_scaling's
    factor where that is linear, as the 4B and larger have it) and no window, scores
    times query_pre_attn_scalar^-0.5, a norm after each branch, GeGLU, the head tied.
    And Gemma2ForCausalLM's, from modeling_gemma2.py (4.42): the same without q_norm and
    k_norm, the even layers local, one rope_theta, the scores soft-capped at
    attn_logit_softcapping (s / cap, tanh, * cap) before the mask, the logits at
    final_logit_softcapping."""
    D, hd, H, KV = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, W = cfg["rms_norm_eps"], cfg["sliding_window"]
    n_pat = cfg.get("sliding_window_pattern", 2)   # Gemma 2: every other layer local
    cap, final_cap = cfg.get("attn_logit_softcapping"), cfg.get("final_logit_softcapping")
    x, y = windows(tokens)
    B = x.shape[0]

    def norm(h, w):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)

    def rope(t, theta, factor=1.0):
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)) / factor
        f = torch.arange(T).float()[:, None] * inv[None, :]
        emb = torch.cat((f, f), dim=-1)
        half = torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), dim=-1)
        return t * emb.cos() + half * emb.sin()

    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    with torch.no_grad():
        h = F.embedding(x, sd["model.embed_tokens.weight"]) * torch.tensor(D ** 0.5)
        for layer in range(cfg["num_hidden_layers"]):
            w = {n[len("model.layers.%d." % layer):]: t for n, t in sd.items()
                 if n.startswith("model.layers.%d." % layer)}
            local = (layer + 1) % n_pat != 0
            theta = cfg.get("rope_local_base_freq", cfg["rope_theta"]) if local else cfg["rope_theta"]
            factor = 1.0 if local or not cfg.get("rope_scaling") else cfg["rope_scaling"]["factor"]
            a = norm(h, w["input_layernorm.weight"])
            q = F.linear(a, w["self_attn.q_proj.weight"]).view(B, T, H, hd).transpose(1, 2)
            k = F.linear(a, w["self_attn.k_proj.weight"]).view(B, T, KV, hd).transpose(1, 2)
            v = F.linear(a, w["self_attn.v_proj.weight"]).view(B, T, KV, hd).transpose(1, 2)
            if "self_attn.q_norm.weight" in w:
                q, k = norm(q, w["self_attn.q_norm.weight"]), norm(k, w["self_attn.k_norm.weight"])
            q, k = rope(q, theta, factor), rope(k, theta, factor)
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            s = torch.matmul(q, k.transpose(2, 3)) * cfg["query_pre_attn_scalar"] ** -0.5
            if cap:
                s = torch.tanh(s / cap) * cap
            seen = (j <= i) & ((j > i - W) if local else True)
            s = s.masked_fill(~seen, torch.finfo(s.dtype).min)
            o = torch.matmul(F.softmax(s, dim=-1, dtype=torch.float32), v)
            o = F.linear(o.transpose(1, 2).reshape(B, T, H * hd), w["self_attn.o_proj.weight"])
            h = h + norm(o, w["post_attention_layernorm.weight"])
            m = norm(h, w["pre_feedforward_layernorm.weight"])
            m = F.linear(F.gelu(F.linear(m, w["mlp.gate_proj.weight"]), approximate="tanh") *
                         F.linear(m, w["mlp.up_proj.weight"]), w["mlp.down_proj.weight"])
            h = h + norm(m, w["post_feedforward_layernorm.weight"])
        h = norm(h, sd["model.norm.weight"])
        logits = F.linear(h, sd["model.embed_tokens.weight"])
        if final_cap:
            logits = torch.tanh(logits / final_cap) * final_cap
        logits = logits.double()
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).item()


def gemma3_case(val):
    """A Gemma 3 text folder (transformers 4.40 has no Gemma 3: config.json as 4.50 saves
    it, random tensors): trainc's --eval of its import against gemma_loss; export and
    import again gives the same layers and tensors bit for bit; layer_types in place of
    sliding_window_pattern imports alike; a list no period describes, soft-capping and a
    query_pre_attn_scalar not above 0 are refused."""
    o, sd, att, ours, theirs = gemma_import("gemma3", GEMMA3, 3, val)
    d = OUT + "/hf_gemma3"
    check(rel(ours, theirs) <= 1e-5, "gemma3 imported: attention %s; trainc --eval %.7f, "
          "Gemma 3 from its modeling code %.7f (%.1e)" % (json.dumps(att), ours, theirs,
                                                          rel(ours, theirs)))
    back, same, n = export_again(o)
    check(same and back["model_type"] == "gemma3_text",
          "gemma3 exported (%s, sliding_window %s, layer_types %s) and imported again: the "
          "same layers and %d tensors" % (back["model_type"], back.get("sliding_window"),
                                          back.get("layer_types"), n))
    typed = dict(GEMMA3, layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                      "sliding_attention"])
    del typed["sliding_window_pattern"]
    shutil.copy(d + "/model.safetensors", OUT + "/typed.safetensors")
    d2 = OUT + "/hf_gemma3_typed"
    os.makedirs(d2)
    shutil.move(OUT + "/typed.safetensors", d2 + "/model.safetensors")
    json.dump(typed, open(d2 + "/config.json", "w"))
    trainc("import", "hf", d2, "-o", OUT + "/gemma3_typed", "--seq-len", T)
    same, n = same_import(o, OUT + "/gemma3_typed")
    check(same, "gemma3 with layer_types: the same layers and %d tensors" % n)
    # transformers 5 writes the two thetas as rope_parameters
    v5 = dict(typed, rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": GEMMA3["rope_local_base_freq"]},
        "full_attention": {"rope_type": "default", "rope_theta": GEMMA3["rope_theta"]}})
    del v5["rope_theta"], v5["rope_local_base_freq"]
    json.dump(v5, open(d2 + "/config.json", "w"))
    trainc("import", "hf", d2, "-o", OUT + "/gemma3_v5", "--seq-len", T)
    same, n = same_import(o, OUT + "/gemma3_v5")
    check(same, "gemma3 with rope_parameters: the same layers and %d tensors" % n)
    bad_configs(d, [
        ("gemma3 layer_types off the period",
         {"layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                          "sliding_attention"]}, ["layer_types", "layer 3"]),
        ("gemma3 soft-capping", {"final_logit_softcapping": 30.0}, ["final_logit_softcapping"]),
        ("gemma3 query_pre_attn_scalar", {"query_pre_attn_scalar": 0}, ["query_pre_attn_scalar"])])


def folder(d, cfg, sd):
    os.makedirs(d)
    save_file(sd, d + "/model.safetensors", metadata={"format": "pt"})
    json.dump(cfg, open(d + "/config.json", "w"))


def gemma_import(name, cfg, seed, val):
    """A Gemma 2 or 3 text folder OUT/hf_NAME (cfg, random tensors from seed) imported into
    OUT/NAME: that folder, its tensors, the third layer's attention, trainc's --eval and
    gemma_loss on val."""
    sd = gemma_tensors(cfg, torch.Generator().manual_seed(seed))
    d, o = OUT + "/hf_" + name, OUT + "/" + name
    folder(d, cfg, sd)
    trainc("import", "hf", d, "-o", o, "--seq-len", T)
    train_spec(o + "/eval.json", 1)
    att = json.load(open(o + "/model.json"))["model"]["layers"][2]["body"][0]["body"][1]
    return o, sd, att, trainc_eval(o, o + "/init.safetensors"), gemma_loss(cfg, sd, val)


def export_again(o):
    """Import O's export again: the config.json written, whether O/again has O's layers
    and tensors bit for bit, and how many tensors."""
    trainc("export", "hf", o + "/model.json", o + "/eval.json", "--weights",
           o + "/init.safetensors", "-o", o + "/export")
    back = json.load(open(o + "/export/config.json"))
    trainc("import", "hf", o + "/export", "-o", o + "/again", "--seq-len", T)
    return (back,) + same_import(o, o + "/again")


def gemma3_27b_case(val):
    """Gemma 3 27B's attention in small: query_pre_attn_scalar 40 over heads 24 wide (the
    27B's 168 over 128), the global layers' rope scaled: the import's attention has the
    scale 40^-1/2, trainc's --eval equals gemma_loss (and not what 1/sqrt(24) gives), and
    the export writes query_pre_attn_scalar 40 back."""
    cfg = dict(GEMMA3, num_attention_heads=4, num_key_value_heads=2, query_pre_attn_scalar=40,
               rope_scaling={"rope_type": "linear", "factor": 8.0})
    o, sd, att, ours, theirs = gemma_import("gemma3_27b", cfg, 6, val)
    plain = gemma_loss(dict(cfg, query_pre_attn_scalar=24), sd, val)
    check(att.get("scale") == 40 ** -0.5 and rel(ours, theirs) <= 1e-5 and rel(plain, theirs) > 1e-4,
          "gemma3 27b-shaped: attention scale %s; trainc --eval %.7f, Gemma 3 from its modeling "
          "code %.7f (%.1e; by 1/sqrt(24) %.7f)" % (att.get("scale"), ours, theirs,
                                                    rel(ours, theirs), plain))
    back, same, n = export_again(o)
    check(same and back["query_pre_attn_scalar"] == 40,
          "gemma3 27b-shaped exported (query_pre_attn_scalar %s) and imported again: the same "
          "layers and %d tensors" % (back["query_pre_attn_scalar"], n))


GEMMA2 = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": V,
          "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
          "query_pre_attn_scalar": 40, "hidden_act": "gelu_pytorch_tanh",
          "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 64,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "sliding_window": 5,
          "final_logit_softcapping": 0.5, "attn_logit_softcapping": 2.0, "attention_bias": False,
          "attention_dropout": 0.0, "cache_implementation": "hybrid", "use_cache": True,
          "initializer_range": 0.02, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
          "torch_dtype": "float32", "transformers_version": "4.42.4"}


def gemma2_case(val):
    """A Gemma 2 folder (transformers 4.40 has none: config.json as 4.42 saves it, caps
    small enough to bend this init's scores and logits): trainc's --eval of its import
    equals gemma_loss and not what it gives without either cap; export and import again
    give the same layers and tensors; Gemma2Config's default caps (the keys absent) and
    layer_types import alike; caps not above 0 are refused."""
    o, sd, att, ours, theirs = gemma_import("gemma2", GEMMA2, 7, val)
    plain = [gemma_loss(dict(GEMMA2, **{k: None}), sd, val)
             for k in ("attn_logit_softcapping", "final_logit_softcapping")]
    layers = json.load(open(o + "/model.json"))["model"]["layers"]
    check(rel(ours, theirs) <= 1e-5 and min(rel(p, theirs) for p in plain) > 1e-4,
          "gemma2 imported: attention %s, after the head %s; trainc --eval %.7f, Gemma 2 from "
          "its modeling code %.7f (%.1e; uncapped %.7f, %.7f)" % (
              json.dumps(att), [l["op"] for l in layers[-3:]], ours, theirs, rel(ours, theirs),
              *plain))
    back, same, n = export_again(o)
    transformers_agree("gemma2", [OUT + "/hf_gemma2", o + "/export"], ours, val)
    check(same and back["model_type"] == "gemma2" and back["attn_logit_softcapping"] == 2.0 and
          back["final_logit_softcapping"] == 0.5,
          "gemma2 exported (%s, caps %s and %s) and imported again: the same layers and %d "
          "tensors" % (back["model_type"], back["attn_logit_softcapping"],
                       back["final_logit_softcapping"], n))
    dflt = {k: v for k, v in GEMMA2.items() if k not in ("attn_logit_softcapping",
                                                          "final_logit_softcapping")}
    dflt["layer_types"] = ["sliding_attention", "full_attention"] * 2
    folder(OUT + "/hf_gemma2_dflt", dflt, sd)
    trainc("import", "hf", OUT + "/hf_gemma2_dflt", "-o", OUT + "/gemma2_dflt", "--seq-len", T)
    got = json.load(open(OUT + "/gemma2_dflt/model.json"))["model"]["layers"]
    att2 = got[2]["body"][0]["body"][1]
    check(att2.get("softcap") == 50 and got[-1].get("by") == 30 and
          att2["interleave"] == {"every": 2, "window": None},
          "gemma2 with the default caps and layer_types: softcap %s, the logits' %s, "
          "interleave %s" % (att2.get("softcap"), got[-1].get("by"), att2["interleave"]))
    folder(OUT + "/hf_gemma2_null", dict(GEMMA2, attn_logit_softcapping=None,
                                         final_logit_softcapping=None), sd)
    trainc("import", "hf", OUT + "/hf_gemma2_null", "-o", OUT + "/gemma2_null", "--seq-len", T)
    got = json.load(open(OUT + "/gemma2_null/model.json"))["model"]["layers"]
    check("softcap" not in got[2]["body"][0]["body"][1] and got[-1]["op"] == "linear",
          "gemma2 with null caps: no softcap, the head last (%s)" % got[-1]["op"])
    if NEWER:   # Gemma2Config's defaults and null caps, as transformers reads them
        for o2 in ("gemma2_dflt", "gemma2_null"):
            train_spec(OUT + "/" + o2 + "/eval.json", 1)
            transformers_agree(o2, [OUT + "/hf_" + o2], trainc_eval(OUT + "/" + o2, OUT + "/" +
                                                                     o2 + "/init.safetensors"), val)
    bad_configs(OUT + "/hf_gemma2", [
        ("gemma2 attn_logit_softcapping 0", {"attn_logit_softcapping": 0}, ["attn_logit_softcapping"]),
        ("gemma2 rope_scaling", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
         ["rope_scaling"])])


def granite_loss(cfg, sd, tokens):
    """GraniteForCausalLM's loss, written here from transformers' modeling_granite.py
    (4.45): Llama's layers (RMSNorm by weight, rope, GQA, SwiGLU), the embedding times
    embedding_multiplier, the scores times attention_multiplier (not 1 / sqrt(hd)), each
    branch's output times residual_multiplier before it is added, the logits divided by
    logits_scaling."""
    D, H, KV, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    hd = D // H
    x, y = windows(tokens)
    B = x.shape[0]

    def norm(h, w):
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))

    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    f = torch.arange(T).float()[:, None] * inv[None, :]
    cos, sin = torch.cat((f, f), -1).cos(), torch.cat((f, f), -1).sin()
    rope = lambda t: t * cos + torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), -1) * sin
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    with torch.no_grad():
        h = F.embedding(x, sd["model.embed_tokens.weight"]) * cfg["embedding_multiplier"]
        for layer in range(cfg["num_hidden_layers"]):
            w = {k[len("model.layers.%d." % layer):]: t for k, t in sd.items()
                 if k.startswith("model.layers.%d." % layer)}
            a = norm(h, w["input_layernorm.weight"])
            q = rope(F.linear(a, w["self_attn.q_proj.weight"]).view(B, T, H, hd).transpose(1, 2))
            k = rope(F.linear(a, w["self_attn.k_proj.weight"]).view(B, T, KV, hd).transpose(1, 2))
            v = F.linear(a, w["self_attn.v_proj.weight"]).view(B, T, KV, hd).transpose(1, 2)
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            s = torch.matmul(q, k.transpose(2, 3)) * cfg["attention_multiplier"]
            s = s.masked_fill(~causal, torch.finfo(s.dtype).min)
            o = torch.matmul(F.softmax(s, dim=-1, dtype=torch.float32), v)
            o = F.linear(o.transpose(1, 2).reshape(B, T, D), w["self_attn.o_proj.weight"])
            h = h + o * cfg["residual_multiplier"]
            m = norm(h, w["post_attention_layernorm.weight"])
            m = F.linear(F.silu(F.linear(m, w["mlp.gate_proj.weight"])) *
                         F.linear(m, w["mlp.up_proj.weight"]), w["mlp.down_proj.weight"])
            h = h + m * cfg["residual_multiplier"]
        h = norm(h, sd["model.norm.weight"])
        logits = F.linear(h, sd["lm_head.weight"]) / cfg["logits_scaling"]
    return F.cross_entropy(logits.double().reshape(-1, V), y.reshape(-1)).item()


def granite_case(val):
    """A Granite folder (transformers 4.40 has none: config.json as 4.45 saves it, the
    Llama folder's tensors, the attention's and the MLP's outputs scaled up): trainc's --eval of its import equals granite_loss, and not
    what it gives with any one factor 1; export and import again give the same layers and
    tensors; Granite's factors on another family's layers are refused."""
    src, d, o = OUT + "/hf_llama", OUT + "/hf_granite", OUT + "/granite"
    cfg = json.load(open(src + "/config.json"))
    cfg.update(model_type="granite", architectures=["GraniteForCausalLM"], embedding_multiplier=3.0,
               attention_multiplier=0.4, residual_multiplier=0.22, logits_scaling=3.0,
               mlp_bias=False, transformers_version="4.45.0")
    # q and k large enough that the scores, and so the attention's factor, move the loss,
    # the branches' outputs that the embedding's factor does, the logits that all do
    big = {"q_proj": 30, "k_proj": 30, "v_proj": 10, "o_proj": 10, "down_proj": 10, "lm_head": 30}
    sd = {k: t * next((f for p, f in big.items() if p in k), 1)
          for k, t in source_tensors(src).items()}
    folder(d, cfg, sd)
    trainc("import", "hf", d, "-o", o, "--seq-len", T)
    train_spec(o + "/eval.json", 1)
    ours, theirs = trainc_eval(o, o + "/init.safetensors"), granite_loss(cfg, sd, val)
    ones = [granite_loss(dict(cfg, **{k: 1.0}), sd, val) for k in
            ("embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling")]
    layers = json.load(open(o + "/model.json"))["model"]["layers"]
    check(rel(ours, theirs) <= 1e-5 and min(rel(x, theirs) for x in ones) > 1e-4,
          "granite imported: %s after the embedding, %s closing the branches, %s after the "
          "head, attention scale %s; trainc --eval %.7f, Granite from its modeling code %.7f "
          "(%.1e; with a factor 1: %s)" % (
              layers[1], layers[2]["body"][1]["body"][-1], layers[-1],
              layers[2]["body"][0]["body"][1].get("scale"), ours, theirs, rel(ours, theirs),
              ", ".join("%.1e" % rel(x, theirs) for x in ones)))
    back, same, n = export_again(o)
    transformers_agree("granite", [d, o + "/export"], ours, val)
    check(same and back["model_type"] == "granite" and back["logits_scaling"] == 3.0 and
          back["residual_multiplier"] == 0.22,
          "granite exported (%s: multipliers %s, %s, %s, logits_scaling %s) and imported again: "
          "the same layers and %d tensors" % (
              back["model_type"], back["embedding_multiplier"], back["attention_multiplier"],
              back["residual_multiplier"], back["logits_scaling"], n))
    bad_configs(d, [("granite embedding_multiplier 0", {"embedding_multiplier": 0},
                     ["embedding_multiplier"])])


def gemma3_4b_case(val):
    """Gemma 3 4B's shape in small (8 heads on 4, linear rope scaling on the global
    layers): its text folder imports to gemma_loss and exports back to the same layers;
    the multimodal checkpoint the 4B ships as (model_type gemma3, text_config listing only
    what differs from Gemma3TextConfig's defaults, the text model's tensors under
    language_model.model. or, as transformers 4.52 saves, model.language_model., a vision
    tower beside them) imports to the same layers and tensors, the image side left out;
    its unknown keys, an untied head and another text model_type are refused."""
    cfg = dict(GEMMA3, num_attention_heads=8, num_key_value_heads=4,
               rope_scaling={"rope_type": "linear", "factor": 8.0})
    o, sd, att, ours, theirs = gemma_import("gemma3_4b", cfg, 4, val)
    plain = gemma_loss(dict(cfg, rope_scaling=None), sd, val)
    check(rel(ours, theirs) <= 1e-5 and rel(plain, theirs) > 1e-4,
          "gemma3 4b-shaped (global rope scaled): interleave %s; trainc --eval %.7f, Gemma 3 "
          "from its modeling code %.7f (%.1e; unscaled %.7f)" % (
              json.dumps(att["interleave"]), ours, theirs, rel(ours, theirs), plain))
    back, same, n = export_again(o)
    check(same and back["rope_scaling"] == {"type": "linear", "factor": 8.0},
          "gemma3 4b-shaped exported (rope_scaling %s) and imported again: the same layers "
          "and %d tensors" % (json.dumps(back["rope_scaling"]), n))
    # the multimodal checkpoint: Gemma3Config around the text model's
    text = {k: v for k, v in cfg.items() if k not in (
        "architectures", "num_attention_heads", "num_key_value_heads", "torch_dtype",
        "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id",
        "initializer_range", "use_cache", "cache_implementation", "tie_word_embeddings")}
    mm = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
          "text_config": text, "boi_token_index": 255999, "eoi_token_index": 256000,
          "image_token_index": 262144, "mm_tokens_per_image": 256, "initializer_range": 0.02,
          "eos_token_id": [1, 106], "torch_dtype": "bfloat16", "transformers_version": "4.50.0",
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8,
                            "num_hidden_layers": 1, "patch_size": 14}}
    g = torch.Generator().manual_seed(5)
    vis = {"vision_tower.vision_model.embeddings.patch_embedding.weight": torch.randn(8, 3, 14, 14, generator=g),
           "multi_modal_projector.mm_input_projection_weight": torch.randn(8, 48, generator=g)}
    for pre, vpre in (("language_model.model.", ""), ("model.language_model.", "model.")):
        d = OUT + "/hf_gemma3_mm_" + pre.split(".")[0]
        msd = {pre + n[len("model."):]: t for n, t in sd.items()}
        msd.update({vpre + n: t for n, t in vis.items()})
        folder(d, mm, msd)
        r = trainc("import", "hf", d, "-o", d + "_out", "--seq-len", T)
        same, n = same_import(o, d + "_out")
        check(same and "image side's 2 left out" in r.stdout,
              "gemma3 multimodal (%s...): the text folder's layers and %d tensors; %s" % (
                  pre, n, r.stdout.strip()[:160]))
    d = OUT + "/hf_gemma3_mm_language_model"
    bad_configs(d, [
        ("gemma3 multimodal, an unknown key", {"audio_config": {}}, ["audio_config"]),
        ("gemma3 multimodal, untied", {"tie_word_embeddings": False}, ["tie_word_embeddings"]),
        ("gemma3 multimodal, another text model", {"text_config": dict(text, model_type="gemma2")},
         ["text_config.model_type", "gemma2"])])


def whole_configs():
    """config.json written whole (PretrainedConfig.to_dict(), as older transformers and
    some tools write it: every output switch and generation setting at its default), with
    GPT-2's relics of OpenAI GPT as gpt2-medium's file holds them: the same import."""
    for name, relics in [("gpt2", {"n_special": 0, "predict_special_tokens": True}),
                         ("llama", {})]:
        src, d = OUT + "/hf_" + name, OUT + "/whole_" + name
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        cfg = AutoConfig.from_pretrained(src).to_dict()
        cfg.update(relics)
        json.dump(cfg, open(d + "/config.json", "w"), indent=1)
        trainc("import", "hf", d, "-o", d + "/out", "--seq-len", T)
        same, n = same_import(OUT + "/" + name, d + "/out")
        check(same, "%s with a whole config.json (%d keys): the same layers and %d tensors" %
              (name, len(cfg), n))


def phi3_case(val):
    """Phi-3 (transformers 4.40 has none): the Llama's tensors with q, k, v fused into
    qkv_proj and gate, up into gate_up_proj, as Phi-3 stores them, under a Phi-3
    config.json: the same model.json layers and init tensors, bit for bit, as the
    Llama's import; its sliding_window becomes the attention's window as Mistral's."""
    src, d = OUT + "/hf_llama", OUT + "/hf_phi3"
    os.makedirs(d)
    sd = source_tensors(src)
    for i in range(2):
        a, m = "model.layers.%d.self_attn." % i, "model.layers.%d.mlp." % i
        sd[a + "qkv_proj.weight"] = torch.cat([sd.pop(a + c + "_proj.weight") for c in "qkv"])
        sd[m + "gate_up_proj.weight"] = torch.cat([sd.pop(m + c + "_proj.weight") for c in ("gate", "up")])
    save_file(sd, d + "/model.safetensors", metadata={"format": "pt"})
    cfg = json.load(open(src + "/config.json"))
    cfg.pop("attention_bias")   # Phi3Config has none: ignored if there
    cfg.update({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "embd_pdrop": 0.0,
                "resid_pdrop": 0.0, "original_max_position_embeddings": 64, "sliding_window": None,
                "pad_token_id": V - 1})   # Phi3Config's default 32000 is past V
    json.dump(cfg, open(d + "/config.json", "w"))
    o = OUT + "/phi3"
    trainc("import", "hf", d, "-o", o, "--seq-len", T)
    same, n = same_import(OUT + "/llama", o)
    check(same, "phi3 imported: the Llama's layers and %d tensors bit for bit" % n)
    train_spec(o + "/eval.json", 1)
    transformers_agree("phi3", [d], trainc_eval(o, o + "/init.safetensors"), val)
    cfg["sliding_window"] = 7
    json.dump(cfg, open(d + "/config.json", "w"))
    trainc("import", "hf", d, "-o", o + "_window", "--seq-len", T)
    att = json.load(open(o + "_window/model.json"))["model"]["layers"][1]["body"][0]["body"][1]
    check(att.get("window") == 7, "phi3 with sliding_window 7: the attention's window %s (7, "
          "as Mistral's)" % att.get("window"))
    phi3_longrope(cfg, sd, val)


def spec_loss(o, tokens):
    """The SPEC reference's loss (tests/llama_torch.py) for import O's model.json on its
    init.safetensors, over the windows hf_loss takes."""
    model = json.load(open(o + "/model.json"))["model"]
    P = lt.Params()
    P.t = dict(load_file(o + "/init.safetensors"))
    x, y = windows(tokens)
    with torch.no_grad():
        return F.cross_entropy(lt.logits(model, P, x).double().reshape(-1, V), y.reshape(-1)).item()


def phi3_longrope(cfg, sd, val):
    """Phi-3's 128k models' longrope, in small: the Phi-3 folder's tensors (q and k made
    large enough that positions move the loss) under a rope_scaling of type longrope, its
    original context past T (the short factors) and short of it (the long ones): the
    import's --eval equals the SPEC reference's loss on its tensors and not the unscaled
    rope's; export writes Phi-3 back (rope_scaling, both contexts) and imports again to
    the same layers and tensors; with --newer, transformers' Phi3ForCausalLM computes it.
    Phi-4-mini's form too: half of each head rotated (partial_rotary_factor), a factor
    per rotated pair, an attention factor (2, given) on those pairs alone (SPEC
    reference: 4.45's Phi-3 has no partial rope)."""
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    scaling = {"type": "longrope", "short_factor": [1.0 + 0.1 * j for j in range(hd // 2)],
               "long_factor": [1.0 + 3.0 * j for j in range(hd // 2)]}
    big = dict(sd)
    for k in [k for k in big if k.endswith("qkv_proj.weight")]:
        big[k] = big[k].clone()
        big[k][:(cfg["num_attention_heads"] + cfg["num_key_value_heads"]) * hd] *= 30
    half = {"type": "longrope", "short_factor": scaling["short_factor"][:hd // 4],
            "long_factor": scaling["long_factor"][:hd // 4], "attention_factor": 2.0}
    for name, orig, mx, partial in (("phi3_longrope_short", 64, 256, None),
                                    ("phi3_longrope_long", 16, 64, None),
                                    ("phi4_mini_longrope", 16, 64, 0.5)):
        d, o = OUT + "/hf_" + name, OUT + "/" + name
        extra = {"partial_rotary_factor": partial} if partial else {}
        folder(d, dict(cfg, sliding_window=None, original_max_position_embeddings=orig,
                       max_position_embeddings=mx, rope_scaling=half if partial else scaling,
                       **extra), big)
        trainc("import", "hf", d, "-o", o, "--seq-len", T)
        train_spec(o + "/eval.json", 1)
        ours, ref = trainc_eval(o, o + "/init.safetensors"), spec_loss(o, val)
        unscaled = json.load(open(o + "/model.json"))
        unscaled["model"]["layers"][1]["body"][0]["body"][1]["rope"].pop("scaling")
        json.dump(unscaled, open(o + "/unscaled.json", "w"))
        r = trainc("run", o + "/unscaled.json", o + "/eval.json", "--init", o + "/init.safetensors",
                   "--eval", "--threads", 1, "--out", o + "/unscaled_run")
        flat = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["val_loss"]
        check(rel(ours, ref) <= 1e-5 and rel(flat, ref) > 1e-4,
              "%s (original context %d, T %d): trainc --eval %.7f, SPEC reference %.7f (%.1e; "
              "unscaled rope %.7f)" % (name, orig, T, ours, ref, rel(ours, ref), flat))
        back, same, n = export_again(o)
        check(same and back["model_type"] == "phi3" and back["rope_scaling"]["type"] == "longrope"
              and back["max_position_embeddings"] == mx and back["original_max_position_embeddings"] == orig
              and back.get("partial_rotary_factor") == partial,
              "%s exported (%s, max_position_embeddings %s, original %s) and imported again: the "
              "same layers and %d tensors" % (name, back["model_type"], back["max_position_embeddings"],
                                              back.get("original_max_position_embeddings"), n))
        if not partial:   # transformers 4.45's Phi-3 has no partial rope (4.49 on)
            transformers_agree(name, [d, o + "/export"], ours, val)
    # transformers 4.40's name for it, "su": the same import
    d = OUT + "/hf_phi3_su"
    shutil.copytree(OUT + "/hf_phi3_longrope_short", d)
    su = json.load(open(d + "/config.json"))
    su["rope_scaling"]["type"] = "su"
    json.dump(su, open(d + "/config.json", "w"))
    trainc("import", "hf", d, "-o", OUT + "/phi3_su", "--seq-len", T)
    same, n = same_import(OUT + "/phi3_longrope_short", OUT + "/phi3_su")
    check(same, "phi3 with rope_scaling type su: the same layers and %d tensors" % n)
    bad_configs(d, [
        ("phi3 rope_scaling yarn", {"rope_scaling": dict(scaling, type="yarn")}, ["rope_scaling", "longrope"]),
        ("phi3 short_factor of 3", {"rope_scaling": dict(scaling, short_factor=[1.0] * 3)},
         ["rope_scaling.short_factor", "8 numbers"])])


def special_tokenizer(path, specials, bos=None):
    """A byte-level BPE tokenizer.json of V ids, specials last (GPT-2's <|endoftext|> is
    its last id; Llama 3's begin at 128000), with bos a template's BOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())[:V - len(specials)]
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens(specials)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single=bos + " $A", special_tokens=[(bos, tok.token_to_id(bos))])
    tok.save(path)
    return tok


def token_ids():
    """--tokenizer: bos_token_id and eos_token_id from its special tokens, as
    transformers' configs hold them; none without it."""
    gpt2_tok = special_tokenizer(OUT + "/gpt2_tok.json", ["<|endoftext|>"])
    llama_tok = special_tokenizer(OUT + "/llama3_tok.json", [
        "<|reserved_special_token_0|>", "<|eot_id|>", "<|begin_of_text|>", "<|end_of_text|>",
        "<|start_header_id|>", "<|end_header_id|>"], bos="<|begin_of_text|>")
    for name, tok, file, bos, eos in [
            ("gpt2", gpt2_tok, "gpt2_tok.json", "<|endoftext|>", "<|endoftext|>"),
            ("llama", llama_tok, "llama3_tok.json", "<|begin_of_text|>", "<|end_of_text|>")]:
        d = os.path.join(OUT, name)
        trainc("export", "hf", d + "/model.json", d + "/eval.json", "--weights",
               d + "/init.safetensors", "-o", d + "/ids", "--tokenizer", OUT + "/" + file)
        m = AutoModelForCausalLM.from_pretrained(d + "/ids")
        want = (tok.token_to_id(bos), tok.token_to_id(eos))
        got = [(c.bos_token_id, c.eos_token_id) for c in (m.config, m.generation_config)]
        said = ""
        if name == "gpt2":   # GPT2TokenizerFast's own bos and eos: <|endoftext|>
            t = transformers.AutoTokenizer.from_pretrained(d + "/ids")
            got.append((t.bos_token_id, t.eos_token_id))
            said = ", as %s's" % type(t).__name__
        else:                # the template's BOS
            got.append((tok.encode("hi").ids[0], want[1]))
            said = ", the BOS encode puts first"
        check(all(g == want for g in got), "%s export --tokenizer: bos/eos ids %s in config.json "
              "and the generation config%s: %s" % (name, want, said, got))
        plain = json.load(open(d + "/same/config.json"))
        check("bos_token_id" not in plain and "eos_token_id" not in plain,
              "%s export without --tokenizer: no bos/eos ids" % name)
    big = json.load(open(OUT + "/llama3_tok.json"))
    big["added_tokens"][3]["id"] = V + 1
    json.dump(big, open(OUT + "/big_tok.json", "w"))
    d = OUT + "/llama"
    refused("export with another model's tokenizer", [
        "export", "hf", d + "/model.json", d + "/eval.json", "--weights", d + "/init.safetensors",
        "-o", d + "/big", "--tokenizer", OUT + "/big_tok.json"], ["%d" % (V + 1), "vocabulary"],
        d + "/big")


def roundtrips(val):
    """Each model made here saved, imported, trained and exported (roundtrip); the Llama
    once more in bf16 over shards."""
    (gpt2, gpt2_untied, llama, llama_linear, mistral, llama_bias, qwen2, gemma, starcoder2,
     starcoder2_plain, bigcode, stablelm, stablelm_half) = models()
    neox, neox_seq = neox_models()
    phi, falcon, falcon_new, falcon_old, gptj, *falcon2 = parallel_models()
    olmo, cohere = bare_norm_models()
    opt, opt_plain = opt_models()
    neo, neo_local_first = neo_models()
    mixtral, mixtral_window, mixtral_aux = mixtral_models()
    qwen2_moe, qwen2_moe_aux = qwen2_moe_models()
    for name, m, kw in [("gpt2", gpt2, {}), ("gpt2_untied_exact_gelu", gpt2_untied, {}),
                        ("llama", llama, {}), ("llama_linear_rope", llama_linear, {}),
                        ("mistral", mistral, {}),
                        ("llama_bias_tied", llama_bias, {}), ("qwen2", qwen2, {}),
                        ("gemma", gemma, {}), ("starcoder2", starcoder2, {}),
                        ("starcoder2_plain", starcoder2_plain, {}), ("gpt_bigcode", bigcode, {}),
                        ("stablelm", stablelm, {}), ("stablelm_half_linear", stablelm_half, {}),
                        ("gpt_neox", neox, {}), ("gpt_neox_sequential", neox_seq, {}),
                        ("phi", phi, {}), ("falcon", falcon, {}), ("falcon_new", falcon_new, {}),
                        # export cannot tell it from StarCoder2: the same layers
                        ("falcon_old_sequential", falcon_old, {"as": "Starcoder2ForCausalLM"})] + \
                       [("falcon2", m, {}) for m in falcon2] + [
                        ("olmo", olmo, {}), ("cohere", cohere, {}), ("gptj", gptj, {}),
                        ("opt", opt, {}), ("opt_untied_unbiased", opt_plain, {}),
                        ("gpt_neo", neo, {}), ("gpt_neo_local_first", neo_local_first, {}),
                        ("mixtral", mixtral, {}), ("mixtral_window_top3", mixtral_window, {}),
                        ("mixtral_aux_loss", mixtral_aux, {}),
                        ("qwen2_moe", qwen2_moe, {}), ("qwen2_moe_top3_aux_tied", qwen2_moe_aux, {}),
                        ("llama_bf16_sharded", llama,
                         {"max_shard_size": "40KB", "bf16": True})]:
        src = os.path.join(OUT, "hf_" + name)
        if kw.get("bf16"):
            LlamaForCausalLM.from_pretrained(OUT + "/hf_llama", torch_dtype=torch.bfloat16) \
                .save_pretrained(src, max_shard_size=kw["max_shard_size"], safe_serialization=True)
            m = LlamaForCausalLM.from_pretrained(src, torch_dtype=torch.float32,
                                                 attn_implementation="eager")
            m.eval()
            check(os.path.exists(src + "/model.safetensors.index.json"),
                  "bf16 checkpoint saved in %d shards" % len(
                      [f for f in os.listdir(src) if f.endswith(".safetensors")]))
        else:
            m.save_pretrained(src, safe_serialization=True)
        roundtrip(name, m, src, val, kw.get("as"))


def lora_case(val, name, rslora=False):
    """train.lora on an imported model (NAME: its folders OUT/NAME and OUT/hf_NAME): the run
    starts from init.safetensors (no adapters in it: they start at B zero, said) and
    trains 5 steps. Export merges each adapter into its weight (W + B A
    alpha / rank): transformers' loss on the export equals trainc's --eval of the run's
    weights with the adapters apart, and the export without the spec's lora refuses the
    adapters, named. Then export --adapter: PEFT's PeftModel over the source folder loads
    the adapter files and computes the same loss (a fused weight's adapter as PEFT's on
    each of its parts; GPT-2's Conv1D as fan_in_fan_out; GPT-J's q and k rows in its rope
    order; with RSLORA, use_rslora's factor alpha / sqrt(rank))."""
    d, src = os.path.join(OUT, name), os.path.join(OUT, "hf_" + name)
    for f, steps in (("lora_eval.json", 1), ("lora_train.json", 5)):
        train_spec(d + "/" + f, steps)
        sp = json.load(open(d + "/" + f))
        sp["train"]["lora"] = {"rank": 4, "alpha": 8, "rslora": rslora}
        sp["train"]["optimizer"]["lr"] = 1e-2
        json.dump(sp, open(d + "/" + f, "w"))
    r = trainc("run", d + "/model.json", d + "/lora_train.json", "--init", d + "/init.safetensors",
               "--threads", 1, "--quiet", "--out", d + "/lora_run")
    said = next((l for l in r.stderr.splitlines() if "LoRA adapter tensors not in it" in l), None)
    check(said, "%s with lora from its import: the adapters start fresh, said: %s" % (name, said))
    r = trainc("run", d + "/model.json", d + "/lora_eval.json", "--init",
               d + "/lora_run/model.safetensors", "--eval", "--threads", 1, "--out", d + "/lora_eval")
    ours = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["val_loss"]
    before = trainc_eval(d, d + "/init.safetensors")
    trainc("export", "hf", d + "/model.json", d + "/lora_train.json", "--weights",
           d + "/lora_run/model.safetensors", "-o", d + "/lora_export")
    back = AutoModelForCausalLM.from_pretrained(d + "/lora_export", attn_implementation="eager")
    back.eval()
    theirs = hf_loss(back, val)
    check(rel(ours, theirs) <= 1e-5 and rel(ours, before) > 1e-6,
          "%s with lora trained 5 steps, exported merged: trainc --eval %.7f, transformers "
          "%.7f (%.1e; before training %.7f)" % (name, ours, theirs, rel(ours, theirs), before))
    r = trainc("export", "hf", d + "/model.json", d + "/train5.json", "--weights",
               d + "/lora_run/model.safetensors", "-o", d + "/lora_refused", expect=1)
    check("is a LoRA adapter" in r.stderr and not os.path.exists(d + "/lora_refused"),
          "export without the spec's lora: exit 1, %s" % r.stderr.strip())
    r = trainc("export", "hf", d + "/model.json", d + "/train5.json", "--weights",
               d + "/lora_run/model.safetensors", "-o", d + "/lora_refused", "--adapter", expect=1)
    check("export --adapter writes a lora run's adapters" in r.stderr and
          not os.path.exists(d + "/lora_refused"),
          "export --adapter without the spec's lora: exit 1, %s" % r.stderr.strip())
    trainc("export", "hf", d + "/model.json", d + "/lora_train.json", "--weights",
           d + "/lora_run/model.safetensors", "-o", d + "/lora_adapter", "--adapter")
    try:
        from peft import PeftModel
    except ImportError:
        print("skip %s's export --adapter in PEFT: peft is not importable (make deps installs it)" % name)
        return
    base = AutoModelForCausalLM.from_pretrained(src, attn_implementation="eager")
    base.eval()
    without = hf_loss(base, val)
    pm = PeftModel.from_pretrained(base, d + "/lora_adapter")
    pm.eval()
    theirs = hf_loss(pm, val)
    mods = json.load(open(d + "/lora_adapter/adapter_config.json"))["target_modules"]
    check(rel(ours, theirs) <= 1e-5 and rel(theirs, without) > 1e-6,
          "%s with lora, export --adapter: PEFT %s over the source folder (%d modules: %s, ...) "
          "%.7f, trainc --eval %.7f (%.1e; the source alone %.7f)" % (
              name, type(pm).__name__, len(mods), mods[0], theirs, ours, rel(ours, theirs), without))
    # and back: import --adapter merges the exported adapters into the source's weights
    trainc("import", "hf", src, "--adapter", d + "/lora_adapter", "-o", d + "/lora_import", "--seq-len", T)
    back = trainc_eval(d, d + "/lora_import/init.safetensors")
    check(rel(back, ours) <= 1e-5, "%s: import --adapter of that export, merged: --eval %.7f (%.1e)"
          % (name, back, rel(back, ours)))
    peft_adapter_case(d, src, name, val, without, rslora)


# PEFT's own adapters for import --adapter: every linear of the blocks (q, k and v
# apart, where trainc's fused qkv shares one A), the head where untied, the embedding
# where untied (lora_embedding_A and _B), GPT-2's Conv1D weights (c_proj square), ranks
# by module (rank_pattern)
PEFT_TARGETS = {"llama": (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                           "lm_head", "embed_tokens"], {"o_proj": 2}),
                "gpt2": (["c_attn", "c_proj", "c_fc"], {"c_fc": 3}),
                "gptj": (["q_proj", "k_proj", "v_proj", "out_proj", "fc_in", "fc_out"], {})}


def peft_adapter_case(d, src, name, val, without, rslora):
    """import --adapter with PEFT's own adapters (random A and B: init_lora_weights false)
    saved by save_pretrained: trainc's --eval of the merged import equals PeftModel's loss
    (the adapters unmerged) within 1e-5; then what a merge cannot express is refused,
    named, nothing written"""
    from peft import LoraConfig, PeftModel, get_peft_model
    torch.manual_seed(7)
    base = AutoModelForCausalLM.from_pretrained(src, attn_implementation="eager")
    targets, ranks = PEFT_TARGETS[name]
    cfg = LoraConfig(r=4, lora_alpha=16, target_modules=targets, rank_pattern=ranks,
                     init_lora_weights=False, use_rslora=rslora, fan_in_fan_out=name == "gpt2",
                     modules_to_save=["model.norm"] if name == "llama" else None)
    pm = get_peft_model(base, cfg)
    with torch.no_grad():   # adapters large enough to move the loss well past 1e-5
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.mul_(0.5)
            if "modules_to_save" in n:   # the final norm, trained whole
                p.add_(0.3 * torch.randn(p.shape))
    pm.save_pretrained(d + "/peft_adapter")
    pm.eval()
    theirs = hf_loss(pm, val)
    trainc("import", "hf", src, "--adapter", d + "/peft_adapter", "-o", d + "/peft_import", "--seq-len", T)
    ours = trainc_eval(d, d + "/peft_import/init.safetensors")
    saved = load_file(d + "/peft_adapter/adapter_model.safetensors")
    n = len([k for k in saved if "lora_" in k]) // 2
    whole = [k for k in saved if "lora_" not in k]
    check(rel(ours, theirs) <= 1e-5 and rel(theirs, without) > 1e-4,
          "%s: import --adapter of PEFT's adapters (%d modules%s; %d tensors saved whole%s): trainc --eval "
          "%.7f, PeftModel %.7f (%.1e; the source alone %.7f)" % (
              name, n, ", rslora" if rslora else "", len(whole), (": " + ", ".join(whole)) if whole else "",
              ours, theirs, rel(ours, theirs), without))
    if name == "gpt2":   # the tied embedding: merged, the head would change with it
        bad = d + "/peft_bad"
        os.makedirs(bad, exist_ok=True)
        shutil.copy(d + "/peft_adapter/adapter_config.json", bad)
        D = base.config.n_embd
        save_file({"base_model.model.transformer.wte.lora_embedding_A": torch.ones(4, V),
                   "base_model.model.transformer.wte.lora_embedding_B": torch.ones(D, 4)},
                  bad + "/adapter_model.safetensors")
        r = trainc("import", "hf", src, "--adapter", bad, "-o", d + "/peft_refused", expect=1)
        check("the head is tied to" in r.stderr and not os.path.exists(d + "/peft_refused"),
              "import --adapter on a tied embedding: exit 1, nothing written: %s" % r.stderr.strip())
    if name != "llama":
        return
    a = d + "/peft_adapter"
    conf = json.load(open(a + "/adapter_config.json"))
    tensors = load_file(a + "/adapter_model.safetensors")
    lone = {k: t for k, t in tensors.items() if "layers.0.self_attn.q_proj.lora_B" not in k}
    wrong = dict(tensors)
    wrong["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] = torch.zeros(4, 3)
    cases = [("use_dora", dict(conf, use_dora=True), tensors, ["use_dora", "DoRA"]),
             ("bias", dict(conf, bias="all"), tensors, ["bias", "\"none\" expected"]),
             ("peft_type", dict(conf, peft_type="IA3"), tensors, ["peft_type", "IA3"]),
             ("an unknown key set", dict(conf, lora_magic=1), tensors, ["lora_magic", "set"]),
             ("a lone A", conf, lone, ["q_proj.lora_A.weight", "no lora_B.weight"]),
             ("a wrong shape", conf, wrong, ["do not fit", "q_proj.weight"]),
             ("a module the model has not", conf,
              dict(tensors, **{"base_model.model.model.layers.9.mlp.up_proj.lora_A.weight": torch.zeros(4, 64),
                               "base_model.model.model.layers.9.mlp.up_proj.lora_B.weight": torch.zeros(64, 4)}),
              ["layers.9.mlp.up_proj", "which the model has not"])]
    for what, c, t, words in cases:
        bad = d + "/peft_bad"
        shutil.rmtree(bad, ignore_errors=True)
        os.makedirs(bad)
        json.dump(c, open(bad + "/adapter_config.json", "w"))
        save_file(t, bad + "/adapter_model.safetensors")
        r = trainc("import", "hf", src, "--adapter", bad, "-o", d + "/peft_refused", expect=1)
        check(all(w in r.stderr for w in words) and not os.path.exists(d + "/peft_refused"),
              "import --adapter, %s: exit 1, nothing written: %s" % (what, r.stderr.strip()))
    # a later PEFT's key, off (null, false, empty), changes nothing: the same weights
    bad = d + "/peft_later"
    os.makedirs(bad)
    json.dump(dict(conf, lora_magic=None, alora_invocation_tokens=None, arrow_config={}, later_flag=False),
              open(bad + "/adapter_config.json", "w"))
    shutil.copy(a + "/adapter_model.safetensors", bad)
    trainc("import", "hf", src, "--adapter", bad, "-o", d + "/peft_later_import", "--seq-len", T)
    x, y = load_file(d + "/peft_import/init.safetensors"), load_file(d + "/peft_later_import/init.safetensors")
    check(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x),
          "import --adapter with a later PEFT's keys left off: the same %d tensors" % len(x))
    r = trainc("import", "hf", src, "--adapter", d + "/no_such", "-o", d + "/peft_refused", expect=1)
    check("adapter_config.json" in r.stderr, "import --adapter of a missing folder: exit 1: %s" % r.stderr.strip())


def family_bad_configs():
    """The layernorm families' configs trainc cannot express, each refused naming it; and
    Mixtral's and Qwen2-MoE's."""
    bad_configs(OUT + "/hf_mixtral", [
        ("mixtral top_k past the experts", {"num_experts_per_tok": 5}, ["num_experts_per_tok", "4"]),
        ("mixtral attention_bias", {"attention_bias": True}, ["attention_bias", "Mixtral"])])
    bad_configs(OUT + "/hf_qwen2_moe", [
        ("qwen2_moe sparse step", {"decoder_sparse_step": 2}, ["decoder_sparse_step", "Qwen2-MoE"]),
        ("qwen2_moe dense layers", {"mlp_only_layers": [0]}, ["mlp_only_layers", "Qwen2-MoE"]),
        ("qwen2_moe windowed", {"use_sliding_window": True}, ["use_sliding_window", "Qwen2"])])
    bad_configs(OUT + "/hf_stablelm", [
        ("stablelm qk_layernorm", {"qk_layernorm": True}, ["qk_layernorm", "per head"]),
        ("stablelm parallel residual", {"use_parallel_residual": True}, ["use_parallel_residual"]),
        ("stablelm dynamic rope scaling", {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
         ["rope_scaling", "dynamic"]),
        ("stablelm rotating 3 of 16", {"partial_rotary_factor": 0.2},
         ["partial_rotary_factor", "even"])])
    bad_configs(OUT + "/hf_phi", [
        ("phi qk_layernorm", {"qk_layernorm": True}, ["qk_layernorm", "RMSNorm"])])
    bad_configs(OUT + "/hf_falcon", [
        ("falcon alibi", {"alibi": True}, ["alibi", "rope"]),
        ("falcon new architecture one after the other",
         {"new_decoder_architecture": True, "parallel_attn": False}, ["parallel_attn", "releases"]),
        ("falcon residual after the norm", {"apply_residual_connection_post_layernorm": True},
         ["apply_residual_connection_post_layernorm"])])
    bad_configs(OUT + "/hf_gptj", [("gptj rotary_dim 7", {"rotary_dim": 7},
                                    ["rotary_dim", "even"])])
    bad_configs(OUT + "/hf_olmo", [("olmo clip_qkv", {"clip_qkv": 8.0}, ["clip_qkv", "clamp"])])
    bad_configs(OUT + "/hf_opt", [
        ("opt-350m's post-norm", {"do_layer_norm_before": False}, ["do_layer_norm_before", "350m"]),
        ("opt-350m's projections", {"word_embed_proj_dim": 32}, ["word_embed_proj_dim", "350m"]),
        ("opt gelu", {"activation_function": "gelu"}, ["activation_function", "relu"])])
    bad_configs(OUT + "/hf_gpt_neo", [
        ("gpt_neo local layers in no pattern",
         {"attention_types": [[["global", "local", "local"], 1]], "attention_layers": None,
          "num_layers": 3}, ["attention_types", "pattern"])])
    bad_configs(OUT + "/hf_cohere", [
        ("cohere use_qk_norm", {"use_qk_norm": True}, ["use_qk_norm", "per head"]),
        ("cohere head_dim", {"head_dim": 8}, ["head_dim", "releases"]),
        ("cohere rope_scaling", {"rope_scaling": {"type": "linear", "factor": 2.0}},
         ["rope_scaling", "4.40 ignores it"])])
    bad_configs(OUT + "/hf_gpt_neox", [
        ("gpt_neox dynamic rope scaling", {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
         ["rope_scaling", "dynamic"]),
        ("gpt_neox llama3 rope scaling", {"rope_scaling": {
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}}, ["rope_scaling", "linear"]),
        ("gpt_neox rotary_pct 0.2", {"rotary_pct": 0.2, "partial_rotary_factor": 0.2},
         ["rotary_pct", "even"]),
        ("gpt_neox partial_rotary_factor apart from rotary_pct", {"partial_rotary_factor": 0.5},
         ["partial_rotary_factor", "rotary_pct is 0.25"])])


def main():
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    rng = np.random.default_rng(0)
    val = rng.integers(0, V, NWIN * T + 1).tolist()
    shard(OUT + "/val_000000.bin", val)
    shard(OUT + "/train_000000.bin", rng.integers(0, V, 20 * 4 * T + 1).tolist())
    roundtrips(val)
    if not NEWER:
        for name in ("llama", "gpt2", "gptj"):
            lora_case(val, name, rslora=name == "gptj")
    g = torch.Generator().manual_seed(1)
    norms = {"model.layers.%d.self_attn.%s_norm.weight" % (i, c): 1 + 0.1 * torch.randn(16, generator=g)
             for i in range(2) for c in "qk"}
    reference_case("qwen3", OUT + "/hf_llama",
                   {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-6,
                    "head_dim": 16, "use_sliding_window": False, "sliding_window": None,
                    "max_window_layers": 2}, norms, val)
    # Qwen3-0.6B's heads are 128 wide over hidden_size 1024 and 16 heads: head_dim apart
    # from hidden_size / heads (here 24 over 64 / 4), the projections shaped by it
    hd = 24
    wide = {"model.layers.%d.self_attn.%s" % (i, n): s * torch.randn(*shape, generator=g)
            for i in range(2) for n, shape, s in [
                ("q_proj.weight", (4 * hd, 64), 0.1), ("k_proj.weight", (2 * hd, 64), 0.1),
                ("v_proj.weight", (2 * hd, 64), 0.1), ("o_proj.weight", (64, 4 * hd), 0.1)]}
    wide.update({"model.layers.%d.self_attn.%s_norm.weight" % (i, c): 1 + 0.1 * torch.randn(hd, generator=g)
                 for i in range(2) for c in "qk"})
    reference_case("qwen3_head_dim", OUT + "/hf_llama",
                   {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-6,
                    "head_dim": hd, "use_sliding_window": False, "sliding_window": None,
                    "max_window_layers": 2}, wide, val)
    # Mistral Nemo's heads: 128 wide over hidden_size 5120 and 32 heads (here 24 over 64 / 4),
    # rope_theta 1e6, no window (transformers reads head_dim from 4.45 on)
    reference_case("mistral_head_dim", OUT + "/hf_llama",
                   {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "head_dim": hd,
                    "sliding_window": None, "rope_theta": 1000000.0},
                   {k: t for k, t in wide.items() if "_norm" not in k}, val)
    reference_case("llama3_rope", OUT + "/hf_llama",
                   {"rope_theta": 500000.0, "rope_scaling": {
                       "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}, {}, val)
    # SmolLM3 (transformers 4.40 has none): Llama's tensors, every second layer without
    # rope, as no_rope_layer_interval and as the no_rope_layers list say it
    smol = {"model_type": "smollm3", "architectures": ["SmolLM3ForCausalLM"],
            "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2}
    reference_case("smollm3", OUT + "/hf_llama", dict(smol, no_rope_layer_interval=2), {}, val,
                   interleave={"every": 2, "rope": None})
    reference_case("smollm3_list", OUT + "/hf_llama", dict(smol, no_rope_layers=[1, 0]), {}, val,
                   interleave={"every": 2, "rope": None})
    bad_configs(OUT + "/hf_llama", [
        ("smollm3 no_rope_layers off the period", dict(smol, no_rope_layers=[0, 1]),
         ["no_rope_layers", "layer 1"]),
        ("smollm3 windowed", dict(smol, use_sliding_window=True, sliding_window=8),
         ["use_sliding_window"]),
        ("smollm3 yarn rope_parameters", dict(smol, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}), ["rope_parameters"])])
    bad_configs(OUT + "/hf_llama")
    bad_configs(OUT + "/hf_starcoder2", [
        ("starcoder2 rope_scaling", {"rope_scaling": {"type": "linear", "factor": 2.0}},
         ["rope_scaling", "StarCoder2"]),
        ("starcoder2 head_dim", {"head_dim": 8}, ["head_dim", "StarCoder2"]),
        ("starcoder2 rms_norm_eps", {"rms_norm_eps": 1e-6}, ["rms_norm_eps"])])
    bad_configs(OUT + "/hf_gpt_bigcode", [
        ("gpt_bigcode multi_query false", {"multi_query": False}, ["multi_query", "interleaves"])])
    family_bad_configs()
    gemma_configs(val)
    gemma3_case(val)
    gemma3_4b_case(val)
    gemma3_27b_case(val)
    gemma2_case(val)
    granite_case(val)
    whole_configs()
    phi3_case(val)
    nemotron_case(val)
    olmo2_case(val)
    glm_case(val)
    cohere2_case(val)
    qwen3_moe_case(val)
    olmoe_case(val)
    yarn_cases(val)
    # the names of the original GPT-2 checkpoints: no "transformer." prefix
    d = OUT + "/hf_gpt2_bare"
    os.makedirs(d)
    shutil.copy(OUT + "/hf_gpt2/config.json", d)
    save_file({n[len("transformer."):]: t for n, t in source_tensors(OUT + "/hf_gpt2").items()},
              d + "/model.safetensors", metadata={"format": "pt"})
    trainc("import", "hf", d, "-o", OUT + "/gpt2_bare", "--seq-len", T)
    a, b = load_file(OUT + "/gpt2/init.safetensors"), load_file(OUT + "/gpt2_bare/init.safetensors")
    check(a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a),
          "gpt2 without the transformer. prefix: the same %d tensors" % len(a))
    # --tokenizer: copied beside the export
    tok = OUT + "/tokenizer.json"
    json.dump({"version": "1.0", "model": {"type": "BPE"}}, open(tok, "w"))
    d = OUT + "/llama"
    trainc("export", "hf", d + "/model.json", d + "/eval.json", "--weights", d + "/init.safetensors",
           "-o", d + "/with_tok", "--tokenizer", tok)
    check(open(tok, "rb").read() == open(d + "/with_tok/tokenizer.json", "rb").read(),
          "export --tokenizer: tokenizer.json copied")
    token_ids()
    d = OUT + "/llama"
    spec = json.load(open(d + "/model.json"))
    spec["model"]["layers"].insert(3, {"op": "dropout", "p": 0.1})
    json.dump(spec, open(d + "/dropout.json", "w"))
    refused("export with a dropout layer", ["export", "hf", d + "/dropout.json", d + "/train5.json",
            "--weights", d + "/init.safetensors", "-o", d + "/bad_export"],
            ["dropout", "layers[3]"], d + "/bad_export")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
