// Renders generated kernels: a header naming the spec, the strategy's entry headers with every template they
// #include (each inlined once, after what it includes), and a small instantiation block with its extern "C" entry
// points. The result is one self-contained source: NVRTC needs no include path, and the cache key covers every byte.
#include "generator/emit_source.hpp"

#include <initializer_list>
#include <set>
#include <sstream>
#include <stdexcept>

#include "support/sha256.hpp"
#include "generator/arch_features.hpp"
#include "generator/embedded_templates.hpp"
#include "generator/needed_features.hpp"
#include "jitbmm/version.hpp"
#include "generator/strategy.hpp"
#include "templates/core/params.cuh"

namespace jitbmm {

std::string_view template_text(std::string_view name) {
  for (const auto& t : embedded_templates())
    if (name == t.name) return t.text;
  throw std::logic_error("template '" + std::string(name) + "' was not embedded at build time");
}

namespace {


// The template a line #includes ("" if none). Templates include one another by their path under templates/.
std::string_view included(std::string_view line) {
  std::size_t at = line.find_first_not_of(" \t");
  if (at == std::string_view::npos || line[at] != '#') return {};
  at = line.find_first_not_of(" \t", at + 1);
  if (at == std::string_view::npos || line.substr(at, 7) != "include") return {};
  const std::size_t open = line.find('"', at), close = open == std::string_view::npos ? open : line.find('"', open + 1);
  if (close == std::string_view::npos)
    throw std::logic_error("a template includes something other than a template: " + std::string(line));
  return line.substr(open + 1, close - open - 1);
}

// Inlines templates in dependency order: a template's includes first (each template once in the whole source),
// then its own lines without the include lines and the include guard pragma, framed so the generated file shows
// where each part begins.
class Inliner {
public:
  Inliner(std::ostringstream& os, const TemplateTexts& text_of) : os_(os), text_of_(text_of) {}

  void add(std::string_view name) {
    const std::string key(name);
    if (done_.count(key)) return;
    if (!open_.insert(key).second) throw std::logic_error("templates include each other in a cycle through " + key);
    const std::string_view text = text_of_(name);
    for_each_line(text, [&](std::string_view line) {
      if (const std::string_view dep = included(line); !dep.empty()) add(dep);
    });
    os_ << "// ---- templates/" << name << " ----\n";
    for_each_line(text, [&](std::string_view line) {
      if (line != "#pragma once" && included(line).empty()) os_ << line << '\n';
    });
    open_.erase(key);
    done_.insert(key);
  }

private:
  template <class F> static void for_each_line(std::string_view text, F&& f) {
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      f(text.substr(pos, end - pos));
      pos = end + 1;
    }
  }

  std::ostringstream& os_;
  const TemplateTexts& text_of_;
  std::set<std::string> done_, open_;
};

// The spec's parts joined by '_', the numbers within a part by 'x' (a C identifier, never "__"): e.g.
// log_f32_tiled_128x64x16_t8x4_mb2, log_bf16_exp_matmul_tf32x3_grad_a_64x64x16_t4x4,
// max_times_f16tof32_linear_b32x8_i64_arg.
std::string readable_name(const KernelSpec& s) {
  const unsigned fields = strategy_def(s).fields;
  std::vector<std::string> parts = {semiring_info(s.semiring).name, dtype_info(s.dtype).name,
                                    strategy_name(s.strategy)};
  if (s.out_dtype != s.dtype) parts[1] += std::string("to") + dtype_info(s.out_dtype).name;
  if (fields & kMathField) parts.push_back(math_name(s.math));
  if (s.pass != Pass::forward) parts.push_back(pass_name(s.pass));
  auto dims = [](std::initializer_list<int> v) {
    std::string text;
    for (int x : v) text += (text.empty() ? "" : "x") + std::to_string(x);
    return text;
  };
  if (fields & kTileFields) {
    parts.push_back(dims({s.tile_m, s.tile_n, s.tile_k}));
    parts.push_back("t" + dims({s.thread_m, s.thread_n}));
    if (s.min_blocks > 1) parts.push_back("mb" + std::to_string(s.min_blocks));
  } else {
    parts.push_back("b" + dims({s.block_x, s.block_y}));
  }
  if (s.index64) parts.push_back("i64");
  if (s.with_argmax) parts.push_back("arg");
  std::string name;
  for (const std::string& part : parts) name += (name.empty() ? "" : "_") + part;
  return name;
}

} // namespace

