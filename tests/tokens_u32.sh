#!/usr/bin/env bash
# uint32 token shards (SPEC.md section 5: magic 20240801, version 7) through a whole
# run, for a vocabulary over 65536: a model with an embedding and an untied head of
# vocabulary 70000 (dim 8, T 8) trains 4 AdamW steps on the CPU on shards whose ids
# run past 65535 (two shards, one of them without a full window, shuffle off), from
# weights written here, and every step's loss matches PyTorch's on the same windows
# read from the same files within 1e-5 relative (an id read as uint16, or from the
# wrong offset, would change the loss at once). Also: the head's logits rows are
# padded to 70016 (a multiple of 64, tests/vocab_pad.sh) in the plan; a shard holding
# an id of 70000 is refused (exit 1) naming the shard and the position, as is a
# uint32 shard whose length does not match its header. And Llama 3's vocabulary:
# 128256 (a multiple of 64: rows unpadded, no zero rows) with the head tied to the
# embedding, 3 steps on ids up to 128255, against PyTorch in the same way. Both
# models also train on the fake GPU (tests/fake_gpu/) as on the CPU.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/tokens_u32
rm -rf "$d"; mkdir -p "$d/good" "$d/bad" "$d/short" "$d/l3"
export TRAINC_CACHE_DIR=$d/cache   # this test's own shard cache

$PY - "$d" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
V, T = 70000, 8
def shard(path, tok, count=None):
    hdr = np.zeros(256, "<i4")
    hdr[:3] = 20240801, 7, len(tok) if count is None else count
    with open(path, "wb") as f:
        f.write(hdr.tobytes() + np.asarray(tok, "<u4").tobytes())
rng = np.random.default_rng(5)
a = rng.integers(0, V, 8 * 16 + 3)
a[::3] = rng.integers(65536, V, len(a[::3]))   # a third of the ids above uint16
a[5] = V - 1
shard(f"{d}/good/a.bin", a)
shard(f"{d}/good/b.bin", rng.integers(65536, V, 8))   # 8 tokens: no window of T + 1
bad = a.copy(); bad[123] = V
shard(f"{d}/bad/a.bin", bad)
shard(f"{d}/short/a.bin", a, count=len(a) + 1)
l3 = rng.integers(0, 128256, 8 * 12 + 1)
l3[::2] = rng.integers(100000, 128256, len(l3[::2]))
l3[7] = 128255
shard(f"{d}/l3/a.bin", l3)
def spec(name, V, tie, data, steps):
    head = {"op": "linear", "name": "lm_head", "out": V, "bias": False}
    if tie:
        head["tie"] = "wte"
    return {"trainc": 1, "model": {
        "name": name,
        "inputs": {"x": {"shape": [T], "dtype": "i32"},
                   "y": {"shape": [T], "dtype": "i32", "classes": V}},
        "layers": [{"op": "embedding", "name": "wte", "vocab": V, "dim": 8, "input": "x"}, head],
        "loss": {"op": "cross_entropy", "target": "y"}},
      "train": {"data": {"train": {"tokens": data}}, "batch_size": 4, "max_steps": steps,
                "optimizer": {"type": "adamw", "lr": 0.05}, "loader": {"shuffle": False},
                "log_every": 1, "seed": 1}}
json.dump(spec("vocab70000", V, False, "good/*.bin", 4), open(f"{d}/spec.json", "w"), indent=1)
json.dump(spec("vocab128256", 128256, True, "l3/*.bin", 3), open(f"{d}/spec_l3.json", "w"), indent=1)
PY

"$TRAINC" plan "$d/spec.json" --json > "$d/plan.json"
$PY - "$d/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
head = [b for b in p["buffers"] if b["name"] == "linear_lm_head_chunk"][0]
assert head["row_bytes"] == 2 * 70016 * 4, head   # a chunk of 2 of T 8 (ops/loss.c)
PY
"$TRAINC" plan "$d/spec_l3.json" --json > "$d/plan_l3.json"
$PY - "$d/plan_l3.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
head = [b for b in p["buffers"] if b["name"] == "linear_lm_head_chunk"][0]
assert head["row_bytes"] == 2 * 128256 * 4, head
assert p["param_bytes"] == 128256 * 8 * 4, p["param_bytes"]   # wte alone, no zero rows
PY
echo "ok   vocabulary 70000: the head's logits rows 70016 apart; 128256 tied: unpadded"

"$TRAINC" build "$d/spec.json" -o "$d/trainer" 2>/dev/null
"$TRAINC" build "$d/spec_l3.json" -o "$d/trainer_l3" 2>/dev/null
$PY - "$d" <<'PY'
import json, os, sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, "tests")
import st_check
d = sys.argv[1]
D, T, B = 8, 8, 4

