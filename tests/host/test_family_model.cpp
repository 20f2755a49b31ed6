// The family model (runtime/tuner/family_model.hpp): predictions from stored timings, independent of the order the
// decisions were made in; the siblings that inform a problem; the decision text's new lines; and the policy replayed
// over twelve shapes of a family in three orders on a stand-in GPU (a synthetic cost for every real candidate), each
// choice within 5% of that GPU's best. The stand-in shows the logic, not a real GPU's figures (scripts/bench-tuner
// measures those).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "runtime/autotune.hpp"
#include "temp_dir.hpp"

using namespace jitbmm;

namespace {

const TuningDevice kDevice{"Fake H100", "sm_90", "13.0", 132, 13000};

Problem log_problem(Shape shape) {
  Problem p;
  p.shape = shape;
  return p;
}

Decision timed(const Problem& p, const std::vector<std::pair<KernelSpec, double>>& ms) {
  TuneReport report;
  for (const auto& [spec, t] : ms) report.candidates.push_back({spec, t, "ok"});
  report.best = ms.front().first;
  Decision d = decision_from(p, kDevice, report);
  d.bucket = true;
  d.shape = shape_bucket(p.shape);
  return d;
}

// The stand-in GPU: 132 SMs; a variant's time is a launch overhead plus waves of its output tiles, each at a rate of
// its own (fixed per variant), so which variant wins depends on the shape (tile quantisation, waves, K).
double stand_in_ms(const KernelSpec& v, const Shape& s) {
  const bool tiles = v.strategy == Strategy::tiled || v.strategy == Strategy::split_k ||
                     v.strategy == Strategy::exp_matmul;
  const int64_t tm = tiles ? v.tile_m : std::max(1, v.threads() / 8), tn = tiles ? v.tile_n : 8;
  const double blocks = double(s.B) * std::ceil(double(s.M) / tm) * std::ceil(double(s.N) / tn);
  const double waves = std::ceil(blocks / 132.0);
  const std::size_t h = std::hash<std::string>{}(to_string(v));
  const double rate = 2e4 * (1.0 + double(h % 1000) / 1000.0); // tile-terms per microsecond
  return 0.004 + waves * double(tm) * double(tn) * double(s.K) / rate * 1e-3;
}

// How choose() decided in a replay: the whole search space, the family model's candidates, or a stored decision.
enum class How { whole, model, small, reused };

// choose()'s cascade under policy bucket, with `cost` (ms of a variant at the problem's shape; < 0 or missing: it
// failed) standing in for autotune's timings. Stores what it decides in `disk`, as choose() does.
std::pair<KernelSpec, How> replay_choice(DiskCache& disk, const Problem& p, const DeviceLimits& limits,
                                         const std::function<double(const KernelSpec&)>& cost) {
  if (auto c = stored_choice(&disk, p, kDevice, TunePolicy::bucket, Pass::forward, {})) return {c->spec, How::reused};
  const std::vector<KernelSpec> space = tuning_candidates(p, limits);
  const std::vector<Decision> related = families_buckets(&disk, related_families(p, kDevice, Pass::forward));
  // A small problem times the default and its light variants, and stores the result for its shape and bucket.
  const bool small = is_small_problem(p);
  std::vector<KernelSpec> timed_specs =
      small ? small_problem_candidates(space, default_spec(p))
            : model_candidates(related, p, default_spec(p), untimed_variants(related, p, space));
  const bool everything = timed_specs.empty();
  if (everything) timed_specs = space;
  TuneReport report;
  for (const KernelSpec& v : timed_specs)
    if (const double ms = cost(v); ms > 0) report.candidates.push_back({v, ms, "ok"});
  REQUIRE(!report.candidates.empty());
  report.best = std::min_element(report.candidates.begin(), report.candidates.end(), [](auto& x, auto& y) {
                  return x.median_ms < y.median_ms;
                })->spec;
  Decision d = decision_from(p, kDevice, report);
  if (everything || small) put_decision(disk, tuning_key(p, kDevice, false), d);
  d.bucket = true;
  d.shape = shape_bucket(p.shape);
  put_decision(disk, tuning_key(p, kDevice, true), d);
  return {report.best, everything ? How::whole : small ? How::small : How::model};
}

// Recorded timings: problem → (spec text → ms), from tests/host/h100_tunes.txt.
std::vector<std::pair<Problem, std::map<std::string, double>>> recorded_tunes(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<std::pair<Problem, std::map<std::string, double>>> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "problem") {
      std::string semiring, dtype, precision, shape;
      words >> semiring >> dtype >> precision >> shape;
      Problem p;
      p.semiring = parse_semiring(semiring);
      p.dtype = parse_dtype(dtype);
      p.precision = parse_precision(precision);
      p.shape = parse_shape(shape);
      out.push_back({p, {}});
    } else {
      REQUIRE(!out.empty());
      std::string spec;
      std::getline(words >> std::ws, spec);
      out.back().second[to_string(parse_spec(spec))] = std::stod(first);
    }
  }
  return out;
}

