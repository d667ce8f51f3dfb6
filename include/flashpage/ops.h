#pragma once
// The operations. Each looks at the device of its tensors and runs the CPU or the CUDA
// implementation; both follow the semantics of DESIGN.md. Ops given `out` allocate nothing.
//
// Streams: `stream` is a cudaStream_t passed as void* (nullptr = the legacy default stream),
// ignored on the CPU.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "flashpage/tensor.h"

namespace flashpage {

// Page layout: NHD = [num_pages, page_size, Hkv, D] (default), HND = [num_pages, Hkv, page_size, D].
enum class KvLayout : uint8_t { NHD, HND };
KvLayout parse_layout(std::string_view text);  // "nhd" | "hnd", case-insensitive
std::string_view layout_name(KvLayout layout);

// FlashInfer's CSR page table; int32 tensors on one device.
//   indptr [B+1]: pages of row b are indices[indptr[b] .. indptr[b+1]);
//   indices [>= indptr[B]]: physical page ids;
//   last_page_len [B]: 1..page_size (0 only for a row with no pages).
// Row length = page_size * (pages - 1) + last_page_len.
struct PageTable {
  Tensor indptr, indices, last_page_len;
  int64_t batch_size() const { return indptr.defined() ? indptr.numel() - 1 : 0; }
  // A copy on `device` (stream: as for Tensor::copy_).
  PageTable to(Device device, void* stream = nullptr) const;
};

// One layer's pages plus the table that addresses them.
struct PagedKv {
  Tensor k_pages, v_pages;  // same shape, dtype and device
  KvLayout layout = KvLayout::NHD;
  PageTable table;          // on the pages' device

  int64_t num_pages() const { return k_pages.size(0); }
  int64_t page_size() const { return k_pages.size(layout == KvLayout::NHD ? 1 : 2); }
  int64_t num_kv_heads() const { return k_pages.size(layout == KvLayout::NHD ? 2 : 1); }
  int64_t head_dim() const { return k_pages.size(3); }
};

// The variant knobs shared by all attention ops.
struct AttentionParams {
  float scale = 0.0f;           // <= 0: 1/sqrt(D)
  bool causal = false;          // paged/ragged: bottom-right; sdpa: top-left
  int window_left = -1;         // >= 0: query at position p sees keys >= p - window_left
  float logits_soft_cap = 0.0f; // > 0: s = cap * tanh(s / cap), applied to scaled logits
};

// Scratch memory for scheduled ops: device buffers for work lists and partial results, and a
// host staging area. Create once (per device / stream), reuse every step.
class Workspace {
 public:
  static constexpr size_t kDefaultBytes = size_t(256) << 20;
  // What the one-shot op overloads use: they plan one call, so the planner's fallback
  // (longer chunks when partials would not fit) is cheaper than a large buffer per call.
  static constexpr size_t kOneShotBytes = size_t(16) << 20;
  explicit Workspace(Device device = Device::cpu(), size_t bytes = kDefaultBytes);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Device device() const;
  size_t bytes() const;
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// A plain record returned by plan_*; the work lists it describes live in the Workspace.
// Valid until the next plan_* call on the same Workspace.
struct Plan {
  enum class Kind : uint8_t { none, decode, prefill } kind = Kind::none;
  Device device{};
  int64_t batch_size = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0;
  int64_t total_q_rows = 0;  // decode: batch_size; prefill: qo_indptr[B]
  int64_t num_work = 0;      // work items (row, KV chunk[, query tile])
  int64_t num_partials = 0;  // partial outputs that a merge combines (0: no split)
  int64_t grid = 0;          // blocks (CUDA) or tasks (CPU) the run launches; fixed for replays
  int64_t kv_chunk = 0;      // tokens per KV chunk chosen by the planner
  int64_t kv_tokens = 0;     // prefill: K/V tokens of all rows (sizes the kernel's L2 bands)
  int64_t paired_work = 0;   // prefill: leading items whose pairs (2p, 2p+1) are one query range
  int64_t head_parts = 1;    // decode on the streamed CUDA kernel: each row's KV heads run as
                             // this many separate work rows (set by the batch size and shapes
                             // alone, so a graph replays any re-plan of the same batch)
  uint64_t generation = 0;   // which plan_* call made it (numbered across all workspaces)
};

// ---- decode: q [B, Hq, D] (or [B, Hq, 1, D]), one query token per row ----------------------
// plan_decode reads the host copy of the page table (the same table as the one run uses, on
// the host); it splits long rows into KV chunks so the device is busy at any batch size.
// It also validates the table against kv's pages (ids in range, lengths consistent), so run
// need not read it back. kv.table is not read here (it is the device copy run will use), but
// run relies on it holding the same indptr as host_table (a plan may keep where a row's page
// ids start): page ids may change between plan and run, row lengths (and so indptr) may not.
// The work list goes up on `stream`: pass the runs' stream, and a re-plan into a workspace
// waits there for the runs of its earlier plans (nullptr: a synchronous upload). Not
// capturable: plan outside a graph, capture the runs.
Plan plan_decode(Workspace& ws, const PageTable& host_table, const PagedKv& kv,
                 int64_t num_qo_heads, void* stream = nullptr);
// No host synchronisation and no allocation; CUDA-graph capturable. lse: f32 [B, Hq] or undefined.
void batch_decode(Workspace& ws, const Plan& plan, const Tensor& q, const PagedKv& kv,
                  const AttentionParams& params, Tensor& out, const Tensor& lse = {},
                  void* stream = nullptr);
// One-shot form: plans with a temporary workspace and returns the output.
Tensor batch_decode(const Tensor& q, const PagedKv& kv, const AttentionParams& params = {},
                    Tensor* lse = nullptr);

// ---- prefill over pages --------------------------------------------------------------------
// Queries uniform [B, Hq, S, D] (qo_indptr undefined) or ragged [N, Hq, D] with int32
// qo_indptr [B+1]. causal is bottom-right. mask (uniform queries only), bool (true = keep) or
// additive float: [S, L], [B, S, L] or [B, 1|Hq, S, L] with L = the longest row; row b uses its
// first len(b) columns. A mask replaces causal. lse: f32 [B, Hq, S] / [N, Hq].
// host_qo_indptr: int32 [B+1] on the host for ragged queries, undefined for uniform ones
// (then qo_len_uniform is S). The run's qo_indptr must hold the planned split (the device
// copy): the CPU checks its values against the plan; on CUDA the kernels read the plan's own
// copy of the split, so a stale qo_indptr cannot send them past the query rows.
// stream: as for plan_decode.
Plan plan_prefill(Workspace& ws, const Tensor& host_qo_indptr, const PageTable& host_table,
                  const PagedKv& kv, int64_t qo_len_uniform, int64_t num_qo_heads,
                  void* stream = nullptr);
void batch_prefill_paged(Workspace& ws, const Plan& plan, const Tensor& q,
                         const Tensor& qo_indptr, const PagedKv& kv, const Tensor& mask,
                         const AttentionParams& params, Tensor& out, const Tensor& lse = {},
                         void* stream = nullptr);
Tensor batch_prefill_paged(const Tensor& q, const Tensor& qo_indptr, const PagedKv& kv,
                           const Tensor& mask = {}, const AttentionParams& params = {},
                           Tensor* lse = nullptr);

// ---- ragged prefill over contiguous segments (no cache) ------------------------------------
// q [Nq, Hq, D], k/v [Nkv, Hkv, D] (NHD); int32 qo_indptr [B+1]; kv_indptr [B+1] or undefined
// (= qo_indptr: self-attention per segment). causal is bottom-right. lse: f32 [Nq, Hq].
void batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& qo_indptr, const Tensor& kv_indptr,
                          const AttentionParams& params, Tensor& out, const Tensor& lse = {},
                          void* stream = nullptr);
Tensor batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& qo_indptr, const Tensor& kv_indptr = {},
                            const AttentionParams& params = {}, Tensor* lse = nullptr);

