#pragma once
// Training samples over an indexed dataset, as Megatron-LM's GPT dataset builds them:
//   - a split ("969,30,1": train, valid, test weights) takes contiguous ranges of documents;
//   - each epoch visits the split's documents in a seeded shuffled order, documents concatenated;
//   - sample i is the window of seq_length + 1 tokens starting at token i * seq_length of that stream
//     (consecutive samples share one token: inputs are tokens [0, T), targets [1, T + 1));
//   - as many epochs as the requested number of samples needs; samples are visited in a seeded
//     shuffled order.
// A blend of several datasets draws each sample from the dataset whose share is furthest behind
// its weight (Megatron's blending indices), so the mix is exact at every prefix.
// Shuffles use Philox keyed by the seed, so the order depends only on (seed, data, sizes).
#include <memory>
#include <string>
#include <vector>

#include "tessel/data/indexed_dataset.h"
#include "tessel/data/synthetic.h"

namespace tessel::data {

// "969,30,1" -> document ranges [begin, end) for train, valid, test (finite weights >= 0, not all 0).
std::vector<std::pair<int64_t, int64_t>> split_ranges(const std::string& split, int64_t num_documents);

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual void sample(int64_t i, int64_t* out) const = 0;  // writes seq_length + 1 tokens
};

class GptDataset : public SampleSource {
 public:
  GptDataset(std::shared_ptr<const IndexedDataset> ds, std::pair<int64_t, int64_t> doc_range, int64_t seq_length,
             int64_t num_samples, uint64_t seed);
  int64_t size() const override { return int64_t(shuffle_.size()); }
  void sample(int64_t i, int64_t* out) const override;
  int64_t epochs() const { return epochs_; }

 private:
  // Refuses a sample index larger than the machine's memory before allocating it.
  void check_index_fits(int64_t epochs, int64_t sequences, int64_t tokens_per_epoch, int64_t num_samples) const;

  std::shared_ptr<const IndexedDataset> ds_;
  int64_t T_;
  int64_t epochs_ = 0;
  std::vector<int64_t> doc_order_;                   // sequence ids, epoch after epoch
  std::vector<std::pair<int64_t, int64_t>> starts_;  // per sample: (index into doc_order_, offset)
  std::vector<int64_t> shuffle_;
};

// Evaluation windows: all sequences in index order, concatenated; window i is tokens
// [i * T, i * T + T + 1) of that stream (no shuffling, so any implementation can reproduce them).
class OrderedWindows : public SampleSource {
 public:
  OrderedWindows(std::shared_ptr<const IndexedDataset> ds, int64_t seq_length);
  int64_t size() const override { return (total_ - 1) / T_; }
  void sample(int64_t i, int64_t* out) const override;

 private:
  std::shared_ptr<const IndexedDataset> ds_;
  int64_t T_, total_ = 0;
  std::vector<int64_t> starts_;  // stream offset of each sequence
};

class BlendedDataset : public SampleSource {
 public:
  BlendedDataset(std::vector<std::shared_ptr<SampleSource>> parts, std::vector<double> weights, int64_t num_samples);
  int64_t size() const override { return int64_t(which_.size()); }
  void sample(int64_t i, int64_t* out) const override;

 private:
  std::vector<std::shared_ptr<SampleSource>> parts_;
  std::vector<int32_t> which_;
  std::vector<int64_t> index_in_part_;
};

// Batches of consecutive samples [first, first + batch) from a source; the next batch is prepared
// on a background thread while the current one trains.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const SampleSource> src, int64_t seq_length);
  ~BatchLoader();
  Batch get(int64_t first_sample, int64_t batch_size);  // prefetches first + batch next

 private:
  Batch build(int64_t first, int64_t batch) const;
  struct Prefetch;
  std::shared_ptr<const SampleSource> src_;
  int64_t T_;
  std::unique_ptr<Prefetch> pending_;
};

// data.path forms: "PREFIX" or "W1 PREFIX1 W2 PREFIX2 ..." (Megatron's blend syntax); weights are
// finite numbers > 0.
struct DataBlend {
  std::vector<double> weights;
  std::vector<std::string> prefixes;
};
DataBlend parse_data_path(const std::string& path);

// The prefixes a blend names more than once (compared as normalised paths), each with the indices of
// its parts. Allowed, as in Megatron-LM, but each part shuffles the same documents on its own, so a
// sample can come again before one pass over the dataset is through (Config::warnings says so).
struct RepeatedPrefix {
  std::string prefix;
  std::vector<size_t> parts;
};
std::vector<RepeatedPrefix> repeated_prefixes(const DataBlend& blend);

// Builds the sample source of one split (0 train, 1 valid, 2 test) for a blend; every sample read
// refuses token ids outside vocab.
std::shared_ptr<SampleSource> build_split(const DataBlend& blend, const std::string& split, int split_index,
                                          int64_t seq_length, int64_t num_samples, uint64_t seed,
                                          const VocabBound& vocab);

}  // namespace tessel::data
