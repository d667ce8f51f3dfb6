#pragma once
// The bench's yardstick: memory bandwidth measured in the same run.
#include <string>

#include "flashpage/device.h"

namespace flashpage::cli {

struct Bandwidth {
  double gb_per_s = 0;
  std::string what;  // how it was measured
};

// CPU: one pass reading a 1 GiB buffer with all threads (best of 5).
// CUDA: a 1 GiB device-to-device copy, bytes read + written (best of 5).
Bandwidth measure_memory_bandwidth(Device device);

}  // namespace flashpage::cli
