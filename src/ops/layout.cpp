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

PageTable PageTable::to(Device device) const {
  PageTable out;
  if (indptr.defined()) out.indptr = indptr.to(device);
  if (indices.defined()) out.indices = indices.to(device);
  if (last_page_len.defined()) out.last_page_len = last_page_len.to(device);
  return out;
}

}  // namespace flashpage
