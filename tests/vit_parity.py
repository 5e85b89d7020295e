"""specs/vit_fashion.json step by step against PyTorch (Debian python3-torch, CPU).

A vision transformer: a strided conv2d cuts the image into patches, `tokens` makes
each patch position a token of its channels (timm's PatchEmbed: x.flatten(2).transpose(1,
2)), a class token before them (`cls_token`), learned positions, pre-norm blocks with
attention over all tokens (causal false), a final layernorm, `first_token` (the class
token's row, HF ViTForImageClassification's and timm's global_pool "token") and a linear
head; then the same spec with the mean over the tokens in place of the class token
(`token_mean`, timm's global_pool "avg"). The PyTorch model is written out here with
trainc's parameter names; its initial weights (PyTorch's defaults, the class token and
positions normal 0.02) go to trainc by --init. The
same batches (shuffle off: batch b is rows b*B .. b*B+B-1 of Fashion-MNIST), AdamW with
the spec's settings (weight decay on tensors of rank 2 and more), the warmup + cosine
schedule over the run, gradient clipping, threads = 1 on both sides. Every step's loss
within 1e-4 relative, the final weights within 1e-4.

PARITY_STEPS=N runs N steps instead of 40.

vit_parity.py --fake-gpu: instead, the spec built for both devices (its kernels
compiled by the fake NVRTC) trains 8 steps at batch 16 on the fake GPU (tests/fake_gpu/:
the generated CUDA kernels in the emulator; tokens' transposed reads, token_mean's row
sums and its backward's spread rows among them; the class token's select by the
element's place and first_token's slice) against the same trainer on the CPU:
in fp32 every loss and gradient norm within 1e-5 relative, in bf16-mixed the first loss
within 1e-3 and the last within 2e-2 of the CPU's fp32 (tests/fake_gpu.sh's rules); and
with DINOv2's head (cls_mean: the class token beside the others' mean) and stochastic
depth (drop_path 0.2: the GPU draws the CPU's masks), and with CLIP's quick_gelu and head
(token_mean with skip 1), in fp32 alike.
"""
import json, math, os, subprocess, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check   # safetensors by hand
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
# (its own folder with --fake-gpu: make test runs the two at once, and both write the
# specs)
OUT = os.path.join(ROOT, "build", "tests", "vit_parity_fake_gpu" if "--fake-gpu" in sys.argv[1:]
                   else "vit_parity")
os.makedirs(OUT, exist_ok=True)
STEPS, B = int(os.environ.get("PARITY_STEPS", 40)), 32
FAKE_GPU = "--fake-gpu" in sys.argv[1:]
torch.set_num_threads(1)
torch.manual_seed(0)
spec_path = os.path.join(ROOT, "specs", "vit_fashion.json")
spec = json.load(open(spec_path))
layers = spec["model"]["layers"]
patch, rep = layers[0], layers[4]
P, D, L = patch["kernel"], patch["out"], rep["count"]
H, FF = rep["body"][0]["body"][1]["heads"], rep["body"][1]["body"][1]["out"]
C, S = spec["model"]["inputs"]["x"]["shape"][0], spec["model"]["inputs"]["x"]["shape"][1]
T = (S // P) ** 2
assert [l["op"] for l in layers[1:3]] == ["tokens", "cls_token"] and layers[-2]["op"] == "first_token"
assert patch["stride"] == P


def form_file(m, name):
    """the spec M, its data at data/fashion/, as OUT/NAME.json: the path"""
    for part in m["train"]["data"].values():
        for k in part:
            part[k] = os.path.join(ROOT, "data", "fashion", os.path.basename(part[k]))
    path = os.path.join(OUT, name + ".json")
    json.dump(m, open(path, "w"), indent=1)
    return path


def mean_form():
    """the spec with the mean over the tokens in place of the class token, in OUT"""
    m = json.loads(json.dumps(spec))
    ls = m["model"]["layers"]
    del ls[2]
    ls[2]["max_len"] = T
    ls[-2] = {"op": "token_mean"}
    return form_file(m, "vit_mean")


class Attn(nn.Module):
    def __init__(s):
        super().__init__()
        s.qkv, s.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)

    def forward(s, x):
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in s.qkv(x).split(D, dim=2))
        att = F.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H)), dim=-1)
        return s.proj((att @ v).transpose(1, 2).reshape(b, t, D))


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.norm1, s.attn, s.norm2 = nn.LayerNorm(D), Attn(), nn.LayerNorm(D)
        s.fc1, s.fc2 = nn.Linear(D, FF), nn.Linear(FF, D)

    def forward(s, x):
        x = x + s.attn(s.norm1(x))
        return x + s.fc2(F.gelu(s.fc1(s.norm2(x))))


