#!/usr/bin/env bash
# Recomputation changes memory, never the numbers: for the MLP (with dropout), the
# CNN, gpt_char and a tiny Llama (rmsnorm, SwiGLU, attention's Llama-family options; and
# with lora's adapters), each policy gives bit-identical per-step losses and final weights
# to "none". The plan: arena <= 1.10 x the lower bound for every spec and policy;
# activation bytes none > selective > full for gpt_char and gpt2_124m; auto picks the
# least recomputation that fits memory_budget_mb (none, selective in the first k
# blocks, selective, selective with the first k blocks in full, full), and names what would fit when nothing does. The start
# record's bytes (arena, parameters, gradients, optimizer state) are the plan's.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/recompute
rm -rf "$d"; mkdir -p "$d"
# an MLP with dropout, so recomputed masks are checked too; its first block a layernorm
# without weights over the u8 input's f32 conversion and a linear (the layernorm's
# backward reads no input: full replays it from the conversion, outside every block,
# which is kept for it)
$PY - "$d" <<'PY'
import json, sys
spec = json.load(open("specs/mlp_fashion.json"))
spec["model"]["name"] = "mlp_dropout"
spec["model"]["layers"] = [{"op": "flatten"}, {"op": "repeat", "count": 1, "body": [
                               {"op": "layernorm", "affine": False}, {"op": "linear", "out": 128}]}, {"op": "relu"}, {"op": "dropout", "p": 0.2},
                           {"op": "linear", "out": 64}, {"op": "gelu"}, {"op": "dropout", "p": 0.1}, {"op": "linear", "out": 10}]
json.dump(spec, open(sys.argv[1] + "/mlp_dropout.json", "w"), indent=1)
PY
sed -i 's|\.\./data/fashion|../../../data/fashion|g' "$d/mlp_dropout.json"
# gpt_char with a Llama's blocks: rmsnorm, a SwiGLU MLP (glu after a linear of 2h),
# attention with every Llama-family option (kv_heads, no biases, rope with llama3
# scaling, qk_norm, a window): the options call replays as GPT-2's does
$PY tests/llama_tiny.py "$d/llama_tiny.json" --llama-attention
# and with a mixture of experts for its MLP (a gated shared expert beside), the
# load-balancing loss: a replayed routing takes the same rows and adds no statistics twice
$PY tests/llama_tiny.py "$d/llama_moe.json" --moe-aux --moe-shared
# and the tiny Llama with lora's adapters (their dropout masks replayed too)
$PY - "$d" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1] + "/llama_tiny.json"))
spec["model"]["name"] = "llama_lora"
spec["train"]["lora"] = {"rank": 4, "alpha": 8, "dropout": 0.1}
json.dump(spec, open(sys.argv[1] + "/llama_lora.json", "w"), indent=1)
PY
for spec in specs/mlp_fashion.json specs/cnn_fashion.json specs/gpt_char.json "$d/mlp_dropout.json" \
            "$d/llama_tiny.json" "$d/llama_moe.json" "$d/llama_lora.json"; do
    name=$(basename "$spec" .json)
    for pol in none selective full; do
        "$TRAINC" run "$spec" --set recompute=$pol --set max_steps=6 --set log_every=1 --set data.val=null \
            --set batch_size=8 --threads 1 --quiet --out "$d/$name.$pol" 2>/dev/null
    done
    for pol in selective full; do
        cmp "$d/$name.none/model.safetensors" "$d/$name.$pol/model.safetensors"
        diff <(grep -o '"loss":[^,]*' "$d/$name.none/metrics.jsonl") <(grep -o '"loss":[^,]*' "$d/$name.$pol/metrics.jsonl")
    done
    echo "ok   $name: selective and full bit-identical to none"
    # the start record reports what the trainer allocated, which is what the plan says
    for pol in none selective full; do
        "$TRAINC" plan "$spec" --json --set recompute=$pol --set batch_size=8 > "$d/$name.$pol.plan.json"
        $PY - "$d/$name.$pol/metrics.jsonl" "$d/$name.$pol.plan.json" <<'PY'
import json, sys
start = json.loads(open(sys.argv[1]).readline())
plan = json.load(open(sys.argv[2]))
for k in ("arena_bytes", "param_bytes", "grad_bytes", "optimizer_bytes"):
    assert start[k] == plan[k], (k, start[k], plan[k])
