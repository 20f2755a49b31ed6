// The CPU reference. Terms are formed and reduced from the stored inputs (precision: see below), with the
// edge-case contract of the README spelled out case by case (templates/core/semirings.cuh matches it).
#include "jitbmm/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/log_sum_exp.hpp"
#include "support/checked_size.hpp"
#include "support/layout.hpp"

namespace jitbmm::reference {

namespace {

// Terms are formed and reduced in double for f32/f16/bf16 inputs (exact products and sums of such inputs, and
// ~1e-16 relative error where the tests need 1e-5) and in long double for f64 inputs (tests need 1e-12).

// Two terms are a tie when the kernel's accumulator type cannot tell them apart.
template <class Real> bool same_in_acc(DType dtype, Real x, Real y) {
  if (dtype == DType::f64) return static_cast<double>(x) == static_cast<double>(y);
  const float fx = static_cast<float>(x), fy = static_cast<float>(y);
  if (fx == fy) return true;
  if (!std::isfinite(fx) || !std::isfinite(fy)) return false; // an infinity ties only with itself (inf <= inf below)
  return std::fabs(x - y) <= std::ldexp(std::fabs(x) + std::fabs(y), -22); // within f32 rounding of the terms
}

template <class Real> Element log_sum_exp_element(const std::vector<Real>& t) {
  Element e;
  e.value = static_cast<double>(log_sum_exp(t));
  e.scale = std::isfinite(e.value) ? std::fmax(1.0, std::fabs(e.value)) : 1.0;
  return e;
}

// The selecting semirings: keep the first k whose term beats the current one; the first NaN wins and stays.
template <class Real, class Better> Element select(DType dtype, const std::vector<Real>& t, Real zero, Better better) {
  Element e;
  int64_t best = -1;
  for (int64_t k = 0; k < static_cast<int64_t>(t.size()); ++k) {
    if (best < 0 || (!std::isnan(t[best]) && (std::isnan(t[k]) || better(t[k], t[best])))) best = k;
  }
  e.value = best < 0 ? static_cast<double>(zero) : static_cast<double>(t[best]);
  e.argmax = static_cast<int32_t>(best);
  if (best >= 0 && !std::isnan(t[best]))
    for (int64_t k = 0; k < static_cast<int64_t>(t.size()) && !e.tie; ++k)
      e.tie = k != best && same_in_acc(dtype, t[k], t[best]);
  e.scale = std::isfinite(e.value) ? std::fmax(1.0, std::fabs(e.value)) : 1.0;
  return e;
}

// The reference keeps K terms of one output in memory: K is bounded so that stays within a few GiB.
void check_k(int64_t K) {
  if (K < 0 || K > kMaxReferenceK)
    throw std::invalid_argument("shape.K: " + std::to_string(K) + " is outside what the CPU reference computes (0.." +
                                std::to_string(kMaxReferenceK) + " terms an output)");
}

// compute() and backward() visit every term and hold every output: both are bounded, and named when exceeded.
void check_work(const Problem& p) {
  const Shape& s = p.shape;
  check_k(s.K);
  const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
  if (outputs > kMaxReferenceOutputs) {
    const std::pair<const char*, int64_t> dims[] = {{"shape.B", s.B}, {"shape.M", s.M}, {"shape.N", s.N}};
    const auto largest = std::max_element(std::begin(dims), std::end(dims),
                                          [](const auto& x, const auto& y) { return x.second < y.second; });
    throw std::invalid_argument(std::string(largest->first) + ": " + std::to_string(outputs) +
                                " outputs (B*M*N) are more than the CPU reference computes (" +
                                std::to_string(kMaxReferenceOutputs) + ")");
  }
  const int64_t terms = s.terms(); // validate() has bounded it to int64
  if (terms > kMaxReferenceTerms)
    throw std::invalid_argument(std::string(s.K >= s.N && s.K >= s.M && s.K >= s.B ? "shape.K" : "shape") + ": " +
                                std::to_string(terms) + " terms (B*M*N*K) are more than the CPU reference computes (" +
                                std::to_string(kMaxReferenceTerms) + ")");
}

template <class Real>
Element element_in(const Problem& p, const void* a, const void* b, int64_t batch, int64_t i, int64_t j) {
  constexpr Real kInf = std::numeric_limits<Real>::infinity();
  const int64_t K = p.shape.K;
  check_k(K);
  const Strides sa = p.a(), sb = p.b();
  thread_local std::vector<Real> x, y, t; // reused: the reference runs millions of elements per test
  x.resize(K), y.resize(K), t.resize(K);
  for (int64_t k = 0; k < K; ++k) {
    x[k] = load_element(p.dtype, a, offset_of(sa, {batch, i, k}));
    y[k] = load_element(p.dtype, b, offset_of(sb, {batch, k, j}));
  }
  switch (p.semiring) {
  case Semiring::log:
    for (int64_t k = 0; k < K; ++k) t[k] = x[k] + y[k];
    return log_sum_exp_element(t);
  case Semiring::max_plus:
    for (int64_t k = 0; k < K; ++k) t[k] = x[k] + y[k];
    return select(p.dtype, t, -kInf, [](Real u, Real v) { return u > v; });
  case Semiring::min_plus:
    for (int64_t k = 0; k < K; ++k) t[k] = x[k] + y[k];
    return select(p.dtype, t, kInf, [](Real u, Real v) { return u < v; });
  case Semiring::max_times:
    for (int64_t k = 0; k < K; ++k) t[k] = x[k] * y[k];
    return select(p.dtype, t, Real(0), [](Real u, Real v) { return u > v; });
  case Semiring::plus_times: {
    Element e;
    Real sum = 0, magnitude = 0;
    for (int64_t k = 0; k < K; ++k) {
      sum += x[k] * y[k];
      magnitude += std::fabs(x[k] * y[k]);
    }
    e.value = static_cast<double>(sum);
    e.scale = std::isfinite(static_cast<double>(magnitude)) ? std::fmax(static_cast<double>(magnitude), 1e-300) : 1.0;
    return e;
  }
  }
  throw std::invalid_argument("semiring: unknown enum value");
}

// kernel_argmax at a tie: the terms in the accumulator type `Acc`.
template <class Acc>
int32_t accumulated_argmax(const Problem& p, const void* a, const void* b, int64_t bt, int64_t i, int64_t j) {
  const Strides sa = p.a(), sb = p.b();
  int32_t best = -1;
  Acc best_term = 0;
  for (int64_t k = 0; k < p.shape.K; ++k) {
    const Acc x = static_cast<Acc>(load_element(p.dtype, a, offset_of(sa, {bt, i, k})));
    const Acc y = static_cast<Acc>(load_element(p.dtype, b, offset_of(sb, {bt, k, j})));
    const Acc t = p.semiring == Semiring::max_times ? x * y : x + y;
    bool takes = best < 0;
    if (!takes && !std::isnan(best_term))
      takes = std::isnan(t) || (p.semiring == Semiring::min_plus ? t < best_term : t > best_term);
    if (takes) best = static_cast<int32_t>(k), best_term = t;
  }
  return best;
}

} // namespace

Element element(const Problem& p, const void* a, const void* b, int64_t batch, int64_t i, int64_t j) {
  return p.dtype == DType::f64 ? element_in<long double>(p, a, b, batch, i, j)
                               : element_in<double>(p, a, b, batch, i, j);
}

int32_t kernel_argmax(const Problem& p, const void* a, const void* b, int64_t batch, int64_t i, int64_t j,
                      const Element& expected) {
  if (!expected.tie) return expected.argmax;
  return p.dtype == DType::f64 ? accumulated_argmax<double>(p, a, b, batch, i, j)
                               : accumulated_argmax<float>(p, a, b, batch, i, j);
}

std::vector<Element> compute(const Problem& p, const void* a, const void* b) {
  validate(p);
  const Shape& s = p.shape;
  std::vector<Element> out;
  // An empty output has no term to compute, however long K is (planning accepts it too), and no loop runs over a
  // huge B (or M) of empty matrices.
  if (try_product({s.B, s.M, s.N}) == 0) return out;
  check_work(p);
  const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
  out.reserve(static_cast<std::size_t>(outputs));
  for (int64_t batch = 0; batch < s.B; ++batch)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) out.push_back(element(p, a, b, batch, i, j));
  return out;
}

