#!/usr/bin/env python3
"""PyTorch reference for runtime/attention.c: causal and full multi-head attention, and
the options of docs/spec.md's attention row (grouped-query attention, rope with and
without llama3 scaling, longrope's frequencies, a partial rope, qk_norm, a sliding
window, the scores' scale and soft-cap, the positions of packed rows), alone and
together; forward (each
query's log-sum-exp of its scores, and the output) and backward (d qkv, and with
qk_norm d q_norm.weight, d k_norm.weight), on fixed random inputs.

Writes FILE in the format test_attention --torch reads (per case: int64 B, T, d, H, KV,
causal, window, qk_norm, rope, orig, n_ext, packed; float64 theta, factor, low, high,
scale, softcap; float32 ext [n_ext] (the table the compiler works out for longrope and a
partial rope: hd/2 inverse frequencies, then hd/2 amplitudes); with packed, int32 pos
[B, T]; then float32 qkv, [qn, kn,] dy, lse, y, dqkv[, dqn, dkn]) and, given the test
binary, runs it:

    /usr/bin/python3 tests/attention_ref.py build/tests/attention_ref.bin \
        build/tests/test_attention

The attention is written out from SPEC.md, as GPT-2 and Hugging Face's Llama compute
it: q, k, v are the (H + 2 KV) hd columns of qkv in that order; qk_norm is an RMSNorm
(eps 1e-6) over each head's hd on q and k; rope rotates q and k (after qk_norm) as
LlamaRotaryEmbedding and apply_rotary_pos_emb do ("rotate half"; the llama3 scaling
as transformers' _compute_llama3_parameters, longrope's divisors as
Phi3LongRoPEScaledRotaryEmbedding's inv_freq, cos and sin times longrope's attention
factor on the rotated pairs; a partial rope of dims rd rotates the
pairs j, j + hd/2 for j < rd/2 at theta^(-2j/rd), SPEC's pairing); key/value heads are repeated as
repeat_kv does; softmax((q @ k^T) * scale + mask) @ v, scale 1 / sqrt(hd) unless the
case gives one, the scores soft-capped (cap tanh(s / cap), Gemma 2's) where a case gives a
cap, mask -inf above the diagonal and, with a window W, at keys W or more positions back
(without the causal mask, ahead as well).
Packed rows (PACKED): each batch row cut into sequences of random lengths, pos[b, t] the
token's position in its own; the mask also hides every key of another sequence (causal:
those before the query's, t - pos[b, t]; without the causal mask, those after its
sequence's end too) and rope turns q and k by pos, as transformers' flash-attention path
does with position_ids that restart at each sequence (DataCollatorWithFlattening).
"""
import math
import subprocess
import sys

import numpy as np
import torch

