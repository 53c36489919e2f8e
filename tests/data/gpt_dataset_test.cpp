// Sample construction: windows of seq_length + 1 over documents concatenated in a seeded order,
// epochs, splits and blends.
#include <gtest/gtest.h>

#include "support/scratch_dir.h"

#include <filesystem>
#include <map>
#include <set>

#include "tessel/data/gpt_dataset.h"

using namespace tessel::data;
namespace fs = std::filesystem;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-gpt") {}
};

// Document d of length len_d holds tokens d * 1000 + j: every token names its document and position.
std::shared_ptr<const IndexedDataset> make_docs(const std::string& prefix, const std::vector<int64_t>& lens) {
  IndexedDatasetBuilder b(prefix, IndexDType::i32);
  for (size_t d = 0; d < lens.size(); ++d) {
    std::vector<int64_t> t;
    for (int64_t j = 0; j < lens[d]; ++j) t.push_back(int64_t(d) * 1000 + j);
    b.add_document(t);
  }
  b.finalize();
  return std::make_shared<const IndexedDataset>(prefix);
}

TEST(GptDataset, SamplesAreWindowsOverConcatenatedDocuments) {
  Scratch s;
  const std::vector<int64_t> lens{5, 17, 3, 9, 30, 1, 12};
  auto ds = make_docs(s.dir + "/d", lens);
  const int64_t T = 8, tokens = 77;
  GptDataset g(ds, {0, 7}, T, 20, 42);
  EXPECT_EQ(g.epochs(), 3);  // 20 samples x 8 tokens + 1 > 2 epochs of 77 tokens
  EXPECT_EQ(g.size(), (3 * tokens - 1) / T);
  std::map<int64_t, int> starts;  // first token of each sample within the first epoch's documents
  for (int64_t i = 0; i < g.size(); ++i) {
    std::vector<int64_t> w(size_t(T + 1));
    g.sample(i, w.data());
    for (int64_t k = 1; k <= T; ++k) {
      const int64_t prev = w[size_t(k - 1)], cur = w[size_t(k)];
      const bool same_doc_next = cur == prev + 1 && cur / 1000 == prev / 1000;
      const bool doc_switch = cur % 1000 == 0 && prev % 1000 == lens[size_t(prev / 1000)] - 1;
      ASSERT_TRUE(same_doc_next || doc_switch) << "sample " << i << " token " << k << ": " << prev << " -> " << cur;
    }
  }
  // Same seed, same order; another seed, another order.
  GptDataset again(ds, {0, 7}, T, 20, 42), other(ds, {0, 7}, T, 20, 43);
  std::vector<int64_t> a(size_t(T + 1)), b(size_t(T + 1)), c(size_t(T + 1));
  bool differs = false;
  for (int64_t i = 0; i < g.size(); ++i) {
    g.sample(i, a.data());
    again.sample(i, b.data());
    other.sample(i, c.data());
    ASSERT_EQ(a, b);
    differs |= a != c;
  }
  EXPECT_TRUE(differs);
}

TEST(GptDataset, OneEpochCoversEveryTokenPositionOnce) {
  Scratch s;
  auto ds = make_docs(s.dir + "/d", {10, 7, 20, 4});  // 41 tokens
  const int64_t T = 5;
  GptDataset g(ds, {0, 4}, T, 8, 1);  // 8 windows of 5 need 41 tokens: exactly one epoch
  ASSERT_EQ(g.epochs(), 1);
  ASSERT_EQ(g.size(), 8);
  std::multiset<int64_t> inputs;  // the input tokens (first T of each window) tile the stream
  for (int64_t i = 0; i < g.size(); ++i) {
    std::vector<int64_t> w(size_t(T + 1));
    g.sample(i, w.data());
    inputs.insert(w.begin(), w.begin() + T);
  }
  EXPECT_EQ(inputs.size(), 40u);
  EXPECT_EQ(std::set<int64_t>(inputs.begin(), inputs.end()).size(), 40u);  // no token twice
}

TEST(GptDataset, SplitRangesFollowTheWeights) {
  auto r = split_ranges("969,30,1", 1000);
  EXPECT_EQ(r[0], std::make_pair(int64_t(0), int64_t(969)));
  EXPECT_EQ(r[1], std::make_pair(int64_t(969), int64_t(999)));
  EXPECT_EQ(r[2], std::make_pair(int64_t(999), int64_t(1000)));
  EXPECT_EQ(split_ranges("1", 10)[0], std::make_pair(int64_t(0), int64_t(10)));
  EXPECT_THROW(split_ranges("a,b", 10), tessel::Error);
}

