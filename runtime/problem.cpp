// Validation and printing of Problem: the checks every entry point runs before anything is generated.
#include <algorithm>
#include <array>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "jitbmm/types.hpp"
#include "runtime/enum_names.hpp"
#include "runtime/layout.hpp"

namespace jitbmm {

Strides row_major(int64_t rows, int64_t cols) { return {rows * cols, cols, 1}; }
Strides column_major(int64_t rows, int64_t cols) { return {rows * cols, 1, rows}; }

Shape parse_shape(const std::string& text) {
  Shape s;
  std::array<int64_t*, 4> fields = {&s.B, &s.M, &s.K, &s.N};
  std::size_t pos = 0;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    std::size_t used = 0;
    try {
      *fields[f] = std::stoll(text.substr(pos), &used);
    } catch (const std::exception&) {
      throw std::invalid_argument("shape: expected BxMxKxN (four integers), got '" + text + "'");
    }
    pos += used;
    const bool last = f + 1 == fields.size();
    if (last ? pos != text.size() : (pos >= text.size() || (text[pos] != 'x' && text[pos] != 'X')))
      throw std::invalid_argument("shape: expected BxMxKxN (four integers), got '" + text + "'");
    ++pos;
  }
  return s;
}

std::string to_string(const Shape& s) {
  std::ostringstream os;
  os << s.B << 'x' << s.M << 'x' << s.K << 'x' << s.N;
  return os.str();
}

namespace {

void check_strides(const char* name, const Strides& st) {
  if (st.batch < 0 || st.row < 0 || st.col < 0)
    throw std::invalid_argument(std::string(name) + ": strides must be non-negative");
}

} // namespace

void validate(const Problem& p) {
  const Shape& s = p.shape;
  const std::array<std::pair<const char*, int64_t>, 4> sizes = {
      {{"shape.B", s.B}, {"shape.M", s.M}, {"shape.K", s.K}, {"shape.N", s.N}}};
  for (const auto& [name, v] : sizes)
    if (v < 0) throw std::invalid_argument(std::string(name) + " must be >= 0, got " + std::to_string(v));
  semiring_info(p.semiring); // throws on an out-of-range enum
  precision_name(p.precision);
  dtype_info(p.dtype);
  const DType out = p.output_dtype();
  dtype_info(out);
  const bool half_in = p.dtype == DType::f16 || p.dtype == DType::bf16;
  if (out != p.dtype && !(half_in && out == DType::f32))
    throw std::invalid_argument(std::string("out_dtype: ") + dtype_info(out).name + " output from " +
                                dtype_info(p.dtype).name +
                                " inputs is not supported (only the input dtype, or f32 "
                                "from f16/bf16)");
  if (p.with_argmax && !semiring_info(p.semiring).has_argmax)
    throw std::invalid_argument(std::string("with_argmax: the ") + semiring_info(p.semiring).name +
                                " semiring has no argmax (only max_plus, min_plus, max_times)");
  check_strides("a_strides", p.a());
  check_strides("b_strides", p.b());
  check_strides("out_strides", p.out());
  // Element offsets must fit in int64 for every operand.
  max_offset("a_strides", s.B, s.M, s.K, p.a());
  max_offset("b_strides", s.B, s.K, s.N, p.b());
  max_offset("out_strides", s.B, s.M, s.N, p.out());
  if (!is_injective(s.B, s.M, s.N, p.out()))
    throw std::invalid_argument("out_strides: the output layout maps two elements to one address (or, past 2^22 "
                                "elements, is not nested: each dimension, ordered by stride, stepping past the "
                                "span of the smaller ones)");
}

std::string describe(const Problem& p) {
  std::ostringstream os;
  auto strides = [](const Strides& st) {
    return "(" + std::to_string(st.batch) + "," + std::to_string(st.row) + "," + std::to_string(st.col) + ")";
  };
  os << semiring_info(p.semiring).name << ' ' << dtype_info(p.dtype).name;
  if (p.output_dtype() != p.dtype) os << "->" << dtype_info(p.output_dtype()).name;
  os << ' ' << to_string(p.shape) << " a" << strides(p.a()) << " b" << strides(p.b()) << " out" << strides(p.out());
  if (p.with_argmax) os << " +argmax";
  if (p.precision != Precision::exact) os << " precision=" << precision_name(p.precision);
  return os.str();
}

namespace {
constexpr EnumName<Precision> kPrecisions[] = {{Precision::exact, "exact"}, {Precision::fast, "fast"}};
} // namespace

const char* precision_name(Precision precision) { return enum_name(kPrecisions, precision, "precision"); }
Precision parse_precision(const std::string& name) { return parse_enum(kPrecisions, name, "precision"); }

} // namespace jitbmm
