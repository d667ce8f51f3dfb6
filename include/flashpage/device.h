#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace flashpage {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  friend constexpr bool operator==(Device a, Device b) {
    return a.type == b.type && (a.type == DeviceType::cpu || a.index == b.index);
  }
  std::string str() const;  // "cpu", "cuda:0"
};

// "cpu", "cuda", "cuda:N" (case-insensitive); throws Error otherwise.
Device parse_device(std::string_view text);

// True when flashpage was built with CUDA and at least one GPU is visible.
bool cuda_available();
// True when flashpage was built with its CUDA backend (whether or not a GPU is present).
bool cuda_built();
// CUDA when available, otherwise the CPU.
Device default_device();
// Waits for all work queued on the device (no-op on the CPU).
void synchronize(Device device);
// A short description: "cpu (2 threads)", "cuda:0 NVIDIA H200 (132 SMs)".
std::string device_description(Device device);

}  // namespace flashpage
