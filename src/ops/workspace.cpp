#include <algorithm>

#include "core/check.h"
#include "ops/workspace.h"

namespace flashpage {

namespace {
// Work lists are small next to partial results: an eighth of the bytes, at most 16 MiB.
constexpr size_t kMaxIntBytes = size_t(16) << 20;
}  // namespace

Workspace::Workspace(Device device, size_t bytes) : impl_(std::make_unique<Impl>()) {
  check::require(bytes >= (size_t(1) << 20), "Workspace: expected at least 1 MiB, got ", bytes,
                 " bytes");
  impl_->device = device;
  impl_->bytes = bytes;
  const size_t int_bytes = std::min(bytes / 8, kMaxIntBytes);
  impl_->ints = Tensor::empty({int64_t(int_bytes / 4)}, DType::i32, device);
  impl_->floats = Tensor::empty({int64_t((bytes - int_bytes) / 4)}, DType::f32, device);
}

Workspace::~Workspace() = default;
Device Workspace::device() const { return impl_->device; }
size_t Workspace::bytes() const { return impl_->bytes; }

}  // namespace flashpage
