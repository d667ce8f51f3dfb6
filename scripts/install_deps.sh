#!/usr/bin/env bash
# Installs what flashpage builds with, from Debian's packages, when it is missing:
# cmake (>= 3.25), ninja, g++ (with OpenMP), GoogleTest, the DLPack header. CUDA (nvcc) is
# optional: without it the build is CPU-only.
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
[ -f /usr/include/dlpack/dlpack.h ] || missing+=(libdlpack-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# nvcc lives outside PATH on some images.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "note: nvcc found at /usr/local/cuda/bin; add it to PATH for a CUDA build" >&2
fi
