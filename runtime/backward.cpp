// SemiringBMM::backward: argument checks, the choice of each pass's kernel (stored decision, tuning or default,
// like the forward), and the launches.
#include "runtime/backward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/autotune.hpp"
#include "runtime/checked_size.hpp"
#include "runtime/layout.hpp"
#include "runtime/plan_impl.hpp"

namespace jitbmm {

Problem grad_problem(const Problem& problem) {
  Problem p = problem;
  p.with_argmax = false;
  return p;
}

void check_grad_layout(const Problem& p, Pass pass) {
  const Shape& s = p.shape;
  const bool ga = pass == Pass::grad_a;
  const Strides st = ga ? p.a() : p.b();
  const int64_t rows = ga ? s.M : s.K, cols = ga ? s.K : s.N;
  const int64_t batches = st.batch == 0 ? std::min<int64_t>(s.B, 1) : s.B;
  if (!is_injective(batches, rows, cols, st))
    throw std::invalid_argument(std::string(ga ? "a_strides" : "b_strides") + ": grad_" + (ga ? "a" : "b") +
                                " would map two elements to one address in this layout (only a batch stride of 0, a "
                                "broadcast, may repeat); give the operand a dense layout");
}

namespace {

unsigned blocks_for(int64_t items, int threads) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + threads - 1) / threads, 1, int64_t(1) << 20));
}

void launch(CUfunction f, const unsigned (&grid)[3], unsigned threads, jb::GradParams& q, CUstream stream,
            const std::string& name) {
  void* args[] = {&q};
  check(driver().cuLaunchKernel(f, grid[0], grid[1], grid[2], threads, 1, 1, 0, stream, args, nullptr),
        ("cuLaunchKernel(" + name + ")").c_str());
}

} // namespace

void launch_grad(const Problem& p, const KernelSpec& spec, const LoadedKernel& kernel, const GradArgs& args,
                 CUstream stream) {
  const Shape& s = p.shape;
  const bool ga = spec.pass == Pass::grad_a;
  const int64_t rows = ga ? s.M : s.K, cols = ga ? s.K : s.N;
  if (s.B == 0 || rows == 0 || cols == 0) return;
  const Strides sa = p.a(), sb = p.b(), so = p.out();
  const bool broadcast = (ga ? sa.batch : sb.batch) == 0 && s.B > 1;
  const bool scatter = spec.strategy == Strategy::scatter;
  jb::GradParams q{};
  q.a = args.a, q.b = args.b, q.out = args.out, q.grad_out = args.grad_out, q.argmax = args.argmax, q.grad = args.grad;
  q.B = s.B, q.M = s.M, q.N = s.N, q.K = s.K;
  q.a_batch = sa.batch, q.a_row = sa.row, q.a_col = sa.col;
  q.b_batch = sb.batch, q.b_row = sb.row, q.b_col = sb.col;
  q.out_batch = so.batch, q.out_row = so.row, q.out_col = so.col;
  q.workspace_slices = broadcast ? 1 : s.B;
  const int64_t workspace_items = checked_product({q.workspace_slices, rows, cols}, "backward workspace");
  const std::size_t workspace_bytes =
      scatter || broadcast ? static_cast<std::size_t>(checked_mul(
                                 workspace_items, dtype_info(p.dtype).size_bytes == 8 ? 8 : 4, "backward workspace"))
                           : 0;
  const DriverApi& d = driver();
  CUdeviceptr workspace = 0;
  if (workspace_bytes) {
    check(d.cuMemAllocAsync(&workspace, workspace_bytes, stream), "cuMemAllocAsync(backward workspace)");
    q.workspace = reinterpret_cast<void*>(workspace); // NOLINT(performance-no-int-to-ptr): a device address
  }
  try {
    if (workspace_bytes) check(d.cuMemsetD8Async(workspace, 0, workspace_bytes, stream), "cuMemsetD8Async");
    const std::string& name = kernel.generated.name;
    if (scatter) {
      const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
      const unsigned grid[3] = {blocks_for(outputs, spec.threads()), 1, 1};
      if (outputs > 0) launch(kernel.function, grid, spec.threads(), q, stream, name);
    } else {
      const unsigned grid[3] = {static_cast<unsigned>((cols + spec.tile_n - 1) / spec.tile_n),
                                static_cast<unsigned>((rows + spec.tile_m - 1) / spec.tile_m),
                                static_cast<unsigned>(std::min<int64_t>(s.B, 65535))};
      launch(kernel.function, grid, spec.threads(), q, stream, name);
    }
    if (workspace_bytes) {
      const unsigned grid[3] = {blocks_for(workspace_items, 256), 1, 1};
      launch(kernel.store, grid, 256, q, stream, name + "_store");
    }
  } catch (...) {
    if (workspace) d.cuMemFreeAsync(workspace, stream);
    throw;
  }
  if (workspace) check(d.cuMemFreeAsync(workspace, stream), "cuMemFreeAsync(backward workspace)");
}

