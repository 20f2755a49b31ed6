#include "jitbmm/chain_kbest.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "generator/distribution_source.hpp"
#include "runtime/chain_plan.hpp" // cluster_sms
#include "runtime/device.hpp"
#include "runtime/distribution_checks.hpp"
#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "runtime/scratch.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/kbest_params.cuh"

namespace jitbmm {

static_assert(ChainKBest::kMaxKBest == jb::kMaxKBest && ChainKBest::kMaxKBestStates == jb::kMaxKBestStates,
              "the library's limits are the kernel's");

struct ChainKBest::Impl {
  ChainProblem problem;
  int k = 1;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when B = 0
  std::size_t back = 0;                       // bytes of the back-pointers [B][T − 1][C][k]
  unsigned shared = 0;                        // dynamic shared memory a block
  int cluster = 1;                            // blocks of a sequence (distribution_cluster)
};

namespace {

// The scratch a call takes: the back-pointers.
std::size_t scratch_bytes(const ChainKBest::Impl& im) { return ScratchSize().add(im.back, "workspace").bytes(); }

// A call of either form, its inputs in params: the outputs checked, the back-pointers taken, the kernel launched.
void run_kbest(const ChainKBest::Impl& im, jb::KBestParams& params, const int64_t* lengths, void* scores,
               int32_t* paths, Stream stream, const Workspace& workspace) {
  const ChainProblem& p = im.problem;
  const bool empty = p.B == 0;
  check_pointer(scores, "scores", empty);
  check_alignment(scores, "scores", dtype_info(chain_output_dtype(p)).size_bytes);
  check_alignment(paths, "paths", 4);
  check_workspace(workspace, scratch_bytes(im));
  if (empty) return;
  ScopedContext scope(im.device->context);
  const CUstream cu = reinterpret_cast<CUstream>(stream);
  Scratch scratch(*im.device, workspace, scratch_bytes(im), cu);
  params.lengths = reinterpret_cast<const long long*>(lengths);
  params.scores = scores;
  params.back = static_cast<int*>(scratch.take(im.back));
  params.B = p.B, params.T = p.T;
  params.paths = paths; // null: scores alone
  const int cluster = im.cluster;
  const unsigned grid[3] = {unsigned(std::min<int64_t>(p.B, (int64_t(1) << 30) / cluster) * cluster), 1, 1},
                 block[3] = {unsigned(jb::kbest_threads(int(p.C), cluster)), 1, 1};
  void* args[] = {&params};
  launch(*im.kernel, "", grid, block, args, cu, im.shared);
}

} // namespace

ChainKBest ChainKBest::get(const ChainProblem& problem, int k) {
  check_distribution_problem(problem, Semiring::max_plus, kMaxKBestStates, "the best paths", true);
  if (k < 1 || k > kMaxKBest)
    throw std::invalid_argument("k: the best paths, 1 to " + std::to_string(kMaxKBest) + ", got " + std::to_string(k));
  auto impl = std::make_shared<Impl>();
  impl->problem = problem;
  impl->k = k;
  impl->device = current_device();
  check_supported(*impl->device);
  const int acc = dtype_info(chain_output_dtype(problem)).size_bytes;
  impl->shared = jb::kbest_shared_bytes(int(problem.C), k, acc);
  if (int64_t(impl->shared) > impl->device->max_shared_per_block_optin)
    throw std::invalid_argument("k: " + std::to_string(k) + " paths of " + std::to_string(problem.C) +
                                " states keep " + std::to_string(impl->shared) +
                                " bytes of scores a block, more than this device's " +
                                std::to_string(impl->device->max_shared_per_block_optin));
  impl->back = std::size_t(checked_product({problem.B, problem.T - 1, problem.C, k, 4}, "chain: B*(T-1)*C*k*4"));
  impl->cluster = distribution_cluster(problem.B, int(problem.C), cluster_sms(*impl->device));
  if (problem.B > 0)
    impl->kernel = load_generated(*impl->device, emit_kbest_kernel(problem.dtype, int(problem.C), k, impl->cluster,
                                                                   problem.form == ChainForm::hmm));
  return ChainKBest(std::move(impl));
}

std::size_t ChainKBest::workspace_bytes() const { return scratch_bytes(*impl_); }

void ChainKBest::operator()(const void* potentials, const int64_t* lengths, void* scores, int32_t* paths,
                            Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = impl_->problem;
  check_distribution_inputs(p, potentials, lengths, p.B == 0, p.B == 0 || p.T == 1);
  jb::KBestParams params{};
  params.potentials = potentials;
  run_kbest(*impl_, params, lengths, scores, paths, stream, workspace);
}

void ChainKBest::operator()(const HmmInputs& hmm, const int64_t* lengths, void* scores, int32_t* paths, Stream stream,
                            const Workspace& workspace) const {
  const ChainProblem& p = impl_->problem;
  check_distribution_inputs(p, hmm, lengths, p.B == 0);
  jb::KBestParams params{};
  params.potentials = hmm.transitions;
  params.emissions = hmm.emissions;
  params.initial = hmm.initial;
  const HmmStrides st = hmm_strides(p);
  std::copy(st.emissions, st.emissions + 3, params.emission_strides);
  std::copy(st.transitions, st.transitions + 3, params.transition_strides);
  std::copy(st.initial, st.initial + 2, params.initial_strides);
  run_kbest(*impl_, params, lengths, scores, paths, stream, workspace);
}

const ChainProblem& ChainKBest::problem() const { return impl_->problem; }

int ChainKBest::k() const { return impl_->k; }

std::string ChainKBest::kernel_name() const { return impl_->kernel ? impl_->kernel->generated.name : ""; }

} // namespace jitbmm
