#!/usr/bin/env bash
# Packs what bench/device_run.sh runs from build/device (configure with `cmake --preset device`)
# into .devcarry/ and its gzip archive .devpack/devcarry.tgz (carry `.devpack`: the binaries
# alone are close to the device tool's 64 MiB limit, the archive is a third of it): the
# executables and this machine's libstdc++ and libgomp (the binaries may need newer ones than
# the device image has). PACK_BINS="test_prefill_hopper prefill_bench" packs only those tests
# and benchmarks (and tools/flashpage, which device_run.sh looks for): room under the limit
# for bench/pack_experiments.sh's packages when a call needs nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
# Build first: the archive is stamped with HEAD, so it must hold HEAD's binaries (session 16
# once packed a stale build under a newer commit). A dirty tree is stamped as such.
ninja -C build/device >/dev/null || { echo "pack_device_build: the build failed"; exit 1; }
# No kernel that spills or has its wgmma serialised goes to the GPU unnoticed.
if [ "${PACK_SKIP_CHECK:-0}" != 1 ] && ! bench/check_kernel_resources.sh; then
  echo "pack_device_build: the kernel resource check failed (PACK_SKIP_CHECK=1 packs anyway)"
  exit 1
fi
rm -rf .devcarry
mkdir -p .devcarry/tests .devcarry/tools .devcarry/bench .devcarry/lib
cp build/device/tests/test_* .devcarry/tests/ 2>/dev/null || true
rm -f .devcarry/tests/*.cmake
cp build/device/tools/flashpage .devcarry/tools/
cp build/device/bench/*_bench .devcarry/bench/ 2>/dev/null || true
if [ -n "${PACK_BINS:-}" ]; then
  for f in .devcarry/tests/* .devcarry/bench/*; do
    [[ " $PACK_BINS " == *" $(basename "$f") "* ]] || rm -f "$f"
  done
fi
for lib in libstdc++.so.6 libgomp.so.1; do
  cp -L "$(g++ -print-file-name=$lib)" .devcarry/lib/ 2>/dev/null ||
    cp -L "/usr/lib/x86_64-linux-gnu/$lib" .devcarry/lib/
done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include tools bench tests || echo -dirty)" > .devcarry/COMMIT
strip --strip-debug .devcarry/tests/* .devcarry/tools/* .devcarry/bench/* 2>/dev/null || true
mkdir -p .devpack
tar czf .devpack/devcarry.tgz .devcarry
du -sh .devcarry .devpack/devcarry.tgz