void backward(const Problem& p, const void* a, const void* b, const double* grad_out, double* grad_a, double* grad_b,
              const double* out, const int32_t* argmax) {
  validate(p);
  const Shape& s = p.shape;
  const bool empty = try_product({s.B, s.M, s.N}) == 0; // no term: only zeros to write, however long K is
  if (!empty) check_work(p);
  const Strides sa = p.a(), sb = p.b();
  // An operand broadcast over the batch (batch stride 0) is one matrix whatever B is, an empty batch's too: its
  // gradient, a sum over the batch, is zeros where there is none.
  const int64_t a_batches = sa.batch == 0 ? 1 : s.B, b_batches = sb.batch == 0 ? 1 : s.B;
  if (grad_a && try_product({a_batches, s.M, s.K}) != 0)
    std::fill(grad_a, grad_a + max_offset("a", a_batches, s.M, s.K, sa) + 1, 0.0);
  if (grad_b && try_product({b_batches, s.K, s.N}) != 0)
    std::fill(grad_b, grad_b + max_offset("b", b_batches, s.K, s.N, sb) + 1, 0.0);
  if (empty) return;
  using Real = long double;
  for (int64_t bt = 0; bt < s.B; ++bt)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        const int64_t o = (bt * s.M + i) * s.N + j;
        const double g = grad_out[o];
        if (g == 0.0) continue; // exactly zero, whatever the weights
        Element e;
        if (out && (p.semiring == Semiring::log || argmax)) {
          e.value = out[o];
          e.argmax = argmax ? argmax[o] : -1;
        } else {
          e = element(p, a, b, bt, i, j);
          if (argmax) e.argmax = argmax[o];
        }
        for (int64_t k = 0; k < s.K; ++k) {
          const int64_t ia = offset_of(sa, {bt, i, k}), ib = offset_of(sb, {bt, k, j});
          const Real x = load_element(p.dtype, a, ia), y = load_element(p.dtype, b, ib);
          Real da = 0, db = 0;
          switch (p.semiring) {
          case Semiring::log:
            if (e.value == -INFINITY) continue; // every term −inf: no weight anywhere
            da = db = g * std::exp(x + y - static_cast<Real>(e.value));
            break;
          case Semiring::max_plus:
          case Semiring::min_plus:
            if (k != e.argmax) continue;
            da = db = g;
            break;
          case Semiring::max_times:
            if (k != e.argmax) continue;
            da = g * y, db = g * x;
            break;
          case Semiring::plus_times:
            da = g * y, db = g * x;
            break;
          }
          if (grad_a) grad_a[ia] += static_cast<double>(da);
          if (grad_b) grad_b[ib] += static_cast<double>(db);
        }
      }
}

