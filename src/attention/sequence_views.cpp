#include "attention/sequence_views.h"

#include "core/check.h"

namespace flashpage::attention_detail {

std::vector<int64_t> host_index_values(const Tensor& t, std::string_view name, void* stream) {
  check::dims(t, name, 1, "[n]");
  check::dtype_in(t, name, {DType::i32, DType::i64});
  Tensor h = t;
  if (!t.device().is_cpu()) {
    h = Tensor::empty(t.shape(), t.dtype(), Device::cpu());
    h.copy_(t, stream);  // after what the step's stream wrote there
  }
  h = h.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i)
    out[size_t(i)] = h.dtype() == DType::i32 ? h.data_as<int32_t>()[i] : h.data_as<int64_t>()[i];
  return out;
}

std::vector<int64_t> host_indptr(const Tensor& t, std::string_view name, int64_t tokens,
                                 std::string_view tokens_of, void* stream) {
  const std::vector<int64_t> p = host_index_values(t, name, stream);
  check::require(!p.empty(), name, ": expected [B+1] entries, got ", t.shape_str());
  check::indptr_values(p, name, tokens, tokens_of, /*exact=*/true);
  return p;
}

void check_step_kv(const Tensor& key, const Tensor& value, const Shape& expected) {
  check::dims(key, "key", 4, "[B,Hkv,S,D]");
  check::shape_is(key, "key", expected);
  check::shape_is(value, "value", expected);
}

void check_step_rows(const KvCacheMetadata& meta, const Tensor& query) {
  const size_t rows = meta.lengths.size();
  check::require(query.size(0) == int64_t(rows), "query: expected batch ", rows, " (", rows,
                 rows == 1 ? " row" : " rows", " in the step's metadata) in dim 0, got ",
                 query.shape_str());
}

void check_step_rows(const KvCacheMetadata& meta, const std::vector<int64_t>& qo_indptr) {
  const size_t rows = meta.lengths.size();
  check::require(qo_indptr.size() == rows + 1, "ctx.indptr: expected ", rows + 1,
                 " offsets (B+1, B = ", rows, rows == 1 ? " row" : " rows",
                 " in the step's metadata), got ", qo_indptr.size());
}

Tensor tokens_as_sequence(const Tensor& tokens, int64_t begin, int64_t end) {
  // [N, H, D] -> slice -> [1, n, H, D] (a pure re-indexing) -> [1, H, n, D].
  Tensor s = tokens.slice(0, begin, end);
  const Shape shape{1, end - begin, tokens.size(1), tokens.size(2)};
  const Shape strides{0, tokens.stride(0), tokens.stride(1), tokens.stride(2)};
  return s.as_strided(shape, strides).transpose(1, 2);
}

Tensor lse_for(const AttentionContext& ctx, const Shape& expected) {
  if (!ctx.return_lse) return {};
  check::require(ctx.lse.defined(), "ctx.lse: return_lse needs a preallocated f32 tensor ",
                 shape_to_string(expected));
  check::same_dtype(ctx.lse, "ctx.lse", DType::f32, "LSE is float32");
  check::shape_is(ctx.lse, "ctx.lse", expected);
  return ctx.lse;
}

}  // namespace flashpage::attention_detail
