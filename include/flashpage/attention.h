#pragma once
// The seed system's attention interface: a pluggable AttentionKernel with two backends,
// torch_native (contiguous SDPA, PyTorch mask semantics) and flashinfer (paged decode/prefill
// and ragged prefill, bottom-right causal), selected process-wide with a fallback.
#include <memory>
#include <string_view>

#include "flashpage/kv_cache.h"
#include "flashpage/ops.h"
#include "flashpage/tensor.h"

namespace flashpage {

enum class AttentionBackend { TorchNative, FlashInfer };
// Case-insensitive id ("torch_native", "flashinfer") or name ("TorchNative", "FlashInfer");
// blank means FlashInfer; anything else throws Error "expected torch_native|flashinfer".
AttentionBackend parse_backend(std::string_view text);
std::string_view backend_id(AttentionBackend backend);

// The per-call attention record of the seed, with named factories.
struct AttentionContext {
  float scale = 0.0f;  // <= 0: 1/sqrt(D)
  bool causal = false;
  int64_t num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  Tensor indptr;  // ragged: int32 [B+1] segment starts (query tokens)

  // Paged: the layer's new tokens are written at start_pos (uniform) or start_positions
  // (per row), then attention runs over the pool's pages with meta's table.
  int64_t layer = 0;
  int64_t start_pos = 0;
  int64_t seq_len = 0;
  KvCachePool* pool = nullptr;
  const KvCacheMetadata* meta = nullptr;
  Workspace* workspace = nullptr;
  Tensor start_positions;  // paged_ragged: int64/int32 [B] on the host
  Tensor cache_lens;       // paged_ragged: int64/int32 [B] on the host (tokens after this step)

  // Beyond the seed.
  int window_left = -1;
  float logits_soft_cap = 0.0f;
  void* stream = nullptr;  // cudaStream_t
  bool return_lse = false;
  Tensor lse;  // f32, filled by forward when return_lse ([B, Hq, S] / [N, Hq])

  static AttentionContext contiguous(float scale, bool causal);
  static AttentionContext ragged(float scale, bool causal, int64_t num_qo_heads,
                                 int64_t num_kv_heads, int64_t head_dim, Tensor indptr);
  static AttentionContext paged(float scale, bool causal, int64_t num_qo_heads,
                                int64_t num_kv_heads, int64_t head_dim, int64_t layer,
                                int64_t start_pos, int64_t seq_len, KvCachePool* pool,
                                const KvCacheMetadata* meta, Workspace* workspace);
  static AttentionContext paged_ragged(float scale, bool causal, int64_t num_qo_heads,
                                       int64_t num_kv_heads, int64_t head_dim, int64_t layer,
                                       Tensor indptr, Tensor start_positions, Tensor cache_lens,
                                       KvCachePool* pool, const KvCacheMetadata* meta,
                                       Workspace* workspace);

  bool is_paged() const { return pool != nullptr; }
  bool is_ragged_contiguous() const { return pool == nullptr && indptr.defined(); }
  bool is_ragged() const { return indptr.defined(); }
  AttentionParams params() const { return {scale, causal, window_left, logits_soft_cap}; }
};

class AttentionKernel {
 public:
  virtual ~AttentionKernel() = default;
  virtual AttentionBackend backend() const = 0;
  // query/key/value/mask may be undefined Tensors (the seed's null).
  virtual Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                         const Tensor& mask, const AttentionContext& ctx);
  // Same, writing into a preallocated output (no allocation: usable under CUDA graph capture).
  virtual void forward_into(const Tensor& query, const Tensor& key, const Tensor& value,
                            const Tensor& mask, const AttentionContext& ctx, Tensor& out) = 0;
};

// Contiguous attention: query [B, Hq, S, D], key/value [B, Hkv, L, D]; PyTorch's SDPA
// semantics (top-left causal, bool/additive broadcast masks). Paged contexts are served by
// gathering the pages first (the seed's fallback path).
class TorchNativeAttentionKernel final : public AttentionKernel {
 public:
  AttentionBackend backend() const override { return AttentionBackend::TorchNative; }
  void forward_into(const Tensor& query, const Tensor& key, const Tensor& value,
                    const Tensor& mask, const AttentionContext& ctx, Tensor& out) override;
};

// Paged decode when S == 1, paged prefill otherwise, ragged prefill for ragged contiguous
// contexts; bottom-right causal. Needs a paged or ragged context, and a workspace when paged.
class FlashInferAttentionKernel final : public AttentionKernel {
 public:
  AttentionBackend backend() const override { return AttentionBackend::FlashInfer; }
  void forward_into(const Tensor& query, const Tensor& key, const Tensor& value,
                    const Tensor& mask, const AttentionContext& ctx, Tensor& out) override;
};

// Process-wide selection, as the seed's AttentionBackends: FlashInfer falls back to
// TorchNative with a warning on stderr when it cannot run here.
AttentionKernel& install_backend(AttentionBackend wanted);
AttentionKernel& current_kernel();
// Why FlashInfer cannot run on this build/machine, or empty when it can.
std::string flashinfer_unavailable_reason();

}  // namespace flashpage
