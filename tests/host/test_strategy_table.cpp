// The strategy table (generator/strategies/): every entry is complete and consistent with itself, so a new strategy
// that forgets a piece fails here, without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "generator/emit_source.hpp"
#include "generator/strategies/common.hpp"
#include "generator/strategy.hpp"
#include "jitbmm/kernel_spec.hpp"

using namespace jitbmm;

namespace {

std::vector<Problem> problems() {
  std::vector<Problem> out;
  for (Semiring s : {Semiring::log, Semiring::max_plus, Semiring::plus_times, Semiring::max_times})
    for (DType d : {DType::f32, DType::f64, DType::bf16})
      for (Shape shape : {Shape{2, 33, 47, 65}, Shape{64, 512, 512, 512}, Shape{1, 16, 16, 8192}, Shape{3, 1, 257, 1},
                          Shape{1, 0, 5, 7}, Shape{2, 3, 4, 0}}) {
        Problem p;
        p.semiring = s, p.dtype = d, p.shape = shape;
        out.push_back(p);
      }
  return out;
}

} // namespace

TEST_CASE("every strategy registers once, with a unique name that parses back, and every piece") {
  std::set<std::pair<int, bool>> seen;
  for (const StrategyDef* d : strategy_defs()) {
    INFO(d->name);
    CHECK(seen.insert({static_cast<int>(d->id), d->backward}).second);
    CHECK(parse_strategy(d->name) == d->id);
    CHECK(std::string(strategy_name(d->id)) == d->name);
    CHECK(
        (d->default_rank && d->defaults && d->check && d->needs_index64 && d->candidates && d->render && d->launches));
    CHECK(((d->fields & kBlockFields) != 0) != ((d->fields & kTileFields) != 0)); // one of the two families
    CHECK(((d->fields & kTileFields) != 0) == (d->shared_bytes != nullptr));
  }
  // Every value of the public enum has a forward or a backward entry.
  for (Strategy s :
       {Strategy::linear, Strategy::linear_two_pass, Strategy::warp, Strategy::block_tree, Strategy::tiled,
        Strategy::split_k, Strategy::scatter, Strategy::exp_matmul, Strategy::tiled_online, Strategy::histogram,
        Strategy::tiled_refine})
    CHECK(std::any_of(seen.begin(), seen.end(), [&](auto& e) { return e.first == static_cast<int>(s); }));
}

TEST_CASE("a strategy's launches name only entry points its rendering declares, and its defaults and candidates fit") {
  int plans = 0;
  for (const Problem& p : problems()) {
    std::vector<KernelSpec> specs;
    for (const StrategyDef* d : strategy_defs()) {
      try {
        if (!d->backward) specs.push_back(default_spec(p, d->id));
      } catch (const std::invalid_argument&) { // the strategy does not compute this problem
      }
    }
    for (Pass pass : {Pass::grad_a, Pass::grad_b}) specs.push_back(default_grad_spec(p, pass));
    for (const KernelSpec& spec : specs) {
      INFO(to_string(spec));
      const StrategyDef& def = strategy_def(spec);
      CHECK_NOTHROW(check_spec_fits(spec, p));
      const GeneratedKernel k = emit_kernel(spec);
      const Rendering r = def.render(spec);
      REQUIRE(!k.entries.empty());
      CHECK(k.entries.front().empty()); // the main entry first
      for (const std::string& suffix : k.entries)
        CHECK(k.source.find(k.name + suffix + "(const jb::" + r.params + " p)") != std::string::npos);
      const bool empty = p.shape.B * p.shape.M * p.shape.N == 0;
      if (empty && spec.pass == Pass::forward) continue; // a plan without outputs launches nothing
      const LaunchPlan plan = def.launches(spec, p);
      for (const Launch& l : plan.launches) {
        CHECK(std::find(k.entries.begin(), k.entries.end(), l.entry) != k.entries.end());
        CHECK(l.block[0] * l.block[1] * l.block[2] >= 32);
        CHECK(l.grid[0] * l.grid[1] * l.grid[2] >= 1);
        if (l.repair_flags_at != Launch::kNoFlags) CHECK(l.repair_flags_at < plan.workspace_bytes);
      }
      CHECK(plan.zero_bytes <= plan.workspace_bytes);
      ++plans;
      int fitting = 0;
      for (const KernelSpec& c : def.candidates(spec, p)) {
        CHECK(c.strategy == spec.strategy);
        try {
          check_spec_fits(c, p);
          ++fitting;
        } catch (const std::invalid_argument&) { // the tuner drops those that do not fit
        }
      }
      (void)fitting;
    }
  }
  MESSAGE(plans << " plans checked");
}

