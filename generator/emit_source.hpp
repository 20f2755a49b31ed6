// Generator: KernelSpec → CUDA source text and a stable, readable kernel name.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "generator/entry_point.hpp"
#include "jitbmm/kernel_spec.hpp"

namespace jitbmm {

struct GeneratedKernel {
  std::string name;   // e.g. log_f32_linear_b32x8_9f2c01ab: readable parts plus 8 hex of the source's SHA-256
  std::string source; // self-contained: the templates it needs are inlined, so the text alone is the kernel
  std::vector<std::string> entries = {""}; // its extern "C" entry points: name + suffix; "" is the main one
  // The architecture features it cannot run without (generator/arch_features.hpp): its spec's, and clusters where an
  // entry has them. With kWgmma it is built for the architecture-specific target (sm_90a).
  unsigned needs = 0;
  // Whether every entry waits for the grids before it before anything else (templates/core/grid_dependency.cuh),
  // so that it may be launched to overlap the end of the previous kernel of its stream (runtime/launch.cpp).
  bool waits_for_prior_grids = false;
  // A quick build: the same source compiled with less optimisation, in about half the time, for a stand-in that runs
  // only until the optimised build is ready (runtime/jit.hpp: QuickBuild). Not part of the source or the name.
  bool quick = false;
};

GeneratedKernel emit_kernel(const KernelSpec& spec);

// Where a source names its own kernel: finish_kernel replaces every occurrence with the final name, the readable
// part then 8 hex of the SHA-256 of the source that still holds the slot (so the name follows every byte of it).
constexpr const char* kNameSlot = "JITBMM_KERNEL_NAME";
GeneratedKernel finish_kernel(const std::string& readable, std::string source);

// A generated unit from its text up to the instantiation (the header comment and the inlined templates): appends
// the frame every unit ends with, a static_assert that the device's argument block `params` (a struct of
// templates/, the one every entry takes) has the host's size `params_bytes`, and the entry points, then names the
// unit as finish_kernel does and lists its entries. Every entry first waits for the grids before it, then runs
// `prologue` (a statement) and its call, then lets the next grid be scheduled (templates/core/grid_dependency.cuh,
// inlined into the frame).
GeneratedKernel finish_unit(const std::string& readable, std::string head, const std::string& params,
                            std::size_t params_bytes, const std::vector<EntryPoint>& entries,
                            const std::string& prologue = "");

// The templates `headers` need (paths under templates/), each once and after every template it #includes, framed by
// a comment naming it, without its include lines and include guard: what emit_kernel puts before the entry points.
// `text_of` gives a template's text by its path (the embedded templates by default). std::logic_error on a cycle of
// includes or an include that is not a template's path.
using TemplateTexts = std::function<std::string_view(std::string_view path)>;
std::string inline_templates(const std::vector<const char*>& headers, const TemplateTexts& text_of = {});

// A throughput probe for the exp unit (ex2.approx), used to report the share of the measured ceiling.
// Kernel signature: (float* sink, int iterations); each thread performs 8 * iterations exp2 operations.
GeneratedKernel emit_exp_probe();
constexpr int kExpProbeChains = 8;

// The same for the FP32 pipe: each thread performs 8 * iterations fused multiply-adds.
GeneratedKernel emit_fma_probe();

} // namespace jitbmm
