// safetensors reader: every malformed header field is a tessel::Error naming the file and the
// tensor or field, never a crash or a raw json.exception. The bad files are assembled byte by byte
// here (u64 little-endian header length, JSON header, data), independently of the writer.
#include <gtest/gtest.h>

#include "support/host_access.h"
#include "support/scratch_dir.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "tessel/ckpt/safetensors.h"
#include "tessel/core/check.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-st") {}
};

std::string file_bytes(uint64_t header_len, const std::string& header, size_t data_bytes) {
  std::string s(reinterpret_cast<const char*>(&header_len), 8);
  return s + header + std::string(data_bytes, '\x01');
}

std::string file_bytes(const std::string& header, size_t data_bytes) {
  return file_bytes(header.size(), header, data_bytes);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// The message of the tessel::Error that reading `path` raises ("" when it reads fine). Any other
// exception fails the test with its text.
std::string error_reading(const std::string& path) {
  try {
    ckpt::read_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tessel::Error: " << e.what();
    return "";
  }
  return "";
}

// The same for the in-memory entry point (what a fuzz harness calls).
std::string error_parsing(const std::string& bytes) {
  try {
    ckpt::parse_safetensors(bytes, "buffer.safetensors");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tessel::Error: " << e.what();
    return "";
  }
  return "";
}

// One malformed header: the JSON text, the data section's size and the message expected after
// "PATH: ".
struct BadHeader {
  const char* name;
  std::string header;
  size_t data_bytes;
  const char* message;
};

void PrintTo(const BadHeader& c, std::ostream* os) { *os << c.name; }

class SafetensorsBadHeader : public ::testing::TestWithParam<BadHeader> {};

TEST_P(SafetensorsBadHeader, IsRefusedNamingFileAndField) {
  const BadHeader& c = GetParam();
  Scratch s;
  const std::string path = s / "bad.safetensors";
  write_file(path, file_bytes(c.header, c.data_bytes));
  const std::string err = error_reading(path);
  EXPECT_NE(err.find(path + ": " + c.message), std::string::npos) << "got: " << err;
  const std::string err_mem = error_parsing(file_bytes(c.header, c.data_bytes));
  EXPECT_NE(err_mem.find(std::string("buffer.safetensors: ") + c.message), std::string::npos) << "got: " << err_mem;
}

// The header of one tensor 'w' with the given JSON texts as fields (nullptr: field absent).
std::string w(const char* dtype, const char* shape, const char* offsets) {
  std::string fields;
  if (dtype) fields += std::string(R"("dtype": )") + dtype;
  if (shape) fields += std::string(fields.empty() ? "" : ", ") + R"("shape": )" + shape;
  if (offsets) fields += std::string(fields.empty() ? "" : ", ") + R"("data_offsets": )" + offsets;
  return R"({"w": {)" + fields + "}}";
}

// F32 [2, 3] = 24 bytes of data is the well-formed baseline each case departs from.
constexpr const char* kF32 = R"("F32")";
constexpr const char* kShape = "[2, 3]";
constexpr const char* kOffsets = "[0, 24]";

const BadHeader kBadHeaders[] = {
    {"not_json", R"({"w": )", 24, "header is not valid JSON (syntax error at byte 6 of 6)"},
    // nlohmann throws out_of_range, not parse_error, for a literal past a double (found by fuzzing).
    {"number_past_double", R"({"w": 1e400})", 24, "header is not valid JSON (a number past the range of a double '1e400')"},
    {"not_an_object", "[1, 2]", 24, "header is not a JSON object (it is an array)"},
    {"entry_not_an_object", R"({"w": 5})", 24,
     "tensor 'w' is not an object with dtype, shape and data_offsets (it is a number)"},
    {"dtype_missing", w(nullptr, kShape, kOffsets), 24, "tensor 'w' has no 'dtype'"},
    {"dtype_not_a_string", w("5", kShape, kOffsets), 24,
     "tensor 'w': 'dtype' must be a string such as \"F32\", not 5"},
    {"dtype_unknown", w(R"("F99")", kShape, kOffsets), 24,
     "tensor 'w' has dtype 'F99' (supported: F32, BF16, F16, F8_E4M3, F8_E5M2, I32, I64)"},
    {"shape_missing", w(kF32, nullptr, kOffsets), 24, "tensor 'w' has no 'shape'"},
    {"shape_not_an_array", w(kF32, R"("2x3")", kOffsets), 24,
     "tensor 'w': 'shape' must be an array of non-negative integers, not \"2x3\""},
    {"shape_negative", w(kF32, "[2, -3]", kOffsets), 24,
     "tensor 'w': 'shape' must be an array of non-negative integers, not [2,-3]"},
    {"shape_fraction", w(kF32, "[2, 1.5]", kOffsets), 24,
     "tensor 'w': 'shape' must be an array of non-negative integers, not [2,1.5]"},
    {"shape_above_int64", w(kF32, "[18446744073709551615]", kOffsets), 24,
     "tensor 'w': 'shape' must be an array of non-negative integers, not [18446744073709551615]"},
    // 2^32 x 2^32 elements wrap a 64-bit count to 0, which would match empty data_offsets.
    {"numel_overflow", w(kF32, "[4294967296, 4294967296]", "[0, 0]"), 0,
     "tensor 'w': shape [4294967296, 4294967296] has more elements than a 64-bit count holds"},
    // 2^62 elements fit, their 2^64 bytes wrap to 0.
    {"bytes_overflow", w(kF32, "[2147483648, 2147483648]", "[0, 0]"), 0,
     "tensor 'w': shape [2147483648, 2147483648] of F32 has more bytes than a 64-bit size holds"},
    // A zero dimension does not hide an overflowing product of the others.
    {"numel_overflow_after_zero",
     w(kF32, "[0, 4294967296, 4294967296]", "[0, 0]"), 0,
     "tensor 'w': shape [0, 4294967296, 4294967296] has more elements than a 64-bit count holds"},
    {"offsets_missing", w(kF32, kShape, nullptr), 24, "tensor 'w' has no 'data_offsets'"},
    {"offsets_empty", w(kF32, kShape, "[]"), 24,
     "tensor 'w': 'data_offsets' must be [begin, end] (two non-negative integers), not []"},
    {"offsets_one_element", w(kF32, kShape, "[0]"), 24,
     "tensor 'w': 'data_offsets' must be [begin, end] (two non-negative integers), not [0]"},
    {"offsets_three_elements", w(kF32, kShape, "[0, 24, 48]"), 24,
     "tensor 'w': 'data_offsets' must be [begin, end] (two non-negative integers), not [0,24,48]"},
    {"offsets_negative", w(kF32, kShape, "[-8, 16]"), 24,
     "tensor 'w': 'data_offsets' must be [begin, end] (two non-negative integers), not [-8,16]"},
    {"offsets_strings", w(kF32, kShape, R"(["0", "24"])"), 24,
     "tensor 'w': 'data_offsets' must be [begin, end] (two non-negative integers), not [\"0\",\"24\"]"},
    {"offsets_not_an_array", w(kF32, kShape, "24"), 24,
     "tensor 'w': 'data_offsets' must be [begin, end] (two non-negative integers), not 24"},
    {"offsets_begin_after_end", w(kF32, "[0]", "[24, 0]"), 24,
     "tensor 'w': data_offsets [24, 0] begin after they end"},
    {"offsets_past_data", w(kF32, "[2, 6]", "[0, 48]"), 24,
     "tensor 'w': data_offsets [0, 48] run past the end of the data section (24 bytes)"},
    {"offsets_far_past_data",
     w(kF32, kShape, "[9223372036854775800, 9223372036854775807]"), 24,
     "tensor 'w': data_offsets [9223372036854775800, 9223372036854775807] run past the end of the data section"},
    {"offsets_disagree_with_shape", w(kF32, kShape, "[0, 16]"), 24,
     "tensor 'w': data_offsets [0, 16] hold 16 bytes, but shape [2, 3] of F32 needs 24"},
    {"metadata_not_an_object", R"({"__metadata__": [1], "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})",
     24, "'__metadata__' must be an object of string values, not [1]"},
    {"metadata_value_not_a_string",
     R"({"__metadata__": {"format": 1}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})", 24,
     "'__metadata__' key 'format' must be a string, not 1"},
};

