// Host check of the streamed decode planner (src/ops/stream_decode_plan.h): on random
// batches every row is covered exactly once, in order, by pieces that the blocks run; partial
// slots are consistent with merge_indptr; and the blocks' loads are balanced. Pure host code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <string>

#include "ops/decode_tiling.h"
#include "ops/stream_decode_plan.h"
#include "test_util.h"

namespace {

using flashpage::StreamDecodeTiling;
using flashpage::StreamDecodeWork;

struct Config {
  int64_t hkv, d, blocks;
};

// Checks the invariants; returns the largest block load in tokens (overhead included).
// warp_partials: the partials each piece writes (1: warps sharing a head combine in the
// block; more: one per warp, and every row is merged).
// cut_tokens: every cut (a piece's start after the row's first token) is a multiple of it.
int64_t check_work(const StreamDecodeWork& w, const std::vector<int64_t>& lengths,
                   const Config& c, int64_t max_partials, int64_t warp_partials = 1,
                   int64_t cut_tokens = 1) {
  const int32_t wph = int32_t(warp_partials);
  const int64_t batch = int64_t(lengths.size());
  EXPECT_EQ(w.block_indptr.size(), size_t(c.blocks) + 1);
  EXPECT_EQ(w.block_indptr.front(), 0);
  EXPECT_EQ(w.block_indptr.back(), int32_t(w.items.size()));
  EXPECT_EQ(w.merge_indptr.size(), size_t(batch) + 1);
  EXPECT_EQ(w.num_partials, w.merge_indptr.back());
  EXPECT_LE(w.num_partials, max_partials);
  int64_t max_load = 0;
  std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> ranges;  // row -> [begin, end)
  std::map<int32_t, std::vector<int32_t>> slots;
  for (int64_t k = 0; k < c.blocks; ++k) {
    EXPECT_LE(w.block_indptr[size_t(k)], w.block_indptr[size_t(k) + 1]);
    int64_t load = 0;
    for (int32_t i = w.block_indptr[size_t(k)]; i < w.block_indptr[size_t(k) + 1]; ++i) {
      const auto& it = w.items[size_t(i)];
      EXPECT_TRUE(it.row >= 0 && it.row < batch);
      EXPECT_TRUE(0 <= it.begin && it.begin <= it.end && it.end <= lengths[size_t(it.row)]);
      EXPECT_EQ(it.begin % cut_tokens, 0) << "row " << it.row << " cut off the " << cut_tokens
                                          << "-token grid at " << it.begin;
      ranges[it.row].push_back({it.begin, it.end});
      slots[it.row].push_back(it.slot);
      load += (it.end - it.begin) + StreamDecodeTiling::kItemOverheadTokens;
    }
    max_load = std::max(max_load, load);
  }
  for (int64_t b = 0; b < batch; ++b) {
    auto& r = ranges[int32_t(b)];
    if (r.empty()) {
      ADD_FAILURE() << "row " << b << " has no item";
      continue;
    }
    std::sort(r.begin(), r.end());
    int32_t at = 0;
    for (const auto& [lo, hi] : r) {
      EXPECT_EQ(lo, at) << "row " << b << ": gap or overlap";
      at = hi;
    }
    EXPECT_EQ(at, lengths[size_t(b)]) << "row " << b << " not covered";
    const int32_t s0 = w.merge_indptr[size_t(b)], s1 = w.merge_indptr[size_t(b) + 1];
    auto& s = slots[int32_t(b)];
    if (r.size() == 1 && wph == 1) {
      EXPECT_EQ(s[0], -1) << "an uncut row writes the output itself";
      EXPECT_EQ(s0, s1);
    } else {
      EXPECT_EQ(s1 - s0, int32_t(r.size()) * wph);
      std::sort(s.begin(), s.end());
      for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], s0 + int32_t(i) * wph);
    }
  }
  return max_load;
}

