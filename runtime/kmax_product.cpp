#include "jitbmm/kmax_product.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "generator/distribution_source.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "support/checked_size.hpp"
#include "templates/structured/kmax_params.cuh"

namespace jitbmm {

static_assert(KMaxProduct::kMaxK == jb::kMaxKMax, "the library's limit is the kernel's");

struct KMaxProduct::Impl {
  DType dtype = DType::f32;
  int k = 1;
  int64_t B = 0, M = 0, K = 0, N = 0;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null for an empty product
};

KMaxProduct KMaxProduct::get(DType dtype, int k, int64_t B, int64_t M, int64_t K, int64_t N) {
  if (dtype != DType::f32 && dtype != DType::f64)
    throw std::invalid_argument(std::string("dtype: the k-max semiring's product takes f32 or f64, got ") +
                                dtype_info(dtype).name);
  if (k < 1 || k > kMaxK)
    throw std::invalid_argument("k: 1 to " + std::to_string(kMaxK) + " values a vector, got " + std::to_string(k));
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"B", B}, {"M", M}, {"K", K}, {"N", N}})
    if (v < 0) throw std::invalid_argument(std::string("shape.") + name + ": must be >= 0, got " + std::to_string(v));
  if (M > int64_t(65535) * jb::kKMaxTile)
    throw std::invalid_argument("shape.M: at most " + std::to_string(65535 * jb::kKMaxTile));
  // An index (kk·k + r1)·k + r2 fits int32.
  if (K > (int64_t(1) << 31) / (int64_t(k) * k))
    throw std::invalid_argument("shape.K: at most " + std::to_string((int64_t(1) << 31) / (int64_t(k) * k)));
  checked_product({k, B, M, K, 8}, "a: k*B*M*K*8 bytes");
  checked_product({k, B, K, N, 8}, "b: k*B*K*N*8 bytes");
  checked_product({k, B, M, N, 8}, "out: k*B*M*N*8 bytes");
  auto impl = std::make_shared<Impl>();
  impl->dtype = dtype, impl->k = k;
  impl->B = B, impl->M = M, impl->K = K, impl->N = N;
  impl->device = current_device();
  check_supported(*impl->device);
  if (B > 0 && M > 0 && N > 0) impl->kernel = load_generated(*impl->device, emit_kmax_product_kernel(dtype, k));
  return KMaxProduct(std::move(impl));
}

void KMaxProduct::operator()(const void* a, const void* b, void* out, int32_t* index, Stream stream) const {
  const Impl& im = *impl_;
  const bool empty = !im.kernel, no_terms = empty || im.K == 0;
  check_pointer(a, "a", no_terms);
  check_pointer(b, "b", no_terms);
  check_pointer(out, "out", empty);
  check_pointer(index, "index", empty);
  const int bytes = dtype_info(im.dtype).size_bytes;
  check_alignment(a, "a", bytes);
  check_alignment(b, "b", bytes);
  check_alignment(out, "out", bytes);
  check_alignment(index, "index", 4);
  if (empty) return;
  ScopedContext scope(im.device->context);
  jb::KMaxProductParams p{};
  p.a = a, p.b = b, p.out = out, p.index = index;
  p.B = im.B, p.M = im.M, p.K = im.K, p.N = im.N;
  const int64_t tile = jb::kKMaxTile;
  const unsigned grid[3] = {unsigned(std::min<int64_t>((im.N + tile - 1) / tile, int64_t(1) << 31)),
                            unsigned((im.M + tile - 1) / tile), unsigned(std::min<int64_t>(im.B, 65535))},
                 block[3] = {unsigned(tile), unsigned(tile), 1};
  void* args[] = {&p};
  launch(*im.kernel, "", grid, block, args, reinterpret_cast<CUstream>(stream));
}

std::string KMaxProduct::kernel_name() const { return impl_->kernel ? impl_->kernel->generated.name : ""; }

} // namespace jitbmm
