# FlashInfer for the benchmark comparisons on the lent H200 (which has no network).
# Source it from the repo root there, with .whl carried:
#   source bench/flashinfer_env.sh
# It installs what .whl/ holds into /tmp (never into /): the apache-tvm-ffi wheel that
# flashinfer loads its kernels through, and a stripped flashinfer-python 0.7.4 tarball (the
# Python package, the headers its decode/prefill JIT builds include, and modules prebuilt for
# sm_90a under flashinfer/data/aot, which flashinfer loads without compiling). Then it sets
# PYTHONPATH and flashinfer's variables and prints one line. On failure it says why and
# returns; it never exits the calling shell.
_flashinfer_env() {
  local site="${FLASHINFER_SITE:-/tmp/flashinfer_site}" wheels tarball w
  wheels=$(ls .whl/apache_tvm_ffi-*.whl 2>/dev/null)
  tarball=$(ls .whl/flashinfer-*.tar.xz 2>/dev/null | head -1)
  if [ -z "$wheels" ] || [ -z "$tarball" ]; then
    echo "flashinfer_env: FAILED: .whl/apache_tvm_ffi-*.whl or .whl/flashinfer-*.tar.xz missing (carry .whl; run from the repo root)"
    return 1
  fi
  # Unpack once per machine: a marker names the tarball (and its size) that was unpacked.
  local marker
  marker="$(basename "$tarball") $(stat -c %s "$tarball")"
  if [ "$(cat "$site/.unpacked" 2>/dev/null)" != "$marker" ]; then
    rm -rf "$site" && mkdir -p "$site" || { echo "flashinfer_env: FAILED: cannot create $site"; return 1; }
    # A wheel is a zip of its site-packages files: unzip it where pip is not usable.
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" $wheels >"$site.pip.log" 2>&1; then
      for w in $wheels; do
        python3 -m zipfile -e "$w" "$site" >>"$site.pip.log" 2>&1 ||
          { echo "flashinfer_env: FAILED: installing $w (see $site.pip.log)"; return 1; }
      done
    fi
    tar -xJf "$tarball" -C "$site" || { echo "flashinfer_env: FAILED: tar -xJf $tarball"; return 1; }
    echo "$marker" >"$site/.unpacked"
  fi
  case ":${PYTHONPATH:-}:" in *":$site:"*) ;; *) export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" ;; esac
  # Build for (and name the JIT cache after) the H200 only: 9.0a -> sm_90a.
  export FLASHINFER_CUDA_ARCH_LIST="9.0a"
  # JIT cache for any module not prebuilt: $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/0.7.4/90a.
  export FLASHINFER_WORKSPACE_BASE="${FLASHINFER_WORKSPACE_BASE:-/tmp/flashinfer_ws}"
  export MAX_JOBS="${MAX_JOBS:-16}"
  if [ -x /usr/local/cuda/bin/nvcc ]; then  # nvcc for a JIT build, found through CUDA_HOME
    export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
    case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) export PATH="/usr/local/cuda/bin:$PATH" ;; esac
  fi
  local status
  status=$(python3 -c '
import os, flashinfer
from flashinfer.jit import env
aot = env.FLASHINFER_AOT_DIR
n = len(os.listdir(aot)) if aot.is_dir() else 0
print(f"flashinfer {flashinfer.__version__}, {n} prebuilt sm_90a modules in {aot}, JIT cache {env.FLASHINFER_JIT_DIR}")
' 2>&1 | tail -1)
  case "$status" in
    flashinfer\ *) echo "flashinfer_env: $status; PYTHONPATH=$site, FLASHINFER_CUDA_ARCH_LIST=9.0a, MAX_JOBS=$MAX_JOBS" ;;
    *) echo "flashinfer_env: FAILED: import flashinfer: $status"; return 1 ;;
  esac
}
_flashinfer_env
unset -f _flashinfer_env
