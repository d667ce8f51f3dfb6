#include "ops/stream_decode_plan.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <queue>

#include "core/check.h"
#include "ops/decode_tiling.h"

namespace flashpage {

namespace {

using Tiling = StreamDecodeTiling;

struct Piece {
  int32_t row, begin, end;
  int64_t block;
};

// Lays the rows end to end and cuts them into `blocks` shares of about `quota` tokens (each
// item also costs kItemOverheadTokens). Returns the pieces and the last block's load, which
// absorbs what the quota underestimated.
std::vector<Piece> cut_rows(const std::vector<int64_t>& lengths, int64_t blocks, int64_t quota,
                            int64_t cut_tokens, int64_t& last_load) {
  constexpr int64_t kOverhead = Tiling::kItemOverheadTokens;
  constexpr int64_t kMinPiece = Tiling::kMinPieceTokens;
  const int64_t last = blocks - 1;
  std::vector<Piece> pieces;
  int64_t block = 0, load = 0;
  auto next_block = [&] {
    if (block < last) {
      ++block;
      load = 0;
    }
  };
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t len = lengths[b];
    if (len == 0) {  // still an item: its output is written (zeros, LSE -inf)
      pieces.push_back({int32_t(b), 0, 0, block});
      load += kOverhead;
      if (load >= quota) next_block();
      continue;
    }
    int64_t pos = 0;
    while (pos < len) {
      const int64_t rem = len - pos, room = quota - load - kOverhead;
      int64_t take;
      if (block == last || rem <= room) {
        take = rem;
      } else if (room >= kMinPiece) {
        // Never leave a tail shorter than a minimum piece for the next block.
        take = rem - room >= kMinPiece ? room : std::max(rem - kMinPiece, kMinPiece);
        if (take >= rem) take = rem;
        // A cut falls on a whole box from the row's start (pos is one, take >= kMinPiece),
        // so neither piece reads the box it shares with the other.
        if (take < rem) take -= take % cut_tokens;
      } else {
        next_block();
        continue;
      }
      pieces.push_back({int32_t(b), int32_t(pos), int32_t(pos + take), block});
      load += take + kOverhead;
      pos += take;
      if (load + kOverhead + kMinPiece > quota) next_block();
    }
  }
  last_load = block == last ? load : 0;
  return pieces;
}

// Whole rows to blocks, longest first onto the least loaded block: when cuts would need more
// partial slots than the workspace has, and for the uncut rule. `max_load`: the fullest
// block's tokens (each item also costs kItemOverheadTokens, as in cut_rows).
std::vector<Piece> assign_rows(const std::vector<int64_t>& lengths, int64_t blocks,
                               int64_t* max_load = nullptr) {
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return lengths[x] > lengths[y]; });
  using Load = std::pair<int64_t, int64_t>;  // (tokens, block)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (int64_t k = 0; k < blocks; ++k) heap.push({0, k});
  std::vector<Piece> pieces;
  int64_t fullest = 0;
  for (size_t b : order) {
    Load l = heap.top();
    heap.pop();
    pieces.push_back({int32_t(b), 0, int32_t(lengths[b]), l.second});
    l.first += lengths[b] + Tiling::kItemOverheadTokens;
    fullest = std::max(fullest, l.first);
    heap.push(l);
  }
  if (max_load != nullptr) *max_load = fullest;
  return pieces;
}

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoll(v) : fallback;
}

// The block for `head_parts` parts of `num_kv_heads` KV heads at this page size's planned
// boxes, with the combine given (the process's knob, or the head-parts policy's `wide` under
// test). One-head blocks run wide only as head parts: those are the uncut rows session 37 made
// them for (32/8/128 at B = 16). Unparted one-head blocks (Hkv = 1, or odd Hkv) stream rows
// cut over the SMs into short items, where 4 warps' 64-token stages won in-run on an H100
// (session 42: 8/1/64 64 x 512 +20% at page 1; 8/1/128 +8% at page 16; 64 x 4096 1-2%
// slower; tested as the default in session 43).
Tiling::Block block_for(int64_t num_kv_heads, int64_t head_parts, int64_t head_dim,
                        int64_t group_size, int64_t page_size, bool combine) {
  return Tiling::block(int(num_kv_heads / head_parts), int(head_dim), int(group_size),
                       Tiling::planned_box_tokens(page_size), combine,
                       head_parts > 1 && stream_decode_one_head_wide());
}

}  // namespace

