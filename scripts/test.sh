#!/usr/bin/env bash
# The test command: builds everything (the CUDA backend too when nvcc is present: it must
# compile and link even where no GPU can run it), runs the test suite, then runs it again
# in a CPU-only AddressSanitizer + UndefinedBehaviorSanitizer build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/install_deps.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
jobs="$(nproc)"

echo "== build (preset default: Release, CUDA when nvcc is found)"
cmake --preset default >/dev/null
cmake --build --preset default -j"$jobs"
echo "== tests"
ctest --preset default -j"$jobs"

if [ "${FLASHPAGE_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== build (preset sanitize: CPU only, ASan + UBSan)"
  cmake --preset sanitize >/dev/null
  cmake --build --preset sanitize -j"$jobs"
  echo "== tests under ASan + UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --preset sanitize -j"$jobs"
fi
echo "== all tests passed"
