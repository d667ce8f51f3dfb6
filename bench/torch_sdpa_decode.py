#!/usr/bin/env python3
"""PyTorch SDPA decode on contiguous bf16 K/V, a few calls: the yardstick kernel, for ncu.

    ncu --kernel-name regex:flash ... python3 bench/torch_sdpa_decode.py --heads 32/8/128 --shape 64x4096

decode_compare.py times the same call; this only runs it, so a profiler can read the
hardware counters of PyTorch's kernels beside flashpage's (bench/NOTES.md compares them).
"""
import argparse

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--heads", default="32/8/128")
ap.add_argument("--shape", default="64x4096")
ap.add_argument("--reps", type=int, default=6)
args = ap.parse_args()
hq, hkv, d = (int(x) for x in args.heads.split("/"))
b, length = (int(x) for x in args.shape.split("x"))
k = torch.randn(b, hkv, length, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
for _ in range(args.reps):
    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
torch.cuda.synchronize()
