#!/usr/bin/env bash
# --sample on a GPU (on the device machine, after tests/gpu/pack.sh; tests/gpu/measure.sh's
# part "sample"): llama_124m and llama3_1b (bf16-mixed, random weights) generating N
# tokens greedily after a 12-token prompt, ROUNDS alternating rounds (default 3) of
#   - trainc with the key/value cache (the decode program, templates/cuda/decode.cuh);
#   - trainc by the window's pass each token (TRAINC_KV_CACHE=0), N / 4 tokens;
#   - PyTorch with a static cache, eager and torch.compile (reduce-overhead: CUDA
#     graphs), bench/gpu_sample_torch.py: gpt-fast's way, its strongest;
#   - llama3_1b's four sequences at once: trainc --num-samples 4 with the cache,
#     PyTorch --batch 4 eager and compiled (tokens counted over the four);
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
# torch.compile's graphs kept across its processes (each round compiles the same step)
export TORCHINDUCTOR_CACHE_DIR=/tmp/sample-inductor TORCHINDUCTOR_FX_GRAPH_CACHE=1
T0=$(date +%s)
late() {   # within 60 s of the part's limit (tests/gpu/measure.sh's PART_LIMIT): start no round
    [ -n "${PART_LIMIT:-}" ] && [ $(($(date +%s) - T0)) -gt $((PART_LIMIT - 60)) ]
}
gpt2_shards
llama3_shards
# validation before sampling (--eval): a shard of two windows of each model's tokens
two_windows() {   # two_windows SHARDS MAGIC DTYPE T: $D/data/SHARDS/val2.bin
    python3 - "$D/data/$1/val2.bin" "$D/data/$1/val_000000.bin" "$2" "$3" "$4" <<'PY'
import sys, numpy as np
out, src, magic, dtype, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
toks = np.frombuffer(open(src, "rb").read()[1024:], dtype)[:2 * (T + 1)]
hdr = np.zeros(256, np.int32); hdr[:3] = (magic, 7 if dtype == "uint32" else 1, len(toks))
open(out, "wb").write(hdr.tobytes() + toks.tobytes())
PY
}
two_windows gpt2 20240520 uint16 1024
two_windows llama3 20240801 uint32 2048

trainc_sample() {   # trainc_sample TRAINER SHARDS KV N ROUND [SAMPLES]: a JSON line from its stderr line
    local exe=$1 v2=$D/data/$2/val2.bin kv=$3 n=$4 r=$5 k=${6:-1} line
    line=$(TRAINC_KV_CACHE=$kv "$S/$exe" --device cuda --eval --set "data.train.tokens=$v2" \
             --set "data.val.tokens=$v2" --set loader.drop_last=false --sample "$n" \
             --num-samples "$k" --prompt "The license " --temperature 1e-300 2>&1 >/dev/null |
           tee -a "$ERR" |
           grep '^trainc: \(sampled\|key/value cache check\)')
    # "trainc: sampled N tokens in S s, R a second (K from the key/value cache)"
    # "trainc: key/value cache check: K tokens, the largest difference W of the largest logit"
    echo "$line" | awk -v m="$exe" -v r="$r" -v kv="$kv" -v k="$k" '/sampled/ && kv != "check" {printf "{\"model\":\"%s\",\"round\":%d,\"impl\":\"trainc %s%s\",\"tokens\":%d,\"seconds\":%s,\"tokens_per_s\":%s,\"from_cache\":%d}\n", m, r, kv == 0 ? "window" : "cache", (k > 1 ? " x" k : ""), $3, $6, $8, substr($11, 2)}
        /cache check/ {printf "{\"model\":\"%s\",\"impl\":\"trainc cache check\",\"tokens\":%d,\"worst\":%s}\n", m, $5, $10}' >>"$RES"
}
torch_sample() {    # torch_sample TRAINER MODEL ROUND [--compile]
    local exe=$1 model=$2 r=$3; shift 3
    (cd bench && python3 gpu_sample_torch.py "$model" 12 "$N" "$@" 2>>"$ERR") |
        python3 -c "import json, sys; x = json.loads(sys.stdin.read()); x.update(model='$exe', round=$r); print(json.dumps(x))" >>"$RES"
}
# llama_124m (GPT-2 small's size: the launches count) and llama3_1b (the weights' reads)
for m in llama_124m:gpt2:124m llama3_1b:llama3:1b; do
    IFS=: read -r exe shards model <<<"$m"
    for ((r = 1; r <= ROUNDS; r++)); do
        late && { echo "out of time: $exe's round $r and after not run" | tee -a "$ERR"; break; }
        trainc_sample "$exe" "$shards" 1 "$N" "$r"
        trainc_sample "$exe" "$shards" 0 $((N / 4)) "$r"
        torch_sample "$exe" "$model" "$r"
        torch_sample "$exe" "$model" "$r" --compile
        [ "$exe" = llama3_1b ] || continue   # (four at once: where the weights' reads cost)
        trainc_sample "$exe" "$shards" 1 "$N" "$r" 4
        torch_sample "$exe" "$model" "$r" --batch 4
        torch_sample "$exe" "$model" "$r" --compile --batch 4
    done
    late || trainc_sample "$exe" "$shards" check 32 0
done

python3 - "$RES" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for model in dict.fromkeys(x["model"] for x in rows):
    by = {}
    for x in rows:
        if x["model"] == model and "tokens_per_s" in x:
            by.setdefault(x["impl"], []).append(x["tokens_per_s"])
    print("%s --sample, bf16, greedy, tokens/s (median of the rounds):" % model)
    for k, v in by.items():   # (four sequences against trainc's four)
        x4 = " x4" if k.endswith(" x4") else ""
        cache = statistics.median(by.get("trainc cache" + x4, [0])) or float("nan")
        m = statistics.median(v)
        print("  %-22s %9.1f   trainc cache%s / this %.2fx" % (k, m, x4, cache / m if m else float("nan")))
    for x in rows:
        if x["model"] == model and "worst" in x:
            print("  the cache's logits against the window's over %d tokens: %.3g of the largest"
                  % (x["tokens"], x["worst"]))
PY
