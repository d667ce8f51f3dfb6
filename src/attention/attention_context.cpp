#include "flashpage/attention.h"

namespace flashpage {

AttentionContext AttentionContext::contiguous(float scale, bool causal) {
  AttentionContext c;
  c.scale = scale;
  c.causal = causal;
  return c;
}

AttentionContext AttentionContext::ragged(float scale, bool causal, int64_t num_qo_heads,
                                          int64_t num_kv_heads, int64_t head_dim,
                                          Tensor indptr) {
  AttentionContext c = contiguous(scale, causal);
  c.num_qo_heads = num_qo_heads;
  c.num_kv_heads = num_kv_heads;
  c.head_dim = head_dim;
  c.indptr = std::move(indptr);
  return c;
}

AttentionContext AttentionContext::paged(float scale, bool causal, int64_t num_qo_heads,
                                         int64_t num_kv_heads, int64_t head_dim, int64_t layer,
                                         int64_t start_pos, int64_t seq_len, KvCachePool* pool,
                                         const KvCacheMetadata* meta, Workspace* workspace) {
  AttentionContext c = contiguous(scale, causal);
  c.num_qo_heads = num_qo_heads;
  c.num_kv_heads = num_kv_heads;
  c.head_dim = head_dim;
  c.layer = layer;
  c.start_pos = start_pos;
  c.seq_len = seq_len;
  c.pool = pool;
  c.meta = meta;
  c.workspace = workspace;
  return c;
}

AttentionContext AttentionContext::paged_ragged(float scale, bool causal, int64_t num_qo_heads,
                                                int64_t num_kv_heads, int64_t head_dim,
                                                int64_t layer, Tensor indptr,
                                                Tensor start_positions, Tensor cache_lens,
                                                KvCachePool* pool, const KvCacheMetadata* meta,
                                                Workspace* workspace) {
  AttentionContext c = paged(scale, causal, num_qo_heads, num_kv_heads, head_dim, layer, 0, 0,
                             pool, meta, workspace);
  c.indptr = std::move(indptr);
  c.start_positions = std::move(start_positions);
  c.cache_lens = std::move(cache_lens);
  return c;
}

}  // namespace flashpage
