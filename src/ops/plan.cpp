// The planners: read the host page table once per step and write the work list that the CPU
// and CUDA runs share (layout in ops/workspace.h).
#include <algorithm>
#include <atomic>
#include <climits>
#include <numeric>

#include "core/check.h"
#include "core/device_memory.h"
#include "ops/decode_kernel_choice.h"
#include "ops/decode_tiling.h"
#include "ops/page_table_check.h"
#include "ops/stream_decode_plan.h"
#include "ops/workspace.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace flashpage {

namespace {

// How many decode blocks (CUDA) or tasks (CPU) run at once: one wave.
int64_t concurrent_slots(Device device, int64_t head_dim) {
  if (device.is_cuda())
    return int64_t(detail::cuda_sm_count(device.index)) * DecodeTiling::blocks_per_sm(int(head_dim));
#ifdef _OPENMP
  return int64_t(omp_get_max_threads());
#else
  return 1;
#endif
}

// Shortest KV chunk worth a split: below this the merge (a partial of Hq*D floats written
// and read again) costs more than the parallelism gains.
int64_t min_chunk_tokens(Device device) { return device.is_cuda() ? 256 : 512; }

// The KV chunk length for decode. A row of length L becomes ceil(L / chunk) work items, each
// run by Hkv blocks; blocks run `slots` at a time, so the step takes about
// ceil(blocks / slots) * (chunk + overhead) token-times, where `overhead` is what a block
// costs beyond streaming its tokens (finding its pages, filling its pipeline, the epilogue:
// measured on the H200 as roughly 48 KB of streaming time per block). Try splitting the
// longest row into n = 1, 2, ... pieces and keep the cheapest; ties go to fewer splits.
int64_t choose_decode_chunk(const std::vector<int64_t>& lengths, int64_t num_kv_heads,
                            int64_t head_dim, int64_t page_size, int64_t slots,
                            int64_t min_chunk) {
  constexpr int64_t kBlockOverheadBytes = 48 * 1024;
  const int64_t overhead = kBlockOverheadBytes / (4 * head_dim);  // K + V, 16-bit, one head
  const int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  auto round_to_pages = [&](int64_t c) { return (c + page_size - 1) / page_size * page_size; };
  int64_t best_chunk = round_to_pages(std::max<int64_t>(longest, 1));
  double best_cost = 0;
  constexpr int64_t kMaxSplits = 64;
  for (int64_t n = 1; n <= kMaxSplits; ++n) {
    // At least one page: a table of empty rows must not give a zero chunk (division below).
    const int64_t chunk = round_to_pages(std::max<int64_t>(1, (longest + n - 1) / n));
    if (n > 1 && chunk < min_chunk) break;
    int64_t blocks = 0;
    for (int64_t len : lengths) blocks += std::max<int64_t>(1, (len + chunk - 1) / chunk);
    blocks *= num_kv_heads;
    const int64_t waves = (blocks + slots - 1) / std::max<int64_t>(slots, 1);
    // 2% per extra split level stands for the merge pass and the partial traffic.
    const double cost = double(waves) * double(chunk + overhead) * (1.0 + 0.02 * double(n - 1));
    if (n == 1 || cost < best_cost) {
      best_cost = cost;
      best_chunk = chunk;
    }
  }
  return best_chunk;
}

void check_plan_args(const Workspace& ws, const PageTable& host_table, const PagedKv& kv,
                     int64_t num_qo_heads) {
  check_pages(kv);
  check::require(ws.device() == kv.k_pages.device(), "workspace: expected device ",
                 kv.k_pages.device().str(), " (as the pages), got ", ws.device().str());
  check::gqa(num_qo_heads, kv.num_kv_heads());
  (void)host_table;
}

// Writes header + items + merge_indptr (+ the streamed decode's block records, + qo_indptr)
// into the mirror and copies it to the device.
// The upload goes on `stream`, behind the runs of earlier plans that read this workspace.
Plan publish(Workspace::Impl& w, void* stream, Plan plan, const std::vector<WorkItem>& items,
             const std::vector<int32_t>& merge_indptr, DecodeKernel kernel = DecodeKernel::cpu,
             const std::vector<int32_t>& block_records = {},
             const std::vector<int32_t>& qo_indptr = {}) {
  // Before anything changes: a refused upload must not leave the workspace half-written.
  if (w.device.is_cuda()) detail::check_not_capturing(stream, "plan_decode / plan_prefill");
  constexpr int64_t kRecord = Workspace::Impl::kBlockRecordInts;
  const int64_t items_offset =
      Workspace::Impl::stream_items_offset(int64_t(block_records.size()) / kRecord);
  const int64_t n_ints = items_offset + int64_t(items.size()) * Workspace::Impl::kWorkFields +
                         int64_t(merge_indptr.size());
  const int64_t needed = n_ints + int64_t(qo_indptr.size());
  check::require(needed <= w.ints.numel(), "workspace: the work list needs ", needed * 4,
                 " bytes of its integer region, it has ", w.ints.numel() * 4,
                 "; create the Workspace with more bytes");
  // From here the workspace is rewritten: no earlier plan matches it any more, so that one
  // cannot run over a half-written work list if an upload below fails.
  w.generation = 0;
  w.host_ints.assign(size_t(n_ints), 0);
  w.host_ints[0] = int32_t(items.size());
  // Decode: partial outputs; prefill: the leading items that pair into whole query ranges
  // (the Hopper kernel sizes its schedule from it on the device, scheduler.cuh).
  w.host_ints[1] = int32_t(plan.kind == Plan::Kind::prefill ? plan.paired_work : plan.num_partials);
  w.host_ints[2] = int32_t(plan.batch_size * plan.head_parts);  // the merge's (virtual) rows
  w.host_ints[3] = int32_t(kernel);
  std::copy(block_records.begin(), block_records.end(),
            w.host_ints.begin() + Workspace::Impl::kHeaderInts);
  w.items_offset = items_offset;
  std::copy_n(reinterpret_cast<const int32_t*>(items.data()), items.size() * 4,
              w.host_ints.begin() + w.items_offset);
  w.merge_indptr_offset = w.items_offset + int64_t(items.size()) * 4;
  std::copy(merge_indptr.begin(), merge_indptr.end(),
            w.host_ints.begin() + w.merge_indptr_offset);
  // The split sits at the region's end, where it stays for a batch size whatever the work
  // list's length: a graph captured over it keeps reading the right place after a re-plan.
  w.qo_indptr_offset = qo_indptr.empty() ? -1 : w.ints.numel() - int64_t(qo_indptr.size());
  w.partial_lse_offset = plan.num_partials * plan.num_qo_heads * plan.head_dim;
  int32_t* tail = w.ints.data_as<int32_t>() + (qo_indptr.empty() ? 0 : w.qo_indptr_offset);
  if (w.device.is_cuda()) {
    detail::copy_bytes(w.ints.data(), w.device, w.host_ints.data(), Device::cpu(),
                       w.host_ints.size() * 4, stream);
    detail::copy_bytes(tail, w.device, qo_indptr.data(), Device::cpu(), qo_indptr.size() * 4,
                       stream);
  } else {
    std::copy(w.host_ints.begin(), w.host_ints.end(), w.ints.data_as<int32_t>());
    std::copy(qo_indptr.begin(), qo_indptr.end(), tail);
  }
  // Numbered across all workspaces: a plan passed with another workspace than its own fails
  // check_plan instead of matching that workspace's count by chance.
  static std::atomic<uint64_t> last_generation{0};
  plan.generation = w.generation = ++last_generation;
  plan.num_work = int64_t(items.size());
  return plan;
}

}  // namespace

