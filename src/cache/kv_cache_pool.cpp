#include "flashpage/kv_cache.h"

#include <algorithm>
#include <atomic>

#include "core/check.h"
#include "core/device_memory.h"

namespace flashpage {

namespace {

int64_t pages_for(int64_t tokens, int64_t page_size) {
  return (tokens + page_size - 1) / page_size;
}

}  // namespace

KvCachePool::KvCachePool(const KvCacheConfig& c) : config_(c) {
  check::require(c.layers >= 1, "KvCacheConfig.layers: expected >= 1, got ", c.layers);
  check::require(c.kv_heads >= 1, "KvCacheConfig.kv_heads: expected >= 1, got ", c.kv_heads);
  check::head_dim(c.head_dim, "KvCacheConfig.head_dim");
  check::require(c.page_size >= 1 && c.page_size <= 256,
                 "KvCacheConfig.page_size: expected 1..256, got ", c.page_size);
  check::require(c.num_pages >= 1 && c.num_pages <= INT32_MAX,
                 "KvCacheConfig.num_pages: expected 1..2^31-1, got ", c.num_pages);
  check::require(c.dtype == DType::f32 || c.dtype == DType::f16 || c.dtype == DType::bf16,
                 "KvCacheConfig.dtype: expected f32|f16|bf16, got ", dtype_name(c.dtype));
  const Shape shape = c.layout == KvLayout::NHD
                          ? Shape{c.layers, c.num_pages, c.page_size, c.kv_heads, c.head_dim}
                          : Shape{c.layers, c.num_pages, c.kv_heads, c.page_size, c.head_dim};
  check::element_count(shape, c.dtype,
                       "KvCacheConfig: layers x num_pages x page_size x kv_heads x head_dim");
  k_ = Tensor::empty(shape, c.dtype, c.device);
  v_ = Tensor::empty(shape, c.dtype, c.device);
  // Popped from the back: the lowest ids go out first.
  free_list_.resize(size_t(c.num_pages));
  for (int64_t i = 0; i < c.num_pages; ++i) free_list_[size_t(i)] = int32_t(c.num_pages - 1 - i);
}

KvCachePool::~KvCachePool() = default;

int64_t KvCachePool::num_requests() const {
  return std::count(bound_.begin(), bound_.end(), true);
}

const KvCachePool::Request& KvCachePool::request(int64_t id, const char* what) const {
  check::require(id >= 0 && id < int64_t(requests_.size()) && bound_[size_t(id)], what,
                 ": expected a bound request id, got ", id);
  return requests_[size_t(id)];
}

int64_t KvCachePool::bind_request(int64_t capacity_tokens) {
  check::require(capacity_tokens >= 0 && capacity_tokens <= config_.num_pages * config_.page_size,
                 "bind_request: expected a capacity of 0..", config_.num_pages * config_.page_size,
                 " tokens (num_pages x page_size), got ", capacity_tokens);
  const int64_t need = pages_for(capacity_tokens, config_.page_size);
  if (need > free_pages())
    throw KvCacheExhausted("bind_request: capacity " + std::to_string(capacity_tokens) +
                           " tokens needs " + std::to_string(need) + " pages, " +
                           std::to_string(free_pages()) + " free");
  Request r;
  r.capacity = capacity_tokens;
  r.pages.assign(free_list_.end() - need, free_list_.end());
  std::reverse(r.pages.begin(), r.pages.end());
  free_list_.resize(free_list_.size() - size_t(need));
  // A slot id may come back with other pages: tables built for the old ones must not be reused.
  meta_table_.rows.clear();
  put_table_.rows.clear();
  // Reuse the lowest unbound slot so ids stay small.
  auto slot = std::find(bound_.begin(), bound_.end(), false);
  const int64_t id = slot - bound_.begin();
  if (slot == bound_.end()) {
    requests_.push_back(std::move(r));
    bound_.push_back(true);
  } else {
    requests_[size_t(id)] = std::move(r);
    *slot = true;
  }
  return id;
}

void KvCachePool::unbind_request(int64_t id) {
  const Request& r = request(id, "unbind_request");
  // Freed pages go back in reverse so the next bind takes them in their old order.
  free_list_.insert(free_list_.end(), r.pages.rbegin(), r.pages.rend());
  requests_[size_t(id)] = Request{};
  bound_[size_t(id)] = false;
  meta_table_.rows.clear();
  put_table_.rows.clear();
  active_.erase(std::remove(active_.begin(), active_.end(), id), active_.end());
}

int64_t KvCachePool::capacity(int64_t id) const { return request(id, "capacity").capacity; }

const std::vector<int32_t>& KvCachePool::pages_of(int64_t id) const {
  return request(id, "pages_of").pages;
}

void KvCachePool::activate(std::span<const int64_t> ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    request(ids[i], "activate");
    for (size_t j = 0; j < i; ++j)
      check::require(ids[j] != ids[i], "activate: request ", ids[i], " appears twice");
  }
  active_.assign(ids.begin(), ids.end());
}

