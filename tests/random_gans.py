"""Random GANs against PyTorch (Debian python3-torch, CPU): the "gan" model form (SPEC
section 2) on generator and discriminator layer lists the shipped specs do not have,
through every pass (both networks' programs, their shared arena plan, recomputation).

    random_gans.py [N [SEED]] [--fake-gpu=K]   (default 20 pairs, seed 1, no GPU)

Each pair is drawn from a small grammar: vectors (the generator a stack of linear
layers, each with a batchnorm after it or not (its linear then without bias, as DCGAN's
convolutions: a bias before a batchnorm has a zero gradient up to rounding), an
activation, a tanh at the end or not; the discriminator the same with leaky_relu or
another activation, then one logit) or images (a DCGAN: conv_transpose2d from a latent
[k, 1, 1] to 4x4, to 8x8 with a second one of stride 2, batchnorms, tanh; the
discriminator conv2d of stride 2, a 3x3 conv2d (grouped or not) with a batchnorm or
not, leaky_relu, flatten, one logit). Then the loss (bce or hinge), AdamW (eps 1e-3: a
gradient that is rounding noise on both sides moves a weight by the whole lr at 1e-8)
or SGD with momentum, a discriminator's optimizer of its own or not, accumulate 1 or 2,
grad_clip or not (by norm, or in half of those by value), a recompute policy, 1 or 2 threads; the latent batches are a data
input, so both sides see the same z. PyTorch runs tests/gan_torch.py's step in float64
from the same initial weights (torch's defaults, batchnorms' statistics and affine
parameters moved off theirs; written as float32 and loaded with --init) on the same
batches: every step's d_loss and g_loss within 1e-4 relative (floor 1e-3), the final
weights and running statistics within 1e-4 of their scale, num_batches_tracked exactly;
or, where a pair's few steps turn rounding into more than that (AdamW dividing by a
small second moment), within 4 times what the same reference in float32 differs by.
Every third pair also runs under all three recompute policies, which must give the same
numbers and weights bit for bit, and every fourth from the second on is stopped after
its first step (a checkpoint there) and resumed with --resume: the straight run's
records and weights byte for byte. With --fake-gpu=K the first K pairs are also built with
--device both (kernels by the fake NVRTC for sm_90a) and trained on the fake GPU
(tests/fake_gpu/: the generated CUDA kernels in the emulator): in fp32 against the
float64 reference by the CPU's rule, and every other pair in bf16-mixed (one in four of
the rest in fp16-mixed, each net's loss scale from 1024) within 1e-1 of the CPU's losses.
"""
import json, os, subprocess, sys
import numpy as np
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gan_torch
import st_check   # safetensors by hand
import random_runs   # the cases' loop, a trainc run, the resume check, the fake GPU

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
args = [a for a in sys.argv[1:] if not a.startswith("--fake-gpu=")]
N_PAIRS = int(args[0]) if len(args) > 0 else 20
SEED = int(args[1]) if len(args) > 1 else 1
OUT = os.path.join(ROOT, "build", "tests", "random_gans", "seed%d" % SEED)
# --fake-gpu=K: the first K pairs also built with --device both and trained on the fake
# GPU (tests/fake_gpu/), fp32 against the float64 reference by the CPU's rule, and every
# other one in bf16-mixed (one in four of the rest fp16-mixed) within 1e-1
FAKE_GPU = max([int(a.split("=")[1]) for a in sys.argv[1:] if a.startswith("--fake-gpu=")] + [0])
FAKE_LIB = os.environ.get("FAKE_GPU_LIB") or os.path.join(OUT, "fake_lib")   # (run_all.sh's shared build)
TOL, SPREAD = 1e-4, 4.0
WIDE = []   # the comparisons past TOL that PyTorch's float32 spread took, for the summary
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)   # the reference in double: its rounding is not in the way

ACTS = ["relu", "tanh", "silu", "gelu", "leaky_relu"]


def act(r, slope=False):
    a = {"op": ACTS[r.integers(len(ACTS))]}
    if a["op"] == "leaky_relu" and (slope or r.random() < 0.5):
        a["negative_slope"] = 0.2
    return a


def batchnorm(r):
    bn = {"op": "batchnorm"}
    if r.random() < 0.5:
        bn["momentum"] = 0.3
    if r.random() < 0.3:
        bn["eps"] = 1e-3
    return bn


def mlp(r, out, last):
    """linear layers of random widths, a batchnorm after one (its linear then biasless)
    or an activation alone, then a linear to `out` and `last` (a list)"""
    layers = []
    for _ in range(int(r.integers(1, 3))):
        layers.append({"op": "linear", "out": int(r.integers(3, 9))})
        if r.random() < 0.4:
            layers[-1]["bias"] = False
            layers.append(batchnorm(r))
        layers.append(act(r))
    return layers + [{"op": "linear", "out": out}] + last


