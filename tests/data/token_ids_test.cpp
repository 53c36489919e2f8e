// Token ids outside the model's vocabulary (a .bin made with another tokenizer): every read that
// builds a batch refuses them naming the dataset, the id, where it sits and the vocabulary; so do
// both ends of the vocabulary-parallel model (the run's data setup: run_data_test.cpp).
#include <gtest/gtest.h>

#include "support/host_access.h"
#include "support/scratch_dir.h"
#include "data/idx_bytes.h"
#include "support/error_of.h"
#include "data/numbered_dataset.h"

#include <cmath>

#include "tessel/comm/communicator.h"
#include "tessel/core/check.h"
#include "tessel/data/gpt_dataset.h"
#include "tessel/nn/vocab_parallel.h"

using namespace tessel;
using namespace tessel::data;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-ids") {}
};

using tessel::testing::error_of;

TEST(TokenIds, ReadRefusesAnIdAtOrAboveTheBound) {
  Scratch s;
  const auto prefix = tessel::testing::write_numbered_dataset(s / "d", 512, 1, 7);
  const IndexedDataset ds(prefix, VocabBound{512, "model.vocab_size"});
  std::vector<int64_t> out(20);
  EXPECT_EQ(error_of([&] { ds.read(0, 0, 20, out.data()); }), "");  // other sequences read fine
  EXPECT_NE(error_of([&] { ds.read(1, 0, 20, out.data()); })
                .find("dataset '" + prefix + "': token id 512 (sequence 1, position 7) is outside model.vocab_size: "
                      "ids must be in [0, 512); was the .bin made with another tokenizer?"),
            std::string::npos)
      << error_of([&] { ds.read(1, 0, 20, out.data()); });
  EXPECT_EQ(error_of([&] { ds.read(1, 0, 7, out.data()); }), "");  // the window before the bad id
  // Without a bound (tools that inspect data) the id reads as it is.
  const IndexedDataset raw(prefix);
  raw.read(1, 7, 1, out.data());
  EXPECT_EQ(out[0], 512);
}

TEST(TokenIds, NegativeIdIsRefused) {
  // A signed .bin (as Megatron may write it) can hold negative ids, which the loss would otherwise
  // skip as ignored rows. tessel's writer refuses them, so the pair is written by hand.
  Scratch s;
  std::string bin;
  for (int32_t id : {4, 5, 6, 7, -1, 9}) tessel::testing::append_bytes<int32_t>(bin, id);
  tessel::testing::write_file_bytes(s / "d.bin", bin);
  tessel::testing::write_file_bytes(s / "d.idx", tessel::testing::spec_idx(4, 4, {4, 2}, {0, 1, 2}));
  const IndexedDataset ds(s / "d", VocabBound{512, "model.vocab_size"});
  std::vector<int64_t> out(4);
  EXPECT_EQ(error_of([&] { ds.read(0, 0, 4, out.data()); }), "");
  EXPECT_NE(error_of([&] { ds.read(1, 0, 2, out.data()); }).find("token id -1 (sequence 1, position 0)"),
            std::string::npos)
      << error_of([&] { ds.read(1, 0, 2, out.data()); });
  IndexedDatasetBuilder b(s / "w", IndexDType::i32);
  EXPECT_NE(error_of([&] { b.add_document({1, -1}); }).find("token id -1 does not fit the dataset's i32 ids"),
            std::string::npos);
}

TEST(TokenIds, EverySampleOfASplitIsChecked) {
  Scratch s;
  const auto prefix = tessel::testing::write_numbered_dataset(s / "d", 100, 2, 19);
  const DataBlend blend{{1.0}, {prefix}};
  const auto src = build_split(blend, "1", 0, 8, 64, 1, VocabBound{64, "model.vocab_size"});
  std::vector<int64_t> out(9);
  std::string err;
  for (int64_t i = 0; i < src->size() && err.empty(); ++i) err = error_of([&] { src->sample(i, out.data()); });
  EXPECT_NE(err.find("dataset '" + prefix + "': token id 100 (sequence 2, position 19) is outside model.vocab_size"),
            std::string::npos)
      << err;
  // Ordered evaluation windows read through the same check.
  const auto ds = std::make_shared<const IndexedDataset>(prefix, VocabBound{64, "model.vocab_size"});
  const OrderedWindows windows(ds, 8);
  err.clear();
  for (int64_t i = 0; i < windows.size() && err.empty(); ++i) err = error_of([&] { windows.sample(i, out.data()); });
  EXPECT_NE(err.find("token id 100 (sequence 2, position 19)"), std::string::npos) << err;
}

TEST(TokenIds, VocabParallelCrossEntropyRefusesTargetsPastTheVocabulary) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  // One rank holding the whole vocabulary: ids past it used to count as a zero logit.
  auto tp = comm::make_local_communicator();
  const int64_t V = 8;
  Tensor logits = Tensor::zeros({3, V}, DType::f32), targets = Tensor::empty({3}, DType::i64);
  targets.data<int64_t>()[0] = 1;
  targets.data<int64_t>()[1] = V;
  targets.data<int64_t>()[2] = -1;  // ignored row
  EXPECT_NE(error_of([&] { nn::vocab_parallel_cross_entropy(logits, targets, 0, 1.0f, Tensor(), *tp); })
                .find("vocab-parallel cross-entropy: target 8 at row 1 is outside the vocabulary [0, 8)"),
            std::string::npos);
  targets.data<int64_t>()[1] = V - 1;
  EXPECT_NEAR(nn::vocab_parallel_cross_entropy(logits, targets, 0, 1.0f, Tensor(), *tp), 2 * std::log(8.0), 1e-5);
}

TEST(TokenIds, VocabParallelEmbeddingRefusesIdsPastTheVocabulary) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  auto tp = comm::make_local_communicator();
  Tensor weight = Tensor::zeros({8, 4}, DType::f32), tokens = Tensor::empty({2}, DType::i64), out;
  tokens.data<int64_t>()[0] = 3;
  tokens.data<int64_t>()[1] = 9;
  EXPECT_NE(error_of([&] { nn::vocab_parallel_embedding(tokens, weight, 0, out, *tp); })
                .find("vocab-parallel embedding: token id 9 at position 1 is outside the vocabulary [0, 8)"),
            std::string::npos);
}

}  // namespace