class ViT(nn.Module):
    def __init__(s, cls):
        super().__init__()
        s.patch = nn.Conv2d(C, D, P, P)
        if cls:
            s.cls = nn.Module()
            s.cls.weight = nn.Parameter(torch.empty(D))
        s.pos = nn.Embedding(T + cls, D)
        s.blocks = nn.ModuleList([Block() for _ in range(L)])
        s.norm, s.head = nn.LayerNorm(D), nn.Linear(D, layers[-1]["out"])
        s.with_cls = cls

    def forward(s, x):
        x = s.patch(x).flatten(2).transpose(1, 2)
        if s.with_cls:
            x = torch.cat([s.cls.weight.expand(x.shape[0], 1, D), x], dim=1)
        x = x + s.pos.weight
        for blk in s.blocks:
            x = blk(x)
        x = s.norm(x)
        return s.head(x[:, 0] if s.with_cls else x.mean(dim=1))


def cls_mean_form():
    """the spec with DINOv2's head, the class token beside the others' mean (cls_mean), its
    stochastic depth (each branch's residual drop_path 0.2) and 2 registers after the
    positions (register_tokens, DINOv2 with registers'), in OUT"""
    m = json.loads(json.dumps(spec))
    m["model"]["layers"][-2] = {"op": "cls_mean"}
    for r in m["model"]["layers"][4]["body"]:
        r["drop_path"] = 0.2
    m["model"]["layers"].insert(4, {"op": "register_tokens", "count": 2})
    return form_file(m, "vit_cls_mean")


def clip_form():
    """the spec with CLIP's MLP activation (quick_gelu) and head (the patch tokens' mean:
    token_mean with skip 1), in OUT"""
    m = json.loads(json.dumps(spec))
    ls = m["model"]["layers"]
    ls[4]["body"][1]["body"][2] = {"op": "quick_gelu"}
    ls[-2] = {"op": "token_mean", "skip": 1}
    return form_file(m, "vit_clip")


def fake_runs(d, env, name, path, precs, runs):
    """PATH built for both devices in each of PRECS; 8 steps on the fake GPU (and in fp32
    on the CPU): each run's losses and gradient norms into RUNS[name, prec, device]"""
    sets = ["max_steps=8", "log_every=1", "loader.shuffle=false", "batch_size=16", "data.val=null"]
    for prec in precs:
        exe = os.path.join(d, "%s_%s" % (name, prec))
        subprocess.run([TRAINC, "build", path, "--device", "both", "--arch", "sm_90a", "--set",
                        "precision=" + prec, "-o", exe], check=True, env=env, capture_output=True)
        for dev in ("cuda", "cpu") if prec == "fp32" else ("cuda",):
            out = os.path.join(d, "%s_%s_%s" % (name, prec, dev))
            cmd = [exe, "--device", dev, "--threads", "1", "--quiet", "--out", out]
            for x in sets:
                cmd += ["--set", x]
            subprocess.run(cmd, check=True, env=env, capture_output=True)
            runs[name, prec, dev] = [(r["loss"], r["grad_norm"]) for r in run_log.steps(out)]


def fake_gpu():
    """the fake GPU against the CPU, fp32 and bf16-mixed (above); then the cls_mean and
    CLIP forms in fp32; exits"""
    import random_runs
    d = os.path.join(OUT, "fake_gpu")
    os.makedirs(d, exist_ok=True)
    lib = os.environ.get("FAKE_GPU_LIB") or os.path.join(d, "lib")
    random_runs.fake_lib_ready(lib)
    env = random_runs.fake_env(lib, os.path.join(d, "cache"))
    runs = {}
    fake_runs(d, env, "vit", spec_path, ("fp32", "bf16-mixed"), runs)
    fake_runs(d, env, "vit_cls_mean", cls_mean_form(), ("fp32",), runs)
    fake_runs(d, env, "vit_clip", clip_form(), ("fp32",), runs)
    rel = lambda a, b: abs(a - b) / max(abs(b), 1e-6)
    good = True
    for name in ("vit", "vit_cls_mean", "vit_clip"):
        cpu, gpu = runs[name, "fp32", "cpu"], runs[name, "fp32", "cuda"]
        worst = max(max(rel(g[0], c[0]), rel(g[1], c[1])) for g, c in zip(gpu, cpu))
        ok = len(gpu) == len(cpu) == 8 and worst <= 1e-5
        print("%s %s fp32 on the fake GPU vs the CPU: 8 steps' losses and gradient norms, largest "
              "relative difference %.2g (tolerance 1e-5)" % ("ok  " if ok else "FAIL", name, worst))
        good &= ok
    cpu, b16 = runs["vit", "fp32", "cpu"], runs["vit", "bf16-mixed", "cuda"]
    first, last = rel(b16[0][0], cpu[0][0]), rel(b16[-1][0], cpu[-1][0])
    ok16 = len(b16) == 8 and first <= 1e-3 and last <= 2e-2
    print("%s vit_fashion bf16-mixed on the fake GPU vs the CPU's fp32: first loss within %.1e (1e-3), "
          "last within %.1e (2e-2)" % ("ok  " if ok16 else "FAIL", first, last))
    sys.exit(0 if good and ok16 else 1)


