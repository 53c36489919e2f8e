#pragma once
// Reads documents from text or JSONL files for `tessel preprocess` and `tessel train-tokenizer`.
//   text:  one document per file, or per block separated by blank lines, or by lines holding only
//          "%" (the fortune(6) format)
//   jsonl: one JSON object per line, the document in a string field (default "text")
#include <functional>
#include <string>
#include <vector>

namespace tessel::data {

struct DocumentReaderOptions {
  std::string format = "auto";        // auto (by extension: .jsonl/.json are JSONL) | text | jsonl
  std::string boundary = "blank";     // text only: file | blank | percent
  std::string json_key = "text";
};

// Calls f(document) for every non-empty document; returns the number of documents.
int64_t for_each_document(const std::vector<std::string>& files, const DocumentReaderOptions& o,
                          const std::function<void(const std::string&)>& f);

}  // namespace tessel::data