void KvCachePool::put(int64_t layer, int64_t start_position, const Tensor& k, const Tensor& v,
                      void* stream) {
  std::vector<int64_t> starts(active_.size(), start_position);
  put(layer, starts, k, v, stream);
}

void KvCachePool::put(int64_t layer, std::span<const int64_t> start_positions, const Tensor& k,
                      const Tensor& v, void* stream) {
  check::dims(k, "k", 4, "[B,S,Hkv,D]");
  check::dims(v, "v", 4, "[B,S,Hkv,D]");
  const int64_t batch = int64_t(active_.size()), seq = k.size(1);
  check::shape_is(k, "k", {batch, seq, config_.kv_heads, config_.head_dim});
  std::vector<int64_t> indptr(static_cast<size_t>(batch + 1));
  for (int64_t b = 0; b <= batch; ++b) indptr[size_t(b)] = b * seq;
  put_tokens(layer, indptr, start_positions, k, v, stream);
}

void KvCachePool::put_ragged(int64_t layer, std::span<const int64_t> qo_indptr,
                             std::span<const int64_t> start_positions, const Tensor& k,
                             const Tensor& v, void* stream) {
  check::dims(k, "k", 3, "[N,Hkv,D]");
  check::dims(v, "v", 3, "[N,Hkv,D]");
  put_tokens(layer, qo_indptr, start_positions, k, v, stream);
}

void KvCachePool::put_tokens(int64_t layer, std::span<const int64_t> indptr,
                             std::span<const int64_t> start_positions, const Tensor& k,
                             const Tensor& v, void* stream) {
  check::require(layer >= 0 && layer < config_.layers, "put: layer expected in [0, ",
                 config_.layers, "), got ", layer);
  const int64_t batch = int64_t(active_.size());
  check::require(int64_t(start_positions.size()) == batch, "start_positions: expected ", batch,
                 " entries (one per active row), got ", start_positions.size());
  check::require(int64_t(indptr.size()) == batch + 1 && indptr[0] == 0, "put: expected ",
                 batch + 1, " token offsets starting at 0, got ", indptr.size());
  const int64_t tokens = k.dim() == 4 ? k.size(0) * k.size(1) : k.size(0);
  check::require(indptr[size_t(batch)] == tokens, "put: expected ", indptr[size_t(batch)],
                 " tokens in k, got ", tokens);
  check::shape_is(v, "v", k.shape());
  std::vector<int32_t> rows, positions;
  rows.reserve(size_t(tokens));
  positions.reserve(size_t(tokens));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = start_positions[size_t(b)];
    const int64_t seq = indptr[size_t(b) + 1] - indptr[size_t(b)];
    const Request& r = request(active_[size_t(b)], "put");
    check::require(seq >= 0, "put: token offsets must not decrease (row ", b, ")");
    // start <= capacity - seq: start + seq could overflow.
    check::require(start >= 0 && start <= r.capacity - seq, "start_positions[", b,
                   "]: expected 0..", r.capacity - seq, " (row ", b, " of request ",
                   active_[size_t(b)], " writes ", seq, " tokens into a capacity of ",
                   r.capacity, "), got ", start);
    for (int64_t s = 0; s < seq; ++s) {
      rows.push_back(int32_t(b));
      positions.push_back(int32_t(start + s));
    }
  }
  write(layer, rows, positions, k, v, stream);
}

