// cuda::batch_prefill_paged, batch_prefill_ragged and sdpa. Each offers the call first to the
// Hopper kernel (prefill_hopper/, wgmma, sm_90a devices), then to the mma.sync tensor-core
// kernel (prefill_tc/, f16/bf16, head_dim 64/128/256, aligned strides); what neither covers
// runs on the generic kernel (generic_attention.h). prefill_select.h names the order.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/device_memory.h"
#include "core/strided_span.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/generic_attention.h"
#include "cuda/prefill_hopper/prefill_hopper.h"
#include "cuda/prefill_select.h"
#include "cuda/prefill_tc/prefill_tc.h"

namespace flashpage::cuda {
namespace {

// Per thread: what the calling thread's last prefill ran (another thread's calls do not
// change what a test on this one reads).
thread_local const char* g_last_prefill_kernel = "none";

// FLASHPAGE_PREFILL_KERNEL=tc: the benchmark's A/B switch, read once.
bool hopper_disabled() {
  static const bool disabled = [] {
    const char* v = std::getenv("FLASHPAGE_PREFILL_KERNEL");
    return v != nullptr && std::strcmp(v, "tc") == 0;
  }();
  return disabled;
}

// Launches the first tensor-core kernel that covers the call; false: the caller runs the
// generic kernel.
bool run_tensor_core_prefill(const PrefillTcParams& t, cudaStream_t stream) {
  if (!hopper_disabled() && run_prefill_hopper(t, stream)) {
    g_last_prefill_kernel = prefill_kernel_name(
        prefill_hopper_last_ran_pairs() ? PrefillKernel::hopper_pairs : PrefillKernel::hopper);
    return true;
  }
  if (run_prefill_tc(t, stream)) {
    g_last_prefill_kernel = prefill_kernel_name(PrefillKernel::tc);
    return true;
  }
  g_last_prefill_kernel = prefill_kernel_name(PrefillKernel::generic);
  return false;
}

enum class MaskShapes { paged, torch_broadcast };

// paged: [S, L], [B, S, L] or [B, 1|H, S, L]; torch_broadcast: rank 2..4, right-aligned to
// [B, H, S, L], size-1 dims broadcast.
MaskView make_mask_view(const Tensor& mask, MaskShapes shapes) {
  MaskView m;
  if (!mask.defined()) return m;
  check::require(mask.device().is_cuda(), "mask: expected a CUDA tensor, got ", mask.str());
  m.ptr = mask.data();
  m.dtype = mask.dtype();
  if (mask.dtype() == DType::boolean)
    m.kind = MaskKind::boolean;
  else if (mask.dtype() == DType::f32 || mask.dtype() == DType::f16 || mask.dtype() == DType::bf16)
    m.kind = MaskKind::additive;
  else
    check::fail("mask: expected bool or f32/f16/bf16, got ", dtype_name(mask.dtype()));
  const int64_t rank = mask.dim();
  check::require(rank >= 2 && rank <= 4, "mask: expected 2 to 4 dims, got ", mask.shape_str());
  auto stride_of = [&](int64_t d) { return mask.size(d) == 1 ? int64_t(0) : mask.stride(d); };
  m.stride_query = stride_of(rank - 2);
  m.stride_key = stride_of(rank - 1);  // [.., 1]: one value for every key
  if (shapes == MaskShapes::paged) {
    if (rank == 3) m.stride_batch = stride_of(0);  // [B, S, L]
    if (rank == 4) {
      m.stride_batch = stride_of(0);
      m.stride_head = stride_of(1);
    }
  } else {
    if (rank >= 3) m.stride_head = stride_of(rank - 3);
    if (rank == 4) m.stride_batch = stride_of(0);
  }
  return m;
}

void set_lse(GenericArgs& g, const Tensor& lse, int64_t batch_dim, int64_t token_dim,
             int64_t head_dim) {
  if (!lse.defined()) return;
  g.lse = lse.data_as<float>();
  g.lse_stride_batch = batch_dim >= 0 ? lse.stride(batch_dim) : 0;
  g.lse_stride_token = token_dim >= 0 ? lse.stride(token_dim) : 0;
  g.lse_stride_head = lse.stride(head_dim);
}

void set_common(GenericArgs& g, const Tensor& q, const AttentionParams& params,
                int64_t num_qo_heads, int64_t num_kv_heads) {
  check::require(q.stride(-1) == 1, "query: expected a contiguous last dim on CUDA, got stride ",
                 q.stride(-1));
  g.dtype = q.dtype();
  g.window_left = params.window_left;
  g.scale = params.scale;
  g.logits_soft_cap = params.logits_soft_cap;
  g.num_qo_heads = int32_t(num_qo_heads);
  g.group_size = int32_t(num_qo_heads / num_kv_heads);
  g.head_dim = int32_t(q.size(-1));
}

// The tensor-core kernel's record, filled from the generic one so both read the same facts.
PrefillTcParams tc_params(const GenericArgs& g, int64_t num_kv_heads, int64_t batch) {
  PrefillTcParams t;
  t.dtype = g.dtype;
  t.head_dim = g.head_dim;
  t.batch_size = int(batch);
  t.num_qo_heads = g.num_qo_heads;
  t.num_kv_heads = int(num_kv_heads);
  t.q = g.q.ptr;
  t.q_stride_batch = g.q.stride_batch;
  t.q_stride_token = g.q.stride_token;
  t.q_stride_head = g.q.stride_head;
  t.out = const_cast<void*>(g.out.ptr);
  t.out_stride_batch = g.out.stride_batch;
  t.out_stride_token = g.out.stride_token;
  t.out_stride_head = g.out.stride_head;
  t.qo_indptr = g.queries.indptr;
  t.qo_len = g.queries.uniform_len;
  t.lse = g.lse;
  t.lse_stride_batch = g.lse_stride_batch;
  t.lse_stride_token = g.lse_stride_token;
  t.lse_stride_head = g.lse_stride_head;
  t.scale = g.scale;
  t.logits_soft_cap = g.logits_soft_cap;
  t.window_left = g.window_left;
  t.causal = g.causal;
  t.bottom_right = g.bottom_right;
  if (g.mask.kind != MaskKind::none) {
    t.mask = g.mask.ptr;
    t.mask_dtype = g.mask.dtype;
    t.mask_strides[0] = g.mask.stride_batch;
    t.mask_strides[1] = g.mask.stride_head;
    t.mask_strides[2] = g.mask.stride_query;
    t.mask_strides[3] = g.mask.stride_key;
  }
  return t;
}

void set_strided_kv(PrefillTcParams& t, const StridedKv& kvs) {
  t.k = kvs.k.ptr;
  t.v = kvs.v.ptr;
  t.k_stride_unit = kvs.k.stride_batch;
  t.k_stride_token = kvs.k.stride_token;
  t.k_stride_head = kvs.k.stride_head;
  t.v_stride_unit = kvs.v.stride_batch;
  t.v_stride_token = kvs.v.stride_token;
  t.v_stride_head = kvs.v.stride_head;
  t.kv_indptr = kvs.rows.indptr;
  t.kv_len = kvs.rows.uniform_len;
}

StridedRef ref_of(const Tensor& t, int64_t batch_dim, int64_t token_dim, int64_t head_dim) {
  return {t.data(), batch_dim >= 0 ? t.stride(batch_dim) : 0, t.stride(token_dim),
          t.stride(head_dim)};
}

}  // namespace

PrefillKernel select_prefill_kernel(const PrefillTcParams& params) {
  if (!hopper_disabled() && prefill_hopper_covers(params)) return PrefillKernel::hopper;
  if (prefill_tc_covers(params)) return PrefillKernel::tc;
  return PrefillKernel::generic;
}

const char* prefill_kernel_name(PrefillKernel kernel) {
  switch (kernel) {
    case PrefillKernel::hopper: return "hopper";
    case PrefillKernel::hopper_pairs: return "hopper_pairs";
    case PrefillKernel::tc: return "tc";
    default: return "generic";
  }
}

const char* prefill_kernel_name(const PrefillTcParams& params) {
  return prefill_kernel_name(select_prefill_kernel(params));
}

const char* last_prefill_kernel() { return g_last_prefill_kernel; }

void batch_prefill_paged(const Workspace::Impl& ws, const Plan& plan, const Tensor& q,
                         const Tensor& qo_indptr, const PagedKv& kv, const Tensor& mask,
                         const AttentionParams& params, Tensor& out, const Tensor& lse,
                         void* stream) {
  GenericArgs g;
  set_common(g, q, params, plan.num_qo_heads, plan.num_kv_heads);
  check::require(out.stride(-1) == 1, "out: expected a contiguous last dim on CUDA");
  const bool ragged = qo_indptr.defined();
  if (ragged) {  // q [N, Hq, D]
    check::require(qo_indptr.device().is_cuda(), "qo_indptr: expected the device copy, got ",
                   qo_indptr.str());
    g.q = ref_of(q, -1, 0, 1);
    g.out = ref_of(out, -1, 0, 1);
    // The split the plan was made for (its device copy in the workspace): the work list and
    // the rows' geometry then cannot disagree, whatever the caller's qo_indptr holds now.
    g.queries = {ws.planned_qo_indptr(plan).data_as<const int32_t>(), 0,
                 int32_t(plan.batch_size)};
    set_lse(g, lse, -1, 0, 1);
  } else {  // q [B, Hq, S, D]
    g.q = ref_of(q, 0, 2, 1);
    g.out = ref_of(out, 0, 2, 1);
    g.queries = {nullptr, int32_t(q.size(2)), int32_t(plan.batch_size)};
    set_lse(g, lse, 0, 2, 1);
  }
  g.mask = make_mask_view(mask, MaskShapes::paged);
  g.causal = params.causal && !mask.defined();  // an explicit mask replaces causal
  g.bottom_right = true;
  g.work_ints = ws.device_ints();
  const PageTableView pages = make_page_table_view(kv);
  PrefillTcParams t = tc_params(g, plan.num_kv_heads, plan.batch_size);
  t.k = kv.k_pages.data();
  t.v = kv.v_pages.data();
  t.k_stride_unit = t.v_stride_unit = pages.stride_page;
  t.k_stride_token = t.v_stride_token = pages.stride_token;
  t.k_stride_head = t.v_stride_head = pages.stride_head;
  t.page_indptr = pages.indptr;
  t.page_indices = pages.indices;
  t.last_page_len = pages.last_page_len;
  t.page_size = pages.page_size;
  t.k_span = detail::span_elements(kv.k_pages);
  t.v_span = detail::span_elements(kv.v_pages);
  t.work_ints = g.work_ints;
  t.num_work_host = int(plan.num_work);
  t.work_tile_tokens = int(plan.kv_chunk);
  t.kv_tokens = plan.kv_tokens;
  // The Hopper kernel may leave the work list and cut the rows itself (three math
  // warpgroups, prefill_hopper/warpgroup_choice.h): the rows' total bounds its grid.
  t.num_qo_tokens = plan.total_q_rows;
  if (run_tensor_core_prefill(t, static_cast<cudaStream_t>(stream))) return;
  launch_generic_paged_planned(g, make_page_table_view(kv), kv.k_pages.data(), kv.v_pages.data(),
                               plan.grid, static_cast<cudaStream_t>(stream));
}

void batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& qo_indptr, const Tensor& kv_indptr,
                          const AttentionParams& params, Tensor& out, const Tensor& lse,
                          void* stream) {
  GenericArgs g;
  set_common(g, q, params, q.size(1), k.size(1));
  check::require(out.stride(-1) == 1 && k.stride(-1) == 1 && v.stride(-1) == 1,
                 "batch_prefill_ragged: expected out, k and v with a contiguous last dim on CUDA");
  const int32_t batch = int32_t(qo_indptr.numel() - 1);
  g.q = ref_of(q, -1, 0, 1);
  g.out = ref_of(out, -1, 0, 1);
  g.queries = {qo_indptr.data_as<const int32_t>(), 0, batch};
  set_lse(g, lse, -1, 0, 1);
  g.causal = params.causal;
  g.bottom_right = true;
  g.num_tokens = q.size(0);
  if (batch <= 0) return;
  StridedKv kvs;
  kvs.k = ref_of(k, -1, 0, 1);
  kvs.v = ref_of(v, -1, 0, 1);
  const Tensor& rows = kv_indptr.defined() ? kv_indptr : qo_indptr;
  kvs.rows = {rows.data_as<const int32_t>(), 0, batch};
  PrefillTcParams t = tc_params(g, k.size(1), batch);
  set_strided_kv(t, kvs);
  t.kv_tokens = k.size(0);
  t.k_span = detail::span_elements(k);
  t.v_span = detail::span_elements(v);
  t.num_qo_tokens = q.size(0);
  t.max_qo_len = -1;  // the Hopper kernel finds the longest row on the device
  PrefillTcParams bounded = t;  // what prefill_tc covers once it is given the bound
  bounded.max_qo_len = 0;
  if (select_prefill_kernel(t) != PrefillKernel::hopper && prefill_tc_covers(bounded)) {
    // prefill_tc's grid covers the longest segment: one small read of the offsets (a host
    // sync; the planned paged path is the one to capture in graphs there). Nq would be a
    // bound too, but a grid of B x Nq/64 mostly idle blocks costs more than the attention
    // itself at B = 64. The generic kernel (f32, other head dims, unaligned views) needs no
    // bound: no read, no sync.
    std::vector<int32_t> offsets(static_cast<size_t>(batch) + 1);
    detail::copy_bytes(offsets.data(), Device::cpu(), qo_indptr.data(), qo_indptr.device(),
                       offsets.size() * sizeof(int32_t), stream);  // waits for the stream
    int32_t longest = 0;
    for (int32_t b = 0; b < batch; ++b) longest = std::max(longest, offsets[b + 1] - offsets[b]);
    t.max_qo_len = longest;
  }
  if (run_tensor_core_prefill(t, static_cast<cudaStream_t>(stream))) return;
  launch_generic_strided(g, kvs, static_cast<cudaStream_t>(stream));
}

