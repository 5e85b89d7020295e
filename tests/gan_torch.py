"""gan_torch.py: the PyTorch reference of a trainc "gan" model (SPEC section 2, a pair
trained against each other), for the parity tests (tests/gan_parity.py) and any other
that needs the step as PyTorch computes it.

    G, D = nets(spec["model"])            # nn.Sequential each: state_dict keys are trainc's
    state_dict(G, D)                       # {"generator.0.weight": ..., "discriminator.1.running_mean": ...}
    ref = train(G, D, spec, X, Z, steps)   # ref["d_loss"], ref["g_loss"]: one per optimizer step

One optimizer step with accumulation A (the DCGAN tutorial's step, split into micro-
batches as Lightning's manual-optimization GAN example does it): for each micro-batch
m, fake = G(z_m) in train mode; the discriminator's phase errD = crit(D(x_m), real) +
crit(D(fake.detach()), fake), (errD / A).backward(); on the last m, D's gradients are
clipped by their own global norm, D's optimizer steps and D's gradients are zeroed.
Then the generator's phase with D as it is at that moment: errG = critG(D(fake)),
(errG / A).backward() with D's parameters frozen (Lightning's toggle_model: D gets no
gradient here); on the last m, G's gradients are clipped, G's optimizer steps, G's
gradients are zeroed. bce: BCEWithLogitsLoss on D's one logit, real 1 and fake 0, and
the non-saturating G loss bce(D(fake), 1); hinge: errD = mean(relu(1 - D(x))) +
mean(relu(1 + D(fake))), errG = -mean(D(fake)). A batchnorm in D sees three train-
mode forwards per micro-batch (real, fake detached, fake after D's update), one in G.
The step's d_loss and g_loss are the means over its micro-batches of errD and errG.

Optimizers as trainc's (SPEC section 3, runtime/config.c's defaults for a missing key):
adamw (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0.01) and sgd (momentum 0,
nesterov false, weight_decay 0.01), weight decay on parameters of rank >= 2 only;
"optimizer" is the generator's, and the discriminator's unless "optimizer_d" is given.
Only the constant schedule. Micro-batch m of step s is rows (s A + m) B .. + B of X and
Z (the loader with shuffle off); X is the real input already converted to float.
"""
import fnmatch
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
SGD = {"lr": 1e-3, "momentum": 0.0, "nesterov": False, "weight_decay": 0.01}


