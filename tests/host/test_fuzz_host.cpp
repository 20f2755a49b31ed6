// Host-side fuzzing of what needs no GPU: the layout arithmetic that validation trusts, the reference's
// independence from layouts, and the edge-case contract on random rows. Every failure names its seed; set
// JITBMM_FUZZ_SEED to explore other seeds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fuzz_cases.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "support/layout.hpp"

using namespace jitbmm;

namespace {

struct Layout {
  int64_t batches, rows, cols;
  Strides st;
};

// Every element's offset, by enumeration.
std::vector<int64_t> offsets(const Layout& l) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < l.batches; ++b)
    for (int64_t r = 0; r < l.rows; ++r)
      for (int64_t c = 0; c < l.cols; ++c) out.push_back(b * l.st.batch + r * l.st.row + c * l.st.col);
  return out;
}

// Half the layouts have arbitrary small strides (collisions, 0, interleavings); half are dense or padded layouts
// with the dimensions in a random order, which must all be accepted.
Layout draw_layout(std::mt19937_64& rng, bool& nested) {
  Layout l{test::uniform(rng, 0, 5), test::uniform(rng, 0, 5), test::uniform(rng, 0, 5), {}};
  nested = test::chance(rng, 0.5);
  if (!nested) {
    l.st = {test::uniform(rng, 0, 12), test::uniform(rng, 0, 12), test::uniform(rng, 0, 12)};
    return l;
  }
  int64_t* strides[] = {&l.st.batch, &l.st.row, &l.st.col};
  const int64_t extents[] = {l.batches, l.rows, l.cols};
  int order[] = {0, 1, 2};
  std::shuffle(std::begin(order), std::end(order), rng);
  int64_t step = test::uniform(rng, 1, 2);
  for (int d : order) {
    *strides[d] = step;
    step = step * std::max<int64_t>(extents[d], 1) + (test::chance(rng, 0.5) ? test::uniform(rng, 0, 3) : 0);
  }
  return l;
}

} // namespace

TEST_CASE("fuzz: is_injective, max_offset and offset_of agree with enumerating every address") {
  const uint64_t seed = test::fuzz_seed();
  std::mt19937_64 rng(seed);
  int rejected_injective = 0;
  for (int n = 0; n < 2000; ++n) {
    bool nested = false;
    const Layout l = draw_layout(rng, nested);
    CAPTURE(seed);
    CAPTURE(n);
    CAPTURE(l.batches);
    CAPTURE(l.rows);
    CAPTURE(l.cols);
    CAPTURE(l.st.batch);
    CAPTURE(l.st.row);
    CAPTURE(l.st.col);
    const std::vector<int64_t> all = offsets(l);
    const bool injective = std::set<int64_t>(all.begin(), all.end()).size() == all.size();
    const int64_t largest = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
    CHECK(max_offset("fuzz", l.batches, l.rows, l.cols, l.st) == largest);
    for (std::size_t flat = 0; flat < all.size(); ++flat)
      REQUIRE(offset_of(l.st, l.rows, l.cols, static_cast<int64_t>(flat)) == all[flat]);
    const bool accepted = is_injective(l.batches, l.rows, l.cols, l.st);
    // Layouts this small are decided exactly (interleaved ones such as row stride 3, column stride 2 included).
    CHECK(accepted == injective);
    if (nested) CHECK(accepted);
    rejected_injective += injective && !accepted;
  }
  CHECK(rejected_injective == 0);
}

__extension__ typedef __int128 Wide; // exact offsets, independent of the library's overflow builtins

TEST_CASE("fuzz: max_offset throws exactly when an offset overflows int64") {
  const uint64_t seed = test::fuzz_seed();
  std::mt19937_64 rng(seed);
  int overflows = 0;
  for (int n = 0; n < 2000; ++n) {
    // Extents and strides near the edge: the exact sum fits in 128 bits.
    const int64_t e[] = {test::uniform(rng, 1, int64_t(1) << 20), test::uniform(rng, 1, 5), test::uniform(rng, 1, 5)};
    const Strides st{test::uniform(rng, 0, int64_t(1) << 43), test::uniform(rng, 0, int64_t(1) << 62),
                     test::uniform(rng, 0, int64_t(1) << 61)};
    const Wide exact = Wide(e[0] - 1) * st.batch + Wide(e[1] - 1) * st.row + Wide(e[2] - 1) * st.col;
    CAPTURE(seed);
    CAPTURE(n);
    if (exact > std::numeric_limits<int64_t>::max()) {
      ++overflows;
      CHECK_THROWS_AS(max_offset("fuzz", e[0], e[1], e[2], st), std::invalid_argument);
    } else {
      CHECK(max_offset("fuzz", e[0], e[1], e[2], st) == static_cast<int64_t>(exact));
    }
  }
  CHECK(overflows > 100); // both sides of the edge were tried
  CHECK(overflows < 1900);
}

