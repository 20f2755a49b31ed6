// The expectation (entropy) semiring's product: torch-struct's EntropySemiring.matmul, which every structure's entropy
// runs through (docs/python-and-pytorch.md, "torch-struct in one line").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jitbmm/types.hpp"

namespace jitbmm {

// For pairs a = (a0, a1) [2][B][M][K] and b = (b0, b1) [2][B][K][N], contiguous in f32 or f64: out0 = log Σ_k
// e^{x0_k} and out1 = Σ_k p_k (x1_k − log p_k), x0_k = a0[i][k] + b0[k][j], x1_k = a1[i][k] + b1[k][j], p_k =
// e^{x0_k − out0}, as reference::entropy_product defines them (a term of x0 = −inf adds nothing; no term gives −inf
// and 0), with the gradients of its backward. One thread an output (or an input, for a gradient): a CUDA-core kernel
// for the small products of structures' dynamic programs.
class EntropyProduct {
public:
  // std::invalid_argument naming the field for another dtype or a negative size. For the device current on this
  // thread; the kernels are compiled once a process.
  static EntropyProduct get(DType dtype, int64_t B, int64_t M, int64_t K, int64_t N);

  // out [2][B][M][N] in the dtype, asynchronous on `stream`.
  void operator()(const void* a, const void* b, void* out, Stream stream = nullptr) const;
  // grad_a and grad_b (either may be null: not computed), in the layouts of a and b, from the forward's out and
  // grad_out [2][B][M][N]: the gradients of Σ grad_out·out (zeros where M or N is 0: no output reads the
  // operands). Asynchronous on `stream`.
  void backward(const void* a, const void* b, const void* out, const void* grad_out, void* grad_a, void* grad_b,
                Stream stream = nullptr) const;

  // The generated module's name (its forward's entry point; "_grad_a" and "_grad_b" the backward's). Empty when the
  // product is empty.
  std::string kernel_name() const;

  struct Impl;

private:
  explicit EntropyProduct(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

} // namespace jitbmm