PY
    done
    echo "ok   $name: the start record's arena, parameter, gradient and optimizer bytes are the plan's"
done
# auto between selective and full: the first blocks in full, the others selective
# (gpt_char at batch 8 and 35 MiB: blocks 0-3 of 8), bit-identical too
"$TRAINC" run specs/gpt_char.json --set device=cpu --set batch_size=8 --set memory_budget_mb=35 --set recompute=auto \
    --set max_steps=6 --set log_every=1 --set data.val=null --threads 1 --quiet --out "$d/gpt_char.mixed" 2>/dev/null
"$TRAINC" plan specs/gpt_char.json --set device=cpu --set batch_size=8 --set memory_budget_mb=35 --set recompute=auto --json \
    > "$d/mixed.json"
$PY - "$d/mixed.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["recompute"] == "selective" and 0 < p["recompute_full_blocks"] < p["blocks"], p["recompute"]
PY
cmp "$d/gpt_char.none/model.safetensors" "$d/gpt_char.mixed/model.safetensors"
diff <(grep -o '"loss":[^,]*' "$d/gpt_char.none/metrics.jsonl") <(grep -o '"loss":[^,]*' "$d/gpt_char.mixed/metrics.jsonl")
echo "ok   gpt_char: auto at 35 MiB ($(grep -o '"recompute_full_blocks": [0-9]*' "$d/mixed.json")) bit-identical to none"
# trainc run compiles the same plan from the options' =VALUE forms (--set=K=V, --device=D)
"$TRAINC" run specs/gpt_char.json --device=cpu --set=batch_size=8 --set=memory_budget_mb=35 --set=recompute=auto \
    --set max_steps=6 --set log_every=1 --set data.val=null --threads 1 --quiet --out "$d/gpt_char.eq" 2>/dev/null
cmp "$d/gpt_char.mixed/model.safetensors" "$d/gpt_char.eq/model.safetensors" &&
    [ "$(head -1 "$d/gpt_char.eq/metrics.jsonl" | grep -o '"arena_bytes":[0-9]*')" = \
      "$(head -1 "$d/gpt_char.mixed/metrics.jsonl" | grep -o '"arena_bytes":[0-9]*')" ] ||
    { echo "FAIL trainc run with --set=K=V and --device=cpu: another plan"; exit 1; }
echo "ok   trainc run: --set=K=V and --device=D compile the same plan as --set K=V --device D"
# auto between none and selective: the first blocks selective, the others keep
# everything (gpt_char at batch 8 and 40 MiB: blocks 0-4 of 8), bit-identical too
"$TRAINC" run specs/gpt_char.json --set device=cpu --set batch_size=8 --set memory_budget_mb=40 --set recompute=auto \
    --set max_steps=6 --set log_every=1 --set data.val=null --threads 1 --quiet --out "$d/gpt_char.part" 2>/dev/null
"$TRAINC" plan specs/gpt_char.json --set device=cpu --set batch_size=8 --set memory_budget_mb=40 --set recompute=auto --json \
    > "$d/part.json"
$PY - "$d/part.json" "$d/gpt_char.selective.plan.json" "$d/gpt_char.none.plan.json" <<'PY'
import json, sys
p, sel, none = (json.load(open(f)) for f in sys.argv[1:])
assert p["recompute"] == "selective" and p["recompute_full_blocks"] == 0, p["recompute"]
assert 0 < p["recompute_blocks"] < p["blocks"], p["recompute_blocks"]
replays = lambda q: sum("(recomputed)" in i["what"] for i in q["instructions"])
assert 0 < replays(p) < replays(sel), (replays(p), replays(sel))
assert sel["arena_bytes"] < p["arena_bytes"] < none["arena_bytes"], (sel["arena_bytes"], p["arena_bytes"], none["arena_bytes"])
assert p["arena_bytes"] / p["lower_bound_bytes"] <= 1.10, p["arena_bytes"] / p["lower_bound_bytes"]
print(f"ok   gpt_char batch 8, 40 MiB: auto makes {p['recompute_blocks']} of {p['blocks']} blocks selective, "
      f"{replays(p)} replays (selective everywhere: {replays(sel)}), arena {p['arena_bytes']}")