GradElement gradient_element(const Problem& p, const void* a, const void* b, const double* out, const int32_t* argmax,
                             const double* grad_out, Pass pass, int64_t bt, int64_t row, int64_t col) {
  if (pass == Pass::forward) throw std::invalid_argument("pass: gradient_element needs grad_a or grad_b");
  using Real = long double;
  const Shape& s = p.shape;
  const Strides sa = p.a(), sb = p.b();
  const int64_t reduce = pass == Pass::grad_a ? s.N : s.M;
  check_k(reduce); // the same bound on the terms of one gradient element
  Real value = 0, scale = 0, sum_g = 0;
  for (int64_t m = 0; m < reduce; ++m) {
    const int64_t i = pass == Pass::grad_a ? row : m, k = pass == Pass::grad_a ? col : row,
                  j = pass == Pass::grad_a ? m : col;
    const int64_t o = (bt * s.M + i) * s.N + j;
    const double g = grad_out[o];
    if (g == 0.0) continue;
    const Real x = load_element(p.dtype, a, offset_of(sa, {bt, i, k}));
    const Real y = load_element(p.dtype, b, offset_of(sb, {bt, k, j}));
    const Real partner = pass == Pass::grad_a ? y : x;
    Real c = 0, magnitude = 1;
    switch (p.semiring) {
    case Semiring::log: {
      const Real ov = out ? out[o] : element(p, a, b, bt, i, j).value;
      if (ov == -INFINITY) continue;
      c = g * std::exp(x + y - ov);
      magnitude = std::fmax(Real(1), std::fabs(x) + std::fabs(y) + std::fabs(ov));
      break;
    }
    case Semiring::max_plus:
    case Semiring::min_plus:
    case Semiring::max_times: {
      const int32_t win = argmax ? argmax[o] : element(p, a, b, bt, i, j).argmax;
      if (k != win) continue;
      c = p.semiring == Semiring::max_times ? g * partner : Real(g);
      break;
    }
    case Semiring::plus_times:
      c = g * partner;
      break;
    }
    value += c;
    sum_g += std::fabs(Real(g));
    if (std::isfinite(static_cast<double>(c)) && std::isfinite(static_cast<double>(magnitude)))
      scale += std::fabs(c) * magnitude;
  }
  GradElement e;
  e.value = static_cast<double>(value);
  e.scale = static_cast<double>(scale);
  e.floor = static_cast<double>(std::ldexp(sum_g, p.dtype == DType::f64 ? -1000 : -120));
  return e;
}

