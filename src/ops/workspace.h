#pragma once
// The Workspace's insides and the layout of the work lists that the planners write and the
// CPU and CUDA runs read. Both devices use the same layout, so the planner is shared.
//
// Integer region (int32, device memory; a host mirror in `host_ints`):
//   [0] num_work   [1] num_partials   [2] batch rows (streamed decode: virtual rows,
//   batch_size * Plan::head_parts)   [3] decode kernel
//   [kHeaderInts ..)              streamed decode plans only: one record of kBlockRecordInts
//                                 per block (grid of them), at a fixed offset, so a block
//                                 reads what it starts from in one round trip:
//                                 {begin, end, kv_indptr[row of the first item], 0,
//                                 the first item (4 ints)}; block k runs items [begin, end)
//   [items_offset ..)             num_work items of kWorkFields ints (see WorkItem)
//   [merge_indptr_offset ..)      rows + 1 ints (header [2]): row b's partial slots are
//                                 merge_indptr[b] .. merge_indptr[b+1] (empty: no split)
//   [qo_indptr_offset ..)         ragged prefill plans only: the region's last batch_size + 1
//                                 ints, the planned qo_indptr (the runs' copy of the split:
//                                 uploaded with the work list, at a place that a re-plan for
//                                 the same batch size does not move, so graphs follow it)
// Float region (f32, device memory):
//   [0 ..)                        partial outputs [num_partials, Hq, D]
//   [partial_lse_offset ..)       partial LSEs   [num_partials, Hq]
#include <cstdint>
#include <vector>

#include "flashpage/ops.h"

namespace flashpage {

// One unit of scheduled work: a row and a range of its KV tokens (decode), or a row and a
// tile of its query tokens (prefill; kv range = the whole row).
struct WorkItem {
  int32_t row;    // streamed decode: the virtual row b * Plan::head_parts + head part
  int32_t begin;  // decode: first KV token; prefill: first query token of the tile
  int32_t end;    // one past the last
  int32_t slot;   // decode: partial slot, or -1 when this item writes the final output
};
static_assert(sizeof(WorkItem) == 16);

// The integer region: a header of kHeaderInts ints ([0] work items, [1] decode: partial
// outputs, prefill: leading items that pair into whole query ranges (Plan::paired_work),
// [2] batch rows (virtual rows for streamed decode), [3] decode kernel), then (streamed
// decode only) the block records, then the items.
struct Workspace::Impl {
  static constexpr int64_t kHeaderInts = 4;
  static constexpr int64_t kWorkFields = 4;
  // A streamed decode block's record (above): two 16-byte words, so the records and the
  // items after them stay 16-byte aligned for the kernel's vector loads.
  static constexpr int64_t kBlockRecordInts = 8;
  // Where a streamed decode plan's items start: after the header and the block records.
  static constexpr int64_t stream_items_offset(int64_t blocks) {
    return kHeaderInts + blocks * kBlockRecordInts;
  }

  Device device{};
  size_t bytes = 0;
  Tensor ints;    // i32 on device
  Tensor floats;  // f32 on device
  std::vector<int32_t> host_ints;  // what the last plan wrote (mirror of `ints`)
  uint64_t generation = 0;

  // The attention backends plan once per step and reuse the plan for every layer: the plan
  // is keyed by the page table (metadata address and version) and the query shape: the
  // uniform length, or for ragged queries (qo_len -1) the split itself.
  struct CachedPlan {
    const void* table_owner = nullptr;
    uint64_t table_version = 0;
    int64_t qo_len = -1;
    std::vector<int64_t> qo_indptr;  // ragged queries only
    Plan plan;
  } cached;

  // Written by the last plan.
  int64_t items_offset = kHeaderInts;  // in ints
  int64_t merge_indptr_offset = 0;  // in ints
  int64_t qo_indptr_offset = -1;    // in ints; -1: the last plan holds none
  int64_t partial_lse_offset = 0;   // in floats
  int64_t max_kv_len = 0;           // longest row of the planned table (prefill mask width)

  const WorkItem* host_work() const {
    return reinterpret_cast<const WorkItem*>(host_ints.data() + items_offset);
  }
  const int32_t* host_merge_indptr() const { return host_ints.data() + merge_indptr_offset; }
  const int32_t* device_ints() const { return ints.data_as<int32_t>(); }
  // The last plan's qo_indptr on the workspace's device: int32 [batch_size + 1].
  Tensor planned_qo_indptr(const Plan& plan) const;
  float* partial_out() const { return floats.data_as<float>(); }
  float* partial_lse() const { return floats.data_as<float>() + partial_lse_offset; }
};

// The one-shot op overloads' workspace: Workspace::kOneShotBytes, or more for steps whose work
// list would not fit its integer share (a decode row costs ~5-6 ints with its item and
// merge_indptr, 8 leaves room and covers a ragged prefill row's merge_indptr and qo_indptr;
// a prefill query tile costs an item's 4), so that a large
// one-shot call does not fail asking for a Workspace it cannot be given.
size_t one_shot_workspace_bytes(int64_t rows, int64_t query_tiles = 0);

}  // namespace flashpage
