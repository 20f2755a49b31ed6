// SemiringBMM: validation, kernel lookup, and the launch itself (the only code on the per-call path).
#include "jitbmm/plan.hpp"

#include <algorithm>
#include <stdexcept>

#include "cache/kernel_cache.hpp"
#include "params.cuh"

namespace jitbmm {

struct SemiringBMM::Impl {
  Problem problem;
  KernelSpec spec;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when the problem has no outputs (nothing to launch)
  jb::BmmParams params{};                     // sizes and strides; pointers filled per call
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
};

namespace {

constexpr unsigned kMaxGridYZ = 65535;

jb::BmmParams make_params(const Problem& p) {
  jb::BmmParams q{};
  q.B = p.shape.B;
  q.M = p.shape.M;
  q.N = p.shape.N;
  q.K = p.shape.K;
  const Strides a = p.a(), b = p.b(), o = p.out();
  q.a_batch = a.batch, q.a_row = a.row, q.a_col = a.col;
  q.b_batch = b.batch, q.b_row = b.row, q.b_col = b.col;
  q.out_batch = o.batch, q.out_row = o.row, q.out_col = o.col;
  return q;
}

void check_pointer(const void* ptr, const char* name, bool empty) {
  if (!ptr && !empty) throw std::invalid_argument(std::string(name) + ": null device pointer");
}

} // namespace

SemiringBMM SemiringBMM::get(const Problem& problem) { return get(problem, default_spec(problem)); }

SemiringBMM SemiringBMM::get(const Problem& problem, const KernelSpec& spec) {
  check_spec_fits(spec, problem);
  auto impl = std::make_shared<Impl>();
  impl->problem = problem;
  impl->spec = spec;
  impl->device = current_device();
  impl->params = make_params(problem);
  const Shape& s = problem.shape;
  if (s.B > 0 && s.M > 0 && s.N > 0) {
    if (spec.threads() > impl->device->max_threads_per_block)
      throw std::invalid_argument("spec.block: " + std::to_string(spec.threads()) + " threads exceed this device's " +
                                  std::to_string(impl->device->max_threads_per_block));
    impl->kernel = load_kernel(*impl->device, spec);
    impl->block[0] = spec.block_x;
    impl->block[1] = spec.block_y;
    const int64_t gx = (s.N + spec.block_x - 1) / spec.block_x;
    if (gx > INT32_MAX) throw std::invalid_argument("shape.N: too large for one grid");
    impl->grid[0] = static_cast<unsigned>(gx);
    impl->grid[1] = static_cast<unsigned>(std::min<int64_t>((s.M + spec.block_y - 1) / spec.block_y, kMaxGridYZ));
    impl->grid[2] = static_cast<unsigned>(std::min<int64_t>(s.B, kMaxGridYZ));
  }
  return SemiringBMM(std::move(impl));
}

void SemiringBMM::operator()(const void* a, const void* b, void* out, Stream stream) const {
  if (impl_->problem.with_argmax)
    throw std::invalid_argument("argmax: this plan was made with with_argmax; pass an argmax pointer");
  (*this)(a, b, out, nullptr, stream);
}

void SemiringBMM::operator()(const void* a, const void* b, void* out, int32_t* argmax, Stream stream) const {
  const Impl& im = *impl_;
  const Shape& s = im.problem.shape;
  const bool no_outputs = s.B == 0 || s.M == 0 || s.N == 0;
  check_pointer(a, "a", no_outputs || s.K == 0);
  check_pointer(b, "b", no_outputs || s.K == 0);
  check_pointer(out, "out", no_outputs);
  if (im.problem.with_argmax) check_pointer(argmax, "argmax", no_outputs);
  else if (argmax) throw std::invalid_argument("argmax: given, but the plan was made without with_argmax");
  if (no_outputs) return;
  jb::BmmParams params = im.params;
  params.a = a;
  params.b = b;
  params.out = out;
  params.argmax = argmax;
  void* args[] = {&params};
  const DriverApi& d = driver();
  ScopedContext scope(im.device->context);
  check(d.cuLaunchKernel(im.kernel->function, im.grid[0], im.grid[1], im.grid[2], im.block[0], im.block[1],
                         im.block[2], 0, reinterpret_cast<CUstream>(stream), args, nullptr),
        ("cuLaunchKernel(" + im.kernel->generated.name + ")").c_str());
}

const Problem& SemiringBMM::problem() const { return impl_->problem; }
const KernelSpec& SemiringBMM::spec() const { return impl_->spec; }

const std::string& SemiringBMM::kernel_name() const {
  static const std::string none = "(no kernel: empty problem)";
  return impl_->kernel ? impl_->kernel->generated.name : none;
}

const std::string& SemiringBMM::source() const {
  static const std::string none;
  return impl_->kernel ? impl_->kernel->generated.source : none;
}

int SemiringBMM::registers() const { return impl_->kernel ? impl_->kernel->registers : 0; }
std::string SemiringBMM::device_name() const { return impl_->device->name; }
std::string SemiringBMM::arch() const { return impl_->device->arch(); }

JitLogBMM JitLogBMM::get(Shape shape) {
  Problem p;
  p.semiring = Semiring::log;
  p.dtype = DType::f32;
  p.shape = shape;
  return JitLogBMM(SemiringBMM::get(p));
}

Stats stats() { return Stats{nvrtc_compile_count()}; }

} // namespace jitbmm
