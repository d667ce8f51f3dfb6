// How many base-2 exponentials an SM computes per clock, by each way the prefill softmax could
// compute them: MUFU.EX2 on f32 (what the kernels use), the packed f16x2 and bf16x2 forms of
// ex2.approx (two per instruction, if the unit takes them at the f32 rate), and the FMA-pipe
// polynomials of cuda/exp2_poly.h, alone and mixed 3:1 with MUFU. The question it answers
// (bench/NOTES.md, session 32): at head_dim 64 a 128-key S tile's exponentials take MUFU as
// long as the tile's two GEMMs take the tensor cores, so moving some of them elsewhere could
// shorten the softmax phase of the ping-pong.
//
// One block of 512 threads per SM; each thread runs 8 independent chains y <- 2^(-y - 0.5)
// (y stays in [0.35, 0.71]); the SM's clock64 around the loop gives exponentials per clock.
// Prints the figure per method and its ratio to MUFU f32, measured in the same run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda/exp2_poly.h"
#include "cuda/prefill_tc/online_softmax.cuh"  // fast_exp2: the kernels' MUFU.EX2

namespace {

using flashpage::cuda::exp2_poly;
using flashpage::cuda::prefill_tc::fast_exp2;

constexpr int kThreads = 512;
constexpr int kChains = 8;
constexpr int kIters = 4096;

enum Method { kMufuF32, kMufuF16x2, kMufuBf16x2, kPoly3, kPoly4, kMixed3to1, kMethods };
const char* const kNames[kMethods] = {"MUFU f32", "MUFU f16x2", "MUFU bf16x2",
                                      "poly3 (FMA pipe)", "poly4 (FMA pipe)",
                                      "3 MUFU : 1 poly3"};
constexpr int kExpsPerStep[kMethods] = {1, 2, 2, 1, 1, 1};

__device__ __forceinline__ uint32_t mufu_exp2_f16x2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint32_t mufu_exp2_bf16x2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

template <int kMethod>
__global__ void __launch_bounds__(kThreads, 1) exp2_loop(float* out, long long* cycles) {
  float y[kChains];
  uint32_t h[kChains];
  for (int c = 0; c < kChains; ++c) y[c] = 0.5f + 0.01f * float((threadIdx.x + c) % 16);
  if constexpr (kMethod == kMufuF16x2) {
    for (int c = 0; c < kChains; ++c) {
      const __half2 v = __floats2half2_rn(y[c], y[c] + 0.1f);
      h[c] = *reinterpret_cast<const uint32_t*>(&v);
    }
  } else if constexpr (kMethod == kMufuBf16x2) {
    for (int c = 0; c < kChains; ++c) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(y[c], y[c] + 0.1f);
      h[c] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kMethod == kMufuF32) {
        y[c] = fast_exp2(fmaf(y[c], -1.0f, -0.5f));
      } else if constexpr (kMethod == kPoly3) {
        y[c] = exp2_poly<3>(fmaf(y[c], -1.0f, -0.5f));
      } else if constexpr (kMethod == kPoly4) {
        y[c] = exp2_poly<4>(fmaf(y[c], -1.0f, -0.5f));
      } else if constexpr (kMethod == kMixed3to1) {
        const float x = fmaf(y[c], -1.0f, -0.5f);
        y[c] = c % 4 == 3 ? exp2_poly<3>(x) : fast_exp2(x);
      } else if constexpr (kMethod == kMufuF16x2) {
        const __half2 x = __hfma2(*reinterpret_cast<const __half2*>(&h[c]), __float2half2_rn(-1.0f),
                                  __float2half2_rn(-0.5f));
        h[c] = mufu_exp2_f16x2(*reinterpret_cast<const uint32_t*>(&x));
      } else {
        const __nv_bfloat162 x =
            __hfma2(*reinterpret_cast<const __nv_bfloat162*>(&h[c]), __float2bfloat162_rn(-1.0f),
                    __float2bfloat162_rn(-0.5f));
        h[c] = mufu_exp2_bf16x2(*reinterpret_cast<const uint32_t*>(&x));
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  float acc = 0.0f;
  for (int c = 0; c < kChains; ++c) acc += y[c] + float(h[c] & 0xffu);
  out[blockIdx.x * kThreads + threadIdx.x] = acc;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "exp2_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <int kMethod>
double exps_per_clock(int sms, float* out, long long* cycles_dev) {
  exp2_loop<kMethod><<<sms, kThreads>>>(out, cycles_dev);  // warm-up
  exp2_loop<kMethod><<<sms, kThreads>>>(out, cycles_dev);
  check(cudaDeviceSynchronize(), "kernel");
  long long* cycles = new long long[sms];
  check(cudaMemcpy(cycles, cycles_dev, sizeof(long long) * sms, cudaMemcpyDeviceToHost), "copy");
  double mean = 0;
  for (int b = 0; b < sms; ++b) mean += double(cycles[b]) / sms;
  delete[] cycles;
  return double(kThreads) * kIters * kChains * kExpsPerStep[kMethod] / mean;
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attribute");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "properties");
  float* out = nullptr;
  long long* cycles = nullptr;
  check(cudaMalloc(&out, sizeof(float) * sms * kThreads), "malloc");
  check(cudaMalloc(&cycles, sizeof(long long) * sms), "malloc");
  const double rate[kMethods] = {
      exps_per_clock<kMufuF32>(sms, out, cycles),   exps_per_clock<kMufuF16x2>(sms, out, cycles),
      exps_per_clock<kMufuBf16x2>(sms, out, cycles), exps_per_clock<kPoly3>(sms, out, cycles),
      exps_per_clock<kPoly4>(sms, out, cycles),     exps_per_clock<kMixed3to1>(sms, out, cycles)};
  std::printf("# exp2 throughput, %s, %d SMs (%d x %d chains per SM, %d steps)\n", prop.name, sms,
              kThreads, kChains, kIters);
  std::printf("| method | exp2 per clock per SM | vs MUFU f32 |\n|---|---:|---:|\n");
  for (int m = 0; m < kMethods; ++m)
    std::printf("| %s | %.2f | %.2fx |\n", kNames[m], rate[m], rate[m] / rate[kMufuF32]);
  cudaFree(out);
  cudaFree(cycles);
  return 0;
}
