#pragma once
// Addressing of a paged KV cache on the host: row lengths and the address of (row, token,
// head) in the K and V pages, for both layouts. Decode, prefill, append and gather all use it.
// The table has been validated (check_page_table) before a view is made.
#include <cstdint>

#include "flashpage/ops.h"

namespace flashpage::cpu {

template <class T>
class PagedView {
 public:
  explicit PagedView(const PagedKv& kv)
      : k_(static_cast<T*>(kv.k_pages.data())),
        v_(static_cast<T*>(kv.v_pages.data())),
        indptr_(kv.table.indptr.data_as<int32_t>()),
        indices_(kv.table.indices.data_as<int32_t>()),
        last_(kv.table.last_page_len.data_as<int32_t>()),
        page_size_(kv.page_size()),
        batch_(kv.table.batch_size()) {
    const bool nhd = kv.layout == KvLayout::NHD;
    k_page_ = kv.k_pages.stride(0);
    v_page_ = kv.v_pages.stride(0);
    k_token_ = kv.k_pages.stride(nhd ? 1 : 2);
    v_token_ = kv.v_pages.stride(nhd ? 1 : 2);
    k_head_ = kv.k_pages.stride(nhd ? 2 : 1);
    v_head_ = kv.v_pages.stride(nhd ? 2 : 1);
  }

  int64_t batch_size() const { return batch_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages(int64_t row) const { return indptr_[row + 1] - indptr_[row]; }
  int64_t length(int64_t row) const {
    const int64_t pages = num_pages(row);
    return pages <= 0 ? 0 : page_size_ * (pages - 1) + last_[row];
  }
  // Element offsets of token t (row-relative; t < pages * page_size) of head h.
  int64_t k_offset(int64_t row, int64_t t, int64_t h) const {
    const int64_t page = indices_[indptr_[row] + t / page_size_];
    return page * k_page_ + (t % page_size_) * k_token_ + h * k_head_;
  }
  int64_t v_offset(int64_t row, int64_t t, int64_t h) const {
    const int64_t page = indices_[indptr_[row] + t / page_size_];
    return page * v_page_ + (t % page_size_) * v_token_ + h * v_head_;
  }
  T* k(int64_t row, int64_t t, int64_t h) const { return k_ + k_offset(row, t, h); }
  T* v(int64_t row, int64_t t, int64_t h) const { return v_ + v_offset(row, t, h); }

  // One row seen as a KV source for the attention kernel: fills the K/V row addresses of
  // tokens t0 .. t0+n-1 of head h, walking pages instead of dividing per token.
  class Row {
   public:
    Row(const PagedView& view, int64_t row) : view_(&view), row_(row) {}
    void fill(int64_t t0, int n, int64_t h, const T** kp, const T** vp) const {
      const PagedView& w = *view_;
      const int32_t* pages = w.indices_ + w.indptr_[row_];
      int64_t p = t0 / w.page_size_, o = t0 % w.page_size_;
      int64_t kbase = pages[p] * w.k_page_ + h * w.k_head_;
      int64_t vbase = pages[p] * w.v_page_ + h * w.v_head_;
      for (int i = 0; i < n; ++i) {
        kp[i] = w.k_ + kbase + o * w.k_token_;
        vp[i] = w.v_ + vbase + o * w.v_token_;
        if (++o == w.page_size_ && i + 1 < n) {
          o = 0;
          ++p;
          kbase = pages[p] * w.k_page_ + h * w.k_head_;
          vbase = pages[p] * w.v_page_ + h * w.v_head_;
        }
      }
    }

   private:
    const PagedView* view_;
    int64_t row_;
  };
  Row row(int64_t r) const { return Row(*this, r); }

 private:
  T* k_;
  T* v_;
  const int32_t* indptr_;
  const int32_t* indices_;
  const int32_t* last_;
  int64_t page_size_;
  int64_t batch_ = 0;
  int64_t k_page_ = 0, v_page_ = 0, k_token_ = 0, v_token_ = 0, k_head_ = 0, v_head_ = 0;
};

// Contiguous K/V ([tokens, H, D] with strides) of one row seen as the same kind of source.
template <class T>
class StridedKv {
 public:
  StridedKv(const T* k, const T* v, int64_t k_token, int64_t v_token, int64_t k_head,
            int64_t v_head)
      : k_(k), v_(v), k_token_(k_token), v_token_(v_token), k_head_(k_head), v_head_(v_head) {}
  void fill(int64_t t0, int n, int64_t h, const T** kp, const T** vp) const {
    for (int i = 0; i < n; ++i) {
      kp[i] = k_ + (t0 + i) * k_token_ + h * k_head_;
      vp[i] = v_ + (t0 + i) * v_token_ + h * v_head_;
    }
  }

 private:
  const T* k_;
  const T* v_;
  int64_t k_token_, v_token_, k_head_, v_head_;
};

}  // namespace flashpage::cpu
