"""The sample writers (runtime/image.c) read back: `image_check.py TEST_IMAGE DIR` runs
tests/unit/test_image.c's binary into DIR, then for each case of DIR/cases.txt:

- npy: the file is byte for byte what np.save writes for the array np.load reads from
  it, and that array is the batch the case names (values i*0.5 - 3 for the npy cases);
- png: the file parsed here chunk by chunk (signature, IHDR, one IDAT, IEND; every
  CRC-32; the zlib header, the stored blocks' LEN/NLEN/BFINAL, the Adler-32; filter
  byte 0 on every row) and decoded by PIL when it is installed (Debian's python3-pil):
  both give the pixels of a NumPy make_grid + save_image (below, written from
  torchvision/utils.py) of the case's .npy, gray for C 1 and RGB for C 3.
Exit 0, or 1 naming the case and what differs."""
import io
import struct
import subprocess
import sys
import zlib

import numpy as np

try:
    from PIL import Image
except ImportError:
    Image = None


def make_grid_saved(x, nrow):
    """The uint8 [3, h, w] save_image(make_grid(x, nrow, padding=2, normalize=True,
    pad_value=0)) saves, x a float32 [n, C, H, W] batch: C 1 is copied to 3 channels;
    (x - lo) / max(hi - lo, 1e-5) in float32 with lo, hi the batch's min and max; the
    grid; then * 255, + 0.5, clamped to [0, 255] and truncated (NaN: 0, as torch's
    conversion gives)."""
    if x.shape[1] == 1:
        x = np.concatenate([x, x, x], axis=1)
    lo, hi = float(x.min()), float(x.max())
    d = max(hi - lo, 1e-5)
    with np.errstate(invalid="ignore"):
        v = (x - np.float32(lo)) / np.float32(d)
    n, C, H, W = x.shape
    if n == 1:
        grid = v[0]
    else:
        pad = 2
        ncol = min(nrow, n)
        rows = -(-n // ncol)
        grid = np.zeros((C, rows * (H + pad) + pad, ncol * (W + pad) + pad), np.float32)
        for k in range(n):
            top, left = (k // ncol) * (H + pad) + pad, (k % ncol) * (W + pad) + pad
            grid[:, top:top + H, left:left + W] = v[k]
    with np.errstate(invalid="ignore"):
        p = grid * np.float32(255)
        p = p + np.float32(0.5)
        p = np.clip(p, np.float32(0), np.float32(255))
    assert p.dtype == np.float32
    return np.where(np.isnan(p), np.float32(0), p).astype(np.uint8)


def chunks(data):
    """The PNG's chunks as (type, body), each CRC checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "signature"
    at, out = 8, []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + body), f"{kind} CRC {crc:08x}"
        out.append((kind.decode(), body))
        at += 12 + length
    assert at == len(data), "bytes after the last chunk"
    return out


def stored_blocks(z):
    """The bytes of a zlib stream of stored blocks, every field checked."""
    assert z[:2] == b"\x78\x01" and (z[0] * 256 + z[1]) % 31 == 0, f"zlib header {z[:2]!r}"
    at, out = 2, bytearray()
    while True:
        head = z[at]
        assert head & 0xFE == 0, f"block header {head:#x} at {at}: not a stored block"
        length, nlength = struct.unpack("<HH", z[at + 1:at + 5])
        assert nlength == length ^ 0xFFFF, f"NLEN {nlength:#x} for LEN {length:#x}"
        out += z[at + 5:at + 5 + length]
        at += 5 + length
        if head & 1:
            break
        assert length == 65535, f"a block of {length} bytes before the last"
    (adler,) = struct.unpack(">I", z[at:at + 4])
    assert adler == zlib.adler32(bytes(out)), f"Adler-32 {adler:08x}"
    assert at + 4 == len(z), "bytes after the Adler-32"
    assert bytes(out) == zlib.decompress(z)
    return bytes(out)


def decode_png(data):
    """The pixels [h, w] (gray) or [h, w, 3] (RGB) of the PNG, parsed here."""
    cs = chunks(data)
    assert [k for k, _ in cs] == ["IHDR", "IDAT", "IEND"], [k for k, _ in cs]
    w, h, depth, ctype, comp, filt, inter = struct.unpack(">IIBBBBB", cs[0][1])
    assert (depth, comp, filt, inter) == (8, 0, 0, 0) and ctype in (0, 2), cs[0][1]
    ch = 1 if ctype == 0 else 3
    raw = np.frombuffer(stored_blocks(cs[1][1]), np.uint8)
    assert raw.size == h * (1 + w * ch), f"{raw.size} bytes for {w}x{h}x{ch}"
    rows = raw.reshape(h, 1 + w * ch)
    assert not rows[:, 0].any(), "a row's filter byte is not 0"
    px = rows[:, 1:].reshape(h, w, ch)
    return px[:, :, 0] if ch == 1 else px


def check_png(d, name, n, C, H, W, nrow):
    x = np.load(f"{d}/{name}.npy")
    assert x.dtype == np.float32 and x.shape == (n, C, H, W), (x.dtype, x.shape)
    want = make_grid_saved(x, nrow)
    if C == 1:   # make_grid's 3-channel copy of a gray batch: a gray PNG holds it
        assert (want[0] == want[1]).all() and (want[1] == want[2]).all()
        want = want[0]
    else:
        want = want.transpose(1, 2, 0)
    data = open(f"{d}/{name}.png", "rb").read()
    got = decode_png(data)
    assert got.shape == want.shape, f"{got.shape}, make_grid's {want.shape}"
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} pixels differ, first at {tuple(bad[0])}: " \
        f"{got[tuple(bad[0])]}, make_grid's {want[tuple(bad[0])]}"
    if Image is not None:
        im = Image.open(io.BytesIO(data))
        assert im.mode == ("L" if C == 1 else "RGB"), im.mode
        assert np.array_equal(np.asarray(im), want), "PIL reads other pixels"
    return want


def check_npy(d, name, n, rank, shape):
    data = open(f"{d}/{name}.npy", "rb").read()
    a = np.load(io.BytesIO(data))
    want = (np.arange(n * int(np.prod(shape)), dtype=np.float32) * np.float32(0.5) - 3)
    assert a.dtype == np.float32 and a.shape == (n, *shape), (a.dtype, a.shape)
    assert np.array_equal(a, want.reshape(n, *shape)), "other values"
    b = io.BytesIO()
    np.save(b, a)
    assert data == b.getvalue(), f"np.save writes {b.getvalue()[:128]!r}, not {data[:128]!r}"


def main():
    binary, d = sys.argv[1], sys.argv[2]
    subprocess.run(["mkdir", "-p", d], check=True)
    subprocess.run([binary, d], check=True)
    failed, lines = 0, open(f"{d}/cases.txt").read().split("\n")[:-1]
    for line in lines:
        kind, name, *num = line.split()
        num = [int(v) for v in num]
        try:
            if kind == "png":
                want = check_png(d, name, *num)
                print(f"ok   {name}: {want.shape} pixels as make_grid + save_image")
            else:
                check_npy(d, name, num[0], num[1], num[2:])
                print(f"ok   {name}: np.save's bytes")
        except AssertionError as e:
            failed += 1
            print(f"FAIL {name}: {e}")
    # what the cases must reach, so that a case list cut short fails too
    names = {line.split()[1] for line in lines}
    for need in ("gray", "rgb", "const", "one", "block2", "block_plus1", "big", "white", "nan",
                 "npy_scalar"):
        if need not in names:
            failed += 1
            print(f"FAIL {need}: not among the cases written")
    if Image is None:
        print("skip the PNGs through PIL (no python3-pil); parsed here only")
    print(f"{len(lines)} cases, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
