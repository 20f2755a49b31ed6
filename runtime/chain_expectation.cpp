#include "jitbmm/chain_expectation.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "generator/distribution_source.hpp"
#include "runtime/chain_plan.hpp" // cluster_sms
#include "runtime/device.hpp"
#include "runtime/distribution_checks.hpp"
#include "runtime/hmm_gradients.hpp"
#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "runtime/scratch.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/expect_params.cuh"

namespace jitbmm {

struct ChainExpectation::Impl {
  ChainProblem problem;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when B = 0
  std::size_t messages = 0;                   // bytes of one [B][T][C] of messages in the output dtype
  std::size_t saved = 0;                      // bytes of the saving forward's `saved` (saved_layout)
  int cluster = 1;                            // blocks of a sequence's sweeps (distribution_cluster)
  ExpectationField field = ExpectationField::given;
  // The HMM form's shared tables: the parts a shared transition table's steps are summed in (jb::expect_parts), and
  // the scratch of those partial sums and of the sequences' first positions ([2][B][C], for a shared initial table).
  int64_t parts = 1;
  std::size_t partials = 0, firsts = 0;
  // The backward messages' copies of the transition tables ("_transpose", in `saved`; 0: their stored layout is
  // read directly).
  std::size_t transposed = 0;
  // Message arrays a sweep keeps ([B][T][C] each): p's and F's, and q's where the field is a chain.
  int kept() const { return field == ExpectationField::given ? 2 : 3; }
  bool hmm() const { return problem.form == ChainForm::hmm; }
  std::size_t workspace_bytes() const; // the backward's scratch
};

namespace {

// The parts of a saving forward's `saved`: the forward sweep's kept message arrays, then the backward sweep's, each
// `messages` bytes, then in the HMM form the copies of transition tables stored [to][from] that the backward sweep
// reads ("_transpose": p's and the field's, [tables][from][to] in the storage type), where there are steps.
struct SavedLayout {
  std::size_t messages = 0, transposed = 0, bytes = 0;
};

SavedLayout saved_layout(const ChainProblem& problem, ExpectationField field) {
  SavedLayout l;
  const int64_t kept = field == ExpectationField::given ? 2 : 3,
                acc = dtype_info(chain_output_dtype(problem)).size_bytes;
  const int64_t messages = checked_product({problem.B, problem.T, problem.C, acc}, "chain: B*T*C");
  int64_t transposed = 0;
  if (problem.form == ChainForm::hmm && problem.B > 0 && problem.T > 1 && hmm_strides(problem).transitions[1] != 1)
    transposed = checked_product({2, problem.batched_transitions ? problem.B : 1, problem.C, problem.C,
                                  int64_t(dtype_info(problem.dtype).size_bytes)},
                                 "chain: 2*B*C*C");
  l.messages = std::size_t(messages), l.transposed = std::size_t(transposed);
  l.bytes = std::size_t(checked_add(checked_mul(2 * kept, messages, "chain: saved"), transposed, "chain: saved"));
  return l;
}

void check_expectation(const ChainProblem& problem, ExpectationField field) {
  check_distribution_problem(problem, Semiring::log, jb::kMaxExpectStates, "expectations", true);
  if (field != ExpectationField::given && field != ExpectationField::chain && field != ExpectationField::difference)
    throw std::invalid_argument("field: given, chain or difference, got " + std::to_string(int(field)));
}

// One of the module's entries: a cluster of blocks a sequence ("", and "_saving" twice, its two sweeps), a block a
// step ("_edges"), or blocks over the states ("_nodes"), a table's tiles and parts ("_transitions"), its entries
// ("_reduce") or the tiles of its copies ("_transpose"); the kernels stride past the grid's limit.
void run(const ChainExpectation::Impl& im, const std::string& entry, jb::ExpectParams params, CUstream stream) {
  const ChainProblem& p = im.problem;
  const bool sweep = entry.empty() || entry == "_saving";
  const int per_item = sweep ? im.cluster : 1, halves = entry == "_saving" ? 2 : 1;
  const unsigned threads = sweep ? unsigned(jb::expect_threads(int(p.C), dtype_info(p.dtype).wide_acc(), im.cluster))
                                 : unsigned(jb::kExpectEdgeThreads);
  const auto blocks_of = [&](int64_t n) { return (n + threads - 1) / threads; };
  const int64_t items = sweep               ? p.B // a block (or cluster) each
                        : entry == "_edges" ? p.B * (p.T - 1)
                        : entry == "_nodes" ? blocks_of(p.B * p.T * p.C)
                        : entry == "_transitions"
                            ? jb::expect_tiles(int(p.C)) * (p.batched_transitions ? p.B : im.parts)
                        : entry == "_transpose" ? 2 * (p.batched_transitions ? p.B : 1) * jb::expect_tiles(int(p.C))
                                                : blocks_of(jb::expect_reduce_items(int(p.C))); // "_reduce"
  if (items == 0) return;
  const int64_t blocks = std::min<int64_t>(items, (int64_t(1) << 30) / per_item) * per_item * halves;
  const unsigned grid[3] = {unsigned(blocks), 1, 1}, block[3] = {threads, 1, 1};
  void* args[] = {&params};
  launch(*im.kernel, entry.c_str(), grid, block, args, stream);
}

jb::ExpectParams params_of(const ChainProblem& p, const void* potentials, const void* field, const int64_t* lengths) {
  jb::ExpectParams params{};
  params.potentials = potentials;
  params.field = field;
  params.lengths = reinterpret_cast<const long long*>(lengths);
  params.B = p.B;
  params.T = p.T;
  return params;
}

// The HMM form's: p's tables and the field's, both at the problem's strides.
jb::ExpectParams params_of(const ChainProblem& p, const HmmInputs& hmm, const HmmInputs& field,
                           const int64_t* lengths) {
  jb::ExpectParams params = params_of(p, hmm.transitions, field.transitions, lengths);
  params.emissions = hmm.emissions;
  params.initial = hmm.initial;
  params.field_emissions = field.emissions;
  params.field_initial = field.initial;
  const HmmStrides strides = hmm_strides(p);
  std::copy(std::begin(strides.emissions), std::end(strides.emissions), params.emission_strides);
  std::copy(std::begin(strides.transitions), std::end(strides.transitions), params.transition_strides);
  std::copy(std::begin(strides.initial), std::end(strides.initial), params.initial_strides);
  params.batched_transitions = p.batched_transitions;
  params.batched_initial = p.batched_initial;
  return params;
}

// The inputs' pointers, lengths and alignments, for both calls; whether there is anything to compute.
bool check_inputs(const ChainProblem& p, const void* potentials, const void* field, const int64_t* lengths) {
  const bool empty = p.B == 0, no_edges = empty || p.T == 1;
  check_distribution_inputs(p, potentials, lengths, empty, no_edges);
  check_pointer(field, "field", no_edges);
  check_alignment(field, "field", dtype_info(p.dtype).size_bytes);
  return !empty;
}

bool check_inputs(const ChainProblem& p, const HmmInputs& hmm, const HmmInputs& field, const int64_t* lengths) {
  const bool empty = p.B == 0;
  check_distribution_inputs(p, hmm, lengths, empty);
  check_hmm_tables(p, field, empty, "field");
  return !empty;
}

// Both sweeps' messages at `saved` (saved_layout), p's, F's and where the field is a chain q's.
void point_at_saved(const ChainExpectation::Impl& im, char* saved, jb::ExpectParams& params) {
  char* const back = saved + im.kept() * im.messages;
  params.alpha = saved, params.before = saved + im.messages;
  params.beta = back, params.after = back + im.messages;
  if (im.kept() == 3) params.alpha_q = saved + 2 * im.messages, params.beta_q = back + 2 * im.messages;
}

// The forward of either form, its inputs checked: log Z and E_p[F] and, where `saved` is given, both sweeps'
// messages into it, in one launch.
void run_forward(const ChainExpectation::Impl& im, jb::ExpectParams params, void* log_z, void* mean, void* saved,
                 Stream stream) {
  const ChainProblem& p = im.problem;
  const int bytes = dtype_info(chain_output_dtype(p)).size_bytes;
  check_alignment(log_z, "log_z", bytes);
  check_alignment(mean, "mean", bytes);
  check_alignment(saved, "saved", bytes);
  ScopedContext scope(im.device->context);
  const CUstream cu = reinterpret_cast<CUstream>(stream);
  params.log_z = log_z;
  if (im.kept() == 3) params.log_z_q = static_cast<char*>(log_z) + p.B * bytes; // log Z_q after log Z_p
  params.mean = mean;
  if (!saved) { // the messages stay in the blocks, nothing is kept
    run(im, "", params, cu);
    return;
  }
  point_at_saved(im, static_cast<char*>(saved), params);
  if (im.transposed) { // the backward sweep reads the copies, made first
    params.transposed = static_cast<char*>(saved) + 2 * im.kept() * im.messages;
    run(im, "_transpose", params, cu);
  }
  run(im, "_saving", params, cu);
}

// The checks of a backward's reads of either form, before its inputs'.
void check_backward_reads(const ChainExpectation::Impl& im, const void* saved, const void* log_z, const void* mean,
                          const void* grad_log_z, const void* grad_mean) {
  const bool empty = im.problem.B == 0;
  check_pointer(saved, "saved", empty);
  check_pointer(log_z, "log_z", empty);
  check_pointer(mean, "mean", empty);
  const int bytes = dtype_info(chain_output_dtype(im.problem)).size_bytes;
  check_alignment(saved, "saved", bytes);
  check_alignment(log_z, "log_z", bytes);
  check_alignment(mean, "mean", bytes);
  check_alignment(grad_log_z, "grad_log_z", bytes);
  check_alignment(grad_mean, "grad_mean", bytes);
}

// The backward of either form, its arguments checked: `entries`, the gradients' passes, with the forward's saved
// messages and results.
void run_backward(const ChainExpectation::Impl& im, jb::ExpectParams params, const void* saved, const void* log_z,
                  const void* mean, const void* grad_log_z, const void* grad_mean, Stream stream,
                  const Workspace& workspace, const std::vector<const char*>& entries) {
  const ChainProblem& p = im.problem;
  const int bytes = dtype_info(chain_output_dtype(p)).size_bytes;
  ScopedContext scope(im.device->context);
  const CUstream cu = reinterpret_cast<CUstream>(stream);
  Scratch scratch(*im.device, workspace, im.workspace_bytes(), cu);
  point_at_saved(im, static_cast<char*>(const_cast<void*>(saved)), params);
  params.partials = scratch.take(im.partials);
  params.first = scratch.take(im.firsts);
  params.parts = im.parts;
  params.log_z = const_cast<void*>(log_z);
  params.mean = const_cast<void*>(mean);
  params.grad_log_z = grad_log_z;
  if (im.kept() == 3) { // a chain field, laid out as the forward's
    params.log_z_q = static_cast<char*>(params.log_z) + p.B * bytes;
    params.grad_log_z_q = grad_log_z ? static_cast<const char*>(grad_log_z) + p.B * bytes : nullptr;
  }
  params.grad_mean = grad_mean;
  for (const char* entry : entries) run(im, entry, params, cu);
}

} // namespace

std::size_t ChainExpectation::Impl::workspace_bytes() const {
  return ScratchSize().add(partials, "workspace").add(firsts, "workspace").bytes();
}

static_assert(int(ExpectationField::given) == jb::kExpectGiven && int(ExpectationField::chain) == jb::kExpectChain &&
                  int(ExpectationField::difference) == jb::kExpectDifference,
              "the library's fields are the kernels'");

ChainExpectation ChainExpectation::get(const ChainProblem& problem, ExpectationField field) {
  check_expectation(problem, field);
  auto impl = std::make_shared<Impl>();
  impl->problem = problem;
  impl->field = field;
  impl->device = current_device();
  check_supported(*impl->device);
  const std::size_t acc = std::size_t(dtype_info(chain_output_dtype(problem)).size_bytes);
  const SavedLayout layout = saved_layout(problem, field);
  impl->messages = layout.messages, impl->transposed = layout.transposed, impl->saved = layout.bytes;
  impl->cluster = distribution_cluster(problem.B, int(problem.C), cluster_sms(*impl->device));
  if (impl->hmm() && problem.B > 0) {
    impl->parts = jb::expect_parts(int(problem.C), problem.B * (problem.T - 1), impl->device->sm_count);
    if (!problem.batched_transitions)
      impl->partials = std::size_t(checked_product({2, impl->parts, problem.C, problem.C}, "chain: parts*C*C")) * acc;
    if (!problem.batched_initial)
      impl->firsts = std::size_t(checked_product({2, problem.B, problem.C}, "chain: B*C")) * acc;
  }
  if (problem.B > 0)
    impl->kernel = load_generated(
        *impl->device, emit_expect_kernel(problem.dtype, int(problem.C), impl->cluster, int(field), impl->hmm()));
  return ChainExpectation(std::move(impl));
}

std::size_t ChainExpectation::saved_bytes() const { return impl_->saved; }

std::size_t ChainExpectation::saved_bytes(const ChainProblem& problem, ExpectationField field) {
  check_expectation(problem, field);
  return saved_layout(problem, field).bytes;
}

std::size_t ChainExpectation::backward_workspace_bytes() const { return impl_->workspace_bytes(); }

ExpectationField ChainExpectation::field() const { return impl_->field; }

void ChainExpectation::operator()(const void* potentials, const void* field, const int64_t* lengths, void* log_z,
                                  void* mean, void* saved, Stream stream) const {
  const ChainProblem& p = impl_->problem;
  check_pointer(log_z, "log_z", p.B == 0);
  check_pointer(mean, "mean", p.B == 0);
  if (check_inputs(p, potentials, field, lengths))
    run_forward(*impl_, params_of(p, potentials, field, lengths), log_z, mean, saved, stream);
}

void ChainExpectation::operator()(const HmmInputs& hmm, const HmmInputs& field, const int64_t* lengths, void* log_z,
                                  void* mean, void* saved, Stream stream) const {
  const ChainProblem& p = impl_->problem;
  check_pointer(log_z, "log_z", p.B == 0);
  check_pointer(mean, "mean", p.B == 0);
  if (check_inputs(p, hmm, field, lengths))
    run_forward(*impl_, params_of(p, hmm, field, lengths), log_z, mean, saved, stream);
}

void ChainExpectation::backward(const void* potentials, const void* field, const int64_t* lengths, const void* saved,
                                const void* log_z, const void* mean, const void* grad_log_z, const void* grad_mean,
                                void* grad_potentials, void* grad_field, Stream stream,
                                const Workspace& workspace) const {
  const ChainProblem& p = impl_->problem;
  check_backward_reads(*impl_, saved, log_z, mean, grad_log_z, grad_mean);
  if (!check_inputs(p, potentials, field, lengths)) return;
  const int in_bytes = dtype_info(p.dtype).size_bytes;
  check_alignment(grad_potentials, "grad_potentials", in_bytes);
  check_alignment(grad_field, "grad_field", in_bytes);
  check_workspace(workspace, backward_workspace_bytes());
  if ((!grad_potentials && !grad_field) || p.T == 1) return;
  jb::ExpectParams params = params_of(p, potentials, field, lengths);
  params.grad_potentials = grad_potentials;
  params.grad_field = grad_field;
  run_backward(*impl_, params, saved, log_z, mean, grad_log_z, grad_mean, stream, workspace, {"_edges"});
}

void ChainExpectation::backward(const HmmInputs& hmm, const HmmInputs& field, const int64_t* lengths, const void* saved,
                                const void* log_z, const void* mean, const void* grad_log_z, const void* grad_mean,
                                const HmmGradients& grad_hmm, const HmmGradients& grad_field, Stream stream,
                                const Workspace& workspace) const {
  const ChainProblem& p = impl_->problem;
  check_backward_reads(*impl_, saved, log_z, mean, grad_log_z, grad_mean);
  const bool any = check_inputs(p, hmm, field, lengths);
  check_hmm_gradients(p, grad_hmm, "grad_hmm");
  check_hmm_gradients(p, grad_field, "grad_field");
  check_workspace(workspace, backward_workspace_bytes());
  if (!any) { // no sequence: a shared table's gradient is a sum of nothing
    ScopedContext scope(impl_->device->context);
    clear_shared_hmm_gradients(p, grad_hmm, reinterpret_cast<CUstream>(stream));
    clear_shared_hmm_gradients(p, grad_field, reinterpret_cast<CUstream>(stream));
    return;
  }
  const auto none = [](const HmmGradients& g) { return !g.emissions && !g.transitions && !g.initial; };
  if (none(grad_hmm) && none(grad_field)) return;
  jb::ExpectParams params = params_of(p, hmm, field, lengths);
  params.grad_emissions = grad_hmm.emissions;
  params.grad_transitions = grad_hmm.transitions;
  params.grad_initial = grad_hmm.initial;
  params.grad_field_emissions = grad_field.emissions;
  params.grad_field_transitions = grad_field.transitions;
  params.grad_field_initial = grad_field.initial;
  // The transitions' pass where their gradients are asked for; "_reduce" where a shared table's are.
  const bool transitions = grad_hmm.transitions || grad_field.transitions;
  const bool shared =
      (transitions && !p.batched_transitions) || ((grad_hmm.initial || grad_field.initial) && !p.batched_initial);
  std::vector<const char*> entries = {"_nodes"};
  if (transitions) entries.push_back("_transitions");
  if (shared) entries.push_back("_reduce");
  run_backward(*impl_, params, saved, log_z, mean, grad_log_z, grad_mean, stream, workspace, entries);
}

const ChainProblem& ChainExpectation::problem() const { return impl_->problem; }

std::string ChainExpectation::kernel_name() const { return impl_->kernel ? impl_->kernel->generated.name : ""; }

} // namespace jitbmm
