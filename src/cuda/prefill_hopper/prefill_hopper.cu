// Host side of the Hopper prefill: the coverage decision (build, device, shapes) and the
// launch arguments, schedule size and grid, derived once per call.
#include "cuda/prefill_hopper/prefill_hopper.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda/cuda_check.h"
#include "cuda/prefill_hopper/fold_model.h"
#include "cuda/prefill_hopper/launch.h"
#include "cuda/prefill_hopper/scheduler.cuh"
#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/prefill_hopper/warpgroup_choice.h"
#include "cuda/prefill_tc/prefill_tc.h"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda {

namespace {

// What the kernel needs to know about a device, asked once per device: whether it is a
// compute capability 9.0 part (sm_90a code runs on exactly those) and its SM count (the
// persistent grid).
struct DeviceFacts {
  bool hopper = false;
  int sms = 0;
};

DeviceFacts device_facts() {
  constexpr int kMaxDevices = 64;
  // Packed (sms << 2 | hopper << 1 | known) so one atomic holds a device's answer.
  static std::atomic<uint32_t> cache[kMaxDevices];
  int device = 0;
  FP_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<uint32_t>* slot = device >= 0 && device < kMaxDevices ? &cache[device] : nullptr;
  uint32_t packed = slot != nullptr ? slot->load(std::memory_order_acquire) : 0u;
  if ((packed & 1u) == 0) {
    int major = 0, minor = 0, sms = 0;
    FP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    FP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    FP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    packed = (uint32_t(sms) << 2) | (major == 9 && minor == 0 ? 2u : 0u) | 1u;
    if (slot != nullptr) slot->store(packed, std::memory_order_release);
  }
  return {(packed & 2u) != 0, int(packed >> 2)};
}

// The build carries sm_90a machine code for the kernel (CMake defines this when
// CMAKE_CUDA_ARCHITECTURES lists 90a); without it the kernel body is empty.
constexpr bool kBuiltForSm90a =
#if defined(FLASHPAGE_HAVE_SM90A)
    true;
#else
    false;
#endif

// The shared operand checks (prefill_tc.h), without explicit masks (prefill_tc's), and rows
// whose longest the host or the kernel knows.
bool covered_shapes(const PrefillTcParams& p) {
  if (!prefill_operands_covered(p) || p.mask != nullptr) return false;
  // An unknown longest row: only ragged queries, whose qo_indptr the kernel can read.
  if (p.work_ints == nullptr && p.max_qo_len < 0 && p.qo_indptr == nullptr) return false;
  return true;
}

template <class T>
void dispatch_head_dim(const prefill_hopper::HopperArgs& args, int math_warpgroups, int grid,
                       cudaStream_t stream) {
  if (args.k.p.head_dim == 64 && math_warpgroups == 3)
    prefill_hopper::launch<T, 64, 3>(args, grid, stream);
  else if (args.k.p.head_dim == 64)
    prefill_hopper::launch<T, 64>(args, grid, stream);
  else if (args.k.p.head_dim == 128)
    prefill_hopper::launch<T, 128>(args, grid, stream);
  else
    prefill_hopper::launch<T, 256>(args, grid, stream);
}

// Benchmark knobs, read once (bench/NOTES.md records what they showed):
// FLASHPAGE_PREFILL_ABLATE=bits leaves stages out (HopperArgs::ablate; wrong results),
// FLASHPAGE_PREFILL_L2_BAND=0 runs every KV head in one band (split_band),
// FLASHPAGE_PREFILL_PINGPONG=0 lets the consumer warpgroups issue GEMMs without taking turns,
// FLASHPAGE_PREFILL_TMA=0 loads every K/V tile by cp.async (kv_tma.h),
// FLASHPAGE_PREFILL_TMA_PROMOTION=0|128|256 sets the K/V maps' L2 promotion (256 by default),
// FLASHPAGE_PREFILL_FOLD=0 strides causal schedules unit by unit (scheduler.cuh, folding),
// FLASHPAGE_PREFILL_ROW_MAJOR=0 orders non-causal ragged ranges rank-major (HopperArgs),
// FLASHPAGE_PREFILL_CAUSAL_ROW_MAJOR=0 orders causal ragged ranges rank-major (the order before
//   session 31, folded where fold_model.h says it pays),
// FLASHPAGE_PREFILL_MULTICAST=0 keeps a FLASHPAGE_PREFILL_CLUSTER build off clusters,
// FLASHPAGE_PREFILL_PAGED_LIST=0 runs paged calls without the plan's work list on two math
//   warpgroups too (the kernel cuts the rows into ranges itself, as for ragged queries),
// FLASHPAGE_PREFILL_THREE_WG=0 runs head_dim 64 on two math warpgroups everywhere, =1 on
//   three wherever they apply whatever the rows (the rule before session 35), unset: the
//   rule (warpgroup_choice.h).
struct HopperKnobs {
  int ablate = 0;
  bool l2_bands = true;
  bool pingpong = true;
  bool tma = true;
  int tma_promotion = 256;
  bool fold = true;
  bool row_major = true;
  bool causal_row_major = true;
  bool multicast = true;
  int three_wg = -1;  // -1: the rule
  bool paged_list = true;
  // Dense ragged units: session 49 (H100) measured them at a median 1.28x over 48 ragged
  // shapes (up to 3.9x on 500 short rows and 4 long), level on uniform rows (bench/NOTES.md).
  bool dense_ragged = true;
  int unband_tiles = 2;
  // Mixed rows whose longest row's K/V over all heads is at most this many MiB drop the L2
  // bands (sessions 48-49, H100: +8-25% on five MHA mixes of 16-34 MB, GQA rows of 8-34 MB
  // -3 to +7%, inside the run's noise; rows of 49-134 MB lost 6-9% without the bands):
  // about four fifths of the 50 MB L2 of the H100 and H200.
  int64_t unband_mb = 40;
};
const HopperKnobs& hopper_knobs() {
  static const HopperKnobs knobs = [] {
    HopperKnobs k;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_ABLATE")) k.ablate = std::atoi(v);
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_L2_BAND")) k.l2_bands = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_PINGPONG")) k.pingpong = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_TMA")) k.tma = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_TMA_PROMOTION"))
      k.tma_promotion = std::atoi(v);
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_FOLD")) k.fold = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_ROW_MAJOR"))
      k.row_major = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_CAUSAL_ROW_MAJOR"))
      k.causal_row_major = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_MULTICAST"))
      k.multicast = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_THREE_WG")) k.three_wg = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_PAGED_LIST"))
      k.paged_list = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_DENSE_RAGGED"))
      k.dense_ragged = std::atoi(v) != 0;
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_UNBAND_TILES"))
      k.unband_tiles = std::max(std::atoi(v), 0);
    if (const char* v = std::getenv("FLASHPAGE_PREFILL_UNBAND_MB"))
      k.unband_mb = std::max<int64_t>(std::atoll(v), 0);
    return k;
  }();
  return knobs;
}

