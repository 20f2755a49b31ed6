// ChainPlan: a chain problem bound to the current device and its generated module (generator/chain_source.hpp).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "runtime/scratch.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

struct ChainPlan::Impl {
  ChainProblem problem;
  ChainSpec spec;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when B = 0 (nothing to launch)
  int64_t strides[4] = {};
};

namespace {

// The pieces of `saved`, each 256-byte aligned: the forward and the backward messages (rel[B][T][C] in the dtype
// and offset[B][T] in double, each), then logz[B] (double).
struct SavedLayout {
  std::size_t messages = 0, offsets = 0, logz = 0;
  std::size_t total() const {
    return ScratchSize().add(messages, "saved").add(messages, "saved").add(offsets, "saved").add(offsets, "saved")
        .add(logz, "saved").bytes();
  }
};
SavedLayout saved_layout(const ChainProblem& p) {
  if (p.semiring != Semiring::log) return {};
  const auto messages = std::size_t(checked_product({p.B, p.T, p.C}, "chain: B*T*C"));
  return {messages * std::size_t(dtype_info(p.dtype).size_bytes), std::size_t(p.B * p.T) * sizeof(double),
          std::size_t(p.B) * sizeof(double)};
}

void point_saved(jb::ChainParams& params, const ChainProblem& p, void* saved) {
  const SavedLayout layout = saved_layout(p);
  char* at = static_cast<char*>(saved);
  auto take = [&](std::size_t bytes) {
    char* piece = at;
    at += ScratchSize().add(bytes, "saved").bytes();
    return piece;
  };
  params.rel = take(layout.messages);
  params.beta_rel = take(layout.messages);
  params.offset = reinterpret_cast<double*>(take(layout.offsets));
  params.beta_offset = reinterpret_cast<double*>(take(layout.offsets));
  params.logz = reinterpret_cast<double*>(take(layout.logz));
}

jb::ChainParams chain_params(const ChainPlan::Impl& im) {
  jb::ChainParams params{};
  params.B = im.problem.B;
  params.T = im.problem.T;
  params.s_b = im.strides[0];
  params.s_t = im.strides[1];
  params.s_c = im.strides[2];
  params.s_p = im.strides[3];
  return params;
}

void check_lengths(const ChainProblem& p, const int64_t* lengths, bool empty) {
  if (p.with_lengths)
    check_pointer(lengths, "lengths", empty);
  else if (lengths)
    throw std::invalid_argument("lengths: given, but the problem was made without with_lengths");
}

// What the forward and the backward share: the inputs aligned, the sizes, strides and the pieces of `saved`.
jb::ChainParams call_params(const ChainPlan::Impl& im, const void* potentials, const int64_t* lengths,
                            const int32_t* path, const void* saved) {
  check_alignment(potentials, "potentials", dtype_info(im.problem.dtype).size_bytes);
  check_alignment(lengths, "lengths", 8);
  check_alignment(path, "path", 4);
  check_alignment(saved, "saved", int(kScratchAlignment));
  jb::ChainParams params = chain_params(im);
  params.potentials = potentials;
  params.lengths = reinterpret_cast<const long long*>(lengths);
  params.path = const_cast<int32_t*>(path);
  if (saved) point_saved(params, im.problem, const_cast<void*>(saved));
  return params;
}

void launch_chain(const ChainPlan::Impl& im, const char* suffix, unsigned blocks, unsigned threads,
                  jb::ChainParams params, CUstream stream, unsigned dynamic_shared = 0) {
  const unsigned grid[3] = {blocks, 1, 1}, block[3] = {threads, 1, 1};
  void* args[] = {&params};
  launch(im.kernel->entry(suffix), grid, block, args, stream, im.kernel->generated.name, suffix, dynamic_shared);
}

} // namespace

ChainPlan ChainPlan::get(const ChainProblem& problem) { return chain_plan_for(problem, default_chain_spec(problem)); }

ChainPlan chain_plan_for(const ChainProblem& problem, const ChainSpec& spec) {
  check_chain_problem(problem);
  // A forward that saves its messages launches two blocks per sequence, and a grid holds fewer than 2^31.
  if (problem.B >= int64_t(1) << 30) throw std::invalid_argument("chain.B: 2^30 sequences or more");
  auto impl = std::make_shared<ChainPlan::Impl>();
  impl->problem = problem;
  impl->spec = spec;
  check_chain_spec(impl->spec, problem);
  chain_strides(problem, impl->strides);
  impl->device = current_device();
  if (problem.B > 0) impl->kernel = load_generated(*impl->device, emit_chain_kernel(impl->spec));
  return ChainPlan(std::move(impl));
}

