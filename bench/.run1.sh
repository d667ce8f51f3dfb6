#!/usr/bin/env bash
O=$OUT
OUT=$O/t STAGES="test" TEST_BINS="test_ops test_cuda_graph test_attention test_prefill_hopper test_pool" bash bench/device_run.sh
OUT=$O/s STAGES="sanitize" SAN_BINS=test_ops SAN_TIMEOUT=150 SAN_FILTER="Decode.CudaPageSizes:Decode.CudaHeadBlocks" bash bench/device_run.sh
OUT=$O/d STAGES="decode" DECODE_ARGS="--heads 32/8/128,16/2/256,32/32/128 --shapes 1x32768,16x8192,64x4096,256x1024,64x512,64xrand --pages 16,1" \
  DECODE_VARIANTS="notma=FLASHPAGE_DECODE_TMA=0 tma2=FLASHPAGE_DECODE_TMA=1 notma2=FLASHPAGE_DECODE_TMA=0" COMPARE_ARGS="--no-gather --no-flashinfer" bash bench/device_run.sh
cat $O/t/failures.txt | head -40
