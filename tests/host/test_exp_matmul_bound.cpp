// exp_matmul's guard (templates/exp_matmul/bounds.cuh), checked on the host by emulating the device arithmetic at
// its worst: every factor, partial product and product below 2^-126 flushed to zero, as ex2.approx.ftz and an
// FTZ product would. The bound must hold for every row, and an output that passes the guard must have lost at
// most 2^-30 of its value.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "templates/exp_matmul/bounds.cuh"
#include "generator/emit_source.hpp"
#include "generator/strategy.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/tuner/search_space.hpp"
#include "support/layout.hpp"

namespace {

float flush(float x) { return std::fabs(x) < 0x1p-126f ? 0.f : x; }
// A product kept exactly (its rounding is relative, not a loss), unless it falls below the smallest normal.
long double product(float x, float y) {
  const long double p = (long double)x * y;
  return std::fabs(p) < 0x1p-126L ? 0.L : p;
}

// TF32 as cvt.rna.tf32.f32 makes it: 10 mantissa bits, rounded to nearest, ties away from zero.
float tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

struct Sums {
  long double exact = 0;   // Σ fa·fb of the (float) factors, nothing flushed
  long double flushed = 0; // what an FMA kernel keeps (flushed factors and products)
  long double split = 0;   // what 3xTF32 keeps (flushed hi/lo parts and partial products)
};

// One output's sum, as the device forms it, for log2-unit rows a' and b' (the stats pass's maxima A, B).
Sums emulate(const std::vector<float>& a, const std::vector<float>& b, int h) {
  float A = -INFINITY, B = -INFINITY;
  for (float x : a) A = std::fmax(A, x);
  for (float x : b) B = std::fmax(B, x);
  Sums s;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const float fa = std::exp2(a[k] - (A - float(h))), fb = std::exp2(b[k] - (B - float(h)));
    s.exact += (long double)fa * fb;
    s.flushed += product(flush(fa), flush(fb));
    const float ah = flush(tf32(flush(fa))), al = flush(tf32(flush(fa) - ah));
    const float bh = flush(tf32(flush(fb))), bl = flush(tf32(flush(fb) - bh));
    s.split += product(ah, bh) + product(ah, bl) + product(al, bh);
  }
  return s;
}

} // namespace

TEST_CASE("exp_matmul headroom: K·2^2h stays below the format's top for every K, and h is the largest such") {
  for (bool wide : {false, true}) {
    const jb::EmFormat f = jb::em_format(wide);
    for (long long K : {1LL, 2LL, 3LL, 64LL, 511LL, 512LL, 513LL, 2048LL, 65536LL, 1LL << 31, 1LL << 40}) {
      const int h = jb::em_headroom(K, wide), lk = jb::em_log2_ceil(K);
      CAPTURE(K);
      CHECK((1LL << lk) >= K);
      CHECK(lk + 2 * h <= f.max_exp - 2);
      CHECK(lk + 2 * (h + 1) > f.max_exp - 2);
      CHECK(h >= (wide ? 480 : 40));
    }
  }
  CHECK(jb::em_guard_log2(512, false) == 9 + 58 - 126 + 2 + 30);
}

