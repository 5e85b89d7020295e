# tests/fake_gpu/env.sh: sourced, from the repository's root, by a check on the fake GPU
# once it has set d (its folder) and, if the fake libraries are already built, lib (their
# folder): makes d anew, then tests/fake_gpu/libs.sh (the libraries, the kernel cache in
# d/cache, gpu and fbuild; it says what they do).
: "${d:?tests/fake_gpu/env.sh: set d, the folder of the check, before sourcing it}"
rm -rf "$d"; mkdir -p "$d"
. tests/fake_gpu/libs.sh
