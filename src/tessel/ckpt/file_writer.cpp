#include "tessel/ckpt/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tessel/core/check.h"

namespace tessel::ckpt {

FileWriter::FileWriter(const std::string& path, Mode mode)
    : path_(path), buffer_(static_cast<char*>(std::aligned_alloc(kAlignment, kBufferBytes)), std::free) {
  TESSEL_CHECK(buffer_ != nullptr, "cannot write '{}': no memory for an {} MiB write buffer", path,
               kBufferBytes >> 20);
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (mode == Mode::direct_where_allowed) {
    fd_ = ::open(path.c_str(), kFlags | O_DIRECT, 0666);
    direct_ = fd_ >= 0;
  }
  if (fd_ < 0 && (mode == Mode::buffered || errno == EINVAL))  // EINVAL: no O_DIRECT on this file system
    fd_ = ::open(path.c_str(), kFlags, 0666);
  TESSEL_CHECK(fd_ >= 0, "cannot write '{}': {}", path, std::strerror(errno));
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::stop_direct() {
  const int flags = ::fcntl(fd_, F_GETFL);
  TESSEL_CHECK(flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0, "cannot write '{}': {}", path_,
               std::strerror(errno));
  direct_ = false;
}

void FileWriter::write_all(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && direct_) {  // O_DIRECT opened but not honoured here: write buffered
      stop_direct();
      continue;
    }
    TESSEL_CHECK(w > 0, "failed writing '{}': {}", path_, w < 0 ? std::strerror(errno) : "nothing was written");
    p += w;
    n -= size_t(w);
    if (direct_ && n > 0 && size_t(w) % kAlignment != 0) stop_direct();  // a short write left an unaligned rest
  }
}

// Writes the buffer: full (a whole number of blocks) or, for the last, padded with zeros to a block
// under O_DIRECT (finish() cuts the padding off again).
void FileWriter::flush() {
  size_t n = buffered_;
  if (direct_ && n % kAlignment != 0) {
    const size_t padded = (n + kAlignment - 1) / kAlignment * kAlignment;
    std::memset(buffer_.get() + n, 0, padded - n);
    n = padded;
    padded_ = true;
  }
  if (n > 0) write_all(buffer_.get(), n);
  buffered_ = 0;
}

void FileWriter::append(const void* data, size_t n) {
  TESSEL_CHECK(fd_ >= 0, "'{}' is already finished", path_);
  const char* p = static_cast<const char*>(data);
  bytes_ += int64_t(n);
  while (n > 0) {
    const size_t take = std::min(n, kBufferBytes - buffered_);
    std::memcpy(buffer_.get() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ == kBufferBytes) flush();
  }
}

void FileWriter::finish() {
  TESSEL_CHECK(fd_ >= 0, "'{}' is already finished", path_);
  flush();
  if (padded_)
    TESSEL_CHECK(::ftruncate(fd_, off_t(bytes_)) == 0, "failed writing '{}': {}", path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  TESSEL_CHECK(::close(fd) == 0, "failed writing '{}': {}", path_, std::strerror(errno));
}

}  // namespace tessel::ckpt