namespace {

// The kernel of one pass for this plan, chosen on first use and kept.
std::shared_ptr<const GradKernel> grad_kernel(const SemiringBMM::Impl& im, Pass pass) {
  std::lock_guard<std::mutex> lock(im.grad_mutex);
  auto& slot = im.grad[pass == Pass::grad_a ? 0 : 1];
  if (!slot) {
    const Problem p = grad_problem(im.problem);
    auto gk = std::make_shared<GradKernel>();
    const TunePolicy policy = tune_policy_from_env();
    gk->spec = plan_with_choice(
        [&](const std::vector<KernelSpec>& rejected) { return choose(p, *im.device, policy, pass, rejected); },
        [&](const KernelSpec& spec) { gk->kernel = load_kernel(*im.device, spec); });
    slot = gk;
  }
  return slot;
}

} // namespace

void SemiringBMM::backward(const void* a, const void* b, const void* out, const void* grad_out, void* grad_a,
                           void* grad_b, Stream stream) const {
  backward(a, b, out, nullptr, grad_out, grad_a, grad_b, stream);
}

void SemiringBMM::backward(const void* a, const void* b, const void* out, const int32_t* argmax, const void* grad_out,
                           void* grad_a, void* grad_b, Stream stream) const {
  const Impl& im = *impl_;
  const Problem& p = im.problem;
  const Shape& s = p.shape;
  const bool want_a = grad_a != nullptr, want_b = grad_b != nullptr;
  // Products that are 0 when any size is (validate() bounds the rest).
  const bool none_a = try_product({s.B, s.M, s.K}) == 0, none_b = try_product({s.B, s.K, s.N}) == 0,
             no_outputs = try_product({s.B, s.M, s.N}) == 0;
  if ((!want_a || none_a) && (!want_b || none_b)) return; // nothing to write
  auto need = [](const void* ptr, const char* name) { check_pointer(ptr, name, false); };
  // What each pass reads: log both operands (one is the per-output constant), plus_times and max_times the
  // partner, max_plus and min_plus neither; all of them grad_out; log the saved out; selecting ones argmax.
  const bool sel = semiring_info(p.semiring).has_argmax;
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
  if (want_a && !none_a) check_grad_layout(p, Pass::grad_a);
  if (want_b && !none_b) check_grad_layout(p, Pass::grad_b);
  if (argmax && !sel)
    throw std::invalid_argument(std::string("argmax: the ") + semiring_info(p.semiring).name +
                                " backward takes no argmax");
  ScopedContext scope(im.device->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  const DriverApi& d = driver();
  // The selecting semirings route G through the forward's argmax; without one, a forward pass with argmax
  // recomputes it into a temporary (stream-ordered) buffer.
  CUdeviceptr scratch = 0;
  if (sel && !argmax && !no_outputs) {
    std::shared_ptr<const SemiringBMM> forward;
    {
      std::lock_guard<std::mutex> lock(im.grad_mutex);
      if (!im.with_argmax) {
        Problem q = p;
        q.with_argmax = true;
        q.out_strides.reset();
        im.with_argmax = std::make_shared<const SemiringBMM>(SemiringBMM::get(q));
      }
      forward = im.with_argmax;
    }
    need(a, "a"), need(b, "b");
    const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
    const int64_t value_bytes =
        checked_product({checked_add(checked_mul(outputs, out_bytes, "argmax scratch"), 15, "argmax scratch") / 16, 16},
                        "argmax scratch");
    const int64_t scratch_bytes = checked_add(value_bytes, checked_mul(outputs, 4, "argmax scratch"), "argmax scratch");
    check(d.cuMemAllocAsync(&scratch, static_cast<std::size_t>(scratch_bytes), cu_stream), "cuMemAllocAsync(argmax)");
    auto* values = reinterpret_cast<void*>(scratch); // NOLINT(performance-no-int-to-ptr): a device address
    argmax = reinterpret_cast<const int32_t*>(scratch + value_bytes); // NOLINT(performance-no-int-to-ptr)
    try {
      (*forward)(a, b, values, const_cast<int32_t*>(argmax), stream);
    } catch (...) {
      d.cuMemFreeAsync(scratch, cu_stream);
      throw;
    }
  }
  try {
    if (sel && !no_outputs) need(argmax, "argmax");
    const Problem gp = grad_problem(p);
    for (Pass pass : {Pass::grad_a, Pass::grad_b}) {
      void* grad = pass == Pass::grad_a ? grad_a : grad_b;
      if (!grad || (pass == Pass::grad_a ? none_a : none_b)) continue;
      const auto gk = grad_kernel(im, pass);
      launch_grad(gp, gk->spec, *gk->kernel, {a, b, out, grad_out, argmax, grad}, cu_stream);
    }
  } catch (...) {
    if (scratch) d.cuMemFreeAsync(scratch, cu_stream);
    throw;
  }
  if (scratch) check(d.cuMemFreeAsync(scratch, cu_stream), "cuMemFreeAsync(argmax)");
}

KernelSpec SemiringBMM::grad_spec(Pass pass) const {
  if (pass == Pass::forward) return impl_->spec;
  return grad_kernel(*impl_, pass)->spec;
}

} // namespace jitbmm
