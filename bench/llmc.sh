# bench/llmc.sh: sourced (after bench/gpu_env.sh) by the GPU scripts that run llm.c's
# train_gpt2cu beside trainc. tests/gpu/pack.sh carries llm.c's binaries, built
# elsewhere, in $D/llm.c (LLMC_BIN there): train_gpt2cu_cudnn (USE_CUDNN=1: cuDNN's
# flash attention, llm.c's fastest) and train_gpt2cu (no cuDNN, the extra row), with
# $D/llm.c/build_flags.txt saying how each was built. Nothing here builds llm.c.
#
#   llmc_ready VARIANT      nocudnn | cudnn: 0 when the pack has that binary and it
#                           starts (loads its libraries, parses its options)
#   llmc_run VARIANT B STEPS WARM LABEL   one JSON line (tokens/s from llm.c's own
#                           per-step times, CUDA events around each step, of the
#                           steps after WARM), or one with "error"/"skipped"
#
# cuDNN at run time: the device's PyTorch ships it (the pip package nvidia-cudnn-cu13
# or -cu12, site-packages/nvidia/cudnn/{include,lib}); llmc_cudnn finds it and puts its
# lib/ on LD_LIBRARY_PATH (libcudnn.so.9 loads its engines from beside itself).
# shellcheck shell=bash
LLMC_DIR=$D/llm.c

llmc_cudnn() {   # prints the device's cuDNN folder (include/ and lib/), or nothing
    local d
    d=$(python3 -c 'import nvidia.cudnn as c, os; print(list(c.__path__)[0])' 2>/dev/null)
    [ -n "$d" ] && [ -d "$d/lib" ] || d=$(dirname "$(dirname "$(find / -path /proc -prune -o \
        -path '*nvidia/cudnn/lib/libcudnn.so.9' -print 2>/dev/null | head -1)")")
    ls "$d"/lib/libcudnn.so* >/dev/null 2>&1 && echo "$d"
}
LLMC_CUDNN=$(llmc_cudnn)
[ -n "$LLMC_CUDNN" ] && export LD_LIBRARY_PATH=$LLMC_CUDNN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

llmc_exe() { [ "$1" = cudnn ] && echo "$LLMC_DIR/train_gpt2cu_cudnn" || echo "$LLMC_DIR/train_gpt2cu"; }

llmc_starts() {  # does the binary load its libraries and parse its options?
    local exe
    exe=$(llmc_exe "$1")
    [ -x "$exe" ] && "$exe" -h 2>&1 | grep -q "max_steps"
}

llmc_ready() { [ -d "$LLMC_DIR" ] && llmc_starts "$1"; }

llmc_run() {     # llmc_run VARIANT B STEPS WARM LABEL
    local v=$1 b=$2 steps=$3 warm=$4 label=$5 exe log r
    exe=$(llmc_exe "$v")
    log=$OUT/llmc.$v.b$b.$RANDOM.log
    if declare -F left >/dev/null && [ "$(left)" -lt 30 ]; then   # (gpu_gpt2_b16.sh's clock)
        echo "{\"impl\":\"llm.c ($v)\",\"label\":\"$label\",\"batch\":$b,\"skipped\":\"$(left) s left of the part's limit\"}"
        return 0
    fi
    if ! llmc_ready "$v"; then
        echo "{\"impl\":\"llm.c ($v)\",\"label\":\"$label\",\"batch\":$b,\"skipped\":\"no llm.c binary in the pack (tests/gpu/pack.sh: LLMC_BIN), or it does not start\"}"
        return 0
    fi
    # random init (-e d12), no validation or sampling inside the timed steps (-v past
    # the end: llm.c evaluates 1 batch (-m 1) at steps 0 and last only; -s 0: no
    # sampling), lr and weight decay as trainc's spec, no activation recomputation
    # (-r 0, its fastest; -r 1, its default, when that does not fit)
    local lim=()   # under the caller's time limit (bench/gpu_gpt2_b16.sh's limited)
    declare -F limited >/dev/null && lim=(limited)
    for r in 0 1; do
        ( cd "$LLMC_DIR" && "${lim[@]}" "$exe" -i "$D/data/gpt2/train_*.bin" -j "$D/data/gpt2/val_*.bin" -e d12 \
            -b "$b" -t 1024 -x "$steps" -v 1000000 -m 1 -s 0 -h 0 -l 6e-4 -c 0.1 -r $r >"$log" 2>&1 ) && break
        grep -qi "out of memory" "$log" || break
    done
    python3 - "$log" "$v" "$b" "$warm" "$label" "$r" <<'PY'
import json, re, sys
log, v, b, warm, label, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
text = open(log, errors="replace").read()
steps = [(int(m.group(1)), float(m.group(2))) for m in re.finditer(r"step +(\d+)/\d+ \|.*?\| ([0-9.]+) ms \|", text)]
timed = [ms for s, ms in steps if s > warm]
rec = {"impl": "llm.c train_gpt2cu (" + ("cuDNN" if v == "cudnn" else "no cuDNN") + ")", "label": label,
       "batch": b, "recompute": int(r), "log": log.rsplit("/", 1)[-1]}
if timed:
    rec.update(tokens_per_s=round(len(timed) * b * 1024 / (sum(timed) / 1e3), 1), timed_steps=len(timed),
               timed_wall_s=round(sum(timed) / 1e3, 4))
else:
    rec["error"] = "no timed steps in its log: " + " | ".join(text.strip().splitlines()[-3:])
print(json.dumps(rec))
PY
}