TEST(StreamDecodePlan, RandomBatchesCoveredAndBalanced) {
  FP_SEEDED_RNG(rng);
  const std::vector<Config> configs = {{8, 128, 132}, {32, 128, 132}, {2, 256, 132},
                                       {1, 64, 7},    {6, 64, 1},     {4, 128, 33}};
  for (int i = 0; i < 300; ++i) {
    const Config c = configs[size_t(rng.integer(0, int64_t(configs.size()) - 1))];
    const int64_t batch = rng.integer(1, 300);
    const int64_t longest = rng.pick(std::vector<int64_t>{1, 17, 600, 9000, 40000});
    std::vector<int64_t> lengths(static_cast<size_t>(batch));
    for (auto& len : lengths) len = rng.coin(0.1) ? 0 : rng.integer(0, longest);
    const int64_t wph = rng.pick(std::vector<int64_t>{1, 2, 4});
    const int64_t cut = rng.pick(std::vector<int64_t>{1, 8});  // planned_box_tokens' values
    SCOPED_TRACE("case " + std::to_string(i) + " B=" + std::to_string(batch) + " Hkv=" +
                 std::to_string(c.hkv) + " D=" + std::to_string(c.d) + " blocks=" +
                 std::to_string(c.blocks) + " warp partials=" + std::to_string(wph) +
                 " cut=" + std::to_string(cut));
    const int64_t roomy = 1 << 20;
    const StreamDecodeWork w =
        flashpage::plan_stream_decode(lengths, c.hkv, c.blocks, roomy, 1, 0, wph, cut);
    const int64_t max_load = check_work(w, lengths, c, roomy, wph, cut);
    // Balance: no block carries much more than an equal share (plus a few minimum pieces).
    int64_t total = 0;
    for (int64_t len : lengths) total += len + StreamDecodeTiling::kItemOverheadTokens;
    const int64_t share = (total + c.blocks - 1) / c.blocks;
    const int64_t slack = 4 * (StreamDecodeTiling::kMinPieceTokens +
                               2 * StreamDecodeTiling::kItemOverheadTokens);
    EXPECT_LE(max_load, share + share / 10 + slack) << "share " << share;
    // With too few partial slots for cuts, rows stay whole (and still covered).
    const int64_t tight = batch * wph;
    const StreamDecodeWork whole =
        flashpage::plan_stream_decode(lengths, c.hkv, c.blocks, tight, 1, 0, wph);
    check_work(whole, lengths, c, tight, wph);
  }
}

// Cut on whole 8-token boxes, one long row (B = 1) reads no box twice: its pieces tile the
// row's 4096 boxes exactly, over nearly every block, and none is longer than a token-cut
// plan's longest piece rounded up to a box.
TEST(StreamDecodePlan, OneLongRowCutOnWholeBoxes) {
  const Config c{8, 128, 132};
  const StreamDecodeWork tokens = flashpage::plan_stream_decode({32768}, 8, 132, 1 << 20);
  const StreamDecodeWork boxes =
      flashpage::plan_stream_decode({32768}, 8, 132, 1 << 20, 1, 0, 1, 8);
  check_work(boxes, {32768}, c, 1 << 20, 1, 8);
  auto longest = [](const StreamDecodeWork& w) {
    int32_t n = 0;
    for (const auto& it : w.items) n = std::max(n, it.end - it.begin);
    return n;
  };
  EXPECT_LE(longest(boxes), (longest(tokens) + 7) / 8 * 8);
  EXPECT_GE(boxes.items.size(), size_t(120));
  int64_t boxes_read = 0;
  for (const auto& it : boxes.items) boxes_read += (it.end + 7) / 8 - it.begin / 8;
  EXPECT_EQ(boxes_read, 32768 / 8);
}

TEST(StreamDecodePlan, OneLongRowSpreadsOverEveryBlock) {
  const StreamDecodeWork w = flashpage::plan_stream_decode({32768}, 8, 132, 1 << 20);
  int busy = 0;
  for (size_t k = 0; k + 1 < w.block_indptr.size(); ++k) busy += w.block_indptr[k + 1] > w.block_indptr[k];
  EXPECT_EQ(busy, 132);
  EXPECT_EQ(w.num_partials, int64_t(w.items.size()));
}

