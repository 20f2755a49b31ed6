// Chain decisions (runtime/tuner/chain_decisions.hpp): what `jitbmm tune --chain` stores and ChainPlan::get reads.
// Their keys separate what the cluster choice depends on and join what it does not, their text round-trips and is
// read strictly, and a damaged entry is moved aside.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "runtime/tuner/chain_decisions.hpp"
#include "tests/temp_dir.hpp"

using namespace jitbmm;

namespace {

const TuningDevice kDevice{"Fake H100", "sm_90", "13.0", 132, 13000};

ChainProblem problem(int64_t B, int64_t T, int64_t C) {
  ChainProblem p;
  p.B = B, p.T = T, p.C = C;
  return p;
}

// Every text of `bad` is refused by the strict decoder.
void check_refused(const std::vector<std::string>& bad) {
  for (const std::string& t : bad) {
    INFO(t);
    CHECK_FALSE(decode_chain_decision(t));
  }
}

// An HMM of 512 sequences of 32 positions and 512 states: where the stepped strategy's forms compete.
ChainProblem hmm512() {
  ChainProblem p = problem(512, 32, 512);
  p.form = ChainForm::hmm;
  return p;
}

ChainDecision sample() {
  return choose_chain_clusters(problem(16, 256, 256),
                               {{1, 3.292, 6.371, 0.715}, {4, 1.222, 2.588, 0.720}, {8, 1.516, 2.939, 0.715}}, 2.5);
}

// `text` with its first `from` replaced by `to` (which must be there).
std::string replaced_in(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

} // namespace

TEST_CASE("chain decisions: the fastest forward and the fastest saving forward + backward, each its own size") {
  const ChainDecision d = sample();
  CHECK(d.forward_cluster == 4);
  CHECK(d.saving_cluster == 4);
  // The two launches may disagree: here the forward is fastest in 8 blocks, the saving forward in 2.
  const ChainDecision split = choose_chain_clusters(
      problem(32, 512, 128), {{2, 1.30, 1.41, 0.73}, {1, 1.78, 1.90, 0.73}, {8, 1.25, 3.7, 0.73}}, 1.0);
  CHECK(split.forward_cluster == 8);
  CHECK(split.saving_cluster == 2);
  CHECK(split.timed.front().cluster == 1); // kept in cluster order
  // max_plus keeps no saving forward: its one launch writes the path, so one size serves both.
  ChainProblem viterbi = problem(32, 512, 128);
  viterbi.semiring = Semiring::max_plus;
  const ChainDecision v = choose_chain_clusters(viterbi, {{2, 1.3, 9.0, 0.1}, {4, 1.1, 1.0, 0.1}}, 1.0);
  CHECK(v.forward_cluster == 4);
  CHECK(v.saving_cluster == 4);
  // Ties go to the smaller cluster.
  CHECK(choose_chain_clusters(problem(4, 8, 64), {{2, 1.0, 1.0, 1.0}, {1, 1.0, 1.0, 1.0}}, 0).forward_cluster == 1);
  CHECK_THROWS_AS(choose_chain_clusters(problem(4, 8, 64), {}, 0), std::invalid_argument);
}

TEST_CASE("chain decisions: the chunked strategy where its saving forward + backward beat the clusters' best") {
  const ChainProblem p = problem(1, 4096, 64);
  const std::vector<ChainTiming> clusters = {{1, 5.14, 5.57, 0.06}};
  // Faster than the sequential kernels' 5.63 in two lengths: the faster one; the forward alone does not decide.
  const ChainDecision d =
      choose_chain_clusters(p, clusters, 1.0, {{4096, 1.01, 0.99, 1.81}, {64, 0.71, 0.68, 1.59}, {128, 0.1, 5.0, 5.0}});
  REQUIRE(d.chunk);
  CHECK(*d.chunk == 64);
  CHECK(d.chunked.front().chunk == 64); // kept in length order
  // Slower, or nothing chunked timed: the sequential kernels, said so.
  CHECK(*choose_chain_clusters(p, clusters, 1.0, {{64, 0.1, 5.0, 1.0}}).chunk == 0);
  CHECK(*choose_chain_clusters(p, clusters, 1.0).chunk == 0);
  // Ties: sequential, then the shorter chunk.
  CHECK(*choose_chain_clusters(p, clusters, 1.0, {{64, 1.0, 5.0, 0.63}}).chunk == 0);
  CHECK(*choose_chain_clusters(p, clusters, 1.0, {{128, 1.0, 2.0, 1.0}, {64, 1.0, 1.0, 2.0}}).chunk == 64);
}

TEST_CASE("chain decisions: the stepped strategy where its saving forward + backward beat every other's") {
  const ChainProblem p = hmm512();
  const std::vector<ChainTiming> clusters = {{1, 6.14, 7.0, 35.0}, {2, 6.5, 6.9, 35.0}}; // 41.9 in clusters of 2
  // Faster than the sequential kernels: taken, with chunk 0; its timing kept.
  const ChainDecision d = choose_chain_clusters(p, clusters, 1.0, {}, SteppedTiming{1.44, 1.6, 2.8});
  REQUIRE(d.stepped);
  CHECK(*d.stepped);
  CHECK(*d.chunk == 0);
  CHECK(d.saving_cluster == 2); // the clusters stay chosen, for what compares the strategies
  REQUIRE(d.stepped_timing);
  CHECK(d.stepped_timing->backward_ms == doctest::Approx(2.8));
  // Slower, tied, or not timed: not taken, said so.
  CHECK_FALSE(*choose_chain_clusters(p, clusters, 1.0, {}, SteppedTiming{1.0, 30.0, 20.0}).stepped);
  CHECK_FALSE(*choose_chain_clusters(p, clusters, 1.0, {}, SteppedTiming{1.0, 6.9, 35.0}).stepped);
  CHECK_FALSE(*choose_chain_clusters(p, clusters, 1.0).stepped);
  // Against the chunked strategy's best: beats it, or ties it and loses.
  const ChainProblem crf = problem(1, 4096, 64);
  const std::vector<ChainTiming> one = {{1, 5.14, 5.57, 0.06}};
  const std::vector<ChunkTiming> chunks = {{64, 0.71, 0.68, 1.59}}; // 2.27
  const ChainDecision beats = choose_chain_clusters(crf, one, 1.0, chunks, SteppedTiming{1.0, 1.0, 1.0});
  CHECK(*beats.stepped);
  CHECK(*beats.chunk == 0);
  CHECK(beats.chunked.size() == 1);
  const ChainDecision ties = choose_chain_clusters(crf, one, 1.0, chunks, SteppedTiming{1.0, 0.68, 1.59});
  CHECK_FALSE(*ties.stepped);
  CHECK(*ties.chunk == 64);
  // Beyond the sequential kernels' states nothing else is timed: the stepped strategy in clusters of 1.
  const ChainDecision wide = choose_chain_clusters(problem(64, 32, 4096), {}, 3.0, {}, SteppedTiming{3.0, 3.5, 8.0});
  CHECK(*wide.stepped);
  CHECK(*wide.chunk == 0);
  CHECK(wide.forward_cluster == 1);
  CHECK(wide.saving_cluster == 1);
  CHECK(wide.timed.empty());
  CHECK_THROWS_WITH_AS(choose_chain_clusters(problem(64, 32, 4096), {}, 0), doctest::Contains("stepped"),
                       std::invalid_argument);
  CHECK_THROWS_AS(choose_chain_clusters(problem(64, 32, 4096), {}, 0, chunks, SteppedTiming{1.0, 1.0, 1.0}),
                  std::invalid_argument);
}

TEST_CASE("chain decisions: the forward's lanes where other lanes beat the rule's in its cluster") {
  // Viterbi at B, T, C = 64, 512, 128 (an H200's sweep): the rule's 16 lanes in clusters of 2 against 4 and 8.
  ChainProblem p = problem(64, 512, 128);
  p.semiring = Semiring::max_plus;
  p.form = ChainForm::hmm;
  const std::vector<ChainTiming> clusters = {{1, 1.20, 0.08, 0.15}, {2, 0.90, 0.10, 0.15}};
  const ChainDecision d = choose_chain_clusters(p, clusters, 1.0, {}, std::nullopt,
                                                {{8, 0.76, 0.09, 0.15}, {4, 0.73, 0.09, 0.15}, {32, 2.0, 0.1, 0.15}});
  CHECK(d.forward_cluster == 2);
  REQUIRE(d.forward_lanes);
  CHECK(*d.forward_lanes == 4);
  CHECK(d.lanes.front().lanes == 4); // kept in lanes order
  // Slower than the rule's, or tied: the rule's, said by none; ties between lanes go to fewer.
  CHECK_FALSE(choose_chain_clusters(p, clusters, 1.0, {}, std::nullopt, {{4, 1.0, 0.1, 0.1}}).forward_lanes);
  CHECK_FALSE(choose_chain_clusters(p, clusters, 1.0, {}, std::nullopt, {{4, 0.9, 0.1, 0.1}}).forward_lanes);
  CHECK(*choose_chain_clusters(p, clusters, 1.0, {}, std::nullopt, {{8, 0.5, 0.1, 0.1}, {2, 0.5, 0.1, 0.1}})
             .forward_lanes == 2);
  // max_plus's kept path is the forward's loop: the sequential kernels are rated with the chosen lanes' time.
  const ChainDecision rated =
      choose_chain_clusters(p, clusters, 1.0, {}, SteppedTiming{0.5, 0.1, 0.1}, {{4, 0.6, 0.05, 0.1}});
  CHECK(*rated.forward_lanes == 4);
  CHECK_FALSE(*rated.stepped); // 0.15 against the stepped strategy's 0.2
  CHECK(*choose_chain_clusters(p, clusters, 1.0, {}, SteppedTiming{0.5, 0.1, 0.1}).stepped); // the rule's: 0.25
  // max_plus's kept path runs in the forward's cluster: its sequential strategy is rated there (clusters of 2: 0.25),
  // not in the cluster of the fastest path alone (1: 0.23).
  CHECK(*choose_chain_clusters(p, clusters, 1.0, {}, SteppedTiming{0.5, 0.1, 0.14}).stepped);
  // log chooses them by its forward alone; its saving forward keeps its own loop.
  const ChainDecision log = choose_chain_clusters(problem(8, 1024, 128), {{1, 1.0, 2.0, 0.5}}, 1.0, {}, std::nullopt,
                                                  {{4, 0.8, 9.0, 0.5}});
  CHECK(*log.forward_lanes == 4);
  CHECK(log.saving_cluster == 1);
  CHECK_THROWS_AS(choose_chain_clusters(problem(64, 32, 4096), {}, 0, {}, SteppedTiming{1.0, 1.0, 1.0},
                                        {{4, 1.0, 1.0, 1.0}}),
                  std::invalid_argument); // lanes without the clusters they run in
}

TEST_CASE("chain decisions: the lanes' lines round-trip and are read strictly") {
  ChainProblem p = problem(64, 512, 128);
  p.semiring = Semiring::max_plus;
  p.form = ChainForm::hmm;
  const ChainDecision d = choose_chain_clusters(p, {{1, 1.20, 0.08, 0.15}, {2, 0.90, 0.10, 0.15}}, 1.0,
                                                {{64, 2.0, 2.0, 2.0}}, SteppedTiming{5.0, 5.0, 5.0},
                                                {{4, 0.73, 0.09, 0.15}, {8, 0.76, 0.09, 0.15}});
  const std::string text = encode_chain_decision(d);
  CHECK(text.find("\nstepped no\nforward_lanes 4\ntimed 1 ") != std::string::npos);
  CHECK(text.find("\nchunked 64 2.00000 2.00000 2.00000\nlanes 4 0.73000 0.09000 0.15000\nlanes 8 ") !=
        std::string::npos);
  const auto back = decode_chain_decision(text);
  REQUIRE(back);
  REQUIRE(back->forward_lanes);
  CHECK(*back->forward_lanes == 4);
  REQUIRE(back->lanes.size() == 2);
  CHECK(back->lanes[1].forward_ms == doctest::Approx(0.76));
  CHECK(encode_chain_decision(*back) == text);
  // Timed but not chosen (the rule's lanes won): no forward_lanes line, the timings kept.
  std::string rule = text;
  rule.erase(rule.find("forward_lanes 4\n"), 16);
  const auto kept = decode_chain_decision(rule);
  REQUIRE(kept);
  CHECK_FALSE(kept->forward_lanes);
  CHECK(kept->lanes.size() == 2);
  auto replaced = [&](const std::string& from, const std::string& to) { return replaced_in(text, from, to); };
  const std::vector<std::string> bad = {
      replaced("forward_lanes 4\n", "forward_lanes 3\n"),  // not a power of two
      replaced("forward_lanes 4\n", "forward_lanes 64\n"), // beyond 32
      replaced("forward_lanes 4\n", "forward_lanes 16\n"), // not among those timed
      replaced("forward_lanes 4\n", "forward_lanes 04\n"), // not as written
      replaced("lanes 8 ", "lanes 4 "),                      // lanes timed twice
      replaced("lanes 8 ", "lanes 0 "),
      replaced("stepped no\nforward_lanes 4\n", "forward_lanes 4\nstepped no\n"), // out of order
      replaced("chunked 64 2.00000 2.00000 2.00000\nlanes 4 0.73000 0.09000 0.15000\n",
               "lanes 4 0.73000 0.09000 0.15000\nchunked 64 2.00000 2.00000 2.00000\n"), // lanes before the chunks
      text.substr(0, text.find("steps ")) + "timed 4 1.00000 1.00000 1.00000\n" +
          text.substr(text.find("steps ")), // a cluster's timing after the lanes'
      replaced("chunk 0\nstepped no\n", ""), // lanes without the strategy's lines they were timed beside
  };
  check_refused(bad);
}

TEST_CASE("chain decisions: keyed by the device, the versions and the problem's bucket") {
  const std::string key = chain_tuning_key(problem(16, 256, 256), kDevice);
  CHECK(key.size() == 64);
  // One bucket: B and T rounded up to powers of two.
  CHECK(chain_tuning_key(problem(9, 129, 256), kDevice) == key);
  // What the choice depends on separates keys.
  std::vector<ChainProblem> others = {problem(17, 256, 256), problem(16, 257, 256), problem(16, 256, 255)};
  for (auto change :
       {+[](ChainProblem& p) { p.semiring = Semiring::max_plus; }, +[](ChainProblem& p) { p.dtype = DType::bf16; },
        +[](ChainProblem& p) { p.form = ChainForm::hmm; },
        // potentials [B][C][T − 1][C]: not the contiguous layout
        +[](ChainProblem& p) {
          p.strides[0] = 255 * 65536, p.strides[1] = 256, p.strides[2] = 65280, p.strides[3] = 1;
        }}) {
    ChainProblem p = problem(16, 256, 256);
    change(p);
    others.push_back(p);
  }
  for (const ChainProblem& p : others) {
    INFO(chain_bucket_text(p));
    CHECK(chain_tuning_key(p, kDevice) != key);
  }
  for (auto change :
       {+[](TuningDevice& d) { d.name = "Fake H200"; }, +[](TuningDevice& d) { d.sm_count = 114; },
        +[](TuningDevice& d) { d.driver_version = 14000; }, +[](TuningDevice& d) { d.nvrtc_version = "13.1"; }}) {
    TuningDevice d = kDevice;
    change(d);
    CHECK(chain_tuning_key(problem(16, 256, 256), d) != key);
  }
  CHECK(chain_bucket_text(problem(9, 129, 256)) == "log f32 crf C=256 B<=16 T<=256 contiguous");
  // The contiguous layout is one bucket whether its strides are given (as jitbmm.torch gives them) or left 0, and
  // lengths or per-sequence tables do not change what a step costs.
  ChainProblem given = problem(16, 256, 256);
  given.strides[0] = 255 * 65536, given.strides[1] = 65536, given.strides[2] = 256, given.strides[3] = 1;
  given.with_lengths = true;
  CHECK(chain_tuning_key(given, kDevice) == key);
  ChainProblem hmm = problem(16, 256, 256), hmm_given = hmm;
  hmm.form = hmm_given.form = ChainForm::hmm;
  hmm_given.batched_initial = true;
  const int64_t emissions[3] = {256 * 256, 256, 1}, transitions[3] = {0, 256, 1}, initial[2] = {256, 1};
  std::copy(emissions, emissions + 3, hmm_given.emission_strides);
  std::copy(transitions, transitions + 3, hmm_given.transition_strides);
  std::copy(initial, initial + 2, hmm_given.initial_strides);
  CHECK(chain_tuning_key(hmm_given, kDevice) == chain_tuning_key(hmm, kDevice));
  hmm_given.emission_strides[1] = 512; // every other position of a longer buffer
  CHECK(chain_tuning_key(hmm_given, kDevice) != chain_tuning_key(hmm, kDevice));
}

TEST_CASE("chain decisions: the text round-trips and is read strictly") {
  const ChainDecision d = sample();
  const std::string text = encode_chain_decision(d);
  const auto back = decode_chain_decision(text);
  REQUIRE(back);
  CHECK(back->forward_cluster == d.forward_cluster);
  CHECK(back->saving_cluster == d.saving_cluster);
  CHECK(back->problem == d.problem);
  REQUIRE(back->timed.size() == 3);
  CHECK(back->timed[1].cluster == 4);
  CHECK(back->timed[1].saving_ms == doctest::Approx(2.588));
  CHECK(encode_chain_decision(*back) == text);
  // Each defect makes it nothing.
  auto replaced = [&](const std::string& from, const std::string& to) { return replaced_in(text, from, to); };
  const std::vector<std::string> bad = {
      "",
      text.substr(0, text.size() - 1),                     // not whole lines
      replaced("forward_cluster 4", "forward_cluster 3"),  // not a power of two
      replaced("forward_cluster 4", "forward_cluster 16"), // beyond kMaxChainCluster
      replaced("saving_cluster 4", "saving_cluster -4"),
      replaced("saving_cluster 4\n", ""), // a line missing
      replaced("seconds 2.500", "seconds nan"),
      replaced("timed 4 1.22200", "timed 4 -1.22200"), // a negative duration
      replaced("timed 8", "timed 4"),                  // a size timed twice
      replaced("timed 8 1.51600 2.93900 0.71500", "timed 8 1.51600 2.93900"),
      replaced("timed 8 1.51600 2.93900 0.71500", "timed 8 1.51600 2.93900 0.71500 1"),
      replaced("timed 8 1.51600", "timed  8 1.51600"), // not as written
      text + "comment\n",
      text.substr(0, text.find("timed ")),                // nothing timed
      replaced("forward_cluster 4", "forward_cluster 2"), // a size not among those timed
      "forward_cluster 4\n" + text,                       // lines out of order
  };
  check_refused(bad);
}

TEST_CASE("chain decisions: the strategy's lines round-trip and are read strictly; one stored before them is read") {
  const ChainDecision d = choose_chain_clusters(problem(1, 4096, 64), {{1, 5.14, 5.57, 0.06}, {2, 5.5, 6.0, 0.06}},
                                                2.0, {{64, 0.71, 0.68, 1.59}, {4096, 1.01, 0.99, 1.81}});
  const std::string text = encode_chain_decision(d);
  CHECK(text.find("\nchunk 64\nstepped no\ntimed 1 ") != std::string::npos);
  const auto back = decode_chain_decision(text);
  REQUIRE(back);
  REQUIRE(back->chunk);
  CHECK(*back->chunk == 64);
  REQUIRE(back->chunked.size() == 2);
  CHECK(back->chunked[1].chunk == 4096);
  CHECK(back->chunked[1].backward_ms == doctest::Approx(1.81));
  CHECK(encode_chain_decision(*back) == text);
  // Stored before strategies were tuned: no chunk or stepped line, no chunked timings; the plan then takes the rule's.
  std::string old = text.substr(0, text.find("chunked "));
  old.erase(old.find("chunk 64\nstepped no\n"), 20);
  const auto before = decode_chain_decision(old);
  REQUIRE(before);
  CHECK_FALSE(before->chunk);
  CHECK(before->chunked.empty());
  auto replaced = [&](const std::string& from, const std::string& to) { return replaced_in(text, from, to); };
  const std::vector<std::string> bad = {
      replaced("chunk 64\n", "chunk 3\n"),   // not a power of two
      replaced("chunk 64\n", "chunk 1\n"),   // below 2
      replaced("chunk 64\n", "chunk 32\n"),  // not among those timed
      replaced("chunk 64\n", "chunk 064\n"), // not as written
      replaced("chunk 64\n", "chunk\n"),
      replaced("chunked 4096", "chunked 64"), // a length timed twice
      replaced("chunked 4096", "chunked 4095"),
      replaced("chunked 4096 1.01000 0.99000 1.81000", "chunked 4096 1.01000 0.99000"),
      replaced("chunk 64\nstepped no\ntimed 1 5.14000 5.57000 0.06000\n",
               "stepped no\ntimed 1 5.14000 5.57000 0.06000\nchunk 64\n"),
      text + "timed 4 1.00000 1.00000 1.00000\n", // a cluster's timing after the chunks'
  };
  check_refused(bad);
}

TEST_CASE("chain decisions: the stepped strategy's lines round-trip and are read strictly; one stored before them is "
          "read") {
  const ChainProblem p = hmm512();
  const ChainDecision d =
      choose_chain_clusters(p, {{1, 6.14, 7.0, 35.0}, {2, 6.5, 6.9, 35.0}}, 4.0, {}, SteppedTiming{1.44, 1.6, 2.8});
  const std::string text = encode_chain_decision(d);
  CHECK(text.find("\nchunk 0\nstepped yes\ntimed 1 ") != std::string::npos);
  CHECK(text.find("\nsteps 1.44000 1.60000 2.80000\n") != std::string::npos);
  const auto back = decode_chain_decision(text);
  REQUIRE(back);
  REQUIRE(back->stepped);
  CHECK(*back->stepped);
  REQUIRE(back->stepped_timing);
  CHECK(back->stepped_timing->saving_ms == doctest::Approx(1.6));
  CHECK(encode_chain_decision(*back) == text);
  // Beyond the sequential kernels' states: no cluster timed, the stepped strategy alone.
  const std::string wide =
      encode_chain_decision(choose_chain_clusters(problem(64, 32, 4096), {}, 3.0, {}, SteppedTiming{3.0, 3.5, 8.0}));
  CHECK(wide.find("timed ") == std::string::npos);
  const auto wide_back = decode_chain_decision(wide);
  REQUIRE(wide_back);
  CHECK(*wide_back->stepped);
  CHECK(wide_back->timed.empty());
  CHECK(encode_chain_decision(*wide_back) == wide);
  // Not taken: stepped no, its timing kept; and no timing where it did not compute the score.
  const std::string lost =
      encode_chain_decision(choose_chain_clusters(p, {{1, 6.14, 7.0, 35.0}}, 4.0, {}, SteppedTiming{1.0, 30.0, 20.0}));
  const auto lost_back = decode_chain_decision(lost);
  REQUIRE(lost_back);
  CHECK_FALSE(*lost_back->stepped);
  CHECK(lost_back->stepped_timing);
  const auto untimed =
      decode_chain_decision(encode_chain_decision(choose_chain_clusters(p, {{1, 6.14, 7.0, 35.0}}, 4.0)));
  REQUIRE(untimed);
  CHECK_FALSE(*untimed->stepped);
  CHECK_FALSE(untimed->stepped_timing);
  // Stored before the stepped strategy was tuned: no stepped line, no steps timing; the plan then takes the rule's.
  std::string old = text.substr(0, text.find("steps "));
  old.erase(old.find("stepped yes\n"), 12);
  const auto before = decode_chain_decision(old);
  REQUIRE(before);
  CHECK_FALSE(before->stepped);
  CHECK_FALSE(before->stepped_timing);
  REQUIRE(before->chunk);
  CHECK(*before->chunk == 0);
  // A decision that timed chunks too.
  const std::string both = encode_chain_decision(choose_chain_clusters(
      problem(1, 4096, 64), {{1, 5.14, 5.57, 0.06}}, 1.0, {{64, 0.71, 0.68, 1.59}}, SteppedTiming{1.0, 1.0, 1.0}));
  REQUIRE(decode_chain_decision(both));
  auto replaced = [&](const std::string& from, const std::string& to) { return replaced_in(text, from, to); };
  const std::vector<std::string> bad = {
      replaced("stepped yes\n", "stepped maybe\n"),
      replaced("stepped yes\n", "stepped 1\n"),
      replaced("stepped yes\n", "stepped\n"),
      replaced("stepped yes\n", "stepped yes\nstepped yes\n"),                      // twice
      replaced("chunk 0\nstepped yes\n", "stepped yes\nchunk 0\n"),                 // out of order
      replaced("chunk 0\nstepped yes\n", "stepped yes\n"),                          // a strategy without its chunk
      replaced_in(both, "chunk 0\n", "chunk 64\n"),                                 // chunked and stepped at once
      text.substr(0, text.find("steps ")),                                          // taken, never timed
      replaced("stepped yes\n", ""),                                                // timed, but no word on it
      replaced("steps 1.44000", "steps -1.44000"),                                  // a negative duration
      replaced("steps 1.44000 1.60000 2.80000", "steps 1.44000 1.60000"),           // a time missing
      replaced("steps 1.44000 1.60000 2.80000", "steps 1 1.44000 1.60000 2.80000"), // a size it has none of
      replaced("steps 1.44000", "steps  1.44000"),                                  // not as written
      text + "steps 1.44000 1.60000 2.80000\n",                                     // twice
      text + "timed 4 1.00000 1.00000 1.00000\n",                                   // a cluster's timing after it
      replaced_in(text.substr(0, text.find("steps ")), "timed 1 ", "steps 1.44000 1.60000 2.80000\ntimed 1 "),
      replaced_in(wide, "forward_cluster 1\n", "forward_cluster 2\n"), // no cluster timed, yet one named
      replaced_in(wide, "stepped yes\n", "stepped no\n"),              // nothing timed is taken
  };
  check_refused(bad);
}

TEST_CASE("chain decisions: the stepped strategy's form is the faster it timed, named only where the fused form was "
          "timed, and read strictly") {
  const ChainProblem p = hmm512();
  const std::vector<ChainTiming> clusters = {{1, 6.14, 7.0, 35.0}};
  // The faster of its products and its fused form (by the saving forward + backward), ties to its products; then
  // the strategy by that form's cost.
  const ChainDecision fused =
      choose_chain_clusters(p, clusters, 4.0, {}, SteppedTiming{0.96, 1.30, 0.35}, {}, SteppedTiming{0.56, 1.13, 0.35});
  REQUIRE(fused.stepped_fused);
  CHECK(*fused.stepped_fused);
  CHECK(*fused.stepped);
  const ChainDecision products =
      choose_chain_clusters(p, clusters, 4.0, {}, SteppedTiming{0.96, 1.10, 0.35}, {}, SteppedTiming{0.56, 1.13, 0.35});
  CHECK_FALSE(*products.stepped_fused);
  CHECK(*products.stepped);
  CHECK_FALSE(*choose_chain_clusters(p, clusters, 4.0, {}, SteppedTiming{1, 1.1, 0.3}, {}, SteppedTiming{1, 1.1, 0.3})
                   .stepped_fused);
  // Its products lost (fused 1.48 beats the sequential 42 only as the stepped strategy's form).
  const ChainDecision slow_products =
      choose_chain_clusters(p, clusters, 4.0, {}, SteppedTiming{9, 40, 9}, {}, SteppedTiming{0.56, 1.13, 0.35});
  CHECK(*slow_products.stepped);
  CHECK(*slow_products.stepped_fused);
  // The fused form alone computed the score; the fused form timed and slower than the sequential kernels.
  const ChainDecision fused_alone =
      choose_chain_clusters(p, clusters, 4.0, {}, std::nullopt, {}, SteppedTiming{1, 1, 1});
  CHECK(*fused_alone.stepped);
  CHECK(*fused_alone.stepped_fused);
  const ChainDecision lost = choose_chain_clusters(p, clusters, 4.0, {}, std::nullopt, {}, SteppedTiming{9, 40, 9});
  CHECK_FALSE(*lost.stepped);
  REQUIRE(lost.stepped_fused);
  // Without the fused form timed no form is named: the plan takes the rule's.
  CHECK_FALSE(choose_chain_clusters(p, clusters, 4.0, {}, SteppedTiming{1, 1, 1}).stepped_fused);

  const std::string text = encode_chain_decision(fused);
  CHECK(text.find("\nchunk 0\nstepped yes\nstepped_form fused\ntimed 1 ") != std::string::npos);
  CHECK(text.find("\nsteps 0.96000 1.30000 0.35000\nfused 0.56000 1.13000 0.35000\n") != std::string::npos);
  for (const ChainDecision& d : {fused, products, slow_products, fused_alone, lost}) {
    const std::string t = encode_chain_decision(d);
    const auto back = decode_chain_decision(t);
    REQUIRE(back);
    CHECK(back->stepped_fused == d.stepped_fused);
    CHECK(back->fused_timing.has_value());
    CHECK(encode_chain_decision(*back) == t);
  }
  // The fused form tried and no candidate (a wrong score): its products named, with their timing alone.
  ChainDecision tried = products;
  tried.fused_timing.reset();
  const std::string tried_text = encode_chain_decision(tried);
  CHECK(tried_text.find("\nstepped_form products\n") != std::string::npos);
  CHECK(tried_text.find("\nfused ") == std::string::npos);
  const auto tried_back = decode_chain_decision(tried_text);
  REQUIRE(tried_back);
  REQUIRE(tried_back->stepped_fused);
  CHECK_FALSE(*tried_back->stepped_fused);
  // Stored before the forms were tuned: no form line and no fused timing; the plan then takes the rule's form.
  std::string old = replaced_in(text.substr(0, text.find("fused 0.56")), "stepped_form fused\n", "");
  const auto before = decode_chain_decision(old);
  REQUIRE(before);
  CHECK(*before->stepped);
  CHECK_FALSE(before->stepped_fused);
  auto replaced = [&](const std::string& from, const std::string& to) { return replaced_in(text, from, to); };
  const std::string products_text = encode_chain_decision(products);
  const std::vector<std::string> bad = {
      replaced("stepped_form fused\n", "stepped_form both\n"),
      replaced("stepped_form fused\n", "stepped_form\n"),
      replaced("stepped_form fused\n", "stepped_form fused\nstepped_form fused\n"),            // twice
      replaced("stepped yes\nstepped_form fused\n", "stepped_form fused\nstepped yes\n"),   // out of order
      replaced("stepped_form fused\n", ""),                                                 // timed, no word on it
      text.substr(0, text.find("fused 0.56")),                                              // named, never timed
      replaced("steps 0.96000 1.30000 0.35000\nfused 0.56000 1.13000 0.35000\n",
               "fused 0.56000 1.13000 0.35000\nsteps 0.96000 1.30000 0.35000\n"),            // out of order
      text + "fused 0.56000 1.13000 0.35000\n",                                              // twice
      replaced("fused 0.56000", "fused 1 0.56000"),                                         // a size it has none of
      replaced_in(products_text, "steps 0.96000 1.10000 0.35000\n", ""), // its products chosen, never timed
      replaced_in(tried_text, "steps 0.96000 1.10000 0.35000\n", ""),     // likewise, the fused form untimed
  };
  check_refused(bad);
}

TEST_CASE("chain decisions: stored, read back, and a damaged one moved aside") {
  TempDir dir("jitbmm-chain-decisions");
  DiskCache disk(dir.path);
  const std::string key = chain_tuning_key(problem(16, 256, 256), kDevice);
  CHECK_FALSE(load_chain_decision(&disk, key));
  CHECK_FALSE(load_chain_decision(nullptr, key));
  put_chain_decision(disk, key, sample());
  const auto back = load_chain_decision(&disk, key);
  REQUIRE(back);
  CHECK(back->forward_cluster == 4);
  // A checksum-valid entry whose text does not parse: nothing, and moved aside so no later process reads it.
  REQUIRE(disk.put(key, "chaintune", "forward_cluster 3\n"));
  CHECK_FALSE(load_chain_decision(&disk, key));
  CHECK_FALSE(disk.get(key, "chaintune"));
  bool set_aside = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path))
    set_aside = set_aside || entry.path().filename().string().find(".bad") != std::string::npos;
  CHECK(set_aside);
}
