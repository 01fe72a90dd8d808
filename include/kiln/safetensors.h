// Reading and writing safetensors files (https://github.com/huggingface/safetensors).
//
//   kiln::save_safetensors("net.safetensors", net.state_dict(), {{"epoch", "3"}});
//   kiln::StateDict sd = kiln::load_safetensors("net.safetensors");   // mapped, not copied
//
//   kiln::SafetensorsFile f("big.safetensors");       // reads the header only
//   for (const auto& name : f.names()) std::cout << name << " " << f.info(name).shape << "\n";
//   kiln::Tensor w = f.get("fc.weight");              // touches only this tensor's pages
//
// Saving is atomic: the file is written under a temporary name in the same
// directory, synced, then renamed over `path`, so readers and crashes see the
// old file or the new one, never half of one.
//
// Loading maps the file privately (MAP_PRIVATE, PROT_READ | PROT_WRITE): a CPU
// tensor whose bytes are aligned for its dtype views the mapping without a copy,
// and the mapping stays alive while any such tensor does. Writing into a loaded
// tensor copies the touched page (copy-on-write) and never changes the file.
// Misaligned tensors (files whose header length is not a multiple of 8) are
// copied; so are all tensors loaded onto another device.
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

// Every tensor of the file, in the header's order, on `device`.
StateDict load_safetensors(const std::string& path, Device device = Device::cpu());

struct SafetensorsTensorInfo {
  DType dtype = kFloat32;
  Shape shape;
  size_t nbytes = 0;
};

// One safetensors file, opened for reading tensors one at a time. Construction
// maps the file and validates the whole header; get() reads only the bytes of
// the tensor it returns. Tensors keep the mapping alive after the object dies.
// Const members are safe to call from several threads; a moved-from object may
// only be assigned to or destroyed.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
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