def vector_pair(r):
    real, k = int(r.integers(3, 10)), int(r.integers(2, 6))
    g = mlp(r, real, [{"op": "tanh"}] if r.random() < 0.5 else [])
    d = mlp(r, 1, [])
    return [real], [k], g, d


def image_pair(r):
    C, H, k = int(r.integers(1, 3)), int(r.choice([4, 8])), int(r.integers(2, 6))
    c = int(r.integers(2, 6))
    g = [{"op": "conv_transpose2d", "out": c if H == 8 else C, "kernel": 4, "bias": H != 8}]
    if H == 8:
        g += [batchnorm(r), act(r),
              {"op": "conv_transpose2d", "out": C, "kernel": 4, "stride": 2, "padding": 1}]
    g.append({"op": "tanh"})
    c2 = int(r.integers(2, 6))
    d = [{"op": "conv2d", "out": c2, "kernel": 4, "stride": 2, "padding": 1}, act(r, slope=True)]
    if r.random() < 0.5:
        conv = {"op": "conv2d", "out": c2, "kernel": 3, "padding": 1, "bias": False}
        if c2 % 2 == 0 and r.random() < 0.5:
            conv["groups"] = 2
        d += [conv, batchnorm(r), act(r, slope=True)]
    d += [{"op": "flatten"}, {"op": "linear", "out": 1}]
    return [C, H, H], [k, 1, 1], g, d


def optimizer(r):
    if r.random() < 0.6:
        return {"type": "adamw", "lr": 0.01, "betas": [0.5, 0.999], "eps": 1e-3,
                "weight_decay": float(r.choice([0.0, 0.05]))}
    return {"type": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": bool(r.random() < 0.3),
            "weight_decay": float(r.choice([0.0, 0.01]))}


def draw(r, i):
    kind = ["vector", "image"][i % 2]
    real, latent, g, d = (vector_pair if kind == "vector" else image_pair)(r)
    B, A, steps = int(r.choice([4, 6])), int(r.choice([1, 2])), int(r.integers(3, 6))
    train = {"data": {"train": {"x": "x.npy", "z": "z.npy"}}, "batch_size": B, "accumulate": A,
             "epochs": 1, "max_steps": steps, "log_every": 1, "optimizer": optimizer(r),
             "schedule": {"type": "constant"}, "recompute": str(r.choice(["none", "selective", "full"])),
             "loader": {"shuffle": False, "workers": 0}, "seed": 5}
    if r.random() < 0.4:
        train["optimizer_d"] = optimizer(r)
    if r.random() < 0.4:
        train["grad_clip"] = 0.5
        if np.random.default_rng([SEED, i, 16]).random() < 0.5:   # clip_grad_value_
            train["grad_clip"], train["grad_clip_algorithm"] = 0.05, "value"
    model = {"name": "gan%d" % i,
             "inputs": {"x": {"shape": real, "dtype": "f32"}, "z": {"shape": latent, "dtype": "f32"}},
             "gan": {"latent": {"shape": latent, "input": "z"}, "generator": g, "discriminator": d,
                     "loss": "hinge" if r.random() < 0.3 else "bce"}}
    return kind, {"trainc": 1, "model": model, "train": train}, steps * A * B


def initial_nets(spec, seed):
    """G and D from torch's defaults (seeded), batchnorms moved off theirs, every value a
    float32's (what the trainer reads from --init)"""
    torch.manual_seed(seed)
    G, D = gan_torch.nets(spec["model"])
    with torch.no_grad():
        for m in list(G.modules()) + list(D.modules()):
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(3)
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
        for v in gan_torch.state_dict(G, D).values():
            if v.is_floating_point():
                v.copy_(v.float().double())
    return G, D


def reference(spec, init, X, Z, steps, dtype):
    """gan_torch's training in `dtype` from the weights `init` (name -> tensor): its
    losses, and its final weights as float64 (integer counts as they are)"""
    torch.set_default_dtype(dtype)
    try:
        G, D = gan_torch.nets(spec["model"])
        with torch.no_grad():
            for k, v in gan_torch.state_dict(G, D).items():
                v.copy_(init[k].to(v.dtype))
        ref = gan_torch.train(G, D, spec, torch.from_numpy(X).to(dtype), torch.from_numpy(Z).to(dtype), steps)
    finally:
        torch.set_default_dtype(torch.float64)
    final = {k: v.detach().clone() if v.dtype == torch.int64 else v.detach().double()
             for k, v in gan_torch.state_dict(G, D).items()}
    return ref, final


