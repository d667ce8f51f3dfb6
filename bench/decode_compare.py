#!/usr/bin/env python3
"""Compare flashpage paged decode with PyTorch and FlashInfer on the same shapes.

Reads the JSON lines of bench/decode_bench (one object per case), runs the same shapes in
this process with
  - torch_contiguous: torch.nn.functional.scaled_dot_product_attention on contiguous bf16
    K/V [B, Hkv, L, D] with enable_gqa=True (random lengths: padded to the longest row and
    masked),
  - torch_gather: page gather (k_pages[page_ids]) + the same SDPA, timed together,
  - flashinfer_cuda / flashinfer_tc: flashinfer.BatchDecodeWithPagedKVCacheWrapper with
    use_tensor_cores False / True (the import error is recorded when it fails),
timing each with CUDA events (median), and writes <date>-decode-<gpu>.md / .json / .png (<gpu>: h200, h100, ...) plus
decode_table.txt into --out (default bench/results).

TB/s counts the same useful bytes as decode_bench for every system: K+V of the real lengths
plus q and out, decimal; padding and gather traffic are not credited.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import traceback

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --render reads a written JSON and needs neither
    torch = F = None

import run_meta

ROTATE_BYTES = 200e6  # below this, K/V are replicated and used in turn (L2 is 60 MB)
MAX_POOLS = 8
WARMUP = 5
TARGET_MS = 100.0
MIN_REPS, MAX_REPS = 10, 300
FI_WORKSPACE_BYTES = 256 << 20
SEED = 1234


def time_fn(fn, n_pools):
    """Median microseconds of fn(i) over repetitions, i cycling over the pools."""
    for i in range(WARMUP):
        fn(i % n_pools)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn(0)
    e1.record()
    e1.synchronize()
    probe = max(e0.elapsed_time(e1), 1e-3)
    reps = int(min(MAX_REPS, max(MIN_REPS, TARGET_MS / probe)))
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    marks[0].record()
    for r in range(reps):
        fn(r % n_pools)
        marks[r + 1].record()
    torch.cuda.synchronize()
    us = sorted(marks[r].elapsed_time(marks[r + 1]) * 1e3 for r in range(reps))
    return statistics.median(us), reps


def case_lengths(row):
    if row.get("lengths"):
        return [int(x) for x in row["lengths"]]
    return [int(row["seq_len"])] * int(row["batch"])


def useful_bytes(lengths, hq, hkv, d):
    return sum(lengths) * hkv * d * 2 * 2 + 2 * len(lengths) * hq * d * 2


def n_pools_for(kv_bytes):
    return 1 if kv_bytes >= ROTATE_BYTES else min(MAX_POOLS, math.ceil(ROTATE_BYTES / kv_bytes))


def make_table(lengths, page_size, device, gen):
    pages_per_row = [(n + page_size - 1) // page_size for n in lengths]
    total = sum(pages_per_row)
    ids = torch.randperm(total, generator=gen).to(torch.int32)  # shuffled page ids
    indptr = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(torch.tensor(pages_per_row, dtype=torch.int32), 0)
    last = torch.tensor([n - (p - 1) * page_size for n, p in zip(lengths, pages_per_row)],
                        dtype=torch.int32)
    return indptr.to(device), ids.to(device), last.to(device), total, pages_per_row


def bench_torch_contiguous(lengths, hq, hkv, d, device):
    b, lmax = len(lengths), max(lengths)
    uniform = all(n == lmax for n in lengths)
    kv_bytes = b * lmax * hkv * d * 2 * 2
    pools = n_pools_for(kv_bytes)
    ks = [torch.randn(b, hkv, lmax, d, device=device, dtype=torch.bfloat16) for _ in range(pools)]
    vs = [torch.randn(b, hkv, lmax, d, device=device, dtype=torch.bfloat16) for _ in range(pools)]
    q = torch.randn(b, hq, 1, d, device=device, dtype=torch.bfloat16)
    mask = None
    if not uniform:
        pos = torch.arange(lmax, device=device)
        mask = (pos[None, :] < torch.tensor(lengths, device=device)[:, None])[:, None, None, :]

    def run(i):
        return F.scaled_dot_product_attention(q, ks[i], vs[i], attn_mask=mask, enable_gqa=True)

    us, reps = time_fn(run, pools)
    del ks, vs
    return us, reps, "" if uniform else "padded to the longest row + bool mask"


def bench_torch_gather(lengths, page_size, hq, hkv, d, device, gen):
    b, lmax = len(lengths), max(lengths)
    indptr, ids, last, total_pages, pages_per_row = make_table(lengths, page_size, device, gen)
    kv_bytes = sum(lengths) * hkv * d * 2 * 2
    pools = n_pools_for(kv_bytes)
    shape = (total_pages, page_size, hkv, d)
    kps = [torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(pools)]
    vps = [torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(pools)]
    # Page ids per row padded to the longest row (padding points at page 0, then masked).
    max_pages = max(pages_per_row)
    ids_cpu, indptr_cpu = ids.cpu(), indptr.cpu()
    table = torch.zeros(b, max_pages, dtype=torch.long)
    for r in range(b):
        row = ids_cpu[indptr_cpu[r]:indptr_cpu[r + 1]].long()
        table[r, :row.numel()] = row
    table = table.to(device)
    q = torch.randn(b, hq, 1, d, device=device, dtype=torch.bfloat16)
    uniform = all(n == lmax for n in lengths)
    mask = None
    if not uniform:
        pos = torch.arange(max_pages * page_size, device=device)
        mask = (pos[None, :] < torch.tensor(lengths, device=device)[:, None])[:, None, None, :]

    def run(i):
        k = kps[i][table].reshape(b, max_pages * page_size, hkv, d).transpose(1, 2)
        v = vps[i][table].reshape(b, max_pages * page_size, hkv, d).transpose(1, 2)
        if uniform and max_pages * page_size != lmax:
            k, v = k[:, :, :lmax], v[:, :, :lmax]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    us, reps = time_fn(run, pools)
    del kps, vps
    return us, reps


def bench_flashinfer(flashinfer, lengths, page_size, hq, hkv, d, device, gen, tensor_cores):
    indptr, ids, last, total_pages, _ = make_table(lengths, page_size, device, gen)
    kv_bytes = sum(lengths) * hkv * d * 2 * 2
    pools = n_pools_for(kv_bytes)
    shape = (total_pages, page_size, hkv, d)
    kps = [torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(pools)]
    vps = [torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(pools)]
    q = torch.randn(len(lengths), hq, d, device=device, dtype=torch.bfloat16)
    workspace = torch.empty(FI_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD",
                                                            use_tensor_cores=tensor_cores)
    try:
        wrapper.plan(indptr, ids, last, hq, hkv, d, page_size,
                     q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    except TypeError:  # older releases: one data_type
        wrapper.plan(indptr, ids, last, hq, hkv, d, page_size, data_type=torch.bfloat16)
    run_fn = getattr(wrapper, "run", None) or getattr(wrapper, "forward")

    def run(i):
        return run_fn(q, (kps[i], vps[i]))

    us, reps = time_fn(run, pools)
    del kps, vps, workspace
    return us, reps


def case_key(row):
    return (row["hq"], row["hkv"], row["d"], row["batch"], str(row["seq_len"]), row["page_size"])


def shape_label(row):
    return f"{row['hq']}/{row['hkv']}/{row['d']} B={row['batch']} L={row['seq_len']} p={row['page_size']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--render", metavar="JSON",
                    help="only rewrite the .md / .png (and decode_table.txt) of a JSON this "
                         "script wrote, with its own date, GPU and commit (no GPU needed)")
    ap.add_argument("--flashpage", action="append",
                    help="decode_bench JSON lines; the first file's shapes are also run on the "
                         "other systems, further files (e.g. FLASHPAGE_DECODE_KERNEL=split) add "
                         "their flashpage rows only")
    ap.add_argument("--no-gather", action="store_true", help="skip the torch_gather system")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--no-flashinfer", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.render:
        with open(args.render) as f:
            written = json.load(f)
        args.date = written["meta"]["date"]
        write_outputs(args, written["results"], written["meta"].get("flashinfer_error", ""),
                      meta=written["meta"])
        return
    if not args.flashpage:
        ap.error("--flashpage is required (or --render)")
    if torch is None:
        ap.error("measuring needs PyTorch (only --render runs without it)")
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(SEED)

    def read_rows(path):
        out = []
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    out.append(json.loads(line))
        return out

    rows = read_rows(args.flashpage[0])
    extra = {}  # case -> rows of the further flashpage files
    for path in args.flashpage[1:]:
        for r in read_rows(path):
            extra.setdefault(case_key(r), []).append(r)

    flashinfer, fi_error = None, ""
    if not args.no_flashinfer:
        try:
            import flashinfer  # noqa: F401
            flashinfer = sys.modules["flashinfer"]
        except Exception as e:  # recorded, not fatal
            fi_error = f"import flashinfer failed: {type(e).__name__}: {e}"
    else:
        fi_error = "skipped (--no-flashinfer)"

    results = []  # dicts: case keys + system, us, tb_s, error, note

    def add(row, system, us=None, reps=None, error="", note=""):
        lengths = case_lengths(row)
        b = useful_bytes(lengths, row["hq"], row["hkv"], row["d"])
        results.append({
            "hq": row["hq"], "hkv": row["hkv"], "d": row["d"], "batch": row["batch"],
            "seq_len": row["seq_len"], "page_size": row["page_size"], "system": system,
            "us": us, "tb_s": (b / (us * 1e-6) / 1e12) if us else None, "reps": reps,
            "error": error, "note": note})
        print(json.dumps(results[-1]), flush=True)

    contiguous_done = {}
    for row in rows:
        for other in extra.get(case_key(row), []):
            add(other, other.get("system", "flashpage_other"), us=other.get("us"),
                reps=other.get("reps"), error=other.get("error", ""))
        if "error" in row:
            add(row, row.get("system", "flashpage"), error=row["error"])
            continue
        add(row, row.get("system", "flashpage"), us=row["us"], reps=row.get("reps"))
        lengths = case_lengths(row)
        hq, hkv, d, p = row["hq"], row["hkv"], row["d"], row["page_size"]
        key = (hq, hkv, d, row["batch"], str(row["seq_len"]))
        try:
            if key not in contiguous_done:  # independent of the page size: once per shape
                contiguous_done[key] = bench_torch_contiguous(lengths, hq, hkv, d, device)
            us, reps, note = contiguous_done[key]
            add(row, "torch_contiguous", us, reps, note=note)
        except Exception as e:
            add(row, "torch_contiguous", error=f"{type(e).__name__}: {e}")
        torch.cuda.empty_cache()
        if not args.no_gather:
            try:
                us, reps = bench_torch_gather(lengths, p, hq, hkv, d, device, gen)
                add(row, "torch_gather", us, reps)
            except Exception as e:
                add(row, "torch_gather", error=f"{type(e).__name__}: {e}")
            torch.cuda.empty_cache()
        for tc in (False, True):
            system = "flashinfer_tc" if tc else "flashinfer_cuda"
            if flashinfer is None:
                add(row, system, error=fi_error)
                continue
            try:
                us, reps = bench_flashinfer(flashinfer, lengths, p, hq, hkv, d, device, gen, tc)
                add(row, system, us, reps)
            except Exception as e:
                add(row, system, error=f"{type(e).__name__}: {e}".splitlines()[0][:300])
            torch.cuda.empty_cache()

    write_outputs(args, results, fi_error)


def write_outputs(args, results, fi_error, meta=None):
    """meta: a written JSON's (--render: the .json is left as it is), else this run's."""
    rendering = meta is not None
    if not rendering:
        gpu = torch.cuda.get_device_name(0)
        meta = {"date": args.date, "gpu": gpu, "commit": run_meta.commit(),
                "torch": torch.__version__, "flashinfer_error": fi_error}
        try:
            import flashinfer as _fi
            meta["flashinfer"] = getattr(_fi, "__version__", "unknown")
        except Exception:
            pass
    gpu, commit = meta["gpu"], meta["commit"]
    base = os.path.join(args.out, f"{args.date}-decode-{run_meta.gpu_tag(gpu)}")
    if not rendering:
        with open(base + ".json", "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)

    # Ratio: throughput relative to torch_contiguous on the same shape (= its time / ours).
    ref = {}
    for r in results:
        if r["system"] == "torch_contiguous" and r["us"]:
            ref[(r["hq"], r["hkv"], r["d"], r["batch"], str(r["seq_len"]), r["page_size"])] = r["us"]
    lines = [f"# Paged decode, bf16 — {gpu}", "",
             f"date {args.date}, commit {commit}, torch {meta.get('torch', 'n/a')}, "
             f"flashinfer {meta.get('flashinfer', 'n/a')}", "",
             "TB/s = (K+V bytes of the real lengths + q + out) / median time, decimal. "
             "ratio = TB/s relative to torch_contiguous on the same shape.", ""]
    if fi_error:
        lines += [f"FlashInfer: {fi_error}", ""]
    lines += ["| shape (Hq/Hkv/D, B, L, page) | system | µs | TB/s | ratio |",
              "|---|---|---:|---:|---:|"]
    table_txt = []
    for r in results:
        k = (r["hq"], r["hkv"], r["d"], r["batch"], str(r["seq_len"]), r["page_size"])
        shape = f"{r['hq']}/{r['hkv']}/{r['d']}, {r['batch']}, {r['seq_len']}, {r['page_size']}"
        system = r["system"] + (f" ({r['note']})" if r.get("note") else "")
        if r["us"]:
            ratio = f"{ref[k] / r['us']:.2f}" if k in ref else "—"
            lines.append(f"| {shape} | {system} | {r['us']:.1f} | {r['tb_s']:.2f} | {ratio} |")
            table_txt.append(f"{shape:32s} {r['system']:18s} {r['us']:10.1f} us {r['tb_s']:6.2f} TB/s")
        else:
            err = (r["error"] or "").replace("|", "/")[:120]
            lines.append(f"| {shape} | {r['system']} | — | — | {err} |")
            table_txt.append(f"{shape:32s} {r['system']:18s} error: {err}")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "decode_table.txt"), "w") as f:
        f.write("\n".join(table_txt) + "\n")

    try:
        plot(base + ".png", results, gpu)
    except Exception:
        traceback.print_exc()
    print(f"wrote {base}.md / .png" + ("" if rendering else " / .json"), flush=True)


def plot(path, results, gpu):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = sorted({(r["hq"], r["hkv"], r["d"]) for r in results})
    if not heads:
        return
    fig, axes = plt.subplots(1, len(heads), figsize=(5.5 * len(heads), 4.5), squeeze=False)
    for ax, h in zip(axes[0], heads):
        sub = [r for r in results if (r["hq"], r["hkv"], r["d"]) == h and r["tb_s"]]
        shapes = []
        for r in sub:
            s = (r["batch"], str(r["seq_len"]))
            if s not in shapes:
                shapes.append(s)
        xs = {s: i for i, s in enumerate(shapes)}
        series = sorted({(r["system"], r["page_size"]) for r in sub})
        for system, page in series:
            pts = sorted((xs[(r["batch"], str(r["seq_len"]))], r["tb_s"]) for r in sub
                         if r["system"] == system and r["page_size"] == page)
            label = system if system == "torch_contiguous" else f"{system} p{page}"
            if system == "torch_contiguous" and page != min(p for s2, p in series if s2 == system):
                continue  # same numbers for every page size
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([f"B={b}\nL={l}" for b, l in shapes], fontsize=7)
        ax.set_title(f"Hq/Hkv/D = {h[0]}/{h[1]}/{h[2]}")
        ax.set_ylabel("TB/s")
        ax.set_xlabel("batch size, length")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Paged decode bf16 on {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
