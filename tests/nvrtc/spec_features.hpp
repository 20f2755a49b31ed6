// What the NVRTC sweeps know of a product kernel's spec: the features their cover reaches (sweep.hpp) and its size.
#pragma once

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "generator/emit_source.hpp"
#include "generator/strategy.hpp"
#include "nvrtc/sweep.hpp"

namespace jitbmm::test {

// A variant's features (sweep.hpp): its spec's fields but the sizes, its entry headers and the templates it inlines.
inline std::vector<std::string> variant_features(const KernelSpec& spec) {
  std::vector<std::string> features;
  std::istringstream fields(to_string(spec));
  for (std::string f; fields >> f;)
    if (f.rfind("tile=", 0) && f.rfind("thread=", 0) && f.rfind("block=", 0) && f.rfind("k_chunk=", 0) &&
        f.rfind("min_blocks=", 0))
      features.push_back(f);
  features.push_back(std::string("pass=") + pass_name(spec.pass));
  features.push_back(std::string("strategy+pass=") + strategy_name(spec.strategy) + "/" + pass_name(spec.pass));
  for (const char* header : strategy_def(spec).render(spec).headers)
    features.push_back(std::string("header:") + header);
  for (std::string& t : inlined_templates(emit_kernel(spec).source)) features.push_back(std::move(t));
  return features;
}

// A variant's size: the outputs a thread keeps, then those of its block (or its threads), then the widest accumulator
// and argmax. The largest of each kind spill first; the smallest compile fastest.
inline std::tuple<int, int, int, bool> variant_size(const KernelSpec& s) {
  const bool tiles = strategy_def(s).fields & kTileFields;
  return std::make_tuple(tiles ? s.thread_m * s.thread_n : 1,
                         tiles ? s.tile_m * s.tile_n * s.tile_k : s.block_x * s.block_y, dtype_info(s.dtype).acc_bytes,
                         s.with_argmax);
}

// The cover's cost of a variant (SweepItem::cost): its size's outputs a thread, then a block.
inline double variant_cost(const KernelSpec& s) {
  return std::get<0>(variant_size(s)) + std::get<1>(variant_size(s)) / 65536.0;
}

} // namespace jitbmm::test
