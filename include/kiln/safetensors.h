// Reading and writing safetensors files (https://github.com/huggingface/safetensors).
//
//   kiln::save_safetensors("net.safetensors", net.state_dict(), {{"epoch", "3"}});
//   kiln::StateDict sd = kiln::load_safetensors("net.safetensors");   // copied: sd is yours
//
//   kiln::SafetensorsFile f("big.safetensors");       // reads the header only
//   for (const auto& name : f.names()) std::cout << name << " " << f.info(name).shape << "\n";
//   kiln::Tensor w = f.get("fc.weight");              // reads only this tensor's bytes
//
// Saving is atomic: the file is written as a new file in the same directory,
// synced, then renamed over `path`, so readers and crashes see the old file or
// the new one, never half of one (docs/safetensors.md: links, devices, FIFOs).
//
// Loading copies each tensor's bytes out of the file (SafetensorsLoad::kCopy):
// nothing another program does to the file afterwards (rewriting it in place,
// truncating it) changes or breaks a loaded tensor. SafetensorsLoad::kMap
// instead views a private mapping of the file (MAP_PRIVATE, read-write) with no
// copy: faster to load and sharing the page cache, but a rewrite of the file
// in place shows through pages the program has not written, and a truncation
// makes reads fault (SIGBUS). Writes into a loaded tensor never reach the file
// in either mode.
//
// Every malformed file is rejected with an IOError naming the file and, where
// there is one, the tensor; see docs/safetensors.md for the list.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln {

// Writes every tensor of `tensors` (any device, any strides, every dtype) and
// `metadata` to `path`. The header lists tensors in the state dict's order; their
// data is laid out by decreasing element size, then by name, so every tensor is
// aligned for mapping. IOError naming the file when it cannot be written (the
// temporary is removed and an existing file is left untouched); ValueError for a
// tensor without data, a tensor named "__metadata__" or a name that is not UTF-8.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// How loaded tensors get their bytes (above).
enum class SafetensorsLoad { kCopy, kMap };

// Every tensor of the file, in the header's order, on `device`.
StateDict load_safetensors(const std::string& path, Device device = Device::cpu(),
                           SafetensorsLoad how = SafetensorsLoad::kCopy);

struct SafetensorsTensorInfo {
  DType dtype = kFloat32;
  Shape shape;
  size_t nbytes = 0;
};

// One safetensors file, opened for reading tensors one at a time. Construction
// reads and validates the whole header; get() reads only the bytes of the
// tensor it returns, copied (kCopy: the file as it is at that call) or viewed
// in the mapping (kMap: tensors keep the mapping alive after the object dies).
// Const members are safe to call from several threads; a moved-from object may
// only be assigned to or destroyed.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path, SafetensorsLoad how = SafetensorsLoad::kCopy);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::string& path() const noexcept;
  // Tensor names in the header's order.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const noexcept;
  // ValueError naming the file and the tensor when it is absent.
  SafetensorsTensorInfo info(std::string_view name) const;
  Tensor get(std::string_view name, Device device = Device::cpu()) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
