// Loading safetensors files: a private memory mapping of the whole file, shared
// by every tensor that views it.
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

// A file mapped copy-on-write: writes through the mapping stay in this process.
class FileMapping {
 public:
  explicit FileMapping(const std::string& path) {
    // O_NONBLOCK: opening a FIFO would wait for a writer; the check below
    // refuses it (for a regular file the flag changes nothing).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw_errno(path, "open it");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      throw_errno(path, "stat it");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw IOError(detail::str_cat("safetensors file '", path, "': not a regular file"));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {  // mmap rejects length 0; the parser rejects the empty file
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);
      errno = err;
      if (p == MAP_FAILED) throw_errno(path, "map it");
      data_ = static_cast<char*>(p);
    } else {
      ::close(fd);
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

}  // namespace

struct SafetensorsFile::Impl {
  std::string path;
  std::shared_ptr<FileMapping> mapping;
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

SafetensorsFile::SafetensorsFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->mapping = std::make_shared<FileMapping>(path);
  impl_->header = io::parse_safetensors(impl_->mapping->bytes(), path);
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
  char* src = impl_->mapping->data() + impl_->header.data_start + e.begin;
  const size_t nbytes = e.end - e.begin;
  // kiln's bool is a C++ bool: any byte but 0 and 1 would be undefined behaviour.
  if (e.dtype == kBool) {
    const auto* b = reinterpret_cast<const unsigned char*>(src);
    const auto* bad = std::find_if(b, b + nbytes, [](unsigned char c) { return c > 1; });
    if (bad != b + nbytes) {
      throw IOError(detail::str_cat("safetensors file '", impl_->path, "': tensor '", e.name,
                                    "': BOOL element ", bad - b, " is the byte ",
                                    static_cast<int>(*bad), ", expected 0 or 1"));
    }
  }
  Tensor t;
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

StateDict load_safetensors(const std::string& path, Device device) {
  SafetensorsFile file(path);
  StateDict out;
  for (const auto& name : file.names()) out.set(name, file.get(name, device));
  return out;
}

}  // namespace kiln
