#!/usr/bin/env python3
"""A/B of prefill builds or knobs measured in one device run (bench/device_run.sh's prefill
stage with PREFILL_VARIANTS / PREFILL_ALT_BINS, the default binary passed twice: first as
flashpage_<system>, last as the alternative named base2). For each shape it prints the
speed-up of each alternative against the mean of the two default passes (positive: the
alternative is faster), the two passes' spread (the run's noise) and the default's ratio to
PyTorch; then the median, min and max per alternative.

Usage: bench/prefill_ab.py RESULT.json ALT[,ALT...] [--system ragged] [--base2 base2]"""
import argparse
import collections
import json
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", help="the prefill JSON that prefill_compare.py wrote")
    ap.add_argument("alts", help="comma-separated alternative names (rows flashpage_<system>_<alt>)")
    ap.add_argument("--system", default="ragged", help="ragged, contiguous, paged16, paged1")
    ap.add_argument("--base2", default="base2", help="the second default pass's name")
    args = ap.parse_args()
    alts = [a for a in args.alts.split(",") if a]
    rows = json.load(open(args.result))["rows"]
    shapes = collections.defaultdict(dict)
    for r in rows:
        key = (f"{r['hq']}/{r['hkv']}/{r['d']}", r["batch"], r["qo_len"], r["kv_len"], r["causal"],
               r.get("mix", ""))
        shapes[key][r["system"]] = r["us"]
    base_name = f"flashpage_{args.system}"
    gains = collections.defaultdict(list)
    spreads = []
    for (heads, batch, qo, kv, causal, mix), us in shapes.items():
        b1, b2 = us.get(base_name), us.get(f"{base_name}_{args.base2}")
        if not b1 or not b2:
            continue
        base = (b1 + b2) / 2
        spread = abs(b1 / b2 - 1) * 100
        spreads.append(spread)
        shape = mix or f"{batch}x{qo}" + (f"+{kv - qo}" if kv != qo else "")
        line = f"{heads:10s} {shape:12s} {'causal' if causal else 'full  '} {base:9.1f} µs  spread {spread:4.1f}%"
        for alt in alts:
            x = us.get(f"{base_name}_{alt}")
            if x:
                gains[alt].append((base / x - 1) * 100)
                line += f"  {alt} {gains[alt][-1]:+5.1f}%"
        if us.get("torch_sdpa"):
            line += f"  default/PyTorch {us['torch_sdpa'] / base:.3f}"
        print(line)
    if not spreads:
        raise SystemExit(f"prefill_ab: no shape has both {base_name} and its {args.base2} pass")
    print(f"spread of the default passes: median {statistics.median(spreads):.1f}%, max {max(spreads):.1f}%")
    for alt in alts:
        g = gains[alt]
        if g:
            print(f"{alt}: median {statistics.median(g):+.1f}%, min {min(g):+.1f}%, max {max(g):+.1f}%"
                  f" over {len(g)} shapes")


if __name__ == "__main__":
    main()