INSTANTIATE_TEST_SUITE_P(Cases, SafetensorsBadHeader, ::testing::ValuesIn(kBadHeaders),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Safetensors, LongValuesAreShortenedInMessages) {
  Scratch s;
  const std::string path = s / "long.safetensors";
  std::string big_shape = "[";
  for (int i = 0; i < 200; ++i) big_shape += "1,";
  big_shape += "0.5]";  // 201 dimensions, the last one a fraction
  write_file(path, file_bytes(w(kF32, big_shape.c_str(), "[0, 4]"), 4));
  const std::string err = error_reading(path);
  EXPECT_NE(err.find("tensor 'w': 'shape' must be an array of non-negative integers, not [1,1,1,1,"), std::string::npos)
      << err;
  EXPECT_NE(err.find("1,..."), std::string::npos) << err;
  EXPECT_LT(err.size(), path.size() + 200) << err;
}

TEST(Safetensors, FileShorterThanTheLengthWordIsRefused) {
  Scratch s;
  const std::string path = s / "short.safetensors";
  write_file(path, "abcde");
  EXPECT_NE(error_reading(path).find(path + ": 5 bytes, too short for a safetensors file"), std::string::npos)
      << error_reading(path);
  EXPECT_NE(error_parsing("abc").find("buffer.safetensors: 3 bytes, too short for a safetensors file"),
            std::string::npos);
}

