// Random problems for the differential fuzz: every semiring, dtype and option, odd sizes, the layouts the API
// allows, and the edge values of the contract. One case is a function of one seed, so a failure replays with
// JITBMM_FUZZ_SEED=<case seed> JITBMM_FUZZ_CASES=1. Shared by the GPU fuzz and the host suite, which checks that
// what the GPU fuzz draws is valid and small enough for the CPU reference.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

#include "jitbmm/types.hpp"
#include "support.hpp"

namespace jitbmm::test {

constexpr Semiring kFuzzSemirings[] = {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times,
                                       Semiring::plus_times};
constexpr DType kFuzzDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
// Odd sizes, powers of two and their neighbours (tile edges); 0 is drawn separately (and rarely).
constexpr int64_t kFuzzSizes[] = {1, 2, 3, 5, 7, 13, 17, 31, 127, 128, 129};

// How many terms (B·M·N·K) a case may have: the CPU reference costs ~50 ns a term, so most cases are small and a
// few are large: one of M, N in 1000..3000 or K in 1000..6000, or few outputs with K past 4096.
struct FuzzLimits {
  int64_t small_terms = 20000;
  int64_t medium_terms = 200000;
  int64_t large_terms = 3000000;
  double p_medium = 0.10;
  double p_large = 0.03;
  double p_long_k = 0.01;
  double p_zero = 0.02; // per dimension
};

inline FuzzLimits small_only(int64_t terms) {
  FuzzLimits l;
  l.small_terms = terms;
  l.p_medium = l.p_large = l.p_long_k = 0;
  return l;
}

template <class T, std::size_t N> const T& pick(std::mt19937_64& rng, const T (&options)[N]) {
  return options[std::uniform_int_distribution<std::size_t>(0, N - 1)(rng)];
}

inline bool chance(std::mt19937_64& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

inline int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

inline Shape draw_shape(std::mt19937_64& rng, const FuzzLimits& limits) {
  Shape s;
  int64_t* dims[] = {&s.B, &s.M, &s.K, &s.N};
  for (int64_t* d : dims) *d = chance(rng, limits.p_zero) ? 0 : pick(rng, kFuzzSizes);
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  int64_t cap = limits.small_terms;
  int64_t* pinned = nullptr; // the large dimension, kept while the others shrink
  if (u < limits.p_large) {
    cap = limits.large_terms;
    pinned = dims[uniform(rng, 1, 3)];
    *pinned = uniform(rng, 1000, pinned == &s.K ? 6000 : 3000);
  } else if (u < limits.p_large + limits.p_long_k) {
    // Few outputs, long K: the regime where a reduction splits over K.
    const int64_t few[] = {17, 19, 21};
    cap = limits.large_terms;
    s = {1, pick(rng, few), uniform(rng, 4096, 6000), pick(rng, few)};
  } else if (u < limits.p_large + limits.p_long_k + limits.p_medium) {
    cap = limits.medium_terms;
  }
  // Shrink the largest free dimension to a smaller size from the list until the case fits. Never to 0: an empty
  // case is only drawn on purpose, above.
  while (s.terms() > cap) {
    int64_t* largest = nullptr;
    for (int64_t* d : dims)
      if (d != pinned && (!largest || *d > *largest)) largest = d;
    int64_t smaller = 1;
    do smaller = pick(rng, kFuzzSizes);
    while (smaller >= *largest);
    *largest = smaller;
  }
  return s;
}

// One layout of a [batches][rows][cols] operand. Inputs may also broadcast one matrix over the batch or alias all
// rows of a matrix; outputs must stay injective.
inline Strides draw_strides(std::mt19937_64& rng, int64_t batches, int64_t rows, int64_t cols, bool input) {
  const int64_t pad = uniform(rng, 1, 7);
  switch (uniform(rng, 0, input ? 8 : 6)) {
  case 0:
  case 1:
    return row_major(rows, cols);
  case 2:
    return column_major(rows, cols);
  case 3:
    return {rows * (cols + pad) + uniform(rng, 0, 11), cols + pad, 1}; // padded rows and matrices
  case 4:
    return {(rows + pad) * cols + uniform(rng, 0, 11), 1, rows + pad}; // padded columns (transposed)
  case 5:
    return {rows * cols * 2, cols * 2, 2}; // every other element
  case 6:
    return {1, cols * batches, batches}; // batch innermost
  case 7:
    return chance(rng, 0.5) ? Strides{0, cols, 1} : Strides{0, 1, rows}; // broadcast over the batch
  default:
    return {cols, 0, 1}; // every row the same memory
  }
}

inline Specials draw_specials(std::mt19937_64& rng, Semiring s) {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  if (u < 0.3) return specials_for(s, 0);
  if (u < 0.5) return specials_for(s, 1);
  if (u < 0.8) return specials_for(s, 2);
  // Heavy edge values: whole rows of −inf, many infinities, NaN only sometimes (so the other rules show too).
  Specials sp = specials_for(s, 0);
  std::uniform_real_distribution<double> rate(0, 1);
  sp.p_neg_inf = 0.5 * rate(rng);
  sp.p_pos_inf = chance(rng, 0.5) ? 0.1 * rate(rng) : 0;
  sp.p_nan = chance(rng, 0.3) ? 0.05 * rate(rng) : 0;
  sp.p_huge = s == Semiring::plus_times ? 0 : 0.2 * rate(rng);
  sp.p_neg_inf_row = 0.5 * rate(rng);
  return sp;
}

// "spread=1 -inf=0.05 +inf=0.01 nan=0.01 huge=0.03 rows=0.15": the input flavour, for failure messages.
inline std::string describe(const Specials& sp) {
  char text[160];
  std::snprintf(text, sizeof text, "spread=%g -inf=%.3g +inf=%.3g nan=%.3g huge=%.3g rows=%.3g%s", sp.spread,
                sp.p_neg_inf, sp.p_pos_inf, sp.p_nan, sp.p_huge, sp.p_neg_inf_row,
                sp.non_negative ? " non-negative" : "");
  return text;
}

struct FuzzCase {
  Problem problem;
  Specials specials;
};

// Draws the problem and its input flavour; the caller goes on drawing the data from the same `rng`.
inline FuzzCase draw_case(std::mt19937_64& rng, const FuzzLimits& limits = {}) {
  FuzzCase c;
  Problem& p = c.problem;
  p.semiring = pick(rng, kFuzzSemirings);
  p.dtype = pick(rng, kFuzzDTypes);
  if (dtype_info(p.dtype).half && chance(rng, 0.3)) p.out_dtype = DType::f32;
  p.with_argmax = semiring_info(p.semiring).has_argmax && chance(rng, 0.5);
  p.shape = draw_shape(rng, limits);
  const Shape& s = p.shape;
  p.a_strides = draw_strides(rng, s.B, s.M, s.K, true);
  p.b_strides = draw_strides(rng, s.B, s.K, s.N, true);
  p.out_strides = draw_strides(rng, s.B, s.M, s.N, false);
  c.specials = draw_specials(rng, p.semiring);
  return c;
}

// An unsigned number from the environment, or `fallback` when the variable is unset.
inline uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (*end != '\0')
    throw std::invalid_argument(std::string(name) + ": expected an unsigned integer, got '" + text + "'");
  return v;
}

constexpr uint64_t kDefaultFuzzSeed = 20240917;
constexpr uint64_t kDefaultFuzzCases = 2000;
inline uint64_t fuzz_seed() { return env_u64("JITBMM_FUZZ_SEED", kDefaultFuzzSeed); }

// Case n of a run with base seed `base`. Case 0 is the base itself (so any case replays as a run of one), and the
// golden-ratio step keeps runs from nearby base seeds from sharing cases.
inline uint64_t case_seed(uint64_t base, uint64_t n) { return base + n * 0x9e3779b97f4a7c15ull; }

} // namespace jitbmm::test
