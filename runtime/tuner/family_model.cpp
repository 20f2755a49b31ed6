#include "runtime/tuner/family_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/tuner/search_space.hpp"

namespace jitbmm {

std::vector<Prediction> predict(const std::vector<Decision>& decisions, const Problem& p) {
  struct Sum {
    KernelSpec spec;
    double weight = 0, weighted_log = 0;
    int observations = 0;
  };
  std::map<std::string, Sum> by_variant; // keyed by the fitted spec's text: one entry per variant
  for (const Decision& d : decisions) {
    const Shape measured = d.measured.value_or(d.shape);
    const double terms = static_cast<double>(measured.B) * static_cast<double>(measured.M) *
                         static_cast<double>(measured.N) * static_cast<double>(measured.K);
    const double weight = std::exp2(-bucket_distance(measured, p.shape));
    for (const CandidateResult& c : d.ranking) {
      if (!(c.median_ms > 0)) continue;
      KernelSpec plain = c.spec;
      plain.index64 = false; // a variant is the same whichever index width it needed there
      const std::optional<KernelSpec> spec = fitting(plain, p);
      if (!spec) continue;
      Sum& sum = by_variant[to_string(*spec)];
      sum.spec = *spec;
      sum.weight += weight;
      sum.weighted_log += weight * std::log(terms / (c.median_ms * 1e-3));
      ++sum.observations;
    }
  }
  std::vector<Prediction> out;
  for (const auto& [text, sum] : by_variant)
    out.push_back({sum.spec, std::exp(sum.weighted_log / sum.weight), sum.observations});
  std::stable_sort(out.begin(), out.end(), [](const Prediction& x, const Prediction& y) {
    return x.terms_per_second > y.terms_per_second;
  }); // the map's order (spec text) breaks ties
  return out;
}

std::vector<KernelSpec> model_candidates(const std::vector<Decision>& decisions, const Problem& p,
                                         const KernelSpec& fallback, const std::vector<KernelSpec>& untimed) {
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
                                         const TuningDevice& device, Pass pass, const std::vector<KernelSpec>& space) {
  if (p.precision == Precision::exact) return {};
  Problem exact = p;
  exact.precision = Precision::exact;
  const std::vector<std::string> exact_families = related_families(exact, device, pass);
  for (const Decision& d : decisions)
    if (std::find(exact_families.begin(), exact_families.end(), d.family) == exact_families.end())
      return {}; // a decision made at this precision has had the chance to time them
  std::vector<KernelSpec> out;
  for (const KernelSpec& s : space)
    if (!fitting(s, exact)) out.push_back(s);
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
