// GPT-2's byte-level alphabet: every byte is written as one printable
// character, so BPE works on bytes while its vocabulary stays text. Printable
// Latin-1 bytes stand for themselves; the others (controls, space, 0x7f-0xa0,
// 0xad) take U+0100 onwards in byte order, so the space is "Ġ" and "\n" is "Ċ".
#pragma once

#include <cstdint>
#include <optional>

namespace kiln::text {

char32_t byte_to_char(uint8_t b) noexcept;
std::optional<uint8_t> char_to_byte(char32_t c) noexcept;

}  // namespace kiln::text
