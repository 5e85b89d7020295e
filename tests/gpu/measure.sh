#!/usr/bin/env bash
# Runs the named GPU checks and benchmarks one after another, each under its own time
# limit, all within BUDGET seconds, on a machine with a GPU. After each part it appends
# the part's results to $OUT/summary.txt and packs every log so far into
# $OUT/logs.tar.gz, so what finished is kept even when a later part runs out of time.
#
#   on the build machine:  bash tests/gpu/pack.sh        writes build/devpack.tar.xz
#                          (with llm.c binaries in the pack: pack.sh LLMC_BIN)
#   on the GPU machine:    BUDGET=500 bash tests/gpu/measure.sh checks gpt2 profile bench
#
# Give the parts in the order of what matters most: what the budget cuts is the last.
#
# Parts, and each one's default time limit (seconds):
#   checks     tests/gpu/run.sh checks: every kernel against its C twin in fp32, bf16
#              and fp16; the MLP, CNN, gpt_char, a tiny mixture of experts and a
#              BERT's padded rows against the CPU; the MLP's accuracy;
#              compute-sanitizer                                                     240
#   gpt2       bench/gpu_gpt2_b16.sh: GPT-2 124M at B=16 in bf16-mixed, 3 alternating
#              rounds of 10 + 100 steps: trainc, PyTorch's torch.compile (the whole
#              step, fullgraph, the vocabulary padded) in the default mode and in
#              max-autotune-no-cudagraphs, llm.c with cuDNN; llm.c without cuDNN
#              once; MFU over 989 TFLOP/s and over the measured bf16 rate, compile
#              times, start-up, memory (EXTRAS=1: the A/B rows and --profile)        420
#   gpt2b64    the same at B=64, PyTorch in the faster mode of the gpt2 part's
#              (its jsonl; the default mode without it)                              240
#   fp8        bench/gpu_fp8.sh: first fp8_lt_check --probe (which FP8 GEMM settings
#              the device's cuBLASLt takes, with cuBLASLt's trace), then GPT-2 124M
#              1000 steps on the pack's Debian text shards in bf16-mixed and
#              fp8-mixed, the final loss and tokens/s ratios; a skipped row when the
#              pack has no fp8 trainer (trainc refused the precision when it was
#              packed)                                                               150
#   curve      bench/gpu_gpt2_curve.sh: GPT-2 124M's recipe, trainc's bf16-mixed against
#              PyTorch's bf16 autocast, 1000 steps at B=16 on the pack's GPT-2 BPE shards
#              of Debian's text, from the same weights on the same batches: each step's
#              loss, the means of the last 100 (within 1%: ../BENCHMARKING.md's loss
#              curve beside the speed figure)                                         240
#   attn       bench/gpu_attention.sh: the attention kernels alone (tests/gpu/bench_attn.c)
#              against every SDPA backend PyTorch can force, T 1024-4096, head dims 64
#              and 128, causal and full, TFLOP/s forward and backward, 3 rounds; and
#              the Llama-family attention (GQA, rope; Gemma 3 1B's heads 256 wide):
#              trainc both ways, SDPA                                               120
#   hf         bench/gpu_hf.sh: a Llama-3.2-1B-shaped HF checkpoint (random weights)
#              imported, its tokenizer's shards, 30 steps of bf16-mixed fine-tuning
#              (tokens/s), its validation, export, and transformers' loss on the export
#              (where the device has transformers)                                  240
#   bench      tests/gpu/run.sh bench: the MLP, CNN and wide MLP against PyTorch eager
#              and torch.compile                                                     300
#   llama      bench/gpu_llama.sh: llama_124m at B=16 and llama3_1b at PyTorch's
#              largest batch, bf16-mixed, against PyTorch eager and torch.compile (3
#              alternating runs each), MFU, memory; recompute auto at twice the batch  420
#   recompute  bench/gpu_gpt2.sh: GPT-2's largest batch and tokens/s per
#              recomputation policy against PyTorch with and without checkpointing    400
#   resnet     bench/gpu_resnet.sh, short: resnet_fashion's time to 94.0% test accuracy,
#              trainc against PyTorch eager (its step one CUDA graph) and torch.compile
#              max-autotune (once each, PyTorch's stopped at 2.2x trainc's time), then
#              samples/s of cnn_fashion
#              at 4096 fp32 and resnet_fashion at 4096 and 512 in fp32 and bf16-mixed,
#              3 alternating runs of 10 + 50 steps, then the bf16 ResNet once at each
#              batch with TRAINC_CONV_KERNELS=0 (the tensor cores' convolutions'
#              A/B against im2col and cuBLASLt); the script stops starting runs
#              20 s before the limit and prints what it has (RESNET_WHAT=tta or speed
#              in the environment: one half; TORCH_MODE: another compile mode)       300
#   dcgan      bench/gpu_dcgan.sh: trainc's --profile of the DCGAN at batch 128 (where
#              its step goes, by instruction), then specs/dcgan_fashion.json at
#              batches 128 and 1024, fp32 and bf16-mixed, against PyTorch eager, torch.compile (max-autotune), the
#              whole step in a CUDA graph and Lightning's manual-optimization GAN loop,
#              3 alternating rounds; it starts no run after the part's limit less 15 s
#              (PART_LIMIT) and prints its table with what it has                   240
#   sample     bench/gpu_sample.sh: llama_124m's and llama3_1b's --sample (bf16-mixed,
#              greedy, 128 tokens) with the key/value cache and by the window's pass,
#              against PyTorch with a static cache, eager and torch.compile (CUDA
#              graphs), and llama3_1b's four samples at once against a batch of 4, 2
#              alternating rounds (no round started in the part's last minute); the
#              cache's logits against the window's                                  360
#   profile    bench/gpu_profile.sh: Nsight Compute, by kernel: gpt2_124m_none at batch
#              8 (the attention kernels and the classifier in detail: stall reasons),
#              then wide_mlp_bf16 at 65536 with K-sliced weight gradients and with
#              cuBLASLt's whole GEMMs                                                150
# A part given as NAME=SECONDS takes that limit instead. Exit status: 0 when every part
# ran to its end and passed, else 1. Every part, run or not, leaves one row in
# $OUT/parts.jsonl (ok, fail or skip, its seconds), and the JSONL files it wrote are
# copied to $OUT beside it (the raw records for bench/raw/).
#
# The GPT-2 baselines, llm.c's terms and fp8 in one call (about 9 minutes of device
# time with the machine's start; the B=16 baseline first, as what a cut loses is the
# last). Each part gives its runs what is left of its limit and prints its table with
# what it has. The unknown is max-autotune's first compile (a minute or several: a
# 2-step prewarm run pays it before the rounds, which then reuse the inductor cache,
# about 10-20 s a run; gpt2b64 compiles its new shapes again, in one mode). The rest
# of gpt2 is about 3 x 30 s of trainc and llm.c runs and 2 x 3 PyTorch runs:
#   BUDGET=580 bash tests/gpu/measure.sh checks=70 gpt2=330 fp8=150
# (checks first: check_ops holds fp8-mixed's casts and FP8 GEMMs against their C twins
# on real cuBLASLt, never run on a GPU before; fp8 runs 1000 steps of bf16-mixed and
# of fp8-mixed, about 30 s each on an H200). Then, in a second call if device time is
# left: BUDGET=... bash tests/gpu/measure.sh gpt2b64=100 llama=... resnet=... dcgan=...
#
# How long the parts took (2026-11-26 and 2026-11-27, H100 and H200): checks 46-69 s
# (all three precisions at once); gpt2 72-78 s;
# bench 140-150 s; profile 15-46 s; recompute: trainc's three policies about 60 s each
# from their predicted batches, PyTorch's two searches the rest of 400 s. With the
# largest batches known from an earlier run on the same kind of device,
# bench/gpu_gpt2.sh measures only what is missing; the recompute goal alone on an H200
# (none at PyTorch's batch and auto at twice PyTorch's checkpointed batch, twice,
# alternately) takes about a minute:
#   GPT2_WHAT=goal GOAL_ROUNDS=2 KNOWN="none=358 selective=495 full=1162" TORCH_BATCH=138 \
#     TORCH_CKPT_BATCH=188 BUDGET=200 bash tests/gpu/measure.sh recompute=190
# On an H100 the same with KNOWN="none=200 selective=276 full=648" TORCH_BATCH=77 and
# PyTorch's checkpointed batch searched (no TORCH_CKPT_BATCH): about 3 minutes.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/gpu-out}
BUDGET=${BUDGET:-450}
W=/tmp/gpu-measure
rm -rf "$W"; mkdir -p "$W" "$OUT"
T0=$(date +%s)
SUM=$OUT/summary.txt
: >"$SUM"
: >"$OUT/parts.jsonl"
say() { echo "$*" | tee -a "$SUM"; }
part_row() {   # part_row NAME STATUS SECONDS [WHY]: the part's line in $OUT/parts.jsonl
    printf '{"part":"%s","status":"%s","seconds":%s,"why":"%s"}\n' "$1" "$2" "$3" "${4:-}" >>"$OUT/parts.jsonl"
}
pack() {   # (a failed tar leaves the previous pack, and no extra file in $OUT)
    tar -C "$W" -czf "$W.tgz" . 2>/dev/null
    [ -s "$W.tgz" ] && mv "$W.tgz" "$OUT/logs.tar.gz"
    rm -f "$W.tgz"
}

