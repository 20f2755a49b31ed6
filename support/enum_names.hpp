// The one way an enum's spelling is kept: a table of rows with a `name` (EnumName rows, or a table of facts such as
// the dtype table), printed and parsed through it, with the errors every such field gives ("strategy: unsupported
// 'x' (expected a, b or c)", "strategy: unknown enum value 9").
#pragma once

#include <cstddef>
#include <iterator>
#include <stdexcept>
#include <string>

namespace jitbmm {

template <class E> struct EnumName {
  E value;
  const char* name;
};

// The row of `rows` spelled `name`, or nullptr.
template <class Rows> auto find_named(const Rows& rows, const std::string& name) -> decltype(&*std::begin(rows)) {
  for (const auto& row : rows)
    if (name == row.name) return &row;
  return nullptr;
}

// The row of `rows` whose `key` member is `value`, or nullptr.
template <class Rows, class Row, class E> const Row* find_value(const Rows& rows, E Row::*key, E value) {
  for (const Row& row : rows)
    if (row.*key == value) return &row;
  return nullptr;
}

// "a, b or c": the names of a table's rows, as its errors list them.
template <class Rows> std::string name_list(const Rows& rows) {
  std::string out;
  const std::size_t n = std::size(rows);
  std::size_t i = 0;
  for (const auto& row : rows) {
    out += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + row.name;
    ++i;
  }
  return out;
}

template <class Rows>
[[noreturn]] void throw_unsupported(const char* field, const std::string& name, const Rows& rows) {
  throw std::invalid_argument(std::string(field) + ": unsupported '" + name + "' (expected " + name_list(rows) + ")");
}

template <class E> [[noreturn]] void throw_unknown_value(const char* field, E value) {
  throw std::invalid_argument(std::string(field) + ": unknown enum value " + std::to_string(static_cast<int>(value)));
}

template <class E, std::size_t N> const char* enum_name(const EnumName<E> (&table)[N], E value, const char* field) {
  if (const auto* row = find_value(table, &EnumName<E>::value, value)) return row->name;
  throw_unknown_value(field, value);
}

template <class E, std::size_t N>
E parse_enum(const EnumName<E> (&table)[N], const std::string& name, const char* field) {
  if (const auto* row = find_named(table, name)) return row->value;
  throw_unsupported(field, name, table);
}

} // namespace jitbmm