// Tokens per row from a total over `batch` rows, rounded up (the mean where only the device
// knows each row); 0 when unknown.
int64_t mean_per_row(int64_t total, int batch) {
  return batch > 0 && total > 0 ? (total + batch - 1) / batch : 0;
}

thread_local bool g_last_ran_pairs = false;
thread_local int g_last_math_warpgroups = 0;

}  // namespace

bool prefill_hopper_cluster_build() { return prefill_hopper::kClusterBuild; }
bool prefill_hopper_last_ran_pairs() { return g_last_ran_pairs; }
int prefill_hopper_last_math_warpgroups() { return g_last_math_warpgroups; }

bool prefill_hopper_covers(const PrefillTcParams& p) {
  if (!kBuiltForSm90a || !covered_shapes(p)) return false;
  return device_facts().hopper;
}

bool run_prefill_hopper(const PrefillTcParams& params, cudaStream_t stream) {
  g_last_ran_pairs = false;
  if (!prefill_hopper_covers(params)) return false;
  using prefill_hopper::HopperArgs;
  PrefillTcParams p = params;
  // Three math warpgroups (192-row M tiles) where they pay (warpgroup_choice.h).
  prefill_hopper::KvTma kv_tma;
  if (hopper_knobs().tma) kv_tma = prefill_hopper::make_kv_tma(p, hopper_knobs().tma_promotion);
  prefill_hopper::WarpgroupCall call;
  call.head_dim = p.head_dim;
  call.causal = p.causal;
  call.window = p.window_left >= 0;
  call.row_tokens =
      p.qo_indptr == nullptr ? p.qo_len : mean_per_row(p.num_qo_tokens, p.batch_size);
  call.row_keys = mean_per_row(p.kv_tokens, p.batch_size);
  call.kv_by_tma = kv_tma.box_rows > 0;
  if (hopper_knobs().three_wg == 1) call.row_tokens = call.row_keys = 0;  // rows unweighed
  const int math_warpgroups =
      hopper_knobs().three_wg != 0 ? prefill_hopper::choose_math_warpgroups(call) : 2;
  g_last_math_warpgroups = math_warpgroups;
  if ((math_warpgroups == 3 || !hopper_knobs().paged_list) && p.work_ints != nullptr) {
    // The planner's 64-token items would pair into 128-token ranges: the kernel cuts the
    // rows into 192-token ranges itself, from qo_indptr (its longest row found on the device)
    // or the uniform length, as for ragged queries. (On two math warpgroups, only for the
    // FLASHPAGE_PREFILL_PAGED_LIST=0 A/B: 128-token ranges in ragged's order.)
    p.work_ints = nullptr;
    p.max_qo_len = p.qo_indptr != nullptr ? -1 : p.qo_len;
  }
  // The M tile's rows, which are also the query tokens of a range without a work list
  // (scheduler.cuh).
  const int block_m = prefill_hopper::m_tile_rows(math_warpgroups);
  const int range_tokens = block_m;

  HopperArgs a;
  a.ablate = hopper_knobs().ablate;
  a.pingpong = hopper_knobs().pingpong ? 1 : 0;
  a.row_major = (p.causal ? hopper_knobs().causal_row_major : hopper_knobs().row_major) ? 1 : 0;
  a.dense_rows = hopper_knobs().dense_ragged ? 1 : 0;
  a.unband_tiles = hopper_knobs().unband_tiles;
  a.unband_bytes = hopper_knobs().unband_mb << 20;
  prefill_tc::KernelArgs& k = a.k;
  k.p = p;
  k.paged = p.page_indices != nullptr;
  k.has_mask = false;
  k.causal = p.causal;
  k.has_cap = p.logits_soft_cap > 0.0f;
  k.scale_log2 = p.scale * kLog2e;
  k.cap_scale = k.has_cap ? p.scale / p.logits_soft_cap : 0.0f;
  k.page_div = FastDivisor(uint32_t(k.paged ? p.page_size : 1));
  k.group = p.num_qo_heads / p.num_kv_heads;

  if (p.work_ints != nullptr) {
    a.item_subtiles = int((int64_t(p.work_tile_tokens) * k.group + block_m - 1) / block_m);
    a.subtiles = 2 * a.item_subtiles;
    a.units = (int64_t(p.num_work_host) + 1) / 2;  // item pairs
  } else {
    a.subtiles = int((int64_t(range_tokens) * k.group + block_m - 1) / block_m);
    if (p.max_qo_len >= 0) {
      a.tiles_per_row = int((int64_t(p.max_qo_len) + range_tokens - 1) / range_tokens);
      a.units = int64_t(a.tiles_per_row) * p.batch_size;  // query ranges
    }  // else the kernel finds the longest row (HopperArgs::rows_from_indptr)
  }
  a.num_virtual = a.units * p.num_kv_heads * a.subtiles;
  // Virtual tiles that can hold rows, which is what can keep a block busy: all of them, or,
  // when the kernel sizes the schedule itself, at most sum_b ceil(len_b / range_tokens) <=
  // ceil(Nq / range_tokens) + B query ranges' worth.
  int64_t busy_tiles = a.num_virtual;
  if (a.rows_from_indptr()) {
    const int64_t ranges = p.num_qo_tokens > 0
                               ? (p.num_qo_tokens + range_tokens - 1) / range_tokens + p.batch_size
                               : 0;
    busy_tiles = ranges * p.num_kv_heads * a.subtiles;
  }
  if (busy_tiles <= 0) return true;  // no query rows: nothing to write
  const int grid = int(std::min<int64_t>(busy_tiles, std::max(device_facts().sms, 1)));
  // Bands of KV heads whose K/V fit in about 40% of L2 (scheduler.cuh, split_band).
  constexpr int64_t kL2BandBytes = int64_t(24) << 20;
  const int64_t head_kv_bytes = p.kv_tokens * p.head_dim * 2 * 2;  // K and V, 16-bit
  // Causal work lists: unfolded, bands cut the planner's longest-first order (7-10% slower,
  // session 8, bench/NOTES.md); folded (whenever the kernel gets two tiles per block,
  // scheduler.cuh `schedule`), session 12 measured bands at +3-7% with 1-16 rows of 1024-8192
  // tokens (K/V reread from L2 by many ranges) but -13% at 32/32/128 64x512, where each row's
  // K/V serves 4 ranges and a band of one KV head reads 256-byte slices of NHD pages whose
  // other heads no concurrent tile reads. So only folded lists of 8+ ranges per row on average.
  // Ragged / sdpa causal ranges in row-major order (the default) follow the work lists'
  // rules, bands and folding: session 31 measured them against the rank-major order at +2%
  // median, 16/16/256 64x512 +23-25%, over a cache +4-12%, 8x2048 +2-7% (bench/NOTES.md).
  // The host sizes them by the mean row where only the device knows the longest.
  const bool row_major_causal = p.causal && (p.work_ints != nullptr || a.row_major);
  const int64_t units =
      a.units > 0 ? a.units : (p.num_qo_tokens + range_tokens - 1) / range_tokens;
  const bool row_major_folds =
      row_major_causal && hopper_knobs().fold && prefill_hopper::folds_at(busy_tiles, grid);
  const bool banded =
      hopper_knobs().l2_bands &&
      (!row_major_causal || (row_major_folds && units >= 8 * int64_t(p.batch_size)));
  a.head_band = banded && head_kv_bytes > 0
                    ? int(std::clamp<int64_t>(kL2BandBytes / head_kv_bytes, 1, p.num_kv_heads))
                    : p.num_kv_heads;
  // Causal folding (scheduler.cuh): always in row-major order (work lists, session 12, run
  // 8: +1 to +10% at 1x8192, 0 to +3% at 64x512, -2 to +2% at 8x2048 and 16x1024;
  // fold_model.h does not model that order); in the rank-major order where the schedule
  // model says it pays (fold_model.h; uniform rows of the mean length when the rows are only
  // on the device).
  a.fold = p.causal && hopper_knobs().fold;
  if (a.fold && !row_major_causal && p.batch_size > 0) {
    prefill_hopper::FoldModelShape m;
    m.batch = p.batch_size;
    m.qo_len = p.max_qo_len >= 0 ? p.max_qo_len : mean_per_row(p.num_qo_tokens, p.batch_size);
    m.kv_len = p.kv_tokens > 0 ? mean_per_row(p.kv_tokens, p.batch_size) : m.qo_len;
    m.tiles_per_row =
        (m.qo_len + prefill_hopper::kRangeTokens - 1) / prefill_hopper::kRangeTokens;
    m.kv_heads = p.num_kv_heads;
    m.head_band = a.head_band;
    m.subtiles = a.subtiles;
    m.grid = grid;
    m.block_n = prefill_hopper::kv_tile_rows(p.head_dim);
    a.fold = prefill_hopper::fold_pays(m);
  }
  a.kv_tma = kv_tma;
#if FLASHPAGE_PREFILL_O_TMA
  a.o_tma = prefill_hopper::make_o_tma(p);
  // The experiment says on stderr, for the first calls of a process, whether they store O by
  // TMA (a map the driver refuses falls back silently otherwise).
  static std::atomic<int> reported{0};
  if (reported.fetch_add(1) < 8)
    std::fprintf(stderr, "o_tma: %s q, head_dim %d, group %d: %s\n",
                 p.qo_indptr != nullptr ? "ragged" : "uniform", p.head_dim,
                 p.num_qo_heads / std::max(p.num_kv_heads, 1),
                 a.o_tma.box_tokens > 0 ? "TMA stores" : "thread stores");
#endif
  int launch_grid = grid;
  if constexpr (prefill_hopper::kClusterBuild) {
    // Pairs of tiles on clusters of two blocks (scheduler.cuh, cluster_pair): where every
    // tile of a row sees the same keys, K/V go by TMA, and the pairs' order is known.
    // A ghost (a pair whose second tile has no rows) costs a whole tile of math, so only
    // where they are rare, judged by the mean row: with an even group at most one per row and
    // head (its last query range or item), so rows of 4+ ranges; with MHA one per row and
    // head of an odd number of ranges, so an even number or 8+.
    // Work lists (paged prefill): items of work_tile_tokens, pairs only inside an item (an
    // even number of subtiles per item: groups that are multiples of 4), where a short item
    // (a row's last) can leave the pair's second subtile without rows: a ghost too.
    const bool list = p.work_ints != nullptr;
    const int64_t queries = list ? int64_t(p.num_work_host) * p.work_tile_tokens
                            : p.max_qo_len >= 0 ? int64_t(p.max_qo_len) * p.batch_size
                                                : int64_t(p.num_qo_tokens);
    const int64_t mean_len = queries / std::max(p.batch_size, 1);
    const int64_t ranges = (mean_len + range_tokens - 1) / range_tokens;
    const bool pairs_fit = list ? a.item_subtiles % 2 == 0 && k.group % 2 == 0
                                : a.subtiles % 2 == 0 || (a.subtiles == 1 && a.row_major);
    const bool few_ghosts =
        a.subtiles % 2 == 0 ? ranges >= 4 : ranges % 2 == 0 || ranges >= 8;
    a.cluster = math_warpgroups == 2 && hopper_knobs().multicast && !p.causal &&
                        p.window_left < 0 && a.kv_tma.box_rows > 0 && pairs_fit &&
                        few_ghosts && !a.fold
                    ? 1
                    : 0;
    if (a.cluster)
      launch_grid = 2 * int(std::min<int64_t>((busy_tiles + 1) / 2,
                                              std::max(device_facts().sms / 2, 1)));
    g_last_ran_pairs = a.cluster != 0;
  }

  if (p.dtype == DType::bf16)
    dispatch_head_dim<__nv_bfloat16>(a, math_warpgroups, launch_grid, stream);
  else
    dispatch_head_dim<__half>(a, math_warpgroups, launch_grid, stream);
  return true;
}

}  // namespace flashpage::cuda