// Head parts (virtual rows b * P + p): each virtual row is covered like a row of its own, and
// blocks stream Hkv / P heads. Random batches, P from the policy, the uncut rule on.
TEST(StreamDecodePlan, HeadPartsCoverEveryVirtualRow) {
  FP_SEEDED_RNG(rng);
  const std::vector<Config> configs = {{8, 128, 132}, {32, 128, 132}, {2, 256, 132}, {4, 64, 33}};
  for (int i = 0; i < 200; ++i) {
    const Config c = configs[size_t(rng.integer(0, int64_t(configs.size()) - 1))];
    const int64_t batch = rng.integer(1, 140);
    int64_t parts = 1;  // any power of two dividing Hkv (the policy picks fewer)
    while (c.hkv % (2 * parts) == 0 && rng.coin(0.6)) parts *= 2;
    const int64_t uncut_pct = rng.pick(std::vector<int64_t>{0, 10});
    const int64_t wph = rng.pick(std::vector<int64_t>{1, 2});
    const int64_t longest = rng.pick(std::vector<int64_t>{1, 600, 9000});
    std::vector<int64_t> lengths(static_cast<size_t>(batch));
    const bool uniform = rng.coin(0.5);
    for (auto& len : lengths) len = uniform ? longest : rng.integer(0, longest);
    SCOPED_TRACE("case " + std::to_string(i) + " B=" + std::to_string(batch) + " P=" +
                 std::to_string(parts) + " Hkv=" + std::to_string(c.hkv));
    const int64_t roomy = 1 << 20;
    const StreamDecodeWork w =
        flashpage::plan_stream_decode(lengths, c.hkv, c.blocks, roomy, parts, uncut_pct, wph);
    std::vector<int64_t> virtual_lengths;
    for (int64_t len : lengths) virtual_lengths.insert(virtual_lengths.end(), size_t(parts), len);
    check_work(w, virtual_lengths, {c.hkv / parts, c.d, c.blocks}, roomy, wph);
  }
}

// The block records the kernel starts from (workspace.h): each block's item range, its first
// item, and the first page of that item's batch row, read from a page table whose indptr
// follows the lengths at a random page size; blocks without items hold zeros past the range.
TEST(StreamDecodePlan, BlockRecordsNameEachBlocksStart) {
  FP_SEEDED_RNG(rng);
  constexpr size_t kRecord = size_t(flashpage::Workspace::Impl::kBlockRecordInts);
  for (int i = 0; i < 100; ++i) {
    const int64_t blocks = rng.pick(std::vector<int64_t>{132, 33, 7});
    const int64_t batch = rng.integer(1, 200);
    const int64_t parts = rng.pick(std::vector<int64_t>{1, 2, 8});
    const int64_t page_size = rng.pick(std::vector<int64_t>{1, 16, 64});
    std::vector<int64_t> lengths(static_cast<size_t>(batch));
    for (auto& len : lengths) len = rng.integer(0, 5000);
    std::vector<int32_t> indptr{0};
    for (int64_t len : lengths) indptr.push_back(indptr.back() + int32_t((len + page_size - 1) / page_size));
    SCOPED_TRACE("case " + std::to_string(i) + " B=" + std::to_string(batch) + " P=" +
                 std::to_string(parts) + " blocks=" + std::to_string(blocks));
    const StreamDecodeWork w =
        flashpage::plan_stream_decode(lengths, 8, blocks, 1 << 20, parts, rng.pick(std::vector<int64_t>{0, 10}));
    const std::vector<int32_t> r = flashpage::stream_decode_block_records(w, indptr.data(), parts);
    ASSERT_EQ(r.size(), size_t(blocks) * kRecord);
    for (size_t k = 0; k < size_t(blocks); ++k) {
      const int32_t* rec = r.data() + k * kRecord;
      EXPECT_EQ(rec[0], w.block_indptr[k]) << "block " << k;
      EXPECT_EQ(rec[1], w.block_indptr[k + 1]) << "block " << k;
      EXPECT_EQ(rec[3], 0) << "block " << k;
      if (rec[0] == rec[1]) {
        for (size_t f = 2; f < kRecord; ++f) EXPECT_EQ(rec[f], 0) << "empty block " << k;
        continue;
      }
      const flashpage::WorkItem& first = w.items[size_t(rec[0])];
      EXPECT_EQ(rec[2], indptr[size_t(first.row / parts)]) << "block " << k;
      EXPECT_EQ(rec[4], first.row) << "block " << k;
      EXPECT_EQ(rec[5], first.begin) << "block " << k;
      EXPECT_EQ(rec[6], first.end) << "block " << k;
      EXPECT_EQ(rec[7], first.slot) << "block " << k;
    }
  }
}

