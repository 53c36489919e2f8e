// libFuzzer harness: a checkpoint's metadata.json, loaded the way `tessel train` resumes
// (load_latest_checkpoint). The checkpoint directory holds two real saves of a tiny model; the input
// replaces the newest one's metadata.json. The contract: either step 2 loads, or it is reported as
// damaged and step 1 is used, or a tessel::Error names the problem; never another exception.
// Seeds: fuzz/corpus/checkpoint_metadata/.
#include "fuzz_support.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/checkpoint_metadata.h"
#include "tessel/nn/model.h"
#include "tessel/optim/adamw.h"
#include "tiny_models.h"

namespace {

struct Fixture {
  std::filesystem::path dir = tessel::fuzz::scratch_dir() / "checkpoints";
  tessel::nn::ModelConfig config = tessel::fuzz::save_tiny_checkpoints(dir);
  tessel::nn::Model model{config};
  tessel::optim::AdamW opt{model.params(), {}};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  static Fixture fx;
  const std::string text(fuzz::as_text(data, size));
  // The loader reads metadata.json first (read_checkpoint_metadata -> parse_checkpoint_metadata).
  // Text that parser refuses with a tessel::Error makes step 2 "damaged" before anything else of
  // it is read, and the fallback to step 1 does not depend on the input: that path is the same for
  // every such input, so only text that parses goes on to the whole load. (Most mutations do not
  // parse; skipping their loads makes this harness about 10x faster.)
  bool parsed = false;
  fuzz::expect_success_or_error([&] {
    ckpt::parse_checkpoint_metadata(text, "fuzz metadata.json");
    parsed = true;
  });
  if (!parsed) return 0;
  fuzz::write_file(fx.dir / "step_00000002" / "metadata.json", text);
  fuzz::expect_success_or_error([&] {
    ckpt::load_latest_checkpoint(fx.dir.string(), fx.model.params(), &fx.opt, [](const std::string&) {});
  });
  return 0;
}
