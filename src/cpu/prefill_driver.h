#pragma once
// The loop shared by paged prefill, ragged prefill and sdpa: tasks = (row, query tile) x KV
// heads in parallel; a task's query rows (tile tokens x the group's query heads, token-major
// so a group of 4 rows has one causal range when the group size divides by 4) run through
// attend() in chunks of kMaxRows.
//
// Problem provides:
//   RowShape shape(b);                  query/key counts and the query position offset
//   Source kv(b);                       fill(t0, n, h, kp, vp) over the row's keys
//   const T* q(b, i, head); T* out(b, i, head); float* lse(b, i, head) (nullptr: none)
//   MaskRow mask(b, head, i);
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/attend.h"
#include "cpu/task_scratch.h"
#include "flashpage/ops.h"
#include "ops/workspace.h"

namespace flashpage::cpu {

struct RowShape {
  int64_t q_len = 0, kv_len = 0;
  int64_t offset = 0;  // query i sits at key position i + offset (L - S bottom-right, 0 top-left)
};

// Visible keys [lo, hi) of the query at position p in a row of kv_len keys.
inline void visible_range(int64_t p, int64_t kv_len, bool causal, int window_left, int64_t& lo,
                          int64_t& hi) {
  hi = causal ? std::clamp<int64_t>(p + 1, 0, kv_len) : kv_len;
  lo = window_left >= 0 ? std::clamp<int64_t>(p - window_left, 0, kv_len) : 0;
}

template <class T, class Problem>
void run_prefill(const Problem& pb, const WorkItem* items, int64_t num_items, int64_t hkv,
                 int64_t group, int64_t d, const AttentionParams& params, bool causal) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < num_items * hkv; ++task) {
    const WorkItem item = items[task / hkv];
    const int64_t h = task % hkv, b = item.row;
    const RowShape shape = pb.shape(b);
    const auto source = pb.kv(b);
    TaskScratch& sc = task_scratch(d);
    const int64_t total_rows = int64_t(item.end - item.begin) * group;
    for (int64_t first = 0; first < total_rows; first += kMaxRows) {
      const int rows = int(std::min<int64_t>(kMaxRows, total_rows - first));
      for (int r = 0; r < rows; ++r) {
        const int64_t i = item.begin + (first + r) / group;
        const int64_t head = h * group + (first + r) % group;
        float* qr = sc.q.data() + r * d;
        load_query<T>(pb.q(b, i, head), d, params.scale, qr);
        int64_t lo, hi;
        visible_range(i + shape.offset, shape.kv_len, causal, params.window_left, lo, hi);
        sc.rows[r] = QueryRow{qr, lo, hi, pb.mask(b, head, i)};
        sc.states[r].init(sc.acc.data() + r * d, d);
      }
      attend<T>(source, h, 1, 0, shape.kv_len, sc.rows, rows, d, params.logits_soft_cap, sc.states,
                sc.attend);
      for (int r = 0; r < rows; ++r) {
        const int64_t i = item.begin + (first + r) / group;
        const int64_t head = h * group + (first + r) % group;
        restore_order<T>(sc.states[r], d);
        sc.states[r].finalize(pb.out(b, i, head));
        if (float* l = pb.lse(b, i, head)) *l = sc.states[r].lse();
      }
    }
  }
}

// Query tiles (row, [begin, end)) of rows with the given query counts, for ops without a plan.
inline std::vector<WorkItem> query_tiles(const std::vector<int64_t>& q_lens, int64_t tile) {
  std::vector<WorkItem> items;
  for (size_t b = 0; b < q_lens.size(); ++b)
    for (int64_t s = 0; s < q_lens[b]; s += tile)
      items.push_back({int32_t(b), int32_t(s), int32_t(std::min(q_lens[b], s + tile)), -1});
  return items;
}

}  // namespace flashpage::cpu
