#!/usr/bin/env bash
# learn.sh SPEC MIN_ACC: a built trainer reaches MIN_ACC test accuracy after the spec's 2 epochs.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
name=$1 min=$2
out=build/tests/learn_$name
rm -rf "$out"; mkdir -p "$out"
"$TRAINC" build specs/$name.json -o "$out/trainer"
"$out/trainer" --out "$out/run" --quiet
${PYTHON:-/usr/bin/python3} - "$out/run/metrics.jsonl" "$min" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
val = [r for r in recs if "val_acc" in r]
end = recs[-1]
assert end.get("event") == "end" and end["reason"] == "epochs", end
acc = val[-1]["val_acc"]
print(f"final test accuracy {acc:.4f} (needs >= {sys.argv[2]}) after {end['step']} steps, {end['time_s']:.1f} s")
sys.exit(0 if acc >= float(sys.argv[2]) else 1)
PY
