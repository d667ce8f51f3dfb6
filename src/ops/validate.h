#pragma once
// Validation shared by the attention entry points (src/ops/*.cpp). Each helper throws
// flashpage::Error naming the argument, what was expected and what was given.
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "flashpage/ops.h"
#include "ops/workspace.h"

namespace flashpage::ops_detail {

// window_left >= -1, soft cap finite and >= 0, scale finite; returns a copy with
// scale <= 0 resolved to 1/sqrt(head_dim), and a window wider than `max_positions` narrowed
// to it, so that the CUDA kernels' int32 `position - window_left` cannot wrap. Callers pass a
// bound from the tensors' shapes (never from a plan's table: a graph replays over longer
// rows): the longest extent where shapes give one (sdpa, ragged: then exactly the same keys
// are seen), else INT32_MAX - query rows (paged: the same keys unless a row's keys and the
// call's query rows together pass 2^31-1).
AttentionParams resolve_params(const AttentionParams& params, int64_t head_dim,
                               int64_t max_positions = INT32_MAX);

// q/k/v/out: f32|f16|bf16, `dtype` when given (as `of`), on `device`, last dim contiguous.
void check_operand(const Tensor& t, std::string_view name, DType dtype, std::string_view of,
                   Device device);
// query/key/value of a contiguous-K/V op: `rank` dims each (layouts name them), all
// operands in the query's dtype and device, value shaped as key.
void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rank,
               std::string_view q_layout, std::string_view kv_layout);
// out: the query's shape (`layout` names it), dtype and device, last dim contiguous.
void check_out(const Tensor& out, const Tensor& q, std::string_view layout);
// lse (when defined): f32 with exactly `shape` on `device`.
void check_lse(const Tensor& lse, const Shape& shape, std::string_view layout, Device device);
// out, and lse when defined, share no memory with any of `inputs` (check::no_overlap) nor
// with each other.
struct NamedInput {
  const Tensor* tensor;
  std::string_view name;
};
void check_outputs_apart(const Tensor& out, const Tensor& lse,
                         std::initializer_list<NamedInput> inputs);
// mask element types: bool | f32 | f16 | bf16.
void check_mask_dtype(const Tensor& mask);

void check_workspace(const Workspace& ws, Device device);
// plan: of `kind`, made on this workspace by its latest plan_* call, for `device`.
void check_plan(const Workspace& ws, const Plan& plan, Plan::Kind kind, Device device);
void check_plan_shape(const Plan& plan, int64_t batch, int64_t hq, int64_t hkv, int64_t d,
                      int64_t page_size);
// CPU runs: the plan's work items read only what the current table holds and write every
// output row (q_lens: queries per row for prefill, empty for decode).
void check_decode_items(const Workspace& ws, const Plan& plan, const std::vector<int64_t>& lengths);
void check_prefill_items(const Workspace& ws, const std::vector<int64_t>& q_lens);

[[noreturn]] void no_cuda(std::string_view op);

}  // namespace flashpage::ops_detail