def _conv_out(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def build(layers, in_shape):
    """nn.Sequential of a trainc layer list on per-sample input shape in_shape (its
    state_dict keys are the spec's names of unnamed top-level layers), and the output's
    per-sample shape."""
    mods, shape = [], list(in_shape)
    for l in layers:
        op = l["op"]
        if op == "linear":
            mods.append(nn.Linear(shape[-1], l["out"], bias=l.get("bias", True)))
            shape[-1] = l["out"]
        elif op in ("relu", "tanh", "sigmoid", "silu"):
            mods.append({"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "silu": nn.SiLU}[op]())
        elif op == "leaky_relu":
            mods.append(nn.LeakyReLU(l.get("negative_slope", 0.01)))
        elif op == "gelu":
            mods.append(nn.GELU(approximate=l.get("approximate", "none")))
        elif op == "batchnorm":
            bn = nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d
            mods.append(bn(shape[0], eps=l.get("eps", 1e-5), momentum=l.get("momentum", 0.1),
                           affine=l.get("affine", True)))
        elif op == "flatten":
            mods.append(nn.Flatten())
            shape = [int(np.prod(shape))]
        elif op == "conv2d":
            k, s, p = l["kernel"], l.get("stride", 1), l.get("padding", 0)
            mods.append(nn.Conv2d(shape[0], l["out"], k, s, p, groups=l.get("groups", 1),
                                  bias=l.get("bias", True)))
            shape = [l["out"], _conv_out(shape[1], k, s, p), _conv_out(shape[2], k, s, p)]
        elif op == "conv_transpose2d":
            k, s, p, op_ = l["kernel"], l.get("stride", 1), l.get("padding", 0), l.get("output_padding", 0)
            mods.append(nn.ConvTranspose2d(shape[0], l["out"], k, s, p, output_padding=op_,
                                           bias=l.get("bias", True)))
            shape = [l["out"]] + [(n - 1) * s - 2 * p + k + op_ for n in shape[1:]]
        else:
            raise ValueError(f"gan_torch: op {op} is not in this reference")
    return nn.Sequential(*mods), shape


def nets(model):
    """The generator and the discriminator of a spec's "model" (a "gan" form), each in
    train mode, initialized by PyTorch's defaults from torch's current RNG."""
    gan = model["gan"]
    real = model["inputs"]["x"]["shape"]
    G, out = build(gan["generator"], gan["latent"]["shape"])
    if out != list(real):
        raise ValueError(f"gan_torch: the generator makes {out}, the real samples are {real}")
    D, logit = build(gan["discriminator"], real)
    if logit != [1]:
        raise ValueError(f"gan_torch: the discriminator's output is {logit}, not one logit")
    return G.train(), D.train()


def state_dict(G, D):
    """trainc's names: the nn.Sequential keys under generator. and discriminator."""
    out = {f"generator.{k}": v for k, v in G.state_dict().items()}
    out.update({f"discriminator.{k}": v for k, v in D.state_dict().items()})
    return out


def optimizer(net, o):
    """torch's optimizer for trainc's optimizer spec o (decay on rank >= 2 only)."""
    kind = o.get("type", "adamw")
    base = dict(ADAMW if kind == "adamw" else SGD)
    unknown = set(o) - set(base) - {"type"}
    if kind not in ("adamw", "sgd") or unknown:
        raise ValueError(f"gan_torch: optimizer {kind} with {sorted(unknown)}")
    base.update({k: v for k, v in o.items() if k != "type"})
    wd = base.pop("weight_decay")
    groups = [{"params": [p for p in net.parameters() if p.dim() >= 2], "weight_decay": wd},
              {"params": [p for p in net.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=base["lr"], betas=tuple(base["betas"]), eps=base["eps"],
                                 foreach=False)
    return torch.optim.SGD(groups, lr=base["lr"], momentum=base["momentum"], nesterov=base["nesterov"],
                           foreach=False)


def losses(kind):
    """(errD(d_real, d_fake), errG(d_fake)) on D's logits [B, 1]."""
    if kind == "bce":
        bce = F.binary_cross_entropy_with_logits
        return (lambda r, f: bce(r, torch.ones_like(r)) + bce(f, torch.zeros_like(f)),
                lambda f: bce(f, torch.ones_like(f)))
    if kind == "hinge":
        return (lambda r, f: F.relu(1 - r).mean() + F.relu(1 + f).mean(), lambda f: -f.mean())
    raise ValueError(f"gan_torch: loss {kind}")


def _clip(net, clip, algo="norm"):
    """clip_grad_norm_ (or, algo "value", clip_grad_value_) on the net's own gradients;
    whether it changed them."""
    if clip is None:
        return False
    if algo == "value":
        past = any(bool((p.grad.abs() > clip).any()) for p in net.parameters() if p.grad is not None)
        torch.nn.utils.clip_grad_value_(net.parameters(), clip)
        return past
    return float(torch.nn.utils.clip_grad_norm_(net.parameters(), clip)) > clip


def train(G, D, spec, X, Z, steps, snapshots=()):
    """`steps` optimizer steps of the pair on float tensors X [N, *real] and Z [N,
    *latent] (rows in loader order). Returns {"d_loss": [...], "g_loss": [...],
    "clipped": {"D": n, "G": n} (steps whose clipping scaled the gradients),
    "snapshots": {step: state_dict copy after that step, for each step in snapshots}}."""
    t = spec["train"]
    if t.get("schedule", {}).get("type", "constant") != "constant":
        raise ValueError("gan_torch: only the constant schedule")
    B, A, clip = t["batch_size"], t.get("accumulate", 1), t.get("grad_clip")
    algo = t.get("grad_clip_algorithm", "norm")
    # train.freeze: the parameters its patterns match get no gradient, so no update
    frozen = set()
    for net, pre in ((G, "generator."), (D, "discriminator.")):
        for k, p in net.named_parameters():
            if any(fnmatch.fnmatchcase(pre + k, pat) for pat in t.get("freeze") or []):
                p.requires_grad_(False)
                frozen.add(id(p))
    opt_g = optimizer(G, t.get("optimizer", {}))
    opt_d = optimizer(D, t.get("optimizer_d", t.get("optimizer", {})))
    err_d, err_g = losses(spec["model"]["gan"]["loss"])
    out = {"d_loss": [], "g_loss": [], "clipped": {"D": 0, "G": 0}, "snapshots": {}}
    opt_g.zero_grad(set_to_none=False)
    opt_d.zero_grad(set_to_none=False)
    for s in range(steps):
        d_sum = g_sum = 0.0
        for m in range(A):
            rows = slice((s * A + m) * B, (s * A + m + 1) * B)
            x, z = X[rows], Z[rows]
            fake = G(z)
            errD = err_d(D(x), D(fake.detach()))
            (errD / A).backward()
            if m == A - 1:
                out["clipped"]["D"] += _clip(D, clip, algo)
                opt_d.step()
                opt_d.zero_grad(set_to_none=False)
            for p in D.parameters():   # toggle_model: the G phase leaves D's gradients alone
                p.requires_grad_(False)
            errG = err_g(D(fake))
            (errG / A).backward()
            for p in D.parameters():
                p.requires_grad_(id(p) not in frozen)
            if m == A - 1:
                out["clipped"]["G"] += _clip(G, clip, algo)
                opt_g.step()
                opt_g.zero_grad(set_to_none=False)
            d_sum += errD.item()
            g_sum += errG.item()
        out["d_loss"].append(d_sum / A)
        out["g_loss"].append(g_sum / A)
        if s + 1 in snapshots:
            out["snapshots"][s + 1] = {k: v.detach().clone() for k, v in state_dict(G, D).items()}
    return out


def real_as_float(raw, inp):
    """A u8/f32 numpy array converted as trainc's loader does: x * scale + shift in f32."""
    x = torch.from_numpy(np.array(raw)).float()   # a copy: torch warns on read-only arrays
    if "scale" in inp:
        x = x * torch.tensor(np.float32(inp["scale"]))
    if "shift" in inp:
        x = x + torch.tensor(np.float32(inp["shift"]))
    return x
