#!/usr/bin/env bash
# gpt_char learns on the CPU: the final validation loss is clearly below the unigram
# entropy of the validation text (what a model that ignores context would reach),
# and --sample prints generated text.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/gpt_learn
rm -rf "$d"; mkdir -p "$d"
"$TRAINC" build specs/gpt_char.json -o "$d/trainer"
"$d/trainer" --out "$d/run" --quiet --sample 300 --temperature 0.8 ${GPT_LEARN_SETS:-} > "$d/sample.txt"
$PY - "$d/run/metrics.jsonl" data/text "$d/sample.txt" <<'PY'
import glob, json, math, sys
import numpy as np
recs = [json.loads(l) for l in open(sys.argv[1])]
val = [r["val_loss"] for r in recs if "val_loss" in r]
raw = open(sorted(glob.glob(sys.argv[2] + "/val_*.bin"))[0], "rb").read()
n = int(np.frombuffer(raw[:12], "<i4")[2])
tok = np.frombuffer(raw[1024:1024 + 2 * n], "<u2")
p = np.bincount(tok, minlength=256) / len(tok)
H = -sum(x * math.log(x) for x in p if x > 0)
print(f"unigram entropy of the val text {H:.3f} nats; val_loss per validation: {[round(v, 3) for v in val]}")
sample = open(sys.argv[3], "rb").read()
print("sample:", sample[:200])
assert len(sample) >= 300, len(sample)
assert val[-1] < 0.75 * H, (val[-1], H)
PY
