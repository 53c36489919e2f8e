// A binary built with -march=native (the release and ci presets) may use every instruction-set
// extension of the machine that built it. Carried to a CPU that lacks one (an AMD EPYC build run on
// a Sapphire Rapids, or the reverse), it would die with SIGILL somewhere in a kernel. This check runs
// before main and before the other static initialisers, and stops with the missing extensions named.
//
// The check itself is compiled for baseline x86-64 (the target attribute), and uses only C library
// calls, so it runs on any x86-64 CPU whatever flags the rest of the file was compiled with.
#include <cstdio>
#include <cstdlib>

namespace {

// TESSEL_IS_SET(M) is 1 where the macro M is defined as 1 (as the compiler defines __AVX2__ and the
// like under -march) and 0 where M is undefined, usable in an ordinary expression (the Linux
// kernel's IS_ENABLED construction): M expands to 1, pasting gives TESSEL_PLACEHOLDER_1, which
// expands to "0," and shifts the 1 into the selected position.
#define TESSEL_PLACEHOLDER_1 0,
#define TESSEL_PICK_SECOND(ignored, value, ...) value
#define TESSEL_IS_SET_3(junk_or_placeholder) TESSEL_PICK_SECOND(junk_or_placeholder 1, 0, 0)
#define TESSEL_IS_SET_2(value) TESSEL_IS_SET_3(TESSEL_PLACEHOLDER_##value)
#define TESSEL_IS_SET(macro) TESSEL_IS_SET_2(macro)

// The extensions GCC may use under -march on the CPUs tessel targets: the compiler's macro and the
// name __builtin_cpu_supports knows it by. clang 14 (the sanitizer builds) refuses, at compile time,
// the names it does not know even in a branch never taken, so those are checked in GCC builds only
// (the release, ci and portable presets; a sanitizer build runs where it was built).
#define TESSEL_CPU_FEATURES_BOTH(X)                                                                    \
  X(__AVX__, "avx") X(__AVX2__, "avx2") X(__FMA__, "fma") X(__BMI__, "bmi")                            \
  X(__BMI2__, "bmi2") X(__AVX512F__, "avx512f") X(__AVX512BW__, "avx512bw") X(__AVX512VL__, "avx512vl") \
  X(__AVX512DQ__, "avx512dq") X(__AVX512CD__, "avx512cd") X(__AVX512BF16__, "avx512bf16")              \
  X(__AVX512VNNI__, "avx512vnni") X(__AVX512VBMI__, "avx512vbmi") X(__AVX512VBMI2__, "avx512vbmi2")    \
  X(__AVX512BITALG__, "avx512bitalg") X(__AVX512IFMA__, "avx512ifma")                                 \
  X(__AVX512VPOPCNTDQ__, "avx512vpopcntdq") X(__AVX512VP2INTERSECT__, "avx512vp2intersect")           \
  X(__GFNI__, "gfni") X(__VPCLMULQDQ__, "vpclmulqdq")
#if defined(__clang__)
#define TESSEL_CPU_FEATURES(X) TESSEL_CPU_FEATURES_BOTH(X)
#else
#define TESSEL_CPU_FEATURES(X)                                                                         \
  TESSEL_CPU_FEATURES_BOTH(X)                                                                          \
  X(__F16C__, "f16c") X(__AVX512FP16__, "avx512fp16") X(__AVXVNNI__, "avxvnni") X(__AMX_TILE__, "amx-tile") \
  X(__AMX_BF16__, "amx-bf16") X(__AMX_INT8__, "amx-int8") X(__VAES__, "vaes")
#endif

__attribute__((target("arch=x86-64"), constructor(101))) void refuse_missing_cpu_features() {
  __builtin_cpu_init();
  char missing[512] = "";
  bool any = false;
#define TESSEL_CHECK_FEATURE(macro, name)                                                  \
  if (TESSEL_IS_SET(macro) && !__builtin_cpu_supports(name)) {                           \
    std::snprintf(missing + __builtin_strlen(missing), sizeof missing - __builtin_strlen(missing), " %s", name); \
    any = true;                                                                          \
  }
  TESSEL_CPU_FEATURES(TESSEL_CHECK_FEATURE)
#undef TESSEL_CHECK_FEATURE
  if (!any) return;
  std::fprintf(stderr,
               "tessel: error: this binary was built with -march=native on a CPU with instructions this CPU "
               "lacks:%s.\n  Rebuild it here (rm -rf build && make build), or build the portable preset "
               "(cmake --preset portable && cmake --build build-portable).\n",
               missing);
  std::exit(3);
}

}  // namespace
