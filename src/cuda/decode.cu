// cuda::batch_decode: picks the decode kernel for (dtype, head dim), launches it over the
// planned work list, then merges split rows.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstdint>

#include "core/check.h"
#include "core/device_memory.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/decode_args.h"
#include "cuda/device_types.cuh"
#include "cuda/generic_attention.h"
#include "cuda/kernel_attributes.h"
#include "cuda/ptx_sm90.cuh"
#include "cuda/softmax_state.cuh"
#include "cuda/tensor_map.h"
#include "ops/decode_kernel_choice.h"
#include "ops/decode_tiling.h"
#include "ops/stream_decode_plan.h"

namespace flashpage::cuda {
namespace {

constexpr int kMergeThreads = 256;
constexpr int kMergeUnroll = 4;  // partial rows in flight per thread

// Running merge of normalised partials o_s with natural-log weights lse_s:
// out = sum_s exp(lse_s - L) o_s, L = logsumexp_s lse_s, kept as (max m, sum d, acc) so two
// folds of disjoint slot sets combine exactly (the SoftmaxState rule for many states).
struct PartialFold {
  float m = kNegInf, d = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  __device__ __forceinline__ void add(float m2, float d2, float4 acc2) {
    const float m_new = fmaxf(m, m2);
    if (m_new == kNegInf) return;  // both empty (slots that saw no key)
    const float a = m == kNegInf ? 0.0f : __expf(m - m_new);
    const float b = m2 == kNegInf ? 0.0f : __expf(m2 - m_new);
    d = d * a + d2 * b;
    acc.x = acc.x * a + acc2.x * b;
    acc.y = acc.y * a + acc2.y * b;
    acc.z = acc.z * a + acc2.z * b;
    acc.w = acc.w * a + acc2.w * b;
    m = m_new;
  }
};

// The split merge: one group of `group_lanes` threads (a power of two <= 32, so a group
// sits inside a warp) per (row, query head, 4 dims). Each thread folds every group_lanes-th
// slot of the row with kMergeUnroll 16-byte loads in flight, then the group combines its
// folds with shuffles: a row split into 132 pieces costs ~one round trip per thread, and a
// batch of rows split in 2-3 pieces is one thread per output quad. Rows that were not split
// are skipped (the decode kernel wrote them). All lanes reach the shuffles.
// Launched as a programmatic dependent of the streamed decode kernel, its blocks may start
// while that kernel's last blocks finish and wait in griddepcontrol.wait for the partials.
// early_plan: the plan (header, merge_indptr) is read before that wait, overlapping the decode
// grid's end: it was uploaded before the decode kernel started, so it is not the decode
// kernel's output (session 17's prediction: ~1 µs per merging call; off until a GPU run
// measures it, FLASHPAGE_DECODE_MERGE_EARLY_PLAN=1).
template <class T>
__global__ void __launch_bounds__(kMergeThreads)
    decode_merge_kernel(const __grid_constant__ DecodeArgs a, int head_dim, int group_lanes,
                        int items_offset, bool early_plan) {
  if (!early_plan) ptx::griddepcontrol_wait();
  const int32_t* ints = a.work_ints;
  const int num_work = ints[0], num_partials = ints[1], batch = ints[2];
  // Sizes come from the device header so a replayed graph follows a re-plan; items_offset,
  // a kernel argument, depends only on the grid (workspace.h), which a re-plan of the same
  // batch size keeps.
  const int32_t* merge_indptr =
      ints + items_offset + int64_t(num_work) * Workspace::Impl::kWorkFields;
  const float* partial_lse = a.partial_out + int64_t(num_partials) * a.num_qo_heads * head_dim;

  // `batch` counts virtual rows (decode_args.h, head_parts_log2): virtual row v is row
  // v >> log2 P's query heads [(v % P) * Hq / P, +Hq / P).
  const int quads = head_dim / 4;
  const int part_heads = a.num_qo_heads >> a.head_parts_log2;
  const int64_t thread = int64_t(blockIdx.x) * kMergeThreads + threadIdx.x;
  const int64_t unit = thread / group_lanes;
  const int sub = int(thread % group_lanes);
  const bool in_range = unit < int64_t(batch) * part_heads * quads;
  int row = 0, head = 0, dim = 0, s0 = 0, s1 = 0;
  if (in_range) {
    const int vrow = int(unit / (int64_t(part_heads) * quads));
    const int rest = int(unit - int64_t(vrow) * part_heads * quads);
    row = vrow >> a.head_parts_log2;
    head = (vrow - (row << a.head_parts_log2)) * part_heads + rest / quads;
    dim = (rest % quads) * 4;
    s0 = merge_indptr[vrow];
    s1 = merge_indptr[vrow + 1];
  }
  if (early_plan) ptx::griddepcontrol_wait();  // every thread, before any partial is read
  auto lse_of = [&](int s) { return partial_lse[int64_t(s) * a.num_qo_heads + head]; };
  auto row_of = [&](int s) {
    return *reinterpret_cast<const float4*>(
        a.partial_out + (int64_t(s) * a.num_qo_heads + head) * head_dim + dim);
  };

  PartialFold fold;
  const int step = group_lanes;
  int s = s0 + sub;
  for (; s + (kMergeUnroll - 1) * step < s1; s += kMergeUnroll * step) {
    float w[kMergeUnroll];
    float4 o[kMergeUnroll];
#pragma unroll
    for (int u = 0; u < kMergeUnroll; ++u) {
      w[u] = lse_of(s + u * step);
      o[u] = row_of(s + u * step);
    }
#pragma unroll
    for (int u = 0; u < kMergeUnroll; ++u) fold.add(w[u], 1.0f, o[u]);
  }
  for (; s < s1; s += step) fold.add(lse_of(s), 1.0f, row_of(s));
  for (int offset = 1; offset < group_lanes; offset <<= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, fold.m, offset);
    const float d2 = __shfl_xor_sync(0xffffffffu, fold.d, offset);
    float4 acc2;
    acc2.x = __shfl_xor_sync(0xffffffffu, fold.acc.x, offset);
    acc2.y = __shfl_xor_sync(0xffffffffu, fold.acc.y, offset);
    acc2.z = __shfl_xor_sync(0xffffffffu, fold.acc.z, offset);
    acc2.w = __shfl_xor_sync(0xffffffffu, fold.acc.w, offset);
    fold.add(m2, d2, acc2);
  }
  if (!in_range || s0 == s1 || sub != 0) return;
  const float inv = fold.d > 0.0f ? 1.0f / fold.d : 0.0f;
  T* out = static_cast<T*>(a.out) + int64_t(row) * a.out_stride_batch +
           int64_t(head) * a.out_stride_head + dim;
  out[0] = from_float<T>(fold.acc.x * inv);
  out[1] = from_float<T>(fold.acc.y * inv);
  out[2] = from_float<T>(fold.acc.z * inv);
  out[3] = from_float<T>(fold.acc.w * inv);
  if (a.lse != nullptr && dim == 0)
    a.lse[int64_t(row) * a.lse_stride_batch + int64_t(head) * a.lse_stride_head] =
        fold.d > 0.0f ? fold.m + __logf(fold.d) : kNegInf;
}

template <class T>
void dispatch_head_dim(const DecodeArgs& args, int64_t head_dim, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
    case 64: launch_paged_decode<T, 64>(args, grid, stream); return;
    case 128: launch_paged_decode<T, 128>(args, grid, stream); return;
    case 256: launch_paged_decode<T, 256>(args, grid, stream); return;
    default:
      check::fail("batch_decode: head_dim ", head_dim,
                  " is not supported by the CUDA decode kernel (expected 64, 128 or 256)");
  }
}

