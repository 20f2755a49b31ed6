// SemiringBMM::backward: argument checks, the choice of each pass's kernel (stored decision, tuning or default,
// like the forward), and the launches.
#include "runtime/backward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/autotune.hpp"
#include "support/checked_size.hpp"
#include "support/layout.hpp"
#include "runtime/jit.hpp"
#include "runtime/plan_impl.hpp"
#include "runtime/product_stand_in.hpp"
#include "runtime/scratch.hpp"

namespace jitbmm {

void check_grad_layout(const Problem& p, Pass pass) {
  const Shape& s = p.shape;
  const bool ga = pass == Pass::grad_a;
  const Strides st = ga ? p.a() : p.b();
  const int64_t rows = ga ? s.M : s.K, cols = ga ? s.K : s.N;
  const int64_t batches = st.batch == 0 ? 1 : s.B; // a broadcast operand is one matrix, an empty batch's too
  if (!is_injective(batches, rows, cols, st))
    throw std::invalid_argument(std::string(ga ? "a_strides" : "b_strides") + ": grad_" + (ga ? "a" : "b") +
                                " would map two elements to one address in this layout (only a batch stride of 0, a "
                                "broadcast, may repeat); give the operand a dense layout");
}

namespace {

// The kernel of one pass for this plan, chosen on first use and kept: a stand-in plan's, a quick build of the
// default variant.
std::shared_ptr<const GradKernel> grad_kernel(const SemiringBMM::Impl& im, Pass pass) {
  return im.grad[pass == Pass::grad_a ? 0 : 1].get([&] {
    const Problem p = grad_problem(im.problem);
    auto gk = std::make_shared<GradKernel>();
    const TunePolicy policy = tune_policy_from_env();
    if (im.stand_in) {
      const QuickBuild quick;
      gk->spec = quick_grad_spec(im.problem, pass);
      gk->kernel = load_kernel(*im.device, gk->spec);
    } else {
      gk->spec = plan_with_choice(
          [&](const std::vector<KernelSpec>& rejected) { return choose(p, *im.device, policy, pass, rejected); },
          [&](const KernelSpec& spec) { gk->kernel = load_kernel(*im.device, spec); });
    }
    const StrategyDef& def = strategy_def(gk->spec);
    gk->launches = def.launches(gk->spec, p);
    if (def.second_pass_launches) gk->second = def.second_pass_launches(gk->spec, p);
    return std::shared_ptr<const GradKernel>(std::move(gk));
  });
}

// Both passes' kernels for a first backward that runs both, built at once before either is chosen (a stored decision
// brought from elsewhere is checked on its first choice, which loads its kernels one after the other): the call
// waits for the longest compile rather than for all of them. A tuning chooses on its own.
void prepare_both_passes(const SemiringBMM::Impl& im) {
  if (im.grad[0].built() || im.grad[1].built()) return;
  // A stand-in plan's passes are quick builds of their defaults (grad_kernel).
  const QuickBuild quick(im.stand_in != nullptr);
  const TunePolicy policy = tune_policy_from_env();
  std::vector<KernelSpec> specs;
  for (const Pass pass : {Pass::grad_a, Pass::grad_b})
    for (const KernelSpec& spec : im.stand_in ? std::vector<KernelSpec>{quick_grad_spec(im.problem, pass)}
                                              : kernels_ahead(im.problem, *im.device, policy, pass))
      specs.push_back(spec);
  build_ahead(*im.device, {}, specs);
}

// Zeros the rows × cols elements of a matrix at `base` (element strides row_stride and col_stride, each at least 0,
// `bytes` an element) on the stream, and no byte between them: a 2D memset along its unit-stride axis (one span
// where its lines meet or overlap), else a 2D memset a line of the shorter axis.
void zero_matrix(void* base, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, int bytes,
                 CUstream stream) {
  const auto start = reinterpret_cast<CUdeviceptr>(base);
  auto lines = [&](CUdeviceptr first, int64_t pitch, int64_t width, int64_t height) { // in elements
    if (height == 1 || pitch <= width)
      check(driver().cuMemsetD8Async(first, 0, std::size_t((height - 1) * pitch + width) * std::size_t(bytes), stream),
            "cuMemsetD8Async");
    else
      check(driver().cuMemsetD2D8Async(first, std::size_t(pitch) * std::size_t(bytes), 0,
                                       std::size_t(width) * std::size_t(bytes), std::size_t(height), stream),
            "cuMemsetD2D8Async");
  };
  if (col_stride == 1)
    lines(start, row_stride, cols, rows);
  else if (row_stride == 1)
    lines(start, col_stride, rows, cols);
  else if (rows <= cols) // a 2D memset a line of the shorter axis (validate() bounds every offset)
    for (int64_t r = 0; r < rows; ++r)
      lines(start + CUdeviceptr(r * row_stride) * CUdeviceptr(bytes), col_stride, 1, cols);
  else
    for (int64_t c = 0; c < cols; ++c)
      lines(start + CUdeviceptr(c * col_stride) * CUdeviceptr(bytes), row_stride, 1, rows);
}

// That forward's plan, made on first use and kept.
std::shared_ptr<const SemiringBMM> argmax_forward(const SemiringBMM::Impl& im) {
  return im.with_argmax.get(
      [&] { return std::make_shared<const SemiringBMM>(SemiringBMM::get(argmax_problem(im.problem))); });
}

// What one backward call runs and the scratch it takes, piece by piece in the order the call takes them: the
// recomputed forward's values, argmax and workspace, then the passes' workspace. The passes run one after the other
// on the stream, so they share one region, as large as the larger of the two.
struct BackwardWork {
  std::shared_ptr<const SemiringBMM> forward; // set when the argmax is recomputed
  std::size_t values = 0, argmax = 0, forward_workspace = 0;
  std::shared_ptr<const GradKernel> pass[2]; // grad_a, grad_b: set for the passes that run
  std::size_t pass_workspace = 0; // shared by the passes
  std::size_t scratch_bytes = 0;
};

BackwardWork backward_work(const SemiringBMM::Impl& im, bool want_a, bool want_b, bool argmax_given) {
  const Problem& p = im.problem;
  const Shape& s = p.shape;
  BackwardWork w;
  // Products that are 0 when any size is (validate() bounds the rest).
  const bool none_a = try_product({s.B, s.M, s.K}) == 0, none_b = try_product({s.B, s.K, s.N}) == 0,
             no_outputs = try_product({s.B, s.M, s.N}) == 0;
  if ((!want_a || none_a) && (!want_b || none_b)) return w; // nothing to write
  ScratchSize size;
  if (semiring_info(p.semiring).backward == BackwardKind::argmax_scatter && !argmax_given && !no_outputs) {
    w.forward = argmax_forward(im);
    const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
    w.values =
        static_cast<std::size_t>(checked_mul(outputs, dtype_info(p.output_dtype()).size_bytes, "argmax scratch"));
    w.argmax = static_cast<std::size_t>(checked_mul(outputs, 4, "argmax scratch"));
    w.forward_workspace = w.forward->workspace_bytes();
    size.add(w.values, "argmax scratch").add(w.argmax, "argmax scratch").add(w.forward_workspace, "workspace");
  }
  if (want_a && !none_a && want_b && !none_b) prepare_both_passes(im);
  for (int i = 0; i < 2; ++i) {
    if (!(i == 0 ? want_a && !none_a : want_b && !none_b)) continue;
    w.pass[i] = grad_kernel(im, i == 0 ? Pass::grad_a : Pass::grad_b);
    w.pass_workspace = std::max(w.pass_workspace, w.pass[i]->launches.workspace_bytes);
  }
  size.add(w.pass_workspace, "backward workspace");
  w.scratch_bytes = size.bytes();
  return w;
}

// The plan whose backward runs a call writing the gradients named: a stand-in plan's chosen plan once it and those
// passes are built (and the caller's workspace, where given, holds what that plan's backward takes), else `plan`.
const SemiringBMM::Impl& backward_plan(const SemiringBMM::Impl& plan, bool want_a, bool want_b, bool argmax_given,
                                       Stream stream, const Workspace* caller) {
  if (!plan.stand_in) return plan;
  const Shape& s = plan.problem.shape;
  const bool a = want_a && try_product({s.B, s.M, s.K}) != 0, b = want_b && try_product({s.B, s.K, s.N}) != 0;
  const SemiringBMM::Impl* chosen = plan.stand_in->backward(a, b, stream);
  if (!chosen) return plan;
  if (caller && (caller->ptr || caller->bytes) &&
      caller->bytes < backward_work(*chosen, want_a, want_b, argmax_given).scratch_bytes)
    return plan;
  return *chosen;
}

} // namespace

void build_pass(const SemiringBMM::Impl& plan, Pass pass) { grad_kernel(plan, pass); }

void SemiringBMM::backward(const void* a, const void* b, const void* out, const void* grad_out, void* grad_a,
                           void* grad_b, Stream stream) const {
  backward(a, b, out, nullptr, grad_out, grad_a, grad_b, stream);
}

void SemiringBMM::backward(const void* a, const void* b, const void* out, const int32_t* argmax, const void* grad_out,
                           void* grad_a, void* grad_b, Stream stream, const Workspace& workspace) const {
  const Problem& p = impl_->problem;
  const Shape& s = p.shape;
  const bool want_a = grad_a != nullptr, want_b = grad_b != nullptr;
  const bool none_a = try_product({s.B, s.M, s.K}) == 0, none_b = try_product({s.B, s.K, s.N}) == 0,
             no_outputs = try_product({s.B, s.M, s.N}) == 0;
  // An operand broadcast over an empty batch (batch stride 0, B = 0) is still one matrix, whose gradient is a sum
  // over no batch: zeros, which no pass writes (they launch nothing for B = 0).
  const bool zero_a = want_a && s.B == 0 && p.a().batch == 0 && s.M > 0 && s.K > 0,
             zero_b = want_b && s.B == 0 && p.b().batch == 0 && s.K > 0 && s.N > 0;
  if ((!want_a || none_a) && (!want_b || none_b) && !zero_a && !zero_b) return; // nothing to write
  auto need = [](const void* ptr, const char* name) { check_pointer(ptr, name, false); };
  // What each pass reads: log both operands (one is the per-output constant), plus_times and max_times the
  // partner, max_plus and min_plus neither; all of them grad_out; log the saved out; selecting ones argmax.
  const bool scatter = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
  // log's pass of a gradient reads its own operand too (each term's constant), even with no output to weigh it.
  if (p.semiring == Semiring::log) {
    if (want_a && !none_a) need(a, "a");
    if (want_b && !none_b) need(b, "b");
  }
  if (!no_outputs) {
    need(grad_out, "grad_out");
    if (p.semiring == Semiring::log) need(out, "out");
    if (p.semiring != Semiring::max_plus && p.semiring != Semiring::min_plus) {
      if (p.semiring == Semiring::log || (want_a && !none_a)) need(b, "b");
      if (p.semiring == Semiring::log || (want_b && !none_b)) need(a, "a");
    }
  }
  const int in_bytes = dtype_info(p.dtype).size_bytes, out_bytes = dtype_info(p.output_dtype()).size_bytes;
  check_alignment(a, "a", in_bytes);
  check_alignment(b, "b", in_bytes);
  check_alignment(out, "out", out_bytes);
  check_alignment(grad_out, "grad_out", out_bytes);
  check_alignment(argmax, "argmax", 4);
  check_alignment(grad_a, "grad_a", in_bytes);
  check_alignment(grad_b, "grad_b", in_bytes);
  if ((want_a && !none_a) || zero_a) check_grad_layout(p, Pass::grad_a);
  if ((want_b && !none_b) || zero_b) check_grad_layout(p, Pass::grad_b);
  if (argmax && !scatter)
    throw std::invalid_argument(std::string("argmax: the ") + semiring_info(p.semiring).name +
                                " backward takes no argmax");
  ScopedContext scope(impl_->device->context); // also for choosing the passes' kernels on first use
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  if (zero_a || zero_b) { // B = 0: nothing else to write
    const int bytes = dtype_info(p.dtype).size_bytes;
    if (zero_a) zero_matrix(grad_a, s.M, s.K, p.a().row, p.a().col, bytes, cu_stream);
    if (zero_b) zero_matrix(grad_b, s.K, s.N, p.b().row, p.b().col, bytes, cu_stream);
    return;
  }
  const TuningHold hold(stream_is_capturing(cu_stream));
  const Impl& im = backward_plan(*impl_, want_a, want_b, argmax != nullptr, stream, &workspace);
  const BackwardWork w = backward_work(im, want_a, want_b, argmax != nullptr);
  Scratch scratch(*im.device, workspace, w.scratch_bytes, cu_stream);
  // The selecting semirings route G through the forward's argmax; without one, a forward pass with argmax
  // recomputes it into scratch.
  if (w.forward) {
    need(a, "a"), need(b, "b");
    void* values = scratch.take(w.values);
    argmax = static_cast<const int32_t*>(scratch.take(w.argmax));
    (*w.forward)(a, b, values, const_cast<int32_t*>(argmax), stream,
                 Workspace{scratch.take(w.forward_workspace), w.forward_workspace});
  }
  if (scatter && !no_outputs) need(argmax, "argmax");
  const Problem gp = grad_problem(p);
  void* pass_workspace = scratch.take(w.pass_workspace);
  for (int i = 0; i < 2; ++i) {
    if (!w.pass[i]) continue;
    // grad_b after a grad_a of its strategy takes what that left in the workspace, where the strategy can.
    const bool second =
        i == 1 && w.pass[0] && w.pass[1]->second && w.pass[0]->spec.strategy == w.pass[1]->spec.strategy;
    const GradArgs args{a, b, out, grad_out, argmax, i == 0 ? grad_a : grad_b, pass_workspace};
    launch_grad(gp, w.pass[i]->spec, second ? *w.pass[i]->second : w.pass[i]->launches, *w.pass[i]->kernel, args,
                cu_stream);
  }
}

std::size_t SemiringBMM::backward_workspace_bytes(bool grad_a, bool grad_b, bool argmax_given, Stream stream) const {
  ScopedContext scope(impl_->device->context);
  const TuningHold hold(stream_is_capturing(stream));
  const Impl& im = backward_plan(*impl_, grad_a, grad_b, argmax_given, stream, nullptr);
  const std::size_t bytes = backward_work(im, grad_a, grad_b, argmax_given).scratch_bytes;
  if (&im != impl_.get()) return bytes;
  // While a stand-in runs the backwards, room for the chosen plan's passes too: a caller may size its workspace once.
  const std::size_t chosen = impl_->stand_in ? impl_->stand_in->pass_workspace_bytes(grad_a, grad_b) : 0;
  return chosen ? std::max(bytes, ScratchSize().add(bytes, "backward workspace").add(chosen, "backward workspace")
                                      .bytes())
                : bytes;
}

KernelSpec SemiringBMM::grad_spec(Pass pass) const {
  if (pass == Pass::forward) return spec();
  return grad_kernel(backward_plan(*impl_, pass == Pass::grad_a, pass == Pass::grad_b, true, nullptr, nullptr), pass)
      ->spec;
}

} // namespace jitbmm