TEST_CASE("a 32-bit variant's grid-strided launches step an index by at most 2^31 - kIndex32Limit") {
  // Outputs, or one gradient, of n² elements just below kIndex32Limit, which the 32-bit variants take. The launches
  // whose loops advance an element index by the grid's threads (the direct forward kernels, split_k's combine, the
  // scatter backward, the gradients' store; the warp kernel by its outputs a block, block_y) must step by at most
  // kMaxGridStrideStep: the index's last step past its bound must still fit in int.
  const int64_t n = 46000;
  REQUIRE(n * n < strategies::kIndex32Limit);
  const std::set<std::pair<std::string, std::string>> strided = {
      {"linear_two_pass", ""}, {"warp", ""}, {"split_k", "_combine"}, {"scatter", ""}};
  int checked = 0;
  for (Semiring semiring : {Semiring::log, Semiring::max_plus})
    for (const Shape& shape : {Shape{1, n, 2, n}, Shape{1, n, n, 2}, Shape{1, 2, n, n}}) {
      Problem p;
      p.semiring = semiring;
      p.shape = shape;
      std::vector<KernelSpec> specs;
      for (const StrategyDef* d : strategy_defs())
        for (Pass pass : {Pass::forward, Pass::grad_a, Pass::grad_b}) {
          if (d->backward != (pass != Pass::forward)) continue;
          try {
            specs.push_back(pass == Pass::forward ? default_spec(p, d->id) : default_grad_spec(p, pass, d->id));
          } catch (const std::invalid_argument&) { // the strategy does not compute this problem
          }
        }
      for (const KernelSpec& spec : specs) {
        if (spec.index64) continue;
        INFO(to_string(spec));
        for (const Launch& l : strategy_def(spec).launches(spec, p).launches) {
          if (l.entry != "_store" && !strided.count({strategy_name(spec.strategy), l.entry})) continue;
          INFO(l.entry);
          const int64_t per_block = spec.strategy == Strategy::warp ? l.block[1] : l.block[0];
          CHECK(int64_t(l.grid[0]) * per_block <= kMaxGridStrideStep);
          ++checked;
        }
      }
    }
  CHECK(checked >= 12);
}

TEST_CASE("default_spec picks by rank as the cascade did") {
  auto pick = [](int64_t B, int64_t M, int64_t N, int64_t K) {
    Problem p;
    p.shape.B = B, p.shape.M = M, p.shape.N = N, p.shape.K = K;
    return default_spec(p).strategy;
  };
  CHECK(pick(64, 512, 512, 512) == Strategy::tiled);        // many outputs
  CHECK(pick(1, 16, 16, 8192) == Strategy::split_k);        // few outputs, long K
  CHECK(pick(1, 8, 8, 512) == Strategy::warp);              // few outputs, moderate K
  CHECK(pick(1, 64, 64, 16) == Strategy::tiled);            // after warp
  CHECK(pick(3, 1, 257, 1) == Strategy::linear);            // nothing else suits
  CHECK(pick(1, 0, 5, 7) == Strategy::linear);              // no outputs
  CHECK(pick(2, 3, 4, 0) == Strategy::linear);              // no terms
  CHECK(pick(1, 1, int64_t(1) << 37, 0) == Strategy::warp); // linear's grid cannot hold the columns
}

