#include <algorithm>
#include <charconv>
#include <string>

#include "core/check.h"
#include "core/device_memory.h"
#include "flashpage/device.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace flashpage {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "cpu") return Device::cpu();
  if (s == "cuda" || s == "gpu") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    int index = -1;
    auto [p, ec] = std::from_chars(s.data() + 5, s.data() + s.size(), index);
    if (ec == std::errc() && p == s.data() + s.size() && index >= 0) return Device::cuda(index);
  }
  check::fail("device: expected cpu|cuda|cuda:N, got '", text, "'");
}

bool cuda_available() { return cuda_built() && detail::cuda_device_count() > 0; }

Device default_device() { return cuda_available() ? Device::cuda(0) : Device::cpu(); }

void synchronize(Device device) {
  if (device.is_cuda()) detail::cuda_synchronize(device.index);
}

std::string device_description(Device device) {
  if (device.is_cuda()) return detail::cuda_device_name(device.index);
#ifdef _OPENMP
  return "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
#else
  return "cpu (1 thread)";
#endif
}

}  // namespace flashpage
