// The consumer's program: the public headers only; a log-semiring product by the CPU reference, checked by hand,
// then the GPU path, which on a machine without one must say so (NoDriverError) rather than crash.
#include <cmath>
#include <cstdio>
#include <vector>

#include <jitbmm/errors.hpp>
#include <jitbmm/plan.hpp>
#include <jitbmm/reference.hpp>
#include <jitbmm/version.hpp>

int main() {
  jitbmm::Problem p;
  p.shape = {1, 2, 3, 2}; // B, M, K, N
  const std::vector<float> a = {0.f, 1.f, 2.f, -1.f, 0.5f, 3.f}, b = {1.f, 0.f, -2.f, 4.f, 0.25f, 1.f};
  const std::vector<jitbmm::reference::Element> out = jitbmm::reference::compute(p, a.data(), b.data());
  double worst = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += std::exp(double(a[i * 3 + k]) + double(b[k * 2 + j]));
      worst = std::fmax(worst, std::fabs(std::log(s) - out[i * 2 + j].value));
    }
  std::printf("jitbmm %s: reference log-semiring 1x2x3x2, largest difference %.3g\n", jitbmm::kVersion, worst);
  if (worst > 1e-12) return 1;
  try {
    jitbmm::JitLogBMM::get(p.shape);
    std::printf("a GPU is present\n");
  } catch (const jitbmm::NoDriverError& e) {
    std::printf("no GPU: %s\n", e.what());
  }
  return 0;
}
