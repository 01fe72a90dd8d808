// Where a tensor's storage lives.
//
//   kiln::Device d = kiln::Device::cpu();
//   kiln::Device g = kiln::Device::parse("cuda:1");   // kind cuda, index 1
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace kiln {

enum class DeviceKind : uint8_t { CPU, CUDA };
inline constexpr int kNumDeviceKinds = 2;

class Device {
 public:
  constexpr Device() = default;
  constexpr Device(DeviceKind kind, int index = 0) : kind_(kind), index_(index) {}  // NOLINT
  static constexpr Device cpu() { return Device(DeviceKind::CPU); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceKind::CUDA, index); }
  // "cpu", "cuda", "cuda:N"; anything else is a DeviceError.
  static Device parse(std::string_view text);

  constexpr DeviceKind kind() const noexcept { return kind_; }
  constexpr int index() const noexcept { return index_; }
  constexpr bool is_cpu() const noexcept { return kind_ == DeviceKind::CPU; }
  constexpr bool is_cuda() const noexcept { return kind_ == DeviceKind::CUDA; }
  std::string str() const;

  constexpr bool operator==(const Device&) const = default;

 private:
  DeviceKind kind_ = DeviceKind::CPU;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace kiln
