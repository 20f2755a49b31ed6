// The exp_matmul backward's workspace (templates/exp_matmul/grad_bounds.cuh) as both passes of one backward call
// share it: the second pass takes the first's line maxima and G maximum where the first left them, so those, and
// everything before them, must lie the same in both passes' layouts.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "templates/exp_matmul/grad_bounds.cuh"
#include "generator/strategy.hpp"
#include "jitbmm/kernel_spec.hpp"

namespace {

using namespace jitbmm;

struct Case {
  long long B, M, K, N;
  bool a_broadcast, b_broadcast, wide;
};

std::string describe(const Case& c) {
  return std::to_string(c.B) + "x" + std::to_string(c.M) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N) +
         (c.a_broadcast ? " a broadcast" : "") + (c.b_broadcast ? " b broadcast" : "") + (c.wide ? " f64" : "");
}

const Case kCases[] = {{3, 130, 45, 257, false, false, false}, {3, 257, 45, 130, false, false, true},
                       {5, 70, 600, 90, true, false, false},   {5, 70, 600, 90, false, true, false},
                       {1, 1, 1, 1, false, false, false},      {4, 2048, 2048, 2048, false, false, false},
                       {7, 33, 17, 500, true, false, true},    {7, 500, 17, 33, false, true, false}};

} // namespace

TEST_CASE("exp_matmul backward workspace: both passes lay out the flags, accumulator, G maximum and line maxima alike") {
  for (const Case& c : kCases) {
    INFO(describe(c));
    const long long a_batch = c.a_broadcast ? 0 : c.M * c.K, b_batch = c.b_broadcast ? 0 : c.K * c.N;
    const jb::EgDims da = jb::eg_dims(c.B, c.M, c.N, c.K, a_batch, b_batch, true);
    const jb::EgDims db = jb::eg_dims(c.B, c.M, c.N, c.K, a_batch, b_batch, false);
    const jb::EgWorkspace wa = jb::eg_workspace(c.B, da, c.wide), wb = jb::eg_workspace(c.B, db, c.wide);
    const long long t = c.wide ? 8 : 4, a_lines = (c.a_broadcast ? 1 : c.B) * c.M * t,
                    b_lines = (c.b_broadcast ? 1 : c.B) * c.N * t;
    // The shared part, offset for offset; r and c exchanged (x's rows are a's in grad_a, b's columns in grad_b).
    CHECK(wa.rowflag == wb.rowflag);
    CHECK(wa.acc == wb.acc);
    CHECK(wa.pass_zeroed == wb.pass_zeroed);
    CHECK(wa.gmax == wb.gmax);
    CHECK(wa.zeroed == wb.zeroed);
    CHECK(wa.r == wb.c);
    CHECK(wa.c == wb.r);
    // Each piece large enough for either pass, in order and apart.
    CHECK(wa.acc - wa.rowflag >= c.B * std::max(c.M, c.N) * 4);
    const long long acc_a = c.a_broadcast && c.B > 1 ? c.M * c.K * t : 0;
    const long long acc_b = c.b_broadcast && c.B > 1 ? c.N * c.K * t : 0;
    CHECK(wa.pass_zeroed - wa.acc >= std::max(acc_a, acc_b));
    CHECK(wa.gmax >= wa.pass_zeroed);
    CHECK(wa.zeroed - wa.gmax >= c.B * 4);
    CHECK(wa.r == wa.zeroed); // a's rows first
    CHECK(wa.c - wa.r >= a_lines);
    for (const jb::EgWorkspace& w : {wa, wb}) {
      CHECK(w.mask >= wa.c + b_lines);
      CHECK(w.h >= w.mask);
      CHECK(w.v > w.h);
      CHECK(w.bytes > w.v);
      for (long long off : {w.acc, w.pass_zeroed, w.gmax, w.zeroed, w.r, w.c, w.mask, w.h, w.v, w.bytes})
        CHECK(off % 16 == 0);
    }
  }
}

TEST_CASE("exp_matmul backward, second pass: the first's line maxima and G maximum kept, V alone recomputed") {
  for (const Case& c : kCases) {
    if (c.wide) continue; // no f64 form
    Problem p;
    p.semiring = Semiring::log, p.dtype = DType::f32, p.shape = {c.B, c.M, c.K, c.N};
    if (c.a_broadcast) p.a_strides = Strides{0, c.K, 1};
    if (c.b_broadcast) p.b_strides = Strides{0, c.N, 1};
    for (Pass pass : {Pass::grad_a, Pass::grad_b}) {
      KernelSpec spec = default_grad_spec(p, pass, Strategy::exp_matmul);
      INFO(describe(c), " ", to_string(spec));
      const StrategyDef& def = strategy_def(spec);
      REQUIRE((def.second_pass_launches != nullptr));
      const LaunchPlan first = def.launches(spec, p), second = def.second_pass_launches(spec, p);
      REQUIRE(first.launches.size() == second.launches.size());
      CHECK(second.workspace_bytes == first.workspace_bytes);
      CHECK(second.zero_bytes < first.zero_bytes); // the G maximum is kept
      const jb::EgDims d = jb::eg_dims(c.B, c.M, c.N, c.K, p.a().batch, p.b().batch, pass == Pass::grad_a);
      const jb::EgWorkspace w = jb::eg_workspace(c.B, d, false);
      CHECK(first.zero_bytes == static_cast<std::size_t>(w.zeroed));
      CHECK(second.zero_bytes == static_cast<std::size_t>(w.pass_zeroed));
      CHECK(first.launches[0].entry == "_stats");
      CHECK(second.launches[0].entry == "_stats_second");
      CHECK(second.launches[0].grid[0] == jb::eg_stats_grid(c.B, d, w).col_blocks);
      CHECK(second.launches[0].grid[0] < first.launches[0].grid[0]);
      for (std::size_t i = 1; i < first.launches.size(); ++i) {
        CHECK(second.launches[i].entry == first.launches[i].entry);
        CHECK(std::equal(second.launches[i].grid, second.launches[i].grid + 3, first.launches[i].grid));
      }
      // Both entries are in the module.
      const Rendering r = def.render(spec);
      int stats = 0;
      for (const auto& e : r.entries) stats += e.suffix == "_stats" || e.suffix == "_stats_second";
      CHECK(stats == 2);
    }
  }
  // The other backward strategies have no second form.
  for (const StrategyDef* d : strategy_defs())
    if (d->id != Strategy::exp_matmul || !d->backward) CHECK((d->second_pass_launches == nullptr));
}
