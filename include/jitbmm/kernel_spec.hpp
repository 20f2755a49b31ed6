// KernelSpec: everything that decides the text of one generated kernel. Two equal specs generate the same source;
// anything that changes the source is a field here. Runtime values (sizes, strides, pointers) are not.
#pragma once

#include <cstddef>
#include <string>

#include "jitbmm/types.hpp"

namespace jitbmm {

enum class Strategy {
  linear,  // one thread per output, one pass over K with the semiring's online state
};
const char* strategy_name(Strategy strategy);
Strategy parse_strategy(const std::string& name);

struct KernelSpec {
  Semiring semiring = Semiring::log;
  DType dtype = DType::f32;
  DType out_dtype = DType::f32;
  bool with_argmax = false;
  Strategy strategy = Strategy::linear;
  int block_x = 32;   // threads along N (coalesced dimension of b and out)
  int block_y = 8;    // threads along M
  bool index64 = false; // 64-bit element offsets; otherwise every offset must fit in int32

  bool operator==(const KernelSpec& o) const;
  bool operator!=(const KernelSpec& o) const { return !(*this == o); }
  int threads() const { return block_x * block_y; }
};

// "semiring=log dtype=f32 out=f32 argmax=0 strategy=linear block=32x8 index64=0": printed into every generated
// source, so a kernel can always be traced back to its spec.
std::string to_string(const KernelSpec& spec);
std::size_t hash_value(const KernelSpec& spec);

// The default spec for a problem (until the autotuner chooses): checks that the strategy supports the problem.
KernelSpec default_spec(const Problem& problem);

// Throws std::invalid_argument when `spec` cannot compute `problem` (dtype mismatch, 32-bit indices too narrow).
void check_spec_fits(const KernelSpec& spec, const Problem& problem);

} // namespace jitbmm

template <>
struct std::hash<jitbmm::KernelSpec> {
  std::size_t operator()(const jitbmm::KernelSpec& spec) const { return jitbmm::hash_value(spec); }
};
