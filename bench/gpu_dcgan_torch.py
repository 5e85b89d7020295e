"""PyTorch's side of the DCGAN benchmark (bench/gpu_dcgan.sh runs it on the device).

The generator and discriminator of specs/dcgan_fashion.json, built from the spec's
layer lists by tests/gan_torch.py (the parity test's builder, so both sides train the
same layers), initialized as the spec's init says (conv and transposed-conv weights
normal(0, 0.02), biases 0, batchnorm ones and zeros), trained with the step of
docs/spec.md's "GANs": z ~ N(0, 1) drawn on the device, fake = G(z); D on the real
batch and on fake detached, bce against 1 and 0, D's update; then D as it is now, its
parameters frozen (Lightning's toggle_optimizer), on fake, bce against 1, G's update.
AdamW as the spec (lr 2e-4, betas 0.5/0.999, no weight decay), fused on a GPU. The real
samples: the u8 images held on the device, a batch sliced and converted each step as
trainc's loader does (x * scale + shift), channels_last.

Modes (one per process; each prints one JSON line):
  eager          the modules as written: channels_last, cudnn.benchmark, fused AdamW
  compile        torch.compile of G and of D (--compile-mode, default max-autotune,
                 which replays CUDA graphs itself), fullgraph=True, or False when the
                 full graph fails (the record says which); in another mode than
                 max-autotune the record's impl is torch+compile:MODE+PRECISION
  graph          eager, the whole step captured once in a torch.cuda.graph and
                 replayed (capturable fused AdamW; the batch copied into the graph's
                 input): the host's per-step cost gone, as BENCHMARKING.md asks for
                 small models
  compile+graph  compile (mode max-autotune-no-cudagraphs) inside the whole-step capture
  lightning      PyTorch Lightning's own manual-optimization GAN loop (its docs' GAN
                 example: automatic_optimization False, two optimizers,
                 toggle_optimizer, manual_backward), Trainer precision 32-true or
                 bf16-mixed, the same modules, data already on the device

--bf16: bf16 autocast (Lightning: precision bf16-mixed); else fp32 with TF32 off for
matmuls and cuDNN (trainc's fp32 is fp32 arithmetic).

usage: gpu_dcgan_torch.py BATCH [--mode M] [--bf16] [--steps N] [--warm W]
           [--device cuda|cpu] [--data TRAIN_X.npy] [--compile-mode M] [--spec PATH]
prints: samples/s over the timed steps (device synchronized at both clock reads), the
first step's wall time from the process's start (imports included; compilation and
autotuning included), peak memory (torch.cuda.max_memory_allocated), the last losses;
or "skipped" with the reason (no torch.compile, no GPU, no Lightning), or "error".
"""
import json, os, sys, time

T_START = time.perf_counter()
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import gan_torch  # noqa: E402


def args():
    a = sys.argv[1:]

    def opt(name, default):
        return a[a.index(name) + 1] if name in a else default
    return dict(B=int(a[0]), mode=opt("--mode", "eager"), bf16="--bf16" in a,
                steps=int(opt("--steps", 200)), warm=int(opt("--warm", 20)),
                device=opt("--device", "cuda"), data=opt("--data", None),
                compile_mode=opt("--compile-mode", "max-autotune"),
                spec=opt("--spec", os.path.join(ROOT, "specs", "dcgan_fashion.json")))


def nets(spec, dev):
    """G and D from the spec, initialized as its init, channels_last on the device."""
    G, D = gan_torch.nets(spec["model"])
    std = spec["model"].get("init", {}).get("std", 0.02)
    for m in list(G.modules()) + list(D.modules()):
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return (G.to(dev, memory_format=torch.channels_last), D.to(dev, memory_format=torch.channels_last))


def optimizers(spec, G, D, dev, capturable=False):
    o = spec["train"]["optimizer"]
    kw = dict(lr=o["lr"], betas=tuple(o["betas"]), weight_decay=o.get("weight_decay", 0.0))
    if dev == "cuda":
        kw["fused"] = True
        if capturable:
            kw["capturable"] = True
    return torch.optim.AdamW(G.parameters(), **kw), torch.optim.AdamW(D.parameters(), **kw)


