#!/usr/bin/env bash
# --sample's key/value cache on the fake GPU (tests/fake_gpu/: the decode program's
# kernels, templates/cuda/decode.cuh and the validation kernels it launches, in the
# emulator): tests/kv_cache.py's variants that reach every kernel path (GPT-2's
# positions and biases; GQA, qk_norm, a window and llama3's rope; a soft-cap, a scale,
# qkv biases and qk_norm over all heads; a mixture of experts; bf16-mixed; longrope's
# and a partial rope's tables are check_ops' cases), each sampling 150 tokens on the
# fake GPU under TRAINC_KV_CACHE=check, the one-token passes as a CUDA graph, and for
# the second three samples together (--num-samples: a row a sequence, each with its own
# cache) (kv_cache.py says what is required). Each kernel's own check against its C twin is
# tests/gpu/check_ops.c's t_attention_decode.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fake_gpu_kv
lib=
. tests/fake_gpu/env.sh   # the libraries, into $lib
"$PY" tests/kv_cache.py --fake-gpu="$lib" gpt gqa_qknorm_window_llama3 softcap_scale_qkvbias_allheads \
    moe bf16_mixed
