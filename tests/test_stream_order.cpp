// A step pipeline on a non-blocking stream with no host synchronisation between steps: put()
// of the new tokens, metadata(), a re-plan into the same workspace and the run, all on the
// stream. Each step's uploads (index lists, page table, work list) rewrite buffers that the
// previous step's kernels read; ordered on the stream they wait for them, so every step's
// output matches the oracle over the table of its own step. Host work under graph capture
// is refused before it changes any state.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <functional>

#include "test_util.h"

namespace fpt {
namespace {

#define FP_TEST_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

class StreamOrder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    FP_TEST_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// Holds a stream until released (a host function that spins on a flag), so that the GPU
// cannot drain the stream while the host queues steps: without it the host loop is slower
// than the GPU and even unordered uploads would land between steps. Gives up after 20 s
// (then `timed_out`: a host call waited for the held stream, which is a failure too).
struct StreamHold {
  std::atomic<bool> released{false}, timed_out{false};
  static void spin(void* self_ptr) {
    auto* self = static_cast<StreamHold*>(self_ptr);
    const auto start = std::chrono::steady_clock::now();
    while (!self->released.load()) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
        self->timed_out = true;
        return;
      }
    }
  }
};

TEST_F(StreamOrder, DecodeStepsWithoutHostSync) {
  FP_SEEDED_RNG(rng);
  const Device gpu = cuda0();
  const int64_t batch = 6, hq = 32, hkv = 8, d = 128, page = 16, steps = 12;
  KvCacheConfig config;
  config.kv_heads = hkv;
  config.head_dim = d;
  config.page_size = page;
  config.num_pages = 6 * 4200 / page;
  config.device = gpu;  // bf16 pages (the default dtype)
  KvCachePool pool(config);
  std::vector<int64_t> ids, lengths;
  for (int64_t b = 0; b < batch; ++b) {
    ids.push_back(pool.bind_request(4096 + 64));
    lengths.push_back(rng.integer(1000, 4000));
  }
  pool.activate(ids);
  {  // the prefix, written before the pipeline (synchronously)
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    const Tensor k = random_tensor(rng, {batch, longest, hkv, d}, DType::bf16, gpu);
    const Tensor v = random_tensor(rng, {batch, longest, hkv, d}, DType::bf16, gpu);
    pool.put(0, 0, k, v);  // rows shorter than `longest` get tokens past their length: unread
  }
  Workspace ws(gpu);
  void* s = stream_;
  // Every step's inputs and outputs stay alive until the end: the runs read them on `s`.
  std::vector<Tensor> keys, values, queries, outs;
  std::vector<PageTable> tables;  // each step's host table, for the oracle
  for (int64_t step = 0; step < steps; ++step) {
    keys.push_back(random_tensor(rng, {batch, 1, hkv, d}, DType::bf16, gpu));
    values.push_back(random_tensor(rng, {batch, 1, hkv, d}, DType::bf16, gpu));
    queries.push_back(random_tensor(rng, {batch, hq, d}, DType::bf16, gpu));
    outs.push_back(poisoned({batch, hq, d}, DType::bf16, gpu));
  }
  StreamHold hold;
  for (int64_t step = 0; step < steps; ++step) {
    // One new token per row at its current length, then attention over length + 1 tokens.
    pool.put(0, lengths, keys[size_t(step)], values[size_t(step)], s);
    for (int64_t& len : lengths) ++len;
    const KvCacheMetadata& meta = pool.metadata(lengths, s);
    tables.push_back(PageTable{meta.host.indptr.clone(), meta.host.indices.clone(),
                               meta.host.last_page_len.clone()});
    const PagedKv kv = pool.layer(0, meta);
    const Plan plan = plan_decode(ws, meta.host, kv, hq, s);
    batch_decode(ws, plan, queries[size_t(step)], kv, {}, outs[size_t(step)], {}, s);
    if (step == 0) {
      // Step 0 ran with the kernels' first loads (which may wait for the stream); the rest
      // are queued behind a hold, all uploads landing while earlier steps are still queued.
      FP_TEST_CUDA(cudaStreamSynchronize(stream_));
      FP_TEST_CUDA(cudaLaunchHostFunc(stream_, &StreamHold::spin, &hold));
    }
  }
  hold.released = true;
  FP_TEST_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_FALSE(hold.timed_out) << "a host call waited for the held stream";
  // The pages only gained tokens after each step's rows: the final pages, read through a
  // step's own table, are what that step saw. Copied to the host once.
  PagedKv final_kv = pool.layer(0, pool.metadata(lengths));
  final_kv.k_pages = final_kv.k_pages.to(Device::cpu());
  final_kv.v_pages = final_kv.v_pages.to(Device::cpu());
  for (int64_t step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    PagedKv kv = final_kv;
    kv.table = tables[size_t(step)];
    expect_output(outs[size_t(step)],
                  oracle::decode(queries[size_t(step)].to(Device::cpu()), kv, {}).out,
                  DType::bf16);
  }
}

TEST_F(StreamOrder, HostWorkUnderCaptureIsRefusedAndChangesNothing) {
  FP_SEEDED_RNG(rng);
  const Device gpu = cuda0();
  KvCacheConfig config;
  config.kv_heads = 2;
  config.head_dim = 64;
  config.page_size = 16;
  config.num_pages = 64;
  config.dtype = DType::f16;
  config.device = gpu;
  KvCachePool pool(config);
  const std::vector<int64_t> ids{pool.bind_request(300), pool.bind_request(100)};
  pool.activate(ids);
  const Tensor k = random_tensor(rng, {2, 90, 2, 64}, DType::f16, gpu);
  const Tensor v = random_tensor(rng, {2, 90, 2, 64}, DType::f16, gpu);
  pool.put(0, 0, k, v);
  const std::vector<int64_t> lengths{90, 90};
  const KvCacheMetadata& meta = pool.metadata(lengths);
  const PagedKv kv = pool.layer(0, meta);
  Workspace ws(gpu);
  const Plan plan = plan_decode(ws, meta.host, kv, 4);

  // Refused for the capture, not for anything else: the message says so.
  auto expect_capture_error = [](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << ": expected an Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("captured"), std::string::npos) << e.what();
    }
  };
  FP_TEST_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  expect_capture_error([&] { (void)plan_decode(ws, meta.host, kv, 4, stream_); }, "plan");
  expect_capture_error([&] { (void)pool.metadata(std::vector<int64_t>{95, 91}, stream_); },
                       "metadata");
  expect_capture_error([&] { pool.put(0, 90, k.slice(1, 0, 1), v.slice(1, 0, 1), stream_); },
                       "put");
  cudaGraph_t graph = nullptr;
  FP_TEST_CUDA(cudaStreamEndCapture(stream_, &graph));  // the capture itself stays valid
  FP_TEST_CUDA(cudaGraphDestroy(graph));

  // The refused calls left the workspace's plan and the pool's table as they were.
  const Tensor q = random_tensor(rng, {2, 4, 64}, DType::f16, gpu);
  Tensor out = poisoned({2, 4, 64}, DType::f16, gpu);
  batch_decode(ws, plan, q, kv, {}, out);
  expect_output(out, oracle::decode(q, kv, {}).out, DType::f16);
  const std::vector<int64_t> table_lengths = row_lengths(meta.host, config.page_size);
  EXPECT_EQ(table_lengths, lengths);
}

}  // namespace
}  // namespace fpt
