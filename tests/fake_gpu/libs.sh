# tests/fake_gpu/libs.sh: sourced, from the repository's root, by a check on the fake GPU
# once it has set d (its folder, which this keeps) and, if the fake libraries are already
# built, lib (their folder). Where lib is empty: $FAKE_GPU_LIB when the libraries are
# there (tests/run_all.sh builds them there once, for every check), else builds them
# into d/lib. Keeps the trainers' kernel cache in d/cache, and defines
#   gpu CMD ARG...        CMD with the fake libraries first on the library path
#   fbuild SPEC ARG...    $TRAINC build SPEC ARG... --device both --arch sm_90a under the
#                         fake NVRTC: the kernels compiled at build time, for what NVRTC
#                         compiles on the fake's 9.0 at a first start, so that the trainer
#                         starts without compiling (the same kernels' real NVRTC compiles
#                         are tests/nvrtc.sh's)
# tests/fake_gpu/env.sh makes d anew first.
if [ -z "${lib:-}" ] && [ -n "${FAKE_GPU_LIB:-}" ] && [ -e "$FAKE_GPU_LIB/libcuda.so.1" ]; then
    lib=$FAKE_GPU_LIB
elif [ -z "${lib:-}" ]; then
    lib=$d/lib
    bash tests/fake_gpu/build.sh "$lib"
fi
lib=$(cd "$lib" && pwd)
TRAINC_CACHE_DIR=$(cd "$d" && pwd)/cache
export TRAINC_CACHE_DIR
gpu() { env LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
fbuild() { gpu "$TRAINC" build "$@" --device both --arch sm_90a; }
