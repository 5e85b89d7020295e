#!/usr/bin/env bash
# --sample on a GPU (on the device machine, after tests/gpu/pack.sh; tests/gpu/measure.sh's
# part "sample"): llama3_1b (bf16-mixed, random weights) generating N tokens greedily
# after a 12-token prompt, ROUNDS alternating rounds (default 3) of
#   - trainc with the key/value cache (the decode program, templates/cuda/decode.cuh);
#   - trainc by the window's pass each token (TRAINC_KV_CACHE=0), N / 4 tokens;
#   - PyTorch with a static cache, eager and torch.compile (reduce-overhead: CUDA
#     graphs), bench/gpu_sample_torch.py: gpt-fast's way, its strongest;
# then once TRAINC_KV_CACHE=check: the cache's logits against the window's pass, the
# largest difference over the largest logit. trainc's seconds are its own stderr line's
# (the prompt's prefill and the tokens; the validation before it not counted), PyTorch's
# the same span after a warm-up generation. JSON lines in $OUT/sample.jsonl, a table in
# $OUT/summary.txt.
#   N=128 ROUNDS=3 bash bench/gpu_sample.sh
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
. bench/gpu_env.sh
N=${N:-128}
ROUNDS=${ROUNDS:-3}
RES=$OUT/sample.jsonl
: >"$RES"
ERR=$OUT/sample.err
llama3_shards
# validation before sampling (--eval): a shard of two windows
python3 - "$D/data/llama3/val2.bin" "$D/data/llama3/val_000000.bin" <<'PY'
import sys, numpy as np
toks = np.frombuffer(open(sys.argv[2], "rb").read()[1024:], np.uint32)[:2 * 2049]
hdr = np.zeros(256, np.int32); hdr[:3] = (20240801, 7, len(toks))
open(sys.argv[1], "wb").write(hdr.tobytes() + toks.tobytes())
PY
V2=$D/data/llama3/val2.bin
SETS=(--set "data.train.tokens=$V2" --set "data.val.tokens=$V2" --set loader.drop_last=false)

trainc_sample() {   # trainc_sample KV N ROUND: one JSON line from the trainer's stderr line
    local kv=$1 n=$2 r=$3 line
    line=$(TRAINC_KV_CACHE=$kv "$S/llama3_1b" --device cuda --eval "${SETS[@]}" --sample "$n" \
             --prompt "The license " --temperature 1e-300 2>&1 >/dev/null | tee -a "$ERR" |
           grep '^trainc: \(sampled\|key/value cache check\)')
    # "trainc: sampled N tokens in S s, R a second (K from the key/value cache)"
    # "trainc: key/value cache check: K tokens, the largest difference W of the largest logit"
    echo "$line" | awk -v r="$r" -v kv="$kv" '/sampled/ && kv != "check" {printf "{\"round\":%d,\"impl\":\"trainc %s\",\"tokens\":%d,\"seconds\":%s,\"tokens_per_s\":%s,\"from_cache\":%d}\n", r, kv == 0 ? "window" : "cache", $3, $6, $8, substr($11, 2)}
        /cache check/ {printf "{\"impl\":\"trainc cache check\",\"tokens\":%d,\"worst\":%s}\n", $5, $10}' >>"$RES"
}
torch_sample() {    # torch_sample ROUND [--compile]
    local r=$1; shift
    (cd bench && python3 gpu_sample_torch.py 1b 12 "$N" "$@" 2>>"$ERR") |
        python3 -c "import json, sys; x = json.loads(sys.stdin.read()); x['round'] = $r; print(json.dumps(x))" >>"$RES"
}
for ((r = 1; r <= ROUNDS; r++)); do
    trainc_sample 1 "$N" "$r"
    trainc_sample 0 $((N / 4)) "$r"
    torch_sample "$r"
    torch_sample "$r" --compile
done
trainc_sample check 32 0

python3 - "$RES" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for x in rows:
    if "tokens_per_s" in x:
        by.setdefault(x["impl"], []).append(x["tokens_per_s"])
print("llama3_1b --sample, bf16, greedy, tokens/s (median of the rounds):")
cache = statistics.median(by.get("trainc cache", [0])) or float("nan")
for k, v in by.items():
    m = statistics.median(v)
    print("  %-22s %9.1f   trainc cache / this %.2fx" % (k, m, cache / m if m else float("nan")))
for x in rows:
    if "worst" in x:
        print("  the cache's logits against the window's over %d tokens: %.3g of the largest" % (x["tokens"], x["worst"]))
PY
