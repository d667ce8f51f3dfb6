#!/usr/bin/env bash
# Builds the Hopper prefill experiments that only a compile definition switches on (so the
# default kernel carries none of their code; bench/NOTES.md, session 25) into
# .devpack/<name>/{prefill_bench,test_prefill_hopper}.gz, for an A/B in one device run
# (bench/device_run.sh: PREFILL_ALT_BINS). Only the prefill_hopper units are recompiled with
# the definitions (the two kernel units and the host side, prefill_hopper.cu, which decides
# what to launch); the binaries are relinked against a copy of build/device's library with
# those objects replaced. Run bench/pack_device_build.sh first (it builds
# build/device). Usage: bench/pack_experiments.sh [name | name=DEF=V[,DEF=V...] ...] (a bare
# name is looked up in bench/experiments.sh; default: all of them, which with devcarry.tgz
# may pass the device tool's 64 MiB carry limit: name the ones the call needs)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/device
source bench/experiments.sh
experiments=()
for arg in "$@"; do
  if [[ "$arg" == *=* ]]; then experiments+=("$arg"); continue; fi
  found=""
  for e in "${KERNEL_EXPERIMENTS[@]}"; do [ "${e%%=*}" = "$arg" ] && found="$e"; done
  [ -n "$found" ] || { echo "pack_experiments: no experiment named $arg in bench/experiments.sh"; exit 1; }
  experiments+=("$found")
done
[ ${#experiments[@]} -gt 0 ] || experiments=("${KERNEL_EXPERIMENTS[@]}")
# EXP_BINS: what to relink against each experiment (e.g. add tests/test_ops, whose prefill
# cases cover paged and uniform calls that test_prefill_hopper does not).
bins="${EXP_BINS:-bench/prefill_bench tests/test_prefill_hopper}"
links=$(cd "$build" && ninja -t commands $bins)
for e in "${experiments[@]}"; do
  name=${e%%=*}
  defs=$(experiment_defines "$e")
  out="$PWD/.devpack/$name"
  tmp="$(mktemp -d)"
  cp "$build/libflashpage.a" "$tmp/libflashpage.a"
  pids=()
  for unit in prefill_hopper_bf16 prefill_hopper_f16 prefill_hopper; do
    cmd=$(unit_nvcc_command "$build" "$unit" "$tmp/$unit.cu.o")
    (cd "$build" && eval "$cmd $defs") &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "pack_experiments: $name did not compile"; exit 1; }; done
  (cd "$tmp" && ar r libflashpage.a prefill_hopper_bf16.cu.o prefill_hopper_f16.cu.o prefill_hopper.cu.o)
  mkdir -p "$out"
  for bin in $bins; do
    link=$(echo "$links" | grep -E -- "-o $bin( |$)" | tail -1)
    link=$(echo "$link" | sed "s| libflashpage.a | $tmp/libflashpage.a |g; s| -o $bin | -o $out/$(basename "$bin") |")
    (cd "$build" && eval "$link")
    strip --strip-debug "$out/$(basename "$bin")"
    gzip -f "$out/$(basename "$bin")"
  done
  rm -rf "$tmp"
  echo "$name ($defs): $(du -ch "$out"/*.gz | tail -1)"
done
