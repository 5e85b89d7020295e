"""The "gan" model form (SPEC section 2: a generator and a discriminator trained against
each other) against PyTorch (Debian torch, CPU, fp32), step by step; the reference is
tests/gan_torch.py.

    gan_parity.py               the reference's own check, then trainc against it
    gan_parity.py --torch-only  the reference's own check and its losses only

The real samples are the first rows of Fashion-MNIST's training set as u8 [N, 784]
(scale 2/255, shift -1: in [-1, 1] like the generator's tanh), the latent batches are
a data input (z, f32 [N, 16], standard normal from numpy's seeded generator), so both
sides see the same z; shuffle off, threads 1, the same initial weights (written here,
loaded with --init). An MLP generator (16 -> linear 64, relu, linear 784, tanh) and
discriminator (784 -> linear 64, leaky_relu 0.2, linear 1). Cases:

  dcgan      the DCGAN tutorial's step: bce, Adam lr 2e-4 betas (0.5, 0.999) for both,
             batch 8, 25 steps
  hinge      the hinge loss, the generator's AdamW with weight decay and the
             discriminator's own optimizer (SGD, momentum 0.9, lr 0.01, weight decay),
             grad_clip 1.0 (it scales both nets' gradients at every step, each net's by
             its own norm), accumulate 2, 10 steps
  freeze     train.freeze of the discriminator's first layer and the generator's last
             bias (FreezeD's fine-tuning), bce, 10 steps: the frozen tensors as they
             started, bit for bit
  batchnorm  a batchnorm (momentum 0.2) after the first linear (without bias) of each net, from running
             statistics away from the defaults; bce, 10 steps: also the running
             statistics (D's see three forwards a micro-batch, G's one) and
             num_batches_tracked exactly
  built      the dcgan spec by a trainer from `trainc build`, 5 steps: the records of
             `trainc run` for 5 steps bit for bit (timings aside), the same weights file,
             and those weights within 1e-4 of PyTorch's after 5 steps
  ema        the dcgan case with train.ema (decay 0.9, every 3, start_step 4):
             ema.safetensors within 1e-4 of the average of PyTorch's weights after steps
             7, 10, ..., 25 (AveragedModel's EMA: a copy, then lerp), both networks'

Each case: every step's d_loss and g_loss within 1e-4 relative, and every tensor of
model.safetensors within 1e-4 of PyTorch's (max |ours - torch| / max |torch|).

The reference's own check, before any of that: gan_torch.train against the DCGAN
tutorial's loop written out as the tutorial has it (D's real and fake losses backward
one at a time, torch.optim.Adam, D's gradients from the G phase left to the next
zero_grad) on the dcgan and batchnorm cases: losses and weights within 1e-5.
"""
import json, os, shutil, subprocess, sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gan_torch
import st_check   # safetensors by hand

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "gan_parity")
B, NZ, ROWS, TOL, SELF_TOL, BUILT_STEPS = 8, 16, 200, 1e-4, 1e-5, 5
TIMING = ("time_s", "samples_per_s", "tokens_per_s")   # the only keys run and build may differ in
torch.set_num_threads(1)

ADAM = {"type": "adamw", "lr": 2e-4, "betas": [0.5, 0.999], "eps": 1e-8, "weight_decay": 0.0}
G_MLP = [{"op": "linear", "out": 64}, {"op": "relu"}, {"op": "linear", "out": 784}, {"op": "tanh"}]
D_MLP = [{"op": "linear", "out": 64}, {"op": "leaky_relu", "negative_slope": 0.2}, {"op": "linear", "out": 1}]
BN = {"op": "batchnorm", "momentum": 0.2}
CASES = {
    "dcgan": dict(steps=25, seed=1, g=G_MLP, d=D_MLP, loss="bce", train={"optimizer": ADAM}),
    # D's logit layer starts with its weight x2.5 and bias -0.5: g_loss (-mean D(fake)) then
    # stays away from 0, where a relative difference would mean nothing, and G's gradient
    # norm is above grad_clip as D's is
    "hinge": dict(steps=10, seed=2, g=G_MLP, d=D_MLP, loss="hinge", d_head=(2.5, -0.5),
                  train={"optimizer": dict(ADAM, weight_decay=0.01),
                         "optimizer_d": {"type": "sgd", "lr": 0.01, "momentum": 0.9, "nesterov": False,
                                         "weight_decay": 5e-4},
                         "grad_clip": 1.0, "accumulate": 2}),
    # the linears before the batchnorms have no bias, as DCGAN's convolutions: a bias there
    # has a zero gradient up to rounding, which Adam (dividing by its square root) turns
    # into updates of either sign, so no two implementations agree on it
    # train.freeze as FreezeD fine-tunes a GAN: the discriminator's first layer frozen
    # (and one generator tensor): the frozen tensors keep their initial values exactly,
    # the rest train as torch's with requires_grad off for those
    "freeze": dict(steps=10, seed=4, g=G_MLP, d=D_MLP, loss="bce",
                   train={"optimizer": ADAM, "freeze": ["discriminator.0.*", "generator.2.bias"]}),
    "batchnorm": dict(steps=10, seed=3, g=[dict(G_MLP[0], bias=False), BN] + G_MLP[1:],
                      d=[dict(D_MLP[0], bias=False), BN] + D_MLP[1:],
                      loss="bce", train={"optimizer": ADAM}),
}


