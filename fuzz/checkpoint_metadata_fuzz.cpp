// libFuzzer harness: a checkpoint's metadata.json, loaded the way `tessel train` resumes
// (load_latest_checkpoint). The checkpoint directory holds two real saves of a tiny model; the input
// replaces the newest one's metadata.json. The contract: either step 2 loads, or it is reported as
// damaged and step 1 is used, or a tessel::Error names the problem; never another exception.
// Seeds: fuzz/corpus/checkpoint_metadata/.
#include "fuzz_support.h"
#include "tessel/ckpt/checkpoint.h"
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
  fuzz::write_file(fx.dir / "step_00000002" / "metadata.json", fuzz::as_text(data, size));
  fuzz::expect_success_or_error([&] {
    ckpt::load_latest_checkpoint(fx.dir.string(), fx.model.params(), &fx.opt, [](const std::string&) {});
  });
  return 0;
}
