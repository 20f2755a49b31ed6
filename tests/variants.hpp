// The kernel variants every suite covers: each semiring × dtype, with the argmax and f32-output options where they
// apply, and both index widths.
#pragma once

#include <vector>

#include "jitbmm/kernel_spec.hpp"

namespace jitbmm::test {

inline std::vector<KernelSpec> all_linear_variants() {
  std::vector<KernelSpec> out;
  for (Semiring s : {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times, Semiring::plus_times})
    for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16})
      for (bool wide : {false, true}) {
        KernelSpec spec;
        spec.semiring = s;
        spec.dtype = spec.out_dtype = d;
        spec.index64 = wide;
        out.push_back(spec);
        if (semiring_info(s).has_argmax) {
          spec.with_argmax = true;
          out.push_back(spec);
          spec.with_argmax = false;
        }
        if (d == DType::f16 || d == DType::bf16) {
          spec.out_dtype = DType::f32;
          out.push_back(spec);
        }
      }
  return out;
}

} // namespace jitbmm::test
