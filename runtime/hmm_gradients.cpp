#include "runtime/hmm_gradients.hpp"

#include <cstddef>

#include "jitbmm/types.hpp"

namespace jitbmm {

void clear_shared_hmm_gradients(const ChainProblem& p, const HmmGradients& grads, CUstream stream) {
  const std::size_t table = std::size_t(p.C) * std::size_t(dtype_info(p.dtype).size_bytes);
  if (grads.transitions && !p.batched_transitions)
    check(
        driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(grads.transitions), 0, table * std::size_t(p.C), stream),
        "cuMemsetD8Async");
  if (grads.initial && !p.batched_initial)
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(grads.initial), 0, table, stream), "cuMemsetD8Async");
}

} // namespace jitbmm
