#include "jitbmm/chain_expectation.hpp"

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
#include "templates/chain/expect_params.cuh"

namespace jitbmm {

struct ChainExpectation::Impl {
  ChainProblem problem;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when B = 0
  std::size_t messages = 0;                   // bytes of one [B][T][C] of messages in the output dtype
  int cluster = 1;                            // blocks of a sequence's sweeps (distribution_cluster)
  ExpectationField field = ExpectationField::given;
  // Message arrays a pass keeps ([B][T][C] each): p's and F's, and q's where the field is a chain.
  int kept() const { return field == ExpectationField::given ? 2 : 3; }
};

namespace {

// One of the module's entries: a cluster of blocks a sequence ("", "_beta") or a block a step ("_edges"), the kernels
// striding past the grid's limit.
void run(const ChainExpectation::Impl& im, const char* suffix, jb::ExpectParams params, CUstream stream) {
  const bool edges = std::string(suffix) == "_edges";
  const DTypeInfo& d = dtype_info(im.problem.dtype);
  const int per_item = edges ? 1 : im.cluster;
  const unsigned threads = edges ? unsigned(jb::kExpectEdgeThreads)
                                 : unsigned(jb::expect_threads(int(im.problem.C), d.wide_acc(), im.cluster));
  const int64_t items = edges ? im.problem.B * (im.problem.T - 1) : im.problem.B; // a block (or cluster) each
  if (items == 0) return;
  const unsigned grid[3] = {unsigned(std::min<int64_t>(items, (int64_t(1) << 30) / per_item) * per_item), 1, 1},
                 block[3] = {threads, 1, 1};
  void* args[] = {&params};
  launch(*im.kernel, suffix, grid, block, args, stream);
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

// The inputs' pointers, lengths and alignments, for both calls; whether there is anything to compute.
bool check_inputs(const ChainProblem& p, const void* potentials, const void* field, const int64_t* lengths) {
  const bool empty = p.B == 0, no_edges = empty || p.T == 1;
  check_distribution_inputs(p, potentials, lengths, empty, no_edges);
  check_pointer(field, "field", no_edges);
  check_alignment(field, "field", dtype_info(p.dtype).size_bytes);
  return !empty;
}

} // namespace

static_assert(int(ExpectationField::given) == jb::kExpectGiven && int(ExpectationField::chain) == jb::kExpectChain &&
                  int(ExpectationField::difference) == jb::kExpectDifference,
              "the library's fields are the kernels'");

ChainExpectation ChainExpectation::get(const ChainProblem& problem, ExpectationField field) {
  check_distribution_problem(problem, Semiring::log, jb::kMaxExpectStates, "expectations");
  if (field != ExpectationField::given && field != ExpectationField::chain && field != ExpectationField::difference)
    throw std::invalid_argument("field: given, chain or difference, got " + std::to_string(int(field)));
  auto impl = std::make_shared<Impl>();
  impl->problem = problem;
  impl->field = field;
  impl->device = current_device();
  check_supported(*impl->device);
  const std::size_t acc = std::size_t(dtype_info(chain_output_dtype(problem)).size_bytes);
  impl->messages = std::size_t(checked_product({problem.B, problem.T, problem.C}, "chain: B*T*C")) * acc;
  impl->cluster = distribution_cluster(problem.B, int(problem.C), cluster_sms(*impl->device));
  if (problem.B > 0)
    impl->kernel = load_generated(*impl->device,
                                  emit_expect_kernel(problem.dtype, int(problem.C), impl->cluster, int(field)));
  return ChainExpectation(std::move(impl));
}

std::size_t ChainExpectation::saved_bytes() const { return impl_->kept() * impl_->messages; }

std::size_t ChainExpectation::backward_workspace_bytes() const {
  return ScratchSize().add(impl_->kept() * impl_->messages, "workspace").bytes();
}

ExpectationField ChainExpectation::field() const { return impl_->field; }

void ChainExpectation::operator()(const void* potentials, const void* field, const int64_t* lengths, void* log_z,
                                  void* mean, void* saved, Stream stream) const {
  const ChainProblem& p = impl_->problem;
  const bool empty = p.B == 0;
  check_pointer(log_z, "log_z", empty);
  check_pointer(mean, "mean", empty);
  if (!check_inputs(p, potentials, field, lengths)) return;
  const int bytes = dtype_info(chain_output_dtype(p)).size_bytes;
  check_alignment(log_z, "log_z", bytes);
  check_alignment(mean, "mean", bytes);
  check_alignment(saved, "saved", bytes);
  ScopedContext scope(impl_->device->context);
  const CUstream cu = reinterpret_cast<CUstream>(stream);
  jb::ExpectParams params = params_of(p, potentials, field, lengths);
  params.alpha = saved; // null: the messages stay in the blocks, nothing is kept
  params.before = saved ? static_cast<char*>(saved) + impl_->messages : nullptr;
  params.log_z = log_z;
  if (impl_->kept() == 3) { // a chain field: q's messages after p's and F's, log Z_q after log Z_p
    params.alpha_q = saved ? static_cast<char*>(saved) + 2 * impl_->messages : nullptr;
    params.log_z_q = static_cast<char*>(log_z) + p.B * bytes;
  }
  params.mean = mean;
  run(*impl_, "", params, cu);
}

void ChainExpectation::backward(const void* potentials, const void* field, const int64_t* lengths, const void* saved,
                                const void* log_z, const void* mean, const void* grad_log_z, const void* grad_mean,
                                void* grad_potentials, void* grad_field, Stream stream,
                                const Workspace& workspace) const {
  const ChainProblem& p = impl_->problem;
  const bool empty = p.B == 0;
  check_pointer(saved, "saved", empty);
  check_pointer(log_z, "log_z", empty);
  check_pointer(mean, "mean", empty);
  if (!check_inputs(p, potentials, field, lengths)) return;
  const int bytes = dtype_info(chain_output_dtype(p)).size_bytes, in_bytes = dtype_info(p.dtype).size_bytes;
  check_alignment(saved, "saved", bytes);
  check_alignment(log_z, "log_z", bytes);
  check_alignment(mean, "mean", bytes);
  check_alignment(grad_log_z, "grad_log_z", bytes);
  check_alignment(grad_mean, "grad_mean", bytes);
  check_alignment(grad_potentials, "grad_potentials", in_bytes);
  check_alignment(grad_field, "grad_field", in_bytes);
  check_workspace(workspace, backward_workspace_bytes());
  if ((!grad_potentials && !grad_field) || p.T == 1) return;
  ScopedContext scope(impl_->device->context);
  const CUstream cu = reinterpret_cast<CUstream>(stream);
  Scratch scratch(*impl_->device, workspace, backward_workspace_bytes(), cu);
  jb::ExpectParams params = params_of(p, potentials, field, lengths);
  char* const kept = static_cast<char*>(const_cast<void*>(saved));
  params.alpha = kept;
  params.before = kept + impl_->messages;
  params.beta = scratch.take(impl_->kept() * impl_->messages);
  params.after = static_cast<char*>(params.beta) + impl_->messages;
  params.log_z = const_cast<void*>(log_z);
  params.mean = const_cast<void*>(mean);
  params.grad_log_z = grad_log_z;
  if (impl_->kept() == 3) { // a chain field, laid out as the forward's
    params.alpha_q = kept + 2 * impl_->messages;
    params.beta_q = static_cast<char*>(params.beta) + 2 * impl_->messages;
    params.log_z_q = static_cast<char*>(params.log_z) + p.B * bytes;
    params.grad_log_z_q = grad_log_z ? static_cast<const char*>(grad_log_z) + p.B * bytes : nullptr;
  }
  params.grad_mean = grad_mean;
  params.grad_potentials = grad_potentials;
  params.grad_field = grad_field;
  run(*impl_, "_beta", params, cu);
  run(*impl_, "_edges", params, cu);
}

const ChainProblem& ChainExpectation::problem() const { return impl_->problem; }

std::string ChainExpectation::kernel_name() const { return impl_->kernel ? impl_->kernel->generated.name : ""; }

} // namespace jitbmm
