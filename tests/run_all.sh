#!/usr/bin/env bash
# The test suite: `make test` runs every check below, `make check` the quick tier
# (QUICK, under 5 minutes). Each `check NAME [--after=DEP,...] [--timeout=S] COMMAND...`
# line is one check: COMMAND runs with its output in build/tests/NAME.log (/ as _),
# after the checks it names in --after have passed, and fails if it runs past S
# seconds (default $TIMEOUT, 900). Checks run JOBS at a time (default 2), started in
# the order of the lines (the long ones first, so that the jobs end together); no two
# checks share a folder (each writes under build/tests/ its own), and mpirun's ports
# are its own choice. Each prints "ok   NAME (N s)",
# "skip NAME" (it exited 77) or "FAIL NAME" with the end of its log; a line "skip ..."
# in a log is a part of a check that could not run here. The last line is
# "N passed, M failed" (", K skipped" after it where something was skipped), and the
# exit status is nonzero on failure.
#
#   TESTS='PATTERN ...'   only the checks whose name matches a shell pattern, or
#                         starts with PATTERN/ (TESTS=parity: every parity/ check);
#                         the checks they need (--after) run too
#   TIER=check            only QUICK's checks (what `make check` runs)
#   JOBS=N, TIMEOUT=S     checks at a time; the default time limit of a check
#   --list                print the selected checks and what each waits for, run none
set -u
cd "$(dirname "$0")/.."
export TRAINC=${TRAINC:-build/trainc}
export PYTHON=${PYTHON:-/usr/bin/python3}
# the Hugging Face oracle: the venv `make deps` makes (transformers over Debian's torch);
# without one, the checks that need it skip (exit 77)
export HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
command -v "$HF_PYTHON" >/dev/null || HF_PYTHON=$PYTHON
# and a newer transformers (4.48.3) for the families 4.40 lacks (tests/hf_io.py --newer)
export HF_NEW_PYTHON=${HF_NEW_PYTHON:-.venv/hf-new/bin/python}
command -v "$HF_NEW_PYTHON" >/dev/null || HF_NEW_PYTHON=$PYTHON
# and TensorBoard, the reader of the trainers' events files (tests/tb_events.py)
export TB_PYTHON=${TB_PYTHON:-.venv/tb/bin/python}
command -v "$TB_PYTHON" >/dev/null || TB_PYTHON=$PYTHON
T=build/tests
mkdir -p "$T"
# the fake NVRTC's modules, shared by the checks on the fake GPU (tests/fake_gpu/
# fake_nvrtc.c: named by a hash of all that makes them), made anew for each run
export TRAINC_FAKE_NVRTC_CACHE=$PWD/$T/fake_nvrtc_cache
rm -rf "$TRAINC_FAKE_NVRTC_CACHE"
# and the fake GPU's libraries, built once (the check fake_gpu/lib) for every check that
# runs on it (tests/fake_gpu/libs.sh takes them from here): the modules' cache key names
# them, so the checks share modules too
export FAKE_GPU_LIB=$PWD/$T/fake_gpu_lib
rm -rf "$FAKE_GPU_LIB"
JOBS=${JOBS:-2}
TIMEOUT=${TIMEOUT:-900}
# the inner loop's tier: the unit tests, the compiler's output, bad input, the command
# line, a short parity with PyTorch
QUICK=(unit asan/build bad/specs bad/hf bad/runtime cli data/text data/fashion golden verify parity/mlp_sgd
       dropout_stats schedules max_time set_order auto_ranks attention_opts flops emu_sm90)

names=(); cmds=(); afters=(); limits=()
check() {   # check NAME [--after=DEP,...] [--timeout=S] COMMAND...: registers a check
    local name=$1 after="" limit=$TIMEOUT; shift
    while :; do
        case $1 in
            --after=*) after=${1#--after=}; shift ;;
            --timeout=*) limit=${1#--timeout=}; shift ;;
            *) break ;;
        esac
    done
    names+=("$name"); afters+=("${after//,/ }"); limits+=("$limit")
    cmds+=("$(printf '%q ' "$@")")
}

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
UCC="cc -std=gnu11 -O1 -g $SAN -Iruntime -Icompiler"
# the CPU kernels' files (runtime/kernels.h lists them)
KERNELS="runtime/kernels.c runtime/im2col.c runtime/pooling.c runtime/norms.c runtime/glu.c runtime/losses.c"

