// jitbmm tune: autotune one problem on this GPU, store the decision (exact shape and its bucket), print the
// candidates compared; with --chain, a chain problem's cluster sizes (cli/tune_chain.cpp).
#include <cstdio>

#include "cache/disk_cache.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "runtime/autotune.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm::cli {

int run_tune(int argc, char** argv) {
  const Args args(argc, argv, 2,
                  {"--semiring", "--dtype", "--out-dtype", "--shape", "--pass", "--precision", "--a-layout",
                   "--b-layout", "--data", "--chain", "--batch", "--length", "--reps"},
                  {"--argmax", "--hmm"});
  if (args.has("--chain")) {
    args.require_only({"--chain", "--hmm", "--semiring", "--dtype", "--batch", "--length", "--reps"}, "tune --chain");
    return run_chain_tune(args);
  }
  args.require_only({"--semiring", "--dtype", "--out-dtype", "--shape", "--pass", "--precision", "--a-layout",
                     "--b-layout", "--data", "--argmax"},
                    "tune");
  const Problem p = problem_from(args, "tune");
  const Pass pass = parse_flag(args, "--pass", "forward", parse_pass);
  // --data wide: the variant a plan moves to when its repairs show wide-range data (runtime/repair_watch.hpp).
  const InputRange range = parse_input_range(args.get("--data", "normal"));
  if (range == InputRange::wide && pass != Pass::forward)
    throw std::invalid_argument("--data: wide-range tuning is for the forward pass only, not --pass " +
                                std::string(pass_name(pass)));
  const auto device = current_device();
  const TuneReport report = autotune(p, *device, true, pass, {}, range);
  store_decision(p, *device, report, true, pass, true, range);
  if (DiskCache* disk = DiskCache::process_cache())
    std::printf("decision stored in %s (exact shape and bucket %s)\n", disk->dir().c_str(),
                to_string(shape_bucket(p.shape)).c_str());
  std::printf("%10s  %s\n", "median ms", "candidate");
  for (const CandidateResult& c : report.candidates)
    std::printf("%10.4f  %s%s\n", c.median_ms, to_string(c.spec).c_str(),
                c.status == "ok" ? "" : ("  [" + c.status + "]").c_str());
  std::printf("best: %s\n", to_string(report.best).c_str());
  return 0;
}

} // namespace jitbmm::cli
