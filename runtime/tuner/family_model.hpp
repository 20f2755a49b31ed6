// The family model: what a new bucket of a tuned family is timed on, instead of the whole search space.
//
// Every stored decision keeps the timing of every variant it timed (up to kRankingKept) on the shape it was measured
// on. The decisions that inform a problem are its family's and its siblings' (related_families): the same problem in
// the other layouts, and for precision fast the exact family's too (every exact variant is valid at fast, so fast
// is never slower than exact). A variant's speed at a new shape, relative to the best of the decision that timed it
// (so decisions on shapes of any size compare), is predicted as the mean of its observed log-relative speeds
// weighted by 2^-distance (bucket_distance between the shapes): near measurements count most. The prediction
// depends only on the set of stored decisions, never on the order in which they were made. A new bucket times the
// best predicted variants, the default and what no decision timed, and stores the result as the family's newest
// decision, so the family learns from every bucket it meets.
#pragma once

#include <string>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

struct Prediction {
  KernelSpec spec;             // fitted to the problem
  double relative_speed = 0;   // predicted at the problem's shape: 1 = as fast as the best timed with it
  int observations = 0;        // timings it rests on
};

// The variants the decisions timed that fit `problem`, best predicted first (ties by spec text).
std::vector<Prediction> predict(const std::vector<Decision>& decisions, const Problem& problem);

constexpr std::size_t kModelMinVariants = 3; // fewer timed variants that fit: tune the whole search space
constexpr double kModelMaxDistance = 12;      // no decision nearer (bucket_distance): the whole space, too
constexpr std::size_t kModelCandidates = 12; // the most a new bucket times, besides the default and the untimed

// What a new bucket times: the kModelCandidates best predictions, `fallback` (the default spec) and `untimed`
// (untimed_variants); empty (time everything) when fewer than kModelMinVariants variants fit, or when no decision
// lies within kModelMaxDistance (far shapes rank variants too differently to predict from). Small problems
// (is_small_problem) never come here: they time their light variants (small_problem_candidates), since their best
// variant is often one that large shapes rank low.
std::vector<KernelSpec> model_candidates(const std::vector<Decision>& decisions, const Problem& problem,
                                         const KernelSpec& fallback, const std::vector<KernelSpec>& untimed = {});

// The variants of `space` (the problem's search space) that none of the decisions timed, so the model knows nothing
// of them: a variant only precision fast allows when only exact decisions inform fast, a k_chunk a new K brings.
std::vector<KernelSpec> untimed_variants(const std::vector<Decision>& decisions, const Problem& problem,
                                         const std::vector<KernelSpec>& space);

// The families whose decisions inform `problem`'s (its own first): a and b each row- or column-major and each
// broadcast over the batch or not, with the problem's own output layout; for precision fast the same at exact.
std::vector<std::string> related_families(const Problem& problem, const TuningDevice& device, Pass pass);

} // namespace jitbmm