def records(out):
    """the train records of a run's metrics.jsonl"""
    return [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))
            if '"d_loss"' in l and '"event"' not in l]


def trainc(spec_path, out, init, threads, recompute=None):
    random_runs.train(TRAINC, spec_path, out, init, threads, recompute)
    return records(out)


def compare(recs, ref, final, ref32, final32, weights):
    """trainc's records and weights against the float64 reference's: each within TOL
    relative, or within SPREAD times what the float32 reference differs from it by (a
    GAN's few steps can turn rounding into more than TOL: AdamW's division by a small
    second moment, a batchnorm's over a small variance; PyTorch's own float32 then lands
    as far off). The problems found."""
    problems = []
    if len(recs) != len(ref["d_loss"]):
        problems.append("%d steps, the reference %d" % (len(recs), len(ref["d_loss"])))
    for s, rec in enumerate(recs):
        for what in ("d_loss", "g_loss"):
            want, w32 = ref[what][s], ref32[what][s]
            bound = TOL * max(abs(want), 1e-3)
            if bound < abs(rec[what] - want) <= SPREAD * abs(w32 - want):
                WIDE.append(what)
            if abs(rec[what] - want) > max(bound, SPREAD * abs(w32 - want)):
                problems.append("step %d %s %.8g, the reference %.8g (in float32 %.8g)"
                                % (s + 1, what, rec[what], want, w32))
    if sorted(weights) != sorted(final):
        return problems + ["weights named %s, the reference %s" % (sorted(weights), sorted(final))]
    for name, t in final.items():
        e = t.numpy()
        if e.dtype == np.int64:
            if int(weights[name]) != int(e):
                problems.append("%s is %d, the reference %d" % (name, int(weights[name]), int(e)))
            continue
        dif = float(np.max(np.abs(weights[name] - e))) if e.size else 0.0
        spread = float(np.max(np.abs(final32[name].numpy() - e))) if e.size else 0.0
        bound = TOL * max(1.0, float(np.max(np.abs(e))))
        if bound < dif <= SPREAD * spread:
            WIDE.append(name)
        if dif > max(bound, SPREAD * spread):
            problems.append("%s differs by %.3g (PyTorch's float32 by %.3g)" % (name, dif, spread))
    return problems


