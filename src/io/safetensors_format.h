// The safetensors file format on its own: no file I/O, no tensors. Parses and
// validates a header against the size of the file it came from, lays out and
// encodes one. The loader and writer (safetensors_file.cpp, safetensors_save.cpp)
// and the fuzzer (fuzz/safetensors_fuzz.cpp) share it.
//
// A file: an 8-byte little-endian header length N, N bytes of JSON (may end in
// spaces), then the data buffer that every tensor's data_offsets index into.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::io {

// Larger headers are rejected before anything is allocated (the reference
// implementation uses the same bound).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// Deeper JSON nesting (legitimate headers need 3 levels) is rejected.
inline constexpr int kSafetensorsMaxNesting = 32;
// Shapes with more dims are rejected.
inline constexpr size_t kSafetensorsMaxRank = 64;

struct SafetensorsEntry {
  std::string name;
  DType dtype = kFloat32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // [begin, end): bytes of the data buffer
  uint64_t end = 0;
  bool operator==(const SafetensorsEntry&) const = default;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                // file offset of the data buffer: 8 + header length
  uint64_t data_size = 0;                 // bytes from data_start to the end of the file
  std::vector<SafetensorsEntry> entries;  // in the order the header lists them
  std::map<std::string, std::string> metadata;
};

// Parses the header of `file` (the whole file's bytes; only its first 8 + N are
// read) and checks every entry against the data buffer: known dtype, shape,
// offsets inside the buffer, byte count matching the shape, no overlaps, no
// duplicate names. IOError whose message names file_name (and the tensor).
SafetensorsHeader parse_safetensors(std::string_view file, std::string_view file_name);
// The same from the file's first bytes only: `prefix` holds at least its first
// 8 + N bytes (all of it when shorter), and file_size is the whole file's.
SafetensorsHeader parse_safetensors(std::string_view prefix, uint64_t file_size,
                                    std::string_view file_name);

// "F32" for kFloat32, ...
std::string_view safetensors_dtype_name(DType dtype) noexcept;
// The kiln dtype of a safetensors dtype name; nullopt for names kiln lacks.
std::optional<DType> safetensors_dtype_from_name(std::string_view name) noexcept;

// numel * element size of a shape, nullopt on a negative dim or overflow.
std::optional<uint64_t> safetensors_nbytes(std::span<const int64_t> shape, DType dtype) noexcept;

// Sets every entry's [begin, end) without changing their order in the vector:
// the data goes back to back by decreasing element size, then by name, so every
// offset is a multiple of its element size (the reference writer's layout).
// Returns the data buffer's size.
uint64_t lay_out_safetensors(std::span<SafetensorsEntry> entries);

// The 8-byte length and the JSON header ("__metadata__" first, when not empty,
// then entries in their order), padded with spaces so that the data buffer
// starts at a multiple of 8. ValueError naming file_name for a name or a
// metadata string that is not UTF-8, or a tensor named "__metadata__".
std::string encode_safetensors_header(std::span<const SafetensorsEntry> entries,
                                      const std::map<std::string, std::string>& metadata,
                                      std::string_view file_name);

}  // namespace kiln::io
