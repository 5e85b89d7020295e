#!/usr/bin/python3
"""st_check.py: reads a safetensors file by hand (json + numpy; the `safetensors`
package is not installed here) and prints, for each tensor in file order,

    NAME SHAPE DTYPE SUM          e.g.  1.weight [128, 784] F32 -3.14159274

with SUM the float64 sum of the values, printed with %.9g. With --json it prints one
JSON object {name: {"shape": [...], "dtype": "F32", "sum": x}} instead. The file is
checked as the reference loader checks it (header length, offsets inside the data and
consistent with dtype and shape, tensors tiling the data); a bad file exits 1 with a
message. Other tests import it: `load(path)` gives {name: numpy array} (BF16 widened to
float32), `save(path, {name: array})` writes F32/F64/F16 files, and `--torch` also
builds torch tensors from the data, as safetensors.torch.load_file would.

    /usr/bin/python3 tests/st_check.py FILE [--json] [--torch]
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.uint16,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
          "BOOL": np.bool_}
CODES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
         np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}


class BadFile(Exception):
    pass


def read(path):
    """[(name, dtype, shape, numpy array)] in file order, plus the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise BadFile("only %d bytes" % len(blob))
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise BadFile("header length %d exceeds the file size" % n)
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadFile("header is not JSON: %s" % e)
    if not isinstance(header, dict):
        raise BadFile("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    data = memoryview(blob)[8 + n:]
    out, spans = [], []
    for name, t in header.items():
        dt, shape, offs = t.get("dtype"), t.get("shape"), t.get("data_offsets")
        if dt not in DTYPES:
            raise BadFile("tensor %r: unknown dtype %r" % (name, dt))
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise BadFile("tensor %r: bad shape %r" % (name, shape))
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) for o in offs)):
            raise BadFile("tensor %r: bad data_offsets %r" % (name, offs))
        b, e = offs
        itemsize = np.dtype(DTYPES[dt]).itemsize
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= b <= e <= len(data) or e - b != numel * itemsize:
            raise BadFile("tensor %r: data_offsets [%d, %d] do not fit %s %s in %d bytes"
                          % (name, b, e, dt, shape, len(data)))
        a = np.frombuffer(data[b:e], dtype=np.dtype(DTYPES[dt]).newbyteorder("<"))
        if dt == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out.append((name, dt, shape, a.reshape(shape)))
        spans.append((b, e, name))
    at = 0
    for b, e, name in sorted(spans):
        if b != at:
            raise BadFile("tensor %r starts at %d, expected %d (gap or overlap)" % (name, b, at))
        at = e
    if at != len(data):
        raise BadFile("%d bytes of data belong to no tensor" % (len(data) - at))
    return out, meta


def load(path):
    """{name: numpy array}, in file order."""
    return {name: a for name, _, _, a in read(path)[0]}


def save(path, tensors):
    """Writes {name: array} (float32/float64/float16, int64 counts) as safetensors, in
    dict order."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.array(a, order="C")   # (ascontiguousarray would make a 0-d count 1-d)
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": CODES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1:
        print("usage: st_check.py FILE [--json] [--torch]", file=sys.stderr)
        return 2
    path = args[0]
    try:
        tensors, _ = read(path)
    except (BadFile, OSError) as e:
        print("st_check: %s: %s" % (path, e), file=sys.stderr)
        return 1
    if "--torch" in argv:
        import torch
        state = {name: torch.from_numpy(np.array(a)) for name, _, _, a in tensors}
        for name, _, shape, a in tensors:
            assert list(state[name].shape) == shape
            assert torch.equal(state[name], torch.from_numpy(np.array(a)))
    rows = [(name, shape, dt, float(np.sum(a, dtype=np.float64))) for name, dt, shape, a in tensors]
    if "--json" in argv:
        print(json.dumps({n: {"shape": s, "dtype": d, "sum": x} for n, s, d, x in rows}))
    else:
        for n, s, d, x in rows:
            print("%s [%s] %s %.9g" % (n, ", ".join(str(v) for v in s), d, x))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