[ -f build/devpack.tar.xz ] || { say "FAIL no build/devpack.tar.xz: run tests/gpu/pack.sh on the build machine and copy it here"; exit 1; }
say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
[ $# -gt 0 ] || set -- checks gpt2
# After the checks: where check_ops --bf16 or --fp16 failed the attention, plain or with
# the Llama-family options (the Hopper kernels on an H100/H200, checked there against the
# C twin for the first time), or stopped before its count, the later parts run the sm_80
# kernels (TRAINC_ATT_SM90=0), so the benchmarks still measure something right; said in
# the summary. (run.sh writes a precision's log once its shards ended: none, and the
# check did not end.)
hopper_gate() {
    local v l
    for v in bf16 fp16; do
        l=$1/check_ops_$v.log
        if [ ! -f "$l" ] || grep -Eq "^FAIL +attention_(ext_)?(fwd|bwd)( |$)" "$l" || ! grep -q "passed, " "$l"; then
            export TRAINC_ATT_SM90=0
            say "NOTE check_ops --$v: the attention kernels failed or it stopped: the parts after run with TRAINC_ATT_SM90=0"
            return
        fi
    done
}
say "budget ${BUDGET} s, parts: $*"
status=0
for part in "$@"; do
    name=${part%%=*}
    case $name in
    checks) lim=240; cmd=(bash tests/gpu/run.sh checks) ;;
    gpt2) lim=420; cmd=(bash bench/gpu_gpt2_b16.sh) ;;
    gpt2b64) lim=240; cmd=(env B=64 MODES=best BEST_FROM="$W/gpt2/gpt2_b16.jsonl" bash bench/gpu_gpt2_b16.sh) ;;
    fp8) lim=150; cmd=(bash bench/gpu_fp8.sh) ;;
    curve) lim=240; cmd=(bash bench/gpu_gpt2_curve.sh) ;;
    attn) lim=120; cmd=(bash bench/gpu_attention.sh) ;;
    hf) lim=240; cmd=(bash bench/gpu_hf.sh) ;;
    bench) lim=300; cmd=(bash tests/gpu/run.sh bench) ;;
    llama) lim=420; cmd=(bash bench/gpu_llama.sh) ;;
    recompute) lim=400; cmd=(bash bench/gpu_gpt2.sh) ;;
    resnet) lim=300; cmd=(env WARM=10 STEPS=50 bash bench/gpu_resnet.sh) ;;
    dcgan) lim=240; cmd=(bash bench/gpu_dcgan.sh) ;;
    sample) lim=360; cmd=(env ROUNDS=2 bash bench/gpu_sample.sh) ;;
    profile) lim=150; cmd=(bash -c 'DETAIL="rt_attention_fwd:12 rt_attention_bwd_kv:12 rt_attention_bwd_[0-9]:12 rt_cross_entropy:1" bash bench/gpu_profile.sh gpt2_124m_none 8 && bash bench/gpu_profile.sh wide_mlp_bf16 65536 && TRAINC_GEMM_KSPLIT=0 PTAG=whole bash bench/gpu_profile.sh wide_mlp_bf16 65536') ;;
    *) say "FAIL unknown part '$name' (checks, gpt2, gpt2b64, fp8, curve, attn, hf, llama, bench, recompute, resnet, dcgan, sample, profile)"
       part_row "$name" fail 0 "unknown part"; status=1; continue ;;
    esac
    if [ "$part" != "$name" ]; then
        lim=${part#*=}
        case $lim in
        '' | *[!0-9]*) say "FAIL $part: the limit is not a number of seconds"; part_row "$name" fail 0 "limit $lim"; status=1; continue ;;
        esac
    fi
    left=$((BUDGET - ($(date +%s) - T0)))
    if [ "$left" -lt 30 ]; then
        say "skip $name: ${left} s left of the budget"
        part_row "$name" skip 0 "${left} s left of the budget"
        status=1
        continue
    fi
    [ "$lim" -gt "$left" ] && lim=$left
    mkdir -p "$W/$name"
    t=$(date +%s)
    # timeout signals the part's whole process group (trainers, python, nvcc included);
    # PART_LIMIT tells a part that watches its own time (bench/gpu_resnet.sh,
    # bench/gpu_dcgan.sh) when it will be cut
    OUT=$W/$name PART_LIMIT=$lim timeout -k 5 "$lim" "${cmd[@]}" >"$W/$name/stdout.log" 2>&1
    rc=$?
    took=$(($(date +%s) - t))
    case $rc in
    0) say "ok   $name (${took} s)"; part_row "$name" ok "$took" ;;
    124 | 137) say "FAIL $name: stopped at its limit of ${lim} s (what it wrote is in logs.tar.gz)"; status=1
       part_row "$name" fail "$took" "stopped at its limit of $lim s" ;;
    *) say "FAIL $name: exit $rc (${took} s)"; status=1; part_row "$name" fail "$took" "exit $rc" ;;
    esac
    # the part's raw records beside the summary (at most 8 files come back from the
    # device: keep the parts few, or take them from logs.tar.gz)
    # (the training curves, *.metrics.jsonl, stay in logs.tar.gz)
    for j in "$W/$name"/*.jsonl; do
        case $j in *.metrics.jsonl) continue ;; esac
        [ -f "$j" ] && cp "$j" "$OUT/"
    done
    # the part's own summary lines (run.sh's ok/FAIL, a benchmark's table)
    if [ -f "$W/$name/summary.txt" ]; then
        sed 's/^/     /' "$W/$name/summary.txt" | tee -a "$SUM"
    fi
    tail -n 15 "$W/$name/stdout.log" | sed 's/^/   | /' | tee -a "$SUM"
    [ "$name" = checks ] && hopper_gate "$W/checks"
    pack
done
say "total: $(($(date +%s) - T0)) s"
pack
exit $status