const DeviceLimits kHopper{1024, 48 * 1024, 227 * 1024, arch_features(90)};

} // namespace

TEST_CASE("a decision's measured shape and reason round-trip, and a decision without them still decodes") {
  const Problem p = log_problem({64, 512, 512, 512});
  Decision d = timed(p, {{default_spec(p), 1.0}});
  d.reason = "family model: 9 variants timed, the best predicted from 3 tuned buckets and the default";
  const auto back = decode_decision(encode_decision(d));
  REQUIRE(back);
  CHECK(back->measured == d.measured);
  CHECK(*back->measured == p.shape);
  CHECK(back->reason == d.reason);
  Decision old = d;
  old.measured.reset();
  old.reason.clear();
  const std::string text = encode_decision(old);
  CHECK(text.find("measured") == std::string::npos);
  const auto older = decode_decision(text);
  REQUIRE(older);
  CHECK_FALSE(older->measured);
  CHECK(older->ranking.size() == 1);
  // Each optional line at most once, and only before the candidates.
  CHECK_FALSE(decode_decision(encode_decision(d) + "measured 1x1x1x1\n"));
}

TEST_CASE("the family model predicts from the nearest timings, whatever order the decisions came in") {
  const Problem here = log_problem({64, 512, 512, 512});
  const KernelSpec a = default_spec(here, Strategy::tiled), b = default_spec(here, Strategy::linear);
  KernelSpec c = a;
  c.min_blocks = 1;
  REQUIRE(a != c);
  // Near (the same shape): b beats a; far (a 64× smaller problem): a beats b by far. The near timings decide.
  const Decision near = timed(here, {{b, 1.0}, {a, 2.0}, {c, 3.0}});
  const Decision far = timed(log_problem({1, 512, 512, 512}), {{a, 0.001}, {c, 0.002}, {b, 1.0}});
  std::vector<Decision> decisions = {near, far};
  const std::vector<Prediction> first = predict(decisions, here);
  REQUIRE(first.size() == 3);
  CHECK(first[0].spec == b);
  CHECK(first[0].observations == 2);
  std::reverse(decisions.begin(), decisions.end());
  const std::vector<Prediction> second = predict(decisions, here);
  REQUIRE(second.size() == first.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    CHECK(second[i].spec == first[i].spec);
    CHECK(second[i].relative_speed == doctest::Approx(first[i].relative_speed));
  }
  // A variant that needed 64-bit indices there is the same variant here.
  Decision wide = far;
  for (CandidateResult& r : wide.ranking) r.spec.index64 = true;
  CHECK(predict({near, wide}, here).size() == 3);
  // Fewer than kModelMinVariants variants: no model, the whole space is tuned.
  CHECK(model_candidates({timed(here, {{a, 1.0}, {b, 2.0}})}, here, default_spec(here)).empty());
  const std::vector<KernelSpec> timed_specs = model_candidates({near}, here, default_spec(here));
  CHECK(std::find(timed_specs.begin(), timed_specs.end(), default_spec(here)) != timed_specs.end());
}