class CountingSource : public SampleSource {
 public:
  explicit CountingSource(int64_t id) : id_(id) {}
  int64_t size() const override { return 1 << 20; }
  void sample(int64_t i, int64_t* out) const override {
    out[0] = id_;
    out[1] = i;
  }

 private:
  int64_t id_;
};

TEST(BlendedDataset, EveryPrefixMatchesTheWeights) {
  BlendedDataset b({std::make_shared<CountingSource>(0), std::make_shared<CountingSource>(1),
                    std::make_shared<CountingSource>(2)},
                   {0.5, 0.3, 0.2}, 1000);
  std::vector<int64_t> count(3, 0);
  int64_t out[2];
  for (int64_t i = 0; i < 1000; ++i) {
    b.sample(i, out);
    ASSERT_EQ(out[1], count[size_t(out[0])]);  // each part is read in order
    ++count[size_t(out[0])];
    const double w[3] = {0.5, 0.3, 0.2};
    for (int k = 0; k < 3; ++k) ASSERT_LE(std::abs(double(count[size_t(k)]) - w[k] * double(i + 1)), 1.0);
  }
}

TEST(DataPath, ParsesPrefixesAndBlends) {
  EXPECT_EQ(parse_data_path("data/a").prefixes, std::vector<std::string>{"data/a"});
  const auto b = parse_data_path("0.7 data/a 0.3 data/b");
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"data/a", "data/b"}));
  EXPECT_EQ(b.weights, (std::vector<double>{0.7, 0.3}));
  EXPECT_THROW(parse_data_path("0.7 data/a 0.3"), tessel::Error);
  EXPECT_THROW(parse_data_path("x data/a"), tessel::Error);
}

std::string data_path_error(const std::string& path) {
  try {
    parse_data_path(path);
  } catch (const tessel::Error& e) {
    return e.what();
  }
  return "";
}

TEST(DataPath, WeightsThatAreNotFinitePositiveNumbersAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"inf data/a 0.3 data/b", "data.path 'inf data/a 0.3 data/b': weight 'inf' of 'data/a' must be a finite number > 0"},
      {"0.7 data/a nan data/b", "data.path '0.7 data/a nan data/b': weight 'nan' of 'data/b' must be a finite number > 0"},
      {"-0.5 data/a 1 data/b", "weight '-0.5' of 'data/a' must be a finite number > 0"},
      {"0 data/a 0 data/b", "weight '0' of 'data/a' must be a finite number > 0"},
      {"1e999 data/a 1 data/b", "weight '1e999' of 'data/a' must be a finite number > 0"},
      {"0.7x data/a 0.3 data/b", "weight '0.7x' of 'data/a' must be a finite number > 0"},
      {"1e308 data/a 1e308 data/b", "data.path '1e308 data/a 1e308 data/b': the weights sum to more than a double "
                                    "holds; scale them down"},
  };
  for (const auto& [path, message] : cases) {
    SCOPED_TRACE(path);
    EXPECT_NE(data_path_error(path).find(message), std::string::npos) << data_path_error(path);
  }
}

std::string split_error(const std::string& split) {
  try {
    split_ranges(split, 100);
  } catch (const tessel::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Split, WeightsThatAreNotFiniteNonNegativeNumbersAreRefusedByName) {
  EXPECT_NE(split_error("inf,1,0").find("data.split 'inf,1,0': weight 'inf' must be a finite number >= 0"),
            std::string::npos)
      << split_error("inf,1,0");
  EXPECT_NE(split_error("1,nan").find("data.split '1,nan': weight 'nan' must be a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(split_error("1,-2,0").find("data.split '1,-2,0': weight '-2' must be a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(split_error("9x,1").find("data.split '9x,1': weight '9x' must be a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(split_error("1e308,1e308,1").find("data.split '1e308,1e308,1': the weights sum to more than a double holds"),
            std::string::npos);
  EXPECT_NE(split_error("0,0,0").find("data.split '0,0,0': the weights are all 0"), std::string::npos);
  EXPECT_EQ(split_ranges("969,30,1", 1000), (std::vector<std::pair<int64_t, int64_t>>{{0, 969}, {969, 999}, {999, 1000}}));
}

}  // namespace
