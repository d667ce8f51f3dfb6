// Host check of the polynomial exp2 (src/cuda/exp2_poly.h) against std::exp2 in double: the
// relative error bounds the header states, exact powers of two at integers, and +0 for -inf
// and deep underflow. The device runs the same f32 operations (round-to-nearest adds, fused
// multiply-adds, integer bit moves), so this covers its arithmetic on any machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "cuda/exp2_poly.h"

namespace {

using flashpage::cuda::exp2_poly;

template <int kDegree>
double max_relative_error(float lo, float hi, int samples, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  double worst = 0.0;
  for (int i = 0; i < samples; ++i) {
    // Random points, and the ties k + 0.5 where f reaches the interval's ends.
    const float x = i % 8 == 0 ? std::floor(dist(rng)) + 0.5f : dist(rng);
    const double want = std::exp2(double(x));
    worst = std::max(worst, std::abs(double(exp2_poly<kDegree>(x)) - want) / want);
  }
  return worst;
}

TEST(Exp2Poly, RelativeErrorWithinTheFitsBound) {
  // Normal results only (x >= -126): the softmax's probabilities live in [2^-126, 2^8].
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const double e3 = max_relative_error<3>(-126.0f, 64.0f, 400000, seed);
  const double e4 = max_relative_error<4>(-126.0f, 64.0f, 400000, seed + 1);
  EXPECT_LT(e3, 4.4e-4);       // below bf16's half ulp (2^-9 = 1.95e-3)
  EXPECT_GT(e3, 1.0e-4);       // and it is the degree-3 polynomial, not something exact
  EXPECT_LT(e4, 5.6e-6);       // below f16's half ulp (2^-11 = 4.9e-4)
  // Near the softmax's maximum (x in [-8, 8]), where probabilities carry most weight.
  EXPECT_LT(max_relative_error<3>(-8.0f, 8.0f, 200000, seed + 2), 4.4e-4);
}

TEST(Exp2Poly, IntegersArePowersOfTwoExactly) {
  for (int k = -126; k <= 64; ++k) {
    EXPECT_EQ(exp2_poly<3>(float(k)), std::ldexp(1.0f, k)) << "k = " << k;
    EXPECT_EQ(exp2_poly<4>(float(k)), std::ldexp(1.0f, k)) << "k = " << k;
  }
}

TEST(Exp2Poly, MinusInfinityAndDeepUnderflowGiveZero) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp2_poly<3>(-inf), 0.0f);
  EXPECT_FALSE(std::signbit(exp2_poly<3>(-inf)));
  EXPECT_EQ(exp2_poly<4>(-inf), 0.0f);
  // Below -127 the result is +0 or a denormal under 2^-126, never negative, NaN or large.
  for (float x = -1.0e6f; x < -126.5f; x = x < -300.0f ? x * 0.5f : x + 0.0625f) {
    const float y3 = exp2_poly<3>(x), y4 = exp2_poly<4>(x);
    EXPECT_TRUE(y3 >= 0.0f && y3 < std::ldexp(1.0f, -126)) << "x = " << x << " -> " << y3;
    EXPECT_TRUE(y4 >= 0.0f && y4 < std::ldexp(1.0f, -126)) << "x = " << x << " -> " << y4;
  }
}

}  // namespace
