#include "tessel/data/gpt_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <future>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

#include "tessel/core/check.h"
#include "tessel/core/rng.h"

namespace tessel::data {

namespace {

// Fisher-Yates with Philox draws keyed by (seed, stream).
void philox_shuffle(std::vector<int64_t>& v, uint64_t seed, uint64_t stream) {
  for (int64_t i = int64_t(v.size()) - 1; i > 0; --i) {
    const Philox4 d = philox4x32_10({uint32_t(i), uint32_t(uint64_t(i) >> 32), uint32_t(stream), uint32_t(stream >> 32)},
                                    {uint32_t(seed), uint32_t(seed >> 32)});
    const uint64_t r = uint64_t(d[0]) | (uint64_t(d[1]) << 32);
    std::swap(v[size_t(i)], v[size_t(r % uint64_t(i + 1))]);
  }
}

// A weight as written in data.path / data.split: the whole word (spaces and one leading '+'
// aside) a finite number; std::stod would take "0.7x" as 0.7 and "inf" as infinity.
std::optional<double> finite_number(const std::string& word) {
  const char* b = word.data();
  const char* e = b + word.size();
  while (b < e && std::isspace(static_cast<unsigned char>(*b))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(e[-1]))) --e;
  if (b < e && *b == '+') ++b;
  double v = 0;
  const auto [end, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || end != e || b == e || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The sum of weights, refused when it overflows (the shares would be NaN).
double finite_sum(const std::vector<double>& w, const std::string& what) {
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  TESSEL_CHECK(std::isfinite(total), "{}: the weights sum to more than a double holds; scale them down", what);
  return total;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> split_ranges(const std::string& split, int64_t n) {
  const std::string what = "data.split '" + split + "'";
  std::vector<double> w;
  std::stringstream ss(split);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const auto v = finite_number(part);
    TESSEL_CHECK(v && *v >= 0, "{}: weight '{}' must be a finite number >= 0 (a list such as 969,30,1)", what, part);
    w.push_back(*v);
  }
  TESSEL_CHECK(!w.empty() && w.size() <= 3, "{}: needs 1 to 3 weights (train, valid, test)", what);
  while (w.size() < 3) w.push_back(0.0);
  const double total = finite_sum(w, what);
  TESSEL_CHECK(total > 0, "{}: the weights are all 0", what);
  std::vector<std::pair<int64_t, int64_t>> r;
  int64_t begin = 0;
  double acc = 0;
  for (int i = 0; i < 3; ++i) {
    acc += w[size_t(i)];
    const int64_t end = i == 2 ? n : int64_t(std::llround(acc / total * double(n)));
    r.emplace_back(begin, std::max(begin, end));
    begin = std::max(begin, end);
  }
  return r;
}

void GptDataset::check_index_fits(int64_t epochs, int64_t sequences, int64_t tokens_per_epoch,
                                  int64_t num_samples) const {
  // Per epoch: a sequence id per sequence (8 bytes); per sample: a start (16) and a shuffle slot (8).
  const double bytes = double(epochs) * (8.0 * double(sequences) + 24.0 * double(tokens_per_epoch) / double(T_));
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  TESSEL_CHECK(bytes <= memory,
               "dataset '{}': {} samples of {} tokens need a sample index of {:.1f} GB ({} epochs), more than this "
               "machine's {:.1f} GB of memory (fewer samples drawn from this split, or more data)",
               ds_->prefix(), num_samples, T_ + 1, bytes / 1e9, epochs, memory / 1e9);
}

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> ds, std::pair<int64_t, int64_t> doc_range,
                       int64_t seq_length, int64_t num_samples, uint64_t seed)
    : ds_(std::move(ds)), T_(seq_length) {
  const auto& di = ds_->document_index();
  std::vector<int64_t> seqs;
  int64_t tokens_per_epoch = 0;
  for (int64_t d = doc_range.first; d < doc_range.second; ++d)
    for (int64_t s = di[size_t(d)]; s < di[size_t(d + 1)]; ++s) {
      seqs.push_back(s);
      tokens_per_epoch += ds_->sequence_length(s);
    }
  TESSEL_CHECK(tokens_per_epoch > T_,
               "dataset '{}': documents [{}, {}) of this split hold {} tokens, fewer than one sample of seq_length+1 "
               "= {} (more data or another data.split is needed)",
               ds_->prefix(), doc_range.first, doc_range.second, tokens_per_epoch, T_ + 1);
  // Enough epochs for num_samples windows of T tokens plus the final target token.
  int64_t stream_tokens = 0;
  TESSEL_CHECK(num_samples >= 0 && !__builtin_mul_overflow(num_samples, T_, &stream_tokens) &&
                   stream_tokens <= std::numeric_limits<int64_t>::max() - tokens_per_epoch,
               "dataset '{}': {} samples of {} tokens are more tokens than a 64-bit count holds (train.train_iters x "
               "train.global_batch_size samples are drawn)",
               ds_->prefix(), num_samples, T_ + 1);
  epochs_ = std::max<int64_t>(1, (stream_tokens + 1 + tokens_per_epoch - 1) / tokens_per_epoch);
  check_index_fits(epochs_, int64_t(seqs.size()), tokens_per_epoch, num_samples);
  for (int64_t e = 0; e < epochs_; ++e) {
    std::vector<int64_t> order = seqs;
    philox_shuffle(order, seed, stream_id("gpt_dataset.doc_order") + uint64_t(e));
    doc_order_.insert(doc_order_.end(), order.begin(), order.end());
  }
  // Sample starts: walk the concatenated stream in steps of T tokens.
  const int64_t total_samples = (epochs_ * tokens_per_epoch - 1) / T_;
  starts_.reserve(size_t(total_samples));
  int64_t doc = 0, offset = 0;
  for (int64_t i = 0; i < total_samples; ++i) {
    starts_.emplace_back(doc, offset);
    int64_t remaining = T_;
    while (remaining > 0) {
      const int64_t len = ds_->sequence_length(doc_order_[size_t(doc)]);
      const int64_t take = std::min(remaining, len - offset);
      remaining -= take;
      offset += take;
      if (offset == len) {
        ++doc;
        offset = 0;
      }
    }
  }
  shuffle_.resize(size_t(total_samples));
  std::iota(shuffle_.begin(), shuffle_.end(), 0);
  philox_shuffle(shuffle_, seed, stream_id("gpt_dataset.sample_order"));
}

void GptDataset::sample(int64_t i, int64_t* out) const {
  auto [doc, offset] = starts_[size_t(shuffle_[size_t(i % size())])];
  int64_t need = T_ + 1;
  while (need > 0) {
    const int64_t seq = doc_order_[size_t(doc)];
    const int64_t take = std::min(need, ds_->sequence_length(seq) - offset);
    ds_->read(seq, offset, take, out);
    out += take;
    need -= take;
    ++doc;
    offset = 0;
  }
}

OrderedWindows::OrderedWindows(std::shared_ptr<const IndexedDataset> ds, int64_t seq_length)
    : ds_(std::move(ds)), T_(seq_length) {
  for (int64_t s = 0; s < ds_->num_sequences(); ++s) {
    starts_.push_back(total_);
    total_ += ds_->sequence_length(s);
  }
}

void OrderedWindows::sample(int64_t i, int64_t* out) const {
  TESSEL_CHECK(i >= 0 && i < size(), "window {} out of range ({} windows)", i, size());
  int64_t pos = i * T_, need = T_ + 1;
  int64_t seq = int64_t(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) - 1;
  while (need > 0) {
    const int64_t off = pos - starts_[size_t(seq)];
    const int64_t take = std::min(need, ds_->sequence_length(seq) - off);
    ds_->read(seq, off, take, out);
    out += take;
    need -= take;
    pos += take;
    ++seq;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<SampleSource>> parts, std::vector<double> weights,
                               int64_t num_samples)
    : parts_(std::move(parts)) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> count(parts_.size(), 0);
  which_.resize(size_t(num_samples));
  index_in_part_.resize(size_t(num_samples));
  for (int64_t i = 0; i < num_samples; ++i) {
    size_t best = 0;
    double best_err = -1e300;
    for (size_t k = 0; k < parts_.size(); ++k) {
      const double err = weights[k] / total * double(i + 1) - double(count[k]);
      if (err > best_err) {
        best_err = err;
        best = k;
      }
    }
    which_[size_t(i)] = int32_t(best);
    index_in_part_[size_t(i)] = count[best]++;
  }
}

void BlendedDataset::sample(int64_t i, int64_t* out) const {
  const size_t k = size_t(i % size());
  parts_[size_t(which_[k])]->sample(index_in_part_[k], out);
}

struct BatchLoader::Prefetch {
  int64_t first, batch;
  std::future<Batch> result;
};

BatchLoader::BatchLoader(std::shared_ptr<const SampleSource> src, int64_t seq_length)
    : src_(std::move(src)), T_(seq_length) {}

BatchLoader::~BatchLoader() {
  if (pending_ && pending_->result.valid()) pending_->result.wait();
}

Batch BatchLoader::build(int64_t first, int64_t batch) const {
  const DeviceAccessScope host_copy;  // token ids written into the batch's tensors: an upload
  Batch b{Tensor::empty({batch, T_}, DType::i64), Tensor::empty({batch, T_}, DType::i64)};
  std::vector<int64_t> buf(size_t(T_ + 1));
  for (int64_t s = 0; s < batch; ++s) {
    src_->sample(first + s, buf.data());
    std::copy_n(buf.data(), T_, b.tokens.data<int64_t>() + s * T_);
    std::copy_n(buf.data() + 1, T_, b.targets.data<int64_t>() + s * T_);
  }
  return b;
}

Batch BatchLoader::get(int64_t first, int64_t batch) {
  Batch b;
  // The prefetch is taken out of pending_ before its result is read: a sample that failed on the
  // background thread rethrows here as its own error, and leaves no consumed future behind for the
  // destructor or the next call to wait on (std::future_error, then std::terminate).
  std::unique_ptr<Prefetch> done = std::move(pending_);
  if (done && done->first == first && done->batch == batch) {
    b = done->result.get();
  } else {
    if (done) done->result.wait();  // a guess that missed: its error, if any, concerns no request
    b = build(first, batch);
  }
  pending_ = std::make_unique<Prefetch>();
  pending_->first = first + batch;
  pending_->batch = batch;
  pending_->result = std::async(std::launch::async, [this, f = first + batch, batch] { return build(f, batch); });
  return b;
}

DataBlend parse_data_path(const std::string& path) {
  std::stringstream ss(path);
  std::vector<std::string> words;
  std::string w;
  while (ss >> w) words.push_back(w);
  TESSEL_CHECK(!words.empty(), "data.path is empty (a dataset prefix, or 'W1 PREFIX1 W2 PREFIX2 ...')");
  DataBlend b;
  if (words.size() == 1) {
    b.weights = {1.0};
    b.prefixes = {words[0]};
    return b;
  }
  TESSEL_CHECK(words.size() % 2 == 0, "data.path '{}': a blend is pairs of weight and prefix", path);
  for (size_t i = 0; i < words.size(); i += 2) {
    const auto weight = finite_number(words[i]);
    TESSEL_CHECK(weight && *weight > 0,
                 "data.path '{}': weight '{}' of '{}' must be a finite number > 0 (a blend is pairs of weight and "
                 "prefix)",
                 path, words[i], words[i + 1]);
    b.weights.push_back(*weight);
    b.prefixes.push_back(words[i + 1]);
  }
  finite_sum(b.weights, "data.path '" + path + "'");
  return b;
}

std::vector<RepeatedPrefix> repeated_prefixes(const DataBlend& blend) {
  std::vector<RepeatedPrefix> out;
  std::vector<std::string> normal;
  for (const auto& p : blend.prefixes) normal.push_back(std::filesystem::path(p).lexically_normal().string());
  for (size_t i = 0; i < normal.size(); ++i) {
    if (std::find(normal.begin(), normal.begin() + ptrdiff_t(i), normal[i]) != normal.begin() + ptrdiff_t(i))
      continue;  // said with its first part
    RepeatedPrefix r{blend.prefixes[i], {i}};
    for (size_t j = i + 1; j < normal.size(); ++j)
      if (normal[j] == normal[i]) r.parts.push_back(j);
    if (r.parts.size() > 1) out.push_back(std::move(r));
  }
  return out;
}

std::shared_ptr<SampleSource> build_split(const DataBlend& blend, const std::string& split, int split_index,
                                          int64_t seq_length, int64_t num_samples, uint64_t seed,
                                          const VocabBound& vocab) {
  std::vector<std::shared_ptr<SampleSource>> parts;
  const double total = std::accumulate(blend.weights.begin(), blend.weights.end(), 0.0);
  for (size_t k = 0; k < blend.prefixes.size(); ++k) {
    auto ds = std::make_shared<const IndexedDataset>(blend.prefixes[k], vocab);
    const auto range = split_ranges(split, ds->num_documents())[size_t(split_index)];
    // Each part is sized for its share plus a margin, as Megatron does (0.5%).
    const int64_t need = int64_t(std::ceil(double(num_samples) * blend.weights[k] / total * 1.005)) + 1;
    try {
      parts.push_back(std::make_shared<GptDataset>(ds, range, seq_length, need, seed + k));
    } catch (const Error& e) {
      // Which split, and what draws its samples: the training split train.train_iters x
      // train.global_batch_size, the validation split the evaluations' train.eval_iters batches.
      static const char* const kSplits[] = {"training", "validation", "test"};
      TESSEL_FAIL("the {} split (data.split '{}'; {} samples drawn from it): {}", kSplits[split_index], split,
                  num_samples, e.what());
    }
  }
  if (parts.size() == 1) return parts[0];
  return std::make_shared<BlendedDataset>(parts, blend.weights, num_samples);
}

}  // namespace tessel::data