PY
cmp "$d/gpt_char.none/model.safetensors" "$d/gpt_char.part/model.safetensors"
diff <(grep -o '"loss":[^,]*' "$d/gpt_char.none/metrics.jsonl") <(grep -o '"loss":[^,]*' "$d/gpt_char.part/metrics.jsonl")
echo "ok   gpt_char: auto's partly selective plan bit-identical to none"
for spec in specs/*.json; do
    for pol in none selective full; do
        "$TRAINC" plan "$spec" --json --set recompute=$pol > "$d/plan_$(basename "$spec" .json)_$pol.json"
    done
done
for m in gpt_char gpt2_124m; do
    "$TRAINC" plan specs/$m.json --json --set recompute=full --set precision=bf16-mixed > "$d/full_${m}_bf16.json"
done
# the tiny Llama: selective replays each block's rmsnorms and its glu, and no GEMM
"$TRAINC" plan "$d/llama_tiny.json" --json --set recompute=selective > "$d/llama_tiny.sel.json"
$PY - "$d/llama_tiny.sel.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
whats = [i["what"] for i in p["instructions"] if "(recomputed)" in i["what"]]
n_rms = sum(w.startswith("rmsnorm") for w in whats)
n_glu = sum(w.startswith("glu") for w in whats)
assert n_rms == 2 * 2 + 1 and n_glu == 2 and len(whats) == n_rms + n_glu, whats
print(f"ok   llama_tiny: selective replays {n_rms} rmsnorms and {n_glu} glus, no GEMM")
PY
$PY - "$d" <<'PY'
import glob, json, sys
d = sys.argv[1]
plans = {}
for f in sorted(glob.glob(d + "/plan_*.json")):
    p = json.load(open(f))
    plans[(p["model"], p["recompute"])] = p
    ratio = p["arena_bytes"] / p["lower_bound_bytes"]
    assert ratio <= 1.10, (f, ratio)
    assert p["arena_bytes"] <= p["noreuse_bytes"], f
for m in ("gpt_char", "gpt2_124m"):
    a = [plans[(m, pol)]["arena_bytes"] for pol in ("none", "selective", "full")]
    assert a[0] > a[1] > a[2], (m, a)
    print(f"ok   {m}: arena none {a[0]} > selective {a[1]} > full {a[2]}")
# selective replays every block's layernorms and its GELU (a loop of its own, computed
# from the stored pre-activation under every policy), and no GEMM
for m, blocks in (("gpt_char", 4), ("gpt2_124m", 12)):
    whats = [i["what"] for i in plans[(m, "selective")]["instructions"] if "(recomputed)" in i["what"]]
    n_ln = sum(w.startswith("layernorm") for w in whats)
    n_gelu = sum(w.startswith("gelu") for w in whats)
    assert n_ln == 2 * blocks + 1 and n_gelu == blocks and len(whats) == n_ln + n_gelu, (m, whats)
    print(f"ok   {m}: selective replays {n_ln} layernorms and {n_gelu} GELUs, no GEMM")
# full: gpt_char's block backward is its peak, so its layernorms are replayed again
# before each reader (more replays than layernorms); a GEMM's bias loop never apart
# from its replayed GEMM (fused into its epilogue, as in the forward pass: apart, it
# would add the bias to the stored 16-bit product and round otherwise). GPT-2's peak
# is the logits: one replay each.
for m, blocks in (("gpt_char", 4), ("gpt2_124m", 12)):
    for prec in ("", "_bf16"):
        p = json.load(open(f"{d}/full_{m}{prec}.json")) if prec else plans[(m, "full")]
        whats = [i["what"] for i in p["instructions"] if "(recomputed)" in i["what"]]
        n_ln = sum(w.startswith("layernorm") for w in whats)
        apart = [w for w in whats if w.startswith("linear epilogue")]
        assert not apart, (m, prec, apart)
        assert (n_ln > 2 * blocks + 1) == (m == "gpt_char"), (m, prec, n_ln)
    print(f"ok   {m}: full replays {n_ln} layernorms, every bias loop in its GEMM's epilogue")
print(f"ok   arena <= 1.10 x lower bound for {len(plans)} plans")
# the replays plan.json counts are the instructions it lists as recomputed, and the
# bytes they write the sizes of the buffers they fill (named *_re, *_re2, ...)
import re
for m in ("gpt_char", "gpt2_124m"):
    for pol in ("selective", "full"):
        p = plans[(m, pol)]
        n = sum("(recomputed)" in i["what"] for i in p["instructions"])
        w = sum(b["bytes"] for b in p["buffers"] if re.search(r"_re\d*$", b["name"]))
        assert p["recompute_instructions"] == n > 0 and p["recompute_written_bytes"] == w > 0, \
            (m, pol, p["recompute_instructions"], n, p["recompute_written_bytes"], w)
print("ok   plan.json's recompute_instructions and recompute_written_bytes: the replays it lists")
m = json.load(open(d + "/mixed.json"))
assert m["arena_bytes"] / m["lower_bound_bytes"] <= 1.10
print(f"ok   gpt_char batch 8: auto's mixed plan {m['arena_bytes']} bytes, {m['recompute_full_blocks']} of {m['blocks']} blocks in full")
PY
# auto: a budget between selective's and none's totals picks selective; one below
# full's total is refused with what would fit
out=$("$TRAINC" plan specs/gpt_char.json --set device=cpu --set memory_budget_mb=80 --set recompute=auto | grep "recompute  ")
echo "$out" | grep -q selective || { echo "FAIL auto picked: $out"; exit 1; }
echo "ok   auto: 80 MiB -> selective"
# a bf16-mixed plan chosen by auto, run on the CPU (fp32, twice the arena): said, with
# the total the start record's bytes add up to
"$TRAINC" run specs/gpt_char.json --set device=cpu --set precision=bf16-mixed --set recompute=auto --set memory_budget_mb=30 \
    --set max_steps=1 --set data.val=null --out "$d/auto_cpu" --device cpu 2> "$d/auto_cpu.err" >/dev/null
mib=$(grep -o "twice as large: [0-9.]* MiB in all" "$d/auto_cpu.err" | grep -o "[0-9.]*")
$PY - "$d/auto_cpu/metrics.jsonl" "$mib" <<'PY' || { cat "$d/auto_cpu.err"; exit 1; }
import json, sys
s = json.loads(open(sys.argv[1]).readline())
total = s["arena_bytes"] + s["param_bytes"] + s["grad_bytes"] + s["optimizer_bytes"]
assert sys.argv[2] and abs(total / 1048576 - float(sys.argv[2])) < 0.06, (total, sys.argv[2])
print(f"ok   auto's bf16 plan on the CPU: the note names {sys.argv[2]} MiB, the start record's total")
PY
# the rules between fields are checked after the last --set: any order, the same plan;
# auto without a budget is refused (exit 1) with the rule
out2=$("$TRAINC" plan specs/gpt_char.json --set device=cpu --set recompute=auto --set memory_budget_mb=80 | grep "recompute  ")
[ "$out2" = "$out" ] || { echo "FAIL --set order: '$out2' vs '$out'"; exit 1; }
rc=0
"$TRAINC" check specs/gpt_char.json --set device=cpu --set recompute=auto >/dev/null 2>"$d/nobudget.err" || rc=$?
[ $rc -eq 1 ] && grep -q "recompute auto needs memory_budget_mb" "$d/nobudget.err" ||
    { echo "FAIL auto without a budget: rc=$rc"; cat "$d/nobudget.err"; exit 1; }
echo "ok   --set recompute=auto before its memory_budget_mb: the same plan; without one: exit 1"
set +e
"$TRAINC" check specs/gpt_char.json --set device=cpu --set memory_budget_mb=20 --set recompute=auto 2>"$d/auto.err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "does not fit with any recomputation" "$d/auto.err" && grep -q "fits batch_size" "$d/auto.err" \
    || { echo "FAIL auto too small: rc=$rc"; cat "$d/auto.err"; exit 1; }
echo "ok   auto: 20 MiB refused: $(cat "$d/auto.err")"
# the sizes it names are rounded up (a budget it names fits), and a budget that holds
# the parameters but not one sample says so
n=$(sed -n 's/.*batch_size 16 needs \([0-9.]*\) MiB.*/\1/p' "$d/auto.err")
"$TRAINC" check specs/gpt_char.json --set device=cpu --set memory_budget_mb=$n --set recompute=auto >/dev/null ||
    { echo "FAIL auto: the $n MiB the message names does not fit"; exit 1; }