int64_t stream_decode_head_parts(int64_t batch, int64_t num_kv_heads, int64_t head_dim,
                                 int64_t group_size, int64_t page_size, int64_t blocks, bool wide) {
  static const int64_t mode = env_or("FLASHPAGE_DECODE_HEAD_PARTS", 1);
  const int64_t pct = stream_decode_uncut_pct();
  if (mode == 0 || pct == 0 || batch < 1 || page_size % Tiling::kTmaBoxTokens != 0) return 1;
  const auto block = [&](int64_t parts) {
    return block_for(num_kv_heads, parts, head_dim, group_size, page_size, wide);
  };
  // Modes 1 and 3: only while a part's blocks keep their consumer warps (wide blocks) or
  // their KV heads (the policy before session 27); mode 2: also parts down to 4 KV heads on
  // fewer warps.
  const auto keeps_rate = [&](int64_t parts) {
    if (mode == 2) return num_kv_heads / parts >= Tiling::kMinConsumerWarps;
    return wide ? block(parts).warps >= block(1).warps : block(parts).heads >= block(1).heads;
  };
  int64_t parts = 1;
  while (num_kv_heads % (2 * parts) == 0 && keeps_rate(2 * parts) && batch * 2 * parts <= blocks)
    parts *= 2;
  // Mode 3 (an experiment, session 28): rows that are cut anyway take the parts too, so the
  // merge reads P times fewer partials per query head (B = 1: 33 instead of 132).
  if (mode == 3) return parts;
  // Parts pay only where the virtual rows then fill the blocks, so that equal rows run uncut.
  return batch * parts * (100 + pct) >= blocks * 100 ? parts : 1;
}

int64_t stream_decode_uncut_pct() {
  static const int64_t pct = std::max<int64_t>(0, env_or("FLASHPAGE_DECODE_UNCUT_PCT", 10));
  return pct;
}

int64_t stream_decode_cut_tokens(int64_t page_size) {
  static const bool aligned = env_or("FLASHPAGE_DECODE_CUT_ALIGN", 1) != 0;
  return aligned ? Tiling::planned_box_tokens(page_size) : 1;
}

bool stream_decode_combine() {
  static const bool combine = env_or("FLASHPAGE_DECODE_COMBINE", 1) != 0;
  return combine;
}

bool stream_decode_one_head_wide() {
  static const bool wide = env_or("FLASHPAGE_DECODE_ONE_HEAD_WIDE", 1) != 0;
  return wide;
}

StreamDecodeTiling::Block stream_decode_block(int64_t num_kv_heads, int64_t head_parts,
                                              int64_t head_dim, int64_t group_size,
                                              int64_t page_size) {
  return block_for(num_kv_heads, head_parts, head_dim, group_size, page_size,
                   stream_decode_combine());
}