# B, T, d, H, KV, causal, window, qk_norm, rope: None or (theta, llama3 scaling, longrope's
# divisors {"longrope": [...], "amp": its attention factor}, a partial rope {"dims": rd}
# (with longrope's, or alone) or None) [, scale: the scores' factor, 1 / sqrt(hd) when
# None or absent[, softcap: None or a cap]]
LLAMA3 = lambda factor, orig: {"factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": orig}
CASES = [
    (2, 5, 8, 2, 2, 1, 0, 0, None),
    (3, 17, 16, 4, 4, 0, 0, 0, None),
    (2, 33, 12, 3, 3, 1, 0, 0, None),
    (2, 128, 128, 4, 4, 1, 0, 0, None),   # the character GPT's shape
    (1, 256, 64, 1, 1, 1, 0, 0, None),
    (1, 100, 96, 2, 2, 0, 0, 0, None),
    (2, 37, 32, 4, 2, 1, 0, 0, None),     # grouped-query attention
    (2, 37, 32, 4, 1, 0, 0, 0, None),     # one key/value head, no mask
    (2, 70, 16, 2, 2, 1, 9, 0, None),     # a window: whole blocks of keys skipped
    (2, 70, 16, 2, 2, 0, 9, 0, None),     # a window on both sides (ModernBERT's)
    (2, 100, 64, 8, 2, 0, 40, 1, (10000.0, None)),   # with GQA, qk_norm and rope
    (2, 33, 16, 2, 2, 0, 0, 1, None),     # qk_norm
    (2, 40, 32, 2, 2, 1, 0, 0, (10000.0, None)),
    (1, 50, 64, 4, 4, 1, 0, 0, (500000.0, LLAMA3(32.0, 16))),
    (2, 100, 64, 8, 2, 1, 40, 1, (10000.0, LLAMA3(8.0, 32))),   # all of them
    (2, 33, 16, 2, 2, 1, 0, 0, None, 0.7),                      # a scale alone
    (2, 60, 32, 4, 2, 1, 25, 1, (10000.0, None), 0.05),         # a scale with the rest
    (2, 40, 16, 2, 2, 1, 0, 0, None, 1.5, 2.0),                 # a soft-cap that bites
    (2, 70, 32, 4, 1, 1, 20, 0, (10000.0, None), None, 3.0),    # Gemma 2's options
    # longrope's divisors (Phi-3's 128k models), with its attention factor
    (2, 60, 32, 2, 1, 1, 0, 0, (10000.0, {"longrope": [1.0, 1.5, 2.5, 4.0, 7.0, 12.0, 20.0, 31.0],
                                         "amp": 1.19})),
    (1, 50, 64, 4, 2, 1, 15, 1, (500000.0, {"longrope": [1.0 + 0.25 * j for j in range(8)]})),
    # a partial rope (StableLM's quarter, Nemotron's half), alone and with longrope's
    (2, 45, 64, 4, 2, 1, 0, 0, (10000.0, {"dims": 4})),
    (2, 60, 32, 2, 1, 1, 20, 1, (10000.0, {"dims": 8})),
    # with longrope's attention factor on the rotated pairs alone (Phi-4-mini's)
    (1, 50, 64, 4, 4, 1, 0, 0, (10000.0, {"dims": 10, "longrope": [1.0, 2.0, 3.0, 5.0, 8.0],
                                         "amp": 1.3})),
]
# the same form, the rows packed (positions)
PACKED = [
    (2, 70, 16, 2, 2, 1, 0, 0, None),                            # the mask alone, no rope
    (2, 37, 32, 4, 2, 1, 0, 0, (10000.0, None)),                 # grouped heads and rope
    (1, 256, 64, 2, 1, 1, 0, 0, (500000.0, None)),               # many blocks of rows
    (2, 100, 64, 8, 2, 1, 40, 1, (10000.0, LLAMA3(8.0, 32))),   # with a window and qk_norm
    (2, 70, 32, 4, 1, 1, 20, 0, (10000.0, {"dims": 8}), None, 3.0),   # soft-cap, partial rope
    (3, 40, 32, 4, 4, 0, 0, 0, None),                            # no causal mask: each
    (2, 37, 32, 4, 2, 0, 0, 0, (10000.0, None)),                 # sequence sees itself whole
    (1, 256, 64, 2, 2, 0, 0, 0, None),                           # (many blocks of rows)
    (2, 70, 32, 4, 2, 0, 12, 0, (10000.0, None)),                # and a window on both sides
]