def fake_gpu(d, spec_path, init, threads, precision):
    """the pair built for both devices and trained on the fake GPU in `precision`: its
    train records, or the problem (a string)"""
    env = random_runs.fake_env(FAKE_LIB, os.path.join(OUT, "cache"))
    exe = os.path.join(d, "trainer_" + precision)
    p = subprocess.run([TRAINC, "build", spec_path, "--device", "both", "--arch", "sm_90a",
                        "--set", "precision=" + precision, "-o", exe], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return "trainc build --device both (%s) failed:\n%s" % (precision, p.stderr[-3000:])
    out = os.path.join(d, "gpu_" + precision)
    # fp16-mixed: each net's loss scale from 1024, not 65536, so that no step of these small
    # nets overflows and is skipped (the CPU's fp32 run skips none)
    sets = ["--set", "loss_scale.init=1024"] if precision == "fp16-mixed" else []
    p = subprocess.run([exe, "--device", "cuda", "--init", init, "--out", out, "--quiet", "--threads", str(threads)]
                       + sets, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return "on the fake GPU (%s): exit %d\n%s" % (precision, p.returncode, p.stderr[-3000:])
    start = json.loads(open(os.path.join(out, "metrics.jsonl")).readline())
    if start.get("device") != "cuda":
        return "on the fake GPU: the start record says %s" % start.get("device")
    return records(out)


def on_fake_gpu(i, d, spec_path, init, threads, ours, check):
    """the fake GPU's runs of pair i (fp32 always; bf16- or fp16-mixed in some): problems.
    check(records) compares fp32 records with the reference, as the CPU's are."""
    problems = []
    runs = ["fp32"] + (["bf16-mixed"] if i % 2 == 1 else ["fp16-mixed"] if i % 4 == 2 else [])
    for precision in runs:
        recs = fake_gpu(d, spec_path, init, threads, precision)
        if isinstance(recs, str):
            return problems + [recs]
        if precision == "fp32":
            problems += ["fake GPU fp32: " + x for x in check(recs)]
            continue
        # 16-bit activations: the losses within 1e-1 of the CPU's fp32 ones (36 pairs of
        # seeds 5 to 7: 5.5% at most, a DCGAN with two batchnorms over batches of 4 and the
        # hinge loss, -mean(D(G(z))); under 1% in most)
        for s, (g, c) in enumerate(zip(recs, ours)):
            for what in ("d_loss", "g_loss"):
                if abs(g[what] - c[what]) > 1e-1 * max(abs(c[what]), 1e-1):
                    problems.append("fake GPU %s: step %d %s %.6g, the CPU %.6g" % (precision, s + 1, what,
                                                                                    g[what], c[what]))
        if len(recs) != len(ours):
            problems.append("fake GPU %s: %d steps, the CPU %d" % (precision, len(recs), len(ours)))
    return problems


def one(i, r):
    kind, spec, rows = draw(r, i)
    d = os.path.join(OUT, "g%02d" % i)
    os.makedirs(d, exist_ok=True)
    m = spec["model"]
    X = r.uniform(-1, 1, (rows,) + tuple(m["inputs"]["x"]["shape"])).astype(np.float32)
    Z = r.standard_normal((rows,) + tuple(m["inputs"]["z"]["shape"])).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), X)
    np.save(os.path.join(d, "z.npy"), Z)
    spec_path = os.path.join(d, "spec.json")
    json.dump(spec, open(spec_path, "w"), indent=1)

    G, D = initial_nets(spec, SEED * 1000 + i)
    start = {k: v.detach().clone() for k, v in gan_torch.state_dict(G, D).items()}
    init = os.path.join(d, "init.safetensors")
    st_check.save(init, {k: v.numpy().astype(np.int64 if v.dtype == torch.int64 else np.float32)
                         for k, v in start.items()})
    threads = int(r.integers(1, 3))
    ours = trainc(spec_path, os.path.join(d, "run"), init, threads)
    steps = spec["train"]["max_steps"]
    ref, final = reference(spec, start, X, Z, steps, torch.float64)
    ref32, final32 = reference(spec, start, X, Z, steps, torch.float32)
    weights = st_check.load(os.path.join(d, "run", "model.safetensors"))
    problems = compare(ours, ref, final, ref32, final32, weights)
    if i % 4 == 1 and not problems:
        problems += random_runs.resumed(TRAINC, d, spec_path, init, threads, spec["train"]["max_steps"])
    if i < FAKE_GPU and not problems:
        w_gpu = lambda recs: st_check.load(os.path.join(d, "gpu_fp32", "model.safetensors"))
        problems += on_fake_gpu(i, d, spec_path, init, threads, ours,
                                lambda recs: compare(recs, ref, final, ref32, final32, w_gpu(recs)))

    if i % 3 == 0:   # recomputation never changes the numbers
        base = None
        for pol in ("none", "selective", "full"):
            o2 = os.path.join(d, "rc_" + pol)
            nums = [(x["d_loss"], x["g_loss"]) for x in trainc(spec_path, o2, init, threads, pol)]
            got = (nums, open(os.path.join(o2, "model.safetensors"), "rb").read())
            if base is None:
                base = got
            elif got != base:
                problems.append("recompute %s: numbers or weights differ from none's" % pol)
    t = spec["train"]
    bns = json.dumps(m["gan"]).count('"batchnorm"')
    desc = "%s%s, %d + %d layers%s, %s, %s%s, accumulate %d%s, recompute %s%s, %d thread%s" % (
        "on the fake GPU too (%s): " % ", ".join(["fp32"] + (["bf16-mixed"] if i % 2 == 1 else ["fp16-mixed"]
                                                             if i % 4 == 2 else []))
        if i < FAKE_GPU else "", kind, len(m["gan"]["generator"]), len(m["gan"]["discriminator"]),
        ", %d batchnorm%s" % (bns, "s" if bns > 1 else "") if bns else "", m["gan"]["loss"],
        t["optimizer"]["type"], " (D: %s)" % t["optimizer_d"]["type"] if "optimizer_d" in t else "",
        t["accumulate"], ", clipped by value" if t.get("grad_clip_algorithm") == "value"
        else ", clipped" if "grad_clip" in t else "", t["recompute"],
        ", all three policies" if i % 3 == 0 else "", threads, "s" if threads > 1 else "") + \
        (", resumed after step 1" if i % 4 == 1 else "")
    return desc, len(ours), problems


def main():
    os.makedirs(OUT, exist_ok=True)
    if FAKE_GPU:
        random_runs.fake_lib_ready(FAKE_LIB)
    failed = random_runs.run_cases(N_PAIRS, one, np.random.default_rng(SEED), OUT, "g", "pair")
    print("random GANs: %d passed, %d failed (seed %d; %d comparisons past 1e-4 within PyTorch's "
          "float32 spread)" % (N_PAIRS - failed, failed, SEED, len(WIDE)))
    sys.exit(1 if failed else 0)

main()
