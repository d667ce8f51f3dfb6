#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "cuda/page_table_view.cuh"

namespace flashpage::cuda {

PageTableView make_page_table_view(const PagedKv& kv) {
  PageTableView view;
  view.indptr = kv.table.indptr.data_as<const int32_t>();
  view.indices = kv.table.indices.data_as<const int32_t>();
  view.last_page_len = kv.table.last_page_len.data_as<const int32_t>();
  view.batch_size = int32_t(kv.table.batch_size());
  view.page_size = int32_t(kv.page_size());
  // Page ids and indptr entries are int32: entries past INT32_MAX cannot be addressed.
  view.num_indices = int32_t(std::min<int64_t>(kv.table.indices.numel(), INT32_MAX));
  view.num_physical_pages = int32_t(std::min<int64_t>(kv.num_pages(), INT32_MAX));
  view.page_divisor = FastDivisor(uint32_t(view.page_size));
  const Tensor& k = kv.k_pages;
  check::require(k.strides() == kv.v_pages.strides(),
                 "v_pages: expected the same strides as k_pages on CUDA, got ",
                 shape_to_string(kv.v_pages.strides()), " vs ", shape_to_string(k.strides()));
  check::require(k.stride(3) == 1, "k_pages: expected a contiguous last dim on CUDA, got stride ",
                 k.stride(3));
  const bool nhd = kv.layout == KvLayout::NHD;
  view.stride_page = k.stride(0);
  view.stride_token = k.stride(nhd ? 1 : 2);
  view.stride_head = k.stride(nhd ? 2 : 1);
  return view;
}

}  // namespace flashpage::cuda
