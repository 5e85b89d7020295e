#!/usr/bin/env bash
# The GPU code path of unmodified trainers, end to end, without a GPU: a fake driver,
# NVRTC and cuBLASLt (tests/fake_gpu/, built into build/tests/fake_gpu/lib, or under
# make test build/tests/fake_gpu_lib, and found through LD_LIBRARY_PATH) run device
# memory as host memory, streams as queues (run in one of three legal orders), the
# kernels of kernels_cuda.cu in tests/gpu/emu/'s emulator (compiled by the fake NVRTC
# with g++) and GEMMs with cblas_sgemm. The
# trainers after the first three are built with the fake NVRTC (fbuild below): they
# start with their kernels compiled. For mlp_fashion, cnn_fashion and gpt_char built
# with --device both --arch sm_90 by the real NVRTC:
#   - --device cuda and --device cpu, same options: per-step losses, gradient norms and
#     validation numbers agree within TOL (relative). The arithmetic is the same fp32;
#     the GEMMs are the same OpenBLAS calls; what differs is the order of the kernels'
#     reductions (block sums, double partials), measured at <= 2e-7 here. AdamW can
#     amplify that noise where gradients are tiny (the CPU's own --threads 1 vs 2 move
#     some weights by 1e-6 in 10 steps), so TOL is 1e-5, not the bits;
#   - the start record ("device":"cuda", the fake's name, sm_90, "kernels":"nvrtc" on
#     the first start since the fake refuses the embedded real cubins, the device_*
#     bytes) and the device_memory record;
#   - the second start takes the kernels from the cache ("kernels":"cache"): a run of 10
#     steps with a checkpoint, every operation run at once (TRAINC_FAKE_GPU_SCHEDULE=sync)
#     and 132 SMs (other grids), then --resume to the end with kernels run at once and
#     copies late (eager): records and final weights bit-identical to the uninterrupted
#     run's (lazy: everything as late as possible). A missing stream wait or a host
#     buffer reused too early gives another result under one of these schedules;
#   - gpt_char: --sample 50 prints what the CPU prints (batch 2: the emulator is slow);
#   - tests/vocab/tiny_vocab.json (a vocabulary of 1030: logits rows 1088 apart): --device
#     cuda vs cpu and --sample, in fp32; bf16-mixed against the CPU's fp32;
#   - a tiny Llama (rmsnorm, glu, squared_relu): --device cuda vs cpu in fp32, recompute
#     selective bit-identical to none on the GPU, bf16-mixed against the CPU's fp32;
#   - a tiny model whose attention takes every Llama-family option: --device cuda vs cpu,
#     and with the attention's launches cut every 3 sequences (in fp32; the options'
#     tensor-core kernels in bf16- and fp16-mixed: tests/fake_gpu_attn16.sh);
#   - gpt_char with recompute selective and full, fp32 and bf16-mixed: records and
#     weights bit-identical to recompute none; an MLP with dropout (shuffled,
#     accumulate 2) against the CPU, and its recomputed masks: bit-identical to none;
#   - the same three built for bf16-mixed and for fp16-mixed (16-bit activations,
#     GEMMs on 16-bit operands in the fake cuBLASLt, fp32 master weights): against the
#     CPU's fp32 run, the first loss within 1e-3, the final within 2e-2 (the CNN's are
#     tests/fake_gpu_conv.sh's); on the CPU the fp32 trainer's bits; resume
#     bit-identical; a run-time --set precision=fp32 refused;
#   - gpt_char with heads 64 wide (bf16-mixed) and 128 wide (fp16-mixed): the sm_90a
#     attention backward (the fake device is 9.0) against the CPU's fp32 run, its
#     launches counted, none with TRAINC_ATT_SM90=0;
#   - the update queued before the loss is read (grad_clip's factor worked out on the
#     device) against the host's old order (TRAINC_QUEUED_UPDATE=0): bit-identical;
#   - no host wait between the passes of a step (accumulate 4: as many waits as 1, the
#     same bits under each schedule), one a step in fp16-mixed too, and one for a whole
#     validation;
#   - training passes as CUDA graphs (captured the second time a kind of pass runs)
#     against TRAINC_CUDA_GRAPH=0: bit-identical for the MLP (accumulate 1 and 3, bf16,
#     fp16), the CNN and gpt_char, the number of graph launches counted; none with
#     dropout; a refused or invalidated capture said once, the same bits;
#   - steps without a wait (the host reads losses only when a step needs them) against
#     a wait every step (TRAINC_STEP_WAIT=1): bit-identical, fewer waits; a divergence
#     between waits and a max_time stop + --resume as with waits;
# a GPU too small for the model is "out of GPU memory", exit 2, as is one older
# than sm_80. (tests/fake_gpu_ops.sh runs tests/gpu/check_ops, every kernel against its
# CPU twin, on the fake GPU.)
# By hand, after a run of this script: LD_LIBRARY_PATH=build/tests/fake_gpu/lib (or _lib)
# TRAINC_CACHE_DIR=/tmp/x TRAINER --device cuda ... (TRAINC_FAKE_GPU_SCHEDULE, _SMS,
# _MEM_MB, _TRACE, _PROFILE; TRAINC_FAKE_CC=8.9, the compute capability: see
# tests/fake_gpu/fake_cuda.c).
# What the fake cannot check: the GPU's memory model and races between threads of a
# kernel (a block's threads run one at a time, switching at barriers and shuffles),
# FMA contraction and the GPU's math library, real cuBLASLt, speed.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fake_gpu
lib=
. tests/fake_gpu/env.sh   # gpu, fbuild (the three models below start with NVRTC, then the cache)
echo "ok   fake libcuda.so.1, libnvrtc.so.13, libcublasLt.so.13, libnccl.so.2 built"

