#include "random_tensors.h"

namespace flashpage::cli {

Tensor random_normal(const Shape& shape, DType dtype, Device device, std::mt19937_64& rng,
                     double stddev) {
  Tensor host = Tensor::empty(shape, DType::f32);
  std::normal_distribution<float> dist(0.0f, float(stddev));
  float* p = host.data_as<float>();
  for (int64_t i = 0; i < host.numel(); ++i) p[i] = dist(rng);
  return host.to(dtype).to(device);
}

}  // namespace flashpage::cli
