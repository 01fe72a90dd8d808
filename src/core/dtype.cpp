#include "kiln/dtype.h"

#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/scalar.h"

namespace kiln {

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote_types(DType a, DType b) noexcept {
  if (a == b) return a;
  if (a == kBool) return b;
  if (b == kBool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  // Both integral. uint8 is the only unsigned type: with a signed type it needs
  // one size up to hold both ranges (uint8 + int8 -> int16).
  if (a == kUInt8 || b == kUInt8) {
    DType s = a == kUInt8 ? b : a;
    return s == kInt8 ? kInt16 : s;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return os << (s.to<bool>() ? "true" : "false");
    case Scalar::Kind::Int: return os << s.to_int();
    case Scalar::Kind::Float: return os << s.to_double();
  }
  return os;
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda();
  if (text.starts_with("cuda:") && text.size() > 5 && text.size() < 9) {
    int index = 0;
    for (char c : text.substr(5)) {
      if (c < '0' || c > '9') {
        index = -1;
        break;
      }
      index = index * 10 + (c - '0');
    }
    if (index >= 0) return Device::cuda(index);
  }
  throw DeviceError(detail::str_cat("Device::parse: '", text,
                                    "' is not a device (expected cpu, cuda or cuda:N)"));
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace kiln