StreamDecodeWork plan_stream_decode(const std::vector<int64_t>& row_lengths, int64_t num_kv_heads,
                                    int64_t blocks, int64_t max_partials, int64_t head_parts,
                                    int64_t uncut_pct, int64_t warp_partials,
                                    int64_t cut_tokens) {
  check::require(cut_tokens >= 1 && cut_tokens <= Tiling::kMinPieceTokens,
                 "plan_decode: expected cuts every 1 to ", Tiling::kMinPieceTokens,
                 " tokens, got ", cut_tokens);
  check::require(warp_partials >= 1, "plan_decode: expected at least one partial per piece, got ",
                 warp_partials);
  check::require(blocks >= 1, "plan_decode: expected at least one block, got ", blocks);
  check::require(head_parts >= 1 && num_kv_heads % head_parts == 0, "plan_decode: ",
                 head_parts, " head parts do not divide ", num_kv_heads, " KV heads");
  // Virtual row v = b * P + p: row b's head part p, as long as row b.
  std::vector<int64_t> lengths;
  lengths.reserve(row_lengths.size() * size_t(head_parts));
  for (int64_t len : row_lengths) lengths.insert(lengths.end(), size_t(head_parts), len);
  const int64_t rows = int64_t(lengths.size());  // virtual rows
  constexpr int64_t kOverhead = Tiling::kItemOverheadTokens;

  // Every sub-unit of an item costs the same, so shares are counted in tokens of one. The
  // smallest quota whose cut leaves the last block no fuller than the others, by bisection
  // (a cut is linear in rows + blocks).
  int64_t total = 0;
  for (int64_t len : lengths) total += len + kOverhead;
  int64_t lo = std::max<int64_t>(1, (total + blocks - 1) / blocks), hi = total + kOverhead;
  auto fits = [&](int64_t quota, std::vector<Piece>* out) {
    int64_t last_load = 0;
    std::vector<Piece> cut = cut_rows(lengths, blocks, quota, cut_tokens, last_load);
    if (out) *out = std::move(cut);
    return last_load <= quota;
  };
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid, nullptr))
      hi = mid;
    else
      lo = mid + 1;
  }
  std::vector<Piece> pieces;
  fits(lo, &pieces);
  // Uncut where whole virtual rows, longest first onto the least loaded block, leave no
  // block more than uncut_pct above the equal share `lo`: a block's share grows a little,
  // the merge goes. With at most one row per block that is "the longest row is within
  // uncut_pct of a share" (session 24); with more rows than blocks, e.g. 256 x 1024 on 132
  // blocks (two rows on most blocks: 3% above a share), it spares cutting ~130 rows.
  if (uncut_pct > 0 && rows >= 1) {
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end()) + kOverhead;
    if (longest * 100 <= lo * (100 + uncut_pct)) {  // else no packing can be within it
      int64_t max_load = 0;
      std::vector<Piece> whole = assign_rows(lengths, blocks, &max_load);
      if (max_load * 100 <= lo * (100 + uncut_pct)) pieces = std::move(whole);
    }
  }

  auto count_partials = [&](const std::vector<Piece>& ps) {
    std::vector<int64_t> per_row(size_t(rows), 0);
    for (const Piece& p : ps) ++per_row[size_t(p.row)];
    int64_t n = 0;
    for (int64_t c : per_row)
      if (c > 1 || warp_partials > 1) n += c * warp_partials;
    return n;
  };
  if (count_partials(pieces) > max_partials) pieces = assign_rows(lengths, blocks);
  const int64_t needed = count_partials(pieces);
  check::require(needed <= max_partials, "workspace: decode needs ", needed,
                 " partial slots, the workspace holds ", max_partials,
                 "; create the Workspace with more bytes");

  StreamDecodeWork work;
  // Slots, row by row (merge_indptr is per row).
  std::vector<std::vector<size_t>> by_row(lengths.size());
  for (size_t i = 0; i < pieces.size(); ++i) by_row[size_t(pieces[i].row)].push_back(i);
  std::vector<int32_t> slot_of(pieces.size(), -1);
  work.merge_indptr.assign(size_t(rows) + 1, 0);
  int32_t slot = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const auto& ids = by_row[size_t(b)];
    if (ids.size() > 1 || warp_partials > 1)
      for (size_t i : ids) {
        slot_of[i] = slot;
        slot += int32_t(warp_partials);
      }
    work.merge_indptr[size_t(b) + 1] = slot;
  }
  work.num_partials = slot;

  // Items grouped by block, each block's in the order they were assigned.
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return pieces[x].block < pieces[y].block; });
  work.block_indptr.assign(size_t(blocks) + 1, 0);
  for (size_t i : order) {
    const Piece& p = pieces[i];
    work.items.push_back({p.row, p.begin, p.end, slot_of[i]});
    ++work.block_indptr[size_t(p.block) + 1];
  }
  for (int64_t k = 0; k < blocks; ++k) work.block_indptr[size_t(k) + 1] += work.block_indptr[size_t(k)];
  return work;
}

std::vector<int32_t> stream_decode_block_records(const StreamDecodeWork& work,
                                                 const int32_t* kv_indptr, int64_t head_parts) {
  constexpr int64_t kRecord = Workspace::Impl::kBlockRecordInts;
  const size_t blocks = work.block_indptr.empty() ? 0 : work.block_indptr.size() - 1;
  std::vector<int32_t> records(blocks * size_t(kRecord), 0);
  for (size_t k = 0; k < blocks; ++k) {
    int32_t* r = records.data() + k * size_t(kRecord);
    r[0] = work.block_indptr[k];
    r[1] = work.block_indptr[k + 1];
    if (r[0] == r[1]) continue;
    const WorkItem& first = work.items[size_t(r[0])];
    r[2] = kv_indptr[first.row / head_parts];
    r[4] = first.row;
    r[5] = first.begin;
    r[6] = first.end;
    r[7] = first.slot;
  }
  return records;
}

}  // namespace flashpage