def spec_of(name):
    c = CASES[name]
    train = {"data": {"train": {"x": "x.npy", "z": "z.npy"}}, "batch_size": B, "accumulate": 1,
             "epochs": 1, "max_steps": c["steps"], "log_every": 1, "grad_clip": None,
             "schedule": {"type": "constant"}, "loader": {"shuffle": False, "workers": 0}}
    train.update(c["train"])
    return {"trainc": 1,
            "model": {"name": f"gan_{name}",
                      "inputs": {"x": {"shape": [784], "dtype": "u8", "scale": 2 / 255, "shift": -1},
                                 "z": {"shape": [NZ], "dtype": "f32"}},
                      "gan": {"latent": {"shape": [NZ], "input": "z"}, "generator": c["g"],
                              "discriminator": c["d"], "loss": c["loss"]}},
            "train": train}


def write_data():
    raw = np.load(os.path.join(ROOT, "data", "fashion", "train_x.npy"), mmap_mode="r")
    X = np.ascontiguousarray(raw[:ROWS]).reshape(ROWS, 784)
    # a faint noise (0 to 7 of 255) on every pixel: Fashion-MNIST's border pixels are 0 in
    # every image, and a column constant over the batch gets a zero gradient behind a
    # batchnorm, up to rounding, which Adam turns into updates of either sign
    rng = np.random.default_rng(41)
    X = np.minimum(X.astype(np.int32) + rng.integers(0, 8, X.shape), 255).astype(np.uint8)
    Z = rng.standard_normal((ROWS, NZ)).astype(np.float32)
    np.save(os.path.join(OUT, "x.npy"), X)
    np.save(os.path.join(OUT, "z.npy"), Z)
    return X, Z


def initial_nets(name, spec):
    """The case's G and D from torch's defaults (seeded), batchnorms moved off theirs."""
    torch.manual_seed(CASES[name]["seed"])
    G, D = gan_torch.nets(spec["model"])
    with torch.no_grad():
        if "d_head" in CASES[name]:
            D[-1].weight.mul_(CASES[name]["d_head"][0])
            D[-1].bias.fill_(CASES[name]["d_head"][1])
        for m in list(G.modules()) + list(D.modules()):
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return G, D


def reference(name, X, Z, snapshots=()):
    spec = spec_of(name)
    G, D = initial_nets(name, spec)
    init = {k: v.detach().clone() for k, v in gan_torch.state_dict(G, D).items()}
    xf = gan_torch.real_as_float(X, spec["model"]["inputs"]["x"])
    ref = gan_torch.train(G, D, spec, xf, torch.from_numpy(Z), CASES[name]["steps"], snapshots)
    ref["init"], ref["final"] = init, gan_torch.state_dict(G, D)
    return spec, ref


# ---- the reference's own check: the DCGAN tutorial's loop, written out as it has it

def tutorial_loop(G, D, X, Z, steps):
    bce = F.binary_cross_entropy_with_logits
    opt_d = torch.optim.Adam(D.parameters(), lr=ADAM["lr"], betas=tuple(ADAM["betas"]), foreach=False)
    opt_g = torch.optim.Adam(G.parameters(), lr=ADAM["lr"], betas=tuple(ADAM["betas"]), foreach=False)
    d_losses, g_losses = [], []
    for s in range(steps):
        x, noise = X[s * B:(s + 1) * B], Z[s * B:(s + 1) * B]
        D.zero_grad()
        output = D(x).view(-1)
        errD_real = bce(output, torch.full((B,), 1.0))
        errD_real.backward()
        fake = G(noise)
        output = D(fake.detach()).view(-1)
        errD_fake = bce(output, torch.full((B,), 0.0))
        errD_fake.backward()
        errD = errD_real + errD_fake
        opt_d.step()
        G.zero_grad()
        output = D(fake).view(-1)
        errG = bce(output, torch.full((B,), 1.0))
        errG.backward()
        opt_g.step()
        d_losses.append(errD.item())
        g_losses.append(errG.item())
    return d_losses, g_losses