template <class T>
void dispatch_stream_head_dim(const StreamDecodeArgs& args, int64_t head_dim, int grid,
                              cudaStream_t stream) {
  switch (head_dim) {
    case 64: launch_stream_decode<T, 64>(args, grid, stream); return;
    case 128: launch_stream_decode<T, 128>(args, grid, stream); return;
    default: launch_stream_decode<T, 256>(args, grid, stream); return;
  }
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FP_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Experiment knobs, read once (bench/NOTES.md records what they showed):
// FLASHPAGE_DECODE_STAGES=N caps the streamed kernel's ring depth (>= 2),
// FLASHPAGE_DECODE_L2_HINT=0 drops its L2 evict-first hint on K/V bulk copies (TMA boxes
// keep it),
// FLASHPAGE_DECODE_ABLATE=bits leaves stages out to time the rest (StreamDecodeArgs::ablate;
// the results are wrong: benchmarks only), FLASHPAGE_DECODE_TMA=0 keeps K/V on per-token bulk
// copies, =1 makes a refused tensor map an error (for A/B runs).
struct StreamKnobs {
  int max_stages = 0;  // 0: as many as fit
  bool l2_hint = true;
  int ablate = 0;
  int tma = -1;  // -1: where the driver encodes the maps, 0: never, 1: required
  // FLASHPAGE_DECODE_TMA_PROMOTION=0|128|256: the K/V maps' L2 promotion. None by default:
  // promoting each 128-byte row request to 256 bytes cost 6-8% of DRAM throughput (run 5).
  int tma_promotion = 0;
  // FLASHPAGE_DECODE_PRODUCERS=P: P producer warps, clamped to what the kernel and the ring
  // allow. 0 (the default): by StreamDecodeTiling::producer_warps_by_ring, which gives page-1
  // rings of 4+ stages more than 2 (sessions 40-41: faster, tests and memcheck pass).
  int producers = 0;
  // FLASHPAGE_DECODE_MERGE_EARLY_PLAN=1: the merge reads the plan before its wait (above).
  bool merge_early_plan = false;
};
const StreamKnobs& stream_knobs() {
  static const StreamKnobs knobs = [] {
    StreamKnobs k;
    if (const char* v = std::getenv("FLASHPAGE_DECODE_STAGES")) k.max_stages = std::atoi(v);
    if (const char* v = std::getenv("FLASHPAGE_DECODE_L2_HINT")) k.l2_hint = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_DECODE_ABLATE")) k.ablate = std::atoi(v);
    if (const char* v = std::getenv("FLASHPAGE_DECODE_TMA")) k.tma = std::atoi(v) != 0 ? 1 : 0;
    if (const char* v = std::getenv("FLASHPAGE_DECODE_TMA_PROMOTION")) k.tma_promotion = std::atoi(v);
    if (const char* v = std::getenv("FLASHPAGE_DECODE_PRODUCERS")) k.producers = std::atoi(v);
    if (const char* v = std::getenv("FLASHPAGE_DECODE_MERGE_EARLY_PLAN"))
      k.merge_early_plan = std::atoi(v) != 0;
    return k;
  }();
  return knobs;
}

// The split merge; `programmatic`: may start before the previous kernel on the stream has
// finished (it waits in griddepcontrol.wait), hiding its launch.
template <class T>
void launch_merge(const DecodeArgs& args, int batch, int heads, int head_dim, int max_slots,
                  int items_offset, bool programmatic, cudaStream_t stream) {
  // Threads per output quad: enough that each folds ~kMergeUnroll slots of the longest row.
  int group_lanes = 1;
  while (group_lanes < 32 && group_lanes * kMergeUnroll < max_slots) group_lanes *= 2;
  // The decode kernels run with the largest shared-memory carveout; the merge asks for the
  // same, so the SMs need not reconfigure L1 / shared memory between the two launches.
  allow_shared_memory<decode_merge_kernel<T>>(0);
  const int64_t threads = int64_t(batch) * heads * (head_dim / 4) * group_lanes;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned((threads + kMergeThreads - 1) / kMergeThreads));
  config.blockDim = dim3(kMergeThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  FP_CUDA_CHECK(cudaLaunchKernelEx(&config, decode_merge_kernel<T>, args, head_dim, group_lanes,
                                   items_offset, stream_knobs().merge_early_plan));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// What 16-byte copies of K/V rows need (both tensor-core kernels): aligned page bases and
// page/token/head strides of whole 8-element vectors.
bool kv_layout_ok(const DecodeArgs& a) {
  return aligned16(a.k_pages) && aligned16(a.v_pages) && a.pages.stride_page % 8 == 0 &&
         a.pages.stride_token % 8 == 0 && a.pages.stride_head % 8 == 0;
}

// What the streamed kernel's 16-byte bulk copies and 4-byte stores need besides.
bool stream_layout_ok(const DecodeArgs& a) {
  return kv_layout_ok(a) && aligned16(a.q) && aligned16(a.out) && a.q_stride_batch % 8 == 0 &&
         a.q_stride_head % 8 == 0 && a.out_stride_batch % 2 == 0 && a.out_stride_head % 2 == 0;
}

// The streamed kernel's K/V tensor maps (decode_args.h) for boxes of `box_tokens` tokens.
// False where the driver refuses them (kv_box_tokens then stays 0: bulk copies).
bool make_stream_kv_maps(StreamDecodeArgs& sa, const PagedKv& kv, int head_dim, int box_tokens) {
  using Tiling = StreamDecodeTiling;
  const PageTableView& pt = sa.d.pages;
  if (head_dim % 64 != 0) return false;
  const int64_t elem = Tiling::kElemBytes;
  const uint64_t dims[5] = {64, uint64_t(pt.page_size), uint64_t(head_dim / 64),
                            uint64_t(sa.d.num_kv_heads), uint64_t(kv.k_pages.size(0))};
  const uint64_t strides[4] = {uint64_t(pt.stride_token * elem), 64 * uint64_t(elem),
                               uint64_t(pt.stride_head * elem), uint64_t(pt.stride_page * elem)};
  const uint32_t box[5] = {64, uint32_t(box_tokens), uint32_t(head_dim / 64),
                           uint32_t(sa.heads_per_block), 1};
  const int promotion = stream_knobs().tma_promotion;
  return encode_tensor_map_16bit_swizzle128(sa.k_map, sa.d.k_pages, dims, strides, box, promotion) &&
         encode_tensor_map_16bit_swizzle128(sa.v_map, sa.d.v_pages, dims, strides, box, promotion);
}

// f32 pages: the generic kernel, one warp per (row, head), whole rows (no split needed).
void decode_generic(const Plan& plan, const Tensor& q, const PagedKv& kv,
                    const AttentionParams& params, Tensor& out, const Tensor& lse,
                    cudaStream_t stream) {
  GenericArgs g;
  g.dtype = q.dtype();
  g.q = {q.data(), q.stride(0), 0, q.stride(1)};
  g.out = {out.data(), out.stride(0), 0, out.stride(1)};
  if (lse.defined()) {
    g.lse = lse.data_as<float>();
    g.lse_stride_batch = lse.stride(0);
    g.lse_stride_head = lse.stride(1);
  }
  g.queries = {nullptr, 1, int32_t(plan.batch_size)};
  g.causal = false;  // the single query is the last position: it sees every key
  g.bottom_right = true;
  g.window_left = params.window_left;
  g.scale = params.scale;
  g.logits_soft_cap = params.logits_soft_cap;
  g.num_qo_heads = int32_t(plan.num_qo_heads);
  g.group_size = int32_t(plan.num_qo_heads / plan.num_kv_heads);
  g.head_dim = int32_t(plan.head_dim);
  g.num_tokens = plan.batch_size;
  launch_generic_paged(g, make_page_table_view(kv), kv.k_pages.data(), kv.v_pages.data(), stream);
}

}  // namespace

void batch_decode(const Workspace::Impl& ws, const Plan& plan, const Tensor& q, const PagedKv& kv,
                  const AttentionParams& params, Tensor& out, const Tensor& lse, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (plan.batch_size == 0 || plan.num_qo_heads == 0) return;
  // The planner recorded which kernel its work list is for (ops/decode_kernel_choice.h).
  const auto kernel = static_cast<DecodeKernel>(ws.host_ints.size() > 3 ? ws.host_ints[3] : 0);
  if (q.dtype() == DType::f32 || kernel == DecodeKernel::generic) {
    decode_generic(plan, q, kv, params, out, lse, stream);
    return;
  }
  check::require(q.stride(2) == 1 && out.stride(2) == 1,
                 "batch_decode: expected q and out with a contiguous last dim on CUDA");
  DecodeArgs args;
  args.q = q.data();
  args.q_stride_batch = q.stride(0);
  args.q_stride_head = q.stride(1);
  args.k_pages = kv.k_pages.data();
  args.v_pages = kv.v_pages.data();
  args.pages = make_page_table_view(kv);
  args.out = out.data();
  args.out_stride_batch = out.stride(0);
  args.out_stride_head = out.stride(1);
  if (lse.defined()) {
    args.lse = lse.data_as<float>();
    args.lse_stride_batch = lse.stride(0);
    args.lse_stride_head = lse.stride(1);
  }
  args.work_ints = ws.device_ints();
  args.partial_out = ws.partial_out();
  args.num_qo_heads = int32_t(plan.num_qo_heads);
  args.num_kv_heads = int32_t(plan.num_kv_heads);
  args.group_size = int32_t(plan.num_qo_heads / plan.num_kv_heads);
  args.scale = params.scale;
  args.logits_soft_cap = params.logits_soft_cap;
  args.window_left = params.window_left;
  check::require(plan.head_parts >= 1 && std::has_single_bit(uint64_t(plan.head_parts)) &&
                     plan.num_kv_heads % plan.head_parts == 0,
                 "batch_decode: the plan's head_parts must be a power of two dividing ",
                 plan.num_kv_heads, " KV heads, got ", plan.head_parts);
  args.head_parts_log2 = std::countr_zero(uint64_t(plan.head_parts));

  if (kernel == DecodeKernel::stream) {
    if (!stream_layout_ok(args)) {  // unaligned views: the generic kernel reads whole rows
      decode_generic(plan, q, kv, params, out, lse, stream);
      return;
    }
    StreamDecodeArgs sa;
    sa.d = args;
    // Each block streams `heads` KV heads of one head part (Plan::head_parts), on the
    // planner's block shape (plan.cpp).
    const int d = int(plan.head_dim);
    const int planned_box = StreamDecodeTiling::planned_box_tokens(kv.page_size());
    const StreamDecodeTiling::Block block = stream_decode_block(
        args.num_kv_heads, plan.head_parts, d, args.group_size, kv.page_size());
    const int heads = block.heads, warps = block.warps;
    const bool combine = block.combine;
    sa.heads_per_block = heads;
    sa.consumer_warps = warps;
    sa.combine = combine;
    sa.query_groups = StreamDecodeTiling::query_groups(args.group_size);
    if (stream_knobs().tma != 0) {
      if (make_stream_kv_maps(sa, kv, d, planned_box)) sa.kv_box_tokens = planned_box;
      check::require(sa.kv_box_tokens > 0 || stream_knobs().tma != 1,
                     "batch_decode: FLASHPAGE_DECODE_TMA=1 but the driver refused the K/V "
                     "tensor maps (page_size ", kv.page_size(), ", head_dim ", d, ")");
    }
    const int box_tokens = sa.kv_box_tokens;  // 0: the maps were refused or not asked for
    sa.stages = StreamDecodeTiling::stages(heads, warps, d, args.group_size, box_tokens, combine);
    if (stream_knobs().max_stages >= 2) sa.stages = std::min(sa.stages, stream_knobs().max_stages);
    sa.smem_bytes =
        StreamDecodeTiling::smem_bytes(heads, warps, d, args.group_size, box_tokens, combine,
                                       sa.stages);
    sa.producer_warps =
        StreamDecodeTiling::producer_warps(stream_knobs().producers, warps, d, sa.stages,
                                           box_tokens);
    sa.l2_evict_first = stream_knobs().l2_hint;
    sa.ablate = stream_knobs().ablate;
    sa.heads_contiguous = args.pages.stride_head == plan.head_dim;
    if (q.dtype() == DType::bf16)
      dispatch_stream_head_dim<__nv_bfloat16>(sa, plan.head_dim, int(plan.grid), stream);
    else
      dispatch_stream_head_dim<__half>(sa, plan.head_dim, int(plan.grid), stream);
  } else if (plan.grid > 0) {
    if (!kv_layout_ok(args)) {  // its cp.async reads 16-byte K/V vectors
      decode_generic(plan, q, kv, params, out, lse, stream);
      return;
    }
    // KV heads fastest (see decode_kernel.cuh); blocks past grid.y's limit loop over items.
    constexpr int64_t kMaxGridY = 65535;
    const dim3 grid(unsigned(plan.num_kv_heads), unsigned(std::min(plan.grid, kMaxGridY)),
                    unsigned((args.group_size + kDecodeHeadsPerBlock - 1) / kDecodeHeadsPerBlock));
    if (q.dtype() == DType::bf16)
      dispatch_head_dim<__nv_bfloat16>(args, plan.head_dim, grid, stream);
    else if (q.dtype() == DType::f16)
      dispatch_head_dim<__half>(args, plan.head_dim, grid, stream);
    else
      check::fail("batch_decode: dtype ", dtype_name(q.dtype()), " is not supported on CUDA");
  }
  // A graph captured now may replay a later plan that splits rows: always merge then.
  if ((plan.num_partials > 0 || is_capturing(stream)) && (stream_knobs().ablate & 2) == 0) {
    const bool programmatic = kernel == DecodeKernel::stream;
    // The longest split in the plan sizes the thread groups; a replayed graph whose later
    // plan splits more is still correct (the threads loop), only slower.
    int max_slots = 0;
    const int32_t* merge_indptr = ws.host_merge_indptr();
    const int64_t rows = plan.batch_size * plan.head_parts;  // virtual rows
    for (int64_t v = 0; v < rows; ++v)
      max_slots = std::max(max_slots, merge_indptr[v + 1] - merge_indptr[v]);
    if (q.dtype() == DType::bf16)
      launch_merge<__nv_bfloat16>(args, int(plan.batch_size), int(plan.num_qo_heads),
                                  int(plan.head_dim), max_slots, int(ws.items_offset),
                                  programmatic, stream);
    else
      launch_merge<__half>(args, int(plan.batch_size), int(plan.num_qo_heads),
                           int(plan.head_dim), max_slots, int(ws.items_offset), programmatic,
                           stream);
  }
}

bool stream_decode_runs_on(int device_index) {
  static std::atomic<uint64_t> known{0}, runs{0};
  const uint64_t bit = uint64_t(1) << (device_index & 63);
  if (known.load(std::memory_order_acquire) & bit) return (runs.load() & bit) != 0;
  int major = 0;
  FP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index));
  cudaFuncAttributes attributes{};
  cudaError_t status = cudaSuccess;
  {
    const detail::DeviceScope scope(Device::cuda(device_index));
    status = cudaFuncGetAttributes(&attributes, stream_decode_probe_kernel());
  }
  // binaryVersion: the machine code that will run (90 for sm_90a). A build without sm_90
  // code would JIT older PTX in which the kernel body is compiled out.
  const bool ok = status == cudaSuccess && major >= 9 && attributes.binaryVersion >= 90 &&
                  attributes.ptxVersion >= 90;
  if (status != cudaSuccess) (void)cudaGetLastError();
  if (ok) runs.fetch_or(bit);
  known.fetch_or(bit, std::memory_order_acq_rel);
  return ok;
}

}  // namespace flashpage::cuda
