#include "core/check.h"

#include <climits>
#include <cstdint>

#include "core/strided_span.h"

namespace flashpage::check {

int64_t element_count(const Shape& shape, DType dtype, std::string_view name) {
  for (int64_t size : shape)
    require(size >= 0, name, ": expected non-negative sizes, got ", shape_to_string(shape));
  for (int64_t size : shape)
    if (size == 0) return 0;
  int64_t n = 1, bytes = 0;
  for (int64_t size : shape)
    require(!__builtin_mul_overflow(n, size, &n), name,
            ": expected at most 2^63-1 bytes, got shape ", shape_to_string(shape),
            " (its element count overflows int64)");
  require(!__builtin_mul_overflow(n, int64_t(dtype_size(dtype)), &bytes), name,
          ": expected at most 2^63-1 bytes, got shape ", shape_to_string(shape), " of ",
          dtype_name(dtype), " (", n, " elements)");
  return n;
}

void defined(const Tensor& t, std::string_view name) {
  require(t.defined(), name, ": expected a tensor, got an undefined one");
}

void dims(const Tensor& t, std::string_view name, int64_t rank, std::string_view layout) {
  require(t.defined(), name, ": expected ", rank, " dims ", layout, ", got an undefined tensor");
  require(t.dim() == rank, name, ": expected ", rank, " dims ", layout, ", got ", t.shape_str());
}

void dtype_in(const Tensor& t, std::string_view name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype() == d) return;
  std::string list;
  for (DType d : allowed) list += (list.empty() ? "" : "|") + std::string(dtype_name(d));
  fail(name, ": expected dtype ", list, ", got ", dtype_name(t.dtype()));
}

void same_dtype(const Tensor& t, std::string_view name, DType expected, std::string_view of) {
  require(t.dtype() == expected, name, ": expected dtype ", dtype_name(expected), " (as ", of,
          "), got ", dtype_name(t.dtype()));
}

void same_device(const Tensor& t, std::string_view name, Device expected, std::string_view of) {
  require(t.device() == expected, name, ": expected device ", expected.str(), " (as ", of,
          "), got ", t.device().str());
}

void size_is(const Tensor& t, std::string_view name, int64_t dim, int64_t expected,
             std::string_view what) {
  require(t.size(dim) == expected, name, ": expected size ", expected, " (", what, ") in dim ",
          dim, ", got ", t.shape_str());
}

void shape_is(const Tensor& t, std::string_view name, const Shape& expected) {
  require(t.defined(), name, ": expected shape ", shape_to_string(expected),
          ", got an undefined tensor");
  require(t.shape() == expected, name, ": expected shape ", shape_to_string(expected), ", got ",
          t.shape_str());
}

void inner_contiguous(const Tensor& t, std::string_view name) {
  require(t.dim() == 0 || t.stride(-1) == 1 || t.size(-1) == 1, name,
          ": expected the last dim to be contiguous (stride 1), got strides ",
          shape_to_string(t.strides()));
}

void writable(const Tensor& t, std::string_view name) {
  if (t.numel() == 0) return;  // nothing to write twice
  for (int64_t d = 0; d < t.dim(); ++d)
    require(t.size(d) <= 1 || t.stride(d) != 0, name,
            ": expected an output with one element per index (no stride 0 on a dim of more "
            "than one element), got strides ", shape_to_string(t.strides()), " for shape ",
            t.shape_str());
}

void no_overlap(const Tensor& out, std::string_view out_name, const Tensor& in,
                std::string_view in_name, bool exact_alias_ok) {
  if (!out.defined() || !in.defined() || out.numel() == 0 || in.numel() == 0) return;
  if (!(out.device() == in.device())) return;
  const auto begin = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); };
  const auto span = [](const Tensor& t) {
    return uintptr_t(detail::span_elements(t)) * dtype_size(t.dtype());
  };
  const uintptr_t ob = begin(out), oe = ob + span(out), ib = begin(in), ie = ib + span(in);
  if (oe <= ib || ie <= ob) return;  // disjoint ranges
  const bool same_first = ob == ib;
  if (same_first && exact_alias_ok && out.shape() == in.shape() &&
      out.strides() == in.strides() && out.dtype() == in.dtype())
    return;
  const auto dense = [](const Tensor& t) { return detail::span_elements(t) == t.numel(); };
  require(!same_first && !(dense(out) && dense(in)), out_name, ": expected memory of its own, ",
          "got a tensor that overlaps ", in_name, " (", out.str(), " over ", in.str(),
          "); outputs must not share elements with inputs",
          exact_alias_ok ? " unless they are exactly the same tensor" : "");
}

void contiguous(const Tensor& t, std::string_view name) {
  require(t.is_contiguous(), name, ": expected a contiguous tensor, got strides ",
          shape_to_string(t.strides()), " for shape ", t.shape_str());
}

void head_dim(int64_t d, std::string_view name) {
  require(d >= 8 && d <= 256 && d % 8 == 0, name,
          ": expected head_dim a multiple of 8 in 8..256, got ", d);
}

void gqa(int64_t num_qo_heads, int64_t num_kv_heads) {
  require(num_qo_heads > 0 && num_kv_heads > 0 && num_qo_heads % num_kv_heads == 0,
          "heads: expected num_qo_heads % num_kv_heads == 0, got Hq=", num_qo_heads,
          " Hkv=", num_kv_heads);
}

void attention_dtype(const Tensor& t, std::string_view name) {
  dtype_in(t, name, {DType::f32, DType::f16, DType::bf16});
}

void index_vector(const Tensor& t, std::string_view name, int64_t size, std::string_view what,
                  Device device) {
  require(t.defined(), name, ": expected an int32 tensor [", size, "] (", what,
          "), got an undefined tensor");
  require(t.dim() == 1, name, ": expected 1 dim [", size, "] (", what, "), got ", t.shape_str());
  require(t.dtype() == DType::i32, name, ": expected dtype i32, got ", dtype_name(t.dtype()));
  require(t.size(0) == size, name, ": expected ", size, " entries (", what, "), got ",
          t.shape_str());
  same_device(t, name, device, "the other tensors");
  contiguous(t, name);
}

namespace {

// One indptr check over any storage: at(i) is entry i of n.
template <class At>
void check_indptr(At at, int64_t n, std::string_view name, int64_t total,
                  std::string_view total_what, bool exact) {
  if (n == 0) return;
  require(at(0) == 0, name, ": expected ", name, "[0] == 0, got ", at(0));
  for (int64_t i = 1; i < n; ++i)
    require(at(i) >= at(i - 1) && at(i) <= INT32_MAX, name,
            ": expected non-decreasing values below 2^31, got ", name, "[", i - 1, "]=",
            at(i - 1), ", ", name, "[", i, "]=", at(i));
  require(exact ? at(n - 1) == total : at(n - 1) <= total, name, ": expected the last entry ",
          exact ? "== " : "<= ", total, " (", total_what, "), got ", name, "[", n - 1, "]=",
          at(n - 1));
}

}  // namespace

void indptr_values(const Tensor& t, std::string_view name, int64_t total,
                   std::string_view total_what) {
  const int32_t* p = t.data_as<int32_t>();
  const int64_t s = t.stride(0);
  check_indptr([&](int64_t i) { return int64_t(p[i * s]); }, t.numel(), name, total,
               total_what, false);
}

void indptr_values(std::span<const int64_t> values, std::string_view name, int64_t total,
                   std::string_view total_what, bool exact) {
  check_indptr([&](int64_t i) { return values[size_t(i)]; }, int64_t(values.size()), name,
               total, total_what, exact);
}

}  // namespace flashpage::check
