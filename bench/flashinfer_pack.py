#!/usr/bin/env python3
"""Makes .whl/flashinfer-0.7.4-sm90a.tar.xz, the FlashInfer that bench/flashinfer_env.sh
unpacks on the lent H200: flashinfer-python 0.7.4 cut down to what the paged decode and the
batch prefill wrappers (fa2/fa3, bf16) import and include, with those modules prebuilt for
sm_90a under flashinfer/data/aot/<name>/<name>.so (flashinfer loads a module from there
before it looks at its JIT cache, so the H200 compiles nothing). The full wheel is 101 MB
(716 MB unpacked); the device run carries at most 64 MiB in all.

Run it on the build machine (nvcc 13.0 as on the H200) with a Python 3.12 that has torch 2.11
and apache-tvm-ffi 0.1.15.post2 (the tvm-ffi wheel in .whl/ must be the same version: the
modules are compiled against its headers), e.g.
  pip download --no-deps -d /tmp/fi flashinfer-python==0.7.4
  pip download --no-deps --python-version 3.12 --only-binary=:all: -d .whl apache-tvm-ffi==0.1.15.post2
  python3.12 -m venv /tmp/fienv && /tmp/fienv/bin/pip install torch==2.11.0 apache-tvm-ffi==0.1.15.post2 \
      numpy packaging requests tqdm tabulate einops click nvidia-ml-py ninja cuda-bindings
  nice -n 19 /tmp/fienv/bin/python bench/flashinfer_pack.py build   # 22-45 min on 2 cores
  /tmp/fienv/bin/python bench/flashinfer_pack.py pack
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

VERSION = "0.7.4"
# kind:head_dim. decode = CUDA-core paged decode; fa2 = the FA2 batch prefill module (also
# the tensor-core decode path); fa3 = the sm90 batch prefill module. Mask mode (causal or
# not), GQA group, page size and paged/ragged are runtime choices inside each module.
MODULES = ["decode:128", "fa2:128", "fa3:128", "decode:256", "fa2:256", "fa2:64", "fa3:256", "fa3:64"]
# Python subpackages that none of those paths reach (MoE, GEMM, comm, experimental kernels);
# files of theirs that `import flashinfer` itself loads are kept all the same.
DROP_DIRS = {"experimental", "fused_moe", "moe_ep", "comm", "gdn_kernels", "kda_kernels", "prims_ts",
             "diffusion_ops", "mamba", "topk_varlen", "batch_invariant", "sdsa", "testing",
             "trace_apply", "parallel_attention", "logits_processor"}
CSRC_KEEP_PREFIXES = ("batch_decode.", "batch_decode_customize", "batch_decode_jit", "batch_decode_kernel",
                      "batch_prefill")


def setup_env(args):
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(args.workspace)
    os.environ.setdefault("MAX_JOBS", "1")
    if not (args.tree / "flashinfer").is_dir():
        args.tree.mkdir(parents=True, exist_ok=True)
        zipfile.ZipFile(args.wheel).extractall(args.tree)
    sys.path.insert(0, str(args.tree))


def spec_for(item):
    import torch
    from flashinfer.jit.attention.modules import (
        _gen_batch_prefill_primary_module, gen_batch_decode_module, gen_batch_prefill_module)
    kind, hd = item.split(":")
    hd, bf, i32 = int(hd), torch.bfloat16, torch.int32
    if kind == "decode":
        return gen_batch_decode_module(bf, bf, bf, i32, hd, hd, 0, False, False)
    # The wrappers' fa2 path loads the equal-K/V-stride "primary" module.
    if kind == "fa2":
        return _gen_batch_prefill_primary_module("fa2", bf, bf, bf, i32, hd, hd, 0, False, False, False, False)
    return gen_batch_prefill_module("fa3", bf, bf, bf, i32, hd, hd, 0, False, False, False, False)


def build(args):
    import time
    setup_env(args)
    for item in args.modules or MODULES:
        spec = spec_for(item)
        t = time.time()
        spec.build(verbose=False)
        print(f"built {item} {spec.name} in {time.time() - t:.0f} s, "
              f"{spec.jit_library_path.stat().st_size} bytes", flush=True)


def pack(args):
    setup_env(args)
    tree = args.tree
    pkg = tree / "flashinfer"
    # What `import flashinfer` loads (in a fresh process, so nothing else is counted).
    probe = ("import sys, os, flashinfer\n"
             "for m in list(sys.modules.values()):\n"
             "    f = getattr(m, '__file__', None)\n"
             f"    if f and f.startswith({str(tree) + '/'!r}): print(os.path.relpath(f, {str(tree)!r}))\n")
    imported = set(subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(tree))).stdout.split())
    files = set()
    for f in pkg.rglob("*.py"):
        rel = f.relative_to(tree).as_posix()
        parts = rel.split("/")
        if parts[1] == "data":
            continue
        top = parts[1] if len(parts) > 2 else ""
        dropped = top in DROP_DIRS or (top.startswith("cake_") and top.endswith("_backend"))
        if rel in imported or not dropped:
            files.add(rel)
    for rel in list(files):  # the __init__.py of every package on the way
        d = pathlib.PurePosixPath(rel).parent
        while d.as_posix() != "flashinfer":
            if (tree / d / "__init__.py").exists():
                files.add((d / "__init__.py").as_posix())
            d = d.parent
    files.add("flashinfer/py.typed")
    data = pkg / "data"
    # Headers for a JIT fallback of these modules: flashinfer's own include/ and csrc headers
    # whole, CUTLASS/CCCL/spdlog only where the builds' dependency lists reached.
    for f in (data / "include").rglob("*"):
        if f.is_file():
            files.add(f.relative_to(tree).as_posix())
    for f in (data / "csrc").iterdir():
        if f.is_file() and (f.suffix in (".h", ".cuh", ".hpp") or f.name.startswith(CSRC_KEEP_PREFIXES)):
            files.add(f.relative_to(tree).as_posix())
    from flashinfer.jit import env as jit_env
    cached = jit_env.FLASHINFER_JIT_DIR
    aot = []
    for item in MODULES:
        spec = spec_for(item)
        so = spec.jit_library_path
        if not so.exists():
            print(f"not built, left to JIT on the device: {item} {spec.name}")
            continue
        aot.append((so, f"flashinfer/data/aot/{spec.name}/{spec.name}.so"))
        deps = subprocess.run(["ninja", "-t", "deps"], cwd=so.parent, check=True, capture_output=True,
                              text=True).stdout.split("\n")
        for line in deps:
            p = line.strip()
            if p.startswith(str(data) + "/"):
                files.add(pathlib.Path(p).relative_to(tree).as_posix())
    files.add("flashinfer/data/cutlass/include/cutlass/arch/arch.h")  # read by compilation_context
    if args.dir:  # the same content as a folder, to try it here
        for rel in sorted(files):
            (args.dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / rel, args.dir / rel)
        for so, rel in aot:
            (args.dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(so, args.dir / rel)
        print(f"copied {len(files)} files + {len(aot)} prebuilt modules to {args.dir}")
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    raw = 0
    with tarfile.open(args.out, "w:xz", preset=9) as tar:
        for rel in sorted(files):
            tar.add(tree / rel, arcname=rel)
            raw += (tree / rel).stat().st_size
        for so, rel in aot:
            tar.add(so, arcname=rel)
            raw += so.stat().st_size
    print(f"wrote {args.out}: {len(files)} files + {len(aot)} prebuilt modules, {raw / 1e6:.1f} MB "
          f"unpacked, {args.out.stat().st_size / 1e6:.1f} MB")


def main():
    root = pathlib.Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["build", "pack"])
    ap.add_argument("modules", nargs="*", help=f"build only these (default: {' '.join(MODULES)})")
    ap.add_argument("--wheel", type=pathlib.Path,
                    default=pathlib.Path(f"/tmp/fi/flashinfer_python-{VERSION}-py3-none-any.whl"))
    ap.add_argument("--tree", type=pathlib.Path, default=pathlib.Path("/tmp/fi/x"),
                    help="the wheel unpacked (made from --wheel when missing)")
    ap.add_argument("--workspace", type=pathlib.Path, default=pathlib.Path("/tmp/fiws"),
                    help="FLASHINFER_WORKSPACE_BASE of the builds")
    ap.add_argument("--out", type=pathlib.Path, default=root / ".whl" / f"flashinfer-{VERSION}-sm90a.tar.xz")
    ap.add_argument("--dir", type=pathlib.Path, help="pack: copy into this folder instead of --out")
    args = ap.parse_args()
    build(args) if args.mode == "build" else pack(args)


if __name__ == "__main__":
    main()
