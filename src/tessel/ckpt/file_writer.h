#pragma once
// A checkpoint file written around the page cache (O_DIRECT) where the file system allows it.
//
// A buffered write of a checkpoint makes the kernel allocate and fill a page-cache page for every
// 4 KiB written: 1.6 GB (llama-134m's checkpoint) cost the writing thread 2.2-2.5 s of kernel time
// on this VM, against 0.05 s written directly (a test program, 2026-12-05), time taken from the
// training threads' cores while an asynchronous save is in flight; and the 1.6 GB of cache push out
// pages still in use (the dataset's). Written directly, the device reads the data from a bounce
// buffer, and the writer's CPU time is the copy into it.
//
// Bytes go through an aligned bounce buffer, so callers append any sizes from any addresses; the
// last block is written padded and the file cut to its length. Where O_DIRECT is refused (tmpfs
// and other file systems without it: the open or a write fails with EINVAL) the writer goes on
// with ordinary buffered writes; `direct()` says which. Durability is the caller's: fsync as before.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tessel::ckpt {

class FileWriter {
 public:
  enum class Mode { direct_where_allowed, buffered };
  // Creates or truncates `path`; a failure names it.
  explicit FileWriter(const std::string& path, Mode mode = Mode::direct_where_allowed);
  ~FileWriter();  // closes the file if finish() was not reached (an error is being thrown)
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void append(const void* data, size_t n);  // a failure (a full disk) names the file and the reason
  void finish();                            // writes what is buffered, cuts the file to bytes(), closes
  int64_t bytes() const { return bytes_; }
  bool direct() const { return direct_; }

  static constexpr size_t kAlignment = 4096;          // of offsets, lengths and the buffer (512 and 4K devices)
  static constexpr size_t kBufferBytes = size_t(8) << 20;

 private:
  void flush();  // the whole buffer; only the last may end inside a block
  void write_all(const char* p, size_t n);
  void stop_direct();

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  std::unique_ptr<char, void (*)(void*)> buffer_;
  size_t buffered_ = 0;  // bytes in the buffer, not yet written
  int64_t bytes_ = 0;    // appended in all
  bool padded_ = false;  // the last block was written padded: the file is cut to bytes_
};

}  // namespace tessel::ckpt