Plan plan_decode(Workspace& ws, const PageTable& host_table, const PagedKv& kv,
                 int64_t num_qo_heads, void* stream) {
  check_plan_args(ws, host_table, kv, num_qo_heads);
  const std::vector<int64_t> lengths =
      check_page_table(host_table, kv.num_pages(), kv.page_size());
  auto& w = ws.impl();
  Plan plan;
  plan.kind = Plan::Kind::decode;
  plan.device = ws.device();
  plan.batch_size = int64_t(lengths.size());
  plan.num_qo_heads = num_qo_heads;
  plan.num_kv_heads = kv.num_kv_heads();
  plan.head_dim = kv.head_dim();
  plan.page_size = kv.page_size();
  plan.total_q_rows = plan.batch_size;

  const int64_t per_partial_floats = num_qo_heads * (plan.head_dim + 1);
  const int64_t max_partials = (w.floats.numel()) / std::max<int64_t>(per_partial_floats, 1);
  const DecodeKernel kernel = choose_decode_kernel(ws.device(), kv.k_pages.dtype(), plan.head_dim);
  if (kernel == DecodeKernel::stream) {
    // Persistent blocks, one per SM, each given an equal share of the tokens.
    const int64_t blocks = detail::cuda_sm_count(ws.device().index);
    const int64_t group = num_qo_heads / plan.num_kv_heads;
    plan.head_parts = stream_decode_head_parts(plan.batch_size, plan.num_kv_heads, plan.head_dim,
                                               group, plan.page_size, blocks,
                                               stream_decode_combine());
    const StreamDecodeTiling::Block block = stream_decode_block(
        plan.num_kv_heads, plan.head_parts, plan.head_dim, group, plan.page_size);
    StreamDecodeWork work =
        plan_stream_decode(lengths, plan.num_kv_heads, blocks, max_partials, plan.head_parts,
                           stream_decode_uncut_pct(), block.warp_partials(),
                           stream_decode_cut_tokens(plan.page_size));
    plan.num_partials = work.num_partials;
    plan.grid = blocks;
    plan.kv_chunk = 0;  // pieces vary in length
    return publish(w, stream, plan, work.items, work.merge_indptr, kernel,
                   stream_decode_block_records(work, host_table.indptr.data_as<int32_t>(),
                                               plan.head_parts));
  }

  // Chunk length from the wave model, then doubled until the partials fit the float region.
  const int64_t slots = concurrent_slots(ws.device(), plan.head_dim);
  int64_t chunk = choose_decode_chunk(lengths, plan.num_kv_heads, plan.head_dim, plan.page_size,
                                      slots, min_chunk_tokens(ws.device()));
  auto count_partials = [&](int64_t c) {
    int64_t n = 0;
    for (int64_t len : lengths)
      if (len > c) n += (len + c - 1) / c;
    return n;
  };
  while (count_partials(chunk) > max_partials) chunk *= 2;
  plan.kv_chunk = chunk;

  std::vector<WorkItem> items;
  std::vector<int32_t> merge_indptr(size_t(plan.batch_size) + 1, 0);
  int32_t slot = 0;
  for (int64_t b = 0; b < plan.batch_size; ++b) {
    const int64_t len = lengths[size_t(b)];
    if (len <= chunk) {
      items.push_back({int32_t(b), 0, int32_t(len), -1});
    } else {
      for (int64_t s = 0; s < len; s += chunk)
        items.push_back({int32_t(b), int32_t(s), int32_t(std::min(len, s + chunk)), slot++});
    }
    merge_indptr[size_t(b) + 1] = slot;
  }
  // Longest first, so the last tasks to start are short ones.
  std::stable_sort(items.begin(), items.end(), [](const WorkItem& a, const WorkItem& b) {
    return (a.end - a.begin) > (b.end - b.begin);
  });
  plan.num_partials = slot;
  plan.grid = int64_t(items.size());  // one block column per item; replays with more loop
  return publish(w, stream, plan, items, merge_indptr, kernel);
}