def cpu_parity(form, path):
    """PARITY_STEPS steps of the spec at path (its pooling: the class token, or the mean)
    against PyTorch; whether every check passed"""
    cls = form == "cls"
    model = ViT(cls)
    nn.init.normal_(model.pos.weight, std=0.02)
    if cls:
        nn.init.normal_(model.cls.weight, std=0.02)
    init_path = os.path.join(OUT, form + "_init.safetensors")
    st_check.save(init_path, {n: t.detach().numpy().astype(np.float32) for n, t in model.named_parameters()})

    tr = spec["train"]
    run_dir = os.path.join(OUT, form)
    cmd = [TRAINC, "run", path, "--init", init_path, "--out", run_dir,
           "--threads", "1", "--quiet"]
    for s in ["loader.shuffle=false", "log_every=1", f"max_steps={STEPS}", "data.val=null",
              f"batch_size={B}", "epochs=1"]:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True)
    ours = run_log.losses(run_dir)
    assert len(ours) == STEPS, len(ours)

    o = tr["optimizer"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=tuple(o.get("betas", (0.9, 0.999))), eps=o.get("eps", 1e-8),
                            foreach=False)
    warm, final = tr["schedule"]["warmup_steps"], tr["schedule"]["final_lr_frac"]
    def lam(step):
        if step < warm: return (step + 1) / warm
        prog = min(max((step - warm) / max(STEPS - warm, 1), 0.0), 1.0)
        return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * prog))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    scale = torch.tensor(np.float32(spec["model"]["inputs"]["x"]["scale"]))
    X = np.load(os.path.join(ROOT, "data", "fashion", "train_x.npy"), mmap_mode="r")
    Y = np.load(os.path.join(ROOT, "data", "fashion", "train_y.npy"), mmap_mode="r")
    ref = []
    for step in range(STEPS):
        xb = torch.from_numpy(np.array(X[step * B:(step + 1) * B])).float() * scale
        yb = torch.from_numpy(np.array(Y[step * B:(step + 1) * B])).long()
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
        opt.step()
        sched.step()
        ref.append(loss.item())

    rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
    worst = max(rel)
    print(f"vit_fashion ({form}): loss step 1 {ours[0]:.6f} vs {ref[0]:.6f}, step {STEPS} {ours[-1]:.6f} vs "
          f"{ref[-1]:.6f}; worst relative difference {worst:.2e} (tolerance 1e-4)")
    ok = worst <= 1e-4
    if not ok:
        for i, (a, b) in enumerate(zip(ours, ref)):
            print(f"  step {i + 1}: {a:.7f} vs {b:.7f}  {rel[i]:.1e}")
    # The key rows of qkv.bias are left out: the softmax over keys does not change when every
    # score of a query moves by the same q.b_k, so their gradient is 0 but for rounding, and
    # AdamW's step (about lr whatever the gradient's size) moves them by the noise's sign.
    w = st_check.load(os.path.join(run_dir, "model.safetensors"))
    def judged(n, a):
        return np.concatenate([a[:D], a[2 * D:]]) if n.endswith("attn.qkv.bias") else a
    dw = max((float(np.max(np.abs(judged(n, w[n]) - judged(n, t.detach().numpy())))), n)
             for n, t in model.named_parameters())
    print(f"  final weights (qkv.bias's key rows aside): largest |ours - torch| {dw[0]:.2e} ({dw[1]}; "
          f"tolerance 1e-4)")
    return ok and dw[0] <= 1e-4


if FAKE_GPU:
    fake_gpu()
ok_cls = cpu_parity("cls", spec_path)
ok_mean = cpu_parity("mean", mean_form())
sys.exit(0 if ok_cls and ok_mean else 1)
