#!/usr/bin/env bash
# One call on the lent H200: (build if no carried build) -> tests with their CUDA cases ->
# compute-sanitizer on a subset -> benchmarks. Logs under $OUT; a short table last.
# Usage (from the repo root, on the device machine):
#   STAGES="test sanitize decode prefill" bench/device_run.sh
# bench/pack_device_build.sh packs the executables of build/device (the "device" preset, built
# here) with the build machine's libstdc++/libgomp into .devcarry/: carry it to skip the build
# there (the device image has no GoogleTest).
set -uo pipefail
OUT="${OUT:-/tmp/flashpage-out}"
mkdir -p "$OUT"
STAGES="${STAGES:-test sanitize decode}"
BUILD="${BUILD:-.devcarry}"
export PATH="/usr/local/cuda/bin:$PATH"
if [ "$BUILD" = .devcarry ] && [ -f .devpack/devcarry.tgz ]; then  # the carried archive
  rm -rf .devcarry && tar xzf .devpack/devcarry.tgz
fi
[ -d "$BUILD/lib" ] && export LD_LIBRARY_PATH="$PWD/$BUILD/lib:${LD_LIBRARY_PATH:-}"
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
# An executable carried gzipped (pack_experiments.sh, .devpack/<name>/*.gz) is unpacked beside
# its archive on every call: a warm machine keeps the copy an earlier call unpacked, which
# may be another build's.
unpack_executable() { [ ! -f "$1.gz" ] || { gunzip -kf "$1.gz" && chmod +x "$1"; }; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu \
  --format=csv >"$OUT/gpu.csv" 2>&1
note "gpu: $(tail -1 "$OUT/gpu.csv")"
export FLASHPAGE_COMMIT="$(cat "$BUILD/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
note "commit: $FLASHPAGE_COMMIT"

if [ ! -x "$BUILD/tools/flashpage" ]; then
  note "building $BUILD there (no carried build)"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHPAGE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a >"$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j16 >>"$OUT/build.log" 2>&1 || { note "BUILD FAILED"; tail -30 "$OUT/build.log"; exit 1; }
fi

# MONITOR=1: SM clock, power and temperature every 100 ms through the stages (monitor.csv),
# to tell a kernel change from the GPU's clocks moving under sustained load.
if [ "${MONITOR:-0}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 100 >"$OUT/monitor.csv" 2>&1 &
  monitor_pid=$!
fi

for stage in $STAGES; do
  case "$stage" in
    test)
      # Every test binary, CUDA cases included (they skip only without a GPU).
      fails=0
      # TEST_BINS / TEST_FILTER narrow the run (default: every binary, every test); TEST_ENV
      # ("NAME=VALUE ...") sets knobs for these runs (not the decode variants below).
      # TEST_TIMEOUT (seconds a binary; 240): test_ops took 109 s on an H100 (session 35), most
      # of it Decode.Cuda*, which alone outran 100 s on the H200 (session 37).
      for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        if [ -n "${TEST_BINS:-}" ] && [[ " $TEST_BINS " != *" $name "* ]]; then continue; fi
        env ${TEST_ENV:-} timeout "${TEST_TIMEOUT:-240}" "$t" --gtest_brief=1 --gtest_filter="${TEST_FILTER:-*}" \
          >"$OUT/$name.log" 2>&1 || fails=$((fails + 1))
        note "test $name: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ' | head -c 200) skipped=$(grep -c '\[  SKIPPED' "$OUT/$name.log")"
      done
      # The decode cases again under a knob: decode_variant LOG LABEL ENV=VALUE.
      decode_variant() {
        env "$3" timeout "${TEST_TIMEOUT:-240}" "$BUILD/tests/test_ops" --gtest_filter='Decode.Cuda*' \
          --gtest_brief=1 >"$OUT/test_ops_$1.log" 2>&1 || fails=$((fails + 1))
        note "test test_ops ($2): $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_ops_$1.log" | tr '\n' ' ' | head -c 200)"
      }
      # On the sm_80+ split kernel (the sm_90 default is the streamed one), on the streamed
      # kernel's bulk-copy path (what runs where TMA maps are refused), and with other
      # producer-warp counts than the default (clamped to what a shape allows). By default only
      # where this stage ran every test of test_ops (no TEST_FILTER; TEST_BINS unset or naming
      # test_ops): a narrowed run gets them by setting the knobs (they take ~6 minutes).
      variants=1
      if [ -n "${TEST_FILTER:-}" ] || { [ -n "${TEST_BINS:-}" ] && [[ " $TEST_BINS " != *" test_ops "* ]]; }; then
        variants=0
      fi
      [ "${SPLIT_TESTS:-$variants}" = 1 ] && decode_variant split "split decode kernel" FLASHPAGE_DECODE_KERNEL=split
      [ "${BULK_TESTS:-$variants}" = 1 ] && decode_variant bulk "decode by bulk copies" FLASHPAGE_DECODE_TMA=0
      # The merge reading its plan before griddepcontrol.wait (off by default until measured).
      [ "${EARLY_PLAN_TESTS:-$variants}" = 1 ] &&
        decode_variant earlyplan "merge plan before its wait" FLASHPAGE_DECODE_MERGE_EARLY_PLAN=1
      # More knobs: DECODE_TEST_VARIANTS="name=ENV=VALUE ...".
      for v in ${DECODE_TEST_VARIANTS:-}; do decode_variant "${v%%=*}" "decode, ${v#*=}" "${v#*=}"; done
      default_producers=""
      [ "$variants" = 1 ] && default_producers="1 4"
      # Blocks of one KV head on 4 warps (the default before session 37).
      [ "${ONE_HEAD_TESTS:-$variants}" = 1 ] &&
        decode_variant onehead4 "one-head blocks on 4 warps" FLASHPAGE_DECODE_ONE_HEAD_WIDE=0
      for p in ${PRODUCER_TESTS-$default_producers}; do
        decode_variant "producers$p" "decode, $p producer warps" FLASHPAGE_DECODE_PRODUCERS=$p
      done
      grep -h -A3 '\[  FAILED  \]' "$OUT"/test_*.log | head -60 >"$OUT/failures.txt"
      note "test binaries failing: $fails"
      ;;
    sanitize)
      # SAN_ENV="NAME=VALUE ...": a knob set for the sanitized runs (e.g. a decode variant).
      for tool in ${SAN_TOOLS:-memcheck racecheck}; do
        for t in ${SAN_BINS:-test_ops test_cuda_graph}; do
          [ -x "$BUILD/tests/$t" ] || continue
          env ${SAN_ENV:-} timeout "${SAN_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/tests/$t" \
            --gtest_filter="${SAN_FILTER:-Decode.CudaFixedCases:Decode.CudaHeadBlocks:AppendGather.Cuda*:PrefillPaged.CudaFixedCases:CudaGraph.*}" \
            --gtest_brief=1 >"$OUT/san-$tool-$t.log" 2>&1
          note "compute-sanitizer $tool $t: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/san-$tool-$t.log" | tail -1)"
        done
      done
      ;;
    decode)
      timeout "${BENCH_TIMEOUT:-300}" "$BUILD/bench/decode_bench" ${DECODE_ARGS:-} >"$OUT/decode_bench.jsonl" 2>"$OUT/decode_bench.err"
      note "decode_bench rc=$? lines=$(wc -l <"$OUT/decode_bench.jsonl")"
      compare_files=(--flashpage "$OUT/decode_bench.jsonl")
      # Variants on the same shapes, same run: name=ENV=VALUE[,ENV=VALUE] (name "split": the
      # sm_80+ split kernel); "none": no variant.
      for variant in ${DECODE_VARIANTS:-split=FLASHPAGE_DECODE_KERNEL=split}; do
        [ "$variant" = none ] && continue
        name=${variant%%=*}
        envs=$(echo "${variant#*=}" | tr ',' ' ')
        env $envs FLASHPAGE_BENCH_LABEL="flashpage_$name" timeout "${BENCH_TIMEOUT:-300}" \
          "$BUILD/bench/decode_bench" ${DECODE_ARGS:-} >"$OUT/decode_bench_$name.jsonl" 2>>"$OUT/decode_bench.err"
        note "decode_bench ($name: $envs) rc=$?"
        compare_files+=(--flashpage "$OUT/decode_bench_$name.jsonl")
      done
      # Other builds of decode_bench on the same shapes (name=path, rows tagged flashpage_name).
      for alt in ${DECODE_ALT_BINS:-}; do
        name=${alt%%=*}
        unpack_executable "${alt#*=}"
        FLASHPAGE_BENCH_LABEL="flashpage_$name" timeout "${BENCH_TIMEOUT:-300}" "${alt#*=}" ${DECODE_ARGS:-} \
          >"$OUT/decode_bench_$name.jsonl" 2>>"$OUT/decode_bench.err"
        note "decode_bench ($name: ${alt#*=}) rc=$?"
        compare_files+=(--flashpage "$OUT/decode_bench_$name.jsonl")
      done
      timeout "${BENCH_TIMEOUT:-300}" python3 bench/decode_compare.py "${compare_files[@]}" ${COMPARE_ARGS:-} \
        --out "$OUT" >"$OUT/decode_compare.log" 2>&1
      note "decode_compare rc=$?"
      ;;
    prefill)
      timeout "${BENCH_TIMEOUT:-300}" "$BUILD/bench/prefill_bench" ${PREFILL_ARGS:-} \
        >"$OUT/prefill_bench.jsonl" 2>"$OUT/prefill_bench.err"
      note "prefill_bench rc=$? lines=$(wc -l <"$OUT/prefill_bench.jsonl")"
      # Variants on the same shapes, same run, rows tagged _name (default: the mma.sync kernel).
      for variant in ${PREFILL_VARIANTS:-tc=FLASHPAGE_PREFILL_KERNEL=tc}; do
        [ "$variant" = none ] && continue
        name=${variant%%=*}
        envs=$(echo "${variant#*=}" | tr ',' ' ')
        env $envs FLASHPAGE_BENCH_LABEL="$name" timeout "${BENCH_TIMEOUT:-300}" "$BUILD/bench/prefill_bench" \
          ${PREFILL_ARGS:-} >>"$OUT/prefill_bench.jsonl" 2>>"$OUT/prefill_bench.err"
        note "prefill_bench ($name: $envs) rc=$?"
      done
      # Other builds of prefill_bench on the same shapes (A/B of kernel versions that no env
      # knob switches): name=path, rows tagged _name.
      for alt in ${PREFILL_ALT_BINS:-}; do
        unpack_executable "${alt#*=}"
        if [ -f "$(dirname "${alt#*=}")/FAILED" ]; then note "prefill_bench (${alt%%=*}): skipped, its tests failed"; continue; fi
        FLASHPAGE_BENCH_LABEL="${alt%%=*}" timeout "${BENCH_TIMEOUT:-300}" "${alt#*=}" ${PREFILL_ARGS:-} \
          >>"$OUT/prefill_bench.jsonl" 2>>"$OUT/prefill_bench.err"
        note "prefill_bench (${alt%%=*}: ${alt#*=}) rc=$?"
      done
      # PREFILL_COMPARE_ARGS: e.g. --no-flashinfer where FlashInfer is set up for decode only.
      timeout "${BENCH_TIMEOUT:-300}" python3 bench/prefill_compare.py --flashpage "$OUT/prefill_bench.jsonl" \
        ${PREFILL_COMPARE_ARGS:-} --out "$OUT" >"$OUT/prefill_compare.log" 2>&1
      note "prefill_compare rc=$?"
      ;;
    ncu)
      # Hardware counters of one decode launch (64 x 4096, 32/8/128, page 16): throughput,
      # occupancy and warp stalls, to see what limits the kernel.
      timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:"${NCU_KERNEL:-decode_kernel}" \
        --launch-skip "${NCU_SKIP:-3}" --launch-count "${NCU_COUNT:-1}" --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section SchedulerStats "$BUILD/bench/decode_bench" ${NCU_ARGS:---heads 32/8/128 --shapes 64x4096 --pages 16 --reps 3 --min-ms 1} \
        >"$OUT/ncu_decode.log" 2>&1
      note "ncu rc=$? $(grep -E 'Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Duration' "$OUT/ncu_decode.log" | tr -s ' ' | tr '\n' ';' | head -c 400)"
      ;;
    ncu_torch)
      # PyTorch's kernels on the shape of the ncu stage: the yardstick's counters. Decode by
      # default; NCU_TORCH_ARGS="--queries 8192 --shape 1x8192 ..." profiles a prefill, and
      # NCU_TORCH_KERNEL (a regex) leaves out the inputs' random-number kernels.
      timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:"${NCU_TORCH_KERNEL:-.}" \
        --launch-skip "${NCU_TORCH_SKIP:-4}" --launch-count 2 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        python3 bench/torch_sdpa_profile.py ${NCU_TORCH_ARGS:-} >"$OUT/ncu_torch.log" 2>&1
      note "ncu_torch rc=$? $(grep -E 'Memory Throughput|L2 Cache Throughput|Duration' "$OUT/ncu_torch.log" | tr -s ' ' | tr '\n' ';' | head -c 400)"
      ;;
    ncu_prefill)
      # One prefill launch (32/8/128, 1 x 8192, non-causal, ragged) with warp-stall sampling;
      # NCU_PREFILL_BIN profiles another build (an experiment's prefill_bench, after exptests).
      ncu_bin="${NCU_PREFILL_BIN:-$BUILD/bench/prefill_bench}"
      unpack_executable "$ncu_bin"
      timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:"${NCU_PREFILL_KERNEL:-hopper}" \
        --launch-skip "${NCU_SKIP:-3}" --launch-count 1 --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --section SchedulerStats \
        --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SourceCounters \
        --import-source no -o "$OUT/ncu_prefill${NCU_TAG:-}" \
        "$ncu_bin" ${NCU_PREFILL_ARGS:---heads 32/8/128 --shapes 1x8192 --systems ragged --min-ms 1} \
        >"$OUT/ncu_prefill${NCU_TAG:-}_run.log" 2>&1
      note "ncu_prefill${NCU_TAG:-} rc=$?"
      # The details page, then the per-SASS-instruction page (stall samples by instruction).
      ncu -i "$OUT/ncu_prefill${NCU_TAG:-}.ncu-rep" --page details >"$OUT/ncu_prefill${NCU_TAG:-}.log" 2>&1
      # The raw page: every collected counter by name (the pipes' utilisation among them).
      ncu -i "$OUT/ncu_prefill${NCU_TAG:-}.ncu-rep" --page raw >"$OUT/ncu_prefill${NCU_TAG:-}_raw.log" 2>&1
      ncu -i "$OUT/ncu_prefill${NCU_TAG:-}.ncu-rep" --page source --print-source sass --csv >"$OUT/ncu_prefill${NCU_TAG:-}_sass.csv" 2>&1
      gzip -f "$OUT/ncu_prefill${NCU_TAG:-}_sass.csv" && mv "$OUT/ncu_prefill${NCU_TAG:-}_sass.csv.gz" "$OUT/ncu_prefill${NCU_TAG:-}_sass.csv.gz.log"
      rm -f "$OUT/ncu_prefill${NCU_TAG:-}.ncu-rep"
      note "ncu_prefill${NCU_TAG:-}: $(grep -E 'Duration|Compute \(SM\) Throughput|Issued Warp' "$OUT/ncu_prefill${NCU_TAG:-}.log" | tr -s ' ' | tr '\n' ';' | head -c 300)"
      ;;
    exptests)
      # The tests of kernel experiments that only a compile definition builds
      # (bench/pack_experiments.sh packs them as .devpack/<name>/*.gz): EXPERIMENTS="late2 reg",
      # each test_prefill_hopper whole, then memcheck on EXP_SAN_FILTER (if set).
      for e in ${EXPERIMENTS:-}; do
        d=".devpack/$e"
        if [ ! -f "$d/test_prefill_hopper.gz" ]; then note "exptests $e: no $d/test_prefill_hopper.gz"; continue; fi
        for f in "$d"/*.gz; do unpack_executable "${f%.gz}"; done
        rm -f "$d/FAILED"
        # A failed (or hung: EXP_TIMEOUT, 150 s) experiment is marked, and neither its memcheck nor
        # its benchmark (the prefill stage's PREFILL_ALT_BINS) runs.
        timeout "${EXP_TIMEOUT:-150}" "$d/test_prefill_hopper" --gtest_brief=1 >"$OUT/exp_$e.log" 2>&1 ||
          echo "rc=$?" >"$d/FAILED"
        note "exptests $e: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/exp_$e.log" | tr '\n' ' ' | head -c 200) $(cat "$d/FAILED" 2>/dev/null)"
        # The experiment's test_ops too where it was packed (EXP_BINS), on its prefill cases.
        if [ -x "$d/test_ops" ]; then
          timeout "${EXP_TIMEOUT:-150}" "$d/test_ops" --gtest_brief=1 \
            --gtest_filter="${EXP_OPS_FILTER:-PrefillPaged.*:PrefillRagged.*:Sdpa.*}" >"$OUT/exp_ops_$e.log" 2>&1 ||
            echo "test_ops rc=$?" >>"$d/FAILED"
          note "exptests $e test_ops: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/exp_ops_$e.log" | tr '\n' ' ' | head -c 200) $(cat "$d/FAILED" 2>/dev/null)"
        fi
        if [ -n "${EXP_SAN_FILTER:-}" ] && [ ! -f "$d/FAILED" ]; then
          timeout "${SAN_TIMEOUT:-120}" compute-sanitizer --tool memcheck --error-exitcode 9 \
            "$d/test_prefill_hopper" --gtest_filter="$EXP_SAN_FILTER" --gtest_brief=1 >"$OUT/exp_san_$e.log" 2>&1
          note "exptests $e memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/exp_san_$e.log" | tail -1)"
        fi
      done
      ;;
    demo)
      timeout 120 "$BUILD/tools/flashpage" demo >"$OUT/demo.log" 2>&1
      note "demo rc=$? $(tail -1 "$OUT/demo.log")"
      ;;
  esac
done
[ -n "${monitor_pid:-}" ] && kill "$monitor_pid" 2>/dev/null
# Only a few files come back from the device: logs travel as one archive.
(cd "$OUT" && tar czf "${ARCHIVE:-logs}.tar.gz" --remove-files *.log *.jsonl *.err *.csv *_table.txt failures.txt 2>/dev/null)
echo "==== summary"
cat "$summary"
tar xzf "$OUT/logs.tar.gz" -O decode_table.txt prefill_table.txt 2>/dev/null
exit 0
