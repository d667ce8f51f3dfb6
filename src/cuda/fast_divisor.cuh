#pragma once
// Division by a run-time constant (the page size) with a multiply-high and a shift
// (round-up method): exact for dividends below 2^31, which token indices are.
#include <cstdint>

namespace flashpage::cuda {

struct FastDivisor {
  uint32_t divisor = 1, multiplier = 0, shift = 0;

  FastDivisor() = default;
  explicit FastDivisor(uint32_t d) : divisor(d) {
    while ((uint64_t(1) << shift) < d) ++shift;
    // m = floor(2^32 * (2^s - d) / d) + 1, so that q = (umulhi(n, m) + n) >> s.
    multiplier = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return (__umulhi(n, multiplier) + n) >> shift;
  }
  __device__ __forceinline__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

}  // namespace flashpage::cuda
