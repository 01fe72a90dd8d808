// kiln errors: every user mistake throws a kiln::Error (or a subclass) whose
// message names the op or file and the offending values.
//
//   try {
//     auto y = kiln::matmul(a, b);
//   } catch (const kiln::ShapeError& e) {
//     std::cerr << e.what();   // "matmul: inner dimensions differ: [2, 3] @ [4, 5]"
//   }
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Incompatible or invalid shapes, dims or sizes.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A dtype an op does not accept, or a dtype conversion that is not allowed.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// Tensors on different devices, or a device that is not available.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// An index or dim out of range.
class IndexError : public Error {
 public:
  using Error::Error;
};

// A file that cannot be read or written, or whose contents are malformed.
class IOError : public Error {
 public:
  using Error::Error;
};

// A value argument outside its domain (a negative probability, zero step, ...).
class ValueError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename T>
void stream_arg(std::ostream& os, const T& value) {
  os << value;
}
// Shapes and dim lists print as [2, 3].
template <typename T>
void stream_arg(std::ostream& os, const std::vector<T>& values) {
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << ']';
}
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (stream_arg(os, args), ...);
  return os.str();
}
}  // namespace detail

// Throws E with the streamed arguments as its message when cond is false.
#define KILN_CHECK(cond, E, ...)                              \
  do {                                                        \
    if (!(cond)) throw E(::kiln::detail::str_cat(__VA_ARGS__)); \
  } while (0)

}  // namespace kiln
