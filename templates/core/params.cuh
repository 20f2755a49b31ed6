// The argument block every generated kernel receives by value. Plain C++ with no device code, so the host
// (runtime/plan.cpp) includes this same file: one definition, no mirrored struct to drift.
#pragma once

namespace jb {

// Strides are in elements. Every generated kernel takes exactly one BmmParams.
struct BmmParams {
  const void* a; // [B][M][K] storage dtype
  const void* b; // [B][K][N] storage dtype
  void* out;     // [B][M][N] output dtype
  int* argmax;   // [B][M][N] contiguous int32, or null
  long long B, M, N, K;
  long long a_batch, a_row, a_col;
  long long b_batch, b_row, b_col;
  long long out_batch, out_row, out_col;
  long long k_chunk; // split-K: K per chunk (0: one pass over K)
  void* workspace;   // split-K: per-chunk values [chunks][B][M][N] (accumulator type), then their argmax (int32);
                     // exp_matmul: the layout of em_workspace (templates/exp_matmul/bounds.cuh)
  const unsigned* repair_flags; // exp_matmul's repair pass: run only the tiles whose flag is set (null: every tile)
  const int* run_if;            // null, or a device flag: where it is 0, every launch returns at once (run_if())
};

// The argument block of the backward kernels (pass grad_a or grad_b). Gradients have the layout (and storage
// dtype) of the operand they belong to; grad_out has the layout of out. Strides in elements.
struct GradParams {
  const void* a;              // [B][M][K] storage dtype
  const void* b;              // [B][K][N] storage dtype
  const void* out;            // [B][M][N] output dtype: the saved forward result (log)
  const void* grad_out;       // [B][M][N] output dtype, laid out like out
  const int* argmax;          // [B][M][N] contiguous int32: the forward's argmax (selecting semirings)
  void* grad;                 // grad_a ([B][M][K], a's layout) or grad_b ([B][K][N], b's layout), storage dtype
  void* workspace;            // accumulator type, [slices][rows][cols] contiguous, zeroed: atomic accumulation
  long long workspace_slices; // B, or 1 when the gradient is broadcast over the batch (its batch stride is 0)
  long long B, M, N, K;
  long long a_batch, a_row, a_col;
  long long b_batch, b_row, b_col;
  long long out_batch, out_row, out_col;
};

} // namespace jb
