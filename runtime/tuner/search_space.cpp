// The tuner's search space: each strategy's variations of its default spec worth timing (its entry in the strategy
// table, generator/strategies/), then what fits the problem and the device, once each.
#include "runtime/tuner/search_space.hpp"

#include <algorithm>
#include <stdexcept>

#include "generator/needed_features.hpp"
#include "generator/strategy.hpp"
#include "runtime/grad_launch.hpp"
#include "support/checked_size.hpp"

namespace jitbmm {

namespace {

// Each strategy's own candidates (its entry in the strategy table), from its default for the problem, in the
// table's order (the order they are compiled, timed and listed). A strategy whose default cannot compute the
// problem (a grid limit: the error names the size) adds nothing.
std::vector<KernelSpec> forward_candidates(const Problem& p) {
  std::vector<KernelSpec> raw;
  for (const StrategyDef* def : strategy_defs()) {
    if (def->backward) continue;
    KernelSpec base;
    try {
      base = default_spec(p, def->id);
    } catch (const std::invalid_argument&) {
      continue;
    }
    for (const KernelSpec& c : def->candidates(base, p)) raw.push_back(c);
  }
  return raw;
}

// A gradient pass's default strategy is the semiring's; every backward strategy adds its candidates, from its own
// defaults for the problem (those that cannot compute it are filtered out below).
std::vector<KernelSpec> grad_candidates(const Problem& p, Pass pass) {
  const KernelSpec base = default_grad_spec(p, pass);
  std::vector<KernelSpec> raw = strategy_def(base).candidates(base, p);
  for (const StrategyDef* def : strategy_defs()) {
    if (!def->backward || def->id == base.strategy) continue;
    KernelSpec spec;
    try {
      spec = default_grad_spec(p, pass, def->id);
    } catch (const std::invalid_argument&) {
      continue;
    }
    for (const KernelSpec& c : def->candidates(spec, p)) raw.push_back(c);
  }
  return raw;
}

} // namespace

std::optional<KernelSpec> fitting(KernelSpec spec, const Problem& p) {
  try {
    check_spec_fits(spec, p);
    return spec;
  } catch (const std::invalid_argument&) {
  }
  try {
    spec.index64 = true; // a variant that only needs wider indices still fits
    check_spec_fits(spec, p);
    return spec;
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

std::vector<KernelSpec> tuning_candidates(const Problem& problem, const DeviceLimits& limits, Pass pass) {
  validate(problem);
  const Problem p = pass == Pass::forward ? problem : grad_problem(problem);
  checked_product({p.shape.B, p.shape.M, p.shape.N}, "shape: B*M*N"); // throws, naming it, when it overflows
  const std::vector<KernelSpec> raw = pass == Pass::forward ? forward_candidates(p) : grad_candidates(p, pass);
  // Keep what fits the problem and the device, once each.
  std::vector<KernelSpec> out;
  for (const KernelSpec& candidate : raw) {
    const std::optional<KernelSpec> spec = fitting(candidate, p);
    if (!spec || spec->threads() > limits.max_threads_per_block) continue;
    if (shared_memory_bytes(*spec) > limits.max_static_shared_bytes) continue; // check_spec_fits allows 48 KiB
    if (!limits.features.has(needed_features(*spec))) continue;
    if (shared_memory_bytes(*spec) + dynamic_shared_memory_bytes(*spec) >
        std::max(limits.max_dynamic_shared_bytes, limits.max_static_shared_bytes))
      continue;
    if (std::find(out.begin(), out.end(), *spec) == out.end()) out.push_back(*spec);
  }
  return out;
}

std::vector<KernelSpec> small_problem_candidates(const std::vector<KernelSpec>& space, const KernelSpec& fallback) {
  std::vector<KernelSpec> out = {fallback};
  for (const KernelSpec& spec : space)
    if ((!spec.is_tiled() || (spec.strategy == Strategy::tiled && spec.tile_m * spec.tile_n <= kLightTileOutputs)) &&
        std::find(out.begin(), out.end(), spec) == out.end())
      out.push_back(spec);
  return out;
}

} // namespace jitbmm