TEST_CASE("a gradient pass's default is the backward entry of highest rank: the semiring's kind, then histogram's fit") {
  for (const Problem& p : problems()) {
    const bool selecting = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
    const Strategy want = !selecting ? Strategy::tiled
                          : strategy_def(Strategy::histogram, Pass::grad_a).default_rank(p) >= 0 ? Strategy::histogram
                                                                                                   : Strategy::scatter;
    for (Pass pass : {Pass::grad_a, Pass::grad_b}) {
      INFO(describe(p));
      CHECK(default_grad_spec(p, pass).strategy == want);
    }
  }
  for (const StrategyDef* d : strategy_defs()) // a tuning candidate only
    if (d->backward && d->id == Strategy::exp_matmul)
      for (const Problem& p : problems()) CHECK(d->default_rank(p) < 0);
}

TEST_CASE("repair counts: exp_matmul's entry alone says where they are, inside its workspace") {
  for (const StrategyDef* d : strategy_defs())
    CHECK((d->repair_counts != nullptr) == (d->id == Strategy::exp_matmul && !d->backward));
  const StrategyDef& em = strategy_def(Strategy::exp_matmul, Pass::forward);
  for (Problem p : problems()) {
    if (p.semiring != Semiring::log || p.shape.B * p.shape.M * p.shape.N == 0) continue;
    KernelSpec spec;
    try {
      spec = default_spec(p, Strategy::exp_matmul);
    } catch (const std::invalid_argument&) { // a problem exp_matmul does not compute
      continue;
    }
    const RepairCounts c = em.repair_counts(spec, p);
    const LaunchPlan plan = em.launches(spec, p);
    INFO(to_string(spec), " ", describe(p));
    CHECK(c.tiles > 0);
    CHECK(c.outputs_at + 8 <= c.flags_at);
    CHECK(c.flags_at + 4 * static_cast<std::size_t>(c.tiles) <= plan.workspace_bytes);
    CHECK(plan.launches.back().repair_flags_at == c.flags_at); // the repair pass reads the flags the counts name
  }
}

TEST_CASE("histogram plans: one launch, bins within 48 KiB, K in chunks over grid y, no workspace even broadcast") {
  Problem p;
  p.semiring = Semiring::max_plus, p.dtype = DType::f32, p.shape = {3, 37, 900, 41};
  for (Pass pass : {Pass::grad_a, Pass::grad_b})
    for (int threads : {32, 256, 512})
      for (bool broadcast : {false, true}) {
        Problem q = p;
        if (broadcast && pass == Pass::grad_a) q.a_strides = Strides{0, 900, 1};
        if (broadcast && pass == Pass::grad_b) q.b_strides = Strides{0, 41, 1};
        KernelSpec spec = default_grad_spec(q, pass, Strategy::histogram);
        spec.block_x = threads;
        INFO(to_string(spec), " broadcast ", broadcast);
        const LaunchPlan plan = strategy_def(spec).launches(spec, q);
        REQUIRE(plan.launches.size() == 1);
        CHECK(plan.workspace_bytes == 0);
        CHECK(plan.zero_bytes == 0);
        const Launch& l = plan.launches[0];
        const int64_t warps = threads / 32, lines = pass == Pass::grad_a ? 1 : 8;
        const int64_t chunk_k = l.dynamic_shared / (warps * lines * 4);
        CHECK(l.dynamic_shared <= 48u * 1024);
        CHECK(l.dynamic_shared == static_cast<unsigned>(warps * lines * chunk_k * 4)); // whole bins
        CHECK(chunk_k == std::min<int64_t>(900, 48 * 1024 / (warps * lines * 4)));
        CHECK(l.grid[1] == static_cast<unsigned>((900 + chunk_k - 1) / chunk_k));
        // A warp a gradient row (grad_a) or 8 columns (grad_b) of each slice: one slice when broadcast.
        const int64_t slices = broadcast ? 1 : 3, per_slice = pass == Pass::grad_a ? 37 : (41 + 7) / 8;
        CHECK(l.grid[0] == static_cast<unsigned>((slices * per_slice + warps - 1) / warps));
      }
  // An empty gradient launches nothing; one with no outputs to gather from still writes its zeros.
  Problem no_k = p, no_outputs = p;
  no_k.shape.K = 0, no_outputs.shape.M = 0;
  for (Pass pass : {Pass::grad_a, Pass::grad_b}) {
    const KernelSpec spec = default_grad_spec(no_k, pass, Strategy::histogram);
    CHECK(strategy_def(spec).launches(spec, no_k).launches.empty());
  }
  const KernelSpec gb = default_grad_spec(no_outputs, Pass::grad_b, Strategy::histogram);
  CHECK(strategy_def(gb).launches(gb, no_outputs).launches.size() == 1);
  KernelSpec wide = default_grad_spec(p, Pass::grad_b, Strategy::histogram);
  wide.block_x = 1024; // 64 registers a thread: the loads in flight would spill
  CHECK_THROWS_WITH_AS(check_spec_fits(wide, p), doctest::Contains("spec.block"), std::invalid_argument);
}

