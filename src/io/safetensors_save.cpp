// Saving safetensors files atomically: write a temporary in the target's
// directory, fsync it, rename it over the target.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <random>

#include "io/safetensors_format.h"
#include "kiln/safetensors.h"

namespace kiln {
namespace {

// A temporary file next to `path` that becomes `path` on commit() and is
// removed if it never does.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path) : path_(std::move(path)) {
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
    throw IOError(detail::str_cat("save_safetensors: '", path_, "': cannot ", what, ": ",
                                  std::strerror(errno)));
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
  std::string temp_;  // empty once renamed or never created
  int fd_ = -1;
};

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Everything that can fail on the user's input happens before the file is touched.
  std::vector<io::SafetensorsEntry> entries;
  std::vector<Tensor> host;
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || t.is_meta()) {
      throw ValueError(detail::str_cat("save_safetensors: '", path, "': tensor '", name,
                                       "' has no data (", t.defined() ? "meta" : "undefined", ")"));
    }
    host.push_back(t.to(Device::cpu()).contiguous());
    entries.push_back({name, t.dtype(), t.sizes(), 0, 0});
  }
  const uint64_t data_size = io::lay_out_safetensors(entries);
  const std::string header = io::encode_safetensors_header(entries, metadata, path);

  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return entries[a].begin < entries[b].begin; });

  AtomicFileWriter out(path);
  out.write(header.data(), header.size());
  uint64_t written = 0;
  for (const size_t i : order) {
    const uint64_t nbytes = entries[i].end - entries[i].begin;
    if (nbytes > 0) out.write(host[i].data_ptr(), nbytes);
    written += nbytes;
  }
  assert(written == data_size && "the layout is back to back");
  (void)written, (void)data_size;
  out.commit();
}

}  // namespace kiln
