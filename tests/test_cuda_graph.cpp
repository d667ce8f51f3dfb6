// A decode step captured once in a CUDA graph must replay correctly after the rows grow in
// place and the step is re-planned into the same workspace (same batch, longer rows, same
// device table buffers): the kernels read the work list, its counts and offsets on the device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "flashpage/flashpage.h"

namespace {

using namespace flashpage;

#define FP_TEST_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr int64_t kQoHeads = 32, kKvHeads = 8, kHeadDim = 128, kPageSize = 16;
constexpr double kBf16Tolerance = 1e-2;  // relative L2, DESIGN.md

Tensor random_bf16(std::mt19937& rng, const Shape& shape, Device device) {
  Tensor h = Tensor::empty(shape, DType::f32);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < h.numel(); ++i) h.data_as<float>()[i] = dist(rng);
  return h.to(DType::bf16).to(device);
}

double relative_l2(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(Device::cpu()).contiguous().to(DType::f32);
  const Tensor w = want.to(Device::cpu()).contiguous().to(DType::f32);
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double a = g.data_as<float>()[i], b = w.data_as<float>()[i];
    if (!std::isfinite(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Rows own fixed (shuffled) pages for their largest length; the CSR lists the pages that the
// current lengths use. The host tensors are rewritten in place, the device copies too.
struct GrowingTable {
  std::vector<std::vector<int32_t>> row_pages;
  PageTable host, device;

  GrowingTable(const std::vector<int64_t>& max_lengths, int64_t num_pages, std::mt19937& rng) {
    std::vector<int32_t> ids(static_cast<size_t>(num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    int64_t capacity = 0;
    for (int64_t len : max_lengths) {
      const int64_t pages = (len + kPageSize - 1) / kPageSize;
      row_pages.emplace_back(ids.begin() + next, ids.begin() + next + size_t(pages));
      next += size_t(pages);
      capacity += pages;
    }
    const int64_t batch = int64_t(max_lengths.size());
    host.indptr = Tensor::zeros({batch + 1}, DType::i32);
    host.indices = Tensor::zeros({capacity}, DType::i32);  // spare capacity for growth
    host.last_page_len = Tensor::zeros({batch}, DType::i32);
    device = host.to(Device::cuda(0));
  }

  void set_lengths(const std::vector<int64_t>& lengths) {
    int32_t* indptr = host.indptr.data_as<int32_t>();
    int32_t* indices = host.indices.data_as<int32_t>();
    int32_t* last = host.last_page_len.data_as<int32_t>();
    indptr[0] = 0;
    for (int64_t b = 0; b < int64_t(lengths.size()); ++b) {
      const int64_t len = lengths[size_t(b)];
      const int64_t pages = (len + kPageSize - 1) / kPageSize;
      std::copy_n(row_pages[size_t(b)].begin(), pages, indices + indptr[b]);
      indptr[b + 1] = indptr[b] + int32_t(pages);
      last[b] = pages == 0 ? 0 : int32_t(len - (pages - 1) * kPageSize);
    }
    device.indptr.copy_(host.indptr);  // same device buffers: the graph keeps their addresses
    device.indices.copy_(host.indices);
    device.last_page_len.copy_(host.last_page_len);
  }
};

// Captures a decode step over rows of lengths `first`, replays it, then grows the rows in
// place to `grown`, re-plans into the same workspace and replays the same graph twice.
void replay_after_replan(const std::vector<int64_t>& first, const std::vector<int64_t>& grown,
                         bool first_splits) {
  const Device gpu = Device::cuda(0);
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t kBatch = int64_t(first.size());
  const int64_t needed =
      std::accumulate(grown.begin(), grown.end(), int64_t(0),
                      [](int64_t s, int64_t len) { return s + (len + kPageSize - 1) / kPageSize; });
  const int64_t num_pages = needed + 37;  // unused pages too

  GrowingTable table(grown, num_pages, rng);
  PagedKv kv;
  kv.k_pages = random_bf16(rng, {num_pages, kPageSize, kKvHeads, kHeadDim}, gpu);
  kv.v_pages = random_bf16(rng, {num_pages, kPageSize, kKvHeads, kHeadDim}, gpu);
  kv.layout = KvLayout::NHD;
  kv.table = table.device;
  const Tensor q = random_bf16(rng, {kBatch, kQoHeads, kHeadDim}, gpu);
  Tensor out = Tensor::zeros({kBatch, kQoHeads, kHeadDim}, DType::bf16, gpu);
  Tensor lse = Tensor::zeros({kBatch, kQoHeads}, DType::f32, gpu);
  const AttentionParams params{};  // scale 1/sqrt(D)

  auto check_against_cpu = [&](const char* step) {
    SCOPED_TRACE(step);
    PagedKv host_kv = kv;
    host_kv.k_pages = kv.k_pages.to(Device::cpu());
    host_kv.v_pages = kv.v_pages.to(Device::cpu());
    host_kv.table = table.host;
    Tensor want_lse;
    const Tensor want = batch_decode(q.to(Device::cpu()), host_kv, params, &want_lse);
    EXPECT_LT(relative_l2(out, want), kBf16Tolerance);
    EXPECT_LT(relative_l2(lse, want_lse), 1e-3);
  };

  Workspace ws(gpu);
  cudaStream_t stream = nullptr;
  FP_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  table.set_lengths(first);
  const Plan plan_first = plan_decode(ws, table.host, kv, kQoHeads);
  if (first_splits) EXPECT_GT(plan_first.num_partials, 0) << "expected the long rows to be split";

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FP_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  batch_decode(ws, plan_first, q, kv, params, out, lse, stream);
  FP_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  FP_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  FP_TEST_CUDA(cudaGraphLaunch(exec, stream));
  FP_TEST_CUDA(cudaStreamSynchronize(stream));
  check_against_cpu("first lengths");

  // Grow in place, re-plan into the same workspace, replay the same graph.
  out.fill_(NAN);
  table.set_lengths(grown);
  const Plan plan_grown = plan_decode(ws, table.host, kv, kQoHeads);
  EXPECT_EQ(plan_grown.batch_size, plan_first.batch_size);
  EXPECT_EQ(plan_grown.head_parts, plan_first.head_parts) << "set by the batch, not the lengths";
  FP_TEST_CUDA(cudaGraphLaunch(exec, stream));
  FP_TEST_CUDA(cudaStreamSynchronize(stream));
  check_against_cpu("grown lengths");
  out.fill_(NAN);
  FP_TEST_CUDA(cudaGraphLaunch(exec, stream));
  FP_TEST_CUDA(cudaStreamSynchronize(stream));
  check_against_cpu("grown lengths, replayed again");

  FP_TEST_CUDA(cudaGraphExecDestroy(exec));
  FP_TEST_CUDA(cudaGraphDestroy(graph));
  FP_TEST_CUDA(cudaStreamDestroy(stream));
}

TEST(CudaGraph, DecodeReplaysAfterRowsGrowAndReplan) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // Grown: a re-plan that cuts the long rows over every block (113K tokens), replayed twice.
  replay_after_replan({1000, 3000, 517, 2048}, {1500, 41000, 901, 70000}, true);
}

// As many rows as SMs: equal lengths run uncut, one row per block (nothing merged; the
// merge is captured all the same), then grow to unequal lengths that the re-plan cuts and
// the same graph merges.
TEST(CudaGraph, DecodeReplaysUncutPlanAfterReplan) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  int sms = 0;
  FP_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t batch = std::max(1, sms);
  const std::vector<int64_t> first(static_cast<size_t>(batch), 600);
  std::vector<int64_t> grown(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) grown[size_t(b)] = 600 + (b * 7919) % 6000;
  replay_after_replan(first, grown, false);
}

// The engine's pattern: one graph per batch size, replayed every step with whichever requests
// run. The pool's table keeps its buffers across activate() (same batch size), so the graph
// captured over the first requests replays over others after metadata() and a re-plan.
TEST(CudaGraph, DecodeReplaysAfterActivateOfOtherRequests) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  KvCacheConfig cfg;
  cfg.layers = 1;
  cfg.kv_heads = kKvHeads;
  cfg.head_dim = kHeadDim;
  cfg.page_size = kPageSize;
  cfg.num_pages = 2000;
  cfg.dtype = DType::bf16;
  cfg.device = gpu;
  KvCachePool pool(cfg);
  constexpr int64_t kBatch = 4;
  const std::vector<int64_t> lengths = {1000, 3000, 517, 2048, 9000, 33, 4100, 700};
  std::vector<int64_t> ids;
  for (int64_t len : lengths) {
    ids.push_back(pool.bind_request(len));
    pool.activate(std::vector<int64_t>{ids.back()});
    pool.put(0, 0, random_bf16(rng, {1, len, kKvHeads, kHeadDim}, gpu),
             random_bf16(rng, {1, len, kKvHeads, kHeadDim}, gpu));
  }
  const Tensor q = random_bf16(rng, {kBatch, kQoHeads, kHeadDim}, gpu);
  Tensor out = Tensor::zeros({kBatch, kQoHeads, kHeadDim}, DType::bf16, gpu);
  const AttentionParams params{};
  Workspace ws(gpu);
  cudaStream_t stream = nullptr;
  FP_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  auto step = [&](size_t first_row) {
    pool.activate(std::span<const int64_t>(ids.data() + first_row, kBatch));
    const KvCacheMetadata& meta =
        pool.metadata(std::span<const int64_t>(lengths.data() + first_row, kBatch));
    return std::pair{plan_decode(ws, meta.host, pool.layer(0, meta), kQoHeads), &meta};
  };
  auto check_against_cpu = [&](const KvCacheMetadata& meta, const char* what) {
    SCOPED_TRACE(what);
    PagedKv host_kv = pool.layer(0, meta);
    host_kv.k_pages = host_kv.k_pages.to(Device::cpu());
    host_kv.v_pages = host_kv.v_pages.to(Device::cpu());
    host_kv.table = meta.host;
    EXPECT_LT(relative_l2(out, batch_decode(q.to(Device::cpu()), host_kv, params)), kBf16Tolerance);
  };

  auto [plan, meta] = step(0);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FP_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  batch_decode(ws, plan, q, pool.layer(0, *meta), params, out, {}, stream);
  FP_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  FP_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  FP_TEST_CUDA(cudaGraphLaunch(exec, stream));
  FP_TEST_CUDA(cudaStreamSynchronize(stream));
  check_against_cpu(*meta, "the captured requests");

  out.fill_(NAN);
  auto [replan, other] = step(4);  // the other four requests: other lengths, other pages
  EXPECT_EQ(replan.batch_size, plan.batch_size);
  FP_TEST_CUDA(cudaGraphLaunch(exec, stream));
  FP_TEST_CUDA(cudaStreamSynchronize(stream));
  check_against_cpu(*other, "other requests, same graph");

  FP_TEST_CUDA(cudaGraphExecDestroy(exec));
  FP_TEST_CUDA(cudaGraphDestroy(graph));
  FP_TEST_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
