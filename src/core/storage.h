#pragma once
// Bytes on one device, owned (freed with the last reference) or borrowed (from_blob).
#include <cstddef>
#include <functional>

#include "flashpage/device.h"

namespace flashpage {

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device{};
  bool owned = false;
  void* stream = nullptr;  // CUDA: allocated and freed in this stream's order (null: legacy)
  std::function<void()> release;  // borrowed memory: its owner's deleter, run at the end
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

}  // namespace flashpage
