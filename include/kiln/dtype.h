// Element types, the 16-bit float formats, and PyTorch's type promotion.
//
//   kiln::DType t = kiln::promote_types(kiln::kInt32, kiln::kFloat16);  // kFloat16
//   std::cout << t;                                                      // "float16"
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

namespace kiln {

enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};
inline constexpr int kNumDTypes = 10;

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kInt16 = DType::Int16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;

// IEEE 754 binary16. Arithmetic goes through float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) noexcept : bits(from_float(f)) {}  // NOLINT: implicit like a float
  operator float() const noexcept { return to_float(bits); }

  static uint16_t from_float(float f) noexcept {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or nan
      return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (abs < 0x38800000u) {  // subnormal or zero in half: round via float addition
      float a;
      std::memcpy(&a, &abs, 4);
      a += 0.5f;  // 0.5 = 2^-1 aligns the half subnormal ulp (2^-24) to float's last bit
      uint32_t r;
      std::memcpy(&r, &a, 4);
      return static_cast<uint16_t>(sign | (r - 0x3f000000u));
    }
    // normal: round to nearest even on the 13 dropped bits
    const uint32_t mant_odd = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) + round
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  static float to_float(uint16_t h) noexcept {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    uint32_t out;
    if (exp == 0x1f) {
      out = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
      if (mant == 0) {
        out = sign;
      } else {  // subnormal: value = mant * 2^-24
        float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
        std::memcpy(&out, &f, 4);
        out |= sign;
      }
    } else {
      out = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &out, 4);
    return f;
  }
};

// bfloat16: the top half of a float32. Arithmetic goes through float.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) noexcept : bits(from_float(f)) {}  // NOLINT: implicit like a float
  operator float() const noexcept { return to_float(bits); }

  static uint16_t from_float(float f) noexcept {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
    const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>((x + rounding) >> 16);
  }
  static float to_float(uint16_t b) noexcept {
    const uint32_t x = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

constexpr size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
      return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::Float64:
      return 8;
  }
  return 0;
}

constexpr bool is_floating(DType t) noexcept {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 ||
         t == DType::Float64;
}
constexpr bool is_integral(DType t, bool include_bool = false) noexcept {
  return t == DType::UInt8 || t == DType::Int8 || t == DType::Int16 || t == DType::Int32 ||
         t == DType::Int64 || (include_bool && t == DType::Bool);
}

std::string_view dtype_name(DType t) noexcept;
std::ostream& operator<<(std::ostream& os, DType t);

// PyTorch's promotion lattice for two dtypes (e.g. uint8 + int8 -> int16,
// float16 + bfloat16 -> float32, int64 + float16 -> float16).
DType promote_types(DType a, DType b) noexcept;

// The C++ element type of a dtype and back.
template <DType D>
struct dtype_cpp;
template <> struct dtype_cpp<DType::Bool> { using type = bool; };
template <> struct dtype_cpp<DType::UInt8> { using type = uint8_t; };
template <> struct dtype_cpp<DType::Int8> { using type = int8_t; };
template <> struct dtype_cpp<DType::Int16> { using type = int16_t; };
template <> struct dtype_cpp<DType::Int32> { using type = int32_t; };
template <> struct dtype_cpp<DType::Int64> { using type = int64_t; };
template <> struct dtype_cpp<DType::Float16> { using type = Half; };
template <> struct dtype_cpp<DType::BFloat16> { using type = BFloat16; };
template <> struct dtype_cpp<DType::Float32> { using type = float; };
template <> struct dtype_cpp<DType::Float64> { using type = double; };

template <typename T>
constexpr DType dtype_of() noexcept;
template <> constexpr DType dtype_of<bool>() noexcept { return DType::Bool; }
template <> constexpr DType dtype_of<uint8_t>() noexcept { return DType::UInt8; }
template <> constexpr DType dtype_of<int8_t>() noexcept { return DType::Int8; }
template <> constexpr DType dtype_of<int16_t>() noexcept { return DType::Int16; }
template <> constexpr DType dtype_of<int32_t>() noexcept { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() noexcept { return DType::Int64; }
template <> constexpr DType dtype_of<Half>() noexcept { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() noexcept { return DType::BFloat16; }
template <> constexpr DType dtype_of<float>() noexcept { return DType::Float32; }
template <> constexpr DType dtype_of<double>() noexcept { return DType::Float64; }

// Calls f.template operator()<T>() with T the C++ type of dtype t:
//   visit_dtype(t, [&]<typename T>() { fill<T>(...); });
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::Int8: return f.template operator()<int8_t>();
    case DType::Int16: return f.template operator()<int16_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
  }
  return f.template operator()<float>();
}

// The type kernels compute in: float for the 16-bit floats, the type itself otherwise.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

}  // namespace kiln