// ---- contiguous scaled-dot-product attention with PyTorch's semantics ----------------------
// q [B, Hq, S, D], k/v [B, Hkv, L, D] (Hq % Hkv == 0); mask bool (true = keep) or additive
// float, broadcastable to [B, Hq, S, L]; causal is top-left; mask and causal together is an
// error. window_left / soft cap as in AttentionParams. lse: f32 [B, Hq, S].
void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
          const AttentionParams& params, Tensor& out, const Tensor& lse = {},
          void* stream = nullptr);
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
            const AttentionParams& params = {}, Tensor* lse = nullptr);

// ---- the cache -----------------------------------------------------------------------------
// Writes token n of k/v ([N, Hkv, D], or [B, S, Hkv, D] read as N = B*S tokens; any strides)
// to row batch_indices[n] at position positions[n] (int32 [N], on the pages' device), through
// kv.table. Every (row, position) must lie inside its row's pages: the CPU throws otherwise;
// on CUDA (which reads no device value on the host) such a token, or one whose page id is
// outside the pool, is skipped.
void append_paged_kv(const Tensor& k, const Tensor& v, const Tensor& batch_indices,
                     const Tensor& positions, const PagedKv& kv, void* stream = nullptr);
// Copies the rows' tokens out of the pages into k_out/v_out [sum of lengths, Hkv, D] (NHD),
// row after row (row b starts at the sum of the earlier lengths). Reads the table's values on
// the host first (for a GPU table, a copy that waits for `stream`): not capturable.
void gather_paged_kv(const PagedKv& kv, Tensor& k_out, Tensor& v_out, void* stream = nullptr);

// Combines two partial attention results over disjoint key sets: v [N, H, D] in any float
// type, lse f32 [N, H] (natural log, -inf = no keys). v_out may alias v_a; lse_out may be
// undefined.
void merge_states(const Tensor& v_a, const Tensor& lse_a, const Tensor& v_b, const Tensor& lse_b,
                  Tensor& v_out, const Tensor& lse_out = {}, void* stream = nullptr);

// Host helpers for callers and tests.
std::vector<int64_t> row_lengths(const PageTable& host_table, int64_t page_size);

}  // namespace flashpage