TEST_CASE("a problem learns from its layout siblings, and fast from exact, never exact from fast") {
  Problem p = log_problem({8, 64, 32, 48});
  const std::vector<std::string> exact = related_families(p, kDevice, Pass::forward);
  CHECK(exact.front() == tuning_family(p, kDevice));
  CHECK(exact.size() == 16); // a and b: row- or column-major, broadcast or not
  Problem transposed = p;
  transposed.b_strides = column_major(p.shape.K, p.shape.N);
  CHECK(std::find(exact.begin(), exact.end(), tuning_family(transposed, kDevice)) != exact.end());
  p.precision = Precision::fast;
  const std::vector<std::string> fast = related_families(p, kDevice, Pass::forward);
  CHECK(fast.size() == 32);
  for (const std::string& f : exact) CHECK(std::find(fast.begin(), fast.end(), f) != fast.end());
  CHECK(std::find(exact.begin(), exact.end(), fast.front()) == exact.end()); // exact never learns from fast
  // Different device: nothing shared.
  TuningDevice other = kDevice;
  other.sm_count = 114;
  CHECK(related_families(p, other, Pass::forward).front() != fast.front());
}

TEST_CASE("a new bucket also times what no decision timed: fast's own variants after exact, a new K's chunks") {
  const Problem exact = log_problem({64, 512, 512, 512});
  Problem fast = exact;
  fast.precision = Precision::fast;
  const std::vector<KernelSpec> space = tuning_candidates(fast, kHopper);
  std::vector<KernelSpec> fast_only;
  for (const KernelSpec& s : space)
    if (!fitting(s, exact)) fast_only.push_back(s);
  REQUIRE(fast_only.size() >= 2); // tf32 and wgmma_tf32 tiles
  for (const KernelSpec& s : fast_only) CHECK(single_tf32(s.math));
  std::vector<std::pair<KernelSpec, double>> exact_times;
  for (const KernelSpec& s : tuning_candidates(exact, kHopper)) exact_times.push_back({s, 1.0 + exact_times.size()});
  const std::vector<Decision> from_exact = {timed(exact, exact_times)};
  CHECK(untimed_variants(from_exact, exact, tuning_candidates(exact, kHopper)).empty());
  const std::vector<KernelSpec> untimed = untimed_variants(from_exact, fast, space);
  CHECK(untimed == fast_only);
  const std::vector<KernelSpec> timed_specs = model_candidates(from_exact, fast, default_spec(fast), untimed);
  for (const KernelSpec& s : fast_only)
    CHECK(std::find(timed_specs.begin(), timed_specs.end(), s) != timed_specs.end());
  CHECK(timed_specs.size() <= kModelCandidates + 1 + fast_only.size());
  // Once a decision has timed them (fast at another shape), they are known.
  std::vector<std::pair<KernelSpec, double>> fast_times;
  for (const KernelSpec& s : fast_only) fast_times.push_back({s, 0.5 + fast_times.size()});
  CHECK(untimed_variants({from_exact[0], timed(fast, fast_times)}, fast, space).empty());
  // A longer K brings split_k chunks no shorter-K decision could time.
  Problem max_plus = exact;
  max_plus.semiring = Semiring::max_plus;
  std::vector<std::pair<KernelSpec, double>> short_k;
  for (const KernelSpec& s : tuning_candidates(max_plus, kHopper)) short_k.push_back({s, 1.0});
  Problem long_k = max_plus;
  long_k.shape = {4, 64, 4096, 64};
  const std::vector<KernelSpec> new_chunks =
      untimed_variants({timed(max_plus, short_k)}, long_k, tuning_candidates(long_k, kHopper));
  CHECK(std::any_of(new_chunks.begin(), new_chunks.end(), [](const KernelSpec& s) { return s.k_chunk > 0; }));
}

