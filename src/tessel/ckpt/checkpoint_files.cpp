#include "tessel/ckpt/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/core/check.h"

namespace tessel::ckpt {
namespace fs = std::filesystem;

std::string step_name(int64_t step) { return fmt::format("step_{:08d}", step); }

fs::path temporary_step_dir(const std::string& dir, int64_t step, int64_t pid) {
  return fs::path(dir) / (step_name(step) + ".tmp-" + std::to_string(pid));
}

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  TESSEL_CHECK(fd >= 0, "cannot open '{}' to sync it to disk", p.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  TESSEL_CHECK(rc == 0, "fsync of '{}' failed", p.string());
}

std::pair<uint32_t, int64_t> file_crc(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  TESSEL_CHECK(in.good(), "cannot read '{}'", p.string());
  // 64 KiB: big enough that the syscalls cost nothing next to the CRC, small enough to stay in the
  // heap (a 1 MiB buffer was a fresh mmap, zeroed and faulted in, on every call).
  std::vector<char> buf(size_t(64) << 10);
  uLong crc = crc32(0L, Z_NULL, 0);
  int64_t total = 0;
  while (in) {
    in.read(buf.data(), int64_t(buf.size()));
    const auto got = in.gcount();
    if (got <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), uInt(got));
    total += got;
  }
  return {uint32_t(crc), total};
}

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  uLong c = crc;
  const auto* p = static_cast<const Bytef*>(data);
  for (size_t at = 0; at < n;) {  // zlib takes 32-bit lengths
    const size_t step = std::min<size_t>(n - at, size_t(1) << 30);
    c = crc32(c, p + at, uInt(step));
    at += step;
  }
  return uint32_t(c);
}

uint32_t bytes_crc32(const void* data, size_t n) { return crc32_update(uint32_t(crc32(0L, Z_NULL, 0)), data, n); }

uint32_t combine_block_crc32s(const std::vector<uint32_t>& blocks, int64_t n, int64_t block_bytes) {
  uLong whole = crc32(0L, Z_NULL, 0);
  for (size_t b = 0; b < blocks.size(); ++b)
    whole = crc32_combine(whole, blocks[b], z_off_t(std::min(block_bytes, n - int64_t(b) * block_bytes)));
  return uint32_t(whole);
}

BlockCrcs block_crc32s(const void* data, size_t n, size_t block_bytes) {
  TESSEL_CHECK(block_bytes > 0, "block_crc32s: blocks of 0 bytes");
  if (n <= block_bytes) return {bytes_crc32(data, n), {}};
  BlockCrcs out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t at = 0; at < n; at += block_bytes)
    out.blocks.push_back(bytes_crc32(p + at, std::min(block_bytes, n - at)));
  out.whole = combine_block_crc32s(out.blocks, int64_t(n), int64_t(block_bytes));
  return out;
}

void write_text_file(const fs::path& p, const std::string& text) {
  {
    std::ofstream out(p, std::ios::trunc);
    fail_if_disk_full(p.string());
    out << text;
    out.flush();  // a full disk shows here, not in the destructor's silent close
    TESSEL_CHECK(out.good(), "cannot write '{}': {}", p.string(), std::strerror(errno));
  }
  fsync_path(p, false);
}

std::string read_text_file(const fs::path& p) {
  std::ifstream in(p);
  TESSEL_CHECK(in.good(), "cannot read '{}'", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string publish_checkpoint(const std::string& dir, int64_t step, const fs::path& tmp, int64_t keep) {
  TESSEL_CHECK(keep > 0, "checkpoint.keep must be > 0, got {}", keep);
  const std::string name = step_name(step);
  const fs::path final_dir = fs::path(dir) / name;
  // Move any previous copy of this step aside, rename the new one in, then point `latest`.
  const fs::path old = fs::path(dir) / (name + ".old-" + std::to_string(::getpid()));
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fsync_path(dir, true);
  const fs::path latest_tmp = fs::path(dir) / ("latest.tmp-" + std::to_string(::getpid()));
  write_text_file(latest_tmp, name + "\n");
  fs::rename(latest_tmp, fs::path(dir) / "latest");
  fsync_path(dir, true);
  fs::remove_all(old);
  // Prune: keep the newest `keep` complete checkpoints.
  const auto all = list_checkpoints(dir);
  for (size_t i = size_t(keep); i < all.size(); ++i)
    if (all[i] != name) fs::remove_all(fs::path(dir) / all[i]);
  return final_dir.string();
}

}  // namespace tessel::ckpt
