#!/usr/bin/env bash
# Every generated CUDA kernel of every spec compiles with NVRTC for sm_80 and, where it
# has attention, sm_90a (what an H100 compiles: sm90_attention.cuh's kernels), without
# errors or warnings (no GPU needed); each spec in fp32, bf16-mixed and fp16-mixed (the
# act_t storage of templates/cuda/common.cuh and the generated kernels' rt_ld/rt_st).
# The file as emitted: its templates #included from templates/cuda/ (trainc build
# compiles the same text with them inlined). NVRTC's fast compile (nvrtc_check --fast:
# the front end and ptxas whole, little optimization): what the optimizer makes of the
# templates is tests/nvrtc_templates.sh's part, and so is plain sm_90 (not in trainc
# build's default --arch; its code paths are sm_80's and sm_90a's), every template in
# every precision.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
CUDA=${CUDA_HOME:-/usr/local/cuda}
d=build/tests/nvrtc
rm -rf "$d"; mkdir -p "$d"
cc -std=gnu11 -O1 -I"$CUDA/include" tests/nvrtc_check.c -L"$CUDA/lib64" -Wl,-rpath,"$CUDA/lib64" -lnvrtc -o "$d/nvrtc_check"
# specs/ and tests/nvrtc_specs/ (what no shipped spec has: a BERT's padded rows, attention
# without a causal mask over the model's positions; a ResNet stem's max pool
# padding, an input normalized by channel; a decoder's sequence classifier, its rows
# padded on the left and read at their last token; dpo over pairs of texts, a vocabulary
# past 8192 whose rows are padded; a question answerer's span over padded rows; a
# ConvNeXt's untokens and layer_scale; ConvNeXt V2's grn; DINOv2's cls_mean, SwiGLU and
# registers; CLIP's quick_gelu and token_mean over the patch tokens; ModernBERT's windows
# on both sides and token_mean over each row's text)
for spec in specs/*.json tests/nvrtc_specs/*.json; do
    name=$(basename "$spec" .json)
    for prec in fp32 bf16-mixed fp16-mixed; do
        "$TRAINC" emit "$spec" -o "$d/$name.$prec" --set precision=$prec
        # sm_90a adds sm90_attention.cuh's kernels alone: a file without attention
        # instances compiles to sm_80's code paths (nvrtc_templates.sh: every template)
        archs=sm_80
        grep -q '^RT_ATTENTION' "$d/$name.$prec/kernels_cuda.cu" && archs="sm_80 sm_90a"
        "$d/nvrtc_check" --fast -I templates/cuda "$d/$name.$prec/kernels_cuda.cu" $archs
    done
done
# TRAINC_CE_REGS=0 (benchmarks' A/B): the file says so and leaves loss.cuh's register
# path out; it compiles too
TRAINC_CE_REGS=0 "$TRAINC" emit specs/gpt2_124m.json -o "$d/gpt2_124m.ce3"
grep -q '^#define RT_CE_THREE_PASSES 1$' "$d/gpt2_124m.ce3/kernels_cuda.cu"
if grep -q 'RT_CE_THREE_PASSES' "$d/gpt2_124m.bf16-mixed/kernels_cuda.cu"; then
    echo "FAIL: RT_CE_THREE_PASSES without TRAINC_CE_REGS=0"; exit 1
fi
"$d/nvrtc_check" --fast -I templates/cuda "$d/gpt2_124m.ce3/kernels_cuda.cu" sm_80 sm_90a
