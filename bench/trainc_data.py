"""trainc's token batches for the PyTorch baselines (bench/gpu_gpt2_torch.py,
bench/gpu_llama_torch.py): llm.c shards read as trainc reads them (docs/spec.md's Data:
the windows at offsets 0, T, 2T, ... of each shard in sorted order, T + 1 tokens each),
in its order (runtime/data.c's epoch_order: a Fisher-Yates shuffle seeded from the seed
and the epoch, drawn from runtime/rng.c's xoshiro256** seeded by splitmix64), whole
batches (drop_last). tests/run_all.sh's parity/gpt2_recipe checks the order against
trainc's step for step."""
import glob
import sys

import torch

MASK = (1 << 64) - 1


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Xoshiro:
    """runtime/rng.c: xoshiro256** seeded by splitmix64"""
    def __init__(self, seed):
        self.s, x = [], seed
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & MASK
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            self.s.append(z ^ (z >> 31))

    def u64(self):
        s = self.s
        r = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return r

    def below(self, n):   # rt_rng_below: no modulo bias
        threshold = ((1 << 64) - n) % n
        while True:
            x = self.u64()
            if x >= threshold:
                return x % n


def epoch_order(n, seed, epoch):
    """runtime/data.c's epoch_order with shuffle"""
    order = list(range(n))
    r = Xoshiro(seed ^ ((0x9E3779B97F4A7C15 * (epoch + 1)) & MASK))
    for i in range(n - 1, 0, -1):
        j = r.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


class Windows:
    """The token windows of llm.c shards (uint16 or uint32) as trainc reads them"""
    def __init__(self, pattern, T):
        self.T, self.shards, self.starts = T, [], [0]
        for f in sorted(glob.glob(pattern)):
            raw = open(f, "rb").read()
            head = torch.frombuffer(bytearray(raw[:1024]), dtype=torch.int32)
            magic, n = int(head[0]), int(head[2])
            width = {20240520: 2, 20240801: 4}[magic]
            body = bytearray(raw[1024:1024 + n * width])
            toks = (torch.frombuffer(body, dtype=torch.int16).to(torch.int64) & 0xFFFF if width == 2
                    else torch.frombuffer(body, dtype=torch.int32).to(torch.int64))
            self.shards.append(toks)
            self.starts.append(self.starts[-1] + ((n - 1) // T if n > T else 0))
        self.n = self.starts[-1]
        if not self.n:
            sys.exit("trainc_data.py: no window of %d tokens in %s" % (T + 1, pattern))

    def window(self, w):
        s = max(i for i in range(len(self.shards)) if self.starts[i] <= w)
        o = (w - self.starts[s]) * self.T
        return self.shards[s][o:o + self.T + 1]


def batches(win, B, seed):
    """trainc's batches (shuffle, drop_last), epoch after epoch: (x, y) on the host"""
    epoch = 0
    while True:
        order = epoch_order(win.n, seed, epoch)
        for b in range(win.n // B):
            rows = torch.stack([win.window(w) for w in order[b * B:(b + 1) * B]])
            yield rows[:, :-1], rows[:, 1:]
        epoch += 1


def to_device(x, y, dev):
    """a batch pinned and copied without a wait (as a data loader's), or as it is"""
    if dev == "cuda":
        return x.pin_memory().to(dev, non_blocking=True), y.pin_memory().to(dev, non_blocking=True)
    return x, y
