// ckpt::FileWriter: what it writes is exactly what was appended, whatever the sizes and addresses
// (the O_DIRECT path goes through an aligned buffer, pads the last block and cuts the file again),
// the same bytes as the buffered path; a full disk is an error naming the file.
#include <gtest/gtest.h>

#include "support/scratch_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tessel/ckpt/file_writer.h"
#include "tessel/core/check.h"

using namespace tessel;
using ckpt::FileWriter;

namespace {

// Whether the file system under `dir` takes O_DIRECT (the writer must then use it).
bool file_system_takes_o_direct(const std::string& dir) {
  const std::string probe = dir + "/probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Appends `sizes` pieces of a patterned source, each from an odd offset into it, and returns what
// the file must hold.
std::string append_pieces(FileWriter& w, const std::vector<size_t>& sizes) {
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<char> source(total + 7);
  for (size_t i = 0; i < source.size(); ++i) source[i] = char((i * 131 + i / 4099) & 0xff);
  std::string want;
  size_t at = 3;  // unaligned addresses
  for (size_t n : sizes) {
    w.append(source.data() + at, n);
    want.append(source.data() + at, n);
    at += n;
  }
  return want;
}

TEST(FileWriter, WritesExactlyTheBytesAppendedInEitherMode) {
  tessel::testing::ScratchDir dir("tessel-fw");
  const size_t block = FileWriter::kAlignment, buffer = FileWriter::kBufferBytes;
  const std::vector<std::vector<size_t>> cases = {
      {},                                   // an empty file
      {1},                                  // less than a block
      {block},                              // exactly a block
      {block - 1, 2},                       // a block and one byte
      {8, 1000, block * 3 + 5},             // a header, then tensors
      {buffer - 3, 10, buffer, block + 1},  // across the buffer's end, twice
  };
  for (size_t c = 0; c < cases.size(); ++c)
    for (const auto mode : {FileWriter::Mode::direct_where_allowed, FileWriter::Mode::buffered}) {
      SCOPED_TRACE(::testing::Message() << "case " << c << (mode == FileWriter::Mode::buffered ? ", buffered" : ""));
      const std::string path = dir / (std::to_string(c) + ".bin");
      FileWriter w(path, mode);
      const std::string want = append_pieces(w, cases[c]);
      EXPECT_EQ(w.direct(), mode == FileWriter::Mode::direct_where_allowed && file_system_takes_o_direct(dir.dir));
      w.finish();
      EXPECT_EQ(w.bytes(), int64_t(want.size()));
      const std::string got = read_all(path);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(got == want);
    }
}

TEST(FileWriter, ReplacesAnOlderLongerFile) {
  tessel::testing::ScratchDir dir("tessel-fw");
  const std::string path = dir / "f";
  std::ofstream(path, std::ios::binary) << std::string(3 * FileWriter::kAlignment, 'x');
  FileWriter w(path);
  w.append("abc", 3);
  w.finish();
  EXPECT_EQ(read_all(path), "abc");
}

TEST(FileWriter, AFullDiskNamesTheFile) {
  std::string msg;
  try {
    FileWriter w("/dev/full");
    const std::vector<char> data(2 * FileWriter::kBufferBytes, 'a');
    w.append(data.data(), data.size());
    w.finish();
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("failed writing '/dev/full': No space left on device"), std::string::npos) << msg;
}

}  // namespace