TEST(Safetensors, HeaderLengthPastTheFileIsRefused) {
  Scratch s;
  const std::string path = s / "len.safetensors";
  write_file(path, file_bytes(1000, "{}", 8));
  EXPECT_NE(error_reading(path).find(path + ": header length 1000 runs past the end of the file (18 bytes)"),
            std::string::npos)
      << error_reading(path);
  // A length that wraps a signed 64-bit size.
  write_file(path, file_bytes(~uint64_t(0), "{}", 8));
  EXPECT_NE(error_reading(path).find(path + ": header length 18446744073709551615 runs past the end of the file"),
            std::string::npos)
      << error_reading(path);
}

TEST(Safetensors, AbsurdHeaderLengthIsRefusedBeforeAllocating) {
  // The format caps the header at 100,000,000 bytes; a sparse 150 MB file stands in for a damaged
  // length word inside a large file.
  Scratch s;
  const std::string path = s / "absurd.safetensors";
  write_file(path, file_bytes(150'000'000, "{}", 0));
  fs::resize_file(path, 8 + 150'000'000 + 16);
  EXPECT_NE(error_reading(path).find(path + ": header length 150000000 exceeds the safetensors limit of 100000000 "
                                            "bytes"),
            std::string::npos)
      << error_reading(path);
}

TEST(Safetensors, DirectoryIsRefused) {
  Scratch s;
  EXPECT_NE(error_reading(s.dir).find(s.dir + ": not a regular file"), std::string::npos) << error_reading(s.dir);
  EXPECT_NE(error_reading(s / "missing.safetensors").find("cannot open safetensors file '" + (s / "missing.safetensors")),
            std::string::npos);
}

TEST(Safetensors, WellFormedFileReadsFromDiskAndMemoryAlike) {
  Scratch s;
  const std::string path = s / "good.safetensors";
  Tensor a = Tensor::empty({2, 3}, DType::f32), b = Tensor::empty({4}, DType::i64), e = Tensor::empty({0, 5}, DType::bf16);
  {
    const tessel::testing::HostAccess host;
    for (int64_t i = 0; i < 6; ++i) a.data<float>()[i] = float(i) * 0.5f;
    for (int64_t i = 0; i < 4; ++i) b.data<int64_t>()[i] = -i;
  }
  ckpt::write_safetensors(path, {{"format", "pt"}}, {{"a", a}, {"empty", e}, {"b", b}});
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  for (const auto& f : {ckpt::read_safetensors(path), ckpt::parse_safetensors(bytes, "mem")}) {
    EXPECT_EQ(f.metadata.at("format"), "pt");
    ASSERT_EQ(f.tensors.size(), 3u);
    EXPECT_EQ(f.get("a").shape(), (Shape{2, 3}));
    EXPECT_EQ(tessel::testing::host_at<float>(f.get("a"), 5), 2.5f);
    EXPECT_EQ(tessel::testing::host_at<int64_t>(f.get("b"), 3), -3);
    EXPECT_EQ(f.get("empty").shape(), (Shape{0, 5}));
  }
}

}  // namespace