// The uncut rule: as many equal virtual rows as blocks or a few less run one per block with
// nothing to merge, and more rows than blocks run whole where they pack evenly; rows of
// unequal lengths, or rows that do not pack within 10% of an equal share, are still cut.
TEST(StreamDecodePlan, RowsThatFitTheBlocksStayWhole) {
  const int64_t roomy = 1 << 20;
  // B = 64, L = 4096, Hkv = 8 in two parts: 128 virtual rows of 4 KV heads on 132 blocks.
  const std::vector<int64_t> uniform(64, 4096);
  const StreamDecodeWork whole = flashpage::plan_stream_decode(uniform, 8, 132, roomy, 2, 10);
  EXPECT_EQ(whole.num_partials, 0);
  EXPECT_EQ(whole.items.size(), size_t(128));
  for (size_t k = 0; k + 1 < whole.block_indptr.size(); ++k)
    EXPECT_LE(whole.block_indptr[k + 1] - whole.block_indptr[k], 1) << "block " << k;
  // The same rows with the rule off: cut to equal shares over all 132 blocks.
  const StreamDecodeWork cut = flashpage::plan_stream_decode(uniform, 8, 132, roomy, 2, 0);
  EXPECT_GT(cut.num_partials, 0);
  // Lengths 1..8192: the longest is far above an equal share, so rows are cut.
  std::vector<int64_t> ragged(64);
  for (size_t b = 0; b < ragged.size(); ++b) ragged[b] = 1 + int64_t(b) * 8191 / 63;
  EXPECT_GT(flashpage::plan_stream_decode(ragged, 8, 132, roomy, 2, 10).num_partials, 0);
  // More rows than blocks, packed whole where no block ends up more than 10% above an equal
  // share: 256 rows on 132 blocks (two rows on most blocks, 3% above a share) stay whole...
  const StreamDecodeWork packed =
      flashpage::plan_stream_decode(std::vector<int64_t>(256, 1024), 8, 132, roomy, 1, 10);
  EXPECT_EQ(packed.num_partials, 0);
  EXPECT_EQ(packed.items.size(), size_t(256));
  for (size_t k = 0; k + 1 < packed.block_indptr.size(); ++k)
    EXPECT_LE(packed.block_indptr[k + 1] - packed.block_indptr[k], 2) << "block " << k;
  // ...133 rows are cut (whole, one block would run two rows: twice a share)...
  EXPECT_GT(flashpage::plan_stream_decode(std::vector<int64_t>(133, 1024), 8, 132, roomy, 1, 10)
                .num_partials,
            0);
  // ...and so are 256 rows with the rule off.
  EXPECT_GT(flashpage::plan_stream_decode(std::vector<int64_t>(256, 1024), 8, 132, roomy, 1, 0)
                .num_partials,
            0);
}

