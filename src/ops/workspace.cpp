#include <algorithm>

#include "core/check.h"
#include "ops/workspace.h"

namespace flashpage {

namespace {
// Work lists are small next to partial results: an eighth of the bytes, at most 16 MiB.
constexpr size_t kIntShare = 8;
constexpr size_t kMaxIntBytes = size_t(16) << 20;
}  // namespace

size_t one_shot_workspace_bytes(int64_t rows, int64_t query_tiles) {
  const size_t ints = size_t(8 * rows + 4 * query_tiles + 4096);
  return std::max(Workspace::kOneShotBytes, kIntShare * 4 * ints);
}

Workspace::Workspace(Device device, size_t bytes) : impl_(std::make_unique<Impl>()) {
  check::require(bytes >= (size_t(1) << 20), "Workspace: expected at least 1 MiB, got ", bytes,
                 " bytes");
  impl_->device = device;
  impl_->bytes = bytes;
  const size_t int_bytes = std::min(bytes / kIntShare, kMaxIntBytes);
  impl_->ints = Tensor::empty({int64_t(int_bytes / 4)}, DType::i32, device);
  impl_->floats = Tensor::empty({int64_t((bytes - int_bytes) / 4)}, DType::f32, device);
}

Workspace::~Workspace() = default;
Device Workspace::device() const { return impl_->device; }
size_t Workspace::bytes() const { return impl_->bytes; }

Tensor Workspace::Impl::planned_qo_indptr(const Plan& plan) const {
  check::require(qo_indptr_offset >= 0 && plan.generation == generation,
                 "workspace: its last plan holds no qo_indptr (plan_prefill with ragged queries)");
  return ints.slice(0, qo_indptr_offset, qo_indptr_offset + plan.batch_size + 1);
}

}  // namespace flashpage