rc=0
"$TRAINC" check specs/gpt_char.json --set device=cpu --set memory_budget_mb=13 --set recompute=auto 2>"$d/auto13.err" || rc=$?
[ $rc -eq 1 ] && grep -q "; not even batch_size 1 fits (it needs [0-9.]* MiB)" "$d/auto13.err" ||
    { echo "FAIL auto at 13 MiB: rc=$rc"; cat "$d/auto13.err"; exit 1; }
rc=0
"$TRAINC" check specs/gpt_char.json --set device=cpu --set memory_budget_mb=5 --set recompute=auto 2>"$d/auto5.err" || rc=$?
[ $rc -eq 1 ] && grep -q "the optimizer state and the workspace alone need [0-9.]* MiB" "$d/auto5.err" ||
    { echo "FAIL auto at 5 MiB: rc=$rc"; cat "$d/auto5.err"; exit 1; }
echo "ok   auto's refusals: sizes rounded up ($n MiB fits), one sample or the parameters named"
# a refusal names the smallest plan's need and the largest batch size, exactly: the
# budget it names fits and 0.1 MiB less does not; the batch size it names fits the
# budget and one more does not (the smallest plan may be a partly full one: full
# replays a block's whole forward at once)
for args in "memory_budget_mb=20" "memory_budget_mb=25" "memory_budget_mb=30.8" \
            "memory_budget_mb=22 --set precision=bf16-mixed"; do
    set -- $args
    sets=(--set device=cpu --set recompute=auto --set $1 "${@:2}")
    rc=0; "$TRAINC" check specs/gpt_char.json "${sets[@]}" >/dev/null 2>"$d/ref.err" || rc=$?
    [ $rc -eq 1 ] || { echo "FAIL $args: not refused (exit $rc)"; exit 1; }
    need=$(sed -n 's/.*needs \([0-9.]*\) MiB at the least.*/\1/p' "$d/ref.err")
    bfit=$(sed -n 's/.*the budget fits batch_size \([0-9]*\).*/\1/p' "$d/ref.err")
    ok() { "$TRAINC" check specs/gpt_char.json "${sets[@]}" "$@" >/dev/null 2>&1; }
    less=$($PY -c "print(round($need - 0.1, 1))")
    ok --set memory_budget_mb=$need && ! ok --set memory_budget_mb=$less &&
        ok --set batch_size=$bfit && ! ok --set batch_size=$((bfit + 1)) ||
        { echo "FAIL $args: names $need MiB and batch_size $bfit"; cat "$d/ref.err"; exit 1; }
