#pragma once
// Small helpers the two backends share: host copies of index tensors, views of a ragged
// token range as one [1, H, n, D] sequence (the ops take strided views: no copies), and the
// LSE tensor a forward fills.
#include <cstdint>
#include <string_view>
#include <vector>

#include "flashpage/attention.h"

namespace flashpage::attention_detail {

// Values of a 1-D int32/int64 tensor on any device, as int64 on the host; a GPU tensor is
// read on `stream` (the step's), after what was queued there.
std::vector<int64_t> host_index_values(const Tensor& t, std::string_view name,
                                       void* stream = nullptr);

// A ragged context's indptr [B+1] (int32/int64, any device) on the host, checked: [0] == 0,
// non-decreasing, [B] == tokens (the rows of `tokens_of`), all within int32.
std::vector<int64_t> host_indptr(const Tensor& t, std::string_view name, int64_t tokens,
                                 std::string_view tokens_of, void* stream = nullptr);

// The step's new key/value in the caller's layout [B, Hkv, S, D] (before the transpose the
// pool takes), so that a mismatch is reported in the order the caller wrote.
void check_step_kv(const Tensor& key, const Tensor& value, const Shape& expected);

// A paged step's queries against its metadata's rows: uniform queries [B, Hq, S, D] with B
// rows, or a ragged split (ctx.indptr) of B+1 offsets. Checked before anything is written.
void check_step_rows(const KvCacheMetadata& meta, const Tensor& query);
void check_step_rows(const KvCacheMetadata& meta, const std::vector<int64_t>& qo_indptr);

// Tokens [begin, end) of a ragged [N, H, D] tensor viewed as [1, H, end-begin, D].
Tensor tokens_as_sequence(const Tensor& tokens, int64_t begin, int64_t end);

// The lse tensor a forward should fill, checked against the shape the op produces.
Tensor lse_for(const AttentionContext& ctx, const Shape& expected);

}  // namespace flashpage::attention_detail
