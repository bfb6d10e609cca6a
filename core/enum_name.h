// An enumerator's name (or another value) from a table in the enum's order, for the enum-to-name
// functions (category_name, reduce_op_name, the op kinds' names, ...) and enum-to-enum maps: one
// lookup instead of a switch per enum. A table written by hand is checked against the enum's last
// enumerator at compile time,
//   static constexpr const char* names[] = {"sum", "avg", "max"};
//   static_assert(std::size(names) == enum_count(ReduceOp::max));
// and one made from an X-macro list (STOKE_NAME_STRING, core/elementwise_ops.h) has the enum's
// count by construction.
#pragma once

#include <cstddef>
#include <type_traits>

namespace stoke {

// The number of enumerators of an enum whose values run 0, 1, ..., last.
template <class E>
constexpr size_t enum_count(E last) {
  return static_cast<size_t>(static_cast<std::underlying_type_t<E>>(last)) + 1;
}

// table[value], or `fallback` for a value outside the table (a cast of a bad integer): an enum's
// map to another type's values (a library's enum, say), made the same way as its names.
template <class E, class V, size_t N>
constexpr V enum_table(E value, const V (&table)[N], V fallback) {
  // A negative value wraps to a large index and takes the fallback too.
  const auto i = static_cast<size_t>(static_cast<std::underlying_type_t<E>>(value));
  return i < N ? table[i] : fallback;
}

// names[value], or `fallback` for a value outside the table.
template <class E, size_t N>
constexpr const char* enum_name(E value, const char* const (&names)[N], const char* fallback) {
  return enum_table<E, const char*, N>(value, names, fallback);
}

}  // namespace stoke
