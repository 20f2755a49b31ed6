// The flags that describe a chain module and its problem (inspect --chain, bench --chain): --chain C, --hmm (the
// HMM form), --semiring, --dtype, and for bench the batch and length; the spec's own fields by --cluster, --threads,
// --lanes, --beta-lanes and --saving-blocks.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "cli/args.hpp"
#include "cli/spec_args.hpp"
#include "generator/chain_source.hpp"
#include "jitbmm/chain_problem.hpp"

namespace jitbmm::cli {

// A problem's or spec's error ("chain.dtype: ...") addressed to the flag that set the field.
[[noreturn]] inline void throw_for_chain_flag(const std::invalid_argument& e) {
  const std::string message = e.what();
  for (const auto& [field, flag] : {std::pair{"chain.semiring", "--semiring"},
                                    {"chain.dtype", "--dtype"},
                                    {"chain spec.C", "--chain"},
                                    {"chain spec.threads", "--threads"},
                                    {"chain spec.lanes", "--lanes"},
                                    {"chain spec.saving_threads", "--threads"},
                                    {"chain spec.saving_lanes", "--lanes"},
                                    {"chain spec.beta_lanes", "--beta-lanes"},
                                    {"chain spec.saving_blocks", "--saving-blocks"},
                                    {"chain spec.cluster", "--cluster"},
                                    {"chain spec.saving_cluster", "--cluster"}})
    if (message.rfind(field, 0) == 0) throw std::invalid_argument(flag + message.substr(std::strlen(field)));
  throw e;
}

// The problem of --chain C states, --semiring (log) and --dtype (f32), with B sequences of T positions; with --hmm
// in the HMM form (shared transitions and initial table).
inline ChainProblem chain_problem_from(const Args& args, int64_t B, int64_t T) {
  ChainProblem problem;
  problem.semiring = parse_flag(args, "--semiring", "log", parse_semiring);
  problem.dtype = parse_flag(args, "--dtype", "f32", parse_dtype);
  problem.B = B;
  problem.T = T;
  problem.form = args.has("--hmm") ? ChainForm::hmm : ChainForm::crf;
  problem.C = parse_int(args.get("--chain", ""), "--chain", 1, int(kMaxChainStates));
  try {
    check_chain_problem(problem);
  } catch (const std::invalid_argument& e) {
    throw_for_chain_flag(e);
  }
  return problem;
}

// The same with --batch B (32) sequences of --length T (512) positions: what bench, tune and inspect --tuned run.
inline ChainProblem sized_chain_problem_from(const Args& args) {
  const int64_t B = parse_int(args.get("--batch", "32"), "--batch", 1, 1 << 20);
  const int64_t T = parse_int(args.get("--length", "512"), "--length", 1, 1 << 24);
  return chain_problem_from(args, B, T);
}

// `base` (the spec a plan takes, or the rule's without a device), or with --cluster K the rule's blocks for clusters
// of K; then --threads, --lanes, --beta-lanes and --saving-blocks override its fields.
inline ChainSpec chain_spec_from(const Args& args, const ChainProblem& problem, const ChainSpec& base) {
  try {
    ChainSpec spec = base;
    if (args.has("--cluster"))
      spec = clustered_chain_spec(problem, parse_int(args.get("--cluster", ""), "--cluster", 1, kMaxChainCluster));
    // --threads and --lanes set both forwards' blocks (the saving one's backward messages keep their rule).
    if (args.has("--threads"))
      spec.forward.threads = spec.saving.threads = parse_int(args.get("--threads", ""), "--threads", 1, 1024);
    if (args.has("--lanes")) spec.forward.lanes = spec.saving.lanes = parse_int(args.get("--lanes", ""), "--lanes", 1, 32);
    // A loop given its threads or lanes is compiled for one block an SM, the rule's two being for its own loop.
    if (args.has("--threads") || args.has("--lanes")) spec.forward.blocks = spec.saving.blocks = 1;
    if (args.has("--beta-lanes")) spec.beta_lanes = parse_int(args.get("--beta-lanes", ""), "--beta-lanes", 1, 32);
    if (args.has("--saving-blocks"))
      spec.saving.blocks = parse_int(args.get("--saving-blocks", ""), "--saving-blocks", 1, 64);
    check_chain_spec(spec, problem);
    return spec;
  } catch (const std::invalid_argument& e) {
    throw_for_chain_flag(e);
  }
}

} // namespace jitbmm::cli
