#!/usr/bin/env python3
"""Prefill side by side on one GPU, in one run: flashpage (from prefill_bench's JSON lines)
against PyTorch's scaled_dot_product_attention on contiguous bf16 tensors (its own choice of
backend; enable_gqa for GQA; bottom-right causal for S < L through an explicit bool mask),
FlashInfer's batch prefill wrappers (fa2 and fa3 backends, ragged K/V and shuffled pages of
16 tokens, NHD; its causal mask is bottom-right like flashpage's), plus a bf16 8192^3 matrix
product as the tensor-core ceiling. Writes <date>-prefill-<gpu>.md, .json and .png (<gpu>: h200, h100, ...) under
--out, and prefill_table.txt."""
import argparse
import datetime
import json
import os

import run_meta

FI_WORKSPACE_BYTES = 256 << 20
WARM_S = 0.1  # warm-up per timed case; prefill_bench's default --min-ms is 100 too
FI_PAGE = 16
# system -> (backend, page size; 0 = ragged K/V)
FI_SYSTEMS = {"flashinfer_fa2_ragged": ("fa2", 0), "flashinfer_fa3_ragged": ("fa3", 0),
              "flashinfer_fa2_paged16": ("fa2", FI_PAGE), "flashinfer_fa3_paged16": ("fa3", FI_PAGE)}


