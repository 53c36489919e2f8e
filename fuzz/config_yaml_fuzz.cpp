// libFuzzer harness: a YAML run configuration (`tessel train CONFIG`), then its resolved form:
// a config that loads must write a config.yaml that loads again to the same config (resumed runs
// and `tessel eval` read that file). Seeds: fuzz/corpus/config_yaml/ (configs/*.yaml).
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
      fuzz::finding("the resolved config does not round-trip:\n" + resolved + "\n---\n" + again);
    }
  } catch (const std::exception& e) {
    fuzz::finding(std::string("the resolved config does not load again: ") + e.what() + "\n" + resolved);
  }
  return 0;
}
