// The one table per enum: dtype and semiring spellings, sizes and device types. Every stage reads these.
#include <array>
#include <string>

#include "jitbmm/types.hpp"
#include "support/enum_names.hpp"

namespace jitbmm {
namespace {

constexpr std::array<DTypeInfo, 4> kDTypes = {{
    // dtype, name, device type, accumulator type, size_bytes, acc_bytes, half
    {DType::f32, "f32", "jb::f32", "float", 4, 4, false},
    {DType::f64, "f64", "jb::f64", "double", 8, 8, false},
    {DType::f16, "f16", "jb::f16", "float", 2, 4, true},
    {DType::bf16, "bf16", "jb::bf16", "float", 2, 4, true},
}};

constexpr std::array<SemiringInfo, 5> kSemirings = {{
    // semiring, name, device type, has_argmax, fast_term, select_op, packed_term, backward, grad, scatter_times,
    // nonnegative_inputs
    {Semiring::log, "log", "jb::LogSemiring", false, nullptr, nullptr, nullptr, BackwardKind::marginal, "jb::LogGrad",
     false, false},
    {Semiring::max_plus, "max_plus", "jb::MaxPlusSemiring", true, "jb::MaxPlusTerm", "jb::MaxPlusOp",
     "jb::PackedMaxPlus", BackwardKind::argmax_scatter, nullptr, false, false},
    {Semiring::min_plus, "min_plus", "jb::MinPlusSemiring", true, "jb::MinPlusTerm", "jb::MinPlusOp",
     "jb::PackedMinPlus", BackwardKind::argmax_scatter, nullptr, false, false},
    {Semiring::max_times, "max_times", "jb::MaxTimesSemiring", true, "jb::MaxTimesTerm", "jb::MaxTimesOp",
     "jb::PackedMaxTimes", BackwardKind::argmax_scatter, nullptr, true, true},
    {Semiring::plus_times, "plus_times", "jb::PlusTimesSemiring", false, nullptr, nullptr, nullptr,
     BackwardKind::marginal, "jb::PlusTimesGrad", false, false},
}};

// Row i holds enum value i: the C ABI and the Python package list the values by index.
template <class Row, std::size_t N, class Key>
constexpr bool in_enum_order(const std::array<Row, N>& rows, Key Row::*key) {
  for (std::size_t i = 0; i < N; ++i)
    if (static_cast<std::size_t>(rows[i].*key) != i) return false;
  return true;
}
static_assert(in_enum_order(kDTypes, &DTypeInfo::dtype));
static_assert(in_enum_order(kSemirings, &SemiringInfo::semiring));

} // namespace

int dtype_count() { return static_cast<int>(kDTypes.size()); }
int semiring_count() { return static_cast<int>(kSemirings.size()); }

const DTypeInfo& dtype_info(DType dtype) {
  if (const auto* row = find_value(kDTypes, &DTypeInfo::dtype, dtype)) return *row;
  throw_unknown_value("dtype", dtype);
}

DType parse_dtype(const std::string& name) {
  // The table's names only, as the C ABI and the Python package list them: "float32" or "half" would be a second
  // set of names that only some of jitbmm's entry points accept.
  if (const auto* row = find_named(kDTypes, name)) return row->dtype;
  throw_unsupported("dtype", name, kDTypes);
}

const SemiringInfo& semiring_info(Semiring semiring) {
  if (const auto* row = find_value(kSemirings, &SemiringInfo::semiring, semiring)) return *row;
  throw_unknown_value("semiring", semiring);
}

Semiring parse_semiring(const std::string& name) {
  if (const auto* row = find_named(kSemirings, name)) return row->semiring;
  throw_unsupported("semiring", name, kSemirings);
}

} // namespace jitbmm