bool close_gradient(DType dtype, double got, const GradElement& want, double tolerance) {
  const double rounded = round_to(dtype, want.value);
  if (std::isnan(rounded)) return std::isnan(got);
  if (std::isinf(rounded)) return got == rounded;
  if (!std::isfinite(got)) return false;
  // The kernel's result is rounded to the dtype: allow that rounding (twice: the value and its neighbours), and
  // the dtype's smallest step near 0, its smallest subnormal (f16 gradients below 2^-24 are 0; an f32 gradient of
  // 1e-45 computes as 0 or 2^-149), which no tolerance relative to the contributions can go below.
  const double smallest = dtype == DType::f16    ? 0x1p-24
                          : dtype == DType::bf16 ? 0x1p-133
                          : dtype == DType::f32  ? 0x1p-149
                                                 : 0x1p-1074;
  return std::fabs(got - want.value) <=
         tolerance * want.scale + want.floor + 2 * std::fabs(rounded - want.value) + smallest;
}

bool close(DType out_dtype, double got, const Element& expected, double tolerance) {
  const double want = round_to(out_dtype, expected.value);
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  if (!std::isfinite(got)) return false;
  return std::fabs(got - want) <= tolerance * expected.scale;
}

double tolerance(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return 1e-12;
  case DType::f32:
    return 1e-5;
  case DType::f16:
  case DType::bf16:
    return 1e-2;
  }
  throw std::invalid_argument("dtype: unknown enum value");
}

double tolerance(const Problem& problem) {
  const double own = tolerance(problem.output_dtype());
  // One TF32 product per term: each factor rounded to 10 bits (2^-11 relative), so the positive sum is within
  // 2^-10 and its log within about 1e-3.
  if (problem.precision == Precision::fast && problem.semiring == Semiring::log) return std::max(own, 2e-3);
  return own;
}

} // namespace jitbmm::reference
