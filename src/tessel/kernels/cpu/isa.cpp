#include "tessel/kernels/cpu/isa.h"

#include <cstdlib>
#include <string_view>

namespace tessel::kernels::cpu {
namespace {

// oneDNN's cap names (its docs: cpu_isa_hints / ONEDNN_MAX_CPU_ISA): SSE41, AVX, AVX2, AVX2_VNNI,
// AVX2_VNNI_2, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX512_CORE_FP16, AVX512_CORE_AMX,
// AVX512_CORE_AMX_FP16, AVX10_1_512..., DEFAULT, ALL. Every cap at or above AVX512_CORE names AVX-512.
[[maybe_unused]] bool cap_allows_avx512(std::string_view cap) {  // unused in a build without AVX-512
  return cap.empty() || cap == "DEFAULT" || cap == "ALL" || cap.starts_with("AVX512") || cap.starts_with("AVX10");
}

}  // namespace

bool avx512_paths_enabled() {
#if defined(__AVX512F__)
  static const bool enabled = [] {
    const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
    return cap_allows_avx512(cap ? std::string_view(cap) : std::string_view());
  }();
  return enabled;
#else
  return false;
#endif
}

}  // namespace tessel::kernels::cpu