TEST_CASE("twelve shapes of a family, in three orders, each run within 5% of the stand-in GPU's best") {
  const std::vector<Shape> shapes = {{8, 32, 32, 32},     {64, 512, 512, 512},  {512, 128, 128, 128},
                                     {4, 2048, 2048, 2048}, {64, 64, 1024, 64},  {1, 512, 4096, 512},
                                     {16, 256, 256, 256},   {2, 1024, 1024, 1024}, {128, 64, 64, 64},
                                     {32, 33, 17, 40},      {8, 1000, 300, 700},  {256, 32, 512, 32}};
  std::mt19937 rng(20261123);
  for (int order = 0; order < 3; ++order) {
    TempDir dir;
    DiskCache disk(dir.path);
    REQUIRE(disk.usable());
    std::vector<Shape> visit = shapes;
    std::shuffle(visit.begin(), visit.end(), rng);
    std::map<How, int> how;
    for (const Shape& shape : visit) {
      const Problem p = log_problem(shape);
      double best = 1e300;
      for (const KernelSpec& v : tuning_candidates(p, kHopper)) best = std::min(best, stand_in_ms(v, shape));
      const auto [chosen, by] = replay_choice(disk, p, kHopper, [&](const KernelSpec& v) { return stand_in_ms(v, shape); });
      ++how[by];
      INFO("order " << order << ", " << to_string(shape) << ": " << to_string(chosen));
      CHECK(stand_in_ms(chosen, shape) <= 1.05 * best);
    }
    const auto small =
        std::count_if(shapes.begin(), shapes.end(), [](const Shape& s) { return is_small_problem(log_problem(s)); });
    // Only the family's first shape and the small ones (their light variants; a small shape first leaves the first
    // large one no decision near enough to predict from) time more than the model's candidates.
    CHECK(how[How::whole] + how[How::small] <= 1 + small);
    CHECK(how[How::whole] + how[How::model] + how[How::small] + how[How::reused] == static_cast<int>(shapes.size()));
    MESSAGE("order " << order << ": " << how[How::whole] << " searched everything, " << how[How::model]
                     << " timed the model's candidates, " << how[How::small] << " timed a small problem's light "
                     << "variants, " << how[How::reused] << " reused a near decision");
  }
}

TEST_CASE("the policy replayed on an H100's recorded timings: 13 problems, three orders, within 5% of each best") {
  const auto tunes = recorded_tunes(JITBMM_H100_TUNES);
  REQUIRE(tunes.size() == 13);
  std::mt19937 rng(20261124);
  int slower = 0, runs = 0;
  std::map<How, int> how;
  for (int order = 0; order < 3; ++order) {
    TempDir dir;
    DiskCache disk(dir.path);
    REQUIRE(disk.usable());
    std::vector<std::size_t> visit(tunes.size());
    std::iota(visit.begin(), visit.end(), 0);
    std::shuffle(visit.begin(), visit.end(), rng);
    for (std::size_t i : visit) {
      const auto& [p, ms] = tunes[i];
      const auto cost = [&, &ms = ms](const KernelSpec& v) {
        const auto it = ms.find(to_string(v));
        return it == ms.end() ? -1.0 : it->second;
      };
      int found = 0;
      double best = 1e300;
      for (const KernelSpec& v : tuning_candidates(p, kHopper))
        if (cost(v) > 0) best = std::min(best, cost(v)), ++found;
      CHECK(found == static_cast<int>(ms.size())); // the recording covers today's search space
      const auto [chosen, by] = replay_choice(disk, p, kHopper, cost);
      ++how[by], ++runs;
      if (cost(chosen) > 1.05 * best) {
        ++slower;
        MESSAGE("more than 5% off: order " << order << ", " << describe(p) << ": " << to_string(chosen) << " "
                                            << cost(chosen) << " ms, best " << best << " ms");
      }
    }
  }
  MESSAGE(slower << " of " << runs << " runs more than 5% slower than their problem's best; " << how[How::whole]
                 << " searched everything, " << how[How::model] << " timed the model's candidates, " << how[How::small]
                 << " timed a small problem's light variants, " << how[How::reused] << " reused a near decision");
  // Each order: the first of each family (log f32 fast learns from exact) and the few with no decision within
  // kModelMaxDistance (these 13 problems lie far apart: 3 of them over the three orders); the two 8x32^3 problems
  // time their light variants.
  CHECK(how[How::whole] <= 3 * 4 + 3);
  CHECK(how[How::small] == 3 * 2);
  CHECK(slower == 0);
}
