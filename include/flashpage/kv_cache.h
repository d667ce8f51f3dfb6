#pragma once
// KvCachePool: the paged KV cache of all layers. One allocation per K and V:
//   NHD: [layers, num_pages, page_size, Hkv, D]    HND: [layers, num_pages, Hkv, page_size, D]
// Requests are bound with a token capacity (their pages are taken from the free list then);
// activate() fixes the batch row order of a step; put() writes new tokens through the
// request slot table; metadata() builds the CSR page table of the active rows.
#include <cstdint>
#include <span>
#include <vector>

#include "flashpage/error.h"
#include "flashpage/ops.h"

namespace flashpage {

struct KvCacheConfig {
  int64_t layers = 1;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  int64_t page_size = 16;
  int64_t num_pages = 0;
  DType dtype = DType::bf16;
  Device device = Device::cpu();
  KvLayout layout = KvLayout::NHD;
};

// Thrown when the free list cannot satisfy a request; the pool is left unchanged.
class KvCacheExhausted : public Error {
 public:
  using Error::Error;
};

// The page table of the active rows for one step, shared by all layers.
struct KvCacheMetadata {
  PageTable host;    // int32 CPU tensors (the planner reads these)
  PageTable device;  // the same on the pool's device (the kernels read these); == host on CPU
  std::vector<int64_t> lengths;  // tokens per active row
  bool rebuilt = false;          // indptr/indices rewritten (false: only last_page_len)
  uint64_t version = 0;           // changes with every metadata() call of any pool
};

class KvCachePool {
 public:
  explicit KvCachePool(const KvCacheConfig& config);
  ~KvCachePool();
  KvCachePool(const KvCachePool&) = delete;
  KvCachePool& operator=(const KvCachePool&) = delete;

  const KvCacheConfig& config() const { return config_; }
  int64_t free_pages() const { return int64_t(free_list_.size()); }
  int64_t num_requests() const;

  // Takes ceil(capacity / page_size) pages; returns the request id. Throws KvCacheExhausted
  // when fewer pages are free (a retry after unbinding may succeed), Error when the capacity
  // is negative or more than the whole pool holds (num_pages x page_size: no retry can).
  int64_t bind_request(int64_t capacity_tokens);
  void unbind_request(int64_t id);
  int64_t capacity(int64_t id) const;
  const std::vector<int32_t>& pages_of(int64_t id) const;
  // Fixes which requests form the batch rows of the next steps, in this order.
  void activate(std::span<const int64_t> ids);
  const std::vector<int64_t>& active() const { return active_; }

  // Writes k/v [B, S, Hkv, D] (any strides) of the active rows for `layer` at positions
  // start .. start+S-1 (the same start for every row, or one per row).
  void put(int64_t layer, int64_t start_position, const Tensor& k, const Tensor& v,
           void* stream = nullptr);
  void put(int64_t layer, std::span<const int64_t> start_positions, const Tensor& k,
           const Tensor& v, void* stream = nullptr);

  // Ragged form: k/v [N, Hkv, D]; row b's tokens are qo_indptr[b] .. qo_indptr[b+1] (host
  // int32/int64 [B+1]) and go to positions start_positions[b] onwards.
  void put_ragged(int64_t layer, std::span<const int64_t> qo_indptr,
                  std::span<const int64_t> start_positions, const Tensor& k, const Tensor& v,
                  void* stream = nullptr);

  // The CSR table of the active rows with these lengths (one per row, or one for all rows).
  // The returned reference stays valid until the next metadata() call. The table lives in
  // buffers that keep their addresses for the pool's life (sized for every page of the pool
  // and as many rows; only a batch of more rows than pages, possible with requests bound with
  // no pages, moves indptr / last_page_len), so a CUDA graph captured over them replays after
  // metadata() of longer rows and after activate() of other requests, as long as its batch
  // size is the same (re-plan outside the graph). While the active rows are the same, only
  // last_page_len changes until a row needs a new page; `rebuilt` says when indptr/indices
  // were rewritten. On a GPU pool the device table is rewritten on `stream` (nullptr: a
  // synchronous copy): pass the runs' stream, so the rewrite waits there for the runs that
  // read the previous table. put() stages its index lists on its stream in the same way.
  const KvCacheMetadata& metadata(std::span<const int64_t> lengths, void* stream = nullptr);
  const KvCacheMetadata& metadata(int64_t uniform_length, void* stream = nullptr);

  // One layer's pages and the given table, ready for the ops.
  PagedKv layer(int64_t layer, const KvCacheMetadata& meta) const;
  const Tensor& k_cache() const { return k_; }
  const Tensor& v_cache() const { return v_; }

 private:
  struct Request {
    int64_t capacity = 0;
    std::vector<int32_t> pages;
  };
  const Request& request(int64_t id, const char* what) const;
  // Fills `table` (host, and its device copy when the pool is on a GPU) for the active rows
  // with these lengths, reusing the buffers while the active set is unchanged. Returns
  // whether indptr/indices changed.
  struct TableBuffers {
    PageTable host, device;  // views of the stores: the active rows' part
    // At capacity: indices for every page of the pool, indptr / last_page_len for as many
    // rows as pages (a larger batch, of requests bound with no pages, grows them), so the
    // addresses outlive activate().
    PageTable host_store, device_store;
    std::vector<int64_t> pages;  // page count per row last written
    std::vector<int64_t> rows;   // the active ids the buffers were sized for
  };
  bool fill_table(TableBuffers& t, std::span<const int64_t> lengths, void* stream);
  void put_tokens(int64_t layer, std::span<const int64_t> indptr,
                  std::span<const int64_t> start_positions, const Tensor& k, const Tensor& v,
                  void* stream);
  void write(int64_t layer, const std::vector<int32_t>& rows,
             const std::vector<int32_t>& positions, const Tensor& k, const Tensor& v,
             void* stream);

  KvCacheConfig config_;
  Tensor k_, v_;
  std::vector<int32_t> free_list_;
  std::vector<Request> requests_;  // by id; capacity 0 and no pages = unbound slot
  std::vector<bool> bound_;
  std::vector<int64_t> active_;
  KvCacheMetadata meta_;
  TableBuffers meta_table_;         // behind meta_
  TableBuffers put_table_;          // whole-capacity table that put() writes through
  Tensor put_rows_, put_positions_;  // device scratch for put()'s index lists
};

}  // namespace flashpage