void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
          const AttentionParams& params, Tensor& out, const Tensor& lse, void* stream) {
  GenericArgs g;
  set_common(g, q, params, q.size(1), k.size(1));
  check::require(out.stride(-1) == 1 && k.stride(-1) == 1 && v.stride(-1) == 1,
                 "sdpa: expected out, k and v with a contiguous last dim on CUDA");
  const int64_t batch = q.size(0), num_q = q.size(2), num_kv = k.size(2);
  // The kernels count queries and keys in int32 (the CPU in int64): beyond, an Error rather
  // than a wrapped length.
  check::require(num_q <= INT32_MAX / std::max<int64_t>(batch, 1), "query: expected B x S <= ",
                 "2^31-1 query rows on CUDA, got ", q.shape_str());
  check::require(num_kv <= INT32_MAX, "key: expected at most 2^31-1 keys on CUDA, got ",
                 k.shape_str());
  g.q = ref_of(q, 0, 2, 1);
  g.out = ref_of(out, 0, 2, 1);
  g.queries = {nullptr, int32_t(num_q), int32_t(batch)};
  set_lse(g, lse, 0, 2, 1);
  g.mask = make_mask_view(mask, MaskShapes::torch_broadcast);
  g.causal = params.causal;
  g.bottom_right = false;  // PyTorch: top-left
  g.num_tokens = batch * num_q;
  StridedKv kvs;
  kvs.k = ref_of(k, 0, 2, 1);
  kvs.v = ref_of(v, 0, 2, 1);
  kvs.rows = {nullptr, int32_t(num_kv), int32_t(batch)};
  PrefillTcParams t = tc_params(g, k.size(1), batch);
  set_strided_kv(t, kvs);
  t.max_qo_len = int(num_q);
  t.kv_tokens = batch * num_kv;
  t.k_span = detail::span_elements(k);
  t.v_span = detail::span_elements(v);
  if (run_tensor_core_prefill(t, static_cast<cudaStream_t>(stream))) return;
  launch_generic_strided(g, kvs, static_cast<cudaStream_t>(stream));
}

}  // namespace flashpage::cuda
