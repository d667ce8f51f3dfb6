#pragma once
// Validation helpers: each throws flashpage::Error naming the argument, the expectation and
// what was given.
#include <initializer_list>
#include <span>
#include <sstream>
#include <string>
#include <string_view>

#include "flashpage/error.h"
#include "flashpage/tensor.h"

namespace flashpage::check {

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

template <class... Parts>
void require(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}

// The elements of `shape` (1 for a scalar), after checking that every size is >= 0 and that
// the tensor's bytes (elements x dtype size) fit in int64: a larger shape would wrap around to
// a small allocation that later writes overrun.
int64_t element_count(const Shape& shape, DType dtype, std::string_view name);
// "query: expected 4 dims [B,H,S,D], got [2,8,64]"; also rejects an undefined tensor.
void dims(const Tensor& t, std::string_view name, int64_t rank, std::string_view layout);
void defined(const Tensor& t, std::string_view name);
void dtype_in(const Tensor& t, std::string_view name, std::initializer_list<DType> allowed);
void same_dtype(const Tensor& t, std::string_view name, DType expected, std::string_view of);
void same_device(const Tensor& t, std::string_view name, Device expected, std::string_view of);
void size_is(const Tensor& t, std::string_view name, int64_t dim, int64_t expected,
             std::string_view what);
void shape_is(const Tensor& t, std::string_view name, const Shape& expected);
void inner_contiguous(const Tensor& t, std::string_view name);  // last dim stride 1
// An output: no dim of more than one element with stride 0 (a broadcast view would have
// several threads write one element, in no fixed order on CUDA).
void writable(const Tensor& t, std::string_view name);
void contiguous(const Tensor& t, std::string_view name);
// An output must not share memory with an input (the kernels read inputs after other blocks
// wrote outputs). Refused when the overlap is certain: the same first element, or byte
// ranges that intersect while both views are dense in their range (no gaps between their
// elements). Strided views whose ranges interleave are not decided (that would take an
// element-wise walk) and pass. `exact_alias_ok`: an output that is exactly the input (same
// first element, shape, strides and dtype) passes, for the element-wise ops that allow it.
void no_overlap(const Tensor& out, std::string_view out_name, const Tensor& in,
                std::string_view in_name, bool exact_alias_ok = false);
void head_dim(int64_t d, std::string_view name);  // multiple of 8, 8..256
void gqa(int64_t num_qo_heads, int64_t num_kv_heads);
// q/k/v/out element types: f32 | f16 | bf16.
void attention_dtype(const Tensor& t, std::string_view name);
// int32, 1-D, `size` entries (what: where the size comes from), on `device`.
void index_vector(const Tensor& t, std::string_view name, int64_t size, std::string_view what,
                  Device device);
// Values of a host int32 indptr: [0] == 0, non-decreasing, last <= total (total_what names it).
void indptr_values(const Tensor& t, std::string_view name, int64_t total,
                   std::string_view total_what);
// The same for values already on the host as int64 (from an int32 or int64 tensor), which
// must also fit in int32; exact: the last entry must equal total.
void indptr_values(std::span<const int64_t> values, std::string_view name, int64_t total,
                   std::string_view total_what, bool exact);

}  // namespace flashpage::check
