// KvLayout names and PageTable copies.
#include <cctype>
#include <string>

#include "core/check.h"
#include "flashpage/ops.h"

namespace flashpage {

KvLayout parse_layout(std::string_view text) {
  std::string lower;
  for (char c : text) lower += char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "nhd") return KvLayout::NHD;
  if (lower == "hnd") return KvLayout::HND;
  check::fail("layout: expected nhd|hnd, got \"", text, "\"");
}

std::string_view layout_name(KvLayout layout) {
  return layout == KvLayout::NHD ? "nhd" : "hnd";
}

PageTable PageTable::to(Device device, void* stream) const {
  const auto moved = [&](const Tensor& t) {
    if (!t.defined() || t.device() == device) return t;
    Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
    out.copy_(t, stream);
    return out;
  };
  return PageTable{moved(indptr), moved(indices), moved(last_page_len)};
}

}  // namespace flashpage
