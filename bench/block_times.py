#!/usr/bin/env python3
"""Reads the streamed decode kernel's per-block times and says how evenly the blocks ended.

decode_bench prints one {"block_times": ...} JSON line per case to stderr when run with
FLASHPAGE_DECODE_ABLATE=6 (bit 2: each block writes its SM, start and end, globaltimer ns;
bit 1: no merge; the results are wrong, timings only). Usage:
    grep block_times decode_bench.err > times.json; python3 bench/block_times.py times.json
Per case: when the blocks started and ended (µs from the first start), the mean time a block
sat idle before the last one ended (what an even split would win back), and the SMs that
finished more than 10% early (on the H200 of session 16: the same 24 SMs wherever the
stream is bandwidth-bound).
"""
import json
import statistics
import sys


def main(path):
    early_sets = []
    for line in open(path):
        case = json.loads(line)["block_times"]
        blocks = case["blocks"]  # [smid, start_ns_low32, end_ns_low32]
        # An uncut row's LSE may have overwritten a record (decode_bench.cpp): keep plausible
        # ones (an SM id, an end within a second of the start).
        kept = [b for b in blocks if b[0] < 1024 and 0 < (b[2] - b[1]) % 2**32 < 10**9]
        if len(kept) < len(blocks):
            print(f"  ({len(blocks) - len(kept)} of {len(blocks)} records dropped as overwritten)")
        blocks = kept
        t0 = min(b[1] for b in blocks)
        # The low 32 bits of the timer wrap every ~4.3 s: differences modulo 2^32.
        start = [((b[1] - t0) % 2**32) / 1000 for b in blocks]
        end = [((b[2] - t0) % 2**32) / 1000 for b in blocks]
        last = max(end)
        idle = sum(last - e for e in end) / len(end)
        early = sorted(b[0] for b, e in zip(blocks, end) if e < 0.9 * last)
        early_sets.append(frozenset(early))
        print(f"{case['hq']}/{case['hkv']}/{case['d']} {case['batch']}x{case['seq_len']} "
              f"page {case['page_size']}: {len(blocks)} blocks, last start {max(start):.1f} µs, "
              f"ends min {min(end):.1f} / median {statistics.median(end):.1f} / max {last:.1f} µs, "
              f"mean idle {idle:.1f} µs ({100 * idle / last:.1f}%), {len(early)} SMs >10% early")
    with_early = [e for e in early_sets if e]
    if with_early:
        common = frozenset.intersection(*with_early)
        print(f"SMs early in every case that has early SMs ({len(with_early)} of "
              f"{len(early_sets)}): {len(common)}: {sorted(common)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
