// libFuzzer target for the safetensors header parser. Any input must either be
// rejected with a kiln::Error or yield a header whose entries all lie inside
// the file and survive re-encoding unchanged. Anything else (a crash, a
// sanitizer report, another exception, a broken invariant) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "io/safetensors_format.h"
#include "kiln/error.h"

namespace {

void require(bool cond) {
  if (!cond) std::abort();
}

void check_invariants(const kiln::io::SafetensorsHeader& h, size_t file_size) {
  require(h.data_start >= 8 && h.data_start + h.data_size == file_size);
  for (const auto& e : h.entries) {
    const auto nbytes = kiln::io::safetensors_nbytes(e.shape, e.dtype);
    require(nbytes && e.begin <= e.end && e.end <= h.data_size && *nbytes == e.end - e.begin);
    require(e.name != "__metadata__");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  kiln::io::SafetensorsHeader header;
  try {
    header = kiln::io::parse_safetensors(file, "fuzz input");
  } catch (const kiln::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  check_invariants(header, size);

  // What was accepted encodes to a header that parses back to the same entries.
  std::string again = kiln::io::encode_safetensors_header(header.entries, header.metadata, "fuzz");
  require(again.size() % 8 == 0);
  again.append(header.data_size, '\0');
  const auto reparsed = kiln::io::parse_safetensors(again, "fuzz round trip");
  require(reparsed.entries == header.entries && reparsed.metadata == header.metadata);
  return 0;
}
