#!/usr/bin/env bash
# gpt_char on the CPU under each recomputation policy: tokens/s (steps 11-40 of a
# 40-step run at batch 16, all cores) and the arena the plan allocates.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
d=build/bench/recompute
mkdir -p "$d"
printf "%-10s %14s %12s\n" policy arena_bytes tokens/s
for pol in none selective full; do
    "$TRAINC" build specs/gpt_char.json --set recompute=$pol -o "$d/gpt_$pol" 2>/dev/null
    "$d/gpt_$pol" --out "$d/run_$pol" --quiet --set max_steps=40 --set log_every=10 --set data.val=null --set checkpoint=null 2>/dev/null
    ${PYTHON:-/usr/bin/python3} - "$d/run_$pol/metrics.jsonl" "$pol" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
start = recs[0]
steps = [r for r in recs if "tokens_per_s" in r]
tps = sum(r["tokens_per_s"] for r in steps[1:]) / len(steps[1:])
print(f"{sys.argv[2]:10s} {start['arena_bytes']:14d} {tps:12.0f}")
PY
done