done
echo "ok   auto's refusals name the smallest budget (it fits, 0.1 MiB less does not) and the largest batch"
# the GPU's workspace (input slots, loss statistics, scratch, cuBLASLt's 32 MiB)
# counts in the total a budget is held to, unless the spec's device is cpu
"$TRAINC" plan specs/gpt_char.json --json > "$d/ws.json"
"$TRAINC" plan specs/gpt_char.json --json --set device=cpu > "$d/ws_cpu.json"
tot=$($PY - "$d/ws.json" "$d/ws_cpu.json" <<'PY'
import json, sys
p, c = (json.load(open(f)) for f in sys.argv[1:])
assert p["workspace_bytes"] > 32 << 20 and c["workspace_bytes"] == 0, (p["workspace_bytes"], c["workspace_bytes"])
for q in (p, c):
    parts = q["arena_bytes"] + q["param_bytes"] + q["grad_bytes"] + q["optimizer_bytes"] + \
            q["param_copy_bytes"] + q["workspace_bytes"]
    assert q["total_bytes"] == parts, (q["total_bytes"], parts)
print(repr(p["total_bytes"] / 1048576))
PY
)
pick() { "$TRAINC" plan specs/gpt_char.json --set recompute=auto --set memory_budget_mb=$1 | grep "recompute  "; }
pick "$tot" | grep -q " none " && pick "$($PY -c "print($tot - 0.001)")" | grep -q selective ||
    { echo "FAIL auto at the none plan's total ($tot MiB, workspace in): $(pick "$tot")"; exit 1; }
echo "ok   the plan's total holds the GPU's workspace ($tot MiB for none: auto takes none there, not 1 KiB below)"
