#!/usr/bin/env bash
# A vocabulary of 1024 or more that is not a multiple of 64 has its logits (and their
# gradient) stored with rows padded to a multiple of 64 (compiler/ops/loss.c; GPT-2's
# 50257 -> rows 50304 apart), and the head's weight followed by as many zero rows in
# the parameter region, so that the head's three GEMMs run over the padded vocabulary
# (cuBLASLt's fast kernels want every dimension a multiple of 8). For
# tests/vocab/tiny_vocab.json (vocabulary 1030, rows 1088 apart):
#   - the plan and the generated calls carry the row stride (GEMM ldc/lda, the loss's
#     ld) and the padded GEMM dimensions, the parameter region the zero rows; and
#     TRAINC_PAD_LOGITS=0 turns it all off (rows 1030 apart);
#   - trained on the CPU with and without padding: per-step losses, gradient norms,
#     validation numbers and final weights agree to float rounding (1e-6: the
#     backward GEMM over the padded vocabulary adds its zero terms in another order,
#     and the gradient norm's blocks fall elsewhere in the longer region); the first
#     step's loss is the same bits, and from the same weights both sample the same
#     80 tokens (the sample reads the last position's logits at the padded stride).
# (tests/gradcheck.sh checks the padded head's gradients by finite differences, and
# tests/fake_gpu.sh trains this model on the fake GPU against the CPU.)
# The head runs unchunked here (TRAINC_HEAD_CHUNKS=1) up to the last part, which
# checks the chunked head (ops/loss.c: its GEMMs and loss one call over 4 rows of each
# sample at a time, in training and validation) against it: the plan holds a chunk of
# the logits, not all; 30 steps' records (validation's included) and final weights
# within 1e-6; from the same weights the same --sample 80 (computed from the head's
# input for the one row drawn from).
set -eu
cd "$(dirname "$0")/.."
export TRAINC_HEAD_CHUNKS=1
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/vocab_pad
rm -rf "$d"; mkdir -p "$d"
spec=tests/vocab/tiny_vocab.json

"$TRAINC" plan "$spec" --json > "$d/plan_pad.json"
TRAINC_PAD_LOGITS=0 "$TRAINC" plan "$spec" --json > "$d/plan_nopad.json"
"$PY" - "$d/plan_pad.json" "$d/plan_nopad.json" <<'PY'
import json, sys
def head(f):
    p = json.load(open(f))
    return [b for b in p["buffers"] if b["name"] == "linear_lm_head"][0]
a, b = head(sys.argv[1]), head(sys.argv[2])
assert a["row_bytes"] == 16 * 1088 * 4 and b["row_bytes"] == 16 * 1030 * 4, (a, b)
pa, pb = (json.load(open(f))["param_bytes"] for f in sys.argv[1:3])
assert pa - pb == 58 * 32 * 4, (pa, pb)   # wte's 58 zero rows of 32
PY
"$TRAINC" emit "$spec" -o "$d/emit_pad" >/dev/null
TRAINC_PAD_LOGITS=0 "$TRAINC" emit "$spec" -o "$d/emit_nopad" >/dev/null
# host.c's calls as one line each (emit breaks long ones after their commas)
joined() { tr '\n' ' ' < "$1/host.c" | sed -E 's/ +/ /g; s/; /;\n/g' > "$1/host.joined"; }
joined "$d/emit_pad"; joined "$d/emit_nopad"
grep -q 'rt_cross_entropy(e, linear_lm_head, in_y, e->train ? d_linear_lm_head : NULL, e->B \* 16, 1030, 1088);' "$d/emit_pad/host.joined"
grep -q 'linear_lm_head, 1088);' "$d/emit_pad/host.joined"
grep -q 'd_linear_lm_head, 1088, ' "$d/emit_pad/host.joined"
grep -q 'rt_gemm(e, 0, 1, e->B \* 16, 1088, 32, 1.0f, layernorm_ln_f, 32, P_wte_weight, 32, 0.0f, linear_lm_head, 1088);' "$d/emit_pad/host.joined"
grep -q 'rt_gemm(e, 0, 0, e->B \* 16, 32, 1088, 1.0f, d_linear_lm_head, 1088, P_wte_weight, 32, ' "$d/emit_pad/host.joined"
grep -q 'rt_gemm(e, 1, 0, 1088, 32, e->B \* 16, 1.0f, d_linear_lm_head, 1088, ' "$d/emit_pad/host.joined"
grep -q 'rt_cross_entropy(e, linear_lm_head, in_y, e->train ? d_linear_lm_head : NULL, e->B \* 16, 1030, 1030);' "$d/emit_nopad/host.joined"
grep -q 'rt_gemm(e, 1, 0, 1030, 32, e->B \* 16, 1.0f, d_linear_lm_head, 1030, ' "$d/emit_nopad/host.joined"
echo "ok   tiny_vocab: logits rows 1088 apart, the head's GEMMs over 1088 rows, wte's 58 zero rows in the plan and the calls (1030 with TRAINC_PAD_LOGITS=0)"

