#include "flashpage/tensor.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/check.h"
#include "core/device_memory.h"
#include "core/storage.h"
#include "core/strided_span.h"

namespace flashpage {

Storage::~Storage() {
  if (release) {
    // A destructor must not throw: an owner's deleter that does is cut short here.
    try {
      release();
    } catch (...) {
    }
  }
  if (!owned || !data) return;
  if (device.is_cpu())
    std::free(data);
  else
    detail::cuda_free(data, device.index, stream);
}

namespace {

constexpr size_t kHostAlignment = 64;  // a cache line: vector loads never straddle two

std::shared_ptr<Storage> allocate(size_t bytes, Device device, void* stream) {
  auto s = std::make_shared<Storage>();
  s->bytes = bytes;
  s->device = device;
  s->owned = true;
  s->stream = device.is_cuda() ? stream : nullptr;
  const size_t padded = (std::max<size_t>(bytes, 1) + kHostAlignment - 1) / kHostAlignment *
                        kHostAlignment;
  if (device.is_cpu()) {
    s->data = std::aligned_alloc(kHostAlignment, padded);
    check::require(s->data != nullptr, "Tensor: host allocation of ", bytes, " bytes failed");
  } else {
    s->data = detail::cuda_malloc(padded, device.index, s->stream);
  }
  return s;
}

int64_t wrap_dim(int64_t d, int64_t rank, const char* what) {
  const int64_t w = d < 0 ? d + rank : d;
  check::require(w >= 0 && w < rank, what, ": dim ", d, " out of range for ", rank, " dims");
  return w;
}

// Calls fn(flat_index, element_offset) for every element in row-major order.
template <class Fn>
void for_each_offset(const Shape& shape, const Shape& strides, Fn&& fn) {
  const int64_t rank = int64_t(shape.size());
  for (int64_t s : shape)
    if (s == 0) return;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, off);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    // Only a tensor with no elements can overflow here (element_count checks the others):
    // its strides address nothing, so they saturate.
    if (__builtin_mul_overflow(s, std::max<int64_t>(shape[d], 1), &s)) s = INT64_MAX;
  }
  return strides;
}

std::string shape_to_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, device, nullptr);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, void* stream) {
  check::element_count(shape, dtype, "Tensor::empty");
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = allocate(size_t(t.numel()) * dtype_size(dtype), device, stream);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu())
    std::memset(t.data(), 0, t.nbytes());
  else
    detail::cuda_memset(t.data(), 0, t.nbytes(), device.index);
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                         const Shape& strides) {
  const int64_t elements = check::element_count(shape, dtype, "Tensor::from_blob: shape");
  check::require(data != nullptr || elements == 0,
                 "Tensor::from_blob: data: expected a pointer to ", elements,
                 " elements of shape ", shape_to_string(shape), ", got null");
  check::require(strides.empty() || strides.size() == shape.size(),
                 "Tensor::from_blob: expected ", shape.size(), " strides, got ", strides.size());
  for (int64_t st : strides)
    check::require(st >= 0, "Tensor::from_blob: strides: expected non-negative strides, got ",
                   shape_to_string(strides));
  Tensor t;
  t.shape_ = shape;
  t.strides_ = strides.empty() ? contiguous_strides(shape) : strides;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = data;
  t.storage_->device = device;
  t.storage_->bytes = detail::span_elements(t.shape_, t.strides_) * dtype_size(dtype);
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                         const Shape& strides, std::function<void()> release) {
  Tensor t = from_blob(data, shape, dtype, device, strides);
  t.storage_->release = std::move(release);  // only once the view is valid
  return t;
}

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const {
  return strides_[wrap_dim(d, dim(), "Tensor::stride")];
}

int64_t Tensor::numel() const {
  // A zero anywhere first: the other sizes of an empty tensor may multiply past int64
  // (the sizes of a tensor with elements were checked to fit when it was made).
  for (int64_t s : shape_)
    if (s == 0) return 0;
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data) + offset_ * int64_t(dtype_size(dtype_));
}

Tensor Tensor::to(Device device) const {
  check::defined(*this, "Tensor::to");
  if (device == device_) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  check::defined(*this, "Tensor::to");
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device_);
  out.copy_(*this);
  return out;
}

