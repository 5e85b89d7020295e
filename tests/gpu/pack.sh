#!/usr/bin/env bash
# Packs what the GPU checks need into build/devpack.tar.xz, here (no GPU needed): the
# device machine has the NVIDIA driver, the CUDA toolkit and PyTorch, but none of our
# Debian libraries (cJSON, OpenBLAS, Open MPI) and no trainc, so the trainers travel
# as one --bundle (their libraries in lib/), as a user would ship them. cuBLASLt and
# NVRTC are left out of the pack (620 MiB) and taken
# from the device's toolkit: tests/gpu/run.sh points LD_LIBRARY_PATH at them.
#
#   bash tests/gpu/pack.sh        then, with build/devpack.tar.xz copied to the GPU machine,
#                                 tests/gpu/run.sh or tests/gpu/measure.sh there
set -eu
cd "$(dirname "$0")/../.."
TRAINC=${TRAINC:-build/trainc}
ARCH=${ARCH:-sm_90a}   # the Hopper attention kernels need the architecture-specific cubin
P=build/devpack
rm -rf "$P" build/devpack.tar.xz; mkdir -p "$P"
make -s all test-gpu-build
for spec in mlp_fashion cnn_fashion gpt_char; do
    "$TRAINC" build specs/$spec.json --device both --arch "$ARCH" --bundle "$P/ship" -o $spec 2>>"$P/build.log"
    for p in bf16 fp16; do
        [ $spec = gpt_char ] && [ $p = fp16 ] && continue
        "$TRAINC" build specs/$spec.json --device both --arch "$ARCH" --set precision=$p-mixed \
            --bundle "$P/ship" -o ${spec}_$p 2>>"$P/build.log"
    done
done
# tests/gpu/run.sh: the vision transformer (tokens, its class token) in fp32 and bf16-mixed
for p in fp32 bf16-mixed; do
    "$TRAINC" build specs/vit_fashion.json --device both --arch "$ARCH" --set precision=$p \
        --bundle "$P/ship" -o vit_fashion$([ $p = fp32 ] || echo _bf16) 2>>"$P/build.log"
done
# tests/gpu/run.sh: gpt_char with its embeddings, first block and a layernorm weight
# frozen (the pool without their gradients and state; the layernorm's dgamma in the sink)
"$TRAINC" build specs/gpt_char.json --device both --arch "$ARCH" \
    --set 'freeze=wte.weight,wpe.weight,h.0.*,h.1.ln_2.weight' --bundle "$P/ship" -o gpt_char_freeze 2>>"$P/build.log"
# and with lora's adapters (rank 8, dropout 0.05) on every linear but the tied head
for p in fp32 bf16-mixed; do   # (bf16: the frozen GEMM weights in 16 bits alone)
    "$TRAINC" build specs/gpt_char.json --device both --arch "$ARCH" --set lora.rank=8 \
        --set lora.alpha=16 --set lora.dropout=0.05 --set precision=$p --bundle "$P/ship" \
        -o gpt_char_lora$([ $p = fp32 ] || echo _bf16) 2>>"$P/build.log"
done
for policy in none selective full; do   # bench/gpu_gpt2.sh: the policy is compiled in (bf16-mixed)
    "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" --set recompute=$policy \
        --bundle "$P/ship" -o gpt2_124m_$policy 2>>"$P/build.log"
done
# bench/gpu_gpt2_b16.sh: the logits' rows 50257 apart instead of 50304, for the A/B
TRAINC_PAD_LOGITS=0 "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" \
    --bundle "$P/ship" -o gpt2_124m_nopad 2>>"$P/build.log"
# bench/gpu_gpt2_b16.sh: the head and loss over the whole logits (one GEMM each, as
# before they ran a quarter of each sample's rows at a time), for the A/B
TRAINC_HEAD_CHUNKS=1 "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" \
    --bundle "$P/ship" -o gpt2_124m_whole 2>>"$P/build.log"
# bench/gpu_gpt2_b16.sh: the cross-entropy's three passes (the kernel before the row
# was kept in registers), for the A/B
TRAINC_CE_REGS=0 "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" \
    --bundle "$P/ship" -o gpt2_124m_ce3 2>>"$P/build.log"