"$TRAINC" build "$spec" -o "$d/pad" 2>/dev/null
TRAINC_PAD_LOGITS=0 "$TRAINC" build "$spec" -o "$d/nopad" 2>/dev/null
O=(--set max_steps=30 --set log_every=1 --set validate.every_steps=10 --set validate.batches=2
   --threads 2 --quiet)
"$d/pad" "${O[@]}" --out "$d/pad.run" 2>/dev/null
"$d/nopad" "${O[@]}" --out "$d/nopad.run" 2>/dev/null
"$PY" - "$d/pad.run" "$d/nopad.run" <<'PY'
import array, json, struct, sys
def recs(run):
    out = []
    for l in open(run + "/metrics.jsonl"):
        r = json.loads(l)
        if "event" not in r:
            out.append({k: v for k, v in r.items() if k not in ("time_s", "samples_per_s", "tokens_per_s")})
    return out
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert len(a) >= 30 and any("val_loss" in r for r in a) and len(a) == len(b), a
assert a[0]["loss"] == b[0]["loss"], (a[0], b[0])
for x, y in zip(a, b):
    assert x.keys() == y.keys(), (x, y)
    for k in x:
        if isinstance(x[k], float):
            assert abs(x[k] - y[k]) <= 1e-6 * max(1.0, abs(y[k])), (k, x, y)
        else:
            assert x[k] == y[k], (k, x, y)
