#include "jitbmm/chain_samples.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "generator/distribution_source.hpp"
#include "jitbmm/chain.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/distribution_checks.hpp"
#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "runtime/scratch.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/sample_params.cuh"

namespace jitbmm {

struct ChainSampler::Impl {
  ChainProblem problem;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when B = 0
  std::shared_ptr<const ChainPlan> forward;   // the forward messages' plan
  std::size_t alpha = 0, score = 0;           // bytes of alpha [B][T][C] and score [B] in the output dtype
  long long row_strides[4] = {};              // the rows a draw reads (jb::SampleParams): potentials or transitions
};

ChainSampler ChainSampler::get(const ChainProblem& problem) {
  check_distribution_problem(problem, Semiring::log, kMaxChainStates, "samples", true);
  auto impl = std::make_shared<Impl>();
  impl->problem = problem;
  impl->device = current_device();
  check_supported(*impl->device);
  const std::size_t acc = std::size_t(dtype_info(chain_output_dtype(problem)).size_bytes);
  impl->alpha = std::size_t(checked_product({problem.B, problem.T, problem.C}, "chain: B*T*C")) * acc;
  impl->score = std::size_t(problem.B) * acc;
  if (problem.form == ChainForm::hmm) { // the transitions, the same rows at every step
    const HmmStrides st = hmm_strides(problem);
    const long long strides[4] = {st.transitions[0], 0, st.transitions[1], st.transitions[2]};
    std::copy(strides, strides + 4, impl->row_strides);
  } else {
    int64_t st[4];
    chain_strides(problem, st);
    std::copy(st, st + 4, impl->row_strides);
  }
  // Without a stand-in: a seed draws the same paths whenever it is drawn, and a stand-in's messages round otherwise.
  impl->forward = std::make_shared<const ChainPlan>(settled_chain_plan(problem));
  if (problem.B > 0) impl->kernel = load_generated(*impl->device, emit_sample_kernel(problem.dtype, int(problem.C)));
  return ChainSampler(std::move(impl));
}

std::size_t ChainSampler::workspace_bytes() const {
  return ScratchSize()
      .add(impl_->alpha, "workspace")
      .add(impl_->score, "workspace")
      .add(impl_->forward->workspace_bytes(false), "workspace")
      .bytes();
}

void ChainSampler::operator()(const void* potentials, const int64_t* lengths, int64_t n, uint64_t seed, int32_t* paths,
                              Stream stream, const Workspace& workspace) const {
  draw(potentials, nullptr, lengths, n, seed, nullptr, paths, stream, workspace);
}

void ChainSampler::operator()(const HmmInputs& hmm, const int64_t* lengths, int64_t n, uint64_t seed, int32_t* paths,
                              Stream stream, const Workspace& workspace) const {
  draw(nullptr, &hmm, lengths, n, seed, nullptr, paths, stream, workspace);
}

void ChainSampler::with_device_seed(const void* potentials, const int64_t* lengths, int64_t n,
                                    const uint64_t* seed_on_device, int32_t* paths, Stream stream,
                                    const Workspace& workspace) const {
  check_device_seed(seed_on_device, n);
  draw(potentials, nullptr, lengths, n, 0, seed_on_device, paths, stream, workspace);
}

void ChainSampler::with_device_seed(const HmmInputs& hmm, const int64_t* lengths, int64_t n,
                                    const uint64_t* seed_on_device, int32_t* paths, Stream stream,
                                    const Workspace& workspace) const {
  check_device_seed(seed_on_device, n);
  draw(nullptr, &hmm, lengths, n, 0, seed_on_device, paths, stream, workspace);
}

void ChainSampler::check_device_seed(const uint64_t* seed_on_device, int64_t n) const {
  check_pointer(seed_on_device, "seed_on_device", impl_->problem.B == 0 || n == 0);
  check_alignment(seed_on_device, "seed_on_device", 8);
}

void ChainSampler::draw(const void* potentials, const HmmInputs* hmm, const int64_t* lengths, int64_t n, uint64_t seed,
                        const uint64_t* seed_on_device, int32_t* paths, Stream stream,
                        const Workspace& workspace) const {
  const ChainProblem& p = impl_->problem;
  if (n < 0) throw std::invalid_argument("n: the paths to draw, at least 0 (got " + std::to_string(n) + ")");
  checked_product({p.B, n, p.T, 4}, "paths: B*n*T*4 bytes");
  const bool empty = p.B == 0 || n == 0;
  if (hmm)
    check_distribution_inputs(p, *hmm, lengths, empty);
  else
    check_distribution_inputs(p, potentials, lengths, empty, empty || p.T == 1);
  check_pointer(paths, "paths", empty);
  check_alignment(paths, "paths", 4);
  check_workspace(workspace, workspace_bytes());
  if (empty) return;
  ScopedContext scope(impl_->device->context);
  const CUstream cu = reinterpret_cast<CUstream>(stream);
  Scratch scratch(*impl_->device, workspace, workspace_bytes(), cu);
  jb::SampleParams params{};
  params.alpha = scratch.take(impl_->alpha);
  params.score = scratch.take(impl_->score);
  const Workspace forward_ws{scratch.take(impl_->forward->workspace_bytes(false)),
                             impl_->forward->workspace_bytes(false)};
  void *score = const_cast<void*>(params.score), *alpha = const_cast<void*>(params.alpha);
  if (hmm)
    (*impl_->forward)(*hmm, lengths, score, nullptr, alpha, nullptr, stream, forward_ws);
  else
    (*impl_->forward)(potentials, lengths, score, nullptr, alpha, nullptr, stream, forward_ws);
  params.rows = hmm ? hmm->transitions : potentials;
  std::copy(impl_->row_strides, impl_->row_strides + 4, params.row_strides);
  params.lengths = reinterpret_cast<const long long*>(lengths);
  params.paths = paths;
  params.seed = seed;
  params.seed_at = reinterpret_cast<const unsigned long long*>(seed_on_device);
  params.B = p.B, params.T = p.T, params.n = n;
  const int64_t warps_per_block = jb::kSampleThreads / 32, blocks = (p.B * n + warps_per_block - 1) / warps_per_block;
  const unsigned grid[3] = {unsigned(std::min<int64_t>(blocks, int64_t(1) << 30)), 1, 1},
                 block[3] = {unsigned(jb::kSampleThreads), 1, 1};
  void* args[] = {&params};
  launch(*impl_->kernel, "", grid, block, args, cu);
}

const ChainProblem& ChainSampler::problem() const { return impl_->problem; }

std::string ChainSampler::kernel_name() const { return impl_->kernel ? impl_->kernel->generated.name : ""; }

} // namespace jitbmm
