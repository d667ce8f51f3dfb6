#pragma once
// Random inputs for the CLI: normal values drawn on the host, then moved to the device.
#include <cstdint>
#include <random>

#include "flashpage/tensor.h"

namespace flashpage::cli {

Tensor random_normal(const Shape& shape, DType dtype, Device device, std::mt19937_64& rng,
                     double stddev = 1.0);

}  // namespace flashpage::cli