TEST_CASE("exp_matmul guard: the underflowed mass never passes the bound; guarded outputs lose < 2^-30") {
  std::mt19937_64 rng(2026);
  int passed = 0, flagged = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int K = 1 + static_cast<int>(rng() % 1500);
    const double spreads[] = {1, 5, 20, 50, 100};
    const double spread = spreads[trial % 5];
    std::normal_distribution<double> normal(0, spread);
    std::vector<float> a(K), b(K);
    for (int k = 0; k < K; ++k)
      a[k] = static_cast<float>(normal(rng) * 1.4426950408889634),
      b[k] = static_cast<float>(normal(rng) * 1.4426950408889634);
    if (trial % 7 == 0) { // the row's and the column's maxima at different k, far above the rest
      a[rng() % K] += 150.f;
      b[rng() % K] += 150.f;
    }
    const int h = jb::em_headroom(K, false), lk = jb::em_log2_ceil(K);
    const Sums s = emulate(a, b, h);
    CAPTURE(K);
    CAPTURE(spread);
    // No overflow: the sum stays below 2^126.
    CHECK(s.exact < 0x1p126L);
    // The bound: what flushing lost is below L = 2^(lk + h − 126 + 2), for the FMA and the 3xTF32 forms.
    const long double L = std::ldexp(1.0L, lk + h - 126 + 2);
    CHECK(s.exact - s.flushed <= L);
    CHECK(s.flushed <= s.exact);
    // The guard: an output that passes it lost at most 2^-30 of its value (3xTF32 adds its own ~2^-21 rounding).
    if (s.flushed >= std::ldexp(1.0L, jb::em_guard_log2(K, false))) {
      ++passed;
      CHECK(s.exact - s.flushed <= std::ldexp(s.flushed, -30));
      CHECK(std::fabs(s.exact - s.split) <= std::ldexp(s.exact, -20) + std::ldexp(s.split, -30));
    } else {
      ++flagged;
    }
  }
  MESSAGE(passed << " sums passed the guard, " << flagged << " were flagged for repair");
  CHECK(passed > 1000); // randn rows never need repair
  CHECK(flagged > 100); // spreads of 50 and 100 often do
}

TEST_CASE("exp_matmul workspace: aligned sections in order, one flag per repair tile, padded operand copies") {
  const jb::EmWorkspace w = jb::em_workspace(3, 130, 257, 45, 3, 1, false);
  CHECK(w.Mp == 256);
  CHECK(w.Np == 384);
  CHECK(w.Kp == 64);
  CHECK(w.row_max == 0);
  CHECK(w.col_max >= 3 * 130 * 4);
  CHECK(w.row_line >= w.col_max + 1 * 257 * 4);
  CHECK(w.col_line >= w.row_line + 3 * 130 * 16);
  CHECK(w.repaired >= w.col_line + 1 * 257 * 16);
  CHECK(w.flags == w.repaired + 16);
  CHECK(w.tiles == 3 * 5 * 9); // a small problem: repair tiles of 32×32
  CHECK(w.ea >= w.flags + 4 * w.tiles);
  CHECK(w.eb >= w.ea + 3 * 256 * 64 * 4);
  CHECK(w.bytes >= w.eb + 1 * 64 * 384 * 4);
  for (long long off : {w.col_max, w.row_line, w.col_line, w.repaired, w.ea, w.eb, w.bytes}) CHECK(off % 16 == 0);
  CHECK(jb::em_workspace(2, 65, 64, 1, 2, 2, true).tiles == 2 * 3 * 2);
  CHECK(jb::em_workspace(512, 64, 64, 8, 1, 1, false).tiles == 512); // 512 tiles of 64×64: that size
  CHECK(jb::em_workspace(2, 65, 64, 0, 2, 2, true).Kp == 0);
}

TEST_CASE("exp_matmul's repair tile: 64×64 from 512 such tiles up, else 32×32") {
  CHECK(jb::em_repair_tile(64, 512, 512) == 64);
  CHECK(jb::em_repair_tile(4, 2048, 2048) == 64);
  CHECK(jb::em_repair_tile(512, 128, 128) == 64);
  CHECK(jb::em_repair_tile(8, 256, 256) == 32); // 128 tiles of 64×64
  CHECK(jb::em_repair_tile(1, 64 * 16, 64 * 32) == 64);
  CHECK(jb::em_repair_tile(1, 64 * 16, 64 * 32 - 64) == 32);
  CHECK(jb::em_repair_tile(1, 1, 1) == 32);
}

