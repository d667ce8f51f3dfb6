#pragma once
// One view of a CSR page table plus the page strides, shared by decode, prefill, append and
// gather: row lengths from indptr/last_page_len, and the element offset of
// (page, token-in-page, head) for NHD or HND pages (the strides say which).
#include <cstdint>

#include "cuda/fast_divisor.cuh"
#include "flashpage/ops.h"

namespace flashpage::cuda {

struct PageTableView {
  const int32_t* indptr = nullptr;         // [B+1]
  const int32_t* indices = nullptr;        // physical page ids
  const int32_t* last_page_len = nullptr;  // [B]
  int32_t batch_size = 0;
  int32_t page_size = 1;
  int32_t num_indices = 0;          // entries of `indices`
  int32_t num_physical_pages = 0;   // pages of the pool: valid ids are [0, num_physical_pages)
  FastDivisor page_divisor;
  // Element strides of the pages tensor (K and V share them).
  int64_t stride_page = 0, stride_token = 0, stride_head = 0;

  __device__ __forceinline__ int32_t num_pages(int32_t row) const {
    return indptr[row + 1] - indptr[row];
  }
  __device__ __forceinline__ int32_t length(int32_t row) const {
    const int32_t pages = num_pages(row);
    return pages <= 0 ? 0 : page_size * (pages - 1) + last_page_len[row];
  }
  // Physical page holding token `token` of `row` and the token's slot in it.
  __device__ __forceinline__ void locate(int32_t row, int32_t token, int32_t& page,
                                         int32_t& in_page) const {
    uint32_t q, r;
    page_divisor.divmod(uint32_t(token), q, r);
    page = indices[indptr[row] + int32_t(q)];
    in_page = int32_t(r);
  }
  // locate() for a writer, which must not trust the table's device values (they are never
  // read back on the host): false when the token lies past the row's pages, the row's indptr
  // range leaves `indices`, or its page id is not a page of the pool.
  __device__ __forceinline__ bool locate_checked(int32_t row, int32_t token, int32_t& page,
                                                 int32_t& in_page) const {
    if (row < 0 || row >= batch_size || token < 0) return false;
    uint32_t q, r;
    page_divisor.divmod(uint32_t(token), q, r);
    const int32_t begin = indptr[row], end = indptr[row + 1];
    if (begin < 0 || end > num_indices || int64_t(begin) + int64_t(q) >= int64_t(end))
      return false;
    page = indices[begin + int32_t(q)];
    in_page = int32_t(r);
    return page >= 0 && page < num_physical_pages;
  }
  __device__ __forceinline__ int64_t offset_in_page(int32_t page, int32_t in_page,
                                                    int32_t head) const {
    return int64_t(page) * stride_page + int64_t(in_page) * stride_token +
           int64_t(head) * stride_head;
  }
  __device__ __forceinline__ int64_t offset(int32_t row, int32_t token, int32_t head) const {
    int32_t page, in_page;
    locate(row, token, page, in_page);
    return offset_in_page(page, in_page, head);
  }
};

// Host: the view of kv's device table and pages (shapes already validated by src/ops).
PageTableView make_page_table_view(const PagedKv& kv);

}  // namespace flashpage::cuda
