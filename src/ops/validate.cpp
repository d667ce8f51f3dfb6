#include "ops/validate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"

namespace flashpage::ops_detail {

AttentionParams resolve_params(const AttentionParams& params, int64_t head_dim,
                               int64_t max_positions) {
  check::require(std::isfinite(params.scale), "params.scale: expected a finite value, got ",
                 params.scale);
  check::require(params.window_left >= -1,
                 "params.window_left: expected -1 (off) or a value >= 0, got ",
                 params.window_left);
  check::require(std::isfinite(params.logits_soft_cap) && params.logits_soft_cap >= 0.0f,
                 "params.logits_soft_cap: expected 0 (off) or a finite value > 0, got ",
                 params.logits_soft_cap);
  AttentionParams out = params;
  if (out.scale <= 0.0f) out.scale = float(1.0 / std::sqrt(double(head_dim)));
  if (out.window_left > max_positions) out.window_left = int(std::max<int64_t>(max_positions, 0));
  return out;
}

void check_operand(const Tensor& t, std::string_view name, DType dtype, std::string_view of,
                   Device device) {
  check::defined(t, name);
  check::attention_dtype(t, name);
  check::same_dtype(t, name, dtype, of);
  check::same_device(t, name, device, of);
  check::inner_contiguous(t, name);
}

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rank,
               std::string_view q_layout, std::string_view kv_layout) {
  check::dims(q, "query", rank, q_layout);
  check::dims(k, "key", rank, kv_layout);
  check::dims(v, "value", rank, kv_layout);
  check_operand(q, "query", q.dtype(), "query", q.device());
  check_operand(k, "key", q.dtype(), "query", q.device());
  check_operand(v, "value", q.dtype(), "query", q.device());
  check::shape_is(v, "value", k.shape());
}

void check_out(const Tensor& out, const Tensor& q, std::string_view layout) {
  check::require(out.defined(), "out: expected a tensor ", layout, " ", q.shape_str(),
                 ", got an undefined tensor");
  check::require(out.shape() == q.shape(), "out: expected shape ", q.shape_str(), " ", layout,
                 " (as query), got ", out.shape_str());
  check::same_dtype(out, "out", q.dtype(), "query");
  check::same_device(out, "out", q.device(), "query");
  check::inner_contiguous(out, "out");
  check::writable(out, "out");
}

void check_lse(const Tensor& lse, const Shape& shape, std::string_view layout, Device device) {
  if (!lse.defined()) return;
  check::require(lse.shape() == shape, "lse: expected shape ", shape_to_string(shape), " ",
                 layout, ", got ", lse.shape_str());
  check::require(lse.dtype() == DType::f32, "lse: expected dtype f32, got ",
                 dtype_name(lse.dtype()));
  check::same_device(lse, "lse", device, "query");
  check::writable(lse, "lse");
}

void check_outputs_apart(const Tensor& out, const Tensor& lse,
                         std::initializer_list<NamedInput> inputs) {
  for (const NamedInput& in : inputs) {
    check::no_overlap(out, "out", *in.tensor, in.name);
    check::no_overlap(lse, "lse", *in.tensor, in.name);
  }
  check::no_overlap(lse, "lse", out, "out");
}

void check_mask_dtype(const Tensor& mask) {
  check::dtype_in(mask, "mask", {DType::boolean, DType::f32, DType::f16, DType::bf16});
}

void check_workspace(const Workspace& ws, Device device) {
  check::require(ws.device() == device, "workspace: expected device ", device.str(),
                 " (as the tensors), got ", ws.device().str());
}

