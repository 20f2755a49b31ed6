// Inputs built to break a log-semiring kernel that shifts its exponentials: wide spreads, row and column maxima at
// different k, CRF-style banded −inf masks, large common offsets, specials (adversarial_kinds); and wider-range ones
// (wide_kinds): randn·500, rows and columns offset by ±1e4, −1e5 fills in place of −inf.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "differential.hpp"
#include "jitbmm/types.hpp"
#include "support.hpp"

namespace jitbmm::test {

// An input kind: the value of a[., row, col] (is_a) or b[., row, col], the same in every batch but for its draws.
struct Kind {
  const char* name;
  std::function<double(std::mt19937_64&, bool is_a, int64_t row, int64_t col, const Shape&)> value;
};

inline std::vector<Kind> adversarial_kinds() {
  auto normal = [](std::mt19937_64& rng, double spread) { return std::normal_distribution<double>(0, spread)(rng); };
  return {
      {"randn", [=](auto& rng, bool, int64_t, int64_t, const Shape&) { return normal(rng, 1); }},
      {"randn*50", [=](auto& rng, bool, int64_t, int64_t, const Shape&) { return normal(rng, 50); }},
      {"randn*8", [=](auto& rng, bool, int64_t, int64_t, const Shape&) { return normal(rng, 8); }},
      // Each row of a peaks at k = i mod K, each column of b at another k: the separable shift is loose by ~gap.
      {"maxima apart (gap 60)",
       [=](auto& rng, bool is_a, int64_t r, int64_t c, const Shape& s) {
         const int64_t peak = is_a ? r % s.K : (c * 7 + 3) % s.K;
         return normal(rng, 1) + ((is_a ? c : r) == peak ? 60.0 : 0.0);
       }},
      {"maxima apart (gap 120)",
       [=](auto& rng, bool is_a, int64_t r, int64_t c, const Shape& s) {
         const int64_t peak = is_a ? r % s.K : (c * 5 + 1) % s.K;
         return normal(rng, 1) + ((is_a ? c : r) == peak ? 120.0 : 0.0);
       }},
      // Banded −inf masks: a row of a is finite near k = i·K/M, a column of b near k = j·K/N.
      {"banded -inf",
       [=](auto& rng, bool is_a, int64_t r, int64_t c, const Shape& s) {
         const int64_t k = is_a ? c : r,
                       centre = is_a ? r * s.K / std::max<int64_t>(1, s.M) : c * s.K / std::max<int64_t>(1, s.N);
         return std::llabs(k - centre) <= 3 ? normal(rng, 2) : -INFINITY;
       }},
      // Log-probabilities: everything far below zero, as in forward-algorithm alphas.
      {"offset -3000", [=](auto& rng, bool, int64_t, int64_t, const Shape&) { return normal(rng, 1) - 3000; }},
      {"offset +80", [=](auto& rng, bool, int64_t, int64_t, const Shape&) { return normal(rng, 3) + 80; }},
      // Huge values whose sums cancel exactly (+1e37 in a, −1e37 in b): the row and column maxima are huge, the
      // outputs small, so the shifts must not lose the headroom to rounding.
      {"huge, cancelling",
       [=](auto& rng, bool is_a, int64_t, int64_t, const Shape&) {
         return std::uniform_real_distribution<double>(0, 1)(rng) < 0.2 ? (is_a ? 1e37 : -1e37) : normal(rng, 1);
       }},
  };
}

inline std::vector<Kind> wide_kinds() {
  auto normal = [](std::mt19937_64& rng, double spread) { return std::normal_distribution<double>(0, spread)(rng); };
  return {
      {"randn*500", [=](auto& rng, bool, int64_t, int64_t, const Shape&) { return normal(rng, 500); }},
      // Every row of a and column of b moved by +1e4 or −1e4: outputs near ±2e4 or 0, ulps of 1e-3 in the inputs.
      {"rows offset +-1e4",
       [=](auto& rng, bool is_a, int64_t r, int64_t c, const Shape&) {
         const int64_t line = is_a ? r : c;
         return normal(rng, 1) + ((line * 7 + 1) % 3 == 0 ? 1e4 : -1e4);
       }},
      // torch-struct's "zero": a band of finite values, −1e5 elsewhere (in f16, −1e5 is −inf).
      {"-1e5 fills",
       [=](auto& rng, bool is_a, int64_t r, int64_t c, const Shape& s) {
         const int64_t k = is_a ? c : r,
                       centre = is_a ? r * s.K / std::max<int64_t>(1, s.M) : c * s.K / std::max<int64_t>(1, s.N);
         return std::llabs(k - centre) <= 3 ? normal(rng, 2) : -1e5;
       }},
  };
}

// Both lists: what the kernels of the log semiring are checked on.
inline std::vector<Kind> log_kinds() {
  std::vector<Kind> kinds = adversarial_kinds();
  for (Kind& k : wide_kinds()) kinds.push_back(std::move(k));
  return kinds;
}

// An operand of the kind in the problem's layout (a broadcast operand holds the last batch's values).
inline HostTensor fill(const Problem& p, bool is_a, const Kind& kind, std::mt19937_64& rng) {
  const Shape& s = p.shape;
  const int64_t rows = is_a ? s.M : s.K, cols = is_a ? s.K : s.N;
  const Strides st = is_a ? p.a() : p.b();
  HostTensor t;
  t.dtype = p.dtype;
  t.elements = storage_elements(s.B, rows, cols, st);
  t.bytes.assign(static_cast<std::size_t>(t.elements) * dtype_info(p.dtype).size_bytes, 0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        store_element(p.dtype, t.bytes.data(), b * st.batch + r * st.row + c * st.col, kind.value(rng, is_a, r, c, s));
  return t;
}

// One forward case: the kind's inputs for spec at shape (from seed), run and compared with the reference; a failure
// is reported with the inputs' name and the seed.
inline bool kind_case_ok(const KernelSpec& spec, const Shape& shape, const Kind& kind, uint64_t seed) {
  const Problem p = problem_for(spec, shape);
  std::mt19937_64 rng(seed);
  const HostTensor a = fill(p, true, kind, rng), b = fill(p, false, kind, rng);
  const CaseResult r = run_case_on(p, spec, a, b);
  if (!r.ok()) std::printf("inputs: %s\n", kind.name);
  report_failure(r, p, spec, seed);
  return r.ok();
}

} // namespace jitbmm::test
