#!/usr/bin/env bash
# Recompiles the warp-specialised sm_90a kernels of a configured build (default build/device,
# `cmake --preset device`) with ptxas -v and fails when any kernel spills or has its wgmma
# serialised (ptxas C75xx "Potential Performance Loss"): both cost far more than any change
# gains (session 13: a branch around a wgmma serialised every wgmma of the kernel and cost
# 8-26%, bench/NOTES.md), and neither shows in the tests. bench/pack_device_build.sh runs it.
# Usage: bench/check_kernel_resources.sh [build dir]
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/device}"
source bench/experiments.sh
# name:unit:extra nvcc flags. The experiments (bench/experiments.sh) are checked too, on the
# bf16 unit, so they do not rot.
entries=(prefill_hopper_bf16:prefill_hopper_bf16: prefill_hopper_f16:prefill_hopper_f16:
         decode_stream_bf16:decode_stream_bf16: decode_stream_f16:decode_stream_f16:)
for e in "${KERNEL_EXPERIMENTS[@]}"; do
  entries+=("prefill_hopper_${e%%=*}:prefill_hopper_bf16:$(experiment_defines "$e")")
done
# Allowances, each "[unit@]kernel regex=most spill bytes" (with unit@, for that unit only):
# - The streamed decode kernel at head_dim 256 (4 consumer warps) runs at the 255-register
#   cap, and since its warps combine their states in shared memory (session 27) ptxas spills
#   up to ~36 bytes of the sub-unit loop's values (item index, bounds): a few local loads and
#   stores per sub-unit, none inside the token loop (nvdisasm of the cubin, bench/NOTES.md
#   session 27).
# - The prefill kernel with three math warpgroups (head_dim 64, Li3E): 512 threads share the
#   register file as 128 x 32 + 384 x 160 (kernel.cuh), and ptxas spills 52 bytes: the
#   load warpgroup's per-M-tile scheduling values and its cp.async row addresses, and one
#   consumer value read back only for tiles without keys; none in the K/V loops of either
#   side (nvdisasm of the cubin, bench/NOTES.md session 33). The dense ragged units' row walk
#   (session 48, scheduler.cuh seek_row) took it to 56 bytes, and the O-TMA experiment's to 68.
#   The walk's seek table (session 50) took it from 52 to 84 bytes: the load warpgroup's
#   local loads and stores went from 23 to 35 instructions, all in the per-M-tile code
#   between the schedule and the Q copies, none in the K/V loop (cuobjdump -sass, from
#   PyPI's nvidia-cuda-cuobjdump, as this machine's CUDA has none). The same 84 came from
#   dropping the old walk's backward branch alone.
# - The split-roles experiment's two-warpgroup prefill kernels (Li2E; session 52, producer.cuh
#   kSplitRoles): 48-60 bytes, the load warpgroup's per-M-tile values (the resolve and the Q
#   copies' row addresses); the K/V loop has no local loads or stores (cuobjdump -sass of the
#   head_dim 128 kernel). The default build's Li2E kernels must stay at none.
SPILL_ALLOWANCES=('stream_decode_kernel.*Li256ELi4E=48' 'prefill_hopper_kernel.*Li64ELb0ELi3E=88'
                  'prefill_hopper_split@prefill_hopper_kernel.*ELb0ELi2E=64')
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for entry in "${entries[@]}"; do
  IFS=: read -r u src flags <<<"$entry"
  cmd=$(unit_nvcc_command "$build" "$src" "$tmp/$u.o")
  if [ -z "$cmd" ]; then echo "check_kernel_resources: no nvcc command for $src in $build"; exit 1; fi
  (cd "$build" && eval "$cmd $flags -Xptxas -v" >"$tmp/$u.log" 2>&1) &
done
wait
status=0
for entry in "${entries[@]}"; do
  u=${entry%%:*}
  # Spill lines (but the allowance below), each after its "Compiling entry function" line.
  spill_lines() {
    awk -v allow="${SPILL_ALLOWANCES[*]}" -v unit="$u" '
      BEGIN { n = split(allow, a, " ") }
      /Compiling entry function/ { fn = $0 }
      /bytes spill stores/ && !/ 0 bytes spill stores, 0 bytes spill loads/ {
        split($0, w, " "); for (i = 1; i <= NF; ++i) if (w[i] == "spill" && w[i+1] == "stores,") stores = w[i-2]
        for (j = 1; j <= n; ++j) {
          eq = index(a[j], "="); re = substr(a[j], 1, eq - 1); most = substr(a[j], eq + 1) + 0
          at = index(re, "@"); if (at > 0) { if (substr(re, 1, at - 1) != unit) continue; re = substr(re, at + 1) }
          if (fn ~ re && stores + 0 <= most) next
        }
        print fn " :: " $0 }' "$1"
  }
  spills=$(spill_lines "$tmp/$u.log" | grep -c .)
  serial=$(grep -c "C75[0-9][0-9]" "$tmp/$u.log")
  regs=$(grep -o "Used [0-9]* registers" "$tmp/$u.log" | sort -u | tr '\n' ' ')
  echo "$u: kernels with spills: $spills, ptxas C75xx notes (wgmma serialised, arrives injected): $serial; $regs"
  if [ -z "$regs" ]; then  # no ptxas report: the unit did not compile
    echo "$u: no ptxas report (did it compile?)"; tail -5 "$tmp/$u.log"
    status=1
  elif [ "$spills" != 0 ] || [ "$serial" != 0 ]; then
    { spill_lines "$tmp/$u.log"; grep -E "C75[0-9][0-9]" "$tmp/$u.log"; } | head -5
    status=1
  fi
done
exit $status
