#!/usr/bin/env bash
# The shipped Llama specs are the models they say they are: `trainc check` counts
# llama_char's 1,049,984 parameters, llama_124m's 152,711,424, llama3_1b's
# 1,235,814,400 (Llama-3.2-1B's) and gemma3_270m's 268,098,176 (the embedding scaled,
# heads 256 wide over d 640, a norm after each branch, every sixth layer global by
# interleave: the 268M its model card gives); and a Qwen3-0.6B-shaped spec written here
# from llama3_1b's (heads 128 wide by head_dim over d 1024 and 16 heads, qk_norm) its
# 596,049,920. Each count is also the sum of the shapes the spec implies, computed
# here from the JSON alone (embedding V x d; attention's qkv (heads + 2 kv_heads) x hd
# x d, proj d x heads hd, qk_norm's 2 hd; rmsnorm d; a linear out x in, none when tied;
# glu halving the width); moe_char's 1,789,824, of which 1,052,544 active a token (its
# top 2 of 4 experts). llama3_1b's tied head over its 128256 rows (a
# multiple of 64) needs no padding: the plan's parameter region is exactly the
# parameters, the logits rows 128256 apart.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/llama_specs
rm -rf "$d"; mkdir -p "$d"
$PY - specs/llama3_1b.json "$d" <<'PY'
import json, sys


def from_1b(name, vocab, d, count):
    """llama3_1b's spec renamed, with another vocabulary, width and depth."""
    s = json.load(open(sys.argv[1]))
    m = s["model"]
    m["name"] = name
    m["inputs"]["y"]["classes"] = m["layers"][0]["vocab"] = vocab
    m["layers"][0]["dim"] = d
    m["layers"][1]["count"] = count
    return s


s = from_1b("qwen3_0_6b", 151936, 1024, 28)
rep = s["model"]["layers"][1]
rep["body"][0]["body"][1].update(heads=16, kv_heads=8, head_dim=128, qk_norm=True,
                                 rope={"theta": 1000000})
rep["body"][1]["body"][1]["out"], rep["body"][1]["body"][3]["out"] = 2 * 3072, 1024
json.dump(s, open(sys.argv[2] + "/qwen3_0.6b.json", "w"), indent=1)
PY
for spec in specs/llama_char.json:1049984 specs/llama_124m.json:152711424 \
            specs/llama3_1b.json:1235814400 specs/gemma3_270m.json:268098176 \
            "$d/qwen3_0.6b.json":596049920; do
    path=${spec%%:*} want=${spec##*:} name=$(basename "${spec%%:*}" .json)
    "$TRAINC" check "$path" > "$d/$name.txt"
    got=$(sed -n 's/^  parameters *\([0-9]*\) .*/\1/p' "$d/$name.txt")
    [ "$got" = "$want" ] || { echo "FAIL $name: trainc check counts $got parameters, not $want"; exit 1; }
    $PY - "$path" "$want" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["model"]

vocab = {}   # an embedding's name -> its vocab


def count(layers, d):
    """Parameters of a list of layers fed width d; returns (count, output width)."""
    n = 0
    for l in layers:
        op = l["op"]
        if op == "embedding":
            n, d = n + l["vocab"] * l["dim"], l["dim"]
            vocab[l.get("name")] = l["vocab"]
        elif op == "rmsnorm":
            n += d
        elif op == "linear":   # a tied one: the embedding's weight, its vocab wide
            out = l["out"] if "out" in l else vocab[l["tie"]]
            n += (0 if l.get("tie") else out * d) + (out if l.get("bias", True) else 0)
            d = out
        elif op == "glu":
            d //= 2
        elif op == "scale":
            pass
        elif op == "attention":
            hd, kv = l.get("head_dim", d // l["heads"]), l.get("kv_heads", l["heads"])
            rows = (l["heads"] + 2 * kv) * hd
            n += rows * d + d * l["heads"] * hd + (rows + d if l.get("bias", True) else 0)
            n += 2 * hd if l.get("qk_norm") else 0
        elif op == "residual":
            n += count(l["body"], d)[0]
        elif op == "repeat":
            n += l["count"] * count(l["body"], d)[0]
        else:
            raise SystemExit("llama_specs.sh: no rule for op " + op)
    return n, d

n = count(m["layers"], None)[0]
assert n == int(sys.argv[2]), (sys.argv[1], n, sys.argv[2])
PY
    echo "ok   $name: $want parameters, as its shapes add up"
done
"$TRAINC" plan specs/llama3_1b.json --json > "$d/plan_1b.json"
$PY - "$d/plan_1b.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["param_bytes"] == 1235814400 * 4, p["param_bytes"]
assert not [b for b in p["buffers"] if b["name"] == "linear_lm_head"]   # never whole
head = [b for b in p["buffers"] if b["name"] == "linear_lm_head_chunk"][0]
assert head["row_bytes"] == 512 * 128256 * 2, head   # bf16-mixed logits, a quarter of T 2048, unpadded
PY
"$TRAINC" check specs/llama3_1b.json | grep -q "^  logits       512 of each sample's 2048 rows at a time"
# --sample's cache: 16 layers x K and V x 8 key/value heads x 2048 positions x 64 x 4 bytes
"$TRAINC" check specs/llama3_1b.json | grep -q "^  sampling     a key/value cache of 128.0 MiB (2048 positions"
echo "ok   llama3_1b: the tied head over 128256 rows unpadded, its logits a chunk of 512 rows a sample (the plan, trainc check); a 128 MiB key/value cache"
# moe_char: llama_char with 4 experts a layer (each 384 x 128 up and 128 x 192 down, a
# 4 x 128 router) for its MLP: 1,789,824 parameters, of which a token uses its top 2
# experts' half of each layer's 5 x 147,456 expert weights less: 1,052,544 active
"$TRAINC" check specs/moe_char.json > "$d/moe_char.txt"
grep -q "^  parameters   1789824 " "$d/moe_char.txt" && grep -q "^  active       1052544 a token" "$d/moe_char.txt" ||
    { echo "FAIL moe_char: trainc check says"; cat "$d/moe_char.txt"; exit 1; }
! "$TRAINC" check specs/llama_char.json | grep -q "^  active" ||
    { echo "FAIL llama_char: an active count without a moe layer"; exit 1; }
echo "ok   moe_char: 1789824 parameters, 1052544 active a token (trainc check)"
