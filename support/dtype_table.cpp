// The one table per enum: dtype and semiring spellings, sizes and device types. Every stage reads these.
#include <array>
#include <stdexcept>

#include "jitbmm/types.hpp"

namespace jitbmm {
namespace {

constexpr std::array<DTypeInfo, 4> kDTypes = {{
    {DType::f32, "f32", "jb::f32", "float", 4},
    {DType::f64, "f64", "jb::f64", "double", 8},
    {DType::f16, "f16", "jb::f16", "float", 2},
    {DType::bf16, "bf16", "jb::bf16", "float", 2},
}};

constexpr std::array<SemiringInfo, 5> kSemirings = {{
    // semiring, name, device type, has_argmax, fast_term, backward, grad, scatter_times
    {Semiring::log, "log", "jb::LogSemiring", false, nullptr, BackwardKind::marginal, "jb::LogGrad", false},
    {Semiring::max_plus, "max_plus", "jb::MaxPlusSemiring", true, "jb::MaxPlusTerm", BackwardKind::argmax_scatter,
     nullptr, false},
    {Semiring::min_plus, "min_plus", "jb::MinPlusSemiring", true, "jb::MinPlusTerm", BackwardKind::argmax_scatter,
     nullptr, false},
    {Semiring::max_times, "max_times", "jb::MaxTimesSemiring", true, "jb::MaxTimesTerm", BackwardKind::argmax_scatter,
     nullptr, true},
    {Semiring::plus_times, "plus_times", "jb::PlusTimesSemiring", false, nullptr, BackwardKind::marginal,
     "jb::PlusTimesGrad", false},
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
  for (const auto& row : kDTypes)
    if (row.dtype == dtype) return row;
  throw std::invalid_argument("dtype: unknown enum value " + std::to_string(static_cast<int>(dtype)));
}

DType parse_dtype(const std::string& name) {
  for (const auto& row : kDTypes)
    if (name == row.name) return row.dtype;
  if (name == "float32" || name == "float") return DType::f32;
  if (name == "float64" || name == "double") return DType::f64;
  if (name == "float16" || name == "half") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  throw std::invalid_argument("dtype: unsupported '" + name + "' (expected f32, f64, f16 or bf16)");
}

const SemiringInfo& semiring_info(Semiring semiring) {
  for (const auto& row : kSemirings)
    if (row.semiring == semiring) return row;
  throw std::invalid_argument("semiring: unknown enum value " + std::to_string(static_cast<int>(semiring)));
}

Semiring parse_semiring(const std::string& name) {
  for (const auto& row : kSemirings)
    if (name == row.name) return row.semiring;
  throw std::invalid_argument("semiring: unsupported '" + name +
                              "' (expected log, max_plus, min_plus, max_times or plus_times)");
}

} // namespace jitbmm
