// The CLI flags that describe a problem and a kernel variant, shared by inspect and bench.
#pragma once

#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>

#include "cli/args.hpp"
#include "jitbmm/kernel_spec.hpp"

namespace jitbmm::cli {

inline std::set<std::string> spec_flags() {
  return {"--semiring", "--dtype",   "--out-dtype",  "--shape", "--strategy", "--block",    "--tile",
          "--thread",   "--k-chunk", "--min-blocks", "--pass",  "--math",     "--precision"};
}
inline std::set<std::string> spec_switches() { return {"--argmax", "--index64"}; }

inline Problem problem_from(const Args& args, const std::string& shape = "64x512x512x512") {
  Problem p;
  p.semiring = parse_semiring(args.get("--semiring", "log"));
  p.dtype = parse_dtype(args.get("--dtype", "f32"));
  if (args.has("--out-dtype")) p.out_dtype = parse_dtype(args.get("--out-dtype", ""));
  p.shape = parse_shape(args.get("--shape", shape));
  p.with_argmax = args.has("--argmax");
  p.precision = parse_precision(args.get("--precision", "exact"));
  validate(p);
  return p;
}

// The default spec for the problem (or for --strategy), with any tuning flag given overriding its field.
inline KernelSpec spec_from(const Args& args, const Problem& p) {
  const Pass pass = parse_pass(args.get("--pass", "forward"));
  if (pass != Pass::forward && args.has("--argmax"))
    throw std::invalid_argument("--argmax: backward kernels read the forward's argmax; drop --argmax with --pass");
  KernelSpec spec = pass != Pass::forward    ? default_grad_spec(p, pass)
                    : args.has("--strategy") ? default_spec(p, parse_strategy(args.get("--strategy", "")))
                                             : default_spec(p);
  if (args.has("--block")) {
    const std::string b = args.get("--block", "");
    const auto x = b.find('x');
    if (x == std::string::npos) throw std::invalid_argument("--block: expected XxY, got '" + b + "'");
    spec.block_x = std::stoi(b.substr(0, x));
    spec.block_y = std::stoi(b.substr(x + 1));
  }
  if (args.has("--tile")) {
    const std::string t = args.get("--tile", "");
    if (std::sscanf(t.c_str(), "%dx%dx%d", &spec.tile_m, &spec.tile_n, &spec.tile_k) != 3)
      throw std::invalid_argument("--tile: expected MxNxK, got '" + t + "'");
  }
  if (args.has("--thread")) {
    const std::string t = args.get("--thread", "");
    if (std::sscanf(t.c_str(), "%dx%d", &spec.thread_m, &spec.thread_n) != 2)
      throw std::invalid_argument("--thread: expected MxN, got '" + t + "'");
  }
  if (args.has("--min-blocks")) spec.min_blocks = std::stoi(args.get("--min-blocks", ""));
  if (args.has("--k-chunk")) spec.k_chunk = std::stoi(args.get("--k-chunk", ""));
  if (args.has("--index64")) spec.index64 = true;
  if (args.has("--math")) spec.math = parse_math(args.get("--math", ""));
  check_spec_fits(spec, p);
  return spec;
}

} // namespace jitbmm::cli
