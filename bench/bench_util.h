#pragma once
// What the GPU benchmark drivers share: checked CUDA calls, fast random fills of large
// device buffers, argument splitting, and event timing (median of per-call event pairs).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flashpage/flashpage.h"

namespace bench {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw flashpage::Error(std::string(what) + ": " + cudaGetErrorString(e));
}
#define BENCH_CUDA(call) ::bench::cuda_check((call), #call)

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

// 16 MB of random bf16 values in [-1, 1): replicated to fill any buffer quickly.
inline std::vector<uint16_t> random_bf16_pattern(uint32_t seed = 7) {
  constexpr size_t kPatternBytes = size_t(16) << 20;
  std::vector<uint16_t> pattern(kPatternBytes / sizeof(uint16_t));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& x : pattern) x = flashpage::f32_to_bf16(dist(rng));
  return pattern;
}

// Fills device memory with the repeated pattern: one upload, then doubling device copies.
inline void fill_random(void* dst, size_t bytes, const std::vector<uint16_t>& pattern) {
  const size_t chunk = pattern.size() * sizeof(uint16_t);
  size_t done = std::min(bytes, chunk);
  BENCH_CUDA(cudaMemcpy(dst, pattern.data(), done, cudaMemcpyHostToDevice));
  while (done < bytes) {
    const size_t n = std::min(done, bytes - done);
    BENCH_CUDA(cudaMemcpy(static_cast<char*>(dst) + done, dst, n, cudaMemcpyDeviceToDevice));
    done += n;
  }
}

struct Timing {
  double median_us = 0, min_us = 0;
  int reps = 0;
  // The caller's CPU time per call (validation, launches), over kHostCalls calls enqueued on
  // an idle stream: few enough that the launch queue never fills and blocks the loop on the
  // GPU, which the timed loop above does once the GPU falls behind.
  double host_us = 0;
};
inline constexpr int kHostCalls = 50;

// Warm-up, one probe to size the repetitions to ~min_ms, then one event pair per call;
// call(r) runs repetition r on `stream`. warm_ms > 0 adds that much GPU time of the same call
// before timing: under sustained tensor-core load the H200 sits at its power cap with lower
// clocks than from idle (bench/NOTES.md, session 11), so without it whichever system runs
// first after a pause reads up to ~10% high.
template <class Call>
Timing time_calls(Call&& call, cudaStream_t stream, int reps_wanted, double min_ms,
                  int warmup = 5, double warm_ms = 0.0) {
  for (int i = 0; i < warmup; ++i) call(i);
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  BENCH_CUDA(cudaEventRecord(e0, stream));
  call(0);
  BENCH_CUDA(cudaEventRecord(e1, stream));
  BENCH_CUDA(cudaEventSynchronize(e1));
  float probe_ms = 0.0f;
  BENCH_CUDA(cudaEventElapsedTime(&probe_ms, e0, e1));
  if (warm_ms > 0.0) {
    const int warm_calls = std::clamp(int(warm_ms / std::max(probe_ms, 1e-3f)), 1, 20000);
    for (int i = 0; i < warm_calls; ++i) call(i);
  }
  const int reps = reps_wanted > 0 ? reps_wanted
                                   : std::clamp(int(min_ms / std::max(probe_ms, 1e-3f)), 10, 2000);
  std::vector<cudaEvent_t> marks(static_cast<size_t>(reps) + 1);
  for (auto& m : marks) BENCH_CUDA(cudaEventCreate(&m));
  BENCH_CUDA(cudaEventRecord(marks[0], stream));
  for (int r = 0; r < reps; ++r) {
    call(r);
    BENCH_CUDA(cudaEventRecord(marks[size_t(r) + 1], stream));
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  const auto h0 = std::chrono::steady_clock::now();
  for (int r = 0; r < kHostCalls; ++r) call(r);
  const auto h1 = std::chrono::steady_clock::now();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  const double host_us =
      std::chrono::duration<double, std::micro>(h1 - h0).count() / double(kHostCalls);
  std::vector<double> us(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    float ms = 0.0f;
    BENCH_CUDA(cudaEventElapsedTime(&ms, marks[size_t(r)], marks[size_t(r) + 1]));
    us[size_t(r)] = double(ms) * 1e3;
  }
  for (auto& m : marks) BENCH_CUDA(cudaEventDestroy(m));
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), reps, host_us};
}

}  // namespace bench
