"""--sample's --repetition-penalty, --temperature, --top-k, --top-p and --min-p
(runtime/sampling.c) against transformers' processors: `sampling_check.py TEST_SAMPLING
DIR` writes cases (random logits, logits with ties at the k-th, one dominant id, a
vocabulary of 1, penalties on ids seen with positive and negative logits) into DIR, runs
tests/unit/test_sampling.c's binary on them and compares each case's distribution with
softmax(MinP(TopP(TopK(RepetitionPenaltyLogitsProcessor(logits) / temperature)))),
the penalty in float32 as transformers computes it, the rest in float64: the same ids
kept, probabilities within 1e-9. Exits 77 (skip) without transformers; the min_p cases
need transformers 4.39 or later (MinPLogitsWarper), and are skipped, said, without it."""
import os
import subprocess
import sys

import numpy as np

try:
    import torch
    from transformers.generation.logits_process import (RepetitionPenaltyLogitsProcessor, TopKLogitsWarper,
                                                        TopPLogitsWarper)
    try:
        from transformers.generation.logits_process import MinPLogitsWarper
    except ImportError:
        MinPLogitsWarper = None
except ImportError:
    print("skip: no transformers in this Python")
    sys.exit(77)


def reference(logits, top_k, top_p, temperature, penalty=1.0, seen=(), min_p=0.0):
    """what transformers' sample() draws from: the penalty in float32, the rest in float64"""
    s = torch.tensor(logits, dtype=torch.float32)[None]
    if penalty != 1.0:
        s = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([list(seen)]), s)
    s = s.double() / temperature
    if top_k > 0:
        s = TopKLogitsWarper(top_k)(None, s)
    if top_p < 1:
        s = TopPLogitsWarper(top_p)(None, s)
    if min_p > 0:
        s = MinPLogitsWarper(min_p)(None, s)
    return torch.softmax(s, -1)[0].numpy()


def cases():
    rng = np.random.default_rng(7)
    yield rng.normal(0, 2, 1000), 0, 1.0, 1.0            # the plain softmax
    yield rng.normal(0, 2, 1000), 0, 1.0, 0.7
    yield rng.normal(0, 2, 1000), 50, 1.0, 1.0
    yield rng.normal(0, 2, 1000), 1, 1.0, 1.0            # greedy
    yield rng.normal(0, 2, 1000), 0, 0.9, 1.0
    yield rng.normal(0, 2, 1000), 0, 0.5, 0.8
    yield rng.normal(0, 3, 2000), 40, 0.95, 0.7          # both, after the temperature
    yield rng.normal(0, 1, 300), 300, 0.999, 1.3         # k = V: no cut
    yield rng.normal(0, 1, 300), 500, 1.0, 1.0           # k > V
    ties = rng.integers(0, 6, 400).astype(np.float64)    # ties at the k-th: all kept
    yield ties, 10, 1.0, 1.0
    yield ties, 75, 1.0, 0.5
    one = rng.normal(0, 1, 200); one[17] = 40.0          # one id holds nearly all
    yield one, 0, 0.9, 1.0
    yield one, 5, 0.01, 1.0
    yield np.array([0.3]), 3, 0.5, 1.0                   # a vocabulary of 1
    yield rng.normal(0, 3, 128256), 50, 0.9, 0.8         # Llama 3's vocabulary
    yield rng.normal(0, 3, 128256), 0, 0.95, 0.8
    seen = [int(v) for v in rng.choice(1000, 60, replace=False)] + [5, 5]   # (a repeat)
    yield rng.normal(0, 2, 1000), 0, 1.0, 1.0, 1.3, seen    # logits of both signs
    yield rng.normal(0, 2, 1000), 40, 0.9, 0.7, 1.2, seen
    yield rng.normal(0, 2, 1000), 0, 1.0, 1.0, 0.8, seen    # below 1: repeats favoured
    if MinPLogitsWarper is None:
        print("skip min_p cases: this transformers has no MinPLogitsWarper (4.39 on)")
        return
    yield rng.normal(0, 2, 1000), 0, 1.0, 1.0, 1.0, [], 0.05
    yield rng.normal(0, 2, 1000), 0, 1.0, 0.7, 1.0, [], 0.3
    yield rng.normal(0, 3, 2000), 50, 0.95, 0.8, 1.1, seen, 0.1   # all of them
    yield one, 0, 1.0, 1.0, 1.0, [], 1.0                  # the most likely alone


def main():
    binary, d = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    want = []
    with open(f"{d}/cases.bin", "wb") as f:
        for logits, k, p, t, *rest in cases():
            penalty, seen, min_p = (rest + [1.0, [], 0.0][len(rest):])
            logits = logits.astype(np.float32)
            f.write(np.array([len(logits), k, len(seen)], np.int64).tobytes())
            f.write(np.array([p, t, penalty, min_p], np.float64).tobytes())
            f.write(logits.tobytes())
            f.write(np.array(seen, np.int32).tobytes())
            want.append((reference(logits, k, p, t, penalty, seen, min_p), k, p, t, (penalty, min_p)))
    r = subprocess.run([binary, f"{d}/cases.bin", f"{d}/probs.bin"], capture_output=True, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        print(f"FAIL test_sampling exited {r.returncode}: {r.stdout}")
        sys.exit(1)
    got = np.fromfile(f"{d}/probs.bin", np.float64)
    at, bad = 0, 0
    for i, (ref, k, p, t, r) in enumerate(want):
        mine = got[at:at + len(ref)]
        at += len(ref)
        kept, kept_ref = np.flatnonzero(mine), np.flatnonzero(ref)
        err = np.abs(mine - ref).max()
        if not np.array_equal(kept, kept_ref) or err > 1e-9:
            print(f"FAIL case {i} (V {len(ref)}, top_k {k}, top_p {p}, T {t}, penalty, min_p {r}): {len(kept)} ids kept "
                  f"against {len(kept_ref)}, worst difference {err:.2e}")
            bad = 1
        else:
            print(f"ok   case {i} (V {len(ref)}, top_k {k}, top_p {p}, T {t}, penalty, min_p {r}): {len(kept)} ids kept, "
                  f"within {err:.1e} of transformers; its draws at those probabilities")
    assert at == len(got), (at, len(got))
    sys.exit(bad)


main()