bool KvCachePool::fill_table(TableBuffers& t, std::span<const int64_t> lengths,
                             void* stream) {
  // The device side of a host buffer: the buffer itself on the CPU, an empty one on a GPU
  // (filled by the uploads below; a copy of the unwritten host buffer would be an upload
  // on another stream than theirs).
  const auto device_buffer = [&](const Tensor& host) {
    return config_.device.is_cpu() ? host
                                   : Tensor::empty(host.shape(), host.dtype(), config_.device);
  };
  const int64_t batch = int64_t(active_.size());
  const bool same_rows = t.rows == active_ && t.host.indptr.defined();
  if (!same_rows) {
    if (!t.host_store.indices.defined()) {
      // The active rows are distinct requests: together they never hold more pages than this.
      t.host_store.indices = Tensor::empty({std::max<int64_t>(config_.num_pages, 1)}, DType::i32);
      t.device_store.indices = device_buffer(t.host_store.indices);
    }
    if (!t.host_store.indptr.defined() || t.host_store.last_page_len.numel() < batch) {
      // Rows for a batch of every page's own request: only requests bound with no pages can
      // make a larger batch, so the buffers (and graphs captured over them) stay put.
      // Frees are ordered on the legacy stream only: wait for runs on other streams that may
      // still read the old buffers (rare: a growth).
      if (t.device_store.indptr.defined()) synchronize(config_.device);
      const int64_t rows = std::max({batch, config_.num_pages, int64_t(1)});
      t.host_store.indptr = Tensor::empty({rows + 1}, DType::i32);
      t.host_store.last_page_len = Tensor::empty({rows}, DType::i32);
      t.device_store.indptr = device_buffer(t.host_store.indptr);
      t.device_store.last_page_len = device_buffer(t.host_store.last_page_len);
    }
    const auto rows_of = [batch](const PageTable& store) {
      return PageTable{store.indptr.slice(0, 0, batch + 1), store.indices,
                       store.last_page_len.slice(0, 0, batch)};
    };
    t.host = rows_of(t.host_store);
    t.device = rows_of(t.device_store);
    t.rows = active_;
    t.pages.assign(size_t(batch), -1);
  }
  std::vector<int64_t> pages(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const Request& r = requests_[size_t(active_[size_t(b)])];
    const int64_t len = lengths[size_t(b)];
    check::require(len >= 0 && len <= r.capacity, "metadata: row ", b, " (request ",
                   active_[size_t(b)], ") expected length in [0, ", r.capacity,
                   "] (its capacity), got ", len);
    pages[size_t(b)] = pages_for(len, config_.page_size);
  }
  const bool changed = !same_rows || pages != t.pages;
  int32_t* indptr = t.host.indptr.data_as<int32_t>();
  int32_t* indices = t.host.indices.data_as<int32_t>();
  int32_t* last = t.host.last_page_len.data_as<int32_t>();
  indptr[0] = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const Request& r = requests_[size_t(active_[size_t(b)])];
    const int64_t n = pages[size_t(b)], len = lengths[size_t(b)];
    indptr[b + 1] = int32_t(indptr[b] + n);
    if (changed) std::copy_n(r.pages.begin(), n, indices + indptr[b]);
    last[b] = int32_t(n == 0 ? 0 : len - (n - 1) * config_.page_size);
  }
  if (config_.device.is_cuda()) {
    if (changed) {
      t.device.indptr.copy_(t.host.indptr, stream);
      const int64_t used = indptr[batch];  // the rest of indices is spare room
      if (used > 0)
        t.device.indices.slice(0, 0, used).copy_(t.host.indices.slice(0, 0, used), stream);
    }
    t.device.last_page_len.copy_(t.host.last_page_len, stream);
  }
  t.pages = pages;  // after the uploads: a failed one leaves the next call to redo them
  return changed;
}

