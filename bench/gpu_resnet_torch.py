"""PyTorch's side of bench/gpu_resnet.sh: a spec's model and recipe in PyTorch, timed.

    gpu_resnet_torch.py SPEC tta [BATCH] [--target 0.94] [--max-time S] [--epochs N]
    gpu_resnet_torch.py SPEC speed BATCH [--steps 100] [--warm 20]
    options: --compile [--mode max-autotune] | --graph;  --precision fp32|bf16-mixed
             --device cuda|cpu --data DIR --t0 UNIX_SECONDS --threads N

The model is the spec's layers built by tests/spec_torch.py (the same modules
tests/resnet_parity.py checks step by step against trainc), channels_last; the loss the
spec's (cross entropy with its label smoothing); the optimizer the spec's (SGD with
Nesterov momentum, or AdamW; weight decay on parameters of rank 2 and more only, as
trainc's), fused where this PyTorch has it, else foreach; the learning rate per step by
trainc's formula (docs/spec.md, The learning rate) over epochs x (N // batch) steps.
The data as trainc's GPU loader holds it: the u8 training set on the device, a
permutation an epoch (the last partial batch dropped, loader.drop_last), and the spec's
loader.augment on the device (random crop with zero padding, horizontal flip: one
offset pair and one coin a sample, by index gathers), scaled by the input's `scale`.

fp32 is fp32 arithmetic, TF32 off for matmuls and cuDNN, as trainc's fp32 and
bench/gpu_torch.py. bf16-mixed is bf16 autocast around the model (the loss in fp32).
--compile: torch.compile(fullgraph=True, mode=--mode) of the model with its loss (the
step that torch.compile can take whole: the backward is AOTAutograd's, the optimizer
runs fused outside); the default mode max-autotune also replays the compiled forward
and backward as CUDA graphs (cudagraph trees). The augmentation stays eager.
--graph (eager, where the step is small): after 3 eager steps on a side stream the whole
step (batch gather, augmentation with its random draws, forward, backward, the fused
optimizer reading its rate from a device tensor) is captured as one CUDA graph and
replayed (torch.cuda.graph's whole-network recipe); the record's impl is then
eager+graph, or eager with a graph_note saying why nothing was captured.

tta: trains the spec's recipe (at BATCH instead of its batch_size when given), validates on the spec's val set after every epoch in
eval mode (the running statistics; eager, no autocast change) and stops once the
accuracy is at least --target (correct >= ceil(target x N)), or after --max-time
seconds from --t0, or after the epochs. One JSON line: the accuracy by epoch with its
time from --t0 (the shell's launch time: the process's start, imports and compilation
included), reached or not.

speed: WARM steps, then STEPS steps timed (the device synchronized at both clock reads),
as bench/gpu_torch.py; one JSON line: samples/s, the time from --t0 to the end of the
first step (compilation included), torch.cuda.max_memory_allocated (the data sets held
on the device included: data_bytes says how much).
"""
import argparse, json, math, os, sys, time

T_START = time.time()
import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import spec_torch   # noqa: E402  the spec's layers as torch modules

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("spec")
    p.add_argument("what", choices=("tta", "speed"))
    p.add_argument("batch", type=int, nargs="?")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--mode", default="max-autotune")
    p.add_argument("--graph", action="store_true", help="eager: the whole step as one CUDA graph")
    p.add_argument("--precision", default=None, help="fp32 or bf16-mixed (default: the spec's)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--data", default=None, help="a folder with train_x.npy ... test_y.npy (default: the spec's)")
    p.add_argument("--t0", type=float, default=T_START)
    p.add_argument("--target", type=float, default=0.94)
    p.add_argument("--max-time", type=float, default=float("inf"))
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warm", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    return p.parse_args()