# the long checks first, so that the two jobs end together: the fake GPU
# (tests/fake_gpu/: the generated CUDA code run in an emulator) and a whole training
check fake_gpu/lib        bash tests/fake_gpu/build.sh "$FAKE_GPU_LIB"
check fake_gpu            --after=fake_gpu/lib --timeout=2400 bash tests/fake_gpu.sh
check learn/gpt_char      --timeout=1800 bash tests/gpt_learn.sh
check gpu_emu             bash tests/gpu_emu.sh fp32
check emu_sm90            bash tests/emu_sm90.sh
check fake_ddp            --after=fake_gpu/lib bash tests/fake_ddp.sh
check fake_gpu/ops        --after=fake_gpu/lib bash tests/fake_gpu_ops.sh
check fake_gpu/random     --after=fake_gpu/lib $PYTHON tests/random_models.py 24 7 --fake-gpu=24
check fake_gpu/random_gans --after=fake_gpu/lib $PYTHON tests/random_gans.py 8 5 --fake-gpu=8
check fake_gpu/odd        --after=fake_gpu/lib $PYTHON tests/random_models.py 6 3 --fake-gpu=6 --odd
check fake_gpu/attn16     --after=fake_gpu/lib bash tests/fake_gpu_attn16.sh
check fake_gpu/fp8        --after=fake_gpu/lib bash tests/fake_fp8.sh
check fake_gpu/conv       --after=fake_gpu/lib bash tests/fake_gpu_conv.sh
check fake_gpu/vit        --after=fake_gpu/lib $PYTHON tests/vit_parity.py --fake-gpu
check fake_gpu/seq_cls    --after=fake_gpu/lib $HF_PYTHON tests/seq_cls_hf.py --fake-gpu
check fake_gpu/reward     --after=fake_gpu/lib $HF_PYTHON tests/reward_hf.py --fake-gpu
check fake_gpu/dpo        --after=fake_gpu/lib $HF_PYTHON tests/dpo_hf.py --fake-gpu
check fake_gpu/moe        --after=fake_gpu/lib bash tests/fake_gpu_moe.sh
check fake_gpu/ema        --after=fake_gpu/lib $PYTHON tests/ema_parity.py --fake-gpu
check fake_gpu/kv         --after=fake_gpu/lib bash tests/fake_gpu_kv.sh
check fake_gpu/freeze     --after=fake_gpu/lib bash tests/fake_gpu_freeze.sh
check fp8_mixed           --after=fake_gpu/lib bash tests/fp8_mixed.sh

# the distributed layer and the DistributedSampler, with mpirun (1-3 ranks, a dead peer)
check dist                bash tests/dist.sh

# the parser and checker under sanitizers, on the bad-input corpus
check asan/build          make -s B=build/asan CFLAGS="-O1 -g $SAN" build/asan/trainc
# (leak checking off: the compiler exits on the first error without freeing, by design)
check bad/specs           --after=asan/build env TRAINC=build/asan/trainc ASAN_OPTIONS=detect_leaks=0 bash tests/bad_input.sh
check bad/hf              --after=asan/build env TRAINC=build/asan/trainc ASAN_OPTIONS=detect_leaks=0 bash tests/hf_bad.sh
check bad/runtime         bash tests/bad_runtime.sh
check cli                 bash tests/cli.sh
# the same with the trainer and its runtime under the sanitizers (sanitizer exit code 86)
check asan/runtime        --after=asan/build env TRAINC=build/asan/trainc TRAINC_CFLAGS="$SAN" ASAN_OPTIONS=detect_leaks=0:exitcode=86 UBSAN_OPTIONS=exitcode=86 bash tests/bad_runtime.sh
check data/text           bash tests/data_text.sh
check data/fashion        bash tests/data_fashion.sh
check data/tokenizer_hf   $HF_PYTHON tests/tokenizer_hf.py
check data/sft           $HF_PYTHON tests/data_sft.py
check data/classify      $HF_PYTHON tests/data_classify.py
check data/images        --after=asan/build env ASAN_TRAINC=build/asan/trainc $HF_PYTHON tests/data_images.py
check data/wordpiece_hf  $HF_PYTHON tests/wordpiece_hf.py
check sample/tokenizer    $HF_PYTHON tests/tokenizer_sample.py
check sample/kv_cache     $PYTHON tests/kv_cache.py

