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

usage: gpu_torch.py MODEL BATCH [STEPS]   MODEL: mlp | cnn | wide
"""
import json, sys, time
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


def run(name, B, steps, compiled, bf16):
    torch.manual_seed(0)
    t_start = time.perf_counter()
    m, shape, classes = model(name)
    m = m.cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    X = torch.rand((4 * B,) + shape, device="cuda")
    Y = torch.randint(0, classes, (4 * B,), device="cuda") if classes else torch.rand(4 * B, 16, device="cuda")
    fwd = torch.compile(m) if compiled else m
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
    return {"model": name, "batch": B, "impl": ("compile" if compiled else "eager") + ("+bf16" if bf16 else "+fp32"),
            "samples_per_s": round(sps, 1), "peak_bytes": torch.cuda.max_memory_allocated(),
            "first_step_s": round(first, 3), "device": torch.cuda.get_device_name()}


if __name__ == "__main__":
    name, B = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    for compiled in (False, True):
        for bf16 in (False, True):
            print(json.dumps(run(name, B, steps, compiled, bf16)), flush=True)