namespace {

// The values of a strided operand copied into a contiguous row-major one (a broadcast matrix is repeated).
test::HostTensor contiguous_copy(const test::HostTensor& t, int64_t batches, int64_t rows, int64_t cols,
                                 const Strides& st) {
  test::HostTensor out;
  out.dtype = t.dtype;
  out.elements = batches * rows * cols;
  out.bytes.resize(static_cast<std::size_t>(out.elements) * dtype_info(t.dtype).size_bytes);
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        store_element(t.dtype, out.data(), (b * rows + r) * cols + c, t.at(offset_of(st, {b, r, c})));
  return out;
}

bool same(double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); }

} // namespace

TEST_CASE("fuzz: the reference over a strided layout equals the reference over a contiguous copy") {
  const uint64_t base = test::fuzz_seed();
  int64_t outputs = 0;
  for (uint64_t n = 0; n < 4000; ++n) {
    const uint64_t seed = test::case_seed(base, n);
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const test::FuzzCase c = test::draw_case(rng, test::small_only(5000));
    const Problem& p = c.problem;
    const Shape& s = p.shape;
    const Strides sa = p.a(), sb = p.b();
    test::HostTensor a = test::random_tensor(p.dtype, test::storage_elements(s.B, s.M, s.K, sa), rng, c.specials);
    test::HostTensor b = test::random_tensor(p.dtype, test::storage_elements(s.B, s.K, s.N, sb), rng, c.specials);
    if (c.specials.p_neg_inf_row > 0)
      test::mask_rows(a, sa.batch ? s.B : 1, s.M, s.K, sa, c.specials.p_neg_inf_row, rng);
    Problem dense = p;
    dense.a_strides.reset();
    dense.b_strides.reset();
    const auto want = reference::compute(dense, contiguous_copy(a, s.B, s.M, s.K, sa).data(),
                                         contiguous_copy(b, s.B, s.K, s.N, sb).data());
    const auto got = reference::compute(p, a.data(), b.data());
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const bool ok = same(got[i].value, want[i].value) && got[i].argmax == want[i].argmax &&
                      got[i].tie == want[i].tie && same(got[i].scale, want[i].scale);
      if (!ok) {
        FAIL_CHECK("seed " << seed << " " << describe(p) << " output " << i << ": strided " << got[i].value
                           << " (argmax " << got[i].argmax << "), contiguous " << want[i].value << " (argmax "
                           << want[i].argmax << ")");
        break;
      }
    }
    outputs += static_cast<int64_t>(got.size());
  }
  MESSAGE("base seed " << base << ": " << outputs << " outputs compared");
}

