// The one way an enum's spelling is kept: a table of (value, name) rows, printed and parsed through it, with the
// errors every such field gives ("strategy: unsupported 'x' (expected a, b or c)").
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace jitbmm {

template <class E> struct EnumName {
  E value;
  const char* name;
};

template <class E, std::size_t N> const char* enum_name(const EnumName<E> (&table)[N], E value, const char* field) {
  for (const auto& row : table)
    if (row.value == value) return row.name;
  throw std::invalid_argument(std::string(field) + ": unknown enum value " + std::to_string(static_cast<int>(value)));
}

template <class E, std::size_t N>
E parse_enum(const EnumName<E> (&table)[N], const std::string& name, const char* field) {
  for (const auto& row : table)
    if (name == row.name) return row.value;
  std::string expected;
  for (std::size_t i = 0; i < N; ++i) expected += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  throw std::invalid_argument(std::string(field) + ": unsupported '" + name + "' (expected " + expected + ")");
}

} // namespace jitbmm