def packed_positions(B, T, g):
    """pos [B, T]: row 0 (and every even row) cut into sequences of 1 to T/3 tokens (a
    first one of one token), each token's position in its own; odd rows one sequence"""
    pos = torch.arange(T).repeat(B, 1)
    for b in range(0, B, 2):
        t, n = 0, 1
        while t < T:
            pos[b, t:t + n] = torch.arange(min(n, T - t))
            t += n
            n = int(torch.randint(1, max(2, T // 3), (1,), generator=g))
    return pos


def inv_freq(hd, theta, scaling):
    """LlamaRotaryEmbedding's float32 frequencies [hd/2], scaled as llama3's rope_scaling,
    or Phi3LongRoPEScaledRotaryEmbedding's with longrope's divisors; a partial rope's
    over its dims, 0 for the pairs past them."""
    if scaling is not None and "dims" in scaling:
        rest = {k: v for k, v in scaling.items() if k not in ("dims", "amp")}
        inv = inv_freq(scaling["dims"], theta, rest or None)
        return torch.cat((inv, torch.zeros(hd // 2 - inv.numel())))
    shape = torch.arange(0, hd, 2, dtype=torch.int64).float() / hd
    if scaling is not None and "amp" in scaling:
        scaling = {k: v for k, v in scaling.items() if k != "amp"}
    if scaling is not None and "longrope" in scaling:
        return 1.0 / (torch.tensor(scaling["longrope"], dtype=torch.float32) * theta ** shape)
    inv = 1.0 / (theta ** shape)
    if scaling is None:
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return torch.where(medium, smoothed, inv_l)


def rope_amp(hd, scaling):
    """Each pair's amplitude [hd/2]: longrope's attention factor ("amp") on the rotated
    pairs (all, or a partial rope's dims / 2), 1 elsewhere."""
    amp = torch.ones(hd // 2)
    if scaling is not None and "amp" in scaling:
        amp[:scaling.get("dims", hd) // 2] = scaling["amp"]
    return amp


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def attention(qkv, B, T, d, H, KV, causal, window, qn, kn, rope, scale, cap=None, pos=None):
    hd = d // H
    q, k, v = qkv.split([H * hd, KV * hd, KV * hd], dim=2)
    q = q.view(B, T, H, hd).transpose(1, 2)                                 # [B, H, T, hd]
    k, v = (t.view(B, T, KV, hd).transpose(1, 2) for t in (k, v))          # [B, KV, T, hd]
    if qn is not None:
        q, k = rms(q, qn), rms(k, kn)
    if rope is not None:
        at = torch.arange(T) if pos is None else pos[:, None, :]           # [T] or [B, 1, T]
        freqs = at.float()[..., None] * inv_freq(hd, *rope)
        emb = torch.cat((freqs, freqs), dim=-1)
        amp = rope_amp(hd, rope[1]).repeat(2)
        cos, sin = emb.cos() * amp, emb.sin() * amp
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))           # repeat_kv
    s = (q @ k.transpose(-2, -1)) * scale
    if cap:
        s = torch.tanh(s / cap) * cap
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    masked = torch.zeros(T, T, dtype=torch.bool)
    if causal:
        masked |= j > i
    if window:   # W or more positions back; without the causal mask, ahead too
        masked |= (j <= i - window) | ((j >= i + window) & (not causal))
    if pos is not None:   # keys of another sequence (causal: before the query's)  [B, 1, T, T]
        start = torch.arange(T) - pos                                       # [B, T]
        masked = masked | (start[:, None, :, None] != start[:, None, None, :])
    s = s.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                                        # [B, H, T]
    att = torch.softmax(s, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, d)
    return lse, y


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(1234)
    with open(out, "wb") as f:
        cases = [(c, 0) for c in CASES] + [(c, 1) for c in PACKED]
        for (B, T, d, H, KV, causal, window, qk_norm, rope, *given), packed in cases:
            hd = d // H
            scale = given[0] if given and given[0] else 1.0 / hd ** 0.5
            cap = given[1] if len(given) > 1 else None
            qkv = (torch.rand(B, T, (H + 2 * KV) * hd, generator=g) * 4 - 2).requires_grad_()
            qn = kn = None
            if qk_norm:
                qn = (torch.rand(hd, generator=g) + 0.5).requires_grad_()
                kn = (torch.rand(hd, generator=g) + 0.5).requires_grad_()
            dy = torch.rand(B, T, d, generator=g) * 2 - 1
            pos = packed_positions(B, T, g) if packed else None
            lse, y = attention(qkv, B, T, d, H, KV, causal, window, qn, kn, rope, scale, cap, pos)
            y.backward(dy)
            theta, sc = rope if rope else (0.0, None)
            ext = []
            if sc and ("longrope" in sc or "dims" in sc):   # the compiler's table
                ext, sc = inv_freq(hd, theta, sc).tolist() + rope_amp(hd, sc).tolist(), None
            f.write(np.array([B, T, d, H, KV, causal, window, qk_norm, rope is not None,
                              sc["original_max_position_embeddings"] if sc else 0, len(ext),
                              packed], dtype="<i8").tobytes())
            f.write(np.array([theta, sc["factor"] if sc else 0.0, sc["low_freq_factor"] if sc else 0.0,
                              sc["high_freq_factor"] if sc else 0.0, scale, cap or 0.0],
                             dtype="<f8").tobytes())
            f.write(np.array(ext, dtype="<f4").tobytes())
            if packed:
                f.write(pos.numpy().astype("<i4").tobytes())
            ts = [qkv] + ([qn, kn] if qk_norm else []) + [dy, lse, y, qkv.grad]
            ts += [qn.grad, kn.grad] if qk_norm else []
            for t in ts:
                f.write(t.detach().numpy().astype("<f4").tobytes())
    print(f"wrote {len(cases)} cases to {out} (torch {torch.__version__})")
    if len(sys.argv) > 2:
        sys.exit(subprocess.call([sys.argv[2], "--torch", out]))


if __name__ == "__main__":
    main()
