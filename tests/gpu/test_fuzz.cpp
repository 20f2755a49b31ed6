// Randomized differential fuzz: random problems (tests/fuzz_cases.hpp) on the GPU against the CPU reference.
// JITBMM_FUZZ_CASES sets the number of cases (default 2000), JITBMM_FUZZ_SEED the base seed; every case has its
// own seed (test::case_seed), printed when it fails: JITBMM_FUZZ_SEED=<it> JITBMM_FUZZ_CASES=1 replays it alone.
// Each case runs default_spec(problem), what users get. JITBMM_FUZZ_STRATEGY=<name> runs that strategy instead
// wherever it supports the case, =any a random strategy per case: the way to fuzz strategies the default rarely
// or never picks. JITBMM_FUZZ_MATH=<math> runs exp_matmul with that arithmetic (forced_math) wherever it may compute
// the case, the default elsewhere: the tuner's forms that no default picks (bf16, wgmma_bf16, the wgmma TF32 ones).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "differential.hpp"
#include "feature_level.hpp"
#include "fuzz_cases.hpp"
#include "jitbmm/errors.hpp"
#include "precompile.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/search_space.hpp"

using namespace jitbmm;

namespace {

struct Tally {
  int64_t cases = 0, failed = 0;
};

void print_tallies(const char* title, const std::map<std::string, Tally>& tallies) {
  std::printf("  by %s:", title);
  for (const auto& [name, t] : tallies)
    std::printf(" %s %lld (%lld failed)", name.c_str(), static_cast<long long>(t.cases),
                static_cast<long long>(t.failed));
  std::printf("\n");
}

constexpr int kFailuresPrinted = 20; // the rest are counted only

// The spec a case runs (see the file comment). The strategy of "any" comes from its own generator, so the case's
// problem and data are the same in every mode.
// exp_matmul with arithmetic m at a 128×128 tile (as the tuner offers each form), when the case allows it: a log
// problem, an output the form may write (half types for the BF16 forms), a device whose feature level runs it.
std::optional<KernelSpec> forced_math(const Problem& p, Math m) {
  KernelSpec s;
  try {
    s = default_spec(p, Strategy::exp_matmul);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  const bool wgmma = uses_wgmma(m);
  s.math = m, s.min_blocks = 1, s.tile_m = s.tile_n = 128;
  s.tile_k = wgmma && bf16_factors(m) ? 64 : m == Math::fma ? 8 : wgmma || m == Math::bf16 ? 32 : 16;
  s.thread_m = wgmma ? 2 : 8, s.thread_n = wgmma ? 32 : 8;
  if (!test::runs_here(s, *current_device())) return std::nullopt;
  return fitting(s, p);
}

// Where JITBMM_FUZZ_MATH names a math the device's feature level lacks, every case runs its default instead: said
// once, and counted as skipped.
void say_if_math_skipped() {
  const char* math = std::getenv("JITBMM_FUZZ_MATH");
  if (!math || !*math) return;
  KernelSpec s;
  s.strategy = Strategy::exp_matmul, s.math = parse_math(math);
  const DeviceInfo& device = *current_device();
  if (test::runs_here(s, device)) return;
  ++test::level_skips();
  MESSAGE("JITBMM_FUZZ_MATH=" << math << " skipped: it needs " << missing_features(needed_features(s), device.features)
                              << ", which " << device.arch_and_level() << " lacks; every case runs its default");
}

KernelSpec spec_for(const Problem& p, uint64_t seed) {
  if (const char* math = std::getenv("JITBMM_FUZZ_MATH"); math && *math) {
    if (const auto s = forced_math(p, parse_math(math))) return *s;
    return default_spec(p);
  }
  const char* forced = std::getenv("JITBMM_FUZZ_STRATEGY");
  if (!forced || !*forced) return default_spec(p);
  constexpr Strategy kAll[] = {Strategy::linear,     Strategy::linear_two_pass, Strategy::warp,
                               Strategy::block_tree, Strategy::tiled,           Strategy::split_k,
                               Strategy::exp_matmul, Strategy::tiled_online,    Strategy::tiled_refine};
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  const Strategy strategy = std::string(forced) == "any" ? test::pick(rng, kAll) : parse_strategy(forced);
  try {
    return default_spec(p, strategy);
  } catch (const std::invalid_argument&) {
    return default_spec(p); // the strategy does not support this case (e.g. linear_two_pass is log only)
  }
}

// The specs of every case that launches a kernel: the fuzz's shapes reach spec variants (block shapes,
// strategies) that the suite's variant list does not, and compiling them one per case would dominate its time.
std::vector<KernelSpec> default_specs(uint64_t base, uint64_t cases) {
  std::unordered_set<KernelSpec> seen;
  std::vector<KernelSpec> specs;
  for (uint64_t n = 0; n < cases; ++n) {
    std::mt19937_64 rng(test::case_seed(base, n));
    const Problem p = test::draw_case(rng).problem;
    if (p.shape.B == 0 || p.shape.M == 0 || p.shape.N == 0) continue;
    try {
      const KernelSpec spec = spec_for(p, test::case_seed(base, n));
      if (seen.insert(spec).second) specs.push_back(spec);
    } catch (const std::exception&) {
      // the case reports it
    }
  }
  return specs;
}

} // namespace

TEST_CASE("fuzz: random problems match the reference") {
  const uint64_t base = test::fuzz_seed();
  const uint64_t cases = test::env_u64("JITBMM_FUZZ_CASES", test::kDefaultFuzzCases);
  int64_t failed = 0, terms = 0, outputs = 0;
  std::map<std::string, Tally> by_semiring, by_dtype, by_strategy;
  const long compiles_before = stats().nvrtc_compiles;
  const auto start = std::chrono::steady_clock::now();
  say_if_math_skipped();
  test::precompile(*current_device(), default_specs(base, cases));
  uint64_t ran = 0;
  for (uint64_t n = 0; n < cases; ++n) {
    ++ran;
    const uint64_t seed = test::case_seed(base, n);
    std::mt19937_64 rng(seed);
    const test::FuzzCase c = test::draw_case(rng);
    const Problem& p = c.problem;
    std::string failure;
    bool context_lost = false;
    std::string strategy = "-";
    try {
      const KernelSpec spec = spec_for(p, seed);
      strategy = strategy_name(spec.strategy);
      const test::CaseResult r = test::run_case(p, spec, rng, c.specials);
      outputs += r.checked;
      if (!r.ok())
        failure = std::to_string(r.mismatches) + "/" + std::to_string(r.checked) + " mismatches, " +
                  std::to_string(r.argmax_mismatches) + " argmax, " + std::to_string(r.clobbered) +
                  " clobbered; first: " + r.first_failure + " [spec " + to_string(spec) + "]";
    } catch (const CudaError& e) {
      failure = std::string("CudaError: ") + e.what();
      context_lost = true; // a faulting kernel leaves the context unusable: every later case would fail too
    } catch (const std::exception& e) {
      failure = std::string("exception: ") + e.what();
    }
    terms += p.shape.terms();
    Tally& ts = by_semiring[semiring_info(p.semiring).name];
    Tally& td = by_dtype[dtype_info(p.dtype).name];
    Tally& tk = by_strategy[strategy];
    ++ts.cases, ++td.cases, ++tk.cases;
    if (!failure.empty()) {
      ++failed, ++ts.failed, ++td.failed, ++tk.failed;
      if (failed <= kFailuresPrinted)
        std::printf("FAIL fuzz seed=%llu %s inputs[%s]: %s (replay: JITBMM_FUZZ_SEED=%llu JITBMM_FUZZ_CASES=1)\n",
                    static_cast<unsigned long long>(seed), describe(p).c_str(), test::describe(c.specials).c_str(),
                    failure.c_str(), static_cast<unsigned long long>(seed));
    }
    if (context_lost) {
      std::printf("fuzz: stopped at case %llu: the CUDA context is unusable\n", static_cast<unsigned long long>(n));
      break;
    }
  }
  std::printf("fuzz: %llu cases, %lld failed, seed %llu\n", static_cast<unsigned long long>(ran),
              static_cast<long long>(failed), static_cast<unsigned long long>(base));
  print_tallies("semiring", by_semiring);
  print_tallies("dtype", by_dtype);
  print_tallies("strategy", by_strategy);
  // Where the time goes: the CPU reference (terms) and NVRTC (one compile per distinct default spec).
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  %lld outputs checked, %lld terms, %ld kernels compiled, %.1f s\n", static_cast<long long>(outputs),
              static_cast<long long>(terms), stats().nvrtc_compiles - compiles_before, seconds);
  std::fflush(stdout);
  CHECK(failed == 0);
  CHECK(ran == cases);
}
