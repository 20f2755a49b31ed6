// Renders generated kernels: a header naming the spec, the templates the strategy needs (inlined, in order),
// and a small instantiation block with the extern "C" entry point.
#include "generator/emit_source.hpp"

#include <sstream>
#include <stdexcept>

#include "cache/sha256.hpp"
#include "generator/embedded_templates.hpp"
#include "jitbmm/version.hpp"
#include "params.cuh"

namespace jitbmm {

std::string_view template_text(std::string_view name) {
  for (const auto& t : embedded_templates())
    if (name == t.name) return t.text;
  throw std::logic_error("template '" + std::string(name) + "' was not embedded at build time");
}

namespace {

constexpr const char* kNameSlot = "JITBMM_KERNEL_NAME";

// Appends a template without its include guard pragma, framed so the generated file shows where each part begins.
void inline_template(std::ostringstream& os, std::string_view name) {
  std::string_view text = template_text(name);
  os << "// ---- templates/" << name << " ----\n";
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line != "#pragma once") os << line << '\n';
    pos = end + 1;
  }
}

std::string readable_name(const KernelSpec& s) {
  std::ostringstream os;
  os << semiring_info(s.semiring).name << '_' << dtype_info(s.dtype).name;
  if (s.out_dtype != s.dtype) os << "to" << dtype_info(s.out_dtype).name;
  os << '_' << strategy_name(s.strategy);
  if (s.strategy == Strategy::exp_matmul) os << '_' << math_name(s.math) << '_';
  if (s.pass != Pass::forward) os << '_' << pass_name(s.pass);
  if (s.is_tiled())
    os << s.tile_m << 'x' << s.tile_n << 'x' << s.tile_k << "_t" << s.thread_m << 'x' << s.thread_n
       << (s.min_blocks > 1 ? "_mb" + std::to_string(s.min_blocks) : "");
  else
    os << "_b" << s.block_x << 'x' << s.block_y;
  if (s.index64) os << "_i64";
  if (s.with_argmax) os << "_arg";
  return os.str();
}

// The per-term policy of the generic tiled kernel: fast NaN-propagating max/min for f32 accumulators without
// argmax, the semiring's own online state otherwise.
std::string tiled_policy(const KernelSpec& s, const std::string& semiring) {
  const bool fast = std::string(dtype_info(s.dtype).acc_type) == "float" && !s.with_argmax;
  if (fast && s.semiring == Semiring::max_plus) return "jb::MaxPlusTerm";
  if (fast && s.semiring == Semiring::min_plus) return "jb::MinPlusTerm";
  if (fast && s.semiring == Semiring::max_times) return "jb::MaxTimesTerm";
  return "jb::GenericTerm<" + semiring + ", " + dtype_info(s.dtype).acc_type + ">";
}

// The device call that implements a spec, e.g. "jb::linear_kernel<jb::LogSemiring<float>, jb::f32, jb::f32, int>".
std::string kernel_call(const KernelSpec& s) {
  const std::string acc = dtype_info(s.dtype).acc_type;
  const std::string semiring = std::string(semiring_info(s.semiring).device_type) + "<" + acc + ">";
  const std::string io = std::string(dtype_info(s.dtype).device_type) + ", " + dtype_info(s.out_dtype).device_type +
                         ", " + (s.index64 ? "long long" : "int");
  const std::string tile = std::to_string(s.tile_m) + ", " + std::to_string(s.tile_n) + ", " +
                           std::to_string(s.tile_k) + ", " + std::to_string(s.thread_m) + ", " +
                           std::to_string(s.thread_n);
  switch (s.strategy) {
  case Strategy::linear:
    return "jb::linear_kernel<" + semiring + ", " + io + ">";
  case Strategy::linear_two_pass:
    return "jb::linear_two_pass_kernel<" + io + ">";
  case Strategy::warp:
    return "jb::warp_kernel<" + semiring + ", " + io + ", " + std::to_string(s.block_x) + ">";
  case Strategy::block_tree:
    return "jb::block_tree_kernel<" + semiring + ", " + io + ", " + std::to_string(s.block_x) + ">";
  case Strategy::tiled:
  case Strategy::split_k:
    if (s.semiring == Semiring::log && acc == "float") return "jb::tiled_log_kernel<" + io + ", " + tile + ">";
    return "jb::tiled_kernel<" + tiled_policy(s, semiring) + ", " + semiring + ", " + io + ", " + tile + ">";
  case Strategy::exp_matmul:
    if (s.math == Math::fma) return "jb::exp_matmul_fma_kernel<" + io + ", " + tile + ">";
    return "jb::exp_matmul_mma_kernel<" + io + ", " + tile + ", " + (s.math == Math::tf32x3 ? "true" : "false") + ">";
  case Strategy::scatter:
    break; // backward only: emit_grad_kernel
  }
  throw std::invalid_argument("strategy: unknown enum value");
}