std::size_t ChainPlan::saved_bytes() const { return saved_layout(impl_->problem).total(); }

std::size_t ChainPlan::workspace_bytes(bool with_path) const {
  const ChainProblem& p = impl_->problem;
  if (!with_path || p.semiring != Semiring::max_plus) return 0;
  return ScratchSize().add(std::size_t(checked_product({p.B, p.T, p.C}, "chain: B*T*C")) * 2, "workspace").bytes();
}

void ChainPlan::operator()(const void* potentials, const int64_t* lengths, void* score, void* saved, void* alpha,
                           int32_t* path, Stream stream, const Workspace& workspace) const {
  const Impl& im = *impl_;
  const ChainProblem& p = im.problem;
  const bool empty = p.B == 0;
  check_pointer(potentials, "potentials", empty || p.T == 1);
  check_pointer(score, "score", empty);
  check_lengths(p, lengths, empty);
  if (path && p.semiring != Semiring::max_plus)
    throw std::invalid_argument("path: only max_plus chains have a best path");
  if (saved && p.semiring != Semiring::log)
    throw std::invalid_argument("saved: only log chains save messages (max_plus's backward reads the path)");
  if (empty) return;
  const int bytes = dtype_info(p.dtype).size_bytes;
  check_alignment(score, "score", bytes);
  check_alignment(alpha, "alpha", bytes);
  jb::ChainParams params = call_params(im, potentials, lengths, path, saved);
  params.score = score;
  params.alpha = alpha;
  ScopedContext scope(im.device->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  const std::size_t back_bytes = workspace_bytes(path != nullptr);
  Scratch scratch(*im.device, workspace, back_bytes, cu_stream);
  params.back = static_cast<unsigned short*>(scratch.take(back_bytes));
  // With saved, "_saving": blocks B to 2B − 1 compute the backward messages alongside.
  const ChainSpec& sp = im.spec;
  if (saved)
    launch_chain(im, "_saving", unsigned(2 * p.B), unsigned(sp.saving.threads), params, cu_stream,
                 std::max(sp.ring_bytes(sp.saving), sp.ring_bytes(sp.beta())));
  else
    launch_chain(im, "", unsigned(p.B), unsigned(sp.forward.threads), params, cu_stream, sp.ring_bytes(sp.forward));
}

void ChainPlan::backward(const void* potentials, const int64_t* lengths, const void* saved, const int32_t* path,
                         const void* grad_score, void* grad_potentials, Stream stream) const {
  const Impl& im = *impl_;
  const ChainProblem& p = im.problem;
  const bool empty = p.B == 0 || p.T == 1;
  const bool log = p.semiring == Semiring::log;
  check_pointer(potentials, "potentials", empty);
  check_pointer(grad_score, "grad_score", p.B == 0);
  check_pointer(grad_potentials, "grad_potentials", empty);
  check_lengths(p, lengths, p.B == 0);
  if (log) {
    check_pointer(saved, "saved", empty);
    if (path) throw std::invalid_argument("path: a log chain's backward reads `saved`, not a path");
  } else {
    check_pointer(path, "path", empty);
    if (saved) throw std::invalid_argument("saved: a max_plus chain's backward reads the path, not `saved`");
  }
  if (empty) return;
  const int bytes = dtype_info(p.dtype).size_bytes;
  check_alignment(grad_score, "grad_score", bytes);
  check_alignment(grad_potentials, "grad_potentials", bytes);
  jb::ChainParams params = call_params(im, potentials, lengths, path, saved);
  params.grad_score = grad_score;
  params.grad = grad_potentials;
  ScopedContext scope(im.device->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  // A block per step, grid-strided beyond what one launch should hold.
  const int64_t steps = p.B * (p.T - 1);
  const unsigned blocks = unsigned(steps < (int64_t(1) << 20) ? steps : (int64_t(1) << 20));
  launch_chain(im, "_backward", blocks, unsigned(im.spec.backward_threads), params, cu_stream);
}

const ChainProblem& ChainPlan::problem() const { return impl_->problem; }

std::string ChainPlan::kernel_name() const { return impl_->kernel ? impl_->kernel->generated.name : ""; }

std::string ChainPlan::device_name() const { return impl_->device->name; }

} // namespace jitbmm
