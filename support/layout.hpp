// Index arithmetic on strided batched operands, shared by validation, the reference and the launcher.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/types.hpp"

namespace jitbmm {

// One element of a [batches][rows][cols] operand.
struct MatrixIndex {
  int64_t batch = 0, row = 0, col = 0;
};

// The element at row-major position `flat` of a [batches][rows][cols] array (rows, cols > 0).
inline MatrixIndex index_of(int64_t rows, int64_t cols, int64_t flat) {
  return {flat / (rows * cols), flat / cols % rows, flat % cols};
}

// The element offset of `at` in an operand with strides `st`.
inline int64_t offset_of(const Strides& st, const MatrixIndex& at) {
  return at.batch * st.batch + at.row * st.row + at.col * st.col;
}

// The element offset, in an operand with strides `st`, of row-major position `flat` of [batches][rows][cols]: where
// the flat index of an output (or gradient) is found in its strided storage.
inline int64_t offset_of(const Strides& st, int64_t rows, int64_t cols, int64_t flat) {
  return offset_of(st, index_of(rows, cols, flat));
}

// The largest element offset of an array of `extents` at `strides` (one stride an extent), 0 when an extent is 0,
// or nothing when it does not fit in int64.
inline std::optional<int64_t> try_max_offset(std::initializer_list<int64_t> extents, const int64_t* strides) {
  for (int64_t e : extents)
    if (e == 0) return 0;
  int64_t total = 0, part = 0;
  for (int64_t e : extents)
    if (__builtin_mul_overflow(e - 1, *strides++, &part) || __builtin_add_overflow(total, part, &total))
      return std::nullopt;
  return total;
}

// Whether the elements at offsets 0 to `last`, of `bytes` bytes each, lie within kMaxOperandBytes: the bound every
// operand's strides obey (what validate() and check_chain_problem() refuse beyond).
inline bool span_fits(int64_t last, int bytes) {
  int64_t span = 0;
  return last < kMaxOperandBytes && !__builtin_mul_overflow(last + 1, int64_t(bytes), &span) &&
         span <= kMaxOperandBytes;
}

// The largest element offset of a [batches][rows][cols] operand, or 0 when it has no element. Throws
// std::invalid_argument naming `what` when the offset does not fit in int64.
inline int64_t max_offset(const char* what, int64_t batches, int64_t rows, int64_t cols, const Strides& st) {
  const int64_t strides[3] = {st.batch, st.row, st.col};
  if (const auto last = try_max_offset({batches, rows, cols}, strides)) return *last;
  throw std::invalid_argument(std::string(what) + ": element offsets overflow 64 bits");
}

// True when no two elements of the [batches][rows][cols] operand share an address. Fast sufficient test first
// (sorted by stride, each dimension steps past everything the smaller ones span); when it fails, layouts of up to
// kExactInjectivityLimit elements are decided exactly by enumerating their offsets (interleaved layouts such as
// row stride 3, column stride 2 are injective); larger ones are rejected.
constexpr int64_t kExactInjectivityLimit = int64_t(1) << 22;

inline bool is_injective(int64_t batches, int64_t rows, int64_t cols, const Strides& st) {
  if (batches == 0 || rows == 0 || cols == 0) return true; // no elements, no collisions
  std::array<std::pair<int64_t, int64_t>, 3> dims = {{{st.batch, batches}, {st.row, rows}, {st.col, cols}}};
  std::sort(dims.begin(), dims.end());
  int64_t span = 1; // one past the largest offset reached by the dimensions seen so far
  bool nested = true;
  int64_t stride_span = 0;
  for (const auto& [stride, extent] : dims) {
    if (extent <= 1) continue;
    if (stride < span) {
      nested = false;
      break;
    }
    // Saturated past int64: any later dimension with extent > 1 then counts as not nested.
    if (__builtin_mul_overflow(stride, extent - 1, &stride_span) || __builtin_add_overflow(stride_span, span, &span))
      span = std::numeric_limits<int64_t>::max();
  }
  if (nested) return true;
  if (batches > kExactInjectivityLimit / rows / cols) return false; // so the products below are small
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(batches * rows * cols));
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) offsets.push_back(offset_of(st, {b, r, c}));
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end();
}

} // namespace jitbmm