// P: the largest power of two dividing Hkv with B * P <= blocks whose parts keep the blocks'
// consumer warps (wide blocks, with the combine) or KV heads (the default policy), where
// the virtual rows then fill the blocks (within 10%), on pages of whole 8-token boxes.
TEST(StreamDecodePlan, HeadPartsPolicy) {
  // The default policy's expectations (the knob is read once per process).
  const char* mode = std::getenv("FLASHPAGE_DECODE_HEAD_PARTS");
  if (mode != nullptr && std::string(mode) != "1") GTEST_SKIP() << "FLASHPAGE_DECODE_HEAD_PARTS=" << mode;
  // Groups of 4 (32/8/128): every wide block below keeps its combine at page 16.
  const auto parts = [](int64_t batch, int64_t hkv, int64_t d, int64_t page, bool wide) {
    return flashpage::stream_decode_head_parts(batch, hkv, d, 4, page, 132, wide);
  };
  for (bool wide : {true, false}) {
    SCOPED_TRACE(wide ? "wide blocks" : "blocks of fewer than 8 heads on 4 warps");
    EXPECT_EQ(parts(64, 32, 128, 16, wide), 2);   // 16 heads a part, 8 a block
    EXPECT_EQ(parts(33, 32, 128, 16, wide), 4);
    EXPECT_EQ(parts(60, 16, 128, 16, wide), 2);   // 120 rows: within 10%
    EXPECT_EQ(parts(50, 16, 128, 16, wide), 1);   // 100 rows: cut anyway
    EXPECT_EQ(parts(64, 8, 256, 16, wide), 2);    // 4 heads a block at 256
    EXPECT_EQ(parts(128, 32, 128, 16, wide), 1);  // fills the blocks as it is
    EXPECT_EQ(parts(64, 32, 128, 1, wide), 1);    // page 1: single-token copies
    EXPECT_EQ(parts(64, 32, 128, 12, wide), 1);   // no whole boxes
    EXPECT_EQ(parts(0, 32, 128, 16, wide), 1);
  }
  // Wide: 4, 2 or 1 heads on 8 warps, and at head_dim 256 (4 warps whatever the heads) parts
  // down to one head.
  EXPECT_EQ(parts(64, 8, 128, 16, true), 2);
  EXPECT_EQ(parts(32, 8, 128, 16, true), 4);
  EXPECT_EQ(parts(16, 32, 128, 16, true), 8);   // 128 rows of 4 heads
  // Parts of one head on 8 warps (the default); with FLASHPAGE_DECODE_ONE_HEAD_WIDE=0 one
  // head has 4 warps and 8 KV heads stop at parts of 2 (64 rows: cut anyway).
  const bool one_head = flashpage::stream_decode_one_head_wide();
  // Measured (session 37: 16 x 8192 +1.7-4.1% on the H200), so on unless the knob says 0.
  if (std::getenv("FLASHPAGE_DECODE_ONE_HEAD_WIDE") == nullptr) {
    EXPECT_TRUE(one_head) << "one-head blocks on 8 warps are the default";
  }
  EXPECT_EQ(parts(16, 8, 128, 16, true), one_head ? 8 : 1);  // 128 uncut rows of 1 head
  EXPECT_EQ(parts(64, 2, 128, 16, true), one_head ? 2 : 1);
  EXPECT_EQ(parts(8, 8, 128, 16, true), 1);     // 64 rows at most: cut anyway
  // The launch's block: a part of one head runs wide, a row of one KV head (Hkv = 1: cut
  // into short items) keeps 4 warps (session 42).
  const bool combine = flashpage::stream_decode_combine();
  EXPECT_EQ(flashpage::stream_decode_block(8, 8, 128, 4, 16).warps, one_head && combine ? 8 : 4);
  EXPECT_EQ(flashpage::stream_decode_block(1, 1, 128, 4, 16).warps, 4);
  EXPECT_EQ(flashpage::stream_decode_block(1, 1, 64, 8, 16).warps, 4);
  EXPECT_EQ(parts(16, 8, 128, 16, false), 1);   // 2 heads on 4 warps at most
  EXPECT_EQ(parts(64, 2, 128, 16, false), 1);   // 1 head: 4 warps, 2 heads: 4 warps
  EXPECT_EQ(parts(64, 2, 256, 16, true), 2);    // 1 head on 4 warps, as 2 heads
  EXPECT_EQ(parts(16, 8, 256, 16, true), 8);
  // Not wide: the blocks keep their heads.
  EXPECT_EQ(parts(64, 8, 128, 16, false), 1);
  EXPECT_EQ(parts(32, 8, 128, 16, false), 1);
  EXPECT_EQ(parts(16, 32, 128, 16, false), 1);  // 4 parts of 8 heads: 64 rows, cut anyway
  EXPECT_EQ(parts(64, 2, 256, 16, false), 1);
  EXPECT_EQ(parts(16, 8, 256, 16, false), 1);   // 2 parts of 4: 32 rows, cut anyway
}