namespace {

// What one term is, from its two inputs alone (the contract speaks of terms, not of how they are computed).
enum class Term { finite, neg_inf, pos_inf, nan };

Term classify(Semiring s, double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return Term::nan;
  const bool times = s == Semiring::max_times || s == Semiring::plus_times;
  if (times) {
    if ((std::isinf(x) && y == 0) || (std::isinf(y) && x == 0)) return Term::nan; // 0 · inf
    if (!std::isinf(x) && !std::isinf(y)) return Term::finite;
    return std::signbit(x) != std::signbit(y) ? Term::neg_inf : Term::pos_inf;
  }
  if (std::isinf(x) && std::isinf(y) && x != y) return Term::nan; // (+inf) + (−inf)
  if (x == INFINITY || y == INFINITY) return Term::pos_inf;
  if (x == -INFINITY || y == -INFINITY) return Term::neg_inf;
  return Term::finite;
}

double semiring_zero(Semiring s) {
  switch (s) {
  case Semiring::log:
  case Semiring::max_plus:
    return -INFINITY;
  case Semiring::min_plus:
    return INFINITY;
  case Semiring::max_times:
  case Semiring::plus_times:
    return 0;
  }
  return NAN;
}

// How often each rule was exercised: the fuzz must reach every one of them.
struct RuleCounts {
  int64_t empty = 0, nan = 0, log_all_neg_inf = 0, pos_inf = 0, neg_inf = 0, log_finite = 0;
};

// Checks one output against the contract for its terms; returns a description of the broken rule, or "".
std::string broken_rule(Semiring s, const std::vector<Term>& terms, const reference::Element& e, RuleCounts& n) {
  const bool selecting = semiring_info(s).has_argmax;
  if (terms.empty()) {
    ++n.empty;
    if (!same(e.value, semiring_zero(s))) return "K = 0 must give the semiring zero";
    if (selecting && e.argmax != -1) return "K = 0 must give argmax -1";
    return "";
  }
  const auto count = [&](Term t) { return std::count(terms.begin(), terms.end(), t); };
  const int64_t k_of_first_nan = std::find(terms.begin(), terms.end(), Term::nan) - terms.begin();
  if (count(Term::nan) > 0) {
    ++n.nan;
    if (!std::isnan(e.value)) return "a NaN term must give NaN";
    if (selecting && e.argmax != k_of_first_nan) return "the first NaN term must be the argmax";
    return "";
  }
  if (selecting && (e.argmax < 0 || e.argmax >= static_cast<int64_t>(terms.size()))) return "argmax out of [0, K)";
  const int64_t pos = count(Term::pos_inf), neg = count(Term::neg_inf), all = static_cast<int64_t>(terms.size());
  // Counts the rule as exercised and says whether it held.
  const auto rule = [](int64_t& counter, bool held, const char* what) -> std::string {
    ++counter;
    return held ? "" : what;
  };
  switch (s) {
  case Semiring::log:
    if (pos > 0) return rule(n.pos_inf, e.value == INFINITY, "a +inf term must give +inf");
    if (neg == all) return rule(n.log_all_neg_inf, e.value == -INFINITY, "all terms -inf must give -inf, not NaN");
    return rule(n.log_finite, std::isfinite(e.value), "finite terms (and -inf ones) must give a finite value");
  case Semiring::max_plus:
  case Semiring::max_times:
    if (pos > 0) return rule(n.pos_inf, e.value == INFINITY, "a +inf term must win");
    if (neg == all) return rule(n.neg_inf, e.value == -INFINITY, "all terms -inf must give -inf");
    return "";
  case Semiring::min_plus:
    if (neg > 0) return rule(n.neg_inf, e.value == -INFINITY, "a -inf term must win");
    if (pos == all) return rule(n.pos_inf, e.value == INFINITY, "all terms +inf must give +inf");
    return "";
  case Semiring::plus_times:
    if (pos > 0 && neg == 0) return rule(n.pos_inf, e.value == INFINITY, "+inf terms (no -inf) must give +inf");
    if (neg > 0 && pos == 0) return rule(n.neg_inf, e.value == -INFINITY, "-inf terms (no +inf) must give -inf");
    if (pos > 0 && neg > 0) return rule(n.nan, std::isnan(e.value), "+inf and -inf terms must give NaN");
    return "";
  }
  return "unknown semiring";
}

} // namespace