def weights(run):
    b = open(run + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k != "__metadata__":
            t = array.array("f")
            t.frombytes(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            out[k] = t
    return out
wa, wb = weights(sys.argv[1]), weights(sys.argv[2])
assert wa.keys() == wb.keys() and len(wa["wte.weight"]) == 1030 * 32
for k in wa:
    assert max(abs(x - y) for x, y in zip(wa[k], wb[k])) <= 1e-6, k
PY
S=(--init "$d/pad.run/model.safetensors" --set max_steps=1 --set optimizer.lr=0 --set data.val=null
   --set validate.every_steps=null --set validate.batches=null --threads 2 --quiet --sample 80 --temperature 0.9)
"$d/pad" "${S[@]}" --out "$d/pad.s" > "$d/pad.sample" 2>/dev/null
"$d/nopad" "${S[@]}" --out "$d/nopad.s" > "$d/nopad.sample" 2>/dev/null
[ -s "$d/pad.sample" ] && cmp -s "$d/pad.sample" "$d/nopad.sample"
echo "ok   tiny_vocab: padded and contiguous logits train alike (records and weights within 1e-6 over 30 steps; from the same weights the same --sample 80)"

# a second linear tied to the head's weight (tests/vocab/tied_twice.json: wte used as a
# projection in the middle too): only the head's GEMMs run over the zero rows (its
# output has room for them), the other one's over the true 1030; both train alike
t=tests/vocab/tied_twice.json
"$TRAINC" emit "$t" -o "$d/emit_tied" >/dev/null
joined "$d/emit_tied"
grep -q 'rt_gemm(e, 0, 1, e->B \* 16, 1030, 32, 1.0f, embedding_wte, 32, P_wte_weight, 32, 0.0f, linear_mid, 1030);' "$d/emit_tied/host.joined"
grep -q 'rt_gemm(e, 1, 0, 1030, 32, e->B \* 16, 1.0f, d_linear_mid, 1030, embedding_wte, 32, 1.0f, G_wte_weight, 32);' "$d/emit_tied/host.joined"
grep -q 'rt_gemm(e, 1, 0, 1088, 32, e->B \* 16, 1.0f, d_linear_lm_head, 1088, ' "$d/emit_tied/host.joined"
"$TRAINC" build "$t" -o "$d/tied_pad" 2>/dev/null
TRAINC_PAD_LOGITS=0 "$TRAINC" build "$t" -o "$d/tied_nopad" 2>/dev/null
O=(--set log_every=1 --set validate.every_steps=5 --set validate.batches=2 --threads 2 --quiet)
"$d/tied_pad" "${O[@]}" --out "$d/tied_pad.run" 2>/dev/null
"$d/tied_nopad" "${O[@]}" --out "$d/tied_nopad.run" 2>/dev/null
"$PY" - "$d/tied_pad.run" "$d/tied_nopad.run" <<'PY'
import json, sys
def recs(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl") if '"loss"' in l and '"event"' not in l]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert len(a) == 10 and len(a) == len(b), (a, b)
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "val_loss"):
        if k in x:
            assert abs(x[k] - y[k]) <= 1e-6 * max(1.0, abs(y[k])), (k, x, y)
PY
echo "ok   tied_twice: a second linear tied to the padded head weight runs over the true rows; padded and contiguous train alike (10 steps within 1e-6)"

# the chunked head (the default: 4 chunks of each sample's 16 rows) against the
# unchunked padded one above
export TRAINC_HEAD_CHUNKS=4
"$TRAINC" plan "$spec" --json > "$d/plan_chunks.json"
"$PY" - "$d/plan_chunks.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
names = [b["name"] for b in p["buffers"]]
z = [b for b in p["buffers"] if b["name"] == "linear_lm_head_chunk"]
assert "linear_lm_head" not in names and "d_linear_lm_head" not in names and z, names
assert z[0]["row_bytes"] == 4 * 1088 * 4, z   # 4 of each sample's 16 rows, 1088 apart
PY
"$TRAINC" emit "$spec" -o "$d/emit_chunks" >/dev/null
joined "$d/emit_chunks"
grep -q 'rt_head_cross_entropy(e, layernorm_ln_f, P_wte_weight, in_y, e->train ? d_layernorm_ln_f : NULL, e->train ? G_wte_weight : NULL, linear_lm_head_chunk, e->B \* 16, e->B \* 4, 32, 1088, 1030, 1088, 0.0f);' "$d/emit_chunks/host.joined"
grep -q 'rt_head_cross_entropy(e, layernorm_ln_f, P_wte_weight, in_y, NULL, NULL, linear_lm_head_chunk, e->B \* 16, e->B \* 4, 32, 1088, 1030, 1088, 0.0f);' "$d/emit_chunks/host.joined"
! grep -q 'rt_cross_entropy(' "$d/emit_chunks/host.joined"
"$TRAINC" build "$spec" -o "$d/chunks" 2>/dev/null
O=(--set max_steps=30 --set log_every=1 --set validate.every_steps=10 --set validate.batches=2
   --threads 2 --quiet)
"$d/chunks" "${O[@]}" --out "$d/chunks.run" 2>/dev/null
"$PY" - "$d/chunks.run" "$d/pad.run" <<'PY'
import json, sys
def recs(run):
    return [{k: v for k, v in json.loads(l).items() if k not in ("time_s", "samples_per_s", "tokens_per_s")}
            for l in open(run + "/metrics.jsonl") if '"event"' not in l]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert len(a) >= 30 and sum("val_loss" in r for r in a) == 3 and len(a) == len(b), (a, b)
for x, y in zip(a, b):
    assert x.keys() == y.keys(), (x, y)
    for k in x:
        assert abs(x[k] - y[k]) <= 1e-6 * max(1.0, abs(y[k])), (k, x, y)
PY
"$PY" - "$d/chunks.run/model.safetensors" "$d/pad.run/model.safetensors" <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tests")
from st_check import load
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
for k in a:
    assert np.abs(a[k] - b[k]).max() <= 1e-6, k
PY
"$d/chunks" "${S[@]}" --out "$d/chunks.s" > "$d/chunks.sample" 2>/dev/null
[ -s "$d/chunks.sample" ] && cmp -s "$d/chunks.sample" "$d/pad.sample"
echo "ok   tiny_vocab: the head and loss a chunk of 4 rows a sample (training and validation) as the whole logits (30 steps' records and weights within 1e-6; the same --sample 80)"
# the tied head frozen (freeze=wte.weight): the chunked call computes dx and no dW (no
# gradient of the frozen weight anywhere, not even in the sink), the same records and
# weights as the unchunked program (whose dW GEMM is dropped) within 1e-6, the embedding
# the same bits in both (and not the trained one's)
"$TRAINC" emit "$spec" --set freeze=wte.weight -o "$d/emit_frozen" >/dev/null
joined "$d/emit_frozen"
grep -q 'rt_head_cross_entropy(e, layernorm_ln_f, P_wte_weight, in_y, e->train ? d_layernorm_ln_f : NULL, NULL, linear_lm_head_chunk,' "$d/emit_frozen/host.joined"
! grep -q 'G_wte_weight\|e->sink' "$d/emit_frozen/host.joined"
"$TRAINC" build "$spec" --set freeze=wte.weight -o "$d/frozen" 2>/dev/null
TRAINC_HEAD_CHUNKS=1 "$TRAINC" build "$spec" --set freeze=wte.weight -o "$d/frozen1" 2>/dev/null
"$d/frozen" "${O[@]}" --out "$d/frozen.run" 2>/dev/null
"$d/frozen1" "${O[@]}" --out "$d/frozen1.run" 2>/dev/null
"$PY" - "$d/frozen.run" "$d/frozen1.run" "$d/pad.run" <<'PY'
import json, sys
import numpy as np
sys.path.insert(0, "tests")
from st_check import load
def recs(run):
    return [{k: v for k, v in json.loads(l).items() if k not in ("time_s", "samples_per_s", "tokens_per_s")}
            for l in open(run + "/metrics.jsonl") if '"event"' not in l]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert len(a) >= 30 and len(a) == len(b), (a, b)
for x, y in zip(a, b):
    for k in x:
        assert abs(x[k] - y[k]) <= 1e-6 * max(1.0, abs(y[k])), (k, x, y)
wa, wb = load(sys.argv[1] + "/model.safetensors"), load(sys.argv[2] + "/model.safetensors")
for k in wa:
    assert np.abs(wa[k] - wb[k]).max() <= 1e-6, k
trained = load(sys.argv[3] + "/model.safetensors")   # (unfrozen: wte moved there)
assert np.array_equal(wa["wte.weight"], wb["wte.weight"])
assert not np.array_equal(wa["wte.weight"], trained["wte.weight"])
PY
echo "ok   tiny_vocab with its tied head frozen: the chunked call without dW, as the unchunked program (30 steps within 1e-6)"
