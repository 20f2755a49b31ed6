// jitbmm inspect --chain C --expectation [--field F] | --kbest K | --samples (cli/inspect_distributions.hpp).
#include "cli/inspect_distributions.hpp"

#include <stdexcept>

#include "cli/chain_args.hpp"
#include "cli/spec_args.hpp"
#include "generator/arch_features.hpp"
#include "generator/distribution_source.hpp"
#include "runtime/kernel_files.hpp"
#include "templates/chain/expect_params.cuh"
#include "templates/chain/kbest_params.cuh"
#include "templates/chain/sample_params.cuh"

namespace jitbmm::cli {

namespace {

// The structured distributions' modules take no device: one block per sequence unless --cluster says otherwise (a
// plan's rule takes clusters from 128 states on sm_90).
int distribution_cluster_from(const Args& args, const std::string& arch) {
  if (!args.has("--cluster")) return 1;
  const int cluster = parse_int(args.get("--cluster", ""), "--cluster", 1, jb::kMaxExpectCluster);
  if (cluster > 1 && !arch_features(parse_sm(arch, "--arch")).has(kClusters))
    throw std::invalid_argument("--cluster: needs " + missing_features(kClusters, {}) + ", which --arch " + arch +
                                " lacks");
  return cluster;
}

// --field: the expectation's field kind, the given field (entropy), a chain q (cross-entropy) or the difference p − q
// (KL), as jitbmm.torch's fused forms take them.
int expectation_field_from(const Args& args) {
  const std::string field = args.get("--field", "given");
  if (field == "given") return jb::kExpectGiven;
  if (field == "chain") return jb::kExpectChain;
  if (field == "difference") return jb::kExpectDifference;
  throw std::invalid_argument("--field: given, chain or difference, got '" + field + "'");
}

// The generator's refusal, named by the flag that gave the value it names (C: --chain; k: --kbest; the cluster).
[[noreturn]] void refused(const std::invalid_argument& e) {
  const std::string why = e.what();
  throw std::invalid_argument((why.rfind("k: ", 0) == 0       ? "--kbest: "
                               : why.rfind("cluster", 0) == 0 ? "--"
                                                              : "--chain: ") +
                              why);
}

} // namespace

bool distribution_module(const Args& args, const std::string& arch, GeneratedKernel& kernel, int& threads) {
  if (!args.has("--chain")) return false;
  if (args.has("--expectation")) { // the form, the dtype, C, the field and the cluster
    args.require_only({"--chain", "--expectation", "--hmm", "--field", "--dtype", "--cluster", "--emit", "--arch"},
                      "inspect --chain --expectation");
    const ChainProblem problem = chain_problem_from(args, 1, 2);
    const int field = expectation_field_from(args);
    const int cluster = distribution_cluster_from(args, arch);
    try {
      kernel = with_override(
          emit_expect_kernel(problem.dtype, int(problem.C), cluster, field, problem.form == ChainForm::hmm));
    } catch (const std::invalid_argument& e) {
      refused(e);
    }
    threads = jb::expect_threads(int(problem.C), dtype_info(problem.dtype).wide_acc(), cluster);
    return true;
  }
  if (args.has("--kbest")) { // the form, the dtype, C, k and the cluster
    args.require_only({"--chain", "--kbest", "--hmm", "--dtype", "--cluster", "--emit", "--arch"},
                      "inspect --chain --kbest");
    const ChainProblem problem = chain_problem_from(args, 1, 2);
    const std::string k = args.get("--kbest", "");
    if (k.empty() || k.size() > 3 || k.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("--kbest: the best paths kept, an integer from 1 to 16, got '" + k + "'");
    const int cluster = distribution_cluster_from(args, arch);
    try {
      kernel = with_override(
          emit_kbest_kernel(problem.dtype, int(problem.C), std::stoi(k), cluster, problem.form == ChainForm::hmm));
    } catch (const std::invalid_argument& e) {
      refused(e);
    }
    threads = jb::kbest_threads(int(problem.C), cluster);
    return true;
  }
  if (args.has("--samples")) { // the dtype and C (the chain's forward messages come from a chain plan's forward; the
                               // module reads either form's rows at their strides)
    args.require_only({"--chain", "--samples", "--dtype", "--emit", "--arch"}, "inspect --chain --samples");
    const ChainProblem problem = chain_problem_from(args, 1, 2);
    try {
      kernel = with_override(emit_sample_kernel(problem.dtype, int(problem.C)));
    } catch (const std::invalid_argument& e) {
      refused(e);
    }
    threads = jb::kSampleThreads;
    return true;
  }
  return false;
}

} // namespace jitbmm::cli
