O=$OUT
OUT=$O/a STAGES=test TEST_BINS="test_prefill_hopper test_ops test_prefill_fold_model" SPLIT_TESTS=0 bash bench/device_run.sh | tail -8
FLASHPAGE_PLAN_INTERLEAVE=1 .devcarry/tests/test_prefill_hopper --gtest_brief=1 2>&1 | tail -2
FLASHPAGE_PLAN_INTERLEAVE=1 .devcarry/tests/test_ops --gtest_brief=1 --gtest_filter='Prefill*' 2>&1 | tail -2
OUT=$O/b STAGES=prefill PREFILL_ARGS="--systems ragged,contiguous --causal no" PREFILL_VARIANTS="rank=FLASHPAGE_PREFILL_ROW_MAJOR=0 row2=FLASHPAGE_PREFILL_ROW_MAJOR=1 rank2=FLASHPAGE_PREFILL_ROW_MAJOR=0" bash bench/device_run.sh | head -12
OUT=$O/c STAGES=prefill PREFILL_ARGS="--systems paged16 --causal both" PREFILL_VARIANTS="inter=FLASHPAGE_PLAN_INTERLEAVE=1 plain2=FLASHPAGE_PLAN_INTERLEAVE=0 inter2=FLASHPAGE_PLAN_INTERLEAVE=1" bash bench/device_run.sh | head -12