def load_data(spec_path, train, folder, device):
    """The training and validation arrays on the device: x as stored (u8), y as int64."""
    if folder:
        paths = {k: os.path.join(folder, f"{k}.npy") for k in ("train_x", "train_y", "test_x", "test_y")}
    else:
        base = os.path.dirname(os.path.abspath(spec_path))
        d = train["data"]
        paths = {"train_x": d["train"]["x"], "train_y": d["train"]["y"], "test_x": d["val"]["x"], "test_y": d["val"]["y"]}
        paths = {k: os.path.join(base, v) for k, v in paths.items()}
    t = {k: torch.from_numpy(np.load(v)).to(device) for k, v in paths.items()}
    return t["train_x"], t["train_y"].long(), t["test_x"], t["test_y"].long()


def optimizer(model, opt_spec, device, tensor_lr=False):
    """The spec's optimizer: decay on rank >= 2 only; fused where this PyTorch has it.
    tensor_lr: the fused one's rate a device tensor (one, shared by the groups), which a
    captured CUDA graph reads at each replay."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    kind = opt_spec.get("type", "adamw")
    wd = opt_spec.get("weight_decay", 0.01 if kind == "adamw" else 0.0)
    groups = [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
    lr = opt_spec.get("lr", 1e-3)
    if kind == "sgd":
        make = lambda lr, **kw: torch.optim.SGD(groups, lr=lr, momentum=opt_spec.get("momentum", 0.0),
                                                nesterov=opt_spec.get("nesterov", False), **kw)
    elif kind == "adamw":
        make = lambda lr, **kw: torch.optim.AdamW(groups, lr=lr, betas=tuple(opt_spec.get("betas", (0.9, 0.999))),
                                                  eps=opt_spec.get("eps", 1e-8), **kw)
    else:
        raise SystemExit(f"gpu_resnet_torch: optimizer {kind} is not handled")
    for kw in ({"fused": True}, {"foreach": True}):
        if kw.get("fused") and device != "cuda" and int(torch.__version__.split(".")[0]) < 2:
            continue   # 1.x's fused kernels are CUDA's only
        try:
            rate = torch.tensor(float(lr), device=device) if tensor_lr and kw.get("fused") else lr
            return make(rate, **kw), next(iter(kw))
        except (TypeError, RuntimeError, ValueError):   # this PyTorch has no fused kernel for it
            pass
    return make(lr), "single-tensor"


def lr_at(sch, lr, step, total):
    """trainc's rate at optimizer step `step` (from 0) of `total`."""
    warm, f, kind = sch.get("warmup_steps", 0), sch.get("final_lr_frac", 0.0), sch.get("type", "constant")
    if step < warm:
        return lr * (step + 1) / warm
    p = min(max((step - warm) / max(total - warm, 1), 0.0), 1.0)
    if kind == "cosine":
        return lr * (f + (1 - f) * (1 + math.cos(math.pi * p)) / 2)
    if kind == "linear":
        return lr * (1 - (1 - f) * p)
    if kind == "step":
        return lr * sch.get("gamma", 0.1) ** ((step - warm) // sch.get("every_steps", 1000))
    return lr


def augment(x, aug):
    """loader.augment on a batch [B, C, H, W]: a window at a random offset in [0, 2P] of
    the image padded by P zeros, then a left-right mirror with probability 1/2."""
    if not aug:
        return x
    B, C, H, W = x.shape
    dev = x.device
    pad = (aug.get("random_crop") or {}).get("padding", 0)
    rows = torch.arange(H, device=dev).expand(B, H)
    cols = torch.arange(W, device=dev).expand(B, W)
    if pad:
        x = F.pad(x, (pad, pad, pad, pad))
        rows = rows + torch.randint(0, 2 * pad + 1, (B, 1), device=dev)
        cols = cols + torch.randint(0, 2 * pad + 1, (B, 1), device=dev)
    if aug.get("hflip"):
        cols = torch.where(torch.rand(B, 1, device=dev) < 0.5, cols.flip(1), cols)
    b = torch.arange(B, device=dev)[:, None, None, None]
    c = torch.arange(C, device=dev)[None, :, None, None]
    return x[b, c, rows[:, None, :, None], cols[:, None, None, :]]


class Run:
    """The model, optimizer, data and one training step of a spec's recipe."""

    GRAPH_WARM = 3   # eager steps on a side stream before the capture (PyTorch's recipe)

    def __init__(self, a):
        spec = json.load(open(a.spec))
        self.a, self.model_spec, self.train = a, spec["model"], spec["train"]
        self.name = self.model_spec["name"]
        self.dev = a.device
        self.precision = a.precision or self.train.get("precision", "fp32")
        self.bf16 = self.precision == "bf16-mixed"
        torch.manual_seed(self.train.get("seed", 1337))
        xin = self.model_spec["inputs"]["x"]
        self.scale = float(np.float32(xin.get("scale", 1.0)))
        self.model = spec_torch.build(self.model_spec["layers"], xin["shape"]).to(self.dev)
        self.model = self.model.to(memory_format=torch.channels_last)
        # --graph: the whole step (batch gather, augmentation, forward, backward, the
        # fused optimizer with its rate in a device tensor) captured once as a CUDA graph
        # and replayed; eager only, and only on CUDA
        self.graph_wanted = a.graph and not a.compile and self.dev == "cuda"
        self.graph_note = "no CUDA graphs off CUDA" if a.graph and self.dev != "cuda" else None
        self.opt, self.opt_kind = optimizer(self.model, self.train.get("optimizer", {}), self.dev,
                                            tensor_lr=self.graph_wanted)
        rate = self.opt.param_groups[0]["lr"]
        self.lr_t = rate if isinstance(rate, torch.Tensor) else None
        if self.graph_wanted and self.lr_t is None:
            self.graph_wanted, self.graph_note = False, "no fused optimizer with a tensor rate: not captured"
        self.graph, self.done = None, 0
        self.side = torch.cuda.Stream() if self.graph_wanted else None
        self.X, self.Y, self.VX, self.VY = load_data(a.spec, self.train, a.data, self.dev)
        self.aug = (self.train.get("loader") or {}).get("augment")
        loss = spec_torch.loss_fn(self.model_spec)
        model, bf16, dev, cache = self.model, self.bf16, self.dev, not self.graph_wanted

        def fwd(x, y):   # (autocast's weight cache must be off in a captured graph)
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16, cache_enabled=cache):
                out = model(x)
            return loss(out.float(), y)
        self.fwd = torch.compile(fwd, fullgraph=True, mode=a.mode) if a.compile else fwd
        self.mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    def batch(self, idx, train=True):
        x = self.X[idx] if train else self.VX[idx]
        x = x.float() * self.scale
        if train:
            x = augment(x, self.aug)
        return x.contiguous(memory_format=torch.channels_last)

    def set_lr(self, lr):
        if self.lr_t is not None:
            self.lr_t.fill_(lr)
        else:
            for g in self.opt.param_groups:
                g["lr"] = lr

    def eager_step(self, idx):
        x, y = self.batch(idx), self.Y[idx]
        if self.mark and self.a.compile:
            self.mark()
        loss = self.fwd(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def capture(self, idx):
        """The whole step as a CUDA graph reading static_idx (and the rate tensor): its
        gradients are written, not accumulated, as they are None when captured."""
        self.static_idx = idx.clone()
        self.opt.zero_grad(set_to_none=True)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self.static_loss = self.eager_step(self.static_idx)
        self.graph = g

    def step(self, idx, lr):
        self.set_lr(lr)
        self.done += 1
        if self.graph is None and self.graph_wanted and self.done > self.GRAPH_WARM:
            try:
                self.capture(idx)
            except Exception as e:   # recorded; the run goes on eager
                self.graph_wanted, self.graph_note = False, f"capture failed: {e!r}"[:400]
                torch.cuda.synchronize()
        if self.graph is not None:
            self.static_idx.copy_(idx)
            self.graph.replay()
            return self.static_loss
        if not self.graph_wanted:
            return self.eager_step(idx)
        self.side.wait_stream(torch.cuda.current_stream())   # warm-up off the default stream
        with torch.cuda.stream(self.side):
            loss = self.eager_step(idx)
        torch.cuda.current_stream().wait_stream(self.side)
        return loss

    def accuracy(self):
        """Correct answers on the val set in eval mode (eager, the running statistics)."""
        self.model.eval()
        correct = torch.zeros((), dtype=torch.long, device=self.dev)
        with torch.no_grad(), torch.autocast(self.dev, dtype=torch.bfloat16, enabled=self.bf16):
            for i in range(0, len(self.VX), 1000):
                idx = torch.arange(i, min(i + 1000, len(self.VX)), device=self.dev)
                correct += (self.model(self.batch(idx, train=False)).argmax(1) == self.VY[idx]).sum()
        self.model.train()
        return int(correct)

    def sync(self):
        if self.dev == "cuda":
            torch.cuda.synchronize()

    def record(self, **kw):
        impl = "compile" if self.a.compile else "eager+graph" if self.graph is not None else "eager"
        r = {"impl": impl, "model": self.name, "precision": self.precision, "optimizer": self.opt_kind,
             "device": torch.cuda.get_device_name() if self.dev == "cuda" else "cpu", "torch": torch.__version__}
        if self.a.compile:
            r["mode"] = self.a.mode
        if self.graph_note:
            r["graph_note"] = self.graph_note
        r.update(kw)
        return r


def tta(run, a):
    B = a.batch or run.train.get("batch_size", 32)
    epochs = a.epochs or run.train.get("epochs", 1)
    per_epoch = len(run.X) // B
    total, lr0, sch = epochs * per_epoch, run.train.get("optimizer", {}).get("lr", 1e-3), run.train.get("schedule", {})
    need = math.ceil(a.target * len(run.VX) - 1e-9)
    curve, step, reached, stopped = [], 0, False, None
    for epoch in range(epochs):
        perm = torch.randperm(len(run.X), device=run.dev)
        for i in range(per_epoch):
            run.step(perm[i * B:(i + 1) * B], lr_at(sch, lr0, step, total))
            step += 1
            if time.time() - a.t0 > a.max_time:
                stopped = "max_time"
                break
        correct = run.accuracy()
        curve.append([epoch + 1, step, correct / len(run.VX), round(time.time() - a.t0, 3)])
        if correct >= need:
            reached = True
            break
        if stopped:
            break
    return run.record(kind="tta", batch=B, target=a.target, reached=reached, stopped=stopped,
                      steps=step, val_acc=curve[-1][2], reached_s=curve[-1][3] if reached else None,
                      curve=curve)


def speed(run, a):
    B = a.batch
    n = len(run.X) // B
    perm = torch.randperm(len(run.X), device=run.dev)
    lr = run.train.get("optimizer", {}).get("lr", 1e-3)
    first, t0 = None, None
    for s in range(a.warm + a.steps):
        if s == a.warm:
            run.sync()
            t0 = time.perf_counter()
        i = s % n
        run.step(perm[i * B:(i + 1) * B], lr)
        if s == 0:
            run.sync()
            first = time.time() - a.t0
    run.sync()
    sps = a.steps * B / (time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if run.dev == "cuda" else None
    data = sum(t.numel() * t.element_size() for t in (run.X, run.Y, run.VX, run.VY))
    return run.record(kind="speed", batch=B, steps=a.steps, samples_per_s=round(sps, 1),
                      first_step_s=round(first, 3), peak_bytes=peak, data_bytes=data)


def main():
    a = parse()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.compile and not hasattr(torch, "compile"):
        print(json.dumps({"impl": "compile", "kind": a.what, "model": json.load(open(a.spec))["model"]["name"], "batch": a.batch, "precision": a.precision,
                          "error": f"torch {torch.__version__} has no torch.compile"}))
        return
    run = Run(a)
    if a.what == "speed" and not a.batch:
        raise SystemExit("speed needs a batch")
    print(json.dumps(tta(run, a) if a.what == "tta" else speed(run, a)), flush=True)


if __name__ == "__main__":
    main()
