// libFuzzer harness: a Megatron .idx file, then what training and evaluation do with it (GPT
// samples over every document, ordered evaluation windows, the vocabulary scan). The .bin beside it
// is written with the size the index's own header and sizes describe (up to 1 MiB; a larger claim
// gets an empty .bin), so mutations of the document index and pointers reach the code past the
// size check. Seeds: fuzz/corpus/idx/.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "tessel/data/gpt_dataset.h"
#include "tessel/data/indexed_dataset.h"

namespace {

constexpr size_t kBinCap = size_t(1) << 20;  // the largest .bin written

// Bytes of token data the index describes, from its layout (see indexed_dataset.h): the sum of
// the i32 sequence lengths after the 34-byte header times the size of the dtype code at byte 17.
// Only a size for the .bin; the reader checks the index itself.
size_t described_bin_bytes(const uint8_t* data, size_t size) {
  constexpr size_t kHeader = 34;
  if (size < kHeader) return 0;
  static const size_t item_of_code[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
  const uint8_t code = data[17];
  const size_t item = code <= 8 ? item_of_code[code] : 1;
  uint64_t nseq = 0;
  std::memcpy(&nseq, data + 18, 8);
  nseq = std::min<uint64_t>(nseq, (size - kHeader) / 4);
  uint64_t tokens = 0;
  for (uint64_t i = 0; i < nseq; ++i) {
    int32_t len = 0;
    std::memcpy(&len, data + kHeader + 4 * i, 4);
    if (len > 0) tokens += uint64_t(len);
    if (tokens * item > kBinCap) return 0;
  }
  return size_t(tokens * item);
}

// The .bin's bytes: token ids of every size, made once (filling up to 1 MiB per input in the
// coverage-instrumented harness was most of its time).
std::string_view bin_bytes(size_t n) {
  static const std::string pattern = [] {
    std::string p(kBinCap, '\0');
    for (size_t i = 0; i < p.size(); ++i) p[i] = char(i * 7 % 251);
    return p;
  }();
  return std::string_view(pattern).substr(0, n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  static const std::string prefix = (fuzz::scratch_dir() / "input").string();
  fuzz::write_file(prefix + ".idx", fuzz::as_text(data, size));
  fuzz::write_file(prefix + ".bin", bin_bytes(described_bin_bytes(data, size)));
  fuzz::expect_success_or_error([&] {
    auto ds = std::make_shared<const data::IndexedDataset>(prefix);
    // The reader's promise (indexed_dataset.h): a document index that loads starts at 0, never
    // decreases and ends at the sequence count.
    const auto& di = ds->document_index();
    for (size_t i = 0; i + 1 < di.size(); ++i)
      if (di[i] > di[i + 1] || di[i] < 0 || di[i + 1] > ds->num_sequences())
        fuzz::finding("IndexedDataset accepted document index entry " + std::to_string(i + 1) + " = " +
                      std::to_string(di[i + 1]) + " after " + std::to_string(di[i]) + " (" +
                      std::to_string(ds->num_sequences()) + " sequences)");
    ds->max_token();
    constexpr int64_t kSeq = 4;
    std::vector<int64_t> out(kSeq + 1);
    const data::OrderedWindows windows(ds, kSeq);
    for (int64_t i = 0; i < std::min<int64_t>(windows.size(), 64); ++i) windows.sample(i, out.data());
    const data::GptDataset train(ds, {0, ds->num_documents()}, kSeq, 16, 1234);
    for (int64_t i = 0; i < std::min<int64_t>(train.size(), 64); ++i) train.sample(i, out.data());
  });
  return 0;
}
