// append_paged_kv / gather_paged_kv: validation, then the CPU or CUDA run.
#include <numeric>

#include "core/check.h"
#include "core/device_memory.h"
#include "cpu/cpu_ops.h"
#include "ops/page_table_check.h"
#include "ops/validate.h"
#ifdef FLASHPAGE_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

namespace flashpage {

void append_paged_kv(const Tensor& k, const Tensor& v, const Tensor& batch_indices,
                     const Tensor& positions, const PagedKv& kv, void* stream) {
  check_pages(kv);
  const Device device = kv.k_pages.device();
  check_page_table_shapes(kv.table, device, "kv.table");
  const int64_t hkv = kv.num_kv_heads(), d = kv.head_dim();
  check::require(k.defined() && (k.dim() == 3 || k.dim() == 4),
                 "key: expected 3 dims [N,Hkv,D] or 4 dims [B,S,Hkv,D], got ", k.shape_str());
  check::defined(v, "value");
  check::shape_is(v, "value", k.shape());
  for (const auto& [t, name] : {std::pair{&k, "key"}, std::pair{&v, "value"}}) {
    check::same_dtype(*t, name, kv.k_pages.dtype(), "k_pages");
    check::same_device(*t, name, device, "k_pages");
    check::size_is(*t, name, -2, hkv, "Hkv of the pages");
    check::size_is(*t, name, -1, d, "head_dim of the pages");
  }
  const int64_t n = k.dim() == 4 ? k.size(0) * k.size(1) : k.size(0);
  check::index_vector(batch_indices, "batch_indices", n, "one per token of key", device);
  check::index_vector(positions, "positions", n, "one per token of key", device);

  if (device.is_cpu()) {
    check_page_table(kv.table, kv.num_pages(), kv.page_size());
    const int64_t batch = kv.table.batch_size();
    const int32_t* indptr = kv.table.indptr.data_as<int32_t>();
    const int32_t* rows = batch_indices.data_as<int32_t>();
    const int32_t* pos = positions.data_as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      check::require(rows[i] >= 0 && rows[i] < batch, "batch_indices: expected rows in [0, ",
                     batch, ") (rows of kv.table), got batch_indices[", i, "]=", rows[i]);
      const int64_t capacity = int64_t(indptr[rows[i] + 1] - indptr[rows[i]]) * kv.page_size();
      check::require(pos[i] >= 0 && pos[i] < capacity, "positions: expected a position in [0, ",
                     capacity, ") (the pages of row ", rows[i], "), got positions[", i, "]=",
                     pos[i]);
    }
    cpu::append_paged_kv(k, v, batch_indices, positions, kv);
    return;
  }
#ifdef FLASHPAGE_WITH_CUDA
  const detail::DeviceScope scope(device);
  cuda::append_paged_kv(k, v, batch_indices, positions, kv, stream);
#else
  (void)stream;
  ops_detail::no_cuda("append_paged_kv");
#endif
}

void gather_paged_kv(const PagedKv& kv, Tensor& k_out, Tensor& v_out, void* stream) {
  check_pages(kv);
  const Device device = kv.k_pages.device();
  check_page_table_shapes(kv.table, device, "kv.table");
  // The output size depends on the table's values: read them on the host (a small copy for a
  // CUDA table, on the stream that may have just written it; gather is an export path, not a
  // per-step one).
  const PageTable host = device.is_cpu() ? kv.table : kv.table.to(Device::cpu(), stream);
  const std::vector<int64_t> lengths = check_page_table(host, kv.num_pages(), kv.page_size());
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  const Shape want{total, kv.num_kv_heads(), kv.head_dim()};
  for (const auto& [t, name] : {std::pair{static_cast<const Tensor*>(&k_out), "k_out"},
                             std::pair{static_cast<const Tensor*>(&v_out), "v_out"}}) {
    check::require(t->defined() && t->shape() == want, name, ": expected shape ",
                   shape_to_string(want), " [sum of row lengths, Hkv, D], got ", t->shape_str());
    check::same_dtype(*t, name, kv.k_pages.dtype(), "k_pages");
    check::same_device(*t, name, device, "k_pages");
    check::writable(*t, name);
    check::no_overlap(*t, name, kv.k_pages, "k_pages");
    check::no_overlap(*t, name, kv.v_pages, "v_pages");
  }
  check::no_overlap(v_out, "v_out", k_out, "k_out");

  if (device.is_cpu()) {
    cpu::gather_paged_kv(kv, k_out, v_out);
    return;
  }
#ifdef FLASHPAGE_WITH_CUDA
  const detail::DeviceScope scope(device);
  cuda::gather_paged_kv(kv, k_out, v_out, stream);
#else
  (void)stream;
  ops_detail::no_cuda("gather_paged_kv");
#endif
}

}  // namespace flashpage