# compiler output
check golden              bash tests/golden.sh
check verify              bash tests/verify.sh
check nvrtc               bash tests/nvrtc.sh
check nvrtc_templates     bash tests/nvrtc_templates.sh
check cuda_host           bash tests/cuda_host.sh
check gradcheck           bash tests/gradcheck.sh
check attention_opts      $PYTHON tests/attention_opts.py
check flops               $PYTHON tests/flops.py
check augment             --after=fake_gpu/lib bash tests/augment.sh
check vocab_pad           bash tests/vocab_pad.sh

# whole runs
check parity/random       --after=asan/build env RANDOM_MODELS_ASAN=build/asan/trainc $PYTHON tests/random_models.py 90 1
check jit_vs_build        bash tests/jit_vs_build.sh
check jit_cc              bash tests/jit_cc.sh
check resume              bash tests/resume.sh
check robust              bash tests/robust.sh
check control             bash tests/control.sh
check keep_best           --after=asan/build env ASAN_TRAINC=build/asan/trainc $PYTHON tests/keep_best.py
check tensorboard         $TB_PYTHON tests/tb_events.py
check min_steps           --after=fake_gpu/lib bash tests/min_steps.sh
# --predict: the MLP's and the ResNet's logits against PyTorch in eval mode, a token
# model's against --eval, bad input
check predict             $PYTHON tests/predict.py
check gan                 --after=fake_gpu/lib bash tests/gan.sh
check int_dtypes          bash tests/int_dtypes.sh
check tokens_u32          --after=fake_gpu/lib bash tests/tokens_u32.sh
check lr_find             bash tests/lr_find.sh
check profile             bash tests/profile.sh
check scaler              bash tests/scaler.sh
check recompute           bash tests/recompute.sh
check dropout_keys        bash tests/dropout_keys.sh
check init_gpt2           bash tests/init_gpt2.sh
check ddp                 bash tests/ddp.sh
check batchnorm           --after=fake_gpu/lib bash tests/batchnorm.sh
check zero                bash tests/zero.sh
check parity/mlp_adamw    $PYTHON tests/torch_parity.py mlp adamw
check parity/mlp_sgd      $PYTHON tests/torch_parity.py mlp sgd
check parity/mlp_freeze   $PYTHON tests/torch_parity.py mlp sgd --freeze '1.*,3.weight,4.weight,6.bias'
check parity/cnn_adamw    $PYTHON tests/torch_parity.py cnn adamw
check parity/batchnorm    $PYTHON tests/batchnorm_parity.py
check parity/batchnorm_accumulate $PYTHON tests/batchnorm_parity.py --accumulate
check parity/batchnorm_recompute $PYTHON tests/batchnorm_parity.py --recompute full
check parity/cnn_sgd      $PYTHON tests/torch_parity.py cnn sgd
check parity/gpt_char     $PYTHON tests/gpt_parity.py
# the GPU benchmark's PyTorch GPT-2 (bench/gpu_gpt2_torch.py) trains trainc's recipe: a
# tiny GPT-2 from the same weights on the same batches, step for step (fp32, CPU)
check parity/gpt2_recipe  env TINY=1 PYTHON=$PYTHON bash bench/gpu_gpt2_curve.sh
check parity/glu          $PYTHON tests/glu_parity.py
# Llama: trainc against HF's LlamaForCausalLM (after checking tests/llama_torch.py's
# SPEC reference against HF's Llama and Mistral), and against that reference for what
# HF's Llama lacks (its run starts with the reference's own consistency checks); the
# shipped specs' counts; llama_char learning
check parity/llama_hf     $HF_PYTHON tests/llama_hf.py
# packed rows (the model's positions) against HF's Llama on each sequence alone
check parity/packed       $HF_PYTHON tests/packed_parity.py
check parity/llama_ref    $PYTHON tests/llama_ref.py
check parity/lora        $PYTHON tests/lora_parity.py
check parity/ema         $PYTHON tests/ema_parity.py
check parity/swa         --after=fake_gpu/lib,asan/build env ASAN_TRAINC=build/asan/trainc $PYTHON tests/swa_parity.py --fake-gpu
check limit_batches      $PYTHON tests/limit_batches.py
check parity/ignore      $PYTHON tests/ignore_parity.py
check llama_specs          bash tests/llama_specs.sh
check learn/llama_char     bash tests/llama_learn.sh
# trainc import hf / export hf against transformers: GPT-2, Llama, Mistral, a bf16
# sharded checkpoint; refused configs and layers
check parity/hf_io        $HF_PYTHON tests/hf_io.py
check parity/hf_io_newer  $HF_NEW_PYTHON tests/hf_io.py --newer
# ViTForImageClassification both ways
check parity/vit_hf       $HF_PYTHON tests/vit_hf.py
check parity/dinov2_hf    $HF_PYTHON tests/dinov2_hf.py
check parity/clip_hf      $HF_PYTHON tests/clip_hf.py
check parity/siglip_hf    $HF_NEW_PYTHON tests/clip_hf.py --siglip
check parity/dinov2_hf_newer $HF_NEW_PYTHON tests/dinov2_hf.py --newer
check parity/resnet_hf    $HF_PYTHON tests/resnet_hf.py
check parity/convnext_hf  --after=fake_gpu/lib $HF_PYTHON tests/convnext_hf.py
check parity/bert_hf      $HF_PYTHON tests/bert_hf.py
check parity/bert_token_hf $HF_PYTHON tests/bert_token_hf.py
check parity/bert_mlm_hf   --after=fake_gpu/lib $HF_PYTHON tests/bert_mlm_hf.py
# ModernBERT both ways (transformers 4.48 on), windows on both sides
check parity/modernbert_hf --after=fake_gpu/lib $HF_NEW_PYTHON tests/modernbert_hf.py
check parity/seq_cls_hf    $HF_PYTHON tests/seq_cls_hf.py
check parity/decoder_token_hf $HF_PYTHON tests/decoder_token_hf.py
check parity/qa_hf         --after=fake_gpu/lib,asan/build env ASAN_TRAINC=build/asan/trainc $HF_PYTHON tests/qa_hf.py
check parity/electra_hf    $HF_PYTHON tests/electra_hf.py
check parity/xlmr_hf      $HF_PYTHON tests/xlmr_hf.py
check parity/reward_hf     $HF_PYTHON tests/reward_hf.py
check parity/dpo_hf        $HF_PYTHON tests/dpo_hf.py
check parity/resnet       $PYTHON tests/resnet_parity.py
check parity/vit          $PYTHON tests/vit_parity.py
check parity/convt        $PYTHON tests/convt_parity.py
check parity/gan          $PYTHON tests/gan_parity.py
check parity/random_gans  $PYTHON tests/random_gans.py 40 1
# examples/finetune/run.sh as a user runs it: HF folder, import, tokenize, fine-tune,
# sample, export, transformers loads it (skips without transformers in HF_PYTHON)
check example/finetune    bash examples/finetune/run.sh build/tests/finetune
# examples/vit_finetune/run.sh as a user runs it: a HF ViT folder, import, fine-tune an
# epoch, export, transformers classifies as trainc does
check example/vit_finetune bash examples/vit_finetune/run.sh build/tests/vit_finetune
# examples/image_folder/run.sh's smoke mode: a HF ConvNeXt V2 folder, import, data images
# of PNG files, 60 steps, export, transformers' pipeline labels the files as trainc does
check example/image_folder env SMOKE=1 bash examples/image_folder/run.sh build/tests/image_folder
# examples/text_classify/run.sh: a RoBERTa masked LM, import with a new classifier, data
# classify, fine-tune, export, transformers classifies the raw text as trainc does
check example/text_classify bash examples/text_classify/run.sh build/tests/text_classify
# examples/preferences/run.sh: a Qwen2 language model, import --task reward, data pairs,
# train, export, transformers scores the raw text as trainc does
check example/preferences bash examples/preferences/run.sh build/tests/preferences
# examples/dcgan/run.sh's smoke mode: 30 steps of the DCGAN, its files, samples and checks
check example/dcgan       env SMOKE=1 bash examples/dcgan/run.sh build/tests/dcgan
check learn/mlp           bash tests/learn.sh mlp_fashion 0.85
check learn/cnn           bash tests/learn.sh cnn_fashion 0.88
check dropout_stats       bash tests/dropout_stats.sh
check drop_path           $PYTHON tests/drop_path.py
check schedules           $PYTHON tests/schedules.py
check max_time            bash tests/max_time.sh
check set_order           bash tests/set_order.sh
check auto_ranks          bash tests/auto_ranks.sh