def self_check(name, X, Z, ref):
    spec = spec_of(name)
    G, D = initial_nets(name, spec)
    xf = gan_torch.real_as_float(X, spec["model"]["inputs"]["x"])
    d, g = tutorial_loop(G, D, xf, torch.from_numpy(Z), CASES[name]["steps"])
    worst = max(rel_diffs(d, ref["d_loss"]) + rel_diffs(g, ref["g_loss"]))
    wd, wname = worst_tensor(gan_torch.state_dict(G, D), ref["final"])
    ok = worst <= SELF_TOL and wd <= SELF_TOL
    print(f"{'ok  ' if ok else 'FAIL'} reference {name}: the DCGAN tutorial's loop gives its losses within "
          f"{worst:.1e} and weights within {wd:.1e} ({wname}; tolerance {SELF_TOL:g})")
    return ok


# ---- comparisons

def rel_diffs(ours, ref):
    return [abs(a - b) / abs(b) if b else abs(a) for a, b in zip(ours, ref)]


def tensor_diff(a, b):
    """max |a - b| / max |b| (an exact match of integer counts: 0 or inf)."""
    a, b = np.asarray(a), np.asarray(b)
    if b.dtype.kind == "i":
        return 0.0 if np.array_equal(a, b) else float("inf")
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(a.astype(np.float64) - b))) / scale


def worst_tensor(ours, ref):
    """(the largest tensor_diff, its name) over ref's tensors; (0, "-") if all agree."""
    return max([(0.0, "-")] + [(d, k) for k, v in ref.items()
                               for d in [tensor_diff(ours[k].detach().numpy(), v.detach().numpy())] if d > 0])


def records(run):
    path = os.path.join(run, "metrics.jsonl")
    recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    return recs, [r for r in recs if "event" not in r and "step" in r and "val_loss" not in r]


def check_records(name, run, steps):
    """The train records' shape: one a step, d_loss and g_loss, no loss; start and end."""
    recs, train = records(run)
    if not recs:
        print(f"FAIL {name}: no metrics.jsonl records in {os.path.relpath(run, ROOT)}")
        return False, train
    problems = []
    if recs[0].get("event") != "start":
        problems.append("the first record is not the start record")
    if recs[-1].get("event") != "end":
        problems.append("the last record is not the end record")
    if [r["step"] for r in train] != list(range(1, steps + 1)):
        problems.append(f"train records for steps {[r['step'] for r in train]}, expected 1..{steps}")
    for r in train:
        what = [f"no {k}" for k in ("d_loss", "g_loss", "lr", "time_s") if k not in r]
        what += ["a 'loss' key (a GAN's records have d_loss and g_loss)"] if "loss" in r else []
        if what:
            problems.append(f"step {r['step']}: {', '.join(what)}")
            break
    for p in problems:
        print(f"FAIL {name}: metrics.jsonl: {p}")
    return not problems, train


def compare_losses(name, train, ref):
    ok = True
    for key in ("d_loss", "g_loss"):
        ours = [r.get(key, float("nan")) for r in train]
        rel = rel_diffs(ours, ref[key])
        bad = [i for i, d in enumerate(rel) if not d <= TOL]
        ok &= not bad
        print(f"{'ok  ' if not bad else 'FAIL'} {name} {key}: step 1 {ours[0]:.6f} vs torch {ref[key][0]:.6f}, "
              f"step {len(ours)} {ours[-1]:.6f} vs {ref[key][-1]:.6f}; worst relative difference "
              f"{max(rel):.1e} (tolerance {TOL:g})")
        for i in bad[:3]:
            print(f"       step {i + 1}: {key} {ours[i]:.7f} vs torch {ref[key][i]:.7f} (relative {rel[i]:.1e})")
    return ok


