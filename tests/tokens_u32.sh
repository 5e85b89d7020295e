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
# uint32 shard whose length does not match its header.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/tokens_u32
rm -rf "$d"; mkdir -p "$d/good" "$d/bad" "$d/short"
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
spec = {"trainc": 1, "model": {
    "name": "vocab70000",
    "inputs": {"x": {"shape": [T], "dtype": "i32"},
               "y": {"shape": [T], "dtype": "i32", "classes": V}},
    "layers": [{"op": "embedding", "name": "wte", "vocab": V, "dim": 8, "input": "x"},
               {"op": "linear", "name": "lm_head", "out": V, "bias": False}],
    "loss": {"op": "cross_entropy", "target": "y"}},
  "train": {"data": {"train": {"tokens": "good/*.bin"}}, "batch_size": 4, "max_steps": 4,
            "optimizer": {"type": "adamw", "lr": 0.05}, "loader": {"shuffle": False},
            "log_every": 1, "seed": 1}}
json.dump(spec, open(f"{d}/spec.json", "w"), indent=1)
PY

"$TRAINC" plan "$d/spec.json" --json > "$d/plan.json"
$PY - "$d/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
head = [b for b in p["buffers"] if b["name"] == "linear_lm_head"][0]
assert head["row_bytes"] == 8 * 70016 * 4, head
PY
echo "ok   vocabulary 70000: the head's logits rows 70016 apart"

"$TRAINC" build "$d/spec.json" -o "$d/trainer" 2>/dev/null
$PY - "$d" <<'PY'
import os, sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, "tests")
import st_check
d = sys.argv[1]
torch.manual_seed(0)
V, D, T, B, STEPS = 70000, 8, 8, 4, 4
wte = torch.nn.Parameter(torch.randn(V, D))
head = torch.nn.Parameter(torch.randn(V, D) * 0.3)
st_check.save(f"{d}/init.safetensors", {"wte.weight": wte.detach().numpy(),
                                        "lm_head.weight": head.detach().numpy()})
raw = open(f"{d}/good/a.bin", "rb").read()
hdr = np.frombuffer(raw[:1024], "<i4")
assert hdr[0] == 20240801 and hdr[1] == 7
tok = torch.from_numpy(np.frombuffer(raw[1024:], "<u4").astype(np.int64))
assert len(tok) == hdr[2] and int(tok.max()) > 65535
rc = os.system(f"{d}/trainer --init {d}/init.safetensors --out {d}/run --threads 1 --quiet 2>/dev/null")
assert rc == 0, rc
import json
ours = [json.loads(l)["loss"] for l in open(f"{d}/run/metrics.jsonl")
        if '"loss"' in l and '"event"' not in l]
assert len(ours) == STEPS, ours
opt = torch.optim.AdamW([{"params": [wte, head], "weight_decay": 0.01}], lr=0.05,
                        foreach=False)
ref = []
for step in range(STEPS):
    w = [(step * B + i) * T for i in range(B)]
    x = torch.stack([tok[o:o + T] for o in w])
    y = torch.stack([tok[o + 1:o + T + 1] for o in w])
    opt.zero_grad()
    loss = F.cross_entropy((wte[x] @ head.t()).view(-1, V), y.view(-1))
    loss.backward()
    opt.step()
    ref.append(loss.item())
worst = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
print("ok   ids above 65535 trained: losses %s vs PyTorch's %s, worst relative %.1e"
      % (["%.5f" % v for v in ours], ["%.5f" % v for v in ref], worst))
assert worst < 1e-5, (ours, ref)
PY

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
