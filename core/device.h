// Where a tensor lives. `cpu` always exists; `cuda` is provided by the CUDA backend (cuda/).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace stoke {

struct Device {
  enum class Type : uint8_t { cpu, cuda };
  Type type = Type::cpu;
  int index = 0;

  static constexpr Device cpu() { return {Type::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {Type::cuda, i}; }
  constexpr bool is_cpu() const { return type == Type::cpu; }
  constexpr bool is_cuda() const { return type == Type::cuda; }
  friend constexpr bool operator==(Device a, Device b) = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& os, Device d) {
  return os << d.str();
}

}  // namespace stoke
