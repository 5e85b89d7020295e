"""resnet_fashion_cpu and llama_char on the CPU, trainc vs PyTorch (Debian's 1.13) in one
run (make bench): samples/s (tokens/s) over steps WARM+1 .. STEPS of each spec's own
batch and optimizer, on the same data held in memory.

trainc: a built trainer on all cores (no validation or checkpoints inside the timed
steps; resnet without its hflip augmentation, which PyTorch does not do here).
PyTorch: the same model, eager, with 1 and with 2 threads, the better counting:
  resnet_fashion_cpu  tests/spec_torch.py's modules (conv2d and BatchNorm2d on oneDNN),
                      SGD with Nesterov momentum and weight decay, label smoothing 0.1;
                      also in channels_last, the faster of the two counting
  llama_char          transformers' LlamaForCausalLM of the spec's shape (GQA, RoPE,
                      RMSNorm, SwiGLU, untied head; eager attention), AdamW with
                      gradient clipping, as the spec trains; needs transformers (HF_PYTHON)
PyTorch's matrix products run on the system's BLAS (OpenBLAS); where trainc chose
OpenBLAS's kernels for this CPU (its --version says "OpenBLAS took ..."), PyTorch
runs with OPENBLAS_CORETYPE set to the same core, so both sides get the same GEMMs.

    python bench/cpu_models.py [resnet|llama ...]     one JSON line per measurement
"""
import json, os, re, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, "build", "trainc")
OUT = os.path.join(ROOT, "build", "bench")
STEPS, WARM = int(os.environ.get("BENCH_STEPS", 60)), 10


def blas_core():
    """trainc's OpenBLAS core, and the core PyTorch should be given ("" to leave it)"""
    if os.environ.get("OPENBLAS_CORETYPE"):   # (bench/run.sh sets it for every process)
        return os.environ["OPENBLAS_CORETYPE"], os.environ["OPENBLAS_CORETYPE"]
    v = subprocess.run([TRAINC, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"CPU GEMMs: OpenBLAS (\S+)( \(OpenBLAS took (\S+)\))?", v)
    core = m.group(1) if m else "?"
    return core, (core if m and m.group(3) else "")


def trainc_rate(spec, extra, per_step):
    name = os.path.splitext(os.path.basename(spec))[0]
    exe = os.path.join(OUT, name)
    subprocess.run([TRAINC, "build", spec, "-o", exe], check=True, cwd=ROOT, stderr=subprocess.DEVNULL)
    out = os.path.join(OUT, name + ".run")
    subprocess.run([exe, "--out", out, "--quiet", "--set", f"max_steps={STEPS}", "--set", "log_every=1",
                    "--set", "data.val=null", "--set", "checkpoint=null"] + extra,
                   check=True, cwd=ROOT, stderr=subprocess.DEVNULL)
    steps = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))
             if '"loss"' in l and '"event"' not in l]
    return (STEPS - WARM) * per_step / (steps[-1]["time_s"] - steps[WARM - 1]["time_s"])


def torch_rate(what, threads, variant, core):
    """PyTorch in a process of its own (its thread count and BLAS core are set at start)"""
    env = dict(os.environ)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    py = os.environ.get("HF_PYTHON", sys.executable) if what == "llama" else sys.executable
    r = subprocess.run([py, os.path.abspath(__file__), "--torch", what, str(threads), variant],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode == 77:
        return None
    if r.returncode != 0:
        raise SystemExit(f"cpu_models.py: PyTorch {what} failed:\n{r.stderr[-2000:]}")
    return float(r.stdout.split()[-1])


def timed(step, per_step):
    for s in range(STEPS):
        if s == WARM:
            t0 = time.perf_counter()
        step(s)
    return (STEPS - WARM) * per_step / (time.perf_counter() - t0)


def torch_resnet(variant):
    import numpy as np, torch, torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import spec_torch
    spec = json.load(open(os.path.join(ROOT, "specs", "resnet_fashion_cpu.json")))
    tr, B = spec["train"], spec["train"]["batch_size"]
    torch.manual_seed(0)
    m = spec_torch.build(spec["model"]["layers"], spec["model"]["inputs"]["x"]["shape"])
    fmt = torch.channels_last if variant == "channels_last" else torch.contiguous_format
    m = m.to(memory_format=fmt)
    o = tr["optimizer"]
    opt = torch.optim.SGD(m.parameters(), lr=o["lr"], momentum=o["momentum"], nesterov=True,
                          weight_decay=o["weight_decay"])
    X = torch.from_numpy(np.load(os.path.join(ROOT, "data/fashion/train_x.npy")))
    Y = torch.from_numpy(np.load(os.path.join(ROOT, "data/fashion/train_y.npy"))).long()

    def step(s):
        xb = (X[s * B:(s + 1) * B].float() * (1 / 255)).contiguous(memory_format=fmt)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(xb), Y[s * B:(s + 1) * B], label_smoothing=0.1).backward()
        opt.step()
    return timed(step, B)