// The combine's buffer may not cost a wide block's ring a stage below 3: 16/2/256 at page 1
// (2 heads on 4 warps, single-token boxes, groups of 8) lost one (3 -> 2) and ran 5-9% slower
// on an H100 (bench/NOTES.md, session 28), so it keeps per-warp partials; at page 16 it
// combines. Deep rings may give a stage (head_dim 64).
TEST(StreamDecodePlan, BlockCombinesWhereTheRingKeepsItsStages) {
  using T = flashpage::StreamDecodeTiling;
  const auto page1 = T::block(2, 256, 8, T::planned_box_tokens(1), true);
  EXPECT_FALSE(page1.combine);
  EXPECT_EQ(page1.warps, 4);
  EXPECT_EQ(page1.warp_partials(), 2);
  EXPECT_EQ(T::stages(2, 4, 256, 8, 1, false), 3);
  const auto page16 = T::block(2, 256, 8, T::planned_box_tokens(16), true);
  EXPECT_TRUE(page16.combine);
  EXPECT_EQ(page16.warp_partials(), 1);
  // 32/8/128 at B = 64, page 16: parts of 4 heads on 8 warps, 3 stages with the buffer.
  const auto wide = T::block(4, 128, 4, T::planned_box_tokens(16), true);
  EXPECT_TRUE(wide.combine);
  EXPECT_EQ(wide.warps, 8);
  EXPECT_EQ(T::stages(4, 8, 128, 4, 8, true), 3);
  const auto deep = T::block(4, 64, 1, T::planned_box_tokens(16), true);
  EXPECT_TRUE(deep.combine);
  EXPECT_LT(T::stages(4, 8, 64, 1, 8, true), T::stages(4, 8, 64, 1, 8, false));
  // One head (session 36): 8 warps where the ring keeps 3 stages with the buffer (boxes of 8
  // tokens, groups of 4: 32/8/128 at B = 16 in parts of one head), else the 4 of before:
  // single-token boxes (128-token stages of 96 KB: 2 stages), or not asked for.
  const auto one = T::block(1, 128, 4, T::planned_box_tokens(16), true, true);
  EXPECT_TRUE(one.combine);
  EXPECT_EQ(one.warps, 8);
  EXPECT_EQ(T::stages(1, 8, 128, 4, 8, true), 3);
  EXPECT_EQ(T::block(1, 128, 4, T::planned_box_tokens(1), true, true).warps, 4);
  EXPECT_EQ(T::block(1, 128, 4, T::planned_box_tokens(16), true, false).warps, 4);
  EXPECT_EQ(T::block(1, 256, 4, T::planned_box_tokens(16), true, true).warps, 4);
  // 16/2/128 at page 1 (session 42): 2 stages on 8 warps with the buffer, 5 on the 4-warp
  // fallback, so the fallback; at page 16 the buffer leaves 8 warps 3 stages, so they combine.
  const auto two_heads = T::block(2, 128, 8, T::planned_box_tokens(1), true);
  EXPECT_FALSE(two_heads.combine);
  EXPECT_EQ(two_heads.warps, 4);
  EXPECT_EQ(T::stages(2, 8, 128, 8, 1, true), 2);
  EXPECT_EQ(T::stages(2, 4, 128, 8, 1, false), 5);
  EXPECT_TRUE(T::block(2, 128, 8, T::planned_box_tokens(16), true).combine);
  EXPECT_EQ(T::block(2, 128, 8, T::planned_box_tokens(16), true).warps, 8);
  // Off: the blocks before session 27.
  EXPECT_FALSE(T::block(4, 128, 4, 8, false).combine);
  EXPECT_EQ(T::block(4, 128, 4, 8, false).warps, 4);
}

// The producer warps the default rule gives, on the shapes sessions 40-41 measured (H100,
// in-run): page 1 takes one fewer than its ring's stages where that is more than 2 (8/1/128:
// 3, 32/4/128: 4, each faster than 2), keeps 2 on a ring of 3 (16/2/256, slower on 3) and
// where 8 consumer warps cap it (32/8/128); boxes of 8 tokens keep 2. At head_dim 64, 8
// consumer warps leave room for 4 (8/1/64 and 32/8/64 page 1).
TEST(StreamDecodePlan, ProducerWarpsByRing) {
  using T = flashpage::StreamDecodeTiling;
  struct Case {
    int hq, hkv, d, page, producers;
  };
  for (const Case c : {Case{8, 1, 128, 1, 3}, Case{32, 4, 128, 1, 4}, Case{16, 2, 256, 1, 2},
                       Case{32, 8, 128, 1, 2}, Case{8, 1, 128, 16, 2}, Case{16, 1, 256, 16, 2},
                       Case{32, 4, 128, 16, 2}, Case{8, 1, 64, 1, 4}, Case{32, 8, 64, 1, 4},
                       Case{8, 1, 64, 16, 2}}) {
    SCOPED_TRACE(::testing::Message() << c.hq << "/" << c.hkv << "/" << c.d << " page " << c.page);
    const int group = c.hq / c.hkv, box = T::planned_box_tokens(c.page);
    const auto b = flashpage::stream_decode_block(c.hkv, 1, c.d, group, c.page);
    const int stages = T::stages(b.heads, b.warps, c.d, group, box, b.combine);
    EXPECT_EQ(T::producer_warps(0, b.warps, c.d, stages, box), c.producers);
  }
}

// Where each warp sharing a head writes its own partial, every row needs that many slots.
TEST(StreamDecodePlan, TooFewSlotsForWarpPartialsIsAnError) {
  EXPECT_THROW(flashpage::plan_stream_decode({10, 10}, 2, 4, 3, 1, 0, 2), flashpage::Error);
}