GeneratedKernel finish_kernel(const std::string& readable, std::string source) {
  GeneratedKernel k;
  k.name = readable + '_' + sha256_hex(source).substr(0, 8);
  for (std::size_t at = source.find(kNameSlot); at != std::string::npos; at = source.find(kNameSlot, at))
    source.replace(at, std::string(kNameSlot).size(), k.name);
  k.source = std::move(source);
  return k;
}

GeneratedKernel finish_unit(const std::string& readable, std::string head, const std::string& params,
                            std::size_t params_bytes, const std::vector<EntryPoint>& entries,
                            const std::string& prologue) {
  std::ostringstream os;
  os << inline_templates({"core/grid_dependency.cuh"}) << "// ---- instantiation ----\n"
     << "static_assert(sizeof(jb::" << params << ") == " << params_bytes << ", \"host and device disagree on " << params
     << "\");\n";
  std::vector<std::string> suffixes;
  unsigned needs = 0;
  for (const EntryPoint& e : entries) {
    if (e.cluster > 1) needs |= kClusters;
    os << "extern \"C\" __global__ void ";
    if (e.cluster > 1) os << "__cluster_dims__(" << e.cluster << ", 1, 1) ";
    os << "__launch_bounds__(" << e.threads << ", " << e.min_blocks << ") " << kNameSlot << e.suffix
       << "(const jb::" << params << " p) {\n"
       << "  jb::wait_for_prior_grids();\n";
    if (!prologue.empty()) os << "  " << prologue << "\n";
    os << "  " << e.call << "(p);\n  jb::let_dependent_grids_launch();\n}\n";
    suffixes.push_back(e.suffix);
  }
  GeneratedKernel k = finish_kernel(readable, std::move(head) + os.str());
  k.entries = std::move(suffixes);
  k.needs = needs;
  k.waits_for_prior_grids = true;
  return k;
}

std::string inline_templates(const std::vector<const char*>& headers, const TemplateTexts& text_of) {
  std::ostringstream os;
  const TemplateTexts embedded = [](std::string_view path) { return template_text(path); };
  Inliner inliner(os, text_of ? text_of : embedded);
  for (const char* header : headers) inliner.add(header);
  return os.str();
}

// Any spec, through its strategy's entry: the header naming the spec, the templates its entry headers need, and the
// entry points.
GeneratedKernel emit_kernel(const KernelSpec& spec) {
  const Rendering r = strategy_def(spec).render(spec);
  // k_chunk is a launch value: specs differing only there share one source, one binary and one cache entry.
  KernelSpec source_spec = spec;
  source_spec.k_chunk = 0;
  std::ostringstream os;
  os << "// Generated by jitbmm " << kVersion << ". Kernel " << kNameSlot << "\n"
     << "// spec: " << to_string(source_spec) << "\n\n";
  os << inline_templates(r.headers);
  const bool grad = std::string(r.params) == "GradParams";
  // A forward whose flag is 0 is not wanted (SemiringBMM::run_if): every launch of it, whatever the strategy, returns
  // before it reads or writes anything. The flag is read once per block, uniformly, so a cluster returns whole.
  GeneratedKernel k = finish_unit(readable_name(spec), os.str(), r.params,
                                  grad ? sizeof(jb::GradParams) : sizeof(jb::BmmParams), r.entries,
                                  grad ? "" : "if (p.run_if && *p.run_if == 0) return;");
  k.needs |= needed_features(spec);
  return k;
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
  return finish_kernel(readable, os.str());
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
