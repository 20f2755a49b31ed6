// Generator: KernelSpec → CUDA source text and a stable, readable kernel name.
#pragma once

#include <string>
#include <vector>

#include "jitbmm/kernel_spec.hpp"

namespace jitbmm {

struct GeneratedKernel {
  std::string name;   // e.g. log_f32_linear_b32x8_9f2c01ab: readable parts plus 8 hex of the source's SHA-256
  std::string source; // self-contained: the templates it needs are inlined, so the text alone is the kernel
  std::vector<std::string> entries = {""}; // its extern "C" entry points: name + suffix; "" is the main one
  bool arch_specific = false; // built for the GPU's architecture-specific target (sm_90a): see arch_specific(spec)
};

GeneratedKernel emit_kernel(const KernelSpec& spec);

// A throughput probe for the exp unit (ex2.approx), used to report the share of the measured ceiling.
// Kernel signature: (float* sink, int iterations); each thread performs 8 * iterations exp2 operations.
GeneratedKernel emit_exp_probe();
constexpr int kExpProbeChains = 8;

// The same for the FP32 pipe: each thread performs 8 * iterations fused multiply-adds.
GeneratedKernel emit_fma_probe();

} // namespace jitbmm
