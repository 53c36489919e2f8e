// libFuzzer harness: a YAML run configuration (`tessel train CONFIG`), then its resolved form:
// a config that loads must write a config.yaml that loads again to the same config (resumed runs
// and `tessel eval` read that file). Seeds: fuzz/corpus/config_yaml/ (configs/*.yaml).
#include <cstdio>
#include <cstdlib>

#include "fuzz_support.h"
#include "tessel/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  const std::string text(fuzz::as_text(data, size));
  std::string resolved;
  fuzz::expect_success_or_error([&] { resolved = train::Config::from_yaml_text(text, {}, "fuzz.yaml").to_yaml(); });
  if (resolved.empty()) return 0;
  // The resolved config must load without any error at all and resolve to itself.
  try {
    const std::string again = train::Config::from_yaml_text(resolved, {}, "config.yaml").to_yaml();
    if (again != resolved) {
      std::fprintf(stderr, "FINDING: the resolved config does not round-trip:\n%s\n---\n%s\n", resolved.c_str(),
                   again.c_str());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: the resolved config does not load again: %s\n%s\n", e.what(), resolved.c_str());
    std::abort();
  }
  return 0;
}