def torch_llama():
    import numpy as np, torch, torch.nn.functional as F
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        sys.exit(77)
    spec = json.load(open(os.path.join(ROOT, "specs", "llama_char.json")))
    ls, tr = spec["model"]["layers"], spec["train"]
    rep = next(l for l in ls if l["op"] == "repeat")
    att = rep["body"][0]["body"][1]
    up = rep["body"][1]["body"][1]
    D, T, B = ls[0]["dim"], spec["model"]["inputs"]["x"]["shape"][0], tr["batch_size"]
    cfg = LlamaConfig(vocab_size=ls[0]["vocab"], hidden_size=D, intermediate_size=up["out"] // 2,
                      num_hidden_layers=rep["count"], num_attention_heads=att["heads"],
                      num_key_value_heads=att["kv_heads"], max_position_embeddings=T,
                      rope_theta=att["rope"]["theta"], rms_norm_eps=1e-5, tie_word_embeddings=False,
                      attn_implementation="eager")
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg)
    o = tr["optimizer"]
    opt = torch.optim.AdamW(m.parameters(), lr=o["lr"], betas=tuple(o["betas"]),
                            weight_decay=o["weight_decay"])
    tok = np.fromfile(os.path.join(ROOT, "data/text/train_000000.bin"), dtype=np.uint16)[512:]
    n = (len(tok) - 1) // T

    def step(s):
        i = [(s * B + r) % n * T for r in range(B)]
        x = torch.from_numpy(np.stack([tok[j:j + T] for j in i]).astype(np.int64))
        y = torch.from_numpy(np.stack([tok[j + 1:j + T + 1] for j in i]).astype(np.int64))
        opt.zero_grad(set_to_none=True)
        logits = m(input_ids=x).logits
        F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), tr["grad_clip"])
        opt.step()
    return timed(step, B * T)


def torch_main(what, threads, variant):
    import torch
    torch.set_num_threads(int(threads))
    print(torch_resnet(variant) if what == "resnet" else torch_llama())


def main(which):
    os.makedirs(OUT, exist_ok=True)
    core, give = blas_core()
    date = time.strftime("%Y-%m-%d")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    rows = []
    if "resnet" in which:
        spec = json.load(open(os.path.join(ROOT, "specs", "resnet_fashion_cpu.json")))
        B = spec["train"]["batch_size"]
        ours = trainc_rate("specs/resnet_fashion_cpu.json", ["--set", "loader.augment=null"], B)
        th = {f"torch {t}t {v}": torch_rate("resnet", t, v, give)
              for t in (1, 2) for v in ("contiguous", "channels_last")}
        rows.append(("resnet_fashion_cpu", B, "samples/s", ours, th))
    if "llama" in which:
        spec = json.load(open(os.path.join(ROOT, "specs", "llama_char.json")))
        B, T = spec["train"]["batch_size"], spec["model"]["inputs"]["x"]["shape"][0]
        ours = trainc_rate("specs/llama_char.json", [], B * T)
        th = {f"torch {t}t HF LlamaForCausalLM": torch_rate("llama", t, "", give) for t in (1, 2)}
        rows.append(("llama_char", B, "tokens/s", ours, th))
    for name, B, unit, ours, th in rows:
        best = max((v for v in th.values() if v), default=None)
        rec = {"date": date, "commit": commit, "cpus": os.cpu_count(), "blas": core,
               "torch_blas": give or "(its own choice)", "model": name, "batch": B, "unit": unit,
               "steps": STEPS, "warm": WARM, "trainc": round(ours, 1),
               **{k: (round(v, 1) if v else None) for k, v in th.items()},
               "vs_best_torch": round(ours / best, 3) if best else None}
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--torch":
        torch_main(*sys.argv[2:5])
    else:
        main(sys.argv[1:] or ["resnet", "llama"])
