#!/usr/bin/env python3
"""PyTorch SDPA on contiguous bf16 tensors, a few calls: the yardstick kernel, for ncu.

    ncu --kernel-name regex:flash ... python3 bench/torch_sdpa_profile.py --heads 32/8/128 --shape 64x4096
    ncu ... python3 bench/torch_sdpa_profile.py --heads 32/32/128 --shape 1x8192 --queries 8192

Decode by default (one query per row); --queries S gives prefill with S queries per row over
the row's L keys (S = L: self-attention; --causal: PyTorch's top-left causal mask).
decode_compare.py and prefill_compare.py time the same calls; this only runs them, so a
profiler can read the hardware counters of PyTorch's kernels beside flashpage's
(bench/NOTES.md compares them).
"""
import argparse

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--heads", default="32/8/128")
ap.add_argument("--shape", default="64x4096", help="B x L (keys per row)")
ap.add_argument("--queries", type=int, default=1, help="queries per row (1: decode)")
ap.add_argument("--causal", action="store_true")
ap.add_argument("--reps", type=int, default=6)
args = ap.parse_args()
hq, hkv, d = (int(x) for x in args.heads.split("/"))
b, length = (int(x) for x in args.shape.split("x"))
k = torch.randn(b, hkv, length, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
q = torch.randn(b, hq, args.queries, d, device="cuda", dtype=torch.bfloat16)
for _ in range(args.reps):
    F.scaled_dot_product_attention(q, k, v, is_causal=args.causal, enable_gqa=hq != hkv)
torch.cuda.synchronize()