# bench/gpu_fp8.sh: GPT-2 in fp8-mixed beside gpt2_124m_none (bf16-mixed); a trainc
# that refuses the precision leaves its message in gpt2_124m_fp8.refused instead, and
# the benchmark records a skipped row
if ! "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" --set recompute=none --set precision=fp8-mixed \
        --bundle "$P/ship" -o gpt2_124m_fp8 >"$P/ship/gpt2_124m_fp8.refused" 2>&1; then
    echo "pack.sh: no fp8-mixed GPT-2: $(tail -n 1 "$P/ship/gpt2_124m_fp8.refused")"
else
    rm -f "$P/ship/gpt2_124m_fp8.refused"
fi
# the memory goal, auto at twice the batch PyTorch fits (bench/gpu_gpt2.sh runs
# gpt2_124m_autoN when N is that): on an H200, 2 x 188 (PyTorch with checkpointing,
# bench/RESULTS.md, 2026-11-27, fc5d978) in what trainc none used at its largest batch; on an
# H100, 2 x 105 (PyTorch's 77 there, scaled as on the H200: a guess until measured)
for bm in 376:142500 210:80500; do   # batch:budget; the plan's choice beside each trainer
    A=(specs/gpt2_124m.json --set batch_size=${bm%:*} --set memory_budget_mb=${bm#*:} --set recompute=auto)
    "$TRAINC" build "${A[@]}" --device both --arch "$ARCH" --bundle "$P/ship" -o gpt2_124m_auto${bm%:*} 2>>"$P/build.log"
    "$TRAINC" plan "${A[@]}" | grep -A1 "^  recompute  " | tr -s ' \n' ' ' >"$P/ship/gpt2_124m_auto${bm%:*}.plan"
done
# bench/gpu_llama.sh: the Llama benchmark's trainers (bf16-mixed, as the specs say), and
# llama3_1b with recompute auto planned at twice the batches PyTorch might fit (its
# largest is measured there: 2 x 8 .. 2 x 32 in an H200's 142500 MiB)
if [ -f specs/llama_124m.json ] && [ -f specs/llama3_1b.json ]; then
    for spec in llama_124m llama3_1b; do
        "$TRAINC" build specs/$spec.json --device both --arch "$ARCH" --bundle "$P/ship" -o $spec 2>>"$P/build.log"
    done
    # and with selective recomputation (the norms and SwiGLU products replayed): the
    # memory goal's row at PyTorch's batch beside none's
    "$TRAINC" build specs/llama3_1b.json --set recompute=selective --device both --arch "$ARCH" \
        --bundle "$P/ship" -o llama3_1b_sel 2>>"$P/build.log"
    for b in 16 20 24 28 32 36 40 44 48 52 56 60 64; do
        "$TRAINC" build specs/llama3_1b.json --set batch_size=$b --set memory_budget_mb=142500 --set recompute=auto \
            --device both --arch "$ARCH" --bundle "$P/ship" -o llama3_1b_auto$b 2>>"$P/build.log"
    done
fi
# bench/gpu_resnet.sh: the ResNet as its spec says (fp32) and in bf16-mixed (cnn_fashion's
# two are above)
"$TRAINC" build specs/resnet_fashion.json --device both --arch "$ARCH" --bundle "$P/ship" -o resnet_fashion 2>>"$P/build.log"
"$TRAINC" build specs/resnet_fashion.json --device both --arch "$ARCH" --set precision=bf16-mixed \
    --bundle "$P/ship" -o resnet_fashion_bf16 2>>"$P/build.log"
# run.sh checks: the mixture of experts (moe.cuh), a tiny Llama whose MLPs are moe layers
# with the load-balancing loss and a gated shared expert; in fp32 (SIMT GEMMs) and
# bf16-mixed (the tensor cores')
"${PYTHON:-/usr/bin/python3}" tests/llama_tiny.py build/llama_moe.json --moe-aux --moe-shared
"$TRAINC" build build/llama_moe.json --device both --arch "$ARCH" --bundle "$P/ship" -o llama_moe 2>>"$P/build.log"
"$TRAINC" build build/llama_moe.json --device both --arch "$ARCH" --set precision=bf16-mixed \
    --bundle "$P/ship" -o llama_moe_bf16 2>>"$P/build.log"
# run.sh checks: the loss's ignore_index (tests/ignore_parity.py's sft case: masked
# prompts, accumulate 2), its .npy data in data/sft
"${PYTHON:-/usr/bin/python3}" tests/ignore_parity.py --spec sft build/sft_ignore
"$TRAINC" build build/sft_ignore/spec.json --device both --arch "$ARCH" --bundle "$P/ship" \
    -o sft_ignore 2>>"$P/build.log"
mkdir -p "$P/data/sft"
cp build/sft_ignore/*.npy "$P/data/sft/"
# run.sh checks: a BERT's padded rows (tests/nvrtc_specs/bert_pad.json: attention without
# a causal mask over the model's positions, each row's padding a sequence of its own),
# fp32 and bf16-mixed, its .npy data in data/bert (1024 rows of random text lengths); and
# the same encoder as a question answerer (bert_qa.json: span, the padding's logits at
# -1e30), y_qa.npy two places inside each row's text; and a ModernBERT's (modernbert_pad.json:
# windows on both sides, mean pooling over the text) on the same x, pos and y
for p in fp32 bf16-mixed; do
    for m in bert_pad bert_qa modernbert_pad; do
        "$TRAINC" build tests/nvrtc_specs/$m.json --device both --arch "$ARCH" --set precision=$p \
            --bundle "$P/ship" -o $m$([ $p = fp32 ] || echo _bf16) 2>>"$P/build.log"
    done
done
"${PYTHON:-/usr/bin/python3}" - "$P/data/bert" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(5)
N, T = 1024, 128
lens = rng.integers(2, T + 1, size=N)
x = rng.integers(1, 1000, size=(N, T)).astype(np.int32)
types = np.zeros((N, T), np.int32)
pos = np.zeros((N, T), np.int32)
for r, k in enumerate(lens):
    x[r, k:] = 0
    types[r, k // 2:k] = r % 2
    pos[r, :k], pos[r, k:] = np.arange(k), np.arange(T - k)
y = (x[:, 1] % 3).astype(np.int32)   # (a class the first token tells)
y_qa = np.sort(rng.integers(0, lens[:, None], size=(N, 2)), axis=1).astype(np.int32)
for k, a in (("x", x), ("types", types), ("pos", pos), ("y", y), ("y_qa", y_qa)):
    np.save("%s/%s.npy" % (d, k), a)
PY
# run.sh checks: a decoder's sequence classifier (tests/nvrtc_specs/llama_cls.json: rows
# padded on the left, GQA and rope over the model's positions, last_token), fp32 and
# bf16-mixed, its .npy data in data/cls (1024 rows of random text lengths)
for p in fp32 bf16-mixed; do
    "$TRAINC" build tests/nvrtc_specs/llama_cls.json --device both --arch "$ARCH" --set precision=$p \
        --bundle "$P/ship" -o llama_cls$([ $p = fp32 ] || echo _bf16) 2>>"$P/build.log"
done
"${PYTHON:-/usr/bin/python3}" - "$P/data/cls" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(6)
N, T = 1024, 256
lens = rng.integers(2, T + 1, size=N)
x = rng.integers(1, 1000, size=(N, T)).astype(np.int32)
pos = np.zeros((N, T), np.int32)
for r, k in enumerate(lens):
    x[r, :T - k] = 0
    pos[r, :T - k], pos[r, T - k:] = np.arange(T - k), np.arange(k)
y = (x[:, -1] % 3).astype(np.int32)   # (a class the last token tells)
for k, a in (("x", x), ("pos", pos), ("y", y)):
    np.save("%s/%s.npy" % (d, k), a)
PY
# run.sh checks: dpo (tests/nvrtc_specs/llama_dpo.json: pairs of left-padded texts, a
# vocabulary of 8200 whose rows are padded, loss.cuh's rt_dpo_*), fp32 and bf16-mixed,
# its .npy data in data/dpo (256 pairs of random texts, the reference's log-probabilities
# random)
for p in fp32 bf16-mixed; do
    "$TRAINC" build tests/nvrtc_specs/llama_dpo.json --device both --arch "$ARCH" --set precision=$p \
        --bundle "$P/ship" -o llama_dpo$([ $p = fp32 ] || echo _bf16) 2>>"$P/build.log"
done
"${PYTHON:-/usr/bin/python3}" tests/gpu/dpo_data.py "$P/data/dpo"
# run.sh checks: orpo and kto (llama_dpo.json's model with the orpo loss and its sft
# target t, the chosen text's next ids: rt_orpo_targets, rt_orpo_sft and the pairs' orpo
# branch; with the kto loss and its label: rt_kto_kl and the kto branch), fp32
"${PYTHON:-/usr/bin/python3}" - "$P" <<'PY'
import json, sys
for op in ("orpo", "kto"):
    s = json.load(open("tests/nvrtc_specs/llama_dpo.json"))
    m, files = s["model"], s["train"]["data"]["train"]
    m["name"] = "llama_" + op
    if op == "orpo":
        del m["inputs"]["ref"], files["ref"]
        m["inputs"]["t"] = {"shape": [m["inputs"]["x"]["shape"][0] // 2], "dtype": "i32",
                            "classes": 8200}
        m["loss"] = {"op": "orpo", "target": "y", "sft_target": "t"}
        files["t"] = "t.npy"   # (run.sh gives the files)
    else:
        m["inputs"]["label"] = {"shape": [], "dtype": "i32", "classes": 2}
        m["loss"] = {"op": "kto", "target": "y", "reference": "ref", "label": "label"}
        files["label"] = "label.npy"
    json.dump(s, open("%s/llama_%s.json" % (sys.argv[1], op), "w"), indent=1)
PY
for op in orpo kto; do
    "$TRAINC" build "$P/llama_$op.json" --device both --arch "$ARCH" --bundle "$P/ship" \
        -o llama_$op 2>>"$P/build.log"
done
# bench/gpu_dcgan.sh: the DCGAN in fp32 and bf16-mixed
"$TRAINC" build specs/dcgan_fashion.json --device both --arch "$ARCH" --bundle "$P/ship" -o dcgan_fashion 2>>"$P/build.log"
"$TRAINC" build specs/dcgan_fashion.json --device both --arch "$ARCH" --set precision=bf16-mixed \
    --bundle "$P/ship" -o dcgan_fashion_bf16 2>>"$P/build.log"
"$TRAINC" build bench/wide_mlp.json --device both --arch "$ARCH" --bundle "$P/ship" -o wide_mlp 2>>"$P/build.log"
"$TRAINC" build bench/wide_mlp.json --device both --arch "$ARCH" --set precision=bf16-mixed \
    --bundle "$P/ship" -o wide_mlp_bf16 2>>"$P/build.log"
cp build/tests/gpu/check_ops build/tests/gpu/bench_attn build/tests/gpu/fp8_lt_check "$P/ship/"
patchelf --set-rpath '$ORIGIN/lib' "$P/ship/check_ops"
patchelf --set-rpath '$ORIGIN/lib' "$P/ship/bench_attn"   # bench/gpu_attention.sh
mkdir -p "$P/data/fashion" "$P/data/text" "$P/templates"
cp data/fashion/*.npy "$P/data/fashion/"
cp data/text/*.bin "$P/data/text/"
# bench/gpu_fp8.sh's real text: GPT-2 BPE shards of Debian's prose (bench/text_shards.py:
# its own tokenizer trained here with Hugging Face `tokenizers`, about 10M tokens, 5 MB
# in the pack), made once into data/gpt2text where HF_PYTHON has `tokenizers`
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
[ -f data/gpt2text/train_000000.bin ] || { [ -x "$HF_PYTHON" ] &&
    "$HF_PYTHON" bench/text_shards.py data/gpt2text >>"$P/build.log" 2>&1; } ||
    echo "pack.sh: no GPT-2 text shards (bench/text_shards.py needs HF_PYTHON with tokenizers); gpu_fp8.sh will skip"
if [ -f data/gpt2text/train_000000.bin ]; then
    mkdir -p "$P/data/gpt2text"
    cp data/gpt2text/*.bin data/gpt2text/source.json data/gpt2text/tokenizer.json "$P/data/gpt2text/"
fi
# bench/gpu_hf.sh: a Llama-3.2-1B-shaped Hugging Face checkpoint fine-tuned there. Here:
# the text and a Llama-3-style tokenizer (bench/hf_data.py, made once into data/hf1b),
# the trainer built from what `trainc import hf` makes of the checkpoint's config (a
# random checkpoint made here for it, then removed: 2.5 GB, 5 GB imported), and trainc
# itself (its import, data text and export run there; the device makes its own
# checkpoint with bench/hf_llama1b.py, and the script checks its import gives the same
# model.json as the one the trainer was built from)
if [ -f data/hf1b/tokenizer.json ] || { [ -x "$HF_PYTHON" ] && "$HF_PYTHON" bench/hf_data.py data/hf1b >>"$P/build.log" 2>&1; }; then
    H=build/hf1b
    rm -rf "$H"; mkdir -p "$H" "$P/data/hf1b"
    "${PYTHON:-/usr/bin/python3}" bench/hf_llama1b.py make "$H/hf" data/hf1b/tokenizer.json >>"$P/build.log"
    "$TRAINC" import hf "$H/hf" -o "$H/llama1b_ft" --seq-len 2048 2>>"$P/build.log"
    "$TRAINC" build "$H/llama1b_ft/model.json" "$H/llama1b_ft/train.json" --device both --arch "$ARCH" \
        --bundle "$P/ship" -o llama1b_ft 2>>"$P/build.log"
    cp "$H/llama1b_ft/model.json" "$H/llama1b_ft/train.json" data/hf1b/text.txt data/hf1b/tokenizer.json "$P/data/hf1b/"
    rm -rf "$H"
    cp build/trainc "$P/ship/"
    patchelf --set-rpath '$ORIGIN/lib' "$P/ship/trainc"
else
    echo "pack.sh: no data/hf1b (bench/hf_data.py needs HF_PYTHON with tokenizers); gpu_hf.sh will skip"
fi
cp -r templates/cuda "$P/templates/"
# llm.c, for bench/gpu_gpt2_b16.sh (bench/llmc.sh) to run there beside trainc (a
# comparison, not part of trainc): its binaries only, built by bench/llmc_build.sh from
# checkouts of llm.c and cudnn-frontend into LLMC_BIN (train_gpt2cu_cudnn with
# USE_CUDNN=1, llm.c's fastest, and train_gpt2cu without cuDNN, the extra row;
# build_flags.txt says how each was built). The project ships no copy of llm.c;
# without LLMC_BIN the benchmark records llm.c's rows as skipped. LLMC_BIN defaults to
# build/llmc-bin, where `bash bench/llmc_build.sh build/llmc-bin` leaves them.
LLMC_BIN=${LLMC_BIN:-build/llmc-bin}
if ls "$LLMC_BIN"/train_gpt2cu* >/dev/null 2>&1; then
    mkdir -p "$P/llm.c"
    cp "$LLMC_BIN"/train_gpt2cu* "$P/llm.c/"
    cp "$LLMC_BIN/build_flags.txt" "$P/llm.c/" 2>/dev/null ||
        echo "binaries from $LLMC_BIN (no build_flags.txt)" >"$P/llm.c/build_flags.txt"
else
    echo "pack.sh: no llm.c binaries (LLMC_BIN): the benchmark will skip llm.c's rows"
fi
# the commit the pack was built from, for the benchmarks' records (the device's copy of
# the tree may have no git history); -dirty when the tree had changes
c=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || c=$c-dirty
printf %s "$c" >"$P/commit"
# the device has its own cuBLASLt, NVRTC and NCCL (every bundle above copied them)
rm -f "$P"/ship/lib/libcublasLt* "$P"/ship/lib/libnvrtc* "$P"/ship/lib/libnccl*
# the binaries without their debug sections (the device runs them; nothing there reads
# their DWARF): less to carry beside the tree (strip leaves files that are not ELF as
# they are)
find "$P" -type f -exec strip --strip-debug {} + 2>/dev/null || true
# xz with a dictionary past the trainers' size: the forty trainers share their runtime,
# which a 256 MiB window compresses once (57.5 MB with xz's default -6, 47.7 MB so:
# the pack and the tree then fit the device tool's 64 MiB carry together)
tar -C build -cf - devpack | xz -T2 --lzma2=preset=6,dict=256MiB >build/devpack.tar.xz
ls -la build/devpack.tar.xz