TEST_CASE("tiled_refine plans: the product, then the refinement over 128x64 tiles; its default and limits") {
  Problem p;
  p.semiring = Semiring::max_plus, p.dtype = DType::f32, p.with_argmax = true, p.shape = {70000, 130, 900, 70};
  const KernelSpec spec = default_spec(p, Strategy::tiled_refine);
  const LaunchPlan plan = strategy_def(spec).launches(spec, p);
  REQUIRE(plan.launches.size() == 2);
  CHECK(plan.workspace_bytes == 0);
  CHECK(plan.launches[0].entry.empty());
  const Launch& refine = plan.launches[1];
  CHECK(refine.entry == "_refine");
  CHECK(refine.block[0] == 256u);
  CHECK(refine.grid[0] == 2u); // 70 columns
  CHECK(refine.grid[1] == 2u); // 130 rows
  CHECK(refine.grid[2] == 65535u); // the kernel loops over the other batches
  // No terms: the product alone writes the zero and argmax -1.
  Problem no_k = p;
  no_k.shape.K = 0;
  CHECK(strategy_def(spec).launches(default_spec(no_k, Strategy::tiled_refine), no_k).launches.size() == 1);
  // The default where it measured faster: many outputs, K >= 512, f32 or half inputs; not without argmax, with f64,
  // for small K, past the groups' 16384 or for few outputs.
  Problem q;
  q.semiring = Semiring::min_plus, q.dtype = DType::f32, q.with_argmax = true, q.shape = {64, 512, 512, 512};
  CHECK(default_spec(q).strategy == Strategy::tiled_refine);
  for (DType half : {DType::bf16, DType::f16}) {
    Problem h = q;
    h.dtype = half;
    CHECK(default_spec(h).strategy == Strategy::tiled_refine);
  }
  for (auto change : {+[](Problem& x) { x.with_argmax = false; }, +[](Problem& x) { x.dtype = DType::f64; },
                      +[](Problem& x) { x.shape.K = 128; },
                      +[](Problem& x) { x.shape.K = 16385; }, +[](Problem& x) { x.shape = {1, 64, 512, 64}; }}) {
    Problem r = q;
    change(r);
    INFO(describe(r));
    CHECK(default_spec(r).strategy != Strategy::tiled_refine);
  }
  Problem long_k = q;
  long_k.shape.K = 16385;
  CHECK_THROWS_WITH_AS(default_spec(long_k, Strategy::tiled_refine), doctest::Contains("shape.K"),
                       std::invalid_argument);
  Problem plain = q;
  plain.with_argmax = false;
  CHECK_THROWS_WITH_AS(default_spec(plain, Strategy::tiled_refine), doctest::Contains("spec.strategy"),
                       std::invalid_argument);
  KernelSpec odd = default_spec(q, Strategy::tiled_refine);
  odd.tile_k = 24; // a group of 16 k must be whole slices
  CHECK_THROWS_WITH_AS(check_spec_fits(odd, q), doctest::Contains("spec.tile"), std::invalid_argument);
}