def compare_weights(name, path, ref):
    """model.safetensors against torch's state_dict: each parameter and running
    statistic within TOL, num_batches_tracked exactly, no name missing or extra."""
    if not os.path.exists(path):
        print(f"FAIL {name} weights: no {os.path.relpath(path, ROOT)}")
        return False
    w = st_check.load(path)
    worst = {"params": (0.0, "-"), "state": (0.0, "-")}
    problems, counts = [], []
    for k, v in ref.items():
        b = v.detach().numpy()
        if k not in w:
            problems.append(f"{k}: missing")
            continue
        a = w[k]
        if a.shape != b.shape or (b.dtype.kind == "i") != (a.dtype.kind == "i"):
            problems.append(f"{k}: {a.dtype}{list(a.shape)}, torch {b.dtype}{list(b.shape)}")
            continue
        d = tensor_diff(a, b)
        if b.dtype.kind == "i":
            counts.append(f"{k} {int(a)}")
        else:
            part = "state" if k.endswith(("running_mean", "running_var")) else "params"
            if d > worst[part][0]:
                worst[part] = (d, k)
        if not d <= TOL:
            problems.append(f"{k}: " + (f"{int(a)} vs torch {int(b)}" if b.dtype.kind == "i" else
                                        f"max |ours - torch| / max |torch| = {d:.1e}"))
    problems += [f"{k}: not in torch's state_dict" for k in sorted(set(w) - set(ref))]
    ok = not problems
    n_state = sum(k.endswith(("running_mean", "running_var")) for k in ref)
    print(f"{'ok  ' if ok else 'FAIL'} {name} weights: {len(ref) - n_state - len(counts)} parameters, the worst "
          f"{worst['params'][1]} at {worst['params'][0]:.1e}" +
          (f"; {n_state} running statistics, the worst {worst['state'][1]} at {worst['state'][0]:.1e}; "
           f"num_batches_tracked {', '.join(counts)}" if n_state else "") + f" (tolerance {TOL:g})")
    for p in problems[:6]:
        print(f"       {p}")
    return ok


# ---- trainc's side

def trainc(name, args):
    """Runs a trainc command (its --out or -o removed first: nothing stale is judged);
    False (with what it said) if it fails."""
    for flag in ("--out", "-o"):
        if flag in args:
            shutil.rmtree(args[args.index(flag) + 1], ignore_errors=True)
            if os.path.exists(args[args.index(flag) + 1]):
                os.remove(args[args.index(flag) + 1])
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        print(f"FAIL {name}: {' '.join(os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in args)} "
              f"exited {r.returncode}:")
        print("       " + "\n       ".join(r.stdout.strip().splitlines()[-8:]))
    return r.returncode == 0


def prepare(name, ref):
    spec = spec_of(name)
    path, init = os.path.join(OUT, f"{name}.json"), os.path.join(OUT, f"{name}_init.safetensors")
    json.dump(spec, open(path, "w"), indent=1)
    st_check.save(init, {k: v.numpy() for k, v in ref["init"].items()})
    return path, ["--init", init, "--threads", "1", "--quiet"]


def parity(name, ref):
    path, common = prepare(name, ref)
    run = os.path.join(OUT, f"run_{name}")
    if not trainc(name, [TRAINC, "run", path, "--out", run] + common):
        return False
    ok, train = check_records(name, run, CASES[name]["steps"])
    ok &= compare_losses(name, train, ref) if train else False
    ok &= compare_weights(name, os.path.join(run, "model.safetensors"), ref["final"])
    return ok and frozen_kept(name, run, ref)


def ema(ref):
    """train.ema over the dcgan case (decay 0.9, every 3, start_step 4: takes after steps
    7, 10, ..., 25): ema.safetensors within TOL of the average of torch's snapshots taken
    as AveragedModel's EMA takes them (a copy, then lerp), both networks' weights;
    model.safetensors still the trained weights"""
    path, common = prepare("dcgan", ref)
    run = os.path.join(OUT, "run_ema")
    sets = ["--set", "ema.decay=0.9", "--set", "ema.every=3", "--set", "ema.start_step=4"]
    if not trainc("ema", [TRAINC, "run", path, "--out", run] + common + sets):
        return False
    avg = None
    for n in range(7, CASES["dcgan"]["steps"] + 1, 3):
        snap = ref["snapshots"][n]
        if avg is None:
            avg = {k: v.clone() for k, v in snap.items()}
        else:
            for k in avg:
                avg[k].lerp_(snap[k], 0.1)
    return (compare_weights("ema (the average)", os.path.join(run, "ema.safetensors"), avg) and
            compare_weights("ema (the trained weights)", os.path.join(run, "model.safetensors"),
                            ref["final"]))


