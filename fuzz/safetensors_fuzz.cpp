// libFuzzer harness: a whole safetensors file (8-byte header length, JSON header, data), as
// checkpoints and Hugging Face imports read it. Seeds: fuzz/corpus/safetensors/.
#include "fuzz_support.h"
#include "tessel/ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  static const auto path = fuzz::scratch_dir() / "input.safetensors";
  fuzz::write_file(path, fuzz::as_text(data, size));
  fuzz::expect_success_or_error([&] {
    const ckpt::SafetensorsFile f = ckpt::read_safetensors(path.string());
    // What readers do next: look tensors up by name and touch every element. A tensor that loads
    // must be a real one: no negative dimension.
    for (const auto& [name, t] : f.tensors) {
      for (int64_t d : t.shape())
        if (d < 0) fuzz::finding("read_safetensors accepted tensor '" + name + "' of shape " + shape_str(t.shape()));
      const Tensor& same = f.get(name);
      volatile uint8_t sink = 0;
      const auto* bytes = static_cast<const uint8_t*>(same.raw());
      for (size_t i = 0; i < same.nbytes(); ++i) sink = sink ^ bytes[i];
      (void)sink;
    }
  });
  return 0;
}