# compare KIND A B [TOL [LATE_TOL FROM]]: metrics of run A (cpu or gpu) and run B (gpu);
# KIND "close": every number within TOL (from step FROM on, within LATE_TOL); "same":
# records (less times and rates) and final weights equal
compare() {
    "$PY" - "$@" <<'PY'
import json, sys
kind, a, b = sys.argv[1:4]
tol = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
late_tol, late_from = (float(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (tol, 1 << 62)
def recs(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl")]
def start(rs):
    return [r for r in rs if r.get("event") == "start"][-1]
ra, rb = recs(a), recs(b)
sb = start(rb)
since = rb[rb.index(sb):]   # this process's records (a resumed run appends to the folder)
assert sb["device"] == "cuda" and sb["gpu"] == "trainc fake GPU (CPU emulation)" and sb["arch"] == "sm_90", sb
parts = sb["device_pool_bytes"] + sb["device_arena_bytes"] + sb["device_fixed_bytes"] + sb["device_data_bytes"]
assert sb["device_bytes"] == parts and min(sb["device_pool_bytes"], sb["device_arena_bytes"], sb["device_fixed_bytes"]) > 0, sb
assert sb["device_pool_bytes"] >= 2 * sb["param_bytes"] + sb["optimizer_bytes"], sb
assert sb["device_arena_bytes"] >= sb["arena_bytes"], sb
mem = [r for r in since if r.get("event") == "device_memory"]
first = [r["step"] for r in since if "step" in r and "event" not in r][0]
assert len(mem) == 1 and mem[0]["step"] <= first and mem[0]["allocated_bytes"] == sb["device_bytes"] and \
    sb["device_bytes"] <= mem[0]["used_bytes"] <= mem[0]["total_bytes"] == 16 << 30, mem
KEYS = ("loss", "grad_norm", "val_loss", "val_acc")
def numbers(rs):
    return [(r["step"], k, r[k]) for r in rs if "step" in r and "event" not in r for k in KEYS if k in r]
na, nb = numbers(ra), numbers(rb)
assert [x[:2] for x in na] == [x[:2] for x in nb], "different records:\n%s\n%s" % (na, nb)
if kind == "close":
    assert start(ra)["device"] == "cpu"
    for lo, hi, t in ((0, late_from, tol), (late_from, 1 << 62, late_tol)):
        diffs = [(abs(x[2] - y[2]) / max(abs(x[2]), 1e-6), x[:2]) for x, y in zip(na, nb) if lo <= x[0] < hi]
        if diffs:
            worst = max(diffs)
            assert worst[0] <= t, "relative difference %.3g at step %d (%s): over %g" % (worst[0], *worst[1], t)
            print("%d numbers from step %d, largest relative difference %.2g (step %d, %s);"
                  % (len(diffs), max(lo, 1), worst[0], *worst[1]), end=" ")
    print()
else:
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("time_s", "samples_per_s", "tokens_per_s")}
                        for r in rs if "event" not in r]
    assert strip(ra) == strip(rb), "the records differ"
    assert open(a + "/model.safetensors", "rb").read() == open(b + "/model.safetensors", "rb").read(), \
        "the weights differ"
    print("%d records and the weights bit-identical" % len(strip(ra)))
PY
}
# fixed_is_plan RUN PLAN_JSON: what the GPU allocated besides pool and arena (RUN's start
# record) is the plan's workspace_bytes (one formula, rt_gpu_fixed_bytes with the
# optimizer's table and workspace, for the trainer and the plan recompute auto counts)
fixed_is_plan() {
    "$PY" - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys
start = json.loads(open(sys.argv[1]).readline())
plan = json.load(open(sys.argv[2]))
assert start["device_fixed_bytes"] == plan["workspace_bytes"] > 0, (start["device_fixed_bytes"], plan["workspace_bytes"])
print("%d bytes, the plan's workspace_bytes" % plan["workspace_bytes"])
PY
}
kernels_from() { grep -o '"kernels":"[a-z]*"' "$1/metrics.jsonl" | head -1 | cut -d'"' -f4; }

TOL=1e-5
# The CNN's training amplifies rounding (max-pool's choices, ReLU's edges): the GPU's
# GEMMs sum in another order than OpenBLAS's, and OpenBLAS's own order depends on the
# CPU's kernels (--threads 1 against 2 differ by 1e-4 by step 18 on an AMD EPYC under
# OPENBLAS_CORETYPE=Haswell). Its first 8 steps are held to TOL, the rest to 1e-3, as
# tests/torch_parity.py holds the CNN against PyTorch.
late() { if [ "$1" = cnn_fashion ]; then echo "1e-3 9"; fi; }
for m in mlp_fashion cnn_fashion gpt_char; do
    "$TRAINC" build specs/$m.json --device both --arch sm_90 -o "$d/$m" 2>"$d/$m.build.log"
    O=(--set max_steps=20 --set log_every=1 --set loader.shuffle=false --threads 1
       --set validate.every_steps=10 --set validate.batches=2 --quiet)
    S=()
    if [ $m = gpt_char ]; then
        O+=(--set batch_size=2)
        S=(--sample 50)
    fi
    gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.gpu" 2>"$d/$m.gpu.log"
    [ "$(kernels_from "$d/$m.gpu")" = nvrtc ] || { echo "FAIL: $m: first start kernels $(kernels_from "$d/$m.gpu"), want nvrtc"; exit 1; }
    "$d/$m" --device cpu "${O[@]}" "${S[@]}" --out "$d/$m.cpu" >"$d/$m.cpu.out" 2>"$d/$m.cpu.log"
    grep -q '"device":"cpu"' "$d/$m.cpu/metrics.jsonl"
    # shellcheck disable=SC2046
    r=$(compare close "$d/$m.cpu" "$d/$m.gpu" $TOL $(late $m))
    echo "ok   $m: --device cuda vs cpu: $r"

    # 10 steps and a checkpoint (operations at once, 132 SMs), then --resume to 20
    # (kernels at once, copies late): the three schedules must give the same bits
    TRAINC_FAKE_GPU_SCHEDULE=sync TRAINC_FAKE_GPU_SMS=132 gpu "$d/$m" --device cuda "${O[@]}" \
        --set max_steps=10 --set checkpoint.every_steps=10 --out "$d/$m.resumed" 2>"$d/$m.part.log"
    [ "$(kernels_from "$d/$m.resumed")" = cache ] || { echo "FAIL: $m: second start kernels $(kernels_from "$d/$m.resumed"), want cache"; exit 1; }
    TRAINC_FAKE_GPU_SCHEDULE=eager gpu "$d/$m" --device cuda "${O[@]}" --set checkpoint.every_steps=10 --resume "$d/$m.resumed" "${S[@]}" \
        >"$d/$m.resumed.out" 2>"$d/$m.resumed.log"
    r=$(compare same "$d/$m.gpu" "$d/$m.resumed")
    echo "ok   $m: cache on the second start; --resume from a GPU checkpoint: $r"
    if [ ${#S[@]} -gt 0 ]; then
        [ "$(head -c 50 "$d/$m.resumed.out" | wc -c)" = 50 ] && cmp -s "$d/$m.cpu.out" "$d/$m.resumed.out" ||
            { echo "FAIL: $m --sample 50 on the GPU printed:"; cat "$d/$m.resumed.out"; exit 1; }
        echo "ok   $m: --sample 50 on the GPU prints what the CPU prints"
    fi
done

# --eval on the GPU: the CPU run's final weights validated on the (fake) GPU give the
# CPU's numbers (the validation pass alone, the parameters uploaded from --init)
m=$d/mlp_fashion
gpu "$m" --device cuda --init "$m.cpu/model.safetensors" --eval --quiet >"$m.eval.gpu" 2>/dev/null
"$m" --device cpu --init "$m.cpu/model.safetensors" --eval --quiet --threads 1 >"$m.eval.cpu" 2>/dev/null
"$PY" - "$m.eval.cpu" "$m.eval.gpu" <<'PY'
import json, sys
a, b = (json.loads(open(f).read()) for f in sys.argv[1:])
assert a["event"] == b["event"] == "eval" and a["terms"] == b["terms"] == 10000, (a, b)
r = abs(a["val_loss"] - b["val_loss"]) / a["val_loss"]
assert r <= 1e-5 and abs(a["val_acc"] - b["val_acc"]) <= 2e-4, (a, b)
print("ok   mlp_fashion --eval on the GPU: val_loss within %.1e of the CPU's, val_acc within 2 predictions" % r)
PY

# --lr-find on the GPU (the update queued before the loss is read, as in training):
# the CPU's rates and losses, within 1e-4 relative over 40 steps
gpu "$m" --device cuda --lr-find --lr-find-steps 40 --lr-find-range 1e-5,0.1 --out "$m.lrf.gpu" --quiet 2>/dev/null
"$m" --device cpu --lr-find --lr-find-steps 40 --lr-find-range 1e-5,0.1 --out "$m.lrf.cpu" --quiet --threads 1 2>/dev/null
"$PY" - "$m.lrf.cpu/lr_find.jsonl" "$m.lrf.gpu/lr_find.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)][:-1] for f in sys.argv[1:])
assert len(a) == len(b) == 40, (len(a), len(b))
w = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
assert all(x["lr"] == y["lr"] for x, y in zip(a, b)) and w <= 1e-4, w
print("ok   mlp_fashion --lr-find on the GPU: 40 steps, losses within %.1e of the CPU's" % w)
PY

# --profile on the GPU (timing events between the instructions, a wait after each
# pass): every instruction of plan.json timed, and the numbers an unprofiled GPU run's
"$TRAINC" emit specs/mlp_fashion.json -o "$m.emit" >/dev/null
P=(--set max_steps=8 --set data.val=null --set log_every=1 --quiet)
gpu "$m" --device cuda "${P[@]}" --out "$m.prof0" 2>/dev/null
gpu "$m" --device cuda "${P[@]}" --out "$m.prof1" --profile 2>"$m.prof1.log"
cmp "$m.prof0/model.safetensors" "$m.prof1/model.safetensors"
"$PY" - "$m.prof1/profile.json" "$m.emit/plan.json" <<'PY'
import json, sys
prof, plan = (json.load(open(f)) for f in sys.argv[1:])
assert prof["device"] == "cuda" and prof["steps"] == 6, prof
ins = [i for i in prof["instructions"] if i["index"] is not None]
assert sorted(i["index"] for i in ins) == sorted(i["index"] for i in plan["instructions"])
assert all(i["ms"] >= 0 and i["calls_per_step"] == 1 for i in prof["instructions"])
opt = [i for i in prof["instructions"] if i["index"] is None]   # the norm and the update, queued
assert len(opt) == 1 and opt[0]["pass"] == "optimizer" and opt[0]["ms"] == prof["optimizer_ms"] > 0, opt
assert abs(prof["forward_ms"] + prof["backward_ms"] + prof["optimizer_ms"] + prof["other_ms"]
           - prof["step_ms"]) <= 1e-6 * prof["step_ms"], prof
print("ok   mlp_fashion --profile on the GPU: %d instructions timed by events over 6 steps, the "
      "weights an unprofiled run's" % len(prof["instructions"]))
PY

# a vocabulary of 1030: logits rows 1088 apart (the LM head's GEMMs with ld 1088, the
# loss kernel RT_CROSS_ENTROPY(1030, 1088), --sample at that stride), fp32 and bf16-mixed
# on the GPU against the CPU (tests/vocab_pad.sh: padded = contiguous on the CPU)
t="$d/tiny_vocab"
fbuild tests/vocab/tiny_vocab.json -o "$t" 2>"$t.build.log"
O=(--set max_steps=20 --set log_every=1 --set validate.every_steps=10 --set validate.batches=2 --threads 1 --quiet)
gpu "$t" --device cuda "${O[@]}" --sample 40 --out "$t.gpu" >"$t.gpu.out" 2>"$t.gpu.log"
"$t" --device cpu "${O[@]}" --sample 40 --out "$t.cpu" >"$t.cpu.out" 2>"$t.cpu.log"
r=$(compare close "$t.cpu" "$t.gpu" $TOL)
[ "$(head -c 40 "$t.gpu.out" | wc -c)" = 40 ] && cmp -s "$t.cpu.out" "$t.gpu.out" ||
    { echo "FAIL: tiny_vocab --sample 40 on the GPU printed:"; cat "$t.gpu.out"; exit 1; }
echo "ok   tiny_vocab (logits rows 1088 apart): --device cuda vs cpu: $r; --sample 40 the same"

# attention's Llama-family options (kv_heads, rope with llama3 scaling, qk_norm, a window,
# no biases: attention.cuh's attention_ext_* kernels) on the GPU against the CPU, fp32
t="$d/tiny_llama_attn"
"$PY" - "$t.json" <<'PY'
import json, sys
s = json.load(open("tests/vocab/tiny_vocab.json"))
s["model"]["name"] = "tiny_llama_attn"
s["model"]["inputs"]["y"]["classes"] = 256
s["model"]["layers"] = [
    {"op": "embedding", "name": "wte", "vocab": 256, "dim": 32, "input": "x"},
    {"op": "residual", "body": [{"op": "layernorm", "name": "ln_1"}, {
        "op": "attention", "name": "attn", "heads": 4, "kv_heads": 2, "bias": False, "qk_norm": True,
        "window": 6, "rope": {"theta": 10000, "scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                                          "high_freq_factor": 4, "original_max_position_embeddings": 8}}}]},
    {"op": "layernorm", "name": "ln_f"},
    {"op": "linear", "name": "lm_head", "tie": "wte", "bias": False}]
for k in ("train", "val"):
    s["train"]["data"][k]["tokens"] = "../../../data/text/%s_*.bin" % k
json.dump(s, open(sys.argv[1], "w"), indent=1)
PY
fbuild "$t.json" -o "$t" 2>"$t.build.log"
O=(--set max_steps=10 --set log_every=1 --set validate.every_steps=5 --set validate.batches=2 --threads 1 --quiet)
gpu "$t" --device cuda "${O[@]}" --out "$t.gpu" 2>"$t.gpu.log"
"$t" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
r=$(compare close "$t.cpu" "$t.gpu" $TOL)
echo "ok   tiny_llama_attn (kv_heads, rope with llama3 scaling, qk_norm, window): --device cuda vs cpu: $r"
# the launches cut every 3 sequences (batch 8): qk_norm's partial gradients per chunk
gpu env TRAINC_ATT_BATCH_CHUNK=3 "$t" --device cuda "${O[@]}" --out "$t.chunk" 2>"$t.chunk.log"
r=$(compare close "$t.cpu" "$t.chunk" $TOL)
echo "ok   tiny_llama_attn, attention launches cut every 3 sequences: $r"

# u8 and u16 embedding ids and class targets (SPEC.md's integer dtypes) on the GPU: the
# loader's widened i32 batches uploaded (loader.on_gpu never), or the dataset widened
# when it is put on the device and gathered there (always): every record and the
# weights of the i32 files' run, bit for bit (tests/int_dtypes.sh: the same on the CPU)
i=$d/int_dtypes
mkdir -p "$i"
"$PY" - "$i" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(3)
ids, nxt = rng.integers(0, 200, (23, 6)), rng.integers(0, 250, (23, 6))
for dt, t in (("u8", np.uint8), ("u16", np.uint16), ("i32", np.int32)):
    np.save(f"{d}/ids_{dt}.npy", ids.astype(t))
    np.save(f"{d}/next_{dt}.npy", nxt.astype(t))
for xdt, ydt in (("i32", "i32"), ("u8", "u16")):
    json.dump({"trainc": 1, "model": {"name": "tok", "inputs": {
                   "x": {"shape": [6], "dtype": xdt}, "y": {"shape": [6], "dtype": ydt, "classes": 250}},
               "layers": [{"op": "embedding", "vocab": 200, "dim": 8, "input": "x"}, {"op": "gelu"},
                          {"op": "linear", "out": 250}],
               "loss": {"op": "cross_entropy", "target": "y"}},
               "train": {"data": {"train": {"x": f"ids_{xdt}.npy", "y": f"next_{ydt}.npy"},
                                  "val": {"x": f"ids_{xdt}.npy", "y": f"next_{ydt}.npy"}},
                         "batch_size": 4, "accumulate": 2, "epochs": 2, "log_every": 1,
                         "loader": {"drop_last": False}, "validate": {"every_steps": 2}}},
              open(f"{d}/{xdt}.json", "w"))
PY
for v in i32 u8; do fbuild "$i/$v.json" -o "$i/t_$v" 2>"$i/$v.build.log"; done
for og in never always; do
    for v in i32 u8; do
        gpu "$i/t_$v" --device cuda --set loader.on_gpu=$og --quiet --out "$i/$v.$og" 2>"$i/$v.$og.log"
    done
    r=$(compare same "$i/i32.$og" "$i/u8.$og")
    echo "ok   u8 ids and u16 targets on the GPU (loader.on_gpu $og): as i32's: $r"
done
"$i/t_i32" --device cpu --threads 1 --quiet --out "$i/i32.cpu" 2>/dev/null
r=$(compare close "$i/i32.cpu" "$i/u8.never" $TOL)
echo "ok   u8 ids and u16 targets on the GPU vs i32 on the CPU: $r"

# bf16-mixed and fp16-mixed: activations stored in 16 bits on the GPU, fp32 master
# weights, the GEMMs' operands the parameters' 16-bit copy (fp16: with loss scaling).
# Against the same trainer on the CPU (fp32): the first step's loss within 1e-3
# relative (one rounding per stored value), the final loss within 2e-2 (the bar for
# mixed precision against fp32: MLP 200 steps, CNN 20; gpt_char 5, each of its steps
# minutes in the emulated 16-bit kernels, which the first steps already run); on the CPU the
# mixed trainer gives the fp32 trainer's bits; --resume continues bit-identically (the
# copy is rebuilt from the checkpoint's fp32 weights); the start record names the
# precision; it is compiled in, so --set precision=fp32 on the GPU is refused (exit 1).
close16() {   # close16 CPU_RUN GPU_RUN PRECISION [FINAL_TOL (2e-2)]
    "$PY" - "$1" "$2" "$3" "${4:-2e-2}" <<'PY'
import json, sys
def recs(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl")]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
sb = [r for r in b if r.get("event") == "start"][-1]
assert sb["device"] == "cuda" and sb["precision"] == sys.argv[3], sb
assert sb["device_pool_bytes"] >= 2.5 * sb["param_bytes"] + sb["optimizer_bytes"], sb
la = [r["loss"] for r in a if "loss" in r and "event" not in r]
lb = [r["loss"] for r in b if "loss" in r and "event" not in r]
assert len(la) == len(lb) > 1, (len(la), len(lb))
# the final loss: the mean of the last 10% of the steps (one batch's loss is noisy)
k = max(1, len(la) // 10)
fa, fb = sum(la[-k:]) / k, sum(lb[-k:]) / k
first, last = abs(la[0] - lb[0]) / la[0], abs(fa - fb) / fa
assert first <= 1e-3, "first loss %g (cpu) vs %g (bf16): %.3g relative" % (la[0], lb[0], first)
assert last <= float(sys.argv[4]), "final loss %g (cpu) vs %g (bf16): %.3g relative" % (fa, fb, last)
print("first loss within %.1e, final (mean of the last %d of %d steps) within %.1e of fp32" %
      (first, k, len(la), last))
PY
}
# tiny_vocab (logits rows 1088 apart, above) in bf16-mixed, by the same bar
t=$d/tiny_vocab
fbuild tests/vocab/tiny_vocab.json --set precision=bf16-mixed \
    -o "$t.bf16" 2>"$t.bf16.build.log"
O=(--set max_steps=20 --set log_every=1 --set validate.every_steps=10 --set validate.batches=2 --threads 1 --quiet)
gpu "$t.bf16" --device cuda "${O[@]}" --out "$t.bf16.gpu" 2>"$t.bf16.gpu.log"
r=$(close16 "$t.cpu" "$t.bf16.gpu" bf16-mixed)   # (not inside echo: its failure must stop us)
echo "ok   tiny_vocab bf16-mixed on the GPU against fp32 on the CPU: $r"
# a tiny Llama (its embedding scaled as Gemma's, a window of 8 on the first block and
# none with another rope theta on the second as Gemma 3's, OLMo 2's qk_norm over all
# heads (rt_qk_norm_* in layernorm.cuh) with two key/value heads, rmsnorm with the residual's
# gradient folded in, a SwiGLU MLP through glu, squared_relu in a second MLP, no
# biases): fp32 on the GPU against the CPU;
# recompute selective (its rmsnorms and glus replayed) bit-identical to none on the
# GPU; bf16-mixed against the CPU's fp32 by the bar above
t=$d/llama_tiny
"$PY" tests/llama_tiny.py "$t.json" --squared-relu --scale --interleave --all-heads-norm --T 32
O=(--set max_steps=10 --set log_every=1 --set loader.shuffle=false --set batch_size=4 --set data.val=null
   --threads 1 --quiet)
for pol in none selective; do
    fbuild "$t.json" --set recompute=$pol -o "$t.$pol" 2>"$t.$pol.build.log"
    gpu "$t.$pol" --device cuda "${O[@]}" --out "$t.$pol.gpu" 2>"$t.$pol.gpu.log"
done
"$t.none" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
r=$(compare close "$t.cpu" "$t.none.gpu" $TOL)
echo "ok   llama_tiny (scale, interleave, qk_norm over all heads, rmsnorm, glu, squared_relu): --device cuda vs cpu: $r"
r=$(compare same "$t.none.gpu" "$t.selective.gpu")
echo "ok   llama_tiny recompute selective on the GPU: none's numbers: $r"
fbuild "$t.json" --set precision=bf16-mixed -o "$t.bf16" 2>"$t.bf16.build.log"
gpu "$t.bf16" --device cuda "${O[@]}" --out "$t.bf16.gpu" 2>"$t.bf16.gpu.log"
r=$(close16 "$t.cpu" "$t.bf16.gpu" bf16-mixed)
echo "ok   llama_tiny bf16-mixed on the GPU against fp32 on the CPU: $r"
# optimizer muon (rt_adamw leaving its matrices: each one's momentum, Newton-Schulz
# iterations by cuBLASLt in fp32 and update; in bf16-mixed their 16-bit copy rewritten):
# fp32 on the GPU against the CPU, bf16-mixed against the CPU's fp32 within 2e-4 at the
# end (2.9e-5; the copy left stale: 1.2e-3, fails)
M=("${O[@]}" --set max_steps=6 --set optimizer.type=muon --set optimizer.lr=0.02)
gpu "$t.none" --device cuda "${M[@]}" --out "$t.muon.gpu" 2>"$t.muon.gpu.log"
"$t.none" --device cpu "${M[@]}" --out "$t.muon.cpu" 2>"$t.muon.cpu.log"
r=$(compare close "$t.muon.cpu" "$t.muon.gpu" $TOL)
echo "ok   llama_tiny, optimizer muon: --device cuda vs cpu: $r"
"$TRAINC" plan "$t.json" --set optimizer.type=muon --set batch_size=4 --json > "$t.muon.plan.json"
r=$(fixed_is_plan "$t.muon.gpu" "$t.muon.plan.json")
echo "ok   llama_tiny, optimizer muon: the GPU's fixed allocations (its workspace too): $r"
gpu "$t.bf16" --device cuda "${M[@]}" --out "$t.muon.bf16.gpu" 2>"$t.muon.bf16.gpu.log"
r=$(close16 "$t.muon.cpu" "$t.muon.bf16.gpu" bf16-mixed 2e-4)
echo "ok   llama_tiny, optimizer muon, bf16-mixed on the GPU against fp32 on the CPU: $r"
# the same with Gemma 3 1B's heads (four 256 wide over one key/value head, qk_norm, a
# scale of their own) and Gemma 2's soft-capped scores (the CAP kernels):
# bf16-mixed on the GPU (the tensor-core kernels alone take such heads) against fp32
# on the CPU by the same bar; fp32 on the GPU is refused, naming the heads
t=$d/gemma_tiny
"$PY" tests/llama_tiny.py "$t.json" --scale --interleave --gemma-heads --softcap --T 32
fbuild "$t.json" --set precision=bf16-mixed -o "$t.bf16" 2>"$t.bf16.build.log"
gpu "$t.bf16" --device cuda "${O[@]}" --out "$t.bf16.gpu" 2>"$t.bf16.gpu.log"
"$t.bf16" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
r=$(close16 "$t.cpu" "$t.bf16.gpu" bf16-mixed)
set +e
"$TRAINC" build "$t.json" --device cuda -o "$t.fp32" 2>"$t.fp32.build.log"
rc=$?
set -e
[ $rc = 1 ] && grep -q "attention heads 256 wide: the GPU kernels take up to 128, or 256" "$t.fp32.build.log" &&
    [ ! -e "$t.fp32" ] || { echo "FAIL: gemma_tiny fp32 --device cuda: exit $rc"; cat "$t.fp32.build.log"; exit 1; }
"$TRAINC" emit "$t.json" --set precision=bf16-mixed -o "$t.emit" >/dev/null
grep -q "^RT_ATTENTION_EXT_CAP_FWD(32, 256, 1)" "$t.emit/kernels_cuda.cu" ||
    { echo "FAIL: gemma_tiny: not the soft-capped attention's kernels"; exit 1; }
echo "ok   gemma_tiny (heads 256 wide, soft-capped) bf16-mixed on the GPU against fp32 on the CPU: $r; fp32 refused"
for p in bf16 fp16; do
  for m in mlp_fashion cnn_fashion gpt_char; do
    t=$d/$m.$p
    fbuild specs/$m.json --set precision=$p-mixed -o "$t" 2>"$t.build.log"
    # (close16 compares training losses: the end's validation, two batches)
    O=(--set log_every=1 --set loader.shuffle=false --threads 1 --quiet --set max_steps=20
       --set validate.batches=2)
    [ $m = mlp_fashion ] && O+=(--set max_steps=200)
    [ $m = gpt_char ] && O+=(--set batch_size=2 --set max_steps=5)
    "$t" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
    # (the CNN's 16-bit runs on the GPU are tests/fake_gpu_conv.sh's, under its kernels' rules)
    if [ $m != cnn_fashion ]; then
        gpu "$t" --device cuda "${O[@]}" --out "$t.gpu" 2>"$t.gpu.log"
        r=$(close16 "$t.cpu" "$t.gpu" $p-mixed)
        echo "ok   $m $p-mixed on the GPU against fp32 on the CPU: $r"
    fi
    # on the CPU the mixed-precision trainer computes in fp32 over its plan at twice
    # the offsets: the fp32 trainer's numbers, bit for bit (fp16: the loss scale, a
    # power of two that never overflows here, changes no bits either)
    "$d/$m" --device cpu "${O[@]}" --out "$t.fp32cpu" 2>/dev/null
    cmp -s "$t.fp32cpu/model.safetensors" "$t.cpu/model.safetensors" &&
        [ "$(grep -o '"loss":[^,]*' "$t.fp32cpu/metrics.jsonl")" = "$(grep -o '"loss":[^,]*' "$t.cpu/metrics.jsonl")" ] ||
        { echo "FAIL: $m: the $p-mixed trainer on the CPU differs from the fp32 one"; exit 1; }
    echo "ok   $m $p-mixed trainer on the CPU: losses and weights bit-identical to the fp32 trainer's"
  done
done
# --predict on the GPU: validation's prediction downloaded (16-bit logits widened; a
# language model's [T, V] rows ld apart) against the CPU's, from the same weights
"$PY" -c "import numpy as np; np.save('$d/pred_x.npy', np.load('data/fashion/test_x.npy')[:100])
import sys; r = open('data/text/val_000000.bin', 'rb').read()[1024:1024 + 2 * 512]
np.save('$d/pred_tok.npy', np.frombuffer(r, '<u2').astype(np.int32).reshape(4, 128))"
for t in mlp_fashion:pred_x:1e-5 mlp_fashion.bf16:pred_x:2e-2 gpt_char:pred_tok:1e-5 gpt_char.bf16:pred_tok:3e-2; do
    IFS=: read -r m x tol <<<"$t"
    w=$d/$m.cpu/model.safetensors
    gpu "$d/$m" --device cuda --init "$w" --predict "$d/$x.npy" --out "$d/$m.pred.gpu" --quiet >/dev/null 2>&1 &&
        "$d/$m" --device cpu --init "$w" --predict "$d/$x.npy" --out "$d/$m.pred.cpu" --quiet >/dev/null 2>&1 ||
        { echo "FAIL: $m --predict"; exit 1; }
    r=$("$PY" -c "
import numpy as np, sys
a, b = np.load('$d/$m.pred.cpu/predictions.npy'), np.load('$d/$m.pred.gpu/predictions.npy')
err = float(np.abs(a - b).max() / np.abs(a).max())
assert a.shape == b.shape and err <= $tol, (a.shape, b.shape, err)
print('%s logits within %.1e of the largest' % (list(a.shape), err))") || { echo "FAIL: $m --predict: $r"; exit 1; }
    echo "ok   $m --predict on the GPU against the CPU: $r"
done
# attention's sm_90a backward (sm90_attention_bwd.cuh) in training: the fake device is
# compute capability 9.0, so gpt_char with heads 64 wide (bf16-mixed) and 128 wide
# (fp16-mixed) takes it; against the fp32 trainer on the CPU by close16's bar, its
# launches counted in the trace; TRAINC_ATT_SM90=0 launches none
"$PY" - "$d" "$PWD/data/text" <<'PY'
import json, sys
for hd, heads in ((64, 2), (128, 1)):
    spec = json.load(open("specs/gpt_char.json"))
    spec["model"]["name"] = "gpt_char_hd%d" % hd
    spec["model"]["layers"][2]["body"][0]["body"][1]["heads"] = heads
    spec["train"]["data"] = {"train": {"tokens": sys.argv[2] + "/train_*.bin"}, "val": None}
    json.dump(spec, open("%s/gpt_char_hd%d.json" % (sys.argv[1], hd), "w"), indent=1)
PY
O=(--set log_every=1 --set loader.shuffle=false --threads 1 --quiet --set max_steps=3 --set batch_size=2)
for c in "64 bf16" "128 fp16"; do
    set -- $c
    t=$d/gpt_char_hd$1.$2
    fbuild "$d/gpt_char_hd$1.json" --set precision=$2-mixed -o "$t" 2>"$t.build.log"
    TRAINC_FAKE_GPU_TRACE=1 gpu "$t" --device cuda "${O[@]}" --out "$t.gpu" 2>"$t.gpu.log"
    "$t" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
    r=$(close16 "$t.cpu" "$t.gpu" $2-mixed)
    n90=$(grep -c "launch rt_attention_bwd90_" "$t.gpu.log" || true)
    [ "$n90" -gt 0 ] || { echo "FAIL: gpt_char heads $1 wide, $2-mixed: no rt_attention_bwd90_* launch"; exit 1; }
    TRAINC_ATT_SM90=0 TRAINC_FAKE_GPU_TRACE=1 gpu "$t" --device cuda "${O[@]}" --set max_steps=1 --out "$t.sm80" 2>"$t.sm80.log"
    ! grep -q "launch rt_attention_bwd90_" "$t.sm80.log" && grep -q "launch rt_attention_bwd_kv_" "$t.sm80.log" ||
        { echo "FAIL: gpt_char heads $1 wide: TRAINC_ATT_SM90=0 still launched the sm_90a backward"; exit 1; }
    echo "ok   gpt_char heads $1 wide $2-mixed, the sm_90a attention backward ($n90 launches): $r; TRAINC_ATT_SM90=0 takes the sm_80 kernels"
done
# recomputation changes memory and time on the GPU too, never results: gpt_char with
# recompute selective and full (blocks replayed in backward, their GEMMs with the same
# cuBLASLt epilogues as the originals) gives none's records and weights bit for bit,
# in fp32 and in bf16-mixed (there a replayed layernorm statistic keeps its fp32
# storage, and a replayed GEMM rounds as the original did)
for p in fp32 bf16; do
    ref=$d/gpt_char.gpu
    O=(--set max_steps=20 --set log_every=1 --set loader.shuffle=false --threads 1
       --set validate.every_steps=10 --set validate.batches=2 --quiet --set batch_size=2)
    P=(--set precision=fp32)
    if [ $p = bf16 ]; then
        ref=$d/gpt_char.bf16.gpu
        O=(--set log_every=1 --set loader.shuffle=false --threads 1 --quiet --set max_steps=5 --set batch_size=2
           --set validate.batches=2)
        P=(--set precision=bf16-mixed)
    fi
    for pol in selective full; do
        t=$d/gpt_char.$p.$pol
        fbuild specs/gpt_char.json "${P[@]}" --set recompute=$pol -o "$t" 2>"$t.build.log"
        gpu "$t" --device cuda "${O[@]}" --out "$t.gpu" 2>"$t.gpu.log"
        r=$(compare same "$ref" "$t.gpu")
        echo "ok   gpt_char $p, recompute $pol on the GPU: none's numbers: $r"
    done
done
"$TRAINC" plan specs/gpt_char.json "${P[@]}" --set recompute=full --set batch_size=2 --json > "$t.plan.json"
r=$(fixed_is_plan "$t.gpu" "$t.plan.json")
echo "ok   gpt_char: the GPU's fixed allocations: $r"
# dropout on the GPU: the masks come from the same counter-based RNG as the CPU's
# (seed, step, layer, element), so an MLP with two dropout layers, shuffled batches and
# accumulate 2 tracks the CPU within TOL; and recomputed masks equal the originals:
# selective and full give none's numbers bit for bit
"$PY" - "$d/mlp_dropout.json" "$PWD/data/fashion" <<'PY'
import json, sys
spec = json.load(open("specs/mlp_fashion.json"))
spec["model"]["name"] = "mlp_dropout"
spec["model"]["layers"] = [{"op": "flatten"}, {"op": "linear", "out": 128}, {"op": "relu"}, {"op": "dropout", "p": 0.2},
                           {"op": "linear", "out": 64}, {"op": "gelu"}, {"op": "dropout", "p": 0.1}, {"op": "linear", "out": 10}]
for part, files in (("train", ("train_x", "train_y")), ("val", ("test_x", "test_y"))):
    spec["train"]["data"][part] = {"x": f"{sys.argv[2]}/{files[0]}.npy", "y": f"{sys.argv[2]}/{files[1]}.npy"}
json.dump(spec, open(sys.argv[1], "w"), indent=1)
PY
O=(--set max_steps=30 --set log_every=1 --set accumulate=2 --threads 1 --set validate.every_steps=15
   --set validate.batches=2 --quiet)
for pol in none selective full; do
    fbuild "$d/mlp_dropout.json" --set recompute=$pol -o "$d/mlp_dropout_$pol" 2>"$d/mlp_dropout_$pol.build.log"
    gpu "$d/mlp_dropout_$pol" --device cuda "${O[@]}" --out "$d/mlp_dropout_$pol.gpu" 2>/dev/null
done
"$d/mlp_dropout_none" --device cpu "${O[@]}" --out "$d/mlp_dropout.cpu" 2>/dev/null
r=$(compare close "$d/mlp_dropout.cpu" "$d/mlp_dropout_none.gpu" $TOL)
echo "ok   MLP with dropout, shuffle, accumulate 2: --device cuda vs cpu: $r"
for pol in selective full; do
    r=$(compare same "$d/mlp_dropout_none.gpu" "$d/mlp_dropout_$pol.gpu")
    echo "ok   MLP with dropout, recompute $pol on the GPU: none's numbers: $r"
done
m=mlp_fashion
O=(--set log_every=1 --set loader.shuffle=false --threads 1 --quiet --set max_steps=20
   --set validate.every_steps=10 --set validate.batches=2)
for p in bf16 fp16; do
    t=$d/$m.$p
    gpu "$t" --device cuda "${O[@]}" --out "$t.full" 2>/dev/null
    gpu "$t" --device cuda "${O[@]}" --set max_steps=10 --set checkpoint.every_steps=10 --out "$t.resumed" 2>/dev/null
    TRAINC_FAKE_GPU_SCHEDULE=eager gpu "$t" --device cuda "${O[@]}" --resume "$t.resumed" 2>/dev/null
    r=$(compare same "$t.full" "$t.resumed")
    echo "ok   $m $p-mixed: --resume from a GPU checkpoint: $r"
done
# a bias that cuBLASLt takes only in the output's 16-bit type (TRAINC_FAKE_LT_BIAS=as-d:
# the fake then refuses an fp32 bias beside a 16-bit D, as cublasLt.h documents the bias
# type): the plan's second try passes the parameter's 16-bit copy, so the epilogues stay
# in cuBLASLt (as many rt_bias_act launches as with the fp32 bias, the note said once),
# and the run tracks the fp32-bias run as the mixed runs track fp32
for p in bf16 fp16; do
    t=$d/$m.$p
    TRAINC_FAKE_GPU_TRACE=1 gpu "$t" --device cuda "${O[@]}" --out "$t.bias32" 2>"$t.bias32.log"
    TRAINC_FAKE_GPU_TRACE=1 TRAINC_FAKE_LT_BIAS=as-d gpu "$t" --device cuda "${O[@]}" --out "$t.bias16" 2>"$t.bias16.log"
    n32=$(grep -c "run rt_bias_act\b" "$t.bias32.log" || true)
    n16=$(grep -c "run rt_bias_act\b" "$t.bias16.log" || true)
    [ "$n16" = "$n32" ] && [ "$(grep -c "16-bit copy there" "$t.bias16.log")" = 1 ] &&
        ! grep -q "16-bit copy there" "$t.bias32.log" && ! grep -q "cuBLASLt refused" "$t.bias16.log" ||
        { echo "FAIL: $p, bias in D's type: rt_bias_act $n16 times (fp32 bias: $n32)"; grep -E "refused|16-bit copy" "$t.bias16.log"; exit 1; }
    r=$(close16 "$t.full" "$t.bias16" $p-mixed)
    echo "ok   $m $p-mixed: cuBLASLt taking the bias only in 16 bits: the 16-bit copy, fused ($n32 rt_bias_act launches either way); $r"
done
# fp16 storage overflows where fp32 does not: a loss scale of 1e30 makes the scaled
# gradients infinite in fp16 activations, so the GPU skips steps and halves the scale
# until they fit (78 here), then trains; the CPU (fp32) skips none
S=(--set max_steps=120 --set log_every=10 --set data.val=null --threads 1 --quiet --set loss_scale.init=1e30)
gpu "$d/$m.fp16" --device cuda "${S[@]}" --out "$d/$m.fp16.overflow" 2>/dev/null
"$d/$m.fp16" --device cpu "${S[@]}" --out "$d/$m.fp16.overflow.cpu" 2>/dev/null
r=$("$PY" - "$d/$m.fp16.overflow/metrics.jsonl" "$d/$m.fp16.overflow.cpu/metrics.jsonl" <<'PY'
import json, math, sys
g, c = ([json.loads(l) for l in open(p) if '"loss"' in l and '"event"' not in l] for p in sys.argv[1:3])
sg, sc = g[-1]["skipped_steps"], c[-1]["skipped_steps"]
assert sg > 0 and sc == 0, (sg, sc)
assert g[-1]["loss_scale"] < 1e30 and math.isfinite(g[-1]["loss"]) and g[-1]["loss"] < g[0]["loss"], g[-1]
print(f"{sg} steps skipped on the GPU (scale {g[-1]['loss_scale']:.3g}), 0 on the CPU; loss {g[0]['loss']:.3f} -> {g[-1]['loss']:.3f}")
PY
)
echo "ok   fp16-mixed overflow on the GPU: $r"
set +e
gpu "$d/$m.bf16" --device cuda --set precision=fp32 --set max_steps=2 --quiet --out "$d/prec" 2>"$d/prec.log"
rc=$?
set -e
[ $rc = 1 ] && grep -q "built for bf16-mixed" "$d/prec.log" && [ ! -e "$d/prec" ] ||
    { echo "FAIL: --set precision=fp32 on a bf16-mixed trainer exited $rc with:"; cat "$d/prec.log"; exit 1; }
echo "ok   --set precision=fp32 on a bf16-mixed trainer's GPU run: exit 1, rebuild hint"

# rt_gemm_bias: the linear layers' bias (+ ReLU / GELU tanh, or + a residual as C out
# of place) in cuBLASLt's epilogue (the fake computes it with trainc_rt.h's formulas)
# against the same GEMM followed by epilogue.cuh's kernel (TRAINC_GEMM_EPILOGUE=0, the
# fallback where cuBLASLt refuses): gpt_char (GELU with its pre-activation kept, BIAS,
# BIAS with the residual; GELU without in validation) in fp32 gives the same bits; and
# in backward rt_gemm_dgelu (DGELU vs the GEMM + rt_dgelu) and rt_gemm_dbias (BGRADB
# into the zeroed bias gradients vs the GEMM + rt_colsum_add's two kernels); the trace
# shows which path ran
m=gpt_char
O=(--set log_every=1 --threads 1 --quiet --set max_steps=4 --set batch_size=2
   --set validate.every_steps=2 --set validate.batches=1)
TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.epi" 2>"$d/$m.epi.log"
TRAINC_FAKE_GPU_TRACE=1 TRAINC_GEMM_EPILOGUE=0 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.noepi" 2>"$d/$m.noepi.log"
# (the position table's gradient keeps its column sums: 1 of 17 a step)
for k in rt_bias_act rt_dgelu rt_colsum_part; do
    n1=$(grep -c "run $k\b" "$d/$m.epi.log" || true)
    n0=$(grep -c "run $k\b" "$d/$m.noepi.log" || true)
    want=0; [ $k = rt_colsum_part ] && want=$((n0 / 17))
    [ "$n1" = "$want" ] && [ "$n0" -gt 0 ] && ! grep -q "cuBLASLt refused" "$d/$m.epi.log" ||
        { echo "FAIL: $k ran $n1 times with the epilogues (want $want), $n0 without"; grep refused "$d/$m.epi.log"; exit 1; }
    ran="${ran:+$ran, }$k $n0 -> $n1"
done
r=$(compare same "$d/$m.epi" "$d/$m.noepi")
echo "ok   $m: GEMM epilogues in cuBLASLt vs the GEMMs + kernels (launches without -> with: $ran): $r"

# weight gradients K-sliced (cuda_blas.c's ksplit_gemm: the CNN's convolutions, K =
# 64 x 784 here) against whole GEMMs: where cuBLASLt refuses the strided batch
# (TRAINC_FAKE_LT_BATCH=refuse) the run says so once and gives the bits of whole GEMMs
# (the split run: both convolutions' weight gradients sliced, 3 steps, nothing refused:
# the fake refuses a batch whose stride breaks the promised alignment)
# without the BGRADB epilogue (TRAINC_GEMM_KSPLIT=0 TRAINC_GEMM_EPILOGUE=0); the split
# run sums otherwise (its CPU comparison is above), and with the same bits on 4 and 132
# SMs (the slices follow the shape, not the GPU). TRAINC_CONV_KERNELS=0: both layers on
# the GEMM path (by default the first layer's weight gradient is a direct kernel:
# tests/fake_gpu_conv.sh)
m=cnn_fashion
O=(--set log_every=1 --threads 1 --quiet --set max_steps=3 --set validate.every_steps=null)
export TRAINC_CONV_KERNELS=0
TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.ks" 2>"$d/$m.ks.log"
TRAINC_FAKE_GPU_SMS=132 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.ks132" 2>/dev/null
TRAINC_FAKE_LT_BATCH=refuse TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.ksref" 2>"$d/$m.ksref.log"
TRAINC_GEMM_KSPLIT=0 TRAINC_GEMM_EPILOGUE=0 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.whole" 2>/dev/null
n1=$(grep -c "run rt_ksplit_sum" "$d/$m.ks.log" || true)
n0=$(grep -c "run rt_ksplit_sum" "$d/$m.ksref.log" || true)
[ "$n1" = 6 ] && [ "$n0" = 0 ] && ! grep -q "cuBLASLt refused a" "$d/$m.ks.log" &&
    [ "$(grep -c "refused a .* GEMM cut into .* slices" "$d/$m.ksref.log")" = 1 ] ||
    { echo "FAIL: K slices: rt_ksplit_sum ran $n1 times, $n0 refused; the note:"; grep -i "slices" "$d/$m.ksref.log"; exit 1; }
r=$(compare same "$d/$m.ksref" "$d/$m.whole")
r2=$(compare same "$d/$m.ks" "$d/$m.ks132")
echo "ok   $m: K-sliced weight gradients ($n1 sums in 3 steps, none refused; 4 vs 132 SMs: $r2); refused: said once, whole GEMMs: $r"
unset TRAINC_CONV_KERNELS

# one host wait a step: the update queued before the loss is read, grad_clip's factor
# worked out by the optimizer kernel from the norm on the device, against the old order
# (TRAINC_QUEUED_UPDATE=0: the host reads the norm, then queues the update with its
# factor): the same bits, clipping on every step (grad_clip 0.05) and with accumulate 2;
# the trace shows the update queued right behind the norm's sum, before any wait
m=mlp_fashion
O=(--set log_every=1 --threads 1 --quiet --set max_steps=12 --set grad_clip=0.05
   --set validate.every_steps=6 --set validate.batches=1)
for acc in 1 2; do
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --set accumulate=$acc --out "$d/$m.queued$acc" 2>"$d/$m.queued$acc.log"
    TRAINC_FAKE_GPU_TRACE=1 TRAINC_QUEUED_UPDATE=0 gpu "$d/$m" --device cuda "${O[@]}" --set accumulate=$acc --out "$d/$m.host$acc" 2>"$d/$m.host$acc.log"
    q=$(grep -A1 "launch rt_sum_f64" "$d/$m.queued$acc.log" | grep -c "launch rt_adamw" || true)
    h=$(grep -A1 "launch rt_sum_f64" "$d/$m.host$acc.log" | grep -c "launch rt_adamw" || true)
    [ "$q" = 12 ] && [ "$h" = 0 ] ||
        { echo "FAIL: accumulate $acc: update queued behind the norm in $q steps (want 12), $h without (want 0)"; exit 1; }
    r=$(compare same "$d/$m.host$acc" "$d/$m.queued$acc")
    echo "ok   $m, accumulate $acc: the update queued with the clip factor worked out on the GPU vs after the host's norm: $r"
done

# a step's passes without a host wait between them: each pass adds its loss into its own
# statistics, and a copy into an input slot waits on the GPU for the pass that read it.
# The host waits on the compute stream (stream 1 in the trace) once a step, once for a
# whole validation (157 batches here) and 3 times around the run: as often with
# accumulate 4 as with 1, fp16-mixed (the host decides a step's update after one wait
# for the loss and the norm) as often as bf16-mixed; accumulate 4 gives the same bits
# under each schedule (a copy let into a slot still being read changes them under lazy)
m=mlp_fashion
O=(--set log_every=1 --threads 1 --quiet --set max_steps=8 --set loader.shuffle=true)
waits() { grep -c "host waits for stream 1 " "$1" || true; }
for acc in 1 4; do
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --set accumulate=$acc --out "$d/$m.acc$acc" 2>"$d/$m.acc$acc.log"
done
for sch in eager sync; do
    TRAINC_FAKE_GPU_SCHEDULE=$sch gpu "$d/$m" --device cuda "${O[@]}" --set accumulate=4 --out "$d/$m.acc4.$sch" 2>/dev/null
    r=$(compare same "$d/$m.acc4" "$d/$m.acc4.$sch")
    echo "ok   $m, accumulate 4, no wait between passes: lazy vs $sch schedule: $r"
done
w1=$(waits "$d/$m.acc1.log"); w4=$(waits "$d/$m.acc4.log")
[ "$w1" -gt 8 ] && [ "$w1" -le 12 ] && [ "$w1" = "$w4" ] ||
    { echo "FAIL: the host waited $w1 times for the compute stream with accumulate 1, $w4 with 4 (want the same, 9 to 12)"; exit 1; }
for p in bf16 fp16; do
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m.$p" --device cuda "${O[@]}" --out "$d/$m.$p.waits" 2>"$d/$m.$p.waits.log"
done
wb=$(waits "$d/$m.bf16.waits.log"); wf=$(waits "$d/$m.fp16.waits.log")
[ "$wb" = "$wf" ] && [ "$wb" = "$w1" ] ||
    { echo "FAIL: host waits for the compute stream: bf16-mixed $wb, fp16-mixed $wf, fp32 $w1 (want the same)"; exit 1; }
echo "ok   host waits for the compute stream in 8 steps and the validation after: $w1 with accumulate 1 and 4, bf16-mixed and fp16-mixed alike"

# training passes as CUDA graphs (device_cuda.c's "graphs of training passes"): a kind
# of pass (input slot, pass of the step, batch size, loss scale) runs call by call the
# first time, is captured the second, then launched as one graph; against
# TRAINC_CUDA_GRAPH=0 every record and the weights are the same bits (the MLP with
# accumulate 1 and 3, shuffled, validating between; bf16- and fp16-mixed; the CNN with
# its K-sliced gradients; gpt_char). Counted in the trace: 2 kinds of training pass
# with accumulate 1 (the two input slots), 6 with 3, and validation's 2 (two batches a
# validation, graphs in the second of two). Off with dropout (its key changes every
# step). Where the driver refuses the capture, or a capture ends invalidated (the pass
# then runs again call by call), the run says so once and gives the same bits.
graphs() { grep -c "launch graph" "$1" || true; }
O=(--set log_every=1 --threads 1 --quiet --set max_steps=12 --set validate.every_steps=6
   --set validate.batches=2 --set loader.shuffle=true)
for run in "mlp_fashion 1 12" "mlp_fashion 3 32" "mlp_fashion.bf16 1 12" "mlp_fashion.fp16 1 12" \
           "cnn_fashion 1 12" "gpt_char 1 12"; do
    set -- $run
    X=("${O[@]}" --set accumulate=$2)
    [ $1 = gpt_char ] && X+=(--set batch_size=2)
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$1" --device cuda "${X[@]}" --out "$d/$1.graph$2" 2>"$d/$1.graph$2.log"
    TRAINC_CUDA_GRAPH=0 gpu "$d/$1" --device cuda "${X[@]}" --out "$d/$1.nograph$2" 2>/dev/null
    g=$(graphs "$d/$1.graph$2.log")
    [ "$g" = $3 ] || { echo "FAIL: $1, accumulate $2: $g passes launched as graphs, want $3"; exit 1; }
    r=$(compare same "$d/$1.nograph$2" "$d/$1.graph$2")
    echo "ok   $1, accumulate $2: $g of $((12 * $2 + 4)) passes (training and validation) as CUDA graphs vs none: $r"
done
TRAINC_FAKE_GPU_TRACE=1 gpu "$d/mlp_dropout_none" --device cuda "${O[@]}" --out "$d/mlp_dropout.graph" 2>"$d/mlp_dropout.graph.log"
[ "$(graphs "$d/mlp_dropout.graph.log")" = 0 ] || { echo "FAIL: a model with dropout ran passes as graphs"; exit 1; }
for run in "mlp_fashion refuse" "mlp_fashion invalidate" "mlp_fashion.bf16 invalidate"; do
    set -- $run
    m=$1 mode=$2
    TRAINC_FAKE_GPU_GRAPH=$mode TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.graph_$mode" 2>"$d/$m.graph_$mode.log"
    n=$(grep -c "CUDA graphs are off for this run" "$d/$m.graph_$mode.log" || true)
    # (invalidate: every launch and cuBLASLt call in the capture fails; none may be
    # taken for cuBLASLt refusing a plan)
    [ "$n" = 1 ] && [ "$(graphs "$d/$m.graph_$mode.log")" = 0 ] && ! grep -q "trainc: note: cuBLASLt refused" "$d/$m.graph_$mode.log" ||
        { echo "FAIL: capture $mode: said $n times, $(graphs "$d/$m.graph_$mode.log") graphs launched"; grep "note:" "$d/$m.graph_$mode.log"; exit 1; }
    r=$(compare same "$d/$m.nograph1" "$d/$m.graph_$mode")
    echo "ok   $m: the driver's capture $mode: said once, every pass call by call: $r"
done
m=mlp_fashion
echo "ok   a model with dropout: no pass as a graph"

# steps without a wait (loop.c's step_needs_wait/take_pending): on one GPU the host
# queues step after step and reads their losses only when a step needs them (a record,
# a validation, a checkpoint, an epoch's end, a stop): against a wait every step
# (TRAINC_STEP_WAIT=1) the same records and weights, with fewer host waits (log_every 5,
# accumulate 1 and 2); a loss that turns NaN in a step nothing waited for ends the run
# as at once (exit 3, the end record's step, the message, no checkpoint after it); a
# stop on the clock between waits (max_time) checkpoints what ran, and --resume then
# gives the uninterrupted run's bits
m=mlp_fashion
O=(--set log_every=5 --threads 1 --quiet --set max_steps=30 --set validate.every_steps=15
   --set validate.batches=2 --set loader.shuffle=true)
for acc in 1 2; do
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --set accumulate=$acc --out "$d/$m.lazy$acc" 2>"$d/$m.lazy$acc.log"
    TRAINC_FAKE_GPU_TRACE=1 TRAINC_STEP_WAIT=1 gpu "$d/$m" --device cuda "${O[@]}" --set accumulate=$acc --out "$d/$m.wait$acc" 2>"$d/$m.wait$acc.log"
    wl=$(waits "$d/$m.lazy$acc.log"); ww=$(waits "$d/$m.wait$acc.log")
    [ "$wl" -lt $((ww - 20)) ] || { echo "FAIL: steps without a wait: the host waited $wl times, $ww with a wait every step"; exit 1; }
    r=$(compare same "$d/$m.wait$acc" "$d/$m.lazy$acc")
    echo "ok   $m, accumulate $acc: 30 steps with a wait only where a step needs one ($wl host waits, $ww with one every step): $r"
done
D=(--set max_steps=60 --set log_every=7 --set data.val=null --set grad_clip=null --set optimizer.type=sgd
   --set optimizer.lr=1e6 --set schedule.type=constant --set checkpoint.every_steps=3 --quiet --threads 1)
for w in 0 1; do
    rm -rf "$d/$m.div$w"*
    set +e
    TRAINC_STEP_WAIT=$w gpu "$d/$m" --device cuda "${D[@]}" --out "$d/$m.div$w" 2>"$d/$m.div$w.log"
    rc=$?
    set -e
    [ $rc = 3 ] || { echo "FAIL: diverging run (TRAINC_STEP_WAIT=$w): exit $rc"; cat "$d/$m.div$w.log"; exit 1; }
done
cmp -s "$d/$m.div0.log" "$d/$m.div1.log" && [ "$(tail -n 1 "$d/$m.div0/metrics.jsonl" | cut -d, -f1-3)" = "$(tail -n 1 "$d/$m.div1/metrics.jsonl" | cut -d, -f1-3)" ] &&
    [ "$(ls "$d/$m.div0/checkpoints")" = "$(ls "$d/$m.div1/checkpoints")" ] ||
    { echo "FAIL: a divergence between waits:"; cat "$d/$m.div0.log"; tail -n 1 "$d/$m.div0/metrics.jsonl" "$d/$m.div1/metrics.jsonl"; exit 1; }
echo "ok   $m: a loss that turns NaN between waits: $(tail -n 1 "$d/$m.div0/metrics.jsonl" | cut -d, -f2-3), the message and checkpoints of a wait every step"
O=(--set max_steps=40 --set log_every=8 --set validate.every_steps=20 --set validate.batches=2
   --set checkpoint.every_steps=20 --quiet --threads 1)
gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.mt.full" 2>/dev/null
gpu "$d/$m" --device cuda "${O[@]}" --set max_time=0.15 --out "$d/$m.mt" 2>/dev/null
n=$(tail -n 1 "$d/$m.mt/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
gpu "$d/$m" --device cuda "${O[@]}" --set max_time=null --resume "$d/$m.mt" 2>/dev/null
r=$(compare same "$d/$m.mt.full" "$d/$m.mt")
echo "ok   $m: stopped by max_time after step $n (log_every 8), resumed: $r"
# a finite loss whose gradients are not (tests/control.sh's data: one sample 3e22 times
# the others) in a step the host did not wait for, and with a wait every step: both
# end diverged at that step, and the checkpoint after it is not written
fbuild bench/wide_mlp.json -o "$d/wide" 2>/dev/null
"$PY" - "$d" <<'PY'
import numpy as np, sys
r = np.random.default_rng(0)
x = r.random((256, 32), dtype=np.float32); x[140] = 3e22
np.save(sys.argv[1] + "/wide_x.npy", x); np.save(sys.argv[1] + "/wide_y.npy", r.random((256, 16), dtype=np.float32))
PY
W=(--set "data.train.x=$PWD/$d/wide_x.npy" --set "data.train.y=$PWD/$d/wide_y.npy" --set batch_size=64 --set loader.shuffle=false
   --set max_steps=4 --set log_every=4 --set grad_clip=null --set checkpoint.every_steps=2 --quiet --threads 1)
for w in 0 1; do
    set +e
    TRAINC_STEP_WAIT=$w gpu "$d/wide" --device cuda "${W[@]}" --out "$d/wide.gnorm$w" 2>"$d/wide.gnorm$w.log"
    rc=$?
    set -e
    [ $rc = 3 ] && grep -q "the gradient norm is inf after step 2 (" "$d/wide.gnorm$w.log" &&
        [ "$(ls "$d/wide.gnorm$w/checkpoints")" = step_00000002 ] ||
        { echo "FAIL: gradients not finite (TRAINC_STEP_WAIT=$w): exit $rc"; cat "$d/wide.gnorm$w.log"; exit 1; }
done
echo "ok   a finite loss with gradients that are not, between waits and with a wait every step: diverged at its step, no checkpoint after it"

# loader.on_gpu: the arrays kept in GPU memory (auto takes them here, the fake GPU has
# 16 GB) and batches gathered there from their sample indices give the bits of batches
# copied from the host, shuffled, with validation; the start record counts the data;
# always with token shards is refused before anything is written
m=mlp_fashion
O=(--set log_every=1 --threads 1 --quiet --set max_steps=30 --set validate.every_steps=10
   --set validate.batches=3 --set loader.shuffle=true)
gpu "$d/$m" --device cuda "${O[@]}" --set loader.on_gpu=never --out "$d/$m.host" 2>/dev/null
gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.ongpu" 2>/dev/null
grep -q '"device_data_bytes":0,' "$d/$m.host/metrics.jsonl" && ! grep -q '"device_data_bytes":0,' "$d/$m.ongpu/metrics.jsonl" ||
    { echo "FAIL: loader.on_gpu: device_data_bytes"; head -1 "$d/$m.ongpu/metrics.jsonl"; exit 1; }
r=$(compare same "$d/$m.host" "$d/$m.ongpu")
echo "ok   $m loader.on_gpu (auto: taken) vs never: $r"
set +e
gpu "$d/gpt_char" --device cuda --set loader.on_gpu=always --set max_steps=1 --quiet --out "$d/ongpu_tokens" 2>"$d/ongpu_tokens.log"
rc=$?
set -e
[ $rc = 1 ] && grep -q "loader.on_gpu: always, but token shards" "$d/ongpu_tokens.log" && [ ! -e "$d/ongpu_tokens" ] ||
    { echo "FAIL: loader.on_gpu=always with token shards exited $rc with:"; cat "$d/ongpu_tokens.log"; exit 1; }
echo "ok   loader.on_gpu=always with token shards: exit 1, nothing written"

# attention over more sequences than a grid's z (the kernels' batch index, 65535 at
# most): a validation batch of 65537 one-token sequences (--eval: the forward kernel
# alone, 25 s in the emulator) runs as launches of at most 65535 rows (it stopped at an
# internal error), the CPU's numbers; and cut every 2 rows (TRAINC_ATT_BATCH_CHUNK),
# training on a batch of 5 in fp32 and bf16-mixed (heads 16 wide: the tensor-core
# kernels), forward and backward, gives the bits of one launch a pass
"$PY" - "$d" <<'PY'
import json, numpy as np, sys
r = np.random.default_rng(0)
n = 65537
np.save(sys.argv[1] + "/att_x.npy", r.integers(0, 5, (n, 1)).astype(np.int32))
np.save(sys.argv[1] + "/att_y.npy", r.integers(0, 5, (n, 1)).astype(np.int32))
data = {"x": "att_x.npy", "y": "att_y.npy"}
spec = {"trainc": 1, "model": {"name": "att_batch",
        "inputs": {"x": {"shape": [1], "dtype": "i32"}, "y": {"shape": [1], "dtype": "i32", "classes": 5}},
        "layers": [{"op": "embedding", "name": "wte", "vocab": 5, "dim": 16, "input": "x"},
                   {"op": "residual", "body": [{"op": "attention", "name": "attn", "heads": 1}]},
                   {"op": "linear", "name": "head", "out": 5}],
        "loss": {"op": "cross_entropy", "target": "y"}},
        "train": {"data": {"train": data, "val": data}, "batch_size": n, "epochs": 1,
                  "optimizer": {"type": "adamw", "lr": 0.01}, "loader": {"shuffle": False}, "log_every": 1, "seed": 1}}
json.dump(spec, open(sys.argv[1] + "/att_batch.json", "w"))
spec["model"]["layers"][0]["dim"] = 136   # wider than the kernels' 128 (below)
json.dump(spec, open(sys.argv[1] + "/att_wide.json", "w"))
PY
for p in fp32 bf16-mixed; do
    fbuild "$d/att_batch.json" --set precision=$p -o "$d/att_batch.$p" 2>/dev/null
done
gpu "$d/att_batch.fp32" --device cuda --eval --quiet >"$d/att_batch.eval.gpu" 2>"$d/att_batch.eval.log" ||
    { echo "FAIL: attention over a batch of 65537 on the GPU:"; cat "$d/att_batch.eval.log"; exit 1; }
"$d/att_batch.fp32" --device cpu --eval --quiet --threads 1 >"$d/att_batch.eval.cpu" 2>/dev/null
"$PY" - "$d/att_batch.eval.cpu" "$d/att_batch.eval.gpu" <<'PY'
import json, sys
a, b = (json.loads(open(f).read()) for f in sys.argv[1:])
assert a["terms"] == b["terms"] == 65537, (a, b)
r = abs(a["val_loss"] - b["val_loss"]) / a["val_loss"]
assert r <= 1e-5 and a["val_acc"] == b["val_acc"], (a, b)
print("ok   attention over a batch of 65537 sequences (past the grid's 65535): --eval within %.1e of the CPU" % r)
PY
for p in fp32 bf16-mixed; do
    A=(--set max_steps=2 --set batch_size=5 --set data.val=null --threads 1 --quiet)
    gpu "$d/att_batch.$p" --device cuda "${A[@]}" --out "$d/att_batch.$p.one" 2>/dev/null
    TRAINC_ATT_BATCH_CHUNK=2 gpu "$d/att_batch.$p" --device cuda "${A[@]}" --out "$d/att_batch.$p.cut" 2>/dev/null
    r=$(compare same "$d/att_batch.$p.one" "$d/att_batch.$p.cut")
    echo "ok   attention ($p) launched 2 sequences at a time vs 5 at once: $r"
done

# --sample without a prompt from a vocabulary of 5 (no newline id): it starts from id
# 10 % 5, the same ids on the GPU and the CPU (it started from the newline's 10: the
# CPU exited 2 after training, "index 10 ... out of range", and the GPU printed 20
# zero bytes, exit 0, from NaN logits)
S=(--set max_steps=1 --set batch_size=5 --set data.val=null --threads 1 --quiet --sample 20)
gpu "$d/att_batch.fp32" --device cuda "${S[@]}" --out "$d/att_sample.gpu" >"$d/att_sample.gpu.out" 2>"$d/att_sample.gpu.log" &&
    "$d/att_batch.fp32" --device cpu "${S[@]}" --out "$d/att_sample.cpu" >"$d/att_sample.cpu.out" 2>"$d/att_sample.cpu.log" ||
    { echo "FAIL: --sample from a vocabulary of 5:"; cat "$d/att_sample.gpu.log" "$d/att_sample.cpu.log"; exit 1; }
"$PY" - "$d/att_sample.cpu.out" "$d/att_sample.gpu.out" <<'PY'
import sys
a, b = (open(f, "rb").read() for f in sys.argv[1:])
assert a == b and len(a) == 21 and a[-1:] == b"\n" and max(a[:-1]) < 5 and len(set(a[:-1])) > 1, (a, b)
PY
echo "ok   --sample from a vocabulary of 5 without a prompt: the CPU's 20 ids on the GPU"

# heads wider than the kernels take (136) under trainc run, whose trainer has both
# devices: --device cuda exits 1 naming the heads before anything is written (it
# stopped at the first launch, exit 2, after the start record); auto trains on the CPU
# and says why (it failed as cuda did)
W=(--set max_steps=1 --set batch_size=2 --set data.val=null --threads 1 --quiet)
set +e
gpu "$TRAINC" run "$d/att_wide.json" --device cuda "${W[@]}" --out "$d/att_wide.cuda" 2>"$d/att_wide.cuda.log"
rc=$?
set -e
[ $rc = 1 ] && grep -q "error: --device cuda: attention heads 136 wide: the GPU kernels take up to 128" "$d/att_wide.cuda.log" &&
    [ ! -e "$d/att_wide.cuda" ] || { echo "FAIL: trainc run --device cuda, heads 136 wide: exit $rc with:"; cat "$d/att_wide.cuda.log"; exit 1; }
gpu "$TRAINC" run "$d/att_wide.json" --device auto "${W[@]}" --out "$d/att_wide.auto" 2>"$d/att_wide.auto.log" ||
    { echo "FAIL: trainc run --device auto, heads 136 wide:"; cat "$d/att_wide.auto.log"; exit 1; }
grep -q '"device":"cpu"' "$d/att_wide.auto/metrics.jsonl" && grep -q "heads 136 wide.*training on the CPU" "$d/att_wide.auto.log" ||
    { echo "FAIL: trainc run --device auto, heads 136 wide: not the CPU, or not said"; cat "$d/att_wide.auto.log"; exit 1; }
echo "ok   trainc run, heads 136 wide: --device cuda exits 1 naming them, nothing written; auto trains on the CPU, saying why"

# a GPU without room for the model: exit 2, "out of GPU memory", nothing written
set +e
TRAINC_FAKE_GPU_MEM_MB=8 gpu "$d/mlp_fashion" --device cuda --set max_steps=2 --quiet --out "$d/oom" 2>"$d/oom.log"
rc=$?
set -e
[ $rc = 2 ] && grep -q "out of GPU memory" "$d/oom.log" && [ ! -e "$d/oom" ] ||
    { echo "FAIL: an 8 MB GPU exited $rc with:"; cat "$d/oom.log"; exit 1; }
echo "ok   an 8 MB GPU: exit 2, out of GPU memory"

# a GPU older than the kernels' sm_80 (a T4's 7.5): exit 2, the GPU and the floor
# named, a hint, nothing written
set +e
TRAINC_FAKE_GPU_CC=75 gpu "$d/mlp_fashion" --device cuda --set max_steps=2 --quiet --out "$d/oldgpu" 2>"$d/oldgpu.log"
rc=$?
set -e
[ $rc = 2 ] && grep -q "has compute capability 7.5, and trainc's kernels need 8.0 or newer" "$d/oldgpu.log" &&
    grep -q "hint: .*--device cpu" "$d/oldgpu.log" && [ ! -e "$d/oldgpu" ] ||
    { echo "FAIL: a compute capability 7.5 GPU: exit $rc with:"; cat "$d/oldgpu.log"; exit 1; }
# with --device auto (a trainer built for both), the CPU trains, and says why
TRAINC_FAKE_GPU_CC=75 gpu "$d/mlp_fashion" --set max_steps=2 --quiet --out "$d/oldgpu_auto" 2>"$d/oldgpu_auto.log"
grep -q '"device":"cpu"' "$d/oldgpu_auto/metrics.jsonl" && grep -q "compute capability 7.5.*on the CPU" "$d/oldgpu_auto.log" ||
    { echo "FAIL: a compute capability 7.5 GPU with --device auto:"; cat "$d/oldgpu_auto.log"; exit 1; }
echo "ok   a compute capability 7.5 GPU: --device cuda exits 2 naming the floor, auto trains on the CPU"

# a driver for an older CUDA than the trainer's toolkit: exit 2, the versions named
set +e
TRAINC_FAKE_GPU_DRIVER=12080 gpu "$d/mlp_fashion" --device cuda --set max_steps=2 --quiet --out "$d/olddrv" 2>"$d/olddrv.log"
rc=$?
set -e
[ $rc = 2 ] && grep -q "no CUDA device found: the NVIDIA driver supports CUDA 12.8, and this trainer needs CUDA 13.0 or newer" "$d/olddrv.log" &&
    [ ! -e "$d/olddrv" ] || { echo "FAIL: a CUDA 12.8 driver: exit $rc with:"; cat "$d/olddrv.log"; exit 1; }
echo "ok   a CUDA 12.8 driver: exit 2, the versions named"

# a cubin built for sm_90a (the architecture-specific variant) is tried on an sm_90 GPU
# (the fake refuses real cubins, so the trace shows the try, then NVRTC's compile)
"$TRAINC" build specs/mlp_fashion.json --device both --arch sm_90a -o "$d/m90a" 2>/dev/null
TRAINC_FAKE_GPU_TRACE=1 gpu "$d/m90a" --device cuda --set max_steps=1 --set data.val=null --quiet \
    --out "$d/m90a.run" 2>"$d/m90a.log"
grep -q "cuModuleLoadData: a real cubin (ELF): refused" "$d/m90a.log" ||
    { echo "FAIL: the sm_90a cubin was not tried on an sm_90 GPU"; exit 1; }
echo "ok   an sm_90a cubin is tried on an sm_90 GPU"
