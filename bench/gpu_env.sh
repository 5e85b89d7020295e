# bench/gpu_env.sh: sourced (from the repository's root) by the scripts that run on the
# device machine after tests/gpu/pack.sh. Unpacks build/devpack.tar.xz into
# /tmp/devpack once (D; the trainers in S), points LD_LIBRARY_PATH at the device
# toolkit's cuBLASLt and NVRTC (left out of the pack for size), keeps the kernel cache
# in /tmp/trainc-cache, and makes $OUT. gpt2_shards writes random GPT-2 tokens in
# llm.c's shard format (8M train, 1M val) under $D/data/gpt2; wide_data the wide MLP's
# regression data (2^20 rows of 32 inputs, 16 targets) under $D/data/wide;
# llama3_shards random Llama 3 tokens (vocabulary 128256) in the uint32 shard format
# under $D/data/llama3; near the largest batch that fits, searched from a prediction;
# bf16_rate the device's bf16 matrix rate as one JSON line.
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
D=${DEVPACK_DIR:-/tmp/devpack}   # (DEVPACK_DIR: another folder, for a dry run here)
export DEVPACK_DIR=$D
[ -d "$D/ship" ] || { mkdir -p "$D" && tar -C "$D" --strip-components=1 -xJf build/devpack.tar.xz; }
S=$D/ship
for lib in libcublasLt.so.13 libnvrtc.so.13; do
    f=$(find /usr/local /opt /usr/lib -name "$lib*" 2>/dev/null | head -1)
    [ -n "$f" ] && LD_LIBRARY_PATH=$(dirname "$f"):${LD_LIBRARY_PATH:-}
done
# a dry run of the scripts here, on tests/fake_gpu's libraries (built by tests/fake_gpu.sh):
# FAKE_GPU_LIB=$PWD/build/tests/fake_gpu/lib puts them first
[ -n "${FAKE_GPU_LIB:-}" ] && LD_LIBRARY_PATH=$FAKE_GPU_LIB:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH TRAINC_CACHE_DIR=/tmp/trainc-cache
gpt2_shards() {
    python3 - <<'PY'
import numpy as np, os
os.makedirs(os.environ["DEVPACK_DIR"] + "/data/gpt2", exist_ok=True)
r = np.random.default_rng(0)
for name, n in (("train_000000.bin", 8 << 20), ("val_000000.bin", 1 << 20)):
    hdr = np.zeros(256, np.int32); hdr[:3] = (20240520, 1, n)
    with open(os.environ["DEVPACK_DIR"] + f"/data/gpt2/{name}", "wb") as f:
        f.write(hdr.tobytes()); f.write(r.integers(0, 50257, n, dtype=np.uint16).tobytes())
PY
}
wide_data() {
    [ -f "$D/data/wide/train_y.npy" ] && return
    python3 - <<'PY'
import numpy as np, os
os.makedirs(os.environ["DEVPACK_DIR"] + "/data/wide", exist_ok=True)
r = np.random.default_rng(0)
x = r.random((1 << 20, 32), dtype=np.float32)
w = r.standard_normal((32, 16)).astype(np.float32)
np.save(os.environ["DEVPACK_DIR"] + "/data/wide/train_x.npy", x)
np.save(os.environ["DEVPACK_DIR"] + "/data/wide/train_y.npy", np.sin(x @ w).astype(np.float32))
PY
}
llama3_shards() {
    python3 - <<'PY'
import numpy as np, os
os.makedirs(os.environ["DEVPACK_DIR"] + "/data/llama3", exist_ok=True)
r = np.random.default_rng(0)
for name, n in (("train_000000.bin", 8 << 20), ("val_000000.bin", 1 << 20)):
    hdr = np.zeros(256, np.int32); hdr[:3] = (20240801, 7, n)
    with open(os.environ["DEVPACK_DIR"] + f"/data/llama3/{name}", "wb") as f:
        f.write(hdr.tobytes()); f.write(r.integers(0, 128256, n, dtype=np.uint32).tobytes())
PY
}
bf16_rate() {   # PyTorch bf16 GEMMs of 8192^3, the best of 20: MFU's measured denominator
    python3 - <<'PY'
import json, time, torch
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
best = 0.0
for _ in range(20):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    best = max(best, 5 * 2 * n ** 3 / (time.perf_counter() - t))
print(json.dumps({"impl": "bf16 GEMM 8192^3", "flops_per_s": best, "device": torch.cuda.get_device_name()}))
PY
}
near() {          # near PRED CMD...: the largest B for which CMD... B succeeds, the
                  # search starting at PRED: steps of 1, 2, 4, ... up from a PRED that
                  # fits (down from one that does not), then bisection between the last
                  # B that fits and the first that does not (2 runs when PRED is right)
    local pred=$1; shift
    local lo hi step=1
    [ "$pred" -lt 1 ] && pred=1
    if "$@" $pred; then
        lo=$pred
        while hi=$((lo + step)); [ $hi -le 1048576 ] && "$@" $hi; do lo=$hi; step=$((step * 2)); done
    else
        hi=$pred; lo=0
        while [ $((hi - step)) -ge 1 ]; do
            if "$@" $((hi - step)); then lo=$((hi - step)); break; fi
            hi=$((hi - step)); step=$((step * 2))
        done
    fi
    while [ $((hi - lo)) -gt 1 ]; do
        local mid=$(((lo + hi) / 2))
        if "$@" $mid; then lo=$mid; else hi=$mid; fi
    done
    echo $lo
}