class Real:
    """The real images, u8 on the device; batch(i) is the i-th batch (wrapping) as
    floats, [B, C, H, W] channels_last, x * scale + shift as trainc's loader."""

    def __init__(self, spec, path, B, dev):
        inp = spec["model"]["inputs"]["x"]
        shape = tuple(inp["shape"])
        if path and os.path.exists(path):
            raw = np.load(path, mmap_mode="r")
            raw = np.array(raw[:max(B, min(len(raw), 64 * B))]).reshape((-1,) + shape)   # a copy
        else:   # random images where the data set is absent: the same work
            raw = np.random.default_rng(0).integers(0, 256, (4 * B,) + shape, dtype=np.uint8)
        self.X = torch.from_numpy(raw).to(dev)
        self.scale, self.shift, self.B = float(inp.get("scale", 1.0)), float(inp.get("shift", 0.0)), B
        self.n = len(self.X) // B

    def batch(self, i):
        j = i % self.n
        x = self.X[j * self.B:(j + 1) * self.B].float() * self.scale + self.shift
        return x.contiguous(memory_format=torch.channels_last)


def make_step(G, D, opt_g, opt_d, B, latent, dev, bf16, graph=False):
    """One optimizer step of the pair on the real batch x, in the spec's order; returns
    (errD, errG) as device tensors (no host wait). A step to capture in a CUDA graph
    keeps autocast from caching casts across the capture (PyTorch's CUDA graph notes)."""
    bce = F.binary_cross_entropy_with_logits
    Dp = list(D.parameters())
    amp = dict(device_type=dev, dtype=torch.bfloat16, enabled=bf16, cache_enabled=not graph)

    def step(x):
        z = torch.randn((B,) + latent, device=dev)
        with torch.autocast(**amp):
            fake = G(z)
            d_real, d_fake = D(x), D(fake.detach())
        errD = bce(d_real.float(), torch.ones_like(d_real, dtype=torch.float32)) + \
            bce(d_fake.float(), torch.zeros_like(d_fake, dtype=torch.float32))
        errD.backward()
        opt_d.step()
        opt_d.zero_grad(set_to_none=True)
        for p in Dp:            # toggle: the G phase gives D no gradient
            p.requires_grad_(False)
        with torch.autocast(**amp):
            d_gen = D(fake)
        errG = bce(d_gen.float(), torch.ones_like(d_gen, dtype=torch.float32))
        errG.backward()
        for p in Dp:
            p.requires_grad_(True)
        opt_g.step()
        opt_g.zero_grad(set_to_none=True)
        return errD.detach(), errG.detach()
    return step


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def compiled(m, mode, fullgraph):
    return torch.compile(m, mode=mode, fullgraph=fullgraph)


def run_plain(a, spec, rec):
    """eager, compile, graph, compile+graph: warm-up, then the timed steps."""
    dev, B, mode = a["device"], a["B"], a["mode"]
    latent = tuple(spec["model"]["gan"]["latent"]["shape"])
    torch.manual_seed(0)
    G, D = nets(spec, dev)
    graph = mode.endswith("graph")
    opt_g, opt_d = optimizers(spec, G, D, dev, capturable=graph)
    real = Real(spec, a["data"], B, dev)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    fullgraph = True
    cmode = "max-autotune-no-cudagraphs" if mode == "compile+graph" else a["compile_mode"]
    Gc, Dc = (compiled(G, cmode, True), compiled(D, cmode, True)) if mode.startswith("compile") else (G, D)
    step = make_step(Gc, Dc, opt_g, opt_d, B, latent, dev, a["bf16"], graph)
    # the modes whose compiled code replays CUDA graphs itself (cudagraph trees): each
    # step a new generation, so the last step's outputs may be overwritten
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    if not (mode == "compile" and cmode in ("max-autotune", "reduce-overhead")):
        mark = None
    first = None
    i = 0

    def eager_step():
        nonlocal i
        if mark:
            mark()
        out = step(real.batch(i))
        i += 1
        return out
    try:
        errs = eager_step()
    except Exception as e:   # the full graph failed: dynamo with graph breaks
        if not mode.startswith("compile"):
            raise
        rec["fullgraph_error"] = repr(e)[:300]
        fullgraph = False
        torch._dynamo.reset()
        Gc, Dc = compiled(G, cmode, False), compiled(D, cmode, False)
        step = make_step(Gc, Dc, opt_g, opt_d, B, latent, dev, a["bf16"], graph)
        errs = eager_step()
    sync(dev)
    first = time.perf_counter() - T_START
    for _ in range(a["warm"] - 1):
        errs = eager_step()
    run = eager_step
    if graph:   # capture the whole step once (after the warm-up, on a side stream)
        x_static = real.batch(0).clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                errs = step(x_static)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            errs = step(x_static)

        def run():
            nonlocal i
            x_static.copy_(real.batch(i))
            i += 1
            g.replay()
            return errs
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(a["steps"]):
        errs = run()
    sync(dev)
    dt = time.perf_counter() - t0
    rec.update(samples_per_s=round(a["steps"] * B / dt, 1), first_step_s=round(first, 3),
               warm_s=round(t0 - T_START, 3), d_loss=float(errs[0]), g_loss=float(errs[1]))
    if mode.startswith("compile"):
        rec.update(fullgraph=fullgraph, compile_mode=cmode)


