// parse_backend and the process-wide backend selection with its fallback.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>

#include "core/check.h"
#include "flashpage/attention.h"

namespace flashpage {

namespace {

std::string lower_trimmed(std::string_view text) {
  size_t a = 0, b = text.size();
  while (a < b && std::isspace(static_cast<unsigned char>(text[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(text[b - 1]))) --b;
  std::string s(text.substr(a, b - a));
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::mutex g_mutex;
AttentionKernel* g_current = nullptr;

}  // namespace

AttentionBackend parse_backend(std::string_view text) {
  const std::string s = lower_trimmed(text);
  if (s.empty() || s == "flashinfer") return AttentionBackend::FlashInfer;
  if (s == "torch_native" || s == "torchnative") return AttentionBackend::TorchNative;
  check::fail("attention backend: expected torch_native|flashinfer, got '", text, "'");
}

std::string_view backend_id(AttentionBackend backend) {
  return backend == AttentionBackend::FlashInfer ? "flashinfer" : "torch_native";
}

std::string flashinfer_unavailable_reason() {
  // The seed falls back when its FlashInfer package cannot be imported; here the paged kernels
  // are built in and run on every device, so only an explicit switch (for engines and tests
  // that exercise the fallback) makes them unavailable.
  if (const char* off = std::getenv("FLASHPAGE_DISABLE_FLASHINFER"); off && *off && *off != '0')
    return "disabled by FLASHPAGE_DISABLE_FLASHINFER";
  return {};
}

namespace {

// With g_mutex held: the backend `wanted` resolves to (FlashInfer falls back to torch_native
// when disabled), installed.
AttentionKernel& install_locked(AttentionBackend wanted) {
  static TorchNativeAttentionKernel torch_native;
  static FlashInferAttentionKernel flashinfer;
  if (wanted == AttentionBackend::FlashInfer) {
    const std::string why = flashinfer_unavailable_reason();
    if (why.empty()) {
      g_current = &flashinfer;
    } else {
      std::cerr << "flashpage: warning: flashinfer backend unavailable (" << why
                << "); falling back to torch_native (its causal is PyTorch's top-left: over "
                   "a cached prefix pass causal=false for decode and a mask for prefill)\n";
      g_current = &torch_native;
    }
  } else {
    g_current = &torch_native;
  }
  return *g_current;
}

}  // namespace

AttentionKernel& install_backend(AttentionBackend wanted) {
  std::lock_guard lock(g_mutex);
  return install_locked(wanted);
}

// The default is installed under the same lock that found none: an install_backend() of
// another thread in between cannot be overwritten.
AttentionKernel& current_kernel() {
  std::lock_guard lock(g_mutex);
  return g_current ? *g_current : install_locked(AttentionBackend::FlashInfer);
}

Tensor AttentionKernel::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                const Tensor& mask, const AttentionContext& ctx) {
  check::defined(query, "query");
  Tensor out = Tensor::empty(query.shape(), query.dtype(), query.device());
  forward_into(query, key, value, mask, ctx, out);
  return out;
}

}  // namespace flashpage
