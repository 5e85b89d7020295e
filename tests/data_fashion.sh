#!/usr/bin/env bash
# `trainc data fashion-mnist DIR --from SRC`: the IDX reader (compiler/data_cmd.c) on
# small hand-made sets, gzip'd and plain. A good set must come out as the .npy arrays
# numpy reads back with the same values; each broken one is refused with exit 1, a
# message naming the file, and nothing written.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fashion
rm -rf "$d"; mkdir -p "$d"
pass=0; fail=0
ok()  { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

# make SET [BREAK]: SET/ holds 5 train and 3 test images of 4 x 3 with labels; BREAK
# spoils one file (see the cases below); gz=1 in the name gzips the files
make_set() {
    $PY - "$d/$1" "${2:-}" <<'PY'
import gzip, os, struct, sys
out, brk = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
gz = "gz" in os.path.basename(out)
def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", n) for n in dims) + bytes(data)
def put(name, b):
    if gz:
        open(os.path.join(out, name + ".gz"), "wb").write(gzip.compress(b))
    else:
        open(os.path.join(out, name), "wb").write(b)
for split, n in (("train", 5), ("t10k", 3)):
    img = [(7 * i + 3 * split.__len__()) % 256 for i in range(n * 12)]
    lab = [(i * 3 + n) % 10 for i in range(n)]
    xi, yi = idx([n, 4, 3], img), idx([n], lab)
    if split == "train":
        if brk == "magic":       xi = b"\x00\x00\x09" + xi[3:]
        if brk == "rank":        yi = idx([n, 1], lab)
        if brk == "short_hdr":   yi = yi[:6]
        if brk == "zero_dim":    xi = idx([n, 0, 3], [])
        if brk == "huge":        xi = idx([65536, 65536, 2], img)
        if brk == "huge_short":  xi = idx([60000, 200, 200], img)
        if brk == "truncated":   xi = xi[:-1]
        if brk == "extra":       yi = yi + b"\x00"
        if brk == "label":       yi = idx([n], lab[:-1] + [10])
        if brk == "count":       yi = idx([n - 1], lab[:-1])
        if brk == "missing":     continue
    put(f"{split}-images-idx3-ubyte", xi)
    put(f"{split}-labels-idx1-ubyte", yi)
if brk == "corrupt_gz":   # a gzip stream whose deflate data is damaged
    p = os.path.join(out, "train-images-idx3-ubyte.gz")
    b = bytearray(open(p, "rb").read()); b[12] ^= 0xff; b[13] ^= 0x55
    open(p, "wb").write(bytes(b))
PY
}

# the good sets: gzip'd and plain, both read back by numpy
for set in good_gz good_plain; do
    make_set $set
    if "$TRAINC" data fashion-mnist "$d/$set.out" --from "$d/$set" >"$d/$set.stdout" 2>"$d/$set.stderr" &&
        $PY - "$d/$set.out" <<'PY'
import numpy as np, sys
o = sys.argv[1]
for split, n, name in (("train", 5, "train"), ("t10k", 3, "test")):
    x, y = np.load(f"{o}/{name}_x.npy"), np.load(f"{o}/{name}_y.npy")
    assert x.dtype == np.uint8 and x.shape == (n, 1, 4, 3), (x.dtype, x.shape)
    assert y.dtype == np.int32 and y.shape == (n,), (y.dtype, y.shape)
    img = [(7 * i + 3 * len(split)) % 256 for i in range(n * 12)]
    assert x.reshape(-1).tolist() == img
    assert y.tolist() == [(i * 3 + n) % 10 for i in range(n)]
PY
    then ok "$set: converted, numpy reads the same values"; else bad "$set"; cat "$d/$set.stderr"; fi
done
[ "$(ls "$d/good_gz.out" | tr '\n' ' ')" = "test_x.npy test_y.npy train_x.npy train_y.npy " ] &&
    ok "four files, no .tmp left" || bad "files left: $(ls "$d/good_gz.out")"

# refuse SET BREAK MESSAGE: exit 1, MESSAGE on stderr, no output folder
refuse() {
    local set=$1 brk=$2 msg=$3
    make_set "$set" "$brk"
    "$TRAINC" data fashion-mnist "$d/$set.out" --from "$d/$set" >"$d/$set.stdout" 2>"$d/$set.stderr"
    local rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$msg" "$d/$set.stderr" && [ ! -e "$d/$set.out" ]; then
        ok "$set: exit 1, $msg"
    else
        bad "$set: exit $rc, wanted 1 and '$msg' and nothing written; stderr: $(cat "$d/$set.stderr")"
    fi
}
for z in gz plain; do
    refuse magic_$z      magic      "train-images-idx3-ubyte$([ $z = gz ] && echo .gz): not an IDX file of unsigned bytes (bad magic)"
    refuse rank_$z       rank       "IDX file has 2 dimensions, expected 1"
    refuse short_hdr_$z  short_hdr  "truncated IDX header"
    refuse zero_dim_$z   zero_dim   "implausible IDX size (dimension 1 is 0)"
    refuse huge_$z       huge       "implausible IDX size (dimension 2 is 2)"
    refuse huge_short_$z huge_short "truncated: the header promises 2400000000 bytes of data, the file has 60"
    refuse truncated_$z  truncated  "truncated: the header promises 60 bytes of data, the file has 59"
    refuse extra_$z      extra      "unexpected data after the 5 bytes the header promises"
    refuse label_$z      label      "item 4: label 10 is outside 0..9"
    refuse count_$z      count      "4 labels, but"
    refuse missing_$z    missing    "no train-images-idx3-ubyte.gz or train-images-idx3-ubyte"
done
# a header promising 2.4 GB in a 60-byte file: the buffer grows with what is read, so
# this stays a clear exit 1 under a 1 GB address-space limit (it was an allocation of
# the promised size first: out of memory, an abort)
(ulimit -v 1000000; "$TRAINC" data fashion-mnist "$d/hs.out" --from "$d/huge_short_gz" 2>"$d/hs.stderr")
rc=$?
[ $rc -eq 1 ] && grep -q "promises 2400000000 bytes" "$d/hs.stderr" && ok "huge_short in 1 GB of address space: exit 1" ||
    bad "huge_short in 1 GB of address space: exit $rc, $(cat "$d/hs.stderr")"
refuse corrupt_gz corrupt_gz "train-images-idx3-ubyte.gz: cannot read:"
"$TRAINC" data fashion-mnist "$d/x.out" --from "$d/nowhere" 2>"$d/x.stderr"
[ $? -eq 1 ] && grep -q "no such folder" "$d/x.stderr" && ok "no source folder: exit 1" ||
    bad "no source folder: $(cat "$d/x.stderr")"

echo "data-fashion: $pass passed, $fail failed"
[ $fail -eq 0 ]
