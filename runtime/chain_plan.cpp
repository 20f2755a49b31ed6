// ChainPlan: a chain problem bound to the current device and its generated module (generator/chain_source.hpp).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/chain_plan_impl.hpp"
#include "runtime/chain_sequential.hpp"
#include "runtime/chain_stand_in.hpp"
#include "runtime/chain_stepped.hpp"
#include "runtime/device.hpp"
#include "runtime/distribution_checks.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "runtime/scratch.hpp"
#include "runtime/tuner/build_ahead.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

using namespace chain_detail;

namespace {

// The pieces of `saved`, back to back: the forward and the backward messages (rel[B][T][C] in the accumulator's
// dtype, each), their offsets (offset[B][T] in double, each), then logz[B] (double). Every piece starts aligned for
// its elements (two message pieces make a multiple of 8 bytes) and none leaves a gap, so the saving forward writes
// every byte: a caller's buffer needs no clearing for its content not to vary.
struct SavedLayout {
  std::size_t messages = 0, offsets = 0, logz = 0;
  std::size_t total() const {
    int64_t bytes = 0;
    for (const std::size_t piece : {messages, messages, offsets, offsets, logz})
      bytes = checked_add(bytes, int64_t(piece), "chain: saved");
    return std::size_t(bytes);
  }
};
SavedLayout saved_layout(const ChainProblem& p) {
  if (p.semiring != Semiring::log) return {};
  const int64_t messages = checked_product({p.B, p.T, p.C, dtype_info(p.dtype).acc_bytes}, "chain: saved");
  return {std::size_t(messages), std::size_t(p.B * p.T) * sizeof(double), std::size_t(p.B) * sizeof(double)};
}

// The alignment a caller's `saved` needs: its widest load, a float4 of the fused steps' messages (every piece keeps
// its offset from the start, so the start's alignment is every piece's). XLA's buffers are aligned to at least this.
constexpr int kSavedAlignment = 16;

void point_saved(jb::ChainParams& params, const ChainProblem& p, void* saved) {
  const SavedLayout layout = saved_layout(p);
  char* at = static_cast<char*>(saved);
  auto take = [&](std::size_t bytes) {
    char* piece = at;
    at += bytes;
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
  params.e_b = im.hmm.emissions[0];
  params.e_t = im.hmm.emissions[1];
  params.e_c = im.hmm.emissions[2];
  params.i_b = im.hmm.initial[0];
  params.i_c = im.hmm.initial[1];
  params.batched_transitions = im.problem.batched_transitions;
  params.batched_initial = im.problem.batched_initial;
  return params;
}

jb::ChainParams call_params(const ChainPlan::Impl& im, const void* potentials, const int64_t* lengths,
                            const int32_t* path, const void* saved) {
  check_alignment(potentials, "potentials", dtype_info(im.problem.dtype).size_bytes);
  jb::ChainParams params = chain_params(im);
  params.potentials = potentials;
  attach(params, im.problem, lengths, path, saved);
  return params;
}

// A plan's problem, spec, strides and device, before its strategy's kernels.
std::shared_ptr<ChainPlan::Impl> plan_impl(const ChainProblem& problem, const ChainSpec& spec) {
  auto impl = std::make_shared<ChainPlan::Impl>();
  impl->problem = problem;
  impl->spec = spec;
  chain_strides(problem, impl->strides);
  if (problem.form == ChainForm::hmm) {
    impl->hmm = hmm_strides(problem);
    const int64_t* tr = impl->hmm.transitions;
    impl->strides[0] = tr[0];
    impl->strides[1] = 0;
    impl->strides[2] = tr[1];
    impl->strides[3] = tr[2];
  }
  impl->device = current_device();
  return impl;
}

} // namespace

namespace chain_detail {

// What a backward reads of its forward: log its `saved`, max_plus its best path.
void check_backward_reads(const ChainProblem& p, const void* saved, const int32_t* path, bool empty) {
  if (p.semiring == Semiring::log) {
    check_pointer(saved, "saved", empty);
    if (path) throw std::invalid_argument("path: a log chain's backward reads `saved`, not a path");
  } else {
    check_pointer(path, "path", empty);
    if (saved) throw std::invalid_argument("saved: a max_plus chain's backward reads the path, not `saved`");
  }
}

void check_form(const ChainProblem& p, ChainForm form) {
  if (p.form == form) return;
  if (form == ChainForm::hmm)
    throw std::invalid_argument("hmm: the plan's problem has the crf form (pass the potentials)");
  throw std::invalid_argument("potentials: the plan's problem has the hmm form (pass HmmInputs)");
}

// The HMM form's tables as the kernels read them: the transitions in the potentials' place.
jb::ChainParams hmm_params(const ChainPlan::Impl& im, const HmmInputs& hmm, bool empty) {
  check_hmm_tables(im.problem, hmm, empty);
  jb::ChainParams params = chain_params(im);
  params.potentials = hmm.transitions;
  params.emissions = hmm.emissions;
  params.initial = hmm.initial;
  return params;
}

void check_lengths(const ChainProblem& p, const int64_t* lengths, bool empty) {
  if (p.with_lengths)
    check_pointer(lengths, "lengths", empty);
  else if (lengths)
    throw std::invalid_argument("lengths: given, but the problem was made without with_lengths");
}

// What the forward and the backward share: the inputs aligned, the sizes, strides and the pieces of `saved`.
// The lengths, the best path and the pieces of `saved` into params, each aligned as its elements need.
void attach(jb::ChainParams& params, const ChainProblem& p, const int64_t* lengths, const int32_t* path,
            const void* saved) {
  check_alignment(lengths, "lengths", 8);
  check_alignment(path, "path", 4);
  check_alignment(saved, "saved", kSavedAlignment);
  params.lengths = reinterpret_cast<const long long*>(lengths);
  params.path = const_cast<int32_t*>(path);
  if (saved) point_saved(params, p, const_cast<void*>(saved));
}

CallHold::CallHold(const ChainPlan::Impl& im, Stream stream)
    : scope_(im.device->context), hold_(stream_is_capturing(reinterpret_cast<CUstream>(stream))) {}

} // namespace chain_detail

namespace {

// The strategy of a plan (chain_plan_for's arguments) on `device`, each argument checked, made as `build` says
// (runtime/chain_strategy.hpp).
std::shared_ptr<const ChainStrategy> strategy_for(const ChainProblem& problem, const ChainSpec& given, int64_t chunk,
                                                  bool tune_products, bool stepped, StepKernel steps,
                                                  const std::shared_ptr<const DeviceInfo>& device,
                                                  StrategyBuild build = StrategyBuild::kernels) {
  ChainSpec spec = given; // its ring within this device's shared memory
  spec.shared_limit = device->max_shared_per_block_optin;
  if (!stepped && steps != StepKernel::rule)
    throw std::invalid_argument("steps: a form of the stepped strategy, which this plan does not take");
  if (stepped) {
    if (chunk != 0) throw std::invalid_argument("chunk: the stepped strategy takes no chunks");
    // A launch a position; no sequence launches none. (Beyond kMaxSequentialChainStates check_chain_problem refuses
    // such a problem, the stepped strategy being the only one there.)
    if (problem.T > kMaxSteppedChainLength && problem.B > 0)
      throw std::invalid_argument("chain.T: the stepped strategy takes at most 2^24 positions (got " +
                                  std::to_string(problem.T) + ")");
    return std::make_shared<const SteppedChain>(problem, device, tune_products, steps, build);
  }
  if (chunk != 0) // first: beyond the sequential kernels' states the chunks say why, not the spec
    if (const std::string why = chunk_unfit(problem, chunk); !why.empty()) throw std::invalid_argument(why);
  check_chain_spec(spec, problem);
  // A forward that saves its messages launches two clusters per sequence (kMaxChainSequences).
  const int cluster = std::max(spec.forward.cluster, spec.saving.cluster);
  if (problem.B > kMaxChainSequences / cluster)
    throw std::invalid_argument("chain.B: 2^30 sequences / " + std::to_string(cluster) +
                                " (the blocks of a cluster) or more");
  if (cluster > 1 && cluster_sms(*device) == 0)
    throw std::invalid_argument("chain spec.cluster: needs " + missing_features(kClusters, {}) +
                                ", which this device lacks (" + device->arch_and_level() + ")");
  // log: its chain of chunks in the sequential kernels (chunks of its own would take uncounted scratch); max_plus
  // runs its own.
  const bool top = chunk != 0 && problem.semiring == Semiring::log && build != StrategyBuild::sizes;
  const ChainProblem top_problem = top ? chain_of_chunks(problem, chunk) : ChainProblem{};
  ChainSpec top_spec = top ? chosen_chain_spec(top_problem, *device) : ChainSpec{};
  top_spec.shared_limit = spec.shared_limit;
  if (chunk != 0 && build == StrategyBuild::kernels && problem.B > 0) {
    // Every kernel of the plan at once: the chunks' module and products, the sequential kernels beside them and the
    // chain of chunks', which the parts made below would otherwise build one part after the other.
    std::vector<GeneratedKernel> units = emit_chain_units(spec);
    if (top)
      for (GeneratedKernel& unit : emit_chain_units(top_spec)) units.push_back(std::move(unit));
    std::vector<KernelSpec> specs;
    chunked_kernels_ahead(problem, chunk, *device, tune_products, units, specs);
    build_ahead(*device, units, specs);
  }
  auto sequential = std::make_shared<const SequentialChain>(problem, spec, device, build);
  if (chunk == 0) return sequential;
  std::optional<ChainPlan> top_plan;
  if (top) top_plan = chain_plan_for(top_problem, top_spec);
  return std::make_shared<const ChunkedChain>(problem, chunk, top_plan, device, tune_products, sequential, build);
}

// ChainPlan::get's plan, with a stand-in where `stand_in` allows one.
std::shared_ptr<ChainPlan::Impl> chosen_plan(const ChainProblem& problem, bool stand_in) {
  check_chain_problem(problem);
  const auto device = current_device();
  check_supported(*device); // at once, not as the first kernel's compile error
  const ChainChoice choice = choose_chain_spec(problem, *device);
  const StepKernel steps = choice.stepped ? choice.steps : StepKernel::rule;
  auto impl = plan_impl(problem, choice.stepped ? ChainSpec{} : choice.spec);
  const auto make = [=](StrategyBuild build) {
    return strategy_for(problem, choice.spec, choice.chunk, false, choice.stepped, steps, device, build);
  };
  // A strategy whose kernels compile in well under a second, as quick builds (runtime/jit.hpp), stands in for the
  // chosen one while that is built: for the sequential strategy its own kernels; for the chunked strategy the
  // sequential kernels (up to 128 states there); for the stepped strategy its products' form in the products'
  // default variants' smallest tile, where its fused passes, its exp_matmul products and the sequential kernels of
  // hundreds of states (the HMM form's log module) each compile for seconds. Where NVRTC has no quick build, the
  // sequential strategy's stand-in would be itself: it has none. A plan with a stand-in announces the larger of the
  // two strategies' workspaces, the chosen one's as its sizes say before it is built.
  if (stand_in && (choice.stepped || choice.chunk != 0 || nvrtc_compiles_fast()) && problem.B > 0)
    impl->strategy = chosen_or_stand_in(
        problem, device, [=] { return make(StrategyBuild::kernels); },
        [&]() -> std::shared_ptr<const ChainStrategy> {
          if (choice.stepped)
            return std::make_shared<const SteppedChain>(problem, device, false, StepKernel::products,
                                                        StrategyBuild::quick);
          return strategy_for(problem, choice.spec, 0, false, false, StepKernel::rule, device, StrategyBuild::quick);
        },
        [&] { return make(StrategyBuild::sizes); },
        // The chunked strategy's log keeps its chunks' products in `saved`, the sequential kernels their messages.
        choice.chunk == 0 || problem.semiring != Semiring::log);
  else
    impl->strategy = make(StrategyBuild::kernels);
  return impl;
}

} // namespace

ChainPlan ChainPlan::get(const ChainProblem& problem) { return ChainPlan(chosen_plan(problem, stand_in_enabled())); }

ChainPlan settled_chain_plan(const ChainProblem& problem) { return ChainPlan(chosen_plan(problem, false)); }

ChainPlan chain_plan_for(const ChainProblem& problem, const ChainSpec& spec, int64_t chunk, bool tune_products,
                         bool stepped, StepKernel steps) {
  check_chain_problem(problem);
  auto impl = plan_impl(problem, stepped ? ChainSpec{} : spec);
  impl->strategy = strategy_for(problem, spec, chunk, tune_products, stepped, steps, impl->device);
  return ChainPlan(std::move(impl));
}

std::size_t ChainPlan::saved_bytes() const { return saved_layout(impl_->problem).total(); }

std::size_t chain_saved_bytes(const ChainProblem& problem) {
  check_chain_problem(problem);
  return saved_layout(problem).total();
}

std::size_t ChainPlan::workspace_bytes(bool with_path) const {
  // Enough for a forward with saved or without: they may differ (the chunked strategy's takes less with saved, the
  // stepped strategy's product of both passes more).
  const ChainStrategy& strategy = *impl_->strategy;
  return std::max(strategy.workspace_bytes(false, with_path),
                  strategy.workspace_bytes(impl_->problem.semiring == Semiring::log, with_path));
}

namespace {

// The forward's outputs checked: whether there is anything to compute.
bool check_outputs(const ChainProblem& p, const int64_t* lengths, void* score, void* saved, void* alpha,
                   int32_t* path) {
  const bool empty = p.B == 0;
  check_pointer(score, "score", empty);
  check_lengths(p, lengths, empty);
  if (path && p.semiring != Semiring::max_plus)
    throw std::invalid_argument("path: only max_plus chains have a best path");
  if (saved && p.semiring != Semiring::log)
    throw std::invalid_argument("saved: only log chains save messages (max_plus's backward reads the path)");
  if (empty) return false;
  const int bytes = dtype_info(chain_output_dtype(p)).size_bytes;
  check_alignment(score, "score", bytes);
  check_alignment(alpha, "alpha", bytes);
  check_alignment(lengths, "lengths", 8);
  check_alignment(saved, "saved", kSavedAlignment);
  return true;
}

// The forward of either form: `params` holds the inputs; the plan's strategy runs it.
void run_forward(const ChainPlan::Impl& im, jb::ChainParams params, const int64_t* lengths, void* score, void* saved,
                 void* alpha, int32_t* path, Stream stream, const Workspace& workspace) {
  const ChainProblem& p = im.problem;
  const CallHold hold(im, stream);
  // As this call takes it (saved given to a max_plus chain is refused below, naming it).
  check_workspace(workspace,
                  im.strategy->least_workspace_bytes(saved != nullptr && p.semiring == Semiring::log, path != nullptr));
  if (!check_outputs(p, lengths, score, saved, alpha, path)) return;
  attach(params, p, lengths, path, saved);
  params.score = score;
  params.alpha = alpha;
  im.strategy->forward(params, saved, stream, workspace);
}

} // namespace

void ChainPlan::operator()(const void* potentials, const int64_t* lengths, void* score, void* saved, void* alpha,
                           int32_t* path, Stream stream, const Workspace& workspace) const {
  const Impl& im = *impl_;
  check_form(im.problem, ChainForm::crf);
  const bool empty = im.problem.B == 0;
  check_pointer(potentials, "potentials", empty || im.problem.T == 1);
  check_alignment(potentials, "potentials", dtype_info(im.problem.dtype).size_bytes);
  jb::ChainParams params = chain_params(im);
  params.potentials = potentials;
  run_forward(im, params, lengths, score, saved, alpha, path, stream, workspace);
}

void ChainPlan::operator()(const HmmInputs& hmm, const int64_t* lengths, void* score, void* saved, void* alpha,
                           int32_t* path, Stream stream, const Workspace& workspace) const {
  const Impl& im = *impl_;
  check_form(im.problem, ChainForm::hmm);
  jb::ChainParams params = hmm_params(im, hmm, im.problem.B == 0);
  run_forward(im, params, lengths, score, saved, alpha, path, stream, workspace);
}

void ChainPlan::backward(const void* potentials, const int64_t* lengths, const void* saved, const int32_t* path,
                         const void* grad_score, void* grad_potentials, Stream stream,
                         const Workspace& workspace) const {
  const Impl& im = *impl_;
  const ChainProblem& p = im.problem;
  check_form(p, ChainForm::crf);
  const bool empty = p.B == 0 || p.T == 1;
  check_pointer(potentials, "potentials", empty);
  check_pointer(grad_score, "grad_score", p.B == 0);
  check_pointer(grad_potentials, "grad_potentials", empty);
  check_lengths(p, lengths, p.B == 0);
  check_backward_reads(p, saved, path, empty);
  // The sequential kernels take none, but check what is given.
  const CallHold hold(im, stream);
  check_workspace(workspace, im.strategy->least_backward_workspace_bytes(true));
  if (empty) return;
  check_alignment(grad_score, "grad_score", dtype_info(chain_output_dtype(p)).size_bytes);
  check_alignment(grad_potentials, "grad_potentials", dtype_info(p.dtype).size_bytes);
  jb::ChainParams params = call_params(im, potentials, lengths, path, saved); // checks their alignment
  params.grad_score = grad_score;
  params.grad = grad_potentials;
  im.strategy->backward(params, saved, stream, workspace);
}

const ChainProblem& ChainPlan::problem() const { return impl_->problem; }

int64_t ChainPlan::chunk() const { return impl_->strategy->chunk(); }

std::string ChainPlan::kernel_name() const { return impl_->strategy->kernel_name(); }

const char* ChainPlan::strategy() const { return impl_->strategy->name(); }

bool ChainPlan::settled() const { return impl_->strategy->settled(); }

std::string ChainPlan::device_name() const { return impl_->device->name; }

} // namespace jitbmm