Tensor Tensor::contiguous() const {
  check::defined(*this, "Tensor::contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  check::defined(*this, "Tensor::clone");
  Tensor out = empty(shape_, dtype_, device_);
  out.copy_(*this);
  return out;
}

Tensor Tensor::view(const Shape& shape) const {
  check::defined(*this, "Tensor::view");
  check::require(is_contiguous(), "Tensor::view: expected a contiguous tensor, got strides ",
                 shape_to_string(strides_));
  Shape s = shape;
  int64_t infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    check::require(s[i] >= -1, "Tensor::view: expected sizes >= 0 (one may be -1), got ",
                   shape_to_string(shape));
    if (s[i] == -1) {
      check::require(infer < 0, "Tensor::view: only one -1 allowed in ", shape_to_string(shape));
      infer = int64_t(i);
    }
  }
  if (infer >= 0) {
    Shape known_sizes = s;
    known_sizes.erase(known_sizes.begin() + infer);
    const int64_t known = check::element_count(known_sizes, dtype_, "Tensor::view");
    check::require(known > 0, "Tensor::view: cannot infer the -1 of ", shape_to_string(shape),
                   " when the other sizes hold no elements (viewing ", shape_str(), ")");
    s[size_t(infer)] = numel() / known;
  }
  check::require(check::element_count(s, dtype_, "Tensor::view") == numel(),
                 "Tensor::view: cannot view ", shape_str(), " as ", shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  check::defined(*this, "Tensor::transpose");
  a = wrap_dim(a, dim(), "Tensor::transpose");
  b = wrap_dim(b, dim(), "Tensor::transpose");
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  check::defined(*this, "Tensor::slice");
  d = wrap_dim(d, dim(), "Tensor::slice");
  check::require(0 <= start && start <= end && end <= shape_[d], "Tensor::slice: range [",
                 start, ",", end, ") out of bounds for size ", shape_[d], " of dim ", d);
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  check::defined(*this, "Tensor::select");
  d = wrap_dim(d, dim(), "Tensor::select");
  check::require(0 <= index && index < shape_[d], "Tensor::select: index ", index,
                 " out of bounds for size ", shape_[d]);
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides) const {
  check::defined(*this, "Tensor::as_strided");
  check::require(shape.size() == strides.size(), "Tensor::as_strided: expected ", shape.size(),
                 " strides, got ", strides.size());
  check::element_count(shape, dtype_, "Tensor::as_strided");
  for (int64_t st : strides)
    check::require(st >= 0, "Tensor::as_strided: expected non-negative strides, got ",
                   shape_to_string(strides));
  // The furthest element's offset from the view's first, without overflowing, against the
  // elements the storage holds past the view's offset.
  const int64_t room = int64_t(storage_->bytes) / int64_t(dtype_size(dtype_)) - offset_;
  bool fits = true, empty = false;
  int64_t last = 0, reach = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    empty = empty || shape[d] == 0;
    const int64_t steps = std::max<int64_t>(shape[d] - 1, 0);
    fits = fits && !__builtin_mul_overflow(steps, strides[d], &reach) &&
           !__builtin_add_overflow(last, reach, &last);
  }
  check::require(empty || (fits && last < room), "Tensor::as_strided: ", shape_to_string(shape),
                 " with strides ", shape_to_string(strides), " reaches past the storage");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  return t;
}

void Tensor::copy_(const Tensor& src, void* stream) {
  check::defined(*this, "Tensor::copy_ (destination)");
  check::defined(src, "Tensor::copy_ (source)");
  check::require(src.shape_ == shape_, "Tensor::copy_: expected source shape ", shape_str(),
                 ", got ", src.shape_str());
  if (numel() == 0) return;
  // Same dtype, both contiguous: one byte copy between any devices.
  if (src.dtype_ == dtype_ && src.is_contiguous() && is_contiguous()) {
    detail::copy_bytes(data(), device_, src.data(), src.device_, nbytes(), stream);
    return;
  }
  // Otherwise go through the host: a contiguous host copy of the source, then a strided,
  // converting store into a host image of the destination.
  Tensor host_src = src;
  if (src.device_.is_cuda()) {
    // The source's whole span comes over in one copy (for a strided view, the elements and
    // the gaps between them), then the host walks the view.
    const int64_t span = int64_t(detail::span_elements(src.shape_, src.strides_));
    Tensor flat = empty({span}, src.dtype_, Device::cpu());
    detail::copy_bytes(flat.data(), Device::cpu(), src.data(), src.device_,
                       size_t(span) * dtype_size(src.dtype_), stream);
    host_src = flat.as_strided(shape_, src.strides_);
  }
  const bool dst_on_host = device_.is_cpu();
  check::require(dst_on_host || is_contiguous(),
                 "Tensor::copy_: a strided CUDA destination is not supported; got strides ",
                 shape_to_string(strides_));
  Tensor host_dst = dst_on_host ? *this : empty(shape_, dtype_, Device::cpu());
  const void* sb = host_src.data();
  void* db = host_dst.data();
  std::vector<int64_t> src_offsets;
  src_offsets.reserve(size_t(numel()));
  for_each_offset(shape_, host_src.strides_, [&](int64_t, int64_t off) {
    src_offsets.push_back(off);
  });
  const size_t es = dtype_size(dtype_);
  const bool same = host_src.dtype_ == dtype_;
  for_each_offset(shape_, host_dst.strides_, [&](int64_t i, int64_t off) {
    if (same)
      std::memcpy(static_cast<char*>(db) + off * es,
                  static_cast<const char*>(sb) + src_offsets[i] * es, es);
    else
      store_from_double(db, dtype_, off, load_as_double(sb, host_src.dtype_, src_offsets[i]));
  });
  // host_dst is pageable: staged before copy_bytes returns, so it may go out of scope.
  if (!dst_on_host)
    detail::copy_bytes(data(), device_, host_dst.data(), Device::cpu(), nbytes(), stream);
}

void Tensor::fill_(double value) {
  check::defined(*this, "Tensor::fill_");
  if (numel() == 0) return;
  Tensor host = device_.is_cpu() ? *this : empty(shape_, dtype_, Device::cpu());
  void* base = host.data();
  for_each_offset(shape_, host.strides_, [&](int64_t, int64_t off) {
    store_from_double(base, dtype_, off, value);
  });
  if (!device_.is_cpu()) copy_(host);
}

std::string Tensor::shape_str() const { return defined() ? shape_to_string(shape_) : "undefined"; }

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_to_string(shape_) + " on " + device_.str();
}

}  // namespace flashpage