// Warps that combine in the block need no slots of their own: with no room for cuts, long
// rows run whole (and write the output themselves).
TEST(StreamDecodePlan, NoSlotsLeavesRowsWhole) {
  const StreamDecodeWork w = flashpage::plan_stream_decode({32768, 9000}, 2, 132, 0);
  EXPECT_EQ(w.num_partials, 0);
  ASSERT_EQ(w.items.size(), size_t(2));
  for (const auto& it : w.items) EXPECT_EQ(it.slot, -1);
}

}  // namespace

// The ring's geometry (decode_tiling.h) for every block shape the kernel can get (any head
// part, blocks of 2 or 4 heads on 8 warps or not), padded rows and TMA boxes: the consumer
// warps are a kernel instance's (8 only up to head_dim 128) with at most 8 per head; the ring
// and the combine buffer fit the shared-memory budget with at least two stages; for boxes,
// rows stay 128-byte aligned, a stage holds whole boxes, and single-token boxes sit an odd
// number of 128-byte rows apart (what makes 8 consecutive tokens fall in 8 swizzle phases).
// And the producer-warp count each shape gets.
TEST(StreamDecodePlan, RingGeometry) {
  using T = StreamDecodeTiling;
  for (int d : {64, 128, 256})
    for (int hkv : {1, 2, 3, 4, 8, 16, 32})
      for (int parts = 1; hkv % parts == 0; parts *= 2)
        for (int wide = 0; wide < 3; ++wide) {  // wide blocks come with the combine
          // wide 2: one-head blocks may take 8 warps too, which block() grants by the ring
          // (boxes of 8 tokens planned; box 0 is what runs where the driver refuses the maps).
          const int heads = T::heads_per_block(hkv / parts, d);
          SCOPED_TRACE(::testing::Message() << "d=" << d << " hkv=" << hkv << " parts=" << parts
                                            << " wide=" << wide);
          for (int group = 1; group <= 32; ++group)
            for (int box : {0, 1, T::kTmaBoxTokens}) {
              SCOPED_TRACE(::testing::Message() << "group=" << group << " box=" << box);
              bool combine = wide > 0;
              int warps = T::consumer_warps(heads, d, combine);
              if (wide == 2) {
                const auto b = T::block(hkv / parts, d, group, box == 1 ? 1 : T::kTmaBoxTokens,
                                        true, true);
                EXPECT_EQ(b.heads, heads);
                warps = b.warps;
                combine = b.combine;
              }
              EXPECT_TRUE(warps == 4 || (warps == 8 && d <= 128)) << warps << " warps";
              EXPECT_EQ(warps % heads, 0);
              EXPECT_LE(T::warps_per_head(heads, warps), T::kMaxWarpsPerHead);
              const int stages = T::stages(heads, warps, d, group, box, combine);
              EXPECT_GE(stages, 2);
              EXPECT_LE(T::smem_bytes(heads, warps, d, group, box, combine, stages),
                        T::kSmemBudget);
              EXPECT_EQ(T::combine_bytes(heads, warps, d, group, combine) % 128, 0);
              // Producer warps: at least one, never more than the ring's stages (a producer
              // must not run a whole ring ahead of the releases it waits on) nor the kernel's
              // limit, whether asked for (1-9) or by the ring's rule (0).
              for (int requested : {0, 1, 2, 3, 4, 9}) {
                const int p = T::producer_warps(requested, warps, d, stages, box);
                EXPECT_GE(p, 1);
                EXPECT_LE(p, stages);
                EXPECT_LE(p, T::max_producer_warps(warps, d));
                if (requested >= 1 && requested <= 2) {
                  EXPECT_EQ(p, requested);  // 2 always fit
                }
              }
              if (box == 0) continue;
              EXPECT_EQ(T::stage_tokens(heads, warps) % box, 0);
              const int stride = T::tma_box_stride(heads, d, box);
              EXPECT_EQ(stride % T::kSwizzleRowBytes, 0);
              EXPECT_GE(stride, T::tma_box_bytes(heads, d, box));
              EXPECT_EQ(T::stage_bytes(heads, warps, d, box) % (2 * T::kSwizzleRowBytes), 0);
              if (box == 1) {
                EXPECT_EQ((stride / T::kSwizzleRowBytes) % 2, 1);
              } else {
                EXPECT_EQ(T::tma_box_bytes(heads, d, box) % T::kSwizzleAtomBytes, 0);
              }
            }
        }
}
