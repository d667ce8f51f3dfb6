// cuda::append_paged_kv and cuda::gather_paged_kv: token copies between strided [.., Hkv, D]
// tensors and the pages, addressed through PageTableView. The kernels trust no device value:
// append skips tokens whose (row, position) falls outside the row's pages or whose page id is
// outside the pool; gather (whose table src/ops checks on the host first) finds each row's
// output offset (the exclusive prefix sum of lengths) in the kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/page_table_view.cuh"

namespace flashpage::cuda {
namespace {

constexpr int kCopyThreads = 256;
// Blocks per row in gather: enough to spread one long row over the device.
constexpr int kGatherBlocksPerRow = 32;
// Append's grid cap (a block per token up to it, then grid-strided): far below the 2^31 - 1
// limit, far above what fills the device.
constexpr int64_t kMaxCopyBlocks = int64_t(1) << 20;

// Strides of a token tensor [N, Hkv, D] or [B, S, Hkv, D] (token n = b*S + s).
struct TokenTensor {
  void* ptr = nullptr;
  int64_t tokens_per_batch = 1;
  int64_t stride_batch = 0, stride_token = 0, stride_head = 0, stride_dim = 1;

  __device__ __forceinline__ int64_t offset(int64_t n, int32_t h, int32_t d) const {
    return (n / tokens_per_batch) * stride_batch + (n % tokens_per_batch) * stride_token +
           int64_t(h) * stride_head + int64_t(d) * stride_dim;
  }
};

TokenTensor token_tensor(const Tensor& t) {
  TokenTensor r;
  r.ptr = t.data();
  if (t.dim() == 4) {
    r.tokens_per_batch = std::max<int64_t>(t.size(1), 1);
    r.stride_batch = t.stride(0);
    r.stride_token = t.stride(1);
    r.stride_head = t.stride(2);
    r.stride_dim = t.stride(3);
  } else {
    r.tokens_per_batch = std::max<int64_t>(t.size(0), 1);
    r.stride_token = t.stride(0);
    r.stride_head = t.stride(1);
    r.stride_dim = t.stride(2);
  }
  return r;
}

// Elements are moved as raw words of their size: appends and gathers never convert.
// A block per token, grid-strided over any number of tokens.
template <class Word>
__global__ void append_kernel(TokenTensor k, TokenTensor v, const int32_t* batch_indices,
                              const int32_t* positions, int64_t tokens, PageTableView pages,
                              Word* k_pages, Word* v_pages, int32_t num_kv_heads,
                              int32_t head_dim) {
  const Word* ks = static_cast<const Word*>(k.ptr);
  const Word* vs = static_cast<const Word*>(v.ptr);
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    int32_t page, in_page;
    // A token outside its row's pages, or a table whose values point outside the pool,
    // writes nothing (the CPU path reads the values and throws instead).
    if (!pages.locate_checked(batch_indices[n], positions[n], page, in_page)) continue;
    for (int e = int(threadIdx.x); e < num_kv_heads * head_dim; e += int(blockDim.x)) {
      const int32_t h = e / head_dim, d = e % head_dim;
      const int64_t dst = pages.offset_in_page(page, in_page, h) + d;
      k_pages[dst] = ks[k.offset(n, h, d)];
      v_pages[dst] = vs[v.offset(n, h, d)];
    }
  }
}

template <class Word>
__global__ void gather_kernel(PageTableView pages, const Word* k_pages, const Word* v_pages,
                              TokenTensor k_out, TokenTensor v_out, int64_t out_tokens,
                              int32_t num_kv_heads, int32_t head_dim) {
  __shared__ int64_t partial[kCopyThreads];
  const int32_t row = int32_t(blockIdx.x);
  // Output offset of this row: the sum of the earlier rows' lengths.
  int64_t sum = 0;
  for (int32_t r = int32_t(threadIdx.x); r < row; r += int32_t(blockDim.x)) sum += pages.length(r);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = int(blockDim.x) / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const int64_t start = partial[0];
  const int32_t len = pages.length(row);
  Word* ko = static_cast<Word*>(k_out.ptr);
  Word* vo = static_cast<Word*>(v_out.ptr);
  for (int32_t j = int32_t(blockIdx.y); j < len; j += int32_t(gridDim.y)) {
    const int64_t n = start + j;
    if (n >= out_tokens) return;  // output smaller than the table says: never write past it
    int32_t page, in_page;
    pages.locate(row, j, page, in_page);
    for (int e = int(threadIdx.x); e < num_kv_heads * head_dim; e += int(blockDim.x)) {
      const int32_t h = e / head_dim, d = e % head_dim;
      const int64_t src = pages.offset_in_page(page, in_page, h) + d;
      ko[k_out.offset(n, h, d)] = k_pages[src];
      vo[v_out.offset(n, h, d)] = v_pages[src];
    }
  }
}

template <class Body>
void by_size(size_t bytes, Body&& body) {
  switch (bytes) {
    case 1: body(uint8_t{}); return;
    case 2: body(uint16_t{}); return;
    case 4: body(uint32_t{}); return;
    default: check::fail("paged KV on CUDA: unsupported element size ", bytes);
  }
}

}  // namespace

void append_paged_kv(const Tensor& k, const Tensor& v, const Tensor& batch_indices,
                     const Tensor& positions, const PagedKv& kv, void* stream) {
  check::require(k.dtype() == kv.k_pages.dtype() && v.dtype() == kv.k_pages.dtype(),
                 "append_paged_kv: expected k and v in the pages' dtype ",
                 dtype_name(kv.k_pages.dtype()), ", got ", dtype_name(k.dtype()));
  const int64_t tokens = batch_indices.numel();
  if (tokens == 0) return;
  const PageTableView pages = make_page_table_view(kv);
  const int32_t heads = int32_t(kv.num_kv_heads()), dim = int32_t(kv.head_dim());
  by_size(dtype_size(k.dtype()), [&](auto zero) {
    using Word = decltype(zero);
    const unsigned blocks = unsigned(std::min<int64_t>(tokens, kMaxCopyBlocks));
    append_kernel<Word><<<blocks, kCopyThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        token_tensor(k), token_tensor(v), batch_indices.data_as<const int32_t>(),
        positions.data_as<const int32_t>(), tokens, pages, kv.k_pages.data_as<Word>(),
        kv.v_pages.data_as<Word>(), heads, dim);
  });
  FP_CUDA_CHECK_LAUNCH();
}

void gather_paged_kv(const PagedKv& kv, Tensor& k_out, Tensor& v_out, void* stream) {
  const PageTableView pages = make_page_table_view(kv);
  if (pages.batch_size == 0 || k_out.size(0) == 0) return;
  const int32_t heads = int32_t(kv.num_kv_heads()), dim = int32_t(kv.head_dim());
  by_size(dtype_size(kv.k_pages.dtype()), [&](auto zero) {
    using Word = decltype(zero);
    gather_kernel<Word><<<dim3(unsigned(pages.batch_size), kGatherBlocksPerRow), kCopyThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(
        pages, kv.k_pages.data_as<const Word>(), kv.v_pages.data_as<const Word>(),
        token_tensor(k_out), token_tensor(v_out), k_out.size(0), heads, dim);
  });
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda
