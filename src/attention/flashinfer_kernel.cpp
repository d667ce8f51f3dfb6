// The flashinfer backend: paged decode (S == 1), paged prefill (S > 1), ragged prefill over
// contiguous segments; causal is bottom-right.
#include <algorithm>

#include "attention/sequence_views.h"
#include "core/check.h"
#include "ops/workspace.h"

namespace flashpage {

namespace {

using attention_detail::check_step_kv;
using attention_detail::check_step_rows;
using attention_detail::host_index_values;
using attention_detail::host_indptr;
using attention_detail::lse_for;

// Plans once per step: layers after the first find the plan of the same table and shape.
// Ragged queries (qo_len -1) give their split as host values in qo.
// The upload goes on the step's stream, after the runs of the previous plan there.
const Plan& plan_for_step(Workspace& ws, const KvCacheMetadata& meta, const PagedKv& kv,
                          int64_t qo_len, const std::vector<int64_t>& qo, int64_t num_qo_heads,
                          void* stream) {
  auto& cache = ws.impl().cached;
  const bool hit = cache.table_owner == &meta && cache.table_version == meta.version &&
                   cache.qo_len == qo_len && cache.qo_indptr == qo &&
                   cache.plan.generation == ws.impl().generation &&
                   cache.plan.num_qo_heads == num_qo_heads;
  if (!hit) {
    if (qo_len == 1) {
      cache.plan = plan_decode(ws, meta.host, kv, num_qo_heads, stream);
    } else {
      std::vector<int32_t> qo32(qo.begin(), qo.end());  // checked to fit int32 by host_indptr
      const Tensor host_qo = qo.empty() ? Tensor()
                                        : Tensor::from_blob(qo32.data(), {int64_t(qo32.size())},
                                                            DType::i32);
      cache.plan = plan_prefill(ws, host_qo, meta.host, kv, qo_len < 0 ? 0 : qo_len,
                                num_qo_heads, stream);
    }
    cache.table_owner = &meta;
    cache.table_version = meta.version;
    cache.qo_len = qo_len;
    cache.qo_indptr = qo;
  }
  return cache.plan;
}

void check_paged_context(const AttentionContext& ctx) {
  check::require(ctx.workspace != nullptr,
                 "flashinfer: a paged context needs a workspace (AttentionContext::paged(..., "
                 "workspace)), got none");
  check::require(ctx.meta != nullptr,
                 "flashinfer: a paged context needs the step's metadata (pool.metadata(...)), "
                 "got none");
}

}  // namespace

void FlashInferAttentionKernel::forward_into(const Tensor& query, const Tensor& key,
                                             const Tensor& value, const Tensor& mask,
                                             const AttentionContext& ctx, Tensor& out) {
  check::defined(query, "query");
  check::defined(out, "out");
  const AttentionParams params = ctx.params();
  if (ctx.is_paged()) {
    check_paged_context(ctx);
    KvCachePool& pool = *ctx.pool;
    Workspace& ws = *ctx.workspace;
    if (ctx.is_ragged()) {
      // Ragged queries over the cache: query [N, Hq, D], key/value [N, Hkv, D].
      check::dims(query, "query", 3, "[N,Hq,D]");
      check::require(!mask.defined(), "mask: not supported with ragged paged queries");
      const std::vector<int64_t> qo =
          host_indptr(ctx.indptr, "ctx.indptr", query.size(0), "query tokens N", ctx.stream);
      check_step_rows(*ctx.meta, qo);
      if (key.defined() || value.defined()) {
        const std::vector<int64_t> starts =
            host_index_values(ctx.start_positions, "ctx.start_positions", ctx.stream);
        pool.put_ragged(ctx.layer, qo, starts, key, value, ctx.stream);
      }
      const PagedKv kv = pool.layer(ctx.layer, *ctx.meta);
      const Plan& plan = plan_for_step(ws, *ctx.meta, kv, -1, qo, query.size(1), ctx.stream);
      // The plan's own copy of the split (the same values, checked above), whatever form
      // ctx.indptr has: host or device, int32 or int64, strided or not.
      const Tensor planned_qo = ws.impl().planned_qo_indptr(plan);
      batch_prefill_paged(ws, plan, query, planned_qo, kv, {}, params, out,
                          lse_for(ctx, {query.size(0), query.size(1)}), ctx.stream);
      return;
    }
    check::dims(query, "query", 4, "[B,Hq,S,D]");
    check_step_rows(*ctx.meta, query);
    const int64_t batch = query.size(0), heads = query.size(1), seq = query.size(2);
    if (key.defined() || value.defined()) {
      check_step_kv(key, value, {batch, pool.config().kv_heads, seq, pool.config().head_dim});
      // The step's new tokens go into the pool first: [B, Hkv, S, D] -> [B, S, Hkv, D].
      pool.put(ctx.layer, ctx.start_pos, key.transpose(1, 2), value.transpose(1, 2),
               ctx.stream);
    }
    const PagedKv kv = pool.layer(ctx.layer, *ctx.meta);
    const Plan& plan = plan_for_step(ws, *ctx.meta, kv, seq, {}, heads, ctx.stream);
    if (seq == 1 && !mask.defined()) {
      // out [B, Hq, 1, D] as the query (batch_decode takes that form, any strides).
      check::shape_is(out, "out", query.shape());
      const Tensor lse = lse_for(ctx, {batch, heads, 1});
      batch_decode(ws, plan, query, kv, params, out, lse.defined() ? lse.select(2, 0) : Tensor(),
                   ctx.stream);
    } else {
      const Plan& prefill =
          seq == 1 ? plan_prefill(ws, {}, ctx.meta->host, kv, 1, heads, ctx.stream) : plan;
      batch_prefill_paged(ws, prefill, query, {}, kv, mask, params, out,
                          lse_for(ctx, {batch, heads, seq}), ctx.stream);
    }
    return;
  }
  if (ctx.is_ragged_contiguous()) {
    check::dims(query, "query", 3, "[N,Hq,D]");
    check::require(!mask.defined(), "mask: not supported by flashinfer ragged prefill");
    Tensor indptr = ctx.indptr;
    check::defined(indptr, "ctx.indptr");
    if (indptr.dtype() != DType::i32 || !(indptr.device() == query.device()) ||
        !indptr.is_contiguous()) {
      // The kernels take int32 on the queries' device: another form (host, int64, strided) is
      // read, checked and put there as the op's own copy, ordered on the step's stream.
      const std::vector<int64_t> values =
          host_indptr(indptr, "ctx.indptr", query.size(0), "query tokens N", ctx.stream);
      Tensor host = Tensor::empty({int64_t(values.size())}, DType::i32);
      std::copy(values.begin(), values.end(), host.data_as<int32_t>());
      indptr = Tensor::empty(host.shape(), DType::i32, query.device(), ctx.stream);
      indptr.copy_(host, ctx.stream);
    }
    batch_prefill_ragged(query, key, value, indptr, {}, params, out,
                         lse_for(ctx, {query.size(0), query.size(1)}), ctx.stream);
    return;
  }
  check::fail("flashinfer: expected a paged context (AttentionContext::paged / paged_ragged) or "
              "a ragged one (AttentionContext::ragged), got a contiguous context; use the "
              "torch_native backend for contiguous attention");
}

}  // namespace flashpage