def parity(trainer, shard, V, tie, steps):
    """trainer's losses against PyTorch's from the same weights on the same windows."""
    torch.manual_seed(0)
    wte = torch.nn.Parameter(torch.randn(V, D))
    head = wte if tie else torch.nn.Parameter(torch.randn(V, D) * 0.3)
    init = {"wte.weight": wte.detach().numpy()}
    if not tie:
        init["lm_head.weight"] = head.detach().numpy()
    st_check.save(f"{d}/{trainer}.safetensors", init)
    raw = open(shard, "rb").read()
    hdr = np.frombuffer(raw[:1024], "<i4")
    assert hdr[0] == 20240801 and hdr[1] == 7
    tok = torch.from_numpy(np.frombuffer(raw[1024:], "<u4").astype(np.int64))
    assert len(tok) == hdr[2] and int(tok.max()) > 65535
    rc = os.system(f"{d}/{trainer} --init {d}/{trainer}.safetensors --out {d}/{trainer}.run "
                   f"--threads 1 --quiet 2>/dev/null")
    assert rc == 0, rc
    ours = [json.loads(l)["loss"] for l in open(f"{d}/{trainer}.run/metrics.jsonl")
            if '"loss"' in l and '"event"' not in l]
    assert len(ours) == steps, ours
    params = [wte] if tie else [wte, head]
    opt = torch.optim.AdamW([{"params": params, "weight_decay": 0.01}], lr=0.05, foreach=False)
    ref = []
    for step in range(steps):
        w = [(step * B + i) * T for i in range(B)]
        x = torch.stack([tok[o:o + T] for o in w])
        y = torch.stack([tok[o + 1:o + T + 1] for o in w])
        opt.zero_grad()
        loss = F.cross_entropy((wte[x] @ head.t()).view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
        ref.append(loss.item())
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
    print("ok   vocabulary %d%s, ids above 65535: losses %s vs PyTorch's %s, worst relative %.1e"
          % (V, " tied" if tie else "", ["%.5f" % v for v in ours], ["%.5f" % v for v in ref], worst))
    assert worst < 1e-5, (ours, ref)

parity("trainer", f"{d}/good/a.bin", 70000, False, 4)
parity("trainer_l3", f"{d}/l3/a.bin", 128256, True, 3)
PY

# The GPU path on the fake GPU (tests/fake_gpu/: a fake driver, NVRTC and cuBLASLt on
# the CPU): both models built for both devices, the same windows uploaded as i32 and
# the head's GEMMs and the loss over 70016 (padded) and 128256 rows: every step's loss
# within 1e-5 of the CPU's
. tests/fake_gpu/libs.sh   # gpu, fbuild (the kernel cache: $d/cache, as above)
for m in "spec trainer" "spec_l3 trainer_l3"; do
    set -- $m
    fbuild "$d/$1.json" -o "$d/$2_both" 2>/dev/null
    gpu "$d/$2_both" --device cuda \
        --init "$d/$2.safetensors" --out "$d/$2.gpu" --threads 1 --quiet 2>/dev/null
    $PY - "$d/$2.run/metrics.jsonl" "$d/$2.gpu/metrics.jsonl" <<'PY'
import json, sys
recs = [[json.loads(l) for l in open(f)] for f in sys.argv[1:]]
start = recs[1][0]
assert start["device"] == "cuda" and start["gpu"] == "trainc fake GPU (CPU emulation)", start
cpu, gpu = ([r["loss"] for r in rs if "loss" in r and "event" not in r] for rs in recs)
worst = max(abs(a - b) / abs(a) for a, b in zip(cpu, gpu))
assert len(cpu) == len(gpu) and worst <= 1e-5, (cpu, gpu)
print("ok   %s on the fake GPU: %d losses within %.1e of the CPU's" % (start["model"], len(gpu), worst))
PY
done

expect_fail() {   # expect_fail FOLDER TEXT...: the trainer exits 1 saying every TEXT
    local f=$1; shift
    set +e
    "$d/trainer" --set "data.train.tokens=$d/$f/*.bin" --out "$d/run_$f" --quiet 2> "$d/$f.err"
    local rc=$?
    set -e
    [ $rc = 1 ] || { echo "FAIL $f: exit $rc, expected 1"; cat "$d/$f.err"; exit 1; }
    for t in "$@"; do
        grep -qF -- "$t" "$d/$f.err" || { echo "FAIL $f: no '$t' in:"; cat "$d/$f.err"; exit 1; }
    done
    [ ! -e "$d/run_$f/metrics.jsonl" ] || { echo "FAIL $f: wrote metrics"; exit 1; }
}
expect_fail bad "bad/a.bin: error: token 70000 at position 123 is outside the vocabulary [0, 70000)"
expect_fail short "short/a.bin: error: header says 132 tokens (528 bytes as uint32)" "truncated"
# once more from the cache of the shard's maximum (the scan's result, not a new scan)
expect_fail bad "bad/a.bin: error: token 70000 at position 123"
echo "ok   an id of 70000 named with its shard and position, a short uint32 shard refused"
