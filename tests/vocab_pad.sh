#!/usr/bin/env bash
# A vocabulary of 1024 or more that is not a multiple of 64 has its logits (and their
# gradient) stored with rows padded to a multiple of 64 (compiler/graph.c; GPT-2's
# 50257 -> rows 50304 apart): only the storage changes, never a number. For
# tests/vocab/tiny_vocab.json (vocabulary 1030, rows 1088 apart):
#   - the plan and the generated calls carry the row stride (GEMM ldc/lda, the loss's
#     ld), and TRAINC_PAD_LOGITS=0 turns it off (rows 1030 apart);
#   - trained on the CPU with and without padding: per-step losses, gradient norms and
#     validation numbers, final weights and --sample's text bit-identical (the sample
#     reads the last position's logits at the padded stride).
# (tests/gradcheck.sh checks the padded head's gradients by finite differences, and
# tests/fake_gpu.sh trains this model on the fake GPU against the CPU.)
set -eu
cd "$(dirname "$0")/.."
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
PY
"$TRAINC" emit "$spec" -o "$d/emit_pad" >/dev/null
TRAINC_PAD_LOGITS=0 "$TRAINC" emit "$spec" -o "$d/emit_nopad" >/dev/null
grep -q 'rt_cross_entropy(e, linear_lm_head, in_y, e->train ? d_linear_lm_head : NULL, e->B \* 16, 1030, 1088);' "$d/emit_pad/host.c"
grep -q 'linear_lm_head, 1088);' "$d/emit_pad/host.c"
grep -q 'd_linear_lm_head, 1088, ' "$d/emit_pad/host.c"
grep -q 'rt_cross_entropy(e, linear_lm_head, in_y, e->train ? d_linear_lm_head : NULL, e->B \* 16, 1030, 1030);' "$d/emit_nopad/host.c"
echo "ok   tiny_vocab: logits rows 1088 apart in the plan and the calls (1030 with TRAINC_PAD_LOGITS=0)"

"$TRAINC" build "$spec" -o "$d/pad" 2>/dev/null
TRAINC_PAD_LOGITS=0 "$TRAINC" build "$spec" -o "$d/nopad" 2>/dev/null
O=(--set max_steps=30 --set log_every=1 --set validate.every_steps=10 --set validate.batches=2
   --threads 2 --quiet --sample 80 --temperature 0.9)
"$d/pad" "${O[@]}" --out "$d/pad.run" > "$d/pad.sample" 2>/dev/null
"$d/nopad" "${O[@]}" --out "$d/nopad.run" > "$d/nopad.sample" 2>/dev/null
"$PY" - "$d/pad.run" "$d/nopad.run" <<'PY'
import json, sys
def recs(run):
    out = []
    for l in open(run + "/metrics.jsonl"):
        r = json.loads(l)
        if "event" not in r:
            out.append({k: v for k, v in r.items() if k not in ("time_s", "samples_per_s", "tokens_per_s")})
    return out
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert len(a) >= 30 and any("val_loss" in r for r in a), a
assert a == b, "the records differ"
PY
cmp -s "$d/pad.run/model.safetensors" "$d/nopad.run/model.safetensors"
[ -s "$d/pad.sample" ] && cmp -s "$d/pad.sample" "$d/nopad.sample"
echo "ok   tiny_vocab: padded and contiguous logits train to the same bits (records, weights, --sample 80)"
