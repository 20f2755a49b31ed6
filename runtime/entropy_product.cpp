#include "jitbmm/entropy_product.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "generator/distribution_source.hpp"
#include "runtime/device.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "support/checked_size.hpp"
#include "templates/structured/entropy_params.cuh"

namespace jitbmm {

struct EntropyProduct::Impl {
  DType dtype = DType::f32;
  int64_t B = 0, M = 0, K = 0, N = 0;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null for an empty product
};

namespace {

// One entry over a rows × cols grid of elements, blocks of kEntropyTile² threads, the batches along z.
void run(const EntropyProduct::Impl& im, const char* suffix, int64_t rows, int64_t cols, jb::EntropyProductParams p,
         CUstream stream) {
  const int64_t tile = jb::kEntropyTile;
  const unsigned grid[3] = {unsigned((cols + tile - 1) / tile), unsigned((rows + tile - 1) / tile),
                            unsigned(std::min<int64_t>(im.B, 65535))},
                 block[3] = {unsigned(tile), unsigned(tile), 1};
  void* args[] = {&p};
  launch(*im.kernel, suffix, grid, block, args, stream);
}

} // namespace

EntropyProduct EntropyProduct::get(DType dtype, int64_t B, int64_t M, int64_t K, int64_t N) {
  if (dtype != DType::f32 && dtype != DType::f64)
    throw std::invalid_argument(std::string("dtype: the expectation semiring's product takes f32 or f64, got ") +
                                dtype_info(dtype).name);
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"B", B}, {"M", M}, {"K", K}, {"N", N}})
    if (v < 0) throw std::invalid_argument(std::string("shape.") + name + ": must be >= 0, got " + std::to_string(v));
  // Rows and columns of blocks within the grid's y and x.
  if (M > int64_t(65535) * jb::kEntropyTile || K > int64_t(65535) * jb::kEntropyTile)
    throw std::invalid_argument("shape: M and K of at most " + std::to_string(65535 * jb::kEntropyTile));
  checked_product({2, B, M, K, 8}, "a: 2*B*M*K*8 bytes");
  checked_product({2, B, K, N, 8}, "b: 2*B*K*N*8 bytes");
  checked_product({2, B, M, N, 8}, "out: 2*B*M*N*8 bytes");
  auto impl = std::make_shared<Impl>();
  impl->dtype = dtype;
  impl->B = B, impl->M = M, impl->K = K, impl->N = N;
  impl->device = current_device();
  check_supported(*impl->device);
  if (B > 0 && M > 0 && N > 0) impl->kernel = load_generated(*impl->device, emit_entropy_product_kernel(dtype));
  return EntropyProduct(std::move(impl));
}

void EntropyProduct::operator()(const void* a, const void* b, void* out, Stream stream) const {
  const Impl& im = *impl_;
  const bool empty = !im.kernel, no_terms = empty || im.K == 0;
  check_pointer(a, "a", no_terms);
  check_pointer(b, "b", no_terms);
  check_pointer(out, "out", empty);
  const int bytes = dtype_info(im.dtype).size_bytes;
  check_alignment(a, "a", bytes);
  check_alignment(b, "b", bytes);
  check_alignment(out, "out", bytes);
  if (empty) return;
  ScopedContext scope(im.device->context);
  jb::EntropyProductParams p{};
  p.a = a, p.b = b, p.out = out;
  p.B = im.B, p.M = im.M, p.K = im.K, p.N = im.N;
  run(im, "", im.M, im.N, p, reinterpret_cast<CUstream>(stream));
}

void EntropyProduct::backward(const void* a, const void* b, const void* out, const void* grad_out, void* grad_a,
                              void* grad_b, Stream stream) const {
  const Impl& im = *impl_;
  // A product with no term (B or K 0) has nothing to differentiate; one with no output (M or N 0) gives zero
  // gradients to the operand that has elements.
  const bool nothing = im.B == 0 || im.K == 0 || (!grad_a && !grad_b);
  const bool zeros = !nothing && (im.M == 0 || im.N == 0);
  check_pointer(a, "a", nothing || zeros);
  check_pointer(b, "b", nothing || zeros);
  check_pointer(out, "out", nothing || zeros);
  check_pointer(grad_out, "grad_out", nothing || zeros);
  const int bytes = dtype_info(im.dtype).size_bytes;
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"a", a}, {"b", b}, {"out", out},
                                  {"grad_out", grad_out}, {"grad_a", grad_a}, {"grad_b", grad_b}})
    check_alignment(ptr, name, bytes);
  if (nothing) return;
  ScopedContext scope(im.device->context);
  const CUstream cu = reinterpret_cast<CUstream>(stream);
  if (zeros) { // M or N is 0: every input gradient is 0
    auto clear = [&](void* grad, int64_t elements) {
      if (grad && elements > 0)
        check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(grad), 0, std::size_t(elements) * bytes, cu),
              "cuMemsetD8Async");
    };
    clear(grad_a, 2 * im.B * im.M * im.K);
    clear(grad_b, 2 * im.B * im.K * im.N);
    return;
  }
  jb::EntropyProductParams p{};
  p.a = a, p.b = b, p.out = const_cast<void*>(out), p.grad_out = grad_out;
  p.grad_a = grad_a, p.grad_b = grad_b;
  p.B = im.B, p.M = im.M, p.K = im.K, p.N = im.N;
  if (grad_a) run(im, "_grad_a", im.M, im.K, p, cu);
  if (grad_b) run(im, "_grad_b", im.K, im.N, p, cu);
}

std::string EntropyProduct::kernel_name() const { return impl_->kernel ? impl_->kernel->generated.name : ""; }

} // namespace jitbmm