def frozen_kept(name, run, ref):
    """train.freeze's tensors: their initial values, bit for bit; every other trained"""
    pats = CASES[name]["train"].get("freeze")
    if not pats:
        return True
    import fnmatch
    path = os.path.join(run, "model.safetensors")
    w = st_check.load(path) if os.path.exists(path) else {}
    frozen = [k for k in ref["init"] if any(fnmatch.fnmatchcase(k, p) for p in pats)]
    moved = [k for k in frozen if k not in w or not np.array_equal(w[k], ref["init"][k].numpy())]
    still = [k for k in ref["init"] if k not in frozen and k in w and np.array_equal(w[k], ref["init"][k].numpy())]
    ok = frozen and not moved and not still
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(frozen)} frozen tensors as they started, bit for bit"
          f"{'; moved: ' + ', '.join(moved) if moved else ''}{'; untrained: ' + ', '.join(still) if still else ''}")
    return bool(ok)


def built(ref):
    """The dcgan spec by a built trainer, BUILT_STEPS steps: trainc run's bits."""
    path, common = prepare("dcgan", ref)
    common += ["--set", f"max_steps={BUILT_STEPS}"]
    exe, jit, aot = (os.path.join(OUT, n) for n in ("trainer", "run_built_jit", "run_built_aot"))
    if not (trainc("built", [TRAINC, "build", path, "-o", exe]) and trainc("built", [exe, "--out", aot] + common)
            and trainc("built", [TRAINC, "run", path, "--out", jit] + common)):
        return False
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMING} for r in rs]
    ok, a = check_records("built", aot, BUILT_STEPS)
    b = records(jit)[1]
    same = strip(a) == strip(b)
    weights = [os.path.join(d, "model.safetensors") for d in (aot, jit)]
    same_w = all(map(os.path.exists, weights)) and open(weights[0], "rb").read() == open(weights[1], "rb").read()
    print(f"{'ok  ' if same and same_w else 'FAIL'} built: {len(a)} records "
          f"{'the same as' if same else 'other than'} trainc run's (timings aside), model.safetensors "
          f"{'the same bytes' if same_w else 'differs'}")
    for i, (ra, rb) in enumerate(zip(strip(a), strip(b))):
        if ra != rb:
            print(f"       step {i + 1}: built {ra}\n       run   {rb}")
            break
    if len(a) != len(b):
        print(f"       {len(a)} train records built, {len(b)} by trainc run")
    snap = {"d_loss": ref["d_loss"][:BUILT_STEPS], "g_loss": ref["g_loss"][:BUILT_STEPS]}
    ok &= compare_losses("built", a, snap) if a else False
    ok &= compare_weights("built", os.path.join(aot, "model.safetensors"), ref["snapshots"][BUILT_STEPS])
    return ok and same and same_w


def main():
    torch_only = "--torch-only" in sys.argv[1:]
    os.makedirs(OUT, exist_ok=True)
    X, Z = write_data()
    refs = {}
    for name in CASES:
        snaps = range(1, CASES[name]["steps"] + 1) if name == "dcgan" else ()   # (ema, built)
        spec, refs[name] = reference(name, X, Z, snapshots=snaps)
        r = refs[name]
        clipped = f"; clipping scaled D's gradients at {r['clipped']['D']} steps, G's at {r['clipped']['G']}" \
            if spec["train"]["grad_clip"] else ""
        print(f"     torch {name}: d_loss {' '.join(f'{v:.6f}' for v in r['d_loss'])}")
        print(f"     torch {name}: g_loss {' '.join(f'{v:.6f}' for v in r['g_loss'])}{clipped}")
    ok = all([self_check("dcgan", X, Z, refs["dcgan"]), self_check("batchnorm", X, Z, refs["batchnorm"])])
    h = refs["hinge"]["clipped"]
    if not (h["D"] and h["G"]):
        ok = False
        print(f"FAIL reference hinge: grad_clip scales D's gradients at {h['D']} steps and G's at {h['G']}: "
              f"it would test no clipping")
    if torch_only:
        return ok
    results = [parity(name, refs[name]) for name in CASES] + [built(refs["dcgan"]), ema(refs["dcgan"])]
    return ok and all(results)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
