// The vocabulary of a batched semiring matrix product: semirings, dtypes, shapes and operand layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

struct CUstream_st;

namespace jitbmm {

// A CUDA stream from the runtime API (cudaStream_t) or the driver API (CUstream); nullptr is the default stream.
using Stream = CUstream_st*;

// Device memory a call may use for its scratch (docs/cpp-api.md): at least what the plan's workspace_bytes() or
// backward_workspace_bytes() says, aligned to 256 bytes, on the plan's device, and used by nothing else until the
// call's work on its stream is done (what a stream-ordered allocator such as PyTorch's caching allocator gives).
// Empty (the default): the call takes its scratch from jitbmm's own pool on the device.
struct Workspace {
  void* ptr = nullptr;
  std::size_t bytes = 0;
};

// out[b,i,j] = ⊕_k a[b,i,k] ⊗ b[b,k,j]. Each semiring's formula and edge cases are documented once, on its
// device struct in templates/core/semirings.cuh, and in the README's contract.
enum class Semiring { log, max_plus, min_plus, max_times, plus_times };

// Storage types. Half types (f16, bf16) accumulate in f32; f64 accumulates in f64.
enum class DType { f32, f64, f16, bf16 };

// The one table of facts about each dtype lives in support/dtype_table.cpp.
struct DTypeInfo {
  DType dtype;
  const char* name;        // "f32": CLI spelling and kernel-name part
  const char* device_type; // the storage type's spelling in templates/core/dtypes.cuh
  const char* acc_type;    // accumulator type in device code
  int size_bytes;
  int acc_bytes; // the accumulator's size: what shared-memory slices, split-K partials and gradient sums hold
  // A 2-byte float that accumulates in f32 (f16, bf16): the packed-pair kernels and the BF16-factor forms serve
  // these only, and their contract allows a coarser tolerance.
  bool half;
  // Accumulates in 8 bytes (f64): smaller tiles, FMA only (no tensor-core form), half the values per 16-byte load.
  constexpr bool wide_acc() const { return acc_bytes == 8; }
};
const DTypeInfo& dtype_info(DType dtype);
DType parse_dtype(const std::string& name); // throws std::invalid_argument naming the value
int dtype_count();                          // the DType values are 0 .. dtype_count() - 1

// How a semiring's backward sends grad_out to the operands. A new kind of backward (sampling, k-best) is a new
// value here and a row's choice in generator/dtype_table.cpp, not a test on semiring names.
enum class BackwardKind {
  marginal,       // every term weighted by its gradient (the row's `grad` type), summed by a tiled reduction
  argmax_scatter, // grad_out sent to the one term the forward's argmax selected
};

struct SemiringInfo {
  Semiring semiring;
  const char* name;        // "log", "max_plus", ...
  const char* device_type; // the device struct in templates/core/semirings.cuh
  bool has_argmax;         // the reduction selects one k (max/min semirings): the forward can report it
  // The tiled kernel's fast per-term policy for f32 accumulators without argmax (templates/tiled/tiled.cuh), or nullptr:
  // the semiring's own online state (jb::GenericTerm).
  const char* fast_term;
  // Its ⊕ selects through this operation (templates/core/semirings.cuh): the tiled kernel's argmax policy
  // (jb::SelectTerm); nullptr for the others.
  const char* select_op;
  // The tiled kernel's policy on packed half pairs (templates/tiled/packed.cuh), for a half output without argmax;
  // nullptr where there is none.
  const char* packed_term;
  BackwardKind backward;
  const char* grad;   // marginal: the gradient weights' device struct in templates/grad/backward.cuh; otherwise nullptr
  bool scatter_times; // argmax_scatter: grad_out times the partner operand (max_times), not grad_out alone
  // Meant for non-negative inputs (max_times, whose zero is 0): the tuner's trials and the benchmarks draw |x|.
  bool nonnegative_inputs;
};
const SemiringInfo& semiring_info(Semiring semiring);
Semiring parse_semiring(const std::string& name);
int semiring_count(); // the Semiring values are 0 .. semiring_count() - 1

// Sizes of out[B, M, N] = a[B, M, K] ⊗ b[B, K, N].
struct Shape {
  int64_t B = 1, M = 1, K = 1, N = 1;
  // B·M·N·K; std::invalid_argument ("shape: B*M*N*K ...") when it does not fit in int64 (validate() refuses such
  // shapes, so a validated problem's terms() never throws).
  int64_t terms() const;
  bool operator==(const Shape& o) const { return B == o.B && M == o.M && K == o.K && N == o.N; }
};
Shape parse_shape(const std::string& text); // "BxMxKxN"
std::string to_string(const Shape& shape);

// Strides in elements (not bytes) of one batched matrix operand [batch][rows][cols]. A batch stride of 0
// broadcasts one matrix over the batch. Strides may be any non-negative values; overlapping outputs are rejected.
struct Strides {
  int64_t batch = 0, row = 0, col = 0;
  bool operator==(const Strides& o) const { return batch == o.batch && row == o.row && col == o.col; }
};
// Both throw std::invalid_argument when rows*cols overflows int64.
Strides row_major(int64_t rows, int64_t cols);    // {rows*cols, cols, 1}
Strides column_major(int64_t rows, int64_t cols); // {rows*cols, 1, rows}

// How close to exact a product must be. exact: every output within the dtype's own rounding (what every kernel
// gives). fast: the log semiring may also use tensor-core TF32 products (one TF32 product per term: about 1e-4
// relative error, still guarded against underflow); other semirings are unaffected.
enum class Precision { exact, fast };
const char* precision_name(Precision precision);
Precision parse_precision(const std::string& name);

// Everything that defines one product, apart from the data pointers.
struct Problem {
  Semiring semiring = Semiring::log;
  DType dtype = DType::f32;       // a and b
  std::optional<DType> out_dtype; // defaults to dtype; f32 output from f16/bf16 inputs is allowed
  Shape shape;
  std::optional<Strides> a_strides;   // default row-major [B][M][K]
  std::optional<Strides> b_strides;   // default row-major [B][K][N]
  std::optional<Strides> out_strides; // default row-major [B][M][N]
  bool with_argmax = false;           // also write int32 argmax[B][M][N] (contiguous); max/min semirings only
  Precision precision = Precision::exact; // fast: the log semiring only (validate() refuses it elsewhere)

  DType output_dtype() const { return out_dtype.value_or(dtype); }
  // The strides given, else the row-major default, computed only when absent (std::invalid_argument naming the
  // shape, "shape: M*K overflows 64 bits", when the default's batch stride does not fit; validate() refuses that).
  Strides a() const;
  Strides b() const;
  Strides out() const;
};

// Throws std::invalid_argument naming the offending field when the problem is malformed or too large for any
// kernel: a size above kMaxDimension, an operand (or argmax) of more than kMaxOperandBytes bytes, more than
// 2^63 − 1 terms (these name the largest size involved: "shape.N: b holds B*K*N = 1*1*2^61 elements ..."), or
// strides whose element offsets span more than kMaxOperandBytes bytes (these name the strides).
constexpr int64_t kMaxDimension = int64_t(1) << 62;
constexpr int64_t kMaxOperandBytes = int64_t(1) << 62;
void validate(const Problem& problem);
std::string describe(const Problem& problem);

} // namespace jitbmm