// exp_matmul's other two entry points: the prepare pass and the exact repair pass (on the tiles the guard flagged,
// at the tile em_repair_tile names).
void emit_exp_matmul_passes(std::ostringstream& os, const KernelSpec& s) {
  const std::string in = dtype_info(s.dtype).device_type, acc = dtype_info(s.dtype).acc_type,
                    index = s.index64 ? "long long" : "int";
  const std::string io = in + ", " + dtype_info(s.out_dtype).device_type + ", " + index;
  const std::string tile = acc == "double" ? "64, 64, 8, 4, 4" : "128, 128, 16, 8, 8";
  // The prepare pass waits on memory: 4 blocks an SM (64 registers) keep more loads in flight.
  os << "extern \"C\" __global__ void __launch_bounds__(256, 4) " << kNameSlot
     << "_prepare(const jb::BmmParams p) {\n  jb::em_prepare_kernel<" << in << ", " << index << ", " << acc << ", "
     << (s.math == Math::fma    ? 0
         : s.math == Math::tf32 ? 1
                                : 2)
     << ">(p);\n}\n"
     << "extern \"C\" __global__ void __launch_bounds__(256, 1) " << kNameSlot
     << "_repair(const jb::BmmParams p) {\n  jb::em_repair_kernel<" << io << ", " << tile << ">(p);\n}\n";
}

// The device call of a backward spec and its workspace store, e.g.
// "jb::grad_tiled_kernel<jb::LogGrad, jb::f32, jb::f32, int, 128, 64, 16, 8, 4, true>".
std::string grad_call(const KernelSpec& s) {
  const std::string ga = s.pass == Pass::grad_a ? "true" : "false";
  const std::string io = std::string(dtype_info(s.dtype).device_type) + ", " + dtype_info(s.out_dtype).device_type +
                         ", " + (s.index64 ? "long long" : "int");
  if (s.strategy == Strategy::scatter)
    return "jb::grad_scatter_kernel<" + io + ", " + ga + ", " + (s.semiring == Semiring::max_times ? "true" : "false") +
           ">";
  const std::string sem = s.semiring == Semiring::log ? "jb::LogGrad" : "jb::PlusTimesGrad";
  return "jb::grad_tiled_kernel<" + sem + ", " + io + ", " + std::to_string(s.tile_m) + ", " +
         std::to_string(s.tile_n) + ", " + std::to_string(s.tile_k) + ", " + std::to_string(s.thread_m) + ", " +
         std::to_string(s.thread_n) + ", " + ga + ">";
}

GeneratedKernel finish(const std::string& readable, std::string source);

GeneratedKernel emit_grad_kernel(const KernelSpec& spec) {
  std::ostringstream os;
  os << "// Generated by jitbmm " << kVersion << ". Kernel " << kNameSlot << "\n"
     << "// spec: " << to_string(spec) << "\n\n";
  for (const char* part : {"params.cuh", "dtypes.cuh", "kslice.cuh", "backward.cuh"}) inline_template(os, part);
  const std::string index = spec.index64 ? "long long" : "int";
  os << "// ---- instantiation ----\n"
     << "static_assert(sizeof(jb::GradParams) == " << sizeof(jb::GradParams)
     << ", \"host and device disagree on GradParams\");\n"
     << "extern \"C\" __global__ void __launch_bounds__(" << spec.threads() << ", "
     << (spec.is_tiled() ? spec.min_blocks : 1) << ") " << kNameSlot << "(const jb::GradParams p) {\n  "
     << grad_call(spec) << "(p);\n}\n"
     << "extern \"C\" __global__ void __launch_bounds__(256, 1) " << kNameSlot
     << "_store(const jb::GradParams p) {\n  jb::grad_store_kernel<" << dtype_info(spec.dtype).device_type << ", "
     << index << ", " << (spec.pass == Pass::grad_a ? "true" : "false") << ">(p);\n}\n";
  return finish(readable_name(spec), os.str());
}

