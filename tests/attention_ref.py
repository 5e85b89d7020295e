#!/usr/bin/env python3
"""PyTorch reference for runtime/attention.c: causal and full multi-head attention,
forward (each query's log-sum-exp of its scores, and the output) and backward
(d qkv), on fixed random inputs.

Writes FILE in the format test_attention --torch reads (per case: int64 B, T, d, H,
causal; then float32 qkv, dy, lse, y, dqkv) and, given the test binary, runs it:

    /usr/bin/python3 tests/attention_ref.py build/tests/attention_ref.bin \
        build/tests/test_attention

The attention is written out as GPT-2 (and F.scaled_dot_product_attention) computes
it: softmax((q @ k^T) * scale + mask) @ v, mask -inf above the diagonal.
"""
import subprocess
import sys

import numpy as np
import torch

CASES = [  # B, T, d, H, causal
    (2, 5, 8, 2, 1),
    (3, 17, 16, 4, 0),
    (2, 33, 12, 3, 1),
    (2, 128, 128, 4, 1),   # the character GPT's shape
    (1, 256, 64, 1, 1),
    (1, 100, 96, 2, 0),
]


def attention(qkv, B, T, d, H, causal):
    hd = d // H
    q, k, v = qkv.split(d, dim=2)
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))   # [B, H, T, hd]
    s = (q @ k.transpose(-2, -1)) * (1.0 / hd ** 0.5)
    if causal:
        mask = torch.full((T, T), float("-inf")).triu(1)
        s = s + mask
    lse = torch.logsumexp(s, dim=-1)                                        # [B, H, T]
    att = torch.softmax(s, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, d)
    return lse, y


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(1234)
    with open(out, "wb") as f:
        for B, T, d, H, causal in CASES:
            qkv = (torch.rand(B, T, 3 * d, generator=g) * 4 - 2).requires_grad_()
            dy = torch.rand(B, T, d, generator=g) * 2 - 1
            lse, y = attention(qkv, B, T, d, H, causal)
            y.backward(dy)
            f.write(np.array([B, T, d, H, causal], dtype="<i8").tobytes())
            for t in (qkv, dy, lse, y, qkv.grad):
                f.write(t.detach().numpy().astype("<f4").tobytes())
    print(f"wrote {len(CASES)} cases to {out} (torch {torch.__version__})")
    if len(sys.argv) > 2:
        sys.exit(subprocess.call([sys.argv[2], "--torch", out]))


if __name__ == "__main__":
    main()