def median_us(fn, reps):
    """Median µs per call, timed like prefill_bench (bench_util.h, time_calls): calls queued
    back to back with an event after each, one synchronisation at the end, so the host's
    dispatch overlaps the previous call and is not counted (a synchronisation per call would
    add it to every figure)."""
    import time
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    # Warm up for ~100 ms of calls, as prefill_bench does (the GPU at its sustained clocks).
    start = time.perf_counter()
    while time.perf_counter() - start < WARM_S:
        for _ in range(8):
            fn()
        torch.cuda.synchronize()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    marks[0].record()
    for r in range(reps):
        fn()
        marks[r + 1].record()
    torch.cuda.synchronize()
    times = sorted(marks[r].elapsed_time(marks[r + 1]) * 1e3 for r in range(reps))
    return times[len(times) // 2]


def torch_sdpa_us(c):
    import torch
    import torch.nn.functional as F
    dev = "cuda"
    q = torch.randn(c["batch"], c["hq"], c["qo_len"], c["d"], device=dev, dtype=torch.bfloat16)
    k = torch.randn(c["batch"], c["hkv"], c["kv_len"], c["d"], device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    gqa = c["hq"] != c["hkv"]
    mask, causal = None, c["causal"]
    if causal and c["qo_len"] != c["kv_len"]:  # SDPA's is_causal is top-left
        i = torch.arange(c["qo_len"], device=dev)[:, None]
        j = torch.arange(c["kv_len"], device=dev)[None, :]
        mask, causal = j <= i + c["kv_len"] - c["qo_len"], False
    fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
    flops = c["flops"]
    reps = max(10, min(200, int(0.2 / max(flops / 400e12, 1e-6))))
    return median_us(fn, reps)


def flashinfer_us(fi, c, backend, page):
    """One FlashInfer case: plan once (it JIT-loads the module there), then time run() alone,
    with the same warm-up, median and repetition count as the torch rows."""
    import torch
    dev, bf16 = "cuda", torch.bfloat16
    b, s, l, hq, hkv, d = c["batch"], c["qo_len"], c["kv_len"], c["hq"], c["hkv"], c["d"]
    q = torch.randn(b * s, hq, d, device=dev, dtype=bf16)
    qo_indptr = torch.arange(b + 1, dtype=torch.int32, device=dev) * s
    ws = torch.empty(FI_WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    if page == 0:
        k = torch.randn(b * l, hkv, d, device=dev, dtype=bf16)
        v = torch.randn_like(k)
        kv_indptr = torch.arange(b + 1, dtype=torch.int32, device=dev) * l
        w = fi.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
        w.plan(qo_indptr, kv_indptr, hq, hkv, d, causal=c["causal"], q_data_type=bf16, kv_data_type=bf16)
        fn = lambda: w.run(q, k, v)
    else:
        # Shuffled page ids as in prefill_bench (a different permutation of the same kind).
        per_row = (l + page - 1) // page
        ids = torch.randperm(b * per_row, generator=torch.Generator().manual_seed(99)).to(dev, torch.int32)
        indptr = torch.arange(b + 1, dtype=torch.int32, device=dev) * per_row
        last = torch.full((b,), l - (per_row - 1) * page, dtype=torch.int32, device=dev)
        # Two separate [pages, page, Hkv, D] tensors, as flashpage's k_pages/v_pages.
        kp = torch.randn(b * per_row, page, hkv, d, device=dev, dtype=bf16)
        vp = torch.randn_like(kp)
        w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
        w.plan(qo_indptr, indptr, ids, last, hq, hkv, d, page, causal=c["causal"],
               q_data_type=bf16, kv_data_type=bf16)
        fn = lambda: w.run(q, (kp, vp))
    reps = max(10, min(200, int(0.2 / max(c["flops"] / 400e12, 1e-6))))
    return median_us(fn, reps)


def matmul_tflops():
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    us = median_us(lambda: a @ b, 20)
    return 2 * 8192 ** 3 / (us * 1e-6) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flashpage", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--no-flashinfer", action="store_true", help="skip the FlashInfer rows")
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(args.flashpage) if l.strip().startswith("{")]
    # A mixed case (prefill_bench --mixed) has rows of several lengths: its own key, no yardstick.
    key = lambda r: (r["hq"], r["hkv"], r["d"], r["batch"], r["qo_len"], r["kv_len"], r["causal"],
                     r.get("mix", ""))
    torch_rows, error = {}, ""
    try:
        import torch
        gpu = torch.cuda.get_device_name(0)
        ceiling = matmul_tflops()
        for r in rows:
            if key(r) in torch_rows or "flops" not in r or "mix" in r:
                continue
            try:
                us = torch_sdpa_us(r)
                torch_rows[key(r)] = dict(r, system="torch_sdpa", page_size=0, us=us,
                                          tflops=r["flops"] / (us * 1e-6) / 1e12)
            except Exception as e:  # noqa: BLE001 - recorded in the results
                torch_rows[key(r)] = dict(r, system="torch_sdpa", error=repr(e)[:200])
            torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001
        gpu, ceiling, error = "unknown", float("nan"), repr(e)[:300]
    fi_rows, fi_error, fi_version = run_flashinfer(args, rows, key)
    commit = run_meta.commit()
    allrows = rows + list(torch_rows.values()) + fi_rows
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"{args.date}-prefill-{run_meta.gpu_tag(gpu)}")
    json.dump({"date": args.date, "gpu": gpu, "commit": commit, "matmul_bf16_8192_tflops": ceiling,
               "torch_error": error, "flashinfer": fi_version, "flashinfer_error": fi_error,
               "rows": allrows}, open(base + ".json", "w"), indent=1)
    fi_note = (f"FlashInfer: {fi_error}." if fi_error else
               f"FlashInfer {fi_version}: fa2/fa3 batch prefill wrappers, ragged and paged16 (NHD, shuffled pages).")
    lines = [f"# Prefill on {gpu}, {args.date}, commit {commit}", "",
             f"bf16. Ceiling: an 8192^3 bf16 matrix product ran at {ceiling:.0f} TFLOP/s in the same run. "
             "TFLOP/s = 4*B*Hq*D*(unmasked query-key pairs)/median time; causal is bottom-right "
             "(S = L: the same as top-left). " + fi_note, "",
             "| Hq/Hkv/D | B | S | L | causal | system | page | µs | TFLOP/s | vs torch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(allrows, key=lambda r: (key(r), r["system"], r.get("page_size", 0))):
        t = torch_rows.get(key(r), {})
        ratio = (r["tflops"] / t["tflops"]) if "tflops" in r and "tflops" in t else float("nan")
        # Mixed rows: S and L name the rows' lengths (S = L each) instead of one length.
        s_l = f"mixed {r['mix']} | =S" if "mix" in r else f"{r['qo_len']} | {r['kv_len']}"
        head = f"| {r['hq']}/{r['hkv']}/{r['d']} | {r['batch']} | {s_l} | {r['causal']} | {r['system']} | {r.get('page_size', '')} |"
        if "error" in r:
            lines.append(f"{head} error: {r['error'][:80]} | | |")
        else:
            lines.append(f"{head} {r['us']:.1f} | {r['tflops']:.1f} | {ratio:.2f} |")
    open(base + ".md", "w").write("\n".join(lines) + "\n")
    open(os.path.join(args.out, "prefill_table.txt"), "w").write("\n".join(lines[6:]) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels = sorted({key(r) for r in allrows if "tflops" in r})
        systems = sorted({r["system"] for r in allrows if "tflops" in r})
        fig, ax = plt.subplots(figsize=(max(8, len(labels) * 0.5), 5))
        width = 0.8 / max(len(systems), 1)
        for si, s in enumerate(systems):
            vals = [next((r["tflops"] for r in allrows if key(r) == k and r["system"] == s and "tflops" in r), 0) for k in labels]
            ax.bar([i + si * width for i in range(len(labels))], vals, width, label=s)
        ax.set_xticks([i + 0.4 for i in range(len(labels))])
        ax.set_xticklabels([f"{k[0]}/{k[1]}/{k[2]} {k[7] if k[7] else str(k[3]) + 'x' + str(k[4])}"
                            f"{'+' + str(k[5] - k[4]) if k[5] != k[4] and not k[7] else ''}{' c' if k[6] else ''}"
                            for k in labels], rotation=90, fontsize=6)
        ax.set_ylabel("TFLOP/s")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(base + ".png", dpi=120)
    except Exception as e:  # noqa: BLE001
        print("plot failed:", e)
    print("\n".join(lines))


def run_flashinfer(args, rows, key):
    """FlashInfer rows for every shape flashpage ran; each case's error is recorded in its row
    so that one failing backend or head size does not stop the others."""
    if args.no_flashinfer:
        return [], "skipped (--no-flashinfer)", ""
    try:
        import torch
        import flashinfer
    except Exception as e:  # noqa: BLE001 - recorded in the results
        return [], f"import flashinfer failed: {e!r}"[:300], ""
    version = getattr(flashinfer, "__version__", "unknown")
    out, seen = [], set()
    for r in rows:
        if key(r) in seen or "flops" not in r or "mix" in r:
            continue
        seen.add(key(r))
        base = {f: r[f] for f in ("hq", "hkv", "d", "batch", "qo_len", "kv_len", "causal", "flops")}
        for system, (backend, page) in FI_SYSTEMS.items():
            row = dict(base, system=system, page_size=page)
            try:
                us = flashinfer_us(flashinfer, r, backend, page)
                row.update(us=us, tflops=r["flops"] / (us * 1e-6) / 1e12)
            except Exception as e:  # noqa: BLE001 - recorded in the results
                row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            out.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    return out, "", version


if __name__ == "__main__":
    main()