// Replaces the name slot with the final name, derived from the hash of the source that still holds the slot.
GeneratedKernel finish(const std::string& readable, std::string source) {
  GeneratedKernel k;
  k.name = readable + '_' + sha256_hex(source).substr(0, 8);
  for (std::size_t at = source.find(kNameSlot); at != std::string::npos; at = source.find(kNameSlot, at))
    source.replace(at, std::string(kNameSlot).size(), k.name);
  k.source = std::move(source);
  return k;
}

} // namespace

GeneratedKernel emit_kernel(const KernelSpec& spec) {
  if (spec.pass != Pass::forward) return emit_grad_kernel(spec);
  // k_chunk is a launch value: specs differing only there share one source, one binary and one cache entry.
  KernelSpec source_spec = spec;
  source_spec.k_chunk = 0;
  std::ostringstream os;
  os << "// Generated by jitbmm " << kVersion << ". Kernel " << kNameSlot << "\n"
     << "// spec: " << to_string(source_spec) << "\n\n";
  for (const char* part : {"params.cuh", "dtypes.cuh", "semirings.cuh", "linear.cuh", "reductions.cuh"})
    inline_template(os, part);
  if (spec.is_tiled())
    for (const char* part : {"kslice.cuh", "tiled.cuh", "tiled_log.cuh", "combine.cuh"}) inline_template(os, part);
  if (spec.strategy == Strategy::exp_matmul)
    for (const char* part :
         {"exp_matmul_bounds.cuh", "exp_matmul_prepare.cuh", "exp_matmul.cuh", "exp_matmul_repair.cuh"})
      inline_template(os, part);
  os << "// ---- instantiation ----\n"
     << "static_assert(sizeof(jb::BmmParams) == " << sizeof(jb::BmmParams)
     << ", \"host and device disagree on BmmParams\");\n"
     // Min-blocks 1: with the bare bound ptxas aims at full occupancy and caps registers low enough to spill.
     << "extern \"C\" __global__ void __launch_bounds__(" << spec.threads() << ", "
     << (spec.is_tiled() ? spec.min_blocks : 1) << ") " << kNameSlot << "(const jb::BmmParams p) {\n  "
     << kernel_call(spec) << "(p);\n}\n";
  if (spec.strategy == Strategy::split_k)
    os << "extern \"C\" __global__ void __launch_bounds__(256, 1) " << kNameSlot
       << "_combine(const jb::BmmParams p) {\n"
       << "  jb::combine_kernel<" << semiring_info(spec.semiring).device_type << '<' << dtype_info(spec.dtype).acc_type
       << ">, " << dtype_info(spec.out_dtype).device_type << ", " << (spec.index64 ? "long long" : "int") << ", "
       << dtype_info(spec.dtype).acc_type << ">(p);\n}\n";
  if (spec.strategy == Strategy::exp_matmul) emit_exp_matmul_passes(os, spec);
  return finish(readable_name(spec), os.str());
}

namespace {

// A throughput probe: `chains` independent dependency chains per thread of one PTX instruction.
GeneratedKernel emit_probe(const std::string& readable, const std::string& what, const std::string& instruction) {
  std::ostringstream os;
  os << "// Generated by jitbmm " << kVersion << ". " << what << " throughput probe " << kNameSlot << "\n"
     << "extern \"C\" __global__ void " << kNameSlot << "(float* sink, int iterations) {\n"
     << "  float x[" << kExpProbeChains << "];\n"
     << "  for (int c = 0; c < " << kExpProbeChains << "; ++c) x[c] = -1e-3f * (threadIdx.x + c);\n"
     << "  for (int it = 0; it < iterations; ++it) {\n"
     << "#pragma unroll\n"
     << "    for (int c = 0; c < " << kExpProbeChains << "; ++c) {\n"
     << "      " << instruction << "\n"
     << "    }\n"
     << "  }\n"
     << "  float s = 0.f;\n"
     << "  for (int c = 0; c < " << kExpProbeChains << "; ++c) s += x[c];\n"
     << "  if (s == 12345.f) sink[threadIdx.x] = s;\n"
     << "}\n";
  return finish(readable, os.str());
}

} // namespace

GeneratedKernel emit_fma_probe() {
  return emit_probe("probe_ffma", "FP32 FMA",
                    "asm volatile(\"fma.rn.f32 %0, %0, 0f3F7FFFFF, 0f33D6BF95;\" : \"+f\"(x[c]));");
}

GeneratedKernel emit_exp_probe() {
  return emit_probe(
      "probe_exp2", "Exp-unit",
      "float y; asm volatile(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x[c])); x[c] = y - 1.0f;");
}

} // namespace jitbmm