TEST_CASE("exp_matmul: a row and a column that cannot meet make an exactly −inf output") {
  const jb::EmLine band_a = {0b0110ull, 10, 20}, band_b = {0b0110ull, 21, 30}, block = {0b1000ull, 40, 50};
  CHECK(jb::em_all_neg_inf(band_a, band_b)); // chunks shared, ranges apart
  CHECK(jb::em_all_neg_inf(band_a, block));  // no chunk shared
  CHECK_FALSE(jb::em_all_neg_inf(band_a, band_a));
  const jb::EmLine none = {0ull, 0x7fffffff, -1};
  CHECK(jb::em_all_neg_inf(none, band_a)); // an all −inf row
  const jb::EmLine touch = {0b0100ull, 20, 25};
  CHECK_FALSE(jb::em_all_neg_inf(band_a, touch)); // k = 20 in both
}

TEST_CASE("exp_matmul specs: what check_spec_fits refuses, naming the field") {
  using namespace jitbmm;
  Problem p;
  p.shape = {2, 256, 256, 256};
  const KernelSpec base = default_spec(p, Strategy::exp_matmul);
  CHECK(base.math == Math::tf32x3);
  CHECK(to_string(base).find("math=tf32x3") != std::string::npos);
  CHECK(parse_spec(to_string(base)) == base);
  const auto refused = [&](KernelSpec s, const Problem& q, const char* field) {
    CAPTURE(to_string(s));
    CHECK_THROWS_WITH_AS(check_spec_fits(s, q), doctest::Contains(field), std::invalid_argument);
  };
  KernelSpec s = base;
  s.math = Math::tf32; // one TF32 product: only at precision = fast, or for an f16 or bf16 result
  refused(s, p, "spec.math");
  Problem fast = p;
  fast.precision = Precision::fast;
  CHECK_NOTHROW(check_spec_fits(s, fast));
  Problem half_out = p;
  half_out.dtype = DType::bf16;
  KernelSpec one = s;
  one.dtype = one.out_dtype = DType::bf16;
  CHECK_NOTHROW(check_spec_fits(one, half_out));
  half_out.out_dtype = one.out_dtype = DType::f32; // bf16 inputs with an f32 output keep f32's tolerance
  refused(one, half_out, "spec.math");
  s = base, s.tile_k = 12;
  refused(s, p, "spec.tile");
  s = base, s.thread_n = 2, s.thread_m = 2; // mma needs thread_n a multiple of 4
  refused(s, p, "spec.thread");
  s = base, s.tile_m = 96;
  refused(s, p, "spec.tile");
  Problem maxp = p;
  maxp.semiring = Semiring::max_plus;
  s = base, s.semiring = Semiring::max_plus;
  refused(s, maxp, "log semiring only");
  Problem wide = p;
  wide.dtype = DType::f64;
  s = base, s.dtype = s.out_dtype = DType::f64;
  refused(s, wide, "spec.math");
  CHECK(default_spec(wide, Strategy::exp_matmul).math == Math::fma);
  CHECK_THROWS_WITH_AS(parse_precision("rough"), doctest::Contains("precision"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_math("fp8"), doctest::Contains("math"), std::invalid_argument);
  s = base, s.math = Math::bf16, s.tile_k = 32; // BF16 factors: f16 and bf16 problems only, k-steps of 16
  refused(s, p, "only for f16 and bf16 outputs");
  Problem half = p;
  half.dtype = DType::bf16;
  KernelSpec to_f32 = s;
  to_f32.dtype = DType::bf16;
  Problem wide_out = half;
  wide_out.out_dtype = DType::f32; // a bf16 problem with f32 outputs keeps f32's 1e-5
  refused(to_f32, wide_out, "only for f16 and bf16 outputs");
  KernelSpec h = s;
  h.dtype = h.out_dtype = DType::bf16;
  CHECK_NOTHROW(check_spec_fits(h, half));
  h.tile_k = 8;
  refused(h, half, "multiple of 16");
}

TEST_CASE("exp_matmul's wgmma forms: their tile rules, shared memory, workspace and target") {
  using namespace jitbmm;
  Problem p;
  p.shape = {2, 256, 300, 256};
  KernelSpec s = default_spec(p, Strategy::exp_matmul);
  s.math = Math::wgmma_tf32x3, s.min_blocks = 1;
  s.tile_m = s.tile_n = 128, s.tile_k = 32, s.thread_m = 2, s.thread_n = 32;
  CHECK_NOTHROW(check_spec_fits(s, p));
  CHECK(s.threads() == 384); // two consumer warpgroups and the producer
  CHECK(parse_spec(to_string(s)) == s);
  CHECK(to_string(s).find("math=wgmma_tf32x3") != std::string::npos);
  CHECK(arch_specific(s));
  CHECK_FALSE(arch_specific(default_spec(p, Strategy::exp_matmul)));
  CHECK_FALSE(arch_specific(default_spec(p, Strategy::tiled)));
  // Three stages of the high and low parts of a 128-row and a 128-column slice of 32 k, from a 1024-byte boundary.
  CHECK(jb::em_wg_stage_bytes(128, 128, true) == 64 * 1024);
  CHECK(dynamic_shared_memory_bytes(s) == 3 * 64 * 1024 + 1024);
  CHECK(dynamic_shared_memory_bytes(default_spec(p, Strategy::exp_matmul)) == 0);
  CHECK(shared_memory_bytes(s) <= 48 * 1024);
  const LaunchPlan plan = strategy_def(s).launches(s, p);
  REQUIRE(plan.launches.size() == 3);
  CHECK(plan.launches[1].dynamic_shared == 3u * 64 * 1024 + 1024);
  CHECK(plan.launches[1].block[0] == 384u);
  CHECK(plan.launches[0].dynamic_shared == 0u);
  // Both forms read the factors once, in panels as large as the other tensor-core forms' copies.
  const jb::EmWorkspace w = jb::em_workspace(2, 256, 256, 300, 2, 2, false); // B, M, N, K
  CHECK(plan.workspace_bytes == static_cast<std::size_t>(w.bytes));
  KernelSpec one = s;
  one.math = Math::wgmma_tf32;
  CHECK(strategy_def(one).launches(one, p).workspace_bytes == static_cast<std::size_t>(w.bytes));
  KernelSpec single = s;
  single.tile_m = single.tile_n = 64, single.thread_n = 16;
  CHECK(single.threads() == 256); // one consumer warpgroup

  const auto refused = [&](KernelSpec r, const Problem& q, const char* field) {
    CAPTURE(to_string(r));
    CHECK_THROWS_WITH_AS(check_spec_fits(r, q), doctest::Contains(field), std::invalid_argument);
  };
  refused(one, p, "spec.math"); // one TF32 product: precision fast only
  Problem fast = p;
  fast.precision = Precision::fast;
  one.tile_n = 256, one.thread_n = 64; // 128 accumulators a thread: allowed for the single product
  CHECK_NOTHROW(check_spec_fits(one, fast));
  KernelSpec r = s;
  r.tile_n = 256, r.thread_n = 64; // the split form would need 256 accumulator registers
  refused(r, p, "spec.tile");
  r = s, r.thread_n = 16;
  refused(r, p, "spec.thread");
  r = s, r.tile_m = 32, r.thread_n = 32;
  refused(r, p, "spec.tile");
  r = s, r.tile_k = 16; // the workspace's panels are 32 k wide
  refused(r, p, "spec.tile");
  r = s, r.min_blocks = 2; // its consumers' registers come from the block's whole share: two an SM would hang
  refused(r, p, "spec.min_blocks");
  Problem wide = p;
  wide.dtype = DType::f64;
  r = s, r.dtype = r.out_dtype = DType::f64;
  refused(r, wide, "spec.math");
  // The tuner offers them only on a GPU that has wgmma.
  for (const KernelSpec& c : tuning_candidates(p, DeviceLimits{})) CHECK_FALSE(arch_specific(c));
}

// Every element of `lines` lines × Kp lands once; a line's slice is its own 128 bytes (PER values), a 16-byte chunk
// (PER/8 consecutive k) stays one run, at the chunk wgmma's 128-byte swizzle names: chunk c of line l at c ^ (l % 8).
template <int PER> void check_panels(long long lines, long long Kp) {
  constexpr int kChunk = PER / 8;
  std::vector<int> seen(static_cast<std::size_t>(lines * Kp), 0);
  for (long long line = 0; line < lines; ++line)
    for (long long k = 0; k < Kp; ++k) {
      const long long at = jb::em_panel_at<PER>(line, k, Kp);
      REQUIRE(at >= 0);
      REQUIRE(at < lines * Kp);
      ++seen[static_cast<std::size_t>(at)];
      const long long start = jb::em_panel_at<PER>(line - line % 64, k - k % PER, Kp) + (line % 64) * PER;
      CHECK(at / PER == start / PER);
      if (k % kChunk) CHECK(at == jb::em_panel_at<PER>(line, k - 1, Kp) + 1);
      CHECK(at % PER / kChunk == ((k % PER) / kChunk ^ line % 8));
    }
  for (int c : seen) REQUIRE(c == 1);
}

TEST_CASE("the wgmma forms' panels: every element once, a slice's 64-line halves contiguous, 16-byte runs kept") {
  check_panels<32>(256, 96);  // 4-byte factors: two panels, three slices of 32 k
  check_panels<64>(256, 192); // BF16 (wgmma_bf16): three slices of 64 k
  CHECK(jb::em_panel_at(300, 40, 96) == jb::em_panel_at<32>(300, 40, 96));
}

// A 2×256×100×300 problem of `dtype` and a 128×256 wgmma spec of math m for it, which must fit and round-trip.
static std::pair<jitbmm::Problem, jitbmm::KernelSpec> half_wgmma_case(jitbmm::DType dtype, jitbmm::Math m) {
  using namespace jitbmm;
  Problem p;
  p.shape = {2, 256, 100, 300}; // B, M, K, N
  p.dtype = dtype;
  KernelSpec s = default_spec(p, Strategy::exp_matmul);
  s.math = m, s.min_blocks = 1;
  s.tile_m = 128, s.tile_n = 256, s.tile_k = 64, s.thread_m = 2, s.thread_n = 64;
  CHECK_NOTHROW(check_spec_fits(s, p));
  CHECK(arch_specific(s));
  CHECK(bf16_factors(s.math));
  CHECK(parse_spec(to_string(s)) == s);
  return {p, s};
}

TEST_CASE("wgmma_bf16: half outputs only, 64-k panels, K up to 65536, no backward; Hopper only") {
  using namespace jitbmm;
  const auto given = half_wgmma_case(DType::bf16, Math::wgmma_bf16);
  const Problem& p = given.first;
  const KernelSpec& s = given.second;
  CHECK(to_string(s).find("math=wgmma_bf16") != std::string::npos);
  // 2-byte factors, K padded to a whole 128-byte line: 128 of them here.
  const jb::EmWorkspace w = jb::em_workspace(2, 256, 300, 100, 2, 2, false, 2);
  CHECK(w.Kp == 128);
  CHECK(jb::em_workspace(2, 256, 300, 100, 2, 2, false).Kp == 128); // 4-byte: 32-k lines
  CHECK(jb::em_workspace(2, 256, 300, 90, 2, 2, false).Kp == 96);
  CHECK(jb::em_workspace(2, 256, 300, 90, 2, 2, false, 2).Kp == 128);
  CHECK(strategy_def(s).launches(s, p).workspace_bytes == static_cast<std::size_t>(w.bytes));
  CHECK(w.eb - w.ea == 2 * 256 * 128 * 2);
  // Same stage bytes as wgmma_tf32: a 128-byte line of each operand's lines.
  KernelSpec tf = s;
  tf.math = Math::wgmma_tf32, tf.tile_k = 32;
  CHECK(dynamic_shared_memory_bytes(s) == dynamic_shared_memory_bytes(tf));
  CHECK(emit_kernel(s).source.find("jb::WgBf16") != std::string::npos);

  const auto refused = [&](KernelSpec r, const Problem& q, const char* field, const char* what) {
    CAPTURE(to_string(r));
    CHECK_THROWS_WITH_AS(check_spec_fits(r, q), doctest::Contains(field), std::invalid_argument);
    CHECK_THROWS_WITH_AS(check_spec_fits(r, q), doctest::Contains(what), std::invalid_argument);
  };
  KernelSpec r = s;
  r.tile_k = 32;
  refused(r, p, "spec.tile", "tile_k 64");
  Problem f32_out = p;
  f32_out.out_dtype = DType::f32;
  r = s, r.out_dtype = DType::f32;
  refused(r, f32_out, "spec.math", "only for f16 and bf16 outputs");
  Problem f32 = p;
  f32.dtype = DType::f32;
  r = s, r.dtype = r.out_dtype = DType::f32;
  refused(r, f32, "spec.math", "only for f16 and bf16 outputs");
  Problem long_k = p;
  long_k.shape.K = 65537;
  refused(s, long_k, "spec.math", "65536");
  long_k.shape.K = 65536;
  CHECK_NOTHROW(check_spec_fits(s, long_k));
  KernelSpec g = s;
  g.pass = Pass::grad_a;
  refused(g, p, "spec.math", "no wgmma_bf16 form");
  // Offered for half outputs, on a GPU with wgmma only.
  const DeviceLimits hopper{1024, 48 * 1024, 227 * 1024, arch_features(90)};
  const auto offered = [&](const Problem& q, const DeviceLimits& d) {
    int n = 0;
    for (const KernelSpec& c : tuning_candidates(q, d))
      n += c.strategy == Strategy::exp_matmul && c.math == Math::wgmma_bf16;
    return n;
  };
  CHECK(offered(p, hopper) == 3);
  CHECK(offered(p, DeviceLimits{}) == 0);
  CHECK(offered(f32_out, hopper) == 0);
}

TEST_CASE("wgmma_bf16_fused: no factors in the workspace, b N-major in the stage, the same limits; named, not tuned") {
  using namespace jitbmm;
  const auto given = half_wgmma_case(DType::f16, Math::wgmma_bf16_fused);
  const Problem& p = given.first;
  const KernelSpec& s = given.second;
  // Only the lines, counter and flags: ea and eb are empty, and Kp is still padded to the product's 64-k slices.
  const jb::EmWorkspace stored = jb::em_workspace(2, 256, 300, 100, 2, 2, false, 2);
  const jb::EmWorkspace made = jb::em_workspace(2, 256, 300, 100, 2, 2, false, 2, false);
  CHECK(made.Kp == 128);
  CHECK(made.ea == stored.ea);
  CHECK(made.eb == made.ea);
  CHECK(made.bytes == made.ea);
  CHECK(strategy_def(s).launches(s, p).workspace_bytes == static_cast<std::size_t>(made.bytes));
  // The kernel: the pipeline told that its stages are made (FORM 7), the producer's file included.
  const std::string source = emit_kernel(s).source;
  CHECK(source.find("jb::WgBf16, true") != std::string::npos);
  CHECK(source.find("em_make_factors") != std::string::npos);
  CHECK(source.find("em_prepare_kernel<jb::f16, int, float, 7>") != std::string::npos);
  // The limits of wgmma_bf16: half outputs, K up to 65536, no backward.
  Problem f32_out = p;
  f32_out.out_dtype = DType::f32;
  KernelSpec r = s;
  r.out_dtype = DType::f32;
  CHECK_THROWS_WITH_AS(check_spec_fits(r, f32_out), doctest::Contains("only for f16 and bf16 outputs"),
                       std::invalid_argument);
  Problem long_k = p;
  long_k.shape.K = 65537;
  CHECK_THROWS_WITH_AS(check_spec_fits(s, long_k), doctest::Contains("65536"), std::invalid_argument);
  r = s, r.pass = Pass::grad_a;
  CHECK_THROWS_AS(check_spec_fits(r, p), std::invalid_argument);
  // Not a tuning candidate: its producer warpgroup alone makes the factors, slower than wgmma_bf16.
  const DeviceLimits hopper{1024, 48 * 1024, 227 * 1024, arch_features(90)};
  for (const KernelSpec& c : tuning_candidates(p, hopper)) CHECK(c.math != Math::wgmma_bf16_fused);
}
