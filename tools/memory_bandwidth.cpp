#include "memory_bandwidth.h"

#include <chrono>
#include <cstdio>
#include <vector>

#include "flashpage/tensor.h"

namespace flashpage::cli {

namespace {
constexpr int64_t kBytes = int64_t(1) << 30;  // far beyond any cache
constexpr int kRuns = 5;
}  // namespace

Bandwidth measure_memory_bandwidth(Device device) {
  using Clock = std::chrono::steady_clock;
  double best = 1e30;
  if (device.is_cpu()) {
    const int64_t n = kBytes / int64_t(sizeof(float));
    Tensor buf = Tensor::empty({n}, DType::f32);
    float* p = buf.data_as<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = float(i & 1023);  // first touch by the reading thread
    volatile double sink = 0;
    for (int r = 0; r < kRuns; ++r) {
      const auto t0 = Clock::now();
      double sum = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) sum += p[i];
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      sink = sink + sum;
    }
    return {double(kBytes) / best / 1e9, "host memory read bandwidth (1 GiB, all threads)"};
  }
  Tensor a = Tensor::zeros({kBytes / 4}, DType::f32, device);
  Tensor b = Tensor::empty({kBytes / 4}, DType::f32, device);
  b.copy_(a);
  synchronize(device);
  for (int r = 0; r < kRuns; ++r) {
    const auto t0 = Clock::now();
    b.copy_(a);
    synchronize(device);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {2.0 * double(kBytes) / best / 1e9, "device copy bandwidth (read + write, 1 GiB)"};
}

}  // namespace flashpage::cli
