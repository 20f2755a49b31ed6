// KernelSpec: equality, hashing, printing, and which spec serves a problem until the autotuner exists.
#include "jitbmm/kernel_spec.hpp"

#include <sstream>
#include <stdexcept>

#include "runtime/layout.hpp"

namespace jitbmm {

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
  case Strategy::linear: return "linear";
  }
  throw std::invalid_argument("strategy: unknown enum value " + std::to_string(static_cast<int>(strategy)));
}

Strategy parse_strategy(const std::string& name) {
  if (name == "linear") return Strategy::linear;
  throw std::invalid_argument("strategy: unsupported '" + name + "' (expected linear)");
}

bool KernelSpec::operator==(const KernelSpec& o) const {
  return semiring == o.semiring && dtype == o.dtype && out_dtype == o.out_dtype && with_argmax == o.with_argmax &&
         strategy == o.strategy && block_x == o.block_x && block_y == o.block_y && index64 == o.index64;
}

std::string to_string(const KernelSpec& s) {
  std::ostringstream os;
  os << "semiring=" << semiring_info(s.semiring).name << " dtype=" << dtype_info(s.dtype).name
     << " out=" << dtype_info(s.out_dtype).name << " argmax=" << s.with_argmax
     << " strategy=" << strategy_name(s.strategy) << " block=" << s.block_x << 'x' << s.block_y
     << " index64=" << s.index64;
  return os.str();
}

std::size_t hash_value(const KernelSpec& s) {
  // In-memory map key only; anything persisted is keyed by SHA-256 of the generated source.
  std::size_t h = 0;
  for (long long v : {(long long)s.semiring, (long long)s.dtype, (long long)s.out_dtype, (long long)s.with_argmax,
                      (long long)s.strategy, (long long)s.block_x, (long long)s.block_y, (long long)s.index64})
    h = h * 1000003u ^ std::hash<long long>()(v);
  return h;
}

namespace {

// 32-bit index variants add loop strides of up to 2^21 to row and column indices before comparing them.
constexpr int64_t kIndex32Limit = (int64_t(1) << 31) - (int64_t(1) << 22);

bool fits_index32(const Problem& p) {
  const Shape& s = p.shape;
  for (int64_t v : {s.B, s.M, s.N, s.K})
    if (v >= kIndex32Limit) return false;
  int64_t outputs = 0;
  if (__builtin_mul_overflow(s.B * 1, s.M, &outputs) || __builtin_mul_overflow(outputs, s.N, &outputs)) return false;
  return outputs < kIndex32Limit && max_offset("a_strides", s.B, s.M, s.K, p.a()) < kIndex32Limit &&
         max_offset("b_strides", s.B, s.K, s.N, p.b()) < kIndex32Limit &&
         max_offset("out_strides", s.B, s.M, s.N, p.out()) < kIndex32Limit;
}

} // namespace

KernelSpec default_spec(const Problem& problem) {
  validate(problem);
  KernelSpec spec;
  spec.semiring = problem.semiring;
  spec.dtype = problem.dtype;
  spec.out_dtype = problem.output_dtype();
  spec.with_argmax = problem.with_argmax;
  spec.strategy = Strategy::linear;
  spec.index64 = !fits_index32(problem);
  return spec;
}

void check_spec_fits(const KernelSpec& spec, const Problem& p) {
  validate(p);
  if (spec.semiring != p.semiring) throw std::invalid_argument("spec.semiring: differs from the problem's");
  if (spec.dtype != p.dtype) throw std::invalid_argument("spec.dtype: differs from the problem's");
  if (spec.out_dtype != p.output_dtype()) throw std::invalid_argument("spec.out_dtype: differs from the problem's");
  if (spec.with_argmax != p.with_argmax) throw std::invalid_argument("spec.with_argmax: differs from the problem's");
  if (spec.block_x <= 0 || spec.block_y <= 0 || spec.threads() > 1024 || spec.threads() % 32 != 0)
    throw std::invalid_argument("spec.block: " + std::to_string(spec.block_x) + "x" + std::to_string(spec.block_y) +
                                " must be a positive multiple of 32 threads, at most 1024");
  if (p.with_argmax && p.shape.K > INT32_MAX)
    throw std::invalid_argument("shape.K: argmax is int32, so K must be < 2^31 when with_argmax is set");
  if (!spec.index64 && !fits_index32(p))
    throw std::invalid_argument("spec.index64: this problem's sizes or strides overflow 32-bit index math (" +
                                describe(p) + "); use a 64-bit index variant");
}

} // namespace jitbmm
