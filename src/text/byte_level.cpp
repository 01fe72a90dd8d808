#include "text/byte_level.h"

#include <array>

namespace kiln::text {
namespace {

constexpr bool stands_for_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

// The highest character the alphabet uses: U+0100 plus the 68 bytes that do
// not stand for themselves, less one.
constexpr char32_t kLastChar = 0x143;

struct Alphabet {
  std::array<char32_t, 256> chars{};
  std::array<int16_t, kLastChar + 1> bytes{};
  constexpr Alphabet() {
    for (auto& b : bytes) b = -1;
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      chars[b] = stands_for_itself(b) ? static_cast<char32_t>(b) : next++;
      bytes[chars[b]] = static_cast<int16_t>(b);
    }
  }
};
constexpr Alphabet kAlphabet;

}  // namespace

char32_t byte_to_char(uint8_t b) noexcept { return kAlphabet.chars[b]; }

std::optional<uint8_t> char_to_byte(char32_t c) noexcept {
  if (c > kLastChar || kAlphabet.bytes[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(kAlphabet.bytes[c]);
}

}  // namespace kiln::text
