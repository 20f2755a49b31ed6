// Test inputs: random strided tensors in any dtype, with edge values injected where a case asks for them.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "jitbmm/reference.hpp"
#include "jitbmm/types.hpp"
#include "support/layout.hpp"

namespace jitbmm::test {

struct HostTensor {
  DType dtype = DType::f32;
  std::vector<unsigned char> bytes;
  int64_t elements = 0;
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double at(int64_t index) const { return load_element(dtype, bytes.data(), index); }
};

// Elements needed to hold a [batches][rows][cols] operand with these strides (gaps included).
inline int64_t storage_elements(int64_t batches, int64_t rows, int64_t cols, const Strides& st) {
  if (batches == 0 || rows == 0 || cols == 0) return 0;
  return max_offset("test", batches, rows, cols, st) + 1;
}

struct Specials {
  double spread = 1.0;  // inputs ~ N(0, spread²)
  double p_neg_inf = 0; // probability of each special value per element
  double p_pos_inf = 0;
  double p_nan = 0;
  double p_huge = 0;         // ±(largest finite value of the dtype) / 3
  bool non_negative = false; // |x| (max_times)
  double p_neg_inf_row = 0;  // probability that a whole matrix row (a) is −inf: CRF-style masks
};

inline double huge_value(DType dtype) {
  switch (dtype) {
  case DType::f32:
    return 1e38;
  case DType::f64:
    return 1e307;
  case DType::f16:
    return 2e4;
  case DType::bf16:
    return 1e38;
  }
  return 1;
}

inline HostTensor random_tensor(DType dtype, int64_t elements, std::mt19937_64& rng, const Specials& sp) {
  HostTensor t;
  t.dtype = dtype;
  t.elements = elements;
  t.bytes.resize(static_cast<std::size_t>(elements) * dtype_info(dtype).size_bytes);
  std::normal_distribution<double> normal(0.0, sp.spread);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t i = 0; i < elements; ++i) {
    double v = normal(rng);
    if (sp.non_negative) v = std::fabs(v);
    const double r = u(rng);
    double edge = sp.p_neg_inf;
    if (r < edge)
      v = -INFINITY;
    else if (r < (edge += sp.p_pos_inf))
      v = INFINITY;
    else if (r < (edge += sp.p_nan))
      v = NAN;
    else if (r < (edge += sp.p_huge))
      v = (u(rng) < 0.5 && !sp.non_negative ? -1 : 1) * huge_value(dtype);
    store_element(dtype, t.bytes.data(), i, v);
  }
  return t;
}

// The input flavours every GPU suite draws from: 0 clean N(0,1), 1 wide spread (terms far apart), otherwise edge
// values with masked rows. No huge values for plus_times (it follows IEEE overflow, like any GEMM) and non-negative
// inputs for max_times.
inline Specials specials_for(Semiring s, int flavour) {
  Specials sp;
  sp.non_negative = semiring_info(s).nonnegative_inputs;
  switch (flavour) {
  case 0:
    break;
  case 1:
    sp.spread = 20;
    break;
  default:
    sp.p_neg_inf = 0.05;
    sp.p_pos_inf = 0.01;
    sp.p_nan = 0.01;
    sp.p_huge = s == Semiring::plus_times ? 0 : 0.03;
    sp.p_neg_inf_row = 0.15;
  }
  return sp;
}

// Sets every element of some rows (each with probability p) of a [batches][rows][cols] operand to `value`.
inline void mask_rows(HostTensor& t, int64_t batches, int64_t rows, int64_t cols, const Strides& st, double p,
                      std::mt19937_64& rng, double value = -INFINITY) {
  // Callers pass batches = 1 for a broadcast matrix; when B = 0 that matrix has no storage and nothing to mask.
  if (t.elements == 0) return;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t r = 0; r < rows; ++r)
      if (u(rng) < p)
        for (int64_t c = 0; c < cols; ++c) store_element(t.dtype, t.bytes.data(), offset_of(st, {b, r, c}), value);
}

// A tensor whose elements are drawn from `values`, each with its weight. Small integers (with ±inf, NaN) make
// equal terms common, and every sum and product of two of them exact in every dtype: exact ties, however the
// kernel forms its terms.
inline HostTensor tensor_from_set(DType dtype, int64_t elements, std::mt19937_64& rng,
                                  const std::vector<double>& values, const std::vector<double>& weights) {
  HostTensor t;
  t.dtype = dtype;
  t.elements = elements;
  t.bytes.resize(static_cast<std::size_t>(elements) * dtype_info(dtype).size_bytes);
  std::discrete_distribution<std::size_t> pick(weights.begin(), weights.end());
  for (int64_t i = 0; i < elements; ++i) store_element(dtype, t.bytes.data(), i, values.at(pick(rng)));
  return t;
}

} // namespace jitbmm::test
