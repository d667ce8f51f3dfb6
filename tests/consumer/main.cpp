// Calls sdpa on small random tensors through the installed package; checks the result is
// finite (on the CPU, and on the GPU when there is one).
#include <cmath>
#include <cstdio>
#include <random>

#include <flashpage/flashpage.h>

namespace {

bool finite_sdpa(flashpage::Device device, flashpage::DType dtype) {
  using namespace flashpage;
  std::mt19937 gen(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = dist(gen);
    return t.to(dtype).to(device);
  };
  const Tensor q = random({2, 4, 3, 64}), k = random({2, 2, 5, 64}), v = random({2, 2, 5, 64});
  AttentionParams params;
  params.causal = true;
  const Tensor out = sdpa(q, k, v, Tensor(), params).to(Device::cpu()).to(DType::f32);
  for (int64_t i = 0; i < out.numel(); ++i)
    if (!std::isfinite(out.data_as<float>()[i])) return false;
  return out.numel() == q.numel();
}

}  // namespace

int main() {
  try {
    if (!finite_sdpa(flashpage::Device::cpu(), flashpage::DType::f32)) {
      std::puts("consumer: sdpa on the CPU gave a non-finite result");
      return 1;
    }
    if (flashpage::cuda_available() &&
        !finite_sdpa(flashpage::Device::cuda(0), flashpage::DType::bf16)) {
      std::puts("consumer: sdpa on CUDA gave a non-finite result");
      return 1;
    }
  } catch (const std::exception& e) {
    std::printf("consumer: %s\n", e.what());
    return 1;
  }
  std::puts("consumer: ok");
  return 0;
}
