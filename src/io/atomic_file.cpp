#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "kiln/error.h"

namespace kiln::io {

AtomicFileWriter::AtomicFileWriter(std::string path, std::string op)
    : path_(std::move(path)), op_(std::move(op)), target_(path_) {
  try {
    open();
  } catch (...) {
    release();  // no destructor runs for a constructor that throws
    throw;
  }
}

void AtomicFileWriter::open() {
  if (path_.empty()) {
    errno = ENOENT;
    fail("write it");
  }
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      open_in_place(st.st_mode);
      return;
    }
    // A regular file, perhaps behind links: replace the file the links lead to.
    const std::unique_ptr<char, decltype(&std::free)> real(::realpath(path_.c_str(), nullptr),
                                                           &std::free);
    if (!real) fail("resolve it");
    target_ = real.get();
    open_new_file(st.st_mode & 07777);
    return;
  }
  if (errno != ENOENT) fail("look it up");
  struct stat link {};
  if (::lstat(path_.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    errno = ENOENT;
    fail("follow it (a symbolic link to a missing file)");
  }
  open_new_file(0);
}

AtomicFileWriter::~AtomicFileWriter() { release(); }

void AtomicFileWriter::release() noexcept {
  if (fd_ >= 0) ::close(fd_);  // an unnamed file vanishes with its descriptor
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFileWriter::open_in_place(unsigned mode) {
  if (S_ISDIR(mode)) {
    errno = EISDIR;
    fail("write it");
  }
  if (!S_ISCHR(mode) && !S_ISFIFO(mode)) {
    errno = EINVAL;
    fail(S_ISBLK(mode) ? "write a block device (kiln writes files, character devices and FIFOs)"
                       : "write a socket (kiln writes files, character devices and FIFOs)");
  }
  // Non-blocking open: a FIFO without a reader is an error (ENXIO), not a hang.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail(errno == ENXIO ? "open it (a FIFO with no reader)" : "open it");
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) fail("open it");
  in_place_ = true;
}

void AtomicFileWriter::open_new_file(unsigned keep_mode) {
  const size_t slash = target_.rfind('/');
  dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : target_.substr(0, slash);
#ifdef O_TMPFILE
  fd_ = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  unnamed_ = fd_ >= 0;
#endif
  // Where the file system has no unnamed files: a short hidden name, so that
  // a target name of NAME_MAX characters still has a temporary file.
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temp_ = next_temp_name();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt == 100)) {
      temp_.clear();  // nothing was created
      fail("create a new file next to it");
    }
  }
  // A replaced file keeps its permissions (a private 0600 file stays private).
  if (keep_mode != 0 && ::fchmod(fd_, keep_mode) != 0) fail("keep its permissions");
}

std::string AtomicFileWriter::next_temp_name() const {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() % 1000000;
  return detail::str_cat(dir_, "/.kiln-", ::getpid(), "-", salt, "-", counter++, ".tmp");
}

void AtomicFileWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write it");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  if (in_place_) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close it");
    return;
  }
  if (::fsync(fd_) != 0) fail("sync it");
  if (unnamed_) {
    // Give the file a name beside the target for the instant before the rename.
    const std::string self = detail::str_cat("/proc/self/fd/", fd_);
    for (int attempt = 0; temp_.empty(); ++attempt) {
      temp_ = next_temp_name();
      if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, temp_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
        temp_.clear();
        if (errno != EEXIST || attempt == 100) fail("link the new file into its directory");
      }
    }
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close it");
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    release();  // the new file goes with the error
    errno = err;
    fail("rename the new file over it");
  }
  temp_.clear();
  sync_directory();
}

void AtomicFileWriter::fail(const std::string& what) const {
  throw IOError(detail::str_cat(op_, ": '", path_, "': cannot ", what, ": ", std::strerror(errno)));
}

// Makes the rename durable. Best effort: the file is complete and in place
// already, and some file systems refuse to sync a directory.
void AtomicFileWriter::sync_directory() const noexcept {
  const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace kiln::io
