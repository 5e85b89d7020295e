"""tests/gpu/pack.sh's data for tests/nvrtc_specs/llama_dpo.json: 256 pairs of random
texts (a prompt of 1-32 ids and two answers of 1-200), each half padded on the left to
256, y each answer token's id at the place that predicts it (-100 elsewhere), the
reference's log-probabilities random (about those of a random model over 8200 ids).

And t, orpo's sft target: each chosen half's next ids over prompt and answer; and label,
kto's (random 0 and 1), with ref_kto the reference's 5 lower (its KL estimate then
about 5, not 0).

    dpo_data.py DIR   writes DIR/{x,pos,y,ref,t,label,ref_kto}.npy"""
import os
import sys

import numpy as np

d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(7)
N, T, V = 256, 256, 8200
x, pos = np.zeros((N, 2 * T), np.int32), np.zeros((N, 2 * T), np.int32)
y = np.full((N, 2 * T), -100, np.int32)
sft = np.full((N, T), -100, np.int32)
for r in range(N):
    p = rng.integers(1, V, size=rng.integers(1, 33))
    for h in range(2):
        t = np.r_[p, rng.integers(1, V, size=rng.integers(1, 201))]
        P, at = T - len(t), h * T
        x[r, at + P:at + T] = t
        pos[r, at:at + T] = np.r_[np.arange(P), np.arange(len(t))]
        for k in range(len(p) - 1, len(t) - 1):
            y[r, at + P + k] = t[k + 1]
        if h == 0:
            sft[r, P:T - 1] = t[1:]
ref = (-9.0 * (y >= 0).reshape(N, 2, T).sum(2) + rng.normal(0, 5, (N, 2))).astype(np.float32)
label = rng.integers(0, 2, size=N).astype(np.int32)
for k, a in (("x", x), ("pos", pos), ("y", y), ("ref", ref), ("t", sft), ("label", label),
             ("ref_kto", ref - 5)):
    np.save(os.path.join(d, k + ".npy"), a)
