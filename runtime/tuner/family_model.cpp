#include "runtime/tuner/family_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "runtime/tuner/search_space.hpp"

namespace jitbmm {

namespace {

// A variant a decision timed, as it would run `p`: the same variant whichever index width it needed there.
std::optional<KernelSpec> fitted_here(KernelSpec spec, const Problem& p) {
  spec.index64 = false;
  return fitting(spec, p);
}

} // namespace

std::vector<Prediction> predict(const std::vector<Decision>& decisions, const Problem& p) {
  struct Sum {
    KernelSpec spec;
    double weight = 0, weighted_log = 0;
    int observations = 0;
  };
  std::map<std::string, Sum> by_variant; // keyed by the fitted spec's text: one entry per variant
  for (const Decision& d : decisions) {
    const Shape measured = d.measured.value_or(d.shape);
    const double weight = std::exp2(-bucket_distance(measured, p.shape));
    double best_ms = 0; // the decision's fastest: each variant counts as its speed relative to it
    for (const CandidateResult& c : d.ranking)
      if (c.median_ms > 0 && (best_ms == 0 || c.median_ms < best_ms)) best_ms = c.median_ms;
    for (const CandidateResult& c : d.ranking) {
      if (!(c.median_ms > 0)) continue;
      const std::optional<KernelSpec> spec = fitted_here(c.spec, p);
      if (!spec) continue;
      Sum& sum = by_variant[to_string(*spec)];
      sum.spec = *spec;
      sum.weight += weight;
      sum.weighted_log += weight * std::log(best_ms / c.median_ms);
      ++sum.observations;
    }
  }
  std::vector<Prediction> out;
  for (const auto& [text, sum] : by_variant)
    out.push_back({sum.spec, std::exp(sum.weighted_log / sum.weight), sum.observations});
  std::stable_sort(out.begin(), out.end(), [](const Prediction& x, const Prediction& y) {
    return x.relative_speed > y.relative_speed;
  }); // the map's order (spec text) breaks ties
  return out;
}

std::vector<KernelSpec> model_candidates(const std::vector<Decision>& decisions, const Problem& p,
                                         const KernelSpec& fallback, const std::vector<KernelSpec>& untimed) {
  const Shape& shape = p.shape;
  if (std::none_of(decisions.begin(), decisions.end(), [&](const Decision& d) {
        return bucket_distance(d.measured.value_or(d.shape), shape) <= kModelMaxDistance;
      }))
    return {};
  const std::vector<Prediction> ranked = predict(decisions, p);
  if (ranked.size() < kModelMinVariants) return {};
  std::vector<KernelSpec> out;
  for (std::size_t i = 0; i < ranked.size() && i < kModelCandidates; ++i) out.push_back(ranked[i].spec);
  out.push_back(fallback);
  out.insert(out.end(), untimed.begin(), untimed.end());
  std::vector<KernelSpec> once;
  for (const KernelSpec& s : out)
    if (std::find(once.begin(), once.end(), s) == once.end()) once.push_back(s);
  return once;
}

std::vector<KernelSpec> untimed_variants(const std::vector<Decision>& decisions, const Problem& p,
                                         const std::vector<KernelSpec>& space) {
  std::set<std::string> timed;
  for (const Decision& d : decisions)
    for (const CandidateResult& c : d.ranking)
      if (const std::optional<KernelSpec> spec = fitted_here(c.spec, p)) timed.insert(to_string(*spec));
  std::vector<KernelSpec> out;
  for (const KernelSpec& s : space)
    if (!timed.count(to_string(s))) out.push_back(s);
  return out;
}

std::vector<std::string> related_families(const Problem& p, const TuningDevice& device, Pass pass) {
  std::vector<std::string> out = {tuning_family(p, device, pass)};
  const Shape& s = p.shape;
  std::vector<Problem> precisions = {p};
  if (p.precision == Precision::fast) {
    precisions.push_back(p);
    precisions.back().precision = Precision::exact;
  }
  for (const Problem& base : precisions)
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) {
        Problem q = base;
        q.a_strides = a & 1 ? column_major(s.M, s.K) : row_major(s.M, s.K);
        q.b_strides = b & 1 ? column_major(s.K, s.N) : row_major(s.K, s.N);
        if (a & 2) q.a_strides->batch = 0;
        if (b & 2) q.b_strides->batch = 0;
        const std::string family = tuning_family(q, device, pass);
        if (std::find(out.begin(), out.end(), family) == out.end()) out.push_back(family);
      }
  return out;
}

} // namespace jitbmm
