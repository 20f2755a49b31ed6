// Validation and printing of Problem: the checks every entry point runs before anything is generated.
#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "jitbmm/types.hpp"
#include "support/checked_size.hpp"
#include "support/enum_names.hpp"
#include "support/layout.hpp"
#include "support/parse_number.hpp"

namespace jitbmm {

Strides row_major(int64_t rows, int64_t cols) { return {checked_product({rows, cols}, "row_major"), cols, 1}; }
Strides column_major(int64_t rows, int64_t cols) { return {checked_product({rows, cols}, "column_major"), 1, rows}; }

int64_t Shape::terms() const {
  if (const auto t = try_product({B, M, N, K})) return *t;
  throw std::invalid_argument("shape: B*M*N*K = " + std::to_string(B) + "*" + std::to_string(M) + "*" +
                              std::to_string(N) + "*" + std::to_string(K) + " terms overflow 64 bits");
}

namespace {

Strides default_strides(int64_t rows, int64_t cols, const char* what) {
  return {checked_product({rows, cols}, what), cols, 1};
}

} // namespace

Strides Problem::a() const { return a_strides ? *a_strides : default_strides(shape.M, shape.K, "shape: M*K"); }
Strides Problem::b() const { return b_strides ? *b_strides : default_strides(shape.K, shape.N, "shape: K*N"); }
Strides Problem::out() const { return out_strides ? *out_strides : default_strides(shape.M, shape.N, "shape: M*N"); }

// Each size is digits only, as every other number in jitbmm (support/parse_number.hpp): no blanks, no sign.
Shape parse_shape(const std::string& text) {
  Shape s;
  std::array<int64_t*, 4> fields = {&s.B, &s.M, &s.K, &s.N};
  std::size_t pos = 0;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const bool last = f + 1 == fields.size();
    const std::size_t end = last ? text.size() : text.find_first_of("xX", pos);
    try {
      if (end == std::string::npos) throw std::invalid_argument("too few sizes");
      *fields[f] = static_cast<int64_t>(
          parse_unsigned(text.substr(pos, end - pos), "shape", static_cast<uint64_t>(INT64_MAX)));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("shape: expected BxMxKxN (four non-negative integers), got '" + text + "'");
    }
    pos = end + 1;
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

struct Dim {
  const char* name; // "shape.M"
  char letter;      // 'M'
  int64_t value;
};

// A product of sizes (an operand's elements, the terms) must stay within `limit` once multiplied by `unit` bytes;
// else the error names the largest size involved, since that is the one to shrink.
void check_sizes(const char* what, std::initializer_list<Dim> dims, int64_t unit, int64_t limit,
                 const char* unit_text) {
  int64_t total = 1;
  bool fits = true;
  for (const Dim& d : dims) {
    if (d.value == 0) return; // empty: nothing to hold, whatever the other sizes are
    fits = fits && !__builtin_mul_overflow(total, d.value, &total);
  }
  fits = fits && !__builtin_mul_overflow(total, unit, &total) && total <= limit;
  if (fits) return;
  const Dim* largest = dims.begin();
  std::string letters, values;
  for (const Dim& d : dims) {
    if (d.value > largest->value) largest = &d;
    letters += std::string(letters.empty() ? "" : "*") + d.letter;
    values += (values.empty() ? "" : "*") + std::to_string(d.value);
  }
  throw std::invalid_argument(std::string(largest->name) + ": " + what + " " + letters + " = " + values + unit_text);
}

// An operand's strides must address no more than kMaxOperandBytes bytes from its first element.
void check_span(const char* name, int64_t batches, int64_t rows, int64_t cols, const Strides& st, int bytes) {
  const int64_t last = max_offset(name, batches, rows, cols, st); // throws naming the strides on overflow
  if (!span_fits(last, bytes))
    throw std::invalid_argument(std::string(name) + ": element offsets reach " + std::to_string(last) + " (" +
                                std::to_string(bytes) + "-byte elements), more than 2^62 bytes");
}

} // namespace

void validate(const Problem& p) {
  const Shape& s = p.shape;
  const std::array<std::pair<const char*, int64_t>, 4> sizes = {
      {{"shape.B", s.B}, {"shape.M", s.M}, {"shape.K", s.K}, {"shape.N", s.N}}};
  for (const auto& [name, v] : sizes) {
    if (v < 0) throw std::invalid_argument(std::string(name) + " must be >= 0, got " + std::to_string(v));
    if (v > kMaxDimension)
      throw std::invalid_argument(std::string(name) + ": " + std::to_string(v) + " is larger than 2^62");
  }
  semiring_info(p.semiring); // throws on an out-of-range enum
  precision_name(p.precision);
  dtype_info(p.dtype);
  const DType out = p.output_dtype();
  dtype_info(out);
  if (out != p.dtype && !(dtype_info(p.dtype).half && out == DType::f32))
    throw std::invalid_argument(std::string("out_dtype: ") + dtype_info(out).name + " output from " +
                                dtype_info(p.dtype).name +
                                " inputs is not supported (only the input dtype, or f32 "
                                "from f16/bf16)");
  // Only the log semiring has a faster, less exact form (exp_matmul's one TF32 product per term): fast elsewhere
  // would be accepted and change nothing.
  if (p.precision == Precision::fast && p.semiring != Semiring::log)
    throw std::invalid_argument(std::string("precision: fast is for the log semiring only, not ") +
                                semiring_info(p.semiring).name + " (which computes the same at either precision)");
  if (p.with_argmax && !semiring_info(p.semiring).has_argmax)
    throw std::invalid_argument(std::string("with_argmax: the ") + semiring_info(p.semiring).name +
                                " semiring has no argmax (only max_plus, min_plus, max_times)");
  // Sizes before strides: the default strides are products of sizes, and a shape too large is the shape's fault.
  const Dim B{"shape.B", 'B', s.B}, M{"shape.M", 'M', s.M}, K{"shape.K", 'K', s.K}, N{"shape.N", 'N', s.N};
  const int in_bytes = dtype_info(p.dtype).size_bytes, out_bytes = dtype_info(out).size_bytes;
  const char* too_many = " elements: more than 2^62 bytes";
  check_sizes("a holds", {B, M, K}, in_bytes, kMaxOperandBytes, too_many);
  check_sizes("b holds", {B, K, N}, in_bytes, kMaxOperandBytes, too_many);
  check_sizes("out holds", {B, M, N}, std::max(out_bytes, p.with_argmax ? 4 : 0), kMaxOperandBytes, too_many);
  check_sizes("the product has", {B, M, N, K}, 1, std::numeric_limits<int64_t>::max(), " terms: more than 2^63 - 1");
  const Strides sa = p.a(), sb = p.b(), so = p.out();
  check_strides("a_strides", sa);
  check_strides("b_strides", sb);
  check_strides("out_strides", so);
  // Element offsets (and their bytes) must fit in int64 for every operand, with room for the kernels' loops. An
  // operand broadcast over the batch is one matrix whatever B is, an empty batch's too (its gradient is written).
  check_span("a_strides", sa.batch == 0 ? 1 : s.B, s.M, s.K, sa, in_bytes);
  check_span("b_strides", sb.batch == 0 ? 1 : s.B, s.K, s.N, sb, in_bytes);
  check_span("out_strides", s.B, s.M, s.N, so, out_bytes);
  if (!is_injective(s.B, s.M, s.N, so))
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
