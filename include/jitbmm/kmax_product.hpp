// The k-max semiring's product: torch-struct's KMaxSemiring(k).matmul, which every structure's kmax and topk run
// through (docs/python-and-pytorch.md, "torch-struct in one line").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jitbmm/types.hpp"

namespace jitbmm {

// For k-vectors a [k][B][M][K] and b [k][B][K][N], contiguous in f32 or f64: out[·][b][i][j], the k largest of
// a[r1][b][i][kk] + b[r2][b][kk][j] over kk, r1 and r2, in non-increasing order (NaN first; equal values in the order
// of (kk, r1, r2)), and index (int32, the same layout) = (kk·k + r1)·k + r2 of each, as reference::kmax_product
// defines them; −inf and −1 where fewer than k candidates are other than −inf. The gradient of out[r] flows to
// a[r1][·][i][kk] and b[r2][·][kk][j] of its index. One thread an output: a CUDA-core kernel for the small products of
// structures' dynamic programs.
class KMaxProduct {
public:
  static constexpr int kMaxK = 16;
  // std::invalid_argument naming the field for another dtype, k outside [1, kMaxK] or a negative size. For the
  // device current on this thread; the kernel is compiled once a process.
  static KMaxProduct get(DType dtype, int k, int64_t B, int64_t M, int64_t K, int64_t N);

  // out [k][B][M][N] in the dtype and index [k][B][M][N], asynchronous on `stream`.
  void operator()(const void* a, const void* b, void* out, int32_t* index, Stream stream = nullptr) const;

  // The generated module's name; empty when the product is empty.
  std::string kernel_name() const;

  struct Impl;

private:
  explicit KMaxProduct(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

} // namespace jitbmm
