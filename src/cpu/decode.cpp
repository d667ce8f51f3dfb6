// Paged decode on the CPU: the planner's work items (row, KV chunk) x KV heads in parallel;
// items of split rows write f32 partials that a second pass merges per (row, head).
#include <algorithm>

#include <omp.h>

#include "cpu/attend.h"
#include "cpu/cpu_ops.h"
#include "cpu/dispatch.h"
#include "cpu/paged_view.h"
#include "cpu/task_scratch.h"

namespace flashpage::cpu {

namespace {

template <class T>
void decode_typed(const Workspace::Impl& ws, const Plan& plan, const Tensor& q,
                  const PagedKv& kv, const AttentionParams& params, Tensor& out,
                  const Tensor& lse) {
  const PagedView<T> view(kv);
  const WorkItem* items = ws.host_work();
  const int64_t num_work = ws.host_ints[0];
  const int64_t hq = q.size(1), hkv = kv.num_kv_heads(), group = hq / hkv, d = q.size(2);
  const T* qp = static_cast<const T*>(q.data());
  T* op = static_cast<T*>(out.data());
  float* lp = lse.defined() ? lse.data_as<float>() : nullptr;
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1), os0 = out.stride(0), os1 = out.stride(1);
  const int64_t ls0 = lp ? lse.stride(0) : 0, ls1 = lp ? lse.stride(1) : 0;
  float* partial_out = ws.partial_out();
  float* partial_lse = ws.partial_lse();
  const float scale = params.scale;

  // KV heads per task: as many as keep every thread busy (at least 4 tasks per thread), so
  // a task streams several heads' rows of each token instead of one slice.
  const int64_t rows_cap = group <= kMaxRows ? std::min<int64_t>(kMaxHeads, kMaxRows / group) : 1;
  int64_t heads_per_task = 1;
  for (int64_t hg = rows_cap; hg > 1; --hg)
    if (hkv % hg == 0 && num_work * (hkv / hg) >= 4 * int64_t(omp_get_max_threads())) {
      heads_per_task = hg;
      break;
    }
  const int64_t head_groups = hkv / heads_per_task;

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < num_work * head_groups; ++task) {
    const WorkItem item = items[task / head_groups];
    const int64_t h0 = (task % head_groups) * heads_per_task, b = item.row;
    const int64_t len = view.length(b);
    const int64_t lo = params.window_left >= 0 ? std::max<int64_t>(0, len - 1 - params.window_left) : 0;
    TaskScratch& sc = task_scratch(d);
    // Query heads h0*group .. (h0+heads_per_task)*group, kMaxRows at a time (one KV head per
    // chunk when a group alone exceeds kMaxRows).
    const int64_t first_head = h0 * group, num_heads = heads_per_task * group;
    for (int64_t c0 = 0; c0 < num_heads; c0 += kMaxRows) {
      const int rows = int(std::min<int64_t>(kMaxRows, num_heads - c0));
      for (int r = 0; r < rows; ++r) {
        const int64_t head = first_head + c0 + r;
        float* qr = sc.q.data() + r * d;
        load_query<T>(qp + b * qs0 + head * qs1, d, scale, qr);
        sc.rows[r] = QueryRow{qr, lo, len, {}};
        sc.states[r].init(sc.acc.data() + r * d, d);
      }
      const int64_t kv_head = (first_head + c0) / group;
      const int heads = group <= kMaxRows ? int(heads_per_task) : 1;
      attend<T>(view.row(b), kv_head, heads, item.begin, item.end, sc.rows, rows / heads, d,
                params.logits_soft_cap, sc.states, sc.attend);
      for (int r = 0; r < rows; ++r) {
        const int64_t head = first_head + c0 + r;
        restore_order<T>(sc.states[r], d);
        if (item.slot < 0) {
          sc.states[r].finalize(op + b * os0 + head * os1);
          if (lp) lp[b * ls0 + head * ls1] = sc.states[r].lse();
        } else {
          const int64_t at = int64_t(item.slot) * hq + head;
          sc.states[r].finalize(partial_out + at * d);
          partial_lse[at] = sc.states[r].lse();
        }
      }
    }
  }

  if (plan.num_partials == 0) return;
  const int32_t* merge_indptr = ws.host_merge_indptr();
  const int64_t batch = plan.batch_size;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t task = 0; task < batch * hq; ++task) {
    const int64_t b = task / hq, head = task % hq;
    const int32_t first = merge_indptr[b], last = merge_indptr[b + 1];
    if (first == last) continue;  // written directly by its single item
    TaskScratch& sc = task_scratch(d);
    SoftmaxState& state = sc.states[0];
    state.init(sc.acc.data(), d);
    for (int32_t s = first; s < last; ++s) {
      const int64_t at = int64_t(s) * hq + head;
      state.merge_normalized(partial_out + at * d, partial_lse[at]);
    }
    state.finalize(op + b * os0 + head * os1);
    if (lp) lp[b * ls0 + head * ls1] = state.lse();
  }
}

}  // namespace

void batch_decode(const Workspace::Impl& ws, const Plan& plan, const Tensor& q, const PagedKv& kv,
                  const AttentionParams& params, Tensor& out, const Tensor& lse) {
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    decode_typed<T>(ws, plan, q, kv, params, out, lse);
  });
}

}  // namespace flashpage::cpu