# unit tests of the runtime, under AddressSanitizer and UBSan
check unit/build_data     $UCC tests/unit/test_data.c runtime/data.c runtime/augment.c runtime/rng.c runtime/init.c $KERNELS runtime/blas.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_data
check unit/data           --after=unit/build_data $T/test_data
check unit/build_tokens   $UCC tests/unit/test_tokens.c runtime/data.c runtime/augment.c runtime/rng.c runtime/util.c -lpthread -lm -o $T/test_tokens
check unit/tokens         --after=unit/build_tokens $T/test_tokens
check unit/build_tokenizer $UCC tests/unit/test_tokenizer.c runtime/tokenizer.c runtime/wordpiece.c runtime/unicode.c runtime/unigram.c runtime/precompiled.c runtime/graphemes.c runtime/align.c -lcjson -o $T/test_tokenizer
check unit/tokenizer      --after=unit/build_tokenizer $T/test_tokenizer
check unit/build_io       $UCC tests/unit/test_io.c runtime/safetensors.c runtime/metrics.c runtime/tboard.c runtime/util.c -lcjson -lm -o $T/test_io
check unit/io             --after=unit/build_io $T/test_io
check unit/build_half     $UCC tests/unit/test_half.c -lm -o $T/test_half
check unit/half           --after=unit/build_half $T/test_half
check unit/build_kernels  $UCC tests/unit/test_kernels.c runtime/conv.c runtime/conv_direct.c $KERNELS runtime/blas.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_kernels
check unit/kernels        --after=unit/build_kernels $T/test_kernels
check unit/build_attention $UCC tests/unit/test_attention.c runtime/attention.c $KERNELS runtime/blas.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_attention
check unit/attention      --after=unit/build_attention $T/test_attention
check unit/attention_torch --after=unit/build_attention $PYTHON tests/attention_ref.py $T/attention_ref.bin $T/test_attention
check unit/build_config   $UCC tests/unit/test_spec.c runtime/config.c runtime/util.c -lm -o $T/test_spec
check unit/config         --after=unit/build_config $T/test_spec
check unit/build_es       $UCC tests/unit/test_earlystop.c runtime/earlystop.c runtime/config.c runtime/util.c -lm -o $T/test_es
check unit/earlystop      --after=unit/build_es $T/test_es
check unit/build_lrfind   $UCC tests/unit/test_lrfind.c runtime/lrfind.c runtime/metrics.c runtime/tboard.c runtime/util.c -lcjson -lm -o $T/test_lrfind
check unit/lrfind         --after=unit/build_lrfind $T/test_lrfind
# a GAN's --sample files: the PNG grid against a NumPy make_grid + save_image, the .npy
# against np.save (tests/image_check.py runs the binary, then reads its files back)
check unit/build_image    $UCC tests/unit/test_image.c runtime/image.c runtime/util.c -lm -o $T/test_image
check unit/image          --after=unit/build_image $PYTHON tests/image_check.py $T/test_image $T/image
# fuse() on hand-built programs (compiler sources; the compiler frees nothing by design)
check unit/build_fusion   $UCC tests/unit/test_fusion.c compiler/fusion.c compiler/expr.c compiler/lower.c compiler/graph.c compiler/gan.c compiler/autodiff.c compiler/call.c compiler/util.c compiler/buf.c compiler/spec.c compiler/spec_train.c compiler/spec_json.c compiler/ops/*.c runtime/config.c runtime/util.c -lcjson -lm -o $T/test_fusion
check unit/fusion         --after=unit/build_fusion env ASAN_OPTIONS=detect_leaks=0 $T/test_fusion
check unit/build_expr     $UCC tests/unit/test_expr.c compiler/expr.c compiler/kernel.c compiler/call.c compiler/util.c compiler/buf.c -lm -o $T/test_expr
check unit/expr           --after=unit/build_expr env ASAN_OPTIONS=detect_leaks=0 $T/test_expr
# --sample's repetition penalty, temperature, top_k, top_p and min_p against transformers'
# (the newer one: min_p's warper came with 4.39; skips without transformers)
check unit/build_sampling $UCC tests/unit/test_sampling.c runtime/sampling.c runtime/rng.c runtime/util.c -lm -o $T/test_sampling
check unit/sampling       --after=unit/build_sampling $HF_NEW_PYTHON tests/sampling_check.py $T/test_sampling $T/sampling
check unit/build_losses   $UCC tests/unit/test_losses.c $KERNELS runtime/blas.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_losses
check unit/losses         --after=unit/build_losses $T/test_losses
# the attention's scratch grows with T, not T^2 (malloc wrapped and measured), and
# the blocked unmasked path on the unit test's small shapes (ATT_FLOATS lowered)
check unit/build_attention_scratch $UCC tests/unit/test_attention_scratch.c runtime/attention.c $KERNELS runtime/blas.c runtime/util.c -Wl,--wrap=malloc -lopenblas -lpthread -lm -o $T/test_attention_scratch
check unit/attention_scratch --after=unit/build_attention_scratch $T/test_attention_scratch
check unit/build_attention_blocks $UCC -DATT_FLOATS=256 tests/unit/test_attention.c runtime/attention.c $KERNELS runtime/blas.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_attention_blocks
check unit/attention_blocks --after=unit/build_attention_blocks $T/test_attention_blocks

# ---- which checks: TESTS and TIER, and what they need ------------------------------
n=${#names[@]}
index_of() { local i; for ((i = 0; i < n; i++)); do [ "${names[i]}" = "$1" ] && echo $i && return; done; }
matches() {   # matches NAME PATTERN...: NAME is PATTERN, or under PATTERN/
    local name=$1 p; shift
    for p in "$@"; do
        # shellcheck disable=SC2053
        [[ $name == $p || $name == $p/* ]] && return 0
    done
    return 1
}
want=()
for ((i = 0; i < n; i++)); do
    w=1
    [ -n "${TESTS:-}" ] && { set -f; matches "${names[i]}" ${TESTS} || w=0; set +f; }
    [ "${TIER:-}" = check ] && { matches "${names[i]}" "${QUICK[@]}" || w=0; }
    want[i]=$w
done
for ((k = 0; k < n; k++)); do   # what a wanted check waits for is wanted (n passes: enough)
    for ((i = 0; i < n; i++)); do
        [ "${want[i]}" = 1 ] || continue
        for dep in ${afters[i]}; do
            j=$(index_of "$dep")
            [ -n "$j" ] || { echo "run_all.sh: ${names[i]} waits for $dep, no such check" >&2; exit 2; }
            want[j]=1
        done
    done
done
if [ "${1:-}" = --list ]; then
    for ((i = 0; i < n; i++)); do
        [ "${want[i]}" = 1 ] && echo "${names[i]}${afters[i]:+ (after ${afters[i]})}"
    done
    exit 0
fi
total=0; for ((i = 0; i < n; i++)); do total=$((total + want[i])); done
[ $total -gt 0 ] || { echo "run_all.sh: no check matches TESTS='${TESTS:-}'${TIER:+ in TIER=$TIER}" >&2; exit 2; }
echo "$total checks, $JOBS at a time"

# ---- running them -------------------------------------------------------------------
S=$T/.status; rm -rf "$S"; mkdir -p "$S"
state=(); pids=()       # state: wait, run, pass, fail, skip
for ((i = 0; i < n; i++)); do state[i]=$([ "${want[i]}" = 1 ] && echo wait || echo off); done
pass=0; fail=0; skip=0; running=0; failed=(); skipped=()

logof() { local name=${names[$1]}; echo "$T/${name//\//_}.log"; }
start() {   # start I: check I in the background; its exit status and seconds go to $S/I
    local i=$1
    (
        t0=$SECONDS
        timeout -k 10 "${limits[i]}" bash -c "${cmds[i]}" </dev/null >"$(logof "$i")" 2>&1
        echo "$? $((SECONDS - t0))" >"$S/$i.tmp" && mv "$S/$i.tmp" "$S/$i"
    ) &
    pids[i]=$!; state[i]=run; running=$((running + 1))
}
finish() {   # finish I RC SECONDS: reports check I
    local i=$1 rc=$2 secs=$3 name=${names[$1]} log; log=$(logof "$1")
    local parts; parts=$(grep -c '^ *skip ' "$log" 2>/dev/null) || true
    if [ "$rc" = 0 ]; then
        pass=$((pass + 1)); state[i]=pass; echo "ok   $name ($secs s)"
    elif [ "$rc" = 77 ]; then
        skip=$((skip + 1)); state[i]=skip; skipped+=("$name"); echo "skip $name: $(tail -n 1 "$log")"
        return
    else
        fail=$((fail + 1)); state[i]=fail; failed+=("$name")
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            echo "FAIL $name: timed out after ${limits[i]} s (--timeout); last lines of $log:"
        else
            echo "FAIL $name ($secs s, exit $rc); last lines of $log:"
        fi
        tail -n 15 "$log" | sed 's/^/    /'
    fi
    if [ "${parts:-0}" -gt 0 ]; then   # parts of a check that could not run here
        skip=$((skip + parts)); skipped+=("$name ($parts)")
        grep '^ *skip ' "$log" | while IFS= read -r l; do echo "     ($name) ${l#"${l%%skip*}"}"; done
    fi
}
stop_all() {
    # (each check's timeout is its process group's leader: it passes the signal on)
    for ((i = 0; i < n; i++)); do [ "${state[i]}" = run ] && pkill -TERM -P "${pids[i]}"; done
    echo; echo "run_all.sh: interrupted"; exit 130
}
trap stop_all INT TERM

while :; do
    for ((i = 0; i < n && running < JOBS; i++)); do   # start what is ready
        [ "${state[i]}" = wait ] || continue
        ready=1
        for dep in ${afters[i]}; do
            case ${state[$(index_of "$dep")]} in
                pass) ;;
                fail|skip|cancel) ready=0; state[i]=cancel; fail=$((fail + 1)); failed+=("${names[i]}")
                                  echo "FAIL ${names[i]}: not run, $dep did not pass"; break ;;
                *) ready=0 ;;
            esac
        done
        [ $ready = 1 ] && start "$i"
    done
    [ $running -gt 0 ] || break
    wait -n 2>/dev/null
    got=0
    for ((i = 0; i < n; i++)); do   # report what ended
        if [ "${state[i]}" = run ] && [ -e "$S/$i" ]; then
            read -r rc secs <"$S/$i"
            running=$((running - 1)); got=1
            finish "$i" "$rc" "$secs"
        fi
    done
    [ $got = 1 ] || sleep 0.2
done

echo
[ $fail -gt 0 ] && echo "failed: ${failed[*]}"
[ $skip -gt 0 ] && echo "skipped: ${skipped[*]}"
echo "$pass passed, $fail failed$([ $skip -gt 0 ] && echo ", $skip skipped")"
[ $fail -eq 0 ]
