"""PyTorch's side of the GPU benchmark (bench/gpu_bench.sh runs it on the device).

For each model (the MLP and CNN specs, and a wide MLP: width 64, the kind of network
tiny-cuda-nn targets) it trains STEPS steps at the given batch with AdamW, eager and
torch.compile, each in fp32 and with bf16 autocast, data already on the GPU, and
prints one JSON line per run: samples/s after WARM steps, peak device memory
(torch.cuda.max_memory_allocated) and the wall time from the start of the process's
work to the first finished step (torch.compile's compile included).

fp32 is fp32 arithmetic, as trainc's fp32 (cuBLASLt with CUBLAS_COMPUTE_32F): TF32 is
off for cuDNN's convolutions too (PyTorch's default has it on for them, off for
matmuls; on 2026-11-26 the CNN's fp32 lines on an H200 ran with TF32 convolutions).

Beside them, where the host's per-step overhead dominates small models, the whole step
(forward, loss, backward, clipping, the fused AdamW with capturable=True) captured
once as one torch.cuda.graph and replayed ("graph+fp32", "graph+bf16"; autocast's
weight cache off inside the capture, as PyTorch's CUDA-graph notes ask; each step's
batch copied into the captured input tensors first). torch.compile's
mode="reduce-overhead" (its CUDA graphs, "compile-ro") runs where IMPLS names it (its
compile costs tens of seconds a model).

usage: gpu_torch.py MODEL BATCH [STEPS]   MODEL: mlp | cnn | wide
  IMPLS="eager compile graph" (the default; also compile-ro) picks the rows
"""
import json, os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

WARM = 20


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10)), (1, 28, 28), 10
    if name == "cnn":   # specs/cnn_fashion.json
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)), (1, 28, 28), 10
    if name == "wide":  # bench/wide_mlp.json: 32 inputs, 4 hidden layers of 64, 16 outputs, MSE
        layers, d = [], 32
        for _ in range(4):
            layers += [nn.Linear(d, 64), nn.ReLU()]
            d = 64
        return nn.Sequential(*layers, nn.Linear(64, 16)), (32,), 0
    raise SystemExit(f"unknown model {name}")


def run(name, B, steps, compiled, bf16, mode=None):
    torch.manual_seed(0)
    t_start = time.perf_counter()
    m, shape, classes = model(name)
    m = m.cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    X = torch.rand((4 * B,) + shape, device="cuda")
    Y = torch.randint(0, classes, (4 * B,), device="cuda") if classes else torch.rand(4 * B, 16, device="cuda")
    fwd = torch.compile(m, mode=mode) if compiled else m
    torch.cuda.reset_peak_memory_stats()
    first = None
    t0 = None
    for s in range(steps):
        if s == WARM:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        i = s % 4
        xb, yb = X[i * B:(i + 1) * B], Y[i * B:(i + 1) * B]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = fwd(xb)
            loss = F.cross_entropy(out.float(), yb) if classes else F.mse_loss(out.float(), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if s == 0:
            torch.cuda.synchronize()
            first = time.perf_counter() - t_start
    torch.cuda.synchronize()
    sps = (steps - WARM) * B / (time.perf_counter() - t0)
    impl = ("compile-ro" if mode == "reduce-overhead" else "compile") if compiled else "eager"
    return {"model": name, "batch": B, "impl": impl + ("+bf16" if bf16 else "+fp32"),
            "samples_per_s": round(sps, 1), "peak_bytes": torch.cuda.max_memory_allocated(),
            "first_step_s": round(first, 3), "device": torch.cuda.get_device_name()}


def run_graph(name, B, steps, bf16):
    """The whole step as one CUDA graph: captured after 3 steps on a side stream (the
    fused AdamW's state and the gradients then exist), replayed each step."""
    torch.manual_seed(0)
    t_start = time.perf_counter()
    m, shape, classes = model(name)
    m = m.cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01, fused=True, capturable=True)
    X = torch.rand((4 * B,) + shape, device="cuda")
    Y = torch.randint(0, classes, (4 * B,), device="cuda") if classes else torch.rand(4 * B, 16, device="cuda")
    sx, sy = X[:B].clone(), Y[:B].clone()   # the captured step's inputs

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            out = m(sx)
            loss = F.cross_entropy(out.float(), sy) if classes else F.mse_loss(out.float(), sy)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        return loss

    torch.cuda.reset_peak_memory_stats()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)   # the gradients are then the graph's, from its pool
    with torch.cuda.graph(g):
        step()
    first = None
    t0 = None
    for s in range(steps):
        if s == WARM:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        i = s % 4
        sx.copy_(X[i * B:(i + 1) * B])
        sy.copy_(Y[i * B:(i + 1) * B])
        g.replay()
        if s == 0:
            torch.cuda.synchronize()
            first = time.perf_counter() - t_start
    torch.cuda.synchronize()
    sps = (steps - WARM) * B / (time.perf_counter() - t0)
    return {"model": name, "batch": B, "impl": "graph" + ("+bf16" if bf16 else "+fp32"),
            "samples_per_s": round(sps, 1), "peak_bytes": torch.cuda.max_memory_allocated(),
            "first_step_s": round(first, 3), "device": torch.cuda.get_device_name()}


def one(impl, name, B, steps, bf16):
    if impl == "graph":
        return run_graph(name, B, steps, bf16)
    if impl != "eager" and not hasattr(torch, "compile"):
        return {"model": name, "batch": B, "impl": impl + ("+bf16" if bf16 else "+fp32"),
                "skipped": "torch %s has no torch.compile" % torch.__version__}
    return run(name, B, steps, impl != "eager", bf16, "reduce-overhead" if impl == "compile-ro" else None)


if __name__ == "__main__":
    name, B = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    for impl in os.environ.get("IMPLS", "eager compile graph").split():
        for bf16 in (False, True):
            try:
                rec = one(impl, name, B, steps, bf16)
            except Exception as e:   # one row's failure is that row's note, not the rest's
                rec = {"model": name, "batch": B, "impl": impl + ("+bf16" if bf16 else "+fp32"), "error": repr(e)[:300]}
            print(json.dumps(rec), flush=True)