def run_lightning(a, spec, rec):
    """Lightning's manual-optimization GAN loop over warm + steps batches; the clock
    read (device synchronized) at the start of batch `warm` and at the end of the last."""
    try:
        import lightning.pytorch as L
    except ImportError:
        try:
            import pytorch_lightning as L
        except ImportError:
            rec["skipped"] = "neither lightning nor pytorch_lightning is installed here"
            return
    dev, B = a["device"], a["B"]
    latent = tuple(spec["model"]["gan"]["latent"]["shape"])
    torch.manual_seed(0)
    G, D = nets(spec, dev)
    real = Real(spec, a["data"], B, dev)
    n_batches = a["warm"] + a["steps"]

    class Batches(torch.utils.data.IterableDataset):   # the device's batches, as the others
        def __iter__(self):
            for i in range(n_batches):
                yield real.batch(i)

    class GAN(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.G, self.D = G, D
            self.errs = None

        def configure_optimizers(self):
            return list(optimizers(spec, self.G, self.D, dev))

        def training_step(self, x, idx):
            opt_g, opt_d = self.optimizers()
            bce = F.binary_cross_entropy_with_logits
            z = torch.randn((x.shape[0],) + latent, device=x.device)
            fake = self.G(z)
            self.toggle_optimizer(opt_d)
            d_real, d_fake = self.D(x), self.D(fake.detach())
            errD = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
            self.manual_backward(errD)
            opt_d.step()
            opt_d.zero_grad(set_to_none=True)
            self.untoggle_optimizer(opt_d)
            self.toggle_optimizer(opt_g)
            d_gen = self.D(fake)
            errG = bce(d_gen, torch.ones_like(d_gen))
            self.manual_backward(errG)
            opt_g.step()
            opt_g.zero_grad(set_to_none=True)
            self.untoggle_optimizer(opt_g)
            self.errs = (errD.detach(), errG.detach())

    clock = {}

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, idx):
            if idx == a["warm"]:
                sync(dev)
                clock["t0"] = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, idx):
            if idx == 0:
                sync(dev)
                clock["first"] = time.perf_counter() - T_START
            if idx == n_batches - 1:
                sync(dev)
                clock["t1"] = time.perf_counter()

    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    module = GAN()
    trainer = L.Trainer(accelerator="gpu" if dev == "cuda" else "cpu", devices=1,
                        precision="bf16-mixed" if a["bf16"] else "32-true", max_epochs=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0,
                        benchmark=dev == "cuda", callbacks=[Clock()])
    trainer.fit(module, torch.utils.data.DataLoader(Batches(), batch_size=None))
    rec.update(samples_per_s=round(a["steps"] * B / (clock["t1"] - clock["t0"]), 1),
               first_step_s=round(clock["first"], 3), warm_s=round(clock["t0"] - T_START, 3),
               d_loss=float(module.errs[0]), g_loss=float(module.errs[1]), lightning=L.__version__)


def main():
    a = args()
    with open(a["spec"]) as f:
        spec = json.load(f)
    prec = "bf16" if a["bf16"] else "fp32"
    row = a["mode"]
    if row == "compile" and a["compile_mode"] != "max-autotune":
        row = "compile:" + a["compile_mode"]
    rec = {"impl": f"torch+{row}+{prec}", "mode": a["mode"], "precision": prec, "batch": a["B"],
           "steps": a["steps"], "warm": a["warm"], "torch": torch.__version__, "device": a["device"]}
    if a["device"] == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    if a["device"] == "cuda" and not torch.cuda.is_available():
        rec["skipped"] = "no CUDA device"
    elif a["mode"] in ("graph", "compile+graph") and a["device"] != "cuda":
        rec["skipped"] = "CUDA graphs need a GPU"
    elif a["mode"].startswith("compile") and not hasattr(torch, "compile"):
        rec["skipped"] = f"torch {torch.__version__} has no torch.compile"
    else:
        try:
            (run_lightning if a["mode"] == "lightning" else run_plain)(a, spec, rec)
            if a["device"] == "cuda":
                rec.update(peak_bytes=torch.cuda.max_memory_allocated(), device=torch.cuda.get_device_name())
        except Exception as e:   # one line for the table's notes; the traceback on stderr
            import traceback
            traceback.print_exc()
            rec["error"] = repr(e)[:500]
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