Plan plan_prefill(Workspace& ws, const Tensor& host_qo_indptr, const PageTable& host_table,
                  const PagedKv& kv, int64_t qo_len_uniform, int64_t num_qo_heads,
                  void* stream) {
  check_plan_args(ws, host_table, kv, num_qo_heads);
  const std::vector<int64_t> lengths =
      check_page_table(host_table, kv.num_pages(), kv.page_size());
  const int64_t batch = int64_t(lengths.size());
  std::vector<int64_t> qo_begin(size_t(batch) + 1, 0);
  if (host_qo_indptr.defined()) {
    check::dims(host_qo_indptr, "qo_indptr", 1, "[B+1]");
    check::same_dtype(host_qo_indptr, "qo_indptr", DType::i32, "index tensors are int32");
    check::same_device(host_qo_indptr, "qo_indptr", Device::cpu(), "plan_prefill reads it");
    check::size_is(host_qo_indptr, "qo_indptr", 0, batch + 1, "B+1 of the page table");
    check::indptr_values(host_qo_indptr, "qo_indptr", INT32_MAX, "int32 query rows");
    // Read through the stride (a contiguous() copy's pointer would outlive the copy).
    const int32_t* p = host_qo_indptr.data_as<int32_t>();
    for (int64_t b = 0; b <= batch; ++b) qo_begin[size_t(b)] = p[b * host_qo_indptr.stride(0)];
  } else {
    // Query rows are int32 in the work list and the kernels.
    check::require(qo_len_uniform >= 0 && qo_len_uniform <= INT32_MAX / std::max<int64_t>(batch, 1),
                   "qo_len: expected 0..", INT32_MAX / std::max<int64_t>(batch, 1),
                   " (B x qo_len <= 2^31-1 query rows, B = ", batch, "), got ", qo_len_uniform);
    for (int64_t b = 0; b <= batch; ++b) qo_begin[size_t(b)] = b * qo_len_uniform;
  }
  Plan plan;
  plan.kind = Plan::Kind::prefill;
  plan.device = ws.device();
  plan.batch_size = batch;
  plan.num_qo_heads = num_qo_heads;
  plan.num_kv_heads = kv.num_kv_heads();
  plan.head_dim = kv.head_dim();
  plan.page_size = kv.page_size();
  plan.total_q_rows = qo_begin.back();
  // Query tiles: the CUDA kernels' tile height, or small CPU tiles that spread well.
  const int64_t tile = ws.device().is_cuda() ? 64 : 16;
  plan.kv_chunk = tile;
  for (int64_t len : lengths) plan.kv_tokens += len;
  // A row's tiles latest first, in pairs kept in ascending order: under causal masking the
  // latest queries see the most keys, so the costliest tiles start first (longest-processing-
  // time order for the persistent CUDA kernels), and the Hopper kernel runs an ascending pair
  // of one row as one 128-query range. A row with an odd tile count leaves its first (under
  // causal, cheapest) tile single; singles go after every pair, so pairs stay at even
  // positions. Rows with the most keys first (their tiles cost the most).
  std::vector<int64_t> row_order(static_cast<size_t>(batch));
  std::iota(row_order.begin(), row_order.end(), int64_t(0));
  std::stable_sort(row_order.begin(), row_order.end(), [&](int64_t a, int64_t b) {
    return lengths[size_t(a)] > lengths[size_t(b)];
  });
  std::vector<WorkItem> items, singles;
  for (int64_t b : row_order) {
    const int64_t n = qo_begin[size_t(b) + 1] - qo_begin[size_t(b)];
    const int64_t tiles = (n + tile - 1) / tile;
    auto item = [&](int64_t t) {
      return WorkItem{int32_t(b), int32_t(t * tile), int32_t(std::min(n, (t + 1) * tile)), -1};
    };
    const int64_t first_paired = tiles % 2;
    for (int64_t t = tiles - 2; t >= first_paired; t -= 2) {
      items.push_back(item(t));
      items.push_back(item(t + 1));
    }
    if (first_paired == 1) singles.push_back(item(0));
  }
  plan.paired_work = int64_t(items.size());  // pairs of one row's consecutive items
  items.insert(items.end(), singles.begin(), singles.end());
  std::vector<int32_t> merge_indptr(size_t(batch) + 1, 0);
  plan.num_partials = 0;
  plan.grid = int64_t(items.size());
  std::vector<int32_t> planned_qo;  // ragged: kept beside the work list for the backends
  if (host_qo_indptr.defined()) planned_qo.assign(qo_begin.begin(), qo_begin.end());
  plan = publish(ws.impl(), stream, plan, items, merge_indptr, DecodeKernel::cpu, {}, planned_qo);
  // After publish: a plan it refuses leaves the workspace's last plan whole.
  ws.impl().max_kv_len =
      lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  return plan;
}

std::vector<int64_t> row_lengths(const PageTable& host_table, int64_t page_size) {
  return check_row_lengths(host_table, page_size);
}

}  // namespace flashpage
