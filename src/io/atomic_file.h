// Writing a file atomically: readers see the old file or the whole new one.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "kiln/error.h"

namespace kiln::io {

// A file written whole or not at all: a temporary file next to `path` that
// becomes `path` on commit() (fsync, rename) and is removed if it never does.
// Errors are IOErrors naming op and the path.
class AtomicFileWriter {
 public:
  AtomicFileWriter(std::string path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
    static std::atomic<uint64_t> counter{0};
    const uint64_t salt = std::random_device{}();
    for (int attempt = 0; fd_ < 0; ++attempt) {
      temp_ = detail::str_cat(path_, ".tmp.", ::getpid(), ".", counter++, ".", salt % 100000);
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && (errno != EEXIST || attempt == 100)) {
        temp_.clear();  // nothing was created
        fail("create a temporary file next to it");
      }
    }
  }
  ~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("write it");
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) fail("sync it");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close it");
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename the temporary file over it");
    temp_.clear();
    sync_directory();
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw IOError(
        detail::str_cat(op_, ": '", path_, "': cannot ", what, ": ", std::strerror(errno)));
  }
  // Makes the rename durable. Best effort: the file is complete and in place
  // already, and some file systems refuse to sync a directory.
  void sync_directory() const noexcept {
    const size_t slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
  }

  std::string path_;
  std::string op_;    // names the operation in errors
  std::string temp_;  // empty once renamed or never created
  int fd_ = -1;
};

}  // namespace kiln::io