TEST_CASE("fuzz: the reference keeps the edge-case contract on random rows") {
  const uint64_t base = test::fuzz_seed();
  RuleCounts n;
  for (uint64_t i = 0; i < 10000; ++i) {
    const uint64_t seed = test::case_seed(base, i);
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Problem p;
    p.semiring = test::pick(rng, test::kFuzzSemirings);
    p.dtype = test::pick(rng, test::kFuzzDTypes);
    p.with_argmax = semiring_info(p.semiring).has_argmax;
    p.shape = {1, test::uniform(rng, 1, 4), test::chance(rng, 0.1) ? 0 : test::uniform(rng, 1, 9),
               test::uniform(rng, 1, 4)};
    test::Specials sp = test::specials_for(p.semiring, 0);
    // Specials in a only, sometimes, so that b's +inf and NaN do not hide the all −inf rows of a.
    std::uniform_real_distribution<double> rate(0, 1);
    sp.p_neg_inf = 0.6 * rate(rng);
    sp.p_pos_inf = 0.2 * rate(rng);
    sp.p_nan = test::chance(rng, 0.5) ? 0.1 * rate(rng) : 0;
    sp.p_huge = p.semiring == Semiring::plus_times ? 0 : 0.2 * rate(rng);
    const Shape& s = p.shape;
    test::HostTensor a = test::random_tensor(p.dtype, s.M * s.K, rng, sp);
    const test::Specials sp_b = test::chance(rng, 0.5) ? sp : test::specials_for(p.semiring, 0);
    test::HostTensor b = test::random_tensor(p.dtype, s.K * s.N, rng, sp_b);
    test::mask_rows(a, 1, s.M, s.K, p.a(), 0.3, rng);
    for (int64_t r = 0; r < s.M; ++r)
      for (int64_t c = 0; c < s.N; ++c) {
        std::vector<Term> terms;
        for (int64_t k = 0; k < s.K; ++k) terms.push_back(classify(p.semiring, a.at(r * s.K + k), b.at(k * s.N + c)));
        const reference::Element e = reference::element(p, a.data(), b.data(), 0, r, c);
        const std::string broken = broken_rule(p.semiring, terms, e, n);
        if (!broken.empty())
          FAIL_CHECK("seed " << seed << " " << describe(p) << " out[" << r << "," << c << "] = " << e.value
                             << " (argmax " << e.argmax << "): " << broken);
      }
  }
  MESSAGE("base seed " << base << ": K = 0 " << n.empty << ", NaN " << n.nan << ", log all -inf " << n.log_all_neg_inf
                       << ", +inf " << n.pos_inf << ", -inf " << n.neg_inf << ", log finite " << n.log_finite);
  CHECK(n.empty > 0);
  CHECK(n.nan > 0);
  CHECK(n.log_all_neg_inf > 0);
  CHECK(n.pos_inf > 0);
  CHECK(n.neg_inf > 0);
  CHECK(n.log_finite > 0);
}

TEST_CASE("fuzz: the GPU fuzz draws valid problems, every option, and a reference workload it can afford") {
  const uint64_t base = test::fuzz_seed();
  int64_t terms = 0, largest = 0, large = 0, empty = 0, broadcast = 0, argmax = 0, f32_out = 0;
  std::map<std::string, int> strategies; // which kernels the default specs reach: informative, not asserted
  for (uint64_t n = 0; n < test::kDefaultFuzzCases; ++n) {
    const uint64_t seed = test::case_seed(base, n);
    std::mt19937_64 rng(seed);
    const test::FuzzCase c = test::draw_case(rng);
    const Problem& p = c.problem;
    CAPTURE(seed);
    CAPTURE(describe(p));
    REQUIRE_NOTHROW(validate(p));
    const KernelSpec spec = default_spec(p);
    CHECK_NOTHROW(check_spec_fits(spec, p));
    if (p.shape.B * p.shape.M * p.shape.N > 0) ++strategies[strategy_name(spec.strategy)];
    terms += p.shape.terms();
    largest = std::max(largest, p.shape.terms());
    large += std::max({p.shape.M, p.shape.N, p.shape.K}) >= 1000;
    empty += p.shape.terms() == 0;
    broadcast += p.a().batch == 0 || p.b().batch == 0;
    argmax += p.with_argmax;
    f32_out += p.output_dtype() != p.dtype;
  }
  MESSAGE("base seed " << base << ": " << terms << " terms (mean " << terms / int64_t(test::kDefaultFuzzCases)
                       << ", largest " << largest << "), " << large << " large, " << empty << " empty, " << broadcast
                       << " broadcast, " << argmax << " argmax, " << f32_out << " f32 out");
  std::string mix;
  for (const auto& [name, count] : strategies) mix += " " + name + " " + std::to_string(count);
  MESSAGE("default strategies:" << mix);
  CHECK(largest <= test::FuzzLimits{}.large_terms);
  CHECK(terms <= 300'000'000); // ~15 s of CPU reference at ~50 ns a term
  CHECK(large > 0);
  CHECK(empty > 0);
  CHECK(broadcast > 0);
  CHECK(argmax > 0);
  CHECK(f32_out > 0);
}
