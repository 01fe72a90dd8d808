// Saving safetensors files atomically (io/atomic_file.h).
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <random>

#include "io/atomic_file.h"
#include "io/safetensors_format.h"
#include "kiln/safetensors.h"

namespace kiln {

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

  io::AtomicFileWriter out(path, "save_safetensors");
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
