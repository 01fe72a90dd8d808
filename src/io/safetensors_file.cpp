// Loading safetensors files: copied out of the file with pread (the default),
// or viewed in a private memory mapping shared by every tensor of the file.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "io/safetensors_format.h"
#include "kiln/ops/factory.h"
#include "kiln/safetensors.h"

namespace kiln {
namespace {

[[noreturn]] void throw_errno(const std::string& path, const char* what) {
  throw IOError(
      detail::str_cat("safetensors file '", path, "': cannot ", what, ": ", std::strerror(errno)));
}

// An open regular file. O_NONBLOCK: opening a FIFO would wait for a writer;
// the check below refuses it (for a regular file the flag changes nothing).
class OpenFile {
 public:
  explicit OpenFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw_errno(path, "open it");
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      errno = err;
      throw_errno(path, "stat it");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw IOError(detail::str_cat("safetensors file '", path, "': not a regular file"));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~OpenFile() { ::close(fd_); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  int fd() const noexcept { return fd_; }
  uint64_t size() const noexcept { return size_; }

  // n bytes at offset, all of them: the file shrinking since it was opened
  // (another program truncated or rewrote it) is an IOError, not short data.
  void read_at(void* dst, size_t n, uint64_t offset) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw_errno(path_, "read it");
      if (r == 0) {
        throw IOError(detail::str_cat("safetensors file '", path_, "': it ends at byte ", offset,
                                      ", before the data its header promised: another program ",
                                      "truncated or rewrote it since it was opened"));
      }
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

  // The header length and the header (all of the file when it is shorter or
  // the length is out of bounds: the parser says what is wrong).
  std::string header_bytes() const {
    std::string head(static_cast<size_t>(std::min<uint64_t>(size_, 8)), '\0');
    read_at(head.data(), head.size(), 0);
    if (head.size() < 8) return head;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
      n = n << 8 | static_cast<unsigned char>(head[static_cast<size_t>(i)]);
    if (n > io::kSafetensorsMaxHeaderBytes || n > size_ - 8) return head;
    head.resize(static_cast<size_t>(8 + n));
    read_at(head.data() + 8, static_cast<size_t>(n), 8);
    return head;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A file mapped copy-on-write: writes through the mapping stay in this process.
class FileMapping {
 public:
  FileMapping(const OpenFile& file, const std::string& path)
      : size_(static_cast<size_t>(file.size())) {
    if (size_ > 0) {  // mmap rejects length 0; the parser rejects the empty file
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd(), 0);
      if (p == MAP_FAILED) throw_errno(path, "map it");
      data_ = static_cast<char*>(p);
    }
  }
  ~FileMapping() {
    if (data_) ::munmap(data_, size_);
  }
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  char* data() const noexcept { return data_; }
  std::string_view bytes() const noexcept { return {data_, size_}; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// kiln's bool is a C++ bool: any byte but 0 and 1 would be undefined behaviour.
void check_bools(const std::string& path, const io::SafetensorsEntry& e, const void* data,
                 size_t nbytes) {
  const auto* b = static_cast<const unsigned char*>(data);
  const auto* bad = std::find_if(b, b + nbytes, [](unsigned char c) { return c > 1; });
  if (bad != b + nbytes) {
    throw IOError(detail::str_cat("safetensors file '", path, "': tensor '", e.name,
                                  "': BOOL element ", bad - b, " is the byte ",
                                  static_cast<int>(*bad), ", expected 0 or 1"));
  }
}

}  // namespace

struct SafetensorsFile::Impl {
  std::string path;
  std::shared_ptr<OpenFile> file;        // kCopy: read at each get()
  std::shared_ptr<FileMapping> mapping;  // kMap
  io::SafetensorsHeader header;
  std::unordered_map<std::string_view, size_t> index;  // views names in header.entries

  const io::SafetensorsEntry& entry(std::string_view name) const {
    auto it = index.find(name);
    if (it == index.end()) {
      throw ValueError(detail::str_cat("safetensors file '", path, "': no tensor named '", name,
                                       "' among its ", header.entries.size()));
    }
    return header.entries[it->second];
  }
};

SafetensorsFile::SafetensorsFile(const std::string& path, SafetensorsLoad how)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  auto file = std::make_shared<OpenFile>(path);
  if (how == SafetensorsLoad::kMap) {
    impl_->mapping = std::make_shared<FileMapping>(*file, path);
    impl_->header = io::parse_safetensors(impl_->mapping->bytes(), path);
  } else {
    impl_->header = io::parse_safetensors(file->header_bytes(), file->size(), path);
    impl_->file = std::move(file);
  }
  const auto& entries = impl_->header.entries;
  for (size_t i = 0; i < entries.size(); ++i) impl_->index.emplace(entries[i].name, i);
}

SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

const std::string& SafetensorsFile::path() const noexcept { return impl_->path; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->header.entries.size());
  for (const auto& e : impl_->header.entries) out.push_back(e.name);
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return impl_->index.count(name) != 0;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const noexcept {
  return impl_->header.metadata;
}

SafetensorsTensorInfo SafetensorsFile::info(std::string_view name) const {
  const auto& e = impl_->entry(name);
  return {e.dtype, e.shape, static_cast<size_t>(e.end - e.begin)};
}

Tensor SafetensorsFile::get(std::string_view name, Device device) const {
  const auto& e = impl_->entry(name);
  const size_t nbytes = e.end - e.begin;
  Tensor t;
  if (impl_->file) {
    t = empty(e.shape, {.dtype = e.dtype});
    if (nbytes > 0) impl_->file->read_at(t.data_ptr(), nbytes, impl_->header.data_start + e.begin);
    if (e.dtype == kBool) check_bools(impl_->path, e, t.data_ptr(), nbytes);
    return device.is_cpu() ? t : t.to(device);
  }
  char* src = impl_->mapping->data() + impl_->header.data_start + e.begin;
  if (e.dtype == kBool) check_bools(impl_->path, e, src, nbytes);
  const bool aligned = reinterpret_cast<uintptr_t>(src) % dtype_size(e.dtype) == 0;
  if (nbytes > 0 && aligned) {
    // The deleter owns a reference: the mapping lives while this storage does.
    t = from_blob(src, e.shape, e.dtype, [mapping = impl_->mapping](void*) {});
  } else {
    t = empty(e.shape, {.dtype = e.dtype});
    if (nbytes > 0) std::memcpy(t.data_ptr(), src, nbytes);
  }
  return device.is_cpu() ? t : t.to(device);
}

StateDict load_safetensors(const std::string& path, Device device, SafetensorsLoad how) {
  SafetensorsFile file(path, how);
  StateDict out;
  for (const auto& name : file.names()) out.set(name, file.get(name, device));
  return out;
}

}  // namespace kiln
