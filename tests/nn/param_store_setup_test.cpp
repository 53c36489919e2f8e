// ParamStore setup at scale: registration is linear in the number of parameters, and a store larger
// than the machine's memory is refused with its size before anything is allocated.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "support/error_of.h"
#include "tessel/core/check.h"
#include "tessel/core/machine_memory.h"
#include "tessel/nn/params.h"

namespace tessel::nn {
namespace {

TEST(ParamStoreSetup, ManyParametersRegisterInLinearTime) {
  // 200k names: the former duplicate-name scan compared ~2e10 pairs (minutes); an index takes
  // well under a second.
  constexpr int kParams = 200000;
  ParamStore ps(DType::f32);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kParams; ++i) ps.add("layer." + std::to_string(i) + ".weight", {2}, Init::ones, 0, false);
  ps.mark_tied_copy(2 * (kParams - 1));
  ps.set_replica(2 * (kParams - 2), 2, 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(ps.numel(), 2 * kParams);
  EXPECT_EQ(ps.spec("layer.12345.weight").offset, 2 * 12345);
  EXPECT_TRUE(ps.spec("layer." + std::to_string(kParams - 1) + ".weight").tied_copy);
  EXPECT_EQ(ps.spec("layer." + std::to_string(kParams - 2) + ".weight").replica, 1);
  try {
    ps.add("layer.7.weight", {2}, Init::ones, 0, false);
    ADD_FAILURE() << "a name registered twice was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'layer.7.weight' registered twice"), std::string::npos) << e.what();
  }
  try {
    ps.mark_tied_copy(1);
    ADD_FAILURE() << "no parameter starts at offset 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mark_tied_copy: no parameter at offset 1"), std::string::npos) << e.what();
  }
}

// The refusal of a bf16 store of 2^40 parameters finalized with `shard` ("" if it was allocated).
std::string refusal_of_huge_store(MasterShard shard) {
  ParamStore ps(DType::bf16);
  ps.add("model.embed_tokens.weight", {int64_t(1) << 20, int64_t(1) << 20}, Init::normal, 0.02f, true);
  return testing::error_of([&] { ps.finalize(shard); });
}

TEST(ParamStoreSetup, StoreLargerThanMemoryIsRefusedWithItsSize) {
  // 2^40 parameters: 8 TiB of fp32 weights and gradients (10 TiB with a bf16 copy).
  std::string m = refusal_of_huge_store({});
  EXPECT_NE(m.find("the model needs 10240.0 GiB (1099511627776 parameters x 10 bytes: fp32 weights, fp32 gradients, "
                   "the compute copy"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("GiB of memory here; reduce the model sizes"), std::string::npos) << m;
  // Sharded masters over 4 ranks: 2 (bf16 copy) + 4 (gradients) + 4 / 4 (the master shard) bytes.
  m = refusal_of_huge_store(MasterShard{0, 4});
  EXPECT_NE(m.find("the model needs 7168.0 GiB (1099511627776 parameters x 7 bytes: this rank's shard of the fp32 "
                   "masters"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("or shard the masters over more data-parallel ranks"), std::string::npos) << m;
}

TEST(MachineMemory, IsKnownAndBoundsTheCheck) {
  const double bytes = double(machine_memory_bytes());
  EXPECT_GT(bytes, 64.0 * 1024 * 1024);  // at least 64 MiB: a real figure, not 0
  EXPECT_NO_THROW(check_fits_in_memory(bytes / 2, "half", "", ""));
  EXPECT_THROW(check_fits_in_memory(bytes * 2, "twice", "", ""), Error);
}

}  // namespace
}  // namespace tessel::nn