const KvCacheMetadata& KvCachePool::metadata(std::span<const int64_t> lengths, void* stream) {
  check::require(int64_t(lengths.size()) == int64_t(active_.size()), "metadata: expected ",
                 active_.size(), " lengths (one per active row), got ", lengths.size());
  if (config_.device.is_cuda()) detail::check_not_capturing(stream, "KvCachePool::metadata");
  meta_.rebuilt = fill_table(meta_table_, lengths, stream);
  meta_.host = meta_table_.host;
  meta_.device = meta_table_.device;
  meta_.lengths.assign(lengths.begin(), lengths.end());
  // Numbered across all pools: a plan cached for this table (keyed by the metadata's address
  // and version) cannot match a later pool's metadata that happens to sit at the same address.
  static std::atomic<uint64_t> last_version{0};
  meta_.version = ++last_version;
  return meta_;
}

const KvCacheMetadata& KvCachePool::metadata(int64_t uniform_length, void* stream) {
  std::vector<int64_t> lengths(active_.size(), uniform_length);
  return metadata(lengths, stream);
}

PagedKv KvCachePool::layer(int64_t layer, const KvCacheMetadata& meta) const {
  check::require(layer >= 0 && layer < config_.layers, "layer: expected in [0, ",
                 config_.layers, "), got ", layer);
  PagedKv kv;
  kv.k_pages = k_.select(0, layer);
  kv.v_pages = v_.select(0, layer);
  kv.layout = config_.layout;
  kv.table = meta.device;
  return kv;
}

void KvCachePool::write(int64_t layer, const std::vector<int32_t>& rows,
                        const std::vector<int32_t>& positions, const Tensor& k, const Tensor& v,
                        void* stream) {
  if (config_.device.is_cuda()) detail::check_not_capturing(stream, "KvCachePool::put");
  // put() addresses through a table that maps every row's whole capacity. Capacities only
  // change with a bind or unbind, which clear put_table_.rows: refill only then, so a step's
  // puts (one per layer) copy nothing but their index lists.
  if (put_table_.rows != active_ || !put_table_.host.indptr.defined()) {
    std::vector<int64_t> capacities(active_.size());
    for (size_t b = 0; b < active_.size(); ++b)
      capacities[b] = requests_[size_t(active_[b])].capacity;
    fill_table(put_table_, capacities, stream);
  }
  const int64_t n = int64_t(rows.size());
  Tensor host_rows = Tensor::from_blob(const_cast<int32_t*>(rows.data()), {n}, DType::i32);
  Tensor host_pos = Tensor::from_blob(const_cast<int32_t*>(positions.data()), {n}, DType::i32);
  Tensor dev_rows = host_rows, dev_pos = host_pos;
  if (config_.device.is_cuda()) {
    if (!put_rows_.defined() || put_rows_.numel() < n) {
      // As in fill_table: no append queued on another stream may still read the old lists.
      // Doubling keeps growths (and their waits) to a few over a ramp of longer puts.
      const int64_t size = put_rows_.defined() ? std::max(n, 2 * put_rows_.numel()) : n;
      if (put_rows_.defined()) synchronize(config_.device);
      put_rows_ = Tensor::empty({size}, DType::i32, config_.device);
      put_positions_ = Tensor::empty({size}, DType::i32, config_.device);
    }
    dev_rows = put_rows_.slice(0, 0, n);
    dev_pos = put_positions_.slice(0, 0, n);
    // On the append's stream: an earlier put's append there may still read these buffers.
    dev_rows.copy_(host_rows, stream);
    dev_pos.copy_(host_pos, stream);
  }
  PagedKv kv;
  kv.k_pages = k_.select(0, layer);
  kv.v_pages = v_.select(0, layer);
  kv.layout = config_.layout;
  kv.table = put_table_.device;
  append_paged_kv(k, v, dev_rows, dev_pos, kv, stream);
}

}  // namespace flashpage
