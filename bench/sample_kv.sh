#!/usr/bin/env bash
# --sample on the CPU with the key/value cache (the decode program) and without it (the
# window's pass each token, TRAINC_KV_CACHE=0), and transformers' generate with its
# cache (bench/sample_kv_hf.py, HF_PYTHON), on specs/llama_124m.json's shape (random
# weights, fp32, greedy), ROUNDS alternating rounds (default 2) of N tokens (default 32)
# after a 12-token prompt; then K sequences at once (default 4): trainc --num-samples K
# with the cache, generate on a batch of K copies of the prompt (tokens counted over the
# K). One JSON line a run.
#   HF_PYTHON=.venv/hf/bin/python bash bench/sample_kv.sh [ROUNDS] [N] [K]
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-2}; n=${2:-32}; k=${3:-4}
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
d=build/bench/sample_kv
mkdir -p "$d"
build/trainc build specs/llama_124m.json -o "$d/llama_124m" >/dev/null
# a validation shard of two windows (--eval validates before it samples)
/usr/bin/python3 - "$d/val_000000.bin" <<'PY'
import sys, numpy as np
toks = np.frombuffer(open("data/text/val_000000.bin", "rb").read()[1024:], np.uint16)[:2100]
hdr = np.zeros(256, np.int32); hdr[:3] = (20240520, 1, len(toks))
open(sys.argv[1], "wb").write(hdr.tobytes() + toks.tobytes())
PY
sets=(--set batch_size=16 --set loader.drop_last=false --set "data.train.tokens=$d/val_000000.bin" --set "data.val.tokens=$d/val_000000.bin")
threads=$(nproc)
for r in $(seq "$rounds"); do
    for run in 1:1 0:1 1:$k; do
        kv=${run%:*} s=${run#*:}
        line=$(TRAINC_KV_CACHE=$kv "$d/llama_124m" --eval "${sets[@]}" --threads "$threads" \
                 --sample "$n" --num-samples "$s" --prompt "The license " --temperature 1e-300 \
                 2>&1 >/dev/null | grep '^trainc: sampled')
        # "trainc: sampled N tokens in S s, R a second (K from the key/value cache)"
        echo "$line" | awk -v r="$r" -v kv="$kv" -v s="$s" '{printf "{\"round\":%d,\"run\":\"trainc %s%s\",\"tokens\":%d,\"seconds\":%s,\"tokens_per_s\":%s,\"from_cache\":%d}\n", r, kv == 1 ? "cache" : "window", (s > 1 ? " x" s : ""), $3, $6, $8, substr($11, 2)}'
    done
    echo "{\"round\":$r,\"run\":\"transformers generate\",\"result\":$("$HF_PYTHON" bench/sample_kv_hf.py 12 "$n" "$threads")}"
    echo "{\"round\":$r,\"run\":\"transformers generate x$k\",\"result\":$("$HF_PYTHON" bench/sample_kv_hf.py 12 "$n" "$threads" "$k")}"
done
