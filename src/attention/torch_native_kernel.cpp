// The torch_native backend: contiguous SDPA with PyTorch's semantics (top-left causal,
// broadcast masks). Paged and ragged contexts are served the seed's way: gather the pages
// into contiguous K/V, then SDPA per row — correct everywhere, but it allocates and moves the
// cache twice; the flashinfer backend reads the pages in place.
#include <algorithm>

#include "attention/sequence_views.h"
#include "core/check.h"

namespace flashpage {

namespace {

using attention_detail::check_step_kv;
using attention_detail::check_step_rows;
using attention_detail::host_index_values;
using attention_detail::host_indptr;
using attention_detail::lse_for;
using attention_detail::tokens_as_sequence;

// Row b's slice of a mask given for a whole batch ([S,L], [B,S,L] or [B,H,S,L]).
Tensor mask_for_row(const Tensor& mask, int64_t b, int64_t batch, int64_t kv_len) {
  if (!mask.defined()) return {};
  Tensor m = mask;
  if (m.dim() >= 3 && m.size(0) == batch && batch > 1) m = m.slice(0, b, b + 1);
  return m.slice(-1, 0, kv_len);
}

}  // namespace

void TorchNativeAttentionKernel::forward_into(const Tensor& query, const Tensor& key,
                                              const Tensor& value, const Tensor& mask,
                                              const AttentionContext& ctx, Tensor& out) {
  check::defined(query, "query");
  check::defined(out, "out");
  const AttentionParams params = ctx.params();
  if (!ctx.is_paged() && !ctx.is_ragged()) {
    check::dims(query, "query", 4, "[B,Hq,S,D]");
    sdpa(query, key, value, mask, params, out,
         lse_for(ctx, {query.size(0), query.size(1), query.size(2)}), ctx.stream);
    return;
  }
  if (!ctx.is_paged()) {  // ragged contiguous segments: one SDPA per segment
    check::dims(query, "query", 3, "[N,Hq,D]");
    check::dims(key, "key", 3, "[N,Hkv,D]");
    check::dims(value, "value", 3, "[N,Hkv,D]");
    check::require(!ctx.return_lse, "ctx.lse: return_lse is not supported by torch_native "
                                    "for ragged contexts (use flashinfer)");
    const int64_t n = query.size(0);
    const std::vector<int64_t> seg =
        host_indptr(ctx.indptr, "ctx.indptr", n, "query tokens N", ctx.stream);
    check::size_is(key, "key", 0, n, "query tokens N");
    check::size_is(value, "value", 0, n, "query tokens N");
    for (size_t b = 0; b + 1 < seg.size(); ++b) {
      if (seg[b + 1] == seg[b]) continue;
      Tensor seg_out = tokens_as_sequence(out, seg[b], seg[b + 1]);
      sdpa(tokens_as_sequence(query, seg[b], seg[b + 1]),
           tokens_as_sequence(key, seg[b], seg[b + 1]),
           tokens_as_sequence(value, seg[b], seg[b + 1]), mask, params, seg_out, {}, ctx.stream);
    }
    return;
  }
  // Paged: write the step's tokens, gather every row's cache, SDPA per row.
  check::require(ctx.meta != nullptr,
                 "torch_native: a paged context needs the step's metadata, got none");
  check::require(!ctx.return_lse, "ctx.lse: return_lse is not supported by torch_native for "
                                  "paged contexts (use flashinfer)");
  KvCachePool& pool = *ctx.pool;
  const bool ragged_q = ctx.is_ragged();
  std::vector<int64_t> qo;
  if (ragged_q) {
    check::dims(query, "query", 3, "[N,Hq,D]");
    check::require(!mask.defined(), "mask: not supported with ragged paged queries, got ",
                   mask.str());
    qo = host_indptr(ctx.indptr, "ctx.indptr", query.size(0), "query tokens N", ctx.stream);
    check_step_rows(*ctx.meta, qo);
    if (key.defined() || value.defined())
      pool.put_ragged(ctx.layer, qo,
                      host_index_values(ctx.start_positions, "ctx.start_positions", ctx.stream),
                      key, value, ctx.stream);
  } else {
    check::dims(query, "query", 4, "[B,Hq,S,D]");
    check_step_rows(*ctx.meta, query);
    if (key.defined() || value.defined()) {
      check_step_kv(key, value, {query.size(0), pool.config().kv_heads, query.size(2),
                                 pool.config().head_dim});
      pool.put(ctx.layer, ctx.start_pos, key.transpose(1, 2), value.transpose(1, 2),
               ctx.stream);
    }
  }
  const PagedKv kv = pool.layer(ctx.layer, *ctx.meta);
  const std::vector<int64_t>& lengths = ctx.meta->lengths;
  int64_t total = 0, longest = 0;
  for (int64_t len : lengths) {
    total += len;
    longest = std::max(longest, len);
  }
  // As in batch_prefill_paged, the mask spans the longest row and row b uses its first len(b)
  // columns.
  check::require(!mask.defined() || mask.size(-1) == longest, "mask: expected ", longest,
                 " keys in the last dim (the longest row), got ", mask.shape_str());
  // Scratch ordered on the step's stream: freed when this returns, its memory is not handed
  // to another allocation before the SDPA calls queued there have read it.
  Tensor k_all = Tensor::empty({total, kv.num_kv_heads(), kv.head_dim()}, kv.k_pages.dtype(),
                               kv.k_pages.device(), ctx.stream);
  Tensor v_all = Tensor::empty(k_all.shape(), k_all.dtype(), k_all.device(), ctx.stream);
  gather_paged_kv(kv, k_all, v_all, ctx.stream);
  const int64_t batch = int64_t(lengths.size());
  int64_t offset = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lengths[size_t(b)];
    Tensor k = tokens_as_sequence(k_all, offset, offset + len);
    Tensor v = tokens_as_sequence(v_all, offset, offset + len);
    offset += len;
    if (ragged_q) {
      if (qo[size_t(b) + 1] == qo[size_t(b)]) continue;
      Tensor row_out = tokens_as_sequence(out, qo[size_t(b)], qo[size_t(b) + 1]);
      sdpa(tokens_as_sequence(query, qo[size_t(b)], qo[size_t(b) + 1]), k, v, {}, params,
           row_out, {}, ctx.stream);
    } else {
      Tensor row_out = out.slice(0, b, b + 1);
      sdpa(query.slice(0, b, b + 1), k, v, mask_for_row(mask, b, batch, len), params, row_out,
           {}, ctx.stream);
    }
  }
}

}  // namespace flashpage
