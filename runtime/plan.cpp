// SemiringBMM: validation, kernel lookup, and the launch itself (the only code on the per-call path).
#include "jitbmm/plan.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "runtime/autotune.hpp"
#include "runtime/background_build.hpp"
#include "support/checked_size.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_pool.hpp"
#include "runtime/backward.hpp"
#include "runtime/jit.hpp"
#include "runtime/plan_impl.hpp"
#include "runtime/product_stand_in.hpp"
#include "runtime/launch.hpp"
#include "runtime/scratch.hpp"
#include "support/log.hpp"

namespace jitbmm {

namespace {

// The plan's state for `spec`: its kernel compiled and loaded, its launches worked out.
std::shared_ptr<SemiringBMM::Impl> make_impl(const Problem& problem, const KernelSpec& spec) {
  check_spec_fits(spec, problem);
  auto impl = std::make_shared<SemiringBMM::Impl>();
  impl->problem = problem;
  impl->spec = spec;
  impl->device = current_device();
  impl->params = bmm_params(problem);
  const Shape& s = problem.shape;
  if (s.B > 0 && s.M > 0 && s.N > 0) {
    if (spec.threads() > impl->device->max_threads_per_block)
      throw std::invalid_argument("spec: " + std::to_string(spec.threads()) + " threads exceed this device's " +
                                  std::to_string(impl->device->max_threads_per_block));
    // K = 0 has nothing to split: the tiled kernel writes the semiring zero in one pass.
    if (spec.strategy == Strategy::split_k && s.K == 0) impl->spec.strategy = Strategy::tiled;
    impl->kernel = load_kernel(*impl->device, impl->spec);
    impl->launches = strategy_def(impl->spec).launches(impl->spec, problem);
  }
  return impl;
}

// A watched plan whose observed call repaired kWideRepairShare of its outputs or more: the variant fastest on
// wide-range data, among those whose workspace fits the plan's (stored, or tuned now on such data), from now on.
// Returns it, or null when there is none or it is the plan's own (watching then stops).
const ForwardVariant* move_to_wide(const SemiringBMM::Impl& im, double share) {
  std::lock_guard<std::mutex> lock(im.wide_mutex);
  if (im.moved.load()) return im.wide.get();
  if (im.settled.load()) return nullptr;
  im.settled = true;
  const Problem& p = im.problem;
  std::vector<KernelSpec> fits;
  for (const KernelSpec& spec : device_candidates(p, *im.device))
    if (strategy_def(spec).launches(spec, p).workspace_bytes <= im.launches.workspace_bytes) fits.push_back(spec);
  const std::string seen = describe(p) + ": " + strategy_name(im.spec.strategy) + " sent " +
                           std::to_string(int(100 * share + 0.5)) +
                           "% of an observed call's outputs to its exact repair (wide-range data); ";
  std::optional<Choice> choice;
  try {
    // Its tuning allocates and synchronises: relaxed, as a build's work is, where another thread captures a graph.
    const BuildCaptureMode relaxed(true);
    choice = choose_wide(p, *im.device, tune_policy_from_env(), fits);
  } catch (const std::exception& e) { // the call itself must not fail for want of a faster variant
    log_message(LogLevel::warn, seen + "finding the variant for such data failed (" + e.what() + "): it stays");
    return nullptr;
  }
  if (!choice || choice->spec == im.spec) {
    log_message(LogLevel::info, seen + (choice ? "its variant is also the fastest on such data: it stays"
                                               : "no variant for such data is stored or may be tuned: it stays"));
    return nullptr;
  }
  auto v = std::make_shared<ForwardVariant>();
  v->spec = choice->spec;
  v->launches = strategy_def(v->spec).launches(v->spec, p);
  if (v->launches.workspace_bytes > im.launches.workspace_bytes) {
    log_message(LogLevel::info, seen + to_string(v->spec) + " (" + choice->source +
                                    ") needs more workspace than the plan has: it stays");
    return nullptr;
  }
  try {
    v->kernel = load_kernel(*im.device, v->spec);
  } catch (const std::exception& e) {
    log_message(LogLevel::warn, seen + to_string(v->spec) + " (" + choice->source + ") failed to load (" + e.what() +
                                    "): the plan stays");
    return nullptr;
  }
  log_message(LogLevel::info, seen + "running " + to_string(v->spec) + " (" + choice->source + ") from now on");
  im.wide = std::move(v);
  im.moved.store(true, std::memory_order_release);
  return im.wide.get();
}

// The plan get() makes once its variant is chosen: a stored decision's (checked first where it was brought from
// elsewhere), a tuning's or the default, its kernel built.
PlanImpl chosen_plan(const Problem& problem, const std::shared_ptr<const DeviceInfo>& device) {
  const TunePolicy policy = tune_policy_from_env();
  const bool watched = repair_watch_enabled();
  std::shared_ptr<SemiringBMM::Impl> impl;
  plan_with_choice(
      [&](const std::vector<KernelSpec>& rejected) {
        return choose(problem, *device, policy, Pass::forward, rejected);
      },
      [&](const KernelSpec& spec) { impl = make_impl(problem, spec); });
  // A strategy with a repair pass says where a call's count of repaired outputs is: the plan watches it.
  const StrategyDef& def = strategy_def(impl->spec);
  if (watched && impl->kernel && def.repair_counts)
    impl->watch = std::make_unique<RepairWatch>(*impl->device, checked_product({problem.shape.B, problem.shape.M,
                                                                                problem.shape.N}, "shape: B*M*N"),
                                                def.repair_counts(impl->spec, problem).outputs_at);
  return impl;
}

// A stand-in's plan: quick builds of the problem's default variants (the forward's in its smallest tile), those of the
// passes named built at once.
PlanImpl stand_in_plan(const Problem& problem, const DeviceInfo& device, std::shared_ptr<const ProductStandIn> stand_in,
                       bool grad_a, bool grad_b) {
  const QuickBuild quick;
  const KernelSpec spec = quick_product_spec(problem);
  std::vector<KernelSpec> specs{spec};
  if (grad_a) specs.push_back(quick_grad_spec(problem, Pass::grad_a));
  if (grad_b) specs.push_back(quick_grad_spec(problem, Pass::grad_b));
  build_ahead(device, {}, specs);
  auto impl = make_impl(problem, spec);
  impl->stand_in = std::move(stand_in);
  return impl;
}

// The plan of get() and prepare() (which names the passes a backward will run): the chosen variant's, or a
// stand-in's while that builds (runtime/product_stand_in.hpp).
PlanImpl plan_of(const Problem& problem, const std::shared_ptr<const DeviceInfo>& device, bool grad_a, bool grad_b) {
  if (!takes_stand_in(problem, *device, grad_a, grad_b)) return chosen_plan(problem, device);
  return chosen_or_stand_in(
      problem, device, grad_a, grad_b, [problem, device] { return chosen_plan(problem, device); },
      [&](std::shared_ptr<const ProductStandIn> stand_in) {
        return stand_in_plan(problem, *device, std::move(stand_in), grad_a, grad_b);
      },
      build_pass);
}

} // namespace

SemiringBMM SemiringBMM::get(const Problem& problem) {
  validate(problem); // every size and stride checked before anything is chosen, tuned or compiled
  const auto device = current_device();
  check_supported(*device); // at once, not as the first kernel's compile error
  return SemiringBMM(plan_of(problem, device, false, false));
}

SemiringBMM SemiringBMM::get(const Problem& problem, Stream stream) {
  validate(problem);
  const auto device = current_device();
  ScopedContext scope(device->context);
  const TuningHold hold(stream_is_capturing(stream));
  return get(problem);
}

SemiringBMM SemiringBMM::get(const Problem& problem, const KernelSpec& spec) {
  // A backward pass's kernel reads other parameters than a plan's launches pass: it would read them as its own.
  if (spec.pass != Pass::forward)
    throw std::invalid_argument("spec.pass: a plan runs forward kernels (a backward pass's variant is the plan's "
                                "grad_spec, run by backward())");
  return SemiringBMM(make_impl(problem, spec));
}

void SemiringBMM::prepare(const Problem& problem, bool grad_a, bool grad_b) {
  validate(problem);
  const auto device = current_device();
  check_supported(*device);
  const Shape& s = problem.shape;
  if (try_product({s.B, s.M, s.N}) == 0) return; // no output: no kernel is loaded
  ScopedContext scope(device->context);
  const bool want_a = grad_a && try_product({s.B, s.M, s.K}) != 0;
  const bool want_b = grad_b && try_product({s.B, s.K, s.N}) != 0;
  // Where get() would take a stand-in, its kernels are built now and the chosen ones in the background; where the
  // chosen plan was built at once, its passes are built ahead below.
  if (takes_stand_in(problem, *device, want_a, want_b)) {
    try {
      if (plan_of(problem, device, want_a, want_b)->stand_in) return;
    } catch (const std::exception&) { // a kernel that fails to build: the get() or backward() that needs it says so
      return;
    }
  }
  const TunePolicy policy = tune_policy_from_env();
  std::vector<KernelSpec> specs = kernels_ahead(problem, *device, policy);
  auto add = [&](const std::vector<KernelSpec>& more) { specs.insert(specs.end(), more.begin(), more.end()); };
  if (want_a) add(kernels_ahead(problem, *device, policy, Pass::grad_a));
  if (want_b) add(kernels_ahead(problem, *device, policy, Pass::grad_b));
  // A selecting semiring's backward without the forward's argmax recomputes it (argmax_forward).
  if ((want_a || want_b) && semiring_info(problem.semiring).backward == BackwardKind::argmax_scatter &&
      !problem.with_argmax)
    add(kernels_ahead(argmax_problem(problem), *device, policy));
  build_ahead(*device, {}, specs);
}

void SemiringBMM::operator()(const void* a, const void* b, void* out, Stream stream) const {
  if (impl_->problem.with_argmax)
    throw std::invalid_argument("argmax: this plan was made with with_argmax; pass an argmax pointer");
  (*this)(a, b, out, nullptr, stream);
}

void SemiringBMM::operator()(const void* a, const void* b, void* out, int32_t* argmax, Stream stream,
                             const Workspace& workspace) const {
  run(a, b, out, argmax, stream, workspace, false);
}

void SemiringBMM::run_same_b(const void* a, const void* b, void* out, int32_t* argmax, Stream stream,
                             const Workspace& workspace) const {
  run(a, b, out, argmax, stream, workspace, true);
}

void SemiringBMM::run_if(const int* needed, const void* a, const void* b, void* out, int32_t* argmax, Stream stream,
                         const Workspace& workspace, bool same_b) const {
  check_pointer(needed, "needed", false);
  check_alignment(needed, "needed", 4);
  run(a, b, out, argmax, stream, workspace, same_b, needed);
}

void SemiringBMM::run(const void* a, const void* b, void* out, int32_t* argmax, Stream stream,
                      const Workspace& workspace, bool same_b, const int* needed) const {
  const Impl& im = forward_plan(*impl_, stream);
  if (same_b && workspace_bytes() > 0 && !workspace.ptr)
    throw std::invalid_argument("workspace: a call with b's factors of the previous call reads that call's scratch, "
                                "so it must be given");
  const Shape& s = im.problem.shape;
  const bool no_outputs = s.B == 0 || s.M == 0 || s.N == 0;
  check_pointer(a, "a", no_outputs || s.K == 0);
  check_pointer(b, "b", no_outputs || s.K == 0);
  check_pointer(out, "out", no_outputs);
  if (im.problem.with_argmax)
    check_pointer(argmax, "argmax", no_outputs);
  else if (argmax)
    throw std::invalid_argument("argmax: given, but the plan was made without with_argmax");
  if (no_outputs) return;
  const int in_bytes = dtype_info(im.problem.dtype).size_bytes;
  check_alignment(a, "a", in_bytes);
  check_alignment(b, "b", in_bytes);
  check_alignment(out, "out", dtype_info(im.problem.output_dtype()).size_bytes);
  check_alignment(argmax, "argmax", 4);
  jb::BmmParams params = im.params;
  params.a = a;
  params.b = b;
  params.out = out;
  params.argmax = argmax;
  params.run_if = needed;
  ScopedContext scope(im.device->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  // A watched plan reads an earlier call's repair count once it has landed, and may move to the wide-data variant.
  const ForwardVariant* moved = im.moved.load(std::memory_order_acquire) ? im.wide.get() : nullptr;
  const bool watching = im.watch && !moved && !im.settled.load(std::memory_order_relaxed) && !UnwatchedCalls::active();
  if (watching)
    if (const auto share = im.watch->landed(cu_stream); share && *share >= kWideRepairShare)
      moved = move_to_wide(im, *share);
  // Split-K and exp_matmul: scratch that is stream-ordered (the caller's, or the pool's), so concurrent calls on
  // different streams never share one.
  Scratch scratch(*im.device, workspace, workspace_bytes(), cu_stream);
  void* ws = scratch.take(im.launches.workspace_bytes);
  // b's factors are the workspace's only where the variant that wrote them runs again, in the layout of its form: a
  // watched plan may move to another variant between two calls (on this stream or another), and so may a stand-in
  // plan, so they run whole.
  run_launches(moved ? *moved->kernel : *im.kernel, moved ? moved->launches : im.launches, params, ws, cu_stream,
               same_b && !im.watch && !impl_->stand_in);
  if (watching && !moved && !needed) im.watch->observe(ws, cu_stream); // a skipped call counts nothing
}

std::size_t SemiringBMM::workspace_bytes() const {
  const std::size_t bytes = impl_->stand_in ? impl_->stand_in->workspace_bytes() : impl_->launches.workspace_bytes;
  return ScratchSize().add(bytes, "workspace").bytes();
}

bool SemiringBMM::settled() const { return !impl_->stand_in || impl_->stand_in->settled(); }

SemiringBMM::RepairReport SemiringBMM::run_with_repair_report(const void* a, const void* b, void* out,
                                                              Stream stream) const {
  // A stand-in plan reports on the plan it chose, once built.
  const Impl* chosen = impl_->stand_in ? impl_->stand_in->forward_waited() : nullptr;
  const Impl& im = chosen ? *chosen : *impl_;
  // The variant calls run now: the plan's own, or the wide-data one it moved to.
  const ForwardVariant* moved = im.moved.load(std::memory_order_acquire) ? im.wide.get() : nullptr;
  const KernelSpec& spec = moved ? moved->spec : im.spec;
  const StrategyDef& def = strategy_def(spec);
  if (!def.repair_counts)
    throw std::invalid_argument("plan: run_with_repair_report needs an exp_matmul plan, not " +
                                std::string(strategy_name(spec.strategy)) +
                                (moved ? " (the variant for wide-range data it moved to)" : ""));
  const LaunchPlan& launches = moved ? moved->launches : im.launches;
  const Shape& s = im.problem.shape;
  RepairReport report;
  report.outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
  if (report.outputs == 0) return report;
  check_pointer(a, "a", s.K == 0);
  check_pointer(b, "b", s.K == 0);
  check_pointer(out, "out", false);
  check_alignment(a, "a", dtype_info(im.problem.dtype).size_bytes);
  check_alignment(b, "b", dtype_info(im.problem.dtype).size_bytes);
  check_alignment(out, "out", dtype_info(im.problem.output_dtype()).size_bytes);
  const DriverApi& d = driver();
  ScopedContext scope(im.device->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  DeviceBuffer workspace(launches.workspace_bytes);
  jb::BmmParams params = im.params;
  params.a = a, params.b = b, params.out = out;
  run_launches(moved ? *moved->kernel : *im.kernel, launches, params, workspace.get(), cu_stream);
  check(d.cuStreamSynchronize(cu_stream), "cuStreamSynchronize");
  const RepairCounts counts = def.repair_counts(spec, im.problem);
  const std::size_t flags_end = counts.flags_at + 4 * static_cast<std::size_t>(counts.tiles);
  std::vector<unsigned char> host(std::max(counts.outputs_at + sizeof(uint64_t), flags_end)); // both counts
  workspace.download(host.data(), host.size());
  uint64_t repaired = 0;
  std::memcpy(&repaired, host.data() + counts.outputs_at, sizeof repaired);
  report.repaired_outputs = static_cast<int64_t>(repaired);
  report.tiles = counts.tiles;
  for (int64_t t = 0; t < counts.tiles; ++t) {
    uint32_t flag = 0;
    std::memcpy(&flag, host.data() + counts.flags_at + 4 * t, sizeof flag);
    report.repaired_tiles += flag != 0;
  }
  return report;
}

const Problem& SemiringBMM::problem() const { return impl_->problem; }
// The variant calls run now: the plan's own (a stand-in's, until its chosen plan serves), or the wide-data one it
// moved to.
const KernelSpec& SemiringBMM::spec() const {
  const Impl& im = current_plan(*impl_);
  return im.moved.load(std::memory_order_acquire) ? im.wide->spec : im.spec;
}

const std::string& SemiringBMM::kernel_name() const {
  // never destroyed: a background build may still use it as the process exits
  static const std::string& none = *new std::string("(no kernel: empty problem)");
  const Impl& im = current_plan(*impl_);
  if (im.moved.load(std::memory_order_acquire)) return im.wide->kernel->generated.name;
  return im.kernel ? im.kernel->generated.name : none;
}

const std::string& SemiringBMM::source() const {
  // never destroyed: a background build may still use it as the process exits
  static const std::string& none = *new std::string();
  const Impl& im = current_plan(*impl_);
  if (im.moved.load(std::memory_order_acquire)) return im.wide->kernel->generated.source;
  return im.kernel ? im.kernel->generated.source : none;
}

int SemiringBMM::registers() const {
  const Impl& im = current_plan(*impl_);
  if (im.moved.load(std::memory_order_acquire)) return im.wide->kernel->registers;
  return im.kernel ? im.kernel->registers : 0;
}
std::string SemiringBMM::device_name() const { return impl_->device->name; }
std::string SemiringBMM::arch() const { return impl_->device->arch(); }

JitLogBMM JitLogBMM::get(Shape shape) {
  Problem p;
  p.semiring = Semiring::log;
  p.dtype = DType::f32;
  p.shape = shape;
  return JitLogBMM(SemiringBMM::get(p));
}

Stats stats() { return Stats{nvrtc_compile_count(), pool_reserved_bytes()}; }
void release_pool_memory() { trim_pools(); }

void wait_for_builds() { wait_for_background_builds(); }

} // namespace jitbmm