void check_plan(const Workspace& ws, const Plan& plan, Plan::Kind kind, Device device) {
  const char* want = kind == Plan::Kind::decode ? "decode" : "prefill";
  const char* got = plan.kind == Plan::Kind::decode    ? "decode"
                    : plan.kind == Plan::Kind::prefill ? "prefill"
                                                       : "none";
  check::require(plan.kind == kind, "plan: expected a ", want, " plan (from plan_", want,
                 "), got a ", got, " plan");
  check::require(plan.device == device, "plan: expected device ", device.str(),
                 " (as the tensors), got ", plan.device.str());
  check::require(plan.generation != 0 && plan.generation == ws.impl().generation,
                 "plan: expected the latest plan made on this workspace (generation ",
                 ws.impl().generation, "), got generation ", plan.generation,
                 "; a plan is valid with its own workspace until the next plan_* call on it");
}

void check_plan_shape(const Plan& plan, int64_t batch, int64_t hq, int64_t hkv, int64_t d,
                      int64_t page_size) {
  auto same = [](int64_t planned, int64_t given, const char* what) {
    check::require(planned == given, "plan: expected ", what, " = ", given,
                   " (as the call), got a plan made for ", planned);
  };
  same(plan.batch_size, batch, "batch_size");
  same(plan.num_qo_heads, hq, "num_qo_heads");
  same(plan.num_kv_heads, hkv, "num_kv_heads");
  same(plan.head_dim, d, "head_dim");
  same(plan.page_size, page_size, "page_size");
}

namespace {
const WorkItem* items_of(const Workspace& ws, int64_t& count) {
  const auto& w = ws.impl();
  count = w.host_ints.empty() ? 0 : w.host_ints[0];
  return count ? w.host_work() : nullptr;
}
}  // namespace

void check_decode_items(const Workspace& ws, const Plan& plan,
                        const std::vector<int64_t>& lengths) {
  int64_t count = 0;
  const WorkItem* items = items_of(ws, count);
  const int64_t batch = int64_t(lengths.size());
  std::vector<int64_t> covered(lengths.size(), 0), seen(lengths.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    const WorkItem& it = items[i];
    check::require(it.row >= 0 && it.row < batch && 0 <= it.begin && it.begin <= it.end &&
                       it.end <= lengths[size_t(it.row)] && it.slot >= -1 &&
                       it.slot < plan.num_partials,
                   "plan: made for a different page table (work item ", i, " covers tokens [",
                   it.begin, ",", it.end, ") of row ", it.row,
                   "); call plan_decode again after the table changes");
    covered[size_t(it.row)] += it.end - it.begin;
    ++seen[size_t(it.row)];
  }
  for (int64_t b = 0; b < batch; ++b)
    check::require(seen[size_t(b)] > 0 && covered[size_t(b)] == lengths[size_t(b)],
                   "plan: made for a different page table (row ", b, " has ",
                   lengths[size_t(b)], " tokens, the plan covers ", covered[size_t(b)],
                   "); call plan_decode again after the table changes");
}

void check_prefill_items(const Workspace& ws, const std::vector<int64_t>& q_lens) {
  int64_t count = 0;
  const WorkItem* items = items_of(ws, count);
  const int64_t batch = int64_t(q_lens.size());
  std::vector<int64_t> covered(q_lens.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    const WorkItem& it = items[i];
    check::require(it.row >= 0 && it.row < batch && 0 <= it.begin && it.begin < it.end &&
                       it.end <= q_lens[size_t(it.row)],
                   "plan: made for different query lengths (work item ", i, " covers queries [",
                   it.begin, ",", it.end, ") of row ", it.row,
                   "); call plan_prefill again when qo_indptr changes");
    covered[size_t(it.row)] += it.end - it.begin;
  }
  for (int64_t b = 0; b < batch; ++b)
    check::require(covered[size_t(b)] == q_lens[size_t(b)],
                   "plan: made for different query lengths (row ", b, " has ",
                   q_lens[size_t(b)], " queries, the plan covers ", covered[size_t(b)],
                   "); call plan_prefill again when qo_indptr changes");
}

void no_cuda(std::string_view op) {
  check::fail(op, ": the tensors are on a CUDA device but flashpage was built without CUDA ",
              "(FLASHPAGE_CUDA=OFF or no nvcc found)");
}

}  // namespace flashpage::ops_detail
